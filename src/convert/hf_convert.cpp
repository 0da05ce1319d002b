#include "convert/hf_convert.h"

#include <fmt/ranges.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "convert/hf_tokenizer.h"
#include "convert/json_file.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"
#include "model/tensors.h"
#include "quant/quant.h"

namespace gdn::convert {

namespace fs = std::filesystem;
using model::HParams;
using model::TensorKind;
using model::TensorSpec;
using nlohmann::json;

namespace {

// ---------------------------------------------------------------- config.json

const json& field(const json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) fail("config.json: missing field '{}'", key);
  return cfg[key];
}

int64_t positive_int(const json& cfg, const char* key) {
  const json& v = field(cfg, key);
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    fail("config.json: '{}' must be a positive integer, got {}", key, v.dump());
  }
  return v.get<int64_t>();
}

int64_t non_negative_int(const json& cfg, const char* key) {
  const json& v = field(cfg, key);
  if (!v.is_number_integer() || v.get<int64_t>() < 0) {
    fail("config.json: '{}' must be a non-negative integer, got {}", key, v.dump());
  }
  return v.get<int64_t>();
}

double number(const json& cfg, const char* key) {
  const json& v = field(cfg, key);
  if (!v.is_number()) fail("config.json: '{}' must be a number, got {}", key, v.dump());
  return v.get<double>();
}

std::string optional_string(const json& cfg, const char* key, const char* fallback) {
  if (!cfg.contains(key)) return fallback;
  if (!cfg[key].is_string())
    fail("config.json: '{}' must be a string, got {}", key, cfg[key].dump());
  return cfg[key].get<std::string>();
}

// A field that must hold one specific value when present, because we implement nothing else.
template <typename T>
void require_if_present(const json& cfg, const char* key, const T& expected) {
  if (cfg.contains(key) && !cfg[key].is_null() && cfg[key] != json(expected)) {
    fail("config.json: '{}' is {}; only {} is supported", key, cfg[key].dump(),
         json(expected).dump());
  }
}

// Selects the text config and the weight prefix of the language model.
std::pair<const json*, std::string> text_part(const json& config) {
  if (!config.is_object()) fail("config.json: not a JSON object");
  const std::string model_type = optional_string(config, "model_type", "");
  if (config.contains("architectures") && config["architectures"].is_array() &&
      !config["architectures"].empty()) {
    const json& arch = config["architectures"][0];
    if (arch != "Qwen3_5ForCausalLM" && arch != "Qwen3_5ForConditionalGeneration") {
      fail(
          "config.json: architecture {} is not supported (Qwen3_5ForCausalLM or "
          "Qwen3_5ForConditionalGeneration)",
          arch.dump());
    }
  }
  if (model_type == "qwen3_5_text") return {&config, "model."};
  if (model_type == "qwen3_5") {
    const json& text = field(config, "text_config");
    if (!text.is_object()) fail("config.json: text_config is not an object");
    const std::string text_type = optional_string(text, "model_type", "qwen3_5_text");
    if (text_type != "qwen3_5_text") {
      fail("config.json: text_config.model_type '{}' is not qwen3_5_text", text_type);
    }
    return {&text, "model.language_model."};
  }
  fail("config.json: model_type '{}' is not supported (qwen3_5_text or qwen3_5)", model_type);
}

// rope_parameters (transformers 5) with the older top-level spellings as fallback.
const json& rope_field(const json& text, const char* key) {
  static const json kNull;
  if (text.contains("rope_parameters") && text["rope_parameters"].is_object() &&
      text["rope_parameters"].contains(key)) {
    return text["rope_parameters"][key];
  }
  return text.contains(key) ? text[key] : kNull;
}

