// Op checks for the non-matmul kernels (kernels.h) against the CPU reference (cpu/ops.h):
// `gdn ops` runs add_ops_checks.
//
// Every case: random non-zero inputs (ctx.random), outputs poisoned with NaN (0xFF bytes)
// before the run, the kernel's result compared with the CPU's over the view, and every float
// of the buffer outside the view compared bit for bit with what it held before the run (a
// kernel that writes past its view fails even when the view is right). Views are column
// ranges of wider buffers wherever the decode program uses them that way (q | k | v inside
// the conv output), and odd offsets elsewhere so both the float4 and the scalar paths run.
// State-updating ops (conv_step, gdn_recurrence, kv_store) also compare the updated state.
//
// Shapes: Bonsai-27B (E 5120, H 24, Hkv 4, D 256, n_rot 64, Hk 16, Hv 48, d 128, conv 10240,
// FFN 17408), Qwen3.5-0.8B (Hk = Hv = 16), the tiny synthetic model (E 256, H 4, Hkv 2, D 64,
// n_rot 16, Hk 2, Hv 4, d 64), and odd sizes (1, 3, 77) that no warp or float4 divides.
//
// Tolerances: max|gpu − ref| / max|ref| (opcheck::compare), derived in each kernel's design
// comment:
//   copies, split_heads, kv_store, embed, add, add_vec, mul_vec   0      the same f32 ops or none
//   conv_step                                   1e-7   double accumulation in the CPU's order:
//                                                      bit-exact expected
//   sigmoid, softplus, silu, silu_mul, sigmoid_mul   1e-6   expf/log1pf within 2 ulp of
//                                                      glibc's: a few ulp (≲ 5e-7) per element
//   rope                                        1e-6   double angle and rotation, rounded
//                                                      once: ≤ 1 ulp (6e-8) expected
//   rms_norm, l2_norm                           4e-6   f32 sum of squares, ≲ 1e-6 (norm.cu)
//   gdn_recurrence (out and state)      4e-6 + 4e-7·T  f32 reductions per token, errors
//                                                      at most linear in T (gdn.cu)
//   attention                                   3e-5   f32 scores and accumulators over up to
//                                                      4096 keys; max|out| can be ~0.2·max|v|
//                                                      when the softmax spreads (attention.cu)
// Measured on an H200 (2026-11-30, seeds 1–8): conv, rope, copies and embed exact; every other
// error ≤ 6e-7 (norms and activations ~1e-7, gdn ~2e-7 up to T = 64, attention ≤ 6e-7 at
// 4096 keys), so each tolerance is a bound with margin, not a fit to the data.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cpu/ops.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/kernels.h"
#include "cuda/op_check.h"
#include "model/weights.h"
#include "quant/quant.h"

namespace gdn::cuda::opcheck {

void add_ops_checks(Context& ctx, std::vector<Result>& out);

namespace {

// kernels.h restates cpu/ops.h's enumerator values for the C++17 .cu files.
static_assert(int(cpu::Unary::Sigmoid) == op_value::kSigmoid &&
              int(cpu::Unary::Softplus) == op_value::kSoftplus &&
              int(cpu::Unary::Silu) == op_value::kSilu);
static_assert(int(cpu::Binary::Add) == op_value::kAdd &&
              int(cpu::Binary::SiluMul) == op_value::kSiluMul &&
              int(cpu::Binary::SigmoidMul) == op_value::kSigmoidMul);
static_assert(int(cpu::Broadcast::Add) == op_value::kBroadcastAdd &&
              int(cpu::Broadcast::Mul) == op_value::kBroadcastMul);

constexpr double kTolExact = 0.0;
constexpr double kTolConv = 1e-7;
constexpr double kTolActivation = 1e-6;
constexpr double kTolRope = 1e-6;
constexpr double kTolNorm = 4e-6;
constexpr double kTolAttention = 3e-5;
double tol_gdn(int64_t T) {
  return 4e-6 + 4e-7 * double(T);
}

constexpr float kEps = 1e-6f;
constexpr double kRotateBytes = 160e6;  // timed inputs rotated beyond L2 (as op_check.cpp)
constexpr int kMaxCopies = 20;          // time_us captures 20 launches: i < 20

const float kPoison = std::bit_cast<float>(0xFFFFFFFFu);  // a NaN

// A rows × (off + cols + pad) f32 buffer on host and device; the view is columns
// [off, off + cols). The host copy holds the inputs and, after the CPU op, the reference.
class Buf {
 public:
  Buf(Context& ctx, int64_t rows, int64_t cols, int64_t off = 0, int64_t pad = 0, float lo = -1.0f,
      float hi = 1.0f)
      : rows_(rows),
        cols_(cols),
        off_(off),
        ld_(off + cols + pad),
        s_(ctx.stream()),
        host_(ctx.random(size_t(rows * ld_), lo, hi)),
        dev_(host_.size() * sizeof(float)) {
    upload();
  }

  DevRows dev() const { return {dev_.as<float>() + off_, rows_, cols_, ld_}; }
  cpu::Rows host() { return {host_.data() + off_, rows_, cols_, ld_}; }
  float* dev_data() const { return dev_.as<float>() + off_; }
  float* host_data() { return host_.data() + off_; }
  size_t bytes() const { return dev_.bytes(); }

