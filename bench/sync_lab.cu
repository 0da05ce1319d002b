// The step-boundary lab: what the boundary between two dependent decode steps costs when each
// step is its own kernel (PDL launches in a CUDA graph: what the executor runs today) and when
// one persistent kernel runs every step with a grid barrier between them (the megakernel of
// DESIGN.md). The question it answers: how much of the ~6-9 µs a GEMV step spends beyond its
// bytes (bench/RESULTS.md, timeline rows) a persistent kernel could take back at the boundary.
//
// It runs cuda::FloorChain (cuda/decode_floor.h: steps that do no arithmetic, each variant
// checked exactly before it is timed) on kSteps equal steps, in four cases: the bare boundary
// (each CTA reads only its y sources), all of x read (5120 floats, as a GEMV stages it), and
// with 4.4 MB (ssm_out's Q1_0 bytes) or 12.5 MB (ffn_down's) of weights a step. Output: a
// table of µs per step, then an exit status (non-zero when a check failed).
//
// Measured (H200, 2026-12-02, bench/RESULTS.md): the bare boundary is ~1.5 µs a step either way
// (persistent 1.53-1.56, exclusive kernels 1.63); reading all of x adds ~0.7; with 4.4 MB of
// weights the persistent kernel is 0.36 µs a step faster, with 12.5 MB 1.2 µs slower. So the
// launches are not what a decode step pays for: a megakernel would keep the dependent chain.
// Those numbers came from this lab's own kernels (four loads in flight a thread), before it ran
// on FloorChain; on FloorChain (H100, 2026-12-07) the same picture: 1.82-1.95 µs bare, 7.22
// exclusive against 9.09-9.50 for the others at 12.5 MB. `gdn bench --floor` runs the same
// chain on the decode program's own steps.
#include <fmt/format.h>

#include <vector>

#include "cuda/decode_floor.h"
#include "cuda/device.h"
#include "lab_main.h"

namespace gdn::cuda {
namespace {

constexpr int kWidth = 5120;  // the residual width of Bonsai-27B
constexpr int kSteps = 256;   // about the GEMV steps of one decode token
constexpr int kReplays = 9;

struct Case {
  double bytes;  // weights a step
  bool all_x;
};

int run() {
  if (!available()) {
    fmt::print("sync_lab: no CUDA device\n");
    return 2;
  }
  fmt::print("sync_lab on {}: {} steps, x of {} floats, {} CTAs a step\n", describe_device(),
             kSteps, kWidth, FloorChain::grid());
  const Case cases[] = {{0, false}, {0, true}, {4.4e6, true}, {12.5e6, true}};
  fmt::print(
      "| variant | x read | weights a step | µs a step | GB/s |\n|---|---|---:|---:|---:|\n");
  for (const Case& k : cases) {
    FloorChain chain(std::vector<FloorStep>(kSteps, {uint64_t(k.bytes), 0, k.all_x}), kWidth);
    for (FloorVariant v : kFloorVariants) chain.check(v);
    for (FloorVariant v : kFloorVariants) {
      const double us = chain.chain_us(v, kReplays) / kSteps;
      fmt::print("| {} | {} | {:.1f} MB | {:.2f} | {:.0f} |\n", floor_variant_name(v),
                 k.all_x ? "all" : "sources", k.bytes / 1e6, us, k.bytes / us / 1e3);
    }
  }
  return 0;
}

}  // namespace
}  // namespace gdn::cuda

int main() {
  return gdn::bench::lab_main("sync_lab", gdn::cuda::run);
}
