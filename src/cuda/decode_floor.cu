// The decode floor (decode_floor.h). Every variant runs the same device code per step:
//   - before its wait, thread 0 asks L2 for the CTA's share of the step's bytes (the bytes
//     never depend on the previous step, as a GEMV's weights do not);
//   - after it, the CTA reads all of x (a GEMV) or only its y sources, streams its share with eight
//     16-byte loads in flight a thread (writing back the first write_bytes: a state update),
//     and writes its share of the next vector, y[i] = x[perm(i)] + 1, perm crossing CTAs.
// After S steps y[i] = x0[perm^S(i)] + S exactly (small integers in f32), so a barrier that let a
// CTA read a stale x fails the check. What is read is summed into a per-CTA sink that a store
// depends on, so no load can be dropped.
#include <cooperative_groups.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "cuda/async_copy.cuh"
#include "cuda/check.h"
#include "cuda/decode_floor.h"
#include "cuda/device.h"
#include "cuda/kernel_util.cuh"
#include "cuda/read_ceiling.h"

namespace gdn::cuda {
namespace {

constexpr int kMaxWarps = 32;                  // sink slots a CTA
constexpr int kInFlight = 8;                   // 16-byte loads a thread issues before using them
constexpr size_t kExclusiveSmem = 150 * 1024;  // two CTAs of this never share an SM

struct StepDev {
  uint64_t off;     // first uint4 of the step's region
  uint32_t share;   // uint4s a CTA reads
  uint32_t wshare;  // of which it writes back the first
  bool all_x;       // read all of x, not only the y sources
};

struct Chain {
  float* x[2];  // ping-pong vectors of width floats
  int width;
  uint32_t prefetch_bytes;  // of a CTA's share asked of L2 ahead, at most
  uint4* arena;
  const StepDev* steps;  // device copy (persistent variants)
  int n_steps;
  unsigned* sink;      // per CTA and warp: what it read, kept live
  unsigned* arrivals;  // the flag barrier's counter (zero at launch)
};

// A rotation, so S steps of it are one: perm^S(i) = (i + S * perm_shift(width)) % width.
__host__ __device__ inline int perm_shift(int width) {
  return width / 2 + 17;
}
__host__ __device__ inline int perm(int i, int width) {
  return (i + perm_shift(width)) % width;
}

__device__ uint4* share_of(const Chain& c, const StepDev& st) {
  return c.arena + st.off + size_t(blockIdx.x) * st.share;
}

__device__ void prefetch_share(const Chain& c, const StepDev& st) {
  if (threadIdx.x == 0) {
    detail::prefetch_l2(share_of(c, st),
                        min(st.share * uint32_t(sizeof(uint4)), c.prefetch_bytes) & ~15u);
  }
}

__device__ __forceinline__ unsigned fold(uint4 q) {
  return q.x ^ q.y ^ q.z ^ q.w;
}

template <int kThreads>
__device__ void step_body(const Chain& c, const StepDev& st, int step) {
  // Selected, not indexed: a parameter array indexed at run time is copied to the stack.
  const float* x = (step & 1) ? c.x[1] : c.x[0];
  float* y = (step & 1) ? c.x[0] : c.x[1];
  float xs = 0.0f;
  if (st.all_x) {
    for (int i = threadIdx.x; i < c.width; i += kThreads) xs += x[i];
  }
  unsigned sum = __float_as_uint(xs);
  uint4* w = share_of(c, st);
  uint32_t v = threadIdx.x;
  for (; v + (kInFlight - 1) * kThreads < st.share; v += kInFlight * kThreads) {
    uint4 q[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) q[k] = __ldcs(w + v + k * kThreads);
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      sum += fold(q[k]);
      if (v + k * kThreads < st.wshare) __stcs(w + v + k * kThreads, q[k]);
    }
  }
  for (; v < st.share; v += kThreads) {
    const uint4 q = __ldcs(w + v);
    sum += fold(q);
    if (v < st.wshare) __stcs(w + v, q);
  }
  const int per_cta = (c.width + gridDim.x - 1) / gridDim.x;
  const int lo = blockIdx.x * per_cta, hi = min(c.width, lo + per_cta);
  for (int i = lo + threadIdx.x; i < hi; i += kThreads) y[i] = x[perm(i, c.width)] + 1.0f;
  // A reduction without a return value: nothing on the step's path waits for it.
  sum = __reduce_add_sync(detail::kFullMask, sum);
  if ((threadIdx.x & 31) == 0) atomicAdd(c.sink + blockIdx.x * kMaxWarps + threadIdx.x / 32, sum);
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) floor_step_kernel(Chain c, StepDev st, int step) {
  detail::pdl_launch_dependents();
  prefetch_share(c, st);
  detail::pdl_wait();
  step_body<kThreads>(c, st, step);
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) floor_persistent_cg_kernel(Chain c) {
  const cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  prefetch_share(c, c.steps[0]);
  for (int step = 0; step < c.n_steps; ++step) {
    step_body<kThreads>(c, c.steps[step], step);
    if (step + 1 < c.n_steps) prefetch_share(c, c.steps[step + 1]);
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
    while (mm::ld_acquire(arrivals) < target) {
    }
  }
  __syncthreads();
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) floor_persistent_flag_kernel(Chain c) {
  prefetch_share(c, c.steps[0]);
  for (int step = 0; step < c.n_steps; ++step) {
    step_body<kThreads>(c, c.steps[step], step);
    if (step + 1 < c.n_steps) prefetch_share(c, c.steps[step + 1]);
    flag_barrier(c.arrivals, unsigned(step + 1) * gridDim.x);
  }
}

using StepKernel = void (*)(Chain, StepDev, int);
using PersistentKernel = void (*)(Chain);

StepKernel step_kernel(int threads) {
  return threads == 1024 ? floor_step_kernel<1024> : floor_step_kernel<512>;
}

PersistentKernel persistent_kernel(FloorVariant v, int threads) {
  if (v == FloorVariant::PersistentCg) {
    return threads == 1024 ? floor_persistent_cg_kernel<1024> : floor_persistent_cg_kernel<512>;
  }
  return threads == 1024 ? floor_persistent_flag_kernel<1024> : floor_persistent_flag_kernel<512>;
}

bool kernel_per_step(FloorVariant v) {
  return v == FloorVariant::KernelsCoresident || v == FloorVariant::KernelsExclusive;
}

uint32_t uint4s_per_cta(uint64_t bytes, unsigned grid) {
  const uint64_t vecs = (bytes + sizeof(uint4) - 1) / sizeof(uint4);
  const uint64_t per = (vecs + grid - 1) / grid;
  if (per > UINT32_MAX / sizeof(uint4))
    fail("decode floor: a step of {} bytes is too large", bytes);
  return static_cast<uint32_t>(per);
}

}  // namespace

