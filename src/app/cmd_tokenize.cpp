// gdn tokenize: text -> token ids with a GGUF's tokenizer (vocabulary-only files work too).
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "app/commands.h"
#include "app/model_source.h"
#include "common/error.h"
#include "common/ids.h"
#include "gguf/gguf.h"

namespace gdn::app {
namespace {

struct TokenizeArgs {
  std::string model;
  std::string prompt;
  std::string file;
  bool ids_only = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_tokenize(const TokenizeArgs& a) {
  const text::Tokenizer tok = tokenizer_of(gguf::File::open(a.model).meta(), a.model);
  // As llama-tokenize: special tokens written in the text match, and no BOS is added.
  const std::vector<int32_t> ids = tok.encode(a.file.empty() ? a.prompt : read_text(a.file));
  if (a.ids_only) {
    fmt::print("{}\n", format_ids(ids));
    return 0;
  }
  for (const int32_t id : ids) fmt::print("{:>6} -> '{}'\n", id, tok.piece(id));
  return 0;
}

}  // namespace

Run add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  app.add_option("-m,--model", a->model,
                 "GGUF with tokenizer metadata (a vocabulary-only file works)")
      ->required();
  CLI::Option_group* input = app.add_option_group("input", "the text: -p or -f");
  input->add_option("-p,--prompt", a->prompt, "text to tokenize");
  input->add_option("-f,--file", a->file, "file whose contents to tokenize");
  input->require_option(1);
  app.add_flag("--ids-only", a->ids_only, "print only the ids, comma-separated, on one line");
  return [a] { return run_tokenize(*a); };
}

}  // namespace gdn::app
