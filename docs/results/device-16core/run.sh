#!/bin/bash
# The checks that need the lent GPU machine (one H100 or H200, 16 cores), in one call, from the
# repository root, over a build made on the 2-core VM and carried along:
#   build/bin build/lib build/peers build/lab   (prepare.sh beside this script makes them and .dev)
#   .dev/peers: libmimalloc.so.2 libjemalloc.so.2 libtcmalloc_minimal.so.4 (Debian's, copied) and
#               libmimalloc.so.3 (the cmeel-mimalloc wheel's), since that machine has none of them
# usage: run.sh OUTDIR [quick|gpu]   (quick: smoke sizes, the simulated device, to try it anywhere;
#                                     gpu: sections 1 and 2 only, the device resources)
# Each step has its own time limit, so one that hangs costs only its own results; everything
# lands in OUTDIR (logs, the lab's run directories) and a one-screen summary goes to stdout.
set -u
O=${1:?usage: run.sh OUTDIR [quick|gpu]}
MODE=${2:-}
QUICK=; [ "$MODE" = quick ] && QUICK=1
mkdir -p "$O"
. "$(dirname "$0")/lib.sh"
BACKEND=cuda SMOKE=() THREADS=4,8,16 GPU_THREADS=1,4,8,16
[ -n "$QUICK" ] && BACKEND=sim SMOKE=(--smoke) THREADS=4 GPU_THREADS=1,4


{ nvidia-smi -L; nproc; grep -m1 "model name" /proc/cpuinfo; uname -r; free -g | head -2
  "$PY" --version; "$PY" -c 'import numpy, scipy, rich, matplotlib; print("lab deps ok")'
  head -1 /proc/stat; } >"$O/machine.txt" 2>&1
cat "$O/machine.txt"

# 1. The device resources on the real driver: a smoke run of every resource first (it fails
#    fast and says why if the driver path is broken), then strata under PyTorch and CuPy.
step e2-smoke 40 build/bin/strata-bench-e2-gpu --backend "$BACKEND" --smoke --resource all \
  --threads "$GPU_THREADS" --table
tail -30 "$O/e2-smoke.log"
if [ -z "$QUICK" ]; then
  for m in torch cupy; do
    step "gpu-$m" 60 env STRATA_GPU_BACKEND=cuda "$PY" bench/gpu/real_gpu_check.py $m
    tail -c 1500 "$O/gpu-$m.log"; echo
  done
fi

# 2. E2 through the lab, every resource at 1-16 threads (500 iterations per phase: the budget).
step e2-lab 130 "$PY" -m strata_lab run --suite e2_gpu --param backend="$BACKEND" \
  --param iterations=500 --threads "$GPU_THREADS" --rounds 3 --warmup 1 --time-budget 110 \
  --timeout 30 --seed 7 --out "$O/lab" --no-progress --report "${SMOKE[@]}"
tail -60 "$O/e2-lab.log"

# 3. Host allocators at 4, 8 and 16 threads: issue 10's shapes and the classic patterns.
if [ "$MODE" != gpu ]; then
step shapes-lab 105 "$PY" -m strata_lab run --suite shapes \
  --cells 'prodcon-batch/*,prodcon-batch-mixed/*,churn/*,randsize/*' --threads "$THREADS" \
  --alloc "$ALLOC" --baseline strata --rounds 3 --warmup 1 --time-budget 90 --seed 7 \
  --out "$O/lab" --no-progress "${SMOKE[@]}"
tail -40 "$O/shapes-lab.log"
step patterns-lab 100 "$PY" -m strata_lab run --suite patterns \
  --cells 'larson/*,mstress/*,cache-thrash/*' --threads "$THREADS" --seconds 0.2 \
  --alloc "$ALLOC" --baseline strata --rounds 3 --warmup 1 --time-budget 80 --seed 7 \
  --out "$O/lab" --no-progress "${SMOKE[@]}"
tail -40 "$O/patterns-lab.log"
fi

tar -C "$O" -czf /tmp/device-results.tar.gz . && rm -rf "$O/lab" && mv /tmp/device-results.tar.gz "$O/"
ls -la "$O"
