"""Classic multithreaded allocator patterns (bench/host/patterns.cpp), each timed for a fixed
duration.  The same program's fixed-work shapes of issue 10 (prodcon-batch, churn, bigbuf,
randsize) are the `shapes` suite's."""

from strata_lab.allocators import BUILTINS
from strata_lab.suite import Cell

DESCRIPTION = ("classic patterns: larson server simulation, producer/consumer (remote frees), "
               "cache-thrash/cache-scratch false sharing, mstress thread churn, Pareto sizes, realloc growth")
ALLOCATORS = list(BUILTINS)  # every allocator the lab knows
BASELINE = "mimalloc"
ROUNDS = 5
WARMUP = 1

PATTERNS = ("larson", "prodcon", "cache-thrash", "cache-scratch", "mstress", "pareto", "realloc")


def cells(ctx, seconds: float = 1.0, patterns=PATTERNS, threads=(1, 2)):
    exe = ctx.bin("patterns")
    secs = ctx.duration(seconds, smoke=0.05)
    out = []
    for p in patterns:
        # producer/consumer needs a pair of threads; it always runs 2 per pair.
        counts = ctx.thread_counts([2] if p == "prodcon" else threads, smoke=[2])
        for t in counts:
            if p == "prodcon" and t % 2:
                continue
            argv = [exe, "--pattern", p, "--threads", t, "--seconds", secs]
            if ctx.smoke:
                argv.append("--smoke")
            out.append(Cell(workload=p, threads=t, argv=argv, metric="ops_per_sec", unit="ops/s",
                            params={"pattern": p, "seconds": secs}, timeout_s=max(30.0, 20 * secs)))
    return out
