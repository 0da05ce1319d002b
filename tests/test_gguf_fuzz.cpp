// Property and mutation tests for the GGUF reader: every malformed input must end in a
// gdn::Error, never a crash, a sanitizer report, another exception or an out-of-bounds view.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "fuzz_cases.h"
#include "gguf/gguf.h"

// Under UBSan, stop at the first report: a report that only prints would let the test pass.
extern "C" const char* __ubsan_default_options() {
  return "halt_on_error=1:print_stacktrace=1";
}

namespace gdn::gguf {
namespace {

using quant::Type;
using Bytes = std::vector<uint8_t>;

Bytes filled(size_t n, uint8_t seed) {
  Bytes v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed * 31 + i);
  return v;
}

// Small valid files that between them use every structure the reader parses.
std::vector<Bytes> seed_files() {
  std::vector<Bytes> seeds;
  {
    Writer w;
    w.meta().set("general.architecture", Value::str("qwen35"));
    w.meta().set("tokens", Value::strings({"<s>", "a", "", "bc"}));
    w.meta().set("nested",
                 Value::array(ValueType::ARRAY,
                              {Value::i32s({1, -2}), Value::strings({"x", "yz"}),
                               Value::array(ValueType::ARRAY, {Value::f32s({1.5f, 2.0f})})}));
    w.meta().set("u64", Value::u64(1ULL << 40));
    w.meta().set("flag", Value::boolean(true));
    w.meta().set("f64", {ValueType::FLOAT64, 0.25});
    seeds.push_back(w.to_bytes());
  }
  {
    Writer w;
    w.meta().set("general.name", Value::str("tiny"));
    w.meta().set("scores", Value::f32s({0.5f, -1.0f, 2.0f}));
    w.add_tensor("tok_embd", Type::F32, {4, 2}, filled(32, 1));
    w.add_tensor("blk.0.q", Type::Q8_0, {32, 2}, filled(68, 2));
    w.add_tensor("blk.0.k", Type::Q1_0, {128}, filled(18, 3));
    seeds.push_back(w.to_bytes());
  }
  {
    Writer w;
    w.meta().set("general.alignment", Value::u32(1));
    w.meta().set("merges", Value::array(ValueType::ARRAY,
                                        {Value::strings({"a b"}), Value::strings({"c", "d"})}));
    w.add_tensor("a", Type::F16, {3}, filled(6, 4));
    w.add_tensor("b", Type::BF16, {1, 3}, filled(6, 5));
    w.add_tensor("c", Type::Q4_0, {32}, filled(18, 6));
    seeds.push_back(w.to_bytes());
  }
  {
    Writer w;
    w.meta().set("general.alignment", Value::u32(64));
    w.meta().set("i8", {ValueType::INT8, int64_t{-3}});
    w.meta().set("u16s", Value::array(ValueType::UINT16, {{ValueType::UINT16, uint64_t{7}}}));
    w.add_tensor("p", Type::PQ2_0, {128, 1}, filled(34, 7));
    w.add_tensor("q", Type::Q2_0, {64}, filled(18, 8));
    w.add_tensor("e", Type::F32, {0, 5}, Bytes{});
    seeds.push_back(w.to_bytes());
  }
  return seeds;
}

// Bytes before the data section: where nearly every interesting mutation lands.
size_t header_size(const Bytes& file) {
  const File f = File::parse(file, "seed.gguf");
  size_t end = file.size();
  for (const TensorInfo& t : f.tensors()) end = std::min<size_t>(end, t.data - file.data());
  return end;
}

// The GGUF reader over one input: refused with a gdn::Error, or parsed into views that all lie
// inside the input.
class Harness : public gdn::testing::FuzzCases {
 public:
  void check(const Bytes& bytes, const std::string& what) {
    // An exactly-sized private copy, so AddressSanitizer sees any read past the end.
    const size_t n = bytes.size();
    auto buf = std::make_unique_for_overwrite<uint8_t[]>(n);
    std::copy(bytes.begin(), bytes.end(), buf.get());
    run(what, [&] { check_views(File::parse({buf.get(), n}, "fuzz.gguf"), buf.get(), n, what); });
  }

