// The op checker behind `gdn ops`: every CUDA kernel run against the CPU reference
// (cpu/ops.h, quant/quant.h) over many shapes with random non-zero inputs, outputs poisoned
// (NaN) before each run, and, with --perf, timed against two ceilings measured in the same
// run: device-to-device copy bandwidth and a plain streaming-read kernel of the same size.
//
// Each kernel family adds its cases in its own checks_<family>.cpp through one function
// listed in op_check.cpp (no static registration: a static library would drop it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace gdn::cuda::opcheck {

struct Result {
  std::string op;     // "matmul_q1_0", "rms_norm", ...
  std::string shape;  // human-readable case description
  bool passed = false;
  double error = 0;  // the metric the check used (e.g. max|Δ| / max|ref|)
  double tolerance = 0;
  std::string detail;  // why it failed
  // --perf only (0 when not timed):
  double us = 0;     // median kernel time
  double bytes = 0;  // bytes the op must move (each input read once, output written once)
};

class Context {
 public:
  Context(bool perf, uint64_t seed);
  bool perf() const { return perf_; }
  std::mt19937_64& rng() { return rng_; }
  cudaStream_t stream() const { return stream_; }

  // Uniform values in [lo, hi] with no exact zeros (zeros hide unwritten outputs).
  std::vector<float> random(size_t n, float lo = -1.0f, float hi = 1.0f);

  // Median microseconds of `launch(i)` over repeats after warm-up, timed with CUDA events.
  // `i` counts launches so the caller can rotate among input copies beyond L2. The launches
  // are captured into a CUDA graph and replayed: `launch` must only enqueue kernels on
  // stream() (no synchronisation, allocation or host copies inside it).
  double time_us(const std::function<void(int)>& launch, int repeats = 50);

  // Median µs of the streaming-read ceiling kernel reading `bytes` (rotated beyond L2).
  double read_ceiling_us(double bytes);
  // Device-to-device copy bandwidth in bytes/s (read + write counted), measured once.
  double copy_bandwidth();

  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

 private:
  bool perf_;
  std::mt19937_64 rng_;
  cudaStream_t stream_ = nullptr;
  double copy_bw_ = 0;
};

// Relative max error max|gpu - ref| / max(|ref|) with NaN/inf and unwritten outputs caught (on
// either side: a non-finite reference fails too); returns a Result with passed set by `tol`.
Result compare(const std::string& op, const std::string& shape, const std::vector<float>& gpu,
               const std::vector<float>& ref, double tol);

using AddChecks = void (*)(Context&, std::vector<Result>&);

// A group of checks run together. `ops` are the op names its results carry, or stems of them
// (each result's op starts with one): `gdn ops --op F` runs only the families F can select,
// and a full run refuses a result whose op its family does not declare.
struct Family {
  const char* name;
  AddChecks run;
  std::vector<std::string_view> ops;
};
// Every family, in the order `gdn ops` runs them.
const std::vector<Family>& families();
// Whether `--op filter` may select a result of f: the filter is f's name, or the filter and
// one of f's op stems are prefixes one of the other ("matmul_f" and "matmul_fused_q1_0_bits"
// both select the family of stem "matmul_fused").
bool selects(const Family& f, std::string_view filter);
// Whether f declares op: one of its stems is a prefix of op.
bool declares(const Family& f, std::string_view op);

// The results family f's checks add when `checks` runs them (f.run on a context). A gdn::Error
// thrown part-way (a case the kernels refuse, a broken launch) becomes one more, failed, result
// of f's first op that names the error: `gdn ops` reports it and goes on with the next family,
// where it used to stop the whole run and leave those families unchecked.
std::vector<Result> guarded_results(const Family& f,
                                    const std::function<void(std::vector<Result>&)>& checks);

// Whether `gdn ops --op filter` reports result r of a family it selected: r's op starts with
// the filter, the filter names the family, or r failed. A failure of another op of the family
// (a case of it that stopped the family, say) would otherwise vanish from a filtered run and
// leave the selected op's cases after it unrun behind an "N/N passed".
bool reports(const Family& f, std::string_view filter, const Result& r);

// Runs the families `filter` selects (empty: all), keeps the results `reports` keeps, prints per
// case and a per-op "N/N passed" summary; with perf, µs, GB/s, % of copy bandwidth and % of the
// same-size read ceiling. Returns the number of failed cases.
int run(const std::string& filter, bool perf, uint64_t seed);

}  // namespace gdn::cuda::opcheck
