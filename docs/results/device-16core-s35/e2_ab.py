"""Summarises e2-ab.sh's runs: per thread count and build, the medians over rounds of strata's and
arena's long-term time, time in allocate/deallocate and lock wait, strata's fragmented-phase
change and peak reserved; then each build's long-term time over the first build's, and strata's
over arena's in the same runs (paired by round: median and range; < 1: the first is faster)."""
import glob, json, os, statistics, sys

out = sys.argv[1]
runs, order = {}, []
for path in sorted(glob.glob(os.path.join(out, "e2ab-*-*.json")), key=os.path.getmtime):
    v, r = os.path.basename(path)[len("e2ab-"):-len(".json")].rsplit("-", 1)
    if v not in order:
        order.append(v)
    try:
        doc = json.load(open(path))
    except ValueError:
        continue
    for cell in doc["results"]:
        if cell["status"] != "ok":
            continue
        ph = cell["phases"]
        alloc = sum(p.get("alloc_ns_total", 0) or 0 for p in ph.values()) / 1e6
        wait = sum(p.get("lock_wait_ns", 0) or 0 for p in ph.values()) / 1e6
        peak = max(p["peak_reserved_bytes"] for p in ph.values()) / 2**20
        runs[(v, cell["resource"], int(r), cell["threads"])] = (
            ph["long_term"]["time_ms"], alloc, wait, ph["fragmented"]["change_pct"], peak)

rounds = sorted({k[2] for k in runs})
med = lambda xs: statistics.median(xs)
for t in sorted({k[3] for k in runs}):
    print(f"threads {t}, medians over {len(rounds)} rounds: long-term ms, alloc ms, lock wait ms, "
          "fragmented change %, peak reserved MiB")
    for v in order:
        for res in ("strata", "arena"):
            xs = [runs[(v, res, r, t)] for r in rounds if (v, res, r, t) in runs]
            if xs:
                m = [med([x[i] for x in xs]) for i in range(5)]
                print(f"  {v:8s} {res:7s} {m[0]:8.2f} {m[1]:9.2f} {m[2]:9.2f} {m[3]:+7.1f} {m[4]:8.0f}")
    def paired(a, b):
        q = sorted(runs[a[:2] + (r, t)][0] / runs[b[:2] + (r, t)][0] for r in rounds
                   if a[:2] + (r, t) in runs and b[:2] + (r, t) in runs)
        return f"median {med(q):.3f}, range {q[0]:.3f}-{q[-1]:.3f}" if q else "no pairs"
    for v in order:
        if v != order[0]:
            print(f"  strata {v} / {order[0]}: {paired((v, 'strata'), (order[0], 'strata'))}")
        print(f"  strata / arena, {v}'s runs: {paired((v, 'strata'), (v, 'arena'))}")
