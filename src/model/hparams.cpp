#include "model/hparams.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/error.h"
#include "gguf/gguf.h"

namespace gdn::model {
namespace {

std::string key(const char* suffix) {
  return fmt::format("{}.{}", kArch, suffix);
}

// llama.cpp writes attention.recurrent_layers as a BOOL array; integer 0/1 arrays are
// accepted too.
std::vector<bool> read_flags(const gguf::Metadata& meta, const std::string& k) {
  const gguf::Array& a = meta.get_array(k);
  std::vector<bool> out;
  if (a.elem == gguf::ValueType::BOOL) {
    for (const gguf::Value& v : a.items) out.push_back(std::get<bool>(v.data));
    return out;
  }
  for (int64_t v : meta.get_int_array(k)) out.push_back(v != 0);
  return out;
}

// Checked before anything is sized by the block count (the layer kinds list, the tensor table)
// and before the trunk's layer count is derived from it.
void check_block_counts(int64_t n_blocks, int64_t n_nextn) {
  if (n_blocks <= 0 || n_blocks > HParams::kMaxBlocks) {
    fail("qwen35 block_count must be in [1, {}], got {}", HParams::kMaxBlocks, n_blocks);
  }
  if (n_nextn < 0 || n_nextn >= n_blocks) {
    fail(
        "qwen35 nextn_predict_layers {} must be >= 0 and leave at least one of the {} blocks to "
        "the trunk",
        n_nextn, n_blocks);
  }
}

}  // namespace

int64_t HParams::n_recurrent() const {
  int64_t n = 0;
  for (int64_t il = 0; il < n_layer; ++il) n += is_recurrent(il) ? 1 : 0;
  return n;
}

int64_t HParams::n_attention() const {
  return n_layer - n_recurrent();
}

void HParams::set_layer_kinds_from_interval() {
  recurrent.assign(static_cast<size_t>(n_block()), false);
  for (int64_t il = 0; il < n_layer; ++il) {
    recurrent[static_cast<size_t>(il)] = (il + 1) % full_attention_interval != 0;
  }
}

void HParams::validate() const {
  auto width = [](int64_t v, const char* what) {
    if (v <= 0 || v > kMaxWidth) {
      fail("qwen35 hyper-parameter {} must be in [1, {}], got {}", what, kMaxWidth, v);
    }
  };
  width(n_embd, "embedding_length");
  width(n_ff, "feed_forward_length");
  width(n_head, "attention.head_count");
  width(n_head_kv, "attention.head_count_kv");
  width(head_dim, "attention.key_length");
  width(ssm_conv_kernel, "ssm.conv_kernel");
  width(ssm_d_state, "ssm.state_size");
  width(ssm_n_v_heads, "ssm.time_step_rank");
  width(ssm_n_k_heads, "ssm.group_count");
  width(n_vocab, "vocabulary size (token_embd rows)");
  // Bounded apart first (any caller may fill them), so that their sum cannot overflow.
  if (n_layer <= 0 || n_layer > kMaxBlocks || n_nextn < 0 || n_nextn > kMaxBlocks) {
    fail("qwen35 trunk layers {} and MTP blocks {} must be in [1, {}] and [0, {}]", n_layer,
         n_nextn, kMaxBlocks, kMaxBlocks);
  }
  check_block_counts(n_block(), n_nextn);
  // Each factor is at most kMaxWidth (2 * n_head at most twice that), so these products stay
  // below 2^63; bounding them keeps every tensor's element count (a product of two widths) in
  // int64 too.
  auto product = [](int64_t a, int64_t b, const char* what) {
    if (a * b > kMaxWidth) fail("qwen35 {} = {} x {} exceeds {}", what, a, b, kMaxWidth);
  };
  product(2 * n_head, head_dim, "attn_q rows (2 x head_count x key_length)");
  product(n_head_kv, head_dim, "head_count_kv x key_length");
  product(ssm_n_v_heads, ssm_d_state, "ssm.time_step_rank x ssm.state_size");
  product(ssm_n_k_heads, ssm_d_state, "ssm.group_count x ssm.state_size");
  if (conv_dim() > kMaxWidth) fail("qwen35 conv width {} exceeds {}", conv_dim(), kMaxWidth);
  if (2 * n_embd > kMaxWidth) {  // an MTP block's eh_proj has 2E rows
    fail("qwen35 embedding_length {} is too large: 2 x it exceeds {}", n_embd, kMaxWidth);
  }
  if (n_head % n_head_kv != 0) {
    fail("qwen35 attention.head_count {} is not a multiple of head_count_kv {}", n_head, n_head_kv);
  }
  if (ssm_n_v_heads % ssm_n_k_heads != 0) {
    fail("qwen35 ssm.time_step_rank (Hv={}) is not a multiple of ssm.group_count (Hk={})",
         ssm_n_v_heads, ssm_n_k_heads);
  }
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0) {
    fail("qwen35 rope.dimension_count {} must be even and in (0, key_length={}]", n_rot, head_dim);
  }
  if (!(rms_eps > 0.0f) || !std::isfinite(rms_eps)) {
    fail("qwen35 attention.layer_norm_rms_epsilon must be finite and > 0, got {}", rms_eps);
  }
  if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta)) {
    fail("qwen35 rope.freq_base must be finite and > 0, got {}", rope_theta);
  }
  // Written back as uint32 (to_gguf): a larger value would silently become another one.
  if (full_attention_interval <= 0 || full_attention_interval > UINT32_MAX) {
    fail("qwen35 full_attention_interval must be in [1, {}], got {}", UINT32_MAX,
         full_attention_interval);
  }
  if (n_ctx_train < 0 || n_ctx_train > UINT32_MAX) {
    fail("qwen35 context_length must be in [0, {}], got {}", UINT32_MAX, n_ctx_train);
  }
  if (static_cast<int64_t>(recurrent.size()) != n_block()) {
    fail("qwen35 layer kinds list has {} entries for {} blocks", recurrent.size(), n_block());
  }
  for (int64_t il = n_layer; il < n_block(); ++il) {
    if (is_recurrent(il))
      fail("qwen35 MTP block {} is marked recurrent; MTP blocks are attention", il);
  }
}

