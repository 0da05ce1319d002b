// gdn bench: prefill (pp) and decode (tg) speed, like llama-bench, with the bytes a decode
// token must move and the dispatches the executor counted; --ladder compares the rungs
// (model/rungs.h), --null-dispatches prices a dispatch, --timeline says where a decode
// token's time goes, --floor what the decode's step structure costs with no arithmetic.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "app/commands.h"
#include "app/model_source.h"
#include "common/error.h"
#include "model/program.h"
#include "runtime/backend.h"

#ifdef GDN_HAVE_CUDA
#include "cuda/decode_floor.h"
#endif

namespace gdn::app {
namespace {

struct BenchArgs {
  ModelArgs model;
  int n_prompt = 512;
  int n_gen = 128;
  int reps = 5;
  int rounds = 2;
  std::string output = "md";
  bool ladder = false;
  std::vector<int> null_dispatches;
  bool verbose = false;
  bool timeline = false;
  bool floor = false;
  std::vector<std::string> floor_fold;  // op names folded into the step before (--floor-fold)
};

// One configuration of the executor: a set of rungs and a count of injected empty dispatches.
struct Config {
  std::string name;
  model::Rungs rungs;
  int nulls = 0;
};

struct Test {
  std::string name;  // "pp512", "tg128"
  bool prefill;
  int n;
};

struct Result {
  std::vector<double> tok_s;
  runtime::DispatchCount dispatches;  // of one forward pass
};

// Bytes a decode token moves under the rungs: its program's steps' traffic (model::step_traffic:
// every weight but the embedding table once, and the GDN state read and written by the
// recurrence, and again by the baseline's gather and scatter).
uint64_t decode_bytes(const model::Model& m, model::Rungs r) {
  const model::Program p = model::build_forward(m, 1, false, {.rungs = r});
  uint64_t total = 0;
  for (const model::Step& s : p.steps) {
    const model::StepTraffic t = model::step_traffic(p, s);
    total += t.read + t.write;
  }
  return total;
}

std::vector<int32_t> bench_ids(int n, int64_t n_vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 13) % n_vocab);
  return ids;
}

void configure(runtime::Executor& ex, const Config& c) {
  ex.set_rungs(c.rungs);
  ex.set_null_dispatches(c.nulls);
}

// Seconds for one run of the test; records the last forward's dispatches.
double time_test(runtime::Executor& ex, const Test& t, int64_t n_vocab, Result& r) {
  const std::vector<int32_t> ids = bench_ids(t.n, n_vocab);
  ex.reset_slot(0);
  const auto t0 = std::chrono::steady_clock::now();
  if (t.prefill) {
    ex.forward_view(ids, 0, false);
  } else {
    for (int32_t id : ids) ex.forward_view(std::span<const int32_t>(&id, 1), 0, false);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.dispatches = ex.last_dispatch_count();
  return s;
}

std::pair<double, double> mean_sd(const std::vector<double>& v) {
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double ss = 0.0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, v.size() > 1 ? std::sqrt(ss / double(v.size() - 1)) : 0.0};
}

// results[config][test] over rounds that visit the configurations, and the tests within
// each, in rotated order, so drift (clocks, caches) spreads over all of them. A configuration
// warms up (program build, graph capture) before its first timed run.
std::vector<std::vector<Result>> measure(runtime::Executor& ex, const std::vector<Config>& configs,
                                         const std::vector<Test>& tests, const BenchArgs& a,
                                         int64_t n_vocab) {
  std::vector<std::vector<Result>> res(configs.size(), std::vector<Result>(tests.size()));
  for (const Config& c : configs) {
    configure(ex, c);
    Result scratch;
    for (const Test& t : tests)
      time_test(ex, {t.name, t.prefill, t.prefill ? t.n : 2}, n_vocab, scratch);
  }
  for (int round = 0; round < a.rounds; ++round) {
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      const size_t c = (ci + size_t(round)) % configs.size();
      configure(ex, configs[c]);
      for (size_t k = 0; k < tests.size(); ++k) {
        const size_t ti = (k + size_t(round)) % tests.size();
        Result& r = res[c][ti];
        for (int rep = 0; rep < a.reps; ++rep) {
          r.tok_s.push_back(tests[ti].n / time_test(ex, tests[ti], n_vocab, r));
        }
      }
    }
  }
  return res;
}

