#!/bin/bash
# The lent machine, session 45, third call: hardware counters (perfcount.c, built on the VM and
# carried as .dev/perfcount) over E1's tiny and large bands and larson at one thread, under strata
# and the peers that beat it there, two alternating runs each.  Counters per operation tell where
# strata's cycles go that instructions and simulated cache misses (cachegrind) do not show.
# usage: counters.sh OUTDIR; carry build/bin build/lib build/peers .dev
set -u
O=${1:?usage: counters.sh OUTDIR}
mkdir -p "$O"
P=$PWD/.dev/peers
lib() {
  case $1 in
    strata) echo "$PWD/build/lib/libstrata.so" ;;
    rpmalloc) echo "$PWD/build/peers/librpmalloc.so" ;;
    mimalloc) echo "$P/libmimalloc.so.2" ;;
    tcmalloc) echo "$P/libtcmalloc_minimal.so.4" ;;
  esac
}
.dev/perfcount /bin/true 2>&1 | head -3
for w in "e1-tiny build/bin/strata-bench-e1-sizeclass --band tiny" \
         "e1-large build/bin/strata-bench-e1-sizeclass --band large" \
         "larson build/bin/strata-bench-patterns --pattern larson"; do
  set -- $w; name=$1; shift
  for rep in 1 2; do
    for a in strata rpmalloc mimalloc tcmalloc; do
      echo "== $name $a $rep"
      timeout 20 .dev/perfcount env LD_PRELOAD="$(lib $a)" "$@" --threads 1 --seconds 1 2>&1
    done
  done
done > "$O/counters.log"
cat "$O/counters.log"
