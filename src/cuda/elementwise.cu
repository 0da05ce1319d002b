// Element-wise ops, gathers and copies: embed, unary/binary/broadcast, split_heads, copy_rows,
// kv_store, concat_rows, copy_state, empty_kernel.
//
// Design: each is a thread per element (or per float4) over a rows × cols view; grid.x spans
// the columns, grid.y the rows (looping when rows exceed the grid limit). There is no
// cross-thread communication, hence no barriers. An element is read and then written by the
// same thread, so an output may alias its input exactly (the decode program applies silu,
// sigmoid, softplus and the gating multiplies in place).
//
// Loads: 16-byte (float4) when every view involved allows it — base 16-byte aligned, row
// stride a multiple of 4 floats, whole float4s per row — and 4-byte otherwise. Views are
// column ranges of wider buffers (q | k | v inside the conv output), so neither can be
// assumed; both paths are coalesced across the warp. The choice is made per launch on the
// host from the actual pointers. Measured (H200, 2026-11-30, gdn ops --perf): every decode
// shape runs in 1.4–1.7 µs, the same as a plain read kernel of its size (launch-bound); the
// 3 MB copy_state 3.7 µs (88% of the read ceiling) with 4 vectors per thread in flight.
//
// Arithmetic is the CPU reference's, in the same order and in f32: the only differences come
// from expf/log1pf (a few ulp from glibc's). Copies and the embedding gather are exact.
//
// copy_state between storage types widens and rounds with cuda/state.cuh, the functions
// gdn_recurrence loads and stores its state with, so gather → f32 recurrence → scatter equals
// the fused recurrence bit for bit. A copy within one type copies the stored values (no
// round trip through f32, so even NaN payloads survive); f32 → f32 is the plain row copy.
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/kernel_util.cuh"
#include "cuda/state.cuh"
#include "quant/types.h"

namespace gdn::cuda {
namespace {

using detail::row_ptr;

constexpr int kThreads = 256;

template <int N>
struct Vec {
  float v[N];
};

template <int N>
__device__ __forceinline__ Vec<N> load_vec(const float* p, int64_t i) {
  Vec<N> r;
  if constexpr (N == 4) {
    const float4 t = reinterpret_cast<const float4*>(p)[i];
    r.v[0] = t.x, r.v[1] = t.y, r.v[2] = t.z, r.v[3] = t.w;
  } else {
    static_assert(N == 1, "float or float4");
    r.v[0] = p[i];
  }
  return r;
}

template <int N>
__device__ __forceinline__ void store_vec(float* p, int64_t i, const Vec<N>& r) {
  if constexpr (N == 4) {
    reinterpret_cast<float4*>(p)[i] = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  } else {
    p[i] = r.v[0];
  }
}

// Launch shape for a rows × n_items grid of kThreads-wide blocks.
dim3 grid_for(int64_t rows, int64_t n_items) {
  return dim3(detail::ceil_div(n_items, kThreads),
              static_cast<unsigned>(std::min(rows, detail::kMaxGridY)));
}

// ---------------------------------------------------------------------------------------------
// unary / binary / broadcast: one kernel, functors saying which operands they read
// (x always; g the gate, y the old output, v the per-column vector).

struct SigmoidOp {
  static constexpr bool kG = false, kY = false, kV = false;
  __device__ float operator()(float x, float, float, float) const { return detail::sigmoid(x); }
};
struct SoftplusOp {
  static constexpr bool kG = false, kY = false, kV = false;
  __device__ float operator()(float x, float, float, float) const { return detail::softplus(x); }
};
struct SiluOp {
  static constexpr bool kG = false, kY = false, kV = false;
  __device__ float operator()(float x, float, float, float) const { return detail::silu(x); }
};
struct AddOp {  // y += x
  static constexpr bool kG = false, kY = true, kV = false;
  __device__ float operator()(float x, float, float y, float) const { return y + x; }
};
struct SiluMulOp {
  static constexpr bool kG = true, kY = false, kV = false;
  __device__ float operator()(float x, float g, float, float) const { return x * detail::silu(g); }
};
struct SigmoidMulOp {
  static constexpr bool kG = true, kY = false, kV = false;
  __device__ float operator()(float x, float g, float, float) const {
    return x * detail::sigmoid(g);
  }
};
struct MulOp {
  static constexpr bool kG = true, kY = false, kV = false;
  __device__ float operator()(float x, float g, float, float) const { return x * g; }
};
struct AddVecOp {
  static constexpr bool kG = false, kY = false, kV = true;
  __device__ float operator()(float x, float, float, float v) const { return x + v; }
};
struct MulVecOp {
  static constexpr bool kG = false, kY = false, kV = true;
  __device__ float operator()(float x, float, float, float v) const { return x * v; }
};

template <class F, int N>
__global__ void __launch_bounds__(kThreads)
    map_kernel(DevRows x, DevRows g, DevRows y, const float* v, F f) {
  detail::pdl_enter();
  const int64_t n = y.cols / N;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < y.rows; r += gridDim.y) {
    const float* xr = row_ptr(x, r);
    float* yr = row_ptr(y, r);
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
      const Vec<N> a = load_vec<N>(xr, i);
      Vec<N> b{}, old{}, vv{}, out;
      if constexpr (F::kG) b = load_vec<N>(row_ptr(g, r), i);
      if constexpr (F::kY) old = load_vec<N>(yr, i);
      if constexpr (F::kV) vv = load_vec<N>(v, i);
#pragma unroll
      for (int e = 0; e < N; ++e) out.v[e] = f(a.v[e], b.v[e], old.v[e], vv.v[e]);
      store_vec<N>(yr, i, out);
    }
  }
}