// The ladder: the baseline, every exact rung added cumulatively (in table order) and every
// rung alone, then the reduced-precision states on top of all exact rungs.
std::vector<Config> ladder_configs() {
  std::vector<Config> c{{"baseline (none)", model::Rungs::none()}};
  model::Rungs cum;
  for (const model::RungInfo& i : model::rung_table()) {
    if (!i.exact) continue;
    cum = cum.with(i.rung);
    c.push_back({fmt::format("+ {}", i.name), cum});
  }
  for (const model::RungInfo& i : model::rung_table()) {
    c.push_back({fmt::format("{} alone", i.name), model::Rungs::none().with(i.rung)});
  }
  for (const model::RungInfo& i : model::rung_table()) {
    if (!i.exact)
      c.push_back({fmt::format("all + {}", i.name), model::Rungs::exact().with(i.rung)});
  }
  return c;
}

// The ops that dispatched, by name.
std::vector<std::pair<std::string, int64_t>> named_ops(const runtime::DispatchCount& d) {
  std::vector<std::pair<std::string, int64_t>> ops;
  for (int i = 0; i < model::kOpCount; ++i) {
    if (d.by_op[i]) ops.emplace_back(model::op_name(static_cast<model::Op>(i)), d.by_op[i]);
  }
  return ops;
}

std::string dispatch_breakdown(const runtime::DispatchCount& d, double per) {
  std::vector<std::pair<std::string, int64_t>> ops = named_ops(d);
  std::sort(ops.begin(), ops.end(), [](auto& x, auto& y) { return x.second > y.second; });
  std::string s;
  for (const auto& [op, n] : ops)
    s += fmt::format("{}{} {:.1f}", s.empty() ? "" : ", ", op, double(n) / per);
  return s;
}

// Least squares ms/token = a + b·N over the null-dispatch counts N.
struct Fit {
  double intercept_ms, us_per_dispatch, r2;
};
Fit fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = double(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n;
  const double my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  const double b = sxx > 0 ? sxy / sxx : 0.0;
  return {my - b * mx, b * 1e3, syy > 0 ? sxy * sxy / (sxx * syy) : 1.0};
}

int run_null_dispatches(runtime::Executor& ex, const BenchArgs& a, int64_t n_vocab) {
  const model::Rungs base = ex.rungs();
  std::vector<Config> configs;
  for (bool graphs : {true, false}) {
    for (int n : a.null_dispatches) {
      const model::Rungs r =
          graphs ? base.with(model::Rung::Graphs) : base.without(model::Rung::Graphs);
      configs.push_back({fmt::format("{} graphs, {} nulls", graphs ? "with" : "without", n), r, n});
    }
  }
  const std::vector<Test> tests{{fmt::format("tg{}", a.n_gen), false, a.n_gen}};
  const auto res = measure(ex, configs, tests, a, n_vocab);
  fmt::print("| configuration | tg tok/s | ms/token | dispatches/token |\n|---|---:|---:|---:|\n");
  for (size_t g = 0; g < 2; ++g) {
    std::vector<double> x, y;
    for (size_t i = 0; i < a.null_dispatches.size(); ++i) {
      const size_t c = g * a.null_dispatches.size() + i;
      const auto [mean, sd] = mean_sd(res[c][0].tok_s);
      x.push_back(a.null_dispatches[i]);
      y.push_back(1e3 / mean);
      fmt::print("| {} | {:.2f} ± {:.2f} | {:.4f} | {} |\n", configs[c].name, mean, sd, 1e3 / mean,
                 res[c][0].dispatches.total);
    }
    const Fit f = fit_line(x, y);
    fmt::print(
        "fit {} graphs: {:.3f} µs per dispatch (ms/token = {:.4f} + N·{:.6f}, R² = {:.4f})\n",
        g == 0 ? "with" : "without", f.us_per_dispatch, f.intercept_ms, f.us_per_dispatch / 1e3,
        f.r2);
  }
  return 0;
}

