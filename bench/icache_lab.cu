// The instruction-fetch lab: what code that an SM has not run lately costs to execute, and
// whether an SM's instruction caches keep a kernel's code from one launch to the next. The
// question behind it: ncu finds the one-launch GEMVs' warps stalled on instruction fetch
// (no_instruction, 25-36% of their stall samples), and a GEMV that follows a kernel of another
// binary ~1.2 µs slower (bench/RESULTS.md, 2026-12-01 and 2026-12-04). If cold code is what a
// GEMV's phases wait on, running its code paths once before pdl_wait (on dummy data, while the
// previous kernel finishes) would take that wait off the critical path.
//
// Each kernel runs one CTA per SM of `warps` warps; every warp executes a straight-line body of
// kBody[size] independent FFMAs (eight chains, so a warm body issues about one instruction a
// cycle per warp) twice, and thread 0 of every CTA records clock64 before, between and after.
// The first pass pays for fetching the body's code (16 bytes a FFMA) unless it is cached; the
// second runs warm. Kernels A and B have the same body at different addresses.
//
// Scenarios per body size (cycles per pass, median over CTAs):
//   after flush      A after a kernel that streams 256 MB through L2 (A's code is out of L2;
//                    the SM's instruction caches may still hold it from the repeat before)
//   again            A right after A (does the code survive a launch boundary?)
//   after B          A after A then B (B's code of the same size in between)
//
// Measured (H200, 2026-12-04, bench/RESULTS.md): a kernel's code stays in the SM's caches from
// one launch to the next (again: +180 cycles for 32 KB, none for 128 KB with 4 warps); after a
// 32 KB kernel B, A's 32 KB cost 4 warps +2573 cycles (~1.3 µs, ~6.5 bytes of code a cycle)
// but 16 warps nothing (they issue in step, one fetch serving four); 128 KB after B cost
// +36113 cycles (4 warps) and +19037 (16 warps). The decode's fused GEMVs, run warm and back
// to back in bench/gemv_lab, are no faster than in the decode, so eviction between launches
// is not what their no_instruction stalls wait on.
#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "cuda/check.h"
#include "cuda/device.h"
#include "lab_main.h"

