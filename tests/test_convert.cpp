// HF -> GGUF converter: safetensors parsing, config checks, the V-head reorder, and an
// end-to-end conversion of a synthetic checkpoint the test writes itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "convert/hf_convert.h"
#include "convert/hf_tokenizer.h"
#include "convert/json_file.h"
#include "convert/safetensors.h"
#include "error_of.h"
#include "fuzz_cases.h"
#include "gguf/gguf.h"
#include "model/tensors.h"
#include "quant/quant.h"

namespace fs = std::filesystem;
using gdn::convert::Checkpoint;
using gdn::convert::SafetensorsFile;
using gdn::testing::error_of;
using nlohmann::json;

namespace {

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / fmt::format("gdn_test_convert_{}_{}_{}", ::getpid(),
                                                    info->test_suite_name(), info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct StEntry {
  std::string name;
  std::string dtype;  // as written in the header
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

StEntry f32_tensor(std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
  std::vector<uint8_t> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return {std::move(name), "F32", std::move(shape), std::move(bytes)};
}

void write_file(const fs::path& path, const std::string& header, const std::vector<uint8_t>& data) {
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

// The header and the data section of a well-formed safetensors file.
std::pair<json, std::vector<uint8_t>> safetensors_parts(const std::vector<StEntry>& entries) {
  json header = json::object();
  std::vector<uint8_t> data;
  for (const StEntry& e : entries) {
    header[e.name] = {{"dtype", e.dtype},
                      {"shape", e.shape},
                      {"data_offsets", {data.size(), data.size() + e.bytes.size()}}};
    data.insert(data.end(), e.bytes.begin(), e.bytes.end());
  }
  header["__metadata__"] = {{"format", "pt"}};
  return {header, data};
}

// A well-formed safetensors file; `edit` may change the header before it is written.
void write_safetensors(const fs::path& path, const std::vector<StEntry>& entries,
                       const std::function<void(json&)>& edit = {}) {
  auto [header, data] = safetensors_parts(entries);
  if (edit) edit(header);
  write_file(path, header.dump(), data);
}

#define EXPECT_ERROR_HAS(expr, ...)                                                      \
  do {                                                                                   \
    const std::string msg_ = error_of([&] { (void)(expr); });                            \
    EXPECT_FALSE(msg_.empty()) << #expr " did not throw";                                \
    for (const char* part_ : {__VA_ARGS__}) {                                            \
      EXPECT_NE(msg_.find(part_), std::string::npos) << msg_ << "\n   lacks: " << part_; \
    }                                                                                    \
  } while (0)

// ------------------------------------------------------------------ safetensors

TEST(Safetensors, ReadsTensorsAndMetadata) {
  TempDir dir;
  const fs::path file = dir.path() / "model.safetensors";
  const uint16_t bf16[3] = {gdn::quant::f32_to_bf16(1.5f), gdn::quant::f32_to_bf16(-2.0f),
                            gdn::quant::f32_to_bf16(0.25f)};
  std::vector<uint8_t> bf16_bytes(6);
  std::memcpy(bf16_bytes.data(), bf16, 6);
  write_safetensors(file,
                    {f32_tensor("a.weight", {2, 2}, {1, 2, 3, 4}), {"b", "BF16", {3}, bf16_bytes}});
  const SafetensorsFile f = SafetensorsFile::open(file.string());
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto& a = f.tensors()[0].name == "a.weight" ? f.tensors()[0] : f.tensors()[1];
  const auto& b = f.tensors()[0].name == "a.weight" ? f.tensors()[1] : f.tensors()[0];
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 2}));
  float out[4];
  a.read_f32(1, 3, out);
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[2], 4.0f);
  b.read_f32(0, 3, out);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.25f);
  EXPECT_ERROR_HAS(a.read_f32(2, 3, out), "a.weight", "outside");
}

TEST(Safetensors, RefusesCorruptHeader) {
  TempDir dir;
  const fs::path file = dir.path() / "bad.safetensors";
  write_file(file, "{\"a\": [", {});
  EXPECT_ERROR_HAS(SafetensorsFile::open(file.string()), "bad.safetensors", "not a JSON object");

  std::ofstream(file, std::ios::binary | std::ios::trunc).write("\xff\xff\xff\xff\0\0\0\0{}", 10);
  EXPECT_ERROR_HAS(SafetensorsFile::open(file.string()), "bad.safetensors", "header length");

  std::ofstream(file, std::ios::binary | std::ios::trunc).write("abc", 3);
  EXPECT_ERROR_HAS(SafetensorsFile::open(file.string()), "bad.safetensors", "too short");
}

TEST(Safetensors, RefusesOffsetsOutOfRange) {
  TempDir dir;
  const fs::path file = dir.path() / "model.safetensors";
  write_safetensors(file, {f32_tensor("w", {2}, {1, 2})}, [](json& h) {
    h["w"]["data_offsets"] = {0, 16};
  });
  EXPECT_ERROR_HAS(SafetensorsFile::open(file.string()), "'w'", "[0, 16]", "8 bytes");

  write_safetensors(file, {f32_tensor("w", {2}, {1, 2})}, [](json& h) {
    h["w"]["data_offsets"] = {8, 4};
  });
  EXPECT_ERROR_HAS(SafetensorsFile::open(file.string()), "'w'", "[8, 4]");
}

