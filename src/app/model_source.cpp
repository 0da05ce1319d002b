#include "app/model_source.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "common/error.h"
#include "runtime/backend.h"

namespace gdn::app {
namespace {

constexpr uint64_t kBig = uint64_t{1} << 30;  // models this large show their loading

double gib(uint64_t bytes) {
  return double(bytes) / double(kBig);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void require_tokenizer(const gguf::Metadata& meta, const std::string& source) {
  if (!meta.has("tokenizer.ggml.model") || !meta.has("tokenizer.ggml.tokens")) {
    fail(
        "{}: no tokenizer in this GGUF (no tokenizer.ggml.* metadata); for a synthetic model, "
        "give --vocab with a GGUF that has one",
        source);
  }
}

}  // namespace

void add_model_options(CLI::App& app, ModelArgs& args, const std::string& seed_flag) {
  auto* path = app.add_option("-m,--model", args.path, "GGUF model file");
  app.add_option("--preset", args.preset, "synthetic model instead of a file")
      ->check(CLI::IsMember(synth::preset_names()));
  app.add_option("--type", args.type, "weight type of a synthetic model");
  app.add_option("--vocab", args.vocab,
                 "tokenizer of a synthetic model: copied from this GGUF, n_vocab follows")
      ->excludes(path);
  app.add_option(seed_flag, args.seed, "seed of a synthetic model");
  app.add_option("--backend", args.backend, "auto (cuda when a GPU is present) | cpu | cuda");
  app.add_option("-t,--threads", args.threads, "CPU threads (0: all)");
  app.add_option("-c,--ctx", args.n_ctx, "KV cache positions");
  app.add_option("--rungs", args.rungs,
                 "decode rewrites: all (every exact rung, the default), none (the baseline), or "
                 "a list like all,-graphs or state-inplace,graphs. Rungs:\n" +
                     model::describe_rungs());
}

LoadedModel load_model(const ModelArgs& args, const std::string& default_preset) {
  LoadedModel lm;
  uint64_t bytes = 0;
  if (!args.path.empty()) {
    std::error_code err;
    bytes = std::filesystem::file_size(args.path, err);
    if (err) fail("{}: {}", args.path, err.message());
    if (bytes > kBig) fmt::print(stderr, "loading {} ({:.2f} GiB)\n", args.path, gib(bytes));
    lm.file_model = std::make_unique<model::Model>(model::Model::load(args.path));
    lm.model = lm.file_model.get();
    lm.label = args.path;
  } else {
    const std::string name = args.preset.empty() ? default_preset : args.preset;
    lm.label = fmt::format("synthetic {} {}", name, args.type);
    lm.synthetic = synth::make_in_memory(synth::preset(name),
                                         synth_options(args.type, args.seed, args.vocab, lm.label));
    lm.model = &lm.synthetic->model;
    bytes = lm.synthetic->bytes.size();
  }
  const auto t0 = std::chrono::steady_clock::now();
  runtime::ExecutorOptions eo;
  eo.n_threads = args.threads;
  eo.n_ctx = args.n_ctx;
  eo.rungs = model::parse_rungs(args.rungs);
  eo.q1_f32_activations = args.q1_f32_activations;
  eo.n_slots = args.n_slots;
  lm.exec = runtime::make_executor(args.backend, *lm.model, eo);
  // On the GPU this is the weight upload: the long part of loading a file.
  if (bytes > kBig) {
    fmt::print(stderr, "{}: {} backend ready in {:.1f} s\n", lm.label, lm.exec->name(),
               seconds_since(t0));
  }
  return lm;
}

synth::Options synth_options(const std::string& type, uint64_t seed, const std::string& vocab,
                             const std::string& what) {
  synth::Options opts;
  opts.type = quant::parse_type(type);
  opts.seed = seed;
  if (!vocab.empty()) {
    const gguf::File file = gguf::File::open(vocab);
    require_tokenizer(file.meta(), vocab);
    opts.tokenizer = std::make_shared<const gguf::Metadata>(file.meta());
  }
  auto progress = std::make_shared<Progress>("generating", what);
  opts.progress = [progress](uint64_t done, uint64_t total) { progress->update(done, total); };
  return opts;
}

text::Tokenizer tokenizer_of(const gguf::Metadata& meta, const std::string& source) {
  require_tokenizer(meta, source);
  return text::Tokenizer::from_metadata(meta);
}

Progress::Progress(const std::string& verb, const std::string& what)
    : label_(fmt::format("{} {}", verb, what)), tty_(isatty(fileno(stderr)) != 0) {}

void Progress::update(uint64_t done, uint64_t total) {
  if (total <= kBig) return;
  const int percent = static_cast<int>(done * 100 / total);
  const int step = tty_ ? percent : percent / 25;
  if (step <= shown_) return;
  shown_ = step;
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = percent * kWidth / 100;
    fmt::print(stderr, "\r{}: [{:=<{}}{: <{}}] {:3}% of {:.2f} GiB", label_, "", filled, "",
               kWidth - filled, percent, gib(total));
  } else {
    fmt::print(stderr, "{}: {}% of {:.2f} GiB", label_, percent, gib(total));
  }
  if (done == total) fmt::print(stderr, " in {:.1f} s", seconds_since(t0_));
  if (!tty_ || done == total) fmt::print(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace gdn::app
