#!/bin/bash
# A/B of two library builds on the lent 16-core machine, paired by round in the lab beside
# tcmalloc (session 38): ab.sh OUTDIR base=LIB new=LIB (the libraries in .dev/, carried with
# build/bin build/lib build/peers build/lab .dev as ../device-16core/run.sh says).  No GPU step.
set -u
O=${1:?usage: ab.sh OUTDIR NAME=LIB...}; shift
mkdir -p "$O"
. "$(dirname "$0")/../device-16core/lib.sh"
V=$(IFS=,; echo "$*")
ALLOC="$V,tcmalloc=$P/libtcmalloc_minimal.so.4"
BASE=${1%%=*}
step shapes-ab 130 "$PY" -m strata_lab run --suite shapes \
  --cells 'randsize/*,prodcon-batch-mixed/*,generations/*' --threads 4,8,16 --alloc "$ALLOC" \
  --baseline "$BASE" --rounds 5 --warmup 1 --time-budget 115 --seed 11 --out "$O/lab" --no-progress
grep -A45 "speedup vs" "$O/shapes-ab.log" | head -50
step patterns-ab 100 "$PY" -m strata_lab run --suite patterns --cells 'larson/*,mstress/*' \
  --threads 4,16 --seconds 0.2 --alloc "$ALLOC" --baseline "$BASE" --rounds 5 --warmup 1 \
  --time-budget 85 --seed 11 --out "$O/lab" --no-progress
grep -A30 "speedup vs" "$O/patterns-ab.log" | head -34
step e2-ab 80 "$PY" -m strata_lab run --suite e2 --threads 4,16 --alloc "$ALLOC" \
  --baseline "$BASE" --rounds 5 --warmup 1 --time-budget 65 --seed 11 --out "$O/lab" --no-progress
grep -A20 "speedup vs" "$O/e2-ab.log" | head -22
tar -C "$O" -czf /tmp/ab-results.tar.gz lab && rm -rf "$O/lab" && mv /tmp/ab-results.tar.gz "$O/"
ls -la "$O"
