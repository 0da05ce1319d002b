// Tokenizer throughput: encode and decode of ~1 MB of text, best of several runs.
//
//   bench_tokenizer <vocab.gguf> [text-file]
//
// Without a text file it encodes 1 MiB of synthetic text: prose-like words from a large
// made-up lexicon (so the per-call piece cache does not see only a handful of words), numbers,
// punctuation, code-like lines, Cyrillic, CJK and emoji.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "common/error.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace {

using gdn::text::Tokenizer;

std::string make_word(std::mt19937& rng) {
  static const char* syllables[] = {"ka",  "to",  "ri", "sen", "mo",  "lu",  "the",
                                    "ing", "pra", "st", "ex",  "qu",  "ion", "al",
                                    "ver", "na",  "de", "com", "ble", "y"};
  std::string w;
  for (int n = 1 + static_cast<int>(rng() % 4); n > 0; --n) w += syllables[rng() % 20];
  if (rng() % 8 == 0) w[0] = static_cast<char>(w[0] - 'a' + 'A');
  return w;
}

std::string synthetic_text(size_t bytes) {
  std::mt19937 rng(42);
  std::vector<std::string> lexicon(30000);
  for (auto& w : lexicon) w = make_word(rng);
  // Zipf-like: low indices far more often.
  const auto word = [&] {
    return lexicon[static_cast<size_t>(lexicon.size() * std::pow(rng() / 4294967296.0, 3))];
  };
  std::string s;
  while (s.size() < bytes) {
    switch (rng() % 20) {
      case 0:
        s += " " + std::to_string(rng() % 100000);
        break;
      case 1:
        s += ".\n\n";
        break;
      case 2:
        s += ", ";
        break;
      case 3:
        s += "\n    for (int i = 0; i < n; ++i) { x[i] += y[i] * 2; }\n";
        break;
      case 4:
        s += " Привет, как дела? ";
        break;
      case 5:
        s += "我们今天去公园散步。";
        break;
      case 6:
        s += " 🙂👍🏽 ";
        break;
      default:
        s += " " + word();
    }
  }
  s.resize(bytes);
  // Cutting may split a character; drop the partial tail so the input is valid UTF-8.
  s.resize(gdn::text::utf8_complete_prefix(s));
  return s;
}

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) gdn::fail("cannot read {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

template <typename F>
double best_seconds(int runs, F&& f) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <vocab.gguf> [text-file]\n", argv[0]);
    return 2;
  }
  try {
    const auto t0 = std::chrono::steady_clock::now();
    const Tokenizer tok = Tokenizer::load(argv[1]);
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string text = argc > 2 ? read_file(argv[2]) : synthetic_text(1 << 20);

    std::vector<int32_t> ids;
    const double enc_s = best_seconds(5, [&] { ids = tok.encode(text); });
    std::string back;
    const double dec_s = best_seconds(5, [&] { back = tok.decode(ids); });
    if (back != text) gdn::fail("decode(encode(text)) differs from the text");

    const double mb = static_cast<double>(text.size()) / 1e6;
    std::printf("text %s: %.3f MB, %zu tokens (%.2f bytes/token)\n",
                argc > 2 ? argv[2] : "synthetic", mb, ids.size(),
                static_cast<double>(text.size()) / static_cast<double>(ids.size()));
    std::printf("load   %.3f s (%zu tokens)\n", load_s, tok.n_vocab());
    std::printf("encode %.3f s  %.2f MB/s\n", enc_s, mb / enc_s);
    std::printf("decode %.4f s  %.1f MB/s\n", dec_s, mb / dec_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
