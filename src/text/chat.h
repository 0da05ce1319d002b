// Qwen3.5 chat formatting, built in: renders plain-text conversations exactly as the model's
// Jinja chat template (shared/data/vocab/qwen3.5-chat-template.jinja) does, without a Jinja
// engine. Tools, images and videos are not supported.
//
// What the template does, and so what this does:
//  - a leading system message becomes "<|im_start|>system\n{content}<|im_end|>\n"; a system
//    message anywhere else is an error;
//  - every content is trimmed of surrounding whitespace (Python str.strip());
//  - assistant turns before the last user message keep only their answer: reasoning, given
//    as reasoning_content or inline as "<think>...</think>", is dropped; assistant turns
//    after it are written as "<think>\n{reasoning}\n</think>\n\n{answer}";
//  - the generation prompt is "<|im_start|>assistant\n<think>\n" with thinking on (the
//    template's default) and "<|im_start|>assistant\n<think>\n\n</think>\n\n" with it off.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gdn::text {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
  // Reasoning of an assistant turn given apart from its content; when absent, a
  // "<think>...</think>" prefix of the content is taken as the reasoning.
  std::optional<std::string> reasoning_content;
};

struct ChatOptions {
  bool add_generation_prompt = true;
  bool enable_thinking = true;
};

// Throws gdn::Error where the template raises: no messages, no user message, a system message
// after the first, an unknown role.
std::string format_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options);

// True when a GGUF's tokenizer.chat_template is the Qwen3.5 template format_chat reproduces:
// the same text as the reference file, ignoring trailing whitespace (converters differ in the
// final newline). Any other template, even a near copy, may render differently, so the
// caller should say so rather than format with this one.
bool template_is_qwen35(std::string_view gguf_template);

}  // namespace gdn::text
