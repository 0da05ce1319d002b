// gdn run: text in, text out. Continues a prompt, or chats in the Qwen3.5 format (--chat, and
// -i for a conversation read from stdin), streaming tokens as they are sampled.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "app/commands.h"
#include "app/model_source.h"
#include "common/error.h"
#include "runtime/sampling.h"
#include "text/chat.h"
#include "text/tokenizer.h"

namespace gdn::app {
namespace {

struct RunArgs {
  ModelArgs model;
  std::string prompt;
  int n_predict = -1;  // -1: until end of generation or a full context, as llama.cpp
  std::vector<std::string> stops;
  runtime::SamplingParams sampling;
  bool chat = false;
  bool interactive = false;
  std::string system;
  bool think = text::ChatOptions{}.enable_thinking;
  bool print_prompt = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void print_out(std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// Holds back streamed text that could be the start of a stop string until it is resolved, so
// a stop string, even one spanning tokens, is never printed.
class StopFilter {
 public:
  explicit StopFilter(const std::vector<std::string>& stops) : stops_(stops) {}

  // Takes the next text and returns what can be shown now. Once a stop string appears,
  // stopped() is true, the result ends where the stop string began, and nothing follows.
  std::string push(std::string_view text) {
    if (stopped_) return {};
    held_ += text;
    size_t first = std::string::npos;
    for (const std::string& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
      stopped_ = true;
      held_.resize(first);
      return std::exchange(held_, {});
    }
    std::string out = held_.substr(0, held_.size() - held_back());
    held_.erase(0, out.size());
    return out;
  }
  // The end of the stream: what was held back is not a stop string after all.
  std::string flush() { return std::exchange(held_, {}); }
  bool stopped() const { return stopped_; }

 private:
  // The longest end of held_ that some stop string starts with.
  size_t held_back() const {
    size_t keep = 0;
    for (const std::string& s : stops_) {
      for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
        if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
          keep = n;
          break;
        }
      }
    }
    return keep;
  }

  const std::vector<std::string>& stops_;
  std::string held_;
  bool stopped_ = false;
};

// Prompt passes and generation, summed over the session, for llama.cpp's final line.
struct Stats {
  int64_t prompt_tokens = 0, gen_tokens = 0;
  double prompt_s = 0, gen_s = 0;

  std::string line() const {
    auto rate = [](int64_t n, double s) { return s > 0 ? double(n) / s : 0.0; };
    return fmt::format(
        "prompt: {} tokens in {:.3f} s ({:.2f} tok/s) | generation: {} tokens in {:.3f} s "
        "({:.2f} tok/s)",
        prompt_tokens, prompt_s, rate(prompt_tokens, prompt_s), gen_tokens, gen_s,
        rate(gen_tokens, gen_s));
  }
};

// One sequence in slot 0: takes prompt tokens, then samples and streams a reply.
class Generator {
 public:
  Generator(runtime::Executor& exec, const text::Tokenizer& tok, const RunArgs& a)
      : exec_(exec), tok_(tok), args_(a), sampler_(a.sampling) {}

  // Runs tokens through the model in one pass; the penalties see them.
  void feed(const std::vector<int32_t>& ids) {
    if (exec_.n_past(0) + int64_t(ids.size()) > args_.model.n_ctx) {
      fail("the prompt needs {} positions but the context holds {} (-c)",
           exec_.n_past(0) + int64_t(ids.size()), args_.model.n_ctx);
    }
    const auto t0 = std::chrono::steady_clock::now();
    logits_ = exec_.forward_view(ids, 0, false);
    stats_.prompt_s += seconds_since(t0);
    stats_.prompt_tokens += int64_t(ids.size());
    for (const int32_t id : ids) sampler_.accept(id);
  }

