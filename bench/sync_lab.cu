// The step-boundary lab: what the boundary between two dependent decode steps costs when each
// step is its own kernel (PDL launches in a CUDA graph: what the executor runs today) and when
// one persistent kernel runs every step with a grid barrier between them (the megakernel of
// DESIGN.md). The question it answers: how much of the ~6-9 µs a GEMV step spends beyond its
// bytes (bench/RESULTS.md, timeline rows) a persistent kernel could take back at the boundary.
//
// Every variant runs the same chain of kSteps steps with the same device code per step:
//   - the CTA asks L2 for its share of the step's weights before it waits (the weights never
//     depend on the previous step, as in the GEMVs), then waits (pdl_wait or the barrier);
//   - it reads the whole residual-width vector x (as every GEMV CTA stages all of x) and writes
//     its share of the next one, y[i] = x[perm(i)] + 1, perm crossing CTAs; and it reads its
//     weight share into an integer checksum (kept live in a per-CTA sink).
// A case without the read of all of x (only each y element's source) prices the bare boundary.
// After the chain y[i] = x0[perm^S(i)] + S exactly (small integers in f32), so a barrier that
// let a CTA read a stale x fails the check: every variant is checked before it is timed.
//
// Variants (one CTA of 512 threads per SM, the grid every GEMV of the decode step uses):
//   kernels, co-resident  a kernel per step; the next kernel's CTAs fit beside the running ones,
//                         so they enter and prefetch early (PDL's best case)
//   kernels, exclusive    the same with ~150 KB of shared memory per CTA, so the next kernel's
//                         CTAs enter only as the previous ones leave (the one-launch GEMV's case)
//   persistent, cg        one cooperative kernel, cooperative_groups grid sync per step
//   persistent, flag      one cooperative kernel, a release/acquire counter barrier per step
//                         (thread 0 of each CTA adds, then spins)
// The persistent kernels ask L2 for the next step's weights before each barrier. Weight shares
// per step: none, 4.4 MB (ssm_out's Q1_0 bytes) and 12.5 MB (ffn_down's), read from a 2 GiB
// arena so that no step's weights are in L2. Output: a table of µs per step, then an exit
// status (non-zero when a check failed).
//
// Measured (H200, 2026-12-02, bench/RESULTS.md): the bare boundary is ~1.5 µs a step either way
// (persistent 1.53-1.56, exclusive kernels 1.63); reading all of x adds ~0.7; with 4.4 MB of
// weights the persistent kernel is 0.36 µs a step faster, with 12.5 MB 1.2 µs slower. So the
// launches are not what a decode step pays for: a megakernel would keep the dependent chain.
#include <cooperative_groups.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/kernel_util.cuh"
#include "cuda/read_ceiling.h"
#include "lab_main.h"

