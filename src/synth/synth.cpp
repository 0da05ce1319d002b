#include "synth/synth.h"

#include <cmath>
#include <cstring>

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/parallel.h"
#include "model/tensors.h"
#include "quant/quant.h"

namespace gdn::synth {
namespace {

using model::HParams;
using model::TensorKind;
using model::TensorSpec;

HParams make(int64_t E, int64_t layers, int64_t interval, int64_t ff, int64_t heads,
             int64_t kv_heads, int64_t D, int64_t hk, int64_t hv, int64_t d, int64_t vocab) {
  HParams hp;
  hp.n_embd = E;
  hp.n_layer = layers;
  hp.full_attention_interval = interval;
  hp.n_ff = ff;
  hp.n_head = heads;
  hp.n_head_kv = kv_heads;
  hp.head_dim = D;
  hp.n_rot = D / 4;  // partial_rotary_factor 0.25, as every Qwen3.5 uses
  hp.rope_theta = 1e7f;
  hp.rope_sections = {11, 11, 10, 0};
  hp.rms_eps = 1e-6f;
  hp.ssm_conv_kernel = 4;
  hp.ssm_n_k_heads = hk;
  hp.ssm_n_v_heads = hv;
  hp.ssm_d_state = d;
  hp.n_vocab = vocab;
  hp.n_ctx_train = 262144;
  hp.set_layer_kinds_from_interval();
  return hp;
}

// splitmix64: a fast, well-mixed generator; one stream per (seed, tensor, row).
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) {  // [lo, hi)
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }
};

uint64_t hash_name(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Values of one row of a tensor, chosen so the forward pass stays O(1) (see header).
void fill_row(const TensorSpec& spec, Rng& rng, float* row, int64_t n) {
  if (spec.kind == TensorKind::Matrix || spec.kind == TensorKind::GateMatrix ||
      spec.kind == TensorKind::Conv) {
    const float a = std::sqrt(3.0f / static_cast<float>(spec.ne[0]));
    for (int64_t i = 0; i < n; ++i) row[i] = rng.uniform(-a, a);
  } else if (ends_with(spec.name, "ssm_a")) {
    for (int64_t i = 0; i < n; ++i) row[i] = -std::exp(rng.uniform(-1.0f, 1.0f));  // -exp(A_log)
  } else if (ends_with(spec.name, "ssm_dt.bias")) {
    for (int64_t i = 0; i < n; ++i) row[i] = rng.uniform(-1.0f, 1.0f);
  } else {  // RMSNorm weights (GGUF stores them with HF's +1 already applied)
    for (int64_t i = 0; i < n; ++i) row[i] = 1.0f + rng.uniform(-0.2f, 0.2f);
  }
}

// Copies the tokenizer.* keys; returns the token count.
int64_t copy_tokenizer(const gguf::Metadata& from, gguf::Metadata& to) {
  if (!from.has("tokenizer.ggml.tokens"))
    fail("the vocabulary source has no tokenizer.ggml.tokens");
  for (const auto& [key, value] : from.all()) {
    if (key.starts_with("tokenizer.")) to.set(key, value);
  }
  return static_cast<int64_t>(from.get_array("tokenizer.ggml.tokens").items.size());
}

}  // namespace

model::HParams preset(const std::string& name) {
  // Bonsai-27B: DESIGN.md §2. Qwen3.5-0.8B: its released config. tiny: every structural
  // feature (GQA, Hv = 2·Hk, two attention layers) at sizes that run in milliseconds.
  if (name == "bonsai-27b") return make(5120, 64, 4, 17408, 24, 4, 256, 16, 48, 128, 248320);
  if (name == "qwen35-0.8b") return make(1024, 24, 4, 3584, 8, 2, 256, 16, 16, 128, 248320);
  if (name == "tiny") return make(256, 4, 2, 512, 4, 2, 64, 2, 4, 64, 2048);
  fail("unknown preset '{}' (known: {})", name, fmt::join(preset_names(), ", "));
}

std::vector<std::string> preset_names() {
  return {"bonsai-27b", "qwen35-0.8b", "tiny"};
}

quant::Type storage_type(TensorKind kind, quant::Type type) {
  const bool quantised = quant::type_info(type).block_elems > 1;
  switch (kind) {
    case TensorKind::Matrix:
      return type;
    case TensorKind::GateMatrix:
      return quantised ? quant::Type::BF16 : type;
    case TensorKind::Vector:
    case TensorKind::Conv:
      return quant::Type::F32;
  }
  return quant::Type::F32;
}

HParams add_model(gguf::Writer& w, const HParams& shape, const Options& opts) {
  HParams hp = shape;
  if (opts.tokenizer) hp.n_vocab = copy_tokenizer(*opts.tokenizer, w.meta());
  hp.validate();
  hp.to_gguf(w.meta());
  w.meta().set("general.name", gguf::Value::str("gdn synthetic qwen35"));
  auto pool = std::make_shared<ThreadPool>();
  // The writer runs the fillers later, one at a time, once every tensor is declared.
  struct Bytes {
    uint64_t done = 0, total = 0;
  };
  auto bytes = std::make_shared<Bytes>();
  for (const TensorSpec& spec : model::tensor_specs(hp)) {
    if (!spec.required && !(spec.name == "output.weight" && !opts.tied_output)) continue;
    const quant::Type type = storage_type(spec.kind, opts.type);
    const int64_t n_in = spec.ne[0];
    int64_t n_rows = 1;
    for (size_t i = 1; i < spec.ne.size(); ++i) n_rows *= spec.ne[i];
    const size_t row_bytes = quant::row_bytes(type, n_in);
    const uint64_t seed = hash_name(spec.name, opts.seed);
    bytes->total += row_bytes * static_cast<uint64_t>(n_rows);
    w.add_tensor(spec.name, type, spec.ne, [=, progress = opts.progress](std::span<uint8_t> out) {
      pool->parallel_for(n_rows, [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(n_in));
        for (int64_t r = r0; r < r1; ++r) {
          Rng rng{seed + static_cast<uint64_t>(r) * 0xD1B54A32D192ED03ull};
          fill_row(spec, rng, row.data(), n_in);
          quant::quantize_row(type, row.data(), out.data() + r * row_bytes, n_in);
        }
      });
      bytes->done += out.size();
      if (progress) progress(bytes->done, bytes->total);
    });
  }
  return hp;
}

std::unique_ptr<InMemory> make_in_memory(const HParams& hp, const Options& opts) {
  gguf::Writer w;
  add_model(w, hp, opts);
  auto mem = std::make_unique<InMemory>();
  mem->bytes = w.to_bytes();
  mem->file = std::make_shared<const gguf::File>(gguf::File::parse(mem->bytes, "<synthetic>"));
  mem->model = model::Model::load(mem->file);
  return mem;
}

}  // namespace gdn::synth