namespace gdn::cuda {
namespace {

constexpr size_t kFlushBytes = size_t(256) << 20;

#define GDN_FMA(r) asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(r) : "f"(m), "f"(c))
#define GDN_FMA8 \
  GDN_FMA(a0);   \
  GDN_FMA(a1);   \
  GDN_FMA(a2);   \
  GDN_FMA(a3);   \
  GDN_FMA(a4);   \
  GDN_FMA(a5);   \
  GDN_FMA(a6);   \
  GDN_FMA(a7)
#define GDN_FMA64 \
  GDN_FMA8;       \
  GDN_FMA8;       \
  GDN_FMA8;       \
  GDN_FMA8;       \
  GDN_FMA8;       \
  GDN_FMA8;       \
  GDN_FMA8;       \
  GDN_FMA8
#define GDN_FMA512 \
  GDN_FMA64;       \
  GDN_FMA64;       \
  GDN_FMA64;       \
  GDN_FMA64;       \
  GDN_FMA64;       \
  GDN_FMA64;       \
  GDN_FMA64;       \
  GDN_FMA64

// The body: kBlocks x 512 FFMAs (kBlocks x 8 KB of SASS).
template <int kBlocks>
__device__ __forceinline__ void body(float& a0, float& a1, float& a2, float& a3, float& a4,
                                     float& a5, float& a6, float& a7, float m, float c) {
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    GDN_FMA512;
  }
}

// kId only makes A and B distinct functions (the same code at different addresses).
template <int kBlocks, int kId>
__global__ void code_kernel(float m, float c, float* sink, long long* clocks) {
  float a0 = threadIdx.x, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3, a4 = a0 + 4, a5 = a0 + 5,
        a6 = a0 + 6, a7 = a0 + 7;
  long long t[3];
  t[0] = clock64();
#pragma unroll 1
  for (int pass = 0; pass < 2; ++pass) {
    body<kBlocks>(a0, a1, a2, a3, a4, a5, a6, a7, m, c);
    __syncthreads();  // the pass ends when every warp of the CTA has run it
    t[pass + 1] = clock64();
  }
  if (threadIdx.x == 0) {
    clocks[2 * blockIdx.x] = t[1] - t[0];
    clocks[2 * blockIdx.x + 1] = t[2] - t[1];
  }
  const float s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
  if (s == 1234.5f) sink[blockIdx.x] = s;  // keeps the chains live; never true for these inputs
}

__global__ void flush_kernel(const uint4* p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

struct Passes {
  double cold, warm;  // cycles, median over CTAs
};

Passes read_passes(const DeviceBuffer& clocks, int ctas) {
  std::vector<long long> h(2 * size_t(ctas));
  CUDA_CHECK(
      cudaMemcpy(h.data(), clocks.get(), h.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  std::vector<double> p0, p1;
  for (int i = 0; i < ctas; ++i) {
    p0.push_back(double(h[2 * i]));
    p1.push_back(double(h[2 * i + 1]));
  }
  return {bench::median(p0), bench::median(p1)};
}

template <int kBlocks>
void run_size(int warps, const DeviceBuffer& flush, DeviceBuffer& clocks, DeviceBuffer& sink) {
  const int ctas = sm_count();
  const dim3 grid(ctas), block(32 * warps);
  const auto flush_l2 = [&] {
    flush_kernel<<<4 * ctas, 512>>>(flush.as<const uint4>(), flush.bytes() / 16,
                                    sink.as<unsigned>());
    CUDA_CHECK_LAUNCH();
  };
  const auto a = [&] {
    code_kernel<kBlocks, 0><<<grid, block>>>(1.0f, 0.5f, sink.as<float>(), clocks.as<long long>());
    CUDA_CHECK_LAUNCH();
  };
  const auto b = [&] {
    code_kernel<kBlocks, 1><<<grid, block>>>(1.0f, 0.5f, sink.as<float>(), clocks.as<long long>());
    CUDA_CHECK_LAUNCH();
  };
  constexpr int kRepeats = 5;
  std::vector<double> after_flush[2], again[2], after_b[2];
  for (int r = 0; r < kRepeats; ++r) {
    flush_l2();
    a();
    Passes p = read_passes(clocks, ctas);
    after_flush[0].push_back(p.cold);
    after_flush[1].push_back(p.warm);
    a();
    p = read_passes(clocks, ctas);
    again[0].push_back(p.cold);
    again[1].push_back(p.warm);
    b();
    a();
    p = read_passes(clocks, ctas);
    after_b[0].push_back(p.cold);
    after_b[1].push_back(p.warm);
  }
  const double instr = 512.0 * kBlocks;
  const auto row = [&](const char* name, std::vector<double>* v) {
    const double c = bench::median(v[0]), w = bench::median(v[1]);
    fmt::print(
        "  {:>3} KB  {:>2} warps  {:<12} first pass {:8.0f} cycles, second {:8.0f}: "
        "+{:7.0f} cycles ({:5.2f} per 16-byte instruction)\n",
        kBlocks * 8, warps, name, c, w, c - w, (c - w) / instr);
  };
  row("after flush", after_flush);
  row("again", again);
  row("after B", after_b);
}

int run() {
  fmt::print("device: {}; straight-line FFMA bodies run twice per launch\n", describe_device());
  const size_t ctas = static_cast<size_t>(sm_count());  // one CTA per SM in every launch
  DeviceBuffer flush(kFlushBytes), clocks(2 * sizeof(long long) * ctas), sink(sizeof(float) * ctas);
  CUDA_CHECK(cudaMemset(flush.get(), 1, flush.bytes()));
  for (int warps : {4, 16}) {
    run_size<1>(warps, flush, clocks, sink);
    run_size<4>(warps, flush, clocks, sink);
    run_size<16>(warps, flush, clocks, sink);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}

}  // namespace
}  // namespace gdn::cuda

int main() {
  return gdn::bench::lab_main("icache_lab", gdn::cuda::run);
}
