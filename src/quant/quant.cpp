#include "quant/quant.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "common/error.h"

namespace gdn::quant {

// ---------------------------------------------------------------------------------------------
// Scalar conversions

namespace {

// v >> s rounded to nearest, ties to even (1 <= s < 32).
uint32_t shift_round_even(uint32_t v, int s) {
  const uint32_t q = v >> s;
  const uint32_t rem = v & ((1u << s) - 1);
  const uint32_t half = 1u << (s - 1);
  return q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0);
}

}  // namespace

float fp16_to_f32(uint16_t h) {
  // Written with selects instead of branches so that converting loops vectorise.
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t mag = h & 0x7fff;
  // Subnormal (or zero): mag · 2^-24 is exact, and normal in f32.
  const float sub = static_cast<float>(mag) * 0x1p-24f;
  // Normal: rebias the exponent by 127 - 15; inf/NaN: by 255 - 31, keeping the payload.
  const uint32_t rebias = mag >= 0x7c00 ? (255u - 31) << 23 : (127u - 15) << 23;
  const uint32_t bits = mag < 0x0400 ? std::bit_cast<uint32_t>(sub) : (mag << 13) + rebias;
  return std::bit_cast<float>(sign | bits);
}

uint16_t f32_to_fp16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t mag = u & 0x7fffffff;
  if (mag > 0x7f800000) {  // NaN: force the quiet bit so a low-bits-only payload stays NaN
    return static_cast<uint16_t>(sign | 0x7e00 | ((mag >> 13) & 0x3ff));
  }
  // 65520 is halfway between 65504 (the largest half, odd mantissa) and 2^16, so it and
  // everything above round to inf.
  if (mag >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);
  const uint32_t f_exp = mag >> 23;
  if (f_exp >= 113) {  // normal half: rebias, then round away 13 mantissa bits (carry is fine)
    return static_cast<uint16_t>(sign | shift_round_even(mag - (112u << 23), 13));
  }
  // Below 2^-25 (including f32 subnormals) everything rounds to zero.
  if (f_exp < 102) return sign;
  // Subnormal half: count units of 2^-24; the full significand is m · 2^(f_exp - 150).
  const uint32_t m = (mag & 0x7fffff) | 0x800000;
  return static_cast<uint16_t>(sign | shift_round_even(m, static_cast<int>(126 - f_exp)));
}

float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

