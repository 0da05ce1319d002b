// Op checks for matmul() and matmul_fused() (cuda/matrix.h) against the CPU reference
// (quant/quant.h): `gdn ops` runs matmul_families().
//
// Every case: a random matrix (random floats through quant::quantize_row, so every stored row
// is what the reference quantiser makes), random non-zero activations in rows ldx apart whose
// padding columns hold NaN (a kernel reading past n_in turns the result into NaN), outputs in
// rows ldy apart poisoned with NaN before the run, the view compared with the reference and the
// padding columns compared bit for bit with the poison (a kernel writing past n_out fails).
//
// Shapes: odd n_out (1, 3, 77, 1000) that no row tile or warp divides, n_in of one block,
// several blocks, 5120 and 17408 (plain formats also 77, which no 16-byte chunk divides; Q1_0
// also 20480 and 24448, four quads a chunk); every Bonsai-27B Q1_0 shape and the output head
// (5120 -> 248320, GEMV); n_tokens 1 (GEMV) and 2, 7, 64, 512 (batched; Q1_0 also 9, 33, 40,
// 50, 59, 65, 130, 5120 -> 17408 at 512 for the int8 prefill product, and 65605, more tokens
// than one quantise launch's grid takes).
//
// References and tolerances (max|gpu - ref| / max|ref|, matmul_reference() in matmul.cu):
//   matmul_q1_0       quant::dot_row_q1_0_q8_128, the kernel's own arithmetic: activations
//                     quantised per 128 with the same rule, each block's dot an exact integer
//                     on both sides; only f32 products and sums are ordered differently.
//                     Tolerance 2e-5 (~1e-7 expected).
//   matmul_q1_0_f32   quant::dot_row with f32 activations: adds the activation rounding, per
//                     element at most d_x / 2 = amax / 254 of its block. For these uniform
//                     random inputs that is ~0.5% of max|ref| (a random walk of n_in roundings
//                     against a sum of n_in random terms); tolerance 2e-2.
//   other formats     quant::dot_row: f32 FMA chains against dot_row's lane sums and double
//                     accumulation; a few 1e-6 at n_in = 17408, tolerance 1e-4.
//
// Q1_0 extras: activations with exact half-integer quotients (x = (k + 1/2)·d with d a power of
// two), their neighbours one ulp away, all-zero and subnormal-scale blocks (`ties`): with one
// block per row any code that differs from the CPU quantiser's roundf moves the result by
// ~1e-3 of max|ref|, far above the tolerance. And matmul_q1_0_1launch_bits: every one-token
// Q1_0 case also runs the one-launch GEMV (matmul_fused of the plain product) and the two-launch
// path (quantise kernel + product kernel), which must match bit for bit;
// matmul_q1_0_imma_pairs_bits: every batched Q1_0 case also runs the int8 product as kImma and as
// kImmaPairs (two token groups' mma chains at once), which must match bit for bit.
//
// Fused decode GEMV (matmul_fused, rung norm-gemv-fused): every prologue x epilogue x 1-4
// matrices for Q1_0, F32, BF16 and Q8_0 on small odd shapes (Q1_0 n_in 640 = 5 blocks, a
// padded quad; F32 n_in 77 with head_dim 7, which no float4 divides), head_dim 320 and 2304
// (norm_threads > 32: several virtual warps per head), misaligned input views (the scalar
// staging path), one case each for F16, Q4_0, Q2_0 and PQ2_0, and the Bonsai-27B decode
// shapes with their real prologues and epilogues. Two results per case:
//   matmul_fused_<type>_bits  the fused launch against the unfused GPU sequence (rms_norm /
//                             binary into a buffer, matmul() per matrix, binary Add /
//                             SiluMul), memcmp of every output including the poisoned padding;
//                             error = mismatching floats, tolerance 0.
//   matmul_fused_<type>       against the CPU: each product by the reference dot (as above) on
//                             the GPU prologue's output, the epilogue in f32; the format's
//                             tolerance. (The prologue kernels themselves are checked against
//                             the CPU by the ops family.)
// Rows folded into a Q1_0 launch (FusedGemv::fold_*: the decode's BF16 beta and alpha computed
// by the qkv GEMV's CTAs): matmul_fused_q1_0_fold, the folded launch against the two families
// launched apart (memcmp of every output, padding and conv state included; the decode's qkv
// shapes, one folded matrix, a padded quad, small ranges); matmul_fused_q1_0_fold_refuses, the
// folds q1_fold_refusal must name and matmul_fused must not run (too many rows, F32 rows, the
// staged prologue, the rows' output overlapping the launch's) or the executor must not ask for
// (another prologue), beside a control fold it must allow.
//
// With --perf, GEMV cases of the Bonsai shapes (and one prefill batch) are timed with enough
// uploaded copies of the matrix that they exceed 150 MB (rotated by launch index, so weights come
// from DRAM as in decode); Result.bytes = the weights as stored on the GPU + x + y. Q1_0 matmul()
// for one token is the path q1_default_options picks (the two-launch one for two-quad shapes). The
// fused Bonsai cases are timed the same way (bytes add gate / norm and the residual read).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "cpu/ops.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/kernels.h"
#include "cuda/matrix.h"
#include "cuda/op_check.h"
#include "cuda/q1_chain.h"
#include "quant/quant.h"

namespace gdn::cuda::mm {
// matmul_q1_0.cu (declared in matmul.cuh, which a C++20 file cannot include).
void q1_0_two_launch_gemv(const GpuMatrix& w, const float* x, float* y, MatmulWorkspace& ws,
                          cudaStream_t s);
int64_t q1_0_imma_pairs_diff(const GpuMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
                             MatmulWorkspace& ws, cudaStream_t s);
}  // namespace gdn::cuda::mm

namespace gdn::cuda::opcheck {

std::vector<Family> matmul_families();  // op_check.cpp's families()

namespace {

using quant::Type;

constexpr double kRotateBytes = 150e6;
constexpr uint32_t kPoison = 0xffffffffu;  // a NaN

struct HostMatrix {
  Type type;
  int64_t n_in = 0, n_out = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> rows;  // n_pool rows
  int64_t n_pool = 0;         // rows actually stored; row r is pool row pool_row(r)

  int64_t pool_row(int64_t r) const {
    if (n_pool == n_out) return r;
    uint64_t h = static_cast<uint64_t>(r) * 0x9E3779B97F4A7C15ull;  // neighbours differ
    return static_cast<int64_t>((h >> 20) % static_cast<uint64_t>(n_pool));
  }
  const uint8_t* row(int64_t r) const { return rows.data() + pool_row(r) * row_bytes; }
};

// n_out rows of random floats in [-1, 1] quantised by the reference. Very large matrices (the
// output head) draw a pool of distinct rows and pick one per row by a hash, so that any row
// mix-up still lands on a different row while the host work stays small.
HostMatrix random_matrix(Context& ctx, Type t, int64_t n_in, int64_t n_out) {
  HostMatrix m;
  m.type = t;
  m.n_in = n_in;
  m.n_out = n_out;
  m.row_bytes = quant::row_bytes(t, n_in);
  m.n_pool = n_in * n_out > (int64_t(1) << 27) ? 4096 : n_out;
  m.rows.resize(m.row_bytes * static_cast<size_t>(m.n_pool));
  for (int64_t r = 0; r < m.n_pool; ++r) {
    const std::vector<float> v = ctx.random(static_cast<size_t>(n_in));
    quant::quantize_row(t, v.data(), m.rows.data() + r * m.row_bytes, n_in);
  }
  return m;
}

// The whole matrix as upload_matrix reads it (pool rows expanded).
model::Matrix expand(const HostMatrix& m, const std::string& name, std::vector<uint8_t>& storage) {
  if (m.n_pool != m.n_out) {
    storage.resize(m.row_bytes * static_cast<size_t>(m.n_out));
    for (int64_t r = 0; r < m.n_out; ++r) {
      std::memcpy(storage.data() + r * m.row_bytes, m.row(r), m.row_bytes);
    }
  }
  model::Matrix v;
  v.name = name;
  v.type = m.type;
  v.n_in = m.n_in;
  v.n_out = m.n_out;
  v.row_bytes = m.row_bytes;
  v.data = m.n_pool != m.n_out ? storage.data() : m.rows.data();
  return v;
}

// ref[t][r] for dense x[t][n_in]: dot_row, or the Q1_0 kernel's arithmetic (q8_128).
std::vector<float> reference(const HostMatrix& m, const std::vector<float>& x, int64_t n_tokens,
                             bool q8_128) {
  std::vector<quant::BlockQ8Act128> xq;
  if (q8_128) {
    xq.resize(static_cast<size_t>(n_tokens * m.n_in / quant::kQ8Act128Block));
    for (int64_t t = 0; t < n_tokens; ++t) {
      quant::quantize_activations_q8_128(x.data() + t * m.n_in, m.n_in,
                                         xq.data() + t * m.n_in / quant::kQ8Act128Block);
    }
  }
  // Per pool row and token, then gathered: the head's 248320 rows share 4096 dots.
  std::vector<float> pool(static_cast<size_t>(m.n_pool * n_tokens));
  ThreadPool threads;
  threads.parallel_for(m.n_pool, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const uint8_t* row = m.rows.data() + p * m.row_bytes;
      for (int64_t t = 0; t < n_tokens; ++t) {
        pool[p * n_tokens + t] =
            q8_128 ? quant::dot_row_q1_0_q8_128(row, xq.data() + t * m.n_in / quant::kQ8Act128Block,
                                                m.n_in)
                   : quant::dot_row(m.type, row, x.data() + t * m.n_in, m.n_in);
      }
    }
  });
  std::vector<float> ref(static_cast<size_t>(n_tokens * m.n_out));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < m.n_out; ++r) ref[t * m.n_out + r] = pool[m.pool_row(r) * n_tokens + t];
  }
  return ref;
}

struct Case {
  Type type;
  int64_t n_in, n_out, n_tokens;
  int64_t ldx_pad, ldy_pad;  // extra floats per row of x / y
  bool timed;
  bool ties = false;  // Q1_0: activations on and next to rounding ties (tie_activations)
};