 private:
  void check_views(const File& f, const uint8_t* base, size_t n, const std::string& what) {
    const auto lo = reinterpret_cast<uintptr_t>(base);
    for (const TensorInfo& t : f.tensors()) {
      const auto p = reinterpret_cast<uintptr_t>(t.data);
      if (p < lo || t.size > n || p - lo > n - t.size) {
        fail(what, "tensor '" + t.name + "' data lies outside the buffer");
      }
      if (f.find_tensor(t.name) != &t) fail(what, "tensor '" + t.name + "' not indexed");
      (void)t.shape_str();
    }
  }
};

template <typename T>
void store(Bytes& b, size_t pos, T v) {
  std::memcpy(b.data() + pos, &v, sizeof(T));
}

void truncations(Harness& h, const Bytes& seed, size_t id) {
  for (size_t len = 0; len < seed.size(); ++len) {
    h.check(Bytes(seed.begin(), seed.begin() + len), fmt::format("seed {} cut to {}", id, len));
  }
}

// Every count, length, type and offset field is somewhere in the header; overwriting
// each position with hostile values hits all of them.
void hostile_fields(Harness& h, const Bytes& seed, size_t id) {
  const uint64_t u64s[] = {1ULL << 63, ~0ULL, (1ULL << 63) - 1, 1ULL << 32};
  const uint32_t u32s[] = {~0U, 13, 9, 8};
  const size_t end = header_size(seed);
  for (size_t pos = 0; pos + 8 <= end; ++pos) {
    for (uint64_t v : u64s) {
      Bytes b = seed;
      store(b, pos, v);
      h.check(b, fmt::format("seed {} u64 {} at {}", id, v, pos));
    }
    for (uint32_t v : u32s) {
      Bytes b = seed;
      store(b, pos, v);
      h.check(b, fmt::format("seed {} u32 {} at {}", id, v, pos));
    }
  }
}

void mutate_once(Bytes& b, size_t header_end, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  // Three in four mutations land in the header, where the parser makes its decisions.
  const size_t span = (rng() % 4 != 0) ? std::min(header_end, b.size()) : b.size();
  switch (rng() % 5) {
    case 0:  // flip bits
      for (int i = 0, n = 1 + pick(4); i < n && !b.empty(); ++i) {
        b[pick(span)] ^= static_cast<uint8_t>(1u << pick(8));
      }
      break;
    case 1:  // random bytes
      for (int i = 0, n = 1 + pick(4); i < n && !b.empty(); ++i) {
        b[pick(span)] = static_cast<uint8_t>(rng());
      }
      break;
    case 2: {  // insert
      const size_t at = pick(span + 1);
      Bytes extra(1 + pick(16));
      for (auto& x : extra) x = static_cast<uint8_t>(rng());
      b.insert(b.begin() + at, extra.begin(), extra.end());
      break;
    }
    case 3: {  // delete
      if (b.empty()) break;
      const size_t at = pick(span);
      const size_t n = std::min(b.size() - at, 1 + pick(16));
      b.erase(b.begin() + at, b.begin() + at + n);
      break;
    }
    default: {  // a huge or random 64-bit value
      if (b.size() < 8) break;
      const uint64_t values[] = {1ULL << 63, ~0ULL, rng(), rng() >> pick(64)};
      store(b, pick(std::min(span, b.size() - 7)), values[pick(4)]);
      break;
    }
  }
}

void random_mutations(Harness& h, const Bytes& seed, size_t id, int count) {
  std::mt19937_64 rng(0x9e3779b97f4a7c15ULL + id);
  const size_t end = header_size(seed);
  for (int i = 0; i < count; ++i) {
    Bytes b = seed;
    for (int m = 0, n = 1 + static_cast<int>(rng() % 3); m < n; ++m) mutate_once(b, end, rng);
    h.check(b, fmt::format("seed {} random case {}", id, i));
  }
}

TEST(GgufFuzz, MutatedFilesFailCleanly) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<Bytes> seeds = seed_files();
  Harness h;
  for (size_t id = 0; id < seeds.size(); ++id) {
    h.check(seeds[id], fmt::format("seed {} unmodified", id));
    truncations(h, seeds[id], id);
    hostile_fields(h, seeds[id], id);
    random_mutations(h, seeds[id], id, 3000);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ fuzz     ] %d cases (%d parsed, the rest rejected) in %.2f s\n", h.cases(),
              h.accepted(), secs);
  EXPECT_GE(h.cases(), 20000);
  EXPECT_GE(h.accepted(), int(seeds.size()));  // at least the unmodified seeds
}

