#!/usr/bin/env python3
"""Per-kernel table of a decode step from `scripts/device.sh profile` (ncu's CSV of
gpu__time_duration.sum, one row per kernel launch, kernels run one at a time).

  scripts/profile_table.py PROFILE.log [--dispatches N]

N is the decode step's dispatches per token, as `gdn bench` prints it (Bonsai-27B with every
exact rung: 340 since the qkv steps fold beta and alpha in): the launches in the log are divided
by it to give launches and time per token. N = 0: totals over the whole log (a prefill profile:
one row of launches is not a token). Kernels are grouped by name (template arguments kept,
parameters dropped) and launch shape, largest total first.
"""
import argparse
import collections
import csv
import re
import sys


def launches(path):
    """(kernel name, grid, block, ns) per profiled launch, in order."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if len(r) > 10 and r[0].isdigit()]
    for r in rows:
        if r[-3] != "gpu__time_duration.sum":
            sys.exit(f"{path}: expected gpu__time_duration.sum rows, got {r[-3]!r}")
        name = re.sub(r"<?unnamed>::", "", re.sub(r"\(.*", "", r[4].replace("void ", "")))
        yield name, r[8], r[7], float(r[-1].replace(",", ""))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log")
    p.add_argument("--dispatches", type=int, required=True,
                   help="dispatches per token (0: totals over the log)")
    args = p.parse_args()
    total = collections.defaultdict(float)
    count = collections.Counter()
    for name, grid, block, ns in launches(args.log):
        key = (name, grid, block)
        total[key] += ns
        count[key] += 1
    if not count:
        sys.exit(f"{args.log}: no profiled launches")
    tokens = sum(count.values()) / args.dispatches if args.dispatches > 0 else 1.0
    all_ns = sum(total.values())
    per = "per token" if args.dispatches > 0 else "in all (columns 'per token': the whole log)"
    print(f"{sum(count.values())} launches = {tokens:.2f} tokens; kernel time {per} "
          f"{all_ns / tokens / 1e3:.1f} us (each kernel alone: no overlap between launches)")
    print(f"| kernel | grid | block | per token | us each | us per token | share |")
    print("|---|---|---|---:|---:|---:|---:|")
    for key, ns in sorted(total.items(), key=lambda kv: -kv[1]):
        n = count[key]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {n / tokens:.1f} | {ns / n / 1e3:.2f} | "
              f"{ns / tokens / 1e3:.1f} | {100 * ns / all_ns:.1f}% |")


if __name__ == "__main__":
    main()
