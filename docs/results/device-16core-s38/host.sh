#!/bin/bash
# Host allocators on the lent 16-core machine, session 38: E2 on host malloc, issue 10's shapes
# and the classic patterns at 4, 8 and 16 threads beside every peer (the GPU resources have not
# changed since session 35's call 2, so no GPU step).  usage: host.sh OUTDIR; carry build/bin
# build/lib build/peers build/lab .dev, as ../device-16core/run.sh says (prepare.sh there).
set -u
O=${1:?usage: host.sh OUTDIR}
mkdir -p "$O"
. "$(dirname "$0")/../device-16core/lib.sh"
{ nproc; grep -m1 "model name" /proc/cpuinfo; uname -r; free -g | head -2; head -1 /proc/stat; } \
  >"$O/machine.txt" 2>&1
cat "$O/machine.txt"
step e2-host 125 "$PY" -m strata_lab run --suite e2 --threads 4,8,16 --alloc "$ALLOC" \
  --baseline strata --rounds 4 --warmup 1 --time-budget 110 --seed 7 --out "$O/lab" --no-progress
grep -B2 -A40 'E2 phases' "$O/e2-host.log" | head -40
step shapes-lab 100 "$PY" -m strata_lab run --suite shapes \
  --cells 'prodcon-batch/*,prodcon-batch-mixed/*,churn/*,randsize/*' --threads 4,8,16 \
  --alloc "$ALLOC" --baseline strata --rounds 3 --warmup 1 --time-budget 85 --seed 7 \
  --out "$O/lab" --no-progress
tail -40 "$O/shapes-lab.log"
step patterns-lab 90 "$PY" -m strata_lab run --suite patterns \
  --cells 'larson/*,mstress/*,cache-thrash/*' --threads 4,8,16 --seconds 0.2 \
  --alloc "$ALLOC" --baseline strata --rounds 3 --warmup 1 --time-budget 75 --seed 7 \
  --out "$O/lab" --no-progress
tail -40 "$O/patterns-lab.log"
tar -C "$O" -czf /tmp/host-results.tar.gz lab && rm -rf "$O/lab" && mv /tmp/host-results.tar.gz "$O/"
ls -la "$O"
