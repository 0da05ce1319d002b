// The fused Q1_0 MLP of one token (mlp_q1_0.cu describes the kernel; bench/mlp_lab times it
// against the decode's two launches): C++-clean declarations.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/device.h"
#include "cuda/matrix.h"

namespace gdn::cuda::mm {

// When a CTA bulk-copies its block's gate and up rows into shared memory: all before the wait;
// all once n is staged (so that the norm's loads of y do not queue behind 184 KB at the SM);
// the gate rows before the wait and the up rows once the norm's scale is known.
enum class Q1MlpCopies : uint8_t { BeforeWait, Held, Split };

// y <- y + W_down·(silu(W_gate·n) ⊙ (W_up·n)), n = rms_norm(y, norm, eps), in one kernel.
struct Q1MlpArgs {
  const GpuMatrix* gate = nullptr;  // Q1_0 (quantised activations), n_ff x n_embd
  const GpuMatrix* up = nullptr;    // the same shape
  const GpuMatrix* down = nullptr;  // Q1_0, n_embd x n_ff
  const float* norm = nullptr;      // n_embd
  float eps = 0.0f;
  float* y = nullptr;  // the residual (n_embd floats, 16-byte aligned): read, then added into
  float* h = nullptr;  // optional: the SwiGLU vector (n_ff floats), for the checks
  Q1MlpCopies copies = Q1MlpCopies::BeforeWait;
};

// Stamps of the MLP's timeline (globaltimer ns), thread 0 of each CTA.
enum MlpTraceEvent {
  kMlpEntry,
  kMlpIssued,  // its work before the wait done (copies issued unless held, down prefetched)
  kMlpWaited,
  kMlpNormed,     // the norm's scale of y
  kMlpStaged,     // n staged
  kMlpQuantised,  // n quantised
  kMlpGateUp,     // its first block's gate and up rows summed
  kMlpCodes,      // that block's SwiGLU values quantised
  kMlpDown,       // every owned block's down partials stored
  kMlpBarrier,    // every CTA's partials stored
  kMlpLoaded,     // the partials of its rows in shared memory
  kMlpDone,       // its rows of y added and stored
  kMlpTraceEvents
};

class Q1Mlp {
 public:
  // Checks the matrices (types, shapes) and repacks W_down into the split-K layout the kernel
  // reads (a copy this object owns); throws gdn::Error naming what is wrong.
  Q1Mlp(const Q1MlpArgs& a, cudaStream_t s);
  // One launch on s (PDL); trace: null, or [grid][kMlpTraceEvents].
  void run(cudaStream_t s, uint64_t* trace = nullptr) const;
  unsigned grid() const { return grid_; }
  std::string describe() const;

 private:
  Q1MlpArgs a_;
  DeviceBuffer down_bits_, down_scales_, partials_, barrier_;
  unsigned grid_ = 0;
  size_t smem_ = 0;
  int n_blk_ = 0;
  int offsets_[7] = {};  // shared-memory offsets: stage, act, meta, sums, rows, hact, bar
};

}  // namespace gdn::cuda::mm
