#include "model/weights.h"

#include <map>

#include "common/error.h"
#include "model/tensors.h"
#include "quant/quant.h"

namespace gdn::model {
namespace {

bool is_float_type(quant::Type t) {
  return t == quant::Type::F32 || t == quant::Type::F16 || t == quant::Type::BF16;
}

// Looks tensors up against the expected table and checks type and shape once, here.
class Binder {
 public:
  Binder(const gguf::File& file, const HParams& hp) : file_(file) {
    for (auto& spec : tensor_specs(hp)) specs_.emplace(spec.name, std::move(spec));
    for (const auto& t : file.tensors()) {
      if (!specs_.count(t.name)) {
        fail("{}: unexpected tensor '{}' {} for qwen35 with {}", file.path(), t.name, t.shape_str(),
             hp.summary());
      }
    }
  }

  Matrix matrix(const std::string& name) {
    const gguf::TensorInfo* t = lookup(name);
    if (!t) return {};
    const TensorSpec& spec = specs_.at(name);
    if ((spec.kind == TensorKind::Vector || spec.kind == TensorKind::Conv)) {
      fail("{}: tensor '{}' is not a matrix", file_.path(), name);
    }
    Matrix m;
    m.name = name;
    m.type = t->type;
    m.n_in = t->ne[0];
    m.n_out = t->ne.size() > 1 ? t->ne[1] : 1;
    m.row_bytes = quant::row_bytes(t->type, m.n_in);
    m.data = t->data;
    return m;
  }

  // Small tensors are widened to f32 so every backend sees one format.
  std::vector<float> floats(const std::string& name) {
    const gguf::TensorInfo* t = lookup(name);
    if (!t) return {};
    if (!is_float_type(t->type)) {
      fail("{}: tensor '{}' has type {}, expected f32/f16/bf16", file_.path(), name,
           quant::type_info(t->type).name);
    }
    std::vector<float> out(static_cast<size_t>(t->n_elements()));
    quant::dequantize_row(t->type, t->data, out.data(), t->n_elements());
    return out;
  }

 private:
  const gguf::TensorInfo* lookup(const std::string& name) {
    auto it = specs_.find(name);
    if (it == specs_.end()) fail("internal: tensor '{}' is not in the qwen35 table", name);
    const TensorSpec& spec = it->second;
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (!t) {
      if (spec.required) fail("{}: missing tensor '{}'", file_.path(), name);
      return nullptr;
    }
    if (t->ne != spec.ne) {
      gguf::TensorInfo expected;
      expected.ne = spec.ne;
      fail("{}: tensor '{}' has shape {}, expected {}", file_.path(), name, t->shape_str(),
           expected.shape_str());
    }
    return t;
  }

  const gguf::File& file_;
  std::map<std::string, TensorSpec> specs_;
};

void bind_gdn(Binder& b, int64_t il, GdnWeights& g) {
  auto name = [&](const char* base) { return block_tensor_name(il, base); };
  g.qkv = b.matrix(name("attn_qkv.weight"));
  g.gate = b.matrix(name("attn_gate.weight"));
  g.beta = b.matrix(name("ssm_beta.weight"));
  g.alpha = b.matrix(name("ssm_alpha.weight"));
  g.out = b.matrix(name("ssm_out.weight"));
  g.conv = b.floats(name("ssm_conv1d.weight"));
  g.dt_bias = b.floats(name("ssm_dt.bias"));
  g.a = b.floats(name("ssm_a"));
  g.norm = b.floats(name("ssm_norm.weight"));
}

void bind_attention(Binder& b, int64_t il, AttentionWeights& a) {
  auto name = [&](const char* base) { return block_tensor_name(il, base); };
  a.q = b.matrix(name("attn_q.weight"));
  a.k = b.matrix(name("attn_k.weight"));
  a.v = b.matrix(name("attn_v.weight"));
  a.o = b.matrix(name("attn_output.weight"));
  a.q_norm = b.floats(name("attn_q_norm.weight"));
  a.k_norm = b.floats(name("attn_k_norm.weight"));
}

void bind_nextn(Binder& b, int64_t il, NextnWeights& n) {
  auto name = [&](const char* base) { return block_tensor_name(il, base); };
  n.eh_proj = b.matrix(name("nextn.eh_proj.weight"));
  n.enorm = b.floats(name("nextn.enorm.weight"));
  n.hnorm = b.floats(name("nextn.hnorm.weight"));
  n.shared_head_norm = b.floats(name("nextn.shared_head_norm.weight"));
  n.shared_head_head = b.matrix(name("nextn.shared_head_head.weight"));
  n.embed_tokens = b.matrix(name("nextn.embed_tokens.weight"));
}

}  // namespace

Model Model::load(std::shared_ptr<const gguf::File> file) {
  Model m;
  m.file = file;
  m.hp = HParams::from_gguf(file->meta());
  const gguf::TensorInfo& embd = file->tensor("token_embd.weight");
  if (embd.ne.size() != 2) {
    fail("{}: token_embd.weight has shape {}, expected 2 dimensions", file->path(),
         embd.shape_str());
  }
  m.hp.n_vocab = embd.ne[1];
  m.hp.validate();

  Binder b(*file, m.hp);
  m.token_embd = b.matrix("token_embd.weight");
  m.output_norm = b.floats("output_norm.weight");
  m.output = b.matrix("output.weight");
  m.tied_output = !m.output;
  if (m.tied_output) m.output = m.token_embd;

  m.layers.resize(static_cast<size_t>(m.hp.n_block()));
  for (int64_t il = 0; il < m.hp.n_block(); ++il) {
    Layer& L = m.layers[static_cast<size_t>(il)];
    L.recurrent = m.hp.is_recurrent(il);
    L.attn_norm = b.floats(block_tensor_name(il, "attn_norm.weight"));
    L.post_norm = b.floats(block_tensor_name(il, "post_attention_norm.weight"));
    L.ffn_gate = b.matrix(block_tensor_name(il, "ffn_gate.weight"));
    L.ffn_up = b.matrix(block_tensor_name(il, "ffn_up.weight"));
    L.ffn_down = b.matrix(block_tensor_name(il, "ffn_down.weight"));
    if (L.recurrent) {
      bind_gdn(b, il, L.gdn);
    } else {
      bind_attention(b, il, L.attn);
    }
    if (il >= m.hp.n_layer) bind_nextn(b, il, L.nextn);
  }
  return m;
}

Model Model::load(const std::string& path) {
  return load(std::make_shared<const gguf::File>(gguf::File::open(path)));
}

uint64_t Model::decode_weight_bytes() const {
  uint64_t total = output.bytes();
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const Layer& L = layers[static_cast<size_t>(il)];
    total += L.ffn_gate.bytes() + L.ffn_up.bytes() + L.ffn_down.bytes();
    if (L.recurrent) {
      total += L.gdn.qkv.bytes() + L.gdn.gate.bytes() + L.gdn.beta.bytes() + L.gdn.alpha.bytes() +
               L.gdn.out.bytes();
    } else {
      total += L.attn.q.bytes() + L.attn.k.bytes() + L.attn.v.bytes() + L.attn.o.bytes();
    }
  }
  return total;
}

}  // namespace gdn::model
