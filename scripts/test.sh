#!/usr/bin/env bash
# Builds gdn.cpp and runs every test: the normal build, then the GGUF parser's fuzz test
# again under AddressSanitizer. GPU tests skip (visibly) on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure -j "$jobs")

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGDN_SANITIZE=ON \
  -DGDN_CUDA=OFF >/dev/null
cmake --build build-asan -j "$jobs" --target test_gguf
(cd build-asan && ctest --output-on-failure -j "$jobs" -R '^(GgufFuzz|Gguf)')