void parse_rope(const json& text, HParams& hp) {
  const json& theta = rope_field(text, "rope_theta");
  if (!theta.is_number()) fail("config.json: missing rope_parameters.rope_theta");
  hp.rope_theta = model::hparam_float(theta.get<double>(), "config.json: rope_theta");

  // transformers' Qwen3_5TextConfig default when the field is absent.
  const json& prf = rope_field(text, "partial_rotary_factor");
  const double factor = prf.is_number() ? prf.get<double>() : 0.25;
  if (!(factor > 0 && factor <= 1)) {
    fail("config.json: partial_rotary_factor must be in (0, 1], got {}", factor);
  }
  const double rot = static_cast<double>(hp.head_dim) * factor;
  if (rot != std::floor(rot) || rot > HParams::kMaxWidth) {  // checked before the integer cast
    fail("config.json: head_dim {} x partial_rotary_factor {} is not an integer width", hp.head_dim,
         factor);
  }
  hp.n_rot = static_cast<int64_t>(rot);

  // llama.cpp writes [11, 11, 10, 0] when mrope_section is absent (Qwen3.5's default).
  const json& sections = rope_field(text, "mrope_section");
  hp.rope_sections = {11, 11, 10, 0};
  if (!sections.is_null()) {
    if (!sections.is_array() || sections.size() > 4) {
      fail("config.json: mrope_section must be a list of at most 4 integers, got {}",
           sections.dump());
    }
    hp.rope_sections = {};
    for (size_t i = 0; i < sections.size(); ++i) {
      if (!sections[i].is_number_integer() || sections[i].get<int64_t>() < 0 ||
          sections[i].get<int64_t>() > INT32_MAX) {
        fail("config.json: mrope_section entries must be non-negative integers, got {}",
             sections.dump());
      }
      hp.rope_sections[i] = sections[i].get<int32_t>();
    }
  }
}

// The interval that reproduces layer_types ((i+1) % interval == 0 <=> full attention); an
// explicit full_attention_interval must agree with layer_types.
int64_t attention_interval(const json& text, int64_t n_layer) {
  const bool has_interval = text.contains("full_attention_interval");
  const int64_t declared = has_interval ? positive_int(text, "full_attention_interval") : 0;
  if (!text.contains("layer_types")) {
    if (!has_interval) fail("config.json: needs layer_types or full_attention_interval");
    return declared;
  }
  const json& types = text["layer_types"];
  if (!types.is_array() || static_cast<int64_t>(types.size()) != n_layer) {
    fail("config.json: layer_types must list {} layer kinds, got {}", n_layer, types.dump());
  }
  std::vector<bool> full;
  for (const json& t : types) {
    if (t != "linear_attention" && t != "full_attention") {
      fail("config.json: layer type {} is neither linear_attention nor full_attention", t.dump());
    }
    full.push_back(t == "full_attention");
  }
  auto reproduces = [&](int64_t interval) {
    for (int64_t i = 0; i < n_layer; ++i) {
      if (full[static_cast<size_t>(i)] != ((i + 1) % interval == 0)) return false;
    }
    return true;
  };
  if (has_interval) {
    if (!reproduces(declared)) {
      fail("config.json: full_attention_interval {} contradicts layer_types {}", declared,
           types.dump());
    }
    return declared;
  }
  // Intervals above n_layer all mean "no attention layer"; n_layer + 1 stands for them.
  for (int64_t interval = 1; interval <= n_layer + 1; ++interval) {
    if (reproduces(interval)) return interval;
  }
  fail(
      "config.json: layer_types {} follow no full_attention_interval; qwen35 GGUF cannot "
      "express that",
      types.dump());
}

// ------------------------------------------------------------ tensor mapping

enum class Op {
  Copy,
  AddOne,  // zero-centred RMSNorm weight: HF computes x·(1 + w), GGUF stores 1 + w
  NegExp,  // A_log -> ssm_a = -exp(A_log)
};

// How one GGUF tensor is made from one HF tensor viewed as a row-major [rows][cols] matrix,
// cols = ne[0]. Output element (r, c) reads source element (rows[r], cols[c]); an empty order
// is the identity.
struct Source {
  Source() = default;
  Source(std::string name, Op o = Op::Copy, std::vector<int64_t> r = {},
         std::vector<int64_t> c = {})
      : hf_name(std::move(name)), op(o), rows(std::move(r)), cols(std::move(c)) {}

  std::string hf_name;
  Op op = Op::Copy;
  std::vector<int64_t> rows;
  std::vector<int64_t> cols;
};

