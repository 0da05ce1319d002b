#!/usr/bin/env bash
# Builds gdn.cpp and runs every test: the GGUF parser's, the tokenizer's and the model loader's
# tests (their fuzz tests included) under AddressSanitizer + UBSan first, then the whole suite
# with CTest. GPU tests skip (visibly) on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGDN_SANITIZE=ON \
  -DGDN_CUDA=OFF >/dev/null
cmake --build build-asan -j "$jobs" --target test_gguf test_tokenizer test_model_fuzz
build-asan/tests/test_gguf --gtest_brief=1
build-asan/tests/test_tokenizer --gtest_brief=1
build-asan/tests/test_model_fuzz --gtest_brief=1

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
cd build && ctest --output-on-failure -j "$jobs"