// Per 128-block: amax = 127·2^e (so d = 2^e exactly) and elements (k + 1/2)·2^e — exact
// half-integer quotients, where roundf (away from zero) and round-to-even differ — or one ulp
// beside them, or random; blocks 15, 31, ... all zero, blocks 7, 23, ... at scale 2^-140 (a
// subnormal d).
std::vector<float> tie_activations(Context& ctx, int64_t n) {
  std::vector<float> x = ctx.random(static_cast<size_t>(n));
  std::uniform_int_distribution<int> k(-127, 126), e(-8, 8), kind(0, 3);
  for (int64_t b = 0; b < n / 128; ++b) {
    float* v = x.data() + b * 128;
    if (b % 16 == 15) {
      std::fill_n(v, 128, 0.0f);
      continue;
    }
    const int ex = b % 16 == 7 ? -140 : e(ctx.rng());
    for (int j = 0; j < 128; ++j) {
      const float tie = std::ldexp(float(k(ctx.rng())) + 0.5f, ex);
      switch (kind(ctx.rng())) {
        case 0:
          v[j] = tie;
          break;
        case 1:
          v[j] = std::nextafter(tie, INFINITY);
          break;
        case 2:
          v[j] = std::nextafter(tie, -INFINITY);
          break;
        default:
          v[j] = std::ldexp(v[j] * 126.0f, ex);
      }
    }
    v[(b * 37) % 128] = std::ldexp(127.0f, ex) * (b % 2 ? 1.0f : -1.0f);  // the block's amax
  }
  return x;
}

// How many floats of a and b (the same length) differ in their bits; the first one, named by
// `what`, goes into detail if it is still empty. The bit-for-bit checks' common step.
int64_t differing_floats(const std::vector<float>& a, const std::vector<float>& b,
                         const std::string& what, std::string& detail) {
  int64_t diff = 0;
  for (size_t j = 0; j < a.size(); ++j) {
    if (std::memcmp(&a[j], &b[j], sizeof(float)) == 0) continue;
    if (diff++ == 0 && detail.empty())
      detail = fmt::format("{} float {}: {} against {}", what, j, a[j], b[j]);
  }
  return diff;
}

