// Sampler: greedy, seeded determinism, the filters' guarantees over random logits,
// empirical distributions against softmax, penalties on hand examples, and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "runtime/sampling.h"

namespace gdn::runtime {
namespace {

// Everything off but what a test turns on.
SamplingParams plain(float temperature = 1.0f) {
  return {.temperature = temperature,
          .top_k = 0,
          .top_p = 1.0f,
          .min_p = 0.0f,
          .repeat_penalty = 1.0f,
          .repeat_last_n = 64,
          .presence_penalty = 0.0f,
          .frequency_penalty = 0.0f};
}

SamplingParams greedy() {
  return plain(0.0f);
}

// Uniform in [-6, 6): distinct with overwhelming probability, never all equal.
std::vector<float> random_logits(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-6.0f, 6.0f);
  std::vector<float> logits(n);
  for (float& l : logits) l = dist(rng);
  return logits;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  for (size_t i = 0; i < p.size(); ++i) p[i] = std::exp((logits[i] - max_logit) / temperature);
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& x : p) x /= total;
  return p;
}

// Token ids by descending probability.
std::vector<int32_t> ranked(const std::vector<double>& p) {
  std::vector<int32_t> ids(p.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  return ids;
}

std::vector<int32_t> draws(Sampler& sampler, const std::vector<float>& logits, int n) {
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = sampler.sample(logits);
  return out;
}

// |freq - p| <= 4 sigma of the binomial, for every token, over n draws.
void expect_frequencies(const std::vector<int32_t>& tokens, const std::vector<double>& p) {
  std::vector<int64_t> counts(p.size(), 0);
  for (int32_t t : tokens) ++counts.at(t);
  const double n = static_cast<double>(tokens.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const double bound = 4.0 * std::sqrt(p[i] * (1.0 - p[i]) / n) + 1e-12;
    EXPECT_NEAR(counts[i] / n, p[i], bound) << "token " << i;
  }
}

void expect_error_naming(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no gdn::Error; expected one naming '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Sampling, GreedyIsArgmax) {
  std::mt19937 rng(1);
  Sampler sampler(greedy());
  for (int trial = 0; trial < 100; ++trial) {
    const auto logits = random_logits(rng, 1000);
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(sampler.sample(logits), best);
  }
}

TEST(Sampling, GreedyTiesPickTheLowestId) {
  Sampler sampler(greedy());
  EXPECT_EQ(sampler.sample(std::vector<float>{1.0f, 3.0f, 2.0f, 3.0f, 3.0f}), 1);
  EXPECT_EQ(sampler.sample(std::vector<float>{0.0f, 0.0f, 0.0f}), 0);
}

TEST(Sampling, NegativeTemperatureIsGreedy) {
  Sampler sampler(plain(-1.0f));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sampler.sample(std::vector<float>{0.5f, 0.7f, 0.6f}), 1);
}

TEST(Sampling, SameSeedSameSequence) {
  std::mt19937 rng(2);
  const auto logits = random_logits(rng, 500);
  SamplingParams params;  // the defaults, all filters on
  Sampler a(params), b(params);
  const auto first = draws(a, logits, 1000);
  EXPECT_EQ(first, draws(b, logits, 1000));
  EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 1u);

  params.seed += 1;
  Sampler c(params);
  EXPECT_NE(first, draws(c, logits, 1000));

  a.reset();
  EXPECT_EQ(first, draws(a, logits, 1000));
}

// Pins the sequence: mt19937_64 and our conversion are fixed by the standard and by us, so
// this holds on every standard library. Checked against a separate Python implementation of
// mt19937_64 and the inverse CDF.
TEST(Sampling, SeedGivesAKnownSequence) {
  SamplingParams params = plain();
  params.seed = 42;
  Sampler sampler(params);
  const auto tokens = draws(sampler, {0.0f, 1.0f, 2.0f, 1.5f, -1.0f, 0.5f}, 16);
  EXPECT_EQ(tokens, (std::vector<int32_t>{3, 3, 3, 1, 4, 1, 2, 2, 2, 2, 0, 2, 3, 3, 3, 5}));
}

TEST(Sampling, TopKNeverLeavesTheKLargest) {
  std::mt19937 rng(3);
  for (int32_t k : {1, 2, 5, 17}) {
    SamplingParams params = plain(1.5f);
    params.top_k = k;
    params.seed = k;
    Sampler sampler(params);
    std::set<int32_t> seen;
    for (int trial = 0; trial < 20; ++trial) {
      const auto logits = random_logits(rng, 300);
      std::vector<float> sorted = logits;
      std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
      const float kth = sorted[k - 1];
      for (int32_t t : draws(sampler, logits, 200)) {
        ASSERT_GE(logits[t], kth) << "k " << k;
        seen.insert(t);
      }
    }
    EXPECT_TRUE(k == 1 || seen.size() > 1) << "k " << k;
  }
}