TEST(Safetensors, DtypeNamesAndSizesAsTheFormatWritesThem) {
  using gdn::convert::StDtype;
  EXPECT_STREQ(gdn::convert::st_dtype_name(StDtype::F32), "F32");
  EXPECT_STREQ(gdn::convert::st_dtype_name(StDtype::F16), "F16");
  EXPECT_STREQ(gdn::convert::st_dtype_name(StDtype::BF16), "BF16");
  EXPECT_EQ(gdn::convert::st_dtype_size(StDtype::F32), 4u);
  EXPECT_EQ(gdn::convert::st_dtype_size(StDtype::F16), 2u);
  EXPECT_EQ(gdn::convert::st_dtype_size(StDtype::BF16), 2u);
}

TEST(Safetensors, RefusesSizeMismatchAndUnknownDtype) {
  TempDir dir;
  const fs::path file = dir.path() / "model.safetensors";
  write_safetensors(file, {f32_tensor("w", {2}, {1, 2})}, [](json& h) { h["w"]["shape"] = {3}; });
  EXPECT_ERROR_HAS(SafetensorsFile::open(file.string()), "'w'", "F32", "[3]", "needs 12 bytes");
  write_safetensors(file, {{"h", "BF16", {2}, std::vector<uint8_t>(4)}},
                    [](json& h) { h["h"]["shape"] = {3}; });
  EXPECT_ERROR_HAS(SafetensorsFile::open(file.string()), "'h'", "BF16", "[3]", "needs 6 bytes");

  write_safetensors(file, {{"ids", "I64", {1}, std::vector<uint8_t>(8)}});
  EXPECT_ERROR_HAS(SafetensorsFile::open(file.string()), "'ids'", "I64");
}

// Property: whatever a safetensors header says, opening the file either fails with a gdn::Error
// or gives tensors whose data spans match their shapes and can be read whole.
class SafetensorsHarness : public gdn::testing::FuzzCases {
 public:
  explicit SafetensorsHarness(fs::path file) : file_(std::move(file)) {}

  void check(const std::string& header, const std::vector<uint8_t>& data, const std::string& what) {
    write_file(file_, header, data);
    check_file(what);
  }

  void check_file(const std::string& what) {
    run(what, [&] {
      const SafetensorsFile f = SafetensorsFile::open(file_.string());
      for (const gdn::convert::StTensor& t : f.tensors()) check_tensor(t, what);
    });
  }

 private:
  void check_tensor(const gdn::convert::StTensor& t, const std::string& what) {
    for (int64_t d : t.shape) {
      if (d < 0) return fail(what, "negative dimension in " + t.shape_str());
    }
    const int64_t n = t.n_elements();
    if (uint64_t(n) * gdn::convert::st_dtype_size(t.dtype) != t.data.size()) {
      return fail(what, "data span does not match shape " + t.shape_str());
    }
    std::vector<float> values(static_cast<size_t>(n));
    t.read_f32(0, n, values.data());
  }

  fs::path file_;
};

TEST(SafetensorsFuzz, HostileHeadersFailCleanly) {
  TempDir dir;
  SafetensorsHarness h(dir.path() / "fuzz.safetensors");
  const auto [seed, data] = safetensors_parts({
      f32_tensor("a", {2, 3}, {1, 2, 3, 4, 5, 6}),
      {"b", "BF16", {4}, std::vector<uint8_t>(8, 0x3f)},
      {"c", "F16", {1, 2, 2}, std::vector<uint8_t>(8, 0x3c)},
  });
  const json hostile[] = {nullptr,
                          -1,
                          1.5,
                          "x",
                          true,
                          json::array(),
                          json::object(),
                          {{"k", 1}},
                          {-1},
                          {0, -1},
                          {uint64_t{1} << 63, 0},
                          {uint64_t{1} << 40, uint64_t{1} << 40, 0},
                          {uint64_t{1} << 62, 4},
                          {~uint64_t{0}, 1},
                          {0, ~uint64_t{0}},
                          {24, 24},
                          {0, 24, 48},
                          json::array({json::array({1})}),
                          ~uint64_t{0}};
  // Every field of every entry, and every entry and the metadata as a whole, set to each value.
  for (const auto& [name, entry] : seed.items()) {
    std::vector<std::string> fields = {""};
    for (const auto& [field, value] : entry.items()) fields.push_back(field);
    for (const std::string& field : fields) {
      for (const json& v : hostile) {
        json header = seed;
        (field.empty() ? header[name] : header[name][field]) = v;
        h.check(header.dump(), data, fmt::format("{}.{} = {}", name, field, v.dump()));
        if (field == "shape") {  // with an empty span, so that only the shape can be wrong
          header[name]["data_offsets"] = {0, 0};
          h.check(header.dump(), data, fmt::format("{}.shape = {}, empty", name, v.dump()));
        }
      }
    }
  }
  // The header's text mutated byte by byte, and its length field set to hostile values.
  const std::string text = seed.dump();
  std::mt19937_64 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string t = text;
    for (int m = 0, n = 1 + int(rng() % 3); m < n; ++m) {
      const size_t at = rng() % t.size();
      switch (rng() % 3) {
        case 0:
          t[at] = static_cast<char>(rng());
          break;
        case 1:
          t.insert(at, 1, "{}[]\",:0-9e"[rng() % 12]);
          break;
        default:
          t.erase(at, 1);
      }
    }
    h.check(t, data, fmt::format("random header {}", i));
  }
  for (uint64_t n :
       {uint64_t{0}, uint64_t{1}, uint64_t(text.size() + 1), ~uint64_t{0}, uint64_t{1} << 63}) {
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &n, 8);
    std::ofstream(dir.path() / "fuzz.safetensors", std::ios::binary | std::ios::trunc)
        << bytes << text;
    h.check_file(fmt::format("header length {}", n));
  }
  std::printf("[ fuzz     ] %d files, %d opened\n", h.cases(), h.accepted());
  EXPECT_GT(h.accepted(), 0);
}

