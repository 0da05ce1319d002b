// The GEMV-chain lab: can one persistent kernel that streams the next steps' weights while it
// finishes the current step (the megakernel of DESIGN.md §4) run a decode's chain of Q1_0
// GEMVs much faster than a kernel per GEMV?
//
// The chain: the four Q1_0 GEMVs of a Bonsai-27B GDN layer, plain (no norms, no epilogues),
// each step's x the first n_in floats of the step before's y:
//   qkv+z 5120 -> 16384, ssm_out 6144 -> 5120, gate+up 5120 -> 34816, ffn_down 17408 -> 5120,
// kLayers times over kWeightSets distinct weight sets (215 MB, beyond the 60 MB L2). Scales
// near 1/sqrt(n_in) keep the values in range over the whole chain.
//
//   launches   every step matmul_fused(plain_gemv) (the decode's one-launch GEMV), PDL, all
//              steps in one CUDA graph (what the executor runs)
//   chain k    mm::Q1Chain: one cooperative kernel for every step (matmul_q1_0.cu), with the
//              options of kChainOptions (x staged or from L2, warp or team tiles, the
//              producer held while x is read, stream-only)
// Each chain that computes is checked first: every y of every step bit-identical to the
// launches. Then all are timed in rotated rounds (median of replays), and each chain once more
// with its timeline: per layer step, medians over CTAs and layers, of the wait at the grid
// barrier, the prologue, the tiles, the signal, the step's span and how far ahead the producer
// had issued the step's tiles. Output: lines per measurement, the summary table last.
// Measured (H200, 2026-12-03, five calls, bench/RESULTS.md): launches 7.99-8.02 µs a step,
// chains 7.33-10.77 (7.33-7.48 with the producer held), stream-only 4.56-5.15.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/matmul.cuh"
#include "cuda/q1_chain.h"
#include "cuda/read_ceiling.h"
#include "lab_main.h"

namespace gdn::cuda {
namespace {

using bench::median;

constexpr int kLayers = 64;
constexpr int kWeightSets = 4;
constexpr int kReplays = 9;
// The chain variants (Q1ChainOptions), each checked and timed beside the launches.
// {direct_x, release_add, stream_only, warp_tiles, hold_producer}
constexpr mm::Q1ChainOptions kChainOptions[] = {{true, true, false, true, false},
                                                {true, true, false, true, true},
                                                {true, true, false, false, true},
                                                {false, true, false, true, true},
                                                {true, true, true, true, false}};
const char* const kChainNames[] = {"x from L2, warp tiles", "x from L2, warp tiles, producer held",
                                   "x from L2, team tiles, producer held",
                                   "x staged, warp tiles, producer held",
                                   "stream only, warp tiles (timing only)"};

struct Shape {
  const char* name;
  int n_in, n_out;
};
constexpr Shape kLayer[] = {{"qkv+z", 5120, 16384},
                            {"ssm_out", 6144, 5120},
                            {"gate+up", 5120, 34816},
                            {"ffn_down", 17408, 5120}};
constexpr int kShapes = 4;

__device__ uint32_t hash32(uint64_t i, uint32_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint32_t>(x >> 16);
}

// Random sign bits, and fp16 scales in [0.5, 1.5) / sqrt(n_in): any such block is valid Q1_0.
__global__ void fill_q1_kernel(uint32_t* bits, size_t n_words, __half* scales, size_t n_scales,
                               float scale, uint32_t seed) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_words; i += stride)
    bits[i] = hash32(i, seed);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_scales; i += stride)
    scales[i] = __float2half(scale * (0.5f + float(hash32(i, seed ^ 0x5bd1e995u) >> 8) * 0x1p-24f));
}

GpuMatrix random_q1(const Shape& sh, uint32_t seed, cudaStream_t s) {
  GpuMatrix w;
  w.name = fmt::format("{} {}->{}", sh.name, sh.n_in, sh.n_out);
  w.type = quant::Type::Q1_0;
  w.n_in = sh.n_in;
  w.n_out = sh.n_out;
  w.n_row_tiles = (sh.n_out + 15) / 16;
  w.n_col_tiles = (sh.n_in + 511) / 512;
  w.codes = DeviceBuffer(size_t(w.n_row_tiles * w.n_col_tiles) * 1024);
  w.scales = DeviceBuffer(size_t(w.n_row_tiles * w.n_col_tiles) * 128);
  fill_q1_kernel<<<1024, 256, 0, s>>>(w.codes.as<uint32_t>(), w.codes.bytes() / 4,
                                      w.scales.as<__half>(), w.scales.bytes() / 2,
                                      1.0f / std::sqrt(float(sh.n_in)), seed);
  CUDA_CHECK_LAUNCH();
  return w;
}

struct Step {
  const GpuMatrix* w;
  int x_src;  // the step whose y is x (-1: x0)
};

