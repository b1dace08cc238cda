#!/bin/bash
# ab.sh ROUNDS PATTERN THREADS OPS variant... : interleaved runs, prints ops/s, rss, faults per run
R=$1; P=$2; T=$3; O=$4; shift 4
for r in $(seq $R); do for v in "$@"; do
  case $v in glibc) L=;; mimalloc) L=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2;; rpmalloc) L=/work/main/build/peers/librpmalloc.so;; snmalloc) L=/work/main/build/peers/libsnmalloc.so;; tcmalloc) L=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4;; mimalloc3) L=/work/main/.venv/lib/python3.11/site-packages/cmeel.prefix/lib/libmimalloc.so;; jemalloc) L=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2;; *) L=/tmp/var/$v.so;; esac
  out=$(env ${L:+LD_PRELOAD=$L} /usr/bin/time -f "%R" /work/main/build/bin/strata-bench-patterns --pattern $P --threads $T --ops $O --seconds 30 2>&1)
  echo "$v $(echo "$out" | head -1 | python3 -c 'import sys,json; d=json.loads(sys.stdin.read()); print("%.2f"%(d["ops_per_sec"]/1e6), d["peak_rss_kb"]//1024)') $(echo "$out" | tail -1)"
done; done
