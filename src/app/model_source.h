// Options shared by the subcommands that run a model: a GGUF path or a synthetic preset,
// the backend and its sizes. Also what they share around it: tokenizers, load progress.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "model/weights.h"
#include "runtime/executor.h"
#include "synth/synth.h"
#include "text/tokenizer.h"

namespace gdn::app {

struct ModelArgs {
  std::string path;
  std::string preset;
  std::string type = "q8_0";
  std::string vocab;  // tokenizer source for a synthetic model
  uint64_t seed = 1;
  std::string backend = "auto";
  int threads = 0;
  int64_t n_ctx = 4096;
  std::string rungs = "all";        // the ladder's rewrites (model/rungs.h)
  bool q1_f32_activations = false;  // CUDA: Q1_0 on f32 activations (set by gdn eval)
  int n_slots = 1;                  // set by the command, not a flag
};

// seed_flag names the synthetic model's seed option; commands whose --seed means something
// else (gdn run: sampling) rename it.
void add_model_options(CLI::App& app, ModelArgs& args, const std::string& seed_flag = "--seed");

struct LoadedModel {
  std::unique_ptr<synth::InMemory> synthetic;  // owns the model when it is synthetic
  std::unique_ptr<model::Model> file_model;
  const model::Model* model = nullptr;
  std::unique_ptr<runtime::Executor> exec;
  std::string label;  // file name or "synthetic <preset> <type>"
};

// The model from -m, else the preset (default_preset when neither is given). Models over
// 1 GiB report their loading on stderr (see Progress).
LoadedModel load_model(const ModelArgs& args, const std::string& default_preset);

// Options of a synthetic model: weight type, seed, the tokenizer of the GGUF `vocab` (none
// when empty) and generation progress on stderr, labelled with `what`.
synth::Options synth_options(const std::string& type, uint64_t seed, const std::string& vocab,
                             const std::string& what);
// The tokenizer in a GGUF's metadata; `source` names the file in errors.
text::Tokenizer tokenizer_of(const gguf::Metadata& meta, const std::string& source);

// Progress of a long step on stderr, shown only for jobs over 1 GiB: a bar redrawn in place
// on a terminal; otherwise a line per quarter, so logs stay short.
class Progress {
 public:
  Progress(const std::string& verb, const std::string& what);
  void update(uint64_t done, uint64_t total);

 private:
  std::string label_;
  bool tty_;
  int shown_ = -1;  // the last percentage (terminal) or quarter (log) printed
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace gdn::app
