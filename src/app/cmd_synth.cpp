// gdn synth: write a random-weight qwen35 GGUF.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "app/model_source.h"
#include "gguf/gguf.h"
#include "synth/synth.h"

namespace gdn::app {
namespace {

struct SynthArgs {
  std::string preset = "tiny";
  std::string type = "q8_0";
  std::string out;
  uint64_t seed = 1;
  bool tied = false;
  std::string vocab;
};

int run_synth(const SynthArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  synth::Options opts = synth_options(a.type, a.seed, a.vocab, a.out);
  opts.tied_output = a.tied;
  gguf::Writer w;
  const model::HParams hp = synth::add_model(w, synth::preset(a.preset), opts);
  w.write(a.out);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double gib = double(std::filesystem::file_size(a.out)) / (1024.0 * 1024.0 * 1024.0);
  fmt::print("wrote {} ({:.3f} GiB, {}) in {:.1f} s\n{}\n", a.out, gib, a.type, s, hp.summary());
  return 0;
}

}  // namespace

Run add_synth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  app.add_option("--preset", a->preset, "model shape")->check(CLI::IsMember(synth::preset_names()));
  app.add_option("--type", a->type, "matrix weight type (f32, f16, bf16, q8_0, q4_0, q1_0, ...)");
  app.add_option("-o,--out", a->out, "output GGUF path")->required();
  app.add_option("--seed", a->seed, "random seed");
  app.add_flag("--tied", a->tied, "omit output.weight (tied to token_embd)");
  app.add_option("--vocab", a->vocab,
                 "copy the tokenizer of this GGUF (a vocabulary-only file works); n_vocab follows");
  return [a] { return run_synth(*a); };
}

}  // namespace gdn::app
