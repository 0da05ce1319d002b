#!/usr/bin/env bash
# Regenerates the HF reference fixtures and checks what was written. Run from anywhere on a
# machine with torch 2.11 + transformers 5.17 (no network needed):
#   scripts/make_hf_fixture_check.sh [OUT_DIR]        (default: tests/fixtures)
# If a gdn binary is built (build*/src/app/gdn), each fixture is also converted to f32 and
# q1_0 GGUFs in a temporary directory, which exercises the converter on real HF output.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-tests/fixtures}

python3 scripts/make_hf_fixture.py --out "$out"

gdn=$(ls build*/src/app/gdn 2>/dev/null | head -n 1 || true)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for name in hf_tiny_gqa3 hf_tiny_eq; do
  dir="$out/$name"
  for f in config.json model.safetensors reference.json logits_prefill.f32 logits_decode.f32; do
    [[ -s "$dir/$f" ]] || { echo "missing or empty: $dir/$f" >&2; exit 1; }
  done
  # [T][vocab] float32 from reference.json's logits_shape.
  want=$(python3 -c "import json,sys; t,v=json.load(open(sys.argv[1]))['logits_shape']; print(4*t*v)" \
    "$dir/reference.json")
  for f in logits_prefill.f32 logits_decode.f32; do
    got=$(stat -c %s "$dir/$f")
    [[ "$got" == "$want" ]] || { echo "$dir/$f: $got bytes, expected $want" >&2; exit 1; }
  done
  du -sh "$dir"
  if [[ -n "$gdn" ]]; then
    for type in f32 q1_0; do
      "$gdn" convert "$dir" -o "$tmp/$name.$type.gguf" --type "$type"
    done
  fi
done
[[ -n "$gdn" ]] || echo "no gdn binary found: skipped the conversion check"
echo "fixtures OK in $out"