namespace gdn::cuda {
namespace {

constexpr int kWidth = 5120;   // the residual width of Bonsai-27B
constexpr int kSteps = 256;    // about the GEMV steps of one decode token
constexpr int kThreads = 512;  // one CTA per SM
constexpr int kWarps = kThreads / 32;
constexpr int kReplays = 9;
constexpr size_t kArenaBytes = size_t(2) << 30;
constexpr size_t kExclusiveSmem = 150 * 1024;  // two CTAs of this never share an SM
constexpr int kMaxCtas = 1024;                 // sink slots

struct Chain {
  float* x[2];         // ping-pong vectors of kWidth floats
  const uint4* arena;  // weights
  size_t arena_vecs;   // uint4s in the arena
  size_t share_vecs;   // uint4s per CTA per step
  unsigned* sink;      // per CTA and warp: checksum of what it read (keeps the reads live)
  unsigned* arrivals;  // the flag barrier's counter (zero at launch)
  bool all_x;          // read all of x, as a GEMV stages it (else only the CTA's y sources)
};

// What one step reads besides its y sources: a weight share per CTA, and all of x or not.
struct Case {
  size_t share_vecs;
  bool all_x;
};

// A step's element source: a permutation that moves every element to another CTA's share.
__host__ __device__ inline int perm(int i) {
  return (i + kWidth / 2 + 17) % kWidth;
}

__device__ const uint4* step_share(const Chain& c, int step) {
  const size_t per_step = c.share_vecs * gridDim.x;
  const size_t base = (size_t(step) * per_step) % (c.arena_vecs - per_step);
  return c.arena + base + blockIdx.x * c.share_vecs;
}

__device__ void prefetch_share(const Chain& c, int step) {
  if (threadIdx.x == 0 && step < kSteps && c.share_vecs > 0) {
    detail::prefetch_l2(step_share(c, step), uint32_t(c.share_vecs * sizeof(uint4)));
  }
}

// One step after the wait: read all of x (summed into the sink, as a GEMV stages all of x), the
// weight share, and write this CTA's share of the next vector.
__device__ void step_body(const Chain& c, int step) {
  const float* x = c.x[step & 1];
  float* y = c.x[(step + 1) & 1];
  float xs = 0.0f;
  if (c.all_x) {
#pragma unroll
    for (int i = threadIdx.x; i < kWidth; i += kThreads) xs += x[i];
  }
  unsigned sum = __float_as_uint(xs);
  const uint4* w = step_share(c, step);
#pragma unroll 4
  for (size_t v = threadIdx.x; v < c.share_vecs; v += kThreads) {
    const uint4 q = __ldcs(w + v);
    sum += q.x ^ q.y ^ q.z ^ q.w;
  }
  const int per_cta = (kWidth + gridDim.x - 1) / gridDim.x;
  const int lo = blockIdx.x * per_cta, hi = min(kWidth, lo + per_cta);
  for (int i = lo + threadIdx.x; i < hi; i += kThreads) y[i] = x[perm(i)] + 1.0f;
  // A reduction without a return value (fire and forget): nothing on the step's path waits.
  sum = __reduce_add_sync(detail::kFullMask, sum);
  if ((threadIdx.x & 31) == 0) atomicAdd(c.sink + blockIdx.x * kWarps + threadIdx.x / 32, sum);
}

__global__ void __launch_bounds__(kThreads) step_kernel(Chain c, int step) {
  detail::pdl_launch_dependents();
  prefetch_share(c, step);
  detail::pdl_wait();
  step_body(c, step);
}

__global__ void __launch_bounds__(kThreads) persistent_cg_kernel(Chain c) {
  namespace cg = cooperative_groups;
  const cg::grid_group grid = cg::this_grid();
  prefetch_share(c, 0);
  for (int step = 0; step < kSteps; ++step) {
    step_body(c, step);
    prefetch_share(c, step + 1);
    grid.sync();
  }
}

// Every CTA's writes before the barrier are visible to every CTA after it: thread 0 orders its
// CTA's writes (bar.sync, then a release add at GPU scope) and waits with acquire loads until
// all CTAs of this barrier have added.
__device__ void flag_barrier(unsigned* arrivals, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(arrivals) : "memory");
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(arrivals) : "memory");
    } while (seen < target);
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) persistent_flag_kernel(Chain c) {
  prefetch_share(c, 0);
  for (int step = 0; step < kSteps; ++step) {
    step_body(c, step);
    prefetch_share(c, step + 1);
    flag_barrier(c.arrivals, (step + 1) * gridDim.x);
  }
}

enum class Variant { KernelsCoresident, KernelsExclusive, PersistentCg, PersistentFlag };
constexpr Variant kVariants[] = {Variant::KernelsCoresident, Variant::KernelsExclusive,
                                 Variant::PersistentCg, Variant::PersistentFlag};

const char* name(Variant v) {
  switch (v) {
    case Variant::KernelsCoresident:
      return "kernels, co-resident";
    case Variant::KernelsExclusive:
      return "kernels, exclusive";
    case Variant::PersistentCg:
      return "persistent, cg";
    case Variant::PersistentFlag:
      return "persistent, flag";
  }
  return "?";
}

class Lab {
 public:
  Lab()
      : x_(2 * sizeof(float) * kWidth),
        arena_(kArenaBytes),
        sink_(sizeof(unsigned) * (kMaxCtas * kWarps + 1)) {
    CUDA_CHECK(cudaStreamCreate(&s_));
    CUDA_CHECK(cudaMemset(arena_.get(), 0x5a, kArenaBytes));
    CUDA_CHECK(cudaFuncSetAttribute(step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(kExclusiveSmem)));
    for (int i = 0; i < kWidth; ++i) x0_[i] = float((i * 37) % 1000);
  }
  ~Lab() { cudaStreamDestroy(s_); }

  // The chain once from x0, its result checked exactly; false on a wrong element.
  bool check(Variant v, Case k) {
    run(v, k);
    std::vector<float> y(kWidth);
    CUDA_CHECK(cudaMemcpy(y.data(), x_.as<float>() + (kSteps % 2) * kWidth, sizeof(float) * kWidth,
                          cudaMemcpyDeviceToHost));
    for (int i = 0; i < kWidth; ++i) {
      int j = i;
      for (int s = 0; s < kSteps; ++s) j = perm(j);
      const float want = x0_[j] + float(kSteps);
      if (y[i] != want) {
        fmt::print("FAILED {} ({} B a step, all x {}): y[{}] = {}, want {}\n", name(v),
                   k.share_vecs * 16 * grid(), k.all_x, i, y[i], want);
        return false;
      }
    }
    return true;
  }

