// gdn bench: prefill (pp) and decode (tg) speed, like llama-bench, with the bytes a decode
// token must move and the dispatches the executor counted.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "app/commands.h"
#include "app/model_source.h"
#include "common/error.h"
#include "runtime/backend.h"

namespace gdn::app {
namespace {

struct BenchArgs {
  ModelArgs model;
  int n_prompt = 512;
  int n_gen = 128;
  int reps = 5;
  int rounds = 2;
  std::string output = "md";
};

struct Test {
  std::string name;  // "pp512", "tg128"
  bool prefill;
  int n;
  std::vector<double> tok_s;
  int64_t dispatches = 0;  // per forward pass
};

// Bytes a decode token must move: every weight but the embedding table, plus the GDN state
// read and written once.
uint64_t decode_bytes(const model::Model& m) {
  const model::HParams& hp = m.hp;
  const uint64_t state = uint64_t(hp.n_recurrent()) * hp.ssm_n_v_heads * hp.ssm_d_state *
                         hp.ssm_d_state * sizeof(float);
  return m.decode_weight_bytes() + 2 * state;
}

std::vector<int32_t> bench_ids(int n, int64_t n_vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 13) % n_vocab);
  return ids;
}

double time_test(runtime::Executor& ex, Test& t, int64_t n_vocab) {
  const std::vector<int32_t> ids = bench_ids(t.n, n_vocab);
  std::vector<float> logits;
  ex.reset_slot(0);
  const auto t0 = std::chrono::steady_clock::now();
  if (t.prefill) {
    ex.forward(ids, 0, false, logits);
    t.dispatches = ex.last_dispatches();
  } else {
    for (int32_t id : ids) ex.forward(std::span<const int32_t>(&id, 1), 0, false, logits);
    t.dispatches = ex.last_dispatches();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::pair<double, double> mean_sd(const std::vector<double>& v) {
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double ss = 0.0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, v.size() > 1 ? std::sqrt(ss / double(v.size() - 1)) : 0.0};
}

int run_bench(const BenchArgs& a) {
  // The main job: with no model given, a synthetic Bonsai-27B Q1_0 on a GPU, tiny on a CPU.
  const std::string backend = runtime::resolve_backend(a.model.backend);
  LoadedModel lm = load_model(a.model, backend == "cuda" ? "bonsai-27b" : "tiny");
  const double roofline_bw = runtime::roofline_bandwidth(backend);
  fmt::print(stderr, "{} on {}{}\n{}\n", lm.label,
             runtime::describe_backend(backend, a.model.threads),
             backend == "cuda" ? (a.model.graphs ? ", CUDA graphs on" : ", CUDA graphs off") : "",
             lm.model->hp.summary());
  runtime::Executor& ex = *lm.exec;
  const int64_t V = lm.model->hp.n_vocab;
  std::vector<Test> tests;
  if (a.n_prompt > 0) tests.push_back({fmt::format("pp{}", a.n_prompt), true, a.n_prompt, {}, 0});
  if (a.n_gen > 0) tests.push_back({fmt::format("tg{}", a.n_gen), false, a.n_gen, {}, 0});
  if (tests.empty()) fail("nothing to run: -p and -n are both 0");

  Test warm{"warm-up", false, 2, {}, 0};
  time_test(ex, warm, V);
  // Rounds run the tests in rotated order so drift (clocks, caches) spreads over all of them.
  for (int round = 0; round < a.rounds; ++round) {
    for (size_t k = 0; k < tests.size(); ++k) {
      Test& t = tests[(k + round) % tests.size()];
      for (int r = 0; r < a.reps; ++r) t.tok_s.push_back(t.n / time_test(ex, t, V));
    }
  }

  const double mb_tok = double(decode_bytes(*lm.model)) / 1e6;
  nlohmann::json rows = nlohmann::json::array();
  for (const Test& t : tests) {
    const auto [mean, sd] = mean_sd(t.tok_s);
    const double disp = t.prefill ? double(t.dispatches) / t.n : double(t.dispatches);
    rows.push_back(
        {{"model", lm.label},
         {"backend", ex.name()},
         {"test", t.name},
         {"tok_s", mean},
         {"tok_s_sd", sd},
         {"runs", t.tok_s.size()},
         {"dispatches_per_token", disp},
         {"mb_per_token", t.prefill ? nlohmann::json() : nlohmann::json(mb_tok)},
         {"gb_s", t.prefill ? nlohmann::json() : nlohmann::json(mb_tok * mean / 1e3)},
         {"roofline_pct", t.prefill || roofline_bw == 0
                              ? nlohmann::json()
                              : nlohmann::json(100.0 * mb_tok * 1e6 * mean / roofline_bw)}});
  }
  if (a.output == "json") {
    fmt::print("{}\n", rows.dump(2));
    return 0;
  }
  if (roofline_bw > 0) {
    fmt::print("roofline: {:.0f} GB/s measured copy bandwidth -> {:.0f} tok/s at {:.1f} MB/token\n",
               roofline_bw / 1e9, roofline_bw / (mb_tok * 1e6), mb_tok);
  }
  fmt::print("| model | backend | test | tok/s | dispatches/tok | MB/tok | GB/s | % roofline |\n");
  fmt::print("|---|---|---|---:|---:|---:|---:|---:|\n");
  for (const auto& r : rows) {
    const bool tg = !r["gb_s"].is_null();
    const bool roof = !r["roofline_pct"].is_null();
    fmt::print("| {} | {} | {} | {:.2f} ± {:.2f} | {:.1f} | {} | {} | {} |\n",
               r["model"].get<std::string>(), r["backend"].get<std::string>(),
               r["test"].get<std::string>(), r["tok_s"].get<double>(), r["tok_s_sd"].get<double>(),
               r["dispatches_per_token"].get<double>(),
               tg ? fmt::format("{:.1f}", r["mb_per_token"].get<double>()) : "—",
               tg ? fmt::format("{:.1f}", r["gb_s"].get<double>()) : "—",
               roof ? fmt::format("{:.1f}%", r["roofline_pct"].get<double>()) : "—");
  }
  return 0;
}

}  // namespace

Run add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  add_model_options(app, a->model);
  a->model.type = "q1_0";
  app.add_option("-p,--n-prompt", a->n_prompt, "prompt tokens for the pp test (0: skip)");
  app.add_option("-n,--n-gen", a->n_gen, "generated tokens for the tg test (0: skip)");
  app.add_option("-r,--reps", a->reps, "repetitions per round");
  app.add_option("--rounds", a->rounds, "rounds, tests in rotated order");
  app.add_option("-o,--output", a->output, "md | json")->check(CLI::IsMember({"md", "json"}));
  return [a] { return run_bench(*a); };
}

}  // namespace gdn::app
