// Options shared by the subcommands that run a model: a GGUF path or a synthetic preset,
// the backend and its sizes.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "model/weights.h"
#include "runtime/executor.h"
#include "synth/synth.h"

namespace gdn::app {

struct ModelArgs {
  std::string path;
  std::string preset;
  std::string type = "q8_0";
  uint64_t seed = 1;
  std::string backend = "auto";
  int threads = 0;
  int64_t n_ctx = 4096;
};

void add_model_options(CLI::App& app, ModelArgs& args);

struct LoadedModel {
  std::unique_ptr<synth::InMemory> synthetic;  // owns the model when it is synthetic
  std::unique_ptr<model::Model> file_model;
  const model::Model* model = nullptr;
  std::unique_ptr<runtime::Executor> exec;
  std::string label;  // file name or "synthetic <preset> <type>"
};

// The model from -m, else the preset (default_preset when neither is given).
LoadedModel load_model(const ModelArgs& args, const std::string& default_preset);

}  // namespace gdn::app
