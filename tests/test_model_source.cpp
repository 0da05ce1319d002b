// What the commands share (app/model_source.h): their model options, loading a model from a
// file or a preset onto a backend, the tokenizer of a GGUF, and load progress on stderr.
#include "app/model_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <vector>

#include "error_of.h"

namespace gdn::app {
namespace {

using testing::error_of;
namespace fs = std::filesystem;

const std::string kVocab = std::string(GDN_SHARED_DIR) + "/data/vocab/ggml-vocab-qwen35.gguf";
constexpr uint64_t kGiB = uint64_t{1} << 30;

ModelArgs cpu_args() {
  ModelArgs a;
  a.backend = "cpu";
  a.threads = 2;
  a.n_ctx = 64;
  return a;
}

// Parses argv (without the program name) into args through add_model_options.
void parse(ModelArgs& args, std::vector<std::string> argv,
           const std::string& seed_flag = "--seed") {
  CLI::App app;
  add_model_options(app, args, seed_flag);
  argv.insert(argv.begin(), "gdn");
  std::vector<const char*> c;
  for (const std::string& s : argv) c.push_back(s.c_str());
  app.parse(static_cast<int>(c.size()), c.data());
}

TEST(ModelOptions, FlagsFillTheArgs) {
  ModelArgs a;
  parse(a, {"--preset", "tiny", "--type", "q1_0", "--seed", "7", "--backend", "cpu", "-t", "3",
            "-c", "128", "--rungs", "none"});
  EXPECT_EQ(a.preset, "tiny");
  EXPECT_EQ(a.type, "q1_0");
  EXPECT_EQ(a.seed, 7u);
  EXPECT_EQ(a.backend, "cpu");
  EXPECT_EQ(a.threads, 3);
  EXPECT_EQ(a.n_ctx, 128);
  EXPECT_EQ(a.rungs, "none");
}

TEST(ModelOptions, SeedFlagCanBeRenamedAndPresetsAreChecked) {
  ModelArgs a;
  parse(a, {"--model-seed", "9"}, "--model-seed");
  EXPECT_EQ(a.seed, 9u);
  ModelArgs b;
  EXPECT_THROW(parse(b, {"--seed", "9"}, "--model-seed"), CLI::ParseError);
  EXPECT_THROW(parse(b, {"--preset", "no-such-model"}), CLI::ParseError);
  EXPECT_THROW(parse(b, {"-m", "x.gguf", "--vocab", kVocab}), CLI::ParseError);  // excluded
}

TEST(LoadModel, DefaultPresetOnTheChosenBackend) {
  const LoadedModel lm = load_model(cpu_args(), "tiny");
  ASSERT_NE(lm.synthetic, nullptr);
  EXPECT_EQ(lm.file_model, nullptr);
  EXPECT_EQ(lm.model, &lm.synthetic->model);
  EXPECT_EQ(lm.label, "synthetic tiny q8_0");
  EXPECT_EQ(lm.model->hp.n_vocab, synth::preset("tiny").n_vocab);
  ASSERT_NE(lm.exec, nullptr);
  EXPECT_TRUE(lm.exec->name().starts_with("cpu")) << lm.exec->name();
}

TEST(LoadModel, PresetAndTypeOverrideTheDefault) {
  ModelArgs a = cpu_args();
  a.preset = "tiny";
  a.type = "q1_0";
  const LoadedModel lm = load_model(a, "bonsai-27b");
  EXPECT_EQ(lm.label, "synthetic tiny q1_0");
}

TEST(LoadModel, AFileIsLoadedAndLabelledByItsPath) {
  synth::Options o;
  o.type = quant::Type::Q8_0;
  gguf::Writer w;
  synth::add_model(w, synth::preset("tiny"), o);
  const fs::path path =
      fs::temp_directory_path() / ("gdn_model_source_" + std::to_string(getpid()) + ".gguf");
  w.write(path);
  ModelArgs a = cpu_args();
  a.path = path;
  {
    const LoadedModel lm = load_model(a, "tiny");
    EXPECT_EQ(lm.synthetic, nullptr);
    ASSERT_NE(lm.file_model, nullptr);
    EXPECT_EQ(lm.model, lm.file_model.get());
    EXPECT_EQ(lm.label, path.string());
    const std::vector<int32_t> ids = {1, 2, 3};
    EXPECT_EQ(lm.exec->forward_view(ids, 0, false).size(), size_t(lm.model->hp.n_vocab));
  }
  fs::remove(path);
}

TEST(LoadModel, BadArgumentsAreRefusedByName) {
  ModelArgs missing = cpu_args();
  missing.path = "/nonexistent/model.gguf";
  EXPECT_NE(error_of([&] { load_model(missing, "tiny"); }).find("/nonexistent/model.gguf"),
            std::string::npos);
  ModelArgs ctx = cpu_args();
  ctx.n_ctx = 0;
  EXPECT_NE(error_of([&] { load_model(ctx, "tiny"); }).find("-c"), std::string::npos);
  ModelArgs rungs = cpu_args();
  rungs.rungs = "all,no-such-rung";
  EXPECT_NE(error_of([&] { load_model(rungs, "tiny"); }).find("no-such-rung"), std::string::npos);
  ModelArgs backend = cpu_args();
  backend.backend = "tpu";
  EXPECT_NE(error_of([&] { load_model(backend, "tiny"); }).find("tpu"), std::string::npos);
  ModelArgs type = cpu_args();
  type.type = "q3_z";
  EXPECT_NE(error_of([&] { load_model(type, "tiny"); }).find("q3_z"), std::string::npos);
}

TEST(SynthOptions, VocabCarriesItsTokenizer) {
  const synth::Options o = synth_options("q1_0", 5, kVocab, "test");
  EXPECT_EQ(o.type, quant::Type::Q1_0);
  EXPECT_EQ(o.seed, 5u);
  ASSERT_NE(o.tokenizer, nullptr);
  EXPECT_TRUE(o.tokenizer->has("tokenizer.ggml.tokens"));
  EXPECT_TRUE(static_cast<bool>(o.progress));
  EXPECT_EQ(synth_options("q8_0", 1, "", "test").tokenizer, nullptr);
}

TEST(TokenizerOf, EncodesWithTheFilesVocabularyAndNamesAFileWithout) {
  const gguf::File vocab = gguf::File::open(kVocab);
  const text::Tokenizer tok = tokenizer_of(vocab.meta(), kVocab);
  EXPECT_GT(tok.n_vocab(), 100000u);
  EXPECT_FALSE(tok.encode("hello world").empty());

  gguf::Metadata bare;
  bare.set("general.architecture", gguf::Value::str("qwen35"));
  const std::string err = error_of([&] { tokenizer_of(bare, "bare.gguf"); });
  EXPECT_NE(err.find("bare.gguf"), std::string::npos) << err;
  EXPECT_NE(err.find("no tokenizer"), std::string::npos) << err;
}

// stderr of the updates (stderr is a file under CaptureStderr, so the per-quarter log lines).
std::string progress_lines(uint64_t total, const std::vector<uint64_t>& done) {
  ::testing::internal::CaptureStderr();
  Progress p("loading", "m.gguf");
  for (uint64_t d : done) p.update(d, total);
  return ::testing::internal::GetCapturedStderr();
}

TEST(Progress, SmallJobsPrintNothing) {
  EXPECT_EQ(progress_lines(kGiB, {0, kGiB / 2, kGiB}), "");
}

TEST(Progress, LogsALinePerQuarterAndTheTimeAtTheEnd) {
  const uint64_t total = 4 * kGiB;
  const std::string err = progress_lines(total, {0, total / 10, total / 4, total * 3 / 10,
                                                 total / 2, total / 2, total * 3 / 4, total});
  const std::regex want(
      "loading m\\.gguf: 0% of 4\\.00 GiB\n"
      "loading m\\.gguf: 25% of 4\\.00 GiB\n"
      "loading m\\.gguf: 50% of 4\\.00 GiB\n"
      "loading m\\.gguf: 75% of 4\\.00 GiB\n"
      "loading m\\.gguf: 100% of 4\\.00 GiB in [0-9]+\\.[0-9] s\n");
  EXPECT_TRUE(std::regex_match(err, want)) << err;
}

}  // namespace
}  // namespace gdn::app