// Index order for `total` entries: [0, offset) unchanged, then blocks of head_size entries
// taken in head order.
std::vector<int64_t> head_blocks(const std::vector<int64_t>& heads, int64_t head_size,
                                 int64_t offset, int64_t total) {
  std::vector<int64_t> idx(static_cast<size_t>(offset));
  for (int64_t i = 0; i < offset; ++i) idx[static_cast<size_t>(i)] = i;
  for (int64_t h : heads) {
    for (int64_t i = 0; i < head_size; ++i) idx.push_back(offset + h * head_size + i);
  }
  if (static_cast<int64_t>(idx.size()) != total) {
    fail("internal: head reorder covers {} of {} entries", idx.size(), total);
  }
  return idx;
}

using Plan = std::map<std::string, Source>;

void plan_ffn_and_norms(Plan& plan, int64_t il, const std::string& hf) {
  auto gg = [&](const char* base) { return model::block_tensor_name(il, base); };
  plan[gg("attn_norm.weight")] = {hf + "input_layernorm.weight", Op::AddOne};
  plan[gg("post_attention_norm.weight")] = {hf + "post_attention_layernorm.weight", Op::AddOne};
  plan[gg("ffn_gate.weight")] = {hf + "mlp.gate_proj.weight"};
  plan[gg("ffn_up.weight")] = {hf + "mlp.up_proj.weight"};
  plan[gg("ffn_down.weight")] = {hf + "mlp.down_proj.weight"};
}

void plan_attention(Plan& plan, int64_t il, const std::string& hf) {
  auto gg = [&](const char* base) { return model::block_tensor_name(il, base); };
  const std::string a = hf + "self_attn.";
  // q_proj rows are already per head [D query; D gate], the layout attn_q expects.
  plan[gg("attn_q.weight")] = {a + "q_proj.weight"};
  plan[gg("attn_k.weight")] = {a + "k_proj.weight"};
  plan[gg("attn_v.weight")] = {a + "v_proj.weight"};
  plan[gg("attn_output.weight")] = {a + "o_proj.weight"};
  plan[gg("attn_q_norm.weight")] = {a + "q_norm.weight", Op::AddOne};
  plan[gg("attn_k_norm.weight")] = {a + "k_norm.weight", Op::AddOne};
}

void plan_gdn(Plan& plan, const HParams& hp, int64_t il, const std::string& hf) {
  auto gg = [&](const char* base) { return model::block_tensor_name(il, base); };
  const std::string a = hf + "linear_attn.";
  const auto heads = tiled_v_head_order(hp.ssm_n_k_heads, hp.ssm_n_v_heads);
  const int64_t dv = hp.ssm_d_state, qk = 2 * hp.ssm_qk_dim();
  const auto v_rows = head_blocks(heads, dv, qk, hp.conv_dim());  // qkv rows, conv channels
  const auto v_only = head_blocks(heads, dv, 0, hp.ssm_inner());  // z rows, out_proj columns
  plan[gg("attn_qkv.weight")] = {a + "in_proj_qkv.weight", Op::Copy, v_rows};
  plan[gg("attn_gate.weight")] = {a + "in_proj_z.weight", Op::Copy, v_only};
  plan[gg("ssm_beta.weight")] = {a + "in_proj_b.weight", Op::Copy, heads};
  plan[gg("ssm_alpha.weight")] = {a + "in_proj_a.weight", Op::Copy, heads};
  plan[gg("ssm_conv1d.weight")] = {a + "conv1d.weight", Op::Copy, v_rows};
  plan[gg("ssm_dt.bias")] = {a + "dt_bias", Op::Copy, {}, heads};
  plan[gg("ssm_a")] = {a + "A_log", Op::NegExp, {}, heads};
  // The gated norm is applied per head with shared weights and is a plain multiply: no +1.
  plan[gg("ssm_norm.weight")] = {a + "norm.weight"};
  plan[gg("ssm_out.weight")] = {a + "out_proj.weight", Op::Copy, {}, v_only};
}

void plan_nextn(Plan& plan, int64_t il, const std::string& mtp) {
  auto gg = [&](const char* base) { return model::block_tensor_name(il, base); };
  plan[gg("nextn.eh_proj.weight")] = {mtp + "fc.weight"};
  plan[gg("nextn.enorm.weight")] = {mtp + "pre_fc_norm_embedding.weight", Op::AddOne};
  plan[gg("nextn.hnorm.weight")] = {mtp + "pre_fc_norm_hidden.weight", Op::AddOne};
  plan[gg("nextn.shared_head_norm.weight")] = {mtp + "norm.weight", Op::AddOne};
}

