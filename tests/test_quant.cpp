// Reference weight formats: byte layouts, reference quantisers, error bounds, dot products.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "quant/quant.h"

namespace gdn::quant {
namespace {

constexpr Type kAllTypes[] = {Type::F32,  Type::F16,  Type::BF16,  Type::Q1_0,
                              Type::Q2_0, Type::Q4_0, Type::PQ2_0, Type::Q8_0};
constexpr Type kBlockTypes[] = {Type::Q1_0, Type::Q2_0, Type::Q4_0, Type::PQ2_0, Type::Q8_0};
constexpr double kF32Eps = 0x1p-24;  // unit roundoff of f32
constexpr double kF16Eps = 0x1p-11;  // unit roundoff of fp16 (relative error of a stored scale)

int64_t block_of(Type t) {
  return type_info(t).block_elems;
}

std::vector<uint8_t> quantize(Type t, const std::vector<float>& x) {
  std::vector<uint8_t> out(row_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row(t, x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

std::vector<float> dequantize(Type t, const std::vector<uint8_t>& row, int64_t n) {
  std::vector<float> out(n);
  dequantize_row(t, row.data(), out.data(), n);
  return out;
}

// Nonzero values with magnitudes spread over four decades, so blocks see very different scales.
std::vector<float> random_row(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.05f, 1.0f), decade(-2.0f, 2.0f);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> x(n);
  for (auto& v : x) v = (neg(rng) ? -1.0f : 1.0f) * mag(rng) * std::pow(10.0f, decade(rng));
  return x;
}

// A block with the given fp16 scale bits in bytes 0..1 (little-endian) and zeroed codes.
std::vector<uint8_t> block_with_scale(Type t, uint16_t scale_bits) {
  std::vector<uint8_t> b(type_info(t).block_bytes, 0);
  b[0] = static_cast<uint8_t>(scale_bits & 0xff);
  b[1] = static_cast<uint8_t>(scale_bits >> 8);
  return b;
}

template <class Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& must_mention) {
  try {
    fn();
    ADD_FAILURE() << "expected gdn::Error";
  } catch (const Error& e) {
    for (const auto& s : must_mention) {
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what() << " lacks " << s;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// fp16 / bf16

TEST(Fp16, EdgeCases) {
  EXPECT_EQ(f32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(65519.996f), 0x7bff);  // just below the halfway point to 2^16
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);    // tie, 65504 has an odd mantissa: to inf
  EXPECT_EQ(f32_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_fp16(-std::numeric_limits<float>::infinity()), 0xfc00);
  // Subnormals: 2^-24 is the smallest; 2^-25 is a tie with 0 (even); just above rounds up.
  EXPECT_EQ(f32_to_fp16(0x1p-24f), 0x0001);
  EXPECT_EQ(f32_to_fp16(0x1p-25f), 0x0000);
  EXPECT_EQ(f32_to_fp16(-0x1p-25f), 0x8000);
  EXPECT_EQ(f32_to_fp16(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(f32_to_fp16(0x3p-25f), 0x0002);  // 1.5 units: tie to even 2
  EXPECT_EQ(f32_to_fp16(0x5p-25f), 0x0002);  // 2.5 units: tie to even 2
  EXPECT_EQ(f32_to_fp16(0x3ffp-24f), 0x03ff);
  EXPECT_EQ(f32_to_fp16(0x7ffp-25f), 0x0400);  // largest subnormal + half unit -> min normal
  EXPECT_EQ(f32_to_fp16(0x1p-14f), 0x0400);
  EXPECT_EQ(f32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  // Normal ties: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(f32_to_fp16(1.0f + 0x3p-11f), 0x3c02);
  EXPECT_EQ(f32_to_fp16(1.0f + 0x1p-11f + 0x1p-23f), 0x3c01);
  EXPECT_EQ(f32_to_fp16(2047.5f), 0x6800);  // tie between 2047 and 2048 rounds to 2048 (even)

  EXPECT_EQ(fp16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_f32(0x83ff), -0x3ffp-24f);
  EXPECT_EQ(fp16_to_f32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::signbit(fp16_to_f32(0x8000)));
  EXPECT_EQ(fp16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());

  EXPECT_TRUE(std::isnan(fp16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(fp16_to_f32(0xfc01)));
  const uint16_t qnan = f32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(qnan & 0x7c00, 0x7c00);
  EXPECT_NE(qnan & 0x03ff, 0);
  // A NaN whose payload is only in bits dropped by the conversion must not become inf.
  EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(std::bit_cast<float>(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(std::bit_cast<float>(0xff800001u)))));
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = fp16_to_f32(static_cast<uint16_t>(h));
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0;
    EXPECT_EQ(std::isnan(f), nan) << h;
    if (!nan) {
      EXPECT_EQ(f32_to_fp16(f), h) << h;
    }
  }
}

// For random finite floats, the chosen half is the nearest one, ties to even mantissa.
TEST(Fp16, RoundsToNearestEven) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits(0, 0x477fefffu);  // |f| < 65520: stays finite
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(bits(rng) | (i % 2 ? 0x80000000u : 0));
    const uint16_t h = f32_to_fp16(f);
    const double err = std::fabs(double{f} - fp16_to_f32(h));
    for (int step : {-1, 1}) {
      const int mag = (h & 0x7fff) + step;
      if (mag < 0 || mag > 0x7bff) continue;
      const double other = std::fabs(double{f} - fp16_to_f32((h & 0x8000) | mag));
      ASSERT_TRUE(err < other || (err == other && (h & 1) == 0)) << f;
    }
  }
}

TEST(Bf16, EdgeCases) {
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // above bf16 max: inf
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  // Subnormals are rounded, not flushed.
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00010000u)), 0x0001);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00008000u)), 0x0000);  // tie to even 0
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x80018000u)), 0x8002);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x007fffffu)), 0x0080);  // to min normal
  EXPECT_EQ(bf16_to_f32(0x0001), std::bit_cast<float>(0x00010000u));
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);

  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // Payload only in the truncated bits: must stay NaN, not turn into inf.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0xff80ffffu)))));
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0xffc00000u)), 0xffc0);
}

