// What every backend offers the runtime: run tokens of one sequence through the model,
// keeping that sequence's KV cache and recurrent state in a numbered slot.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/program.h"
#include "model/rungs.h"
#include "runtime/timeline.h"

namespace gdn::runtime {

// Bounds every executor enforces before anything is sized by them: slots and positions size the
// KV caches and recurrent states (products of n_ctx and model widths stay far inside int64), and
// the CPU starts all its threads at once.
inline constexpr int kMaxSlots = 4096;
inline constexpr int64_t kMaxContext = int64_t{1} << 24;
inline constexpr int kMaxThreads = 1024;

struct ExecutorOptions {
  int n_slots = 1;       // sequences held at once
  int64_t n_ctx = 4096;  // KV cache positions per slot
  int n_threads = 0;     // CPU threads (0: all)
  // CPU only: compute Q1_0 products on activations quantised to int8 per 128 elements, the
  // arithmetic of the CUDA Q1_0 GEMV, so the two backends can be compared like for like.
  bool q8_activations = false;
  // CUDA only: compute Q1_0 products on f32 activations (a slower kernel) instead of int8, so
  // the two backends can be compared at rounding level over a whole model (int8 activation
  // rounding makes the output discontinuous: bench/RESULTS.md).
  bool q1_f32_activations = false;
  // The ladder's rewrites (model/rungs.h): every exact rung by default. The CPU runs every
  // program rewrite (composing its reference ops) and ignores `graphs`.
  model::Rungs rungs = model::Rungs::exact();
  // Empty dispatches appended to every decode step (gdn bench --null-dispatches).
  int null_dispatches = 0;
};

// Dispatches (kernel launches; program steps on the CPU) of one forward, per op. Counted
// per step on the launch path, so a plain array: names come from model::op_name when shown.
struct DispatchCount {
  int64_t total = 0;
  std::array<int64_t, model::kOpCount> by_op{};
  void add(model::Op op, int64_t n) {
    total += n;
    by_op[static_cast<size_t>(op)] += n;
  }
  void add(const DispatchCount& o) {
    for (int i = 0; i < model::kOpCount; ++i) add(static_cast<model::Op>(i), o.by_op[i]);
  }
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;

  // Feeds `ids` (one pass: prefill when several, decode when one) at the slot's next
  // positions. Returns logits for every id (all_logits) or for the last only, row-major, in
  // memory the executor owns: valid until its next forward. Decode loops read them there (the
  // CUDA backend copies them once, into pinned memory; a second copy into a caller's vector
  // cost ~3% of tg128 on the H200: bench/RESULTS.md).
  virtual std::span<const float> forward_view(std::span<const int32_t> ids, int slot,
                                              bool all_logits) = 0;
  // forward_view, the logits copied into `logits` (for callers that keep them).
  void forward(std::span<const int32_t> ids, int slot, bool all_logits,
               std::vector<float>& logits) {
    const std::span<const float> v = forward_view(ids, slot, all_logits);
    logits.assign(v.begin(), v.end());
  }
  virtual int64_t n_past(int slot) const = 0;
  virtual void reset_slot(int slot) = 0;
  // Snapshot/rollback: slot dst becomes an exact copy of slot src.
  virtual void copy_slot(int src, int dst) = 0;
  // Switches the rewrites the next forward runs with (programs are built on first use and
  // kept per configuration). Changing the recurrent state's storage type resets every slot.
  // Throws gdn::Error for contradictory rungs.
  virtual void set_rungs(model::Rungs rungs) = 0;
  // Runs one forward like forward() and returns where its time went, step by step, for every
  // step but the last (no stamp follows it). Backends without a timeline refuse.
  virtual std::vector<StepTime> timeline(std::span<const int32_t> ids, int slot) {
    (void)ids;
    (void)slot;
    fail("the {} backend has no dispatch timeline", name());
  }
  model::Rungs rungs() const { return build_.rungs; }
  // Empty dispatches appended to every decode step from the next forward on.
  void set_null_dispatches(int n) {
    if (n < 0) fail("null dispatches must be >= 0, got {}", n);
    build_.null_dispatches = n;
  }

  // Dispatches the last forward ran, in total and per op.
  int64_t last_dispatches() const { return last_count_.total; }
  const DispatchCount& last_dispatch_count() const { return last_count_; }

 protected:
  // Refuses options outside the bounds above, naming the option.
  explicit Executor(const ExecutorOptions& o)
      : build_{.rungs = o.rungs, .null_dispatches = o.null_dispatches} {
    if (o.n_slots <= 0 || o.n_slots > kMaxSlots) {
      fail("executor: n_slots must be in [1, {}], got {}", kMaxSlots, o.n_slots);
    }
    if (o.n_ctx <= 0 || o.n_ctx > kMaxContext) {
      fail("executor: the context (-c) must be in [1, {}] positions, got {}", kMaxContext, o.n_ctx);
    }
    if (o.n_threads > kMaxThreads) {
      fail("executor: at most {} threads (-t), got {}", kMaxThreads, o.n_threads);
    }
  }

  DispatchCount last_count_;
  model::BuildOptions build_;  // what the next forward's programs are built with
};

}  // namespace gdn::runtime
