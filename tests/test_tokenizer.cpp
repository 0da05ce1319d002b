// Tokenizer tests: the pre-tokenizer and BPE on hand-made cases, then the real Qwen3.5
// vocabulary against llama.cpp's reference cases (shared/data/vocab/ggml-vocab-qwen35.gguf.*,
// ids produced by the HF tokenizer) and randomised round-trip properties.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include "common/error.h"
#include "common/ids.h"
#include "text/bpe.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace gdn::text {
namespace {

std::vector<std::string> split(std::string_view text) {
  const auto pieces = pretokenize(text);
  return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(Pretokenize, WordsTakeOneLeadingNonLetter) {
  EXPECT_EQ(split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split("Hello, y'all!"), (Pieces{"Hello", ",", " y", "'all", "!"}));
  EXPECT_EQ(split("\tfoo"), (Pieces{"\tfoo"}));
  EXPECT_EQ(split("\nfoo"), (Pieces{"\n", "foo"}));
}

TEST(Pretokenize, ContractionsAreCaseInsensitive) {
  EXPECT_EQ(split("I'm 'RE 'Ve"), (Pieces{"I", "'m", " '", "RE", " '", "Ve"}));
  EXPECT_EQ(split("'LLama'd"), (Pieces{"'LL", "ama", "'d"}));
  // (?i) folds U+017F LATIN SMALL LETTER LONG S to 's'.
  EXPECT_EQ(split("'\u017Fx"), (Pieces{"'\u017F", "x"}));
}

TEST(Pretokenize, MarksJoinLetters) {
  EXPECT_EQ(split("re\u0301sume\u0301 e\u0301"), (Pieces{"re\u0301sume\u0301", " e\u0301"}));
  // A lone mark after a space still starts a word.
  EXPECT_EQ(split(" \u0301x"), (Pieces{" \u0301x"}));
}

TEST(Pretokenize, NumbersAreSingleCharacters) {
  EXPECT_EQ(split("ied 4 \u00BD months"), (Pieces{"ied", " ", "4", " ", "\u00BD", " months"}));
  EXPECT_EQ(split("333"), (Pieces{"3", "3", "3"}));
  EXPECT_EQ(split("3.3"), (Pieces{"3", ".", "3"}));
}

TEST(Pretokenize, PunctuationTakesOneSpaceAndTrailingNewlines) {
  EXPECT_EQ(split("\n ="), (Pieces{"\n", " ="}));
  EXPECT_EQ(split("a ...\r\n\nb"), (Pieces{"a", " ...\r\n\n", "b"}));
  EXPECT_EQ(split("  ("), (Pieces{" ", " ("}));
}

TEST(Pretokenize, WhitespaceRuns) {
  // \s*[\r\n]+ runs to the last newline of the run.
  EXPECT_EQ(split("a \n \n  b"), (Pieces{"a", " \n \n", " ", " b"}));
  // \s+(?!\S) leaves the last space to the next word...
  EXPECT_EQ(split("   Hello"), (Pieces{"  ", " Hello"}));
  // ... and takes all of a run that ends the text.
  EXPECT_EQ(split("x   "), (Pieces{"x", "   "}));
  // A single space before a digit is left to \s+.
  EXPECT_EQ(split(" 1"), (Pieces{" ", "1"}));
  // Unicode whitespace (NBSP, ideographic space, NEL) counts as \s.
  EXPECT_EQ(split("a\u00A0\u3000\u0085b"), (Pieces{"a", "\u00A0\u3000", "\u0085b"}));
}

TEST(Pretokenize, InvalidBytesGroupLikePunctuation) {
  EXPECT_EQ(split("a\xff\xfe b"), (Pieces{"a", "\xff\xfe", " b"}));
}

TEST(Unicode, CompletePrefixHoldsOnlyUnfinishedSequences) {
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("a\xe2"), 1u);
  EXPECT_EQ(utf8_complete_prefix("a\xe2\x82"), 1u);
  EXPECT_EQ(utf8_complete_prefix("\xe2\x82\xac"), 3u);
  EXPECT_EQ(utf8_complete_prefix("\xf0\x9f\x98"), 0u);
  EXPECT_EQ(utf8_complete_prefix("\xff"), 1u);       // never completes
  EXPECT_EQ(utf8_complete_prefix("a\xed\xa0"), 3u);  // a surrogate: never completes
  EXPECT_EQ(utf8_complete_prefix("\x80\x80\x80"), 3u);
}

TEST(ByteMap, IsABijectionWithGpt2Spelling) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_to_char(static_cast<uint8_t>(b));
    EXPECT_EQ(char_to_byte(c), b);
    seen.insert(c);
  }
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(byte_to_char(' '), U'\u0120');   // 'Ġ'
  EXPECT_EQ(byte_to_char('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(byte_to_char('A'), U'A');
  EXPECT_EQ(char_to_byte(U'\u4E00'), -1);
}

// A byte-level vocabulary with a few merges and special tokens.
VocabSpec tiny_vocab(const std::vector<std::string>& merges) {
  VocabSpec v;
  for (int b = 0; b < 256; ++b) {
    std::string t;
    append_utf8(t, byte_to_char(static_cast<uint8_t>(b)));
    v.tokens.push_back(t);
    v.types.push_back(TokenType::normal);
  }
  for (const std::string& m : merges) {
    std::string joined = m;
    joined.erase(joined.find(' '), 1);
    v.tokens.push_back(joined);
    v.types.push_back(TokenType::normal);
  }
  v.merges = merges;
  v.tokens.push_back("<|ctl|>");
  v.types.push_back(TokenType::control);
  v.tokens.push_back("<|ctl|>x");  // longer special token sharing a prefix
  v.types.push_back(TokenType::control);
  v.tokens.push_back("<u>");
  v.types.push_back(TokenType::user_defined);
  return v;
}

TEST(Bpe, MergesByRankNotPosition) {
  const Tokenizer tok(tiny_vocab({"b c", "a b", "a bc"}));
  const int32_t abc = 258;
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{abc}));
  // With "a b" first, "ab" + "c" has no merge.
  const Tokenizer other(tiny_vocab({"a b", "b c", "a bc"}));
  EXPECT_EQ(other.encode("abc"), (std::vector<int32_t>{256, 'c'}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  const Tokenizer tok(tiny_vocab({"a a"}));
  EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{256, 'a'}));
  EXPECT_EQ(tok.encode("aaaa"), (std::vector<int32_t>{256, 256}));
}

