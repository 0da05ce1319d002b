#include "cpu/ops.h"

#include <cmath>
#include <vector>

#include "common/error.h"
#include "quant/quant.h"

namespace gdn::cpu {

namespace {

// y = x·rsqrt(Σx²/divisor + eps)·w per chunk of `chunk` columns (w null: no weight). RMSNorm
// divides by the chunk length, the L2 norm by 1.
void normalise_chunks(Rows x, Rows y, const float* w, int64_t chunk, double divisor, float eps) {
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* xr = x.row(t);
    float* yr = y.row(t);
    for (int64_t c0 = 0; c0 < x.cols; c0 += chunk) {
      double ss = 0.0;
      for (int64_t i = 0; i < chunk; ++i) ss += double(xr[c0 + i]) * xr[c0 + i];
      const float scale = static_cast<float>(1.0 / std::sqrt(ss / divisor + eps));
      for (int64_t i = 0; i < chunk; ++i) yr[c0 + i] = xr[c0 + i] * scale * (w ? w[i] : 1.0f);
    }
  }
}

}  // namespace

void rms_norm(Rows x, Rows y, const float* w, int64_t chunk, float eps) {
  normalise_chunks(x, y, w, chunk, double(chunk), eps);
}

void l2_norm(Rows x, Rows y, int64_t chunk, float eps) {
  normalise_chunks(x, y, nullptr, chunk, 1.0, eps);
}

void mat_mul(const model::Matrix& w, Rows x, Rows y, ThreadPool& pool, bool q8_activations) {
  if (x.cols != w.n_in || y.cols != w.n_out || x.rows != y.rows) {
    fail("mat_mul {}: weight {}x{} with input [{}x{}] and output [{}x{}]", w.name, w.n_in, w.n_out,
         x.rows, x.cols, y.rows, y.cols);
  }
  if (q8_activations && w.type == quant::Type::Q1_0) {
    std::vector<quant::BlockQ8Act128> xq(
        static_cast<size_t>(x.rows * w.n_in / quant::kQ8Act128Block));
    const int64_t blocks = w.n_in / quant::kQ8Act128Block;
    for (int64_t t = 0; t < x.rows; ++t) {
      quant::quantize_activations_q8_128(x.row(t), w.n_in, xq.data() + t * blocks);
    }
    pool.parallel_for(w.n_out, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t t = 0; t < x.rows; ++t) {
          y.row(t)[r] = quant::dot_row_q1_0_q8_128(w.row(r), xq.data() + t * blocks, w.n_in);
        }
      }
    });
    return;
  }
  pool.parallel_for(w.n_out, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t t = 0; t < x.rows; ++t) {
        y.row(t)[r] = quant::dot_row(w.type, w.row(r), x.row(t), w.n_in);
      }
    }
  });
}

void embed(const model::Matrix& table, const int32_t* ids, Rows y) {
  for (int64_t t = 0; t < y.rows; ++t) {
    if (ids[t] < 0 || ids[t] >= table.n_out) {
      fail("token id {} at position {} is outside the vocabulary [0, {})", ids[t], t, table.n_out);
    }
    quant::dequantize_row(table.type, table.row(ids[t]), y.row(t), table.n_in);
  }
}

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}
float silu(float x) {
  return x * sigmoid(x);
}

void unary(Unary f, Rows x, Rows y) {
  for (int64_t t = 0; t < x.rows; ++t) {
    for (int64_t i = 0; i < x.cols; ++i) {
      const float v = x.row(t)[i];
      y.row(t)[i] = f == Unary::Sigmoid ? sigmoid(v) : f == Unary::Softplus ? softplus(v) : silu(v);
    }
  }
}

void binary(Binary f, Rows x, Rows g, Rows y) {
  for (int64_t t = 0; t < x.rows; ++t) {
    for (int64_t i = 0; i < x.cols; ++i) {
      const float a = x.row(t)[i];
      switch (f) {
        case Binary::Add:
          y.row(t)[i] += a;
          break;
        case Binary::SiluMul:
          y.row(t)[i] = a * silu(g.row(t)[i]);
          break;
        case Binary::SigmoidMul:
          y.row(t)[i] = a * sigmoid(g.row(t)[i]);
          break;
        case Binary::Mul:
          y.row(t)[i] = a * g.row(t)[i];
          break;
      }
    }
  }
}

void broadcast(Broadcast f, Rows x, const float* v, Rows y) {
  for (int64_t t = 0; t < x.rows; ++t) {
    for (int64_t i = 0; i < x.cols; ++i) {
      y.row(t)[i] = f == Broadcast::Add ? x.row(t)[i] + v[i] : x.row(t)[i] * v[i];
    }
  }
}

void split_heads(Rows x, Rows ya, Rows yb, int64_t head_dim) {
  const int64_t n_head = ya.cols / head_dim;
  for (int64_t t = 0; t < x.rows; ++t) {
    for (int64_t h = 0; h < n_head; ++h) {
      const float* src = x.row(t) + 2 * h * head_dim;
      for (int64_t i = 0; i < head_dim; ++i) {
        ya.row(t)[h * head_dim + i] = src[i];
        yb.row(t)[h * head_dim + i] = src[head_dim + i];
      }
    }
  }
}

