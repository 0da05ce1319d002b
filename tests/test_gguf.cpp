#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "error_of.h"
#include "gguf/gguf.h"

namespace gdn::gguf {
namespace {

using quant::Type;
using testing::error_of;

// Hand-assembles GGUF bytes so tests can plant one specific defect.
class Bytes {
 public:
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& i64(int64_t v) { return put(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b_.insert(b_.end(), {'G', 'G', 'U', 'F'});
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  Bytes& tensor(std::string_view name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) i64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(size_t alignment) {
    b_.resize((b_.size() + alignment - 1) / alignment * alignment);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b_.resize(b_.size() + n);
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return b_; }

 private:
  template <typename T>
  Bytes& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b_.insert(b_.end(), p, p + sizeof(T));
    return *this;
  }
  std::vector<uint8_t> b_;
};

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    File::parse(bytes, "bad.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Every parse error must name the file, the item and the byte offset.
void expect_parse_error(const Bytes& b, std::initializer_list<std::string_view> needles) {
  const std::string msg = parse_error(b.bytes());
  for (std::string_view n : {std::string_view("bad.gguf"), std::string_view("offset")}) {
    EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' missing from: " << msg;
  }
  for (std::string_view n : needles) {
    EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' missing from: " << msg;
  }
}

void expect_contains(const std::string& msg, std::initializer_list<std::string_view> needles) {
  for (std::string_view n : needles) {
    EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' missing from: " << msg;
  }
}

void expect_same_value(const Value& a, const Value& b, const std::string& where) {
  ASSERT_EQ(a.type, b.type) << where;
  ASSERT_EQ(a.data.index(), b.data.index()) << where;
  if (const auto* arr = std::get_if<Array>(&a.data)) {
    const Array& other = std::get<Array>(b.data);
    ASSERT_EQ(arr->elem, other.elem) << where;
    ASSERT_EQ(arr->items.size(), other.items.size()) << where;
    for (size_t i = 0; i < arr->items.size(); ++i) {
      expect_same_value(arr->items[i], other.items[i], where + "[" + std::to_string(i) + "]");
    }
  } else if (const auto* s = std::get_if<std::string>(&a.data)) {
    EXPECT_EQ(*s, std::get<std::string>(b.data)) << where;
  } else if (const auto* d = std::get_if<double>(&a.data)) {
    EXPECT_EQ(*d, std::get<double>(b.data)) << where;
  } else if (const auto* u = std::get_if<uint64_t>(&a.data)) {
    EXPECT_EQ(*u, std::get<uint64_t>(b.data)) << where;
  } else if (const auto* i = std::get_if<int64_t>(&a.data)) {
    EXPECT_EQ(*i, std::get<int64_t>(b.data)) << where;
  } else {
    EXPECT_EQ(std::get<bool>(a.data), std::get<bool>(b.data)) << where;
  }
}

Metadata every_value_type() {
  Metadata m;
  m.set("u8", {ValueType::UINT8, uint64_t{255}});
  m.set("i8", {ValueType::INT8, int64_t{-128}});
  m.set("u16", {ValueType::UINT16, uint64_t{65535}});
  m.set("i16", {ValueType::INT16, int64_t{-32768}});
  m.set("u32", Value::u32(4000000000u));
  m.set("i32", Value::i32(-2000000000));
  m.set("u64", Value::u64(std::numeric_limits<uint64_t>::max()));
  m.set("i64", {ValueType::INT64, std::numeric_limits<int64_t>::min()});
  m.set("f32", Value::f32(-1.25f));
  m.set("f64", {ValueType::FLOAT64, 3.141592653589793});
  m.set("yes", Value::boolean(true));
  m.set("no", Value::boolean(false));
  m.set("str", Value::str("héllo\nworld"));
  m.set("empty_str", Value::str(""));
  m.set("strings", Value::strings({"a", "", "long string with spaces"}));
  m.set("i32s", Value::i32s({1, -2, 3}));
  m.set("f32s", Value::f32s({0.5f, -0.25f}));
  m.set("empty_arr", Value::array(ValueType::UINT64, {}));
  m.set("u8s", Value::array(ValueType::UINT8,
                            {{ValueType::UINT8, uint64_t{1}}, {ValueType::UINT8, uint64_t{200}}}));
  m.set("bools", Value::array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)}));
  m.set("nested", Value::array(ValueType::ARRAY, {Value::i32s({1, 2}), Value::strings({"x", "y"}),
                                                  Value::array(ValueType::FLOAT32, {})}));
  m.set("deep",
        Value::array(ValueType::ARRAY, {Value::array(ValueType::ARRAY, {Value::f32s({1.0f})})}));
  return m;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

TEST(GgufRoundTrip, EveryValueType) {
  Writer w;
  w.meta() = every_value_type();
  const std::vector<uint8_t> bytes = w.to_bytes();
  const File f = File::parse(bytes, "mem.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_TRUE(f.tensors().empty());
  const Metadata expected = every_value_type();
  ASSERT_EQ(f.meta().all().size(), expected.all().size());
  for (const auto& [key, value] : expected.all()) {
    const Value* got = f.meta().find(key);
    ASSERT_NE(got, nullptr) << key;
    expect_same_value(value, *got, key);
  }
  EXPECT_FALSE(f.meta().has("general.alignment"));  // the writer adds nothing of its own
}

TEST(GgufRoundTrip, TensorsOfSeveralTypes) {
  Writer w;
  w.meta().set("general.name", Value::str("tiny"));
  const auto f32 = pattern(4 * 3 * 2, 1);          // F32 [3, 2]
  const auto q8 = pattern(34 * 2 * 3, 2);          // Q8_0 [64, 3]
  const auto q1 = pattern(18 * 1 * 2 * 2 * 1, 3);  // Q1_0 [128, 2, 2, 1]
  w.add_tensor("a.f32", Type::F32, {3, 2}, f32);
  w.add_tensor("b.q8", Type::Q8_0, {64, 3}, q8);
  w.add_tensor("c.q1", Type::Q1_0, {128, 2, 2, 1}, [&](std::span<uint8_t> out) {
    ASSERT_EQ(out.size(), q1.size());
    std::copy(q1.begin(), q1.end(), out.begin());
  });
  const std::vector<uint8_t> bytes = w.to_bytes();
  const File f = File::parse(bytes, "mem.gguf");
  ASSERT_EQ(f.tensors().size(), 3u);

  const std::vector<std::pair<std::string, const std::vector<uint8_t>*>> want = {
      {"a.f32", &f32}, {"b.q8", &q8}, {"c.q1", &q1}};
  for (const auto& [name, data] : want) {
    const TensorInfo& t = f.tensor(name);
    ASSERT_EQ(t.size, data->size()) << name;
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.size), *data) << name;
    EXPECT_EQ(t.offset % 32, 0u) << name;
    EXPECT_EQ((t.data - bytes.data()) % 32, 0) << name;
  }
  EXPECT_EQ(f.tensor("b.q8").type, Type::Q8_0);
  EXPECT_EQ(f.tensor("c.q1").ne, (std::vector<int64_t>{128, 2, 2, 1}));
  EXPECT_EQ(f.tensor("c.q1").n_elements(), 512);
  EXPECT_EQ(f.tensor("c.q1").shape_str(), "[128, 2, 2, 1]");
  EXPECT_EQ(f.find_tensor("missing"), nullptr);
  expect_contains(error_of([&] { f.tensor("missing"); }), {"mem.gguf", "missing"});
  // No trailing padding: the last tensor ends the file.
  const TensorInfo& last = f.tensors().back();
  EXPECT_EQ(last.data + last.size, bytes.data() + bytes.size());
}

class GgufAlignment : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufAlignment, OffsetsFollowGeneralAlignment) {
  const uint32_t alignment = GetParam();
  Writer w;
  w.meta().set("general.alignment", Value::u32(alignment));
  w.add_tensor("x", Type::F32, {3}, pattern(12, 5));
  w.add_tensor("y", Type::Q8_0, {32}, pattern(34, 6));
  w.add_tensor("z", Type::F16, {5}, pattern(10, 7));
  const std::vector<uint8_t> bytes = w.to_bytes();
  const File f = File::parse(bytes, "mem.gguf");
  EXPECT_EQ(f.alignment(), alignment);
  uint64_t prev_end = 0;
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.offset % alignment, 0u) << t.name;
    EXPECT_EQ((t.data - bytes.data()) % alignment, 0) << t.name;
    EXPECT_GE(t.offset, prev_end) << t.name;
    EXPECT_LT(t.offset - prev_end, std::max<uint64_t>(alignment, 1)) << t.name;
    prev_end = t.offset + t.size;
  }
  const auto align_up = [&](uint64_t x) { return (x + alignment - 1) / alignment * alignment; };
  EXPECT_EQ(f.tensor("z").offset, align_up(align_up(12) + 34));
  EXPECT_EQ(std::vector<uint8_t>(f.tensor("y").data, f.tensor("y").data + 34), pattern(34, 6));
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufAlignment, ::testing::Values(1u, 32u, 64u, 4096u));

