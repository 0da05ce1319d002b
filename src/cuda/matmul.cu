// Matrix products: upload (validation, repack dispatch), the activation workspace, and the
// per-format dispatch of matmul(). The kernels live in matmul_<family>.cu:
//   matmul_q1_0.cu   Q1_0             b1 tensor-core mma on activation bit planes
//   matmul_q8.cu     Q8_0, Q4_0       chunked kernel (matmul.cuh), f32 activations
//   matmul_2bit.cu   Q2_0, PQ2_0      chunked kernel
//   matmul_float.cu  F32, F16, BF16   chunked kernel
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/parallel.h"
#include "cuda/matmul.cuh"
#include "quant/quant.h"

namespace gdn::cuda {
namespace mm {

size_t allow_max_smem(const void* kernel) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> done;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(kernel, dev);
  if (auto it = done.find(key); it != done.end()) return it->second;
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  const size_t dynamic = size_t(optin) > attr.sharedSizeBytes ? optin - attr.sharedSizeBytes : 0;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(dynamic)));
  done.emplace(key, dynamic);
  return dynamic;
}

int cluster_parts(int64_t units, int warps) {
  constexpr int kMaxParts = 8;  // the portable cluster size
  int parts = 1;
  while (parts < kMaxParts && warps % (2 * parts) == 0 && units * 2 * parts <= sm_count()) {
    parts *= 2;
  }
  return parts;
}

int occupancy(const void* kernel, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, size_t, int>, int> cache;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(kernel, threads, smem, dev);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  cache.emplace(key, per_sm);
  return per_sm;
}

PrologueArgs prologue_args(const FusedGemv& f) {
  PrologueArgs p;
  p.x = f.x;
  p.gate = f.gate;
  p.norm = f.norm;
  p.n_in = static_cast<int>(f.w[0]->n_in);
  p.eps = f.eps;
  p.kind = f.prologue;
  p.chunk = f.prologue == Prologue::RmsNorm           ? p.n_in
            : model::prologue_head_normed(f.prologue) ? static_cast<int>(f.head_dim)
                                                      : 0;
  const bool gated = model::prologue_gated(f.prologue);
  p.vec = p.n_in % 4 == 0 && p.chunk % 4 == 0 && aligned16(f.x) && (!gated || aligned16(f.gate)) &&
          (p.chunk == 0 || aligned16(f.norm));
  if (p.chunk > 0) {
    p.head = FastDiv(static_cast<uint32_t>(p.chunk));
    p.n_scales = p.n_in / p.chunk;
    p.n_sums = p.n_scales * norm::norm_warps(p.chunk);
  }
  return p;
}

EpilogueArgs epilogue_args(const FusedGemv& f) {
  EpilogueArgs e;
  e.kind = f.epilogue;
  e.silu_mat = f.silu_mat;
  for (int i = 0; i < f.n; ++i) e.y[i] = f.y[i];
  if (f.epilogue == Epilogue::ConvSilu) {
    e.conv_w = f.conv_w;
    e.conv_state = f.conv_state;
    e.conv_kernel = f.conv_kernel;
    e.channels = static_cast<int>(f.w[0]->n_out);
  }
  return e;
}

void check_matmul_args(const GpuMatrix& w, const float* x, int64_t ldx, const float* y, int64_t ldy,
                       int64_t n_tokens) {
  const auto name = quant::type_info(w.type).name;
  if (!w.codes.get()) fail("cuda matmul {} '{}': matrix not uploaded", name, w.name);
  if (n_tokens < 1 || n_tokens > 65535 * 8) {
    fail("cuda matmul {} '{}' [{}x{}]: n_tokens {} out of range", name, w.name, w.n_out, w.n_in,
         n_tokens);
  }
  if (x == nullptr || y == nullptr || ldx < w.n_in || ldy < w.n_out) {
    fail("cuda matmul {} '{}' [{}x{}]: x (ld {}) / y (ld {}) views too narrow or null", name,
         w.name, w.n_out, w.n_in, ldx, ldy);
  }
  if (n_tokens * std::max(ldx, ldy) > INT64_MAX / 8) {
    fail("cuda matmul {} '{}': views too large", name, w.name);
  }
}

