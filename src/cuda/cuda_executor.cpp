#include "cuda/cuda_executor.h"

#include <algorithm>

#include "common/error.h"
#include "cuda/check.h"
#include "cuda/timeline.h"
#include "quant/quant.h"

namespace gdn::cuda {

using model::Op;

CudaExecutor::CudaExecutor(const model::Model& model, const runtime::ExecutorOptions& opts)
    : Executor(opts), model_(model), opts_(opts) {
  if (!available()) fail("cuda backend: no CUDA device is available");
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  pos_dev_ = DeviceBuffer(sizeof(int32_t));
  rope_angles_ = DeviceBuffer(model::kMaxAttnPrepHeadDim * sizeof(double));  // n_rot <= head_dim
  upload_weights();
  const size_t blocks = size_t((max_n_in_ + 511) / 512 * 4);  // no allocation during capture
  codes_act_ = DeviceBuffer(blocks * 32 * sizeof(uint32_t));
  codes_meta_ = DeviceBuffer(blocks * 2 * sizeof(uint32_t));
  slots_.resize(static_cast<size_t>(opts.n_slots));
  for (int s = 0; s < opts.n_slots; ++s) reset_slot(s);
}

CudaExecutor::~CudaExecutor() {
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
  for (cudaEvent_t e : join_events_) cudaEventDestroy(e);
  if (fork_) cudaEventDestroy(fork_);
  if (side_) cudaStreamDestroy(side_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaExecutor::set_rungs(model::Rungs rungs) {
  const bool new_state_type = rungs.state_type() != build_.rungs.state_type();
  build_.rungs = rungs;
  if (!new_state_type) return;
  // The slots' state buffers change size and type: graphs captured on the old ones must go.
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
  graphs_.clear();
  for (int s = 0; s < static_cast<int>(slots_.size()); ++s) reset_slot(s);
}

DevState CudaExecutor::slot_state(Slot& slot, int64_t layer) const {
  return {slot.ssm.at(static_cast<size_t>(layer)).get(), build_.rungs.state_type()};
}

// Every matrix and vector a program can reference, uploaded once; programs later look them
// up by the address of the model's field, so a step can never reach a stale copy.
void CudaExecutor::upload_weights() {
  auto add_matrix = [&](const model::Matrix& m) {
    if (!m || matrices_.count(&m)) return;
    GpuMatrix g = upload_matrix(m, stream_, opts_.q1_f32_activations);
    max_n_in_ = std::max(max_n_in_, m.n_in);
    weight_bytes_ += g.device_bytes();
    matrices_.emplace(&m, std::move(g));
  };
  auto add_vec = [&](const std::vector<float>& v) {
    if (v.empty() || vectors_.count(&v)) return;
    DeviceBuffer b(v.size() * sizeof(float));
    CUDA_CHECK(cudaMemcpyAsync(b.get(), v.data(), b.bytes(), cudaMemcpyHostToDevice, stream_));
    weight_bytes_ += b.bytes();
    vectors_.emplace(&v, std::move(b));
  };
  add_matrix(model_.output);
  add_vec(model_.output_norm);
  for (int64_t il = 0; il < model_.hp.n_layer; ++il) {
    const model::Layer& L = model_.layers[static_cast<size_t>(il)];
    for (const auto* v : {&L.attn_norm, &L.post_norm}) add_vec(*v);
    for (const auto* m : {&L.ffn_gate, &L.ffn_up, &L.ffn_down}) add_matrix(*m);
    if (L.recurrent) {
      const model::GdnWeights& g = L.gdn;
      for (const auto* m : {&g.qkv, &g.gate, &g.beta, &g.alpha, &g.out}) add_matrix(*m);
      for (const auto* v : {&g.conv, &g.dt_bias, &g.a, &g.norm}) add_vec(*v);
    } else {
      const model::AttentionWeights& a = L.attn;
      for (const auto* m : {&a.q, &a.k, &a.v, &a.o}) add_matrix(*m);
      for (const auto* v : {&a.q_norm, &a.k_norm}) add_vec(*v);
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

const CudaExecutor::Slot& CudaExecutor::slot_at(int slot) const {
  if (slot < 0 || slot >= static_cast<int>(slots_.size())) {
    fail("slot {} out of range [0, {})", slot, slots_.size());
  }
  return slots_[static_cast<size_t>(slot)];
}

void CudaExecutor::reset_slot(int slot) {
  slot_at(slot);
  const model::HParams& hp = model_.hp;
  Slot& s = slots_[static_cast<size_t>(slot)];
  const size_t n_layer = static_cast<size_t>(hp.n_layer);
  s.k.resize(n_layer);
  s.v.resize(n_layer);
  s.conv.resize(n_layer);
  s.ssm.resize(n_layer);
  auto zeroed = [&](DeviceBuffer& b, int64_t values, size_t value_bytes) {
    if (b.bytes() != size_t(values) * value_bytes) b = DeviceBuffer(size_t(values) * value_bytes);
    CUDA_CHECK(cudaMemsetAsync(b.get(), 0, b.bytes(), stream_));  // 0 in every state type
  };
  for (size_t il = 0; il < n_layer; ++il) {
    if (hp.is_recurrent(static_cast<int64_t>(il))) {
      zeroed(s.conv[il], (hp.ssm_conv_kernel - 1) * hp.conv_dim(), sizeof(float));
      zeroed(s.ssm[il], hp.ssm_n_v_heads * hp.ssm_d_state * hp.ssm_d_state,
             model::state_type_bytes(build_.rungs.state_type()));
    } else {
      // The KV cache needs no clearing: attention reads only positions already written.
      if (!s.k[il].get()) s.k[il] = DeviceBuffer(size_t(opts_.n_ctx * hp.kv_dim()) * sizeof(float));
      if (!s.v[il].get()) s.v[il] = DeviceBuffer(size_t(opts_.n_ctx * hp.kv_dim()) * sizeof(float));
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  s.n_past = 0;
}

void CudaExecutor::copy_slot(int src, int dst) {
  const Slot& from = slot_at(src);
  slot_at(dst);
  if (src == dst) return;
  Slot& to = slots_[static_cast<size_t>(dst)];
  auto copy = [&](const std::vector<DeviceBuffer>& a, std::vector<DeviceBuffer>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].bytes() == 0) continue;
      CUDA_CHECK(
          cudaMemcpyAsync(b[i].get(), a[i].get(), a[i].bytes(), cudaMemcpyDeviceToDevice, stream_));
    }
  };
  copy(from.conv, to.conv);
  copy(from.ssm, to.ssm);
  // Only the positions in use are copied from the KV cache.
  const size_t kv_bytes = size_t(from.n_past * model_.hp.kv_dim()) * sizeof(float);
  for (size_t i = 0; i < from.k.size(); ++i) {
    if (from.k[i].bytes() == 0 || kv_bytes == 0) continue;
    CUDA_CHECK(cudaMemcpyAsync(to.k[i].get(), from.k[i].get(), kv_bytes, cudaMemcpyDeviceToDevice,
                               stream_));
    CUDA_CHECK(cudaMemcpyAsync(to.v[i].get(), from.v[i].get(), kv_bytes, cudaMemcpyDeviceToDevice,
                               stream_));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  to.n_past = from.n_past;
}

CudaExecutor::ProgramMem& CudaExecutor::program(int64_t n_tokens, bool all_logits) {
  ProgramMem& pm = programs_[{n_tokens, all_logits, build_.rungs, build_.null_dispatches}];
  if (!pm.program) {
    pm.program = std::make_unique<model::Program>(
        model::build_forward(model_, n_tokens, all_logits, build_));
    const std::vector<model::BufferSpec>& specs = pm.program->buffers;
    for (size_t i = 0; i < specs.size(); ++i) {
      const size_t bytes = size_t(specs[i].rows * specs[i].cols) * sizeof(float);
      if (int32_t(i) == pm.program->logits && specs[i].rows == 1) {
        pm.host_logits = PinnedBuffer(bytes);
        pm.host_logits_dev = static_cast<float*>(device_address(pm.host_logits));
        pm.buffers.emplace_back();
      } else {
        pm.buffers.emplace_back(bytes);
      }
    }
    pm.launches.assign(pm.program->steps.size(), -1);
    const auto& steps = pm.program->steps;
    const auto first = std::find_if(steps.begin(), steps.end(),
                                    [](const model::Step& st) { return st.fuse_prep; });
    if (first != steps.end()) pm.first_prep = &*first;
  }
  return pm;
}

std::span<const float> CudaExecutor::forward_view(std::span<const int32_t> ids, int slot,
                                                  bool all_logits) {
  if (ids.empty()) fail("forward: no tokens given");
  slot_at(slot);
  Slot& s = slots_[static_cast<size_t>(slot)];
  const int64_t T = static_cast<int64_t>(ids.size());
  if (s.n_past + T > opts_.n_ctx) {
    fail("slot {}: {} cached + {} new tokens exceed the context of {}", slot, s.n_past, T,
         opts_.n_ctx);
  }
  ProgramMem& pm = program(T, all_logits);
  if (in_flight_) CUDA_CHECK(cudaStreamSynchronize(stream_));
  in_flight_ = true;
  last_count_ = {};
  if (build_.rungs.has(model::Rung::Graphs)) {
    run_graph(pm, T, all_logits, slot, ids, s);
  } else {
    for (const model::Step& st : pm.program->steps) step(st, pm, ids, s, last_count_);
    join_all();
  }
  const model::BufferSpec& out = pm.program->buffers[static_cast<size_t>(pm.program->logits)];
  const size_t n = static_cast<size_t>(out.rows * out.cols);
  const float* logits = pm.host_logits.as<const float>();
  if (!pm.host_logits_dev) {
    if (logits_host_.bytes() < n * sizeof(float)) logits_host_ = PinnedBuffer(n * sizeof(float));
    CUDA_CHECK(cudaMemcpyAsync(logits_host_.get(), buffer_data(pm, pm.program->logits),
                               n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    logits = logits_host_.as<const float>();
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  in_flight_ = false;
  s.n_past += T;
  return {logits, n};
}

// The whole program, its uploads included, replayed from a graph captured on first use: the
// host only writes the position and the embedding rows into the program's pinned upload buffer,
// which the graph's first copies read. So a token costs the host one launch and one wait.
void CudaExecutor::run_graph(ProgramMem& pm, int64_t T, bool all_logits, int slot,
                             std::span<const int32_t> ids, Slot& s) {
  const std::vector<model::Step>& steps = pm.program->steps;
  if (steps.empty() || steps.front().op != Op::Embed) {
    fail("cuda graphs: the program must start with its embedding step");
  }
  // Outside the capture: it checks the ids and allocates the buffer (the captured embedding
  // step gathers the same rows again, once).
  embedding_rows(steps.front(), pm, ids);
  *pm.upload.as<int32_t>() = static_cast<int32_t>(s.n_past);
  Graph& g = graphs_[{T, all_logits, slot, build_.rungs, build_.null_dispatches}];
  if (!g.exec) {
    workspace_.reserve(max_n_in_, T);
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    runtime::DispatchCount captured;
    try {
      CUDA_CHECK(cudaMemcpyAsync(pos_dev_.get(), pm.upload.get(), sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream_));
      for (const model::Step& st : steps) step(st, pm, ids, s, captured);
      join_all();  // a capture must end with every forked branch joined
    } catch (...) {
      capturing_ = false;
      pending_.clear();
      side_launches_ = 0;
      side_current_ = false;
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream_, &broken);
      if (broken) cudaGraphDestroy(broken);
      throw;
    }
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    const cudaError_t err = cudaGraphInstantiate(&g.exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(err);
    g.dispatches = captured;
  }
  CUDA_CHECK(cudaGraphLaunch(g.exec, stream_));
  last_count_.add(g.dispatches);
}

// The embedding table stays on the host, as llama.cpp keeps it: a token reads one row, so
// gathering on the CPU and copying n_tokens rows is cheaper than holding the table. The rows
// go into the program's pinned upload buffer (allocated on first use, never moved: graphs copy
// from its address), after its header.
float* CudaExecutor::embedding_rows(const model::Step& s, ProgramMem& pm,
                                    std::span<const int32_t> ids) const {
  const model::BufferSpec& b = pm.program->buffers[static_cast<size_t>(s.out.buf)];
  if (s.out.width != b.cols || int64_t(ids.size()) != b.rows) {
    fail("embedding step: its output ({} rows of {} of {}) is not {} whole rows", b.rows,
         s.out.width, b.cols, ids.size());
  }
  const size_t bytes = kUploadHeader + size_t(b.rows * b.cols) * sizeof(float);
  if (!pm.upload.get()) pm.upload = PinnedBuffer(bytes);
  float* rows = reinterpret_cast<float*>(pm.upload.as<unsigned char>() + kUploadHeader);
  const model::Matrix& t = model_.token_embd;
  for (int64_t r = 0; r < b.rows; ++r) {
    const int32_t id = ids[static_cast<size_t>(r)];
    if (id < 0 || id >= t.n_out) {
      fail("token id {} at position {} is outside the vocabulary [0, {})", id, r, t.n_out);
    }
    quant::dequantize_row(t.type, t.row(id), rows + r * b.cols, t.n_in);
  }
  return rows;
}

// Inside a graph the position comes from device memory. Both paths size their launches by
// the context's bound, so graph replay and plain launches run identical arithmetic.
Pos CudaExecutor::position(const Slot& slot, int64_t n_tokens) const {
  const int64_t bound = opts_.n_ctx - n_tokens;
  return Pos(capturing_ ? bound : slot.n_past, bound,
             capturing_ ? pos_dev_.as<int32_t>() : nullptr);
}

DevRows CudaExecutor::view(ProgramMem& pm, const model::View& v) const {
  const model::BufferSpec& b = pm.program->buffers[static_cast<size_t>(v.buf)];
  return {buffer_data(pm, v.buf) + v.col, b.rows, v.width, b.cols};
}

float* CudaExecutor::buffer_data(ProgramMem& pm, int32_t buf) {
  if (buf == pm.program->logits && pm.host_logits_dev) return pm.host_logits_dev;
  return pm.buffers[static_cast<size_t>(buf)].as<float>();
}

const GpuMatrix& CudaExecutor::matrix(const model::Matrix* m) const {
  auto it = matrices_.find(m);
  if (it == matrices_.end()) fail("cuda executor: matrix {} was not uploaded", m->name);
  return it->second;
}

const float* CudaExecutor::vec(const std::vector<float>* v) const {
  auto it = vectors_.find(v);
  if (it == vectors_.end()) fail("cuda executor: a vector operand was not uploaded");
  return it->second.as<float>();
}

// A concurrent step (model::Step::concurrent) runs on the side stream, which first catches up
// with the main stream unless no main step ran since it last did; a main step first joins the
// side work it touches.
void CudaExecutor::step(const model::Step& s, ProgramMem& pm, std::span<const int32_t> ids,
                        Slot& slot, runtime::DispatchCount& count) {
  int n = 0;
  if (s.concurrent) {
    if (!side_may_run(s.op)) {
      fail("cuda executor: {} reads or writes a cache or a state: it cannot run concurrently",
           model::op_name(s.op));
    }
    if (!side_current_) fork_side();
    n = launch(s, pm, ids, slot, side_);
    side_done(views_of(s));
  } else {
    join_touching(s);
    n = launch(s, pm, ids, slot, stream_);
    side_current_ = false;
  }
  pm.launches[static_cast<size_t>(&s - pm.program->steps.data())] = n;
  count.add(s.op, n);
}

std::vector<runtime::StepTime> CudaExecutor::timeline(std::span<const int32_t> ids, int slot) {
  ProgramMem& pm = program(static_cast<int64_t>(ids.size()), false);
  const std::vector<model::Step>& steps = pm.program->steps;
  std::vector<uint64_t> t;
  {
    Timeline armed(static_cast<unsigned>(8 * steps.size() + 64));
    forward_view(ids, slot, false);
    t = armed.stamps();
  }
  // Kernels that stamp: the embedding is a host copy and the null dispatches are plain empty
  // kernels (they price a dispatch without PDL), so neither does.
  std::vector<size_t> first;  // per step that stamps: index of its first stamp
  std::vector<size_t> which;
  size_t n_stamped = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (pm.launches[i] < 0) fail("timeline: step {} did not run", i);
    if (steps[i].op == Op::Embed || steps[i].op == Op::Null || pm.launches[i] == 0) continue;
    first.push_back(n_stamped);
    which.push_back(i);
    n_stamped += static_cast<size_t>(pm.launches[i]);
  }
  if (n_stamped != t.size()) {
    fail("timeline: {} kernels stamped, the program launched {}", t.size(), n_stamped);
  }
  std::vector<runtime::StepTime> out;
  for (size_t j = 0; j + 1 < which.size(); ++j) {
    const model::Step& st = steps[which[j]];
    out.push_back({model::step_kind(st), pm.launches[which[j]],
                   1e-3 * double(static_cast<int64_t>(t[first[j + 1]] - t[first[j]])),
                   model::step_weight_bytes(st)});
  }
  return out;
}

// Returns the kernel launches (dispatches) the step made.
int CudaExecutor::launch(const model::Step& s, ProgramMem& pm, std::span<const int32_t> ids,
                         Slot& slot, cudaStream_t st) {
  const model::HParams& hp = model_.hp;
  auto in = [&](int i) { return view(pm, s.in[static_cast<size_t>(i)]); };
  auto out = [&] { return view(pm, s.out); };
  auto layer = [&](std::vector<DeviceBuffer>& per_layer) {
    return per_layer.at(static_cast<size_t>(s.layer)).as<float>();
  };
  switch (s.op) {
    case Op::Embed: {
      const DevRows y = out();
      const float* rows = embedding_rows(s, pm, ids);
      CUDA_CHECK(cudaMemcpyAsync(y.data, rows, size_t(y.rows * y.cols) * sizeof(float),
                                 cudaMemcpyHostToDevice, st));
      return 1;
    }
    case Op::RmsNorm:
      rms_norm(in(0), out(), vec(s.vec), s.head_dim > 0 ? s.head_dim : s.out.width, s.eps, st);
      return 1;
    case Op::MatMul: {
      const GpuMatrix& w = matrix(s.w);
      const DevRows x = in(0), y = out();
      matmul(w, x.data, x.ld, y.data, y.ld, x.rows, workspace_, st);
      return matmul_launches(w, x.rows);
    }
    case Op::Add:
      binary(cpu::Binary::Add, in(0), in(0), out(), st);
      return 1;
    case Op::AddVec:
      broadcast(cpu::Broadcast::Add, in(0), vec(s.vec), out(), st);
      return 1;
    case Op::MulVec:
      broadcast(cpu::Broadcast::Mul, in(0), vec(s.vec), out(), st);
      return 1;
    case Op::Sigmoid:
      unary(cpu::Unary::Sigmoid, in(0), out(), st);
      return 1;
    case Op::Softplus:
      unary(cpu::Unary::Softplus, in(0), out(), st);
      return 1;
    case Op::Silu:
      unary(cpu::Unary::Silu, in(0), out(), st);
      return 1;
    case Op::SiluMul:
      binary(cpu::Binary::SiluMul, in(0), in(1), out(), st);
      return 1;
    case Op::SigmoidMul:
      binary(cpu::Binary::SigmoidMul, in(0), in(1), out(), st);
      return 1;
    case Op::L2NormHeads:
      l2_norm(in(0), out(), s.head_dim, s.eps, st);
      return 1;
    case Op::SplitHeads:
      split_heads(in(0), out(), view(pm, s.out2), s.head_dim, st);
      return 1;
    case Op::ConvStep:
      conv_step(in(0), out(), vec(s.vec), hp.ssm_conv_kernel,
                s.conv_window ? nullptr : layer(slot.conv), s.fuse_silu, st);
      return 1;
    case Op::ConvConcat: {
      const DevRows x = in(0);
      concat_rows({layer(slot.conv), hp.ssm_conv_kernel - 1, x.cols, x.cols}, x, out(), st);
      return 1;
    }
    case Op::ConvSave: {
      const DevRows x = in(0);
      copy_rows(x, s.row0, {layer(slot.conv), hp.ssm_conv_kernel - 1, x.cols, x.cols}, st);
      return 1;
    }
    case Op::StateGather:
      copy_state(slot_state(slot, s.layer), {out().data, model::StateType::F32}, out().cols, st);
      return 1;
    case Op::StateScatter:
      copy_state({in(0).data, model::StateType::F32}, slot_state(slot, s.layer), in(0).cols, st);
      return 1;
    case Op::GdnRecurrence:
      return recurrence(s, pm, slot, st);
    case Op::Rope:
      rope(out(), s.head_dim, hp.n_rot, hp.rope_theta, position(slot, out().rows), st);
      return 1;
    case Op::KvStore:
      kv_store(in(0), in(1), layer(slot.k), layer(slot.v), hp.kv_dim(), position(slot, in(0).rows),
               st);
      return 1;
    case Op::Attention: {
      // The operands exist only with fuse_prep. A decode positions every attention layer alike,
      // so the first one's rope angles serve the layers after it.
      AttnPrep prep;
      if (s.fuse_prep) {
        prep = {.k = in(1),
                .v = in(2),
                .gate = view(pm, s.out2),
                .q_norm = vec(s.vec),
                .k_norm = vec(s.vec2),
                .n_rot = hp.n_rot,
                .theta = hp.rope_theta,
                .eps = s.eps,
                .gate_sigmoid = s.gate_sigmoid,
                .angles = rope_angles_.as<double>(),
                .angles_given = &s != pm.first_prep};
      }
      attention(in(0), layer(slot.k), layer(slot.v), out(), hp.n_head, hp.n_head_kv, s.head_dim,
                position(slot, out().rows), st,
                codes_out_for(s, pm, model::Prologue::MulGate, attn_codes_out_ok(s.head_dim)),
                s.fuse_prep ? &prep : nullptr);
      return 1;
    }
    case Op::CopyRows:
      copy_rows(in(0), s.row0, out(), st);
      return 1;
    case Op::MatMulFused:
      return fused_matmul(s, pm, slot);
    case Op::Null:
      empty_kernel(st);
      return 1;
  }
  fail("cuda executor: op {} is not supported", model::op_name(s.op));
}

int CudaExecutor::recurrence(const model::Step& s, ProgramMem& pm, Slot& slot, cudaStream_t st) {
  const model::HParams& hp = model_.hp;
  auto in = [&](size_t i) { return view(pm, s.in[i]); };
  const DevState work = s.out2.valid() ? DevState{view(pm, s.out2).data, model::StateType::F32}
                                       : DevState{nullptr, model::StateType::F32};
  DevState st_in = work;
  if (s.state_in_slot) {
    st_in = slot_state(slot, s.layer);
    st_in.settled = true;  // DevState::settled says why
  }
  const DevState st_out = s.state_out_slot ? slot_state(slot, s.layer) : work;
  if (!st_in.data || !st_out.data) {
    fail("cuda executor: gdn_recurrence L{} has no work buffer for its state", s.layer);
  }
  GdnFusion f;
  if (s.fuse_gating) {
    f.dt_bias = vec(s.vec);
    f.ssm_a = vec(s.vec2);
  }
  f.l2norm = s.fuse_l2norm;
  f.l2_eps = s.eps;
  f.codes = codes_out_for(s, pm, model::Prologue::HeadRmsNormMulGate,
                          gdn_codes_out_ok(hp.ssm_n_v_heads, s.head_dim));
  gdn_recurrence(in(0), in(1), in(2), in(3), in(4), view(pm, s.out), st_in, st_out,
                 hp.ssm_n_k_heads, hp.ssm_n_v_heads, s.head_dim, f, st);
  return 1;
}

// One launch per kernel family among the step's matrices (Bonsai's qkv+z are Q1_0, beta+alpha
// BF16: two launches). An epilogue that combines matrices needs them in one launch; ConvSilu
// runs in matrix 0's launch, the other families' matrices Store. With
// several families (independent outputs of one input) the family with the most rows
// runs on the main stream and the others on the side stream, concurrently: serialised, the
// 48-row beta+alpha GEMV added ~10 us to each GDN layer's ~9 us qkv+z GEMV (gdn bench
// --timeline, H200, 2026-12-01). The main launch leaves the side launches' SMs free, so that
// none of its persistent CTAs waits behind them. Which CTA computes a row does not change its
// arithmetic, so the outputs are the serial launches' bits.
// The side launch still bounds the step: with it skipped (a probe), the qkv step took 9.67
// instead of 12.95 us. The captured fork and join edges are already programmatic (PDL turns
// the event edges too; 1682 of 1682 edges in the decode graph), and neither the side CTAs
// made resident during the previous GEMV nor their first loads issued before the wait
// shortened it (H200, 2026-12-01; bench/RESULTS.md). Alone in the pipeline (the Q1_0 launch
// skipped, a probe) it makes the step 10.1 us: its own chain. Folded into the Q1_0 launch
// (branch exp/s14-side-fold, bit-identical) it was no faster in three forms: one row group per
// CTA (327 KB through one SM: qkv step 13.9 us), spread over the warps that have a slot fewer
// (12.1 us, but the recurrence after it 4.47 -> 5.14 us, we think for the 4 free SMs where
// its CTAs read the state before their wait: tg128 unchanged), and that with 4 chunks a wait
// (13.8 us; H200, 2026-12-02). Nor beside it (branch exp/s23-beside, bit-identical): one-warp
// CTAs per row group and chunk range, one to an SM next to the Q1_0 GEMV's CTAs. Each ran ~10
// µs after its wait (qkv step 22.65 µs, a9c7ae0), still 8.8 µs with x copied in one round trip
// (tg128 297.7 against 339.7, 7566152; H200, 2026-12-03). Our reading, not verified: its 40 KB
// of weights and x queue behind the ~97 KB the GEMV streams through the same SM.
// Nor with the recurrence after it in the same launch (branch exp/s28-gdn-heads, rung
// gdn-heads, bit-identical: CTA pairs own a value head's rows, conv and state, clusters share
// a key head's q/k): tg128 308-322 against 337-339 (H200, 2026-12-04). Every phase of that
// kernel was bound by the instructions an SM issues, and owning heads put the layer on 96 SMs.
// Nor as riders of the Q1_0 launch (branch exp/s29-riders, bit-identical): chunked_kernel's 64
// (group, range) tasks bulk-copied into shared memory before the wait and run by the warps of
// the 32 teams with no slot in the last round, the group's last range adding the sums in range
// order: qkv step 12.82 against 12.89 us, tg128 329.9 against 330.7 (H200, 2026-12-04). Our
// reading, not traced: the 8 SMs holding the riders' 160 KB each finish last instead.
// Nor computed by the GDN recurrence after it (branch exp/s30-proj, bit-identical): each CTA
// of a head's cluster normalises x itself (the norm's order), computes its share of the 32
// (row, range) tasks and sends the sums to its cluster by DSMEM. Without the side launch the
// qkv step took 9.79 us (12.90 with it), but the recurrence 13.64 instead of 5.98 (16.37 with
// x staged by cp.async); tg128 314-315 (306 staged) against 335-337 (H200, 2026-12-04); under
// ncu the recurrence alone went 8.80 -> 16.29 us with 87% more instructions. Nor with the side
// launch's row groups shared by clusters of 2 or 4 CTAs (branch exp/s30-side-parts,
// bit-identical): qkv step 17.6-17.9 us, tg128 313-316 against 335-337.
// Tried next (fold() below): a row per CTA, its chunk parts formed by the threads that quantise
// the same eighths of p(x) in the Q1_0 GEMV's prologue, the range sums by the first warp done.
int CudaExecutor::fused_matmul(const model::Step& s, ProgramMem& pm, Slot& slot) {
  const int n = s.n_mats();
  const DevRows x = view(pm, s.in[0]);
  if (x.rows != 1) fail("cuda executor: mat_mul_fused runs one token, got {}", x.rows);
  FusedGemv base;
  base.prologue = s.prologue;
  base.epilogue = s.epilogue;
  base.x = x.data;
  base.gate = s.in[1].valid() ? view(pm, s.in[1]).data : nullptr;
  base.norm = s.vec ? vec(s.vec) : nullptr;
  base.head_dim = s.head_dim;
  base.eps = s.eps;
  const bool per_matrix = model::epilogue_per_matrix(s.epilogue);
  std::vector<FusedGemv> families;
  std::vector<std::vector<size_t>> members;  // the step's matrix indices of each family
  std::vector<int64_t> rows;
  std::vector<bool> done(static_cast<size_t>(n), false);
  for (int i = 0; i < n; ++i) {
    if (done[static_cast<size_t>(i)]) continue;
    FusedGemv f = base;
    if (s.epilogue == model::Epilogue::ConvSilu) {
      if (i == 0) {
        f.conv_w = vec(s.vec2);
        f.conv_state = slot.conv.at(static_cast<size_t>(s.layer)).as<float>();
        f.conv_kernel = static_cast<int>(model_.hp.ssm_conv_kernel);
      } else {
        f.epilogue = model::Epilogue::Store;
      }
    }
    members.emplace_back();
    rows.push_back(0);
    const int family = fused_family(matrix(s.mats[static_cast<size_t>(i)]).type);
    for (int j = i; j < n; ++j) {
      const size_t k = static_cast<size_t>(j);
      const GpuMatrix& w = matrix(s.mats[k]);
      if (done[k] || fused_family(w.type) != family) continue;
      done[k] = true;
      if (s.silu_mat == j) f.silu_mat = f.n;
      f.w[f.n] = &w;
      f.y[f.n] =
          per_matrix ? view(pm, s.mouts[k]).data : (f.n == 0 ? view(pm, s.mouts[0]).data : nullptr);
      ++f.n;
      members.back().push_back(k);
      rows.back() += w.n_out;
    }
    if (f.n != n && !per_matrix) {
      fail(
          "cuda executor: mat_mul_fused with a combining epilogue needs its matrices in one "
          "kernel family ({} has {} of {})",
          s.mats[0]->name, f.n, n);
    }
    families.push_back(f);
  }
  const size_t main =
      static_cast<size_t>(std::max_element(rows.begin(), rows.end()) - rows.begin());
  if (codes_next_ == &s) {
    families[main].codes_act = codes_act_.as<uint32_t>();
    families[main].codes_meta = codes_meta_.get();
    families[main].codes_in_blocks = codes_next_blocks_;
  }
  codes_next_ = nullptr;  // codes reach only the step right after their producer
  if (families.size() == 1) link_codes(s, pm, families[main]);
  int launches = 1;
  const auto beside = [&](size_t i) {
    if (launches++ == 1) fork_side();
    families[main].spare_sms += static_cast<int>(matmul_fused(families[i], side_));
    std::vector<model::View> ranges(s.in.begin(), s.in.end());
    for (size_t k : members[i]) ranges.push_back(s.mouts[k]);
    side_done(ranges);
  };
  // One family may fold into the main launch: the first, decided once every other side launch
  // has set how many SMs the main launch leaves them.
  const size_t folding = main == 0 ? 1 : 0;
  for (size_t i = 0; i < families.size(); ++i) {
    if (i != main && i != folding) beside(i);
  }
  if (folding < families.size() && !fold(families[main], families[folding])) beside(folding);
  matmul_fused(families[main], stream_);
  return launches;
}

// The side family's rows computed by the main launch instead (FusedGemv::fold_*: the qkv
// step's BF16 beta and alpha, CTA r row r, bit-identical), where it can take them. The main
// launch still leaves free the SMs the side launch would have held (its row groups): with
// every SM taken by the GEMV, the GDN recurrence's CTAs lost the early start they make there
// (4.47 -> 5.14 µs; H200, 2026-12-02, branch exp/s14-side-fold).
// Predicted: the qkv step 12.9 -> ~10 µs, tg128 ~+5%. Measured (H100, 2026-12-05,
// bench/RESULTS.md): the step 14.13 -> 9.76 µs, but gate+up and ffn_down after it slower, so
// tg128 level with the side launch (328.7-329.7 against 327.7-328.6) at 340 dispatches a token
// instead of 388; with the fold as a kernel instantiation of its own, 2.5% slower.
bool CudaExecutor::fold(FusedGemv& main, const FusedGemv& side) const {
  FusedGemv f = main;
  for (int k = 0; k < side.n; ++k) f.spare_sms += static_cast<int>(side.w[k]->n_row_tiles);
  if (!q1_fold_refusal(f, side).empty()) return false;
  main = with_fold(f, side);
  return true;
}

// When s is a Q1_0 gate+up GEMV whose CTAs can own whole blocks of its output and the next
// step a Q1_0 GEMV of exactly that output with no prologue (ffn_down), s also writes those
// blocks' activation codes and the next step copies them instead of quantising (FusedGemv::
// codes_out: bit-identical, ffn_down ~2 µs faster a layer on the H200).
void CudaExecutor::link_codes(const model::Step& s, ProgramMem& pm, FusedGemv& f) {
  if (s.epilogue != model::Epilogue::SiluMulPair) return;
  const model::Step* next = codes_consumer(s, pm, s.mouts[0], model::Prologue::None);
  if (next == nullptr) return;
  const int blocks = q1_codes_out_blocks(f);
  if (blocks == 0) return;
  f.codes_act = codes_act_.as<uint32_t>();
  f.codes_meta = codes_meta_.get();
  f.codes_out = true;
  codes_next_ = next;
  codes_next_blocks_ = blocks;
}

// The step after s when it is a one-token Q1_0 GEMV (quantised activations) of exactly s's
// output y with this prologue, else null: the steps whose codes s may write.
const model::Step* CudaExecutor::codes_consumer(const model::Step& s, ProgramMem& pm,
                                                const model::View& y,
                                                model::Prologue prologue) const {
  const std::vector<model::Step>& steps = pm.program->steps;
  const size_t at = static_cast<size_t>(&s - steps.data());
  if (at + 1 >= steps.size()) return nullptr;
  const model::Step& next = steps[at + 1];
  if (next.op != Op::MatMulFused || next.prologue != prologue || next.n_mats() != 1) {
    return nullptr;
  }
  const model::View& x = next.in[0];
  if (x.buf != y.buf || x.col != y.col || x.width != y.width) return nullptr;
  const GpuMatrix& w = matrix(next.mats[0]);
  if (w.type != quant::Type::Q1_0 || w.f32_activations) return nullptr;
  return &next;
}

// When the step after s (a one-token recurrence or attention) is the Q1_0 GEMV of its output
// with this prologue (ssm_out's HeadRmsNormMulGate, on heads as long as s's, or attn_output's
// MulGate: rung norm-gemv-fused), and s can write that GEMV's codes (ok), the codes s writes
// for it; the GEMV then copies them (FusedGemv::codes_in_blocks = all of x): bit-identical.
// Its prologue had staged and quantised all of x in each of its CTAs; for ssm_out ~4.6 of its
// ~7 µs after the wait (bench/gemv_lab timeline, H200, 2026-12-02).
CodesOut CudaExecutor::codes_out_for(const model::Step& s, ProgramMem& pm, model::Prologue prologue,
                                     bool ok) {
  const model::Step* next = codes_consumer(s, pm, s.out, prologue);
  const DevRows out = view(pm, s.out);
  if (next == nullptr || !ok || out.rows != 1 || out.cols % 128 != 0 ||
      (model::prologue_head_normed(prologue) && next->head_dim != s.head_dim)) {
    return {};
  }
  codes_next_ = next;
  codes_next_blocks_ = static_cast<int>(out.cols / 128);
  return {codes_act_.as<uint32_t>(), codes_meta_.get(), view(pm, next->in[1]).data,
          next->vec ? vec(next->vec) : nullptr, next->eps};
}

namespace {

bool overlaps(const model::View& a, const model::View& b) {
  return a.valid() && b.valid() && a.buf == b.buf && a.col < b.col + b.width &&
         b.col < a.col + a.width;
}

}  // namespace

std::vector<model::View> CudaExecutor::views_of(const model::Step& s) {
  std::vector<model::View> v{s.out, s.out2};
  v.insert(v.end(), s.in.begin(), s.in.end());
  v.insert(v.end(), s.mouts.begin(), s.mouts.end());
  return v;
}

bool CudaExecutor::side_may_run(Op op) {
  switch (op) {
    case Op::RmsNorm:
    case Op::Add:
    case Op::AddVec:
    case Op::MulVec:
    case Op::Sigmoid:
    case Op::Softplus:
    case Op::Silu:
    case Op::SiluMul:
    case Op::SigmoidMul:
    case Op::L2NormHeads:
    case Op::SplitHeads:
    case Op::Rope:
    case Op::CopyRows:
      return true;
    default:  // the embedding (host), caches and states, matmul (its workspace is shared), the
              // fused GEMV (uses the side stream itself)
      return false;
  }
}

void CudaExecutor::fork_side() {
  CUDA_CHECK(cudaEventRecord(fork_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
  side_current_ = true;
}

void CudaExecutor::side_done(const std::vector<model::View>& ranges) {
  const size_t ev = side_launches_++;
  if (ev == join_events_.size()) {
    join_events_.emplace_back();
    CUDA_CHECK(cudaEventCreateWithFlags(&join_events_.back(), cudaEventDisableTiming));
  }
  CUDA_CHECK(cudaEventRecord(join_events_[ev], side_));
  for (const model::View& v : ranges) {
    if (v.valid()) pending_.push_back(v);
  }
}

void CudaExecutor::join_touching(const model::Step& s) {
  if (pending_.empty()) return;  // the usual case: no side work in flight
  const std::vector<model::View> views = views_of(s);
  const auto touches = [&](const model::View& p) {
    return std::any_of(views.begin(), views.end(),
                       [&](const model::View& v) { return overlaps(p, v); });
  };
  if (std::any_of(pending_.begin(), pending_.end(), touches)) join_all();
}

void CudaExecutor::join_all() {
  for (size_t ev = 0; ev < side_launches_; ++ev) {
    CUDA_CHECK(cudaStreamWaitEvent(stream_, join_events_[ev], 0));
  }
  side_launches_ = 0;
  pending_.clear();
}

}  // namespace gdn::cuda
