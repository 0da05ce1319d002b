// The fused-MLP lab: does one split-K kernel per MLP (mm::Q1Mlp, src/cuda/mlp_q1_0.cu) beat
// the decode's two launches (gate+up with the RMS-norm prologue, SwiGLU epilogue and the codes
// hand-off, then ffn_down adding into the residual)?
//
// Bonsai-27B's MLP (5120 -> 2 x n_ff -> 5120), kLayers in a row over kWeightSets weight sets
// (4 x 37.5 MB, beyond the 60 MB L2), each layer's residual the one before's. n_ff = 17408 is
// Bonsai's (136 blocks of 128 on 132 SMs: four CTAs own two blocks); 16896 (132 blocks) shows
// the kernel with one block per SM.
//
// Checked first, per n_ff: one layer from the same residual by both paths: the SwiGLU vector h
// bit for bit (the fused kernel's gate and up rows follow the GEMV's order), and y within 1e-5
// of the MLP's output scale (the down sums' order differs). Then both paths are timed in
// rotated rounds (a CUDA graph of kLayers layers, median of replays), and the fused kernel once
// more with its timeline (per layer, medians over CTAs and layers past the first).
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/q1_mlp.h"
#include "cuda/read_ceiling.h"
#include "lab_main.h"
#include "lab_weights.cuh"

namespace gdn::cuda {
namespace {

constexpr int kEmbd = 5120;
constexpr int kLayers = 64;
constexpr int kWeightSets = 4;
constexpr int kReplays = 9;
constexpr int kRounds = 3;
constexpr float kEps = 1e-6f;
constexpr int kFfs[] = {17408, 16896};
// The fused kernel's variants (mm::Q1MlpCopies): gate and up copies before the wait; held
// until n is staged; gate before, up after the norm's scale.
constexpr int kFusedVariants = 3;
const char* const kFusedNames[kFusedVariants] = {
    "fused split-K MLP", "fused split-K MLP, copies held", "fused split-K MLP, up copies held"};

DeviceBuffer upload(const std::vector<float>& v) {
  DeviceBuffer b(v.size() * sizeof(float));
  CUDA_CHECK(cudaMemcpy(b.get(), v.data(), b.bytes(), cudaMemcpyHostToDevice));
  return b;
}
std::vector<float> download(const DeviceBuffer& b) {
  std::vector<float> v(b.bytes() / sizeof(float));
  CUDA_CHECK(cudaMemcpy(v.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost));
  return v;
}

struct WeightSet {
  GpuMatrix gate, up, down;
  DeviceBuffer norm;
};

class Lab {
 public:
  Lab(int n_ff, cudaStream_t s) : n_ff_(n_ff), s_(s) {
    for (int set = 0; set < kWeightSets; ++set) {
      const uint32_t seed = uint32_t(100 * set + n_ff);
      WeightSet w{bench::random_q1("gate", kEmbd, n_ff, seed + 1, s),
                  bench::random_q1("up", kEmbd, n_ff, seed + 2, s),
                  bench::random_q1("down", n_ff, kEmbd, seed + 3, s),
                  {}};
      std::vector<float> norm(kEmbd);
      for (int i = 0; i < kEmbd; ++i) norm[i] = 0.8f + 0.4f * std::fabs(std::sin(0.11f * i + set));
      w.norm = upload(norm);
      sets_.push_back(std::move(w));
    }
    x0_.resize(kEmbd);
    for (int i = 0; i < kEmbd; ++i) x0_[i] = std::sin(0.37f * float(i) + 0.5f) + 0.01f;
    for (auto& r : resid_) r = upload(x0_);
    h_ = DeviceBuffer(size_t(n_ff) * sizeof(float));
    h_fused_ = DeviceBuffer(size_t(n_ff) * sizeof(float));
    codes_act_ = DeviceBuffer(size_t(n_ff / 128) * 32 * sizeof(uint32_t));
    codes_meta_ = DeviceBuffer(size_t(n_ff / 128) * 8);
    for (int v = 0; v < kFusedVariants; ++v) {
      for (int set = 0; set < kWeightSets; ++set) {
        mm::Q1MlpArgs a = args(set, nullptr);
        a.copies = static_cast<mm::Q1MlpCopies>(v);
        mlps_[v].push_back(std::make_unique<mm::Q1Mlp>(a, s));
      }
    }
    checker_ = std::make_unique<mm::Q1Mlp>(args(0, h_fused_.as<float>()), s);
    CUDA_CHECK(cudaStreamSynchronize(s));
  }

  const mm::Q1Mlp& mlp(int v) const { return *mlps_[v][0]; }
  double layer_bytes() const {
    const WeightSet& w = sets_[0];
    return double(w.gate.device_bytes() + w.up.device_bytes() + w.down.device_bytes());
  }