template <class F>
void launch_map(const char* op, F f, DevRows x, DevRows g, DevRows y, const float* v,
                cudaStream_t s) {
  detail::check_view(op, "x", x);
  detail::check_view(op, "y", y);
  detail::check_same_shape(op, x, "x", y, "y");
  if constexpr (F::kG) {
    detail::check_view(op, "gate", g);
    detail::check_same_shape(op, x, "x", g, "gate");
  }
  if (F::kV && v == nullptr) fail("cuda {}: no vector operand", op);
  const bool vec4 = detail::vec4_ok(x) && detail::vec4_ok(y) && (!F::kG || detail::vec4_ok(g)) &&
                    (!F::kV || detail::aligned16(v));
  if (vec4) {
    detail::launch(&map_kernel<F, 4>, grid_for(y.rows, y.cols / 4), kThreads, 0, true, s, x, g, y,
                   v, f);
  } else {
    detail::launch(&map_kernel<F, 1>, grid_for(y.rows, y.cols), kThreads, 0, true, s, x, g, y, v,
                   f);
  }
  CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Copies: up to two (src, dst) row copies in one launch (grid.z picks the job), so kv_store
// writes K and V as a single dispatch.

struct CopyJob {
  const float* src;
  float* dst;
  int64_t rows, cols, src_ld, dst_ld;
  const int32_t* dst_row0 = nullptr;  // if set, dst moves down by *dst_row0 rows at run time
};

constexpr int kCopyUnroll = 4;  // vectors per thread, all loaded before the first store

template <int N>
__global__ void __launch_bounds__(kThreads) copy_kernel(CopyJob job0, CopyJob job1) {
  detail::pdl_enter();
  const CopyJob& job = blockIdx.z == 0 ? job0 : job1;
  const int64_t n = job.cols / N;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < job.rows; r += gridDim.y) {
    const float* src = job.src + r * job.src_ld;
    float* dst = job.dst + (r + (job.dst_row0 ? *job.dst_row0 : 0)) * job.dst_ld;
    for (int64_t i0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i0 < n;
         i0 += kCopyUnroll * stride) {
      Vec<N> t[kCopyUnroll];
#pragma unroll
      for (int u = 0; u < kCopyUnroll; ++u) {
        if (i0 + u * stride < n) t[u] = load_vec<N>(src, i0 + u * stride);
      }
#pragma unroll
      for (int u = 0; u < kCopyUnroll; ++u) {
        if (i0 + u * stride < n) store_vec<N>(dst, i0 + u * stride, t[u]);
      }
    }
  }
}

