#!/usr/bin/env bash
# Builds the CUDA binaries here for the GPU machine (which has no Debian -dev packages):
# fmt header-only, utf8proc and libstdc++ static, cudart static; only the sm_90a code that
# machine runs (GDN_SM90A_ONLY: gdn.cu 49 s instead of 87). Output: build-cuda/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DGDN_PORTABLE=ON -DGDN_SM90A_ONLY=ON >/dev/null
cmake --build build-cuda -j "$(nproc)" --target gdn test_cuda_backend "$@"
