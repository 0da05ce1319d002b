// Op checks for the non-matmul kernels (kernels.h) against the CPU reference (cpu/ops.h):
// `gdn ops` runs ops_families(), one family per kernel family.
//
// Every case: random non-zero inputs (ctx.random), outputs poisoned with NaN (0xFF bytes)
// before the run, the kernel's result compared with the CPU's over the view, and every float
// of the buffer outside the view compared bit for bit with what it held before the run (a
// kernel that writes past its view fails even when the view is right). Views are column
// ranges of wider buffers wherever the decode program uses them that way (q | k | v inside
// the conv output), and odd offsets elsewhere so both the float4 and the scalar paths run.
// State-updating ops (conv_step, gdn_recurrence, kv_store) also compare the updated state.
//
// Fused kernels (the ladder's rungs) are also compared BIT FOR BIT (memcmp) with the unfused
// GPU sequence they replace, which is what makes a rung exact: conv_step's fused SiLU and
// state modes against conv + unary Silu and concat_rows + window conv + copy_rows;
// gdn_recurrence with every fusion (gating, l2norm) × state type (f32, f16, bf16) × state
// placement (in place, slot → work, work → slot) against l2_norm, the gating kernels and
// copy_state gather / f32 recurrence / scatter. Those cases report the number of differing
// elements as their error, with tolerance 0.
//
// Shapes: Bonsai-27B (E 5120, H 24, Hkv 4, D 256, n_rot 64, Hk 16, Hv 48, d 128, conv 10240,
// FFN 17408), Qwen3.5-0.8B (Hk = Hv = 16), the tiny synthetic model (E 256, H 4, Hkv 2, D 64,
// n_rot 16, Hk 2, Hv 4, d 64), and odd sizes (1, 3, 77) that no warp or float4 divides.
//
// Tolerances: max|gpu − ref| / max|ref| (opcheck::compare), derived in each kernel's design
// comment:
//   copies, split_heads, kv_store, embed, add, add_vec, mul_vec,
//   concat_rows, copy_state (against host widen + round-to-nearest-even)   0   the same f32 ops
//                                                      or none
//   conv_step                                   1e-7   double accumulation in the CPU's order:
//                                                      bit-exact expected (1e-6 with the SiLU)
//   sigmoid, softplus, silu, silu_mul, sigmoid_mul   1e-6   expf/log1pf within 2 ulp of
//                                                      glibc's: a few ulp (≲ 5e-7) per element
//   rope                                        1e-6   double angle and rotation, rounded
//                                                      once: ≤ 1 ulp (6e-8) expected
//   attention_prep's new rows (vs the CPU)      5e-6   rms_norm's then rope's (the rotation
//                                                      keeps the head's norm); against the
//                                                      unfused kernels: 0 (bit for bit)
//   rms_norm, l2_norm                           4e-6   f32 sum of squares, ≲ 1e-6 (norm.cu)
//   gdn_recurrence (out and state)      4e-6 + 4e-7·T  f32 reductions per token, errors
//                                                      at most linear in T (gdn.cu)
//     f16 / bf16 state                 + 2^-10 / 2^-7  the stored state: GPU and CPU f32 values
//                                                      may round to neighbouring values
//   attention                                   3e-5   f32 scores and accumulators over up to
//                                                      4096 keys; max|out| can be ~0.2·max|v|
//                                                      when the softmax spreads (attention.cu)
// Measured on an H200 (2026-11-30, seeds 1–8): conv, rope, copies and embed exact; every other
// error ≤ 6e-7 (norms and activations ~1e-7, gdn ~2e-7 up to T = 64, attention ≤ 6e-7 at
// 4096 keys), so each tolerance is a bound with margin, not a fit to the data.
#include <fmt/format.h>

#include <algorithm>
#include <array>
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

std::vector<Family> ops_families();  // op_check.cpp's families()

namespace {

// kernels.h restates cpu/ops.h's enumerator values for the C++17 .cu files.
static_assert(int(cpu::Unary::Sigmoid) == op_value::kSigmoid &&
              int(cpu::Unary::Softplus) == op_value::kSoftplus &&
              int(cpu::Unary::Silu) == op_value::kSilu);
static_assert(int(cpu::Binary::Add) == op_value::kAdd &&
              int(cpu::Binary::SiluMul) == op_value::kSiluMul &&
              int(cpu::Binary::SigmoidMul) == op_value::kSigmoidMul &&
              int(cpu::Binary::Mul) == op_value::kMul);
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

  // Host ← the other buffer's host contents (same dimensions), then uploaded.
  void copy_from(const Buf& o) {
    if (o.host_.size() != host_.size()) fail("opcheck Buf::copy_from: different sizes");
    host_ = o.host_;
    upload();
  }

  // The view's floats as the device holds them now (for bitwise comparisons).
  std::vector<float> device_view() const {
    std::vector<float> got(host_.size()), v;
    CUDA_CHECK(cudaStreamSynchronize(s_));
    CUDA_CHECK(cudaMemcpyAsync(got.data(), dev_.get(), bytes(), cudaMemcpyDeviceToHost, s_));
    CUDA_CHECK(cudaStreamSynchronize(s_));
    v.reserve(size_t(rows_ * cols_));
    for (int64_t i = 0; i < rows_; ++i) {
      for (int64_t c = 0; c < cols_; ++c) v.push_back(got[size_t(i * ld_ + off_ + c)]);
    }
    return v;
  }

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

// Bit-for-bit comparison of n elements of elem bytes (a fused kernel against the unfused
// sequence it replaces): error is the number of differing elements, tolerance 0.
Result bitwise(const std::string& op, const std::string& shape, const void* got, const void* want,
               size_t n, size_t elem) {
  Result r;
  r.op = op;
  r.shape = shape;
  r.passed = true;
  const auto* g = static_cast<const uint8_t*>(got);
  const auto* w = static_cast<const uint8_t*>(want);
  size_t first = n;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(g + i * elem, w + i * elem, elem) != 0) {
      if (first == n) first = i;
      r.error += 1;
    }
  }
  if (first < n) {
    r.passed = false;
    uint32_t gb = 0, wb = 0;
    std::memcpy(&gb, g + first * elem, std::min<size_t>(elem, 4));
    std::memcpy(&wb, w + first * elem, std::min<size_t>(elem, 4));
    r.detail =
        fmt::format("{} of {} elements differ; first: element {} is 0x{:0{}x}, expected 0x{:0{}x}",
                    r.error, n, first, gb, 2 * elem, wb, 2 * elem);
  }
  return r;
}

Result bitwise(const std::string& op, const std::string& shape, const std::vector<float>& got,
               const std::vector<float>& want) {
  if (got.size() != want.size()) {
    Result r;
    r.op = op;
    r.shape = shape;
    r.detail = fmt::format("size {} vs {}", got.size(), want.size());
    return r;
  }
  return bitwise(op, shape, got.data(), want.data(), got.size(), sizeof(float));
}

