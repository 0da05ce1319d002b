// The commands end to end: the built `gdn` binary run on the shared Qwen3.5 vocabulary
// (gdn tokenize), on the tiny synthetic model carrying it (gdn run), and gdn bench on the CPU.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "gguf/gguf.h"
#include "text/chat.h"

namespace gdn {
namespace {

namespace fs = std::filesystem;

const std::string kVocab = std::string(GDN_SHARED_DIR) + "/data/vocab/ggml-vocab-qwen35.gguf";

fs::path scratch_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("gdn_test_app_" + std::to_string(getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// Removes the scratch directory when the tests are done.
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override { fs::remove_all(scratch_dir()); }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

struct Result {
  int status = -1;
  std::string out, err;
};

// Runs gdn with these arguments and this stdin; captures stdout and stderr apart.
Result gdn(const std::vector<std::string>& args, const std::string& input = "") {
  const fs::path dir = scratch_dir();
  write_file(dir / "stdin", input);
  std::string cmd = shell_quote(GDN_BINARY);
  for (const std::string& a : args) cmd += fmt::format(" {}", shell_quote(a));
  cmd += fmt::format(" <{} >{} 2>{}", shell_quote(dir / "stdin"), shell_quote(dir / "stdout"),
                     shell_quote(dir / "stderr"));
  const int raw = std::system(cmd.c_str());
  Result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_file(dir / "stdout");
  r.err = read_file(dir / "stderr");
  return r;
}

// gdn run on the tiny synthetic model with the real vocabulary, greedy unless args say so.
Result run_tiny(std::vector<std::string> args, const std::string& input = "") {
  args.insert(args.begin(), {"run", "--preset", "tiny", "--vocab", kVocab, "--backend", "cpu"});
  return gdn(args, input);
}

// The generated token count from the final line.
int generated_tokens(const Result& r) {
  std::smatch m;
  const std::regex line(R"(\| generation: (\d+) tokens in [0-9.]+ s \([0-9.]+ tok/s\))");
  return std::regex_search(r.err, m, line) ? std::stoi(m[1]) : -1;
}

// A copy of the vocabulary file's metadata, edited, as a vocabulary-only GGUF.
fs::path vocab_variant(const std::string& name, const std::function<void(gguf::Metadata&)>& edit) {
  const gguf::File vocab = gguf::File::open(kVocab);
  gguf::Writer w;
  for (const auto& [key, value] : vocab.meta().all()) w.meta().set(key, value);
  edit(w.meta());
  const fs::path path = scratch_dir() / name;
  w.write(path);
  return path;
}

TEST(Tokenize, IdsOnlyMatchesReference) {
  // The first case of ggml-vocab-qwen35.gguf.inp and its line in .out.
  const Result r = gdn({"tokenize", "-m", kVocab, "-p", "ied 4 \u00bd months", "--ids-only"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "1122,220,19,220,26062,3951\n");
}

TEST(Tokenize, SpecialTokensInTextAreSingleIds) {
  const Result r = gdn({"tokenize", "-m", kVocab, "-p", "<|im_start|>user\nHello<|im_end|>"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out,
            "151644 -> '<|im_start|>'\n"
            "   872 -> 'user'\n"
            "   198 -> '\n'\n"
            "  9707 -> 'Hello'\n"
            "151645 -> '<|im_end|>'\n");
}

TEST(Tokenize, ReadsAFileAndAddsNoBos) {
  const fs::path file = scratch_dir() / "text.txt";
  write_file(file, "Hello world");
  const Result r = gdn({"tokenize", "-m", kVocab, "-f", file, "--ids-only"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "9707,1879\n");
}

TEST(Tokenize, GgufWithoutTokenizerIsAClearError) {
  const fs::path bare = vocab_variant("bare.gguf", [](gguf::Metadata& m) {
    const gguf::Metadata all = m;
    for (const auto& [key, value] : all.all()) {
      if (key.starts_with("tokenizer.")) m.erase(key);
    }
  });
  const Result r = gdn({"tokenize", "-m", bare, "-p", "hi"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no tokenizer in this GGUF"), std::string::npos) << r.err;

  const Result run = gdn({"run", "--preset", "tiny", "--backend", "cpu", "-p", "hi"});
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("no tokenizer in this GGUF"), std::string::npos) << run.err;
}

TEST(Run, SameSeedSameTextOtherSeedOtherText) {
  auto sample = [](const std::string& seed) {
    const Result r =
        run_tiny({"-p", "Once upon a time", "-n", "8", "--seed", seed, "--temp", "0.8"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(generated_tokens(r), 8) << r.err;
    return r.out;
  };
  const std::string a = sample("3");
  EXPECT_EQ(sample("3"), a);
  EXPECT_NE(sample("4"), a);
}

TEST(Run, ObeysTokenLimit) {
  for (const int n : {1, 5}) {
    const Result r = run_tiny({"-p", "Hello", "-n", std::to_string(n), "--temp", "0"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(generated_tokens(r), n) << r.err;
  }
}

TEST(Run, StopStringCutsTheOutput) {
  const Result full = run_tiny({"-p", "Hello", "-n", "24", "--temp", "0"});
  ASSERT_EQ(full.status, 0) << full.err;
  const std::string text = full.out.substr(0, full.out.size() - 1);  // less the final newline
  ASSERT_GT(text.size(), 40u);
  // Twelve bytes from the middle: longer than most tokens, so the string spans some.
  const std::string stop = text.substr(text.size() / 2, 12);
  const Result cut = run_tiny({"-p", "Hello", "-n", "24", "--temp", "0", "--stop", stop});
  ASSERT_EQ(cut.status, 0) << cut.err;
  EXPECT_EQ(cut.out, text.substr(0, text.find(stop)) + "\n");
  EXPECT_LT(generated_tokens(cut), 24);
}

// Each "prompt text:" line of --print-prompt, decoded.
std::vector<std::string> printed_prompts(const std::string& err) {
  std::vector<std::string> prompts;
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("prompt text: ")) {
      prompts.push_back(nlohmann::json::parse(line.substr(13)).get<std::string>());
    }
  }
  return prompts;
}

// The replies of an interactive session: "> " before each, a newline after.
std::vector<std::string> replies(std::string out) {
  std::vector<std::string> r;
  EXPECT_TRUE(out.starts_with("> ") && out.ends_with("\n> \n")) << out;
  out = out.substr(2, out.size() - 2 - 4);
  for (size_t pos = 0;;) {
    const size_t next = out.find("\n> ", pos);
    r.push_back(out.substr(pos, next - pos));
    if (next == std::string::npos) return r;
    pos = next + 3;
  }
}

TEST(Run, ChatFormatsEveryTurnWithFormatChat) {
  const std::string system = "You are terse.";
  const std::vector<std::string> users = {"Hi there!", "What is 2+2?", "  And 3+3?  "};
  const Result r = run_tiny({"-i", "--system", system, "-n", "6", "--temp", "0", "--print-prompt"},
                            users[0] + "\n" + users[1] + "\n" + users[2] + "\n");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> said = replies(r.out);
  const std::vector<std::string> prompts = printed_prompts(r.err);
  ASSERT_EQ(said.size(), 3u) << r.out;
  ASSERT_EQ(prompts.size(), 3u) << r.err;

  std::vector<text::ChatMessage> messages = {{"system", system, {}}};
  for (size_t turn = 0; turn < 3; ++turn) {
    messages.push_back({"user", users[turn], {}});
    EXPECT_EQ(prompts[turn], text::format_chat(messages, {})) << "turn " << turn;
    messages.push_back({"assistant", said[turn], {}});
  }
  EXPECT_EQ(generated_tokens(r), 18) << r.err;

  // The state carried between turns is the rendering itself: the whole last prompt fed to a
  // fresh model at once gives the same reply.
  const Result fresh = run_tiny({"-p", prompts[2], "-n", "6", "--temp", "0"});
  ASSERT_EQ(fresh.status, 0) << fresh.err;
  EXPECT_EQ(fresh.out, said[2] + "\n");
}

TEST(Run, ChatWithoutThinkingAndOneTurn) {
  const Result r =
      run_tiny({"--chat", "-p", "Hi", "--no-think", "-n", "2", "--temp", "0", "--print-prompt"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> prompts = printed_prompts(r.err);
  ASSERT_EQ(prompts.size(), 1u) << r.err;
  EXPECT_EQ(prompts[0], text::format_chat({{"user", "Hi", {}}}, {true, false}));
}

TEST(Run, WarnsOnlyWhenTheFileHasAnotherChatTemplate) {
  const std::string warning = "warning: the model's chat template is not the Qwen3.5 one";
  auto chat_stderr = [](const std::string& vocab) {
    const Result r = gdn({"run", "--preset", "tiny", "--vocab", vocab, "--backend", "cpu", "--chat",
                          "-p", "Hi", "-n", "1"});
    EXPECT_EQ(r.status, 0) << r.err;
    return r.err;
  };
  // The shared vocabulary file carries a generic ChatML template.
  EXPECT_NE(chat_stderr(kVocab).find(warning), std::string::npos);
  const fs::path qwen35 = vocab_variant("qwen35_template.gguf", [](gguf::Metadata& m) {
    const std::string jinja =
        std::string(GDN_SHARED_DIR) + "/data/vocab/qwen3.5-chat-template.jinja";
    m.set("tokenizer.chat_template", gguf::Value::str(read_file(jinja)));
  });
  EXPECT_EQ(chat_stderr(qwen35).find(warning), std::string::npos);
}

// gdn ops never passes quietly when it checked nothing: a build without CUDA, a machine without
// a GPU and a filter that selects no op each end it non-zero, naming which.
TEST(Ops, ExitsNonZeroNamingWhyNothingWasChecked) {
  const Result r = gdn({"ops", "--op", "no_such_op"});
  EXPECT_NE(r.status, 0);
  const std::string said = r.out + r.err;
  const bool named = said.find("needs the CUDA backend") != std::string::npos ||
                     said.find("needs a CUDA GPU") != std::string::npos ||
                     said.find("no op matches 'no_such_op'") != std::string::npos;
  EXPECT_TRUE(named) << said;
}

TEST(Synth, VocabSetsTheVocabularySize) {
  const fs::path out = scratch_dir() / "tiny_vocab.gguf";
  const Result r = gdn({"synth", "--preset", "tiny", "--vocab", kVocab, "-o", out});
  ASSERT_EQ(r.status, 0) << r.err;
  const gguf::File f = gguf::File::open(out);
  EXPECT_EQ(f.tensor("token_embd.weight").ne[1], 151936);
  EXPECT_EQ(f.meta().get_string("tokenizer.ggml.pre"), "qwen35");
  // And the written file runs.
  const Result run = gdn({"run", "-m", out, "--backend", "cpu", "-p", "Hi", "-n", "3"});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(generated_tokens(run), 3) << run.err;
}

// gdn eval end to end: the logits file holds [n_ids][n_vocab] f32, prefill and decode write the
// same bytes and continue with the same greedy ids (the CPU's per-token arithmetic is the same in
// both modes). --compare against the same backend is exact by construction: it checks the
// comparison runs and reports, not a tolerance.
TEST(Eval, PrefillAndDecodeWriteTheSameLogitsAndContinuation) {
  std::string logits[2], greedy[2];
  for (const bool decode : {false, true}) {
    const fs::path out = scratch_dir() / (decode ? "decode.bin" : "prefill.bin");
    const Result r = gdn({"eval", "--preset", "tiny", "--backend", "cpu", "--ids", "1,2,3",
                          "--mode", decode ? "decode" : "prefill", "--greedy", "3", "--compare",
                          "cpu", "--logits-out", out.string()});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("argmax equal at 3/3 positions"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("worst max|d|/max|logit| 0 "), std::string::npos) << r.out;
    std::smatch ids;
    ASSERT_TRUE(std::regex_search(r.out, ids, std::regex(R"((^|\n)(\d+,\d+,\d+)\n)"))) << r.out;
    greedy[decode] = ids[2];
    logits[decode] = read_file(out);
    EXPECT_EQ(logits[decode].size(), 3u * 2048u * sizeof(float));
  }
  EXPECT_EQ(greedy[0], greedy[1]);
  EXPECT_TRUE(logits[0] == logits[1]);
}

// gdn convert on a committed HF fixture: the GGUF it writes runs through gdn eval.
TEST(Convert, FixtureConvertsAndRuns) {
  const std::string fixture = std::string(GDN_SOURCE_DIR) + "/tests/fixtures/hf_tiny_eq";
  const fs::path out = scratch_dir() / "hf_tiny_eq.gguf";
  const Result c = gdn({"convert", fixture, "-o", out.string(), "--type", "q8_0"});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.err.find("vocab=512"), std::string::npos) << c.err;
  const Result e = gdn({"eval", "-m", out.string(), "--ids", "1,2,3", "--backend", "cpu"});
  ASSERT_EQ(e.status, 0) << e.err;
  EXPECT_NE(e.err.find("512 logits per token"), std::string::npos) << e.err;
  const Result bad = gdn({"convert", fixture, "-o", out.string(), "--type", "q9"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("'q9'"), std::string::npos) << bad.err;
}

// Bad arguments end with an exit status and a message naming the problem, never a signal (an
// uncaught exception aborts: a missing model file once did).
TEST(Cli, BadArgumentsAreRefusedByName) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", "-m", (scratch_dir() / "missing.gguf").string(), "-p", "x"}, "missing.gguf"},
      {{"eval", "-m", scratch_dir().string(), "--ids", "1"}, scratch_dir().string()},
      {{"eval", "--preset", "tiny", "--ids", "1", "--greedy", "-2"}, "--greedy"},
      {{"eval", "--preset", "tiny", "--ids", "1,,2"}, "entry 1"},
      {{"bench", "--preset", "tiny", "-r", "0"}, "--reps"},
      {{"bench", "--preset", "tiny", "--rounds", "0"}, "--rounds"},
      {{"bench", "--preset", "tiny", "-p", "-1"}, "--n-prompt"},
      {{"bench", "--preset", "tiny", "-n", "-1"}, "--n-gen"},
      {{"run", "--preset", "tiny", "--vocab", kVocab, "-p", "x", "-c", "0"}, "context (-c)"},
      {{"eval", "--preset", "tiny", "--ids", "1", "-c", "9000000000000000000"}, "context (-c)"},
      {{"eval", "--preset", "tiny", "--ids", "1", "-t", "100000"}, "threads (-t)"},
      {{"synth", "--preset", "tiny", "--type", "q3_k", "-o", "x.gguf"}, "q3_k"},
      {{"eval", "--preset", "tiny", "--backend", "foo", "--ids", "1"}, "'foo' (known: auto, cpu"},
  };
  for (const auto& [args, named] : cases) {
    const Result r = gdn(args);
    const std::string line = fmt::format("gdn {}", fmt::join(args, " "));
    EXPECT_GT(r.status, 0) << line << " ended with a signal or passed\n" << r.err;
    EXPECT_NE(r.err.find(named), std::string::npos) << line << ": " << r.err;
    // main's last-resort catch keeps a stray exception from aborting; it must not be what
    // reports these.
    EXPECT_EQ(r.err.find("(unexpected)"), std::string::npos) << line << ": " << r.err;
  }
}

}  // namespace
}  // namespace gdn

namespace gdn {
namespace {

// gdn bench on the CPU with the tiny model: small enough for CI, the same code paths.
Result bench_tiny(std::vector<std::string> args) {
  args.insert(args.begin(), {"bench", "--backend", "cpu", "-p", "4", "-n", "4", "-r", "1",
                             "--rounds", "1", "-t", "1"});
  return gdn(args);
}

TEST(Bench, JsonRowsCarryDispatchesPerOp) {
  const Result r = bench_tiny({"-o", "json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_GT(row["tok_s"].get<double>(), 0.0);
    EXPECT_EQ(row["rungs"],
              "state-inplace,state-write-fused,gating-fused,l2norm-fused,"
              "conv-inplace,norm-gemv-fused,graphs");
    double sum = 0.0;
    for (const auto& [op, n] : row["dispatches_by_op"].items()) sum += n.get<double>();
    EXPECT_DOUBLE_EQ(sum, row["dispatches_per_token"].get<double>()) << row.dump();
  }
}

// The README's main job prints llama-bench's markdown table (a row per test) and, with -v, the
// dispatches per token by op kind of each test.
TEST(Bench, MarkdownTableAndDispatchBreakdown) {
  const Result r = bench_tiny({"-v"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("| model | backend | rungs | test | tok/s | Δ vs baseline | dispatches/tok "
                       "| MB/tok | GB/s | % roofline |"),
            std::string::npos)
      << r.out;
  for (const char* test : {"pp4", "tg4"}) {
    EXPECT_NE(r.out.find(fmt::format(" | {} | ", test)), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(fmt::format(" {}: ", test)), std::string::npos) << r.out;
  }
  EXPECT_NE(r.out.find("dispatches per token by op:"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("roofline:"), std::string::npos) << "no roofline line on the CPU";
}

// One row per rung added, per rung alone, and the reduced states on top: 1 + 7 + 9 + 2
// configurations, each with pp and tg; the baseline's dispatches minus all rungs' equal the
// sum of what each rung removes alone (additivity, on the CPU's step counts), plus the one
// interaction: with norm-gemv-fused, conv-inplace's conv steps run in the qkv GEMV's epilogue.
TEST(Bench, LadderHasEveryConfigurationAndAdditiveRemovals) {
  const Result r = bench_tiny({"--ladder", "-o", "json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u * 19u);
  std::map<std::string, double> tg;
  double conv_steps = 0.0;
  for (const auto& row : rows) {
    if (row["test"] != "tg4") continue;
    tg[row["config"]] = row["dispatches_per_token"].get<double>();
    if (row["config"] == "conv-inplace alone") {
      conv_steps = row["dispatches_by_op"].at("conv_step").get<double>();
    }
  }
  EXPECT_GT(conv_steps, 0.0);
  const double base = tg.at("baseline (none)"), all = tg.at("+ graphs");
  double removed = 0.0;
  for (const char* rung : {"state-inplace", "state-write-fused", "gating-fused", "l2norm-fused",
                           "conv-inplace", "norm-gemv-fused", "graphs"}) {
    removed += base - tg.at(fmt::format("{} alone", rung));
  }
  EXPECT_DOUBLE_EQ(base - all, removed + conv_steps);
}

TEST(Bench, NullDispatchesAreCountedAndFitted) {
  const Result r = gdn({"bench", "--backend", "cpu", "-p", "0", "-n", "4", "-r", "1", "--rounds",
                        "1", "-t", "1", "--null-dispatches", "0,50"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("fit with graphs:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fit without graphs:"), std::string::npos) << r.out;
}

TEST(Bench, TimelineOnTheCpuIsRefusedWithTheReason) {
  const Result r = bench_tiny({"--timeline"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("the cpu backend has no dispatch timeline"), std::string::npos) << r.err;
}

TEST(Bench, FloorOnTheCpuIsRefusedWithTheReason) {
  const Result r = bench_tiny({"--floor"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--floor runs on the GPU (the cpu backend was chosen)"), std::string::npos)
      << r.err;
}

// --floor-fold names the op it does not know, and means nothing without --floor.
TEST(Bench, FloorFoldRefusesAnUnknownOpAndNeedsFloor) {
  Result r = bench_tiny({"--floor", "--floor-fold", "gdn_recurrence,atention"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("unknown op 'atention'"), std::string::npos) << r.err;
  r = bench_tiny({"--floor-fold", "gdn_recurrence"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--floor-fold prices a structure for --floor"), std::string::npos) << r.err;
}

// The ladder issue's contract: `gdn bench --help` names every rung.
TEST(Bench, HelpListsEveryRung) {
  const Result r = gdn({"bench", "--help"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* rung :
       {"state-inplace", "state-write-fused", "gating-fused", "l2norm-fused", "conv-inplace",
        "norm-gemv-fused", "graphs", "state-f16", "state-bf16"}) {
    EXPECT_NE(r.out.find(rung), std::string::npos) << rung << " missing from:\n" << r.out;
  }
}

TEST(Bench, UnknownRungIsRefusedByName) {
  const Result r = bench_tiny({"--rungs", "all,state-inplce"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("'state-inplce'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gdn