TEST(Tokenizer, SpecialTokensMatchLongestFirst) {
  const Tokenizer tok(tiny_vocab({}));
  const int32_t ctl = 256, ctl_x = 257, user = 258;
  EXPECT_EQ(tok.encode("<|ctl|>x<|ctl|>y"), (std::vector<int32_t>{ctl_x, ctl, 'y'}));
  EXPECT_EQ(tok.encode("a<u>b"), (std::vector<int32_t>{'a', user, 'b'}));
  // Without parse_special, control tokens are plain text; user-defined ones still match.
  const auto plain = tok.encode("<|ctl|><u>", false);
  EXPECT_EQ(plain.size(), 8u);
  EXPECT_EQ(plain.back(), user);
  EXPECT_EQ(tok.decode(plain), "<|ctl|><u>");
}

TEST(Tokenizer, RejectsInconsistentVocabularies) {
  VocabSpec bad_merge = tiny_vocab({});
  bad_merge.merges = {"a zz"};
  EXPECT_THROW(Tokenizer{bad_merge}, Error);
  VocabSpec missing_byte = tiny_vocab({});
  missing_byte.tokens[0] = "ZZ";
  EXPECT_THROW(Tokenizer{missing_byte}, Error);
  VocabSpec bad_id = tiny_vocab({});
  bad_id.eos = 100000;
  EXPECT_THROW(Tokenizer{bad_id}, Error);
  // A byte's token, or a merge's, that is not byte-level would decode as its GPT-2 spelling.
  VocabSpec control_byte = tiny_vocab({});
  control_byte.types['\t'] = TokenType::control;
  try {
    Tokenizer{control_byte};
    ADD_FAILURE() << "accepted a control token for byte 0x09";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte 0x09"), std::string::npos) << e.what();
  }
  VocabSpec user_defined_merge = tiny_vocab({"a b"});
  user_defined_merge.types[256] = TokenType::user_defined;  // "ab"
  try {
    Tokenizer{user_defined_merge};
    ADD_FAILURE() << "accepted a merge that makes a user-defined token";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("merge 0"), std::string::npos) << e.what();
  }
}

