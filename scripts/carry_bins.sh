#!/usr/bin/env bash
# Packs what a scripts/device.sh call runs into .carry/bins.tar.xz, for the device tool's
# `carry: [".carry"]` (its limit is 64 MiB; the build directories are far larger): this
# checkout's binaries, built by build_portable.sh, stripped; and, for side-by-side timing in
# one call, a baseline's and variants' `gdn` (and lab), each built from its commit in a
# worktree of its own with the same compiler.
#
#   scripts/carry_bins.sh [--lab] [--prev REV] [--alt REV] [--also NAME=REV ...]
#
#   --lab           also gemv_lab (device.sh's lab; with --prev, gemv_lab_prev for prevlab)
#   --prev REV      gdn_prev (device.sh's prevtg, prevtimeline, prevbench, ...)
#   --alt REV       gdn_alt (alttg, alttimeline)
#   --also NAME=REV gdn_NAME (tg:NAME, timeline:NAME, bench:NAME); repeatable
#
# A worktree is built the first time and kept under /tmp/gdn-worktrees/<commit>, so a second
# package of the same commit only relinks. Every build goes through ccache, with paths hashed
# relative to its tree, so a worktree recompiles only the files its commit changed (2026-12-07,
# 2 cores: four trees in 12.5 min, most of it the first). A build directory configured before
# keeps its launcher.
set -euo pipefail
cd "$(dirname "$0")/.."

lab=0 prev="" alt="" also=()
while [ $# -gt 0 ]; do
  case "$1" in
    --lab) lab=1 ;;
    --prev) prev=${2:?--prev needs a commit}; shift ;;
    --alt) alt=${2:?--alt needs a commit}; shift ;;
    --also)
      [[ ${2:-} =~ ^[a-z0-9]+=.+$ ]] || { echo "carry_bins.sh: --also needs NAME=REV (NAME: a-z, 0-9)" >&2; exit 2; }
      also+=("$2"); shift ;;
    *) echo "carry_bins.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

# Commits resolved before anything is built, so a typo fails at once.
commit() {
  git rev-parse --verify --quiet "$1^{commit}" || { echo "carry_bins.sh: no commit '$1'" >&2; exit 2; }
}
[ -z "$prev" ] || prev=$(commit "$prev")
[ -z "$alt" ] || alt=$(commit "$alt")
for i in "${!also[@]}"; do also[$i]=${also[$i]%%=*}=$(commit "${also[$i]#*=}"); done

targets=(test_cuda_ladder sync_lab)
[ "$lab" = 1 ] && targets+=(gemv_lab)
pack=$(mktemp -d)
trap 'rm -rf "$pack"' EXIT

scripts/deps.sh ccache

# Builds the checkout at $1 (build_portable.sh: gdn and test_cuda_backend, plus targets);
# quiet unless it fails, then the log's end says why.
build() {
  local log
  log=$(mktemp)
  if ! (cd "$1" && CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CMAKE_CXX_COMPILER_LAUNCHER=ccache \
    CMAKE_CUDA_COMPILER_LAUNCHER=ccache scripts/build_portable.sh "${targets[@]}") >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "carry_bins.sh: the build in $1 failed (its log's end above)" >&2
    exit 1
  fi
  rm -f "$log"
}

# The worktree of commit $1 (a full hash), built; prints its path.
built_worktree() {
  local dir=/tmp/gdn-worktrees/$1
  if [ ! -d "$dir" ]; then
    git worktree prune  # one registered by an earlier session whose /tmp is gone
    git worktree add --quiet --detach "$dir" "$1"
  fi
  build "$dir"
  echo "$dir"
}

build .
cp build-cuda/src/app/gdn build-cuda/tests/test_cuda_backend build-cuda/tests/test_cuda_ladder \
  build-cuda/bench/sync_lab "$pack"/
[ "$lab" = 1 ] && cp build-cuda/bench/gemv_lab "$pack"/
if [ -n "$prev" ]; then
  dir=$(built_worktree "$prev")
  cp "$dir/build-cuda/src/app/gdn" "$pack/gdn_prev"
  [ "$lab" = 1 ] && cp "$dir/build-cuda/bench/gemv_lab" "$pack/gemv_lab_prev"
fi
if [ -n "$alt" ]; then
  dir=$(built_worktree "$alt")
  cp "$dir/build-cuda/src/app/gdn" "$pack/gdn_alt"
fi
for a in "${also[@]}"; do
  dir=$(built_worktree "${a#*=}")
  cp "$dir/build-cuda/src/app/gdn" "$pack/gdn_${a%%=*}"
done
strip "$pack"/*

mkdir -p .carry
tar cf - -C "$pack" . | xz -1 -T2 >.carry/bins.tar.xz
bytes=$(stat -c %s .carry/bins.tar.xz)
limit=$((64 * 1024 * 1024))
if [ "$bytes" -ge "$limit" ]; then
  echo "carry_bins.sh: .carry/bins.tar.xz is $bytes bytes, over the carry limit of $limit" >&2
  exit 1
fi
echo "carry_bins.sh: .carry/bins.tar.xz $((bytes / 1024 / 1024)) MiB: $(ls "$pack" | tr '\n' ' ')"
