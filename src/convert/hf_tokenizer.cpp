#include "convert/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "common/error.h"
#include "convert/json_file.h"
#include "gguf/gguf.h"

namespace gdn::convert {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// llama.cpp token types (llama_token_type / gguf.TokenType).
enum TokenType : int32_t { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };

// Special-token kinds SpecialVocab reads that llama.cpp's GGUF writer has id keys for (it
// skips "cls"), with those keys' spellings.
constexpr std::pair<const char*, const char*> kSpecialKinds[] = {
    {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
    {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
    {"pad", "tokenizer.ggml.padding_token_id"}, {"mask", "tokenizer.ggml.mask_token_id"}};
// The add_<kind>_token flags GGUF has keys for.
constexpr const char* kAddKinds[] = {"bos", "eos", "sep"};

// Added tokens that some tokenizers fail to mark special although they are control tokens
// (llama.cpp's does_token_look_special).
bool looks_special(const std::string& t) {
  auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
};

Vocab read_vocab(const json& tok, int64_t n_vocab, const std::string& path) {
  const json& model = tok.value("model", json::object());
  if (model.value("type", "") != "BPE" || !model.contains("vocab") || !model["vocab"].is_object()) {
    fail("{}: model is not a BPE tokenizer with a vocab object; only byte-level BPE is supported",
         path);
  }
  std::map<int64_t, std::string> by_id;
  auto put = [&](const std::string& text, const json& id) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n_vocab) {
      fail("{}: token {} has id {}, outside the model's vocab_size {}", path, json(text).dump(),
           id.dump(), n_vocab);
    }
    by_id[id.get<int64_t>()] = text;
  };
  for (const auto& [text, id] : model["vocab"].items()) put(text, id);
  std::map<int64_t, int32_t> added_type;
  for (const json& a : tok.value("added_tokens", json::array())) {
    const std::string text = a.value("content", "");
    put(text, a.value("id", json()));
    const bool special = a.value("special", false) || looks_special(text);
    added_type[a.at("id").get<int64_t>()] = special ? kControl : kUserDefined;
  }
  Vocab v;
  for (int64_t i = 0; i < n_vocab; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      v.tokens.push_back("[PAD" + std::to_string(i) + "]");
      v.types.push_back(kUnused);
    } else {
      v.tokens.push_back(it->second);
      auto at = added_type.find(i);
      v.types.push_back(at == added_type.end() ? kNormal : at->second);
    }
  }
  return v;
}

// "a b" strings as they are, or [a, b] pairs joined with their spaces written as U+0120.
std::vector<std::string> read_merges(const json& tok, const std::string& path) {
  std::vector<std::string> out;
  const json merges = tok.at("model").value("merges", json::array());
  if (!merges.is_array()) fail("{}: model.merges is not a list", path);
  for (const json& m : merges) {
    if (m.is_string()) {
      out.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      std::string joined;
      for (int part = 0; part < 2; ++part) {
        if (part == 1) joined += ' ';
        for (char c : m[part].get<std::string>())
          joined += c == ' ' ? "\xC4\xA0" : std::string(1, c);
      }
      out.push_back(joined);
    } else {
      fail("{}: merge entry {} is neither \"a b\" nor [a, b]", path, m.dump());
    }
  }
  return out;
}

