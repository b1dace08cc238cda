#!/bin/bash
# run.sh BIN LOGPREFIX SEEDS... : loops over threads and env settings
bin=$1; shift; pfx=$1; shift
for seed in "$@"; do
 for th in 2 3 5 8; do
  for env in "STRATA_PURGE_DELAY=40" "STRATA_PURGE_DELAY=0" "STRATA_PURGE_DELAY=1" "STRATA_PURGE_DELAY=-1" "STRATA_SEGMENT_CACHE=0" "STRATA_PURGE_DELAY=0 STRATA_SEGMENT_CACHE=0"; do
   out=$(env $env timeout 600 nice -n 19 $bin $seed $th ${ROUNDS:-30} ${OPS:-20000} 2>&1); rc=$?
   warn=$(echo "$out" | grep -c "WARN\|FAIL\|WARNING: ThreadSanitizer\|invariant\|strata:")
   echo "seed=$seed th=$th env=[$env] rc=$rc warn=$warn $(echo "$out" | grep '^end:')"
   if [ $rc != 0 ] || [ $warn != 0 ]; then echo "$out" > $pfx-$seed-$th-$(echo $env|tr ' =' '__').log; fi
  done
 done
done
