"""Tables for docs/results/e2-lean2-sim/README.md from strata-lab results.json files."""
import json, statistics, sys
M = 1048576.0
RES = ["strata", "pool", "arena", "async", "cuda"]

from strata_lab.results import counted_metrics

def load(path):
    """(threads, resource) -> the counted samples' metrics (as the lab's summary counts them),
    or [] where every sample failed."""
    d = json.load(open(path))
    cells = {}
    for c in d["cells"]:
        for v in d["variants"]:
            cells[(int(c["threads"]), v)] = [{"ok": True, "metrics": m} for m in counted_metrics(d, c["id"], v)]
    return d, cells

def med(samples, k):
    xs = [s["metrics"][k] for s in samples if isinstance(s["metrics"].get(k), (int, float))]
    return statistics.median(xs) if xs else None

def noise(d):
    o = [s["other_cpu_frac"] for s in d["samples"] if s.get("other_cpu_frac") is not None]
    st = [s["steal_frac"] for s in d["samples"] if s.get("steal_frac") is not None]
    return f"other processes median {100*statistics.median(o):.0f} % of the CPUs (range {100*min(o):.0f}-{100*max(o):.0f} %), steal median {100*statistics.median(st):.1f} %"

def memory(path):
    d, cells = load(path)
    threads = sorted({t for t, _ in cells})
    res = [r for r in RES if any(v == r for _, v in cells)]
    print(f"noise: {noise(d)}\n")
    print("| threads | " + " | ".join(res) + " | bounds: concurrent / serial | 1.25 × least of pool, arena, async |")
    print("|---:|" + "---:|" * len(res) + "---|---|")
    for t in threads:
        row, rsv = [], {}
        b = None
        for r in res:
            ss = cells.get((t, r), [])
            ok = [s for s in ss if s.get("ok")]
            if not ok:
                row.append("failed"); continue
            pk, lv = med(ok, "long_term_peak_reserved_bytes"), med(ok, "long_term_live_peak_bytes")
            rsv[r] = pk
            b = (med(ok, "live_bound_bytes"), med(ok, "serial_live_bound_bytes"))
            row.append(f"{pk/M:.0f} / {lv/M:.0f}")
        others = [rsv[r] for r in ("pool", "arena", "async") if r in rsv]
        tgt = ""
        if others and "strata" in rsv:
            lim = 1.25 * min(others)
            tgt = f"{lim/M:.0f}: {'**met**' if rsv['strata'] <= lim else 'not met'}"
        bs = f"{b[0]/M:.0f} / {b[1]/M:.0f}" if b and b[0] else ""
        print(f"| {t} | " + " | ".join(row) + f" | {bs} | {tgt} |")

def times(path):
    d, cells = load(path)
    threads = sorted({t for t, _ in cells})
    res = [r for r in RES if any(v == r for _, v in cells)]
    print("| threads | resource | baseline | fragmented | long term | fragment step (untimed) | churn (untimed) |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for t in threads:
        vals = {}
        for r in res:
            ok = [s for s in cells.get((t, r), []) if s.get("ok")]
            vals[r] = [med(ok, k) if ok else None for k in ("baseline_ms", "fragmented_ms", "long_term_ms", "fragment_ms", "churn_ms")]
        best = [min((v[i] for v in vals.values() if v[i] is not None), default=None) for i in range(3)]
        for r in res:
            v = vals[r]
            cells_txt = []
            for i in range(5):
                if v[i] is None: cells_txt.append("–"); continue
                txt = f"{v[i]:.1f}"
                if i < 3 and v[i] == best[i]: txt = f"**{txt}**"
                cells_txt.append(txt)
            print(f"| {t} | {r} | " + " | ".join(cells_txt) + " |")


def spread(path, a="strata", b="async"):
    """Per thread count and phase: each round's value for a and b (counted samples)."""
    d, cells = load(path)
    for t in sorted({t for t, _ in cells}):
        parts = []
        for k in ("baseline_ms", "fragmented_ms", "long_term_ms"):
            xa = sorted(s["metrics"][k] for s in cells[(t, a)])
            xb = sorted(s["metrics"][k] for s in cells[(t, b)])
            parts.append(f"{k[:-3]}: {a} {'/'.join(f'{x:.0f}' for x in xa)} vs {b} {'/'.join(f'{x:.0f}' for x in xb)}")
        print(f"t{t}: " + "; ".join(parts))

if __name__ == "__main__":
    {"memory": memory, "times": times, "spread": lambda p: spread(p)}[sys.argv[1]](sys.argv[2])
