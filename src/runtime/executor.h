// What every backend offers the runtime: run tokens of one sequence through the model,
// keeping that sequence's KV cache and recurrent state in a numbered slot.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gdn::runtime {

struct ExecutorOptions {
  int n_slots = 1;       // sequences held at once
  int64_t n_ctx = 4096;  // KV cache positions per slot
  int n_threads = 0;     // CPU threads (0: all)
  // CPU only: compute Q1_0 products on activations quantised to int8 per 128 elements, the
  // arithmetic of the CUDA Q1_0 GEMV, so the two backends can be compared like for like.
  bool q8_activations = false;
  // CUDA only: capture each batch shape's program once per slot as a CUDA graph and replay
  // it (positions are read from device memory), instead of launching every step from the
  // host. Off: one host launch per step.
  bool cuda_graphs = true;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;

  // Feeds `ids` (one pass: prefill when several, decode when one) at the slot's next
  // positions. Writes logits for every id (all_logits) or for the last only, row-major.
  virtual void forward(std::span<const int32_t> ids, int slot, bool all_logits,
                       std::vector<float>& logits) = 0;
  virtual int64_t n_past(int slot) const = 0;
  virtual void reset_slot(int slot) = 0;
  // Snapshot/rollback: slot dst becomes an exact copy of slot src.
  virtual void copy_slot(int src, int dst) = 0;
  // Steps (dispatches) the last forward ran.
  virtual int64_t last_dispatches() const = 0;
};

}  // namespace gdn::runtime
