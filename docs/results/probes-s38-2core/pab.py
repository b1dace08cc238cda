#!/usr/bin/env python3
# pab.py N CMD name=lib ... : interleaved runs, median wall/user+sys/maxrss/faults, paired ratio vs first
import os, sys, time, subprocess, statistics as st
n=int(sys.argv[1]); cmd=sys.argv[2]; vs=[a.split('=',1) for a in sys.argv[3:]]
pin=os.environ.get('PIN')
res={k:[] for k,_ in vs}
for i in range(n):
    order = vs if i%2==0 else vs[::-1]
    for name,lib in order:
        env=dict(os.environ); 
        if lib: env['LD_PRELOAD']=lib
        argv=['bash','-c',cmd]
        if pin: argv=['taskset','-c',pin]+argv
        t=time.perf_counter()
        p=subprocess.Popen(argv,env=env,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
        _,status,ru=os.wait4(p.pid,0)
        w=time.perf_counter()-t
        res[name].append((w,ru.ru_utime+ru.ru_stime,ru.ru_maxrss/1024,ru.ru_minflt))
base=res[vs[0][0]]
for name,_ in vs:
    xs=res[name]; m=[st.median(c) for c in zip(*xs)]
    r=sorted(x[0]/b[0] for x,b in zip(xs,base)); rc=sorted(x[1]/b[1] for x,b in zip(xs,base))
    q=lambda a:(a[len(a)//4],st.median(a),a[(3*len(a))//4])
    print(f"{name:8s} wall {m[0]:.4f} ratio {q(r)[1]:.3f} [{q(r)[0]:.3f}-{q(r)[2]:.3f}] cpu {m[1]:.4f} ratio {q(rc)[1]:.3f} rss {m[2]:6.1f} flt {m[3]:7.0f}")