// GGUF name -> HF source for every tensor the qwen35 table can hold.
Plan make_plan(const HParams& hp, const std::string& lm, const std::string& mtp) {
  Plan plan;
  plan["token_embd.weight"] = {lm + "embed_tokens.weight"};
  plan["output_norm.weight"] = {lm + "norm.weight", Op::AddOne};
  plan["output.weight"] = {"lm_head.weight"};
  for (int64_t il = 0; il < hp.n_block(); ++il) {
    const bool is_mtp = il >= hp.n_layer;
    const std::string hf = is_mtp ? fmt::format("{}layers.{}.", mtp, il - hp.n_layer)
                                  : fmt::format("{}layers.{}.", lm, il);
    plan_ffn_and_norms(plan, il, hf);
    if (hp.is_recurrent(il)) {
      plan_gdn(plan, hp, il, hf);
    } else {
      plan_attention(plan, il, hf);
    }
    if (is_mtp) plan_nextn(plan, il, mtp);
  }
  return plan;
}

// HF shape (PyTorch order) a GGUF tensor of shape ne must come from; the conv kernel is stored
// by HF as [channels, 1, kernel].
std::vector<int64_t> expected_hf_shape(const TensorSpec& spec) {
  std::vector<int64_t> shape(spec.ne.rbegin(), spec.ne.rend());
  if (spec.kind == TensorKind::Conv) shape.insert(shape.begin() + 1, 1);
  return shape;
}

quant::Type storage_type(const TensorSpec& spec, quant::Type requested, const Log& log) {
  const bool float_request = quant::type_info(requested).block_elems == 1;
  switch (spec.kind) {
    case TensorKind::Vector:
    case TensorKind::Conv:
      return quant::Type::F32;
    case TensorKind::GateMatrix:
      return float_request ? requested : quant::Type::BF16;
    case TensorKind::Matrix:
      break;
  }
  const int64_t block = quant::type_info(requested).block_elems;
  if (spec.ne[0] % block != 0) {
    log(
        fmt::format("{}: row length {} is not a multiple of {}'s block of {}; stored as f16 "
                    "(llama.cpp's converter rule)",
                    spec.name, spec.ne[0], quant::type_info(requested).name, block));
    return quant::Type::F16;
  }
  return requested;
}

// Streams the transformed tensor into `out`, one output row at a time.
void fill_tensor(const StTensor& src, const Source& how, quant::Type type, int64_t n_rows,
                 int64_t n_cols, std::span<uint8_t> out) {
  const size_t row_bytes = quant::row_bytes(type, n_cols);
  std::vector<float> in(static_cast<size_t>(n_cols)), row(static_cast<size_t>(n_cols));
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t src_row = how.rows.empty() ? r : how.rows[static_cast<size_t>(r)];
    src.read_f32(src_row * n_cols, n_cols, in.data());
    for (int64_t c = 0; c < n_cols; ++c) {
      const int64_t src_col = how.cols.empty() ? c : how.cols[static_cast<size_t>(c)];
      const float v = in[static_cast<size_t>(src_col)];
      row[static_cast<size_t>(c)] = how.op == Op::AddOne   ? v + 1.0f
                                    : how.op == Op::NegExp ? -std::exp(v)
                                                           : v;
    }
    quant::quantize_row(type, row.data(), out.data() + static_cast<size_t>(r) * row_bytes, n_cols);
  }
}

std::string mtp_prefix(const Checkpoint& ck) {
  for (const auto& [name, t] : ck.tensors()) {
    if (name.starts_with("model.mtp.")) return "model.mtp.";
  }
  return "mtp.";
}

bool has_prefix(const Checkpoint& ck, const std::string& prefix) {
  auto it = ck.tensors().lower_bound(prefix);
  return it != ck.tensors().end() && it->first.starts_with(prefix);
}

// Vision tower weights belong in a separate projector file; the text model never reads them.
bool is_vision(const std::string& name) {
  return name.starts_with("model.visual.");
}