const char* floor_variant_name(FloorVariant v) {
  switch (v) {
    case FloorVariant::KernelsCoresident:
      return "kernels, co-resident";
    case FloorVariant::KernelsExclusive:
      return "kernels, exclusive";
    case FloorVariant::PersistentCg:
      return "persistent, cg";
    case FloorVariant::PersistentFlag:
      return "persistent, flag";
  }
  return "?";
}

std::vector<FloorConfig> floor_configs() {
  std::vector<FloorConfig> out;
  for (int threads : {512, 1024}) {
    for (uint32_t kb : {0u, 64u, 256u, 1024u}) out.push_back({threads, kb << 10});
  }
  return out;
}

std::string describe(const FloorConfig& c) {
  return fmt::format("{} threads, {} KB ahead", c.threads, c.prefetch_bytes >> 10);
}

unsigned FloorChain::grid() {
  return static_cast<unsigned>(sm_count());
}

struct FloorChain::State {
  std::vector<FloorStep> steps;
  std::vector<StepDev> shares;  // host copy: the kernel-per-step launches pass theirs
  std::vector<float> x0;
  cudaStream_t s = nullptr;
  DeviceBuffer x, arena, sink, dev_steps;
  Chain chain{};
  int threads = 512;

  void apply(const FloorConfig& c) {
    if (c.threads != 512 && c.threads != 1024) {
      fail("decode floor: {} threads a CTA (512 or 1024)", c.threads);
    }
    threads = c.threads;
    chain.prefetch_bytes = c.prefetch_bytes;
  }

  ~State() {
    if (s) cudaStreamDestroy(s);
  }

