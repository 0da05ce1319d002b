#include "hf_fixture.h"

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "convert/hf_convert.h"

namespace gdn::testing {
namespace {

std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open fixture file {}", path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), {});
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// Where this process writes its converted fixtures, removed at exit. ctest runs every test as
// its own process, in parallel: with one shared path per fixture, two processes converting the
// same one renamed each other's temporary file ("cannot rename ... No such file").
const std::filesystem::path& scratch_dir() {
  static const struct Dir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("gdn_test_" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir;
  return dir.path;
}

}  // namespace

HfFixture load_fixture(const std::string& name) {
  HfFixture fx;
  fx.name = name;
  // GDN_SOURCE_DIR in the environment wins: binaries built here also run from another checkout
  // (the GPU machine's copy of the tree).
  const char* root = std::getenv("GDN_SOURCE_DIR");
  fx.dir = std::string(root ? root : GDN_SOURCE_DIR) + "/tests/fixtures/" + name;
  std::ifstream f(fx.dir + "/reference.json");
  if (!f) fail("missing fixture {}/reference.json", fx.dir);
  const nlohmann::json ref = nlohmann::json::parse(f);
  fx.prompt = ref.at("prompt_ids").get<std::vector<int32_t>>();
  fx.greedy = ref.at("greedy_ids").get<std::vector<int32_t>>();
  fx.n_vocab = ref.at("logits_shape").at(1).get<int64_t>();
  fx.prefill = read_f32(fx.dir + "/logits_prefill.f32");
  fx.decode = read_f32(fx.dir + "/logits_decode.f32");
  return fx;
}

std::string converted(const HfFixture& fx, quant::Type type) {
  static std::map<std::string, std::string> done;
  const std::string key = fx.name + "." + std::string(quant::type_info(type).name);
  auto it = done.find(key);
  if (it != done.end()) return it->second;
  const std::string path = (scratch_dir() / (key + ".gguf")).string();
  convert::convert_hf(fx.dir, path, type);
  return done[key] = path;
}

double rel_max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double max_b = 0, max_d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    max_b = std::max(max_b, std::abs(double(b[i])));
    max_d = std::max(max_d, std::abs(double(a[i]) - double(b[i])));
  }
  return max_d / max_b;
}

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

}  // namespace gdn::testing
