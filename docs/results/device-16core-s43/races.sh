#!/bin/bash
# Session 43, second call: the multithreaded test programs on 16 real cores, where their threads
# run at once instead of taking turns on the 2-core VM: the release build's (.dev/rel: build/bin's, debug sections stripped), repeated and four
# copies at a time, then the ThreadSanitizer build's (.dev/tsan: build-tsan/bin's programs with
# the `tsan` label, debug sections stripped to fit the carry).  usage: races.sh OUTDIR
set -u
O=${1:?usage: races.sh OUTDIR}
mkdir -p "$O"
nproc > "$O/machine.txt"; head -1 /proc/stat >> "$O/machine.txt"
# copies LIMIT DIR NAME:REPEATS... : each program 4 copies at once, each copy its tests REPEATS
# times (shuffled, a seed a copy), within LIMIT seconds
copies() {
  local lim=$1 dir=$2; shift 2
  for tr in "$@"; do
    local t=${tr%%:*} reps=${tr##*:} s=$(date +%s)
    local pre=()  # TSan: its runtime from the VM (gcc 12's), and no address randomisation (newer
    # kernels' wider mmap randomisation breaks older TSan runtimes' shadow layout)
    [ "$(basename "$dir")" = tsan ] && pre=(env LD_LIBRARY_PATH="$dir/lib" setarch "$(uname -m)" -R)
    for c in 1 2 3 4; do
      timeout -k 5 "$lim" "${pre[@]}" "$dir/$t" --gtest_repeat="$reps" --gtest_shuffle --gtest_random_seed=$((c * 7)) \
        --gtest_brief=1 >"$O/$(basename "$dir")-$t-$c.log" 2>&1 &
    done
    wait
    local fails=$(grep -l "FAILED\|WARNING: ThreadSanitizer\|Segmentation\|Aborted" "$O/$(basename "$dir")-$t-"*.log | wc -l)
    local rcs=$(for c in 1 2 3 4; do grep -c "^\[  PASSED  \]" "$O/$(basename "$dir")-$t-$c.log"; done | tr '\n' ' ')
    echo "== $(basename "$dir")/$t: copies with a failure: $fails of 4; repetitions passed per copy: $rcs; $(($(date +%s) - s)) s"
  done
}
copies 35 .dev/rel stress_test:5 shadow_api:1 remote_free_test:40 invariants_test:40 \
  regressions_test:1 pool_concurrent_test:20 pool_c_api_test:50 fault_fork_storm_test:8
copies 45 .dev/tsan stress_test:1 shadow_api:1 remote_free_test:3 pool_concurrent_test:3 \
  gpu_resources_test:1
grep -h -A30 "WARNING: ThreadSanitizer\|FAILED\|Segmentation" "$O"/*.log | head -150
# keep only the logs that show a failure
for f in "$O"/*-*.log; do grep -q "FAILED\|WARNING: ThreadSanitizer\|Segmentation\|Aborted" "$f" || rm -f "$f"; done
ls -la "$O"
