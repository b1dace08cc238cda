"""E2 on the host: three-phase fragmentation (baseline -> fragmented -> long term) per thread count."""

from strata_lab.allocators import BUILTINS
from strata_lab.results import NUMBER, counted_metrics
from strata_lab.suite import Cell

DESCRIPTION = ("E2 host fragmentation: probe time at baseline, after fragmentation and long term, "
               "% change and RSS per phase, at 1, 2 and 4 threads")
ALLOCATORS = list(BUILTINS)  # every allocator the lab knows
BASELINE = "mimalloc"
ROUNDS = 5
WARMUP = 1

PHASES = (("baseline", "baseline_ms", "rss_baseline_kb"),
          ("fragmented", "fragmented_ms", "rss_fragmented_kb"),
          ("long term", "longterm_ms", "rss_longterm_kb"))
CHANGES = ("fragmented_change_pct", "longterm_change_pct")
# What summarise() reads of each sample (checked before it runs: results.check_metrics).
SUMMARY_METRICS = tuple((k, NUMBER, True) for p in PHASES for k in p[1:]) + \
    tuple((k, NUMBER, True) for k in CHANGES)


def cells(ctx, threads=(1, 2, 4)):
    exe = ctx.bin("e2-frag")
    out = []
    for t in ctx.thread_counts(threads, smoke=[1, 2]):
        argv = [exe, "--threads", t] + (["--smoke"] if ctx.smoke else [])
        out.append(Cell(workload="e2-frag", threads=t, argv=argv, metric="probe_ms", unit="ms",
                        higher_is_better=False, params={"phases": [p[0] for p in PHASES]},
                        timeout_s=120.0))
    return out


def summarise(results: dict) -> str:
    """The original's view: per thread count and allocator, baseline -> fragmented (% change)
    and the long-term % change, with RSS after each phase (medians over rounds)."""
    import numpy as np

    lines = ["## E2 phases (medians over rounds)", "",
             "| threads | allocator | baseline ms | fragmented ms (Δ %) | long term ms (Δ %) | "
             "RSS baseline → fragmented → long term (MiB) |", "|---:|---|---:|---:|---:|---|"]
    for c in results["cells"]:
        if c["workload"] != "e2-frag":
            continue
        for v in results["variants"]:
            ok = counted_metrics(results, c["id"], v)
            if not ok:
                lines.append(f"| {c['threads']} | {v} | failed | | | |")
                continue
            med = {k: float(np.median([m[k] for m in ok])) for k, _, _ in SUMMARY_METRICS}
            rss = " → ".join(f"{med[p[2]] / 1024:.1f}" for p in PHASES)
            flag = " ⚠ oversubscribed" if c.get("oversubscribed") else ""
            lines.append(f"| {c['threads']}{flag} | {v} | {med['baseline_ms']:.2f} | "
                         f"{med['fragmented_ms']:.2f} ({med['fragmented_change_pct']:+.1f} %) | "
                         f"{med['longterm_ms']:.2f} ({med['longterm_change_pct']:+.1f} %) | {rss} |")
    return "\n".join(lines)
