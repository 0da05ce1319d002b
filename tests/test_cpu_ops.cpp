// The CPU reference kernels against their definitions, computed independently here in
// double on small random (never zero) inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "cpu/ops.h"
#include "error_of.h"
#include "quant/quant.h"

namespace gdn::cpu {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Rows rows(std::vector<float>& v, int64_t r, int64_t c) {
  return {v.data(), r, c, c};
}

TEST(CpuOps, RmsNormPerChunk) {
  std::mt19937 rng(1);
  const int64_t T = 3, C = 8, chunk = 4;
  auto x = random_vec(T * C, rng), w = random_vec(chunk, rng), y = std::vector<float>(T * C);
  rms_norm(rows(x, T, C), rows(y, T, C), w.data(), chunk, 1e-6f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c0 = 0; c0 < C; c0 += chunk) {
      double ss = 0;
      for (int64_t i = 0; i < chunk; ++i) ss += double(x[t * C + c0 + i]) * x[t * C + c0 + i];
      const double inv = 1.0 / std::sqrt(ss / chunk + 1e-6);
      for (int64_t i = 0; i < chunk; ++i) {
        EXPECT_NEAR(y[t * C + c0 + i], x[t * C + c0 + i] * inv * w[i], 1e-6);
      }
    }
  }
}

TEST(CpuOps, L2NormGivesUnitHeads) {
  std::mt19937 rng(2);
  auto x = random_vec(2 * 12, rng), y = std::vector<float>(24);
  l2_norm(rows(x, 2, 12), rows(y, 2, 12), 6, 0.0f);
  for (int h = 0; h < 4; ++h) {
    double ss = 0;
    for (int i = 0; i < 6; ++i) ss += double(y[h * 6 + i]) * y[h * 6 + i];
    EXPECT_NEAR(ss, 1.0, 1e-6);
  }
}

TEST(CpuOps, SplitHeadsTakesHalvesOfEachHead) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8}, a(4), b(4);
  split_heads(rows(x, 1, 8), rows(a, 1, 4), rows(b, 1, 4), 2);
  EXPECT_EQ(a, (std::vector<float>{1, 2, 5, 6}));
  EXPECT_EQ(b, (std::vector<float>{3, 4, 7, 8}));
}

TEST(CpuOps, ConvStepIsCausalAndCarriesState) {
  std::mt19937 rng(3);
  const int64_t T = 5, C = 3, K = 4;
  auto x = random_vec(T * C, rng), w = random_vec(C * K, rng);
  // All at once vs one token at a time must agree, and equal the explicit causal sum.
  std::vector<float> y_all(T * C), y_one(T * C), st_all((K - 1) * C, 0.0f), st_one = st_all;
  conv_step(rows(x, T, C), rows(y_all, T, C), w.data(), K, st_all.data());
  for (int64_t t = 0; t < T; ++t) {
    conv_step({x.data() + t * C, 1, C, C}, {y_one.data() + t * C, 1, C, C}, w.data(), K,
              st_one.data());
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      double ref = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t src = t - (K - 1) + j;  // tap K-1 is the current token
        if (src >= 0) ref += double(w[c * K + j]) * x[src * C + c];
      }
      EXPECT_NEAR(y_all[t * C + c], ref, 1e-6);
      EXPECT_EQ(y_all[t * C + c], y_one[t * C + c]);
    }
  }
  EXPECT_EQ(st_all, st_one);
}

TEST(CpuOps, GdnRecurrenceMatchesMatrixForm) {
  std::mt19937 rng(4);
  const int64_t T = 3, Hk = 2, Hv = 4, d = 5;
  auto q = random_vec(T * Hk * d, rng), k = random_vec(T * Hk * d, rng);
  auto v = random_vec(T * Hv * d, rng), g = random_vec(T * Hv, rng, -1.0f, -0.1f);
  auto beta = random_vec(T * Hv, rng, 0.1f, 0.9f), out = std::vector<float>(T * Hv * d);
  auto state = random_vec(Hv * d * d, rng);
  std::vector<double> S(state.begin(), state.end());
  gdn_recurrence(rows(q, T, Hk * d), rows(k, T, Hk * d), rows(v, T, Hv * d), rows(g, T, Hv),
                 rows(beta, T, Hv), rows(out, T, Hv * d), state.data(), Hk, Hv, d);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t kh = h % Hk;  // tiled: value head h reads key head h mod Hk
      double* s = S.data() + h * d * d;
      const float* kk = k.data() + t * Hk * d + kh * d;
      const float* qq = q.data() + t * Hk * d + kh * d;
      for (int64_t i = 0; i < d * d; ++i) s[i] *= std::exp(double(g[t * Hv + h]));
      for (int64_t j = 0; j < d; ++j) {
        double kv = 0;
        for (int64_t i = 0; i < d; ++i) kv += s[i * d + j] * kk[i];
        const double delta = beta[t * Hv + h] * (v[t * Hv * d + h * d + j] - kv);
        for (int64_t i = 0; i < d; ++i) s[i * d + j] += kk[i] * delta;
      }
      for (int64_t j = 0; j < d; ++j) {
        double o = 0;
        for (int64_t i = 0; i < d; ++i) o += s[i * d + j] * qq[i];
        EXPECT_NEAR(out[t * Hv * d + h * d + j], o / std::sqrt(double(d)), 1e-5);
      }
    }
  }
  for (size_t i = 0; i < S.size(); ++i) EXPECT_NEAR(state[i], S[i], 1e-5);
}