// r, unless r passed and next did not (one Result for several conditions of one case).
void also(Result& r, const Result& next) {
  if (r.passed && !next.passed) {
    const std::string shape = r.shape;
    r = next;
    r.shape = shape;
    if (next.shape != shape) r.detail = fmt::format("{}: {}", next.shape, next.detail);
  }
}

// ---------------------------------------------------------------------------------------------
// Recurrent states in their storage types, on the host: the device widens exactly and rounds
// to nearest even (cuda/state.cuh); quant's converters do the same (subnormals kept,
// overflow to ±inf), so a host-rounded value is the device's bit for bit (NaN aside: the
// checks make none).

using model::StateType;
constexpr StateType kStateTypes[] = {StateType::F32, StateType::F16, StateType::BF16};

float widen(StateType t, const uint8_t* p) {
  if (t == StateType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return t == StateType::F16 ? quant::fp16_to_f32(h) : quant::bf16_to_f32(h);
}

void narrow(StateType t, float v, uint8_t* p) {
  if (t == StateType::F32) {
    std::memcpy(p, &v, 4);
    return;
  }
  const uint16_t h = t == StateType::F16 ? quant::f32_to_fp16(v) : quant::f32_to_bf16(v);
  std::memcpy(p, &h, 2);
}

std::vector<uint8_t> to_state(StateType t, const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * model::state_type_bytes(t));
  for (size_t i = 0; i < v.size(); ++i) narrow(t, v[i], b.data() + i * model::state_type_bytes(t));
  return b;
}