// At a high temperature the k survivors are near-uniform, so all of them show up: none is
// lost while the scan cuts its buffer, whatever order the logits come in. Ties go to the
// lower id: with logit = i / 10, k = 15 keeps 90..99 and 80..84.
TEST(Sampling, TopKKeepsExactlyTheKLargest) {
  std::mt19937 rng(8);
  std::vector<float> shuffled = random_logits(rng, 1000);
  std::vector<float> ascending = shuffled, descending = shuffled;
  std::sort(ascending.begin(), ascending.end());
  std::sort(descending.begin(), descending.end(), std::greater<>());
  std::vector<float> tied(100);
  for (size_t i = 0; i < tied.size(); ++i) tied[i] = static_cast<float>(i / 10);
  for (const auto& [logits, k] : {std::pair{shuffled, 10}, std::pair{ascending, 7},
                                  std::pair{descending, 7}, std::pair{tied, 15}}) {
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    const std::set<int32_t> expected(ids.begin(), ids.begin() + k);
    SamplingParams params = plain(1000.0f);
    params.top_k = k;
    Sampler sampler(params);
    const auto tokens = draws(sampler, logits, 2000);
    EXPECT_EQ(std::set<int32_t>(tokens.begin(), tokens.end()), expected) << "k " << k;
  }
}

TEST(Sampling, TopPNeverLeavesTheNucleus) {
  std::mt19937 rng(4);
  for (float top_p : {0.1f, 0.5f, 0.9f, 0.99f}) {
    SamplingParams params = plain(1.0f);
    params.top_p = top_p;
    Sampler sampler(params);
    size_t widest = 0;
    for (int trial = 0; trial < 20; ++trial) {
      const auto logits = random_logits(rng, 200);
      const auto p = softmax(logits, 1.0);
      // Allowed: tokens whose predecessors in rank order sum to less than top_p (with slack
      // for rounding), i.e. the smallest prefix reaching top_p.
      std::set<int32_t> nucleus;
      double before = 0.0;
      for (int32_t id : ranked(p)) {
        if (before >= top_p + 1e-9) break;
        nucleus.insert(id);
        before += p[id];
      }
      widest = std::max(widest, nucleus.size());
      std::set<int32_t> seen;
      for (int32_t t : draws(sampler, logits, 200)) {
        ASSERT_TRUE(nucleus.count(t)) << "top_p " << top_p << " token " << t;
        seen.insert(t);
      }
      EXPECT_TRUE(nucleus.size() <= 3 || seen.size() > 1);
    }
    EXPECT_TRUE(top_p < 0.5f || widest > 3) << "top_p " << top_p;
  }
}

TEST(Sampling, MinPNeverLeavesTheThreshold) {
  std::mt19937 rng(5);
  for (float min_p : {0.02f, 0.1f, 0.5f}) {
    SamplingParams params = plain(2.0f);
    params.min_p = min_p;
    Sampler sampler(params);
    std::set<int32_t> seen;
    for (int trial = 0; trial < 20; ++trial) {
      const auto logits = random_logits(rng, 200);
      const auto p = softmax(logits, 2.0);
      const double p_max = *std::max_element(p.begin(), p.end());
      for (int32_t t : draws(sampler, logits, 200)) {
        ASSERT_GE(p[t], min_p * p_max * (1.0 - 1e-6)) << "min_p " << min_p;
        seen.insert(t);
      }
    }
    EXPECT_GT(seen.size(), 1u);
  }
}

TEST(Sampling, AllFiltersTogetherStayInEveryFilter) {
  std::mt19937 rng(6);
  SamplingParams params;  // defaults: top_k 40, top_p 0.95, min_p 0.05, temperature 0.8
  params.temperature = 3.0f;
  Sampler sampler(params);
  for (int trial = 0; trial < 20; ++trial) {
    const auto logits = random_logits(rng, 1000);
    std::vector<float> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    // top_k first: p is the softmax over the 40 survivors.
    std::vector<float> top(logits.size(), -std::numeric_limits<float>::infinity());
    for (size_t i = 0; i < logits.size(); ++i)
      if (logits[i] >= sorted[39]) top[i] = logits[i];
    const auto p = softmax(top, 3.0);
    const double p_max = *std::max_element(p.begin(), p.end());
    std::set<int32_t> nucleus;
    double before = 0.0;
    for (int32_t id : ranked(p)) {
      if (before >= 0.95 + 1e-9) break;
      nucleus.insert(id);
      before += p[id];
    }
    for (int32_t t : draws(sampler, logits, 100)) {
      ASSERT_GE(logits[t], sorted[39]);
      ASSERT_TRUE(nucleus.count(t));
      ASSERT_GE(p[t], 0.05 * p_max * (1.0 - 1e-6));
    }
  }
}

