// The CUDA executor: one launch per program step (a fused step: one launch per kernel family
// of its matrices), or the whole program replayed as a CUDA graph (rung `graphs`). Weights
// are uploaded once in their stored bit width (repacked for the kernels); caches live on the
// GPU in per-sequence slots, the recurrent state in the rungs' storage type. A step this
// executor cannot run is refused with its op, types and shapes — there is no fallback to
// another kernel or the CPU.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda/device.h"
#include "cuda/kernels.h"
#include "cuda/matrix.h"
#include "model/program.h"
#include "runtime/executor.h"

namespace gdn::cuda {

class CudaExecutor : public runtime::Executor {
 public:
  CudaExecutor(const model::Model& model, const runtime::ExecutorOptions& opts);
  ~CudaExecutor() override;

  std::string name() const override { return "cuda"; }
  std::span<const float> forward_view(std::span<const int32_t> ids, int slot,
                                      bool all_logits) override;
  int64_t n_past(int slot) const override { return slot_at(slot).n_past; }
  void reset_slot(int slot) override;
  void copy_slot(int src, int dst) override;
  void set_rungs(model::Rungs rungs) override;
  std::vector<runtime::StepTime> timeline(std::span<const int32_t> ids, int slot) override;

  // Bytes of weights resident on the GPU.
  size_t weight_bytes() const { return weight_bytes_; }

 private:
  // One sequence's caches on the GPU, per layer (empty buffers where a layer has none).
  struct Slot {
    std::vector<DeviceBuffer> k, v, conv, ssm;  // ssm in the rungs' state storage type
    int64_t n_past = 0;
  };
  // The device buffers of one program (one per BufferSpec). One row of logits (decode, or a
  // prefill's last token) lives in pinned host memory instead: the output head's kernel stores
  // it there as it runs, with no 1 MB copy after it (its buffers entry stays empty). Measured
  // (H200, 2026-12-04, same call): tg128 349.8 / 352.2 against 349.4 / 349.3 with the copy.
  struct ProgramMem {
    std::unique_ptr<model::Program> program;
    std::vector<DeviceBuffer> buffers;
    PinnedBuffer host_logits;
    float* host_logits_dev = nullptr;  // host_logits as the kernels address it
    // What the host uploads for a forward, from pinned memory at a fixed address so that a
    // graph replays the copies itself: the position (the first kUploadHeader bytes), then the
    // embedding rows.
    PinnedBuffer upload;
    std::vector<int> launches;  // per step, once it ran (or was captured); -1 before
    // The program's first attention step with the fused prep: it computes the rope angles of
    // the position, and the later ones, run after it in every forward, load them.
    const model::Step* first_prep = nullptr;
  };

  static constexpr size_t kUploadHeader = 16;  // keeps the rows 16-byte aligned for the copy
  float* embedding_rows(const model::Step& s, ProgramMem& pm, std::span<const int32_t> ids) const;
  const Slot& slot_at(int slot) const;
  ProgramMem& program(int64_t n_tokens, bool all_logits);
  void upload_weights();
  // Runs (or captures) one step; adds its launches to `count`.
  void step(const model::Step& s, ProgramMem& pm, std::span<const int32_t> ids, Slot& slot,
            runtime::DispatchCount& count);
  int launch(const model::Step& s, ProgramMem& pm, std::span<const int32_t> ids, Slot& slot,
             cudaStream_t st);
  int fused_matmul(const model::Step& s, ProgramMem& pm, Slot& slot);
  bool fold(FusedGemv& main, const FusedGemv& side) const;
  // Side-stream work (concurrent steps, see step(); a fused step's second kernel family, see
  // fused_matmul): forked from the main stream's state, joined into it before a main step
  // touches what the side work reads or writes, and at the end of every forward.
  static bool side_may_run(model::Op op);
  static std::vector<model::View> views_of(const model::Step& s);  // every view, valid or not
  void fork_side();
  void side_done(const std::vector<model::View>& ranges);  // after a side launch
  void join_touching(const model::Step& s);
  void join_all();
  int recurrence(const model::Step& s, ProgramMem& pm, Slot& slot, cudaStream_t st);
  DevState slot_state(Slot& slot, int64_t layer) const;
  DevRows view(ProgramMem& pm, const model::View& v) const;
  static float* buffer_data(ProgramMem& pm, int32_t buf);
  const GpuMatrix& matrix(const model::Matrix* m) const;
  const float* vec(const std::vector<float>* v) const;

  // A captured program for one (n_tokens, all_logits, slot); the embedding gather runs
  // before it on the host.
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    runtime::DispatchCount dispatches;
  };
  void run_graph(ProgramMem& pm, int64_t T, bool all_logits, int slot, std::span<const int32_t> ids,
                 Slot& s);
  Pos position(const Slot& slot, int64_t n_tokens) const;

  const model::Model& model_;
  runtime::ExecutorOptions opts_;
  cudaStream_t stream_ = nullptr;
  // Launches that run concurrently with the main stream's (a fused step's second kernel
  // family), forked from and joined back into it by events; in a capture they become parallel
  // branches of the graph.
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr;
  std::vector<cudaEvent_t> join_events_;  // [i]: side launch i since the last join (reused)
  size_t side_launches_ = 0;
  bool side_current_ = false;         // the side stream has waited for every main launch so far
  std::vector<model::View> pending_;  // the buffer ranges they write or read
  std::unordered_map<const model::Matrix*, GpuMatrix> matrices_;
  std::unordered_map<const std::vector<float>*, DeviceBuffer> vectors_;
  std::vector<Slot> slots_;
  std::map<std::tuple<int64_t, bool, model::Rungs, int>, ProgramMem> programs_;
  MatmulWorkspace workspace_;
  PinnedBuffer logits_host_;  // the last forward's logits when they are not host_logits
  // A forward has queued work that reads host buffers (ProgramMem::upload) and has not yet
  // waited for it: one that threw midway. The next forward waits first.
  bool in_flight_ = false;
  // The activation codes a step writes for the Q1_0 GEMV right after it (a gate+up GEMV for
  // ffn_down: link_codes; the GDN recurrence for ssm_out and attention for attn_output:
  // codes_out_for), that GEMV's step and its blocks of codes.
  DeviceBuffer codes_act_, codes_meta_;
  const model::Step* codes_next_ = nullptr;
  int codes_next_blocks_ = 0;
  const model::Step* codes_consumer(const model::Step& s, ProgramMem& pm, const model::View& y,
                                    model::Prologue prologue) const;
  void link_codes(const model::Step& s, ProgramMem& pm, FusedGemv& f);
  CodesOut codes_out_for(const model::Step& s, ProgramMem& pm, model::Prologue prologue, bool ok);
  std::map<std::tuple<int64_t, bool, int, model::Rungs, int>, Graph> graphs_;
  // The fused attention prep's rope angles (AttnPrep::angles, ProgramMem::first_prep).
  DeviceBuffer rope_angles_;
  DeviceBuffer pos_dev_;    // int32 position read by graph-captured kernels
  bool capturing_ = false;  // steps are being captured into a graph
  int64_t max_n_in_ = 0;    // widest matrix input: sizes the matmul workspace before capture
  size_t weight_bytes_ = 0;
};

}  // namespace gdn::cuda
