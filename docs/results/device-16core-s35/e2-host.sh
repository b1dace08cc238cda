#!/bin/bash
# E2 on host malloc (the e2 suite, bench/host/e2_frag.cpp) at 4, 8 and 16 threads beside every
# peer, on the lent 16-core machine: e2-host.sh OUTDIR (carry build/bin build/lib build/peers
# build/lab .dev, as ../device-16core/run.sh says).
set -u
O=${1:?usage: e2-host.sh OUTDIR}
mkdir -p "$O"
. "$(dirname "$0")/../device-16core/lib.sh"
step e2-host 170 "$PY" -m strata_lab run --suite e2 --threads 4,8,16 --alloc "$ALLOC" \
  --baseline strata --rounds 5 --warmup 1 --time-budget 150 --seed 7 --out "$O/lab" --no-progress
grep -B2 -A60 'E2 phases' "$O/e2-host.log" | head -40
tar -C "$O" -czf /tmp/e2-host.tar.gz lab && rm -rf "$O/lab" && mv /tmp/e2-host.tar.gz "$O/"
