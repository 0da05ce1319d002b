// Shared by the matmul kernel families (matmul_*.cu) and the GEMV lab (bench/gemv_lab.cu):
// load helpers, programmatic-dependent-launch helpers, the chunked GEMV kernel that every
// format except Q1_0 uses, and the families' internal entry points.
//
// The chunked layout (F32, F16, BF16, Q8_0, Q4_0, Q2_0, PQ2_0). Rows are grouped by 32; in a
// group, each row's codes are cut into 16-byte chunks along n_in and stored chunk-major,
// lane-minor: codes[group][chunk][lane] is 16 bytes of row group*32+lane. A warp owns a row
// group, lane = row: its load of one chunk is a contiguous 512-byte segment, and every lane
// needs the same activations for it, so activation loads are warp broadcasts (DESIGN.md §6:
// lanes reading different stretches of x were L1-bound at 0.4-0.5 TB/s). Scales (fp16, as
// stored) sit apart as scales[group][block][lane]. Rows past n_out and chunk bytes past the
// row are zero. The warps of a CTA split n_in and are summed through shared memory in warp
// order (deterministic, no atomics).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.h"
#include "cuda/check.h"
#include "cuda/matrix.h"

namespace gdn::cuda::mm {

constexpr unsigned kFullMask = 0xffffffffu;

// ---------------------------------------------------------------------------------------------
// Device helpers

// Weights are read once per GEMV: no L1 allocation, so the activations stay cached.
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Programmatic dependent launch (sm_90). A kernel launched with the programmatic-serialization
// attribute may start before the previous kernel in the stream has finished; everything it
// reads before pdl_wait() must not be written by that kernel (weights), everything after may.
// Without the attribute both are no-ops.
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
// Lets the next kernel (if launched with the attribute) start now; it still waits in pdl_wait()
// for this grid to finish and flush.
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;");
}

// ---------------------------------------------------------------------------------------------
// Host helpers

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}
// Multiprocessors of the current device, queried once per device.
int sm_count();
// Launches kernel<<<grid, block, smem, s>>>(args), with programmatic serialization when pdl.
template <class... KArgs, class... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, bool pdl, cudaStream_t s,
            Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...));
}

// Shape assertions shared by the launchers.
void check_matmul_args(const GpuMatrix& w, const float* x, int64_t ldx, const float* y, int64_t ldy,
                       int64_t n_tokens);

// ---------------------------------------------------------------------------------------------
// The chunked GEMV / batched kernel

// Tokens per pass of the batched kernel: each decoded chunk is used NT times.
constexpr int kBatchTokens = 8;
constexpr int kMaxWarps = 16;
// Chunks each warp has in flight (16-byte loads per lane before the first use).
constexpr int kChunkUnroll = 4;

struct ChunkedArgs {
  const uint4* codes;    // [n_groups][n_chunks][32]
  const __half* scales;  // [n_groups][n_blocks][32] or null
  const float* x;        // [n_tokens][ldx]
  int64_t ldx;
  float* y;  // [n_tokens][ldy]
  int64_t ldy;
  int n_in, n_out, n_chunks, n_blocks, n_tokens, chunks_per_warp;
};

// A format F provides kElems (elements per 16-byte chunk), kChunksPerBlock (chunks sharing a
// scale; 0: no scales) and decode(chunk, sub, w): elements [16*sub, 16*sub + 16) of the chunk
// (all kElems when kElems < 16) as unscaled floats, in the order the activations follow.
template <class F>
constexpr int sub_elems() {
  return F::kElems < 16 ? F::kElems : 16;
}

// x[k .. k+N) of one activation row, zero past n_in (a short last chunk of a plain row).
template <int N, bool kVec>
__device__ __forceinline__ void load_x(const float* xr, int k, int n_in, float (&v)[N]) {
  if (kVec && k + N <= n_in) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(xr + k) + i);
      v[4 * i] = f.x;
      v[4 * i + 1] = f.y;
      v[4 * i + 2] = f.z;
      v[4 * i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = k + i < n_in ? __ldg(xr + k + i) : 0.0f;
  }
}