TEST(CpuOps, RopeRotatesPairsAndKeepsTail) {
  std::mt19937 rng(5);
  const int64_t D = 8, n_rot = 4;
  auto x = random_vec(2 * D, rng), x0 = x;
  rope(rows(x, 1, 2 * D), D, n_rot, 10000.0f, 3);
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < n_rot / 2; ++i) {
      const double ang = 3.0 * std::pow(10000.0, -2.0 * i / n_rot);
      const double a = x0[h * D + i], b = x0[h * D + i + n_rot / 2];
      EXPECT_NEAR(x[h * D + i], a * std::cos(ang) - b * std::sin(ang), 1e-6);
      EXPECT_NEAR(x[h * D + i + n_rot / 2], a * std::sin(ang) + b * std::cos(ang), 1e-6);
    }
    for (int i = n_rot; i < D; ++i) EXPECT_EQ(x[h * D + i], x0[h * D + i]);
  }
}

TEST(CpuOps, AttentionIsCausalSoftmaxWithGqa) {
  std::mt19937 rng(6);
  const int64_t T = 3, H = 4, Hkv = 2, D = 4, pos0 = 2, n = pos0 + T;
  auto q = random_vec(T * H * D, rng), kc = random_vec(n * Hkv * D, rng);
  auto vc = random_vec(n * Hkv * D, rng), out = std::vector<float>(T * H * D);
  attention(rows(q, T, H * D), kc.data(), vc.data(), rows(out, T, H * D), H, Hkv, D, pos0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / (H / Hkv);
      std::vector<double> p;
      double sum = 0;
      for (int64_t s = 0; s <= pos0 + t; ++s) {
        double dot = 0;
        for (int64_t i = 0; i < D; ++i)
          dot += double(q[t * H * D + h * D + i]) * kc[s * Hkv * D + kvh * D + i];
        p.push_back(std::exp(dot / std::sqrt(double(D))));
        sum += p.back();
      }
      for (int64_t i = 0; i < D; ++i) {
        double o = 0;
        for (size_t s = 0; s < p.size(); ++s) o += p[s] / sum * vc[s * Hkv * D + kvh * D + i];
        EXPECT_NEAR(out[t * H * D + h * D + i], o, 1e-6);
      }
    }
  }
}

// A matrix of n_out random rows stored as `type` (the bytes live in `storage`).
model::Matrix random_matrix(quant::Type type, int64_t n_in, int64_t n_out, std::mt19937& rng,
                            std::vector<uint8_t>& storage) {
  const size_t rb = quant::row_bytes(type, n_in);
  storage.assign(rb * static_cast<size_t>(n_out), 0);
  for (int64_t r = 0; r < n_out; ++r) {
    const std::vector<float> v = random_vec(static_cast<size_t>(n_in), rng);
    quant::quantize_row(type, v.data(), storage.data() + rb * static_cast<size_t>(r), n_in);
  }
  return {.name = "w",
          .type = type,
          .n_in = n_in,
          .n_out = n_out,
          .row_bytes = rb,
          .data = storage.data()};
}

