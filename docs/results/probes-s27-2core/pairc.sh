#!/bin/bash
# usage: pairc.sh ROUNDS "command" libA libB ... : paired CPU-time ratios (libA/lib: >1 = lib faster), per round
R=$1; shift; CMD=$1; shift
for r in $(seq $R); do for a in "$@"; do
  if [ "$a" = glibc ]; then pre=""; else pre="$a"; fi
  t=$(LD_PRELOAD=$pre /usr/bin/time -f "TIME %U %S %M %R" bash -c "$CMD" 2>&1 >/dev/null | grep TIME)
  echo "$r $a $t"
done; done | python3 -c "
import sys,statistics as st
d={}; order=[]
for l in sys.stdin:
  f=l.split(); r,a=f[0],f[1]
  if a not in order: order.append(a)
  d.setdefault(a,{})[r]=(float(f[3])+float(f[4]),int(f[5]),int(f[6]))
base=order[0]
for a in order:
  rs=sorted(d[a]); rat=sorted(d[base][r][0]/d[a][r][0] for r in rs if r in d[base])
  q=lambda p: rat[min(len(rat)-1,int(p*len(rat)))]
  print(f'{a.split(\"/\")[-1]:24s} cpu {st.median(v[0] for v in d[a].values()):7.3f}s  speed vs base {st.median(rat):.3f} [{q(0.25):.3f}-{q(0.75):.3f}]  rss {st.median(v[1] for v in d[a].values())/1024:6.1f}M flt {st.median(v[2] for v in d[a].values()):7.0f}')
"