GpuMatrix upload_chunked(const model::Matrix& m, const ChunkedFormat& f, cudaStream_t s) {
  const int64_t groups = ceil_div(m.n_out, 32);
  const int64_t chunks = ceil_div(m.n_in, f.elems_per_chunk);
  const int64_t blocks = f.chunks_per_block > 0 ? chunks / f.chunks_per_block : 0;
  std::vector<uint8_t> codes(static_cast<size_t>(groups * chunks * 32 * 16), 0);
  std::vector<uint16_t> scales(static_cast<size_t>(groups * blocks * 32), 0);
  ThreadPool pool;
  pool.parallel_for(groups, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      for (int lane = 0; lane < 32; ++lane) {
        const int64_t r = g * 32 + lane;
        if (r >= m.n_out) break;  // padding rows stay zero
        const uint8_t* row = m.data + static_cast<size_t>(r) * m.row_bytes;
        for (int64_t c = 0; c < chunks; ++c) {
          f.chunk(row, m.row_bytes, c,
                  &codes[static_cast<size_t>(((g * chunks + c) * 32 + lane) * 16)]);
        }
        for (int64_t b = 0; b < blocks; ++b) {
          scales[static_cast<size_t>((g * blocks + b) * 32 + lane)] = f.scale(row, b);
        }
      }
    }
  });
  GpuMatrix w;
  w.name = m.name;
  w.type = m.type;
  w.n_in = m.n_in;
  w.n_out = m.n_out;
  w.n_row_tiles = groups;
  w.n_col_tiles = chunks;
  w.codes = DeviceBuffer(codes.size());
  CUDA_CHECK(cudaMemcpyAsync(w.codes.get(), codes.data(), codes.size(), cudaMemcpyHostToDevice, s));
  if (blocks > 0) {
    w.scales = DeviceBuffer(scales.size() * sizeof(uint16_t));
    CUDA_CHECK(cudaMemcpyAsync(w.scales.get(), scales.data(), w.scales.bytes(),
                               cudaMemcpyHostToDevice, s));
  }
  CUDA_CHECK(cudaStreamSynchronize(s));  // the host staging vectors die here
  return w;
}

}  // namespace mm