  // Samples from the last logits until end of generation, -n tokens, a stop string or a full
  // context; prints the text as it comes and returns it. The last token is not fed back:
  // nothing needs its logits.
  std::string reply() {
    const auto t0 = std::chrono::steady_clock::now();
    text::StreamDecoder decoder(tok_);
    StopFilter stop(args_.stops);
    std::string shown;
    auto show = [&](const std::string& s) {
      print_out(s);
      shown += s;
    };
    // Logit rows may be padded past the vocabulary; ids beyond it have no text.
    const size_t n_vocab = std::min(logits_.size(), tok_.n_vocab());
    for (int n = 0; args_.n_predict < 0 || n < args_.n_predict; ++n) {
      const int32_t id = sampler_.sample(logits_.first(n_vocab));
      if (tok_.is_eog(id)) break;
      ++stats_.gen_tokens;
      show(stop.push(decoder.push(id)));
      if (stop.stopped() || n + 1 == args_.n_predict) break;
      if (exec_.n_past(0) >= args_.model.n_ctx) {
        fmt::print(stderr, "\n[context of {} positions full (-c)]\n", args_.model.n_ctx);
        break;
      }
      logits_ = exec_.forward_view(std::span<const int32_t>(&id, 1), 0, false);
    }
    show(stop.push(decoder.flush()));
    show(stop.flush());
    stats_.gen_s += seconds_since(t0);
    return shown;
  }

  const Stats& stats() const { return stats_; }

