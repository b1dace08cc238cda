#!/bin/bash
# A/B of library variants on the lent 16-core machine, paired by round in the lab, beside
# tcmalloc and jemalloc: usage ab.sh OUTDIR NAME=LIB... (carry .dev/ with the libraries and the
# peers, as run.sh says).  Also reruns the PyTorch check of run.sh.
set -u
O=${1:?usage: ab.sh OUTDIR NAME=LIB...}; shift
mkdir -p "$O"
. "$(dirname "$0")/lib.sh"
V=$(IFS=,; echo "$*")
ALLOC="$V,tcmalloc=$P/libtcmalloc_minimal.so.4,jemalloc=$P/libjemalloc.so.2"
BASE=${1%%=*}
step gpu-torch 60 env STRATA_GPU_BACKEND=cuda "$PY" bench/gpu/real_gpu_check.py torch
tail -c 1200 "$O/gpu-torch.log"; echo
step patterns-ab 125 "$PY" -m strata_lab run --suite patterns --cells 'larson/*,mstress/*' \
  --threads 1,4,16 --seconds 0.2 --alloc "$ALLOC" --baseline "$BASE" --rounds 5 --warmup 1 \
  --time-budget 110 --seed 11 --out "$O/lab" --no-progress
grep -A40 "speedup vs" "$O/patterns-ab.log" | head -60
step shapes-ab 105 "$PY" -m strata_lab run --suite shapes \
  --cells 'randsize/*,prodcon-batch-mixed/*' --threads 4,16 --alloc "$ALLOC" --baseline "$BASE" \
  --rounds 5 --warmup 1 --time-budget 90 --seed 11 --out "$O/lab" --no-progress
grep -A40 "speedup vs" "$O/shapes-ab.log" | head -45
tar -C "$O" -czf /tmp/ab-results.tar.gz . && rm -rf "$O/lab" && mv /tmp/ab-results.tar.gz "$O/"