TEST(Bf16, EveryBfloatRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f), h) << h;
    }
  }
}

TEST(Bf16, RoundsToNearestEven) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<uint32_t> bits(0, 0x7f7f7fffu);  // below the rounding-to-inf edge
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(bits(rng) | (i % 2 ? 0x80000000u : 0));
    const uint16_t h = f32_to_bf16(f);
    const double err = std::fabs(double{f} - bf16_to_f32(h));
    for (int step : {-1, 1}) {
      const int mag = (h & 0x7fff) + step;
      if (mag < 0 || mag > 0x7f7f) continue;
      const double other = std::fabs(double{f} - bf16_to_f32((h & 0x8000) | mag));
      ASSERT_TRUE(err < other || (err == other && (h & 1) == 0)) << f;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Byte layouts, pinned with hand-built blocks. Scale 0x3800 = 0.5.

TEST(Layout, Q1_0SignBitsLsbFirst) {
  for (int j : {0, 1, 7, 8, 63, 127}) {
    auto b = block_with_scale(Type::Q1_0, 0x3800);
    ASSERT_EQ(b.size(), 18u);
    b[2 + j / 8] = static_cast<uint8_t>(1u << (j % 8));
    const auto y = dequantize(Type::Q1_0, b, 128);
    for (int k = 0; k < 128; ++k) EXPECT_EQ(y[k], k == j ? 0.5f : -0.5f) << j << " " << k;
  }
}

TEST(Layout, Q2CodesMapToMinusOneToTwo) {
  for (Type t : {Type::Q2_0, Type::PQ2_0}) {
    const int64_t n = block_of(t);
    auto b = block_with_scale(t, 0x3800);
    ASSERT_EQ(b.size(), static_cast<size_t>(2 + n / 4));
    b[2] = 0b11'10'01'00;              // elements 0..3 get codes 0, 1, 2, 3
    b[2 + 1] = 0b00'11'01'01;          // element 6 (byte 1, bits 4-5) gets code 3, element 7 code 0
    b[2 + n / 4 - 1] = 0b10'01'01'01;  // last element gets code 2
    const auto y = dequantize(t, b, n);
    EXPECT_EQ(y[0], -0.5f);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_EQ(y[2], 0.5f);
    EXPECT_EQ(y[3], 1.0f);
    EXPECT_EQ(y[4], 0.0f);
    EXPECT_EQ(y[6], 1.0f);
    EXPECT_EQ(y[7], -0.5f);
    EXPECT_EQ(y[n - 1], 0.5f);
    for (int64_t k = 8; k < n - 4; ++k) EXPECT_EQ(y[k], -0.5f) << k;  // zero bytes: code 0
  }
}

TEST(Layout, Q4_0LowNibbleFirstHalf) {
  auto b = block_with_scale(Type::Q4_0, 0x3800);
  ASSERT_EQ(b.size(), 18u);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequantize(Type::Q4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;
    EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f) << j;
  }
}

TEST(Layout, Q8_0SignedBytes) {
  auto b = block_with_scale(Type::Q8_0, 0x3800);
  ASSERT_EQ(b.size(), 34u);
  b[2] = 0x80;
  b[3] = 0x7f;
  b[4] = 0xff;
  b[5] = 0x01;
  const auto y = dequantize(Type::Q8_0, b, 32);
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[1], 63.5f);
  EXPECT_EQ(y[2], -0.5f);
  EXPECT_EQ(y[3], 0.5f);
  EXPECT_EQ(y[4], 0.0f);
}

