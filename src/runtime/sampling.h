// Token sampling: a fixed chain in the style of llama.cpp's samplers.
//
//   penalties -> (greedy when temperature <= 0) -> top-k -> temperature -> softmax
//   -> top-p -> min-p -> renormalise -> draw
//
// Draws come from std::mt19937_64 (whose output the standard fixes) through our own
// bits-to-[0,1) conversion, so a seed gives the same tokens on any standard library (short
// of a last-bit difference in std::exp landing exactly on a draw's boundary).
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

namespace gdn::runtime {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0 (negative too, as llama.cpp): greedy; must be finite
  int32_t top_k = 40;        // <= 0 or >= vocabulary size: off
  float top_p = 0.95f;       // in (0, 1]; 1: off
  float min_p = 0.05f;       // in [0, 1]; 0: off. Keeps tokens with p >= min_p * p_max
  // In (0, inf); 1: off. For each distinct token in the last repeat_last_n tokens, a positive
  // logit is divided by it and a non-positive one multiplied (llama.cpp's rule).
  float repeat_penalty = 1.0f;
  int32_t repeat_last_n = 64;      // >= 0: the penalty window; 0 turns all penalties off
  float presence_penalty = 0.0f;   // subtracted once per distinct token in the window
  float frequency_penalty = 0.0f;  // subtracted once per occurrence in the window
  uint64_t seed = 0xC0FFEE;
};

// Throws gdn::Error naming the first bad parameter and its value.
void validate(const SamplingParams& params);

// One sequence's sampler. Not thread-safe; use one per sequence.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);  // validates params

  // Picks a token from one row of logits and records it in the history. Throws on empty
  // logits, a NaN or infinite logit (naming its index), or, when a penalty is on, a history
  // token outside the logits.
  int32_t sample(std::span<const float> logits);
  // Records a token for the penalties (prompt tokens, or tokens chosen elsewhere).
  void accept(int32_t token);
  // Clears the history and reseeds the generator: the next draws repeat the first ones.
  void reset();

 private:
  struct Candidate {
    int32_t id;
    float logit;
    float p;  // unnormalised probability, exp((logit - max) / temperature)
  };

  std::span<const float> apply_penalties(std::span<const float> logits);
  void gather(std::span<const float> logits);
  double apply_softmax();
  void apply_min_p();
  void apply_top_p(double total);
  int32_t draw();

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::deque<int32_t> history_;  // the last repeat_last_n tokens, oldest first
  // Reused between calls, so that steps do not reallocate.
  std::vector<float> penalised_;  // a copy of the logits, when penalties change some
  std::vector<int32_t> window_;   // the history, sorted
  std::vector<Candidate> cands_;
};

}  // namespace gdn::runtime