// Every checkpoint tensor must have been used, except the vision tower's.
void check_leftovers(const Checkpoint& ck, const std::set<std::string>& used, const Log& log) {
  std::vector<std::string> left;
  size_t vision = 0;
  for (const auto& [name, t] : ck.tensors()) {
    if (is_vision(name)) {
      ++vision;
    } else if (!used.contains(name)) {
      left.push_back(name);
    }
  }
  if (vision > 0) log(fmt::format("skipped {} vision tensors (model.visual.*)", vision));
  if (left.empty()) return;
  const size_t shown = std::min<size_t>(left.size(), 8);
  fail("checkpoint has {} tensor(s) the qwen35 mapping does not use: {}{}", left.size(),
       fmt::join(left.begin(), left.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
       left.size() > shown ? ", ..." : "");
}

// Adds every table tensor to the writer; returns the HF tensors consumed.
std::set<std::string> add_tensors(gguf::Writer& w, const Checkpoint& ck, const HfConfig& cfg,
                                  quant::Type type, const Log& log) {
  const HParams& hp = cfg.hp;
  const Plan plan = make_plan(hp, cfg.lm_prefix, mtp_prefix(ck));
  std::set<std::string> used;
  for (const TensorSpec& spec : model::tensor_specs(hp)) {
    auto it = plan.find(spec.name);
    // Optional MTP heads (nextn.embed_tokens, nextn.shared_head_head) have no Qwen3.5 source.
    if (it == plan.end() && !spec.required) continue;
    if (it == plan.end()) fail("internal: no HF source rule for GGUF tensor '{}'", spec.name);
    const Source& how = it->second;
    const StTensor* src = ck.find(how.hf_name);
    if (src == nullptr) {
      if (!spec.required) continue;
      fail("checkpoint lacks '{}' (needed for GGUF tensor '{}')", how.hf_name, spec.name);
    }
    if (spec.name == "output.weight" && cfg.tie_word_embeddings) {
      log("lm_head.weight is present although tie_word_embeddings is set; writing output.weight");
    }
    if (src->shape != expected_hf_shape(spec)) {
      fail("{}: tensor '{}' has shape {}, expected [{}] for GGUF '{}'", src->file, src->name,
           src->shape_str(), fmt::join(expected_hf_shape(spec), ", "), spec.name);
    }
    used.insert(how.hf_name);
    const quant::Type t = storage_type(spec, type, log);
    const int64_t n_cols = spec.ne[0];
    const int64_t n_rows = src->n_elements() / n_cols;
    w.add_tensor(spec.name, t, spec.ne, [src, how, t, n_rows, n_cols](std::span<uint8_t> out) {
      fill_tensor(*src, how, t, n_rows, n_cols, out);
    });
  }
  if (!ck.find("lm_head.weight") && !cfg.tie_word_embeddings) {
    fail("checkpoint has no lm_head.weight and tie_word_embeddings is false");
  }
  return used;
}

void log_to_stderr(const std::string& line) {
  std::cerr << "convert: " << line << "\n";
}

HfConfig read_config(const json& config) {
  const auto [text_ptr, prefix] = text_part(config);
  const json& text = *text_ptr;
  require_if_present(text, "hidden_act", "silu");
  require_if_present(text, "attention_bias", false);
  require_if_present(text, "attn_output_gate", true);

  HfConfig cfg;
  cfg.lm_prefix = prefix;
  HParams& hp = cfg.hp;
  hp.n_embd = positive_int(text, "hidden_size");
  hp.n_layer = positive_int(text, "num_hidden_layers");
  hp.n_ff = positive_int(text, "intermediate_size");
  hp.n_head = positive_int(text, "num_attention_heads");
  hp.n_head_kv = positive_int(text, "num_key_value_heads");
  hp.head_dim = positive_int(text, "head_dim");
  hp.rms_eps = model::hparam_float(number(text, "rms_norm_eps"), "config.json: rms_norm_eps");
  hp.ssm_conv_kernel = positive_int(text, "linear_conv_kernel_dim");
  hp.ssm_d_state = positive_int(text, "linear_key_head_dim");
  if (positive_int(text, "linear_value_head_dim") != hp.ssm_d_state) {
    fail(
        "config.json: linear_value_head_dim {} differs from linear_key_head_dim {}; qwen35 "
        "GGUF has one ssm.state_size",
        text["linear_value_head_dim"].dump(), hp.ssm_d_state);
  }
  hp.ssm_n_k_heads = positive_int(text, "linear_num_key_heads");
  hp.ssm_n_v_heads = positive_int(text, "linear_num_value_heads");
  hp.n_vocab = positive_int(text, "vocab_size");
  hp.n_ctx_train = positive_int(text, "max_position_embeddings");
  hp.n_nextn =
      text.contains("mtp_num_hidden_layers") ? non_negative_int(text, "mtp_num_hidden_layers") : 0;
  if (hp.n_layer > HParams::kMaxBlocks || hp.n_nextn > HParams::kMaxBlocks - hp.n_layer) {
    fail("config.json: num_hidden_layers {} + mtp_num_hidden_layers {} exceed {} blocks",
         hp.n_layer, hp.n_nextn, HParams::kMaxBlocks);
  }
  parse_rope(text, hp);
  hp.full_attention_interval = attention_interval(text, hp.n_layer);
  hp.set_layer_kinds_from_interval();
  try {
    hp.validate();
  } catch (const Error& e) {  // its message names the GGUF key each config.json field becomes
    fail("config.json: {}", e.what());
  }

  // Multimodal configs may carry the flag at the root, text-only ones in the text config.
  const json& tie = text.contains("tie_word_embeddings")
                        ? text["tie_word_embeddings"]
                        : config.value("tie_word_embeddings", json(false));
  if (!tie.is_boolean()) fail("config.json: tie_word_embeddings is not a boolean");
  cfg.tie_word_embeddings = tie.get<bool>();
  return cfg;
}

}  // namespace

