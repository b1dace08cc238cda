"""Every suite (including those other components add) runs in smoke mode and every sample
succeeds.  A suite that cannot run here says why through smoke_skip()."""

import re
import subprocess

import pytest

from strata_lab import results
from strata_lab.errors import LabError
from strata_lab.suite import SuiteContext, available_suites, load_suite

from .conftest import BUILD, lab


def ensure_programs(suite) -> None:
    """`make test` has built everything; when run alone, build the programs a suite names."""
    for _ in range(8):
        try:
            suite.cells(SuiteContext(smoke=True))
            return
        except LabError as e:
            m = re.search(r"--target (\S+)", str(e))
            if not m:
                raise
            r = subprocess.run(["cmake", "--build", str(BUILD), "--target", m.group(1)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                pytest.fail(f"suite {suite.name}: building {m.group(1)} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    pytest.fail(f"suite {suite.name}: its programs are still missing after building them")


@pytest.mark.parametrize("name", available_suites())
def test_suite_smoke(built, tmp_path, name):
    suite = load_suite(name)
    skip = getattr(suite.module, "smoke_skip", None)
    reason = skip() if skip else None
    if reason:
        pytest.skip(f"suite {name}: {reason}")
    ensure_programs(suite)
    args = ["run", "--suite", name, "--smoke", "--rounds", "1", "--warmup", "0", "--out", str(tmp_path),
            "--no-progress"]
    if not suite.variants:
        args += ["--alloc", "glibc"]
    r = lab(*args, timeout=600)
    assert r.returncode == 0, r.stderr
    [d] = list(tmp_path.iterdir())
    doc = results.load(d).to_json()
    assert doc["complete"] and doc["samples"]
    bad = [(s["cell"], s["variant"], s["failure"]) for s in doc["samples"] if not s["ok"]]
    assert not bad, bad
