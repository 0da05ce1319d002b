// format_chat against the Qwen3.5 Jinja template. The expected strings in
// fixtures/chat_qwen35.json were rendered from shared/data/vocab/qwen3.5-chat-template.jinja
// with Jinja2 by fixtures/render_chat_template.py (re-run it if the template changes).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "gguf/gguf.h"
#include "text/chat.h"
#include "text/tokenizer.h"

namespace gdn::text {
namespace {

std::string read_file(const std::string& path) {
  if (!std::filesystem::exists(path)) throw std::runtime_error("missing " + path);
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string shared_vocab_file(const std::string& name) {
  return std::string(GDN_SHARED_DIR) + "/data/vocab/" + name;
}

const std::vector<ChatMessage> kThreeTurns = {
    {"system", "You are a helpful assistant.", {}},
    {"user", "What is 2+2?", {}},
    {"assistant", "4", {}},
    {"user", "And 3+3?", {}},
    {"assistant", "<think>\nAdd three to three.\n</think>\n\n6", {}},
    {"user", "Thanks! Now write a haiku.", {}},
};

// Written out by hand from the template: earlier assistant turns lose their reasoning, and the
// generation prompt opens a think block (closed at once when thinking is off).
const std::string kThreeTurnsHistory =
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
    "<|im_start|>assistant\n4<|im_end|>\n"
    "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
    "<|im_start|>assistant\n6<|im_end|>\n"
    "<|im_start|>user\nThanks! Now write a haiku.<|im_end|>\n";

TEST(Chat, ThreeTurnsWithSystemPrompt) {
  EXPECT_EQ(format_chat(kThreeTurns, {.add_generation_prompt = false}), kThreeTurnsHistory);
  EXPECT_EQ(format_chat(kThreeTurns, {.add_generation_prompt = true, .enable_thinking = true}),
            kThreeTurnsHistory + "<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(format_chat(kThreeTurns, {.add_generation_prompt = true, .enable_thinking = false}),
            kThreeTurnsHistory + "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(Chat, MatchesJinjaRenderings) {
  const auto cases = nlohmann::json::parse(
      read_file(std::string(GDN_SOURCE_DIR) + "/tests/fixtures/chat_qwen35.json"));
  ASSERT_GE(cases.size(), 40u);
  for (const auto& c : cases) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) {
      ChatMessage msg{m["role"], m["content"], {}};
      if (m.contains("reasoning_content")) msg.reasoning_content = m["reasoning_content"];
      messages.push_back(std::move(msg));
    }
    ChatOptions options;
    options.add_generation_prompt = c["add_generation_prompt"];
    if (!c["enable_thinking"].is_null()) options.enable_thinking = c["enable_thinking"];
    EXPECT_EQ(format_chat(messages, options), c["expected"].get<std::string>())
        << c["name"] << " generation prompt " << c["add_generation_prompt"] << " thinking "
        << c["enable_thinking"];
  }
}

TEST(Chat, RaisesWhereTheTemplateRaises) {
  EXPECT_THROW(format_chat({}, {}), Error);
  EXPECT_THROW(format_chat({{"system", "s", {}}}, {}), Error);  // no user query
  EXPECT_THROW(format_chat({{"user", "<tool_response>x</tool_response>", {}}}, {}), Error);
  EXPECT_THROW(format_chat({{"user", "u", {}}, {"system", "s", {}}}, {}), Error);
  EXPECT_THROW(format_chat({{"user", "u", {}}, {"tool", "t", {}}}, {}), Error);
}

TEST(Chat, RecognisesOnlyTheQwen35Template) {
  const std::string reference = read_file(shared_vocab_file("qwen3.5-chat-template.jinja"));
  EXPECT_TRUE(template_is_qwen35(reference));
  EXPECT_TRUE(template_is_qwen35(reference + "\n"));
  std::string edited = reference;
  edited[edited.find("<think>")] = '[';
  EXPECT_FALSE(template_is_qwen35(edited));
  EXPECT_FALSE(template_is_qwen35(""));
  // The shared vocab GGUF carries the older Qwen2 template.
  const auto vocab = gguf::File::open(shared_vocab_file("ggml-vocab-qwen35.gguf"));
  EXPECT_FALSE(template_is_qwen35(vocab.meta().get_string("tokenizer.chat_template")));
}

TEST(Chat, MarkersTokenizeAsSpecialTokens) {
  const Tokenizer tok = Tokenizer::load(shared_vocab_file("ggml-vocab-qwen35.gguf"));
  const std::vector<int32_t> ids = tok.encode(format_chat(kThreeTurns, {}));
  const int32_t im_start = 151644, im_end = 151645;
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_start), 7);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_end), 6);
  EXPECT_EQ(ids.front(), im_start);
}

}  // namespace
}  // namespace gdn::text
