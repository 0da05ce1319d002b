// The ladder's rungs: named, independently switchable rewrites of the decode step (DESIGN.md
// §1). Each exact rung removes dispatches or bytes and must leave every logit bit-identical to
// the baseline (`none`); the reduced-precision state rungs are not exact and are off by default.
//
// Where each rung acts:
//   state-inplace, state-write-fused, gating-fused, l2norm-fused, conv-inplace,
//   norm-gemv-fused, state-f16, state-bf16: the program builder (model/program.cpp) emits
//     fused steps or step variants; executors run them or refuse them by name.
//   graphs: the CUDA executor replays each program as a captured CUDA graph.
//
// C++17-clean: included from CUDA headers.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gdn::model {

enum class Rung : uint8_t {
  StateInplace,     // the GDN kernel reads the recurrent state from the slot (no gather)
  StateWriteFused,  // the GDN kernel writes the updated state into the slot (no scatter)
  GatingFused,      // beta = sigmoid(b), g = softplus(a + dt_bias)·A inside the GDN kernel
  L2NormFused,      // q/k L2 normalisation inside the GDN kernel (decode programs)
  ConvInplace,      // conv reads/writes its state in the slot, SiLU fused (no concat/copy);
                    // with norm-gemv-fused, a decode's conv runs in the qkv GEMV's epilogue
  NormGemvFused,    // norms and gates in the GEMV prologue, residual/SwiGLU in its epilogue,
                    // GEMVs sharing an input in one launch; the attention layer's q/k head
                    // norms, RoPE, split and KV store inside its attention kernel (decode
                    // programs; the output head stays unfused)
  Graphs,           // the decode step replayed as one CUDA graph
  StateF16,         // recurrent state stored as f16 (not exact)
  StateBf16,        // recurrent state stored as bf16 (not exact)
};
inline constexpr int kRungCount = 9;

struct RungInfo {
  Rung rung;
  const char* name;  // as written on the command line
  bool exact;        // bit-identical to the baseline by contract
  const char* what;  // one line for --help
};
const std::array<RungInfo, kRungCount>& rung_table();
const RungInfo& rung_info(Rung r);

// Storage type of the recurrent (GDN) state in a slot. The recurrence computes in f32 either
// way; f16/bf16 round on every store.
enum class StateType : uint8_t { F32, F16, BF16 };
const char* state_type_name(StateType t);
// Bytes of one stored value (0 for a value outside the enum: callers refuse it).
inline size_t state_type_bytes(StateType t) {
  switch (t) {
    case StateType::F32:
      return 4;
    case StateType::F16:
    case StateType::BF16:
      return 2;
  }
  return 0;
}

class Rungs {
 public:
  constexpr Rungs() = default;
  static Rungs none() { return Rungs(); }
  static Rungs exact();  // every exact rung: the default configuration

  bool has(Rung r) const { return (bits_ >> static_cast<int>(r)) & 1u; }
  Rungs with(Rung r) const { return Rungs(bits_ | (1u << static_cast<int>(r))); }
  Rungs without(Rung r) const { return Rungs(bits_ & ~(1u << static_cast<int>(r))); }
  uint32_t bits() const { return bits_; }
  StateType state_type() const;
  bool operator==(const Rungs& o) const { return bits_ == o.bits_; }
  bool operator!=(const Rungs& o) const { return bits_ != o.bits_; }
  bool operator<(const Rungs& o) const { return bits_ < o.bits_; }
  Rungs operator|(const Rungs& o) const { return Rungs(bits_ | o.bits_); }

 private:
  explicit constexpr Rungs(uint32_t b) : bits_(b) {}
  uint32_t bits_ = 0;
};

// "none", "all" (= every exact rung), or a comma list of rung names, where "all" may be
// combined with more names ("all,state-f16") and a name prefixed with '-' is removed
// ("all,-graphs"). Throws gdn::Error naming an unknown rung, and refusing state-f16 together
// with state-bf16.
Rungs parse_rungs(std::string_view spec);
// "none", or the names of the rungs that are on, comma-separated, in table order.
std::string format_rungs(Rungs r);
// Every rung name with its one-line description, for --help.
std::string describe_rungs();

}  // namespace gdn::model
