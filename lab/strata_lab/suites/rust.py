"""A Rust program under the Rust world's global allocators: strata (the strata-alloc crate),
mimalloc (the `mimalloc` crate) and jemalloc (`tikv-jemallocator`).

The global allocator is fixed at compile time, so each variant is its own binary of
bindings/rust/alloc-bench (rust-alloc-strata, -mimalloc, -jemalloc: the same workload, the
same checksum), built into build/rust/release by `make rust-bench`.  The workload: per worker
thread, HashMap/BTreeMap churn with formatted strings, binary trees of boxed nodes, and batches of
strings sent over channels and dropped by another thread.  Nothing is preloaded: each sample runs
the variant's binary directly (through /bin/sh's exec, which picks it by the variant's
`--allocator` argument; the binary refuses a name that is not its own).
"""

from __future__ import annotations

from strata_lab import paths
from strata_lab.errors import LabError
from strata_lab.suite import Cell

DESCRIPTION = "Rust: alloc-bench (maps, trees, cross-thread string batches) with strata-alloc, mimalloc, tikv-jemallocator"
VARIANTS = {
    name: {"args": ["--allocator", name], "description": description}
    for name, description in [("strata", "strata-alloc crate (strata built from this repository)"),
                              ("mimalloc", "mimalloc crate (its bundled mimalloc)"),
                              ("jemalloc", "tikv-jemallocator crate (its bundled jemalloc)")]
}
BASELINE = "mimalloc"
ROUNDS = 5
WARMUP = 1
TIME_BUDGET = 150  # seconds: adaptive rounds stop there (the machine is shared)

# $0 is the binaries' directory; the last argument names the variant.
LAUNCH = 'for last; do :; done; exec "$0/rust-alloc-$last" "$@"'


def bin_dir():
    return paths.build_dir() / "rust" / "release"


def missing() -> list[str]:
    return [n for n in VARIANTS if not (bin_dir() / f"rust-alloc-{n}").is_file()]


def smoke_skip():
    gone = missing()
    return f"{', '.join('rust-alloc-' + n for n in gone)} not built: run make rust-bench" if gone else None


def cells(ctx):
    if missing():
        raise LabError(f"suite rust: {smoke_skip()} (it builds {bin_dir()}/rust-alloc-*)")
    rounds = 1 if ctx.smoke else 3
    return [
        Cell(workload="rust-alloc", threads=t,
             argv=["/bin/sh", "-c", LAUNCH, bin_dir(), "--threads", t, "--rounds", rounds]
                  + (["--smoke"] if ctx.smoke else []),
             metric="seconds", unit="s", higher_is_better=False, timeout_s=120)
        for t in ctx.thread_counts([1, 2], smoke=[2])
    ]