class Lab {
 public:
  explicit Lab(cudaStream_t s) : s_(s) {
    for (int set = 0; set < kWeightSets; ++set)
      for (int k = 0; k < kShapes; ++k)
        weights_.push_back(random_q1(kLayer[k], uint32_t(1000 * set + k + 1), s));
    for (int l = 0; l < kLayers; ++l)
      for (int k = 0; k < kShapes; ++k)
        steps_.push_back({&weights_[size_t((l % kWeightSets) * kShapes + k)],
                          static_cast<int>(steps_.size()) - 1});
    std::vector<float> x0(kLayer[0].n_in);
    for (size_t i = 0; i < x0.size(); ++i) x0[i] = std::sin(0.37f * float(i) + 0.5f) + 0.01f;
    x0_ = DeviceBuffer(x0.size() * sizeof(float));
    CUDA_CHECK(cudaMemcpy(x0_.get(), x0.data(), x0_.bytes(), cudaMemcpyHostToDevice));
    for (int v = 0; v < 2; ++v) {
      for (const Step& st : steps_) y_[v].emplace_back(size_t(st.w->n_out) * sizeof(float));
    }
    std::vector<mm::Q1ChainStep> chain;
    for (size_t i = 0; i < steps_.size(); ++i) chain.push_back({steps_[i].w, x(1, i), y(1, i)});
    for (const mm::Q1ChainOptions& o : kChainOptions)
      chains_.push_back(std::make_unique<mm::Q1Chain>(chain, o));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }

  size_t n_steps() const { return steps_.size(); }
  size_t n_chains() const { return chains_.size(); }
  const mm::Q1Chain& chain(size_t c) const { return *chains_[c]; }
  double layer_bytes() const {
    double b = 0;
    for (int k = 0; k < kShapes; ++k) b += double(weights_[size_t(k)].device_bytes());
    return b;
  }

  void launch_step(size_t i) { matmul_fused(plain_gemv(*steps_[i].w, x(0, i), y(0, i)), s_); }