// --- The real vocabulary -------------------------------------------------------------------

std::string shared_file(const std::string& name) {
  const std::string path = std::string(GDN_SHARED_DIR) + "/data/vocab/" + name;
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error("missing " + path +
                             ": shared/ is part of the project and must "
                             "sit beside the repository");
  }
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const Tokenizer& qwen35() {
  static const Tokenizer tok = Tokenizer::load(shared_file("ggml-vocab-qwen35.gguf"));
  return tok;
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// As llama.cpp's test-tokenizer-0 reads them: .inp holds the cases, each followed by
// "\n__ggml_vocab_test__\n"; .out holds one line of space-separated ids per case.
std::vector<VocabCase> read_cases() {
  const std::string inp = read_file(shared_file("ggml-vocab-qwen35.gguf.inp"));
  std::istringstream out(read_file(shared_file("ggml-vocab-qwen35.gguf.out")));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    const size_t end = next == std::string::npos ? inp.size() : next;
    VocabCase c{inp.substr(pos, end - pos), {}};
    std::string line;
    if (!std::getline(out, line)) throw std::runtime_error(".out has fewer lines than .inp cases");
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
    pos = next == std::string::npos ? inp.size() : next + sep.size();
  }
  return cases;
}

TEST(Vocab, LoadsVocabOnlyGguf) {
  const Tokenizer& tok = qwen35();
  EXPECT_EQ(tok.n_vocab(), 151936u);
  EXPECT_EQ(tok.token_text(151644), "<|im_start|>");
  EXPECT_EQ(tok.token_type(151644), TokenType::control);
  EXPECT_EQ(tok.eos(), 151643);
  EXPECT_EQ(tok.eot(), 151645);  // no eot key: <|im_end|>
  EXPECT_FALSE(tok.add_bos());
  EXPECT_TRUE(tok.is_eog(151643));
  EXPECT_TRUE(tok.is_eog(151645));
  EXPECT_FALSE(tok.is_eog(151644));
  EXPECT_FALSE(tok.is_eog(9707));
  EXPECT_EQ(tok.token_text(21927), "\u0120Hello");
  EXPECT_EQ(tok.piece(21927), " Hello");
}

TEST(Vocab, MatchesReferenceCases) {
  const Tokenizer& tok = qwen35();
  const std::vector<VocabCase> cases = read_cases();
  ASSERT_EQ(cases.size(), 50u);
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const VocabCase& c = cases[i];
    const std::vector<int32_t> got = tok.encode(c.text);
    const std::string back = tok.decode(c.ids);
    EXPECT_EQ(got, c.ids) << "case " << i << " '" << c.text << "'\n  expected " << format_ids(c.ids)
                          << "\n  got      " << format_ids(got);
    EXPECT_EQ(back, c.text) << "case " << i << " does not decode back";
    passed += got == c.ids && back == c.text;
  }
  std::printf("%zu/%zu cases passed\n", passed, cases.size());
}

// Random text: runs drawn from scripts, digits, punctuation, whitespace, marks, emoji and
// special-token texts, so every pre-tokenizer rule and every UTF-8 length shows up.
class TextGen {
 public:
  explicit TextGen(uint32_t seed) : rng_(seed) {}

