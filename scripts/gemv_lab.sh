#!/usr/bin/env bash
# The Q1_0 GEMV lab (bench/gemv_lab.cu) on the GPU machine: every variant checked against the
# CPU reference, then timed against the copy bandwidth and a same-size streaming-read ceiling;
# the summary table comes last. Takes well under two minutes on an H200.
#
#   scripts/gemv_lab.sh [path/to/gemv_lab]
#
# Default binary: build-cuda/bench/gemv_lab (configure and build it here first with
# `scripts/build_portable.sh gemv_lab`, and
# carry build-cuda to the GPU machine). With $OUT set, also writes there: gemv_lab.log,
# sass_q1.txt (the SASS of the Q1_0 kernels) and sass_q1_counts.txt (instructions per kernel,
# by opcode: how many per BMMA / DP4A, i.e. per 2048 / 4 weights of a row tile).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build-cuda/bench/gemv_lab}
[ -x "$bin" ] || { echo "gemv_lab.sh: no binary at $bin (build the gemv_lab target)" >&2; exit 2; }

if [ -n "${OUT:-}" ] && command -v cuobjdump >/dev/null; then
  # Functions of interest: the Q1_0 product and quantise kernels.
  cuobjdump --dump-sass "$bin" |
    awk '/Function :/ { keep = ($0 ~ /q1_kernel|q1_quantize/) } keep' >"$OUT/sass_q1.txt" || true
  awk '
    /Function :/ { name = $3; order[++n] = name; next }
    /\/\*[0-9a-f]+\*\// {
      line = $0; sub(/^[^*]*\*\/[ \t]*/, "", line); sub(/^@!?U?P[T0-9]+[ \t]+/, "", line)
      split(line, f, /[ .;]/); op = f[1]; if (op == "") next
      total[name]++; count[name, op]++
    }
    END {
      for (i = 1; i <= n; i++) {
        k = order[i]; s = ""
        for (key in count) { split(key, p, SUBSEP); if (p[1] == k) s = s " " p[2] "=" count[key] }
        printf "%s: %d instructions;%s\n", k, total[k], s
      }
    }' "$OUT/sass_q1.txt" >"$OUT/sass_q1_counts.txt" || true
  "$bin" 2>&1 | tee "$OUT/gemv_lab.log"
else
  "$bin"
fi