TEST(Safetensors, ShardedCheckpointFollowsWeightMap) {
  TempDir dir;
  write_safetensors(dir.path() / "model-00001-of-00002.safetensors", {f32_tensor("a", {1}, {1})});
  write_safetensors(dir.path() / "model-00002-of-00002.safetensors", {f32_tensor("b", {1}, {2})});
  json index = {
      {"weight_map",
       {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir.path() / "model.safetensors.index.json") << index.dump();
  const Checkpoint ck = Checkpoint::open(dir.path().string());
  ASSERT_NE(ck.find("b"), nullptr);
  float v = 0;
  ck.find("b")->read_f32(0, 1, &v);
  EXPECT_EQ(v, 2.0f);

  index["weight_map"]["c"] = "model-00002-of-00002.safetensors";
  std::ofstream(dir.path() / "model.safetensors.index.json") << index.dump();
  EXPECT_ERROR_HAS(Checkpoint::open(dir.path().string()), "'c'", "missing");
}

// ---------------------------------------------------------------- V-head order

TEST(VHeadOrder, GroupedToTiled) {
  // Hk = 2, Hv = 6 (3 per key head). Grouped: heads 0,1,2 use key 0 and 3,4,5 use key 1.
  // Tiled head h must use key head h % 2: [k0 k1 k0 k1 k0 k1] = grouped [0 3 1 4 2 5].
  EXPECT_EQ(gdn::convert::tiled_v_head_order(2, 6), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(gdn::convert::tiled_v_head_order(2, 2), (std::vector<int64_t>{0, 1}));
  // The defining property for a Bonsai-like shape: grouped key (g / r) == tiled key (h % Hk).
  const auto order = gdn::convert::tiled_v_head_order(16, 48);
  for (int64_t h = 0; h < 48; ++h) EXPECT_EQ(order[h] / 3, h % 16) << h;
  EXPECT_ERROR_HAS(gdn::convert::tiled_v_head_order(4, 6), "not a multiple");
}

// ------------------------------------------------------------------- config.json

json tiny_text_config() {
  return {{"architectures", {"Qwen3_5ForCausalLM"}},
          {"model_type", "qwen3_5_text"},
          {"hidden_size", 32},
          {"num_hidden_layers", 2},
          {"intermediate_size", 64},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"head_dim", 16},
          {"rms_norm_eps", 1e-6},
          {"linear_conv_kernel_dim", 4},
          {"linear_key_head_dim", 8},
          {"linear_value_head_dim", 8},
          {"linear_num_key_heads", 2},
          {"linear_num_value_heads", 4},
          {"vocab_size", 40},
          {"max_position_embeddings", 256},
          {"hidden_act", "silu"},
          {"layer_types", {"linear_attention", "full_attention"}},
          {"tie_word_embeddings", false},
          {"mtp_num_hidden_layers", 1},
          {"rope_parameters",
           {{"rope_type", "default"},
            {"rope_theta", 1e7},
            {"partial_rotary_factor", 0.25},
            {"mrope_section", {1, 1, 0}}}}};
}

TEST(JsonFile, MissingOrMalformedFilesAreNamed) {
  TempDir dir;
  const fs::path file = dir.path() / "config.json";
  EXPECT_ERROR_HAS(gdn::convert::read_json_file(file.string()), "config.json", "cannot open");
  std::ofstream(file) << "{\"hidden_size\": 32,";
  EXPECT_ERROR_HAS(gdn::convert::read_json_file(file.string()), "config.json", "not valid JSON");
  std::ofstream(file, std::ios::trunc) << "{\"hidden_size\": 32}";
  EXPECT_EQ(gdn::convert::read_json_file(file.string())["hidden_size"], 32);
}

TEST(HfConfig, ParsesTextOnlyAndMultimodal) {
  const auto cfg = gdn::convert::parse_hf_config(tiny_text_config());
  EXPECT_EQ(cfg.lm_prefix, "model.");
  EXPECT_EQ(cfg.hp.full_attention_interval, 2);
  EXPECT_TRUE(cfg.hp.is_recurrent(0));
  EXPECT_FALSE(cfg.hp.is_recurrent(1));
  EXPECT_FALSE(cfg.hp.is_recurrent(2));  // the MTP block
  EXPECT_EQ(cfg.hp.n_rot, 4);
  EXPECT_EQ(cfg.hp.rope_sections, (std::array<int32_t, 4>{1, 1, 0, 0}));
  EXPECT_EQ(cfg.hp.n_nextn, 1);

  json mm = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
             {"model_type", "qwen3_5"},
             {"text_config", tiny_text_config()},
             {"vision_config", {{"depth", 1}}}};
  mm["text_config"]["model_type"] = "qwen3_5_text";
  mm["text_config"].erase("architectures");
  EXPECT_EQ(gdn::convert::parse_hf_config(mm).lm_prefix, "model.language_model.");
}

TEST(HfConfig, RefusesUnsupportedOrInconsistent) {
  json c = tiny_text_config();
  c["model_type"] = "qwen3_5_moe";
  c.erase("architectures");
  EXPECT_ERROR_HAS(gdn::convert::parse_hf_config(c), "qwen3_5_moe");

  c = tiny_text_config();
  c.erase("hidden_size");
  EXPECT_ERROR_HAS(gdn::convert::parse_hf_config(c), "hidden_size");

  c = tiny_text_config();
  c["linear_num_value_heads"] = 3;
  EXPECT_ERROR_HAS(gdn::convert::parse_hf_config(c), "Hv=3", "Hk=2");

  c = tiny_text_config();
  c["layer_types"] = {"full_attention", "linear_attention"};
  EXPECT_ERROR_HAS(gdn::convert::parse_hf_config(c), "follow no full_attention_interval");

  c = tiny_text_config();
  c["full_attention_interval"] = 4;
  EXPECT_ERROR_HAS(gdn::convert::parse_hf_config(c), "contradicts layer_types");

  c = tiny_text_config();
  c["hidden_act"] = "gelu";
  EXPECT_ERROR_HAS(gdn::convert::parse_hf_config(c), "hidden_act");
}

// Property: any config.json value, however hostile, is refused with a gdn::Error naming it or
// parses into hyper-parameters that validate (never a JSON library exception or a model the
// loader would refuse after the conversion ran).
TEST(HfConfigFuzz, HostileValuesAreRefusedByNameOrRoundTrip) {
  const json hostile[] = {nullptr,
                          -1,
                          0,
                          1,
                          3,
                          1.5,
                          1e300,
                          -1e300,
                          "8",
                          "",
                          true,
                          json::array(),
                          json::object(),
                          {1, 2, 3},
                          {"linear_attention"},
                          {{"rope_theta", 1}},
                          uint64_t{1} << 32,
                          uint64_t{1} << 62,
                          ~uint64_t{0},
                          int64_t{-1} << 62};
  gdn::testing::FuzzCases h;
  auto check = [&](const json& c, const std::string& what) {
    h.run(what, [&] {
      try {
        const gdn::convert::HfConfig cfg = gdn::convert::parse_hf_config(c);
        // What the converter would write reads back as the same hyper-parameters.
        gdn::gguf::Metadata meta;
        cfg.hp.to_gguf(meta);
        gdn::model::HParams back = gdn::model::HParams::from_gguf(meta);
        back.n_vocab = cfg.hp.n_vocab;
        if (back.summary() != cfg.hp.summary() || back.rope_theta != cfg.hp.rope_theta ||
            back.rms_eps != cfg.hp.rms_eps || back.n_ctx_train != cfg.hp.n_ctx_train) {
          h.fail(what, "does not read back: " + back.summary() + " vs " + cfg.hp.summary());
        }
      } catch (const gdn::Error& e) {
        if (!std::string(e.what()).starts_with("config.json")) {
          h.fail(what, std::string("the error does not name config.json: ") + e.what());
        }
        throw;
      }
    });
  };
  json base = tiny_text_config();
  base["full_attention_interval"] = 2;  // optional: fuzzed too
  for (const auto& [key, value] : base.items()) {
    for (const json& v : hostile) {
      json c = base;
      c[key] = v;
      check(c, fmt::format("{} = {}", key, v.dump()));
    }
    json c = base;
    c.erase(key);
    check(c, key + " erased");
  }
  for (const auto& [key, value] : base["rope_parameters"].items()) {
    for (const json& v : hostile) {
      json c = base;
      c["rope_parameters"][key] = v;
      check(c, fmt::format("rope_parameters.{} = {}", key, v.dump()));
    }
  }
  std::printf("[ fuzz     ] %d configs, %d parsed\n", h.cases(), h.accepted());
  EXPECT_GT(h.accepted(), 0);
}

// ---------------------------------------------------------------- end to end

// The HF tensors of tiny_text_config(), written out by hand (not from the converter's plan)
// so the test checks the mapping independently.
std::map<std::string, std::vector<int64_t>> tiny_hf_shapes(bool with_lm_head) {
  const int64_t E = 32, F = 64, V = 40, D = 16, H = 2, Hkv = 1, Hk = 2, Hv = 4, d = 8;
  const int64_t conv = 2 * Hk * d + Hv * d;
  std::map<std::string, std::vector<int64_t>> s;
  s["model.embed_tokens.weight"] = {V, E};
  s["model.norm.weight"] = {E};
  if (with_lm_head) s["lm_head.weight"] = {V, E};
  auto common = [&](const std::string& p) {
    s[p + "input_layernorm.weight"] = {E};
    s[p + "post_attention_layernorm.weight"] = {E};
    s[p + "mlp.gate_proj.weight"] = {F, E};
    s[p + "mlp.up_proj.weight"] = {F, E};
    s[p + "mlp.down_proj.weight"] = {E, F};
  };
  auto attention = [&](const std::string& p) {
    s[p + "self_attn.q_proj.weight"] = {2 * H * D, E};
    s[p + "self_attn.k_proj.weight"] = {Hkv * D, E};
    s[p + "self_attn.v_proj.weight"] = {Hkv * D, E};
    s[p + "self_attn.o_proj.weight"] = {E, H * D};
    s[p + "self_attn.q_norm.weight"] = {D};
    s[p + "self_attn.k_norm.weight"] = {D};
  };
  const std::string l0 = "model.layers.0.", la = l0 + "linear_attn.";
  common(l0);
  s[la + "in_proj_qkv.weight"] = {conv, E};
  s[la + "in_proj_z.weight"] = {Hv * d, E};
  s[la + "in_proj_b.weight"] = {Hv, E};
  s[la + "in_proj_a.weight"] = {Hv, E};
  s[la + "conv1d.weight"] = {conv, 1, 4};
  s[la + "dt_bias"] = {Hv};
  s[la + "A_log"] = {Hv};
  s[la + "norm.weight"] = {d};
  s[la + "out_proj.weight"] = {E, Hv * d};
  common("model.layers.1.");
  attention("model.layers.1.");
  common("mtp.layers.0.");
  attention("mtp.layers.0.");
  s["mtp.fc.weight"] = {E, 2 * E};
  s["mtp.pre_fc_norm_embedding.weight"] = {E};
  s["mtp.pre_fc_norm_hidden.weight"] = {E};
  s["mtp.norm.weight"] = {E};
  return s;
}

// Distinct, exactly representable values: tensor index t, element i.
float value_of(size_t t, int64_t i) {
  return static_cast<float>(t) + static_cast<float>(i) / 4096.0f;
}

struct TinyModel {
  std::map<std::string, std::vector<float>> values;
  std::map<std::string, std::vector<int64_t>> shapes;
};

// lm_prefix replaces "model." on the language-model tensors (a multimodal checkpoint).
TinyModel write_tiny_model(const fs::path& dir, const json& config, bool with_lm_head,
                           const std::string& extra_tensor = "",
                           const std::string& skip_prefix = "",
                           const std::string& lm_prefix = "model.") {
  TinyModel m;
  for (const auto& [name, shape] : tiny_hf_shapes(with_lm_head)) {
    m.shapes[name.starts_with("model.") ? lm_prefix + name.substr(6) : name] = shape;
  }
  if (!extra_tensor.empty()) m.shapes[extra_tensor] = {2};
  std::vector<StEntry> entries;
  size_t t = 0;
  for (const auto& [name, shape] : m.shapes) {
    ++t;
    if (!skip_prefix.empty() && name.starts_with(skip_prefix)) continue;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value_of(t, i) / 8.0f;
    entries.push_back(f32_tensor(name, shape, v));
    m.values[name] = std::move(v);
  }
  write_safetensors(dir / "model.safetensors", entries);
  std::ofstream(dir / "config.json") << config.dump(2);
  return m;
}

std::vector<float> gguf_f32(const gdn::gguf::TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  gdn::quant::dequantize_row(t.type, t.data, out.data(), t.n_elements());
  return out;
}

TEST(ConvertHf, TinyModelMatchesTableAndConventions) {
  TempDir dir;
  const TinyModel m = write_tiny_model(dir.path(), tiny_text_config(), true);
  const fs::path out = dir.path() / "out.gguf";
  std::vector<std::string> log;
  gdn::convert::convert_hf(dir.path().string(), out.string(), gdn::quant::Type::F32,
                           [&](const std::string& l) { log.push_back(l); });

  const auto f = gdn::gguf::File::open(out.string());
  const auto hp = gdn::model::HParams::from_gguf(f.meta());
  EXPECT_EQ(hp.n_layer, 2);
  EXPECT_EQ(hp.n_nextn, 1);
  EXPECT_EQ(hp.full_attention_interval, 2);
  EXPECT_EQ(hp.n_rot, 4);
  EXPECT_EQ(hp.ssm_n_v_heads, 4);
  EXPECT_EQ(hp.ssm_n_k_heads, 2);

  auto specs_hp = hp;
  specs_hp.n_vocab = 40;
  // Everything but the two optional MTP heads Qwen3.5 checkpoints do not have.
  size_t expected = 0;
  for (const auto& spec : gdn::model::tensor_specs(specs_hp)) {
    if (spec.name.find("embed_tokens") != std::string::npos ||
        spec.name.find("shared_head_head") != std::string::npos) {
      continue;
    }
    ++expected;
    const auto* t = f.find_tensor(spec.name);
    ASSERT_NE(t, nullptr) << spec.name;
    EXPECT_EQ(t->ne, spec.ne) << spec.name;
    EXPECT_EQ(t->type, gdn::quant::Type::F32) << spec.name;
  }
  EXPECT_EQ(f.tensors().size(), expected);

  auto hf = [&](const std::string& n) { return m.values.at(n); };
  auto gg = [&](const std::string& n) { return gguf_f32(f.tensor(n)); };

  // Plain copies and the +1 on zero-centred norms; none on the gated norm.
  EXPECT_EQ(gg("token_embd.weight"), hf("model.embed_tokens.weight"));
  EXPECT_EQ(gg("blk.1.attn_q.weight"), hf("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_EQ(gg("blk.0.attn_norm.weight")[5], hf("model.layers.0.input_layernorm.weight")[5] + 1);
  EXPECT_EQ(gg("blk.1.attn_k_norm.weight")[3], hf("model.layers.1.self_attn.k_norm.weight")[3] + 1);
  EXPECT_EQ(gg("blk.2.nextn.enorm.weight")[0], hf("mtp.pre_fc_norm_embedding.weight")[0] + 1);
  EXPECT_EQ(gg("blk.2.nextn.eh_proj.weight"), hf("mtp.fc.weight"));
  EXPECT_EQ(gg("blk.2.attn_v.weight"), hf("mtp.layers.0.self_attn.v_proj.weight"));
  EXPECT_EQ(gg("blk.0.ssm_norm.weight"), hf("model.layers.0.linear_attn.norm.weight"));

  // Hk = 2, Hv = 4: tiled head order is grouped [0, 2, 1, 3]; d = 8, q|k = 32 channels.
  const std::vector<int64_t> order = {0, 2, 1, 3};
  const auto a_log = hf("model.layers.0.linear_attn.A_log");
  const auto ssm_a = gg("blk.0.ssm_a");
  const auto dt_hf = hf("model.layers.0.linear_attn.dt_bias");
  const auto dt = gg("blk.0.ssm_dt.bias");
  const auto b_hf = hf("model.layers.0.linear_attn.in_proj_b.weight");
  const auto b = gg("blk.0.ssm_beta.weight");
  for (int64_t h = 0; h < 4; ++h) {
    EXPECT_FLOAT_EQ(ssm_a[h], -std::exp(a_log[order[h]])) << h;
    EXPECT_EQ(dt[h], dt_hf[order[h]]) << h;
    EXPECT_EQ(b[h * 32 + 7], b_hf[order[h] * 32 + 7]) << h;
  }
  const auto qkv_hf = hf("model.layers.0.linear_attn.in_proj_qkv.weight");
  const auto qkv = gg("blk.0.attn_qkv.weight");
  const auto conv_hf = hf("model.layers.0.linear_attn.conv1d.weight");
  const auto conv = gg("blk.0.ssm_conv1d.weight");
  const auto z_hf = hf("model.layers.0.linear_attn.in_proj_z.weight");
  const auto z = gg("blk.0.attn_gate.weight");
  const auto out_hf = hf("model.layers.0.linear_attn.out_proj.weight");
  const auto out_w = gg("blk.0.ssm_out.weight");
  for (int64_t row = 0; row < 64; ++row) {
    // q and k rows stay; v row 32 + 8h + i comes from grouped head order[h].
    const int64_t src = row < 32 ? row : 32 + order[(row - 32) / 8] * 8 + (row - 32) % 8;
    EXPECT_EQ(qkv[row * 32 + 3], qkv_hf[src * 32 + 3]) << row;
    EXPECT_EQ(conv[row * 4 + 2], conv_hf[src * 4 + 2]) << row;
    if (row >= 32) {
      const int64_t zr = row - 32, zsrc = src - 32;
      EXPECT_EQ(z[zr * 32 + 1], z_hf[zsrc * 32 + 1]) << zr;
      EXPECT_EQ(out_w[5 * 32 + zr], out_hf[5 * 32 + zsrc]) << zr;  // columns of out_proj
    }
  }

  EXPECT_EQ(f.meta().get_string("general.architecture"), "qwen35");
  EXPECT_FALSE(f.meta().has("tokenizer.ggml.model"));
}

TEST(ConvertHf, MultimodalCheckpointUsesTheLanguageModel) {
  TempDir dir;
  json config = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
                 {"model_type", "qwen3_5"},
                 {"text_config", tiny_text_config()},
                 {"vision_config", {{"depth", 1}}}};
  config["text_config"].erase("architectures");
  const TinyModel m = write_tiny_model(dir.path(), config, true, "model.visual.blocks.0.w", "",
                                       "model.language_model.");
  std::vector<std::string> log;
  const fs::path out = dir.path() / "mm.gguf";
  gdn::convert::convert_hf(dir.path().string(), out.string(), gdn::quant::Type::F32,
                           [&](const std::string& l) { log.push_back(l); });
  const auto f = gdn::gguf::File::open(out.string());
  EXPECT_EQ(gguf_f32(f.tensor("blk.1.ffn_down.weight")),
            m.values.at("model.language_model.layers.1.mlp.down_proj.weight"));
  bool skipped = false;
  for (const auto& l : log) skipped |= l.find("skipped 1 vision tensors") != std::string::npos;
  EXPECT_TRUE(skipped);
}

TEST(ConvertHf, QuantisedTypesFollowTheKinds) {
  TempDir dir;
  json config = tiny_text_config();
  config["tie_word_embeddings"] = true;
  // The config still declares an MTP layer, but the checkpoint (as transformers re-saves it)
  // has no mtp.* tensors: the trunk is converted alone.
  write_tiny_model(dir.path(), config, false, "", "mtp.");

  const fs::path out = dir.path() / "q8.gguf";
  std::vector<std::string> log;
  auto keep = [&](const std::string& l) { log.push_back(l); };
  gdn::convert::convert_hf(dir.path().string(), out.string(), gdn::quant::Type::Q8_0, keep);
  auto f = gdn::gguf::File::open(out.string());
  EXPECT_EQ(f.meta().get_int("qwen35.nextn_predict_layers"), 0);
  EXPECT_EQ(f.meta().get_int("qwen35.block_count"), 2);
  EXPECT_NE(log.front().find("MTP"), std::string::npos) << log.front();
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied
  EXPECT_EQ(f.tensor("blk.0.ffn_up.weight").type, gdn::quant::Type::Q8_0);
  EXPECT_EQ(f.tensor("token_embd.weight").type, gdn::quant::Type::Q8_0);
  EXPECT_EQ(f.tensor("blk.0.ssm_alpha.weight").type, gdn::quant::Type::BF16);
  EXPECT_EQ(f.tensor("blk.0.ssm_conv1d.weight").type, gdn::quant::Type::F32);
  EXPECT_EQ(f.tensor("blk.0.ssm_a").type, gdn::quant::Type::F32);
  EXPECT_EQ(f.tensor("output_norm.weight").type, gdn::quant::Type::F32);

  // Q1_0's 128-element block fits no row here: llama.cpp's rule stores F16, and says so.
  log.clear();
  gdn::convert::convert_hf(dir.path().string(), out.string(), gdn::quant::Type::Q1_0, keep);
  f = gdn::gguf::File::open(out.string());
  EXPECT_EQ(f.tensor("blk.0.ffn_up.weight").type, gdn::quant::Type::F16);
  bool logged = false;
  for (const auto& l : log) logged |= l.find("blk.0.ffn_up.weight") != std::string::npos;
  EXPECT_TRUE(logged);
}

TEST(ConvertHf, RefusesBadCheckpoints) {
  TempDir dir;
  const std::string d = dir.path().string(), out = (dir.path() / "o.gguf").string();
  const auto quiet = [](const std::string&) {};
  const auto F32 = gdn::quant::Type::F32;

  write_tiny_model(dir.path(), tiny_text_config(), true, "model.layers.0.mystery.weight");
  EXPECT_ERROR_HAS(gdn::convert::convert_hf(d, out, F32, quiet), "model.layers.0.mystery.weight");

  write_tiny_model(dir.path(), tiny_text_config(), true, "", "model.layers.0.linear_attn.A_log");
  EXPECT_ERROR_HAS(gdn::convert::convert_hf(d, out, F32, quiet), "model.layers.0.linear_attn.A_log",
                   "blk.0.ssm_a");

  write_tiny_model(dir.path(), tiny_text_config(), false);
  EXPECT_ERROR_HAS(gdn::convert::convert_hf(d, out, F32, quiet), "lm_head.weight");

  json config = tiny_text_config();
  config["hidden_size"] = 64;  // every E-sized tensor is now mis-shaped
  write_tiny_model(dir.path(), config, true);
  EXPECT_ERROR_HAS(gdn::convert::convert_hf(d, out, F32, quiet), "model.embed_tokens.weight",
                   "[40, 32]", "[40, 64]");
}

// tokenizer.json and tokenizer_config.json of a 40-token vocabulary (tiny_text_config's): four
// BPE tokens, two merges, two added tokens; ids 4-37 are holes.
json tiny_tokenizer() {
  return {{"model",
           {{"type", "BPE"},
            {"vocab",
             {{"a", 0},
              {"b", 1},
              {"ab", 2},
              {"\xC4\xA0"
               "a",
               3}}},
            {"merges", json::array({json::array({"a", "b"}), json::array({" ", "a"})})}}},
          {"added_tokens",
           {{{"id", 38}, {"content", "<|im_end|>"}, {"special", true}},
            {{"id", 39}, {"content", "<think>"}, {"special", false}}}}};
}

json tiny_tokenizer_config() {
  return {{"pad_token", "<think>"}, {"add_bos_token", false}, {"chat_template", "{{x}}"}};
}

// JSON pointers to every value in a document, the root's included.
void pointers(const json& j, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  out.push_back(at);
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) pointers(value, at / key, out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) pointers(j[i], at / i, out);
  }
}

