// The Q1_0 GEMV lab: every variant of matmul_q1_0.cu checked against the CPU reference, then
// timed on the Bonsai-27B shapes and the output head against two ceilings measured in the
// same run. One binary, one run, well under two minutes on an H200 (scripts/gemv_lab.sh).
//
//   copy bandwidth   a 1 GiB cudaMemcpyDeviceToDevice, read + write bytes / time (median of 8)
//   read ceiling     the best of several plain streaming-read kernels (16-byte loads, 4 in
//                    flight per thread, SMs x k CTAs) reading the GEMV's bytes, timed like it
//   variants         Q1Variant x PDL on/off; each: product after the quantise kernel (2
//                    launches) and the product kernel alone; bmma-q2/q4 also as the one-launch
//                    GEMV that quantises in shared memory (what matmul() runs for one token)
//   batched         the prefill product: b1 against int8 (kImma) and its group-pair form
//                    (kImmaPairs, checked bit for bit against kImma) at 8-512 tokens
//   mma rates       b1 m16n8k128 and s8 m16n8k32 throughput (every SM full) and, for one warp
//                    alone, the latency of a dependent mma and its issue interval, in clocks
//   timeline        per one-launch variant, thread 0 of every CTA stamps globaltimer and
//                    clock64 at each phase (q1_0_gemv_traced): where a launch's time goes;
//                    then the decode step's fused GEMVs (ssm_out, qkv+z, gate+up handing
//                    codes to ffn_down) with their prologues and epilogues
//   qkv step        qkv+z with beta+alpha on a side stream against folded into its launch
//   hot in L2       matmul_fused's GEMV, and each fused decode GEMV, on rotated copies and on
//                    one copy (weights in L2): how much of its time waits for DRAM
//
// Every timed input set is rotated among copies totalling > 150 MB (the L2 is 60 MB). Times
// are per matmul: inside a CUDA graph of 20 (median of replays; what the executor will see)
// and as plain stream launches (20 back to back, median). Variants run in rotated order
// (A B C, B C A, ...) so drift does not favour one.
//
// Output: a line per measurement, then the summary table last. Columns: us (graph), GB/s =
// bytes the GEMV must read (weights as stored on the GPU + x + y) / time, %copy, %read =
// read-ceiling time / variant time, plain-launch us, product-kernel-only us.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/matmul.cuh"
#include "cuda/read_ceiling.h"
#include "lab_main.h"
#include "quant/quant.h"

namespace gdn::cuda {
namespace {

using bench::median;

constexpr double kRotateBytes = 150e6;
constexpr int kGraphLaunches = 20;
constexpr int kReplays = 15;

// ---------------------------------------------------------------------------------------------
// Timing

struct Timer {
  cudaStream_t s;
  cudaEvent_t a, b;
  explicit Timer(cudaStream_t st) : s(st) {
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  // Median per-launch microseconds of launch(i), i = 0..19, captured in one graph.
  double graph_us(const std::function<void(int)>& launch) {
    return cuda::graph_us(s, launch, kGraphLaunches, kReplays);
  }
  // The same, as 20 plain launches back to back.
  double plain_us(const std::function<void(int)>& launch) {
    for (int i = 0; i < 3; ++i) launch(i);
    std::vector<double> us;
    for (int r = 0; r < kReplays; ++r) {
      CUDA_CHECK(cudaEventRecord(a, s));
      for (int i = 0; i < kGraphLaunches; ++i) launch(i);
      CUDA_CHECK(cudaEventRecord(b, s));
      CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      us.push_back(1e3 * ms / kGraphLaunches);
    }
    return median(us);
  }
};

// ---------------------------------------------------------------------------------------------
// Matrices and the reference

// A random Q1_0 matrix: random sign bits, random positive fp16 scales (any such block is a
// valid Q1_0 block; the op checks build theirs with quantize_row).
std::vector<uint8_t> random_q1_0(int64_t n_in, int64_t n_out, uint64_t seed) {
  const size_t row_bytes = quant::row_bytes(quant::Type::Q1_0, n_in);
  std::vector<uint8_t> rows(row_bytes * static_cast<size_t>(n_out));
  ThreadPool pool;
  pool.parallel_for(n_out, [&](int64_t begin, int64_t end) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(begin));
    std::uniform_real_distribution<float> scale(0.01f, 0.05f);
    for (int64_t r = begin; r < end; ++r) {
      uint8_t* row = rows.data() + r * row_bytes;
      for (int64_t b = 0; b < n_in / 128; ++b) {
        uint8_t* blk = row + b * 18;
        const uint16_t d = quant::f32_to_fp16(scale(rng));
        std::memcpy(blk, &d, 2);
        const uint64_t lo = rng(), hi = rng();
        std::memcpy(blk + 2, &lo, 8);
        std::memcpy(blk + 10, &hi, 8);
      }
    }
  });
  return rows;
}

std::vector<float> reference(const std::vector<uint8_t>& rows, const std::vector<float>& x,
                             int64_t n_in, int64_t n_out) {
  std::vector<quant::BlockQ8Act128> xq(static_cast<size_t>(n_in / 128));
  quant::quantize_activations_q8_128(x.data(), n_in, xq.data());
  const size_t row_bytes = quant::row_bytes(quant::Type::Q1_0, n_in);
  std::vector<float> y(static_cast<size_t>(n_out));
  ThreadPool pool;
  pool.parallel_for(n_out, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      y[r] = quant::dot_row_q1_0_q8_128(rows.data() + r * row_bytes, xq.data(), n_in);
    }
  });
  return y;
}