HParams HParams::from_gguf(const gguf::Metadata& meta) {
  const std::string arch = meta.get_string("general.architecture");
  if (arch != kArch) fail("general.architecture is '{}', expected '{}'", arch, kArch);
  HParams hp;
  hp.n_embd = meta.get_int(key("embedding_length"));
  hp.n_nextn = meta.get_int(key("nextn_predict_layers"), 0);
  const int64_t n_blocks = meta.get_int(key("block_count"));
  check_block_counts(n_blocks, hp.n_nextn);
  hp.n_layer = n_blocks - hp.n_nextn;
  hp.n_ff = meta.get_int(key("feed_forward_length"));
  hp.n_head = meta.get_int(key("attention.head_count"));
  hp.n_head_kv = meta.get_int(key("attention.head_count_kv"));
  hp.head_dim = meta.get_int(key("attention.key_length"));
  const int64_t value_length = meta.get_int(key("attention.value_length"), hp.head_dim);
  if (value_length != hp.head_dim) {
    fail("qwen35 attention.value_length {} differs from key_length {}", value_length, hp.head_dim);
  }
  hp.n_rot = meta.get_int(key("rope.dimension_count"), hp.head_dim);
  hp.rope_theta = hparam_float(meta.get_float(key("rope.freq_base"), 1e7), key("rope.freq_base"));
  if (meta.has(key("rope.dimension_sections"))) {
    const auto sections = meta.get_int_array(key("rope.dimension_sections"));
    for (size_t i = 0; i < sections.size() && i < hp.rope_sections.size(); ++i) {
      hp.rope_sections[i] = static_cast<int32_t>(sections[i]);
    }
  }
  hp.rms_eps = hparam_float(meta.get_float(key("attention.layer_norm_rms_epsilon")),
                            key("attention.layer_norm_rms_epsilon"));
  hp.ssm_conv_kernel = meta.get_int(key("ssm.conv_kernel"));
  hp.ssm_d_state = meta.get_int(key("ssm.state_size"));
  hp.ssm_n_v_heads = meta.get_int(key("ssm.time_step_rank"));
  hp.ssm_n_k_heads = meta.get_int(key("ssm.group_count"));
  const int64_t inner = meta.get_int(key("ssm.inner_size"));
  int64_t expected_inner = 0;  // the product is not validated yet: it may overflow
  if (__builtin_mul_overflow(hp.ssm_n_v_heads, hp.ssm_d_state, &expected_inner) ||
      inner != expected_inner) {
    fail("qwen35 ssm.inner_size {} != time_step_rank {} x state_size {} (dv must equal dk)", inner,
         hp.ssm_n_v_heads, hp.ssm_d_state);
  }
  hp.n_ctx_train = meta.get_int(key("context_length"), 0);
  hp.full_attention_interval = meta.get_int(key("full_attention_interval"), 4);
  if (hp.full_attention_interval <= 0) {
    fail("qwen35 full_attention_interval must be positive, got {}", hp.full_attention_interval);
  }
  const std::string recurrent_key = key("attention.recurrent_layers");
  if (meta.has(recurrent_key)) {
    const std::vector<bool> flags = read_flags(meta, recurrent_key);
    if (static_cast<int64_t>(flags.size()) < hp.n_layer) {
      fail("{} has {} entries, need one per trunk layer ({})", recurrent_key, flags.size(),
           hp.n_layer);
    }
    hp.recurrent.assign(static_cast<size_t>(hp.n_block()), false);
    for (int64_t il = 0; il < hp.n_layer; ++il) hp.recurrent[il] = flags[il];
  } else {
    hp.set_layer_kinds_from_interval();
  }
  return hp;
}