TEST(GgufWriter, RejectsBadInput) {
  Writer w;
  w.add_tensor("t", Type::F32, {4}, pattern(16, 0));
  expect_contains(error_of([&] { w.add_tensor("t", Type::F32, {4}, pattern(16, 0)); }),
                  {"'t'", "twice"});
  expect_contains(error_of([&] { w.add_tensor("q", Type::Q8_0, {33}, pattern(34, 0)); }),
                  {"'q'", "33", "block size 32"});
  expect_contains(error_of([&] { w.add_tensor("s", Type::F32, {4}, pattern(15, 0)); }),
                  {"'s'", "15 bytes", "needs 16"});
  expect_contains(error_of([&] {
                    w.add_tensor("d", Type::F32, {1, 1, 1, 1, 1}, Writer::Filler{});
                  }),
                  {"'d'", "5 dimensions"});
  expect_contains(error_of([&] { w.add_tensor("n", Type::F32, {-4}, Writer::Filler{}); }),
                  {"'n'", "negative"});
  expect_contains(error_of([&] {
                    w.add_tensor("o", Type::F32, {1LL << 40, 1LL << 40}, Writer::Filler{});
                  }),
                  {"'o'", "overflows"});

  Writer bad_align;
  bad_align.meta().set("general.alignment", Value::u32(48));
  expect_contains(error_of([&] { bad_align.to_bytes(); }), {"general.alignment", "48"});
  bad_align.meta().set("general.alignment", Value::u64(64));
  expect_contains(error_of([&] { bad_align.to_bytes(); }), {"general.alignment", "uint64"});

  Writer mixed;
  mixed.meta().set("arr", Value::array(ValueType::INT32, {Value::i32(1), Value::str("x")}));
  expect_contains(error_of([&] { mixed.to_bytes(); }), {"arr[1]", "string", "int32"});
  Writer narrow;
  narrow.meta().set("small", {ValueType::UINT8, uint64_t{300}});
  expect_contains(error_of([&] { narrow.to_bytes(); }), {"small", "uint8", "out of range"});
}

