#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"

namespace gdn::runtime {

namespace {

// The 53 high bits as a double in [0, 1): exact, and the same on every standard library
// (std::uniform_real_distribution's algorithm is left to the implementation).
double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// A branch-free pass first (it vectorises); the index search only runs on failure.
void check_logits(std::span<const float> logits) {
  if (logits.empty()) fail("sampling: empty logits");
  if (logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("sampling: {} logits exceed the int32 token id range", logits.size());
  int bad = 0;
  for (float x : logits) bad |= !(std::abs(x) <= std::numeric_limits<float>::max());
  if (!bad) return;
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isfinite(logits[i])) fail("sampling: logit {} is {}", i, logits[i]);
}

// The first maximum, so ties go to the lowest id.
int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

void validate(const SamplingParams& p) {
  if (!std::isfinite(p.temperature))
    fail("sampling: temperature must be finite, got {}", p.temperature);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    fail("sampling: top_p must be in (0, 1], got {}", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    fail("sampling: min_p must be in [0, 1], got {}", p.min_p);
  if (!(p.repeat_penalty > 0.0f) || std::isinf(p.repeat_penalty))
    fail("sampling: repeat_penalty must be positive and finite, got {}", p.repeat_penalty);
  if (p.repeat_last_n < 0) fail("sampling: repeat_last_n must be >= 0, got {}", p.repeat_last_n);
  if (!std::isfinite(p.presence_penalty))
    fail("sampling: presence_penalty must be finite, got {}", p.presence_penalty);
  if (!std::isfinite(p.frequency_penalty))
    fail("sampling: frequency_penalty must be finite, got {}", p.frequency_penalty);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  validate(params_);
}

int32_t Sampler::sample(std::span<const float> logits) {
  check_logits(logits);
  const std::span<const float> scores = apply_penalties(logits);
  int32_t token;
  if (params_.temperature <= 0.0f) {
    token = argmax(scores);
  } else {
    gather(scores);
    const double total = apply_softmax();
    // min-p runs before top-p, though the chain says after: both keep a prefix of the
    // tokens in descending probability (min-p compares p / p_max, which renormalising keeps),
    // so the result is the shorter prefix either way, and filtering first shrinks the sort.
    apply_min_p();
    apply_top_p(total);
    token = draw();
  }
  accept(token);
  return token;
}

void Sampler::accept(int32_t token) {
  if (token < 0) fail("sampling: cannot accept negative token id {}", token);
  if (params_.repeat_last_n == 0) return;
  history_.push_back(token);
  if (history_.size() > static_cast<size_t>(params_.repeat_last_n)) history_.pop_front();
}

void Sampler::reset() {
  history_.clear();
  rng_.seed(params_.seed);
}

// Returns the logits themselves when no penalty applies, else a penalised copy. llama.cpp's
// order: scale by the repeat penalty, then subtract frequency and presence.
std::span<const float> Sampler::apply_penalties(std::span<const float> logits) {
  const SamplingParams& p = params_;
  const bool off =
      p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f;
  if (off || history_.empty()) return logits;
  penalised_.assign(logits.begin(), logits.end());
  window_.assign(history_.begin(), history_.end());
  std::sort(window_.begin(), window_.end());
  for (size_t i = 0; i < window_.size();) {
    const int32_t token = window_[i];
    size_t count = 0;
    for (; i < window_.size() && window_[i] == token; ++i) ++count;
    if (static_cast<size_t>(token) >= logits.size())
      fail("sampling: history token {} is outside the {} logits", token, logits.size());
    float& logit = penalised_[token];
    if (p.repeat_penalty != 1.0f)
      logit = logit > 0.0f ? logit / p.repeat_penalty : logit * p.repeat_penalty;
    logit -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
    if (!std::isfinite(logit)) fail("sampling: penalties overflow the logit of token {}", token);
  }
  return penalised_;
}

// cands_ becomes every token, in id order, or with top-k the k largest logits (ties to the
// lower id) sorted: a total order either way, so the draw walks the same sequence whatever
// nth_element leaves behind on a given standard library. Top-k scans once, keeping at most
// 2k candidates: whenever the buffer fills it is cut to the best k, whose last logit then
// bars the rest (an equal logit later has a higher id, so it ranks below).
void Sampler::gather(std::span<const float> logits) {
  const size_t n = logits.size();
  const size_t k = params_.top_k > 0 ? static_cast<size_t>(params_.top_k) : n;
  cands_.clear();
  if (k >= n) {
    for (size_t i = 0; i < n; ++i) cands_.push_back({static_cast<int32_t>(i), logits[i], 0.0f});
    return;
  }
  const auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  const auto cut = [&] {
    std::nth_element(cands_.begin(), cands_.begin() + (k - 1), cands_.end(), by_logit);
    cands_.resize(k);
  };
  float bar = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) {
    if (!(logits[i] > bar)) continue;
    cands_.push_back({static_cast<int32_t>(i), logits[i], 0.0f});
    if (cands_.size() == 2 * k) {
      cut();
      bar = cands_.back().logit;
    }
  }
  if (cands_.size() > k) cut();
  std::sort(cands_.begin(), cands_.end(), by_logit);
}

// Max-subtracted, so the largest token's weight is exactly 1 and nothing overflows; the sum
// is in double. Returns that sum.
double Sampler::apply_softmax() {
  float max_logit = cands_.front().logit;
  for (const Candidate& c : cands_) max_logit = std::max(max_logit, c.logit);
  const float temperature = params_.temperature;
  double total = 0.0;
  for (Candidate& c : cands_) {
    c.p = std::exp((c.logit - max_logit) / temperature);
    total += c.p;
  }
  return total;
}

// p_max is 1 (see apply_softmax), so the threshold is min_p itself. remove_if is stable,
// which keeps the candidate order deterministic.
void Sampler::apply_min_p() {
  const float min_p = params_.min_p;
  if (min_p <= 0.0f) return;
  const auto below = [&](const Candidate& c) { return c.p < min_p; };
  cands_.erase(std::remove_if(cands_.begin(), cands_.end(), below), cands_.end());
}

// The smallest prefix, in descending probability (ties to the lower id), whose weight
// reaches top_p of `total` (the weight of all candidates before min-p). Sorts in growing
// chunks so that a small nucleus over a large vocabulary costs a few linear passes.
void Sampler::apply_top_p(double total) {
  if (params_.top_p >= 1.0f) return;
  const auto by_p = [](const Candidate& a, const Candidate& b) {
    return a.p > b.p || (a.p == b.p && a.id < b.id);
  };
  const double target = params_.top_p * total;
  const size_t n = cands_.size();
  size_t sorted = 0;
  size_t chunk = 64;
  double cumulative = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (i == sorted) {
      sorted = std::min(n, sorted + chunk);
      chunk *= 4;
      const auto first = cands_.begin() + i, last = cands_.begin() + sorted;
      std::nth_element(first, last - 1, cands_.end(), by_p);
      std::sort(first, last, by_p);
    }
    cumulative += cands_[i].p;
    if (cumulative >= target) {
      cands_.resize(i + 1);
      return;
    }
  }
}

// Inverse CDF over the remaining weights, which renormalises them. Zero weights are
// skipped so that rounding at the top end can never pick an impossible token.
int32_t Sampler::draw() {
  double total = 0.0;
  for (const Candidate& c : cands_) total += c.p;
  const double u = uniform01(rng_) * total;
  double cumulative = 0.0;
  int32_t chosen = cands_.front().id;
  for (const Candidate& c : cands_) {
    if (c.p <= 0.0f) continue;
    cumulative += c.p;
    chosen = c.id;
    if (u < cumulative) break;
  }
  return chosen;
}

}  // namespace gdn::runtime