TEST(Sampling, FrequenciesMatchSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.5f, -1.0f, 0.5f, 2.0f, -3.0f, 1.2f};
  Sampler sampler(plain(1.0f));
  expect_frequencies(draws(sampler, logits, 200000), softmax(logits, 1.0));
}

TEST(Sampling, TemperatureScalesTheDistribution) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.5f, -1.0f, 0.5f, 2.0f, -3.0f, 1.2f};
  Sampler sampler(plain(2.0f));
  expect_frequencies(draws(sampler, logits, 200000), softmax(logits, 2.0));
}

// After top-k and top-p the survivors are drawn in proportion to their renormalised weights.
TEST(Sampling, FiltersRenormalise) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.5f, -1.0f, 0.5f, 2.0f, -3.0f, 1.2f};
  SamplingParams params = plain(1.0f);
  params.top_k = 4;     // keeps 2, 5, 7, 0
  params.top_p = 0.8f;  // of those, 2 and 5 hold 0.76, so 7 joins (0.89)
  Sampler sampler(params);
  const std::vector<float> kept = {2.5f, 2.0f, 1.2f};
  const auto q = softmax(kept, 1.0);
  std::vector<double> p(logits.size(), 0.0);
  p[2] = q[0];
  p[5] = q[1];
  p[7] = q[2];
  expect_frequencies(draws(sampler, logits, 200000), p);
}

TEST(Sampling, SmallTemperatureConcentratesOnTheArgmax) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.5f, -1.0f, 0.5f, 2.0f, -3.0f, 1.2f};
  Sampler sampler(plain(0.02f));
  for (int32_t t : draws(sampler, logits, 10000)) ASSERT_EQ(t, 2);
}

// One draw per call at the real vocabulary size, with the default chain.
TEST(Sampling, FullVocabularyDefaults) {
  std::mt19937 rng(7);
  const auto logits = random_logits(rng, 248320);
  std::vector<float> sorted = logits;
  std::nth_element(sorted.begin(), sorted.begin() + 39, sorted.end(), std::greater<>());
  Sampler sampler{SamplingParams{}};
  for (int32_t t : draws(sampler, logits, 50)) EXPECT_GE(logits[t], sorted[39]);
}

// Greedy choice after `history`, to read penalised logits off a tiny vocabulary.
int32_t greedy_after(const SamplingParams& params, const std::vector<int32_t>& history,
                     const std::vector<float>& logits) {
  Sampler sampler(params);
  for (int32_t t : history) sampler.accept(t);
  return sampler.sample(logits);
}

SamplingParams penalised(float repeat, float presence, float frequency, int32_t last_n = 64) {
  SamplingParams params = greedy();
  params.repeat_penalty = repeat;
  params.presence_penalty = presence;
  params.frequency_penalty = frequency;
  params.repeat_last_n = last_n;
  return params;
}

TEST(Sampling, RepeatPenaltyDividesPositiveLogits) {
  const std::vector<float> logits = {2.0f, 1.5f};
  EXPECT_EQ(greedy_after(penalised(1.0f, 0, 0), {0}, logits), 0);
  EXPECT_EQ(greedy_after(penalised(1.2f, 0, 0), {0}, logits), 0);        // 2 / 1.2 = 1.67
  EXPECT_EQ(greedy_after(penalised(1.5f, 0, 0), {0}, logits), 1);        // 2 / 1.5 = 1.33
  EXPECT_EQ(greedy_after(penalised(1.5f, 0, 0), {0, 0, 0}, logits), 1);  // once, not per use
  EXPECT_EQ(greedy_after(penalised(1.2f, 0, 0), {0, 0, 0}, logits), 0);
}

TEST(Sampling, RepeatPenaltyMultipliesNegativeLogits) {
  const std::vector<float> logits = {-1.0f, -1.5f};
  EXPECT_EQ(greedy_after(penalised(1.4f, 0, 0), {0}, logits), 0);  // -1.4
  EXPECT_EQ(greedy_after(penalised(2.0f, 0, 0), {0}, logits), 1);  // -2.0
  // A penalty below 1 rewards: -1.5 * 0.5 = -0.75 beats -1.
  EXPECT_EQ(greedy_after(penalised(0.5f, 0, 0), {1}, logits), 1);
}

TEST(Sampling, PresencePenaltySubtractsOncePerToken) {
  const std::vector<float> logits = {1.0f, 0.0f};
  EXPECT_EQ(greedy_after(penalised(1, 0.9f, 0), {0, 0, 0}, logits), 0);  // 0.1
  EXPECT_EQ(greedy_after(penalised(1, 1.1f, 0), {0, 0, 0}, logits), 1);  // -0.1
}

