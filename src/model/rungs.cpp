#include "model/rungs.h"

#include <fmt/format.h>

#include "common/error.h"

namespace gdn::model {

const std::array<RungInfo, kRungCount>& rung_table() {
  static const std::array<RungInfo, kRungCount> table = {{
      {Rung::StateInplace, "state-inplace", true,
       "GDN kernel reads the recurrent state straight from the slot (no gather)"},
      {Rung::StateWriteFused, "state-write-fused", true,
       "GDN kernel writes the updated state straight into the slot (no scatter)"},
      {Rung::GatingFused, "gating-fused", true,
       "beta = sigmoid(b), g = softplus(a + dt_bias)*A inside the GDN kernel"},
      {Rung::L2NormFused, "l2norm-fused", true,
       "q/k L2 normalisation inside the GDN kernel (decode programs)"},
      {Rung::ConvInplace, "conv-inplace", true,
       "causal conv reads/writes its state in place, SiLU fused (no concat, no state copy); "
       "with norm-gemv-fused, a decode runs it in the qkv GEMV's epilogue"},
      {Rung::NormGemvFused, "norm-gemv-fused", true,
       "norms/gates in the GEMV prologue, residual add and SwiGLU in its epilogue, GEMVs "
       "sharing an input in one launch, and the attention layer's q/k head norms, RoPE, "
       "q|gate split and KV store inside its attention kernel (decode programs, per-layer "
       "matrices)"},
      {Rung::Graphs, "graphs", true, "each program captured once and replayed as a CUDA graph"},
      {Rung::StateF16, "state-f16", false, "recurrent state stored as f16 (not exact)"},
      {Rung::StateBf16, "state-bf16", false, "recurrent state stored as bf16 (not exact)"},
  }};
  return table;
}

const RungInfo& rung_info(Rung r) {
  return rung_table()[static_cast<size_t>(r)];
}

const char* state_type_name(StateType t) {
  switch (t) {
    case StateType::F32:
      return "f32";
    case StateType::F16:
      return "f16";
    case StateType::BF16:
      return "bf16";
  }
  return "?";
}

Rungs Rungs::exact() {
  Rungs r;
  for (const RungInfo& i : rung_table()) {
    if (i.exact) r = r.with(i.rung);
  }
  return r;
}

StateType Rungs::state_type() const {
  if (has(Rung::StateF16) && has(Rung::StateBf16)) {
    fail("rungs: state-f16 and state-bf16 cannot both be on");
  }
  if (has(Rung::StateF16)) return StateType::F16;
  if (has(Rung::StateBf16)) return StateType::BF16;
  return StateType::F32;
}

Rungs parse_rungs(std::string_view spec) {
  Rungs r;
  if (spec.empty()) fail("rungs: empty list (use 'none' for the baseline)");
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = spec.find(',', pos);
    std::string_view item =
        spec.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    pos = comma == std::string_view::npos ? spec.size() + 1 : comma + 1;
    const bool remove = !item.empty() && item.front() == '-';
    if (remove) item.remove_prefix(1);
    if (item == "none" && !remove) continue;
    if (item == "all" && !remove) {
      r = r | Rungs::exact();
      continue;
    }
    const RungInfo* found = nullptr;
    for (const RungInfo& i : rung_table()) {
      if (item == i.name) found = &i;
    }
    if (!found) {
      std::string known = "all, none";
      for (const RungInfo& i : rung_table()) known += fmt::format(", {}", i.name);
      fail("rungs: unknown rung '{}' in '{}' (known: {})", item, spec, known);
    }
    r = remove ? r.without(found->rung) : r.with(found->rung);
  }
  r.state_type();  // refuses f16 together with bf16
  return r;
}

std::string format_rungs(Rungs r) {
  std::string s;
  for (const RungInfo& i : rung_table()) {
    if (r.has(i.rung)) s += fmt::format("{}{}", s.empty() ? "" : ",", i.name);
  }
  return s.empty() ? "none" : s;
}

std::string describe_rungs() {
  std::string s;
  for (const RungInfo& i : rung_table()) {
    s += fmt::format("  {:<18} {}\n", i.name, i.what);
  }
  return s;
}

}  // namespace gdn::model