std::vector<float> from_state(StateType t, const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / model::state_type_bytes(t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = widen(t, b.data() + i * model::state_type_bytes(t));
  return v;
}

// One relative ulp of the storage type (2^-23, 2^-10, 2^-7): what one rounding step can
// differ by when the GPU's and the CPU's f32 values straddle a rounding boundary.
// A slot's state as the executor passes it to the recurrence during a forward (read before
// pdl_wait); the work buffer after the gather stays unsettled, as in the baseline.
DevState settled(DevState d) {
  d.settled = true;
  return d;
}

double state_ulp(StateType t) {
  return t == StateType::F32 ? 0.0 : t == StateType::F16 ? 0x1p-10 : 0x1p-7;
}

// A device buffer's bytes once the stream's work before has finished.
std::vector<uint8_t> download(const DeviceBuffer& b, cudaStream_t s) {
  std::vector<uint8_t> got(b.bytes());
  CUDA_CHECK(cudaStreamSynchronize(s));
  CUDA_CHECK(cudaMemcpyAsync(got.data(), b.get(), got.size(), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return got;
}

// n state values of one type on the device, between off values before and pad after that
// hold random bytes (a guard: a kernel writing past the state is caught bit for bit).
class StateBuf {
 public:
  StateBuf(Context& ctx, StateType type, int64_t n, int64_t off = 0, int64_t pad = 0)
      : type_(type),
        n_(size_t(n)),
        off_(size_t(off)),
        eb_(model::state_type_bytes(type)),
        s_(ctx.stream()),
        host_((off_ + n_ + size_t(pad)) * eb_),
        dev_(host_.size()) {
    for (uint8_t& b : host_) b = static_cast<uint8_t>(ctx.rng()() >> 24);
    upload();
  }

  DevState dev() const { return {dev_.as<uint8_t>() + off_ * eb_, type_}; }
  StateType type() const { return type_; }
  size_t n() const { return n_; }
  size_t view_bytes() const { return n_ * eb_; }

  // The view ← stored values (view_bytes() bytes); the guard keeps its bytes.
  void set(const std::vector<uint8_t>& view) {
    std::copy(view.begin(), view.end(), host_.begin() + std::ptrdiff_t(off_ * eb_));
    upload();
  }
  // Everything ← 0xFF bytes (NaN in every type): an output the kernel must overwrite.
  void poison() {
    CUDA_CHECK(cudaMemsetAsync(dev_.get(), 0xFF, host_.size(), s_));
    snapshot();
  }
  // What the device holds now becomes the reference for the guard (after a device-side fill).
  void snapshot() { before_ = download(); }

  // The view's stored bytes as on the device now.
  std::vector<uint8_t> view() const {
    const std::vector<uint8_t> all = download();
    return {all.begin() + std::ptrdiff_t(off_ * eb_),
            all.begin() + std::ptrdiff_t((off_ + n_) * eb_)};
  }
  // The view's bytes against `want`, bit for bit, and the guard against the snapshot.
  Result check_bits(const std::string& op, const std::string& shape,
                    const std::vector<uint8_t>& want) const {
    const std::vector<uint8_t> all = download();
    Result r = bitwise(op, shape, all.data() + off_ * eb_, want.data(), n_, eb_);
    also(r, guard(op, shape, all));
    return r;
  }
  // The view widened to f32 against an f32 reference within tol, and the guard.
  Result check_values(const std::string& op, const std::string& shape,
                      const std::vector<float>& ref, double tol) const {
    const std::vector<uint8_t> all = download();
    std::vector<float> got(n_);
    for (size_t i = 0; i < n_; ++i) got[i] = widen(type_, all.data() + (off_ + i) * eb_);
    Result r = compare(op, shape, got, ref, tol);
    also(r, guard(op, shape, all));
    return r;
  }

 private:
  std::vector<uint8_t> download() const { return opcheck::download(dev_, s_); }
  void upload() {
    CUDA_CHECK(cudaMemcpyAsync(dev_.get(), host_.data(), host_.size(), cudaMemcpyHostToDevice, s_));
    CUDA_CHECK(cudaStreamSynchronize(s_));
    before_ = host_;
  }
  Result guard(const std::string& op, const std::string& shape,
               const std::vector<uint8_t>& all) const {
    Result r;
    r.op = op;
    r.shape = shape;
    r.passed = true;
    for (size_t i = 0; i < all.size(); ++i) {
      if (i >= off_ * eb_ && i < (off_ + n_) * eb_) continue;
      if (all[i] != before_[i]) {
        r.passed = false;
        r.error = INFINITY;
        r.detail = fmt::format("wrote outside the state: byte {} (view bytes [{}, {}))", i,
                               off_ * eb_, (off_ + n_) * eb_);
        break;
      }
    }
    return r;
  }

  StateType type_;
  size_t n_, off_, eb_;
  cudaStream_t s_;
  std::vector<uint8_t> host_, before_;
  DeviceBuffer dev_;
};

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
      {cpu::Binary::Mul, "mul", kTolExact, {1, 6144, 0, 0, true, true, "bonsai gate"}},
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
}

// copy_state: all nine storage-type pairs, values against the host's widen-then-round and
// bit for bit; round trips; odd counts and offsets (the scalar path) and the Bonsai state.
void check_state_copies(Context& ctx, std::vector<Result>& out) {
  struct Case {
    int64_t n, src_off, dst_off;
    bool perf;
    const char* what;
  };
  const Case cases[] = {
      {48 * 128 * 128, 0, 0, true, "bonsai state"},
      {4 * 64 * 64, 0, 4, false, "tiny state"},
      {77, 1, 3, false, "odd, unaligned"},
      {1, 3, 0, false, "one"},
  };
  // Values every conversion must get right besides random ones: the f16 maximum and the
  // first value that overflows it, an f16 subnormal and an underflow to zero, −0, ties to
  // even in f16 (1 + 2^-11, 1 + 3·2^-11) and bf16 (1 + 2^-8, 1 + 3·2^-8), a large bf16.
  const float specials[] = {
      65504.0f,       65520.0f,          3e-6f, 1e-9f,   -0.0f,  1.0f + 0x1p-11f, 1.0f + 0x3p-11f,
      1.0f + 0x1p-8f, -(1.0f + 0x3p-8f), 3e38f, -7.0e4f, 6.1e-5f};
  for (const Case& c : cases) {
    std::vector<float> values = ctx.random(size_t(c.n), -2.0f, 2.0f);
    for (size_t i = 0; i < std::size(specials) && i < values.size(); ++i) values[i] = specials[i];
    for (StateType from : kStateTypes) {
      const std::vector<uint8_t> src_bits = to_state(from, values);
      const std::vector<float> src_vals = from_state(from, src_bits);  // exact
      StateBuf src(ctx, from, c.n, c.src_off, 1);
      src.set(src_bits);
      for (StateType to : kStateTypes) {
        StateBuf dst(ctx, to, c.n, c.dst_off, 2);
        dst.poison();
        copy_state(src.dev(), dst.dev(), c.n, ctx.stream());
        const std::string shape =
            fmt::format("{} -> {} n={} src+{} dst+{} {}: widen exactly, round to nearest even",
                        model::state_type_name(from), model::state_type_name(to), c.n, c.src_off,
                        c.dst_off, c.what);
        Result r = dst.check_bits("copy_state", shape, to_state(to, src_vals));
        also(r, src.check_bits("copy_state", shape + " (source untouched)", src_bits));
        if (c.perf && ctx.perf() && (from == StateType::F32 || to == StateType::F32)) {
          const double bytes =
              double(c.n) * double(model::state_type_bytes(from) + model::state_type_bytes(to));
          const int copies = rotation_copies(bytes);
          std::vector<DeviceBuffer> srcs;
          for (int i = 0; i < copies; ++i) {
            srcs.emplace_back(size_t(c.n) * model::state_type_bytes(from));
            CUDA_CHECK(cudaMemsetAsync(srcs.back().get(), 0, srcs.back().bytes(), ctx.stream()));
          }
          r.shape = fmt::format("{} -> {} {}", model::state_type_name(from),
                                model::state_type_name(to), c.what);
          timed(ctx, r, bytes, [&](int i) {
            copy_state({srcs[size_t(i % copies)].get(), from}, dst.dev(), c.n, ctx.stream());
          });
        }
        out.push_back(r);
      }
    }
    // Round trips through each narrow type: f32 → T → f32 rounds once; T → f32 → T is the
    // identity.
    for (StateType t : {StateType::F16, StateType::BF16}) {
      const std::vector<uint8_t> f32_bits = to_state(StateType::F32, values);
      StateBuf a(ctx, StateType::F32, c.n, c.src_off, 1), mid(ctx, t, c.n, c.dst_off, 1);
      StateBuf back(ctx, StateType::F32, c.n, 0, 1);
      a.set(f32_bits);
      mid.poison();
      back.poison();
      copy_state(a.dev(), mid.dev(), c.n, ctx.stream());
      copy_state(mid.dev(), back.dev(), c.n, ctx.stream());
      const std::vector<uint8_t> rounded = to_state(t, values);
      out.push_back(back.check_bits("copy_state",
                                    fmt::format("f32 -> {} -> f32 n={} {}: one rounding",
                                                model::state_type_name(t), c.n, c.what),
                                    to_state(StateType::F32, from_state(t, rounded))));
      StateBuf again(ctx, t, c.n, 1, 0);
      again.poison();
      copy_state(back.dev(), again.dev(), c.n, ctx.stream());
      out.push_back(again.check_bits(
          "copy_state",
          fmt::format("{} -> f32 -> {} n={} {}: identity", model::state_type_name(t),
                      model::state_type_name(t), c.n, c.what),
          rounded));
    }
  }
}

// concat_rows: y = [a; b] in one launch (the baseline conv's window), exact.
void check_concat(Context& ctx, std::vector<Result>& out) {
  struct Case {
    int64_t a_rows, b_rows, cols, off;
    bool perf;
    const char* what;
  };
  const Case cases[] = {
      {3, 1, 10240, 0, true, "bonsai conv window, decode"},
      {3, 64, 10240, 0, false, "bonsai conv window, prefill 64"},
      {3, 5, 77, 1, false, "odd, unaligned"},
      {1, 1, 1, 0, false, "one"},
      {7, 2, 300, 3, false, "K=8 window"},
  };
  for (const Case& c : cases) {
    Buf a(ctx, c.a_rows, c.cols), b(ctx, c.b_rows, c.cols, c.off, 2);
    Buf y(ctx, c.a_rows + c.b_rows, c.cols, c.off, 1);
    y.poison();
    cpu::Rows ah = a.host(), bh = b.host(), yh = y.host();
    for (int64_t t = 0; t < c.a_rows; ++t) std::copy_n(ah.row(t), c.cols, yh.row(t));
    for (int64_t t = 0; t < c.b_rows; ++t) std::copy_n(bh.row(t), c.cols, yh.row(c.a_rows + t));
    concat_rows(a.dev(), b.dev(), y.dev(), ctx.stream());
    Result r = y.check("concat_rows",
                       fmt::format("a [{}x{}] b [{}x{}]{} {}", c.a_rows, c.cols, c.b_rows, c.cols,
                                   view_desc(c.off, 1), c.what),
                       kTolExact);
    if (c.perf) {
      timed(ctx, r, 2.0 * double((c.a_rows + c.b_rows) * c.cols) * 4,
            [&](int) { concat_rows(a.dev(), b.dev(), y.dev(), ctx.stream()); });
    }
    out.push_back(r);
  }
}

// empty_kernel: launches and completes (gdn bench prices a dispatch with it).
void check_empty(Context& ctx, std::vector<Result>& out) {
  Result r;
  r.op = "empty_kernel";
  r.shape = "one launch, then a stream synchronise, without error";
  empty_kernel(ctx.stream());
  sync(ctx);
  r.passed = true;
  out.push_back(r);
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
// conv_step: against the CPU, and bit for bit against the sequences its fusions replace:
//   silu fused (rung conv-inplace)  = conv_step, then unary Silu in place;
//   state mode                      = the baseline window: concat_rows(state, x), conv_step
//                                     without a state, copy_rows(last K-1 window rows → state).

void check_conv(Context& ctx, std::vector<Result>& out) {
  struct Case {
    int64_t T, C, K, off, pad;
    bool perf;
    const char* what;
  };
  const Case cases[] = {
      {1, 10240, 4, 0, 0, true, "bonsai decode"},
      {5, 10240, 4, 0, 0, false, "bonsai prefill"},
      {64, 10240, 4, 0, 0, false, "bonsai prefill 64"},
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
  const char* op = "conv_step";
  const cudaStream_t s = ctx.stream();
  for (const Case& c : cases) {
    const int64_t hist = c.K - 1, n_state = std::max<int64_t>(1, hist * c.C);
    Buf x(ctx, c.T, c.C, c.off, c.pad);
    Buf w(ctx, 1, c.C * c.K, 0, 0, -0.5f, 0.5f);
    Buf state0(ctx, 1, n_state);  // the history before the step
    const std::string base =
        fmt::format("T={} C={} K={}{} {}", c.T, c.C, c.K, view_desc(c.off, c.pad), c.what);
    // The CPU reference: conv (and SiLU), the state advanced.
    std::vector<float> y_cpu(size_t(c.T * c.C)),
        st_cpu(state0.host_data(), state0.host_data() + n_state);
    const cpu::Rows y_rows{y_cpu.data(), c.T, c.C, c.C};
    cpu::conv_step(x.host(), y_rows, w.host_data(), c.K, st_cpu.data());
    std::vector<float> y_silu_cpu = y_cpu;
    const cpu::Rows ys_rows{y_silu_cpu.data(), c.T, c.C, c.C};
    cpu::unary(cpu::Unary::Silu, ys_rows, ys_rows);
    const auto state_rows = [&](Buf& b) { return DevRows{b.dev_data(), hist, c.C, c.C}; };
    // A poisoned output whose host view holds the CPU reference.
    const auto output = [&](bool silu, int64_t off) {
      Buf y(ctx, c.T, c.C, 0, off);
      const std::vector<float>& ref = silu ? y_silu_cpu : y_cpu;
      for (int64_t t = 0; t < c.T; ++t) {
        std::copy_n(ref.data() + t * c.C, c.C, y.host().row(t));
      }
      y.poison();
      return y;
    };
    const auto new_state = [&]() {
      Buf st(ctx, 1, n_state);
      st.copy_from(state0);
      std::copy(st_cpu.begin(), st_cpu.end(), st.host_data());  // host: the reference
      return st;
    };

    for (const bool silu : {false, true}) {
      const std::string name = base + (silu ? ", silu fused" : "");
      const double tol = silu ? kTolActivation : kTolConv;
      // The state mode (fused when silu).
      Buf ys = output(silu, c.off), st = new_state();
      conv_step(x.dev(), ys.dev(), w.dev_data(), c.K, st.dev_data(), silu, s);
      Result r = ys.check(op, name + ": vs CPU", tol);
      if (hist > 0) out.push_back(st.check(op, name + ": state vs CPU", kTolConv));
      const std::vector<float> y_fused = ys.device_view(), st_fused = st.device_view();
      if (silu) {  // the unfused pair: conv, then the Silu kernel in place
        Buf yu = output(true, 0), stu = new_state();
        conv_step(x.dev(), yu.dev(), w.dev_data(), c.K, stu.dev_data(), false, s);
        unary(cpu::Unary::Silu, yu.dev(), yu.dev(), s);
        Result b = bitwise(op, base + ": silu fused = conv then unary silu, bitwise", y_fused,
                           yu.device_view());
        also(b, bitwise(op, b.shape, st_fused, stu.device_view()));
        out.push_back(b);
      }
      // The baseline window: [state; x] concatenated, conv without a state, (SiLU,) the last
      // K-1 window rows copied into the state. With K = 1 the window is x itself.
      {
        Buf yw = output(silu, 1), stw = new_state();
        Buf win(ctx, c.T + hist, c.C, c.pad, c.off);
        win.poison();
        DevRows window = x.dev();
        if (hist > 0) {
          concat_rows(state_rows(state0), x.dev(), win.dev(), s);
          window = win.dev();
        }
        conv_step(window, yw.dev(), w.dev_data(), c.K, nullptr, false, s);
        if (silu) unary(cpu::Unary::Silu, yw.dev(), yw.dev(), s);
        if (hist > 0) copy_rows(window, c.T, state_rows(stw), s);
        const std::string wname = name + ": baseline window (concat_rows, conv" +
                                  (silu ? ", unary silu" : "") + ", copy_rows)";
        out.push_back(yw.check(op, wname + " vs CPU", tol));
        Result b = bitwise(op, wname + " = state mode, bitwise", yw.device_view(), y_fused);
        also(b, bitwise(op, b.shape, stw.device_view(), st_fused));
        out.push_back(b);
        if (silu) {  // window mode with the SiLU fused too
          Buf yw2 = output(true, 2);
          conv_step(window, yw2.dev(), w.dev_data(), c.K, nullptr, true, s);
          out.push_back(bitwise(op, base + ": window mode, silu fused = state mode, bitwise",
                                yw2.device_view(), y_fused));
        }
        if (c.perf && !silu) {
          Result rw = yw.check(op, base + ": window conv alone (baseline)", tol);
          timed(ctx, rw, double(c.C) * 4 * double(2 * c.T + c.K + hist),
                [&](int) { conv_step(window, yw.dev(), w.dev_data(), c.K, nullptr, false, s); });
          out.push_back(rw);
        }
      }
      if (c.perf) {
        r.shape =
            base + (silu ? ": state in place, silu fused (conv-inplace)" : ": state in place");
        const double bytes = double(c.C) * 4 * double(2 * c.T + c.K + 2 * hist);
        timed(ctx, r, bytes, [&](int) {
          conv_step(x.dev(), ys.dev(), w.dev_data(), c.K, st.dev_data(), silu, s);
        });
      }
      out.push_back(r);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// gdn_recurrence: every fusion (none, gating, l2norm, both) × state type (f32, f16, bf16) ×
// where the state goes (in place in the slot; slot → f32 work; f32 work → slot), each
//   * bit for bit against the unfused GPU sequence: l2_norm on q and k; sigmoid(b),
//     add_vec(a, dt_bias), softplus, mul_vec(ssm_a); copy_state(slot → f32 work);
//     gdn_recurrence on the work buffer in place; copy_state(work → slot) — out, the state it
//     writes, and the state it only reads left untouched;
//   * within tol_gdn(T) of the CPU reference (cpu/ops.h) started from the widened slot, its
//     final state rounded as the store does (one more ulp of the storage type allowed: the
//     GPU's and the CPU's f32 values may straddle a rounding boundary).

struct GdnShape {
  int64_t T, Hk, Hv, d;
  bool perf;
  std::string what;
};

void check_gdn_case(Context& ctx, std::vector<Result>& out, const GdnShape& c) {
  const char* op = "gdn_recurrence";
  const cudaStream_t s = ctx.stream();
  const int64_t T = c.T, qk = c.Hk * c.d, inner = c.Hv * c.d, n_state = c.Hv * c.d * c.d;
  const double tol = tol_gdn(T);

  // q | k | v raw, as the conv output lays them out, and a copy whose q and k are normalised
  // by the l2_norm kernel (device) and cpu::l2_norm (host: the CPU reference's inputs).
  Buf raw(ctx, T, 2 * qk + inner), normed(ctx, T, 2 * qk + inner);
  normed.copy_from(raw);
  const auto split = [&](DevRows all) {
    return std::array<DevRows, 3>{DevRows{all.data, T, qk, all.ld},
                                  DevRows{all.data + qk, T, qk, all.ld},
                                  DevRows{all.data + 2 * qk, T, inner, all.ld}};
  };
  const auto [qr, kr, vr] = split(raw.dev());
  const auto [qn, kn, vn] = split(normed.dev());
  l2_norm(qn, qn, c.d, kEps, s);
  l2_norm(kn, kn, c.d, kEps, s);
  const cpu::Rows hall = normed.host();
  const cpu::Rows qh{hall.data, T, qk, hall.ld}, kh{hall.data + qk, T, qk, hall.ld};
  const cpu::Rows vh{hall.data + 2 * qk, T, inner, hall.ld};
  cpu::l2_norm(qh, qh, c.d, kEps);
  cpu::l2_norm(kh, kh, c.d, kEps);

  // Raw gating projections a, b (some a past softplus's linear threshold), dt_bias, ssm_a
  // (= −e^A_log < 0), and the finished g, beta the unfused kernels make of them.
  Buf a_raw(ctx, T, c.Hv, 1, 2, -6.0f, 6.0f), b_raw(ctx, T, c.Hv, 0, 1, -6.0f, 6.0f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < c.Hv; ++h) {
      if ((t * c.Hv + h) % 11 == 5) a_raw.host().row(t)[h] = 20.5f + 0.25f * float(h % 5);
    }
  }
  a_raw.upload();
  Buf dt_bias(ctx, 1, c.Hv, 0, 0, -1.0f, 1.0f), ssm_a(ctx, 1, c.Hv, 0, 0, -2.0f, -0.05f);
  Buf g_fin(ctx, T, c.Hv, 2, 1), b_fin(ctx, T, c.Hv, 1, 0);
  g_fin.poison();
  b_fin.poison();
  unary(cpu::Unary::Sigmoid, b_raw.dev(), b_fin.dev(), s);
  broadcast(cpu::Broadcast::Add, a_raw.dev(), dt_bias.dev_data(), g_fin.dev(), s);
  unary(cpu::Unary::Softplus, g_fin.dev(), g_fin.dev(), s);
  broadcast(cpu::Broadcast::Mul, g_fin.dev(), ssm_a.dev_data(), g_fin.dev(), s);
  cpu::unary(cpu::Unary::Sigmoid, b_raw.host(), b_fin.host());
  cpu::broadcast(cpu::Broadcast::Add, a_raw.host(), dt_bias.host_data(), g_fin.host());
  cpu::unary(cpu::Unary::Softplus, g_fin.host(), g_fin.host());
  cpu::broadcast(cpu::Broadcast::Mul, g_fin.host(), ssm_a.host_data(), g_fin.host());

  struct Fusion {
    bool gating, l2;
    const char* name;
  };
  const Fusion fusions[] = {{false, false, "none"},
                            {true, false, "gating"},
                            {false, true, "l2norm"},
                            {true, true, "gating+l2norm"}};
  enum class Mode { InPlace, SlotToWork, WorkToSlot };
  const std::pair<Mode, const char*> modes[] = {{Mode::InPlace, "in place"},
                                                {Mode::SlotToWork, "slot -> f32 work"},
                                                {Mode::WorkToSlot, "f32 work -> slot"}};
  const std::string shape0 = fmt::format("T={} Hk={} Hv={} d={} {}", T, c.Hk, c.Hv, c.d, c.what);
  const double io_bytes = double(T) * 4 * double(2 * qk + 2 * inner + 2 * c.Hv);
  const std::vector<float> state_vals = ctx.random(size_t(n_state));

  for (StateType st : kStateTypes) {
    const std::vector<uint8_t> slot0 = to_state(st, state_vals);
    const std::vector<float> start = from_state(st, slot0);  // exact
    const std::vector<uint8_t> work0 = to_state(StateType::F32, start);
    const std::string base = fmt::format("{}, {} state", shape0, model::state_type_name(st));
    const double tol_slot = tol + state_ulp(st);

    // The CPU reference, from the widened slot.
    Buf o(ctx, T, inner, T % 2, 1);
    std::vector<float> cpu_state = start;
    cpu::gdn_recurrence(qh, kh, vh, g_fin.host(), b_fin.host(), o.host(), cpu_state.data(), c.Hk,
                        c.Hv, c.d);
    const std::vector<float> cpu_slot = from_state(st, to_state(st, cpu_state));

    // The unfused GPU sequence.
    StateBuf slot_u(ctx, st, n_state, 1, 1), work_u(ctx, StateType::F32, n_state, 0, 1);
    slot_u.set(slot0);
    work_u.poison();
    o.poison();
    copy_state(slot_u.dev(), work_u.dev(), n_state, s);
    gdn_recurrence(qn, kn, vn, g_fin.dev(), b_fin.dev(), o.dev(), work_u.dev(), work_u.dev(), c.Hk,
                   c.Hv, c.d, GdnFusion{}, s);
    const std::vector<uint8_t> work_after = work_u.view();
    copy_state(work_u.dev(), slot_u.dev(), n_state, s);
    const std::vector<uint8_t> slot_after = slot_u.view();
    const std::vector<float> out_u = o.device_view();
    Result ru = o.check(op, base + ", unfused: out vs CPU", tol);
    out.push_back(
        slot_u.check_values(op, base + ", unfused: slot state vs CPU", cpu_slot, tol_slot));
    if (c.perf && ctx.perf() && st == StateType::F32) {
      ru.shape = shape0 + ", f32 in place, unfused";
      const double n_bytes = double(n_state) * 4;
      const int copies = rotation_copies(2 * n_bytes);
      std::vector<DeviceBuffer> states;
      for (int i = 0; i < copies; ++i) {
        states.emplace_back(size_t(n_bytes));
        CUDA_CHECK(cudaMemcpyAsync(states.back().get(), work0.data(), work0.size(),
                                   cudaMemcpyHostToDevice, s));
      }
      timed(ctx, ru, 2 * n_bytes + io_bytes, [&](int i) {
        const DevState sd{states[size_t(i % copies)].get(), StateType::F32};
        gdn_recurrence(qn, kn, vn, g_fin.dev(), b_fin.dev(), o.dev(), sd, sd, c.Hk, c.Hv, c.d,
                       GdnFusion{}, s);
      });
    }
    out.push_back(ru);

    for (const Fusion& f : fusions) {
      GdnFusion fu;
      if (f.gating) fu.dt_bias = dt_bias.dev_data(), fu.ssm_a = ssm_a.dev_data();
      if (f.l2) fu.l2norm = true, fu.l2_eps = kEps;
      const DevRows q = f.l2 ? qr : qn, k = f.l2 ? kr : kn, v = f.l2 ? vr : vn;
      const DevRows g = f.gating ? a_raw.dev() : g_fin.dev();
      const DevRows beta = f.gating ? b_raw.dev() : b_fin.dev();
      for (const auto& [mode, mode_name] : modes) {
        const std::string shape = fmt::format("{} {}, fused {}", base, mode_name, f.name);
        StateBuf slot(ctx, st, n_state, 2, 1), work(ctx, StateType::F32, n_state, 1, 2);
        slot.set(slot0);
        o.poison();
        Result bits, vs_cpu;
        const std::string bits_name = shape + ": out and state bitwise vs unfused";
        switch (mode) {
          case Mode::InPlace:
            gdn_recurrence(q, k, v, g, beta, o.dev(), settled(slot.dev()), slot.dev(), c.Hk, c.Hv,
                           c.d, fu, s);
            bits = bitwise(op, bits_name, o.device_view(), out_u);
            also(bits, slot.check_bits(op, bits_name, slot_after));
            vs_cpu = slot.check_values(op, shape + ": state vs CPU", cpu_slot, tol_slot);
            break;
          case Mode::SlotToWork:
            work.poison();
            gdn_recurrence(q, k, v, g, beta, o.dev(), settled(slot.dev()), work.dev(), c.Hk, c.Hv,
                           c.d, fu, s);
            bits = bitwise(op, bits_name, o.device_view(), out_u);
            also(bits, work.check_bits(op, bits_name, work_after));
            also(bits, slot.check_bits(op, shape + ": slot untouched", slot0));
            vs_cpu = work.check_values(op, shape + ": state vs CPU", cpu_state, tol);
            break;
          case Mode::WorkToSlot:
            copy_state(slot.dev(), work.dev(), n_state, s);  // the gather
            work.snapshot();
            slot.poison();
            gdn_recurrence(q, k, v, g, beta, o.dev(), work.dev(), slot.dev(), c.Hk, c.Hv, c.d, fu,
                           s);
            bits = bitwise(op, bits_name, o.device_view(), out_u);
            also(bits, slot.check_bits(op, bits_name, slot_after));
            also(bits, work.check_bits(op, shape + ": work untouched", work0));
            vs_cpu = slot.check_values(op, shape + ": state vs CPU", cpu_slot, tol_slot);
            break;
        }
        out.push_back(o.check(op, shape + ": out vs CPU", tol));
        out.push_back(vs_cpu);
        if (c.perf && ctx.perf() && mode == Mode::InPlace && f.gating && f.l2) {
          bits.shape = fmt::format("{}, {} in place, gating+l2norm fused", shape0,
                                   model::state_type_name(st));
          const double n_bytes = double(n_state) * double(model::state_type_bytes(st));
          const int copies = rotation_copies(2 * n_bytes);
          std::vector<DeviceBuffer> states;
          for (int i = 0; i < copies; ++i) {
            states.emplace_back(size_t(n_bytes));
            CUDA_CHECK(cudaMemcpyAsync(states.back().get(), slot0.data(), slot0.size(),
                                       cudaMemcpyHostToDevice, s));
          }
          timed(ctx, bits, 2 * n_bytes + io_bytes, [&](int i) {
            const DevState sd{states[size_t(i % copies)].get(), st};
            gdn_recurrence(q, k, v, g, beta, o.dev(), sd, sd, c.Hk, c.Hv, c.d, fu, s);
          });
        }
        out.push_back(bits);
      }
    }

    // Across storage types (no rung uses it, the kernel allows it): f16 slot → bf16 slot
    // equals gather, f32 recurrence, scatter into bf16.
    if (st == StateType::F16) {
      StateBuf slot(ctx, st, n_state, 0, 1), other(ctx, StateType::BF16, n_state, 1, 0);
      slot.set(slot0);
      other.poison();
      o.poison();
      gdn_recurrence(qn, kn, vn, g_fin.dev(), b_fin.dev(), o.dev(), slot.dev(), other.dev(), c.Hk,
                     c.Hv, c.d, GdnFusion{}, s);
      const std::string name = shape0 + ", f16 slot -> bf16 slot: out and state bitwise vs unfused";
      Result b = bitwise(op, name, o.device_view(), out_u);
      also(b, other.check_bits(op, name,
                               to_state(StateType::BF16, from_state(StateType::F32, work_after))));
      also(b, slot.check_bits(op, name, slot0));
      out.push_back(b);
    }
  }
}

void check_gdn(Context& ctx, std::vector<Result>& out) {
  // With 132 SMs the launcher's column slices are 16 (Bonsai), 32 (Hv·d/32 >= 264: the
  // 96- and 72-head cases) and 8 (small models); d 64–256 covers every instantiated row count.
  std::vector<GdnShape> cases = {
      {1, 16, 48, 128, true, "bonsai decode"},
      {4, 16, 48, 128, false, "bonsai prefill"},
      {64, 16, 48, 128, false, "bonsai prefill 64"},
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
  // Random shapes (the seed picks them): any d up to 256, any head counts, T up to 64.
  for (int i = 0; i < 3; ++i) {
    std::uniform_int_distribution<int64_t> pick_d(1, 256), pick_hk(1, 4), pick_rep(1, 3),
        pick_t(1, 64);
    const int64_t d = pick_d(ctx.rng()), hk = pick_hk(ctx.rng()), rep = pick_rep(ctx.rng());
    cases.push_back({pick_t(ctx.rng()), hk, hk * rep, d, false, "random shape"});
  }
  for (const GdnShape& c : cases) check_gdn_case(ctx, out, c);
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

// attention with its fused prep (rung norm-gemv-fused, one token) bit for bit against the seven
// unfused kernels it replaces (split_heads, [sigmoid], rms_norm and rope of q and of k,
// kv_store, attention): out, the gate and both caches, with qg, k and v untouched. Against the
// CPU, each part with its own tolerance: the new cache rows and the gate against the CPU's
// composition of the same ops (the norm's and the rope's tolerances added: the rotation keeps a
// head's norm), and out against the CPU's attention of the unfused kernels' q over the caches
// as the GPU left them (the attention's tolerance). Cache rows past the position hold NaN: a
// key read from there poisons out.
void check_attention_prep(Context& ctx, std::vector<Result>& out) {
  struct Case {
    int64_t H, Hkv, D, n_rot, pos0;
    bool device_pos, perf, gate_sigmoid;
    const char* what;
  };
  const Case cases[] = {
      {24, 4, 256, 64, 37, false, true, true, "bonsai"},
      {24, 4, 256, 64, 5, true, false, true, "bonsai, position in device memory (graphs)"},
      {24, 4, 256, 64, 0, false, false, false, "bonsai, first token, gate as it is"},
      {2, 1, 64, 16, 3000, false, false, true, "long context: the new key in CTA 5 of 8"},
      {3, 1, 77, 10, 1, true, false, true, "odd"},
      {2, 2, 256, 256, 9, false, false, false, "full rotation"},
      {1, 1, 2, 2, 0, true, false, true, "one pair"},
  };
  constexpr float kTheta = 1e7f;
  for (const Case& c : cases) {
    const int64_t qd = c.H * c.D, kv_dim = c.Hkv * c.D, n_ctx = c.pos0 + 3;
    const std::string shape = fmt::format("H={} Hkv={} D={} n_rot={} pos0={} {}", c.H, c.Hkv, c.D,
                                          c.n_rot, c.pos0, c.what);
    Buf qg(ctx, 1, 2 * qd), k(ctx, 1, kv_dim, 1, 1), v(ctx, 1, kv_dim, 0, 2);
    Buf qn(ctx, 1, c.D, 0, 0, 0.5f, 1.5f), kn(ctx, 1, c.D, 0, 0, 0.5f, 1.5f);
    Buf o(ctx, 1, qd), gate(ctx, 1, qd), kc(ctx, n_ctx, kv_dim), vc(ctx, n_ctx, kv_dim);
    Buf qu(ctx, 1, qd), ou(ctx, 1, qd), gu(ctx, 1, qd), ku(ctx, 1, kv_dim, 1, 1);
    // The new row poisoned (the kernel must write it), the rows after it NaN for good.
    for (Buf* b : {&kc, &vc}) {
      std::fill(b->host_data() + c.pos0 * kv_dim, b->host_data() + n_ctx * kv_dim, kPoison);
      b->upload();
    }
    Buf kcu(ctx, n_ctx, kv_dim), vcu(ctx, n_ctx, kv_dim);
    kcu.copy_from(kc);
    vcu.copy_from(vc);
    ku.copy_from(k);
    for (Buf* b : {&o, &gate, &qu, &ou, &gu}) b->poison();
    DeviceBuffer pos_dev(sizeof(int32_t));
    const int32_t pos32 = static_cast<int32_t>(c.pos0);
    CUDA_CHECK(
        cudaMemcpyAsync(pos_dev.get(), &pos32, sizeof pos32, cudaMemcpyHostToDevice, ctx.stream()));
    const int64_t bound = n_ctx - 1;
    const Pos pos = c.device_pos ? Pos(bound, bound, pos_dev.as<int32_t>()) : Pos(c.pos0);

    split_heads(qg.dev(), qu.dev(), gu.dev(), c.D, ctx.stream());
    if (c.gate_sigmoid) unary(cpu::Unary::Sigmoid, gu.dev(), gu.dev(), ctx.stream());
    rms_norm(qu.dev(), qu.dev(), qn.dev_data(), c.D, kEps, ctx.stream());
    rope(qu.dev(), c.D, c.n_rot, kTheta, pos, ctx.stream());
    rms_norm(ku.dev(), ku.dev(), kn.dev_data(), c.D, kEps, ctx.stream());
    rope(ku.dev(), c.D, c.n_rot, kTheta, pos, ctx.stream());
    kv_store(ku.dev(), v.dev(), kcu.dev_data(), vcu.dev_data(), kv_dim, pos, ctx.stream());
    // Codes out where the head allows them: the fused gate must reach the codes as the unfused
    // gate buffer does.
    const bool codes = attn_codes_out_ok(c.D);
    const size_t blocks = static_cast<size_t>(std::max<int64_t>(qd / 128, 1));
    DeviceBuffer act(blocks * 128), meta(blocks * 8), act_u(blocks * 128), meta_u(blocks * 8),
        act_g(blocks * 128), meta_g(blocks * 8);
    for (const DeviceBuffer* b : {&act, &meta, &act_u, &meta_u, &act_g, &meta_g}) {
      CUDA_CHECK(cudaMemsetAsync(b->get(), 0xFF, b->bytes(), ctx.stream()));
    }
    const CodesOut codes_u = codes ? CodesOut{act_u.as<uint32_t>(), meta_u.get(), gu.dev_data()}
                                   : CodesOut{},
                   codes_f = codes ? CodesOut{act.as<uint32_t>(), meta.get()} : CodesOut{},
                   codes_g = codes ? CodesOut{act_g.as<uint32_t>(), meta_g.get()} : CodesOut{};
    attention(qu.dev(), kcu.dev_data(), vcu.dev_data(), ou.dev(), c.H, c.Hkv, c.D, pos,
              ctx.stream(), codes_u);
    DeviceBuffer angles(size_t(c.n_rot) * sizeof(double));
    AttnPrep prep{.k = k.dev(),
                  .v = v.dev(),
                  .gate = gate.dev(),  // run() sets each run's own
                  .q_norm = qn.dev_data(),
                  .k_norm = kn.dev_data(),
                  .n_rot = c.n_rot,
                  .theta = kTheta,
                  .eps = kEps,
                  .gate_sigmoid = c.gate_sigmoid,
                  .angles = angles.as<double>()};
    const auto run = [&](DevRows y, Buf& g, Buf& k_cache, Buf& v_cache, const CodesOut& codes_out,
                         bool angles_given) {
      prep.gate = g.dev();
      prep.angles_given = angles_given;
      attention(qg.dev(), k_cache.dev_data(), v_cache.dev_data(), y, c.H, c.Hkv, c.D, pos,
                ctx.stream(), codes_out, &prep);
    };
    // Fresh outputs, caches and codes for the runs after the first, which write them again.
    Buf kc_given(ctx, n_ctx, kv_dim), vc_given(ctx, n_ctx, kv_dim), kc_turned(ctx, n_ctx, kv_dim),
        vc_turned(ctx, n_ctx, kv_dim);
    for (Buf* b : {&kc_given, &kc_turned}) b->copy_from(kc);
    for (Buf* b : {&vc_given, &vc_turned}) b->copy_from(vc);
    run(o.dev(), gate, kc, vc, codes_f, false);  // the angles computed and stored
    // Again with the stored angles loaded, then with a quarter turn in their place: the first
    // must repeat the bits, the second must not (the table is what the kernel uses; the new
    // key shows it where out cannot, as at position 0, whose one key is its own value).
    Buf o_given(ctx, 1, qd), o_turned(ctx, 1, qd), gate_given(ctx, 1, qd), gate_turned(ctx, 1, qd);
    for (Buf* b : {&o_given, &o_turned, &gate_given, &gate_turned}) b->poison();
    run(o_given.dev(), gate_given, kc_given, vc_given, codes_g, true);
    const std::vector<double> turn = [&] {
      std::vector<double> t(size_t(c.n_rot));
      for (size_t i = 0; i < t.size(); i += 2) t[i] = 1.0;  // sin 1, cos 0
      return t;
    }();
    CUDA_CHECK(cudaMemcpyAsync(angles.get(), turn.data(), angles.bytes(), cudaMemcpyHostToDevice,
                               ctx.stream()));
    run(o_turned.dev(), gate_turned, kc_turned, vc_turned, {}, true);

    const std::string bits = shape + ": bitwise vs unfused";
    Result r = bitwise("attention_prep", bits + " (out)", o.device_view(), ou.device_view());
    also(r, bitwise("attention_prep", bits + " (gate)", gate.device_view(), gu.device_view()));
    also(r, bitwise("attention_prep", shape + ": angles loaded vs computed (out)",
                    o_given.device_view(), ou.device_view()));
    for (const auto& [what, got, want] :
         {std::tuple{" (k cache)", &kc_given, &kcu}, std::tuple{" (v cache)", &vc_given, &vcu},
          std::tuple{" (gate)", &gate_given, &gu}}) {
      also(r, bitwise("attention_prep", shape + ": angles loaded vs computed" + what,
                      got->device_view(), want->device_view()));
    }
    if (bitwise("attention_prep", shape, kc_turned.device_view(), kcu.device_view()).passed) {
      also(r, Result{.op = "attention_prep",
                     .shape = shape,
                     .detail = "a quarter turn in the given angles left the new key unchanged"});
    }
    also(r, bitwise("attention_prep", bits + " (k cache)", kc.device_view(), kcu.device_view()));
    also(r, bitwise("attention_prep", bits + " (v cache)", vc.device_view(), vcu.device_view()));
    for (Buf* b : {&qg, &k, &v})
      also(r, b->check("attention_prep", shape + ": input untouched", 0));
    if (codes) {
      for (const auto& [what, got, want] :
           {std::tuple{" (codes)", &act, &act_u}, std::tuple{" (code scales)", &meta, &meta_u},
            std::tuple{" (codes, angles loaded)", &act_g, &act_u},
            std::tuple{" (code scales, angles loaded)", &meta_g, &meta_u}}) {
        const std::vector<uint8_t> g = download(*got, ctx.stream()),
                                   w = download(*want, ctx.stream());
        also(r, bitwise("attention_prep", bits + what, g.data(), w.data(), g.size(), 1));
      }
    }

    // The CPU's prep of q, the gate and the new key, and its attention as described above.
    cpu::Rows q_ref = qu.host();
    cpu::split_heads(qg.host(), q_ref, gate.host(), c.D);
    if (c.gate_sigmoid) cpu::unary(cpu::Unary::Sigmoid, gate.host(), gate.host());
    cpu::rms_norm(q_ref, q_ref, qn.host_data(), c.D, kEps);
    cpu::rope(q_ref, c.D, c.n_rot, kTheta, c.pos0);
    cpu::Rows k_ref = ku.host();
    cpu::rms_norm(k_ref, k_ref, kn.host_data(), c.D, kEps);
    cpu::rope(k_ref, c.D, c.n_rot, kTheta, c.pos0);
    const std::vector<float> k_got = kc.device_view(), v_got = vc.device_view();
    const auto row = [&](const std::vector<float>& cache) {
      const auto first = cache.begin() + c.pos0 * kv_dim;
      return std::vector<float>(first, first + kv_dim);
    };
    const auto row_of = [&](cpu::Rows x) {
      return std::vector<float>(x.row(0), x.row(0) + x.cols);
    };
    Result cpu_r = qu.check("attention_prep", shape + ": unfused q vs CPU", kTolNorm + kTolRope);
    also(cpu_r, compare("attention_prep", shape + ": k cache row vs CPU", row(k_got), row_of(k_ref),
                        kTolNorm + kTolRope));
    also(cpu_r, compare("attention_prep", shape + ": v cache row vs CPU", row(v_got),
                        row_of(v.host()), kTolExact));
    also(cpu_r, gate.check("attention_prep", shape + ": gate vs CPU",
                           c.gate_sigmoid ? kTolActivation : kTolExact));
    std::vector<float> q_got = qu.device_view();
    const cpu::Rows q_gpu{q_got.data(), 1, qd, qd};
    cpu::attention(q_gpu, k_got.data(), v_got.data(), o.host(), c.H, c.Hkv, c.D, c.pos0);
    also(cpu_r, o.check("attention_prep", shape + ": out vs CPU attention", kTolAttention));
    if (c.perf) {
      const double bytes =
          4.0 * double(2 * qd + 2 * kv_dim + qd + qd) + 8.0 * double((c.pos0 + 1) * kv_dim);
      // Timed with the angles given, as 15 of Bonsai's 16 attention layers run it.
      run(o.dev(), gate, kc, vc, codes_f, false);  // the true angles back in the table
      timed(ctx, cpu_r, bytes,
            [&](int) { run(o_given.dev(), gate_given, kc_given, vc_given, codes_g, true); });
    }
    out.push_back(r);
    out.push_back(cpu_r);
  }
}

}  // namespace

std::vector<Family> ops_families() {
  return {
      {"norms", check_norms, {"rms_norm", "l2_norm"}},
      {"unary", check_unary, {"sigmoid", "softplus", "silu"}},
      {"binary", check_binary, {"add", "silu_mul", "sigmoid_mul", "mul"}},
      {"broadcast", check_broadcast, {"add_vec", "mul_vec"}},
      {"split_heads", check_split_heads, {"split_heads"}},
      {"copies", check_copies, {"copy_rows"}},
      {"state_copies", check_state_copies, {"copy_state"}},
      {"concat", check_concat, {"concat_rows"}},
      {"empty", check_empty, {"empty_kernel"}},
      {"kv_store", check_kv_store, {"kv_store"}},
      {"embed", check_embed, {"embed"}},
      {"conv", check_conv, {"conv_step"}},
      {"gdn", check_gdn, {"gdn_recurrence"}},
      {"rope", check_rope, {"rope"}},
      {"attention", check_attention, {"attention"}},
      {"attention_prep", check_attention_prep, {"attention_prep"}},
  };
}

}  // namespace gdn::cuda::opcheck
