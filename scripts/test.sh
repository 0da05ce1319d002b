#!/usr/bin/env bash
# Builds gdn.cpp and runs every test: the tests of what reads untrusted input (the GGUF parser,
# the tokenizer, the HF converter, the model loader; their fuzz tests included) under
# AddressSanitizer + UBSan first, then the whole suite with CTest. GPU tests skip (visibly) on
# machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGDN_SANITIZE=ON \
  -DGDN_CUDA=OFF >/dev/null
cmake --build build-asan -j "$jobs" --target test_gguf test_tokenizer test_convert test_model_fuzz
# A UBSan report that only prints would let a test pass.
for t in test_gguf test_tokenizer test_convert test_model_fuzz; do
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 build-asan/tests/$t --gtest_brief=1
done

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
cd build && ctest --output-on-failure -j "$jobs"