// --timeline: where a decode token's time goes, by step kind (cuda/timeline.h). A short
// prompt first gives attention a context and one untimed token builds and captures the
// program; then each of the n_gen decode tokens runs with the timeline armed. copy_bw: the
// measured copy bandwidth (bytes/s) each step kind's weight GB/s is set against.
int run_timeline(runtime::Executor& ex, const BenchArgs& a, int64_t n_vocab, double copy_bw) {
  constexpr int kContext = 16;
  const int n = std::max(1, a.n_gen);
  const std::vector<int32_t> ids = bench_ids(kContext + 1 + n, n_vocab);
  const auto one = [&](int i) { return std::span<const int32_t>(&ids[static_cast<size_t>(i)], 1); };
  ex.reset_slot(0);
  ex.forward_view(std::span<const int32_t>(ids.data(), kContext), 0, false);
  ex.forward_view(one(kContext), 0, false);
  std::vector<std::vector<runtime::StepTime>> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(ex.timeline(one(kContext + 1 + i), 0));
  const std::vector<runtime::KindTime> kinds = runtime::sum_by_kind(tokens);
  double total = 0.0;
  for (const runtime::KindTime& k : kinds) total += k.us;
  nlohmann::json rows = nlohmann::json::array();
  for (const runtime::KindTime& k : kinds) {
    const double weight_gb_per_s = 1e-3 * double(k.weight_bytes) / k.us;
    rows.push_back({{"kind", k.kind},
                    {"steps_per_token", double(k.steps) / n},
                    {"launches_per_token", double(k.launches) / n},
                    {"us_per_token", k.us / n},
                    {"us_per_step", k.us / k.steps},
                    {"pct_of_timed", 100.0 * k.us / total},
                    {"weight_mb_per_step", 1e-6 * double(k.weight_bytes) / k.steps},
                    {"weight_gb_per_s", weight_gb_per_s},
                    {"weight_pct_of_copy", copy_bw > 0 ? 1e11 * weight_gb_per_s / copy_bw : 0.0}});
  }
  if (a.output == "json") {
    const nlohmann::json doc{{"position", kContext + 1},
                             {"tokens", n},
                             {"copy_gb_per_s", copy_bw / 1e9},
                             {"us_per_token_timed", total / n},
                             {"kinds", rows}};
    fmt::print("{}\n", doc.dump(2));
    return 0;
  }
  fmt::print(
      "decode token at position {}, {} tokens: {:.1f} µs per token timed (every step but the "
      "last: no kernel start follows it); weights against {:.0f} GB/s measured copy bandwidth\n",
      kContext + 1, n, total / n, copy_bw / 1e9);
  fmt::print(
      "| step kind | steps/token | launches/token | µs/token | µs/step | % of timed | weight "
      "MB/step | weight GB/s | % of copy |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& r : rows) {
    fmt::print("| {} | {:.0f} | {:.0f} | {:.1f} | {:.2f} | {:.1f}% | {:.2f} | {:.0f} | {:.1f}% |\n",
               r["kind"].get<std::string>(), r["steps_per_token"].get<double>(),
               r["launches_per_token"].get<double>(), r["us_per_token"].get<double>(),
               r["us_per_step"].get<double>(), r["pct_of_timed"].get<double>(),
               r["weight_mb_per_step"].get<double>(), r["weight_gb_per_s"].get<double>(),
               r["weight_pct_of_copy"].get<double>());
  }
  return 0;
}

#ifdef GDN_HAVE_CUDA
// ", each gdn_recurrence folded into the step before": what --floor-fold changed, or nothing.
std::string fold_label(const std::vector<model::Op>& fold) {
  if (fold.empty()) return "";
  std::string ops;
  for (model::Op op : fold) ops += fmt::format("{}{}", ops.empty() ? "" : ", ", model::op_name(op));
  return fmt::format(", each {} folded into the step before", ops);
}

cuda::FloorStep floor_step(const model::FloorStepSpec& s) {
  return {s.traffic.read, s.traffic.write, s.gemv};
}

// -v: each step kind's floor alone in the decode's structure (kernels exclusive): a chain of
// that kind's steps, repeated to at least 32 so that the graph's own launch is spread thin. Set
// beside gdn bench --timeline's µs/step of the same kinds, it says which kernels stand furthest
// from what their bytes and their wait cost.
void print_kind_floors(const std::vector<model::FloorStepSpec>& spec, int width, int replays) {
  std::vector<std::string> kinds;  // in decode order
  for (const auto& s : spec) {
    if (std::ranges::find(kinds, s.kind) == kinds.end()) kinds.push_back(s.kind);
  }
  fmt::print(
      "\nfloor by step kind (kernels, exclusive; a chain of the kind's steps alone):\n"
      "| step kind | steps/token | MB/step | floor µs/step | floor µs/token |\n"
      "|---|---:|---:|---:|---:|\n");
  for (const std::string& kind : kinds) {
    std::vector<cuda::FloorStep> own;
    for (const auto& s : spec) {
      if (s.kind == kind) own.push_back(floor_step(s));
    }
    const size_t per_token = own.size();
    for (size_t i = 0; own.size() < 32; ++i) own.push_back(own[i]);
    cuda::FloorChain chain(own, width);
    const double us = chain.best(cuda::FloorVariant::KernelsExclusive, replays).us / own.size();
    fmt::print("| {} | {} | {:.2f} | {:.2f} | {:.1f} |\n", kind, per_token,
               double(chain.bytes()) / own.size() / 1e6, us, us * per_token);
  }
}
#endif

