// Property tests for the model loader and the CPU forward behind it: whatever hyper-parameters a
// GGUF file declares, it either loads into a model whose forward gives finite logits or is
// refused with a gdn::Error — never a crash, a sanitizer report, another exception or NaN
// logits (a silent wrong answer). scripts/test.sh runs this binary under ASan + UBSan, halting at
// the first report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "cpu/cpu_executor.h"
#include "fuzz_cases.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
#include "model/tensors.h"
#include "model/weights.h"
#include "quant/quant.h"
#include "quant/types.h"
#include "synth/synth.h"

namespace gdn {
namespace {

using gguf::Value;
using model::HParams;

// Files whose weights would exceed this are not generated (the mutated shape is still parsed).
constexpr uint64_t kMaxModelBytes = 32u << 20;

// Values that break integer fields: zero, negative, off by one, huge and overflowing, and the
// wrong types. A float key gets the non-finite and non-positive values too.
std::vector<Value> hostile_values(const Value& original) {
  std::vector<Value> v = {
      Value::u32(0),
      Value::u32(1),
      Value::u32(2),
      Value::u32(3),
      Value::i32(-1),
      Value::i32(std::numeric_limits<int32_t>::min()),
      Value::u32(std::numeric_limits<uint32_t>::max()),
      Value::u64(uint64_t{1} << 32),
      Value::u64(uint64_t{1} << 62),
      Value::u64(std::numeric_limits<uint64_t>::max()),
      {gguf::ValueType::INT64, std::numeric_limits<int64_t>::min()},
      Value::f32(0.5f),
      Value::f32(0.0f),
      Value::f32(-1.0f),
      Value::f32(std::numeric_limits<float>::quiet_NaN()),
      Value::f32(std::numeric_limits<float>::infinity()),
      Value::f32(1e30f),
      Value::f32(1e-30f),
      Value::str("4"),
      Value::boolean(true),
      Value::i32s({}),
      Value::i32s({1, -1, 0}),
  };
  if (const auto* u = std::get_if<uint64_t>(&original.data)) {
    for (uint64_t n : {*u + 1, *u * 2, *u / 2, *u * 64}) v.push_back(Value::u32(uint32_t(n)));
  }
  if (const auto* a = std::get_if<gguf::Array>(&original.data)) {
    // A list one entry short and one entry long, and every flag flipped.
    gguf::Array shorter = *a, longer = *a, flipped = *a;
    if (!shorter.items.empty()) shorter.items.pop_back();
    if (!longer.items.empty()) longer.items.push_back(longer.items.front());
    for (Value& x : flipped.items) {
      if (auto* b = std::get_if<bool>(&x.data)) *b = !*b;
    }
    for (gguf::Array* m : {&shorter, &longer, &flipped}) v.push_back({gguf::ValueType::ARRAY, *m});
  }
  return v;
}

std::string describe(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return fmt::format("{}", *u);
  if (const auto* i = std::get_if<int64_t>(&v.data)) return fmt::format("{}", *i);
  if (const auto* d = std::get_if<double>(&v.data)) return fmt::format("{}", *d);
  if (const auto* b = std::get_if<bool>(&v.data)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&v.data)) return "\"" + *s + "\"";
  return fmt::format("array of {}", std::get<gguf::Array>(v.data).items.size());
}

// Weight bytes of the model hp describes, or nothing when a size overflows or is too large to
// generate here.
std::optional<uint64_t> model_bytes(const HParams& hp) {
  uint64_t total = 0;
  for (const model::TensorSpec& s : model::tensor_specs(hp)) {
    uint64_t n = 1;
    for (int64_t d : s.ne) {
      if (d < 0 || (d > 0 && n > kMaxModelBytes / uint64_t(d))) return std::nullopt;
      n *= uint64_t(d);
    }
    total += n * sizeof(float);
    if (total > kMaxModelBytes) return std::nullopt;
  }
  return total;
}

// The tiny preset with a smaller vocabulary (its embedding and output are most of its bytes, and
// each case writes, parses and runs a whole file).
HParams fuzz_shape() {
  HParams hp = synth::preset("tiny");
  hp.n_vocab = 256;
  return hp;
}

// The fuzz model's file, its weights f32.
std::vector<uint8_t> tiny_bytes() {
  synth::Options opts;
  opts.type = quant::Type::F32;
  gguf::Writer w;
  synth::add_model(w, fuzz_shape(), opts);
  return w.to_bytes();
}

// A writer holding f's metadata and its tensors' bytes, all but `left_out`. The bytes are read
// from f when the file is written, so f must outlive the writer (no copy per fuzz case).
gguf::Writer copy_of(const gguf::File& f, const gguf::TensorInfo* left_out = nullptr) {
  gguf::Writer w;
  for (const auto& [key, value] : f.meta().all()) w.meta().set(key, value);
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (&t != left_out) {
      w.add_tensor(t.name, t.type, t.ne, [&t](std::span<uint8_t> out) {
        std::copy(t.data, t.data + t.size, out.begin());
      });
    }
  }
  return w;
}

