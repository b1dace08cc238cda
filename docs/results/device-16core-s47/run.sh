#!/bin/bash
# The lent H200 host (16 cores), session 47, one call: (1) the release build's multithreaded
# test programs, four copies at once, on real cores (sessions 45-46 added fork repairs whose
# tests stop a thread at an exact point and fork); (2) the GPU resources on the real driver
# (smoke of every resource, PyTorch through the plug-in); (3) the host allocators at 4, 8 and 16
# threads beside every peer on the default suite's threaded shapes and patterns.
# usage: run.sh OUTDIR; carry build/bin build/lib build/peers build/lab .dev
# (docs/results/device-16core/prepare.sh, then prepare.sh untrack; restore after the call).
set -u
O=${1:?usage: run.sh OUTDIR}
mkdir -p "$O"
. "$(dirname "$0")/../device-16core/lib.sh"
{ nvidia-smi -L; nproc; grep -m1 "model name" /proc/cpuinfo; uname -r; free -g | head -2
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
  "$PY" --version; head -1 /proc/stat; } >"$O/machine.txt" 2>&1
cat "$O/machine.txt"

# 1. Races: each program 4 copies at once, each copy its tests REPEATS times, shuffled with its
# own seed, within LIMIT seconds.
races() {
  local s0=$(date +%s)
  for tr in stress_test:3:40 remote_free_test:20:20 invariants_test:20:20 regressions_test:1:45 \
            pool_concurrent_test:10:15 fault_fork_storm_test:4:20; do
    IFS=: read -r t reps lim <<<"$tr"
    local s=$(date +%s)
    for c in 1 2 3 4; do
      timeout -k 5 "$lim" build/bin/$t --gtest_repeat="$reps" --gtest_shuffle \
        --gtest_random_seed=$((c * 47)) --gtest_brief=1 >"$O/rel-$t-$c.log" 2>&1 &
    done
    wait
    local fails=$(grep -l "FAILED\|Segmentation\|Aborted\|invariant broken" "$O/rel-$t-"*.log | wc -l)
    local passed=$(for c in 1 2 3 4; do grep -c "^\[  PASSED  \]" "$O/rel-$t-$c.log"; done | tr '\n' ' ')
    echo "== rel/$t: copies with a failure: $fails of 4; repetitions passed per copy: $passed; $(($(date +%s) - s)) s"
  done
  echo "== races: $(($(date +%s) - s0)) s"
  grep -h -B2 -A20 "FAILED\|Segmentation\|Aborted\|invariant broken" "$O"/rel-*.log | head -80
  for f in "$O"/rel-*.log; do grep -q "FAILED\|Segmentation\|Aborted\|invariant broken" "$f" || rm -f "$f"; done
}
races 2>&1 | tee "$O/races.log"

# 2. The GPU resources on the real driver.
step e2-smoke 40 build/bin/strata-bench-e2-gpu --backend cuda --smoke --resource all \
  --threads 1,4,16 --table
tail -n 20 "$O/e2-smoke.log"
step gpu-torch 60 env STRATA_GPU_BACKEND=cuda "$PY" bench/gpu/real_gpu_check.py torch
tail -c 600 "$O/gpu-torch.log"; echo

# 3. Every allocator at 4, 8 and 16 threads.
step shapes-lab 125 "$PY" -m strata_lab run --suite shapes \
  --cells 'churn/*,prodcon-batch/*,prodcon-batch-mixed/*,randsize/*' --threads 4,8,16 \
  --alloc "$ALLOC" --baseline strata --rounds 3 --warmup 1 --time-budget 110 --seed 47 \
  --out "$O/lab" --no-progress
grep -A16 "speedup vs" "$O/shapes-lab.log" | head -18
step patterns-lab 90 "$PY" -m strata_lab run --suite patterns \
  --cells 'larson/*,mstress/*,prodcon/*' --threads 4,8,16 --seconds 0.2 \
  --alloc "$ALLOC" --baseline strata --rounds 3 --warmup 1 --time-budget 75 --seed 47 \
  --out "$O/lab" --no-progress
grep -A14 "speedup vs" "$O/patterns-lab.log" | head -16
tar -C "$O" -czf /tmp/s47-results.tar.gz lab && rm -rf "$O/lab" && mv /tmp/s47-results.tar.gz "$O/"
ls -la "$O"