TEST(GgufMetadata, TypedGetters) {
  Writer w;
  w.meta() = every_value_type();
  const std::vector<uint8_t> bytes = w.to_bytes();
  const File f = File::parse(bytes, "mem.gguf");
  const Metadata& m = f.meta();

  EXPECT_EQ(m.get_int("u8"), 255);
  EXPECT_EQ(m.get_int("i8"), -128);
  EXPECT_EQ(m.get_int("u16"), 65535);
  EXPECT_EQ(m.get_int("i16"), -32768);
  EXPECT_EQ(m.get_int("u32"), 4000000000);
  EXPECT_EQ(m.get_int("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(m.get_int("absent", 7), 7);
  EXPECT_EQ(m.get_float("f32"), -1.25);
  EXPECT_EQ(m.get_float("f64"), 3.141592653589793);
  EXPECT_EQ(m.get_float("i32"), -2000000000.0);
  EXPECT_EQ(m.get_float("absent", 0.5), 0.5);
  EXPECT_TRUE(m.get_bool("yes", false));
  EXPECT_FALSE(m.get_bool("no", true));
  EXPECT_TRUE(m.get_bool("absent", true));
  EXPECT_EQ(m.get_string("str"), "héllo\nworld");
  EXPECT_EQ(m.get_string("absent", "fb"), "fb");
  EXPECT_EQ(m.get_int_array("i32s"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(m.get_int_array("u8s"), (std::vector<int64_t>{1, 200}));
  EXPECT_EQ(m.get_string_array("strings"),
            (std::vector<std::string>{"a", "", "long string with spaces"}));
  EXPECT_EQ(m.get_array("nested").items.size(), 3u);

  expect_contains(error_of([&] { m.get_int("str"); }), {"'str'", "integer", "string"});
  expect_contains(error_of([&] { m.get_int("str", 1); }), {"'str'", "integer", "string"});
  expect_contains(error_of([&] { m.get_int("u64"); }), {"'u64'", "does not fit in int64"});
  expect_contains(error_of([&] { m.get_int("f32"); }), {"'f32'", "integer", "float32"});
  expect_contains(error_of([&] { m.get_int("missing"); }), {"'missing'", "missing"});
  expect_contains(error_of([&] { m.get_float("yes"); }), {"'yes'", "float", "bool"});
  expect_contains(error_of([&] { m.get_bool("u8", false); }), {"'u8'", "bool", "uint8"});
  expect_contains(error_of([&] { m.get_string("i32s"); }), {"'i32s'", "string", "array"});
  expect_contains(error_of([&] { m.get_string("missing"); }), {"'missing'", "missing"});
  expect_contains(error_of([&] { m.get_array("u8"); }), {"'u8'", "array", "uint8"});
  expect_contains(error_of([&] { m.get_int_array("strings"); }),
                  {"'strings'", "integer array", "string"});
  expect_contains(error_of([&] { m.get_string_array("i32s"); }),
                  {"'i32s'", "string array", "int32"});
  expect_contains(error_of([&] { m.get_int_array("nested"); }), {"'nested'", "array of array"});

  Metadata huge;
  huge.set("big", Value::array(ValueType::UINT64, {Value::u64(1), Value::u64(1ULL << 63)}));
  expect_contains(error_of([&] { huge.get_int_array("big"); }), {"big[1]", "int64"});
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gdn_gguf_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

using GgufFile = TempDir;

TEST_F(GgufFile, WriteThenOpenMapsTheFile) {
  Writer w;
  w.meta() = every_value_type();
  w.meta().set("general.alignment", Value::u32(64));
  w.add_tensor("w", Type::Q8_0, {32, 4}, pattern(34 * 4, 9));
  w.add_tensor("b", Type::F32, {7}, pattern(28, 4));
  const std::string p = path("model.gguf");
  w.write(p);
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
  // write() streams tensor by tensor and to_bytes() fills one buffer: the same bytes.
  std::ifstream in(p, std::ios::binary);
  const std::vector<uint8_t> written{std::istreambuf_iterator<char>(in), {}};
  EXPECT_EQ(written, w.to_bytes());

  File f = File::open(p);
  EXPECT_EQ(f.path(), p);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.file_size(), std::filesystem::file_size(p));
  EXPECT_EQ(f.meta().get_string("str"), "héllo\nworld");
  const File moved = std::move(f);  // the mapping moves with the File
  const TensorInfo& t = moved.tensor("w");
  EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.size), pattern(34 * 4, 9));
  EXPECT_EQ(moved.tensor("b").offset, 192u);
}

TEST_F(GgufFile, FailedWriteLeavesOldFileAndNoTemp) {
  const std::string p = path("model.gguf");
  Writer good;
  good.meta().set("v", Value::u32(1));
  good.write(p);
  Writer bad;
  bad.meta().set("v", Value::u32(2));
  bad.add_tensor("t", Type::F32, {4}, [](std::span<uint8_t>) { fail("filler gave up"); });
  expect_contains(error_of([&] { bad.write(p); }), {"filler gave up"});
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
  EXPECT_EQ(File::open(p).meta().get_int("v"), 1);
}

TEST_F(GgufFile, OpenErrorsCarryErrnoText) {
  expect_contains(error_of([&] { File::open(path("nope.gguf")); }),
                  {"nope.gguf", "No such file or directory"});
  expect_contains(error_of([&] { File::open(dir_.string()); }), {"Is a directory"});
  const std::string empty = path("empty.gguf");
  {
    std::FILE* fp = std::fopen(empty.c_str(), "wb");
    std::fclose(fp);
  }
  expect_contains(error_of([&] { File::open(empty); }), {"empty.gguf", "empty"});
  Writer w;
  expect_contains(error_of([&] { w.write(path("no/such/dir/x.gguf")); }),
                  {"x.gguf.tmp", "No such file or directory"});
}

TEST_F(GgufFile, OpenReportsBadContentWithPath) {
  const std::string p = path("garbage.gguf");
  std::FILE* fp = std::fopen(p.c_str(), "wb");
  std::fputs("not gguf at all", fp);
  std::fclose(fp);
  expect_contains(error_of([&] { File::open(p); }), {"garbage.gguf", "magic", "offset 0"});
}

// ---- Hand-made malformed files: one defect each. The header is 24 bytes, so the first
// key or tensor info starts at byte offset 24.

constexpr uint32_t kF32 = 0, kQ8_0 = 8;
constexpr uint32_t kString = 8, kArray = 9;

// `levels` arrays, each the single element of the one above; the innermost is empty.
Bytes nested_arrays(int levels) {
  Bytes b;
  b.header(0, 1).str("deep").u32(kArray);
  for (int i = 1; i < levels; ++i) b.u32(kArray).u64(1);
  return b.u32(0).u64(0);
}

TEST(GgufMalformed, Header) {
  expect_parse_error(Bytes(), {"header", "truncated", "magic", "offset 0"});
  expect_parse_error(Bytes().u32(0x58554747).u32(3).u64(0).u64(0), {"magic", "offset 0"});
  expect_parse_error(Bytes().header(0, 0, 1), {"version 1", "offset 4"});
  expect_parse_error(Bytes().header(0, 0, 4), {"version 4", "offset 4"});
  expect_parse_error(Bytes().u32(0x46554747).u32(3).u32(0), {"truncated", "offset 8"});
  expect_parse_error(Bytes().header(0, 1ULL << 63).zeros(100), {"key/value", "offset 16"});
  expect_parse_error(Bytes().header(~0ULL, 0).zeros(100), {"tensor infos", "offset 8"});
  // Each tensor info needs >= 32 bytes, so 2 cannot fit in 40.
  expect_parse_error(Bytes().header(2, 0).zeros(40), {"tensor infos", "offset 8"});
  EXPECT_NO_THROW(File::parse(Bytes().header(0, 0, 2).bytes(), "v2.gguf"));
}

TEST(GgufMalformed, Keys) {
  expect_parse_error(Bytes().header(0, 1).u64(1000).zeros(20),
                     {"key #0", "key length 1000", "offset 24"});
  expect_parse_error(Bytes().header(0, 2).kv_u32("k", 1).kv_u32("k", 2),
                     {"key 'k'", "duplicate", "offset 41"});
  expect_parse_error(Bytes().header(0, 1).str("k").u32(13).u32(0),
                     {"key 'k'", "unknown value type 13", "offset 33"});
  expect_parse_error(Bytes().header(0, 1).str("name").u32(kString).u64(1ULL << 62).zeros(8),
                     {"key 'name'", "length 4611686018427387904", "offset 40"});
  expect_parse_error(Bytes().header(0, 1).str("b").u32(7).u8(2), {"key 'b'", "bool", "offset 37"});
  expect_parse_error(Bytes().header(0, 1).str("x").u32(kString).u64(5).zeros(4),
                     {"key 'x'", "length 5", "offset 37"});
  expect_parse_error(Bytes().header(0, 1).str("f").u32(12).u32(0), {"key 'f'", "truncated"});
}

TEST(GgufMalformed, Arrays) {
  expect_parse_error(Bytes().header(0, 1).str("arr").u32(kArray).u32(5).u64(1ULL << 61).u32(1),
                     {"key 'arr'", "2305843009213693952 int32 values cannot fit", "offset 43"});
  expect_parse_error(Bytes().header(0, 1).str("arr").u32(kArray).u32(0).u64(~0ULL).u32(1),
                     {"key 'arr'", "cannot fit", "offset 43"});
  expect_parse_error(Bytes().header(0, 1).str("arr").u32(kArray).u32(99).u64(0),
                     {"key 'arr'", "array element type 99", "offset 39"});
  expect_parse_error(
      Bytes().header(0, 1).str("toks").u32(kArray).u32(kString).u64(2).str("a").u64(1000),
      {"key 'toks'[1]", "string length 1000", "offset 61"});
  expect_parse_error(
      Bytes().header(0, 1).str("aa").u32(kArray).u32(kArray).u64(2).u32(0).u64(0).u32(44).u64(0),
      {"key 'aa'[1]", "array element type 44", "offset 62"});
  EXPECT_NO_THROW(File::parse(nested_arrays(8).bytes(), "ok.gguf"));
  expect_parse_error(nested_arrays(9), {"key 'deep'[0][0][0][0][0][0][0][0]", "nested"});
  expect_parse_error(nested_arrays(100000), {"key 'deep'", "nested"});

  Value deep = Value::array(ValueType::UINT8, {});
  for (int i = 1; i < 9; ++i) deep = Value::array(ValueType::ARRAY, {deep});
  Writer w;
  w.meta().set("deep", deep);
  expect_contains(error_of([&] { w.to_bytes(); }), {"deep", "nested"});
}

TEST(GgufMalformed, Alignment) {
  const std::string key = "general.alignment";
  expect_parse_error(Bytes().header(0, 1).str(key).u32(10).u64(64),
                     {"key 'general.alignment'", "uint32", "uint64", "offset 49"});
  expect_parse_error(Bytes().header(0, 1).kv_u32(key, 48), {"general.alignment", "48", "power"});
  expect_parse_error(Bytes().header(0, 1).kv_u32(key, 0), {"general.alignment", "power"});
  // With alignment 1 any offset is aligned.
  const File f = File::parse(
      Bytes().header(1, 1).kv_u32(key, 1).tensor("t", {1}, kF32, 3).zeros(7).bytes(), "a1.gguf");
  EXPECT_EQ(f.tensor("t").offset, 3u);
}

TEST(GgufMalformed, TensorInfos) {
  expect_parse_error(Bytes().header(1, 0).u64(1ULL << 40).zeros(40),
                     {"tensor #0", "tensor name length 1099511627776", "offset 24"});
  expect_parse_error(
      Bytes().header(2, 0).tensor("t", {4}, kF32, 0).tensor("t", {4}, kF32, 32).pad(32).zeros(64),
      {"tensor 't'", "duplicate", "offset 57"});
  expect_parse_error(Bytes().header(1, 0).tensor("t", {}, kF32, 0).zeros(64),
                     {"tensor 't'", "n_dims 0", "offset 33"});
  expect_parse_error(Bytes().header(1, 0).tensor("t", {1, 1, 1, 1, 1}, kF32, 0).zeros(64),
                     {"tensor 't'", "n_dims 5", "offset 33"});
  expect_parse_error(Bytes().header(1, 0).tensor("t", {4, -1}, kF32, 0).zeros(64),
                     {"tensor 't'", "dimension 1 is negative", "offset 45"});
  expect_parse_error(Bytes().header(1, 0).tensor("big", {1LL << 32, 1LL << 32}, kF32, 0).zeros(64),
                     {"tensor 'big'", "element count", "overflows", "offset 39"});
  expect_parse_error(Bytes().header(1, 0).tensor("huge", {1LL << 62}, kF32, 0).zeros(64),
                     {"tensor 'huge'", "byte size", "overflows"});
  expect_parse_error(Bytes().header(1, 0).tensor("t", {4}, 99, 0).zeros(64),
                     {"tensor 't'", "unknown ggml type id 99", "offset 45"});
  expect_parse_error(Bytes().header(1, 0).tensor("q", {33}, kQ8_0, 0).zeros(64),
                     {"tensor 'q'", "33", "q8_0 block size 32", "offset 37"});
  expect_parse_error(Bytes().header(1, 0).tensor("t", {4}, kF32, 16).zeros(64),
                     {"tensor 't'", "16", "alignment 32", "offset 49"});
  // Truncated inside the info: the offset field at byte 57 is cut short.
  Bytes cut = Bytes().header(1, 0).tensor("t", {4, 4}, kF32, 0);
  std::vector<uint8_t> bytes = cut.bytes();
  bytes.resize(59);
  const std::string msg = parse_error(bytes);
  expect_contains(msg, {"bad.gguf", "tensor 't'", "truncated", "offset 57"});
}

TEST(GgufMalformed, TensorData) {
  // Info ends at 24 + 33 = 57; data starts at 64; 16 of the 32 bytes are there.
  expect_parse_error(Bytes().header(1, 0).tensor("t", {8}, kF32, 0).pad(32).zeros(16),
                     {"tensor 't'", "32 bytes", "offset 0", "past the end", "80 bytes",
                      "starts at 64", "byte offset 49"});
  expect_parse_error(Bytes().header(1, 0).tensor("far", {1}, kF32, ~0ULL << 5).pad(32).zeros(64),
                     {"tensor 'far'", "18446744073709551584", "past the end"});
  // No room even for the padding before the data section.
  expect_parse_error(Bytes().header(1, 0).tensor("t", {0}, kF32, 0),
                     {"tensor data", "past the end"});
  // Zero-sized dimensions are legal (llama.cpp accepts them) and take no bytes.
  const File f =
      File::parse(Bytes().header(1, 0).tensor("e", {0, 4}, kF32, 0).pad(32).bytes(), "e.gguf");
  EXPECT_EQ(f.tensor("e").size, 0u);
  EXPECT_EQ(f.tensor("e").n_elements(), 0);
}

}  // namespace
}  // namespace gdn::gguf
