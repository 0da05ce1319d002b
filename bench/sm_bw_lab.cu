// The per-SM bandwidth lab: how fast can G SMs (one CTA each) stream weights from DRAM when the
// rest of the GPU idles? A kernel that owns work per head (48 GDN v-heads, 16 attention heads)
// runs on fewer CTAs than SMs; whether it can still read at the GPU's bandwidth decides whether
// such a fusion can pay (bench/RESULTS.md, 2026-12-03: the split-K MLP's verdict).
//
// Two ways of reading, each CTA its own contiguous stretch of a buffer far beyond L2 (rotated
// by launch, so every byte comes from DRAM):
//   bulk   one thread issues cp.async.bulk copies of kStage bytes into a ring of kStages stages
//          of shared memory (an mbarrier each); the other warps wait for each stage and release it
//   loads  16 warps of ld.global.nc 16-byte loads, kLoadsInFlight per thread before any is used
// Per (G, bytes a CTA, way): µs per launch (CUDA events over a graph of launches, median of
// replays) and GB/s in all and per SM. Output: the table last.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/async_copy.cuh"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/matmul.cuh"
#include "cuda/read_ceiling.h"
#include "lab_main.h"

namespace gdn::cuda {
namespace {

using bench::median;

constexpr int kThreads = 512;
constexpr int kStage = 16384;  // bytes a bulk copy
constexpr int kStages = 8;     // 128 KB of ring
constexpr int kLoadsInFlight = 8;
constexpr size_t kBuffer = size_t(1) << 30;  // far beyond the 60 MB L2
constexpr int kLaunches = 20;
constexpr int kReplays = 9;

// Sums every word it reads into `sink` only if the sum is a magic value, so the reads stay.
__global__ void __launch_bounds__(kThreads, 1)
    bulk_kernel(const unsigned char* src, size_t per_cta, size_t rotate, unsigned* sink) {
  extern __shared__ float4 smem4[];
  unsigned char* ring = reinterpret_cast<unsigned char*>(smem4);
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + kStages * kStage);
  uint64_t* empty = full + kStages;
  const unsigned char* base = src + rotate + blockIdx.x * per_cta;
  const int n = static_cast<int>(per_cta / kStage);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mm::mbar_init(full + s, 1);
      mm::mbar_init(empty + s, kThreads / 32 - 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // the producer
    for (int i = 0; i < n; ++i) {
      const int s = i % kStages;
      if (i >= kStages) mm::mbar_wait(empty + s, ((i / kStages) - 1) & 1);
      mm::mbar_arrive_expect_tx(full + s, kStage);
      mm::bulk_copy(ring + s * kStage, base + size_t(i) * kStage, kStage, full + s);
    }
    return;
  }
  if (threadIdx.x < 32) return;  // the producer's warp does nothing else
  unsigned acc = 0;
  const int lane = threadIdx.x & 31;
  for (int i = 0; i < n; ++i) {
    const int s = i % kStages;
    mm::mbar_wait(full + s, (i / kStages) & 1);
    acc ^= reinterpret_cast<const unsigned*>(ring + s * kStage)[threadIdx.x];
    __syncwarp();
    if (lane == 0) mm::mbar_arrive(empty + s);
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

__global__ void __launch_bounds__(kThreads, 1)
    loads_kernel(const unsigned char* src, size_t per_cta, size_t rotate, unsigned* sink) {
  const uint4* base = reinterpret_cast<const uint4*>(src + rotate + blockIdx.x * per_cta);
  const size_t n = per_cta / 16;
  unsigned acc = 0;
  for (size_t i0 = threadIdx.x; i0 < n; i0 += size_t(kLoadsInFlight) * kThreads) {
    uint4 v[kLoadsInFlight];
#pragma unroll
    for (int k = 0; k < kLoadsInFlight; ++k) {
      const size_t i = i0 + size_t(k) * kThreads;
      v[k] = i < n ? mm::ld_stream(base + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < kLoadsInFlight; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

int run() {
  if (!available()) {
    fmt::print("sm_bw_lab: no CUDA device\n");
    return 2;
  }
  CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const double copy_bw = measure_copy_bandwidth(s);
  const int sms = sm_count();
  fmt::print("sm_bw_lab on {}: copy bandwidth {:.0f} GB/s (read + write)\n", describe_device(),
             copy_bw / 1e9);
  DeviceBuffer buf(kBuffer), sink(sizeof(unsigned));
  CUDA_CHECK(cudaMemsetAsync(buf.get(), 1, buf.bytes(), s));
  const size_t smem = kStages * kStage + 2 * kStages * sizeof(uint64_t);
  mm::allow_max_smem(reinterpret_cast<const void*>(&bulk_kernel));
  struct Row {
    int ctas;
    size_t per_cta;
    const char* way;
    double us;
  };
  std::vector<Row> rows;
  for (int ctas : {16, 32, 48, 64, 96, sms}) {
    for (size_t per_cta : {size_t(256) << 10, size_t(1) << 20}) {
      const size_t span = per_cta * size_t(ctas);
      const size_t slots = kBuffer / span;
      for (int way = 0; way < 2; ++way) {
        const double us = graph_us(
            s,
            [&](int i) {
              const size_t rotate = (size_t(i) % slots) * span;
              if (way == 0) {
                bulk_kernel<<<ctas, kThreads, smem, s>>>(buf.as<unsigned char>(), per_cta, rotate,
                                                         sink.as<unsigned>());
              } else {
                loads_kernel<<<ctas, kThreads, 0, s>>>(buf.as<unsigned char>(), per_cta, rotate,
                                                       sink.as<unsigned>());
              }
              CUDA_CHECK_LAUNCH();
            },
            kLaunches, kReplays);
        rows.push_back({ctas, per_cta, way == 0 ? "bulk" : "loads", us});
      }
    }
  }
  fmt::print(
      "\n| CTAs (one per SM) | KB a CTA | way | µs a launch | GB/s | GB/s per SM | % of copy "
      "|\n|---:|---:|---|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    const double bytes = double(r.per_cta) * r.ctas;
    fmt::print("| {} | {} | {} | {:.2f} | {:.0f} | {:.1f} | {:.1f}% |\n", r.ctas, r.per_cta >> 10,
               r.way, r.us, bytes / r.us / 1e3, bytes / r.us / 1e3 / r.ctas,
               100.0 * bytes / (r.us * 1e-6) / copy_bw);
  }
  return 0;
}

}  // namespace
}  // namespace gdn::cuda

int main() {
  return gdn::bench::lab_main("sm_bw_lab", gdn::cuda::run);
}
