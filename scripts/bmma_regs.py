#!/usr/bin/env python3
"""Lists the BMMA instructions of the kernels in an sm_90 cubin with their registers, to check
without a GPU (or a disassembler: this machine has none) how ptxas scheduled a GEMV's dot loop.

Why: the one-launch Q1_0 GEMV's speed has followed ptxas' register choices around its BMMAs
(bench/RESULTS.md, 2026-12-05: with one register for the B operand of a chunk's first two
BMMAs, the second waits for the first's result to be read; the faster build issues them back
to back). A BMMA is the 128-bit instruction whose low 12 bits are 0x23d; its destination is
bits 16-23 (D = Rd..Rd+3), A bits 24-31, B bits 32-39, as cuobjdump prints them.

Usage: bmma_regs.py KERNEL.cubin [NAME_SUBSTRING]
  (the cubin from nvcc -cubin -gencode=arch=compute_90a,code=sm_90a ...)
Prints, per kernel whose section name holds NAME_SUBSTRING: each BMMA's offset, the
instructions since the previous one, its registers, and "waits" where its B register is one
the previous BMMA wrote (so it cannot issue until that result was read and B reloaded).
Then the offsets of its local-memory stores and loads (STL 0x387, LDL 0x983: ptxas' spills,
found from a probe kernel indexing a local array), marked "in loop" where they lie inside the
innermost loop around the BMMAs (the shortest backward branch spanning them: BRA 0x947, its
signed word offset from the next instruction in bits 16-23 and 34-63, found from a probe
kernel with one loop). A spill outside that loop runs once a launch; one inside, every step.
The loop's bytes are hashed: two builds with the same hash run the same loop, which is worth
checking before timing a change meant to leave it alone (a change that grew it by 52
instructions made every GEMV 1-9% slower: bench/RESULTS.md, 2026-12-05).
"""
import hashlib
import re
import struct
import subprocess
import sys


def text_sections(path):
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m and m.group(1).startswith(".text."):
            yield m.group(1)[len(".text."):], int(m.group(2), 16), int(m.group(3), 16)


def bmmas(code):
    for at in range(0, len(code) - 15, 16):
        lo, = struct.unpack_from("<Q", code, at)
        if lo & 0xFFF == 0x23D:
            yield at, (lo >> 16) & 0xFF, (lo >> 24) & 0xFF, (lo >> 32) & 0xFF


def local_accesses(code):
    names = {0x387: "STL", 0x983: "LDL"}
    for at in range(0, len(code) - 15, 16):
        lo, = struct.unpack_from("<Q", code, at)
        if lo & 0xFFF in names:
            yield at, names[lo & 0xFFF]


def branch_target(at, lo):
    words = ((lo >> 16) & 0xFF) | ((lo >> 34) << 8)
    if words >> 37:
        words -= 1 << 38
    return at + 16 + 4 * words


def dot_loop(code, first, last):
    """The innermost loop [head, back edge] holding the BMMAs at [first, last], or None."""
    best = None
    for at in range(0, len(code) - 15, 16):
        lo, = struct.unpack_from("<Q", code, at)
        if lo & 0xFFF != 0x947:
            continue
        target = branch_target(at, lo)
        if target <= first and at >= last and (best is None or at - target < best[1] - best[0]):
            best = (target, at)
    return best


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path, want = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
    data = open(path, "rb").read()
    for name, off, size in text_sections(path):
        if want not in name:
            continue
        found = list(bmmas(data[off:off + size]))
        if not found:
            continue
        print(f"{name}: {size} bytes, {len(found)} BMMA")
        prev = None
        for at, d, a, b in found:
            gap = "" if prev is None else f"+{(at - prev[0]) // 16:<4d}"
            waits = prev is not None and prev[1] <= b < prev[1] + 4
            print(f"  {at:#07x} {gap:6s} BMMA R{d}, R{a}.ROW, R{b}.COL{'   waits' if waits else ''}")
            prev = (at, d)
        code = data[off:off + size]
        loop = dot_loop(code, found[0][0], found[-1][0])
        if loop:
            digest = hashlib.sha1(code[loop[0]:loop[1] + 16]).hexdigest()[:12]
            print(f"  dot loop: {loop[0]:#07x}-{loop[1]:#07x} "
                  f"({(loop[1] - loop[0]) // 16 + 1} instructions, sha1 {digest})")
        local = [f"{n} {at:#07x}{' in loop' if loop and loop[0] <= at <= loop[1] else ''}"
                 for at, n in local_accesses(code)]
        print(f"  local memory: {', '.join(local) if local else 'none'}")


if __name__ == "__main__":
    main()
