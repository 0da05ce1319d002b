#include <fmt/format.h>

#include <map>

#include "app/commands.h"
#include "common/error.h"

int main(int argc, char** argv) {
  CLI::App app{"gdn: inference for hybrid Gated-DeltaNet (qwen35) models"};
  app.require_subcommand(1);
  std::map<CLI::App*, gdn::app::Run> runs;
  auto add = [&](const char* name, const char* help, gdn::app::Run (*reg)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    runs[sub] = reg(*sub);
  };
  add("run", "generate text from a prompt, or chat", gdn::app::add_run);
  add("tokenize", "print the token ids of a text", gdn::app::add_tokenize);
  add("eval", "run token ids through a model and print or dump logits", gdn::app::add_eval);
  add("synth", "write a random-weight qwen35 model", gdn::app::add_synth);
  add("convert", "convert a HuggingFace Qwen3.5 checkpoint to GGUF", gdn::app::add_convert);
  add("bench", "measure prefill and decode speed", gdn::app::add_bench);
  add("ops", "check every CUDA kernel against the CPU reference", gdn::app::add_ops);
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto& [sub, run] : runs) {
      if (sub->parsed()) return run();
    }
  } catch (const gdn::Error& e) {
    fmt::print(stderr, "gdn: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    // Every input error should be a gdn::Error naming what is wrong; this is the last resort
    // that keeps one we missed from aborting.
    fmt::print(stderr, "gdn: error (unexpected): {}\n", e.what());
    return 1;
  }
  return 1;
}
