"""The real-programs suite's driver: generated input, output checked against a plain run, the
allocator preloaded into the program itself, the program's own usage."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from .conftest import BUILD, ROOT


def driver(program: str, cache, env=None):
    e = dict(os.environ, STRATA_ROOT=str(ROOT), STRATA_LAB_CACHE=str(cache), **(env or {}))
    e.pop("STRATA_LAB_PRELOAD", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "strata_lab.suites.programs", "--program", program,
                           "--smoke"], capture_output=True, text=True, env=e, timeout=120)


needs_sqlite = pytest.mark.skipif(not shutil.which("sqlite3"), reason="sqlite3 is not installed")


@needs_sqlite
def test_output_is_checked_against_the_plain_run(tmp_path):
    r = driver("sqlite", tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["wall_s"] > 0 and out["cpu_s"] > 0 and out["minor_faults"] > 0
    assert out["rusage_source"] == "launcher"
    assert out["peak_rss_kb"] < 15000  # sqlite3's own peak, not the Python driver's image
    [d] = [p for p in (tmp_path / "programs").iterdir()]
    expected = json.loads((d / "expected.json").read_text())
    assert out["output_sha256"] == expected["sha256"] and out["output_bytes"] == expected["bytes"] > 0
    # a run whose output differs from the plain run's is a failure, not a number
    (d / "expected.json").write_text(json.dumps({"sha256": "0" * 64, "bytes": 1}))
    r = driver("sqlite", tmp_path)
    assert r.returncode == 1 and "output differs from the plain run" in r.stderr and not r.stdout.strip()


@needs_sqlite
def test_the_allocator_reaches_the_program(built, tmp_path):
    stats = tmp_path / "stats.json"
    r = driver("sqlite", tmp_path / "cache", {"STRATA_LAB_PRELOAD": str(BUILD / "lib" / "libstrata.so"),
                                              "STRATA_STATS_FILE": str(stats)})
    assert r.returncode == 0, r.stderr
    got = json.loads(stats.read_text())  # written by strata inside sqlite3 at its exit
    assert got["allocator"] == "strata" and got["malloc_count"] > 1000


def test_make_bench_runs_the_programs_at_their_bench_size_within_its_budget(built):
    from strata_lab.allocators import BUILTINS
    from strata_lab.suite import SuiteContext, load_suite
    from strata_lab.suites import programs

    suite = load_suite("default")
    cells = {c.id: c for c in suite.cells(SuiteContext(smoke=False))}
    full = {c.id: c for c in load_suite("programs").cells(SuiteContext(smoke=False))}
    present = [n for n in list(programs.PROGRAMS) + ["redis"] if not programs.missing(n)]
    assert present and set(present) <= set(cells)

    def size(c):
        flag = "--requests" if c.id == "redis" else "--size"
        return int(c.argv[[str(a) for a in c.argv].index(flag) + 1])

    for name in present:  # smaller than the programs suite's own, never the smoke size
        assert size(cells[name]) < size(full[name]) and "--smoke" not in cells[name].argv
    # every allocator against mimalloc; strata's ratio to ±5 %, the run within a budget that
    # leaves the rest of make bench's 10 minutes to start-up, the table and the report
    assert set(suite.allocators) == set(BUILTINS) and suite.baseline == "mimalloc"
    assert suite.converge == ["strata"] and suite.target_width == 0.05
    assert 0 < suite.time_budget <= 540
