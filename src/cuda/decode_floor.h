// The decode floor: how long a chain of dependent decode steps takes when no step does any
// arithmetic. Each step still waits for the one before, reads the residual-width vector (all of
// it in every CTA of a GEMV step, as every GEMV CTA stages all of x; elsewhere only what its
// share of the next vector comes from), streams its bytes once over the grid (weights; a state
// it reads and writes back) and writes its share of the next vector. Run as a kernel per step
// (PDL launches in one graph: the executor's structure) or as one persistent kernel with a
// grid barrier per step (the megakernel's), it is the time that structure costs before any
// arithmetic: what faster kernels inside it can approach and not pass. gdn bench --floor runs
// it on the decode program's steps; bench/sync_lab on uniform steps.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gdn::cuda {

struct FloorStep {
  uint64_t read_bytes = 0;   // streamed once by the grid: weights, a state
  uint64_t write_bytes = 0;  // written back in place over the first of those bytes (a state)
  bool all_x = true;         // every CTA reads all of the vector (a GEMV), else only its y sources
};

// How the steps follow each other. Kernels: one launch per step, each CTA asking L2 for its
// share of the weights before pdl_wait; co-resident kernels' CTAs fit beside the running ones
// (they enter and ask early: PDL's best case), exclusive ones take ~150 KB of shared memory so
// that they enter only as the previous step's CTAs leave (the one-launch GEMV's case).
// Persistent: one cooperative kernel, a CTA per SM, asking L2 for the next step's share before
// a grid barrier by cooperative_groups or by a release/acquire counter.
enum class FloorVariant { KernelsCoresident, KernelsExclusive, PersistentCg, PersistentFlag };
inline constexpr FloorVariant kFloorVariants[] = {
    FloorVariant::KernelsCoresident, FloorVariant::KernelsExclusive, FloorVariant::PersistentCg,
    FloorVariant::PersistentFlag};
const char* floor_variant_name(FloorVariant v);

// How a step streams its share: threads a CTA (512 or 1024) and how many bytes of its share a
// CTA asks L2 for before its wait (at most; persistent: before the barrier ahead of the step).
struct FloorConfig {
  int threads = 512;
  uint32_t prefetch_bytes = 256 << 10;
};
// What FloorChain::best tries: 512 and 1024 threads, 0, 64 KB, 256 KB and 1 MB ahead.
std::vector<FloorConfig> floor_configs();
std::string describe(const FloorConfig& c);  // "1024 threads, 64 KB ahead"

struct FloorBest {
  double us = 0;  // µs of one run of the chain
  FloorConfig config;
  std::vector<double> us_by_config;  // every one tried, in floor_configs() order
};

class FloorChain {
 public:
  // width: floats of the vector the steps pass on.
  FloorChain(std::vector<FloorStep> steps, int width);
  ~FloorChain();
  FloorChain(const FloorChain&) = delete;
  FloorChain& operator=(const FloorChain&) = delete;

  // Runs the chain once from a known vector and checks the last one exactly, so a step that
  // read its vector before the previous step wrote it fails; throws gdn::Error naming the
  // variant and the first wrong element.
  void check(FloorVariant v, const FloorConfig& c = {});
  // Median µs of one run of the whole chain over `replays` runs after warm-up.
  double chain_us(FloorVariant v, int replays, const FloorConfig& c = {});
  // Every configuration of floor_configs() checked and timed: the fastest. A floor is only as
  // low as the best way of streaming tried, so it takes the best of several, as the read
  // ceiling of gdn ops --perf does.
  FloorBest best(FloorVariant v, int replays);

  uint64_t bytes() const;  // read and written by all steps
  size_t steps() const;
  static unsigned grid();  // CTAs: one per SM

 private:
  struct State;  // buffers, stream and per-step shares (decode_floor.cu)
  std::unique_ptr<State> st_;
};

}  // namespace gdn::cuda