  // The decode's two launches for layer l on resid_[0].
  void launch_layer(int l) {
    const WeightSet& w = sets_[size_t(l % kWeightSets)];
    FusedGemv gu;
    gu.prologue = Prologue::RmsNorm;
    gu.epilogue = Epilogue::SiluMulPair;
    gu.x = resid_[0].as<float>();
    gu.norm = w.norm.as<float>();
    gu.eps = kEps;
    gu.n = 2;
    gu.w[0] = &w.gate;
    gu.w[1] = &w.up;
    gu.y[0] = h_.as<float>();
    const int blocks = q1_codes_out_blocks(gu);
    if (blocks > 0) {
      gu.codes_act = codes_act_.as<uint32_t>();
      gu.codes_meta = codes_meta_.get();
      gu.codes_out = true;
    }
    matmul_fused(gu, s_);
    FusedGemv down = plain_gemv(w.down, h_.as<float>(), resid_[0].as<float>());
    down.epilogue = Epilogue::AddInto;
    if (blocks > 0) {
      down.codes_act = codes_act_.as<uint32_t>();
      down.codes_meta = codes_meta_.get();
      down.codes_in_blocks = blocks;
    }
    matmul_fused(down, s_);
  }
  void fused_layer(int v, int l, uint64_t* trace = nullptr) {
    mlps_[v][size_t(l % kWeightSets)]->run(s_, trace);
  }

  // One layer from x0 by both paths: h bit for bit, y within 1e-5 of the MLP output's scale.
  bool check() {
    for (auto& r : resid_) {
      CUDA_CHECK(cudaMemcpy(r.get(), x0_.data(), r.bytes(), cudaMemcpyHostToDevice));
    }
    CUDA_CHECK(cudaMemsetAsync(h_.get(), 0xff, h_.bytes(), s_));
    CUDA_CHECK(cudaMemsetAsync(h_fused_.get(), 0xff, h_fused_.bytes(), s_));
    launch_layer(0);
    checker_->run(s_);
    CUDA_CHECK(cudaStreamSynchronize(s_));
    const std::vector<float> h0 = download(h_), h1 = download(h_fused_);
    for (size_t i = 0; i < h0.size(); ++i) {
      if (std::memcmp(&h0[i], &h1[i], sizeof(float)) != 0 || !std::isfinite(h0[i])) {
        fmt::print("check n_ff {}: h[{}] launches {} fused {}\n", n_ff_, i, h0[i], h1[i]);
        return false;
      }
    }
    const std::vector<float> y0 = download(resid_[0]), y1 = download(resid_[1]);
    double scale = 0, diff = 0;
    int worst = 0;
    for (int i = 0; i < kEmbd; ++i) {
      scale = std::max(scale, std::fabs(double(y0[i]) - x0_[i]));
      const double d = std::fabs(double(y0[i]) - y1[i]);
      if (d > diff || !std::isfinite(y1[i])) {
        diff = std::isfinite(y1[i]) ? d : INFINITY;
        worst = i;
      }
    }
    const bool ok = diff <= 1e-5 * scale;
    fmt::print(
        "check n_ff {}: h bit-identical ({} values); y max|launches - fused| {:.3g} at row {} "
        "({:.3g} of the MLP output's max {:.3g}): {}\n",
        n_ff_, h0.size(), diff, worst, diff / scale, scale, ok ? "ok" : "FAILED");
    return ok;
  }

  double launches_us() {
    return graph_us(
        s_, [&](int l) { launch_layer(l); }, kLayers, kReplays);
  }
  double fused_us(int v) {
    return graph_us(
        s_, [&](int l) { fused_layer(v, l); }, kLayers, kReplays);
  }

  // kLayers fused layers with their stamps: [layer][grid][kMlpTraceEvents].
  std::vector<uint64_t> trace(int v) {
    const size_t per = size_t(mlp(v).grid()) * mm::kMlpTraceEvents;
    DeviceBuffer t(kLayers * per * sizeof(uint64_t));
    CUDA_CHECK(cudaMemsetAsync(t.get(), 0, t.bytes(), s_));
    for (int l = 0; l < kLayers; ++l) fused_layer(v, l, t.as<uint64_t>() + l * per);
    std::vector<uint64_t> h(kLayers * per);
    CUDA_CHECK(cudaMemcpyAsync(h.data(), t.get(), t.bytes(), cudaMemcpyDeviceToHost, s_));
    CUDA_CHECK(cudaStreamSynchronize(s_));
    return h;
  }