void HParams::to_gguf(gguf::Metadata& meta) const {
  using gguf::Value;
  auto u32 = [](int64_t v) { return Value::u32(static_cast<uint32_t>(v)); };
  meta.set("general.architecture", Value::str(kArch));
  meta.set(key("context_length"), u32(n_ctx_train));
  meta.set(key("embedding_length"), u32(n_embd));
  meta.set(key("block_count"), u32(n_block()));
  meta.set(key("nextn_predict_layers"), u32(n_nextn));
  meta.set(key("feed_forward_length"), u32(n_ff));
  meta.set(key("attention.head_count"), u32(n_head));
  meta.set(key("attention.head_count_kv"), u32(n_head_kv));
  meta.set(key("attention.key_length"), u32(head_dim));
  meta.set(key("attention.value_length"), u32(head_dim));
  meta.set(key("rope.dimension_count"), u32(n_rot));
  meta.set(key("rope.freq_base"), Value::f32(rope_theta));
  meta.set(key("rope.dimension_sections"),
           Value::i32s({rope_sections[0], rope_sections[1], rope_sections[2], rope_sections[3]}));
  meta.set(key("attention.layer_norm_rms_epsilon"), Value::f32(rms_eps));
  meta.set(key("ssm.conv_kernel"), u32(ssm_conv_kernel));
  meta.set(key("ssm.inner_size"), u32(ssm_inner()));
  meta.set(key("ssm.state_size"), u32(ssm_d_state));
  meta.set(key("ssm.time_step_rank"), u32(ssm_n_v_heads));
  meta.set(key("ssm.group_count"), u32(ssm_n_k_heads));
  meta.set(key("full_attention_interval"), u32(full_attention_interval));
  // Written over all blocks (MTP ones false), as llama.cpp's loader expects it.
  std::vector<Value> flags;
  for (int64_t il = 0; il < n_block(); ++il) flags.push_back(Value::boolean(is_recurrent(il)));
  meta.set(key("attention.recurrent_layers"), Value::array(gguf::ValueType::BOOL, flags));
}

float hparam_float(double v, const std::string& what) {
  if (!std::isfinite(v) || std::abs(v) > std::numeric_limits<float>::max()) {
    fail("{} is {}, not a finite float", what, v);
  }
  return static_cast<float>(v);
}

std::string HParams::summary() const {
  return fmt::format(
      "qwen35: E={} layers={} ({} GDN + {} attention) + {} MTP, ffn={}, heads={}/{} D={} rot={}, "
      "GDN Hk={} Hv={} d={}, vocab={}",
      n_embd, n_layer, n_recurrent(), n_attention(), n_nextn, n_ff, n_head, n_head_kv, head_dim,
      n_rot, ssm_n_k_heads, ssm_n_v_heads, ssm_d_state, n_vocab);
}

}  // namespace gdn::model