// y[t][r] is the row's dot with x[t] — quant::dot_row, or with x quantised per 128 elements
// when asked — whatever the pool's split; both arithmetics stay within their error of the
// exact dot of the stored (dequantised) weights.
TEST(CpuOps, MatMulIsEachRowsDotWithEachToken) {
  std::mt19937 rng(9);
  const int64_t T = 3, n_in = 384, n_out = 37;  // 37 rows: uneven chunks over 3 threads
  std::vector<uint8_t> bytes;
  const model::Matrix w = random_matrix(quant::Type::Q1_0, n_in, n_out, rng, bytes);
  auto x = random_vec(static_cast<size_t>(T * n_in), rng);
  std::vector<float> y(static_cast<size_t>(T * n_out)), yq(y.size());
  ThreadPool pool(3);
  mat_mul(w, rows(x, T, n_in), rows(y, T, n_out), pool);
  mat_mul(w, rows(x, T, n_in), rows(yq, T, n_out), pool, true);
  std::vector<quant::BlockQ8Act128> xq(static_cast<size_t>(n_in / quant::kQ8Act128Block));
  std::vector<float> wr(static_cast<size_t>(n_in));
  int differ = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x.data() + t * n_in;
    quant::quantize_activations_q8_128(xt, n_in, xq.data());
    for (int64_t r = 0; r < n_out; ++r) {
      const float got = y[static_cast<size_t>(t * n_out + r)];
      const float got_q = yq[static_cast<size_t>(t * n_out + r)];
      EXPECT_EQ(got, quant::dot_row(w.type, w.row(r), xt, n_in)) << "t " << t << " r " << r;
      EXPECT_EQ(got_q, quant::dot_row_q1_0_q8_128(w.row(r), xq.data(), n_in));
      quant::dequantize_row(w.type, w.row(r), wr.data(), n_in);
      // The int8 codes put each element within half a step (its block's amax / 127) of x.
      double exact = 0, scale = 0, code_error = 0;
      for (int64_t b = 0; b < n_in; b += quant::kQ8Act128Block) {
        double amax = 0;
        for (int64_t i = b; i < b + quant::kQ8Act128Block; ++i)
          amax = std::max(amax, double(std::abs(xt[i])));
        for (int64_t i = b; i < b + quant::kQ8Act128Block; ++i) {
          exact += double(wr[size_t(i)]) * xt[i];
          scale += std::abs(double(wr[size_t(i)]) * xt[i]);
          code_error += std::abs(double(wr[size_t(i)])) * amax / 254;
        }
      }
      EXPECT_NEAR(got, exact, 1e-5 * scale);
      EXPECT_NEAR(got_q, exact, code_error + 1e-5 * scale);
      differ += got != got_q;
    }
  }
  EXPECT_GT(differ, 0) << "the q8 path gave the f32 path's bits: was it taken?";
}

TEST(CpuOps, MatMulRefusesMismatchedShapesNamingTheWeight) {
  std::mt19937 rng(10);
  std::vector<uint8_t> bytes;
  model::Matrix w = random_matrix(quant::Type::F32, 8, 4, rng, bytes);
  w.name = "blk.0.ffn_up.weight";
  std::vector<float> x(16), y(8);
  ThreadPool pool(1);
  EXPECT_NO_THROW(mat_mul(w, rows(x, 2, 8), rows(y, 2, 4), pool));
  for (auto [xr, xc, yr, yc] : {std::array<int64_t, 4>{2, 7, 2, 4}, {2, 8, 2, 3}, {2, 8, 1, 4}}) {
    const std::string msg =
        testing::error_of([&] { mat_mul(w, rows(x, xr, xc), rows(y, yr, yc), pool); });
    EXPECT_NE(msg.find("blk.0.ffn_up.weight"), std::string::npos)
        << "[" << xr << "x" << xc << "] -> [" << yr << "x" << yc << "]: '" << msg << "'";
  }
}

TEST(CpuOps, ActivationsMatchDefinitions) {
  for (float x : {-30.0f, -2.5f, -0.1f, 0.3f, 4.0f, 25.0f}) {
    EXPECT_NEAR(sigmoid(x), 1.0 / (1.0 + std::exp(-double(x))), 1e-7);
    EXPECT_NEAR(softplus(x), std::log1p(std::exp(double(x))), 1e-5 * std::max(1.0f, x));
    EXPECT_NEAR(silu(x), x / (1.0 + std::exp(-double(x))), 1e-6 * std::max(1.0f, std::abs(x)));
  }
}

TEST(CpuOps, BinaryAndBroadcast) {
  std::vector<float> x = {1, -2}, g = {0.5f, -1}, y = {10, 20}, v = {3, 4};
  binary(Binary::Add, rows(x, 1, 2), rows(x, 1, 2), rows(y, 1, 2));
  EXPECT_EQ(y, (std::vector<float>{11, 18}));
  binary(Binary::SiluMul, rows(x, 1, 2), rows(g, 1, 2), rows(y, 1, 2));
  EXPECT_NEAR(y[1], -2 * silu(-1), 1e-7);
  binary(Binary::SigmoidMul, rows(x, 1, 2), rows(g, 1, 2), rows(y, 1, 2));
  EXPECT_NEAR(y[0], sigmoid(0.5f), 1e-7);
  binary(Binary::Mul, rows(x, 1, 2), rows(g, 1, 2), rows(y, 1, 2));
  EXPECT_EQ(y, (std::vector<float>{0.5f, 2}));
  broadcast(Broadcast::Mul, rows(x, 1, 2), v.data(), rows(y, 1, 2));
  EXPECT_EQ(y, (std::vector<float>{3, -8}));
  broadcast(Broadcast::Add, rows(x, 1, 2), v.data(), rows(y, 1, 2));
  EXPECT_EQ(y, (std::vector<float>{4, 2}));
}

}  // namespace
}  // namespace gdn::cpu