// grid (n_groups, ceil(n_tokens / NT)), block 32 * warps. kVec: x rows are 16-byte aligned.
template <class F, int NT, bool kVec>
__global__ void __launch_bounds__(kMaxWarps * 32) chunked_kernel(ChunkedArgs a) {
  constexpr int kSub = sub_elems<F>();
  constexpr int kSubs = F::kElems / kSub;
  __shared__ float red[kMaxWarps][NT][32];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int group = blockIdx.x;
  const int tok0 = blockIdx.y * NT;
  const int c_begin = warp * a.chunks_per_warp;
  const int c_end = min(a.n_chunks, c_begin + a.chunks_per_warp);
  const uint4* codes = a.codes + int64_t(group) * a.n_chunks * 32 + lane;
  const __half* scales = a.scales ? a.scales + int64_t(group) * a.n_blocks * 32 + lane : nullptr;

  float acc[NT];
#pragma unroll
  for (int n = 0; n < NT; ++n) acc[n] = 0.0f;

  for (int c0 = c_begin; c0 < c_end; c0 += kChunkUnroll) {
    uint4 chunk[kChunkUnroll];
#pragma unroll
    for (int u = 0; u < kChunkUnroll; ++u) {
      if (c0 + u < c_end) chunk[u] = ld_stream(codes + int64_t(c0 + u) * 32);
    }
#pragma unroll
    for (int u = 0; u < kChunkUnroll; ++u) {
      const int c = c0 + u;
      if (c >= c_end) break;
      float d = 1.0f;
      if constexpr (F::kChunksPerBlock > 0) {
        d = __half2float(scales[int64_t(c / F::kChunksPerBlock) * 32]);
      }
      float part[NT];
#pragma unroll
      for (int n = 0; n < NT; ++n) part[n] = 0.0f;
#pragma unroll
      for (int sub = 0; sub < kSubs; ++sub) {
        float w[kSub];
        F::decode(chunk[u], sub, w);
        const int k = c * F::kElems + sub * kSub;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          if (NT > 1 && tok0 + n >= a.n_tokens) break;
          float xv[kSub];
          load_x<kSub, kVec>(a.x + int64_t(tok0 + n) * a.ldx, k, a.n_in, xv);
#pragma unroll
          for (int e = 0; e < kSub; ++e) part[n] = fmaf(w[e], xv[e], part[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < NT; ++n) acc[n] = fmaf(d, part[n], acc[n]);
    }
  }

#pragma unroll
  for (int n = 0; n < NT; ++n) red[warp][n][lane] = acc[n];
  __syncthreads();  // every warp's partial sums are in shared memory before they are added
  for (int i = threadIdx.x; i < NT * 32; i += blockDim.x) {
    const int n = i / 32, l = i % 32;
    const int row = group * 32 + l, tok = tok0 + n;
    if (row >= a.n_out || tok >= a.n_tokens) continue;
    float sum = 0.0f;
    for (int w = 0; w < n_warps; ++w) sum += red[w][n][l];  // fixed order: deterministic
    a.y[int64_t(tok) * a.ldy + row] = sum;
  }
}

// Launches the chunked kernel for format F (one launch for any n_tokens).
template <class F>
void chunked_matmul(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                    int64_t n_tokens, cudaStream_t s) {
  check_matmul_args(w, x, ldx, y, ldy, n_tokens);
  ChunkedArgs a;
  a.codes = w.codes.as<const uint4>();
  a.scales = F::kChunksPerBlock > 0 ? w.scales.as<const __half>() : nullptr;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.n_in = static_cast<int>(w.n_in);
  a.n_out = static_cast<int>(w.n_out);
  a.n_chunks = static_cast<int>(w.n_col_tiles);
  a.n_blocks = F::kChunksPerBlock > 0 ? static_cast<int>(w.n_col_tiles / F::kChunksPerBlock) : 0;
  a.n_tokens = static_cast<int>(n_tokens);
  // Enough warps that the GPU holds ~16 per SM with 4 chunks each in flight, but no warp idle.
  const int64_t groups = w.n_row_tiles;
  int warps = 1;
  while (warps < kMaxWarps && groups * warps < 16 * sm_count() && warps * 2 <= a.n_chunks) {
    warps *= 2;
  }
  a.chunks_per_warp = static_cast<int>(ceil_div(a.n_chunks, warps));
  const bool vec = aligned16(x) && ldx % 4 == 0;
  const dim3 block(32 * warps);
  if (n_tokens == 1) {
    const dim3 grid(static_cast<unsigned>(groups), 1);
    if (vec) {
      chunked_kernel<F, 1, true><<<grid, block, 0, s>>>(a);
    } else {
      chunked_kernel<F, 1, false><<<grid, block, 0, s>>>(a);
    }
  } else {
    const dim3 grid(static_cast<unsigned>(groups),
                    static_cast<unsigned>(ceil_div(n_tokens, kBatchTokens)));
    if (vec) {
      chunked_kernel<F, kBatchTokens, true><<<grid, block, 0, s>>>(a);
    } else {
      chunked_kernel<F, kBatchTokens, false><<<grid, block, 0, s>>>(a);
    }
  }
  CUDA_CHECK_LAUNCH();
}

// Host repack into the chunked layout. chunk(row, c, out) writes the 16 bytes of chunk c of a
// stored row (zero past the row); scale(row, b) returns the fp16 bits of block b's scale.
struct ChunkedFormat {
  int64_t elems_per_chunk;
  int64_t chunks_per_block;  // 0: no scales
  void (*chunk)(const uint8_t* row, size_t row_bytes, int64_t c, uint8_t* out);
  uint16_t (*scale)(const uint8_t* row, int64_t b);
};
GpuMatrix upload_chunked(const model::Matrix& m, const ChunkedFormat& f, cudaStream_t s);
// For block formats: chunk c is bytes [16 (c % kChunksPerBlock), +16) of the codes of block
// c / kChunksPerBlock (after its 2-byte fp16 scale).
template <size_t kBlockBytes, int kChunksPerBlock>
void block_chunk(const uint8_t* row, size_t /*row_bytes*/, int64_t c, uint8_t* out) {
  std::memcpy(out, row + (c / kChunksPerBlock) * kBlockBytes + 2 + 16 * (c % kChunksPerBlock), 16);
}
template <size_t kBlockBytes>
uint16_t block_scale(const uint8_t* row, int64_t b) {
  uint16_t d;
  std::memcpy(&d, row + b * kBlockBytes, sizeof d);
  return d;
}

// ---------------------------------------------------------------------------------------------
// Family entry points (each defined in its matmul_<family>.cu)

GpuMatrix upload_float(const model::Matrix& m, cudaStream_t s);  // F32, F16, BF16
void matmul_float(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                  int64_t n_tokens, cudaStream_t s);
GpuMatrix upload_q8(const model::Matrix& m, cudaStream_t s);  // Q8_0, Q4_0
void matmul_q8(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
               int64_t n_tokens, cudaStream_t s);
GpuMatrix upload_2bit(const model::Matrix& m, cudaStream_t s);  // Q2_0, PQ2_0
void matmul_2bit(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                 int64_t n_tokens, cudaStream_t s);

// Q1_0 (matmul_q1_0.cu): activations quantised by a small kernel into the workspace, then the
// GEMV / batched kernel. The variants exist for the lab (bench/gemv_lab.cu) until it has
// picked one; matmul() uses the default.
// kBmma<Q>: b1 mma, Q quads (Q * 512 weights of each of 16 rows) per warp, the next row tile's
// loads issued before the current one is computed; *Flat: without that prefetch (fewer
// registers, more warps); kDp4a2: dp4a arithmetic, 2 quads, prefetch.
enum class Q1Variant { kBmma2, kBmma2Flat, kBmma4, kBmma4Flat, kDp4a2 };
struct Q1Options {
  Q1Variant variant = Q1Variant::kBmma2;
  bool pdl = true;  // the GEMV starts its weight loads while the quantise kernel runs
};
const char* q1_variant_name(Q1Variant v);
GpuMatrix upload_q1_0(const model::Matrix& m, cudaStream_t s);
size_t q1_0_workspace_bytes(int64_t n_in, int64_t n_tokens);
// Quantises x into act (q1_0_workspace_bytes(n_in, n_tokens) bytes) for the given variant.
void q1_0_quantize(const GpuMatrix& w, const float* x, int64_t ldx, int64_t n_tokens, void* act,
                   Q1Variant v, cudaStream_t s);
// The product from already quantised activations.
void q1_0_product(const GpuMatrix& w, const void* act, float* y, int64_t ldy, int64_t n_tokens,
                  const Q1Options& o, cudaStream_t s);
// "5 warps/tile x 1 steps of 2 quads, ..." : how the product kernel is cut for this shape.
std::string q1_0_describe(const GpuMatrix& w, int64_t n_tokens, const Q1Options& o);
void matmul_q1_0(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
                 int64_t n_tokens, MatmulWorkspace& ws, const Q1Options& o, cudaStream_t s);

}  // namespace gdn::cuda::mm
