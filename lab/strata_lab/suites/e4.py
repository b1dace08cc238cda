"""E4: object pools vs the general allocator, and NUMA placement (EXPERIMENTS.md E4).

One cell per group of bench/e4 (strata-bench-e4 --group <g>).  The program measures pool and
general allocator side by side in one process, with its own medians and 95% intervals, and
states a difference only outside the noise; the lab adds the across-process rounds and runs it
under each allocator, so the "general" rows are glibc, mimalloc and strata's malloc in turn.
"""

from strata_lab.results import BOOL, LIST, NUMBER, OBJECT, STRING, counted_metrics
from strata_lab.suite import Cell

DESCRIPTION = ("E4 object pools vs general allocator (single alloc, cycle, sizes 10-1000, "
               "preallocation, batches of 100, stats overhead) and NUMA placement/first-touch")
ALLOCATORS = ["glibc", "mimalloc", "strata"]
BASELINE = "glibc"
ROUNDS = 5
WARMUP = 1

# group -> (primary metric, unit, higher is better).  The primary metric is the general
# allocator's row where there is one: it is what changes from one preloaded allocator to the next.
GROUPS = {
    "pool_vs_general": ("pool_vs_general.cycle/general", "ns/op", False),
    "pool_sizes": ("pool_sizes.n100/general", "ns/op", False),
    "preallocation": ("preallocation.on/total", "ns/op", False),
    "numa": ("numa.default/first_touch_gbps", "GB/s", True),
    "batch100": ("batch100.t1/general", "ns/batch", False),
    "stats_overhead": ("stats_overhead.cycle/stats_every_op", "ns/op", False),
}

ANY = "any JSON value", lambda v: True
# What summarise() reads of each sample (checked before it runs: results.check_metrics): per
# group, the program's comparisons and, for numa, its policies (printed as they are).
COMPARISON = (("a", STRING, True), ("b", STRING, True), ("significant", BOOL, True),
              ("ratio_b_over_a", NUMBER, True))
POLICY = (("pages_per_node", ANY, True), ("kernel_policy", ANY, True),
          ("placement_matches_policy", ANY, True))
SUMMARY_METRICS = (("groups", OBJECT, True, (("comparisons", LIST, False, COMPARISON),
                                              ("policies", OBJECT, False, POLICY))),)


def cells(ctx, groups=tuple(GROUPS)):
    exe = ctx.bin("e4")
    out = []
    for g in groups:
        metric, unit, higher = GROUPS[g]
        argv = [exe, "--group", g]
        argv += ["--smoke"] if ctx.smoke else ["--samples", 11, "--sample-ms", 10]
        threads = 2 if g == "batch100" else 1  # its t2_cross rows run two threads
        out.append(Cell(workload=f"e4-{g}", threads=threads, argv=argv, metric=metric, unit=unit,
                        higher_is_better=higher, name=f"e4-{g}", params={"group": g},
                        timeout_s=120.0))
    return out


def summarise(results: dict) -> str:
    """The program's own verdicts (pool vs general, on vs off, stats vs none), per allocator:
    how many counted rounds found a significant difference, and the median ratio."""
    import statistics

    lines = ["## E4 verdicts (per round: 95% intervals apart, else 'no difference')", "",
             "| group | comparison | allocator | rounds significant | median ratio b/a |",
             "|---|---|---|---:|---:|"]
    for c in results["cells"]:
        if not c["workload"].startswith("e4-"):
            continue
        group = c["workload"][3:]
        for v in results["variants"]:
            ok = counted_metrics(results, c["id"], v)
            if not ok:
                lines.append(f"| {group} | | {v} | failed | |")
                continue
            comps = {}
            for m in ok:
                for comp in m.get("groups", {}).get(group, {}).get("comparisons", []):
                    comps.setdefault((comp["a"], comp["b"]), []).append(comp)
            for (a, b), runs in comps.items():
                sig = sum(1 for r in runs if r["significant"])
                ratio = statistics.median(r["ratio_b_over_a"] for r in runs)
                lines.append(f"| {group} | {a} vs {b} | {v} | {sig}/{len(runs)} | {ratio:.2f} |")
            if group == "numa":
                pol = ok[-1].get("groups", {}).get("numa", {}).get("policies", {})
                for spec, p in pol.items():
                    lines.append(f"| numa | {spec}: pages per node {p['pages_per_node']}, kernel "
                                 f"policy {p['kernel_policy']}, matches {p['placement_matches_policy']} "
                                 f"| {v} | | |")
    return "\n".join(lines)
