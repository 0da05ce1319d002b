#!/usr/bin/env bash
# The main job: builds gdn.cpp and runs `gdn bench` (pass a model with -m; with none it runs
# the built-in synthetic model). Extra arguments go to `gdn bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target gdn
build/src/app/gdn bench "$@"
