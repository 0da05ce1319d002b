#include "cuda/op_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "common/error.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/read_ceiling.h"

namespace gdn::cuda::opcheck {

std::vector<Family> matmul_families();
std::vector<Family> ops_families();

const std::vector<Family>& families() {
  static const std::vector<Family> all = [] {
    std::vector<Family> v = matmul_families();
    for (Family& f : ops_families()) v.push_back(std::move(f));
    return v;
  }();
  return all;
}

bool selects(const Family& f, std::string_view filter) {
  if (filter.empty() || filter == f.name) return true;
  return std::any_of(f.ops.begin(), f.ops.end(), [&](std::string_view op) {
    return op.starts_with(filter) || filter.starts_with(op);
  });
}

bool declares(const Family& f, std::string_view op) {
  return std::any_of(f.ops.begin(), f.ops.end(),
                     [&](std::string_view stem) { return op.starts_with(stem); });
}

bool reports(const Family& f, std::string_view filter, const Result& r) {
  return filter.empty() || r.op.starts_with(filter) || filter == f.name || !r.passed;
}

namespace {

// Launches per timing graph: per-launch time then excludes host launch cost.
constexpr int kGraphLaunches = 20;

}  // namespace

Context::Context(bool perf, uint64_t seed) : perf_(perf), rng_(seed) {
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Context::~Context() {
  cudaStreamDestroy(stream_);
}

std::vector<float> Context::random(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) {
    do x = d(rng_);
    while (x == 0.0f);
  }
  return v;
}

// Launches are captured into a graph of kGraphLaunches and the graph replayed: the per-launch
// time then excludes host launch cost, as it will in the executor's CUDA graphs.
double Context::time_us(const std::function<void(int)>& launch, int repeats) {
  return graph_us(stream_, launch, kGraphLaunches, std::max(3, repeats / kGraphLaunches));
}

double Context::read_ceiling_us(double bytes) {
  return measure_read_ceiling(bytes, stream_).us;
}

double Context::copy_bandwidth() {
  if (copy_bw_ == 0) copy_bw_ = measure_copy_bandwidth(stream_);
  return copy_bw_;
}

Result compare(const std::string& op, const std::string& shape, const std::vector<float>& gpu,
               const std::vector<float>& ref, double tol) {
  Result r;
  r.op = op;
  r.shape = shape;
  r.tolerance = tol;
  if (gpu.size() != ref.size()) {
    r.detail = fmt::format("size {} vs reference {}", gpu.size(), ref.size());
    return r;
  }
  double max_ref = 0, max_err = 0;
  size_t worst = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (!std::isfinite(gpu[i])) {
      r.detail =
          fmt::format("element {} is {} (unwritten or overflow); reference {}", i, gpu[i], ref[i]);
      r.error = INFINITY;
      return r;
    }
    // A NaN reference would pass any output (max and > both skip NaN): the check is broken.
    if (!std::isfinite(ref[i])) {
      r.detail =
          fmt::format("reference element {} is {}: the CPU side of the check is broken", i, ref[i]);
      r.error = INFINITY;
      return r;
    }
    max_ref = std::max(max_ref, std::abs(double(ref[i])));
    const double e = std::abs(double(gpu[i]) - double(ref[i]));
    if (e > max_err) max_err = e, worst = i;
  }
  r.error = max_err / std::max(max_ref, 1e-30);
  r.passed = r.error <= tol;
  if (!r.passed) {
    r.detail = fmt::format("worst element {}: gpu {} reference {}", worst, gpu[worst], ref[worst]);
  }
  return r;
}

std::vector<Result> guarded_results(const Family& f,
                                    const std::function<void(std::vector<Result>&)>& checks) {
  std::vector<Result> got;
  try {
    checks(got);
  } catch (const Error& e) {
    Result r;
    r.op = std::string(f.ops.empty() ? std::string_view(f.name) : f.ops.front());
    r.shape = fmt::format("family {} after {} results", f.name, got.size());
    r.error = INFINITY;
    r.detail = fmt::format("the family stopped: {}", e.what());
    got.push_back(std::move(r));
  }
  return got;
}

int run(const std::string& filter, bool perf, uint64_t seed) {
  Context ctx(perf, seed);
  fmt::print("device: {}\n", describe_device());
  double copy_bw = 0;
  if (perf) {
    copy_bw = ctx.copy_bandwidth();
    fmt::print("device-to-device copy bandwidth: {:.0f} GB/s (read + write)\n", copy_bw / 1e9);
  }
  std::vector<Result> all;
  // A filter names an op (or a prefix of op names) or a family: only the families it may
  // select run (a full run takes ~90 s on the H200, most of it in gdn_recurrence's cases).
  for (const Family& f : families()) {
    if (!selects(f, filter)) continue;
    std::vector<Result> got =
        guarded_results(f, [&](std::vector<Result>& out) { f.run(ctx, out); });
    for (Result& r : got) {
      if (!declares(f, r.op)) {  // a filter could not select it: say so, as a failure
        r.passed = false;
        r.detail =
            fmt::format("family {} does not declare op {} (op_check's Family::ops)", f.name, r.op);
      }
      if (reports(f, filter, r)) all.push_back(r);
    }
  }
  if (perf) {
    fmt::print("\n{:<18} {:<44} {:>9} {:>9} {:>8} {:>9}\n", "op", "case", "us", "GB/s", "%copy",
               "%read");
  }
  std::map<std::string, std::pair<int, int>> per_op;  // passed, total
  std::vector<std::string> order;
  int failed = 0;
  for (const Result& r : all) {
    if (!per_op.count(r.op)) order.push_back(r.op);
    auto& [ok, n] = per_op[r.op];
    ++n;
    ok += r.passed;
    failed += !r.passed;
    if (!r.passed) {
      fmt::print("FAIL {} [{}]: error {:.3g} > tolerance {:.3g}: {}\n", r.op, r.shape, r.error,
                 r.tolerance, r.detail);
    }
    if (perf && r.us > 0) {
      const double gbs = r.bytes / (r.us * 1e-6) / 1e9;
      const double ceiling_us = ctx.read_ceiling_us(r.bytes);
      fmt::print("{:<18} {:<44} {:>9.2f} {:>9.0f} {:>7.1f}% {:>8.1f}%\n", r.op, r.shape, r.us, gbs,
                 100.0 * gbs * 1e9 / copy_bw, 100.0 * ceiling_us / r.us);
    }
  }
  fmt::print("\n");
  for (const std::string& op : order) {
    const auto& [ok, n] = per_op[op];
    fmt::print("{:<24} {}/{} passed\n", op, ok, n);
  }
  fmt::print("{} passed, {} failed\n", int(all.size()) - failed, failed);
  if (all.empty()) {
    fmt::print("no op matches '{}'\n", filter);
    return 1;
  }
  return failed;
}

}  // namespace gdn::cuda::opcheck