// Property: for random metadata and tensors, writing, parsing and writing again gives the
// same bytes, so the reader loses nothing the writer can express.
Value random_value(std::mt19937_64& rng, ValueType t, int depth);

ValueType random_type(std::mt19937_64& rng, int depth) {
  const auto t = static_cast<ValueType>(rng() % 13);
  return (t == ValueType::ARRAY && depth >= 3) ? ValueType::STRING : t;
}

Value random_value(std::mt19937_64& rng, ValueType t, int depth) {
  const uint64_t r = rng();
  switch (t) {
    case ValueType::UINT8:
      return {t, r & 0xff};
    case ValueType::INT8:
      return {t, int64_t{static_cast<int8_t>(r)}};
    case ValueType::UINT16:
      return {t, r & 0xffff};
    case ValueType::INT16:
      return {t, int64_t{static_cast<int16_t>(r)}};
    case ValueType::UINT32:
      return {t, r & 0xffffffff};
    case ValueType::INT32:
      return {t, int64_t{static_cast<int32_t>(r)}};
    case ValueType::UINT64:
      return {t, r};
    case ValueType::INT64:
      return {t, static_cast<int64_t>(r)};
    case ValueType::FLOAT32:
      return {t, double{static_cast<float>(r % 100000) / 64.0f}};
    case ValueType::FLOAT64:
      return {t, static_cast<double>(r) / 3.0};
    case ValueType::BOOL:
      return {t, (r & 1) != 0};
    case ValueType::STRING:
      return {t, std::string(r % 12, static_cast<char>('a' + r % 26))};
    case ValueType::ARRAY: {
      Array a{random_type(rng, depth + 1), {}};
      for (uint64_t i = 0, n = r % 5; i < n; ++i)
        a.items.push_back(random_value(rng, a.elem, depth + 1));
      return {t, std::move(a)};
    }
  }
  return {};
}

TEST(GgufProperty, RewriteIsByteIdentical) {
  std::mt19937_64 rng(42);
  const Type types[] = {Type::F32, Type::F16, Type::Q8_0, Type::Q1_0, Type::Q2_0};
  for (int round = 0; round < 200; ++round) {
    Writer w;
    if (rng() % 2) w.meta().set("general.alignment", Value::u32(1u << (rng() % 8)));
    for (int k = 0, n = rng() % 6; k < n; ++k) {
      w.meta().set(fmt::format("key.{}", k), random_value(rng, random_type(rng, 0), 0));
    }
    for (int k = 0, n = rng() % 4; k < n; ++k) {
      const Type t = types[rng() % std::size(types)];
      const int64_t block = quant::type_info(t).block_elems;
      const std::vector<int64_t> ne = {block * (1 + static_cast<int64_t>(rng() % 3)),
                                       1 + static_cast<int64_t>(rng() % 3)};
      w.add_tensor(fmt::format("t{}", k), t, ne,
                   filled(quant::row_bytes(t, ne[0]) * ne[1], static_cast<uint8_t>(k)));
    }
    const Bytes bytes = w.to_bytes();
    const File f = File::parse(bytes, "prop.gguf");
    Writer again;
    again.meta() = f.meta();
    for (const TensorInfo& t : f.tensors()) {
      again.add_tensor(t.name, t.type, t.ne, Bytes(t.data, t.data + t.size));
    }
    ASSERT_EQ(again.to_bytes(), bytes) << "round " << round;
  }
}

}  // namespace
}  // namespace gdn::gguf
