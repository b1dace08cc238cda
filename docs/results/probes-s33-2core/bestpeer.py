"""The fastest peer of each cell of a lab run (its speed over strata: median of the ratios paired by
round, with their min and max), and strata's peak RSS and minor faults over mimalloc 2's.

usage: bestpeer.py RUN_DIR   (the --out directory of strata-lab run)
"""
import json,glob,statistics as st,sys,math
f=glob.glob(sys.argv[1]+'/*/results.json')[0]; d=json.load(open(f))
meta={c['id']:c for c in d['cells']}
cells={}
for s in d['samples']:
    if s['warmup'] or not s['ok']: continue
    cells.setdefault(s['cell'],{}).setdefault(s['variant'],{})[s['round']]=s
geo=[]
print(f"{'cell':28s} {'strata':>12s}  best peer (speed over strata, paired median)   RSS/mimalloc2  faults/mimalloc2")
for cid,vs in cells.items():
    m=meta[cid]; key=m['metric']; hib=m['higher_is_better']
    def val(s):
        v=s['metrics'].get(key); return v
    base=vs['strata']
    best=None
    for v,rs in vs.items():
        if v=='strata': continue
        rat=[]
        for r,s in rs.items():
            if r in base and val(s) and val(base[r]):
                x=val(s)/val(base[r]) if hib else val(base[r])/val(s)
                rat.append(x)
        if rat:
            md=st.median(rat)
            if best is None or md>best[1]: best=(v,md,min(rat),max(rat))
    sm=st.median(val(s) for s in base.values())
    rss=st.median(s['peak_rss_kb'] for s in base.values()); 
    mi=vs.get('mimalloc',{})
    rssm=st.median(s['peak_rss_kb'] for s in mi.values()) if mi else float('nan')
    fl=st.median(s['minor_faults'] for s in base.values()); flm=st.median(s['minor_faults'] for s in mi.values()) if mi else float('nan')
    geo.append(best[1])
    print(f"{cid:28s} {sm:12.4g}  {best[0]:9s} {best[1]:.2f}x [{best[2]:.2f}-{best[3]:.2f}]   {rss/rssm:5.2f}x ({rss/1024:.1f} MiB)  {fl/flm:5.2f}x")