 private:
  mm::Q1MlpArgs args(int set, float* h) const {
    const WeightSet& w = sets_[size_t(set)];
    mm::Q1MlpArgs a;
    a.gate = &w.gate;
    a.up = &w.up;
    a.down = &w.down;
    a.norm = w.norm.as<float>();
    a.eps = kEps;
    a.y = resid_[1].as<float>();
    a.h = h;
    return a;
  }

  int n_ff_;
  cudaStream_t s_;
  std::vector<WeightSet> sets_;
  std::vector<float> x0_;
  DeviceBuffer resid_[2];  // launches, fused
  DeviceBuffer h_, h_fused_, codes_act_, codes_meta_;
  std::vector<std::unique_ptr<mm::Q1Mlp>> mlps_[kFusedVariants];
  std::unique_ptr<mm::Q1Mlp> checker_;
};

// Medians over CTAs and layers past the first, µs: each phase from the one before, and the
// layer's span (its last CTA done minus the layer before's).
void print_timeline(const std::vector<uint64_t>& t, unsigned grid) {
  const auto at = [&](int l, unsigned c, int e) {
    return double(t[(size_t(l) * grid + c) * mm::kMlpTraceEvents + size_t(e)]);
  };
  const auto last_done = [&](int l) {
    double m = 0;
    for (unsigned c = 0; c < grid; ++c) m = std::max(m, at(l, c, mm::kMlpDone));
    return m;
  };
  const char* names[] = {"entry",       "copies issued", "waited",          "norm scale",
                         "n staged",    "n quantised",   "gate+up rows",    "h codes",
                         "down stored", "barrier",       "partials loaded", "y added (done)"};
  std::vector<std::vector<double>> phase(mm::kMlpTraceEvents);
  std::vector<double> span;
  for (int l = 1; l < kLayers; ++l) {
    const double prev = last_done(l - 1);
    span.push_back((last_done(l) - prev) / 1e3);
    for (unsigned c = 0; c < grid; ++c) {
      phase[0].push_back((at(l, c, 0) - prev) / 1e3);
      for (int e = 1; e < mm::kMlpTraceEvents; ++e)
        phase[size_t(e)].push_back((at(l, c, e) - at(l, c, e - 1)) / 1e3);
    }
  }
  fmt::print(
      "| phase (from the one before; entry from the layer before's end) | median µs |\n"
      "|---|---:|\n");
  for (int e = 0; e < mm::kMlpTraceEvents; ++e)
    fmt::print("| {} | {:.2f} |\n", names[e], bench::median(phase[size_t(e)]));
  fmt::print("| layer span | {:.2f} |\n", bench::median(span));
}

int run() {
  if (!available()) {
    fmt::print("mlp_lab: no CUDA device\n");
    return 2;
  }
  CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const double copy_bw = measure_copy_bandwidth(s);
  fmt::print("mlp_lab on {}: {} layers, {} weight sets; copy bandwidth {:.0f} GB/s\n",
             describe_device(), kLayers, kWeightSets, copy_bw / 1e9);
  struct Row {
    int n_ff;
    const char* name;
    double us, bytes;
  };
  std::vector<Row> rows;
  bool ok = true;
  for (int n_ff : kFfs) {
    Lab lab(n_ff, s);
    for (int v = 0; v < kFusedVariants; ++v) fmt::print("{}\n", lab.mlp(v).describe());
    if (!lab.check()) {
      ok = false;
      continue;
    }
    constexpr int kVariants = 1 + kFusedVariants;  // the launches first
    std::vector<double> us[kVariants];
    for (int round = 0; round < kRounds; ++round) {
      for (int k = 0; k < kVariants; ++k) {
        const int v = (round + k) % kVariants;
        us[v].push_back(v == 0 ? lab.launches_us() : lab.fused_us(v - 1));
      }
    }
    for (int v = 0; v < kFusedVariants; ++v) {
      fmt::print("\ntimeline, n_ff {}, {}\n", n_ff, kFusedNames[v]);
      print_timeline(lab.trace(v), lab.mlp(v).grid());
    }
    for (int v = 0; v < kVariants; ++v) {
      rows.push_back({n_ff,
                      v == 0 ? "launches (gate+up, ffn_down; graph, PDL)" : kFusedNames[v - 1],
                      bench::median(us[v]), lab.layer_bytes()});
    }
  }
  fmt::print(
      "\n| n_ff | variant | µs a layer | weight GB/s | % of copy |\n|---|---|---:|---:|---:|\n");
  for (const Row& r : rows) {
    fmt::print("| {} | {} | {:.2f} | {:.0f} | {:.1f}% |\n", r.n_ff, r.name, r.us,
               r.bytes / r.us / 1e3, 100.0 * r.bytes / (r.us * 1e-6) / copy_bw);
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace gdn::cuda

int main() {
  return gdn::bench::lab_main("mlp_lab", gdn::cuda::run);
}
