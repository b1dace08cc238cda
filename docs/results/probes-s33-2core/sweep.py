"""Paired rounds of ../probes-s32-2core/e1l.c under several preloaded allocators, pinned to one CPU.

usage: sweep.py ROUNDS OPS E1L "lib1 lib2 ..." "SLOTS TOUCH [EXTRA]|..." [CPU]
Each round runs every argument set under every library (libraries shuffled within a set); prints,
per argument set and library, the median M ops/s and the median ratio to lib1 paired by round
with its quartiles.
"""
import random
import statistics
import subprocess
import sys

rounds, ops, e1l = int(sys.argv[1]), sys.argv[2], sys.argv[3]
libs, argsets = sys.argv[4].split(), sys.argv[5].split('|')
cpu = sys.argv[6] if len(sys.argv) > 6 else '0'
res = {}
for _ in range(rounds):
    for a in argsets:
        slots, touch, *extra = a.split()
        for lib in random.sample(libs, len(libs)):
            out = subprocess.run(['taskset', '-c', cpu, e1l, slots, touch, ops] + extra,
                                 env={'LD_PRELOAD': lib}, capture_output=True, text=True, check=True).stdout
            res.setdefault((lib, a), []).append(float(out.split()[4]))


def quartiles(v):
    s = sorted(v)
    return s[len(s) // 4], statistics.median(s), s[3 * len(s) // 4]


for a in argsets:
    row = [f"{a:10s}"]
    for lib in libs:
        v = res[(lib, a)]
        lo, mid, hi = quartiles([x / y for x, y in zip(v, res[(libs[0], a)])])
        row.append(f"{lib.split('/')[-1][:12]:12s} {statistics.median(v):6.2f} x{mid:.3f} [{lo:.2f}-{hi:.2f}]")
    print("  ".join(row))
