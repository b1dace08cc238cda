#!/bin/bash
# E2 on the real driver, builds of the benchmark in interleaved rounds (strata and arena in each
# run, so arena is the yardstick inside every round):  e2-ab.sh OUTDIR ROUNDS NAME=BINARY...
# (the first is the baseline), then: python3 docs/results/device-16core-s35/e2_ab.py OUTDIR
set -u
O=${1:?usage: e2-ab.sh OUTDIR ROUNDS NAME=BINARY...}; N=$2; shift 2
mkdir -p "$O"
for r in $(seq 1 "$N"); do
  for v in "$@"; do
    name=${v%%=*}
    timeout 60 "${v#*=}" --backend "${BACKEND:-cuda}" --resource strata,arena --threads 8,16 \
      --iterations 500 --seed $((100 + r)) > "$O/e2ab-$name-$r.json" 2> "$O/e2ab-$name-$r.err"
    echo "round $r $name rc=$?"
  done
done