namespace {

// "'name' q1_0 [n_out x n_in], ..." for the matrices of a fused launch.
std::string describe_fused(const FusedGemv& f) {
  std::string d;
  for (int i = 0; i < std::min(std::max(f.n, 0), kMaxFusedMatrices); ++i) {
    if (i > 0) d += ", ";
    const GpuMatrix* w = f.w[i];
    d += w ? fmt::format("'{}' {} [{} x {}]", w->name, quant::type_info(w->type).name, w->n_out,
                         w->n_in)
           : std::string("(null)");
  }
  return d;
}

bool overlaps(const float* a, int64_t na, const float* b, int64_t nb) {
  return a && b && a < b + nb && b < a + na;
}

// Why the launch f describes cannot run (its operands, not its kernel's limits); empty if it can.
std::string fused_problem(const FusedGemv& f) {
  // The name functions' switches cover every enumerator (-Wswitch): "?" is a value outside them.
  if (std::string_view(model::prologue_name(f.prologue)) == "?" ||
      std::string_view(model::epilogue_name(f.epilogue)) == "?") {
    return "unknown prologue or epilogue";
  }
  if (f.n < 1 || f.n > kMaxFusedMatrices) {
    return fmt::format("{} matrices (1 to {} share a launch)", f.n, kMaxFusedMatrices);
  }
  for (int i = 0; i < f.n; ++i) {
    if (f.w[i] == nullptr || !f.w[i]->codes.get()) return fmt::format("matrix {} not uploaded", i);
  }
  const GpuMatrix& w0 = *f.w[0];
  for (int i = 1; i < f.n; ++i) {
    if (fused_family(f.w[i]->type) != fused_family(w0.type)) {
      return "the matrices mix weight types (a fused launch serves one format)";
    }
    if (f.w[i]->n_in != w0.n_in) return "the matrices' n_in differ";
    if (f.w[i]->f32_activations != w0.f32_activations) {
      return "the matrices mix Q1_0 layouts (int8 and f32 activations)";
    }
  }
  switch (f.epilogue) {
    case Epilogue::Store:
    case Epilogue::ConvSilu:
      for (int i = 0; i < f.n; ++i) {
        if (f.y[i] == nullptr) return fmt::format("no output for matrix {}", i);
      }
      break;
    case Epilogue::AddInto:
      if (f.n != 1) return "add_into takes exactly one matrix";
      if (f.y[0] == nullptr) return "no residual / output y[0]";
      break;
    case Epilogue::SiluMulPair:
      if (f.n != 2) return "silu_mul_pair takes exactly two matrices (gate, up)";
      if (f.w[1]->n_out != w0.n_out) return "gate and up have different n_out";
      if (f.y[0] == nullptr) return "no output y[0]";
      break;
  }
  if (f.silu_mat != -1 &&
      (!model::epilogue_per_matrix(f.epilogue) || f.silu_mat < 0 || f.silu_mat >= f.n ||
       (f.epilogue == Epilogue::ConvSilu && f.silu_mat == 0))) {
    return fmt::format("silu_mat {}: a stored matrix of this launch (not the conv's)", f.silu_mat);
  }
  if (f.x == nullptr) return "no input x";
  const bool gated = model::prologue_gated(f.prologue);
  const bool normed = model::prologue_normed(f.prologue);
  if (gated && f.gate == nullptr) return "no gate vector";
  if (normed && f.norm == nullptr) return "no norm weight vector";
  if (normed && !(f.eps >= 0.0f)) return fmt::format("eps {} must be >= 0", f.eps);
  if (model::prologue_head_normed(f.prologue) && (f.head_dim <= 0 || w0.n_in % f.head_dim != 0)) {
    return fmt::format("head_dim {} must be positive and divide n_in", f.head_dim);
  }
  const int64_t conv_floats = (int64_t(f.conv_kernel) - 1) * w0.n_out;
  if (f.epilogue == Epilogue::ConvSilu) {
    if (f.conv_kernel < 1 || f.conv_kernel > model::kMaxFusedConvKernel) {
      return fmt::format("conv kernel size {} (the fused conv holds 1 to {} taps)", f.conv_kernel,
                         model::kMaxFusedConvKernel);
    }
    if (f.conv_w == nullptr || (f.conv_kernel > 1 && f.conv_state == nullptr)) {
      return "no conv weights or conv state";
    }
    if (overlaps(f.conv_state, conv_floats, f.x, w0.n_in))
      return "the conv state overlaps the input";
  }
  if (f.fold_n < 0 || f.fold_n > 2) return fmt::format("{} folded matrices (0 to 2)", f.fold_n);
  for (int i = 0; i < f.fold_n; ++i) {
    if (f.fold_w[i] == nullptr || f.fold_y[i] == nullptr) {
      return fmt::format("folded matrix {} or its output missing", i);
    }
  }
  // Every CTA reads the whole input while others write outputs (the folded rows' among them):
  // they must not overlap.
  struct Output {
    const float* y;
    int64_t n;
    std::string name;
  };
  std::vector<Output> outputs;
  const int n_outputs = model::epilogue_per_matrix(f.epilogue) ? f.n : 1;
  for (int i = 0; i < n_outputs; ++i) {
    outputs.push_back({f.y[i], f.w[i]->n_out, fmt::format("output {}", i)});
  }
  for (int i = 0; i < f.fold_n; ++i) {
    outputs.push_back({f.fold_y[i], f.fold_w[i]->n_out, fmt::format("folded output {}", i)});
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Output& o = outputs[i];
    if (overlaps(o.y, o.n, f.x, w0.n_in) || (gated && overlaps(o.y, o.n, f.gate, w0.n_in))) {
      return o.name + " overlaps the input";
    }
    for (size_t j = 0; j < i; ++j) {
      if (overlaps(o.y, o.n, outputs[j].y, outputs[j].n)) {
        return fmt::format("{} overlaps {}", o.name, outputs[j].name);
      }
    }
    if (f.epilogue == Epilogue::ConvSilu && overlaps(o.y, o.n, f.conv_state, conv_floats)) {
      return o.name + " overlaps the conv state";
    }
  }
  return "";
}

void check_fused(const FusedGemv& f) {
  const std::string why = fused_problem(f);
  if (!why.empty()) {
    fail("cuda matmul_fused ({} -> {}) of {}: {}", model::prologue_name(f.prologue),
         model::epilogue_name(f.epilogue), describe_fused(f), why);
  }
}

}  // namespace