// --floor: the decode program's steps with no arithmetic (cuda/decode_floor.h), each still
// waiting for the one before, reading the residual vector (all of it in every CTA of a GEMV)
// and streaming its step_traffic, in each step structure: the time a token cannot go below
// without changing the structure.
int run_floor(const model::Model& m, model::Rungs rungs, const std::vector<model::Op>& fold,
              const BenchArgs& a, double roofline_bw) {
#ifdef GDN_HAVE_CUDA
  const model::Program p = model::build_forward(m, 1, false, {.rungs = rungs});
  const std::vector<model::FloorStepSpec> spec = model::floor_spec(p, fold);
  std::vector<cuda::FloorStep> steps;
  for (const model::FloorStepSpec& s : spec) steps.push_back(floor_step(s));
  cuda::FloorChain chain(std::move(steps), static_cast<int>(m.hp.n_embd));
  const double mb = double(chain.bytes()) / 1e6;
  nlohmann::json rows = nlohmann::json::array();
  for (cuda::FloorVariant v : cuda::kFloorVariants) {
    const cuda::FloorBest b = chain.best(v, std::max(5, a.reps * a.rounds));
    const double us = b.us, tok_s = 1e6 / us;
    rows.push_back(
        {{"structure", cuda::floor_variant_name(v)},
         {"best_of", cuda::floor_configs().size()},
         {"config", cuda::describe(b.config)},
         {"us_by_config", b.us_by_config},
         {"folded", fold_label(fold)},
         {"steps_per_token", chain.steps()},
         {"us_per_token", us},
         {"tok_s", tok_s},
         {"mb_per_token", mb},
         {"gb_s", mb * tok_s / 1e3},
         {"roofline_pct", roofline_bw > 0 ? 100.0 * mb * 1e6 * tok_s / roofline_bw : 0.0}});
  }
  if (a.output == "json") {
    fmt::print("{}\n", rows.dump(2));
    return 0;
  }
  fmt::print(
      "decode floor, rungs {}{}: every step of the decode program with no arithmetic (it waits "
      "for the step before, reads the {}-float residual vector, all of it in every CTA of a GEMV, "
      "and streams its weights and state once)\n"
      "| structure | fastest of {} | steps/token | µs/token | tok/s | MB/token | GB/s | % roofline "
      "|\n"
      "|---|---|---:|---:|---:|---:|---:|---:|\n",
      model::format_rungs(rungs), fold_label(fold), m.hp.n_embd, cuda::floor_configs().size());
  for (const auto& r : rows) {
    fmt::print("| {} | {} | {} | {:.1f} | {:.2f} | {:.1f} | {:.1f} | {:.1f}% |\n",
               r["structure"].get<std::string>(), r["config"].get<std::string>(),
               r["steps_per_token"].get<size_t>(), r["us_per_token"].get<double>(),
               r["tok_s"].get<double>(), r["mb_per_token"].get<double>(), r["gb_s"].get<double>(),
               r["roofline_pct"].get<double>());
  }
  if (a.verbose) {
    fmt::print("\nµs per token by streaming configuration:\n");
    const std::vector<cuda::FloorConfig> configs = cuda::floor_configs();
    for (const auto& r : rows) {
      const auto us = r["us_by_config"].get<std::vector<double>>();
      for (size_t i = 0; i < configs.size(); ++i) {
        fmt::print("  {}, {}: {:.1f}\n", r["structure"].get<std::string>(),
                   cuda::describe(configs[i]), us[i]);
      }
    }
    print_kind_floors(spec, static_cast<int>(m.hp.n_embd), std::max(5, a.reps * a.rounds));
  }
  return 0;
#else
  (void)m, (void)rungs, (void)fold, (void)a, (void)roofline_bw;
  fail("--floor: this gdn was built without the CUDA backend");
#endif
}