 private:
  runtime::Executor& exec_;
  const text::Tokenizer& tok_;
  const RunArgs& args_;
  runtime::Sampler sampler_;
  std::span<const float> logits_;  // the executor's, valid until its next forward
  Stats stats_;
};

// With --print-prompt: the exact text the model is conditioned on when a reply starts, as a
// JSON string (one line, every byte visible).
void show_prompt(const RunArgs& a, const std::string& prompt) {
  if (!a.print_prompt) return;
  fmt::print(stderr, "prompt text: {}\n",
             nlohmann::json(prompt).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// A conversation kept in the model's state. What the model has seen when a reply starts is
// always format_chat of the whole conversation. That is not the running transcript: the
// template rewrites earlier assistant turns (it drops their reasoning and "<think>" blocks).
// So slot 1 holds a snapshot taken at the end of the last user turn, and each turn restores
// it and feeds only the rest of the new rendering: the last reply as the template writes it,
// the new user turn and the generation prompt.
class ChatSession {
 public:
  ChatSession(Generator& gen, runtime::Executor& exec, const text::Tokenizer& tok, const RunArgs& a)
      : gen_(gen), exec_(exec), tok_(tok), args_(a) {
    if (!a.system.empty()) messages_.push_back({"system", a.system, {}});
  }

  std::string turn(const std::string& user) {
    messages_.push_back({"user", user, {}});
    const std::string upto_user = render(false), prompt = render(true);
    // Only a user turn dressed as a tool response moves the template's last query back and
    // so changes earlier turns; then the conversation is fed again from the start.
    if (!upto_user.starts_with(snapshot_)) {
      exec_.reset_slot(1);
      snapshot_.clear();
    }
    exec_.copy_slot(1, 0);
    gen_.feed(tok_.encode(std::string_view(upto_user).substr(snapshot_.size())));
    exec_.copy_slot(0, 1);
    snapshot_ = upto_user;
    gen_.feed(tok_.encode(std::string_view(prompt).substr(upto_user.size())));
    show_prompt(args_, prompt);
    std::string reply = gen_.reply();
    messages_.push_back({"assistant", reply, {}});
    return reply;
  }

 private:
  std::string render(bool generation_prompt) const {
    return text::format_chat(messages_, {generation_prompt, args_.think});
  }

  Generator& gen_;
  runtime::Executor& exec_;
  const text::Tokenizer& tok_;
  const RunArgs& args_;
  std::vector<text::ChatMessage> messages_;
  std::string snapshot_;  // the text slot 1 holds
};

void warn_if_other_template(const gguf::Metadata& meta) {
  const std::string tmpl = meta.get_string("tokenizer.chat_template", "");
  if (!tmpl.empty() && !text::template_is_qwen35(tmpl)) {
    fmt::print(stderr,
               "warning: the model's chat template is not the Qwen3.5 one; using the built-in "
               "Qwen3.5 format instead of the file's template\n");
  }
}

// -p as the first turn; with -i, then a line of stdin per turn until EOF or /exit. Each
// reply ends with a newline; "> " asks for the next line.
void chat_loop(ChatSession& session, const RunArgs& a) {
  auto turn = [&](const std::string& user) {
    session.turn(user);
    print_out("\n");
  };
  if (!a.interactive) return turn(a.prompt);
  if (!a.prompt.empty()) {
    print_out(fmt::format("> {}\n", a.prompt));
    turn(a.prompt);
  }
  for (std::string line; print_out("> "), std::getline(std::cin, line);) {
    if (line == "/exit") break;
    if (!line.empty()) turn(line);
  }
  print_out("\n");  // ends the last "> " line
}

int run_run(RunArgs a) {
  a.chat |= a.interactive;
  if (!a.interactive && a.prompt.empty()) fail("give a prompt with -p (or -i to chat on stdin)");
  if (!a.chat && !a.system.empty()) fail("--system needs --chat or -i");
  for (const std::string& s : a.stops) {
    if (s.empty()) fail("--stop strings must not be empty");
  }
  runtime::validate(a.sampling);
  a.model.n_slots = a.chat ? 2 : 1;  // chat keeps a snapshot in slot 1 (see ChatSession)

  LoadedModel lm = load_model(a.model, "tiny");
  const gguf::Metadata& meta = lm.model->file->meta();
  const text::Tokenizer tok = tokenizer_of(meta, lm.label);
  if (int64_t(tok.n_vocab()) > lm.model->hp.n_vocab) {
    fail("{}: the tokenizer has {} tokens but the model only {} embeddings", lm.label,
         tok.n_vocab(), lm.model->hp.n_vocab);
  }
  Generator gen(*lm.exec, tok, a);
  if (a.chat) {
    warn_if_other_template(meta);
    ChatSession session(gen, *lm.exec, tok, a);
    chat_loop(session, a);
  } else {
    std::vector<int32_t> ids = tok.encode(a.prompt);
    if (tok.add_bos()) ids.insert(ids.begin(), tok.bos());
    if (ids.empty()) fail("the prompt has no tokens");
    gen.feed(ids);
    show_prompt(a, a.prompt);
    gen.reply();
    print_out("\n");
  }
  fmt::print(stderr, "{}\n", gen.stats().line());
  return 0;
}

}  // namespace

Run add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  add_model_options(app, a->model, "--model-seed");
  app.add_option("-p,--prompt", a->prompt, "prompt (with --chat: the user's message)");
  app.add_option("-n,--n-predict", a->n_predict, "tokens to generate at most (-1: no limit)");
  app.add_option("--stop", a->stops, "stop when the text contains this string (repeatable)")
      ->allow_extra_args(false);  // one string per --stop, even one that looks like a flag
  app.add_flag("--chat", a->chat, "format -p as a user turn of a Qwen3.5 chat");
  app.add_flag("-i,--interactive", a->interactive,
               "chat: a user turn per stdin line until EOF or /exit (implies --chat)");
  app.add_option("--system", a->system, "chat: system prompt");
  app.add_flag("--think,!--no-think", a->think, "chat: let the model think first (default on)");
  app.add_flag("--print-prompt", a->print_prompt,
               "print the text the model sees before each reply to stderr (JSON string)");
  runtime::SamplingParams& s = a->sampling;
  app.add_option("--temp", s.temperature, "temperature (0: greedy)");
  app.add_option("--top-k", s.top_k, "top-k (0: off)");
  app.add_option("--top-p", s.top_p, "top-p (1: off)");
  app.add_option("--min-p", s.min_p, "min-p (0: off)");
  app.add_option("--repeat-penalty", s.repeat_penalty, "repeat penalty (1: off)");
  app.add_option("--repeat-last-n", s.repeat_last_n, "tokens the penalties look back on");
  app.add_option("--presence-penalty", s.presence_penalty, "presence penalty (0: off)");
  app.add_option("--frequency-penalty", s.frequency_penalty, "frequency penalty (0: off)");
  app.add_option("--seed", s.seed, "sampling seed");
  return [a] { return run_run(*a); };
}

}  // namespace gdn::app