bool vec4_job(const CopyJob& j) {
  return detail::aligned16(j.src) && detail::aligned16(j.dst) && j.cols % 4 == 0 &&
         j.src_ld % 4 == 0 && j.dst_ld % 4 == 0;
}

// One or two jobs (kv_store's K and V, concat_rows' two halves): the grid covers the larger
// of each extent; a block past a job's rows or columns does nothing for it.
void launch_copy(const CopyJob& a, const CopyJob* b, cudaStream_t s) {
  const bool vec4 = vec4_job(a) && (!b || vec4_job(*b));
  const int n_vec = vec4 ? 4 : 1;
  const int64_t rows = b ? std::max(a.rows, b->rows) : a.rows;
  const int64_t cols = b ? std::max(a.cols, b->cols) : a.cols;
  dim3 grid = grid_for(rows, (cols / n_vec + kCopyUnroll - 1) / kCopyUnroll);
  grid.z = b ? 2 : 1;
  if (vec4) {
    detail::launch(&copy_kernel<4>, grid, kThreads, 0, true, s, a, b ? *b : a);
  } else {
    detail::launch(&copy_kernel<1>, grid, kThreads, 0, true, s, a, b ? *b : a);
  }
  CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// copy_state across storage types: kStateUnroll packs of N values per thread, all loaded
// before the first store (as copy_kernel). A pack is N consecutive values, one aligned
// vector load (N = 4: 16 bytes of f32, 8 of f16/bf16) when the launcher found both ends
// aligned and n a multiple of N.

constexpr int kStateUnroll = 4;

template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <class Src, class Dst, int N>
__global__ void __launch_bounds__(kThreads)
    state_copy_kernel(const void* __restrict__ src, void* __restrict__ dst, int64_t n_packs) {
  detail::pdl_enter();
  using SP = Pack<typename Src::T, N>;
  using DP = Pack<typename Dst::T, N>;
  const SP* in = static_cast<const SP*>(src);
  DP* out = static_cast<DP*>(dst);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i0 < n_packs;
       i0 += kStateUnroll * stride) {
    SP t[kStateUnroll];
#pragma unroll
    for (int u = 0; u < kStateUnroll; ++u) {
      if (i0 + u * stride < n_packs) t[u] = in[i0 + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kStateUnroll; ++u) {
      if (i0 + u * stride >= n_packs) continue;
      DP o;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        if constexpr (Src::kType == Dst::kType) {
          o.v[e] = t[u].v[e];  // same type: the stored value, bit for bit
        } else {
          o.v[e] = Dst::store(Src::load(t[u].v[e]));
        }
      }
      out[i0 + u * stride] = o;
    }
  }
}

template <class Src, class Dst>
void launch_state_copy(const void* src, void* dst, int64_t n, cudaStream_t s) {
  constexpr size_t kSrc = sizeof(typename Src::T), kDst = sizeof(typename Dst::T);
  const bool vec4 = n % 4 == 0 && reinterpret_cast<uintptr_t>(src) % (4 * kSrc) == 0 &&
                    reinterpret_cast<uintptr_t>(dst) % (4 * kDst) == 0;
  const int64_t n_packs = vec4 ? n / 4 : n;
  const int64_t threads = (n_packs + kStateUnroll - 1) / kStateUnroll;
  const unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>(detail::ceil_div(threads, kThreads), int64_t(1) << 30));
  if (vec4) {
    detail::launch(&state_copy_kernel<Src, Dst, 4>, blocks, kThreads, 0, true, s, src, dst,
                   n_packs);
  } else {
    detail::launch(&state_copy_kernel<Src, Dst, 1>, blocks, kThreads, 0, true, s, src, dst,
                   n_packs);
  }
}

__global__ void empty() {}

