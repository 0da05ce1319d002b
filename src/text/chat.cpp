#include "text/chat.h"

#include <algorithm>
#include <cstdint>

#include "common/error.h"
#include "text/unicode.h"

namespace gdn::text {

namespace {

// Python's str.isspace(), which Jinja's trim filter uses: \s plus the separators U+001C..U+001F.
bool python_space(char32_t cp) {
  return is_regex_space(cp) || (cp >= 0x1C && cp <= 0x1F);
}

std::string_view trim(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const Utf8Char c = decode_utf8(s, begin);
    if (!python_space(c.cp)) break;
    begin += c.len;
  }
  // Scan forward for the end too: UTF-8 cannot be decoded backwards without re-synchronising.
  size_t end = begin;
  for (size_t pos = begin; pos < s.size();) {
    const Utf8Char c = decode_utf8(s, pos);
    pos += c.len;
    if (!python_space(c.cp)) end = pos;
  }
  return s.substr(begin, end - begin);
}

std::string_view strip_newlines_left(std::string_view s) {
  return s.substr(std::min(s.find_first_not_of('\n'), s.size()));
}

std::string_view strip_newlines_right(std::string_view s) {
  const size_t last = s.find_last_not_of('\n');
  return last == std::string_view::npos ? std::string_view{} : s.substr(0, last + 1);
}

// The template's last_query_index: the last user message that is not a tool response.
size_t last_query_index(const std::vector<ChatMessage>& messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role != "user") continue;
    const std::string_view content = trim(messages[i].content);
    if (!(content.starts_with("<tool_response>") && content.ends_with("</tool_response>"))) {
      return i;
    }
  }
  fail("chat: no user query found in the messages");
}

struct AssistantTurn {
  std::string_view reasoning;
  std::string_view answer;
};

// Splits like the template: reasoning is what lies between the last <think> before the first
// </think> and that </think>; the answer is what follows the last </think>.
AssistantTurn split_assistant(const ChatMessage& m, std::string_view content) {
  if (m.reasoning_content) return {trim(*m.reasoning_content), content};
  const size_t close = content.find("</think>");
  if (close == std::string_view::npos) return {{}, content};
  std::string_view reasoning = strip_newlines_right(content.substr(0, close));
  if (const size_t open = reasoning.rfind("<think>"); open != std::string_view::npos) {
    reasoning = reasoning.substr(open + std::string_view("<think>").size());
  }
  const size_t last_close = content.rfind("</think>");
  return {trim(strip_newlines_left(reasoning)),
          strip_newlines_left(content.substr(last_close + std::string_view("</think>").size()))};
}

void append_turn(std::string& out, std::string_view role, std::string_view body) {
  out.append("<|im_start|>").append(role).append("\n").append(body).append("<|im_end|>\n");
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

}  // namespace

std::string format_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  if (messages.empty()) fail("chat: no messages");
  const size_t last_query = last_query_index(messages);

  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string_view content = trim(m.content);
    if (m.role == "system") {
      if (i != 0) fail("chat: the system message must be the first message, found at {}", i);
      append_turn(out, "system", content);
    } else if (m.role == "user") {
      append_turn(out, "user", content);
    } else if (m.role == "assistant") {
      const AssistantTurn turn = split_assistant(m, content);
      if (i > last_query) {
        append_turn(out, "assistant",
                    "<think>\n" + std::string(turn.reasoning) + "\n</think>\n\n" +
                        std::string(turn.answer));
      } else {
        append_turn(out, "assistant", turn.answer);
      }
    } else {
      fail("chat: message {} has role '{}'; only system, user and assistant are supported", i,
           m.role);
    }
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    out += options.enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n";
  }
  return out;
}

bool template_is_qwen35(std::string_view gguf_template) {
  // FNV-1a of qwen3.5-chat-template.jinja without trailing whitespace; test_chat checks it
  // against the file.
  constexpr uint64_t kQwen35TemplateHash = 0xf07c510f47fbaca0;
  const size_t end = gguf_template.find_last_not_of(" \t\r\n");
  const std::string_view body =
      end == std::string_view::npos ? std::string_view{} : gguf_template.substr(0, end + 1);
  return fnv1a(body) == kQwen35TemplateHash;
}

}  // namespace gdn::text