void conv_step(Rows x, Rows y, const float* w, int64_t kernel, float* state) {
  const int64_t C = x.cols, hist = kernel - 1;
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* xr = x.row(t);
    float* yr = y.row(t);
    for (int64_t c = 0; c < C; ++c) {
      double acc = double(w[c * kernel + hist]) * xr[c];
      for (int64_t j = 0; j < hist; ++j) acc += double(w[c * kernel + j]) * state[j * C + c];
      // Shift the history after reading it: the current input becomes the newest entry.
      for (int64_t j = 0; j + 1 < hist; ++j) state[j * C + c] = state[(j + 1) * C + c];
      if (hist > 0) state[(hist - 1) * C + c] = xr[c];
      yr[c] = static_cast<float>(acc);
    }
  }
}

void gdn_recurrence(Rows q, Rows k, Rows v, Rows g, Rows beta, Rows out, float* state,
                    int64_t n_k_heads, int64_t n_v_heads, int64_t d) {
  const double q_scale = 1.0 / std::sqrt(double(d));
  std::vector<double> delta(static_cast<size_t>(d));
  for (int64_t t = 0; t < q.rows; ++t) {
    for (int64_t h = 0; h < n_v_heads; ++h) {
      const int64_t kh = h % n_k_heads;
      const float* qh = q.row(t) + kh * d;
      const float* kk = k.row(t) + kh * d;
      const float* vh = v.row(t) + h * d;
      float* S = state + h * d * d;  // S[i][j]: key dim i, value dim j
      const float decay = std::exp(g.row(t)[h]);
      const float b = beta.row(t)[h];
      for (int64_t i = 0; i < d * d; ++i) S[i] *= decay;
      for (int64_t j = 0; j < d; ++j) {
        double kv = 0.0;
        for (int64_t i = 0; i < d; ++i) kv += double(S[i * d + j]) * kk[i];
        delta[j] = b * (vh[j] - kv);
      }
      for (int64_t i = 0; i < d; ++i) {
        for (int64_t j = 0; j < d; ++j) S[i * d + j] += static_cast<float>(kk[i] * delta[j]);
      }
      float* oh = out.row(t) + h * d;
      for (int64_t j = 0; j < d; ++j) {
        double o = 0.0;
        for (int64_t i = 0; i < d; ++i) o += double(S[i * d + j]) * qh[i];
        oh[j] = static_cast<float>(o * q_scale);
      }
    }
  }
}

void rope(Rows x, int64_t head_dim, int64_t n_rot, float theta, int64_t pos0) {
  const int64_t half = n_rot / 2, n_head = x.cols / head_dim;
  for (int64_t t = 0; t < x.rows; ++t) {
    const double pos = double(pos0 + t);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * std::pow(double(theta), -2.0 * double(i) / double(n_rot));
      const double c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < n_head; ++h) {
        float* xh = x.row(t) + h * head_dim;
        const double a = xh[i], b = xh[i + half];
        xh[i] = static_cast<float>(a * c - b * s);
        xh[i + half] = static_cast<float>(a * s + b * c);
      }
    }
  }
}

void attention(Rows q, const float* k_cache, const float* v_cache, Rows out, int64_t n_head,
               int64_t n_head_kv, int64_t head_dim, int64_t pos0) {
  const int64_t kv_dim = n_head_kv * head_dim, group = n_head / n_head_kv;
  const double scale = 1.0 / std::sqrt(double(head_dim));
  std::vector<double> p;
  for (int64_t t = 0; t < q.rows; ++t) {
    const int64_t n_kv = pos0 + t + 1;  // causal: positions 0 .. pos0 + t
    p.assign(static_cast<size_t>(n_kv), 0.0);
    for (int64_t h = 0; h < n_head; ++h) {
      const float* qh = q.row(t) + h * head_dim;
      const int64_t kvh = h / group;
      double max_s = -INFINITY;
      for (int64_t s = 0; s < n_kv; ++s) {
        const float* kh = k_cache + s * kv_dim + kvh * head_dim;
        double dot = 0.0;
        for (int64_t i = 0; i < head_dim; ++i) dot += double(qh[i]) * kh[i];
        p[s] = dot * scale;
        max_s = std::max(max_s, p[s]);
      }
      double sum = 0.0;
      for (int64_t s = 0; s < n_kv; ++s) sum += (p[s] = std::exp(p[s] - max_s));
      float* oh = out.row(t) + h * head_dim;
      for (int64_t i = 0; i < head_dim; ++i) {
        double acc = 0.0;
        for (int64_t s = 0; s < n_kv; ++s) acc += p[s] * v_cache[s * kv_dim + kvh * head_dim + i];
        oh[i] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace gdn::cpu
