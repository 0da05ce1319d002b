#!/usr/bin/env python3
"""Where a kernel's warps stall, from `ncu --page source --print-source sass --csv` output
(scripts/device.sh's ncu steps): for every profiled launch, its warp instructions and
stall-sample shares by reason, then its hottest straight runs of SASS (contiguous
instructions executed equally often) with their samples and instruction-fetch stalls.

    scripts/ncu_stalls.py ncudecode-source.log [--runs N]

Instruction fetch (no_inst) samples that sit at the first instruction of a run are jump
targets the fetch unit did not have ready (bench/RESULTS.md, 2026-12-06)."""
import argparse
import collections
import csv
import sys


def launches(path):
    """The CSV's launches: (header, rows) each, in file order."""
    out = []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                out.append([None, []])
            elif row[0] == "Address" and out:
                out[-1][0] = row
            elif out and out[-1][0] is not None:
                out[-1][1].append(row)
    return [(h, rows) for h, rows in out if h is not None and rows]


def number(row, col):
    try:
        return int(row[col])
    except (ValueError, IndexError):
        return 0


def report(header, rows, n_runs):
    col = {name: i for i, name in enumerate(header)}
    reasons = [n for n in header if n.startswith("stall_") and "Not Issued" not in n]
    executed = col["Instructions Executed"]
    totals = collections.Counter()
    for r in rows:
        for n in reasons:
            totals[n[6:]] += number(r, col[n])
    samples = sum(totals.values()) or 1
    instructions = sum(number(r, executed) for r in rows)
    print(f"{instructions} warp instructions, {samples} stall samples: " +
          ", ".join(f"{k} {100 * v / samples:.1f}%" for k, v in totals.most_common(8)))
    base = int(rows[0][0], 16)
    runs = []  # [first offset, instructions, times executed, samples, no_inst, first SASS]
    for r in rows:
        off, times = int(r[0], 16) - base, number(r, executed)
        s, fetch = sum(number(r, col[n]) for n in reasons), number(r, col["stall_no_inst"])
        if runs and runs[-1][2] == times and runs[-1][0] + 16 * runs[-1][1] == off:
            runs[-1][1] += 1
            runs[-1][3] += s
            runs[-1][4] += fetch
        else:
            runs.append([off, 1, times, s, fetch, r[1].strip()[:48]])
    print("  offset   instrs  executed  samples  no_inst  first instruction")
    for off, n, times, s, fetch, first in sorted(runs, key=lambda x: -x[3])[:n_runs]:
        print(f"  {off:#8x} {n:6d} {times:9d} {s:8d} {fetch:8d}  {first}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv")
    p.add_argument("--runs", type=int, default=12, help="hottest runs shown per launch")
    a = p.parse_args()
    found = launches(a.csv)
    if not found:
        sys.exit(f"ncu_stalls.py: no source page with a header in {a.csv}")
    seen = set()
    for i, (header, rows) in enumerate(found):
        key = tuple(tuple(r) for r in rows[:64]) + (len(rows),)
        if key in seen:  # ncu prints some pages twice
            continue
        seen.add(key)
        print(f"== launch {len(seen)} (page {i + 1})")
        report(header, rows, a.runs)


if __name__ == "__main__":
    main()
