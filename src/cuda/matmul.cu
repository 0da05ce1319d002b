// Matrix products: upload (validation, repack dispatch), the activation workspace, and the
// per-format dispatch of matmul(). The kernels live in matmul_<family>.cu:
//   matmul_q1_0.cu   Q1_0             b1 tensor-core mma on activation bit planes
//   matmul_q8.cu     Q8_0, Q4_0       chunked kernel (matmul.cuh), f32 activations
//   matmul_2bit.cu   Q2_0, PQ2_0      chunked kernel
//   matmul_float.cu  F32, F16, BF16   chunked kernel
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/parallel.h"
#include "cuda/matmul.cuh"
#include "quant/quant.h"

namespace gdn::cuda {
namespace mm {

int sm_count() {
  static std::mutex mu;
  static std::vector<int> counts;  // per device ordinal, 0 = not yet queried
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<int>(counts.size()) <= dev) counts.resize(dev + 1, 0);
  if (counts[dev] == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&counts[dev], cudaDevAttrMultiProcessorCount, dev));
  }
  return counts[dev];
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

// The Q1_0 configuration matmul() uses (bench/gemv_lab.cu compares the others).
mm::Q1Options default_q1_options(const GpuMatrix& w) {
  mm::Q1Options o;
  // Provisional until the lab's numbers pick (bench/gemv_lab.cu): two quads per warp; inputs
  // too long for 18 warps of two quads take four.
  o.variant = mm::ceil_div(w.n_in, 512) <= 36 ? mm::Q1Variant::kBmma2 : mm::Q1Variant::kBmma4;
  return o;
}

}  // namespace

GpuMatrix upload_matrix(const model::Matrix& m, cudaStream_t s) {
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
      return mm::upload_q1_0(m, s);
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
      mm::matmul_q1_0(w, x, ldx, y, ldy, n_tokens, ws, default_q1_options(w), s);
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

int matmul_launches(const GpuMatrix& w, int64_t /*n_tokens*/) {
  return w.type == quant::Type::Q1_0 ? 2 : 1;  // Q1_0: quantise + product
}

MatmulReference matmul_reference(quant::Type t) {
  // Q1_0: each block's dot is an exact integer on both sides; only the f32 products and sums
  // differ in order (~1e-7 relative). Others: f32 FMA chains of up to n_in / warps terms
  // against dot_row's lane sums, a few 1e-6 at n_in = 17408.
  if (t == quant::Type::Q1_0) return {true, 2e-5};
  return {false, 1e-4};
}

}  // namespace gdn::cuda