  // Median µs per step over kReplays runs of the chain (CUDA events; the kernel variants as one
  // graph of kSteps launches).
  double time_step_us(Variant v, Case k) {
    const Chain c = chain(k);
    if (kernel_per_step(v)) {
      return graph_us(
          s_, [&](int step) { launch_step(v, c, step); }, kSteps, kReplays);
    }
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    std::vector<double> us;
    for (int r = 0; r < kReplays + 2; ++r) {
      reset();
      CUDA_CHECK(cudaEventRecord(a, s_));
      launch_persistent(v, c);
      CUDA_CHECK(cudaEventRecord(b, s_));
      CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      if (r >= 2) us.push_back(1e3 * ms / kSteps);  // two warm-up runs
    }
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  }

  static unsigned grid() { return unsigned(std::min(sm_count(), kMaxCtas)); }

 private:
  static bool kernel_per_step(Variant v) {
    return v == Variant::KernelsCoresident || v == Variant::KernelsExclusive;
  }

  Chain chain(Case k) const {
    return Chain{{x_.as<float>(), x_.as<float>() + kWidth},
                 arena_.as<uint4>(),
                 kArenaBytes / sizeof(uint4),
                 k.share_vecs,
                 sink_.as<unsigned>(),
                 sink_.as<unsigned>() + kMaxCtas * kWarps,
                 k.all_x};
  }

  // x0 into the first vector, the flag barrier's counter to zero.
  void reset() {
    CUDA_CHECK(cudaMemcpyAsync(x_.get(), x0_, sizeof(x0_), cudaMemcpyHostToDevice, s_));
    CUDA_CHECK(cudaMemsetAsync(sink_.get(), 0, sink_.bytes(), s_));
  }

  void run(Variant v, Case k) {
    reset();
    const Chain c = chain(k);
    if (kernel_per_step(v)) {
      for (int step = 0; step < kSteps; ++step) launch_step(v, c, step);
    } else {
      launch_persistent(v, c);
    }
    CUDA_CHECK(cudaStreamSynchronize(s_));
  }

  void launch_step(Variant v, const Chain& c, int step) {
    const size_t smem = v == Variant::KernelsExclusive ? kExclusiveSmem : 0;
    detail::launch(step_kernel, grid(), kThreads, smem, true, s_, c, step);
  }

  // Cooperative: the launch fails rather than hangs when the grid cannot be co-resident.
  void launch_persistent(Variant v, Chain c) {
    void* args[] = {&c};
    const void* k = v == Variant::PersistentCg
                        ? reinterpret_cast<const void*>(persistent_cg_kernel)
                        : reinterpret_cast<const void*>(persistent_flag_kernel);
    CUDA_CHECK(cudaLaunchCooperativeKernel(k, grid(), kThreads, args, 0, s_));
  }

  cudaStream_t s_;
  DeviceBuffer x_, arena_, sink_;
  float x0_[kWidth];
};

int run() {
  if (!available()) {
    fmt::print("sync_lab: no CUDA device\n");
    return 2;
  }
  fmt::print("sync_lab on {}: {} steps, x of {} floats, {} CTAs x {} threads\n", describe_device(),
             kSteps, kWidth, Lab::grid(), kThreads);
  Lab lab;
  const auto share = [](double bytes) { return size_t(bytes / 16 / Lab::grid()); };
  const Case cases[] = {{0, false}, {0, true}, {share(4.4e6), true}, {share(12.5e6), true}};
  bool ok = true;
  for (const Case& k : cases) {
    for (Variant v : kVariants) ok = lab.check(v, k) && ok;
  }
  if (!ok) return 1;
  fmt::print(
      "| variant | x read | weights a step | µs a step | GB/s |\n|---|---|---:|---:|---:|\n");
  for (const Case& k : cases) {
    const double bytes = double(k.share_vecs) * 16 * Lab::grid();
    for (Variant v : kVariants) {
      const double us = lab.time_step_us(v, k);
      fmt::print("| {} | {} | {:.1f} MB | {:.2f} | {:.0f} |\n", name(v),
                 k.all_x ? "all" : "sources", bytes / 1e6, us, bytes / us / 1e3);
    }
  }
  return 0;
}

}  // namespace
}  // namespace gdn::cuda

int main() {
  return gdn::bench::lab_main("sync_lab", gdn::cuda::run);
}
