#include "app/model_source.h"

#include <fmt/format.h>

#include "runtime/backend.h"

namespace gdn::app {

void add_model_options(CLI::App& app, ModelArgs& args) {
  app.add_option("-m,--model", args.path, "GGUF model file");
  app.add_option("--preset", args.preset, "synthetic model instead of a file")
      ->check(CLI::IsMember(synth::preset_names()));
  app.add_option("--type", args.type, "weight type of a synthetic model");
  app.add_option("--seed", args.seed, "seed of a synthetic model");
  app.add_option("--backend", args.backend, "auto (cuda when a GPU is present) | cpu | cuda");
  app.add_option("-t,--threads", args.threads, "CPU threads (0: all)");
  app.add_option("-c,--ctx", args.n_ctx, "KV cache positions");
}

LoadedModel load_model(const ModelArgs& args, const std::string& default_preset) {
  LoadedModel lm;
  if (!args.path.empty()) {
    lm.file_model = std::make_unique<model::Model>(model::Model::load(args.path));
    lm.model = lm.file_model.get();
    lm.label = args.path;
  } else {
    const std::string name = args.preset.empty() ? default_preset : args.preset;
    synth::Options opts;
    opts.type = quant::parse_type(args.type);
    opts.seed = args.seed;
    lm.synthetic = synth::make_in_memory(synth::preset(name), opts);
    lm.model = &lm.synthetic->model;
    lm.label = fmt::format("synthetic {} {}", name, args.type);
  }
  runtime::ExecutorOptions eo;
  eo.n_threads = args.threads;
  eo.n_ctx = args.n_ctx;
  lm.exec = runtime::make_executor(args.backend, *lm.model, eo);
  return lm;
}

}  // namespace gdn::app