  // Every y of the launches and of chain c, bit for bit; prints the first difference.
  bool check(size_t c) {
    for (int v = 0; v < 2; ++v) {
      for (auto& b : y_[v]) CUDA_CHECK(cudaMemsetAsync(b.get(), 0xff, b.bytes(), s_));
    }
    for (size_t i = 0; i < steps_.size(); ++i) launch_step(i);
    chains_[c]->run(s_);
    CUDA_CHECK(cudaStreamSynchronize(s_));
    for (size_t i = 0; i < steps_.size(); ++i) {
      std::vector<float> a(y_[0][i].bytes() / 4), b(a.size());
      CUDA_CHECK(cudaMemcpy(a.data(), y_[0][i].get(), y_[0][i].bytes(), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(b.data(), y_[1][i].get(), y_[1][i].bytes(), cudaMemcpyDeviceToHost));
      for (size_t r = 0; r < a.size(); ++r) {
        if (std::memcmp(&a[r], &b[r], sizeof(float)) != 0 || !std::isfinite(a[r])) {
          fmt::print("check: chain {}, step {} ({}) row {}: launches {} chain {}\n", c, i,
                     steps_[i].w->name, r, a[r], b[r]);
          return false;
        }
      }
    }
    std::vector<float> last(y_[0].back().bytes() / 4);
    CUDA_CHECK(
        cudaMemcpy(last.data(), y_[0].back().get(), y_[0].back().bytes(), cudaMemcpyDeviceToHost));
    double rms = 0;
    for (float v : last) rms += double(v) * v;
    fmt::print("check: chain {}: {} steps bit-identical (last y rms {:.3g})\n", c, steps_.size(),
               std::sqrt(rms / double(last.size())));
    return true;
  }

  double launches_us_per_step() {
    return graph_us(
        s_, [&](int i) { launch_step(size_t(i)); }, static_cast<int>(steps_.size()), kReplays);
  }

  double chain_us_per_step(size_t c) {
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    chains_[c]->run(s_);
    std::vector<double> us;
    for (int r = 0; r < kReplays; ++r) {
      CUDA_CHECK(cudaEventRecord(a, s_));
      chains_[c]->run(s_);
      CUDA_CHECK(cudaEventRecord(b, s_));
      CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      us.push_back(1e3 * ms / double(steps_.size()));
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return median(us);
  }

  // The chain's timeline: trace[step][cta][event] (ns).
  std::vector<uint64_t> trace(size_t c) {
    const size_t n = steps_.size() * chains_[c]->grid() * mm::kChainTraceEvents;
    DeviceBuffer t(n * sizeof(uint64_t));
    CUDA_CHECK(cudaMemsetAsync(t.get(), 0, t.bytes(), s_));
    chains_[c]->run(s_, t.as<uint64_t>());
    std::vector<uint64_t> h(n);
    CUDA_CHECK(cudaMemcpyAsync(h.data(), t.get(), t.bytes(), cudaMemcpyDeviceToHost, s_));
    CUDA_CHECK(cudaStreamSynchronize(s_));
    return h;
  }

 private:
  const float* x(int v, size_t i) const {
    const int src = steps_[i].x_src;
    return src < 0 ? x0_.as<float>() : y_[v][size_t(src)].as<float>();
  }
  float* y(int v, size_t i) const { return y_[v][i].as<float>(); }

  cudaStream_t s_;
  std::vector<GpuMatrix> weights_;
  std::vector<Step> steps_;
  DeviceBuffer x0_;
  std::vector<DeviceBuffer> y_[2];
  std::vector<std::unique_ptr<mm::Q1Chain>> chains_;
};

// Per layer shape, medians over the layers past the first and over CTAs: µs from the step
// before's last CTA done to this CTA's wait returning, the prologue, its team's tiles, its end
// barrier and signal; the step's span (last CTA done minus the step before's last CTA done);
// how long before its own wait returned the producer had issued the step's last tile
// (negative: after).
void print_timeline(const std::vector<uint64_t>& t, size_t n_steps, unsigned grid) {
  const auto at = [&](size_t s, unsigned c, int e) {
    return double(t[(s * grid + c) * mm::kChainTraceEvents + size_t(e)]);
  };
  const auto last_done = [&](size_t s) {
    double m = 0;
    for (unsigned c = 0; c < grid; ++c) m = std::max(m, at(s, c, mm::kChainDone));
    return m;
  };
  fmt::print(
      "| step | barrier µs | prologue µs | tiles µs | signal µs | span µs | producer lead µs |\n"
      "|---|---:|---:|---:|---:|---:|---:|\n");
  for (int k = 0; k < kShapes; ++k) {
    std::vector<double> wait, pro, dots, signal, span, lead;
    for (size_t s = size_t(kShapes + k); s < n_steps; s += kShapes) {
      const double prev = last_done(s - 1);
      span.push_back((last_done(s) - prev) / 1e3);
      for (unsigned c = 0; c < grid; ++c) {
        const auto between = [&](int e0, int e1) { return (at(s, c, e1) - at(s, c, e0)) / 1e3; };
        wait.push_back((at(s, c, mm::kChainWaited) - prev) / 1e3);
        pro.push_back(between(mm::kChainWaited, mm::kChainQuantised));
        dots.push_back(between(mm::kChainQuantised, mm::kChainDots));
        signal.push_back(between(mm::kChainDots, mm::kChainDone));
        lead.push_back(between(mm::kChainIssuedAll, mm::kChainWaited));
      }
    }
    fmt::print("| {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n", kLayer[k].name,
               median(wait), median(pro), median(dots), median(signal), median(span), median(lead));
  }
}

int run() {
  if (!available()) {
    fmt::print("chain_lab: no CUDA device\n");
    return 2;
  }
  CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const double copy_bw = measure_copy_bandwidth(s);
  Lab lab(s);
  fmt::print("chain_lab on {}: {} steps ({} layers of 4 GEMVs, {} weight sets)\n",
             describe_device(), lab.n_steps(), kLayers, kWeightSets);
  fmt::print("copy bandwidth {:.0f} GB/s (read + write)\n", copy_bw / 1e9);
  for (size_t c = 0; c < lab.n_chains(); ++c) {
    fmt::print("chain {}: {}\n", c, lab.chain(c).describe());
    if (!kChainOptions[c].stream_only && !lab.check(c)) return 1;
  }
  // Rotated rounds: launches, chain 0, 1, ...; then starting one later, and so on.
  const size_t n = lab.n_chains() + 1;
  std::vector<std::vector<double>> us(n);
  for (size_t round = 0; round < n; ++round) {
    for (size_t k = 0; k < n; ++k) {
      const size_t v = (round + k) % n;
      us[v].push_back(v == 0 ? lab.launches_us_per_step() : lab.chain_us_per_step(v - 1));
    }
  }
  for (size_t c = 0; c < lab.n_chains(); ++c) {
    fmt::print("\ntimeline of chain {}\n", c);
    print_timeline(lab.trace(c), lab.n_steps(), lab.chain(c).grid());
  }
  const double layer = lab.layer_bytes();
  fmt::print(
      "\n| variant | µs a step | µs a layer | weight GB/s | % of copy "
      "|\n|---|---:|---:|---:|---:|\n");
  for (size_t v = 0; v < n; ++v) {
    const double t = median(us[v]);
    const std::string name = v == 0 ? "launches (graph, PDL)"
                                    : "chain " + std::to_string(v - 1) + ": " + kChainNames[v - 1];
    fmt::print("| {} | {:.2f} | {:.2f} | {:.0f} | {:.1f}% |\n", name, t, 4 * t,
               layer / (4 * t) / 1e3, 100.0 * layer / (4 * t * 1e-6) / copy_bw);
  }
  return 0;
}

}  // namespace
}  // namespace gdn::cuda

int main() {
  return gdn::bench::lab_main("chain_lab", gdn::cuda::run);
}