  std::string next(size_t runs) {
    std::string s;
    for (size_t r = 0; r < runs; ++r) {
      const size_t pool = pick(kPools.size() + kWords.size());
      if (pool >= kPools.size()) {
        s += kWords[pool - kPools.size()];
        continue;
      }
      const auto [lo, hi] = kPools[pool];
      for (size_t n = 1 + pick(6); n > 0; --n) append_utf8(s, lo + pick(hi - lo + 1));
    }
    return s;
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  static constexpr std::array<std::pair<char32_t, char32_t>, 24> kPools{{
      {'a', 'z'},       {'A', 'Z'},         {'0', '9'},       {'!', '/'},       {' ', ' '},
      {'\t', '\r'},     {0xC0, 0x24F},      {0x391, 0x3C9},   {0x410, 0x44F},   {0x4E00, 0x9FFF},
      {0x3040, 0x309F}, {0xAC00, 0xD7A3},   {0x600, 0x6FF},   {0x900, 0x97F},   {0x1780, 0x17FF},
      {0x300, 0x36F},   {0x1F300, 0x1FAFF}, {0x200D, 0x200D}, {0xFE0F, 0xFE0F}, {0x2000, 0x200A},
      {0x3000, 0x3000}, {0x2028, 0x2029},   {0x80, 0xBF},     {0xE000, 0xE0FF},
  }};
  static inline const std::vector<std::string> kWords{
      "'s",           "'LL",        "'ve",           "'D",          "\r\n",  "\n\n\n",
      "<|im_start|>", "<|im_end|>", "<|endoftext|>", "[PAD151700]", "<|im_", "\u00BD",
      "\u0661\u0662"};

  std::mt19937 rng_;
};

TEST(Vocab, RandomTextRoundTrips) {
  const Tokenizer& tok = qwen35();
  TextGen gen(1234);
  for (int i = 0; i < 3000; ++i) {
    const std::string text = gen.next(1 + i % 40);
    ASSERT_EQ(tok.decode(tok.encode(text)), text) << "string " << i;
    ASSERT_EQ(tok.decode(tok.encode(text, false)), text) << "string " << i;
  }
}

TEST(Vocab, RandomBytesRoundTrip) {
  const Tokenizer& tok = qwen35();
  std::mt19937 rng(99);
  for (int i = 0; i < 500; ++i) {
    std::string bytes(1 + rng() % 64, '\0');
    for (char& b : bytes) b = static_cast<char>(rng());
    ASSERT_EQ(tok.decode(tok.encode(bytes)), bytes) << "string " << i;
  }
}

// One random edit of a vocabulary: a token's text or type changed, a token added or removed, a
// merge added (well formed or not), a special id moved.
void edit_vocab(VocabSpec& v, std::mt19937& rng, TextGen& gen) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : size_t(rng() % n); };
  auto any_text = [&]() -> std::string {
    switch (pick(4)) {
      case 0:
        return "";
      case 1:
        return v.tokens.empty() ? "" : v.tokens[pick(v.tokens.size())];
      case 2: {
        std::string bytes(1 + pick(6), '\0');
        for (char& b : bytes) b = static_cast<char>(rng());
        return bytes;
      }
      default:
        return gen.next(1 + pick(3));
    }
  };
  const int32_t n = static_cast<int32_t>(v.tokens.size());
  switch (pick(6)) {
    case 0:
      if (n > 0) v.tokens[pick(n)] = any_text();
      break;
    case 1:
      if (n > 0) v.types[pick(n)] = static_cast<TokenType>(1 + pick(6));
      break;
    case 2:
      v.tokens.push_back(any_text());
      v.types.push_back(static_cast<TokenType>(1 + pick(6)));
      break;
    case 3:
      if (n > 0) {
        const size_t at = pick(n);
        v.tokens.erase(v.tokens.begin() + at);
        v.types.erase(v.types.begin() + at);
      }
      break;
    case 4: {
      const std::string left = n > 0 ? v.tokens[pick(n)] : "", right = any_text();
      v.merges.push_back(pick(4) == 0 ? left + right : left + " " + right);
      break;
    }
    default: {
      int32_t* ids[] = {&v.bos, &v.eos, &v.eot, &v.pad};
      *ids[pick(4)] = static_cast<int32_t>(pick(n + 4)) - 2;
      break;
    }
  }
}