// One JSON row per configuration and test: tok/s, dispatches (in all and per op), and for decode
// the bytes per token, GB/s and % of the roofline.
nlohmann::json result_rows(const LoadedModel& lm, const std::vector<Config>& configs,
                           const std::vector<Test>& tests,
                           const std::vector<std::vector<Result>>& res, double roofline_bw) {
  nlohmann::json rows = nlohmann::json::array();
  double base_tg = 0.0;
  for (size_t c = 0; c < configs.size(); ++c) {
    const double mb_tok = double(decode_bytes(*lm.model, configs[c].rungs)) / 1e6;
    for (size_t ti = 0; ti < tests.size(); ++ti) {
      const Test& t = tests[ti];
      const Result& r = res[c][ti];
      const auto [mean, sd] = mean_sd(r.tok_s);
      if (!t.prefill && c == 0) base_tg = mean;
      const double per = t.prefill ? t.n : 1;
      nlohmann::json row{{"model", lm.label},
                         {"backend", lm.exec->name()},
                         {"rungs", model::format_rungs(configs[c].rungs)},
                         {"config", configs[c].name},
                         {"test", t.name},
                         {"tok_s", mean},
                         {"tok_s_sd", sd},
                         {"runs", r.tok_s.size()},
                         {"dispatches_per_token", double(r.dispatches.total) / per}};
      if (!t.prefill) {
        row["vs_baseline_pct"] = base_tg > 0 ? 100.0 * (mean / base_tg - 1.0) : 0.0;
        row["mb_per_token"] = mb_tok;
        row["gb_s"] = mb_tok * mean / 1e3;
        if (roofline_bw > 0) row["roofline_pct"] = 100.0 * mb_tok * 1e6 * mean / roofline_bw;
      }
      nlohmann::json ops = nlohmann::json::object();
      for (const auto& [op, n] : named_ops(r.dispatches)) ops[op] = double(n) / per;
      row["dispatches_by_op"] = ops;
      rows.push_back(row);
    }
  }
  return rows;
}

// The rows as llama-bench's markdown table, after the roofline line on a GPU.
void print_markdown(const nlohmann::json& rows, const model::Model& m, double roofline_bw,
                    bool ladder) {
  if (roofline_bw > 0) {
    const double mb = double(decode_bytes(m, model::Rungs::exact())) / 1e6;
    fmt::print("roofline: {:.0f} GB/s measured copy bandwidth -> {:.0f} tok/s at {:.1f} MB/token\n",
               roofline_bw / 1e9, roofline_bw / (mb * 1e6), mb);
  }
  fmt::print(
      "| model | backend | rungs | test | tok/s | Δ vs baseline | dispatches/tok | MB/tok | GB/s | "
      "% roofline |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|\n");
  auto num = [](const nlohmann::json& r, const char* k, const char* f) {
    return r.contains(k) ? fmt::format(fmt::runtime(f), r[k].get<double>()) : std::string("—");
  };
  for (const auto& r : rows) {
    fmt::print("| {} | {} | {} | {} | {:.2f} ± {:.2f} | {} | {:.1f} | {} | {} | {} |\n",
               r["model"].get<std::string>(), r["backend"].get<std::string>(),
               r["config"].get<std::string>(), r["test"].get<std::string>(),
               r["tok_s"].get<double>(), r["tok_s_sd"].get<double>(),
               ladder ? num(r, "vs_baseline_pct", "{:+.1f}%") : std::string("—"),
               r["dispatches_per_token"].get<double>(), num(r, "mb_per_token", "{:.1f}"),
               num(r, "gb_s", "{:.1f}"), num(r, "roofline_pct", "{:.1f}%"));
  }
}

// -v: each configuration's and test's dispatches per token by op kind.
void print_dispatches(const std::vector<Config>& configs, const std::vector<Test>& tests,
                      const std::vector<std::vector<Result>>& res) {
  fmt::print("\ndispatches per token by op:\n");
  for (size_t c = 0; c < configs.size(); ++c) {
    for (size_t ti = 0; ti < tests.size(); ++ti) {
      const double per = tests[ti].prefill ? tests[ti].n : 1;
      fmt::print("  {} {}: {}\n", configs[c].name, tests[ti].name,
                 dispatch_breakdown(res[c][ti].dispatches, per));
    }
  }
}

