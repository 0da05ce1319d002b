// Hyper-parameters, the tensor table and the loader's checks.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "common/error.h"
#include "error_of.h"
#include "gguf/gguf.h"
#include "model/tensors.h"
#include "model/weights.h"
#include "quant/quant.h"
#include "synth/synth.h"

namespace gdn::model {
namespace {

using quant::Type;

TEST(HParams, RoundTripsThroughMetadata) {
  HParams hp = synth::preset("bonsai-27b");
  gguf::Metadata meta;
  hp.to_gguf(meta);
  HParams back = HParams::from_gguf(meta);
  back.n_vocab = hp.n_vocab;
  EXPECT_EQ(back.summary(), hp.summary());
  EXPECT_EQ(back.recurrent, hp.recurrent);
  EXPECT_EQ(back.n_recurrent(), 48);
  EXPECT_EQ(back.n_attention(), 16);
  EXPECT_EQ(back.conv_dim(), 2 * 16 * 128 + 48 * 128);
}

TEST(HParams, LayerKindsFromIntervalAndExplicitList) {
  HParams hp = synth::preset("tiny");
  gguf::Metadata meta;
  hp.to_gguf(meta);
  meta.erase("qwen35.attention.recurrent_layers");  // then full_attention_interval decides
  EXPECT_EQ(HParams::from_gguf(meta).recurrent, (std::vector<bool>{true, false, true, false}));
  meta.set("qwen35.attention.recurrent_layers",
           gguf::Value::array(gguf::ValueType::BOOL,
                              {gguf::Value::boolean(true), gguf::Value::boolean(false),
                               gguf::Value::boolean(false), gguf::Value::boolean(true)}));
  EXPECT_EQ(HParams::from_gguf(meta).recurrent, (std::vector<bool>{true, false, false, true}));
  meta.set("qwen35.attention.recurrent_layers", gguf::Value::i32s({0, 1, 1, 0}));
  EXPECT_EQ(HParams::from_gguf(meta).recurrent, (std::vector<bool>{false, true, true, false}));
}

TEST(HParams, MtpBlocksAreAttentionAndCountedApart) {
  HParams hp = synth::preset("tiny");
  gguf::Metadata meta;
  hp.to_gguf(meta);
  meta.set("qwen35.block_count", gguf::Value::u32(5));
  meta.set("qwen35.nextn_predict_layers", gguf::Value::u32(1));
  const HParams back = HParams::from_gguf(meta);
  EXPECT_EQ(back.n_layer, 4);
  EXPECT_EQ(back.n_block(), 5);
  EXPECT_FALSE(back.is_recurrent(4));
}

TEST(HParams, RejectsInconsistentHeads) {
  HParams hp = synth::preset("tiny");
  hp.ssm_n_v_heads = 3;  // not a multiple of Hk = 2
  EXPECT_THROW(hp.validate(), Error);
  hp = synth::preset("tiny");
  hp.n_rot = hp.head_dim + 2;
  EXPECT_THROW(hp.validate(), Error);
  gguf::Metadata meta;
  synth::preset("tiny").to_gguf(meta);
  meta.set("general.architecture", gguf::Value::str("llama"));
  EXPECT_THROW(HParams::from_gguf(meta), Error);
}

// Each refusal names the field; sizes are bounded before any product of them is formed, so a
// hostile file cannot overflow the tensor table's arithmetic.
TEST(HParams, RejectsSizesThatWouldOverflowAndNonFiniteFloats) {
  auto error = [](const std::function<void(gguf::Metadata&)>& edit) -> std::string {
    gguf::Metadata meta;
    synth::preset("tiny").to_gguf(meta);
    edit(meta);
    try {
      HParams hp = HParams::from_gguf(meta);
      hp.n_vocab = 2048;
      hp.validate();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  auto set = [&](const char* key, gguf::Value v) {
    return error([&](gguf::Metadata& m) { m.set(std::string("qwen35.") + key, v); });
  };
  EXPECT_NE(set("attention.head_count", gguf::Value::u64(uint64_t{1} << 62)).find("head_count"),
            std::string::npos);
  EXPECT_NE(set("attention.head_count", gguf::Value::u32(1u << 30)).find("attn_q rows"),
            std::string::npos);
  EXPECT_NE(set("ssm.state_size", gguf::Value::u64(uint64_t{1} << 62)).find("ssm.inner_size"),
            std::string::npos);
  EXPECT_NE(set("block_count", gguf::Value::u32(~0u)).find("block_count"), std::string::npos);
  EXPECT_NE(set("nextn_predict_layers", gguf::Value::u32(4)).find("nextn_predict_layers"),
            std::string::npos);
  EXPECT_NE(set("rope.freq_base", gguf::Value::f32(0.0f)).find("rope.freq_base"),
            std::string::npos);
  EXPECT_NE(set("attention.layer_norm_rms_epsilon",
                gguf::Value::f32(std::numeric_limits<float>::infinity()))
                .find("layer_norm_rms_epsilon"),
            std::string::npos);
  // A double beyond float's range: the cast itself would be undefined.
  EXPECT_NE(set("rope.freq_base", {gguf::ValueType::FLOAT64, 1e300}).find("rope.freq_base"),
            std::string::npos);
  EXPECT_NE(set("context_length", gguf::Value::u64(uint64_t{1} << 32)).find("context_length"),
            std::string::npos);
  EXPECT_EQ(error([](gguf::Metadata&) {}), "");
}

TEST(Presets, EveryNamedPresetIsValidAndAnUnknownOneListsThem) {
  for (const std::string& name : synth::preset_names()) {
    HParams hp = synth::preset(name);
    EXPECT_NO_THROW(hp.validate()) << name;
  }
  const std::string msg = testing::error_of([] { synth::preset("bonsai-1b"); });
  EXPECT_NE(msg.find("'bonsai-1b'"), std::string::npos) << msg;
  for (const std::string& name : synth::preset_names()) {
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
}

// The synthetic Bonsai-27B Q1_0 file must be the size llama.cpp's loader sees (3.5–3.6 GiB);
// computed from the table so CI need not write 3.5 GB.
TEST(TensorTable, Bonsai27bQ10SizeMatchesTheRealFile) {
  HParams hp = synth::preset("bonsai-27b");
  uint64_t bytes = 0;
  size_t n = 0;
  for (const TensorSpec& s : tensor_specs(hp)) {
    if (!s.required && s.name != "output.weight") continue;
    const Type t = synth::storage_type(s.kind, Type::Q1_0);
    int64_t rows = 1;
    for (size_t i = 1; i < s.ne.size(); ++i) rows *= s.ne[i];
    bytes += quant::row_bytes(t, s.ne[0]) * uint64_t(rows);
    ++n;
  }
  const double gib = double(bytes) / (1024.0 * 1024.0 * 1024.0);
  EXPECT_GT(gib, 3.5);
  EXPECT_LT(gib, 3.6);
  // 3 global + per GDN layer 14 + per attention layer 11 (norms and FFN included).
  EXPECT_EQ(n, 3u + 48u * 14u + 16u * 11u);
}

TEST(TensorTable, NamesFollowLlamaCpp) {
  HParams hp = synth::preset("tiny");
  std::vector<std::string> names;
  for (const auto& s : tensor_specs(hp)) names.push_back(s.name);
  for (const char* expected :
       {"token_embd.weight", "output_norm.weight", "output.weight", "blk.0.attn_qkv.weight",
        "blk.0.attn_gate.weight", "blk.0.ssm_a", "blk.0.ssm_dt.bias", "blk.0.ssm_conv1d.weight",
        "blk.0.ssm_norm.weight", "blk.0.ssm_out.weight", "blk.0.ssm_alpha.weight",
        "blk.0.ssm_beta.weight", "blk.1.attn_q.weight", "blk.1.attn_q_norm.weight",
        "blk.1.attn_output.weight", "blk.1.post_attention_norm.weight", "blk.3.ffn_down.weight"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
}

// Writes the tiny model's table through `edit`, which may change a spec's shape/type or
// drop it (return false), then loads it.
Model load_edited(std::vector<uint8_t>& bytes,
                  const std::function<bool(TensorSpec&, Type&)>& edit) {
  HParams hp = synth::preset("tiny");
  gguf::Writer w;
  hp.to_gguf(w.meta());
  for (TensorSpec s : tensor_specs(hp)) {
    if (!s.required && s.name != "output.weight") continue;
    Type t = synth::storage_type(s.kind, Type::F32);
    if (!edit(s, t)) continue;
    int64_t rows = 1;
    for (size_t i = 1; i < s.ne.size(); ++i) rows *= s.ne[i];
    std::vector<float> v(size_t(s.ne[0] * rows), 0.5f);
    std::vector<uint8_t> data(quant::row_bytes(t, s.ne[0]) * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
      quant::quantize_row(t, v.data() + r * s.ne[0], data.data() + r * quant::row_bytes(t, s.ne[0]),
                          s.ne[0]);
    }
    w.add_tensor(s.name, t, s.ne, std::move(data));
  }
  bytes = w.to_bytes();
  return Model::load(std::make_shared<const gguf::File>(gguf::File::parse(bytes, "edited.gguf")));
}

std::string load_error(const std::function<bool(TensorSpec&, Type&)>& edit) {
  std::vector<uint8_t> bytes;
  try {
    load_edited(bytes, edit);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Loader, BindsEveryTensorAndTiesMissingOutput) {
  std::vector<uint8_t> bytes;
  Model m = load_edited(bytes, [](TensorSpec&, Type&) { return true; });
  EXPECT_FALSE(m.tied_output);
  EXPECT_EQ(m.layers.size(), 4u);
  EXPECT_TRUE(m.layers[0].gdn.qkv);
  EXPECT_TRUE(m.layers[1].attn.q);
  m = load_edited(bytes, [](TensorSpec& s, Type&) { return s.name != "output.weight"; });
  EXPECT_TRUE(m.tied_output);
  EXPECT_EQ(m.output.data, m.token_embd.data);
}

TEST(Loader, MissingTensorIsNamed) {
  const std::string e = load_error([](TensorSpec& s, Type&) { return s.name != "blk.2.ssm_a"; });
  EXPECT_NE(e.find("missing tensor 'blk.2.ssm_a'"), std::string::npos) << e;
}

TEST(Loader, WrongShapeIsNamedWithBothShapes) {
  const std::string e = load_error([](TensorSpec& s, Type&) {
    if (s.name == "blk.1.attn_k.weight") s.ne[1] += 64;
    return true;
  });
  EXPECT_NE(e.find("blk.1.attn_k.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("expected"), std::string::npos) << e;
}

TEST(Loader, QuantisedNormIsRefusedWithItsType) {
  const std::string e = load_error([](TensorSpec& s, Type& t) {
    if (s.name == "blk.0.attn_norm.weight") t = Type::Q8_0;
    return true;
  });
  EXPECT_NE(e.find("blk.0.attn_norm.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("q8_0"), std::string::npos) << e;
}

TEST(Loader, UnexpectedTensorIsRefused) {
  const std::string e = load_error([](TensorSpec& s, Type&) {
    if (s.name == "blk.0.ssm_a") s.name = "blk.0.ssm_b";
    return true;
  });
  EXPECT_NE(e.find("blk.0.ssm_b"), std::string::npos) << e;
}

}  // namespace
}  // namespace gdn::model
