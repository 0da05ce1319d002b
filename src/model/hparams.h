// qwen35 hyper-parameters, read from and written to GGUF metadata (prefix "qwen35.").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gdn::gguf {
class Metadata;
}

namespace gdn::model {

inline constexpr const char* kArch = "qwen35";

struct HParams {
  // Bounds validate() enforces: every width the tensor table derives (and so every tensor's
  // element count, a product of two widths) stays representable.
  static constexpr int64_t kMaxWidth = INT32_MAX;
  static constexpr int64_t kMaxBlocks = 4096;

  int64_t n_embd = 0;     // E
  int64_t n_layer = 0;    // trunk layers (block_count minus MTP layers)
  int64_t n_nextn = 0;    // MTP layers appended after the trunk
  int64_t n_ff = 0;       // feed_forward_length
  int64_t n_head = 0;     // attention query heads
  int64_t n_head_kv = 0;  // attention key/value heads
  int64_t head_dim = 0;   // D (key_length == value_length)
  int64_t n_rot = 0;      // rotated dims per head (NeoX RoPE on the first n_rot)
  float rope_theta = 1e7f;
  std::array<int32_t, 4> rope_sections{};  // M-RoPE sections; text positions make it plain RoPE
  float rms_eps = 1e-6f;
  int64_t ssm_conv_kernel = 4;
  int64_t ssm_d_state = 0;    // dk == dv
  int64_t ssm_n_v_heads = 0;  // Hv (time_step_rank)
  int64_t ssm_n_k_heads = 0;  // Hk (group_count)
  int64_t full_attention_interval = 4;
  std::vector<bool> recurrent;  // per block (trunk + MTP): true for GDN layers
  int64_t n_vocab = 0;          // rows of token_embd
  int64_t n_ctx_train = 0;

  int64_t n_block() const { return n_layer + n_nextn; }
  int64_t ssm_inner() const { return ssm_n_v_heads * ssm_d_state; }   // Hv·dv
  int64_t ssm_qk_dim() const { return ssm_n_k_heads * ssm_d_state; }  // Hk·dk
  int64_t conv_dim() const { return 2 * ssm_qk_dim() + ssm_inner(); }
  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  bool is_recurrent(int64_t il) const { return recurrent.at(static_cast<size_t>(il)); }
  int64_t n_recurrent() const;  // GDN layers in the trunk
  int64_t n_attention() const;  // attention layers in the trunk

  // Layer kinds from full_attention_interval: layer i is GDN iff (i+1) % interval != 0;
  // MTP blocks are always full attention.
  void set_layer_kinds_from_interval();
  // Throws gdn::Error naming the first inconsistent field.
  void validate() const;

  // n_vocab is not metadata: the caller sets it from token_embd.
  static HParams from_gguf(const gguf::Metadata& meta);
  void to_gguf(gguf::Metadata& meta) const;
  std::string summary() const;
};

// A float hyper-parameter read from a file as a double: refused, naming `what`, when it is not
// finite or beyond float's range (where the cast to float is undefined).
float hparam_float(double v, const std::string& what);

}  // namespace gdn::model
