#!/bin/bash
# The lent 16-core machine, session 43, one call: the GPU resources on the real driver after
# session 42's fixes (defragment's event guards, the pool's caps), and the host allocators at 4,
# 8 and 16 threads with strata-thp beside strata: the same library with STRATA_HUGE_SEGMENTS on by
# default (a scratch build of options.h's default, .dev/peers/libstrata-thp.so), the test of
# whether huge-page segments close churn's fault-bound gap on real cores.
# usage: run.sh OUTDIR; carry build/bin build/lib build/peers build/lab .dev (prepare.sh in
# ../device-16core/; libstrata-thp.so copied into .dev/peers by hand, see README.md here).
set -u
O=${1:?usage: run.sh OUTDIR}
mkdir -p "$O"
. "$(dirname "$0")/../device-16core/lib.sh"
T=$P/libstrata-thp.so
FEW="strata,strata-thp=$T,mimalloc=$P/libmimalloc.so.2,mimalloc3=$P/libmimalloc.so.3"
FEW="$FEW,tcmalloc=$P/libtcmalloc_minimal.so.4,rpmalloc"
{ nvidia-smi -L; nproc; grep -m1 "model name" /proc/cpuinfo; uname -r; free -g | head -2
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
  "$PY" --version; head -1 /proc/stat; } >"$O/machine.txt" 2>&1
cat "$O/machine.txt"

# 1. The device resources on the real driver.
step e2-smoke 40 build/bin/strata-bench-e2-gpu --backend cuda --smoke --resource all \
  --threads 1,4,8,16 --table
tail -n 30 "$O/e2-smoke.log"
for m in torch cupy; do
  step "gpu-$m" 60 env STRATA_GPU_BACKEND=cuda "$PY" bench/gpu/real_gpu_check.py $m
  tail -c 1200 "$O/gpu-$m.log"; echo
done
step e2-lab 110 "$PY" -m strata_lab run --suite e2_gpu --param backend=cuda \
  --param iterations=500 --threads 1,4,8,16 --rounds 3 --warmup 1 --time-budget 90 \
  --timeout 30 --seed 7 --out "$O/lab" --no-progress
tail -n 45 "$O/e2-lab.log"

# 2. Host allocators, strata-thp beside strata and the peers that led on these cells.
step shapes-lab 115 "$PY" -m strata_lab run --suite shapes \
  --cells 'churn/*,prodcon-batch-mixed/*,randsize/*,rebuild/*' --threads 4,8,16 \
  --alloc "$FEW" --baseline strata --rounds 3 --warmup 1 --time-budget 100 --seed 7 \
  --out "$O/lab" --no-progress
tail -n 45 "$O/shapes-lab.log"
step patterns-lab 85 "$PY" -m strata_lab run --suite patterns \
  --cells 'larson/*,mstress/*' --threads 4,8,16 --seconds 0.2 \
  --alloc "$FEW" --baseline strata --rounds 3 --warmup 1 --time-budget 70 --seed 7 \
  --out "$O/lab" --no-progress
tail -n 30 "$O/patterns-lab.log"
step programs-lab 60 "$PY" -m strata_lab run --suite programs --param programs=python \
  --alloc "$FEW" --baseline strata --rounds 5 --warmup 1 --time-budget 50 --seed 7 \
  --out "$O/lab" --no-progress
tail -n 20 "$O/programs-lab.log"

tar -C "$O" -czf /tmp/s43-results.tar.gz lab && rm -rf "$O/lab" && mv /tmp/s43-results.tar.gz "$O/"
ls -la "$O"