const json kHostileJson[] = {nullptr,
                             -1,
                             0,
                             39,
                             40,
                             1.5,
                             "",
                             "a",
                             "<|im_end|>",
                             true,
                             json::array(),
                             json::object(),
                             {"a", "b", "c"},
                             {{"content", 5}},
                             ~uint64_t{0},
                             int64_t{-1} << 62};

// Property: any value anywhere in tokenizer.json or tokenizer_config.json is refused with a
// gdn::Error or gives tokenizer metadata llama.cpp can read: n_vocab tokens, each with a type in
// 1..6, and special token ids inside the vocabulary.
TEST(HfTokenizerFuzz, HostileValuesAnywhereAreRefusedOrConsistent) {
  TempDir dir;
  const json config = tiny_text_config();
  gdn::testing::FuzzCases h;
  auto check = [&](const json& tok, const json& tok_cfg, const std::string& what) {
    std::ofstream(dir.path() / "tokenizer.json", std::ios::trunc) << tok.dump();
    std::ofstream(dir.path() / "tokenizer_config.json", std::ios::trunc) << tok_cfg.dump();
    h.run(what, [&] {
      gdn::gguf::Metadata meta;
      gdn::convert::add_hf_tokenizer(dir.path().string(), config, 40, meta,
                                     [](const std::string&) {});
      if (meta.get_string_array("tokenizer.ggml.tokens").size() != 40) h.fail(what, "token count");
      const std::vector<int64_t> types = meta.get_int_array("tokenizer.ggml.token_type");
      if (types.size() != 40 ||
          std::ranges::any_of(types, [](int64_t t) { return t < 1 || t > 6; }))
        h.fail(what, "token types");
      for (const auto& [key, value] : meta.all()) {
        if (key.ends_with("_token_id") && meta.get_int(key) >= 40) h.fail(what, key);
      }
    });
  };
  const json tok = tiny_tokenizer(), tok_cfg = tiny_tokenizer_config();
  for (const bool in_config : {false, true}) {
    const json& doc = in_config ? tok_cfg : tok;
    std::vector<json::json_pointer> at;
    pointers(doc, json::json_pointer(), at);
    for (const json::json_pointer& p : at) {
      for (const json& v : kHostileJson) {
        json edited = doc;
        edited[p] = v;
        check(in_config ? tok : edited, in_config ? edited : tok,
              fmt::format("{}{} = {}", in_config ? "tokenizer_config.json" : "tokenizer.json",
                          p.to_string(), v.dump()));
      }
    }
  }
  std::printf("[ fuzz     ] %d tokenizers, %d converted\n", h.cases(), h.accepted());
  EXPECT_GT(h.accepted(), 0);
}

