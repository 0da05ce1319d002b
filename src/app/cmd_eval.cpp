// gdn eval: the scriptable entry point for correctness work.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include "app/commands.h"
#include "app/model_source.h"
#include "common/error.h"
#include "common/ids.h"
#include "runtime/backend.h"

namespace gdn::app {
namespace {

struct EvalArgs {
  ModelArgs model;
  std::string ids;
  std::string mode = "prefill";
  std::string logits_out;
  int greedy = 0;
  int random_ids = 0;
  std::string compare;
  bool verbose = false;
};

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

void write_f32(const std::string& path, const std::vector<float>& v) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!f || std::fwrite(v.data(), sizeof(float), v.size(), f.get()) != v.size()) {
    fail("cannot write logits to '{}'", path);
  }
}

// Logits for every id: one pass (prefill) or one token at a time through the caches.
std::vector<float> logits_for(runtime::Executor& ex, const std::vector<int32_t>& ids,
                              const std::string& mode) {
  std::vector<float> all, row;
  if (mode == "prefill") {
    ex.forward(ids, 0, true, all);
    return all;
  }
  for (int32_t id : ids) {
    ex.forward(std::span<const int32_t>(&id, 1), 0, true, row);
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

// Teacher-forced comparison of two backends fed the same ids: the worst position's
// max|Δ|/max|logit| and how often the argmax agrees.
void compare_backends(const std::vector<float>& a, const std::vector<float>& b, int64_t V,
                      const std::string& name_a, const std::string& name_b, bool verbose) {
  const size_t T = a.size() / size_t(V);
  double worst = 0;
  size_t worst_t = 0, agree = 0;
  for (size_t t = 0; t < T; ++t) {
    double max_ref = 0, max_d = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double x = a[t * V + i], y = b[t * V + i];
      if (!std::isfinite(x) || !std::isfinite(y)) fail("non-finite logit at position {}", t);
      max_ref = std::max(max_ref, std::abs(y));
      max_d = std::max(max_d, std::abs(x - y));
    }
    if (verbose) fmt::print("position {}: max|d|/max|logit| {:.3g}\n", t, max_d / max_ref);
    if (max_d / max_ref > worst) worst = max_d / max_ref, worst_t = t;
    agree += argmax(a.data() + t * V, V) == argmax(b.data() + t * V, V);
  }
  fmt::print(
      "{} vs {}: worst max|d|/max|logit| {:.3g} at position {}; argmax equal at {}/{} "
      "positions ({:.1f}%)\n",
      name_a, name_b, worst, worst_t, agree, T, 100.0 * double(agree) / double(T));
}

std::vector<int32_t> random_ids(int n, int64_t n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % uint64_t(n_vocab));
  return ids;
}

int run_eval(const EvalArgs& a) {
  if (a.ids.empty() && a.random_ids <= 0) fail("give --ids or --random-ids");
  LoadedModel lm = load_model(a.model, "tiny");
  runtime::Executor& ex = *lm.exec;
  const int64_t V = lm.model->hp.n_vocab;
  const std::vector<int32_t> ids =
      a.random_ids > 0 ? random_ids(a.random_ids, V, a.model.seed) : parse_ids(a.ids);

  std::vector<float> all = logits_for(ex, ids, a.mode), row;
  if (!a.logits_out.empty()) write_f32(a.logits_out, all);
  if (!a.compare.empty()) {
    runtime::ExecutorOptions eo;
    eo.n_threads = a.model.threads;
    eo.n_ctx = a.model.n_ctx;
    // Against the GPU, the CPU uses the GPU's activation arithmetic (like for like): int8 per
    // 128 elements, or f32 when the GPU runs --q1-activations f32.
    const bool gpu = ex.name() == "cuda", f32 = a.model.q1_f32_activations;
    eo.q8_activations = gpu && !f32 && runtime::resolve_backend(a.compare) == "cpu";
    eo.q1_f32_activations = f32;
    if (gpu) fmt::print(stderr, "Q1_0 products on {} activations\n", f32 ? "f32" : "int8");
    auto other = runtime::make_executor(a.compare, *lm.model, eo);
    compare_backends(all, logits_for(*other, ids, a.mode), V, ex.name(), other->name(), a.verbose);
  }
  fmt::print(stderr, "{}: {} tokens ({}), {} logits per token, backend {}\n", lm.label, ids.size(),
             a.mode, V, ex.name());

  if (a.greedy > 0) {
    std::vector<int32_t> out;
    int32_t next = argmax(all.data() + (ids.size() - 1) * V, V);
    for (int i = 0; i < a.greedy; ++i) {
      out.push_back(next);
      if (i + 1 == a.greedy) break;
      ex.forward(std::span<const int32_t>(&next, 1), 0, true, row);
      next = argmax(row.data(), V);
    }
    fmt::print("{}\n", format_ids(out));
  }
  return 0;
}

}  // namespace

Run add_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  add_model_options(app, a->model);
  auto* ids = app.add_option("--ids", a->ids, "comma-separated token ids");
  auto* rnd = app.add_option("--random-ids", a->random_ids, "N random ids (from --seed) instead");
  ids->excludes(rnd);
  app.add_option("--compare", a->compare,
                 "also run the ids on this backend (teacher-forced) and report the difference");
  app.add_option("--mode", a->mode, "prefill (one pass) or decode (one token at a time)")
      ->check(CLI::IsMember({"prefill", "decode"}));
  app.add_option("--logits-out", a->logits_out, "raw little-endian f32 logits [n_ids][n_vocab]");
  app.add_flag("-v,--verbose", a->verbose, "with --compare: the difference at every position");
  app.add_option_function<std::string>(
         "--q1-activations",
         [a](const std::string& v) { a->model.q1_f32_activations = v == "f32"; },
         "CUDA Q1_0 products on int8 (default, the fast GEMV) or f32 activations (slower; "
         "compares with the CPU at rounding level)")
      ->check(CLI::IsMember({"int8", "f32"}));
  app.add_option("--greedy", a->greedy, "continue greedily for N tokens and print their ids")
      ->check(kCount);
  return [a] { return run_eval(*a); };
}

}  // namespace gdn::app