GpuMatrix upload_matrix(const model::Matrix& m, cudaStream_t s, bool q1_f32_activations) {
  const quant::TypeInfo* info = quant::find_type(static_cast<uint32_t>(m.type));
  if (!info)
    fail("cuda upload '{}': unsupported type id {}", m.name, static_cast<uint32_t>(m.type));
  if (m.n_in <= 0 || m.n_out <= 0 || m.n_in % info->block_elems != 0) {
    fail("cuda upload '{}' {} [{} x {}]: n_in must be a positive multiple of the block size {}",
         m.name, info->name, m.n_out, m.n_in, info->block_elems);
  }
  if (m.n_in > (int64_t(1) << 30) || m.n_out > (int64_t(1) << 30)) {
    fail("cuda upload '{}' {} [{} x {}]: too large for 32-bit row/column indices", m.name,
         info->name, m.n_out, m.n_in);
  }
  if (m.data == nullptr || m.row_bytes != quant::row_bytes(m.type, m.n_in)) {
    fail("cuda upload '{}' {} [{} x {}]: row_bytes {} (expected {}) or no data", m.name, info->name,
         m.n_out, m.n_in, m.row_bytes, quant::row_bytes(m.type, m.n_in));
  }
  switch (m.type) {
    case quant::Type::Q1_0:
      if (mm::ceil_div(m.n_in, 512) > 48) {
        fail("cuda upload '{}' q1_0 [{} x {}]: n_in above 24576 is not supported by the GEMV",
             m.name, m.n_out, m.n_in);
      }
      return q1_f32_activations ? mm::upload_q1_0_f32act(m, s) : mm::upload_q1_0(m, s);
    case quant::Type::Q8_0:
    case quant::Type::Q4_0:
      return mm::upload_q8(m, s);
    case quant::Type::Q2_0:
    case quant::Type::PQ2_0:
      return mm::upload_2bit(m, s);
    case quant::Type::F32:
    case quant::Type::F16:
    case quant::Type::BF16:
      return mm::upload_float(m, s);
  }
  fail("cuda upload '{}': unsupported type {}", m.name, info->name);
}

void MatmulWorkspace::reserve(int64_t max_n_in, int64_t max_tokens) {
  const int64_t n_in = mm::ceil_div(max_n_in, 128) * 128;
  const size_t bytes = mm::q1_0_workspace_bytes(n_in, max_tokens);
  if (buf_.bytes() < bytes) buf_ = DeviceBuffer(bytes);
}

void* MatmulWorkspace::get(size_t bytes, cudaStream_t s) {
  if (buf_.bytes() >= bytes) return buf_.get();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(s, &status));
  if (status != cudaStreamCaptureStatusNone) {
    fail("cuda matmul: workspace of {} bytes needs {} during graph capture; reserve() first",
         buf_.bytes(), bytes);
  }
  CUDA_CHECK(cudaStreamSynchronize(s));  // earlier matmuls on s may still read the old scratch
  buf_ = DeviceBuffer(std::max(bytes, buf_.bytes() + buf_.bytes() / 2));
  return buf_.get();
}

void matmul(const GpuMatrix& w, const float* x, int64_t ldx, float* y, int64_t ldy,
            int64_t n_tokens, MatmulWorkspace& ws, cudaStream_t s) {
  switch (w.type) {
    case quant::Type::Q1_0:
      if (w.f32_activations) {
        mm::matmul_q1_0_f32act(w, x, ldx, y, ldy, n_tokens, s);
      } else {
        mm::matmul_q1_0(w, x, ldx, y, ldy, n_tokens, ws,
                        mm::q1_default_options(w.n_in, w.n_out, n_tokens), s);
      }
      return;
    case quant::Type::Q8_0:
    case quant::Type::Q4_0:
      mm::matmul_q8(w, x, ldx, y, ldy, n_tokens, s);
      return;
    case quant::Type::Q2_0:
    case quant::Type::PQ2_0:
      mm::matmul_2bit(w, x, ldx, y, ldy, n_tokens, s);
      return;
    case quant::Type::F32:
    case quant::Type::F16:
    case quant::Type::BF16:
      mm::matmul_float(w, x, ldx, y, ldy, n_tokens, s);
      return;
  }
  fail("cuda matmul '{}': unsupported type id {}", w.name, static_cast<uint32_t>(w.type));
}