  // x0 into the first vector; the sinks and the flag barrier's counter to zero.
  void reset() {
    CUDA_CHECK(
        cudaMemcpyAsync(x.get(), x0.data(), sizeof(float) * x0.size(), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemsetAsync(sink.get(), 0, sink.bytes(), s));
  }

  void launch_step(FloorVariant v, int step) {
    const size_t smem = v == FloorVariant::KernelsExclusive ? kExclusiveSmem : 0;
    detail::launch(step_kernel(threads), grid(), threads, smem, true, s, chain,
                   shares[static_cast<size_t>(step)], step);
  }

  // Cooperative: the launch fails rather than hangs when the grid cannot be co-resident.
  void launch_persistent(FloorVariant v) {
    void* args[] = {&chain};
    const void* k = reinterpret_cast<const void*>(persistent_kernel(v, threads));
    CUDA_CHECK(cudaLaunchCooperativeKernel(k, grid(), threads, args, 0, s));
  }

  void run(FloorVariant v) {
    if (kernel_per_step(v)) {
      for (size_t i = 0; i < steps.size(); ++i) launch_step(v, static_cast<int>(i));
    } else {
      launch_persistent(v);
    }
  }
};

FloorChain::FloorChain(std::vector<FloorStep> steps, int width) : st_(std::make_unique<State>()) {
  State& t = *st_;
  t.steps = std::move(steps);
  if (t.steps.empty() || width <= 0) fail("decode floor: no steps or an empty vector");
  const unsigned g = grid();
  uint64_t vecs = 0;
  for (const FloorStep& step : t.steps) {
    if (step.write_bytes > step.read_bytes) {
      fail("decode floor: a step writes back {} bytes of the {} it reads", step.write_bytes,
           step.read_bytes);
    }
    t.shares.push_back({vecs, uint4s_per_cta(step.read_bytes, g),
                        uint4s_per_cta(step.write_bytes, g), step.all_x});
    vecs += uint64_t(t.shares.back().share) * g;
  }
  CUDA_CHECK(cudaStreamCreate(&t.s));
  t.x = DeviceBuffer(2 * sizeof(float) * size_t(width));
  t.arena = DeviceBuffer(std::max<uint64_t>(vecs, 1) * sizeof(uint4));
  t.sink = DeviceBuffer(sizeof(unsigned) * (size_t(g) * kMaxWarps + 1));
  t.dev_steps = DeviceBuffer(sizeof(StepDev) * t.shares.size());
  CUDA_CHECK(
      cudaMemcpy(t.dev_steps.get(), t.shares.data(), t.dev_steps.bytes(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemsetAsync(t.arena.get(), 0x5a, t.arena.bytes(), t.s));
  for (int i = 0; i < width; ++i) t.x0.push_back(float((i * 37) % 1000));
  t.chain = Chain{{t.x.as<float>(), t.x.as<float>() + width},
                  width,
                  0,
                  t.arena.as<uint4>(),
                  t.dev_steps.as<StepDev>(),
                  static_cast<int>(t.steps.size()),
                  t.sink.as<unsigned>(),
                  t.sink.as<unsigned>() + size_t(g) * kMaxWarps};
  for (int threads : {512, 1024}) {
    CUDA_CHECK(cudaFuncSetAttribute(
        step_kernel(threads), cudaFuncAttributeMaxDynamicSharedMemorySize, int(kExclusiveSmem)));
  }
  CUDA_CHECK(cudaStreamSynchronize(t.s));
}

FloorChain::~FloorChain() = default;

size_t FloorChain::steps() const {
  return st_->steps.size();
}

uint64_t FloorChain::bytes() const {
  uint64_t total = 0;
  for (const FloorStep& step : st_->steps) total += step.read_bytes + step.write_bytes;
  return total;
}

void FloorChain::check(FloorVariant v, const FloorConfig& c) {
  State& t = *st_;
  t.apply(c);
  t.reset();
  t.run(v);
  CUDA_CHECK(cudaStreamSynchronize(t.s));
  const int width = t.chain.width, n_steps = t.chain.n_steps;
  std::vector<float> y(t.x0.size());
  CUDA_CHECK(cudaMemcpy(y.data(), t.chain.x[n_steps % 2], sizeof(float) * y.size(),
                        cudaMemcpyDeviceToHost));
  const uint64_t shift = uint64_t(n_steps) * uint64_t(perm_shift(width));
  for (int i = 0; i < width; ++i) {
    const size_t j = (uint64_t(i) + shift) % uint64_t(width);
    const float want = t.x0[j] + float(n_steps);
    if (y[static_cast<size_t>(i)] != want) {
      fail("decode floor, {} ({}): after {} steps y[{}] = {}, want {}", floor_variant_name(v),
           describe(c), n_steps, i, y[static_cast<size_t>(i)], want);
    }
  }
}

double FloorChain::chain_us(FloorVariant v, int replays, const FloorConfig& c) {
  State& t = *st_;
  t.apply(c);
  const int n_steps = t.chain.n_steps;
  if (kernel_per_step(v)) {
    return n_steps * graph_us(
                         t.s, [&](int step) { t.launch_step(v, step); }, n_steps, replays);
  }
  // Two warm-up runs; the vector and the barrier's counter reset before each, untimed.
  return median_event_us(
      t.s, 2, replays, [&] { t.launch_persistent(v); }, [&] { t.reset(); });
}

FloorBest FloorChain::best(FloorVariant v, int replays) {
  FloorBest b;
  for (const FloorConfig& c : floor_configs()) {
    check(v, c);
    const double us = chain_us(v, replays, c);
    if (b.us_by_config.empty() || us < b.us) {
      b.us = us;
      b.config = c;
    }
    b.us_by_config.push_back(us);
  }
  return b;
}

}  // namespace gdn::cuda
