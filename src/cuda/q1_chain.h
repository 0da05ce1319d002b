// The persistent Q1_0 GEMV chain (q1_chain.cu describes the kernel; bench/chain_lab times
// it against a launch per GEMV): the first piece of DESIGN.md §4's megakernel, in C++-clean
// declarations (the op checks include them).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda/matrix.h"

namespace gdn::cuda::mm {

// Plain one-token Q1_0 GEMVs y_k = W_k x_k in order, where x_k may be an earlier step's y, run as
// one cooperative kernel (a CTA per SM) with a grid barrier per step, the weights of later steps
// bulk-copied into a shared-memory ring while the current step finishes. Every y_k is
// bit-identical to matmul_fused(plain_gemv(W_k, x_k, y_k)).
struct Q1ChainStep {
  const GpuMatrix* w;  // Q1_0 (quantised activations), n_in <= 18432
  const float* x;      // n_in floats, 16-byte aligned
  float* y;            // n_out floats
};
// Stamps of the chain's timeline (globaltimer ns): per step and CTA, consumer thread 0 after
// the step's grid barrier, after quantising x, after its team's last tile, after signalling
// the CTA's last row stored; the producer when it has issued the step's last tile.
enum ChainTraceEvent {
  kChainWaited,
  kChainQuantised,
  kChainDots,
  kChainDone,
  kChainIssuedAll,
  kChainTraceEvents
};
struct Q1ChainOptions {
  bool direct_x = false;     // quantise x from L2, no staged copy (the ring gets its room)
  bool release_add = false;  // a step's end signalled by red.release (else fence + atomicAdd)
  // Timing only, wrong results: no grid barrier and no prologue, so the steps' tiles run as
  // fast as their bytes stream through the ring (the chain's ceiling without its dependences).
  bool stream_only = false;
  // A warp per row tile (its slices in turn, no team barrier) in steps with tiles for at least
  // a third of the consumer warps; else teams of `slices` warps per tile.
  bool warp_tiles = false;
  // The producer issues no copy from the moment its CTA has finished a step's tiles until the
  // next step's x is quantised, so that x's loads do not queue behind the SM's bulk copies.
  bool hold_producer = false;
};
class Q1Chain {
 public:
  // Checks the steps (types, sizes, alignment) and uploads their table; throws gdn::Error.
  Q1Chain(const std::vector<Q1ChainStep>& steps, const Q1ChainOptions& o);
  ~Q1Chain();
  Q1Chain(const Q1Chain&) = delete;
  Q1Chain& operator=(const Q1Chain&) = delete;
  // One launch of the whole chain on s; trace: null, or [steps][grid][kChainTraceEvents].
  void run(cudaStream_t s, uint64_t* trace = nullptr) const;
  unsigned grid() const;
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gdn::cuda::mm