int matmul_launches(const GpuMatrix& w, int64_t n_tokens) {
  // Q1_0: quantise + product, or for one token the one-launch GEMV where it is the default.
  if (w.type != quant::Type::Q1_0 || w.f32_activations) return 1;
  return n_tokens == 1 && mm::q1_default_options(w.n_in, w.n_out).one_launch ? 1 : 2;
}

// The fused kernels are templated on the weight format: one launch serves one type.
int fused_family(quant::Type t) {
  return static_cast<int>(t);
}

int q1_codes_out_blocks(const FusedGemv& f) {
  check_fused(f);
  if (f.w[0]->type != quant::Type::Q1_0 || f.w[0]->f32_activations) return 0;
  return mm::codes_out_blocks_q1_0(f, mm::q1_default_options(f.w[0]->n_in, 0));
}

FusedGemv with_fold(FusedGemv f, const FusedGemv& side) {
  f.fold_n = side.n;
  for (int i = 0; i < std::min(side.n, 2); ++i) {
    f.fold_w[i] = side.w[i];
    f.fold_y[i] = side.y[i];
  }
  return f;
}

std::string q1_fold_refusal(const FusedGemv& f, const FusedGemv& side) {
  check_fused(f);
  check_fused(side);
  if (f.w[0]->type != quant::Type::Q1_0 || f.w[0]->f32_activations) {
    return "the launch is not an int8 Q1_0 GEMV";
  }
  if (f.fold_n != 0) return "the launch already folds rows in";
  if (side.epilogue != Epilogue::Store || side.silu_mat >= 0)
    return "the rows are not stored plain";
  if (side.prologue != f.prologue || side.x != f.x || side.gate != f.gate || side.norm != f.norm ||
      side.eps != f.eps || side.head_dim != f.head_dim) {
    return "the rows have another input or prologue";
  }
  const FusedGemv folded = with_fold(f, side);
  const std::string why = fused_problem(folded);  // the rows' outputs against the launch's
  return why.empty() ? mm::fold_refusal_q1_0(folded, mm::q1_default_options(f.w[0]->n_in, 0)) : why;
}

unsigned matmul_fused(const FusedGemv& f, cudaStream_t s) {
  check_fused(f);
  if (f.fold_n != 0 && (f.w[0]->type != quant::Type::Q1_0 || f.w[0]->f32_activations)) {
    fail("cuda matmul_fused of {}: only an int8 Q1_0 GEMV folds rows in", describe_fused(f));
  }
  switch (f.w[0]->type) {
    case quant::Type::Q1_0:
      return f.w[0]->f32_activations
                 ? mm::matmul_fused_q1_0_f32act(f, s)
                 : mm::matmul_fused_q1_0(f, mm::q1_default_options(f.w[0]->n_in, 0), s);
    case quant::Type::Q8_0:
    case quant::Type::Q4_0:
      return mm::matmul_fused_q8(f, s);
    case quant::Type::Q2_0:
    case quant::Type::PQ2_0:
      return mm::matmul_fused_2bit(f, s);
    case quant::Type::F32:
    case quant::Type::F16:
    case quant::Type::BF16:
      return mm::matmul_fused_float(f, s);
  }
  fail("cuda matmul_fused {}: unsupported type", describe_fused(f));
}

MatmulReference matmul_reference(quant::Type t) {
  // Q1_0: each block's dot is an exact integer on both sides; only the f32 products and sums
  // differ in order (~1e-7 relative). Others: f32 FMA chains of up to n_in / warps terms
  // against dot_row's lane sums, a few 1e-6 at n_in = 17408.
  if (t == quant::Type::Q1_0) return {true, 2e-5};
  return {false, 1e-4};
}

}  // namespace gdn::cuda