// The loader over one file: refused with a gdn::Error, or a model that runs on the CPU with
// finite logits.
class Harness : public testing::FuzzCases {
 public:
  // Returns whether the file loaded.
  bool check(const gguf::Writer& w, const std::string& what) {
    return run(what, [&] {
      const std::vector<uint8_t> bytes = w.to_bytes();
      auto file = std::make_shared<const gguf::File>(gguf::File::parse(bytes, "fuzz.gguf"));
      forward(model::Model::load(file), what);
    });
  }

 private:
  // Two tokens, the first and the last id: the second token reads the first one's state and
  // cache.
  void forward(const model::Model& m, const std::string& what) {
    cpu::CpuExecutor ex(m, {.n_slots = 1, .n_ctx = 4, .n_threads = 1});
    const std::vector<int32_t> ids = {0, static_cast<int32_t>(m.hp.n_vocab - 1)};
    for (float v : ex.forward_view(ids, 0, true)) {
      if (!std::isfinite(v)) return fail(what, "the model loaded but its logits are not finite");
    }
  }
};

// Every metadata key of the tiny model set to every hostile value, twice: over the tiny model's
// own tensors (the loader must notice the mismatch), and over tensors generated for the
// hyper-parameters the mutated metadata describes (a consistent file with odd sizes, which must
// also run or be refused).
TEST(ModelFuzz, HostileHyperParametersLoadAndRunOrFailCleanly) {
  const std::vector<uint8_t> bytes = tiny_bytes();
  const gguf::File tiny = gguf::File::parse(bytes, "tiny.gguf");
  const gguf::Metadata& original = tiny.meta();
  synth::Options opts;
  opts.type = quant::Type::F32;
  // The alignment decides where the writer puts each tensor: 1 leaves f32 data unaligned.
  gguf::Metadata keys = original;
  keys.set("general.alignment", Value::u32(32));
  Harness h;
  for (const auto& [key, value] : keys.all()) {
    std::vector<std::optional<Value>> mutations = {std::nullopt};  // the key erased
    for (Value& v : hostile_values(value)) mutations.emplace_back(std::move(v));
    for (const std::optional<Value>& mutation : mutations) {
      const std::string what = mutation ? fmt::format("{} = {}", key, describe(*mutation))
                                        : fmt::format("{} erased", key);
      auto apply = [&](gguf::Metadata& meta) {
        mutation ? meta.set(key, *mutation) : meta.erase(key);
      };
      gguf::Writer own = copy_of(tiny);
      apply(own.meta());
      h.check(own, what + " (the tiny model's tensors)");

      gguf::Metadata meta = original;
      apply(meta);
      HParams hp;
      try {
        hp = HParams::from_gguf(meta);
        hp.n_vocab = fuzz_shape().n_vocab;
        hp.validate();
      } catch (const Error&) {
        continue;  // no shape to generate tensors for; the case above covers the refusal
      }
      if (!model_bytes(hp)) continue;
      gguf::Writer consistent;
      synth::add_model(consistent, hp, opts);
      apply(consistent.meta());
      h.check(consistent, what + " (tensors of that shape)");
    }
  }
  std::printf("[ fuzz     ] %d files, %d loaded and ran\n", h.cases(), h.accepted());
  EXPECT_GT(h.accepted(), 2 * int(original.all().size()));  // the harmless values do load and run
}