void run_case(Context& ctx, std::vector<Result>& out, const Case& c) {
  const std::string op = fmt::format("matmul_{}", quant::type_info(c.type).name);
  const int64_t ldx = c.n_in + c.ldx_pad, ldy = c.n_out + c.ldy_pad, T = c.n_tokens;
  const std::string shape = fmt::format("{}->{} t{} ldx+{} ldy+{}{}", c.n_in, c.n_out, T, c.ldx_pad,
                                        c.ldy_pad, c.ties ? " ties" : "");
  cudaStream_t s = ctx.stream();

  const HostMatrix hm = random_matrix(ctx, c.type, c.n_in, c.n_out);
  std::vector<uint8_t> storage;
  std::vector<GpuMatrix> copies;
  copies.push_back(upload_matrix(expand(hm, op, storage), s));

  // x: T rows of n_in random values, padding columns NaN.
  const std::vector<float> x =
      c.ties ? tie_activations(ctx, T * c.n_in) : ctx.random(static_cast<size_t>(T * c.n_in));
  std::vector<float> xs(static_cast<size_t>(T * ldx), std::nanf(""));
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(x.begin() + t * c.n_in, c.n_in, xs.begin() + t * ldx);
  }
  DeviceBuffer dx(xs.size() * sizeof(float)), dy(static_cast<size_t>(T * ldy) * sizeof(float));
  CUDA_CHECK(cudaMemcpyAsync(dx.get(), xs.data(), dx.bytes(), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemsetAsync(dy.get(), 0xff, dy.bytes(), s));
  MatmulWorkspace ws;
  ws.reserve(c.n_in, T);
  matmul(copies[0], dx.as<float>(), ldx, dy.as<float>(), ldy, T, ws, s);
  std::vector<float> ys(static_cast<size_t>(T * ldy));
  CUDA_CHECK(cudaMemcpyAsync(ys.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));

  std::vector<float> gpu(static_cast<size_t>(T * c.n_out));
  int64_t stray = -1;  // first padding column written
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(ys.begin() + t * ldy, c.n_out, gpu.begin() + t * c.n_out);
    for (int64_t j = c.n_out; j < ldy && stray < 0; ++j) {
      uint32_t bits;
      std::memcpy(&bits, &ys[t * ldy + j], sizeof bits);
      if (bits != kPoison) stray = t * ldy + j;
    }
  }

  const MatmulReference how = matmul_reference(c.type);
  Result r = compare(op, shape, gpu, reference(hm, x, T, how.q8_128_activations), how.tolerance);
  if (stray >= 0) {
    r.passed = false;
    r.detail += fmt::format(" wrote y padding at float {}", stray);
  }
  if (c.type == Type::Q1_0 && !c.ties) {
    const std::vector<float> ref_f32 = reference(hm, x, T, false);
    out.push_back(compare(op + "_f32", shape, gpu, ref_f32, 2e-2));
    // The f32-activation layout (GpuMatrix::f32_activations): f32 FMA chains like the other
    // chunked formats, so their tolerance.
    const GpuMatrix f32w = upload_matrix(expand(hm, op, storage), s, true);
    CUDA_CHECK(cudaMemsetAsync(dy.get(), 0xff, dy.bytes(), s));
    matmul(f32w, dx.as<float>(), ldx, dy.as<float>(), ldy, T, ws, s);
    std::vector<float> yf(static_cast<size_t>(T * ldy)), gf(static_cast<size_t>(T * c.n_out));
    CUDA_CHECK(cudaMemcpyAsync(yf.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(yf.begin() + t * ldy, c.n_out, gf.begin() + t * c.n_out);
    }
    out.push_back(compare(op + "_f32act", shape, gf, ref_f32, 1e-4));
  }
  if (c.type == Type::Q1_0 && T > 1) {  // the int8 product's two forms, bit for bit
    Result b;
    b.op = op + "_imma_pairs_bits";
    b.shape = shape;
    const int64_t diff = mm::q1_0_imma_pairs_diff(copies[0], dx.as<float>(), ldx, T, ws, s);
    b.error = double(diff);
    b.passed = diff == 0;
    if (!b.passed) b.detail = fmt::format("{} floats of imma-pairs differ from imma", diff);
    out.push_back(b);
  }
  if (c.type == Type::Q1_0 && T == 1) {  // the one-launch GEMV against the two-launch path
    DeviceBuffer dy1(static_cast<size_t>(c.n_out) * sizeof(float)),
        dy2(static_cast<size_t>(c.n_out) * sizeof(float));
    CUDA_CHECK(cudaMemsetAsync(dy1.get(), 0xff, dy1.bytes(), s));
    CUDA_CHECK(cudaMemsetAsync(dy2.get(), 0xff, dy2.bytes(), s));
    matmul_fused(plain_gemv(copies[0], dx.as<float>(), dy1.as<float>()), s);
    mm::q1_0_two_launch_gemv(copies[0], dx.as<float>(), dy2.as<float>(), ws, s);
    std::vector<float> y1(static_cast<size_t>(c.n_out)), y2(y1.size());
    CUDA_CHECK(cudaMemcpyAsync(y1.data(), dy1.get(), dy1.bytes(), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaMemcpyAsync(y2.data(), dy2.get(), dy2.bytes(), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    Result b;
    b.op = op + "_1launch_bits";
    b.shape = shape;
    const int64_t diff = differing_floats(y1, y2, "one launch against two: row", b.detail);
    b.error = double(diff);
    b.passed = diff == 0;
    if (!b.passed) b.detail = fmt::format("{} rows differ; first: {}", diff, b.detail);
    out.push_back(b);
  }

  if (ctx.perf() && c.timed) {
    const size_t bytes = copies[0].device_bytes();
    const int n_copies = static_cast<int>(std::ceil(kRotateBytes / double(bytes))) + 1;
    for (int i = 1; i < n_copies; ++i) copies.push_back(upload_matrix(expand(hm, op, storage), s));
    r.us = ctx.time_us([&](int i) {
      matmul(copies[static_cast<size_t>(i) % copies.size()], dx.as<float>(), ldx, dy.as<float>(),
             ldy, T, ws, s);
    });
    r.bytes = double(bytes) + 4.0 * double(c.n_in + c.n_out) * double(T);
  }
  out.push_back(r);
}

// ---------------------------------------------------------------------------------------------
// Fused decode GEMV

struct FusedCase {
  Type type = Type::F32;
  Prologue pro = Prologue::None;
  Epilogue epi = Epilogue::Store;
  int64_t n_in = 0;
  std::vector<int64_t> n_out;
  int64_t head_dim = 0;   // prologue_head_normed
  bool misalign = false;  // x, gate and norm one float past a 16-byte boundary
  int silu_mat = -1;      // FusedGemv::silu_mat (Store, ConvSilu)
  bool timed = false;
  std::string label;  // the Bonsai matrices it stands for
};

FusedCase fused_case(Type t, Prologue p, Epilogue e, int64_t n_in, std::vector<int64_t> outs,
                     int64_t head_dim = 0, bool misalign = false, int silu_mat = -1) {
  FusedCase c;
  c.type = t;
  c.pro = p;
  c.epi = e;
  c.n_in = n_in;
  c.n_out = std::move(outs);
  c.head_dim = head_dim;
  c.misalign = misalign;
  c.silu_mat = silu_mat;
  return c;
}

// The activation a MulGate-kind prologue's gate was stored through (what the unfused
// sequence's binary kernel applies to the raw gate instead).
std::optional<cpu::Unary> pre_activation(Prologue p) {
  if (p == Prologue::HeadRmsNormMulGate) return cpu::Unary::Silu;
  if (p == Prologue::MulGate) return cpu::Unary::Sigmoid;
  return std::nullopt;
}

DevRows vec_rows(float* p, int64_t n) {
  return DevRows{p, 1, n, n};
}

std::vector<float> download(const DeviceBuffer& b, size_t n, cudaStream_t s) {
  std::vector<float> v(n);
  CUDA_CHECK(cudaMemcpyAsync(v.data(), b.get(), n * sizeof(float), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return v;
}

void run_fused_case(Context& ctx, std::vector<Result>& out, const FusedCase& c) {
  cudaStream_t s = ctx.stream();
  const int n = static_cast<int>(c.n_out.size());
  const std::string op = fmt::format("matmul_fused_{}", quant::type_info(c.type).name);
  std::string outs;
  for (int i = 0; i < n; ++i) outs += fmt::format("{}{}", i ? "+" : "", c.n_out[i]);
  const std::string shape = fmt::format(
      "{}{}->{} {}{} {}{}{}", c.label.empty() ? "" : c.label + " ", c.n_in, outs,
      model::prologue_name(c.pro),
      model::prologue_head_normed(c.pro) ? fmt::format("/{}", c.head_dim) : "",
      model::epilogue_name(c.epi), c.silu_mat >= 0 ? fmt::format(" silu(w{})", c.silu_mat) : "",
      c.misalign ? " misaligned" : "");
  const float eps = 1e-6f;
  const bool gated = model::prologue_gated(c.pro);
  const bool normed = model::prologue_normed(c.pro);
  const int64_t norm_len = c.pro == Prologue::RmsNorm ? c.n_in : c.head_dim;
  // Outputs: the matrices' n_out (Store, ConvSilu), or one vector of n_out[0] (AddInto,
  // SiluMulPair).
  const bool conv = c.epi == Epilogue::ConvSilu;
  const int n_y = model::epilogue_per_matrix(c.epi) ? n : 1;
  constexpr int64_t kPad = 3;  // poisoned floats after every output

  // Host data and uploads.
  std::vector<HostMatrix> hm;
  std::vector<std::vector<GpuMatrix>> copies(1);  // copies[k][i]: rotation sets for --perf
  for (int i = 0; i < n; ++i) {
    hm.push_back(random_matrix(ctx, c.type, c.n_in, c.n_out[i]));
    std::vector<uint8_t> storage;
    copies[0].push_back(upload_matrix(expand(hm[i], fmt::format("w{}", i), storage), s));
  }
  const std::vector<float> x = ctx.random(static_cast<size_t>(c.n_in));
  const std::vector<float> gate = ctx.random(static_cast<size_t>(c.n_in), -4.0f, 4.0f);
  const std::vector<float> norm =
      ctx.random(static_cast<size_t>(std::max<int64_t>(norm_len, 1)), 0.5f, 1.5f);
  const std::vector<float> residual = ctx.random(static_cast<size_t>(c.n_out[0]));
  // ConvSilu: Qwen3.5's 4 taps over matrix 0's rows, a random history. Each run advances its
  // own copy of the state, which must come out bit-identical too.
  constexpr int64_t kConvKernel = 4;
  const int64_t conv_floats = conv ? (kConvKernel - 1) * c.n_out[0] : 0;
  const std::vector<float> conv_w =
      ctx.random(static_cast<size_t>(conv ? kConvKernel * c.n_out[0] : 0));
  const std::vector<float> conv_state0 = ctx.random(static_cast<size_t>(conv_floats));
  DeviceBuffer d_conv_w(conv_w.size() * 4 + 4), d_state_unfused(conv_state0.size() * 4 + 4),
      d_state_fused(conv_state0.size() * 4 + 4);
  const auto fresh_state = [&](DeviceBuffer& b) {
    CUDA_CHECK(cudaMemcpyAsync(b.get(), conv_state0.data(), conv_state0.size() * 4,
                               cudaMemcpyHostToDevice, s));
  };
  if (conv) {
    CUDA_CHECK(cudaMemcpyAsync(d_conv_w.get(), conv_w.data(), conv_w.size() * 4,
                               cudaMemcpyHostToDevice, s));
    fresh_state(d_state_unfused);
  }
  const int64_t off = c.misalign ? 1 : 0;
  DeviceBuffer dx((c.n_in + 4) * sizeof(float)), dg((c.n_in + 4) * sizeof(float)),
      dga((c.n_in + 4) * sizeof(float)), dn((norm.size() + 4) * sizeof(float)),
      dp(c.n_in * sizeof(float));
  float* x_d = dx.as<float>() + off;
  float* g_d = dg.as<float>() + off;
  float* ga_d = dga.as<float>() + off;  // the fused launch's gate: pre-activated or g_d's copy
  float* n_d = dn.as<float>() + off;
  CUDA_CHECK(cudaMemcpyAsync(x_d, x.data(), x.size() * 4, cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(g_d, gate.data(), gate.size() * 4, cudaMemcpyHostToDevice, s));
  if (const auto act = pre_activation(c.pro)) {
    unary(*act, vec_rows(g_d, c.n_in), vec_rows(ga_d, c.n_in), s);
  } else {
    CUDA_CHECK(cudaMemcpyAsync(ga_d, g_d, gate.size() * 4, cudaMemcpyDeviceToDevice, s));
  }
  CUDA_CHECK(cudaMemcpyAsync(n_d, norm.data(), norm.size() * 4, cudaMemcpyHostToDevice, s));
  const auto output = [&](int i) { return c.n_out[static_cast<size_t>(i)] + kPad; };
  const auto poisoned = [&](int i, bool with_residual) {
    DeviceBuffer b(static_cast<size_t>(output(i)) * sizeof(float));
    CUDA_CHECK(cudaMemsetAsync(b.get(), 0xff, b.bytes(), s));
    if (with_residual) {
      CUDA_CHECK(cudaMemcpyAsync(b.get(), residual.data(), residual.size() * 4,
                                 cudaMemcpyHostToDevice, s));
    }
    return b;
  };

  // The unfused sequence: prologue kernels into dp, matmul() per matrix, the epilogue kernel.
  const float* p_d = x_d;
  switch (c.pro) {
    case Prologue::None:
      break;
    case Prologue::RmsNorm:
      rms_norm(vec_rows(x_d, c.n_in), vec_rows(dp.as<float>(), c.n_in), n_d, c.n_in, eps, s);
      p_d = dp.as<float>();
      break;
    case Prologue::HeadRmsNormSiluGate:
    case Prologue::HeadRmsNormMulGate:
      rms_norm(vec_rows(x_d, c.n_in), vec_rows(dp.as<float>(), c.n_in), n_d, c.head_dim, eps, s);
      binary(cpu::Binary::SiluMul, vec_rows(dp.as<float>(), c.n_in), vec_rows(g_d, c.n_in),
             vec_rows(dp.as<float>(), c.n_in), s);
      p_d = dp.as<float>();
      break;
    case Prologue::SigmoidGate:
    case Prologue::MulGate:
      binary(cpu::Binary::SigmoidMul, vec_rows(x_d, c.n_in), vec_rows(g_d, c.n_in),
             vec_rows(dp.as<float>(), c.n_in), s);
      p_d = dp.as<float>();
      break;
  }
  MatmulWorkspace ws;
  ws.reserve(c.n_in, 1);
  std::vector<DeviceBuffer> products;
  for (int i = 0; i < n; ++i) {
    products.push_back(poisoned(i, false));
    matmul(copies[0][i], p_d, c.n_in, products[i].as<float>(), c.n_out[i], 1, ws, s);
  }
  if (c.silu_mat >= 0) {  // the later SiluMul's activation of this matrix's output
    const DevRows g = vec_rows(products[c.silu_mat].as<float>(), c.n_out[c.silu_mat]);
    unary(cpu::Unary::Silu, g, g, s);
  }
  std::vector<DeviceBuffer> unfused;  // the outputs of the unfused sequence
  if (c.epi == Epilogue::Store) {
    unfused = std::move(products);
  } else if (conv) {
    unfused = std::move(products);
    DeviceBuffer y0 = poisoned(0, false);
    conv_step(vec_rows(unfused[0].as<float>(), c.n_out[0]), vec_rows(y0.as<float>(), c.n_out[0]),
              d_conv_w.as<float>(), kConvKernel, d_state_unfused.as<float>(), true, s);
    unfused[0] = std::move(y0);
  } else {
    unfused.push_back(poisoned(0, c.epi == Epilogue::AddInto));
    const DevRows y = vec_rows(unfused[0].as<float>(), c.n_out[0]);
    if (c.epi == Epilogue::AddInto) {
      binary(cpu::Binary::Add, vec_rows(products[0].as<float>(), c.n_out[0]),
             vec_rows(products[0].as<float>(), c.n_out[0]), y, s);
    } else {  // SiluMul with x = up (matrix 1), g = gate (matrix 0)
      binary(cpu::Binary::SiluMul, vec_rows(products[1].as<float>(), c.n_out[0]),
             vec_rows(products[0].as<float>(), c.n_out[0]), y, s);
    }
  }

  // The fused launch: on every SM, and on two (the rest spared for a concurrent launch, so
  // each CTA runs many rounds); both bit for bit against the unfused sequence (outputs and
  // their poisoned padding).
  std::vector<DeviceBuffer> fused;
  FusedGemv f;
  f.prologue = c.pro;
  f.epilogue = c.epi;
  f.x = x_d;
  f.gate = gated ? ga_d : nullptr;
  f.silu_mat = c.silu_mat;
  f.norm = normed ? n_d : nullptr;
  f.head_dim = c.head_dim;
  f.eps = eps;
  f.n = n;
  for (int i = 0; i < n; ++i) f.w[i] = &copies[0][i];
  if (conv) {
    f.conv_w = d_conv_w.as<float>();
    f.conv_state = d_state_fused.as<float>();
    f.conv_kernel = kConvKernel;
  }
  std::vector<float> gpu_all, ref_all;
  for (int spare : {0, sm_count() - 2}) {
    fused.clear();
    for (int i = 0; i < n_y; ++i) fused.push_back(poisoned(i, c.epi == Epilogue::AddInto));
    for (int i = 0; i < n_y; ++i) f.y[i] = fused[i].as<float>();
    if (conv) fresh_state(d_state_fused);
    f.spare_sms = spare;
    matmul_fused(f, s);
    Result bits;
    bits.op = op + "_bits";
    bits.shape = spare == 0 ? shape : fmt::format("{} on 2 SMs", shape);
    int64_t diff = 0;
    gpu_all.clear();
    for (int i = 0; i < n_y; ++i) {
      const std::vector<float> a = download(fused[i], static_cast<size_t>(output(i)), s);
      const std::vector<float> b = download(unfused[i], static_cast<size_t>(output(i)), s);
      diff +=
          differing_floats(a, b, fmt::format("fused against unfused: output {}", i), bits.detail);
      gpu_all.insert(gpu_all.end(), a.begin(), a.begin() + c.n_out[i]);
    }
    if (conv) {
      diff += differing_floats(download(d_state_fused, static_cast<size_t>(conv_floats), s),
                               download(d_state_unfused, static_cast<size_t>(conv_floats), s),
                               "fused against unfused: conv state", bits.detail);
    }
    bits.error = double(diff);
    bits.passed = diff == 0;
    if (diff > 0) bits.detail = fmt::format("{} floats differ; first: {}", diff, bits.detail);
    out.push_back(bits);
  }
  f.spare_sms = 0;

  // Against the CPU: reference dots of the GPU prologue's output, the epilogue in f32.
  const MatmulReference how = matmul_reference(c.type);
  std::vector<float> p(static_cast<size_t>(c.n_in));
  CUDA_CHECK(cudaMemcpyAsync(p.data(), p_d, p.size() * 4, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<std::vector<float>> dots;
  for (int i = 0; i < n; ++i) dots.push_back(reference(hm[i], p, 1, how.q8_128_activations));
  if (conv) {  // the CPU's conv step and SiLU on matrix 0's dots
    std::vector<float> state = conv_state0, y0(dots[0].size());
    cpu::conv_step({dots[0].data(), 1, c.n_out[0], c.n_out[0]},
                   {y0.data(), 1, c.n_out[0], c.n_out[0]}, conv_w.data(), kConvKernel,
                   state.data());
    for (size_t j = 0; j < y0.size(); ++j) dots[0][j] = cpu::silu(y0[j]);
  }
  if (c.silu_mat >= 0) {
    for (float& v : dots[static_cast<size_t>(c.silu_mat)]) v = cpu::silu(v);
  }
  if (model::epilogue_per_matrix(c.epi)) {
    for (const auto& d : dots) ref_all.insert(ref_all.end(), d.begin(), d.end());
  } else {
    for (int64_t r = 0; r < c.n_out[0]; ++r) {
      ref_all.push_back(c.epi == Epilogue::AddInto ? residual[r] + dots[0][r]
                                                   : dots[1][r] * cpu::silu(dots[0][r]));
    }
  }
  Result r = compare(op, shape, gpu_all, ref_all, how.tolerance);

  if (ctx.perf() && c.timed) {
    double bytes = 0;
    for (const GpuMatrix& w : copies[0]) bytes += double(w.device_bytes());
    const int n_copies = static_cast<int>(std::ceil(kRotateBytes / bytes)) + 1;
    for (int k = 1; k < n_copies; ++k) {
      copies.emplace_back();
      for (int i = 0; i < n; ++i) {
        std::vector<uint8_t> storage;
        copies[k].push_back(upload_matrix(expand(hm[i], fmt::format("w{}", i), storage), s));
      }
    }
    r.us = ctx.time_us([&](int launch) {
      FusedGemv g = f;
      for (int i = 0; i < n; ++i) g.w[i] = &copies[static_cast<size_t>(launch) % copies.size()][i];
      matmul_fused(g, s);
    });
    int64_t y_floats = 0;
    for (int i = 0; i < n_y; ++i) y_floats += c.n_out[i] * (c.epi == Epilogue::AddInto ? 2 : 1);
    r.bytes = bytes + 4.0 * double(c.n_in * (gated ? 2 : 1) + (normed ? norm_len : 0) + y_floats +
                                   int64_t(conv_w.size()) + 2 * conv_floats);
  }
  out.push_back(r);
}

void add_fused_checks(Context& ctx, std::vector<Result>& out) {
  const Prologue pros[] = {Prologue::None,
                           Prologue::RmsNorm,
                           Prologue::HeadRmsNormSiluGate,
                           Prologue::SigmoidGate,
                           Prologue::HeadRmsNormMulGate,
                           Prologue::MulGate};
  // Every prologue x epilogue x matrix count on small odd shapes.
  for (Type t : {Type::Q1_0, Type::F32, Type::BF16, Type::Q8_0}) {
    const bool q1 = t == Type::Q1_0;
    const int64_t n_in = q1 ? 640 : t == Type::F32 ? 77 : 96;
    const int64_t head = q1 ? 128 : t == Type::F32 ? 7 : 32;
    for (Prologue p : pros) {
      const int64_t hd = model::prologue_head_normed(p) ? head : 0;
      for (const std::vector<int64_t>& outs :
           std::vector<std::vector<int64_t>>{{77}, {3, 1000}, {16, 1, 300}, {48, 77, 33, 200}}) {
        run_fused_case(ctx, out, fused_case(t, p, Epilogue::Store, n_in, outs, hd));
      }
      run_fused_case(ctx, out, fused_case(t, p, Epilogue::AddInto, n_in, {1000}, hd));
      run_fused_case(ctx, out, fused_case(t, p, Epilogue::SiluMulPair, n_in, {77, 77}, hd));
      run_fused_case(ctx, out, fused_case(t, p, Epilogue::SiluMulPair, n_in, {300, 300}, hd, true));
      run_fused_case(ctx, out, fused_case(t, p, Epilogue::ConvSilu, n_in, {300, 77}, hd));
    }
    // A stored gate through SiLU (silu_mat), beside the conv's channels and alone.
    run_fused_case(
        ctx, out,
        fused_case(t, Prologue::RmsNorm, Epilogue::ConvSilu, n_in, {300, 77, 16}, 0, false, 1));
    run_fused_case(ctx, out,
                   fused_case(t, Prologue::None, Epilogue::Store, n_in, {16, 1, 300}, 0, true, 2));
    // Heads longer than 256 (several virtual warps per head) and misaligned views.
    run_fused_case(
        ctx, out,
        fused_case(t, Prologue::HeadRmsNormSiluGate, Epilogue::AddInto, 1280, {129}, 320, true));
    run_fused_case(
        ctx, out,
        fused_case(t, Prologue::HeadRmsNormSiluGate, Epilogue::Store, 4608, {40, 17}, 2304));
    run_fused_case(ctx, out,
                   fused_case(t, Prologue::RmsNorm, Epilogue::Store, 17408, {33}, 0, true));
    if (t == Type::Q1_0) {  // the four-quad one-launch GEMV (rows longer than 18432)
      run_fused_case(ctx, out,
                     fused_case(t, Prologue::RmsNorm, Epilogue::Store, 20480, {77, 33}, 0));
      run_fused_case(ctx, out, fused_case(t, Prologue::None, Epilogue::AddInto, 24448, {1000}, 0));
    }
  }
  for (Type t : {Type::F16, Type::Q4_0, Type::Q2_0, Type::PQ2_0}) {
    run_fused_case(ctx, out,
                   fused_case(t, Prologue::RmsNorm, Epilogue::SiluMulPair, 1024, {100, 100}));
    run_fused_case(
        ctx, out,
        fused_case(t, Prologue::HeadRmsNormSiluGate, Epilogue::AddInto, 1024, {65}, 128, true));
  }
  // The Bonsai-27B decode GEMVs with their real prologues and epilogues (Q1_0; beta/alpha BF16).
  const auto bonsai = [&](Type t, Prologue p, Epilogue e, int64_t n_in, std::vector<int64_t> outs,
                          int64_t hd, const char* label, int silu_mat = -1) {
    FusedCase fc = fused_case(t, p, e, n_in, std::move(outs), hd, false, silu_mat);
    fc.timed = true;
    fc.label = label;
    run_fused_case(ctx, out, fc);
  };
  bonsai(Type::Q1_0, Prologue::RmsNorm, Epilogue::Store, 5120, {10240, 6144}, 0, "qkv+z");
  bonsai(Type::Q1_0, Prologue::RmsNorm, Epilogue::ConvSilu, 5120, {10240, 6144}, 0, "conv(qkv)+z");
  bonsai(Type::Q1_0, Prologue::RmsNorm, Epilogue::ConvSilu, 5120, {10240, 6144}, 0,
         "conv(qkv)+silu(z)", 1);
  bonsai(Type::BF16, Prologue::RmsNorm, Epilogue::Store, 5120, {48, 48}, 0, "beta+alpha");
  bonsai(Type::Q1_0, Prologue::RmsNorm, Epilogue::SiluMulPair, 5120, {17408, 17408}, 0, "gate+up");
  bonsai(Type::Q1_0, Prologue::RmsNorm, Epilogue::Store, 5120, {12288, 1024, 1024}, 0, "q+k+v");
  bonsai(Type::Q1_0, Prologue::HeadRmsNormSiluGate, Epilogue::AddInto, 6144, {5120}, 128,
         "ssm_out");
  bonsai(Type::Q1_0, Prologue::HeadRmsNormMulGate, Epilogue::AddInto, 6144, {5120}, 128, "ssm_out");
  bonsai(Type::Q1_0, Prologue::SigmoidGate, Epilogue::AddInto, 6144, {5120}, 0, "attn_output");
  bonsai(Type::Q1_0, Prologue::MulGate, Epilogue::AddInto, 6144, {5120}, 0, "attn_output");
  bonsai(Type::Q1_0, Prologue::None, Epilogue::AddInto, 17408, {5120}, 0, "ffn_down");
  bonsai(Type::Q1_0, Prologue::RmsNorm, Epilogue::Store, 5120, {248320}, 0, "output");
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// n floats on the device: v, then NaN poison past it.
DeviceBuffer poisoned_copy(const std::vector<float>& v, int64_t n, cudaStream_t s) {
  DeviceBuffer b(static_cast<size_t>(n) * sizeof(float));
  CUDA_CHECK(cudaMemsetAsync(b.get(), 0xff, b.bytes(), s));
  CUDA_CHECK(
      cudaMemcpyAsync(b.get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice, s));
  return b;
}

// A codes hand-off's verdict: the producer's output unchanged by writing codes, the consumer on
// the codes (y) bitwise equal to quantising x itself (y_plain), and changed by one flipped code
// bit (y_flipped: the codes are read). Empty when it passes, else what failed.
std::string codes_verdict(bool producer_unchanged, const std::vector<float>& y,
                          const std::vector<float>& y_plain, const std::vector<float>& y_flipped) {
  if (!producer_unchanged) return "the producer's output changed";
  if (!same_bits(y, y_plain)) return "the consumer on the codes differs from quantising x itself";
  if (same_bits(y_flipped, y_plain)) return "a flipped code bit changed nothing: codes not read";
  return "";
}

// Flips bit 0 of the first code word of `block` in a codes buffer ([blocks][32] words).
void flip_code_bit(const DeviceBuffer& act, int64_t block, cudaStream_t s) {
  uint32_t word = 0;
  uint32_t* at = act.as<uint32_t>() + block * 32;
  CUDA_CHECK(cudaMemcpyAsync(&word, at, 4, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  word ^= 1u;
  CUDA_CHECK(cudaMemcpyAsync(at, &word, 4, cudaMemcpyHostToDevice, s));
}

// The codes hand-off (FusedGemv::codes_out, codes_in_blocks): a gate+up GEMV whose CTAs own
// whole blocks of its output writes their activation codes, and the ffn_down GEMV after it
// copies them instead of quantising those blocks. sms: the SMs the producer may use (fewer
// SMs, more blocks each). Passes when blocks were handed off, the producer's output is bitwise
// what it is without the hand-off, the consumer's output (with its poisoned padding) bitwise
// what it is when it quantises everything itself, and one flipped code bit changes that
// output (the codes are read).
struct CodesCase {
  int64_t n_in, n_mid, n_out;
  int sms;  // 0: all
};

void run_codes_case(Context& ctx, std::vector<Result>& out, const CodesCase& c) {
  cudaStream_t s = ctx.stream();
  std::vector<uint8_t> st;
  const auto upload = [&](int64_t n_in, int64_t n_out, const char* name) {
    return upload_matrix(expand(random_matrix(ctx, Type::Q1_0, n_in, n_out), name, st), s);
  };
  const GpuMatrix wg = upload(c.n_in, c.n_mid, "gate"), wu = upload(c.n_in, c.n_mid, "up"),
                  wd = upload(c.n_mid, c.n_out, "down");
  constexpr int64_t kPad = 3;
  const std::vector<float> x = ctx.random(static_cast<size_t>(c.n_in));
  const std::vector<float> norm = ctx.random(static_cast<size_t>(c.n_in), 0.5f, 1.5f);
  const std::vector<float> residual = ctx.random(static_cast<size_t>(c.n_out));
  const auto device = [&](const std::vector<float>& v, int64_t n) {
    return poisoned_copy(v, n, s);
  };
  const DeviceBuffer dx = device(x, c.n_in), dn = device(norm, c.n_in);
  const int64_t blocks = (c.n_mid + 127) / 128;
  DeviceBuffer act(static_cast<size_t>(blocks) * 128), meta(static_cast<size_t>(blocks) * 8);
  CUDA_CHECK(cudaMemsetAsync(act.get(), 0xff, act.bytes(), s));
  CUDA_CHECK(cudaMemsetAsync(meta.get(), 0xff, meta.bytes(), s));

  FusedGemv up;
  up.prologue = Prologue::RmsNorm;
  up.epilogue = Epilogue::SiluMulPair;
  up.x = dx.as<float>();
  up.norm = dn.as<float>();
  up.eps = 1e-6f;
  up.n = 2;
  up.w[0] = &wg;
  up.w[1] = &wu;
  up.spare_sms = c.sms > 0 ? sm_count() - c.sms : 0;
  const DeviceBuffer mid_plain = device({}, c.n_mid + kPad), mid = device({}, c.n_mid + kPad);
  up.y[0] = mid_plain.as<float>();
  matmul_fused(up, s);
  up.codes_act = act.as<uint32_t>();
  up.codes_meta = meta.get();
  up.codes_out = true;
  up.y[0] = mid.as<float>();
  const int nb = q1_codes_out_blocks(up);
  matmul_fused(up, s);

  FusedGemv down = plain_gemv(wd, mid.as<float>(), nullptr);
  down.epilogue = Epilogue::AddInto;
  const auto run_down = [&](int codes_in_blocks) {
    DeviceBuffer y = device(residual, c.n_out + kPad);
    down.y[0] = y.as<float>();
    down.codes_act = act.as<uint32_t>();
    down.codes_meta = meta.get();
    down.codes_in_blocks = codes_in_blocks;
    matmul_fused(down, s);
    return download(y, static_cast<size_t>(c.n_out + kPad), s);
  };
  const std::vector<float> y_plain = run_down(0), y = run_down(nb);
  flip_code_bit(act, std::max(nb - 1, 0), s);  // one code bit of the last handed-off block
  const std::vector<float> y_flipped = run_down(nb);
  const size_t n_mid = static_cast<size_t>(c.n_mid + kPad);

  Result r;
  r.op = "matmul_fused_q1_0_codes";
  r.shape = fmt::format("{}->2x{}->{}{}: {} of {} blocks handed off", c.n_in, c.n_mid, c.n_out,
                        c.sms > 0 ? fmt::format(" on {} SMs", c.sms) : "", nb, blocks);
  r.detail = nb == 0
                 ? "no block handed off"
                 : codes_verdict(same_bits(download(mid, n_mid, s), download(mid_plain, n_mid, s)),
                                 y, y_plain, y_flipped);
  r.passed = r.detail.empty();
  out.push_back(r);
}

// Codes out of the kernels before ssm_out and attn_output (CodesOut): one decode token of the
// GDN recurrence (Hv heads of d = 128) or of attention (H heads of D, n_kv keys), then the
// GEMV of its output with that GEMV's prologue (HeadRmsNormMulGate / MulGate) and AddInto.
// Passes when the kernel's output (and the recurrence's state) is bitwise what it is without
// codes out, the GEMV that copies all of x's codes bitwise equals the one that stages and
// quantises x itself, and one flipped code bit changes its output (the codes are read).
struct CodesOutCase {
  bool gdn;          // else attention
  int64_t Hk, H, d;  // GDN: key heads, value heads, d; attention: kv heads, q heads, D
  int64_t n_kv;      // attention: keys (a split of several CTAs from 2 * 8 * 128)
  int64_t n_out;
};

void run_codes_out_case(Context& ctx, std::vector<Result>& out, const CodesOutCase& c) {
  cudaStream_t s = ctx.stream();
  constexpr int64_t kPad = 3;
  const int64_t qk = c.Hk * c.d, inner = c.H * c.d, n_state = c.H * c.d * c.d;
  std::vector<uint8_t> st;
  const GpuMatrix w = upload_matrix(
      expand(random_matrix(ctx, Type::Q1_0, inner, c.n_out), c.gdn ? "ssm_out" : "attn_output", st),
      s);
  const auto device = [&](const std::vector<float>& v, int64_t n) {
    return poisoned_copy(v, n, s);
  };
  const auto random = [&](int64_t n, float lo, float hi) {
    return device(ctx.random(static_cast<size_t>(n), lo, hi), n);
  };
  const auto rows = [](const DeviceBuffer& b, int64_t n) { return vec_rows(b.as<float>(), n); };
  // Finished inputs (no gating or L2 fusion): the hand-off does not depend on them.
  const DeviceBuffer q = random(c.gdn ? qk : inner, -0.2f, 0.2f), k = random(qk, -0.2f, 0.2f),
                     v = random(inner, -1.0f, 1.0f), g = random(c.H, -2.0f, -0.01f),
                     beta = random(c.H, 0.05f, 0.95f), gate = random(inner, -1.0f, 1.0f),
                     norm = random(c.d, 0.5f, 1.5f);
  const int64_t cache = c.gdn ? 1 : c.n_kv * qk;
  const DeviceBuffer k_cache = random(cache, -1.0f, 1.0f), v_cache = random(cache, -1.0f, 1.0f);
  const std::vector<float> state0 = ctx.random(static_cast<size_t>(c.gdn ? n_state : 1));
  const std::vector<float> residual = ctx.random(static_cast<size_t>(c.n_out));
  const int64_t blocks = inner / 128;
  DeviceBuffer act(static_cast<size_t>(blocks) * 128), meta(static_cast<size_t>(blocks) * 8);
  CUDA_CHECK(cudaMemsetAsync(act.get(), 0xff, act.bytes(), s));
  CUDA_CHECK(cudaMemsetAsync(meta.get(), 0xff, meta.bytes(), s));

  // The kernel with or without codes out: its output (and the recurrence's final state).
  const DeviceBuffer o_plain = device({}, inner + kPad), o = device({}, inner + kPad);
  const auto run_kernel = [&](const DeviceBuffer& o_buf, bool with_codes) {
    CodesOut codes;
    if (with_codes) {
      codes = {act.as<uint32_t>(), meta.get(), gate.as<float>(), c.gdn ? norm.as<float>() : nullptr,
               1e-6f};
    }
    if (!c.gdn) {
      attention(rows(q, inner), k_cache.as<float>(), v_cache.as<float>(), rows(o_buf, inner), c.H,
                c.Hk, c.d, c.n_kv - 1, s, codes);
      return std::vector<float>{};
    }
    DeviceBuffer state = device(state0, n_state);
    GdnFusion f;
    f.codes = codes;
    const DevState sd{state.get(), model::StateType::F32};
    gdn_recurrence(rows(q, qk), rows(k, qk), rows(v, inner), rows(g, c.H), rows(beta, c.H),
                   rows(o_buf, inner), sd, sd, c.Hk, c.H, c.d, f, s);
    return download(state, static_cast<size_t>(n_state), s);
  };
  const std::vector<float> state_plain = run_kernel(o_plain, false), state = run_kernel(o, true);

  FusedGemv f;
  f.prologue = c.gdn ? Prologue::HeadRmsNormMulGate : Prologue::MulGate;
  f.epilogue = Epilogue::AddInto;
  f.x = o.as<float>();
  f.gate = gate.as<float>();
  if (c.gdn) {
    f.norm = norm.as<float>();
    f.head_dim = c.d;
    f.eps = 1e-6f;
  }
  f.n = 1;
  f.w[0] = &w;
  f.codes_act = act.as<uint32_t>();
  f.codes_meta = meta.get();
  const auto run_gemv = [&](int codes_in_blocks) {
    DeviceBuffer y = device(residual, c.n_out + kPad);
    f.y[0] = y.as<float>();
    f.codes_in_blocks = codes_in_blocks;
    matmul_fused(f, s);
    return download(y, static_cast<size_t>(c.n_out + kPad), s);
  };
  const std::vector<float> y_plain = run_gemv(0), y = run_gemv(static_cast<int>(blocks));
  flip_code_bit(act, blocks - 1, s);
  const std::vector<float> y_flipped = run_gemv(static_cast<int>(blocks));
  const size_t n_o = static_cast<size_t>(inner + kPad);

  Result r;
  r.op = c.gdn ? "matmul_fused_q1_0_gdn_codes" : "matmul_fused_q1_0_attn_codes";
  r.shape = c.gdn ? fmt::format("Hk={} Hv={} d={}", c.Hk, c.H, c.d)
                  : fmt::format("H={} Hkv={} D={} n_kv={}", c.H, c.Hk, c.d, c.n_kv);
  r.shape += fmt::format(" -> {}->{}: {} blocks handed off", inner, c.n_out, blocks);
  r.detail = codes_verdict(
      same_bits(download(o, n_o, s), download(o_plain, n_o, s)) && same_bits(state, state_plain), y,
      y_plain, y_flipped);
  r.passed = r.detail.empty();
  out.push_back(r);
}

// The codes out the recurrence or attention cannot write are refused: a head on more than 8
// CTAs (few value heads), two tokens, a head of 64, no meta buffer, no gate.
void add_codes_out_refusals(Context& ctx, std::vector<Result>& out) {
  cudaStream_t s = ctx.stream();
  DeviceBuffer buf(size_t(1) << 24);
  float* p = buf.as<float>();
  struct Refusal {
    const char* what;
    bool gdn;
    int64_t T, Hk, H, d;
    bool meta, gate;
  };
  const Refusal cases[] = {{"gdn: a head on 16 CTAs", true, 1, 1, 1, 128, true, true},
                           {"gdn: two tokens", true, 2, 16, 48, 128, true, true},
                           {"gdn: d 64", true, 1, 16, 48, 64, true, true},
                           {"gdn: no meta", true, 1, 16, 48, 128, false, true},
                           {"attention: two tokens", false, 2, 4, 24, 256, true, true},
                           {"attention: D 64", false, 1, 4, 24, 64, true, true},
                           {"attention: no gate", false, 1, 4, 24, 256, true, false}};
  for (const Refusal& rc : cases) {
    const int64_t qk = rc.Hk * rc.d, inner = rc.H * rc.d;
    const DevRows q{p, rc.T, rc.gdn ? qk : inner, rc.gdn ? qk : inner};
    const DevRows v{p, rc.T, inner, inner}, gv{p, rc.T, rc.H, rc.H};
    const DevRows o{p + 2 * rc.T * inner, rc.T, inner, inner};
    const CodesOut codes{reinterpret_cast<uint32_t*>(p), rc.meta ? p : nullptr,
                         rc.gate ? p : nullptr, p, 0.0f};
    Result r;
    r.op = "matmul_fused_q1_0_codes_out_refuses";
    r.shape = rc.what;
    try {
      if (rc.gdn) {
        GdnFusion f;
        f.codes = codes;
        const DevState sd{p + 4 * rc.T * inner, model::StateType::F32};
        gdn_recurrence(q, q, v, gv, gv, o, sd, sd, rc.Hk, rc.H, rc.d, f, s);
      } else {
        attention(q, p, p, o, rc.H, rc.Hk, rc.d, 0, s, codes);
      }
      CUDA_CHECK(cudaStreamSynchronize(s));
      r.detail = "accepted";
    } catch (const Error&) {
      r.passed = true;
    }
    out.push_back(r);
  }
}

// Every way matmul_fused must refuse, with its message naming the matrices.
void add_fused_refusals(Context& ctx, std::vector<Result>& out) {
  cudaStream_t s = ctx.stream();
  std::vector<uint8_t> st;
  const HostMatrix a = random_matrix(ctx, Type::Q1_0, 256, 16);
  const HostMatrix b = random_matrix(ctx, Type::Q8_0, 256, 16);
  const HostMatrix c = random_matrix(ctx, Type::Q1_0, 384, 16);
  const HostMatrix d = random_matrix(ctx, Type::Q1_0, 256, 32);
  const GpuMatrix wa = upload_matrix(expand(a, "wa", st), s),
                  wb = upload_matrix(expand(b, "wb", st), s),
                  wc = upload_matrix(expand(c, "wc", st), s),
                  wd = upload_matrix(expand(d, "wd", st), s);
  DeviceBuffer buf(4096 * sizeof(float));
  float* x = buf.as<float>();
  float* y = x + 1024;
  float* y2 = x + 2048;
  const auto base = [&] { return plain_gemv(wa, x, y); };
  // Each refusal: a valid call with one thing broken.
  struct Refusal {
    const char* what;
    FusedGemv f;
  };
  // ConvSilu on the base call with this state and kernel size.
  const auto conv = [&](FusedGemv& f, float* state, int kernel) {
    f.epilogue = Epilogue::ConvSilu;
    f.conv_w = x;
    f.conv_state = state;
    f.conv_kernel = kernel;
  };
  const auto broken = [&](const char* what, auto&& change) {
    FusedGemv f = base();
    change(f);
    return Refusal{what, f};
  };
  const std::vector<Refusal> cases = {
      broken("mixed families",
             [&](FusedGemv& f) {
               f.n = 2;
               f.w[1] = &wb;
               f.y[1] = y2;
             }),
      broken("unequal n_in",
             [&](FusedGemv& f) {
               f.n = 2;
               f.w[1] = &wc;
               f.y[1] = y2;
             }),
      broken("no matrices", [&](FusedGemv& f) { f.n = 0; }),
      broken("five matrices", [&](FusedGemv& f) { f.n = 5; }),
      broken("add_into with two",
             [&](FusedGemv& f) {
               f.epilogue = Epilogue::AddInto;
               f.n = 2;
               f.w[1] = &wa;
             }),
      broken("pair with one", [&](FusedGemv& f) { f.epilogue = Epilogue::SiluMulPair; }),
      broken("pair n_out differ",
             [&](FusedGemv& f) {
               f.epilogue = Epilogue::SiluMulPair;
               f.n = 2;
               f.w[1] = &wd;
             }),
      broken("missing output",
             [&](FusedGemv& f) {
               f.n = 2;
               f.w[1] = &wa;
             }),
      broken("no x", [&](FusedGemv& f) { f.x = nullptr; }),
      broken("no norm", [&](FusedGemv& f) { f.prologue = Prologue::RmsNorm; }),
      broken("no gate", [&](FusedGemv& f) { f.prologue = Prologue::SigmoidGate; }),
      broken("head_dim",
             [&](FusedGemv& f) {
               f.prologue = Prologue::HeadRmsNormSiluGate;
               f.gate = x;
               f.norm = x;
               f.head_dim = 100;
             }),
      broken("output overlaps x", [&](FusedGemv& f) { f.y[0] = x + 8; }),
      broken("silu_mat past the matrices", [&](FusedGemv& f) { f.silu_mat = 1; }),
      broken("silu_mat with add_into",
             [&](FusedGemv& f) {
               f.epilogue = Epilogue::AddInto;
               f.silu_mat = 0;
             }),
      broken("silu_mat on the conv's channels",
             [&](FusedGemv& f) {
               conv(f, y2, 4);
               f.silu_mat = 0;
             }),
      broken("conv without state", [&](FusedGemv& f) { conv(f, nullptr, 4); }),
      broken("conv of 5 taps", [&](FusedGemv& f) { conv(f, y2, 5); }),
      broken("conv state overlaps output", [&](FusedGemv& f) { conv(f, y + 4, 4); }),
      broken("null matrix", [&](FusedGemv& f) { f.w[0] = nullptr; }),
      broken("unknown epilogue", [&](FusedGemv& f) { f.epilogue = static_cast<Epilogue>(9); }),
      broken("codes out of a store",
             [&](FusedGemv& f) {
               f.codes_out = true;
               f.codes_act = reinterpret_cast<uint32_t*>(y2);
               f.codes_meta = y2 + 512;
             }),
      broken("codes out of a 16-row pair, no buffers",
             [&](FusedGemv& f) {
               f.epilogue = Epilogue::SiluMulPair;
               f.n = 2;
               f.w[1] = &wa;
               f.codes_out = true;
             }),
      broken("codes in with a prologue",
             [&](FusedGemv& f) {
               f.prologue = Prologue::RmsNorm;
               f.norm = x;
               f.codes_in_blocks = 1;
               f.codes_act = reinterpret_cast<uint32_t*>(y2);
               f.codes_meta = y2 + 512;
             }),
      broken("codes in without buffers", [&](FusedGemv& f) { f.codes_in_blocks = 1; }),
      broken("codes in past n_in",
             [&](FusedGemv& f) {
               f.codes_in_blocks = 3;
               f.codes_act = reinterpret_cast<uint32_t*>(y2);
               f.codes_meta = y2 + 512;
             }),
  };
  for (const Refusal& rc : cases) {
    Result r;
    r.op = "matmul_fused_refuses";
    r.shape = rc.what;
    try {
      matmul_fused(rc.f, s);
      CUDA_CHECK(cudaStreamSynchronize(s));
      r.detail = "accepted";
    } catch (const Error&) {
      r.passed = true;
    }
    out.push_back(r);
  }
}

void add_matmul_checks(Context& ctx, std::vector<Result>& out) {
  const Type all[] = {Type::F32,  Type::F16,  Type::BF16,  Type::Q8_0,
                      Type::Q4_0, Type::Q2_0, Type::PQ2_0, Type::Q1_0};
  for (Type t : all) {
    const int64_t b = std::max<int64_t>(quant::type_info(t).block_elems, 1);
    const int64_t b32 = std::max<int64_t>(b, 32);  // plain rows: one 32-element unit
    const bool plain = b == 1;
    std::vector<Case> cases = {
        {t, plain ? 1 : b, 1, 1, 0, 0, false}, {t, 3 * b32, 3, 1, 5, 3, false},
        {t, 3 * b32, 77, 2, 0, 0, false},      {t, 5120, 77, 7, 4, 1, false},
        {t, 5120, 1000, 1, 0, 0, false},       {t, 17408, 1000, 1, 5, 0, false},
        {t, 17408, 3, 7, 0, 2, false},         {t, 4 * b32, 77, 64, 1, 0, false},
        {t, 2 * b32, 3, 512, 0, 5, false},     {t, 5120, 6144, 1, 0, 0, true},
    };
    if (plain) {
      cases.push_back({t, 77, 3, 1, 0, 0, false});
      cases.push_back({t, 77, 1000, 7, 3, 0, false});
    }
    if (t == Type::BF16) cases.push_back({t, 5120, 48, 1, 0, 0, true});  // ssm_beta / ssm_alpha
    if (t == Type::Q1_0) {
      // Every Bonsai-27B matrix shape, GEMV and batched, and the output head.
      for (auto [n_in, n_out] :
           {std::pair<int64_t, int64_t>{5120, 10240}, {5120, 17408}, {6144, 5120}, {17408, 5120}}) {
        cases.push_back({t, n_in, n_out, 1, 0, 0, true});
        cases.push_back({t, n_in, n_out, 7, 0, 0, false});
      }
      cases.push_back({t, 5120, 6144, 64, 0, 0, false});
      cases.push_back({t, 5120, 248320, 1, 0, 0, true});
      // Prefill batches (the int8 product where imma_wins): a whole 512-token prompt through
      // the widest Bonsai matrix (timed), token counts that leave a CTA's groups of 8 and of
      // 32 partly empty (the last CTA's groups: 1 at 130, 65, 40 and 33; 2 at 9; 3 at 50; 4,
      // the last partial, at 59), a partial row-tile CTA (1000 rows), a padded quad, a wide
      // output at 9 tokens.
      cases.push_back({t, 5120, 17408, 512, 0, 0, true});
      cases.push_back({t, 17408, 5120, 130, 0, 3, false});
      cases.push_back({t, 6144, 5120, 65, 2, 0, false});
      cases.push_back({t, 640, 1000, 40, 0, 0, false});
      cases.push_back({t, 640, 10240, 9, 0, 1, false});
      cases.push_back({t, 640, 1000, 50, 0, 0, false});
      cases.push_back({t, 6144, 333, 59, 1, 2, false});
      cases.push_back({t, 128, 3, 65535 + 70, 0, 1, false});  // two quantise launches
      // Rows longer than 18432 (four quads a chunk, q1_default_options' kBmma4 / kBmma4Flat),
      // one of them with a padded quad: no model here has them, so nothing else runs them.
      for (const int64_t n_in : {20480, 24448}) {
        cases.push_back({t, n_in, 77, 1, 0, 0, false});
        cases.push_back({t, n_in, 10240, 1, 0, 0, false});
        cases.push_back({t, n_in, 1000, 7, 0, 0, false});
      }
      // Activations on rounding ties: one block per row (a flipped code is visible), and more.
      Case ties{t, 128, 1000, 1, 0, 0, false};
      ties.ties = true;
      cases.push_back(ties);
      ties.n_in = 2048;
      cases.push_back(ties);
      ties.n_tokens = 7;
      cases.push_back(ties);
      ties.n_tokens = 33;
      cases.push_back(ties);
    }
    for (const Case& c : cases) run_case(ctx, out, c);
  }
}

// Rows folded into a Q1_0 launch (FusedGemv::fold_*, the GDN qkv step's BF16 beta and alpha in
// the decode): the folded launch against the two families launched apart, bit for bit (every
// output with its poisoned padding, and the conv state).
struct FoldCase {
  int64_t n_in;
  std::vector<int64_t> q1_outs, fold_outs;
  bool conv;  // the Q1_0 family ConvSilu (its second matrix through SiLU), else Store
  int spare_sms;
  const char* label;
};

void run_fold_case(Context& ctx, std::vector<Result>& out, const FoldCase& c) {
  cudaStream_t s = ctx.stream();
  constexpr int64_t kPad = 3, kConvKernel = 4;
  std::vector<uint8_t> st;
  std::vector<GpuMatrix> q1, bf;
  for (int64_t n : c.q1_outs)
    q1.push_back(upload_matrix(expand(random_matrix(ctx, Type::Q1_0, c.n_in, n), "q1", st), s));
  for (int64_t n : c.fold_outs)
    bf.push_back(upload_matrix(expand(random_matrix(ctx, Type::BF16, c.n_in, n), "bf16", st), s));
  const std::vector<float> x = ctx.random(static_cast<size_t>(c.n_in));
  const std::vector<float> norm = ctx.random(static_cast<size_t>(c.n_in), 0.5f, 1.5f);
  const int64_t conv_floats = (kConvKernel - 1) * c.q1_outs[0];
  const std::vector<float> conv_w = ctx.random(static_cast<size_t>(kConvKernel * c.q1_outs[0]));
  const std::vector<float> state0 = ctx.random(static_cast<size_t>(conv_floats));
  const DeviceBuffer dx = poisoned_copy(x, c.n_in + 4, s), dn = poisoned_copy(norm, c.n_in, s),
                     dw = poisoned_copy(conv_w, int64_t(conv_w.size()), s);

  // One run's outputs: the Q1_0 family's, then the folded family's, then the conv state.
  struct Run {
    std::vector<DeviceBuffer> y;
    DeviceBuffer state;
  };
  const auto fresh = [&] {
    Run r{{}, poisoned_copy(state0, conv_floats, s)};
    for (int64_t n : c.q1_outs) r.y.push_back(poisoned_copy({}, n + kPad, s));
    for (int64_t n : c.fold_outs) r.y.push_back(poisoned_copy({}, n + kPad, s));
    return r;
  };
  const auto family = [&](std::vector<GpuMatrix>& ws, Run& r, size_t y0) {
    FusedGemv f;
    f.prologue = Prologue::RmsNorm;
    f.x = dx.as<float>();
    f.norm = dn.as<float>();
    f.eps = 1e-6f;
    for (GpuMatrix& w : ws) {
      f.w[f.n] = &w;
      f.y[f.n] = r.y[y0 + size_t(f.n)].as<float>();
      ++f.n;
    }
    return f;
  };
  const auto q1_family = [&](Run& r) {
    FusedGemv f = family(q1, r, 0);
    f.spare_sms = c.spare_sms;
    if (c.conv) {
      f.epilogue = Epilogue::ConvSilu;
      f.conv_w = dw.as<float>();
      f.conv_state = r.state.as<float>();
      f.conv_kernel = static_cast<int>(kConvKernel);
      f.silu_mat = f.n > 1 ? 1 : -1;
    }
    return f;
  };
  Run apart = fresh(), folded = fresh();
  matmul_fused(family(bf, apart, q1.size()), s);
  matmul_fused(q1_family(apart), s);
  const FusedGemv side = family(bf, folded, q1.size()), main = q1_family(folded);

  Result r;
  r.op = "matmul_fused_q1_0_fold";
  std::string outs, fold;
  for (int64_t n : c.q1_outs) outs += fmt::format("{}{}", outs.empty() ? "" : "+", n);
  for (int64_t n : c.fold_outs) fold += fmt::format("{}{}", fold.empty() ? "" : "+", n);
  r.shape = fmt::format("{}{}->{} {} + bf16 {} folded, {} SMs spare", c.label, c.n_in, outs,
                        c.conv ? "conv_silu" : "store", fold, c.spare_sms);
  r.detail = q1_fold_refusal(main, side);
  if (r.detail.empty()) {
    matmul_fused(with_fold(main, side), s);
    int64_t diff = 0;
    for (size_t i = 0; i < apart.y.size(); ++i) {
      const size_t n = apart.y[i].bytes() / sizeof(float);
      diff += differing_floats(download(folded.y[i], n, s), download(apart.y[i], n, s),
                               fmt::format("folded against apart: output {}", i), r.detail);
    }
    diff += differing_floats(download(folded.state, size_t(conv_floats), s),
                             download(apart.state, size_t(conv_floats), s),
                             "folded against apart: conv state", r.detail);
    r.error = double(diff);
    r.passed = diff == 0;
    if (!r.passed) r.detail = fmt::format("{} floats differ; first: {}", diff, r.detail);
  }
  out.push_back(r);
}

// Folds that must be refused: q1_fold_refusal names why, and where the launch itself cannot
// fold (not only the executor's rule that the rows share the launch's input), matmul_fused
// throws rather than compute something else.
void add_fold_refusals(Context& ctx, std::vector<Result>& out) {
  cudaStream_t s = ctx.stream();
  std::vector<uint8_t> st;
  const auto up = [&](Type t, int64_t n_in, int64_t n_out) {
    return upload_matrix(expand(random_matrix(ctx, t, n_in, n_out), "w", st), s);
  };
  const GpuMatrix q1 = up(Type::Q1_0, 640, 1024), bf = up(Type::BF16, 640, 2),
                  many = up(Type::BF16, 640, 1000), f32 = up(Type::F32, 640, 2),
                  long_q1 = up(Type::Q1_0, 17408, 64), long_bf = up(Type::BF16, 17408, 2),
                  short_q1 = up(Type::Q1_0, 256, 16384), short_bf = up(Type::BF16, 256, 8);
  DeviceBuffer buf(size_t(1) << 20);
  float* x = buf.as<float>();
  float* y = x + 32768;
  const auto gemv = [&](const GpuMatrix& w, float* yw) {
    FusedGemv f = plain_gemv(w, x, yw);
    f.prologue = Prologue::RmsNorm;
    f.norm = x;
    return f;
  };
  struct Refusal {
    const char* what;
    FusedGemv main, side;
    bool launch;  // matmul_fused must refuse it too
  };
  FusedGemv unnormed = gemv(bf, y + 1024);
  unnormed.prologue = Prologue::None;
  FusedGemv misaligned = gemv(q1, y), misaligned_side = gemv(bf, y + 1024);
  misaligned.x = misaligned_side.x = x + 1;
  const std::vector<Refusal> cases = {
      {"another prologue", gemv(q1, y), unnormed, false},
      {"1000 rows for fewer CTAs", gemv(q1, y), gemv(many, y + 1024), true},
      {"F32 rows", gemv(q1, y), gemv(f32, y + 1024), true},
      {"n_in 17408: the staged prologue", gemv(long_q1, y), gemv(long_bf, y + 1024), true},
      {"n_in 256 normed (one virtual warp): the staged prologue", gemv(short_q1, y),
       gemv(short_bf, y + 16384), true},
      {"x misaligned: the staged prologue", misaligned, misaligned_side, true},
      {"the rows' output overlaps the launch's", gemv(q1, y), gemv(bf, y + 1000), true},
  };
  // The control: each case above breaks this fold in one way.
  {
    Result r;
    r.op = "matmul_fused_q1_0_fold_refuses";
    r.shape = "control: Q1_0 1024 rows + BF16 2 rows, n_in 640";
    r.detail = q1_fold_refusal(gemv(q1, y), gemv(bf, y + 1024));
    r.passed = r.detail.empty();
    out.push_back(r);
  }
  for (const Refusal& rc : cases) {
    Result r;
    r.op = "matmul_fused_q1_0_fold_refuses";
    r.shape = rc.what;
    const std::string why = q1_fold_refusal(rc.main, rc.side);
    bool launched = false;
    if (rc.launch) {
      try {
        matmul_fused(with_fold(rc.main, rc.side), s);
        CUDA_CHECK(cudaStreamSynchronize(s));
        launched = true;
      } catch (const Error&) {
      }
    }
    r.passed = !why.empty() && !launched;
    r.detail = why.empty() ? "q1_fold_refusal gave no reason" : launched ? "launched" : "";
    out.push_back(r);
  }
}

void add_matmul_fused_checks(Context& ctx, std::vector<Result>& out) {
  add_fused_checks(ctx, out);
  add_fused_refusals(ctx, out);
  // The decode's qkv step (beta and alpha on 96 of the CTAs, 4 SMs left spare as the executor
  // does), one folded matrix, a padded quad with 39 chunks a range, and 10 ranges of 8 chunks
  // (a launch of 2 CTAs: a row each).
  for (const FoldCase& c : {FoldCase{5120, {10240, 6144}, {48, 48}, true, 4, "qkv+z "},
                            FoldCase{5120, {10240, 6144}, {48}, false, 0, ""},
                            FoldCase{4992, {1000, 77}, {5, 3}, true, 0, ""},
                            FoldCase{640, {300, 77}, {1, 1}, true, 0, ""}}) {
    run_fold_case(ctx, out, c);
  }
  add_fold_refusals(ctx, out);
  // Bonsai-27B's gate+up -> ffn_down (132 of its 136 blocks on the H200's 132 SMs), then
  // fewer SMs, more blocks each and a shared remainder (8 of 9 on 2 SMs, 9 of 11 on 3).
  for (const CodesCase& c : {CodesCase{5120, 17408, 5120, 0}, CodesCase{5120, 1152, 200, 2},
                             CodesCase{6144, 1408, 333, 3}}) {
    run_codes_case(ctx, out, c);
  }
  // Bonsai-27B's recurrence -> ssm_out (a head on 8 CTAs of 16 columns on 132 SMs) and 80
  // heads (4 CTAs of 32 columns a head); its attention -> attn_output with a cluster of 8 CTAs
  // (2100 keys) and of one (5 keys), and heads of 128.
  for (const CodesOutCase& c :
       {CodesOutCase{true, 16, 48, 128, 0, 5120}, CodesOutCase{true, 16, 80, 128, 0, 333},
        CodesOutCase{false, 4, 24, 256, 2100, 5120}, CodesOutCase{false, 4, 24, 256, 5, 333},
        CodesOutCase{false, 2, 6, 128, 300, 77}}) {
    run_codes_out_case(ctx, out, c);
  }
  add_codes_out_refusals(ctx, out);
}

// The persistent GEMV chain (mm::Q1Chain): plain one-token Q1_0 GEMVs, each step's x the
// input or an earlier step's y (its first n_in floats), against the same steps as matmul_fused
// launches. The chain shares the one-launch GEMV's device code and order, so every y must match
// bit for bit, poisoned padding after it included, for each option that computes (x staged or
// quantised from L2, either signal, teams or a warp per tile, the producer held while x is read
// or not: on 132 SMs the 17408-row step has 8-9 tiles a CTA, a warp each). Shapes: n_in of one
// block, with quad padding (640, 1408) and Bonsai's 17408; n_out that no row tile divides (333,
// 200) and many row tiles per CTA (17408); a step reading a y from two steps back.
struct ChainLink {
  int64_t n_in, n_out;
  int src;  // the step whose y is x; -1: the input
};

void run_chain_case(Context& ctx, std::vector<Result>& out, const mm::Q1ChainOptions& o,
                    const std::string& name) {
  constexpr int64_t kPad = 3;
  const std::vector<ChainLink> links = {{640, 1408, -1}, {1408, 384, 0}, {384, 17408, 1},
                                        {17408, 333, 2}, {128, 200, 3},  {256, 5120, 2}};
  cudaStream_t s = ctx.stream();
  std::vector<uint8_t> st;
  std::vector<GpuMatrix> w;
  for (size_t k = 0; k < links.size(); ++k) {
    w.push_back(upload_matrix(expand(random_matrix(ctx, Type::Q1_0, links[k].n_in, links[k].n_out),
                                     fmt::format("step{}", k), st),
                              s));
  }
  const DeviceBuffer input = poisoned_copy(ctx.random(640), 640 + kPad, s);
  std::vector<DeviceBuffer> y[2];
  std::vector<mm::Q1ChainStep> steps;
  for (int v = 0; v < 2; ++v) {
    for (size_t k = 0; k < links.size(); ++k) {
      y[v].push_back(poisoned_copy({}, links[k].n_out + kPad, s));
      const int src = links[k].src;
      const float* x = src < 0 ? input.as<float>() : y[v][size_t(src)].as<float>();
      if (v == 0) {
        matmul_fused(plain_gemv(w[k], x, y[v][k].as<float>()), s);
      } else {
        steps.push_back({&w[k], x, y[v][k].as<float>()});
      }
    }
  }
  const mm::Q1Chain chain(steps, o);
  chain.run(s);
  Result r;
  r.op = "q1_0_chain";
  r.shape = fmt::format("{} steps 640->1408->384->17408->333, 128->200, 256->5120; {}",
                        links.size(), name);
  for (size_t k = 0; k < links.size() && r.detail.empty(); ++k) {
    const size_t n = static_cast<size_t>(links[k].n_out + kPad);
    const std::vector<float> a = download(y[0][k], n, s), b = download(y[1][k], n, s);
    for (size_t i = 0; i < n && r.detail.empty(); ++i) {
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 || (i < n - kPad && !std::isfinite(a[i])))
        r.detail = fmt::format("step {} row {}: launches {} chain {}", k, i, a[i], b[i]);
    }
  }
  r.passed = r.detail.empty();
  out.push_back(r);
}

// Every step the chain cannot run is refused when it is built, naming the step and matrix.
void add_chain_refusals(Context& ctx, std::vector<Result>& out) {
  cudaStream_t s = ctx.stream();
  std::vector<uint8_t> st;
  const GpuMatrix ok = upload_matrix(expand(random_matrix(ctx, Type::Q1_0, 256, 16), "ok", st), s),
                  q8 = upload_matrix(expand(random_matrix(ctx, Type::Q8_0, 256, 16), "q8", st), s),
                  wide = upload_matrix(
                      expand(random_matrix(ctx, Type::Q1_0, 18560, 16), "wide", st), s);
  const DeviceBuffer x = poisoned_copy(ctx.random(18560), 18560 + 4, s),
                     y = poisoned_copy({}, 16, s);
  struct Refusal {
    const char* what;
    std::vector<mm::Q1ChainStep> steps;
    const char* expect;
  };
  const Refusal cases[] = {
      {"no steps", {}, "no steps"},
      {"a Q8_0 matrix",
       {{&ok, x.as<float>(), y.as<float>()}, {&q8, x.as<float>(), y.as<float>()}},
       "step 1 matrix 'q8'"},
      {"n_in 18560", {{&wide, x.as<float>(), y.as<float>()}}, "step 0 matrix 'wide'"},
      {"x not 16-byte aligned", {{&ok, x.as<float>() + 1, y.as<float>()}}, "step 0 x"},
  };
  for (const Refusal& c : cases) {
    Result r;
    r.op = "q1_0_chain_refuses";
    r.shape = c.what;
    try {
      const mm::Q1Chain chain(c.steps, {});
      r.detail = "accepted";
    } catch (const Error& e) {
      if (std::string(e.what()).find(c.expect) == std::string::npos)
        r.detail = fmt::format("message '{}' does not name '{}'", e.what(), c.expect);
    }
    r.passed = r.detail.empty();
    out.push_back(r);
  }
}

void add_chain_checks(Context& ctx, std::vector<Result>& out) {
  run_chain_case(ctx, out, {false, false, false}, "x staged, fence + atomic");
  run_chain_case(ctx, out, {false, true, false}, "x staged, red.release");
  run_chain_case(ctx, out, {true, true, false}, "x from L2, red.release");
  run_chain_case(ctx, out, {true, true, false, true}, "x from L2, a warp per tile");
  run_chain_case(ctx, out, {true, true, false, true, true}, "x from L2, a warp per tile, held");
  run_chain_case(ctx, out, {false, false, false, false, true}, "x staged, teams, producer held");
  add_chain_refusals(ctx, out);
}

}  // namespace

std::vector<Family> matmul_families() {
  return {
      {"matmul",
       add_matmul_checks,
       {"matmul_f32", "matmul_f16", "matmul_bf16", "matmul_q8_0", "matmul_q4_0", "matmul_q2_0",
        "matmul_pq2_0", "matmul_q1_0"}},
      {"matmul_fused", add_matmul_fused_checks, {"matmul_fused"}},
      {"q1_0_chain", add_chain_checks, {"q1_0_chain"}},
  };
}

}  // namespace gdn::cuda::opcheck