int run_bench(const BenchArgs& a) {
  // The main job: with no model given, a synthetic Bonsai-27B Q1_0 on a GPU, tiny on a CPU.
  const std::string backend = runtime::resolve_backend(a.model.backend);
  std::vector<model::Op> fold;
  for (const std::string& name : a.floor_fold) fold.push_back(model::op_from_name(name));
  if (!fold.empty() && !a.floor) fail("--floor-fold prices a structure for --floor: add --floor");
  if (a.floor && backend != "cuda")
    fail("--floor runs on the GPU (the {} backend was chosen)", backend);
  LoadedModel lm = load_model(a.model, backend == "cuda" ? "bonsai-27b" : "tiny");
  const double roofline_bw = runtime::roofline_bandwidth(backend);
  runtime::Executor& ex = *lm.exec;
  fmt::print(stderr, "{} on {}, rungs {}\n{}\n", lm.label,
             runtime::describe_backend(backend, a.model.threads), model::format_rungs(ex.rungs()),
             lm.model->hp.summary());
  const int64_t V = lm.model->hp.n_vocab;
  if (!a.null_dispatches.empty()) {
    if (a.n_gen <= 0) fail("--null-dispatches needs a tg test (-n > 0)");
    return run_null_dispatches(ex, a, V);
  }
  if (a.timeline) return run_timeline(ex, a, V, roofline_bw);
  if (a.floor) return run_floor(*lm.model, ex.rungs(), fold, a, roofline_bw);
  std::vector<Test> tests;
  if (a.n_prompt > 0) tests.push_back({fmt::format("pp{}", a.n_prompt), true, a.n_prompt});
  if (a.n_gen > 0) tests.push_back({fmt::format("tg{}", a.n_gen), false, a.n_gen});
  if (tests.empty()) fail("nothing to run: -p and -n are both 0");
  const std::vector<Config> configs =
      a.ladder ? ladder_configs()
               : std::vector<Config>{{model::format_rungs(ex.rungs()), ex.rungs()}};
  const auto res = measure(ex, configs, tests, a, V);
  const nlohmann::json rows = result_rows(lm, configs, tests, res, roofline_bw);
  if (a.output == "json") {
    fmt::print("{}\n", rows.dump(2));
    return 0;
  }
  print_markdown(rows, *lm.model, roofline_bw, a.ladder);
  if (a.verbose) print_dispatches(configs, tests, res);
  return 0;
}

}  // namespace

Run add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  add_model_options(app, a->model);
  a->model.type = "q1_0";
  app.add_option("-p,--n-prompt", a->n_prompt, "prompt tokens for the pp test (0: skip)")
      ->check(kCount);
  app.add_option("-n,--n-gen", a->n_gen, "generated tokens for the tg test (0: skip)")
      ->check(kCount);
  app.add_option("-r,--reps", a->reps, "repetitions per round")->check(kPositiveCount);
  app.add_option("--rounds", a->rounds, "rounds, tests in rotated order")->check(kPositiveCount);
  app.add_option("-o,--output", a->output, "md | json")->check(CLI::IsMember({"md", "json"}));
  app.add_flag("--ladder", a->ladder,
               "the ladder table: baseline, rungs added cumulatively, each rung alone, reduced "
               "precision states on all exact rungs");
  app.add_option("--null-dispatches", a->null_dispatches,
                 "inject N empty kernels into every decode step for each N (comma list) and fit "
                 "the wall cost per dispatch, with and without graphs")
      ->delimiter(',');
  app.add_flag(
      "-v,--verbose", a->verbose,
      "dispatches per token by op kind; with --floor, every streaming configuration's time "
      "and each step kind's floor alone");
  app.add_flag("--timeline", a->timeline,
               "where a decode token's time goes: every kernel stamps the GPU clock as it "
               "starts, time summed by step kind over -n tokens, with each kind's weight bytes, "
               "the GB/s they are read at and its % of the measured copy bandwidth (CUDA)");
  app.add_flag("--floor", a->floor,
               "the decode's floor: every step of the decode program with no arithmetic (waiting "
               "for the step before, reading the residual vector, streaming its weights and "
               "state), as a kernel per step and as one persistent kernel (CUDA)");
  app.add_option("--floor-fold", a->floor_fold,
                 "with --floor, price a structure with fewer steps: each step of these ops "
                 "(comma list of op names, e.g. gdn_recurrence,attention) folded into the step "
                 "before it, its bytes streamed behind that step's wait")
      ->delimiter(',');
  return [a] { return run_bench(*a); };
}

}  // namespace gdn::app