// Property: an edited vocabulary is either refused with a gdn::Error or builds a tokenizer whose
// ids stay in the vocabulary and whose decode undoes encode, with and without special tokens.
TEST(TokenizerFuzz, EditedVocabulariesRoundTripOrFailCleanly) {
  std::mt19937 rng(2026);
  TextGen gen(4242);
  int built = 0;
  for (int c = 0; c < 10000; ++c) {
    VocabSpec v = tiny_vocab({"a b", "ab c", "\u0120 a"});
    for (int e = 0, edits = 1 + int(rng() % 3); e < edits; ++e) edit_vocab(v, rng, gen);
    std::optional<Tokenizer> tok;
    try {
      tok.emplace(v);
    } catch (const Error&) {
      continue;
    }
    ++built;
    for (int t = 0; t < 4; ++t) {
      const std::string text = gen.next(1 + rng() % 12) + "<|ctl|>x<u>ab c";
      for (bool special : {true, false}) {
        const std::vector<int32_t> ids = tok->encode(text, special);
        for (int32_t id : ids) ASSERT_LT(size_t(id), tok->n_vocab()) << "case " << c;
        ASSERT_EQ(tok->decode(ids), text) << "case " << c;
      }
    }
  }
  std::printf("[ fuzz     ] 10000 vocabularies, %d built and round-tripped\n", built);
  EXPECT_GT(built, 1000);  // most single edits leave a usable vocabulary
}

bool is_whole_utf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const Utf8Char c = decode_utf8(s, pos);
    if (c.cp == kInvalidCodepoint) return false;
    pos += c.len;
  }
  return true;
}

TEST(Vocab, StreamDecoderNeverSplitsCharacters) {
  const Tokenizer& tok = qwen35();
  TextGen gen(777);
  for (int i = 0; i < 1000; ++i) {
    const std::string text = gen.next(1 + i % 30);
    StreamDecoder stream(tok);
    std::string joined;
    for (const int32_t id : tok.encode(text)) {
      const std::string chunk = stream.push(id);
      ASSERT_TRUE(is_whole_utf8(chunk)) << "string " << i;
      joined += chunk;
    }
    EXPECT_EQ(stream.flush(), "");
    ASSERT_EQ(joined, text) << "string " << i;
  }
}

TEST(Vocab, StreamDecoderMatchesDecodeOnArbitraryIds) {
  const Tokenizer& tok = qwen35();
  std::mt19937 rng(5);
  for (int i = 0; i < 500; ++i) {
    std::vector<int32_t> ids(1 + rng() % 20);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % tok.n_vocab());
    StreamDecoder stream(tok);
    std::string joined;
    for (const int32_t id : ids) joined += stream.push(id);
    joined += stream.flush();
    ASSERT_EQ(joined, tok.decode(ids)) << "sequence " << i;
  }
}

TEST(Vocab, SpecialTokensAreSingleIds) {
  const Tokenizer& tok = qwen35();
  for (int32_t id = 0; id < static_cast<int32_t>(tok.n_vocab()); ++id) {
    const TokenType type = tok.token_type(id);
    if (type != TokenType::control && type != TokenType::user_defined) continue;
    const std::string& text = tok.token_text(id);
    const std::vector<int32_t> ids = tok.encode("Hi" + text + "there");
    ASSERT_EQ(ids.size(), 3u) << text;
    EXPECT_EQ(ids[1], id) << text;
    const std::vector<int32_t> plain = tok.encode(text, false);
    const bool matched = std::find(plain.begin(), plain.end(), id) != plain.end();
    EXPECT_EQ(matched, type == TokenType::user_defined) << text;
  }
}

TEST(Vocab, LongRunsStayFast) {
  // Quadratic merging would take minutes on these; O(n log n) takes milliseconds.
  const Tokenizer& tok = qwen35();
  for (const std::string& text :
       {std::string(200000, 'a'), std::string(200000, ' '), std::string(200000, '!')}) {
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  }
}

TEST(Vocab, RefusesOtherPreTokenizers) {
  gguf::Metadata meta;
  meta.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
  meta.set("tokenizer.ggml.pre", gguf::Value::str("qwen2"));
  try {
    Tokenizer::from_metadata(meta);
    FAIL() << "accepted pre-tokenizer qwen2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'qwen2'"), std::string::npos) << e.what();
  }
  meta.set("tokenizer.ggml.model", gguf::Value::str("llama"));
  EXPECT_THROW(Tokenizer::from_metadata(meta), Error);
}

}  // namespace
}  // namespace gdn::text
