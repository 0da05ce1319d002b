// The HF transformers fixtures under tests/fixtures/ (made by scripts/make_hf_fixture.py on
// the GPU machine): prompt ids, transformers' prefill and decode logits, its greedy ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/types.h"

namespace gdn::testing {

struct HfFixture {
  std::string name;
  std::string dir;
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
  std::vector<float> prefill;  // [T][n_vocab]
  std::vector<float> decode;   // [T][n_vocab]
  int64_t n_vocab = 0;
};

HfFixture load_fixture(const std::string& name);
// Converts the fixture with `gdn convert`'s library call into a temp GGUF (once per type).
std::string converted(const HfFixture& fx, quant::Type type);

// max|a - b| / max|b|; NaN/inf in a gives +inf.
double rel_max_diff(const std::vector<float>& a, const std::vector<float>& b);
int32_t argmax(const float* row, int64_t n);

}  // namespace gdn::testing