// Each block carries its own scale in its first two bytes; blocks are packed back to back.
TEST(Layout, ScalePerBlockNoPadding) {
  for (Type t : kBlockTypes) {
    auto b0 = block_with_scale(t, 0x3c00);  // 1.0
    auto b1 = block_with_scale(t, 0xc000);  // -2.0
    // All-ones codes are nonzero in every format, so each element shows its block's scale.
    std::fill(b0.begin() + 2, b0.end(), 0xff);
    std::fill(b1.begin() + 2, b1.end(), 0xff);
    std::vector<uint8_t> row = b0;
    row.insert(row.end(), b1.begin(), b1.end());
    const int64_t n = block_of(t);
    const auto y = dequantize(t, row, 2 * n);
    const auto one = dequantize(t, b0, n);
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_NE(one[j], 0.0f) << type_info(t).name;
      EXPECT_EQ(y[j], one[j]) << type_info(t).name;
      EXPECT_EQ(y[n + j], -2.0f * one[j]) << type_info(t).name;
    }
  }
}

TEST(Layout, PlainLittleEndian) {
  const std::vector<uint8_t> f16 = {0x00, 0x3c, 0x00, 0xc0};
  EXPECT_EQ(dequantize(Type::F16, f16, 2), (std::vector<float>{1.0f, -2.0f}));
  const std::vector<uint8_t> bf16 = {0x80, 0x3f, 0x40, 0xc0};
  EXPECT_EQ(dequantize(Type::BF16, bf16, 2), (std::vector<float>{1.0f, -3.0f}));
  const std::vector<uint8_t> f32 = {0x00, 0x00, 0x80, 0x3f};
  EXPECT_EQ(dequantize(Type::F32, f32, 1), (std::vector<float>{1.0f}));
}

// quantize_row writes exactly row_bytes and not a byte more.
TEST(Layout, QuantizeWritesRowBytes) {
  for (Type t : kAllTypes) {
    const int64_t n = 3 * (t == Type::Q1_0 || t == Type::PQ2_0 ? 128 : 64);
    const auto x = random_row(n, 3);
    const size_t bytes = row_bytes(t, n);
    std::vector<uint8_t> out(bytes + 8, 0xa5);
    quantize_row(t, x.data(), out.data(), n);
    for (size_t i = bytes; i < out.size(); ++i) EXPECT_EQ(out[i], 0xa5) << type_info(t).name;
  }
}

// ---------------------------------------------------------------------------------------------
// Reference quantisers on chosen inputs

TEST(Quantize, Q1_0MeanAbsAndSign) {
  std::vector<float> x(128);
  for (int j = 0; j < 128; ++j) x[j] = (j % 3 == 0 ? -1.0f : 1.0f) * static_cast<float>(j % 5);
  x[10] = -0.0f;  // -0 >= 0: stored as +d
  const auto b = quantize(Type::Q1_0, x);
  float sum = 0.0f;
  for (float v : x) sum += std::fabs(v);
  const uint16_t d = f32_to_fp16(sum / 128.0f);
  EXPECT_EQ(b[0] | (b[1] << 8), d);
  for (int j = 0; j < 128; ++j) {
    EXPECT_EQ((b[2 + j / 8] >> (j % 8)) & 1, x[j] >= 0.0f ? 1 : 0) << j;
  }
  // The f32 mean is rounded to nearest, not truncated: 1.2 = 1228.8 / 1024 -> 0x3ccd, not 0x3ccc.
  const std::vector<float> ones(128, 1.2f);
  const auto c = quantize(Type::Q1_0, ones);
  EXPECT_EQ(c[0] | (c[1] << 8), 0x3ccd);  // fp16(1.2) = 1.2001953
}

