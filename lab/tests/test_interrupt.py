"""An interrupted run (Ctrl-C, kill, kill -9) keeps what it finished, marked incomplete."""

import os
import signal
import subprocess
import sys
import time

import pytest

from strata_lab import results

from .conftest import ROOT


def start(tmp_path):
    env = dict(os.environ, STRATA_ROOT=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "strata_lab", "run", "--suite", "patterns",
                             "--alloc", "glibc", "--cells", "larson/t1", "--seconds", "0.3",
                             "--rounds", "20", "--warmup", "0", "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_samples(tmp_path, n, proc, limit=60):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        dirs = list(tmp_path.iterdir())
        if dirs and (dirs[0] / "results.json").exists():
            try:
                doc = results.load(dirs[0]).to_json()
                if len(doc["samples"]) >= n:
                    return dirs[0]
            except Exception:
                pass  # never half a file: at worst the previous version
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    pytest.fail("the run produced no samples in time")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGKILL, -9)])
def test_interrupted_run_keeps_valid_partial_results(built, tmp_path, sig, code):
    proc = start(tmp_path)
    run_dir = wait_for_samples(tmp_path, 2, proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    doc = results.load(run_dir).to_json()
    assert doc["complete"] is False
    assert doc["interrupted"] == (None if sig == signal.SIGKILL else sig.name)
    assert 2 <= len(doc["samples"]) < 20
    assert all(s["ok"] for s in doc["samples"])  # the sample cut short is not recorded as a number
    if sig != signal.SIGKILL:
        assert "marked incomplete" in err
    # no workload left running behind the lab, even after kill -9 (the launcher's PDEATHSIG)
    for _ in range(40):
        ps = subprocess.run(["pgrep", "-f", "strata-bench-patterns --pattern larson --threads 1 --seconds 0.3"],
                            capture_output=True, text=True)
        if not ps.stdout.strip():
            break
        time.sleep(0.05)
    assert ps.stdout.strip() == "", "a sample outlived the lab"
    # and the partial run still reports, saying it is incomplete
    r = subprocess.run([sys.executable, "-m", "strata_lab", "report", str(run_dir), "--no-html"],
                       capture_output=True, text=True, env=dict(os.environ, STRATA_ROOT=str(ROOT)))
    assert r.returncode == 0 and "INCOMPLETE" in r.stdout


# A Ctrl-C at a chosen moment: the lab in a child process with one function replaced by one that
# raises KeyboardInterrupt, as a Ctrl-C arriving while it runs would.
INTERRUPTED_AT = """
import sys
from strata_lab import cli, machine, runner
def ctrl_c(*args, **kw):
    raise KeyboardInterrupt
setattr({module}, {name!r}, ctrl_c)
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("module, name", [("machine", "cpu_ranges"),  # the lines before the run
                                          ("runner", "execute")])     # describing the machine
def test_ctrl_c_before_the_first_sample_leaves_nothing(built, tmp_path, module, name):
    """Session 41's probe: Ctrl-C in the first ~0.3 s of a run left an empty run directory (no
    results.json) and printed a KeyboardInterrupt traceback."""
    env = dict(os.environ, STRATA_ROOT=str(ROOT))
    r = subprocess.run([sys.executable, "-c", INTERRUPTED_AT.format(module=module, name=name),
                        "run", "--suite", "patterns", "--alloc", "glibc", "--cells", "larson/t1",
                        "--rounds", "1", "--warmup", "0", "--no-progress", "--out", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 130 and "Traceback" not in r.stderr, r.stderr
    assert "strata-lab: interrupted" in r.stderr and "samples that finished" not in r.stderr
    assert list(tmp_path.iterdir()) == []
