"""Allocation shapes of programs strata lost on (issue 10), as fixed-work patterns of
bench/host/patterns.cpp: batched producer/consumer (64 B and 8 B-2 KiB; a ring of threads that
each free and allocate, and producers that only allocate beside consumers that only free),
thread churn with blocks outliving their thread, big zero-filled buffers, random sizes with some
remote frees, a working set of one small size replaced one block at a time (fill), the same with
buffers of 4000 B over a table several times the cache (pool), and threads started in
generations that calloc blocks of 8 B-5 MiB and leave some to the next (generations).

Each sample does a fixed amount of work (`--ops`, recorded in the cell's params) and the metric is
operations per second, so a ratio of medians is the inverse ratio of times (randsize: operations
per CPU-second of the process, as the issue measured it, from the pattern's start: the process's
start-up left out). `--seconds` only bounds a sample: a sample cut short by it reports
`work_fraction` < 1 and its rate stays comparable. Minor page faults
per sample come from the lab's wait4() (`minflt`); peak RSS from the program (`peak_rss_kb`)."""

from strata_lab.allocators import BUILTINS
from strata_lab.suite import Cell

DESCRIPTION = ("allocation shapes of programs strata lost on (issue 10): prodcon-batch(-mixed), prodcon-split(-mixed), "
               "churn, generations, bigbuf, bigcalloc, randsize, fill, pool, rebuild; fixed work, all allocators vs mimalloc")
ALLOCATORS = list(BUILTINS)  # every allocator the lab knows
BASELINE = "mimalloc"
ROUNDS = 5
WARMUP = 1

# pattern -> (work units (--ops) for a full sample, thread counts, primary metric).
# The work takes about 0.3-0.6 s per sample under glibc on this project's 2-core machines.
SHAPES = {
    "prodcon-batch": (10000, (2,), "ops_per_sec"),       # batches of 1000 x 64 B; a ring of threads
    "prodcon-batch-mixed": (4000, (2,), "ops_per_sec"),  # batches of 1000 x 8 B-2 KiB
    "prodcon-split": (2000, (2,), "ops_per_sec"),  # batches of 4096 x 64 B; producers only allocate
    "prodcon-split-mixed": (1000, (2,), "ops_per_sec"),  # the same, 17 sizes of 8 B-2 KiB
    "churn": (384, (1, 2), "ops_per_sec"),               # short-lived threads started
    "generations": (25, (2, 4), "ops_per_sec"),          # generations of threads started together
    "bigbuf": (2000, (1,), "ops_per_sec"),               # 5-25 MiB buffer replacements, one thread
    "bigcalloc": (3200, (1, 2), "ops_per_sec"),          # 2-6 MiB buffers from calloc, 16 a round
    "randsize": (3000000, (1, 2, 4), "ops_per_cpu_sec"),  # 8 B-16 KiB replacements, 10 % remote frees
    "fill": (20000000, (1, 2), "ops_per_sec"),  # 64 B replacements in a working set of 4096 per thread
    "pool": (10000000, (1, 2), "ops_per_sec"),  # 4000 B replacements in a working set of 2000 per thread
    "rebuild": (600000, (1, 2), "ops_per_sec"),  # map inserts; the map torn down and rebuilt, 4 rounds
}

BOUND_SECONDS = 10.0  # per-sample bound on the fixed work (strata took ~5x glibc's time on bigbuf)


def cells(ctx, scale: float = 1.0, bound: float = BOUND_SECONDS, shapes=tuple(SHAPES)):
    """`scale` multiplies every pattern's work (the default suite runs less of it); `bound` caps
    each sample's seconds."""
    exe = ctx.bin("patterns")
    secs = ctx.duration(bound, smoke=bound)  # --smoke shrinks the work, not the bound
    out = []
    for p in shapes:
        work, threads, metric = SHAPES[p]
        ops = max(1, round(work * scale))
        for t in ctx.thread_counts(list(threads)):  # smoke runs are tiny: every count
            if p.startswith("prodcon") and t < 2:
                continue  # one thread would hand its batches to itself: no remote free at all
            if p == "bigbuf" and t != 1:
                continue  # one thread by definition
            argv = [exe, "--pattern", p, "--threads", t, "--seconds", secs]
            argv += ["--smoke"] if ctx.smoke else ["--ops", ops]
            out.append(Cell(workload=p, threads=t, argv=argv, metric=metric,
                            unit="ops/CPU-s" if metric == "ops_per_cpu_sec" else "ops/s",
                            params={"pattern": p, "bound_seconds": secs, **({} if ctx.smoke else {"ops": ops})},
                            timeout_s=max(60.0, 3 * secs)))
    return out
