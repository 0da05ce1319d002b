// The CPU reference executor: interprets decode programs step by step with cpu/ops.h.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "common/parallel.h"
#include "cpu/ops.h"
#include "model/program.h"
#include "runtime/executor.h"

namespace gdn::cpu {

// One sequence's caches. Attention layers: K and V [n_ctx][Hkv·D]; GDN layers: conv history
// [K-1][conv_dim] and the recurrent state [Hv][dk][dv], all f32 (with state-f16/bf16 the
// state's values are rounded to that type whenever they are stored into the slot).
struct Slot {
  std::vector<std::vector<float>> k, v, conv, ssm;  // indexed by layer (empty when unused)
  int64_t n_past = 0;
};

class CpuExecutor : public runtime::Executor {
 public:
  CpuExecutor(const model::Model& model, const runtime::ExecutorOptions& opts);

  std::string name() const override { return "cpu"; }
  std::span<const float> forward_view(std::span<const int32_t> ids, int slot,
                                      bool all_logits) override;
  int64_t n_past(int slot) const override { return slot_at(slot).n_past; }
  void reset_slot(int slot) override;
  void copy_slot(int src, int dst) override;
  void set_rungs(model::Rungs rungs) override;

  const Slot& slot_at(int slot) const;

 private:
  // Runs program p on the slot; returns its logits buffer.
  std::span<const float> run(const model::Program& p, std::span<const int32_t> ids, int slot);
  void step(const model::Step& s, const model::Program& p, const int32_t* ids, Slot& slot);
  Rows view(const model::Program& p, const model::View& v);
  const model::Program& program(int64_t n_tokens, bool all_logits);
  void gdn_step(const model::Step& s, const model::Program& p, Slot& slot);
  void fused_matmul(const model::Step& s, const model::Program& p, Slot& slot);
  Rows attn_prep(const model::Step& s, const model::Program& p, Slot& slot);
  void reserve_kv(Slot& s, int slot, int64_t positions);
  void kv_store(Rows k, Rows v, int64_t layer, Slot& slot);
  void round_state(std::vector<float>& state) const;

  const model::Model& model_;
  runtime::ExecutorOptions opts_;
  ThreadPool pool_;
  std::vector<Slot> slots_;
  std::map<std::tuple<int64_t, bool, model::Rungs, int>, std::unique_ptr<model::Program>> programs_;
  std::vector<std::vector<float>> buffers_;
  std::vector<float> tmp_[4];  // fused steps' intermediates
};

}  // namespace gdn::cpu
