#!/bin/bash
# usage: runs.sh ROUNDS "BENCH ARGS" lib... : interleaved runs of a command under each preloaded
# library; per library the mean wall, user and system seconds, peak RSS and minor faults.
R=$1; shift; CMD=$1; shift
for r in $(seq "$R"); do for l in "$@"; do
  echo "$l $(LD_PRELOAD=$l /usr/bin/time -f '%e %U %S %M %R' $CMD 2>&1 >/dev/null | tail -1)"
done; done | awk '{n[$1]++; e[$1]+=$2; u[$1]+=$3; s[$1]+=$4; m[$1]+=$5; f[$1]+=$6; if (!($1 in o)) {o[$1]=++k; name[k]=$1}}
  END {for (i = 1; i <= k; i++) {l = name[i]; printf "%-60s wall %.3f s  user %.3f  sys %.3f  peak RSS %.1f MiB  faults %d\n", l, e[l]/n[l], u[l]/n[l], s[l]/n[l], m[l]/n[l]/1024, f[l]/n[l]}}'
