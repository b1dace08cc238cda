#!/bin/bash
# The lent machine, session 44, second call: the GPU side after the session's changes to
# strata-bench-e2-gpu's arguments (empty and repeated list items, bounds on iterations, factors
# and kernel times, --cap-basis without --cap-factor, a result that cannot be written): the real
# driver's smoke of every resource, the bad-argument checks, PyTorch through the plug-in, and E2 in
# the lab at 1, 4 and 16 threads.
# usage: gpu.sh OUTDIR; carry build/bin build/lib build/peers build/lab .dev
set -u
O=${1:?usage: gpu.sh OUTDIR}
mkdir -p "$O"
. "$(dirname "$0")/../device-16core/lib.sh"
{ nvidia-smi -L; nproc; head -1 /proc/stat; } >"$O/gpu-machine.txt" 2>&1
cat "$O/gpu-machine.txt"
step e2-smoke 60 build/bin/strata-bench-e2-gpu --backend cuda --smoke --resource all \
  --threads 1,4,16 --table
tail -n 25 "$O/e2-smoke.log"
step e2-args 60 "$PY" tests/gpu/e2_gpu_arguments_test.py build/bin/strata-bench-e2-gpu
tail -n 5 "$O/e2-args.log"
step e2-args-cuda 30 build/bin/strata-bench-e2-gpu --backend cuda --smoke --resource pool \
  --threads 1,,2
tail -n 3 "$O/e2-args-cuda.log"
step gpu-torch 60 env STRATA_GPU_BACKEND=cuda "$PY" bench/gpu/real_gpu_check.py torch
tail -c 800 "$O/gpu-torch.log"; echo
step e2-lab 110 "$PY" -m strata_lab run --suite e2_gpu --param backend=cuda \
  --param iterations=500 --threads 1,4,16 --rounds 3 --warmup 1 --time-budget 90 \
  --timeout 30 --seed 44 --out "$O/lab" --no-progress
tail -n 40 "$O/e2-lab.log"
tar -C "$O" -czf /tmp/s44-gpu.tar.gz lab && rm -rf "$O/lab" && mv /tmp/s44-gpu.tar.gz "$O/"
ls -la "$O"