TEST(Quantize, Q2RoundsHalfAwayFromZero) {
  for (Type t : {Type::Q2_0, Type::PQ2_0}) {
    const int64_t n = block_of(t);
    std::vector<float> x(n, 0.25f);
    // amax 2 (the negative extreme), so x/d = -1, 1, 0.5, -0.5, 0.495, 0.
    const std::vector<float> head = {-2.0f, 2.0f, 1.0f, -1.0f, 0.99f, 0.0f};
    std::copy(head.begin(), head.end(), x.begin());
    const auto b = quantize(t, x);
    EXPECT_EQ(b[0] | (b[1] << 8), 0x4000) << type_info(t).name;  // d = 2
    const int want[] = {0, 2, 2, 0, 1, 1};
    for (int j = 0; j < 6; ++j) EXPECT_EQ((b[2 + j / 4] >> (2 * (j % 4))) & 3, want[j]) << j;
    EXPECT_EQ((b[2 + (n - 1) / 4] >> (2 * ((n - 1) % 4))) & 3, 1);  // 0.125 -> code 1

    const auto z = quantize(t, std::vector<float>(n, 0.0f));
    EXPECT_EQ(z[0] | (z[1] << 8), 0);
    for (size_t i = 2; i < z.size(); ++i) EXPECT_EQ(z[i], 0b01'01'01'01);  // all codes 1
  }
}

TEST(Quantize, Q8_0ScaleAndRounding) {
  std::vector<float> x(32, 0.0f);
  x[0] = -127.0f;  // amax 127 -> d = 1
  x[1] = 0.5f;
  x[2] = -0.5f;
  x[3] = 2.5f;
  x[4] = 126.4f;
  const auto b = quantize(Type::Q8_0, x);
  EXPECT_EQ(b[0] | (b[1] << 8), 0x3c00);
  const int8_t want[] = {-127, 1, -1, 3, 126, 0};
  for (int j = 0; j < 6; ++j) EXPECT_EQ(static_cast<int8_t>(b[2 + j]), want[j]) << j;

  const auto z = quantize(Type::Q8_0, std::vector<float>(32, 0.0f));
  for (uint8_t v : z) EXPECT_EQ(v, 0);
}

TEST(Quantize, Q4_0SignedMaxAndTruncation) {
  std::vector<float> x(32, 0.0f);
  x[0] = -8.0f;  // largest |x| is negative: d = -8 / -8 = 1
  x[1] = 7.0f;
  x[2] = 7.9f;    // 16.4 truncates to 16, clamped to 15
  x[3] = 0.5f;    // 9.0 -> 9: halves round up
  x[4] = -0.5f;   // 8.0 -> 8
  x[16] = -7.6f;  // 0.9 -> 0
  x[17] = 1.4f;   // 9.9 -> 9
  const auto b = quantize(Type::Q4_0, x);
  EXPECT_EQ(b[0] | (b[1] << 8), 0x3c00);
  auto code = [&](int j) { return j < 16 ? b[2 + j] & 0xf : b[2 + j - 16] >> 4; };
  const std::pair<int, int> want[] = {{0, 0}, {1, 15}, {2, 15}, {3, 9}, {4, 8},
                                      {5, 8}, {16, 0}, {17, 9}, {31, 8}};
  for (auto [j, q] : want) EXPECT_EQ(code(j), q) << j;

  // Largest |x| positive: d = -1, so that element still lands on code 0.
  std::vector<float> y(32, 0.0f);
  y[5] = 8.0f;
  y[6] = -8.0f;  // same magnitude, later: the first one wins
  const auto c = quantize(Type::Q4_0, y);
  EXPECT_EQ(c[0] | (c[1] << 8), 0xbc00);
  EXPECT_EQ(dequantize(Type::Q4_0, c, 32)[5], 8.0f);
}

TEST(Quantize, PlainTypesConvertElementwise) {
  const std::vector<float> x = {1.0f, 1.0f + 0x1p-11f, -65520.0f};
  EXPECT_EQ(dequantize(Type::F16, quantize(Type::F16, x), 3),
            (std::vector<float>{1.0f, 1.0f, -std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(quantize(Type::F32, {-1.5f}), (std::vector<uint8_t>{0x00, 0x00, 0xc0, 0xbf}));
  EXPECT_EQ(quantize(Type::BF16, {1.0f + 0x1p-8f}), (std::vector<uint8_t>{0x80, 0x3f}));
}

// ---------------------------------------------------------------------------------------------
// Round trips on random nonzero data

constexpr int64_t kRoundTripLen = 128 * 64;

// F32 stores exactly; F16 within 2^-11 relative (half an ulp of an 11-bit significand) for
// magnitudes in its normal range; BF16 within 2^-8 (8-bit significand) everywhere.
TEST(RoundTrip, PlainTypes) {
  const auto x = random_row(kRoundTripLen, 4);  // |x| in [5e-4, 100]: normal for fp16
  EXPECT_EQ(dequantize(Type::F32, quantize(Type::F32, x), kRoundTripLen), x);
  const auto h = dequantize(Type::F16, quantize(Type::F16, x), kRoundTripLen);
  const auto b = dequantize(Type::BF16, quantize(Type::BF16, x), kRoundTripLen);
  for (int64_t j = 0; j < kRoundTripLen; ++j) {
    EXPECT_LE(std::fabs(h[j] - x[j]), 0x1p-11 * std::fabs(x[j])) << x[j];
    EXPECT_LE(std::fabs(b[j] - x[j]), 0x1p-8 * std::fabs(x[j])) << x[j];
  }
}

// Q8_0: code = round(x/d) is within 1/2 of x/d, and storing d in fp16 (relative error <= 2^-11)
// moves q·d by at most 127·2^-11·d. 1e-5·d covers the f32 reciprocal the reference multiplies by.
TEST(RoundTrip, Q8_0WithinHalfStep) {
  const auto x = random_row(kRoundTripLen, 5);
  const auto y = dequantize(Type::Q8_0, quantize(Type::Q8_0, x), kRoundTripLen);
  for (int64_t b = 0; b < kRoundTripLen / 32; ++b) {
    double amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(double{x[b * 32 + j]}));
    const double d = amax / 127;
    const double bound = d * (0.5 + 127 * kF16Eps + 1e-5);
    for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), bound);
  }
}

// Q4_0: |d| = amax/8 and x/d lies in [-8, 8]. Codes round half up, so the error is at most |d|/2
// except above x/d = 7.5, where code 15 (+7) is the top and the error reaches |d|. The fp16 scale
// adds at most 8·2^-11·|d| (|code - 8| <= 8).
TEST(RoundTrip, Q4_0WithinHalfStepExceptTopCode) {
  const auto x = random_row(kRoundTripLen, 6);
  const auto y = dequantize(Type::Q4_0, quantize(Type::Q4_0, x), kRoundTripLen);
  for (int64_t b = 0; b < kRoundTripLen / 32; ++b) {
    double max = 0;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[b * 32 + j]) > std::fabs(max)) max = x[b * 32 + j];
    }
    const double d = max / -8;
    for (int j = 0; j < 32; ++j) {
      const double err = std::fabs(double{y[b * 32 + j]} - x[b * 32 + j]);
      const double steps = x[b * 32 + j] / d > 7.5 ? 1.0 : 0.5;
      EXPECT_LE(err, std::fabs(d) * (steps + 8 * kF16Eps + 1e-5)) << b << " " << j;
    }
  }
}

