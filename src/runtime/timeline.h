// Where a forward's time went, step by step (Executor::timeline), and the sum of those times by
// step kind over several forwards (gdn bench --timeline).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gdn::runtime {

// One program step's share of a forward pass, from the dispatch timeline (a step's first
// kernel starting to the next step's first kernel starting, once their predecessors finished).
// Stamps are handed to the steps in program order, so where kernels run concurrently (the
// CUDA executor's side stream) the split among those neighbours is approximate; their sum is
// exact.
struct StepTime {
  std::string kind;  // model::step_kind
  int launches = 0;
  double us = 0.0;
  uint64_t weight_bytes = 0;  // model::step_weight_bytes
};

// One step kind's steps, launches, time and weight bytes, summed over several forwards.
struct KindTime {
  std::string kind;
  int steps = 0;
  int launches = 0;
  double us = 0.0;
  uint64_t weight_bytes = 0;
};

// Each kind's sums over the forwards, the most time first (ties: the kind seen first).
std::vector<KindTime> sum_by_kind(const std::vector<std::vector<StepTime>>& forwards);

}  // namespace gdn::runtime