TEST(ConvertHf, WritesGpt2Tokenizer) {
  TempDir dir;
  json config = tiny_text_config();
  config["eos_token_id"] = 38;
  write_tiny_model(dir.path(), config, true);
  std::ofstream(dir.path() / "tokenizer.json") << tiny_tokenizer().dump();
  std::ofstream(dir.path() / "tokenizer_config.json") << tiny_tokenizer_config().dump();

  const fs::path out = dir.path() / "tok.gguf";
  gdn::convert::convert_hf(dir.path().string(), out.string(), gdn::quant::Type::F32,
                           [](const std::string&) {});
  const auto f = gdn::gguf::File::open(out.string());
  const auto& meta = f.meta();
  EXPECT_EQ(meta.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(meta.get_string("tokenizer.ggml.pre"), "qwen35");
  const auto tokens = meta.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 40u);
  EXPECT_EQ(tokens[2], "ab");
  EXPECT_EQ(tokens[4], "[PAD4]");
  EXPECT_EQ(tokens[38], "<|im_end|>");
  const auto types = meta.get_int_array("tokenizer.ggml.token_type");
  EXPECT_EQ(types[0], 1);   // normal
  EXPECT_EQ(types[4], 5);   // unused hole
  EXPECT_EQ(types[38], 3);  // control
  EXPECT_EQ(types[39], 4);  // user defined
  EXPECT_EQ(meta.get_string_array("tokenizer.ggml.merges"),
            (std::vector<std::string>{"a b", "\xC4\xA0 a"}));
  EXPECT_EQ(meta.get_int("tokenizer.ggml.eos_token_id"), 38);  // from config.json
  EXPECT_EQ(meta.get_int("tokenizer.ggml.padding_token_id"), 39);
  EXPECT_FALSE(meta.has("tokenizer.ggml.bos_token_id"));
  EXPECT_FALSE(meta.get_bool("tokenizer.ggml.add_bos_token", true));
  EXPECT_EQ(meta.get_string("tokenizer.chat_template"), "{{x}}");
}

}  // namespace