// A second GpuMatrix with the same contents (device-to-device), for rotation beyond L2.
GpuMatrix clone(const GpuMatrix& w, cudaStream_t s) {
  GpuMatrix c;
  c.name = w.name;
  c.type = w.type;
  c.n_in = w.n_in;
  c.n_out = w.n_out;
  c.n_row_tiles = w.n_row_tiles;
  c.n_col_tiles = w.n_col_tiles;
  c.codes = DeviceBuffer(w.codes.bytes());
  c.scales = DeviceBuffer(w.scales.bytes());
  CUDA_CHECK(
      cudaMemcpyAsync(c.codes.get(), w.codes.get(), w.codes.bytes(), cudaMemcpyDeviceToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(c.scales.get(), w.scales.get(), w.scales.bytes(),
                             cudaMemcpyDeviceToDevice, s));
  return c;
}

// host (random_q1_0) uploaded, then cloned into `copies` matrices in all.
std::vector<GpuMatrix> upload_copies(const std::vector<uint8_t>& host, int64_t n_in, int64_t n_out,
                                     int copies, cudaStream_t s) {
  model::Matrix view;
  view.name = fmt::format("{}->{}", n_in, n_out);
  view.type = quant::Type::Q1_0;
  view.n_in = n_in;
  view.n_out = n_out;
  view.row_bytes = quant::row_bytes(quant::Type::Q1_0, n_in);
  view.data = host.data();
  std::vector<GpuMatrix> c;
  c.push_back(upload_matrix(view, s));
  while (static_cast<int>(c.size()) < copies) c.push_back(clone(c[0], s));
  return c;
}

// ---------------------------------------------------------------------------------------------

struct Variant {
  mm::Q1Options o;
  std::string name;
};

struct Row {
  std::string shape, variant;
  double bytes, us, plain_us, product_us, ceiling_us, err;
  bool ok;
};

// Tensor-core issue rates the Q1_0 arithmetic rests on: b1 mma m16n8k128 (.and.popc; one per
// 16 rows x 128 weights with all 8 activation planes) and s8 mma m16n8k32 (16 rows x 32 ±1
// weights), kChains independent accumulator chains per warp: 8 chains and 32 warps on every SM
// for the rate; one warp alone for the latency (1 chain) and a warp's own issue interval
// (8 chains), in SM clocks (cycles: thread 0's clock64 around the loop).
template <bool kB1, int kChains>
__global__ void mma_rate_kernel(int iters, int* sink, long long* cycles) {
  int acc[kChains][4] = {};
  const uint32_t a0 = threadIdx.x * 0x9E3779B9u, a1 = a0 ^ 0x55555555u, b = a0 * 3u;
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (kB1) {
        asm volatile(
            "mma.sync.aligned.m16n8k128.row.col.s32.b1.b1.s32.and.popc {%0,%1,%2,%3}, {%4,%5}, "
            "{%6}, {%0,%1,%2,%3};"
            : "+r"(acc[c][0]), "+r"(acc[c][1]), "+r"(acc[c][2]), "+r"(acc[c][3])
            : "r"(a0), "r"(a1), "r"(b));
      } else {
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+r"(acc[c][0]), "+r"(acc[c][1]), "+r"(acc[c][2]), "+r"(acc[c][3])
            : "r"(a0), "r"(a1), "r"(a0), "r"(a1), "r"(b), "r"(b));
      }
    }
  }
  int x = 0;
  for (int c = 0; c < kChains; ++c) x ^= acc[c][0] ^ acc[c][1] ^ acc[c][2] ^ acc[c][3];
  if (x == 0x2545F491) *sink = x;
  if (cycles != nullptr && threadIdx.x == 0) *cycles = clock64() - t0;
}

