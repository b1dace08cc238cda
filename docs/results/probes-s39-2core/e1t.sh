#!/bin/bash
# E1's tiny band, THREADS threads (default 1), 0.5 s: recording off, and on with two recorders,
# interleaved.
#   e1t.sh ROUNDS OLD_LIB NEW_LIB [THREADS]   (run from the repository root, build/ built)
R=$1 OLD=$2 NEW=$3 TH=${4:-1}
T=$(mktemp -d)
for r in $(seq "$R"); do
  for mode in off old new; do
    lib=$OLD; [ $mode = new ] && lib=$NEW
    if [ $mode = off ]; then
      out=$(LD_PRELOAD=$lib build/bin/strata-bench-e1-sizeclass --band tiny --threads $TH --seconds 0.5)
    else
      out=$(STRATA_TRACE=$T/e1.%p LD_PRELOAD=$lib build/bin/strata-bench-e1-sizeclass --band tiny --threads $TH --seconds 0.5)
    fi
    sz=$(cat "$T"/e1.* 2>/dev/null | wc -c); rm -f "$T"/e1.*
    echo "$mode $(echo "$out" | grep -o '"ops_per_sec":[0-9.e+]*' | cut -d: -f2) $sz"
  done
done | python3 -c "
import sys, statistics as st, collections
d = collections.defaultdict(list)
for l in sys.stdin:
    m, o, z = l.split(); d[m].append((float(o), int(z)))
for m, v in d.items():
    print(m, 'ops/s median %.1f M' % (st.median(x[0] for x in v) / 1e6), 'trace %.0f MB' % (st.median(x[1] for x in v) / 1e6))
for m in ('old', 'new'):
    r = sorted(a[0] / b[0] for a, b in zip(d[m], d['off']))
    print(m, '/ off: %.3f [%.3f-%.3f]' % (st.median(r), r[len(r)//4], r[3*len(r)//4]))
"
rmdir "$T"
