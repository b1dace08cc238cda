"""What `make bench` runs: E1's four bands at 1 and 2 threads, a few classic patterns and issue
10's allocation shapes, every peer allocator against mimalloc, 5 interleaved rounds; sized to
finish within about 10 minutes on 2 cores."""

from strata_lab.allocators import BUILTINS

from . import e1, patterns, shapes

DESCRIPTION = ("make bench: E1 bands at 1 and 2 threads + larson, prodcon, cache-thrash, mstress + "
               "issue 10's shapes (prodcon-batch, churn, bigbuf, randsize); all allocators vs mimalloc")
ALLOCATORS = list(BUILTINS)  # every allocator the lab knows
BASELINE = "mimalloc"
ROUNDS = 5
WARMUP = 1

# 8 allocators x (5 + 1 warm-up) runs of each cell:
# - 8 E1 cells + 4 pattern cells of SECONDS each: 576 samples of ~0.65 s with process start,
#   about 6 minutes on 2 cores;
# - 8 shape cells of fixed work, at SHAPES_SCALE of the shapes suite's work: measured single runs
#   on 2 cores summed to ~41 s per round over all allocators at full work (0.05-4 s a sample;
#   jemalloc, rpmalloc and strata are slow on churn and bigbuf), so ~2 minutes at half work plus
#   ~1 minute of process starts.
# About 9-10 minutes in all; the E1 cells keep their 0.5 s so their figures stay comparable.
SECONDS = 0.5
SHAPES_SCALE = 0.5


def cells(ctx):
    return (e1.cells(ctx, seconds=SECONDS)
            + patterns.cells(ctx, seconds=SECONDS, patterns=("larson", "prodcon", "cache-thrash"),
                             threads=(2,))
            + patterns.cells(ctx, seconds=SECONDS, patterns=("mstress",), threads=(2,))
            + shapes.cells(ctx, scale=SHAPES_SCALE))
