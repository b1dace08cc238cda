#!/bin/bash
# usage: pairb.sh ROUNDS BIN "args" libA libB ... : paired ratios (lib/libA) of ops_per_sec, per round
R=$1; shift; BIN=$1; shift; ARGS=$1; shift
for r in $(seq $R); do for a in "$@"; do
  out=$(LD_PRELOAD=$a /usr/bin/time -f "TIME %M %R" $BIN $ARGS 2>&1)
  ops=$(echo "$out" | grep -o '"ops_per_sec":[0-9.e+]*' | cut -d: -f2)
  echo "$r $a $ops $(echo "$out" | grep TIME)"
done; done | tee /tmp/pairb.last | python3 -c "
import sys,statistics as st
d={}; order=[]
for l in sys.stdin:
  f=l.split(); r,a=f[0],f[1]
  if a not in order: order.append(a)
  d.setdefault(a,{})[r]=(float(f[2]),int(f[4]),int(f[5]))
base=order[0]
for a in order:
  rs=sorted(d[a]); rat=sorted(d[a][r][0]/d[base][r][0] for r in rs if r in d[base])
  q=lambda p: rat[min(len(rat)-1,int(p*len(rat)))]
  print(f'{a:34s} Mops {st.median(v[0] for v in d[a].values())/1e6:7.3f}  ratio {st.median(rat):.3f} [{q(0.25):.3f}-{q(0.75):.3f}] min {rat[0]:.3f} max {rat[-1]:.3f}  rss {st.median(v[1] for v in d[a].values())/1024:6.1f}M flt {st.median(v[2] for v in d[a].values()):7.0f}')
"
