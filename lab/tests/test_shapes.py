"""Issue 10's allocation shapes: the fixed-work patterns of strata-bench-patterns and the suite
that runs them (its smoke run is test_suites_smoke's, with every other suite)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from strata_lab.suite import SuiteContext, load_suite

from .conftest import program

SHAPES = ("prodcon-batch", "prodcon-batch-mixed", "prodcon-split", "prodcon-split-mixed", "churn", "bigbuf",
          "bigcalloc", "randsize", "rebuild")
ALL_SHAPES = SHAPES + ("fill", "pool", "generations")  # the shapes suite's; make bench runs SHAPES


def run_pattern(*args: str, timeout: float = 60) -> dict:
    r = subprocess.run([str(program("strata-bench-patterns")), *args], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("pattern", ALL_SHAPES)
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_shape_smoke_does_all_its_work(pattern, threads):
    d = run_pattern("--pattern", pattern, "--threads", str(threads), "--smoke", "--seconds", "5")
    assert d["pattern"] == pattern
    if pattern == "bigbuf":
        assert d["threads"] == 1
    elif pattern.startswith("prodcon-split"):  # pairs of a producer and a consumer, one at least
        assert d["threads"] == max(2, threads) and d["pairs"] == max(1, threads // 2)
    else:
        assert d["threads"] == threads
    assert d["ops"] > 0 and d["ops_per_sec"] > 0 and d["peak_rss_kb"] > 0
    assert d["work_fraction"] == 1.0, d
    if pattern == "randsize":
        assert d["ops_per_cpu_sec"] > 0 and d["cpu_seconds"] > 0
        assert (d["remote_frees"] > 0) == (threads > 1), d


def test_ops_sets_the_work():
    d = run_pattern("--pattern", "prodcon-batch", "--threads", "2", "--ops", "20", "--smoke")
    assert d["work_planned"] == 20 and d["work_fraction"] == 1.0
    # 20 batches of 64 blocks allocated; each thread's first 4 batches arrive empty (the queue's
    # initial depth), so 2 x (10 - 4) full batches were freed
    assert d["ops"] == (20 + 12) * 64


@pytest.mark.parametrize("pattern", ["prodcon-split", "prodcon-split-mixed"])
def test_split_consumers_free_every_block_the_producers_made(pattern):
    # 2 producers, 2 consumers: the 30 batches of 64 blocks are freed whole, none left waiting
    d = run_pattern("--pattern", pattern, "--threads", "4", "--ops", "30", "--smoke")
    assert d["work_planned"] == 30 and d["work_fraction"] == 1.0
    assert d["ops"] == 30 * 64 and d["pairs"] == 2


def test_seconds_bounds_the_work():
    start = time.monotonic()
    d = run_pattern("--pattern", "randsize", "--threads", "2", "--ops", str(10**12), "--seconds", "0.2")
    assert time.monotonic() - start < 20
    assert 0 < d["work_fraction"] < 1, d


def test_suite_cells(built):
    suite = load_suite("shapes")
    cells = suite.cells(SuiteContext(smoke=False))
    got = {(c.workload, c.threads) for c in cells}
    assert got == {("prodcon-batch", 2), ("prodcon-batch-mixed", 2), ("prodcon-split", 2),
                   ("prodcon-split-mixed", 2), ("churn", 1), ("churn", 2),
                   ("bigbuf", 1), ("bigcalloc", 1), ("bigcalloc", 2), ("randsize", 1), ("randsize", 2),
                   ("randsize", 4), ("fill", 1), ("fill", 2), ("pool", 1), ("pool", 2), ("generations", 2),
                   ("generations", 4),
                   ("rebuild", 1), ("rebuild", 2)}
    for c in cells:
        argv = [str(a) for a in c.argv]
        assert "--ops" in argv and "--smoke" not in argv
        assert c.metric == ("ops_per_cpu_sec" if c.workload == "randsize" else "ops_per_sec")
    smoke = suite.cells(SuiteContext(smoke=True))
    assert {(c.workload, c.threads) for c in smoke} == got
    assert all("--smoke" in [str(a) for a in c.argv] for c in smoke)


def test_default_suite_runs_the_shapes_with_every_allocator(built):
    suite = load_suite("default")
    cells = suite.cells(SuiteContext(smoke=False))
    names = [c.name or f"{c.workload}/t{c.threads}" for c in cells]
    assert len(names) == len(set(names))
    shapes = [c for c in cells if c.workload in SHAPES]
    assert {c.workload for c in shapes} == set(SHAPES) and len(shapes) == 14
    full = {c.workload: c for c in load_suite("shapes").cells(SuiteContext(smoke=False))}
    for c in shapes:  # less work than the shapes suite's, to keep make bench within ~10 minutes
        ops = lambda cell: int(cell.argv[cell.argv.index("--ops") + 1])  # noqa: E731
        if c.workload == "rebuild":  # all of it: shorter rounds end before the purge they measure
            assert ops(c) == ops(full[c.workload])
        else:
            assert ops(c) < ops(full[c.workload])
    from strata_lab.allocators import BUILTINS

    assert {"snmalloc", "rpmalloc", "strata", "mimalloc"} <= set(suite.allocators) == set(BUILTINS)


@pytest.mark.parametrize("pattern", ["fill", "pool", "rebuild", "randsize"])
def test_smoke_keeps_the_seconds_bound_of_fixed_work(pattern):
    """--smoke shrinks a fixed-work pattern's work and keeps --seconds as its bound; fill and
    rebuild were missing from the list of fixed-work patterns, so --smoke cut them at 0.05 s, as
    it does the timed patterns, and a loaded machine could leave a smoke run's work unfinished.
    Work that cannot finish (--ops 10**12) runs to the bound, not 0.05 s."""
    d = run_pattern("--pattern", pattern, "--smoke", "--ops", str(10**12), "--seconds", "0.5")
    assert 0 < d["work_fraction"] < 1, d
    assert d["seconds"] >= 0.5, d


def test_randsize_cpu_is_the_patterns_own(tmp_path):
    """randsize's ops_per_cpu_sec divided its operations by the process's CPU since exec: its
    start-up too (the loader, the preloaded allocator's initialisation; 2-4 ms, a tenth of strata's
    CPU at make bench's 750,000 replacements), outside the window its operations and seconds are
    counted in.  A preloaded library that burns 0.3 s of CPU before main must not show in it."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "burn.c"
    src.write_text("#include <time.h>\n"
                   "__attribute__((constructor)) static void burn(void) {\n"
                   "  struct timespec t;\n"
                   "  do clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); while (t.tv_sec == 0 && t.tv_nsec < 300000000);\n"
                   "}\n")
    lib = tmp_path / "libburn.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True)
    r = subprocess.run([str(program("strata-bench-patterns")), "--pattern", "randsize", "--smoke",
                        "--seconds", "30"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "LD_PRELOAD": str(lib)})
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["work_fraction"] == 1.0 and d["cpu_seconds"] > 0, d
    # 2000 replacements take a few milliseconds of CPU; the start-up took 0.3 s.
    assert d["cpu_seconds"] < 0.15, d
    assert d["ops_per_cpu_sec"] == pytest.approx(d["ops"] / d["cpu_seconds"], rel=1e-2), d


def test_generations_makes_half_as_many_kept_blocks_again():
    """docs/lab.md said thread i of a generation makes 5000 x (i mod 8 + 1) blocks and keeps half:
    it makes that many short-lived blocks and half as many again that it keeps (mimalloc's stress
    test's shape).  --smoke: 200 for thread 0, 400 for thread 1, each plus half."""
    d = run_pattern("--pattern", "generations", "--threads", "2", "--smoke", "--ops", "1", "--seconds", "30")
    assert d["generations"] == 1 and d["work_fraction"] == 1.0, d
    assert d["ops"] == (200 + 400) * 3 // 2, d
