// The CPU reference executor: interprets decode programs step by step with cpu/ops.h.
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common/parallel.h"
#include "cpu/ops.h"
#include "model/program.h"
#include "runtime/executor.h"

namespace gdn::cpu {

// One sequence's caches. Attention layers: K and V [n_ctx][Hkv·D]; GDN layers: conv history
// [K-1][conv_dim] and the recurrent state [Hv][dk][dv], all f32.
struct Slot {
  std::vector<std::vector<float>> k, v, conv, ssm;  // indexed by layer (empty when unused)
  int64_t n_past = 0;
};

class CpuExecutor : public runtime::Executor {
 public:
  CpuExecutor(const model::Model& model, const runtime::ExecutorOptions& opts);

  std::string name() const override { return "cpu"; }
  void forward(std::span<const int32_t> ids, int slot, bool all_logits,
               std::vector<float>& logits) override;
  int64_t n_past(int slot) const override { return slot_at(slot).n_past; }
  void reset_slot(int slot) override;
  void copy_slot(int src, int dst) override;
  int64_t last_dispatches() const override { return last_dispatches_; }

  // Runs one program directly (tests use this to compare programs).
  void run(const model::Program& p, std::span<const int32_t> ids, int slot,
           std::vector<float>& logits);
  const Slot& slot_at(int slot) const;

 private:
  void step(const model::Step& s, const model::Program& p, const int32_t* ids, Slot& slot);
  Rows view(const model::Program& p, const model::View& v);
  const model::Program& program(int64_t n_tokens, bool all_logits);

  const model::Model& model_;
  runtime::ExecutorOptions opts_;
  ThreadPool pool_;
  std::vector<Slot> slots_;
  std::map<std::pair<int64_t, bool>, std::unique_ptr<model::Program>> programs_;
  std::vector<std::vector<float>> buffers_;
  int64_t last_dispatches_ = 0;
};

}  // namespace gdn::cpu