// ---------------------------------------------------------------------------------------------
// split_heads: x row = per head [a (hd) | b (hd)] → ya, yb rows of H·hd. With hd a multiple
// of 4 (and aligned views) a float4 never straddles a head boundary.

template <int N>
__global__ void __launch_bounds__(kThreads)
    split_heads_kernel(DevRows x, DevRows ya, DevRows yb, int head_dim) {
  detail::pdl_enter();
  const int64_t n = ya.cols / N;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < ya.rows; r += gridDim.y) {
    const float* xr = row_ptr(x, r);
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
      const int64_t c = i * N, h = c / head_dim;
      const float* src = xr + c + h * head_dim;  // = xr + 2·h·hd + (c - h·hd)
      store_vec<N>(row_ptr(ya, r), i, load_vec<N>(src, 0));
      store_vec<N>(row_ptr(yb, r), i, load_vec<N>(src + head_dim, 0));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// embed: element j of the row `id` in its stored format, the value quant::dequantize_row
// gives: float(code)·d for block formats (d the block's fp16 scale), the stored value for
// plain ones. Every block starts at an even byte offset (blocks are 18 or 34 bytes), so the
// fp16 scale is a 2-byte-aligned load.

__device__ float dequant(quant::Type type, const uint8_t* row, int64_t j, int block_elems,
                         int block_bytes) {
  const int64_t blk = j / block_elems;
  const int e = static_cast<int>(j - blk * block_elems);
  const uint8_t* b = row + blk * block_bytes;
  int code = 0;
  switch (type) {
    case quant::Type::F32:
      return reinterpret_cast<const float*>(row)[j];
    case quant::Type::F16:
      return __half2float(reinterpret_cast<const __half*>(row)[j]);
    case quant::Type::BF16:
      return __uint_as_float(uint32_t(reinterpret_cast<const uint16_t*>(row)[j]) << 16);
    case quant::Type::Q8_0:
      code = static_cast<int8_t>(b[2 + e]);
      break;
    case quant::Type::Q4_0:  // byte e holds element e (low nibble) and e + 16 (high)
      code = (e < 16 ? b[2 + e] & 0x0f : b[2 + e - 16] >> 4) - 8;
      break;
    case quant::Type::Q1_0:
      code = 2 * ((b[2 + e / 8] >> (e % 8)) & 1) - 1;
      break;
    case quant::Type::Q2_0:
    case quant::Type::PQ2_0:
      code = ((b[2 + e / 4] >> (2 * (e % 4))) & 3) - 1;
      break;
  }
  return static_cast<float>(code) * __half2float(*reinterpret_cast<const __half*>(b));
}

__global__ void __launch_bounds__(kThreads)
    embed_kernel(DevTable table, const int32_t* __restrict__ ids, DevRows y, int block_elems,
                 int block_bytes) {
  detail::pdl_enter();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < y.rows; r += gridDim.y) {
    const int32_t id = ids[r];
    const bool ok = id >= 0 && id < table.n_out;
    const uint8_t* row = static_cast<const uint8_t*>(table.data) + (ok ? id : 0) * table.row_bytes;
    float* yr = row_ptr(y, r);
    for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < y.cols; j += stride) {
      yr[j] =
          ok ? dequant(table.type, row, j, block_elems, block_bytes) : __int_as_float(0x7fffffff);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

void unary(cpu::Unary f, DevRows x, DevRows y, cudaStream_t s) {
  switch (static_cast<int>(f)) {
    case op_value::kSigmoid:
      return launch_map("sigmoid", SigmoidOp{}, x, x, y, nullptr, s);
    case op_value::kSoftplus:
      return launch_map("softplus", SoftplusOp{}, x, x, y, nullptr, s);
    case op_value::kSilu:
      return launch_map("silu", SiluOp{}, x, x, y, nullptr, s);
  }
  fail("cuda unary: unknown op value {}", static_cast<int>(f));
}

void binary(cpu::Binary f, DevRows x, DevRows g, DevRows y, cudaStream_t s) {
  switch (static_cast<int>(f)) {
    case op_value::kAdd:
      return launch_map("add", AddOp{}, x, g, y, nullptr, s);
    case op_value::kSiluMul:
      return launch_map("silu_mul", SiluMulOp{}, x, g, y, nullptr, s);
    case op_value::kSigmoidMul:
      return launch_map("sigmoid_mul", SigmoidMulOp{}, x, g, y, nullptr, s);
    case op_value::kMul:
      return launch_map("mul", MulOp{}, x, g, y, nullptr, s);
  }
  fail("cuda binary: unknown op value {}", static_cast<int>(f));
}

void broadcast(cpu::Broadcast f, DevRows x, const float* v, DevRows y, cudaStream_t s) {
  switch (static_cast<int>(f)) {
    case op_value::kBroadcastAdd:
      return launch_map("add_vec", AddVecOp{}, x, x, y, v, s);
    case op_value::kBroadcastMul:
      return launch_map("mul_vec", MulVecOp{}, x, x, y, v, s);
  }
  fail("cuda broadcast: unknown op value {}", static_cast<int>(f));
}

void split_heads(DevRows x, DevRows ya, DevRows yb, int64_t head_dim, cudaStream_t s) {
  const char* op = "split_heads";
  detail::check_view(op, "x", x);
  detail::check_view(op, "ya", ya);
  detail::check_view(op, "yb", yb);
  detail::check_same_shape(op, ya, "ya", yb, "yb");
  if (head_dim <= 0 || ya.cols % head_dim != 0 || x.cols != 2 * ya.cols || x.rows != ya.rows) {
    fail(
        "cuda split_heads: x [{}x{}] into ya, yb [{}x{}] with head_dim {}: need x cols = 2·y "
        "cols, a multiple of head_dim, and equal rows",
        x.rows, x.cols, ya.rows, ya.cols, head_dim);
  }
  const bool vec4 =
      head_dim % 4 == 0 && detail::vec4_ok(x) && detail::vec4_ok(ya) && detail::vec4_ok(yb);
  const int hd = static_cast<int>(head_dim);
  if (vec4) {
    detail::launch(&split_heads_kernel<4>, grid_for(ya.rows, ya.cols / 4), kThreads, 0, true, s, x,
                   ya, yb, hd);
  } else {
    detail::launch(&split_heads_kernel<1>, grid_for(ya.rows, ya.cols), kThreads, 0, true, s, x, ya,
                   yb, hd);
  }
  CUDA_CHECK_LAUNCH();
}

void copy_rows(DevRows x, int64_t row0, DevRows y, cudaStream_t s) {
  detail::check_view("copy_rows", "x", x);
  detail::check_view("copy_rows", "y", y);
  if (x.cols != y.cols || row0 < 0 || row0 + y.rows > x.rows) {
    fail("cuda copy_rows: rows [{}, {}) of x [{}x{}] into y [{}x{}]", row0, row0 + y.rows, x.rows,
         x.cols, y.rows, y.cols);
  }
  launch_copy({x.data + row0 * x.ld, y.data, y.rows, y.cols, x.ld, y.ld}, nullptr, s);
}

void copy_state(DevState src, DevState dst, int64_t n, cudaStream_t s) {
  const size_t src_bytes = model::state_type_bytes(src.type),
               dst_bytes = model::state_type_bytes(dst.type);
  if (src.data == nullptr || dst.data == nullptr || n <= 0 || src_bytes == 0 || dst_bytes == 0) {
    fail("cuda copy_state: {} values from {} ({}) to {} ({})", n, src.data,
         model::state_type_name(src.type), dst.data, model::state_type_name(dst.type));
  }
  const char* s_lo = static_cast<const char*>(src.data);
  const char* d_lo = static_cast<const char*>(dst.data);
  if (s_lo < d_lo + size_t(n) * dst_bytes && d_lo < s_lo + size_t(n) * src_bytes) {
    fail("cuda copy_state: {} values from {} ({}) to {} ({}) overlap", n, src.data,
         model::state_type_name(src.type), dst.data, model::state_type_name(dst.type));
  }
  if (src.type == model::StateType::F32 && dst.type == model::StateType::F32) {
    const auto* from = static_cast<const float*>(src.data);
    launch_copy({from, static_cast<float*>(dst.data), 1, n, n, n}, nullptr, s);
    return;
  }
  state::dispatch(src.type, [&](auto from) {
    state::dispatch(dst.type, [&](auto to) {
      launch_state_copy<decltype(from), decltype(to)>(src.data, dst.data, n, s);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void concat_rows(DevRows a, DevRows b, DevRows y, cudaStream_t s) {
  detail::check_view("concat_rows", "a", a);
  detail::check_view("concat_rows", "b", b);
  detail::check_view("concat_rows", "y", y);
  if (a.cols != y.cols || b.cols != y.cols || y.rows != a.rows + b.rows) {
    fail(
        "cuda concat_rows: a [{}x{}] and b [{}x{}] into y [{}x{}]: need equal cols and y rows "
        "= a rows + b rows",
        a.rows, a.cols, b.rows, b.cols, y.rows, y.cols);
  }
  // y may not overlap a or b: the two jobs run concurrently.
  const auto end = [](const DevRows& v) { return v.data + (v.rows - 1) * v.ld + v.cols; };
  const auto overlap = [&](const DevRows& u, const DevRows& v) {
    return u.data < end(v) && v.data < end(u);
  };
  if (overlap(a, y) || overlap(b, y)) fail("cuda concat_rows: y overlaps an input");
  const CopyJob ja{a.data, y.data, a.rows, a.cols, a.ld, y.ld};
  const CopyJob jb{b.data, y.data + a.rows * y.ld, b.rows, b.cols, b.ld, y.ld};
  launch_copy(ja, &jb, s);
}

void empty_kernel(cudaStream_t s) {
  empty<<<1, 1, 0, s>>>();
  CUDA_CHECK_LAUNCH();
}

void kv_store(DevRows k, DevRows v, float* k_cache, float* v_cache, int64_t kv_dim, Pos pos,
              cudaStream_t s) {
  detail::check_view("kv_store", "k", k);
  detail::check_view("kv_store", "v", v);
  detail::check_same_shape("kv_store", k, "k", v, "v");
  if (k.cols != kv_dim || pos.host < 0 || k_cache == nullptr || v_cache == nullptr) {
    fail("cuda kv_store: k, v [{}x{}] into caches of rows of {} at position {}", k.rows, k.cols,
         kv_dim, pos.host);
  }
  const int64_t row0 = pos.device ? 0 : pos.host;
  const CopyJob jk{k.data, k_cache + row0 * kv_dim, k.rows, k.cols, k.ld, kv_dim, pos.device};
  const CopyJob jv{v.data, v_cache + row0 * kv_dim, v.rows, v.cols, v.ld, kv_dim, pos.device};
  launch_copy(jk, &jv, s);
}

void embed(DevTable table, const int32_t* ids, DevRows y, cudaStream_t s) {
  detail::check_view("embed", "y", y);
  const quant::TypeInfo& info = quant::type_info(table.type);  // throws for unknown types
  if (table.data == nullptr || ids == nullptr || table.n_out <= 0 || table.n_in != y.cols ||
      table.row_bytes != quant::row_bytes(table.type, table.n_in) ||
      reinterpret_cast<uintptr_t>(table.data) % 4 != 0) {
    fail("cuda embed: {} table {} x {} ({} bytes a row, 4-byte aligned) into y [{}x{}]", info.name,
         table.n_out, table.n_in, table.row_bytes, y.rows, y.cols);
  }
  detail::launch(&embed_kernel, grid_for(y.rows, y.cols), kThreads, 0, true, s, table, ids, y,
                 static_cast<int>(info.block_elems), static_cast<int>(info.block_bytes));
  CUDA_CHECK_LAUNCH();
}

}  // namespace gdn::cuda