// Q1_0 is lossy by design (one magnitude per block); check the reconstruction is exactly the
// definition: sign(x) · fp16(mean |x|), the mean summed in f32 in element order.
TEST(RoundTrip, Q1_0IsSignTimesMeanAbs) {
  const auto x = random_row(kRoundTripLen, 7);
  const auto y = dequantize(Type::Q1_0, quantize(Type::Q1_0, x), kRoundTripLen);
  for (int64_t b = 0; b < kRoundTripLen / 128; ++b) {
    float sum = 0.0f;
    for (int j = 0; j < 128; ++j) sum += std::fabs(x[b * 128 + j]);
    const float d = fp16_to_f32(f32_to_fp16(sum / 128));
    for (int j = 0; j < 128; ++j) {
      ASSERT_EQ(y[b * 128 + j], x[b * 128 + j] >= 0 ? d : -d) << b << " " << j;
    }
  }
}

// Q2_0/PQ2_0 are lossy by design: with d = amax the quantiser only ever uses -d, 0, d (code 3,
// +2d, is for other producers). Reconstruction is round(x/amax) · fp16(amax), so within
// amax/2 + amax·2^-11 of x.
TEST(RoundTrip, Q2IsRoundedRatioTimesMaxAbs) {
  for (Type t : {Type::Q2_0, Type::PQ2_0}) {
    const int64_t bs = block_of(t);
    const auto x = random_row(kRoundTripLen, 8);
    const auto y = dequantize(t, quantize(t, x), kRoundTripLen);
    for (int64_t b = 0; b < kRoundTripLen / bs; ++b) {
      float amax = 0.0f;
      for (int j = 0; j < bs; ++j) amax = std::max(amax, std::fabs(x[b * bs + j]));
      const float d = fp16_to_f32(f32_to_fp16(amax));
      for (int j = 0; j < bs; ++j) {
        const float v = x[b * bs + j];
        ASSERT_EQ(y[b * bs + j], std::round(double{v} / amax) * d) << type_info(t).name << j;
        EXPECT_LE(std::fabs(y[b * bs + j] - v), amax * (0.5 + kF16Eps));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dot products

// Worst-case rounding of dot_row's order (quant.h) relative to sum |w_j x_j|: one rounding per
// product, unit/8 - 1 lane additions, 3 lane-combining additions, one for the scale, and one of
// slack for the double sum over units (n·2^-53, far below 2^-24 for these n); then the final f32
// result adds half an ulp of itself. dot_row_q8's order needs fewer roundings and fits too.
double dot_tolerance(int64_t unit, double sum_abs, double result) {
  const double k = static_cast<double>(unit / 8 + 5);
  return k * kF32Eps * (1 + 1e-3) * sum_abs + kF32Eps * std::fabs(result);
}

int64_t unit_of(Type t) {
  return std::max<int64_t>(block_of(t), 32);
}

std::vector<int64_t> dot_lengths(Type t) {
  const int64_t b = block_of(t);
  std::vector<int64_t> n = {b, 2 * b, 3 * b, 7 * b, 17408};
  if (b == 1) n.insert(n.end(), {1, 5, 31, 33, 100});  // plain types: partial last unit
  return n;
}

TEST(DotRow, MatchesDoubleDotOfDequantisedRow) {
  for (Type t : kAllTypes) {
    for (int64_t n : dot_lengths(t)) {
      const auto row = quantize(t, random_row(n, 9));
      const auto wq = dequantize(t, row, n);
      const auto x = random_row(n, 10);
      double ref = 0, sum_abs = 0;
      for (int64_t j = 0; j < n; ++j) {
        ref += double{wq[j]} * x[j];
        sum_abs += std::fabs(double{wq[j]} * x[j]);
      }
      const float got = dot_row(t, row.data(), x.data(), n);
      EXPECT_LE(std::fabs(got - ref), dot_tolerance(unit_of(t), sum_abs, ref))
          << type_info(t).name << " n=" << n << " got " << got << " want " << ref;
    }
  }
}

// Integer weights (scale 1, arbitrary code bytes) against small integer activations: every
// product and partial sum is a small integer, so any order gives the exact result.
TEST(DotRow, ExactOnSmallIntegers) {
  for (Type t : kAllTypes) {
    const int64_t n = 4 * unit_of(t);
    std::vector<uint8_t> row;
    if (block_of(t) == 1) {
      std::vector<float> w(n);
      for (int64_t j = 0; j < n; ++j) w[j] = static_cast<float>(j % 5) - 2.0f;
      row = quantize(t, w);
    } else {
      for (int64_t i = 0; i < n / block_of(t); ++i) {
        auto b = block_with_scale(t, 0x3c00);
        for (size_t k = 2; k < b.size(); ++k) b[k] = static_cast<uint8_t>(i * 31 + k * 17);
        row.insert(row.end(), b.begin(), b.end());
      }
    }
    std::vector<float> x(n);
    for (int64_t j = 0; j < n; ++j) x[j] = static_cast<float>(j % 7) - 3.0f;
    const auto w = dequantize(t, row, n);
    double ref = 0;
    for (int64_t j = 0; j < n; ++j) ref += double{w[j]} * x[j];
    EXPECT_EQ(dot_row(t, row.data(), x.data(), n), ref) << type_info(t).name;
  }
}

// Pins the documented order with sums where f32 rounding shows it. Around 2^24 the f32 spacing
// is 2, so adding 1 to 2^24 is a tie that rounds back to 2^24.
TEST(DotRow, AccumulationOrderIsLanesThenDouble) {
  std::vector<float> ones(96, 1.0f);
  const auto w = quantize(Type::F32, ones);
  // Within a unit: 2^24 and two 1s in lane 0 (elements 0, 8, 16) and two 1s in lane 1 (1, 9).
  // Lanes give (2^24 + 1 + 1 -> 2^24) + 2 = 2^24 + 2; one f32 chain would stay at 2^24.
  std::vector<float> x(32, 0.0f);
  x[0] = 0x1p24f;
  x[8] = x[16] = x[1] = x[9] = 1.0f;
  EXPECT_EQ(dot_row(Type::F32, w.data(), x.data(), 32), 0x1p24f + 2);
  // Across units the sum is double: 2^24 + 1 + 1 is exact; in f32 it would stay at 2^24.
  std::vector<float> y(96, 0.0f);
  y[0] = 0x1p24f;
  y[32] = y[64] = 1.0f;
  EXPECT_EQ(dot_row(Type::F32, w.data(), y.data(), 96), 0x1p24f + 2);
}

TEST(DotRow, ZeroLengthIsZero) {
  for (Type t : kAllTypes) EXPECT_EQ(dot_row(t, nullptr, nullptr, 0), 0.0f);
}

// Activations: d = amax/127 in f32 (not rounded to fp16), q = round(x/d) half away from zero.
TEST(DotRowQ8, QuantizeActivations) {
  std::vector<float> x(64, 0.0f);
  x[0] = 127.0f;
  x[1] = -0.5f;
  x[2] = 2.5f;
  x[3] = -127.0f;
  const float third = 1.0f / 3.0f;  // d = 1/381 exercises a scale that fp16 could not hold
  for (int j = 32; j < 64; ++j) x[j] = third * static_cast<float>(j - 48) / 16.0f;
  std::vector<BlockQ8Act> q(2);
  quantize_activations_q8(x.data(), 64, q.data());
  EXPECT_EQ(q[0].d, 1.0f);
  EXPECT_EQ(q[0].q[0], 127);
  EXPECT_EQ(q[0].q[1], -1);
  EXPECT_EQ(q[0].q[2], 3);
  EXPECT_EQ(q[0].q[3], -127);
  EXPECT_EQ(q[0].q[4], 0);
  EXPECT_EQ(q[1].d, third / 127.0f);
  EXPECT_EQ(q[1].q[0], -127);
  EXPECT_EQ(q[1].q[16], 0);
  for (int j = 0; j < 32; ++j) {
    EXPECT_LE(std::fabs(q[1].q[j] * double{q[1].d} - x[32 + j]), q[1].d * (0.5 + 1e-5));
  }

  std::vector<float> zero(32, 0.0f);
  quantize_activations_q8(zero.data(), 32, q.data());
  EXPECT_EQ(q[0].d, 0.0f);
  for (int8_t v : q[0].q) EXPECT_EQ(v, 0);
}

TEST(DotRowQ8, MatchesDoubleDotOfDequantisedOperands) {
  for (Type t : kAllTypes) {
    for (int64_t n : dot_lengths(t)) {
      if (n % kQ8ActBlock != 0) continue;
      const auto row = quantize(t, random_row(n, 11));
      const auto w = dequantize(t, row, n);
      const auto x = random_row(n, 12);
      std::vector<BlockQ8Act> xq(n / kQ8ActBlock);
      quantize_activations_q8(x.data(), n, xq.data());
      double ref = 0, sum_abs = 0;
      for (int64_t j = 0; j < n; ++j) {
        const auto& a = xq[j / kQ8ActBlock];
        const double xv = a.q[j % kQ8ActBlock] * double{a.d};
        ref += double{w[j]} * xv;
        sum_abs += std::fabs(double{w[j]} * xv);
      }
      const float got = dot_row_q8(t, row.data(), xq.data(), n);
      EXPECT_LE(std::fabs(got - ref), dot_tolerance(unit_of(t), sum_abs, ref))
          << type_info(t).name << " n=" << n << " got " << got << " want " << ref;
      // Against the f32-activation dot, the only new error is the activation rounding:
      // |sum w (x - q d_x)| <= sum |w| d_x / 2 (slack for the f32 division x / d_x).
      double full_ref = 0, full_abs = 0, act_err = 0;
      for (int64_t j = 0; j < n; ++j) {
        full_ref += double{w[j]} * x[j];
        full_abs += std::fabs(double{w[j]} * x[j]);
        act_err += std::fabs(double{w[j]}) * xq[j / kQ8ActBlock].d * (0.5 + 1e-5);
      }
      EXPECT_LE(std::fabs(got - full_ref), act_err + dot_tolerance(unit_of(t), sum_abs, ref))
          << type_info(t).name << " n=" << n;
      EXPECT_LE(std::fabs(dot_row(t, row.data(), x.data(), n) - full_ref),
                dot_tolerance(unit_of(t), full_abs, full_ref));
    }
  }
}

// 128-element activation blocks (the Q1_0 GPU kernel's): same rounding rule, one scale per
// 128, plus the code sum.
TEST(DotRowQ8_128, QuantizeActivations) {
  std::vector<float> x(256, 0.0f);
  x[0] = 127.0f;
  x[1] = -0.5f;
  x[2] = 2.5f;
  x[127] = -127.0f;  // the last element of the block shares the first one's scale
  const float third = 1.0f / 3.0f;
  for (int j = 128; j < 256; ++j) x[j] = third * static_cast<float>(j - 192) / 64.0f;
  std::vector<BlockQ8Act128> q(2);
  quantize_activations_q8_128(x.data(), 256, q.data());
  EXPECT_EQ(q[0].d, 1.0f);
  EXPECT_EQ(q[0].q[0], 127);
  EXPECT_EQ(q[0].q[1], -1);
  EXPECT_EQ(q[0].q[2], 3);
  EXPECT_EQ(q[0].q[127], -127);
  EXPECT_EQ(q[0].sum, 127 - 1 + 3 - 127);
  EXPECT_EQ(q[1].d, third / 127.0f);
  EXPECT_EQ(q[1].q[0], -127);
  EXPECT_EQ(q[1].q[64], 0);
  int32_t sum = 0;
  for (int j = 0; j < 128; ++j) {
    sum += q[1].q[j];
    EXPECT_LE(std::fabs(q[1].q[j] * double{q[1].d} - x[128 + j]), q[1].d * (0.5 + 1e-5));
  }
  EXPECT_EQ(q[1].sum, sum);

  std::vector<float> zero(128, 0.0f);
  quantize_activations_q8_128(zero.data(), 128, q.data());
  EXPECT_EQ(q[0].d, 0.0f);
  EXPECT_EQ(q[0].sum, 0);
  for (int8_t v : q[0].q) EXPECT_EQ(v, 0);

  expect_error([&] { quantize_activations_q8_128(x.data(), 96, q.data()); }, {"96", "128"});
}

TEST(DotRowQ8_128, MatchesDoubleDotOfDequantisedOperands) {
  for (int64_t n : {128, 384, 5120, 17408}) {
    const auto row = quantize(Type::Q1_0, random_row(n, 13));
    const auto w = dequantize(Type::Q1_0, row, n);
    const auto x = random_row(n, 14);
    std::vector<BlockQ8Act128> xq(n / kQ8Act128Block);
    quantize_activations_q8_128(x.data(), n, xq.data());
    double ref = 0, sum_abs = 0, full_ref = 0, act_err = 0;
    for (int64_t j = 0; j < n; ++j) {
      const auto& a = xq[j / kQ8Act128Block];
      const double xv = a.q[j % kQ8Act128Block] * double{a.d};
      ref += double{w[j]} * xv;
      sum_abs += std::fabs(double{w[j]} * xv);
      full_ref += double{w[j]} * x[j];
      act_err += std::fabs(double{w[j]}) * a.d * (0.5 + 1e-5);
    }
    // Per block: an exact integer, one rounding of d_w * d_x and one of the product.
    const float got = dot_row_q1_0_q8_128(row.data(), xq.data(), n);
    EXPECT_LE(std::fabs(got - ref), 3 * kF32Eps * sum_abs + kF32Eps * std::fabs(ref)) << n;
    EXPECT_LE(std::fabs(got - full_ref), act_err + 3 * kF32Eps * sum_abs + kF32Eps * std::fabs(ref))
        << n;
  }
  std::vector<uint8_t> bytes(64);
  std::vector<BlockQ8Act128> a(2);
  expect_error([&] { dot_row_q1_0_q8_128(bytes.data(), a.data(), 64); }, {"q1_0", "64"});
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(Errors, RowLengthNotMultipleOfBlock) {
  std::vector<uint8_t> bytes(4096);
  std::vector<float> f(1024);
  std::vector<BlockQ8Act> a(32);
  for (Type t : kBlockTypes) {
    const int64_t b = block_of(t);
    const std::string name(type_info(t).name);
    for (int64_t n : {b + 1, b - 1, 3 * b / 2, -b}) {
      const std::vector<std::string> mention = {name, std::to_string(n)};
      expect_error([&] { dequantize_row(t, bytes.data(), f.data(), n); }, mention);
      expect_error([&] { quantize_row(t, f.data(), bytes.data(), n); }, mention);
      expect_error([&] { dot_row(t, bytes.data(), f.data(), n); }, mention);
      expect_error([&] { dot_row_q8(t, bytes.data(), a.data(), n); }, mention);
    }
  }
  for (Type t : {Type::F32, Type::F16, Type::BF16}) {
    const std::string name(type_info(t).name);
    expect_error([&] { dequantize_row(t, bytes.data(), f.data(), -3); }, {name, "-3"});
    expect_error([&] { quantize_row(t, f.data(), bytes.data(), -3); }, {name, "-3"});
    expect_error([&] { dot_row(t, bytes.data(), f.data(), -3); }, {name, "-3"});
    // Plain rows may have any length, but q8 activations come in runs of 32.
    expect_error([&] { dot_row_q8(t, bytes.data(), a.data(), 33); }, {name, "33", "32"});
  }
  expect_error([&] { quantize_activations_q8(f.data(), 33, a.data()); }, {"33", "32"});
  expect_error([&] { quantize_activations_q8(f.data(), -32, a.data()); }, {"-32"});
}

TEST(Errors, UnknownTypeId) {
  std::vector<uint8_t> bytes(256);
  std::vector<float> f(64);
  std::vector<BlockQ8Act> a(2);
  for (uint32_t id : {3u, 40u, 999u}) {
    const auto t = static_cast<Type>(id);
    const std::vector<std::string> mention = {std::to_string(id)};
    expect_error([&] { dequantize_row(t, bytes.data(), f.data(), 64); }, mention);
    expect_error([&] { quantize_row(t, f.data(), bytes.data(), 64); }, mention);
    expect_error([&] { dot_row(t, bytes.data(), f.data(), 64); }, mention);
    expect_error([&] { dot_row_q8(t, bytes.data(), a.data(), 64); }, mention);
  }
}

// Type names as llama.cpp prints them, in any case; an unknown one is refused naming the known.
TEST(Types, NamesParseInAnyCaseAndUnknownOnesListTheKnown) {
  for (const Type t : kAllTypes) {
    const std::string name(type_info(t).name);
    std::string upper = name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(parse_type(name), t);
    EXPECT_EQ(parse_type(upper), t);
    EXPECT_EQ(find_type(static_cast<uint32_t>(t)), &type_info(t));
  }
  expect_error([] { parse_type("q3_k"); }, {"'q3_k'", "q1_0", "pq2_0"});
  EXPECT_EQ(find_type(3), nullptr);
}

}  // namespace
}  // namespace gdn::quant
