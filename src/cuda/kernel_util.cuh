// Device helpers and launcher checks shared by the kernel families (norm, elementwise, conv,
// gdn, attention). One home for each: block reductions, view addressing, shape assertions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "common/error.h"
#include "cuda/check.h"
#include "cuda/kernels.h"
#include "cuda/timeline.h"

namespace gdn::cuda::detail {

constexpr unsigned kFullMask = 0xffffffffu;

// ---------------------------------------------------------------------------------------------
// Device side

__device__ __forceinline__ float* row_ptr(const DevRows& v, int64_t r) {
  return v.data + r * v.ld;
}

// Sum over the 32 lanes by butterfly: every lane ends with the same value (same additions in
// the same order on every lane), so later per-lane decisions agree.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Sum over the block, returned to every thread. `scratch` holds 32 floats of shared memory.
// Deterministic: warp sums are added in warp order by every thread. Every thread of the
// block must call it (it contains barriers).
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();  // orders the warp sums' stores before every thread reads them
  float total = 0.0f;
  for (int w = 0; w < n_warps; ++w) total += scratch[w];
  __syncthreads();  // orders those reads before a later call overwrites scratch
  return total;
}

// The CPU reference's activations (cpu/ops.cpp), in f32 with the accurate expf/log1pf (the
// build does not use --use_fast_math): a few ulp from glibc's.
__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ float softplus(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}
__device__ __forceinline__ float silu(float x) {
  return x * sigmoid(x);
}

// Programmatic dependent launch (sm_90). Every kernel of a decode step is launched with the
// programmatic-serialization attribute (all but the null-dispatch empty kernel, which prices a
// plain dispatch), so it may start before the previous kernel in the
// stream has finished: its CTAs become resident and wait in pdl_wait() while the previous
// kernel runs, which hides the launch latency of each of the step's ~500-1900 dispatches.
// As each kernel lets its dependents start at entry, several earlier kernels may still be
// running: before pdl_wait() a kernel reads only what no kernel writes (weights). A kernel
// completes only after its pdl_wait() returned, so its completion implies its predecessors'.
// Without the attribute both are no-ops.
__device__ __forceinline__ void timeline_stamp();
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  timeline_stamp();
}
// Lets the next kernel (if launched with the attribute) start now; it still waits in pdl_wait()
// for this grid to finish and flush.
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;");
}

// Asks the memory system to bring [p, p + bytes) into L2 (sm_90 bulk prefetch: one instruction
// for a contiguous range, no registers, no completion to wait for). p 16-byte aligned, bytes a
// multiple of 16. A hint: correctness never depends on it.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  if (bytes > 0) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
  }
}

// The first statement of every kernel launched through launch(): lets the next kernel in the
// stream start its own CTAs (they wait in their own pdl_enter), then waits until the previous
// kernel has finished and its writes are visible. Nothing a kernel does before it may read
// data an earlier kernel writes; weights may be read (the GEMVs ask L2 for theirs first).
__device__ __forceinline__ void pdl_enter() {
  pdl_launch_dependents();
  pdl_wait();
}

// ---------------------------------------------------------------------------------------------
// The dispatch timeline (cuda/timeline.h): where the decode token's time goes in the pipeline,
// which isolated kernel timings cannot tell once PDL overlaps every launch with its
// predecessor. When armed, thread 0 of CTA 0 of every kernel stamps %globaltimer as its
// pdl_wait() returns, i.e. once everything before it has finished: consecutive stamps bound
// one kernel's share of the token. Disarmed it costs every thread one compare (and thread 0 of
// CTA 0 one load). Measured side by side (H200, 2026-12-01, tg128 with all rungs): this hook
// 261.5 tok/s, the pointer in constant memory read before the wait 252.8, no hook at all 252.5.
// So the hook's own work costs nothing visible, and the 3.5% between builds whose only
// difference is this code is unexplained (code placement in the instruction-fetch-bound
// GEMVs is a guess, not measured); this variant is kept because it measured fastest.
//
// The buffer pointer is a per-translation-unit __device__ variable (the library is not built
// with relocatable device code, so each .cu file has its own copy): the anonymous namespace
// below gives every .cu file that includes this header its copy and a setter, registered at
// static initialisation so that a cuda::Timeline arms them all.
namespace {
__device__ TimelineBuffer* g_timeline = nullptr;
cudaError_t set_timeline_here(TimelineBuffer* buf) {
  return cudaMemcpyToSymbol(g_timeline, &buf, sizeof buf);
}
[[maybe_unused]] const bool g_timeline_registered = register_timeline_setter(&set_timeline_here);
}  // namespace

__device__ __forceinline__ void timeline_stamp() {
  if ((threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) != 0) return;
  TimelineBuffer* const buf = g_timeline;
  if (buf == nullptr) return;
  const unsigned i = atomicAdd(&buf->count, 1u);
  if (i >= buf->cap) return;  // counted, not stored: the host reports the overflow
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  buf->stamp[i] = t;
}

// ---------------------------------------------------------------------------------------------
// Host side: launches

// Launches kernel<<<grid, block, smem, s>>>(args) in clusters of `cluster` CTAs along x (grid.x
// a multiple of it; 0: no cluster attribute), with programmatic serialization when pdl.
template <class... KArgs, class... Args>
void launch_clusters(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, bool pdl,
                     unsigned cluster, cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 0) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n++].val.clusterDim = {cluster, 1, 1};
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...));
}
template <class... KArgs, class... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, bool pdl, cudaStream_t s,
            Args&&... args) {
  launch_clusters(kernel, grid, block, smem, pdl, 0, s, std::forward<Args>(args)...);
}

// ---------------------------------------------------------------------------------------------
// Host side: launcher assertions (gdn::Error naming the op and the shape)

inline void check_view(const char* op, const char* name, const DevRows& v) {
  if (v.data == nullptr || v.rows <= 0 || v.cols <= 0 || v.ld < v.cols) {
    fail("cuda {}: {} view [{}x{}] (ld {}) must be non-empty with ld >= cols", op, name, v.rows,
         v.cols, v.ld);
  }
  // Kernels index within a row with 32-bit ints and across rows with 64-bit ones.
  if (v.ld > INT32_MAX) fail("cuda {}: {} row stride {} exceeds 2^31", op, name, v.ld);
}

inline void check_same_shape(const char* op, const DevRows& a, const char* an, const DevRows& b,
                             const char* bn) {
  if (a.rows != b.rows || a.cols != b.cols) {
    fail("cuda {}: {} [{}x{}] and {} [{}x{}] must have the same shape", op, an, a.rows, a.cols, bn,
         b.rows, b.cols);
  }
}

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// True when the view can be read and written as float4: base 16-byte aligned and every row
// start too (ld a multiple of 4), and whole float4s per row.
inline bool vec4_ok(const DevRows& v) {
  return aligned16(v.data) && v.ld % 4 == 0 && v.cols % 4 == 0;
}

inline unsigned ceil_div(int64_t a, int64_t b) {
  return static_cast<unsigned>((a + b - 1) / b);
}

// The largest grid.y / grid.z a launch may use; kernels that take rows from grid.y loop
// over rows with this stride.
constexpr int64_t kMaxGridY = 65535;

}  // namespace gdn::cuda::detail
