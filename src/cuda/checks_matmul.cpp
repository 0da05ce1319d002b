// Op checks for matmul() (cuda/matrix.h) against the CPU reference (quant/quant.h): `gdn ops`
// runs add_matmul_checks.
//
// Every case: a random matrix (random floats through quant::quantize_row, so every stored row
// is what the reference quantiser makes), random non-zero activations in rows ldx apart whose
// padding columns hold NaN (a kernel reading past n_in turns the result into NaN), outputs in
// rows ldy apart poisoned with NaN before the run, the view compared with the reference and the
// padding columns compared bit for bit with the poison (a kernel writing past n_out fails).
//
// Shapes: odd n_out (1, 3, 77, 1000) that no row tile or warp divides, n_in of one block,
// several blocks, 5120 and 17408 (plain formats also 77, which no 16-byte chunk divides); every
// Bonsai-27B Q1_0 shape and the output head (5120 -> 248320, GEMV); n_tokens 1 (GEMV) and 2, 7,
// 64, 512 (batched).
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
// With --perf, GEMV cases of the Bonsai shapes are timed with enough uploaded copies of the
// matrix that they exceed 150 MB (rotated by launch index, so weights come from DRAM as in
// decode); Result.bytes = the weights as stored on the GPU + x + y.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/matrix.h"
#include "cuda/op_check.h"
#include "quant/quant.h"

namespace gdn::cuda::opcheck {

void add_matmul_checks(Context& ctx, std::vector<Result>& out);

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
};

void run_case(Context& ctx, std::vector<Result>& out, const Case& c) {
  const std::string op = fmt::format("matmul_{}", quant::type_info(c.type).name);
  const int64_t ldx = c.n_in + c.ldx_pad, ldy = c.n_out + c.ldy_pad, T = c.n_tokens;
  const std::string shape =
      fmt::format("{}->{} t{} ldx+{} ldy+{}", c.n_in, c.n_out, T, c.ldx_pad, c.ldy_pad);
  cudaStream_t s = ctx.stream();

  const HostMatrix hm = random_matrix(ctx, c.type, c.n_in, c.n_out);
  std::vector<uint8_t> storage;
  std::vector<GpuMatrix> copies;
  copies.push_back(upload_matrix(expand(hm, op, storage), s));

  // x: T rows of n_in random values, padding columns NaN.
  const std::vector<float> x = ctx.random(static_cast<size_t>(T * c.n_in));
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
  if (c.type == Type::Q1_0) {
    out.push_back(compare(op + "_f32", shape, gpu, reference(hm, x, T, false), 2e-2));
  }

  if (ctx.perf() && c.timed) {
    const size_t bytes = copies[0].device_bytes();
    const int n_copies = static_cast<int>(std::ceil(kRotateBytes / double(bytes))) + 1;
    for (int i = 1; i < n_copies; ++i) copies.push_back(upload_matrix(expand(hm, op, storage), s));
    r.us = ctx.time_us([&](int i) {
      matmul(copies[static_cast<size_t>(i) % copies.size()], dx.as<float>(), ldx, dy.as<float>(),
             ldy, T, ws, s);
    });
    r.bytes = double(bytes) + 4.0 * double(c.n_in + c.n_out);
  }
  out.push_back(r);
}

}  // namespace

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
    }
    for (const Case& c : cases) run_case(ctx, out, c);
  }
}

}  // namespace gdn::cuda::opcheck
