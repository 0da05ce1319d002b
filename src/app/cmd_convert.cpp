// gdn convert: HuggingFace Qwen3.5 checkpoint -> qwen35 GGUF.
#include <fmt/format.h>

#include <memory>

#include "app/commands.h"
#include "convert/hf_convert.h"
#include "quant/types.h"

namespace gdn::app {
namespace {

struct ConvertArgs {
  std::string hf_dir;
  std::string out;
  std::string type = "f32";
};

}  // namespace

Run add_convert(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  app.add_option("HF_DIR", a->hf_dir, "directory with config.json and *.safetensors")->required();
  app.add_option("-o,--out", a->out, "output GGUF path")->required();
  app.add_option("--type", a->type, "matrix weight type: f32|f16|bf16|q8_0|q1_0|...");
  return [a] {
    convert::convert_hf(a->hf_dir, a->out, quant::parse_type(a->type));
    fmt::print("wrote {}\n", a->out);
    return 0;
  };
}

}  // namespace gdn::app
