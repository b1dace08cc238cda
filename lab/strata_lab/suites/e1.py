"""E1: size-class throughput (EXPERIMENTS.md E1), four bands at 1 and 2 threads."""

from strata_lab.allocators import BUILTINS
from strata_lab.suite import Cell

DESCRIPTION = "E1 size-class throughput: tiny/mid/large/big bands, alloc/free loop, ops/s and peak RSS"
ALLOCATORS = list(BUILTINS)  # every allocator the lab knows
BASELINE = "mimalloc"
ROUNDS = 5
WARMUP = 1

BANDS = ("tiny", "mid", "large", "big")


def cells(ctx, seconds: float = 1.0, bands=BANDS, threads=(1, 2)):
    exe = ctx.bin("e1-sizeclass")
    secs = ctx.duration(seconds, smoke=0.05)
    out = []
    for band in bands:
        for t in ctx.thread_counts(threads, smoke=[1]):
            argv = [exe, "--band", band, "--threads", t, "--seconds", secs]
            if ctx.smoke:
                argv.append("--smoke")
            out.append(Cell(workload=f"e1-{band}", threads=t, argv=argv, metric="ops_per_sec",
                            unit="ops/s", params={"band": band, "seconds": secs},
                            timeout_s=max(30.0, 20 * secs)))
    return out