// GGUF key -> id. tokenizer_config.json names special tokens by content; their ids are in
// added_tokens.
std::map<std::string, int64_t> special_ids(const json& tok, const json& tok_cfg, const json& config,
                                           int64_t n_vocab) {
  std::map<std::string, int64_t> ids;
  for (const auto& [kind, key] : kSpecialKinds) {
    const json& entry = tok_cfg.value(std::string(kind) + "_token", json());
    const json content = entry.is_object() ? entry.value("content", json()) : entry;
    if (!content.is_string()) continue;
    for (const json& a : tok.value("added_tokens", json::array())) {
      if (a.value("content", "") == content.get<std::string>()) {
        ids[key] = a.at("id").get<int64_t>();
        break;
      }
    }
  }
  // Still unset: config.json's <kind>_token_id, at the root or in text_config.
  for (const auto& [kind, key] : kSpecialKinds) {
    if (ids.contains(key)) continue;
    const std::string field = std::string(kind) + "_token_id";
    json id = config.value(field, json());
    if (id.is_null() && config.contains("text_config")) {
      id = config["text_config"].value(field, json());
    }
    if (id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < n_vocab) {
      ids[key] = id.get<int64_t>();
    }
  }
  return ids;
}

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// tokenizer_config.json's chat_template, else chat_template.jinja, else chat_template.json.
std::string chat_template(const fs::path& dir, const json& tok_cfg) {
  json tmpl = tok_cfg.value("chat_template", json());
  if (tmpl.is_null() && fs::exists(dir / "chat_template.jinja")) {
    return read_text_file(dir / "chat_template.jinja");
  }
  if (tmpl.is_null() && fs::exists(dir / "chat_template.json")) {
    tmpl = read_json_file((dir / "chat_template.json").string()).value("chat_template", json());
  }
  if (!tmpl.is_null() && !tmpl.is_string()) {
    fail("{}: chat_template is not a string (named template lists are not supported)",
         dir.string());
  }
  return tmpl.is_string() ? tmpl.get<std::string>() : std::string();
}

// Writes the tokenizer.ggml.* keys from the directory's tokenizer.json (and
// tokenizer_config.json, chat_template.json when present).
void add_tokenizer(const fs::path& dir, const json& config, int64_t n_vocab, gguf::Metadata& meta,
                   const Log& log) {
  const fs::path tok_path = dir / "tokenizer.json";
  const json tok = read_json_file(tok_path.string());
  const fs::path cfg_path = dir / "tokenizer_config.json";
  const json tok_cfg = fs::exists(cfg_path) ? read_json_file(cfg_path.string()) : json::object();

  using gguf::Value;
  const Vocab vocab = read_vocab(tok, n_vocab, tok_path.string());
  meta.set("tokenizer.ggml.model", Value::str("gpt2"));
  meta.set("tokenizer.ggml.pre", Value::str("qwen35"));
  meta.set("tokenizer.ggml.tokens", Value::strings(vocab.tokens));
  meta.set("tokenizer.ggml.token_type", Value::i32s(vocab.types));
  const auto merges = read_merges(tok, tok_path.string());
  if (merges.empty()) fail("{}: no BPE merges", tok_path.string());
  meta.set("tokenizer.ggml.merges", Value::strings(merges));
  for (const auto& [key, id] : special_ids(tok, tok_cfg, config, n_vocab)) {
    meta.set(key, Value::u32(static_cast<uint32_t>(id)));
  }
  for (const char* kind : kAddKinds) {
    const json& flag = tok_cfg.value(std::string("add_") + kind + "_token", json());
    if (flag.is_boolean()) {
      meta.set(std::string("tokenizer.ggml.add_") + kind + "_token",
               Value::boolean(flag.get<bool>()));
    }
  }
  const std::string tmpl = chat_template(dir, tok_cfg);
  if (!tmpl.empty()) meta.set("tokenizer.chat_template", Value::str(tmpl));
  log(fmt::format("tokenizer: {} tokens, {} merges{}", vocab.tokens.size(), merges.size(),
                  tmpl.empty() ? ", no chat template" : ""));
}

}  // namespace

bool add_hf_tokenizer(const std::string& hf_dir, const json& config, int64_t n_vocab,
                      gguf::Metadata& meta, const Log& log) {
  const fs::path dir(hf_dir);
  if (!fs::exists(dir / "tokenizer.json")) return false;
  with_json_errors(fmt::format("{}: config.json, tokenizer.json, tokenizer_config.json or "
                               "chat_template.json",
                               dir.string()),
                   [&] { add_tokenizer(dir, config, n_vocab, meta, log); });
  return true;
}

}  // namespace gdn::convert
