// gdn eval: the scriptable entry point for correctness work.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "app/model_source.h"
#include "common/error.h"
#include "common/ids.h"

namespace gdn::app {
namespace {

struct EvalArgs {
  ModelArgs model;
  std::string ids;
  std::string mode = "prefill";
  std::string logits_out;
  int greedy = 0;
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

int run_eval(const EvalArgs& a) {
  const std::vector<int32_t> ids = parse_ids(a.ids);
  if (ids.empty()) fail("--ids is empty");
  LoadedModel lm = load_model(a.model, "tiny");
  runtime::Executor& ex = *lm.exec;
  const int64_t V = lm.model->hp.n_vocab;

  std::vector<float> all, row;
  if (a.mode == "prefill") {
    ex.forward(ids, 0, true, all);
  } else {
    for (int32_t id : ids) {
      ex.forward(std::span<const int32_t>(&id, 1), 0, true, row);
      all.insert(all.end(), row.begin(), row.end());
    }
  }
  if (!a.logits_out.empty()) write_f32(a.logits_out, all);
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
  app.add_option("--ids", a->ids, "comma-separated token ids")->required();
  app.add_option("--mode", a->mode, "prefill (one pass) or decode (one token at a time)")
      ->check(CLI::IsMember({"prefill", "decode"}));
  app.add_option("--logits-out", a->logits_out, "raw little-endian f32 logits [n_ids][n_vocab]");
  app.add_option("--greedy", a->greedy, "continue greedily for N tokens and print their ids");
  return [a] { return run_eval(*a); };
}

}  // namespace gdn::app
