#include "model/tensors.h"

#include <fmt/format.h>

namespace gdn::model {

std::string block_tensor_name(int64_t il, const std::string& base) {
  return fmt::format("blk.{}.{}", il, base);
}

namespace {

void add_ffn(std::vector<TensorSpec>& out, const HParams& hp, int64_t il) {
  const int64_t E = hp.n_embd, F = hp.n_ff;
  out.push_back({block_tensor_name(il, "post_attention_norm.weight"), {E}, TensorKind::Vector});
  out.push_back({block_tensor_name(il, "ffn_gate.weight"), {E, F}, TensorKind::Matrix});
  out.push_back({block_tensor_name(il, "ffn_up.weight"), {E, F}, TensorKind::Matrix});
  out.push_back({block_tensor_name(il, "ffn_down.weight"), {F, E}, TensorKind::Matrix});
}

void add_gdn(std::vector<TensorSpec>& out, const HParams& hp, int64_t il) {
  const int64_t E = hp.n_embd, Hv = hp.ssm_n_v_heads;
  auto name = [&](const char* base) { return block_tensor_name(il, base); };
  out.push_back({name("attn_qkv.weight"), {E, hp.conv_dim()}, TensorKind::Matrix});
  out.push_back({name("attn_gate.weight"), {E, hp.ssm_inner()}, TensorKind::Matrix});
  out.push_back({name("ssm_beta.weight"), {E, Hv}, TensorKind::GateMatrix});
  out.push_back({name("ssm_alpha.weight"), {E, Hv}, TensorKind::GateMatrix});
  out.push_back({name("ssm_conv1d.weight"), {hp.ssm_conv_kernel, hp.conv_dim()}, TensorKind::Conv});
  out.push_back({name("ssm_dt.bias"), {Hv}, TensorKind::Vector});
  out.push_back({name("ssm_a"), {Hv}, TensorKind::Vector});
  out.push_back({name("ssm_norm.weight"), {hp.ssm_d_state}, TensorKind::Vector});
  out.push_back({name("ssm_out.weight"), {hp.ssm_inner(), E}, TensorKind::Matrix});
}

void add_attention(std::vector<TensorSpec>& out, const HParams& hp, int64_t il) {
  const int64_t E = hp.n_embd, D = hp.head_dim;
  auto name = [&](const char* base) { return block_tensor_name(il, base); };
  // attn_q rows: per head, D rows of query then D rows of output gate.
  out.push_back({name("attn_q.weight"), {E, 2 * hp.q_dim()}, TensorKind::Matrix});
  out.push_back({name("attn_k.weight"), {E, hp.kv_dim()}, TensorKind::Matrix});
  out.push_back({name("attn_v.weight"), {E, hp.kv_dim()}, TensorKind::Matrix});
  out.push_back({name("attn_output.weight"), {hp.q_dim(), E}, TensorKind::Matrix});
  out.push_back({name("attn_q_norm.weight"), {D}, TensorKind::Vector});
  out.push_back({name("attn_k_norm.weight"), {D}, TensorKind::Vector});
}

void add_nextn(std::vector<TensorSpec>& out, const HParams& hp, int64_t il) {
  const int64_t E = hp.n_embd, V = hp.n_vocab;
  auto name = [&](const char* base) { return block_tensor_name(il, base); };
  out.push_back({name("nextn.eh_proj.weight"), {2 * E, E}, TensorKind::Matrix});
  out.push_back({name("nextn.enorm.weight"), {E}, TensorKind::Vector});
  out.push_back({name("nextn.hnorm.weight"), {E}, TensorKind::Vector});
  out.push_back({name("nextn.shared_head_norm.weight"), {E}, TensorKind::Vector, false});
  out.push_back({name("nextn.shared_head_head.weight"), {E, V}, TensorKind::Matrix, false});
  out.push_back({name("nextn.embed_tokens.weight"), {E, V}, TensorKind::Matrix, false});
}

}  // namespace

std::vector<TensorSpec> tensor_specs(const HParams& hp) {
  const int64_t E = hp.n_embd;
  std::vector<TensorSpec> out;
  out.push_back({"token_embd.weight", {E, hp.n_vocab}, TensorKind::Matrix});
  out.push_back({"output_norm.weight", {E}, TensorKind::Vector});
  out.push_back({"output.weight", {E, hp.n_vocab}, TensorKind::Matrix, false});
  for (int64_t il = 0; il < hp.n_block(); ++il) {
    out.push_back({block_tensor_name(il, "attn_norm.weight"), {E}, TensorKind::Vector});
    if (hp.is_recurrent(il)) {
      add_gdn(out, hp, il);
    } else {
      add_attention(out, hp, il);
    }
    add_ffn(out, hp, il);
    if (il >= hp.n_layer) add_nextn(out, hp, il);
  }
  return out;
}

}  // namespace gdn::model