constexpr quant::Type kTypes[] = {quant::Type::F32,  quant::Type::F16,  quant::Type::BF16,
                                  quant::Type::Q8_0, quant::Type::Q4_0, quant::Type::Q1_0,
                                  quant::Type::Q2_0, quant::Type::PQ2_0};

// One tensor of a parsed file, its values re-encoded in `type` and its shape replaced by `ne`
// (the values repeat or are cut to fill it).
void add_reencoded(gguf::Writer& w, const gguf::TensorInfo& t, quant::Type type,
                   std::vector<int64_t> ne) {
  std::vector<float> values(static_cast<size_t>(t.n_elements()));
  const int64_t n_in = t.ne.empty() ? 1 : t.ne[0];
  for (int64_t r = 0; r * n_in < t.n_elements(); ++r) {
    quant::dequantize_row(t.type, t.data + r * quant::row_bytes(t.type, n_in),
                          values.data() + r * n_in, n_in);
  }
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  const int64_t row = ne.empty() ? 1 : ne[0];
  const size_t row_size = quant::row_bytes(type, row);
  std::vector<uint8_t> bytes(row_size * static_cast<size_t>(row > 0 ? n / row : 0));
  std::vector<float> src(static_cast<size_t>(row));
  for (int64_t r = 0; r * row < n; ++r) {
    for (int64_t i = 0; i < row; ++i) src[i] = values[(r * row + i) % values.size()];
    quant::quantize_row(type, src.data(), bytes.data() + r * row_size, row);
  }
  w.add_tensor(t.name, type, std::move(ne), std::move(bytes));
}

// Shapes a tensor must be refused with: each dimension off by one way or another, one dimension
// dropped or added.
std::vector<std::vector<int64_t>> hostile_shapes(const std::vector<int64_t>& ne) {
  std::vector<std::vector<int64_t>> out;
  for (size_t i = 0; i < ne.size(); ++i) {
    for (int64_t d : {ne[i] + 1, ne[i] * 2, ne[i] / 2, int64_t{0}}) {
      std::vector<int64_t> s = ne;
      s[i] = d;
      out.push_back(s);
    }
  }
  out.push_back(std::vector<int64_t>(ne.begin(), ne.end() - 1));
  std::vector<int64_t> more = ne;
  more.push_back(2);
  out.push_back(more);
  return out;
}

// Every tensor of the tiny model stored in every type and in hostile shapes, the rest of the file
// unchanged: a type the loader takes must run (the CPU computes every format), anything else must
// be refused by name.
TEST(ModelFuzz, EveryTensorRetypedOrReshapedLoadsAndRunsOrFailsCleanly) {
  const std::vector<uint8_t> bytes = tiny_bytes();
  const gguf::File tiny = gguf::File::parse(bytes, "tiny.gguf");
  Harness h;
  for (const gguf::TensorInfo& target : tiny.tensors()) {
    auto file_with = [&](quant::Type type, const std::vector<int64_t>& ne) {
      gguf::Writer w = copy_of(tiny, &target);
      add_reencoded(w, target, type, ne);
      return w;
    };
    for (quant::Type type : kTypes) {
      const int64_t block = quant::type_info(type).block_elems;
      if (target.ne.empty() || target.ne[0] % block != 0) continue;  // not storable that way
      h.check(file_with(type, target.ne),
              fmt::format("{} stored as {}", target.name, quant::type_info(type).name));
    }
    for (const std::vector<int64_t>& ne : hostile_shapes(target.ne)) {
      if (ne.empty() || ne[0] % quant::type_info(target.type).block_elems != 0) continue;
      EXPECT_FALSE(h.check(file_with(target.type, ne),
                           fmt::format("{} shaped [{}]", target.name, fmt::join(ne, ", "))))
          << target.name << " loaded in shape [" << fmt::format("{}", fmt::join(ne, ", ")) << "]";
    }
  }
  std::printf("[ fuzz     ] %d files, %d loaded and ran\n", h.cases(), h.accepted());
  EXPECT_GT(h.accepted(), int(tiny.tensors().size()));  // at least every tensor in its own type
}

}  // namespace
}  // namespace gdn