uint16_t f32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  // Truncating a NaN whose payload sits in the low 16 bits would give inf; set the quiet bit.
  if ((u & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((u >> 16) | 0x40);
  // Same exponent range as f32, so subnormals and overflow to inf fall out of the rounding.
  return static_cast<uint16_t>(shift_round_even(u, 16));
}

namespace {

// ---------------------------------------------------------------------------------------------
// Formats. Each describes one unit of a row (a block, or a 32-element chunk of plain floats):
//   Code            integer code type (quantised) or float (plain)
//   kElems, kBytes  elements and stored bytes of a full unit
//   unpack(src, q, len) -> d   codes of the unit's len elements and its scale
//   pack(x, dst, len)          the reference quantiser
// len is below kElems only for the last unit of a plain-float row.

static_assert(std::endian::native == std::endian::little,
              "stored rows are little-endian and are read with memcpy");

float load_scale(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, sizeof h);
  return fp16_to_f32(h);
}

void store_scale(uint8_t* block, float d) {
  const uint16_t h = f32_to_fp16(d);
  std::memcpy(block, &h, sizeof h);
}

float max_abs(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

struct F32Codec {
  using Stored = float;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};
struct F16Codec {
  using Stored = uint16_t;
  static float load(uint16_t h) { return fp16_to_f32(h); }
  static uint16_t store(float v) { return f32_to_fp16(v); }
};
struct BF16Codec {
  using Stored = uint16_t;
  static float load(uint16_t h) { return bf16_to_f32(h); }
  static uint16_t store(float v) { return f32_to_bf16(v); }
};

template <class Codec>
struct Plain {
  using Stored = typename Codec::Stored;
  using Code = float;
  static constexpr int kElems = 32;
  static constexpr size_t kBytes = kElems * sizeof(Stored);

  static float unpack(const uint8_t* src, float* w, int len) {
    for (int j = 0; j < len; ++j) {
      Stored s;
      std::memcpy(&s, src + j * sizeof(Stored), sizeof s);
      w[j] = Codec::load(s);
    }
    return 1.0f;
  }
  static void pack(const float* x, uint8_t* dst, int len) {
    for (int j = 0; j < len; ++j) {
      const Stored s = Codec::store(x[j]);
      std::memcpy(dst + j * sizeof(Stored), &s, sizeof s);
    }
  }
};

// Sign bits with one magnitude: the mean |x| minimises the squared error of ±d.
struct Q1_0 {
  using Code = int8_t;
  static constexpr int kElems = 128;
  static constexpr size_t kBytes = 2 + kElems / 8;

  static float unpack(const uint8_t* b, int8_t* q, int /*len == kElems*/) {
    for (int i = 0; i < kElems / 8; ++i) {
      for (int k = 0; k < 8; ++k) q[8 * i + k] = static_cast<int8_t>(2 * ((b[2 + i] >> k) & 1) - 1);
    }
    return load_scale(b);
  }
  static void pack(const float* x, uint8_t* b, int /*len == kElems*/) {
    float sum_abs = 0.0f;
    for (int j = 0; j < kElems; ++j) sum_abs += std::fabs(x[j]);
    store_scale(b, sum_abs / kElems);
    std::memset(b + 2, 0, kElems / 8);
    for (int j = 0; j < kElems; ++j) {
      if (x[j] >= 0.0f) b[2 + j / 8] |= static_cast<uint8_t>(1u << (j % 8));
    }
  }
};

// Q2_0 (64) and PQ2_0 (128): codes 0..3 mean -d, 0, d, 2d with d = max |x|. The reference
// multiplies by 1/d (not divides) and rounds halves away from zero, as llama.cpp does.
template <int Elems>
struct Q2 {
  using Code = int8_t;
  static constexpr int kElems = Elems;
  static constexpr size_t kBytes = 2 + kElems / 4;

  static float unpack(const uint8_t* b, int8_t* q, int /*len == kElems*/) {
    for (int i = 0; i < kElems / 4; ++i) {
      for (int k = 0; k < 4; ++k) {
        q[4 * i + k] = static_cast<int8_t>(((b[2 + i] >> (2 * k)) & 3) - 1);
      }
    }
    return load_scale(b);
  }
  static void pack(const float* x, uint8_t* b, int /*len == kElems*/) {
    const float d = max_abs(x, kElems);
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    store_scale(b, d);
    std::memset(b + 2, 0, kElems / 4);
    for (int j = 0; j < kElems; ++j) {
      const int q = std::clamp(static_cast<int>(std::round(x[j] * id)) + 1, 0, 3);
      b[2 + j / 4] |= static_cast<uint8_t>(q << (2 * (j % 4)));
    }
  }
};

// ggml's Q4_0: byte j holds element j (low nibble) and j + 16 (high nibble). The scale takes
// the sign of the largest-magnitude element so that element lands exactly on code 0 (-8·d),
// using the asymmetric code range's extra negative level.
struct Q4_0 {
  using Code = int8_t;
  static constexpr int kElems = 32;
  static constexpr size_t kBytes = 2 + kElems / 2;

  static float unpack(const uint8_t* b, int8_t* q, int /*len == kElems*/) {
    for (int j = 0; j < kElems / 2; ++j) {
      q[j] = static_cast<int8_t>((b[2 + j] & 0x0f) - 8);
      q[j + kElems / 2] = static_cast<int8_t>((b[2 + j] >> 4) - 8);
    }
    return load_scale(b);
  }
  static void pack(const float* x, uint8_t* b, int /*len == kElems*/) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kElems; ++j) {
      if (amax < std::fabs(x[j])) {  // strict: the first of equal magnitudes wins
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_scale(b, d);
    // ggml truncates x/d + 8.5, i.e. rounds halves up (not away from zero).
    const auto code = [&](float v) { return std::min(15, static_cast<int>(v * id + 8.5f)); };
    for (int j = 0; j < kElems / 2; ++j) {
      b[2 + j] = static_cast<uint8_t>(code(x[j]) | (code(x[j + kElems / 2]) << 4));
    }
  }
};

struct Q8_0 {
  using Code = int8_t;
  static constexpr int kElems = 32;
  static constexpr size_t kBytes = 2 + kElems;

  static float unpack(const uint8_t* b, int8_t* q, int /*len == kElems*/) {
    std::memcpy(q, b + 2, kElems);
    return load_scale(b);
  }
  static void pack(const float* x, uint8_t* b, int /*len == kElems*/) {
    const float d = max_abs(x, kElems) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_scale(b, d);
    for (int j = 0; j < kElems; ++j) {
      b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
    }
  }
};

// Calls fn with a value of the format type for t.
template <class Fn>
decltype(auto) with_format(Type t, Fn&& fn) {
  switch (t) {
    case Type::F32:
      return fn(Plain<F32Codec>{});
    case Type::F16:
      return fn(Plain<F16Codec>{});
    case Type::BF16:
      return fn(Plain<BF16Codec>{});
    case Type::Q1_0:
      return fn(Q1_0{});
    case Type::Q2_0:
      return fn(Q2<64>{});
    case Type::PQ2_0:
      return fn(Q2<128>{});
    case Type::Q4_0:
      return fn(Q4_0{});
    case Type::Q8_0:
      return fn(Q8_0{});
  }
  fail("unsupported ggml type id {}", static_cast<uint32_t>(t));
}

// body(unit index, len) for every unit of an n-element row. Full units pass the constant
// kElems so the inlined body's loops have a fixed trip count.
template <class F, class Body>
void for_each_unit(int64_t n, Body&& body) {
  const int64_t full = n / F::kElems;
  for (int64_t u = 0; u < full; ++u) body(u, F::kElems);
  if (const int tail = static_cast<int>(n % F::kElems)) body(full, tail);
}

// The within-unit order of the header comment. Eight independent lanes rather than one chain
// so the compiler can vectorise without reassociating (the result stays reproducible).
template <class W, class X>
float lane_dot(const W* w, const X* x, int len) {
  std::array<float, 8> l{};
  const auto mac = [&](int j, int lane) {
    l[lane] += static_cast<float>(w[j]) * static_cast<float>(x[j]);
  };
  int j = 0;
  for (; j + 8 <= len; j += 8) {
    for (int k = 0; k < 8; ++k) mac(j + k, k);
  }
  for (int k = 0; j + k < len; ++k) mac(j + k, k);  // short last unit of a plain-float row
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// Dot of one 32-element run of codes with int8 activations: exact in int32 for integer codes
// (|sum| <= 32·128·128 also fits f32 exactly).
template <class Code>
float run_dot_q8(const Code* w, const int8_t* q) {
  if constexpr (std::is_integral_v<Code>) {
    int32_t isum = 0;
    for (int j = 0; j < kQ8ActBlock; ++j) isum += int32_t{w[j]} * int32_t{q[j]};
    return static_cast<float>(isum);
  } else {
    return lane_dot(w, q, kQ8ActBlock);
  }
}

template <class F>
const uint8_t* unit_ptr(const void* row, int64_t u) {
  return static_cast<const uint8_t*>(row) + u * static_cast<int64_t>(F::kBytes);
}

}  // namespace

void dequantize_row(Type t, const void* src, float* dst, int64_t n) {
  row_bytes(t, n);
  with_format(t, [&]<class F>(F) {
    for_each_unit<F>(n, [&](int64_t u, int len) {
      typename F::Code q[F::kElems];
      const float d = F::unpack(unit_ptr<F>(src, u), q, len);
      float* y = dst + u * F::kElems;
      for (int j = 0; j < len; ++j) y[j] = static_cast<float>(q[j]) * d;
    });
  });
}

void quantize_row(Type t, const float* src, void* dst, int64_t n) {
  row_bytes(t, n);
  with_format(t, [&]<class F>(F) {
    for_each_unit<F>(n, [&](int64_t u, int len) {
      F::pack(src + u * F::kElems, static_cast<uint8_t*>(dst) + u * F::kBytes, len);
    });
  });
}

float dot_row(Type t, const void* row, const float* x, int64_t n) {
  row_bytes(t, n);
  return with_format(t, [&]<class F>(F) {
    double sum = 0.0;
    for_each_unit<F>(n, [&](int64_t u, int len) {
      typename F::Code q[F::kElems];
      const float d = F::unpack(unit_ptr<F>(row, u), q, len);
      const float term = d * lane_dot(q, x + u * F::kElems, len);
      sum += term;
    });
    return static_cast<float>(sum);
  });
}

namespace {

// One run of activations to int8 codes: d = amax / 127, q = round(x / d) halves away from zero.
// Returns d. GPU kernels that quantise activations use this exact rule (IEEE division, roundf).
float quantize_act_run(const float* x, int n, int8_t* q) {
  const float d = max_abs(x, n) / 127.0f;
  for (int j = 0; j < n; ++j) q[j] = d == 0.0f ? 0 : static_cast<int8_t>(std::round(x[j] / d));
  return d;
}

void check_act_length(int64_t n, int64_t block) {
  if (n < 0 || n % block != 0) {
    fail("activation row of {} elements is not a multiple of the q8 block size {}", n, block);
  }
}

}  // namespace

void quantize_activations_q8(const float* x, int64_t n, BlockQ8Act* dst) {
  check_act_length(n, kQ8ActBlock);
  for (int64_t b = 0; b < n / kQ8ActBlock; ++b) {
    dst[b].d = quantize_act_run(x + b * kQ8ActBlock, kQ8ActBlock, dst[b].q);
  }
}

void quantize_activations_q8_128(const float* x, int64_t n, BlockQ8Act128* dst) {
  check_act_length(n, kQ8Act128Block);
  for (int64_t b = 0; b < n / kQ8Act128Block; ++b) {
    dst[b].d = quantize_act_run(x + b * kQ8Act128Block, kQ8Act128Block, dst[b].q);
    int32_t sum = 0;
    for (int8_t v : dst[b].q) sum += v;
    dst[b].sum = sum;
  }
}

float dot_row_q1_0_q8_128(const void* row, const BlockQ8Act128* x, int64_t n) {
  row_bytes(Type::Q1_0, n);
  static_assert(Q1_0::kElems == kQ8Act128Block);
  double sum = 0.0;
  for (int64_t u = 0; u < n / Q1_0::kElems; ++u) {
    int8_t s[Q1_0::kElems];
    const float d = Q1_0::unpack(unit_ptr<Q1_0>(row, u), s, Q1_0::kElems);
    int32_t isum = 0;
    for (int j = 0; j < Q1_0::kElems; ++j) isum += int32_t{s[j]} * int32_t{x[u].q[j]};
    sum += (d * x[u].d) * static_cast<float>(isum);
  }
  return static_cast<float>(sum);
}

float dot_row_q8(Type t, const void* row, const BlockQ8Act* x, int64_t n) {
  row_bytes(t, n);
  if (n % kQ8ActBlock != 0) {
    fail("{} row of {} elements is not a multiple of the q8 activation block size {}",
         type_info(t).name, n, kQ8ActBlock);
  }
  return with_format(t, [&]<class F>(F) {
    static_assert(F::kElems % kQ8ActBlock == 0);
    double sum = 0.0;
    for_each_unit<F>(n, [&](int64_t u, int len) {
      typename F::Code q[F::kElems];
      const float d = F::unpack(unit_ptr<F>(row, u), q, len);
      const BlockQ8Act* xb = x + u * (F::kElems / kQ8ActBlock);
      float partial = 0.0f;
      for (int s = 0; s < len / kQ8ActBlock; ++s) {
        partial += (d * xb[s].d) * run_dot_q8(q + s * kQ8ActBlock, xb[s].q);
      }
      sum += partial;
    });
    return static_cast<float>(sum);
  });
}

}  // namespace gdn::quant
