"""What `make bench` runs: E1's four bands at 1 and 2 threads plus a few classic patterns, every
peer allocator against mimalloc, 5 interleaved rounds; sized to finish within 10 minutes on 2 cores."""

from strata_lab.allocators import BUILTINS

from . import e1, patterns

DESCRIPTION = ("make bench: E1 bands at 1 and 2 threads + larson, prodcon, cache-thrash, mstress; "
               "all allocators vs mimalloc")
ALLOCATORS = list(BUILTINS)  # every allocator the lab knows
BASELINE = "mimalloc"
ROUNDS = 5
WARMUP = 1

# 6 allocators x (8 E1 cells + 5 pattern cells) x (5 + 1 warm-up) = 468 samples of ~0.5 s plus
# process start: about 5 minutes on 2 cores.
SECONDS = 0.5


def cells(ctx):
    return (e1.cells(ctx, seconds=SECONDS)
            + patterns.cells(ctx, seconds=SECONDS, patterns=("larson", "prodcon", "cache-thrash"),
                             threads=(2,))
            + patterns.cells(ctx, seconds=SECONDS, patterns=("mstress",), threads=(2,)))