TEST(Sampling, FrequencyPenaltySubtractsPerOccurrence) {
  const std::vector<float> logits = {1.0f, 0.0f};
  EXPECT_EQ(greedy_after(penalised(1, 0, 0.3f), {0, 0, 0}, logits), 0);   // 1 - 0.9
  EXPECT_EQ(greedy_after(penalised(1, 0, 0.35f), {0, 0, 0}, logits), 1);  // 1 - 1.05
  EXPECT_EQ(greedy_after(penalised(1, 0, 0.35f), {0, 0}, logits), 0);     // 1 - 0.7
}

// llama.cpp scales first, then subtracts: (2 / 2) - 0.5 = 0.5 < 0.6, whereas subtracting
// first would give (2 - 0.5) / 2 = 0.75.
TEST(Sampling, PenaltiesScaleThenSubtract) {
  EXPECT_EQ(greedy_after(penalised(2.0f, 0.5f, 0), {0}, {2.0f, 0.6f}), 1);
}

TEST(Sampling, OnlyTheLastNTokensArePenalised) {
  const std::vector<float> logits = {2.0f, 1.5f, 0.0f};
  EXPECT_EQ(greedy_after(penalised(2.0f, 0, 0, 3), {0, 2, 2}, logits), 1);
  EXPECT_EQ(greedy_after(penalised(2.0f, 0, 0, 2), {0, 2, 2}, logits), 0);
  EXPECT_EQ(greedy_after(penalised(2.0f, 0, 0, 0), {0}, logits), 0);  // window 0: off
}

TEST(Sampling, SampledTokensEnterTheHistoryAndResetClearsIt) {
  const std::vector<float> logits = {2.0f, 1.5f};
  Sampler sampler(penalised(2.0f, 0, 0));
  EXPECT_EQ(sampler.sample(logits), 0);
  EXPECT_EQ(sampler.sample(logits), 1);  // 0 now scores 1.0
  EXPECT_EQ(sampler.sample(logits), 0);  // both penalised: 1.0 vs 0.75
  sampler.reset();
  EXPECT_EQ(sampler.sample(logits), 0);
}

TEST(Sampling, BadParametersThrow) {
  const auto bad = [](auto edit, const std::string& name) {
    SamplingParams params;
    edit(params);
    expect_error_naming([&] { validate(params); }, name);
    expect_error_naming([&] { Sampler sampler(params); }, name);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  bad([&](SamplingParams& p) { p.temperature = nan; }, "temperature");
  bad([&](SamplingParams& p) { p.temperature = inf; }, "temperature");
  bad([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  bad([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p");
  bad([&](SamplingParams& p) { p.top_p = nan; }, "top_p");
  bad([](SamplingParams& p) { p.min_p = -0.1f; }, "min_p");
  bad([](SamplingParams& p) { p.min_p = 1.1f; }, "min_p");
  bad([](SamplingParams& p) { p.repeat_penalty = 0.0f; }, "repeat_penalty");
  bad([](SamplingParams& p) { p.repeat_penalty = -1.0f; }, "repeat_penalty");
  bad([&](SamplingParams& p) { p.repeat_penalty = inf; }, "repeat_penalty");
  bad([](SamplingParams& p) { p.repeat_last_n = -1; }, "repeat_last_n");
  bad([&](SamplingParams& p) { p.presence_penalty = nan; }, "presence_penalty");
  bad([&](SamplingParams& p) { p.frequency_penalty = inf; }, "frequency_penalty");

  SamplingParams edges;
  edges.top_p = 1.0f;
  edges.min_p = 1.0f;
  edges.top_k = -5;
  EXPECT_NO_THROW(validate(edges));
}

TEST(Sampling, BadLogitsThrow) {
  for (const auto& params : {SamplingParams{}, greedy()}) {
    Sampler sampler(params);
    std::vector<float> logits = {0.0f, 1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()};
    expect_error_naming([&] { sampler.sample(logits); }, "logit 3");
    logits[3] = 0.0f;
    logits[1] = -std::numeric_limits<float>::infinity();
    expect_error_naming([&] { sampler.sample(logits); }, "logit 1");
    expect_error_naming([&] { sampler.sample({}); }, "empty");
  }
}

TEST(Sampling, BadHistoryThrows) {
  Sampler sampler(penalised(1.1f, 0, 0));
  expect_error_naming([&] { sampler.accept(-1); }, "-1");
  sampler.accept(7);
  expect_error_naming([&] { sampler.sample(std::vector<float>{0.0f, 1.0f}); }, "history token 7");
}

}  // namespace
}  // namespace gdn::runtime