  // Device ← host; what the device held before a run is remembered for the guard check.
  void upload() {
    before_ = host_;
    CUDA_CHECK(cudaMemcpyAsync(dev_.get(), host_.data(), bytes(), cudaMemcpyHostToDevice, s_));
    CUDA_CHECK(cudaStreamSynchronize(s_));
  }
  // Device ← NaN everywhere (an output the kernel must overwrite).
  void poison() {
    before_.assign(host_.size(), kPoison);
    CUDA_CHECK(cudaMemsetAsync(dev_.get(), 0xFF, bytes(), s_));
    CUDA_CHECK(cudaStreamSynchronize(s_));
  }

  // The device's view against the host's (the reference), and every float outside the view
  // against what the device held before the run, bit for bit.
  Result check(const std::string& op, const std::string& shape, double tol) const {
    std::vector<float> got(host_.size());
    CUDA_CHECK(cudaStreamSynchronize(s_));
    CUDA_CHECK(cudaMemcpyAsync(got.data(), dev_.get(), bytes(), cudaMemcpyDeviceToHost, s_));
    CUDA_CHECK(cudaStreamSynchronize(s_));
    std::vector<float> g, r;
    g.reserve(size_t(rows_ * cols_));
    r.reserve(size_t(rows_ * cols_));
    for (int64_t i = 0; i < rows_; ++i) {
      for (int64_t c = 0; c < cols_; ++c) {
        g.push_back(got[size_t(i * ld_ + off_ + c)]);
        r.push_back(host_[size_t(i * ld_ + off_ + c)]);
      }
    }
    Result res = compare(op, shape, g, r, tol);
    for (int64_t i = 0; i < rows_; ++i) {
      for (int64_t c = 0; c < ld_; ++c) {
        if (c >= off_ && c < off_ + cols_) continue;
        const size_t e = size_t(i * ld_ + c);
        if (std::memcmp(&got[e], &before_[e], sizeof(float)) != 0) {
          res.passed = false;
          res.detail = fmt::format(
              "wrote outside its view: row {} column {} (view columns "
              "[{}, {}))",
              i, c, off_, off_ + cols_);
          return res;
        }
      }
    }
    return res;
  }

