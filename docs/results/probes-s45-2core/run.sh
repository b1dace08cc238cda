#!/bin/bash
# instructions per op (cachegrind Ir of the whole program, minus a baseline run of n=0? no: two counts, difference)
P=/work/main/.dev/peers
declare -A L=([glibc]="" [strata]=/tmp/api/new.so [base]=/tmp/api/base.so [mimalloc]=$P/libmimalloc.so.2 [tcmalloc]=$P/libtcmalloc_minimal.so.4 [rpmalloc]=/work/main/build/peers/librpmalloc.so [jemalloc]=$P/libjemalloc.so.2)
ir() { valgrind --tool=cachegrind --cache-sim=no --trace-children=yes --cachegrind-out-file=/dev/null env ${2:+LD_PRELOAD=$2} /tmp/api/apibench $1 $3 2>&1 >/dev/null | grep 'I   refs' | tail -1 | awk '{gsub(",","",$4); print $4}'; }
for m in "$@"; do
  printf "%-14s" $m
  for a in glibc base strata mimalloc tcmalloc rpmalloc jemalloc; do
    a1=$(ir $m "${L[$a]}" 200000); a2=$(ir $m "${L[$a]}" 400000)
    printf " %s=%.0f" $a $(echo "($a2-$a1)/200000" | bc -l)
  done
  echo
done