void print_mma_rates(Timer& timer) {
  const cudaStream_t s = timer.s;
  int dev = 0, sms = 0, khz = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
  DeviceBuffer sink(sizeof(int));
  constexpr int kIters = 1024, kThreads = 256, kPerSm = 4;
  const auto rate = [&](auto kernel, const char* name, double weights_per_mma) {
    const double us = timer.plain_us([&](int) {
      kernel<<<sms * kPerSm, kThreads, 0, s>>>(kIters, sink.as<int>(), nullptr);
      CUDA_CHECK_LAUNCH();
    });
    const double mmas = double(sms) * kPerSm * (kThreads / 32) * kIters * 8;
    const double per_s = mmas / (us * 1e-6);
    fmt::print(
        "  {:<22} {:8.1f} G mma/s = {:.3f} per SM per clock ({} MHz) -> {:.1f} T weights/s "
        "(4.6 TB/s of Q1_0 is 33 T/s)\n",
        name, per_s / 1e9, per_s / sms / (khz * 1e3), khz / 1000, per_s * weights_per_mma / 1e12);
  };
  DeviceBuffer cycles(sizeof(long long));
  const auto one_warp = [&](auto kernel, int chains) {
    kernel<<<1, 32, 0, s>>>(kIters, sink.as<int>(), cycles.as<long long>());
    CUDA_CHECK_LAUNCH();
    long long c = 0;
    CUDA_CHECK(cudaMemcpyAsync(&c, cycles.get(), sizeof c, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return double(c) / (double(kIters) * chains);
  };
  fmt::print("tensor-core rates:\n");
  rate(mma_rate_kernel<true, 8>, "b1 m16n8k128 and.popc", 16.0 * 128);
  rate(mma_rate_kernel<false, 8>, "s8 m16n8k32", 16.0 * 32);
  fmt::print(
      "  one warp alone, clocks per mma: b1 {:.1f} dependent, {:.1f} with 8 chains; s8 {:.1f} "
      "dependent, {:.1f} with 8 chains\n",
      one_warp(mma_rate_kernel<true, 1>, 1), one_warp(mma_rate_kernel<true, 8>, 8),
      one_warp(mma_rate_kernel<false, 1>, 1), one_warp(mma_rate_kernel<false, 8>, 8));
}

// Launches one-launch GEMV number `copy` (of rotated weight copies) with this trace (null:
// untraced); returns its grid (mm::q1_0_gemv_traced).
using TracedLaunch = std::function<unsigned(int copy, uint64_t* trace)>;

// The timeline of two back-to-back one-launch GEMVs A and B (B launched with PDL behind A,
// both behind an untraced one), on rotated copies: per event, the earliest / median / latest
// CTA in us from A's first CTA entry. Shows when weights arrive, what the prologue and each
// slot cost, and how far B overlaps A.
void print_timeline(const std::string& name, const TracedLaunch& launch, cudaStream_t s) {
  constexpr int kE = mm::kGemvTraceEvents;
  constexpr unsigned kMaxGrid = 1024;                   // CTAs a trace buffer holds (checked below)
  const size_t per_launch = 2 * size_t(kMaxGrid) * kE;  // ns, then clocks
  DeviceBuffer trace(2 * per_launch * sizeof(uint64_t));  // A, B
  CUDA_CHECK(cudaMemsetAsync(trace.get(), 0, trace.bytes(), s));
  // The grid, from an untraced launch, before any trace is written.
  const unsigned grid = launch(0, nullptr);
  if (grid > kMaxGrid) {
    fmt::print("  timeline {}: {} CTAs exceed the trace buffer's {}, skipped\n", name, grid,
               kMaxGrid);
    return;
  }
  launch(1, trace.as<uint64_t>());
  launch(2, trace.as<uint64_t>() + per_launch);
  std::vector<uint64_t> t(2 * per_launch);
  CUDA_CHECK(cudaMemcpyAsync(t.data(), trace.get(), trace.bytes(), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  uint64_t t0 = UINT64_MAX;
  for (unsigned c = 0; c < grid; ++c) t0 = std::min(t0, t[c * kE] ? t[c * kE] : UINT64_MAX);
  fmt::print("  timeline {} ({} CTAs; us from A's first entry: min / median / max over CTAs)\n",
             name, grid);
  for (int k = 0; k < 2; ++k) {
    for (int e = 0; e < kE; ++e) {
      std::vector<double> us;
      for (unsigned c = 0; c < grid; ++c) {
        const uint64_t at = t[k * per_launch + c * kE + e];
        if (at != 0) us.push_back((double(at) - double(t0)) / 1e3);
      }
      if (us.empty()) continue;
      std::sort(us.begin(), us.end());
      const std::string name = mm::q1_0_trace_event(e);
      fmt::print("    {} {:<24} {:7.2f} {:7.2f} {:7.2f}  ({} CTAs)\n", k ? "B" : "A", name,
                 us.front(), us[us.size() / 2], us.back(), us.size());
    }
  }
  // The SM clock while A ran: its CTAs' clock64 ticks over globaltimer ns, entry to exit.
  std::vector<double> ghz;
  for (unsigned c = 0; c < grid; ++c) {
    const uint64_t* ns = &t[c * kE];
    const uint64_t* clk = &t[(grid + c) * kE];
    if (ns[0] != 0 && ns[kE - 1] > ns[0]) {
      ghz.push_back(double(clk[kE - 1] - clk[0]) / double(ns[kE - 1] - ns[0]));
    }
  }
  if (!ghz.empty()) {
    std::sort(ghz.begin(), ghz.end());
    fmt::print("    A SM clock {:.2f} / {:.2f} / {:.2f} GHz\n", ghz.front(), ghz[ghz.size() / 2],
               ghz.back());
  }
}

// Median graph µs of launch(i, hot) on rotated weight copies ([0]) and on weights hot in L2
// ([1]: launch uses one copy), the two alternating over four rounds.
std::array<double, 2> rotated_and_hot_us(Timer& timer,
                                         const std::function<void(int, bool)>& launch) {
  std::vector<double> us[2];
  for (int round = 0; round < 4; ++round) {
    const bool hot = round % 2 == 1;
    us[hot].push_back(timer.graph_us([&](int i) { launch(i, hot); }));
  }
  return {median(us[0]), median(us[1])};
}

// matmul_fused's one-token GEMV (the decode default) on rotated copies (weights from DRAM)
// and on one copy (weights hot in L2): how much of its time is waiting for DRAM. Measured
// 2026-11-30: 7.45 / 7.37 us at 5120->10240, so its time goes inside the kernel, not to DRAM.
void print_hot(const std::vector<GpuMatrix>& copies, const float* x, float* y, double ceiling_us,
               Timer& timer) {
  const size_t n = copies.size();
  const std::array<double, 2> us = rotated_and_hot_us(timer, [&](int i, bool hot) {
    matmul_fused(plain_gemv(copies[hot ? 0 : size_t(i) % n], x, y), timer.s);
  });
  const char* names[] = {"rotated", "hot in L2"};
  for (int m = 0; m < 2; ++m) {
    fmt::print("  gemv  {:<10} graph {:8.2f} us  {:5.1f}% read\n", names[m], us[m],
               100 * ceiling_us / us[m]);
  }
}

// The decode step's fused GEMVs on Bonsai-27B shapes with their prologues and epilogues, the
// codes hand-off from gate+up to ffn_down included: where each one's time goes (the decode
// timeline gives only whole steps), and each one timed on weights rotated beyond L2 and on
// weights hot in L2. The difference bounds what weights already in L2 could save; asking L2
// for them a step early lost far more than that (bench/RESULTS.md, 2026-12-02). Random
// inputs: values are checked by gdn ops, not here.
void print_fused_timelines(Timer& timer) {
  const cudaStream_t s = timer.s;
  fmt::print("\nfused decode GEMVs, Bonsai-27B shapes\n");
  const auto mats = [&](int64_t n_in, int64_t n_out) {
    const double bytes = double(quant::row_bytes(quant::Type::Q1_0, n_in)) * double(n_out);
    const int n_copies = std::max(3, static_cast<int>(std::ceil(kRotateBytes / bytes)) + 1);
    return upload_copies(random_q1_0(n_in, n_out, 99 + n_in + n_out), n_in, n_out, n_copies, s);
  };
  const std::vector<GpuMatrix> gate = mats(5120, 17408), up = mats(5120, 17408),
                               down = mats(17408, 5120), ssm_out = mats(6144, 5120),
                               qkv = mats(5120, 10240), z = mats(5120, 6144);
  std::mt19937 rng(7);
  std::vector<DeviceBuffer> held;
  const auto random_device = [&](int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = dist(rng);
    held.emplace_back(v.size() * sizeof(float));
    CUDA_CHECK(cudaMemcpyAsync(held.back().get(), v.data(), held.back().bytes(),
                               cudaMemcpyHostToDevice, s));
    return held.back().as<float>();
  };
  float *x = random_device(5120, -1, 1), *o = random_device(6144, -1, 1),
        *g = random_device(6144, -1, 1), *norm = random_device(5120, 0.5f, 1.5f),
        *res = random_device(5120, -1, 1), *mid = random_device(17408, -1, 1),
        *yq = random_device(10240, -1, 1), *yz = random_device(6144, -1, 1);
  constexpr size_t kBlocks = 17408 / 128;  // of gate+up's output, handed to ffn_down as codes
  DeviceBuffer act(kBlocks * 32 * sizeof(uint32_t)), meta(kBlocks * 8);

  struct Case {
    const char* name;
    FusedGemv f;
    const std::vector<GpuMatrix>* w[2];
  };
  const auto fused = [&](Prologue p, Epilogue e, const float* in, int n, float* y0, float* y1) {
    FusedGemv f;
    f.prologue = p;
    f.epilogue = e;
    f.x = in;
    f.n = n;
    f.y[0] = y0;
    f.y[1] = y1;
    f.eps = 1e-6f;
    return f;
  };
  Case ssm{"ssm_out head-norm*gate + add",
           fused(Prologue::HeadRmsNormMulGate, Epilogue::AddInto, o, 1, res, nullptr),
           {&ssm_out, nullptr}};
  ssm.f.gate = g;
  ssm.f.norm = norm;
  ssm.f.head_dim = 128;
  Case qz{"qkv+z rms + store", fused(Prologue::RmsNorm, Epilogue::Store, x, 2, yq, yz), {&qkv, &z}};
  qz.f.norm = norm;
  Case gu{"gate+up rms + silu*up, codes out",
          fused(Prologue::RmsNorm, Epilogue::SiluMulPair, x, 2, mid, nullptr),
          {&gate, &up}};
  gu.f.norm = norm;
  gu.f.codes_act = act.as<uint32_t>();
  gu.f.codes_meta = meta.get();
  gu.f.codes_out = true;
  Case dn{"ffn_down + add, all quantised",
          fused(Prologue::None, Epilogue::AddInto, mid, 1, res, nullptr),
          {&down, nullptr}};
  Case dn_codes = dn;
  dn_codes.name = "ffn_down + add, codes in";
  dn_codes.f.codes_act = act.as<uint32_t>();
  dn_codes.f.codes_meta = meta.get();
  // Case c's GEMV on weight copy i (hot: always copy 0).
  const auto on_copy = [](const Case& c, int i, bool hot = false) {
    FusedGemv f = c.f;
    for (int m = 0; m < f.n; ++m) f.w[m] = &(*c.w[m])[hot ? 0 : size_t(i) % c.w[m]->size()];
    return f;
  };
  dn_codes.f.codes_in_blocks = q1_codes_out_blocks(on_copy(gu, 0));  // gu runs first
  for (const Case* c : {&ssm, &qz, &gu, &dn, &dn_codes}) {
    const mm::Q1Options o = mm::q1_default_options((*c->w[0])[0].n_in, 0);
    for (bool hot : {false, true}) {
      print_timeline(
          fmt::format("{}{}", c->name, hot ? " (hot in L2)" : ""),
          [&](int i, uint64_t* trace) {
            return mm::q1_0_gemv_traced(on_copy(*c, i, hot), o, trace, s);
          },
          s);
    }
    const std::array<double, 2> us =
        rotated_and_hot_us(timer, [&](int i, bool hot) { matmul_fused(on_copy(*c, i, hot), s); });
    fmt::print("  gemv  {:<36} graph {:8.2f} us rotated, {:8.2f} us hot in L2\n", c->name, us[0],
               us[1]);
  }
}

// The decode's qkv step as the executor runs it, rotated beyond L2: the Q1_0 qkv+z GEMV (conv
// epilogue, z through SiLU) with the BF16 beta and alpha rows either as a second launch on a
// side stream (forked and joined inside the graph, its SMs left spare by the main launch) or
// folded into the Q1_0 launch (FusedGemv::fold_*). The outputs must be the same bits: returns
// 1 (a failed check) where they are not or the fold is refused.
int print_fold(Timer& timer) {
  const cudaStream_t s = timer.s;
  fmt::print("\nqkv step: beta+alpha beside (side stream) or folded into the Q1_0 launch\n");
  const auto q1 = [&](int64_t n_out) {
    const double bytes = double(quant::row_bytes(quant::Type::Q1_0, 5120)) * double(n_out);
    const int n_copies = std::max(3, static_cast<int>(std::ceil(kRotateBytes / bytes)) + 1);
    return upload_copies(random_q1_0(5120, n_out, 5 + n_out), 5120, n_out, n_copies, s);
  };
  const std::vector<GpuMatrix> qkv = q1(10240), z = q1(6144);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const auto bf16 = [&](int64_t n_out) {  // random BF16 rows, two copies (1 MB together)
    std::vector<uint16_t> host(static_cast<size_t>(5120 * n_out));
    for (uint16_t& v : host) {
      const float f = dist(rng);
      uint32_t u;
      std::memcpy(&u, &f, sizeof u);
      v = static_cast<uint16_t>(u >> 16);
    }
    model::Matrix view;
    view.name = fmt::format("bf16 5120->{}", n_out);
    view.type = quant::Type::BF16;
    view.n_in = 5120;
    view.n_out = n_out;
    view.row_bytes = 5120 * 2;
    view.data = reinterpret_cast<const uint8_t*>(host.data());
    std::vector<GpuMatrix> c;
    for (int k = 0; k < 2; ++k) c.push_back(upload_matrix(view, s));
    return c;
  };
  const std::vector<GpuMatrix> beta = bf16(48), alpha = bf16(48);
  std::vector<DeviceBuffer> held;
  const auto buffer = [&](int64_t n, float lo, float hi) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = lo + (hi - lo) * (dist(rng) + 1.0f) / 2.0f;
    held.emplace_back(v.size() * sizeof(float));
    CUDA_CHECK(cudaMemcpyAsync(held.back().get(), v.data(), held.back().bytes(),
                               cudaMemcpyHostToDevice, s));
    return held.back().as<float>();
  };
  const float *x = buffer(5120, -1, 1), *norm = buffer(5120, 0.5f, 1.5f),
              *conv_w = buffer(4 * 10240, -1, 1), *state0 = buffer(3 * 10240, -1, 1);
  float* state = buffer(3 * 10240, -1, 1);
  // Outputs [2 ways][qkv, z, beta, alpha].
  std::vector<std::vector<float*>> y(2);
  for (auto& w : y) {
    for (int64_t n : {10240, 6144, 48, 48}) w.push_back(buffer(n, 0, 0));
  }
  cudaStream_t side;
  CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  const auto family = [&](const std::vector<GpuMatrix>& a, const std::vector<GpuMatrix>& b,
                          float* ya, float* yb, int i) {
    FusedGemv f;
    f.prologue = Prologue::RmsNorm;
    f.x = x;
    f.norm = norm;
    f.eps = 1e-6f;
    f.n = 2;
    f.w[0] = &a[size_t(i) % a.size()];
    f.w[1] = &b[size_t(i) % b.size()];
    f.y[0] = ya;
    f.y[1] = yb;
    return f;
  };
  const auto main_family = [&](int way, int i) {
    FusedGemv f = family(qkv, z, y[way][0], y[way][1], i);
    f.epilogue = Epilogue::ConvSilu;
    f.conv_w = conv_w;
    f.conv_state = state;
    f.conv_kernel = 4;
    f.silu_mat = 1;
    return f;
  };
  const auto launch = [&](int way, int i) {
    const FusedGemv side_f = family(beta, alpha, y[way][2], y[way][3], i);
    FusedGemv main_f = main_family(way, i);
    if (way == 1) {
      main_f.spare_sms = static_cast<int>(beta[0].n_row_tiles + alpha[0].n_row_tiles);
      matmul_fused(with_fold(main_f, side_f), s);
      return;
    }
    CUDA_CHECK(cudaEventRecord(fork, s));
    CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
    main_f.spare_sms = static_cast<int>(matmul_fused(side_f, side));
    CUDA_CHECK(cudaEventRecord(join, side));
    matmul_fused(main_f, s);
    CUDA_CHECK(cudaStreamWaitEvent(s, join, 0));
  };
  FusedGemv asked = main_family(1, 0);  // with the SMs the launch leaves spare, as it runs
  asked.spare_sms = static_cast<int>(beta[0].n_row_tiles + alpha[0].n_row_tiles);
  const std::string why = q1_fold_refusal(asked, family(beta, alpha, y[1][2], y[1][3], 0));
  bool ok = why.empty();
  if (!ok) {
    fmt::print("  fold refused: {}\n", why);
  } else {
    // Bits first, then time in rotated order. Compared: the four outputs (poisoned with a
    // pattern of each way's own, so a float neither way writes differs too) and the conv state
    // after the step (equal before it).
    std::vector<std::vector<float>> out(2);
    const size_t sizes[5] = {10240, 6144, 48, 48, 3 * 10240};
    for (int way = 0; way < 2; ++way) {
      CUDA_CHECK(
          cudaMemcpyAsync(state, state0, 3 * 10240 * sizeof(float), cudaMemcpyDeviceToDevice, s));
      for (int k = 0; k < 4; ++k) {
        CUDA_CHECK(cudaMemsetAsync(y[way][size_t(k)], way == 0 ? 0xff : 0xfe,
                                   sizes[k] * sizeof(float), s));
      }
      launch(way, 0);
      for (int k = 0; k < 5; ++k) {
        std::vector<float> v(sizes[k]);
        CUDA_CHECK(cudaMemcpyAsync(v.data(), k < 4 ? y[way][size_t(k)] : state,
                                   sizes[k] * sizeof(float), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        out[way].insert(out[way].end(), v.begin(), v.end());
      }
    }
    ok = std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)) == 0;
    std::vector<double> us[2];
    for (int round = 0; round < 4; ++round) {
      for (int k = 0; k < 2; ++k) {
        const int way = (k + round) % 2;
        us[way].push_back(timer.graph_us([&](int i) { launch(way, i); }));
      }
    }
    fmt::print("  qkv step  side launch {:8.2f} us  folded {:8.2f} us  outputs {}\n", median(us[0]),
               median(us[1]), ok ? "bit-identical" : "DIFFER");
  }
  CUDA_CHECK(cudaEventDestroy(fork));
  CUDA_CHECK(cudaEventDestroy(join));
  CUDA_CHECK(cudaStreamDestroy(side));
  return ok ? 0 : 1;
}

// Batched products (prefill): the b1 product matmul() ran before the int8 one (q1_default_options
// for one token, two launches) against kImma, product kernel alone after its quantise kernel,
// weights rotated beyond L2, and how far apart their outputs are (both sum exact block integers
// in block order; only the b1 kernel's lane and slice sums differ). Sets imma_wins. Then kImmaPairs
// (two token groups' mma chains at once), which must give kImma's bits. Returns the failed checks
// (pairs that differ).
int print_batched(Timer& timer) {
  const cudaStream_t s = timer.s;
  int failures = 0;
  fmt::print("\nbatched product alone (us; b1 = matmul()'s product before kImma):\n");
  fmt::print("{:<14} {:>6} {:>10} {:>10} {:>7} {:>10} {:>9} {:>10} {}\n", "shape", "tokens", "b1",
             "imma", "b1/imma", "imma TMAC/s", "max|diff|", "pairs", "pairs bits");
  const std::pair<int64_t, int64_t> shapes[] = {
      {5120, 17408}, {17408, 5120}, {5120, 10240}, {6144, 5120}};
  for (const auto& nm : shapes) {
    const int64_t n_in = nm.first, n_out = nm.second;
    const auto host = random_q1_0(n_in, n_out, 99 + n_out);
    const double wbytes = double(quant::row_bytes(quant::Type::Q1_0, n_in)) * double(n_out);
    const int n_copies = static_cast<int>(std::ceil(kRotateBytes / wbytes)) + 1;
    const std::vector<GpuMatrix> copies = upload_copies(host, n_in, n_out, n_copies, s);
    for (const int64_t T : {8, 16, 32, 64, 128, 512}) {
      std::mt19937 rng(static_cast<uint32_t>(T * 7 + n_in));
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(T * n_in));
      for (float& v : x) v = dist(rng);
      DeviceBuffer dx(x.size() * sizeof(float)), dy(static_cast<size_t>(T * n_out) * sizeof(float));
      CUDA_CHECK(cudaMemcpyAsync(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice, s));
      mm::Q1Options b1 = mm::q1_default_options(n_in, n_out);
      b1.one_launch = false;
      mm::Q1Options imma, pairs;
      imma.variant = mm::Q1Variant::kImma;
      pairs.variant = mm::Q1Variant::kImmaPairs;
      double us[3];
      std::vector<float> y[3];
      for (int v = 0; v < 3; ++v) {
        const mm::Q1Options& o = v == 0 ? b1 : v == 1 ? imma : pairs;
        DeviceBuffer act(mm::q1_0_workspace_bytes(n_in, T));
        // A poison pattern of its own: a float this variant does not write differs from the others.
        CUDA_CHECK(cudaMemsetAsync(dy.get(), 0xfd + v, dy.bytes(), s));
        mm::q1_0_quantize(copies[0], dx.as<float>(), n_in, T, act.get(), o.variant, s);
        us[v] = timer.graph_us([&](int i) {
          mm::q1_0_product(copies[static_cast<size_t>(i) % copies.size()], act.get(),
                           dy.as<float>(), n_out, T, o, s);
        });
        y[v].resize(static_cast<size_t>(T * n_out));
        CUDA_CHECK(cudaMemcpyAsync(y[v].data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
      }
      double diff = 0, max_ref = 0;
      for (size_t i = 0; i < y[0].size(); ++i) {
        diff = std::max(diff, double(std::fabs(y[0][i] - y[1][i])));
        max_ref = std::max(max_ref, double(std::fabs(y[0][i])));
      }
      const bool same = std::memcmp(y[1].data(), y[2].data(), y[1].size() * sizeof(float)) == 0;
      failures += !same;
      fmt::print("{:<14} {:>6} {:>10.2f} {:>10.2f} {:>7.2f} {:>10.1f} {:>9.1e} {:>10.2f} {}\n",
                 fmt::format("{}->{}", n_in, n_out), T, us[0], us[1], us[0] / us[1],
                 double(n_in) * double(n_out) * double(T) / us[1] / 1e6, diff / max_ref, us[2],
                 same ? "same" : "DIFFER");
    }
  }
  return failures;
}

int run() {
  CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  fmt::print("device: {}\n", describe_device());
  const double copy_bw = measure_copy_bandwidth(s);
  fmt::print("copy bandwidth: {:.0f} GB/s (read + write)\n", copy_bw / 1e9);
  Timer timer(s);
  print_mma_rates(timer);
  int failures = print_batched(timer);

  std::vector<Variant> variants;
  for (auto v : {mm::Q1Variant::kBmma2, mm::Q1Variant::kBmma2Flat, mm::Q1Variant::kBmma4,
                 mm::Q1Variant::kBmma4Flat, mm::Q1Variant::kDp4a2}) {
    for (bool pdl : {true, false}) {
      if (!pdl && v != mm::Q1Variant::kBmma2 && v != mm::Q1Variant::kBmma2Flat) continue;
      mm::Q1Options o;
      o.variant = v;
      o.pdl = pdl;
      variants.push_back({o, fmt::format("{}{}", mm::q1_variant_name(v), pdl ? "" : " nopdl")});
    }
    if (v == mm::Q1Variant::kBmma2 || v == mm::Q1Variant::kBmma4) {  // quantise inside the GEMV
      mm::Q1Options o;
      o.variant = v;
      o.one_launch = true;
      variants.push_back({o, fmt::format("{} 1-launch", mm::q1_variant_name(v))});
    }
  }

  const std::pair<int64_t, int64_t> shapes[] = {{5120, 10240}, {5120, 6144},  {5120, 17408},
                                                {6144, 5120},  {17408, 5120}, {5120, 248320}};
  std::vector<Row> rows;
  for (const auto& nm : shapes) {
    const int64_t n_in = nm.first, n_out = nm.second;
    const std::string shape = fmt::format("{}->{}", n_in, n_out);
    const auto host = random_q1_0(n_in, n_out, 1234 + n_out);
    const double wbytes = double(quant::row_bytes(quant::Type::Q1_0, n_in)) * double(n_out);
    const int n_copies = static_cast<int>(std::ceil(kRotateBytes / wbytes)) + 1;
    const std::vector<GpuMatrix> copies = upload_copies(host, n_in, n_out, n_copies, s);
    const double bytes = double(copies[0].device_bytes()) + 4.0 * double(n_in + n_out);

    std::mt19937 rng(static_cast<uint32_t>(n_in * 31 + n_out));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n_in));
    for (float& v : x) v = dist(rng);
    const std::vector<float> ref = reference(host, x, n_in, n_out);
    double max_ref = 0;
    for (float v : ref) max_ref = std::max(max_ref, double(std::fabs(v)));

    DeviceBuffer dx(x.size() * sizeof(float)), dy(ref.size() * sizeof(float));
    CUDA_CHECK(cudaMemcpyAsync(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice, s));
    MatmulWorkspace ws;
    ws.reserve(n_in, 1);
    void* act = ws.get(mm::q1_0_workspace_bytes(n_in, 1), s);

    const ReadCeiling ceiling = measure_read_ceiling(bytes, s);
    fmt::print(
        "\n{}: {:.2f} MB, {} copies; read ceiling {:.2f} us ({:.0f} GB/s, {} CTAs/SM x "
        "threads)\n",
        shape, bytes / 1e6, n_copies, ceiling.us, bytes / ceiling.us / 1e3, ceiling.config);

    // Correctness first: every variant against the CPU, twice (bit-identical runs).
    std::vector<bool> ok(variants.size());
    std::vector<double> err(variants.size());
    for (size_t v = 0; v < variants.size(); ++v) {
      std::vector<float> y1(ref.size()), y2(ref.size());
      for (auto* y : {&y1, &y2}) {
        CUDA_CHECK(cudaMemsetAsync(dy.get(), 0xff, dy.bytes(), s));
        mm::matmul_q1_0(copies[0], dx.as<float>(), n_in, dy.as<float>(), n_out, 1, ws,
                        variants[v].o, s);
        CUDA_CHECK(cudaMemcpyAsync(y->data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
      }
      double e = 0;
      bool finite = true;
      for (size_t i = 0; i < ref.size(); ++i) {
        finite = finite && std::isfinite(y1[i]);
        e = std::max(e, double(std::fabs(y1[i] - ref[i])));
      }
      err[v] = finite ? e / max_ref : INFINITY;
      const bool same = std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)) == 0;
      ok[v] = finite && err[v] <= 2e-5 && same;
      failures += !ok[v];
      fmt::print("  check {:<18} max|err|/max|ref| {:.2e}  deterministic {}  {}  [{}]\n",
                 variants[v].name, err[v], same ? "yes" : "NO", ok[v] ? "ok" : "FAIL",
                 mm::q1_0_describe(copies[0], 1, variants[v].o));
    }

    for (const Variant& v : variants) {
      if (!v.o.one_launch) continue;
      print_timeline(
          v.name,
          [&](int i, uint64_t* trace) {
            return mm::q1_0_gemv_traced(
                plain_gemv(copies[size_t(i) % copies.size()], dx.as<float>(), dy.as<float>()), v.o,
                trace, s);
          },
          s);
    }

    // Timing, rotated order.
    const size_t nv = variants.size();
    std::vector<std::vector<double>> g_us(nv), p_us(nv), k_us(nv);
    for (size_t round = 0; round < nv; ++round) {
      for (size_t j = 0; j < nv; ++j) {
        const size_t v = (round + j) % nv;
        const auto full = [&](int i) {
          mm::matmul_q1_0(copies[i % copies.size()], dx.as<float>(), n_in, dy.as<float>(), n_out, 1,
                          ws, variants[v].o, s);
        };
        g_us[v].push_back(timer.graph_us(full));
        p_us[v].push_back(timer.plain_us(full));
        mm::q1_0_quantize(copies[0], dx.as<float>(), n_in, 1, act, variants[v].o.variant, s);
        k_us[v].push_back(timer.graph_us([&](int i) {
          mm::q1_0_product(copies[i % copies.size()], act, dy.as<float>(), n_out, 1, variants[v].o,
                           s);
        }));
      }
    }
    print_hot(copies, dx.as<float>(), dy.as<float>(), ceiling.us, timer);
    for (size_t v = 0; v < nv; ++v) {
      Row r{shape,      variants[v].name, bytes, median(g_us[v]), median(p_us[v]), median(k_us[v]),
            ceiling.us, err[v],           ok[v]};
      fmt::print(
          "  time  {:<18} graph {:8.2f} us  {:6.0f} GB/s  {:5.1f}% copy  {:5.1f}% read | "
          "plain {:8.2f} us | product only {:8.2f} us (spread {:.2f}-{:.2f})\n",
          r.variant, r.us, bytes / r.us / 1e3, 100 * bytes / r.us / 1e-6 / copy_bw,
          100 * ceiling.us / r.us, r.plain_us, r.product_us,
          *std::min_element(g_us[v].begin(), g_us[v].end()),
          *std::max_element(g_us[v].begin(), g_us[v].end()));
      rows.push_back(r);
    }
  }

  print_fused_timelines(timer);
  failures += print_fold(timer);

  fmt::print(
      "\n== summary (copy {:.0f} GB/s; us per matmul inside a graph of {}; targets: head "
      ">= 80% copy, layers >= 85% read) ==\n",
      copy_bw / 1e9, kGraphLaunches);
  fmt::print("{:<14} {:<18} {:>7} {:>8} {:>7} {:>6} {:>6} {:>8} {:>8} {:>8} {}\n", "shape",
             "variant", "MB", "us", "GB/s", "%copy", "%read", "plain", "product", "ceil-us",
             "check");
  for (const Row& r : rows) {
    fmt::print(
        "{:<14} {:<18} {:>7.2f} {:>8.2f} {:>7.0f} {:>5.1f}% {:>5.1f}% {:>8.2f} {:>8.2f} "
        "{:>8.2f} {}\n",
        r.shape, r.variant, r.bytes / 1e6, r.us, r.bytes / r.us / 1e3,
        100 * r.bytes / r.us / 1e-6 / copy_bw, 100 * r.ceiling_us / r.us, r.plain_us, r.product_us,
        r.ceiling_us, r.ok ? "ok" : fmt::format("FAIL {:.1e}", r.err));
  }
  fmt::print("{} variant checks failed\n", failures);
  CUDA_CHECK(cudaStreamDestroy(s));
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gdn::cuda

int main() {
  return gdn::bench::lab_main("gemv_lab", gdn::cuda::run);
}
