import subprocess, json, sys, statistics as st, os
B="/work/main/build/bin/strata-bench-e1-sizeclass"
libs=sys.argv[1].split(","); bands=sys.argv[2].split(","); rounds=int(sys.argv[3]); thr=sys.argv[4] if len(sys.argv)>4 else "1"
res={(l,b):[] for l in libs for b in bands}
for r in range(rounds):
    for b in bands:
        for l in (libs if r%2==0 else libs[::-1]):
            out=subprocess.run([B,"--band",b,"--seconds","0.4","--threads",thr],env=dict(os.environ,LD_PRELOAD=l),capture_output=True,text=True).stdout
            res[(l,b)].append(json.loads(out)["ops_per_sec"])
for b in bands:
    base=res[(libs[0],b)]
    for l in libs:
        rat=sorted(x/y for x,y in zip(res[(l,b)],base))
        print(f"{b} t{thr} {os.path.basename(l):20s} median {st.median(res[(l,b)])/1e6:7.2f} M/s  ratio {st.median(rat):.3f} [{rat[len(rat)//4]:.3f}-{rat[3*len(rat)//4]:.3f}]")