 private:
  int64_t rows_, cols_, off_, ld_;
  cudaStream_t s_;
  std::vector<float> host_, before_;
  DeviceBuffer dev_;
};

void sync(Context& ctx) {
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
}

// With --perf: the median time of `launch` and the bytes the op must move.
void timed(Context& ctx, Result& r, double bytes, const std::function<void(int)>& launch) {
  if (!ctx.perf()) return;
  r.us = ctx.time_us(launch);
  r.bytes = bytes;
}

// Copies of a buffer for timing beyond L2: enough that 20 launches cycle through more than
// kRotateBytes, at most one per launch.
int rotation_copies(double bytes) {
  return std::clamp(static_cast<int>(std::ceil(kRotateBytes / bytes)), 1, kMaxCopies);
}

std::string view_desc(int64_t off, int64_t pad) {
  return off || pad ? fmt::format(" view+{}/{}", off, pad) : "";
}

// ---------------------------------------------------------------------------------------------
// Norms

struct NormCase {
  int64_t T, cols, chunk, off, pad;
  bool in_place, perf;
  const char* what;
};

void check_norms(Context& ctx, std::vector<Result>& out) {
  const NormCase rms_cases[] = {
      {1, 5120, 5120, 0, 0, false, true, "bonsai attn_norm"},
      {7, 5120, 5120, 0, 0, false, false, "bonsai prefill"},
      {1, 6144, 128, 0, 0, true, true, "bonsai ssm_norm"},
      {3, 6144, 256, 0, 0, true, false, "bonsai q_norm"},
      {1, 1024, 256, 0, 0, true, false, "bonsai k_norm"},
      {5, 256, 256, 0, 0, false, false, "tiny"},
      {3, 256, 64, 0, 0, true, false, "tiny ssm_norm"},
      {1, 1, 1, 0, 0, false, false, "one"},
      {3, 77, 77, 0, 0, false, false, "odd"},
      {2, 231, 77, 5, 3, false, false, "odd heads"},
      {4, 1000, 8, 1, 2, true, false, "small chunks"},
      {2, 10000, 10000, 0, 0, false, false, "long row"},
  };
  for (const NormCase& c : rms_cases) {
    Buf x(ctx, c.T, c.cols, c.off, c.pad);
    Buf y(ctx, c.T, c.cols, c.off, c.pad);
    Buf w(ctx, 1, c.chunk, 0, 0, 0.8f, 1.2f);
    Buf& dst = c.in_place ? x : y;
    if (!c.in_place) y.poison();
    const std::string shape =
        fmt::format("T={} cols={} chunk={}{}{} {}", c.T, c.cols, c.chunk, view_desc(c.off, c.pad),
                    c.in_place ? " in-place" : "", c.what);
    cpu::rms_norm(x.host(), dst.host(), w.host_data(), c.chunk, kEps);
    rms_norm(x.dev(), dst.dev(), w.dev_data(), c.chunk, kEps, ctx.stream());
    Result r = dst.check("rms_norm", shape, kTolNorm);
    if (c.perf) {
      timed(ctx, r, (2.0 * double(c.T * c.cols) + double(c.chunk)) * 4,
            [&](int) { rms_norm(x.dev(), dst.dev(), w.dev_data(), c.chunk, kEps, ctx.stream()); });
    }
    out.push_back(r);
  }

  const NormCase l2_cases[] = {
      {1, 2048, 128, 2048, 6144, true, true, "bonsai k in conv"},
      {4, 2048, 128, 0, 8192, true, false, "bonsai q in conv"},
      {5, 128, 64, 128, 256, true, false, "tiny k in conv"},
      {1, 1, 1, 0, 0, false, false, "one"},
      {3, 231, 77, 3, 1, false, false, "odd heads"},
      {2, 10000, 10000, 0, 0, false, false, "long row"},
  };
  for (const NormCase& c : l2_cases) {
    Buf x(ctx, c.T, c.cols, c.off, c.pad);
    Buf y(ctx, c.T, c.cols, c.off, c.pad);
    Buf& dst = c.in_place ? x : y;
    if (!c.in_place) y.poison();
    const std::string shape =
        fmt::format("T={} cols={} chunk={}{}{} {}", c.T, c.cols, c.chunk, view_desc(c.off, c.pad),
                    c.in_place ? " in-place" : "", c.what);
    cpu::l2_norm(x.host(), dst.host(), c.chunk, kEps);
    l2_norm(x.dev(), dst.dev(), c.chunk, kEps, ctx.stream());
    Result r = dst.check("l2_norm", shape, kTolNorm);
    if (c.perf) {
      timed(ctx, r, 2.0 * double(c.T * c.cols) * 4,
            [&](int) { l2_norm(x.dev(), dst.dev(), c.chunk, kEps, ctx.stream()); });
    }
    out.push_back(r);
  }
}

// ---------------------------------------------------------------------------------------------
// Element-wise

struct MapCase {
  int64_t T, cols, off, pad;
  bool in_place, perf;
  const char* what;
};

void check_unary(Context& ctx, std::vector<Result>& out) {
  const MapCase cases[] = {
      {1, 1, 0, 0, false, false, "one"},           {3, 77, 1, 2, false, false, "odd"},
      {1, 10240, 0, 0, true, true, "bonsai conv"}, {1, 48, 0, 0, true, true, "bonsai heads"},
      {7, 5120, 0, 0, false, false, "prefill"},
  };
  const std::pair<cpu::Unary, const char*> fns[] = {{cpu::Unary::Sigmoid, "sigmoid"},
                                                    {cpu::Unary::Softplus, "softplus"},
                                                    {cpu::Unary::Silu, "silu"}};
  for (const auto& [f, name] : fns) {
    for (const MapCase& c : cases) {
      // ±25 crosses softplus's linear branch (x > 20) and saturates the sigmoid.
      Buf x(ctx, c.T, c.cols, c.off, c.pad, -25.0f, 25.0f);
      Buf y(ctx, c.T, c.cols, c.off, c.pad);
      Buf& dst = c.in_place ? x : y;
      if (!c.in_place) y.poison();
      cpu::unary(f, x.host(), dst.host());
      unary(f, x.dev(), dst.dev(), ctx.stream());
      Result r = dst.check(name,
                           fmt::format("T={} cols={}{}{} {}", c.T, c.cols, view_desc(c.off, c.pad),
                                       c.in_place ? " in-place" : "", c.what),
                           kTolActivation);
      if (c.perf) {
        timed(ctx, r, 2.0 * double(c.T * c.cols) * 4,
              [&](int) { unary(f, x.dev(), dst.dev(), ctx.stream()); });
      }
      out.push_back(r);
    }
  }
}

void check_binary(Context& ctx, std::vector<Result>& out) {
  struct Fn {
    cpu::Binary f;
    const char* name;
    double tol;
    MapCase perf_case;
  };
  const Fn fns[] = {
      {cpu::Binary::Add, "add", kTolExact, {1, 5120, 0, 0, false, true, "bonsai residual"}},
      {cpu::Binary::SiluMul,
       "silu_mul",
       kTolActivation,
       {1, 17408, 0, 0, true, true, "bonsai ffn"}},
      {cpu::Binary::SigmoidMul,
       "sigmoid_mul",
       kTolActivation,
       {1, 6144, 0, 0, true, true, "bonsai attn gate"}},
  };
  for (const Fn& fn : fns) {
    const MapCase cases[] = {
        {1, 1, 0, 0, false, false, "one"},
        {3, 77, 1, 2, false, false, "odd"},
        {4, 6144, 0, 0, true, false, "prefill"},
        fn.perf_case,
    };
    for (const MapCase& c : cases) {
      Buf x(ctx, c.T, c.cols, c.off, c.pad);
      Buf g(ctx, c.T, c.cols, c.off, c.pad, -8.0f, 8.0f);
      Buf y(ctx, c.T, c.cols, c.off, c.pad);
      // Add accumulates into y (its old values are an input); the others may run in place.
      const bool add = fn.f == cpu::Binary::Add;
      Buf& dst = c.in_place && !add ? x : y;
      if (!add && !c.in_place) y.poison();
      cpu::binary(fn.f, x.host(), g.host(), dst.host());
      binary(fn.f, x.dev(), g.dev(), dst.dev(), ctx.stream());
      Result r = dst.check(fn.name,
                           fmt::format("T={} cols={}{}{} {}", c.T, c.cols, view_desc(c.off, c.pad),
                                       &dst == &x ? " in-place" : "", c.what),
                           fn.tol);
      if (c.perf) {
        timed(ctx, r, 3.0 * double(c.T * c.cols) * 4,
              [&](int) { binary(fn.f, x.dev(), g.dev(), dst.dev(), ctx.stream()); });
      }
      out.push_back(r);
    }
  }
}

void check_broadcast(Context& ctx, std::vector<Result>& out) {
  const MapCase cases[] = {
      {1, 1, 0, 0, false, false, "one"},
      {3, 77, 1, 2, false, false, "odd"},
      {7, 48, 0, 0, true, false, "bonsai prefill"},
      {1, 48, 0, 0, true, true, "bonsai heads"},
  };
  const std::pair<cpu::Broadcast, const char*> fns[] = {{cpu::Broadcast::Add, "add_vec"},
                                                        {cpu::Broadcast::Mul, "mul_vec"}};
  for (const auto& [f, name] : fns) {
    for (const MapCase& c : cases) {
      Buf x(ctx, c.T, c.cols, c.off, c.pad);
      Buf y(ctx, c.T, c.cols, c.off, c.pad);
      Buf v(ctx, 1, c.cols, c.off, 0);
      Buf& dst = c.in_place ? x : y;
      if (!c.in_place) y.poison();
      cpu::broadcast(f, x.host(), v.host_data(), dst.host());
      broadcast(f, x.dev(), v.dev_data(), dst.dev(), ctx.stream());
      Result r = dst.check(name,
                           fmt::format("T={} cols={}{}{} {}", c.T, c.cols, view_desc(c.off, c.pad),
                                       c.in_place ? " in-place" : "", c.what),
                           kTolExact);
      if (c.perf) {
        timed(ctx, r, 3.0 * double(c.T * c.cols) * 4,
              [&](int) { broadcast(f, x.dev(), v.dev_data(), dst.dev(), ctx.stream()); });
      }
      out.push_back(r);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Copies and gathers

void check_split_heads(Context& ctx, std::vector<Result>& out) {
  struct Case {
    int64_t T, heads, hd, off;
    bool perf;
    const char* what;
  };
  const Case cases[] = {
      {1, 24, 256, 0, true, "bonsai q|gate"},
      {3, 4, 64, 0, false, "tiny"},
      {2, 3, 77, 3, false, "odd"},
      {1, 1, 1, 1, false, "one"},
      {5, 24, 256, 0, false, "bonsai prefill"},
  };
  for (const Case& c : cases) {
    const int64_t n = c.heads * c.hd;
    Buf x(ctx, c.T, 2 * n, c.off, 1);
    Buf ya(ctx, c.T, n, c.off, 2), yb(ctx, c.T, n, 0, c.off);
    ya.poison();
    yb.poison();
    const std::string shape = fmt::format("T={} heads={} head_dim={}{} {}", c.T, c.heads, c.hd,
                                          view_desc(c.off, 1), c.what);
    cpu::split_heads(x.host(), ya.host(), yb.host(), c.hd);
    split_heads(x.dev(), ya.dev(), yb.dev(), c.hd, ctx.stream());
    Result ra = ya.check("split_heads", shape + " (a)", kTolExact);
    Result rb = yb.check("split_heads", shape + " (b)", kTolExact);
    if (c.perf) {
      timed(ctx, ra, 4.0 * double(c.T * n) * 4,
            [&](int) { split_heads(x.dev(), ya.dev(), yb.dev(), c.hd, ctx.stream()); });
    }
    out.push_back(ra);
    out.push_back(rb);
  }
}

void check_copies(Context& ctx, std::vector<Result>& out) {
  struct RowsCase {
    int64_t rows, cols, row0, n, off;
  };
  for (const RowsCase& c : {RowsCase{7, 5120, 6, 1, 0}, RowsCase{5, 77, 2, 3, 1},
                            RowsCase{1, 1, 0, 1, 0}, RowsCase{9, 256, 0, 9, 0}}) {
    Buf x(ctx, c.rows, c.cols, c.off, 2);
    Buf y(ctx, c.n, c.cols, c.off, 0);
    y.poison();
    cpu::Rows xh = x.host(), yh = y.host();
    for (int64_t t = 0; t < c.n; ++t) std::copy_n(xh.row(c.row0 + t), c.cols, yh.row(t));
    copy_rows(x.dev(), c.row0, y.dev(), ctx.stream());
    out.push_back(y.check("copy_rows",
                          fmt::format("x [{}x{}] rows [{}, {}){}", c.rows, c.cols, c.row0,
                                      c.row0 + c.n, view_desc(c.off, 2)),
                          kTolExact));
  }

  struct StateCase {
    int64_t n, src_off, dst_off;
    bool perf;
  };
  for (const StateCase& c : {StateCase{48 * 128 * 128, 0, 0, true}, StateCase{77, 1, 3, false},
                             StateCase{1, 3, 0, false}, StateCase{4 * 64 * 64, 0, 2, false}}) {
    Buf src(ctx, 1, c.n, c.src_off, 0), dst(ctx, 1, c.n, c.dst_off, 1);
    dst.poison();
    std::copy_n(src.host_data(), c.n, dst.host_data());
    copy_state(src.dev_data(), dst.dev_data(), c.n, ctx.stream());
    Result r = dst.check("copy_state",
                         fmt::format("n={} src+{} dst+{}{}", c.n, c.src_off, c.dst_off,
                                     c.perf ? " bonsai state" : ""),
                         kTolExact);
    if (c.perf && ctx.perf()) {
      const int copies = rotation_copies(2.0 * double(c.n) * 4);
      std::vector<DeviceBuffer> srcs;
      for (int i = 0; i < copies; ++i) {
        srcs.emplace_back(size_t(c.n) * sizeof(float));
        CUDA_CHECK(cudaMemsetAsync(srcs.back().get(), 0, srcs.back().bytes(), ctx.stream()));
      }
      timed(ctx, r, 2.0 * double(c.n) * 4, [&](int i) {
        copy_state(srcs[size_t(i % copies)].as<float>(), dst.dev_data(), c.n, ctx.stream());
      });
    }
    out.push_back(r);
  }
}

void check_kv_store(Context& ctx, std::vector<Result>& out) {
  struct Case {
    int64_t T, kv_dim, pos0, off;
    bool perf;
    const char* what;
  };
  const Case cases[] = {
      {1, 1024, 0, 0, false, "bonsai"},
      {1, 1024, 37, 0, true, "bonsai"},
      {5, 128, 3, 0, false, "tiny prefill"},
      {3, 77, 0, 2, false, "odd"},
      {1, 1, 4, 1, false, "one"},
  };
  for (const Case& c : cases) {
    const int64_t n_ctx = c.pos0 + c.T + 2;
    Buf k(ctx, c.T, c.kv_dim, c.off, 1), v(ctx, c.T, c.kv_dim, 0, c.off);
    Buf kc(ctx, n_ctx, c.kv_dim), vc(ctx, n_ctx, c.kv_dim);
    // The rows to be written are poisoned on the device; the others must keep their values.
    CUDA_CHECK(cudaMemsetAsync(kc.dev_data() + c.pos0 * c.kv_dim, 0xFF,
                               size_t(c.T * c.kv_dim) * sizeof(float), ctx.stream()));
    CUDA_CHECK(cudaMemsetAsync(vc.dev_data() + c.pos0 * c.kv_dim, 0xFF,
                               size_t(c.T * c.kv_dim) * sizeof(float), ctx.stream()));
    cpu::Rows kh = k.host(), vh = v.host();
    for (int64_t t = 0; t < c.T; ++t) {
      std::copy_n(kh.row(t), c.kv_dim, kc.host_data() + (c.pos0 + t) * c.kv_dim);
      std::copy_n(vh.row(t), c.kv_dim, vc.host_data() + (c.pos0 + t) * c.kv_dim);
    }
    kv_store(k.dev(), v.dev(), kc.dev_data(), vc.dev_data(), c.kv_dim, c.pos0, ctx.stream());
    const std::string shape = fmt::format("T={} kv_dim={} pos0={}{} {}", c.T, c.kv_dim, c.pos0,
                                          view_desc(c.off, 1), c.what);
    Result rk = kc.check("kv_store", shape + " (k cache)", kTolExact);
    out.push_back(vc.check("kv_store", shape + " (v cache)", kTolExact));
    if (c.perf) {
      timed(ctx, rk, 4.0 * double(c.T * c.kv_dim) * 4, [&](int) {
        kv_store(k.dev(), v.dev(), kc.dev_data(), vc.dev_data(), c.kv_dim, c.pos0, ctx.stream());
      });
    }
    out.push_back(rk);
  }
}

void check_embed(Context& ctx, std::vector<Result>& out) {
  struct Case {
    quant::Type type;
    int64_t n_in, n_vocab, T;
    bool perf;
  };
  std::vector<Case> cases;
  for (quant::Type t :
       {quant::Type::F32, quant::Type::F16, quant::Type::BF16, quant::Type::Q8_0, quant::Type::Q4_0,
        quant::Type::Q1_0, quant::Type::Q2_0, quant::Type::PQ2_0}) {
    cases.push_back({t, 256, 37, 5, false});
  }
  cases.push_back({quant::Type::Q1_0, 5120, 300, 1, true});
  cases.push_back({quant::Type::BF16, 5120, 300, 3, false});
  for (const Case& c : cases) {
    const quant::TypeInfo& info = quant::type_info(c.type);
    const size_t row_bytes = quant::row_bytes(c.type, c.n_in);
    std::vector<uint8_t> table(row_bytes * size_t(c.n_vocab));
    for (int64_t r = 0; r < c.n_vocab; ++r) {
      const std::vector<float> src = ctx.random(size_t(c.n_in));
      quant::quantize_row(c.type, src.data(), table.data() + size_t(r) * row_bytes, c.n_in);
    }
    std::vector<int32_t> ids(size_t(c.T));
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(c.n_vocab - 1));
    for (int32_t& id : ids) id = pick(ctx.rng());
    DeviceBuffer d_table(table.size()), d_ids(ids.size() * sizeof(int32_t));
    CUDA_CHECK(cudaMemcpyAsync(d_table.get(), table.data(), table.size(), cudaMemcpyHostToDevice,
                               ctx.stream()));
    CUDA_CHECK(cudaMemcpyAsync(d_ids.get(), ids.data(), d_ids.bytes(), cudaMemcpyHostToDevice,
                               ctx.stream()));
    Buf y(ctx, c.T, c.n_in, 1, 1);
    y.poison();
    const model::Matrix m{"token_embd", c.type, c.n_in, c.n_vocab, row_bytes, table.data()};
    cpu::embed(m, ids.data(), y.host());
    const DevTable dt{d_table.get(), c.type, c.n_in, c.n_vocab, row_bytes};
    embed(dt, d_ids.as<int32_t>(), y.dev(), ctx.stream());
    Result r =
        y.check("embed", fmt::format("{} T={} E={} vocab={}", info.name, c.T, c.n_in, c.n_vocab),
                kTolExact);
    if (c.perf) {
      timed(ctx, r, double(c.T) * (double(row_bytes) + double(c.n_in) * 4),
            [&](int) { embed(dt, d_ids.as<int32_t>(), y.dev(), ctx.stream()); });
    }
    out.push_back(r);
  }

  // An id outside the vocabulary cannot throw on the GPU: its row must come out NaN and the
  // other rows right.
  {
    const int64_t n_in = 64, n_vocab = 5;
    const std::vector<float> table = ctx.random(size_t(n_in * n_vocab));
    const std::vector<int32_t> ids = {2, int32_t(n_vocab), -1, 0};
    DeviceBuffer d_table(table.size() * sizeof(float)), d_ids(ids.size() * sizeof(int32_t));
    CUDA_CHECK(cudaMemcpyAsync(d_table.get(), table.data(), d_table.bytes(), cudaMemcpyHostToDevice,
                               ctx.stream()));
    CUDA_CHECK(cudaMemcpyAsync(d_ids.get(), ids.data(), d_ids.bytes(), cudaMemcpyHostToDevice,
                               ctx.stream()));
    Buf y(ctx, int64_t(ids.size()), n_in);
    y.poison();
    embed({d_table.get(), quant::Type::F32, n_in, n_vocab, size_t(n_in) * sizeof(float)},
          d_ids.as<int32_t>(), y.dev(), ctx.stream());
    sync(ctx);
    std::vector<float> got(size_t(n_in) * ids.size());
    CUDA_CHECK(cudaMemcpyAsync(got.data(), y.dev_data(), got.size() * sizeof(float),
                               cudaMemcpyDeviceToHost, ctx.stream()));
    sync(ctx);
    Result r;
    r.op = "embed";
    r.shape = "ids out of range give NaN rows";
    r.passed = true;
    for (size_t t = 0; t < ids.size(); ++t) {
      const bool bad = ids[t] < 0 || ids[t] >= n_vocab;
      for (int64_t j = 0; j < n_in; ++j) {
        const float g = got[t * size_t(n_in) + size_t(j)];
        const bool ok = bad ? std::isnan(g) : g == table[size_t(ids[t] * n_in + j)];
        if (!ok && r.passed) {
          r.passed = false;
          r.error = INFINITY;
          r.detail = fmt::format("row {} (id {}) element {} is {}", t, ids[t], j, g);
        }
      }
    }
    out.push_back(r);
  }
}

// ---------------------------------------------------------------------------------------------
// conv_step

void check_conv(Context& ctx, std::vector<Result>& out) {
  struct Case {
    int64_t T, C, K, off, pad;
    bool perf;
    const char* what;
  };
  const Case cases[] = {
      {1, 10240, 4, 0, 0, true, "bonsai"},
      {5, 10240, 4, 0, 0, false, "bonsai prefill"},
      {1, 512, 4, 0, 0, false, "tiny"},
      {3, 512, 4, 0, 0, false, "tiny prefill"},
      {2, 77, 4, 3, 2, false, "odd"},
      {4, 33, 1, 0, 1, false, "no history"},
      {3, 40, 2, 1, 0, false, "K=2"},
      {6, 9, 8, 0, 0, false, "K=8"},
      {1, 1, 4, 0, 0, false, "one"},
      {37, 300, 4, 0, 0, false, "long prefill"},
      {16, 70, 3, 2, 1, false, "two token batches"},
  };
  for (const Case& c : cases) {
    const int64_t hist = c.K - 1;
    Buf x(ctx, c.T, c.C, c.off, c.pad), y(ctx, c.T, c.C, 0, c.off);
    Buf w(ctx, 1, c.C * c.K, 0, 0, -0.5f, 0.5f);
    Buf state(ctx, 1, std::max<int64_t>(1, hist * c.C));
    y.poison();
    const std::string shape =
        fmt::format("T={} C={} K={}{} {}", c.T, c.C, c.K, view_desc(c.off, c.pad), c.what);
    cpu::conv_step(x.host(), y.host(), w.host_data(), c.K, state.host_data());
    conv_step(x.dev(), y.dev(), w.dev_data(), c.K, state.dev_data(), ctx.stream());
    Result r = y.check("conv_step", shape, kTolConv);
    if (hist > 0) out.push_back(state.check("conv_step", shape + " (state)", kTolConv));
    if (c.perf) {
      const double bytes = double(c.C) * 4 * double(2 * c.T + c.K + 2 * hist);
      timed(ctx, r, bytes, [&](int) {
        conv_step(x.dev(), y.dev(), w.dev_data(), c.K, state.dev_data(), ctx.stream());
      });
    }
    out.push_back(r);
  }
}

// ---------------------------------------------------------------------------------------------
// gdn_recurrence

void check_gdn(Context& ctx, std::vector<Result>& out) {
  struct Case {
    int64_t T, Hk, Hv, d;
    bool perf;
    const char* what;
  };
  // With 132 SMs the launcher's column slices are 16 (Bonsai), 32 (Hv·d/32 >= 264: the
  // 96- and 72-head cases) and 8 (small models); d 64–256 covers every instantiated row count.
  const Case cases[] = {
      {1, 16, 48, 128, true, "bonsai decode"},
      {4, 16, 48, 128, false, "bonsai prefill"},
      {1, 16, 16, 128, false, "qwen35-0.8b"},
      {1, 2, 4, 64, false, "tiny decode"},
      {7, 2, 4, 64, false, "tiny prefill"},
      {64, 2, 4, 64, false, "tiny long"},
      {2, 16, 96, 128, false, "wide"},
      {1, 8, 72, 256, false, "d=256 wide"},
      {2, 8, 24, 256, false, "d=256"},
      {3, 1, 2, 256, false, "d=256 few heads"},
      {33, 2, 6, 77, false, "odd d"},
      {5, 1, 3, 3, false, "d=3"},
      {2, 1, 1, 1, false, "one"},
  };
  for (const Case& c : cases) {
    const int64_t qk = c.Hk * c.d, inner = c.Hv * c.d;
    // q | k | v as views of the conv output, as the decode program lays them out.
    Buf conv(ctx, c.T, 2 * qk + inner);
    {
      cpu::Rows all = conv.host();
      cpu::Rows qh{all.data, all.rows, qk, all.ld}, kh{all.data + qk, all.rows, qk, all.ld};
      cpu::l2_norm(qh, qh, c.d, kEps);  // the recurrence is fed L2-normalised q and k
      cpu::l2_norm(kh, kh, c.d, kEps);
      conv.upload();
    }
    const DevRows dall = conv.dev();
    const DevRows q{dall.data, c.T, qk, dall.ld}, k{dall.data + qk, c.T, qk, dall.ld};
    const DevRows v{dall.data + 2 * qk, c.T, inner, dall.ld};
    cpu::Rows hall = conv.host();
    const cpu::Rows qh{hall.data, c.T, qk, hall.ld}, kh{hall.data + qk, c.T, qk, hall.ld};
    const cpu::Rows vh{hall.data + 2 * qk, c.T, inner, hall.ld};
    // g = softplus(·)·(−e^A_log) < 0, β = sigmoid(·) ∈ (0, 1).
    Buf g(ctx, c.T, c.Hv, 1, 2, -2.0f, -0.01f), beta(ctx, c.T, c.Hv, 0, 1, 0.05f, 0.95f);
    Buf o(ctx, c.T, inner, c.T % 2, 1);
    Buf state(ctx, 1, c.Hv * c.d * c.d);
    o.poison();
    const std::string shape = fmt::format("T={} Hk={} Hv={} d={} {}", c.T, c.Hk, c.Hv, c.d, c.what);
    cpu::gdn_recurrence(qh, kh, vh, g.host(), beta.host(), o.host(), state.host_data(), c.Hk, c.Hv,
                        c.d);
    gdn_recurrence(q, k, v, g.dev(), beta.dev(), o.dev(), state.dev_data(), c.Hk, c.Hv, c.d,
                   ctx.stream());
    Result r = o.check("gdn_recurrence", shape, tol_gdn(c.T));
    out.push_back(state.check("gdn_recurrence", shape + " (state)", tol_gdn(c.T)));
    if (c.perf && ctx.perf()) {
      const double state_bytes = double(c.Hv * c.d * c.d) * 4;
      const int copies = rotation_copies(2 * state_bytes);
      std::vector<DeviceBuffer> states;
      for (int i = 0; i < copies; ++i) {
        states.emplace_back(size_t(state_bytes));
        CUDA_CHECK(cudaMemcpyAsync(states.back().get(), state.dev_data(), size_t(state_bytes),
                                   cudaMemcpyDeviceToDevice, ctx.stream()));
      }
      const double io = double(c.T) * 4 * double(2 * qk + 2 * inner + 2 * c.Hv);
      timed(ctx, r, 2 * state_bytes + io, [&](int i) {
        gdn_recurrence(q, k, v, g.dev(), beta.dev(), o.dev(),
                       states[size_t(i % copies)].as<float>(), c.Hk, c.Hv, c.d, ctx.stream());
      });
    }
    out.push_back(r);
  }
}

// ---------------------------------------------------------------------------------------------
// rope and attention

void check_rope(Context& ctx, std::vector<Result>& out) {
  struct Case {
    int64_t T, heads, hd, n_rot, pos0;
    float theta;
    int64_t off;
    bool perf;
    const char* what;
  };
  const Case cases[] = {
      {1, 24, 256, 64, 0, 1e7f, 0, false, "bonsai q, pos 0"},
      {1, 24, 256, 64, 4095, 1e7f, 0, true, "bonsai q"},
      {1, 4, 256, 64, 100000, 1e7f, 0, false, "bonsai k, far"},
      {5, 24, 256, 64, 37, 1e7f, 0, false, "bonsai prefill"},
      {3, 4, 64, 16, 3, 1e7f, 0, false, "tiny"},
      {2, 3, 10, 6, 1, 1e4f, 3, false, "odd"},
      {1, 2, 8, 8, 262143, 1e6f, 1, false, "full rotation"},
      {4, 1, 2, 2, 5, 1e4f, 0, false, "one pair"},
  };
  for (const Case& c : cases) {
    Buf x(ctx, c.T, c.heads * c.hd, c.off, c.off);
    const std::string shape =
        fmt::format("T={} heads={} head_dim={} n_rot={} pos0={} theta={:g}{} {}", c.T, c.heads,
                    c.hd, c.n_rot, c.pos0, c.theta, view_desc(c.off, c.off), c.what);
    cpu::rope(x.host(), c.hd, c.n_rot, c.theta, c.pos0);
    rope(x.dev(), c.hd, c.n_rot, c.theta, c.pos0, ctx.stream());
    Result r = x.check("rope", shape, kTolRope);
    if (c.perf) {
      timed(ctx, r, 2.0 * double(c.T * c.heads * c.n_rot) * 4,
            [&](int) { rope(x.dev(), c.hd, c.n_rot, c.theta, c.pos0, ctx.stream()); });
    }
    out.push_back(r);
  }
}

void check_attention(Context& ctx, std::vector<Result>& out) {
  struct Case {
    int64_t T, H, Hkv, D, pos0, off;
    bool perf;
    const char* what;
  };
  // D 1, 32 | 33, 64 | 77, 128 | 256 cover every lanes-per-dim instantiation at its edges.
  // With 132 SMs the key split S is 8 for decode at 4096 and the 3000-key case, 4 at 1000, 2
  // for the 260-row prefill (whose first rows give the second CTA no key), 1 elsewhere.
  const Case cases[] = {
      {1, 24, 4, 256, 0, 0, false, "bonsai decode, first token"},
      {1, 24, 4, 256, 1000, 0, false, "bonsai decode"},
      {1, 24, 4, 256, 4095, 0, true, "bonsai decode"},
      {7, 24, 4, 256, 0, 0, false, "bonsai prefill"},
      {5, 24, 4, 256, 50, 3, false, "bonsai prefill after 50"},
      {1, 4, 2, 64, 5, 0, false, "tiny decode"},
      {9, 4, 2, 64, 0, 0, false, "tiny prefill"},
      {33, 4, 2, 64, 3, 0, false, "tiny prefill"},
      {4, 3, 1, 3, 2, 1, false, "odd"},
      {2, 1, 1, 1, 0, 0, false, "one"},
      {3, 6, 3, 77, 10, 0, false, "D=77"},
      {2, 2, 1, 32, 40, 0, false, "D=32"},
      {2, 2, 2, 33, 40, 0, false, "D=33"},
      {3, 8, 2, 128, 70, 0, false, "D=128"},
      {3, 2, 1, 64, 3000, 0, false, "long context, split keys"},
      {260, 1, 1, 64, 0, 0, false, "split keys, early rows leave CTAs empty"},
  };
  for (const Case& c : cases) {
    const int64_t n_ctx = c.pos0 + c.T + 3, kv_dim = c.Hkv * c.D, qd = c.H * c.D;
    // q·k/√D spread like a trained model's (scores of a few units), so the softmax is neither
    // flat nor one-hot and wrong keys or weights show.
    Buf q(ctx, c.T, qd, c.off, 1, -4.0f, 4.0f), o(ctx, c.T, qd, 0, c.off);
    Buf kc(ctx, n_ctx, kv_dim), vc(ctx, n_ctx, kv_dim);
    // Positions past pos0 + T − 1 hold NaN: reading them (a causality bug) poisons the output.
    const int64_t used = c.pos0 + c.T;
    std::fill(kc.host_data() + used * kv_dim, kc.host_data() + n_ctx * kv_dim, kPoison);
    std::fill(vc.host_data() + used * kv_dim, vc.host_data() + n_ctx * kv_dim, kPoison);
    kc.upload();
    vc.upload();
    o.poison();
    const std::string shape = fmt::format("T={} H={} Hkv={} D={} pos0={}{} {}", c.T, c.H, c.Hkv,
                                          c.D, c.pos0, view_desc(c.off, 1), c.what);
    cpu::attention(q.host(), kc.host_data(), vc.host_data(), o.host(), c.H, c.Hkv, c.D, c.pos0);
    attention(q.dev(), kc.dev_data(), vc.dev_data(), o.dev(), c.H, c.Hkv, c.D, c.pos0,
              ctx.stream());
    Result r = o.check("attention", shape, kTolAttention);
    if (c.perf && ctx.perf()) {
      const double kv_bytes = 2.0 * double(used * kv_dim) * 4;
      const int copies = rotation_copies(kv_bytes);
      std::vector<DeviceBuffer> caches;
      for (int i = 0; i < 2 * copies; ++i) {
        caches.emplace_back(kc.bytes());
        CUDA_CHECK(cudaMemcpyAsync(caches.back().get(), (i % 2 ? vc : kc).dev_data(), kc.bytes(),
                                   cudaMemcpyDeviceToDevice, ctx.stream()));
      }
      timed(ctx, r, kv_bytes + 2.0 * double(c.T * qd) * 4, [&](int i) {
        const int j = i % copies;
        attention(q.dev(), caches[size_t(2 * j)].as<float>(), caches[size_t(2 * j + 1)].as<float>(),
                  o.dev(), c.H, c.Hkv, c.D, c.pos0, ctx.stream());
      });
    }
    out.push_back(r);
  }
}

}  // namespace

void add_ops_checks(Context& ctx, std::vector<Result>& out) {
  check_norms(ctx, out);
  check_unary(ctx, out);
  check_binary(ctx, out);
  check_broadcast(ctx, out);
  check_split_heads(ctx, out);
  check_copies(ctx, out);
  check_kv_store(ctx, out);
  check_embed(ctx, out);
  check_conv(ctx, out);
  check_gdn(ctx, out);
  check_rope(ctx, out);
  check_attention(ctx, out);
}

}  // namespace gdn::cuda::opcheck
