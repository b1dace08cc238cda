#!/bin/bash
# The lent 16-core machine (Intel Xeon), session 44, one call: is strata's gap to rpmalloc on E1's
# tiny band and larson at 1 thread (AMD EPYC 2-core VM: 1.17x and 1.28x) there on Intel too, and
# what do two scratch variants do on real cores: `nocan` (free's fast path without the
# double-free canary test, which reads the block: the block of another core's last write at
# larson's epoch change) and `carve4k` (4 KiB of tiny blocks a carve instead of 16 KiB: E1 tiny's
# L1 misses 0.58 -> 0.006 an operation in cachegrind, no time on the AMD VM).
# usage: run.sh OUTDIR; carry build/bin build/lib build/peers build/lab .dev (prepare.sh in
# ../device-16core/; base.so, nocan.so, carve4k.so copied into .dev/peers by hand).
set -u
O=${1:?usage: run.sh OUTDIR}
mkdir -p "$O"
. "$(dirname "$0")/../device-16core/lib.sh"
V="base=$P/base.so,nocan=$P/nocan.so,carve4k=$P/carve4k.so,rpmalloc"
V="$V,tcmalloc=$P/libtcmalloc_minimal.so.4,mimalloc=$P/libmimalloc.so.2"
{ nproc; grep -m1 "model name" /proc/cpuinfo; uname -r; lscpu | grep -iE "cache|MHz|Thread"
  "$PY" --version; head -1 /proc/stat; } >"$O/machine.txt" 2>&1
cat "$O/machine.txt"
step e1-tiny 110 "$PY" -m strata_lab run --suite e1 --cells 'e1-tiny/*' --threads 1,4,16 \
  --alloc "$V" --baseline base --rounds 5 --warmup 1 --time-budget 95 --seed 44 \
  --out "$O/lab" --no-progress
grep -A14 "speedup vs" "$O/e1-tiny.log" | head -16
step larson 150 "$PY" -m strata_lab run --suite patterns --cells 'larson/*,prodcon/*' \
  --threads 1,2,4,16 --seconds 0.2 --alloc "$V" --baseline base --rounds 5 --warmup 1 \
  --time-budget 135 --seed 44 --out "$O/lab" --no-progress
grep -A30 "speedup vs" "$O/larson.log" | head -32
tar -C "$O" -czf /tmp/s44-results.tar.gz lab && rm -rf "$O/lab" && mv /tmp/s44-results.tar.gz "$O/"
ls -la "$O"
