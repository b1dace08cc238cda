#!/bin/bash
# The recorder's test (tests/trace/trace_test.py: fork, threads, kill, FIFOs, exit while threads
# run, pthread_exit from main...) after session 47's recorder fixes, four copies at once for
# ROUNDS rounds.  Written for the lent 16-core machine (carry build/bin build/lib), which was not
# lent again for it; run on the 2-core VM instead (oversubscribed, beside helpers' builds).
# usage: trace-races.sh OUTDIR [ROUNDS]   (from the repository root)
set -u
O=${1:?usage: trace-races.sh OUTDIR [ROUNDS]}
R=${2:-6}
mkdir -p "$O"
{ nproc; head -1 /proc/stat; } >"$O/trace-machine.txt"
s0=$(date +%s); fails=0; runs=0
for r in $(seq "$R"); do
  for c in 1 2 3 4; do
    timeout -k 5 150 python3 tests/trace/trace_test.py "$PWD/build/lib/libstrata.so" "$PWD/build/bin/trace_workload" \
      "$PWD/build/bin/strata-bench-replay" >"$O/trace-$r-$c.log" 2>&1 &
  done
  wait
  for c in 1 2 3 4; do
    runs=$((runs + 1))
    if tail -1 "$O/trace-$r-$c.log" | grep -q "trace tests: passed"; then rm -f "$O/trace-$r-$c.log"
    else fails=$((fails + 1)); fi
  done
  echo "== round $r: $(($(date +%s) - s0)) s, failures so far $fails of $runs"
done
echo "== trace_test.py: $fails failures in $runs runs, $(($(date +%s) - s0)) s"
grep -h "FAIL" "$O"/trace-*.log 2>/dev/null | head -30