std::vector<int64_t> tiled_v_head_order(int64_t n_k_heads, int64_t n_v_heads) {
  if (n_k_heads <= 0 || n_v_heads % n_k_heads != 0) {
    fail("value heads {} are not a multiple of key heads {}", n_v_heads, n_k_heads);
  }
  const int64_t per_key = n_v_heads / n_k_heads;
  std::vector<int64_t> order;
  // Tiled head j·Hk + g is the j-th value head of key head g, grouped index g·r + j.
  for (int64_t j = 0; j < per_key; ++j) {
    for (int64_t g = 0; g < n_k_heads; ++g) order.push_back(g * per_key + j);
  }
  return order;
}

HfConfig parse_hf_config(const json& config) {
  return with_json_errors("config.json", [&] { return read_config(config); });
}

void convert_hf(const std::string& hf_dir, const std::string& out_gguf, quant::Type type,
                const Log& log_fn) {
  const Log log = log_fn ? log_fn : Log(log_to_stderr);
  const json config = read_json_file((fs::path(hf_dir) / "config.json").string());
  HfConfig cfg = parse_hf_config(config);
  const Checkpoint ck = Checkpoint::open(hf_dir);

  // transformers drops mtp.* on load, so re-saved checkpoints lose the MTP block while the
  // config still declares it: convert the trunk only, and say so.
  if (cfg.hp.n_nextn > 0 && !has_prefix(ck, mtp_prefix(ck))) {
    log(
        fmt::format("config declares {} MTP layer(s) but the checkpoint has no {}* tensors; "
                    "writing the trunk only",
                    cfg.hp.n_nextn, mtp_prefix(ck)));
    cfg.hp.n_nextn = 0;
    cfg.hp.set_layer_kinds_from_interval();
  }

  gguf::Writer w;
  cfg.hp.to_gguf(w.meta());
  w.meta().set("general.name", gguf::Value::str(fs::canonical(hf_dir).filename().string()));
  const std::set<std::string> used = add_tensors(w, ck, cfg, type, log);
  check_leftovers(ck, used, log);
  if (!add_hf_tokenizer(hf_dir, config, cfg.hp.n_vocab, w.meta(), log)) {
    log("no tokenizer.json: the GGUF has no tokenizer metadata");
  }
  log(cfg.hp.summary());
  w.write(out_gguf);
}

}  // namespace gdn::convert
