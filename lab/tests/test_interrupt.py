"""An interrupted run (Ctrl-C, kill, kill -9) keeps what it finished, marked incomplete."""

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strata_lab import cli, results, runner

from .conftest import ROOT, lab


def as_in_a_terminal():
    """A Ctrl-C reaches a program run in a terminal: SIGINT at its default.  A job a non-interactive
    shell starts in the background (`make test &`, nohup) inherits SIGINT ignored, and Python then
    never raises KeyboardInterrupt: these tests' SIGINTs did nothing, the runs went on to exit 0."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(tmp_path, **env_extra):
    env = dict(os.environ, STRATA_ROOT=str(ROOT), **env_extra)
    return subprocess.Popen([sys.executable, "-m", "strata_lab", "run", "--suite", "patterns",
                             "--alloc", "glibc", "--cells", "larson/t1", "--seconds", "0.3",
                             "--rounds", "20", "--warmup", "0", "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=as_in_a_terminal)


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


def scratch(tmp):
    """What runs left in TMPDIR: their scratch directories and anything in them."""
    return sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*"))


def test_kill_9_leaves_no_scratch_behind(built, tmp_path):
    """Session 42's probe: kill -9 of a run in the middle of a sample left the sample's temporary
    directory (the launcher's stdout, stderr, pid and rusage files; a driver's TMPDIR) in /tmp
    forever.  The next run removes what a dead run left, never a live run's."""
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    out.mkdir()
    proc = start(out, TMPDIR=str(tmp))
    wait_for_samples(out, 1, proc)
    deadline = time.monotonic() + 30
    while not any(p.name == "stdout" for p in tmp.rglob("stdout")):  # a sample is running
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.01)
    proc.kill()
    proc.wait(timeout=30)
    left = scratch(tmp)
    assert any(p.endswith("stdout") for p in left), left  # what kill -9 leaves: nothing can stop it

    # A live run beside: the next run must leave its scratch alone, and sweep the dead one's.
    (out / "live").mkdir()
    live = start(out / "live", TMPDIR=str(tmp))
    wait_for_samples(out / "live", 1, live)
    r = lab("run", "--suite", "patterns", "--alloc", "glibc", "--cells", "larson/t2", "--smoke",
            "--rounds", "1", "--warmup", "0", "--no-progress", "--out", str(out / "next"),
            env={"TMPDIR": str(tmp)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert live.poll() is None, live.communicate()
    survivors = sorted(p.name for p in tmp.iterdir())
    assert len(survivors) == 1 and survivors[0].startswith("strata-lab-run-"), (left, survivors)
    assert (tmp / survivors[0] / "lock").read_text().strip() == str(live.pid)
    n = len(results.load(next((out / "live").iterdir())).samples)
    wait_for_samples(out / "live", n + 2, live)  # the live run goes on, its samples succeed

    # Its own scratch goes with it when it is interrupted (SIGTERM as SIGINT: the run's finally).
    live.send_signal(signal.SIGTERM)
    _, err = live.communicate(timeout=60)
    assert live.returncode == 143, err
    doc = results.load(next((out / "live").iterdir()))
    assert doc.samples and all(s.ok for s in doc.samples)
    assert scratch(tmp) == []


def test_sweep_removes_only_what_no_run_holds(tmp_path):
    """sweep_scratch's rules, in one process (flock conflicts between two opens of the file)."""
    import fcntl

    from strata_lab import runner

    def made(name, lock=True, age=0.0):
        d = tmp_path / name
        (d / "sample-x").mkdir(parents=True)
        (d / "sample-x" / "stdout").write_text("x")
        if lock:
            (d / "lock").write_text("1\n")
        if age:
            t = time.time() - age
            os.utime(d, (t, t))
        return d

    held = made("strata-lab-run-held")
    fd = os.open(held / "lock", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        dead = made("strata-lab-run-dead")
        young = made("strata-lab-run-young", lock=False)
        old = made("strata-lab-run-old", lock=False, age=2 * runner.SCRATCH_GRACE_S)
        hidden = made(".strata-lab-run-new")
        hidden_old = made(".strata-lab-run-crashed", age=2 * runner.SCRATCH_GRACE_S)
        other = made("strata-lab-abcdefgh", lock=False, age=3600)  # an older lab's: not ours to judge
        removed = runner.sweep_scratch(tmp_path)
        assert sorted(p.name for p in removed) == sorted(p.name for p in (dead, old, hidden_old))
        assert all(p.is_dir() for p in (held, young, hidden, other))
    finally:
        os.close(fd)
    assert runner.sweep_scratch(tmp_path) == [held]


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


# A kill (SIGTERM, SIGHUP) while the run describes the machine, after its directory is made and
# before results.json is first written: the signal is sent by the lab to itself from there.
SIGNALLED_AT = """
import os, signal, sys
from strata_lab import cli, machine
real = machine.{name}
def signalled(*args, **kw):
    os.kill(os.getpid(), signal.{sig})
    return real(*args, **kw)
machine.{name} = signalled
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("name", ["describe", "git_revision"])
def test_kill_before_the_first_sample_leaves_nothing(built, tmp_path, sig, name):
    """Session 42's probe: SIGTERM or SIGHUP in the ~0.2 s between the run directory's creation
    and the first write of results.json ended the lab by the signal (status -15, no message) and
    left the run directory empty; Ctrl-C there was already handled."""
    env = dict(os.environ, STRATA_ROOT=str(ROOT))
    r = subprocess.run([sys.executable, "-c", SIGNALLED_AT.format(name=name, sig=sig),
                        "run", "--suite", "patterns", "--alloc", "glibc", "--cells", "larson/t1",
                        "--rounds", "1", "--warmup", "0", "--no-progress", "--out", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 128 + int(getattr(signal, sig)) and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert f"interrupted ({sig}) before the first sample; nothing was written" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


# Ctrl-C while the command line is still loading the lab: the console script's own code (pip
# writes it from pyproject's [project.scripts]) or `python -m strata_lab`, with a Ctrl-C delivered
# (a real SIGINT to the process) when it imports one of the lab's modules.
CTRL_C_WHILE_IMPORTING = """
import os, signal, sys
class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, CtrlC())
{entry}
"""
ENTRIES = {"console script": "from strata_lab.cli import main\nsys.exit(main())",
           "python -m": "import runpy\nrunpy.run_module('strata_lab', run_name='__main__')"}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("module", ["strata_lab.machine", "strata_lab.runner", "strata_lab.suite",
                                    "strata_lab.replay"])
def test_ctrl_c_while_the_cli_loads_exits_130_quietly(tmp_path, entry, module):
    """Session 42's probe: a Ctrl-C in the first ~0.1 s of any command, while cli.py imported the
    lab's modules, printed a KeyboardInterrupt traceback (and Python's exit by SIGINT)."""
    env = dict(os.environ, STRATA_ROOT=str(ROOT))
    code = CTRL_C_WHILE_IMPORTING.format(module=module, entry=ENTRIES[entry])
    r = subprocess.run([sys.executable, "-c", code, "env", "--json"], capture_output=True, text=True,
                       env=env, timeout=60, cwd=tmp_path, preexec_fn=as_in_a_terminal)
    assert r.returncode == 130 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert r.stderr.strip() == "strata-lab: interrupted" and r.stdout == "", r.stderr


def run_that_fails(monkeypatch, capsys, tmp_path, alloc):
    """A short run of larson/t1 into tmp_path with the failures monkeypatched in; the patches are
    undone, and its stderr returned once the run is seen to have stopped with exit 2, no traceback."""
    code = cli.main(["run", "--suite", "patterns", "--alloc", alloc, "--cells", "larson/t1", "--seconds", "0.1",
                     "--rounds", "4", "--warmup", "0", "--time-budget", "0", "--max-reruns", "0",
                     "--no-progress", "--out", str(tmp_path)])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("fail, at", [("full", 3), ("read-only", 3), ("full", 1)])
def test_a_results_file_that_cannot_be_written_stops_the_run_in_one_line(built, tmp_path, monkeypatch, capsys,
                                                                         fail, at):
    """A disk that fills up, or a run directory that becomes read-only, after the first sample:
    the run stops with one line that says where the finished samples are, not a traceback, and
    leaves no temporary file (as a non-root user's `chmod a-w` on the run directory would)."""
    calls = {"n": 0}
    real_fsync, real_mkstemp = results.os.fsync, results.tempfile.mkstemp

    def fsync(fd):  # write `at` of results.json: 1 before any sample, 3 after the first sample's
        calls["n"] += 1
        if calls["n"] == at:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    def mkstemp(**kw):
        calls["n"] += 1
        if calls["n"] == at:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(kw["dir"] / ".results-x.tmp"))
        return real_mkstemp(**kw)

    if fail == "full":
        monkeypatch.setattr(results.os, "fsync", fsync)
    else:
        monkeypatch.setattr(results.tempfile, "mkstemp", mkstemp)
    err = run_that_fails(monkeypatch, capsys, tmp_path, "glibc")
    if at == 1:
        assert "the run stops: nothing was written" in err
        assert list(tmp_path.iterdir()) == []  # no empty run directory either
        return
    (run_dir,) = tmp_path.iterdir()
    why = "No space left on device" if fail == "full" else "Permission denied"
    assert f"cannot write {run_dir / 'results.json'}: {why}" in err
    assert f"the 1 sample that finished is in {run_dir / 'results.json'} (marked incomplete)" in err
    doc = results.load(run_dir).to_json()
    assert doc["complete"] is False and len(doc["samples"]) == 1 and doc["samples"][0]["ok"]
    assert sorted(p.name for p in run_dir.iterdir()) == ["results.json"]


@pytest.mark.parametrize("where", ["strata-stats", "sample", "scratch"])
def test_a_directory_the_run_cannot_make_stops_it_in_one_line(built, tmp_path, monkeypatch, capsys, where):
    """A full disk or /tmp (no inodes left) or a directory made read-only can refuse the run's
    own directories too: strata-stats/ beside results.json, the sample's temporary directory, the
    run's scratch directory.  Each stopped the run with an OSError traceback; now one line, exit 2,
    as for results.json (docs/lab.md: every error is one message)."""
    real_mkdir, real_mkdtemp = runner.Path.mkdir, runner.tempfile.mkdtemp
    made = {"n": 0}

    def mkdir(self, *a, **kw):
        if where == "strata-stats" and self.name == "strata-stats":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_mkdir(self, *a, **kw)

    def mkdtemp(suffix=None, prefix=None, dir=None):
        made["n"] += 1
        if (where == "sample" and prefix == "sample-" and made["n"] > 2) or \
                (where == "scratch" and prefix.endswith(runner.SCRATCH_PREFIX)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(dir or "/tmp") / (prefix + "x")))
        return real_mkdtemp(suffix, prefix, dir)

    monkeypatch.setattr(runner.Path, "mkdir", mkdir)
    monkeypatch.setattr(runner.tempfile, "mkdtemp", mkdtemp)
    err = run_that_fails(monkeypatch, capsys, tmp_path, "strata")
    assert err.count("strata-lab: error:") == 1, err
    assert "No space left on device" in err
    (run_dir,) = tmp_path.iterdir()
    doc = results.load(run_dir).to_json()
    assert doc["complete"] is False
    if where == "scratch":
        assert "cannot make the run's scratch directory" in err and doc["samples"] == []
        return
    assert "the run stops:" in err
    if where == "strata-stats":
        assert f"cannot write {run_dir / 'strata-stats'}" in err and doc["samples"] == []
        assert f"no sample had finished ({run_dir / 'results.json'} is marked incomplete)" in err
    else:  # the scratch directory and the first sample's were made, the second sample's not
        assert "cannot write " in err and "/sample-x" in err
        assert f"the 1 sample that finished is in {run_dir / 'results.json'}" in err
        assert len(doc["samples"]) == 1 and doc["samples"][0]["ok"]


def test_a_run_directory_removed_under_the_run_is_not_said_to_hold_the_samples(built, tmp_path, monkeypatch,
                                                                            capsys):
    """A /tmp cleaner or an `rm -r` takes the run directory away mid-run: the run stopped saying
    "the 1 sample that finished is in .../results.json", a file that no longer existed."""
    import shutil

    calls = {"n": 0}
    real_mkstemp = results.tempfile.mkstemp

    def mkstemp(**kw):  # write 2 of results.json: after the first sample
        calls["n"] += 1
        if calls["n"] == 2:
            shutil.rmtree(kw["dir"])
        return real_mkstemp(**kw)

    monkeypatch.setattr(results.tempfile, "mkstemp", mkstemp)
    err = run_that_fails(monkeypatch, capsys, tmp_path, "glibc")
    assert list(tmp_path.iterdir()) == []
    assert "No such file or directory; the run stops: nothing is kept:" in err and " is gone " in err
    assert "finished is in" not in err
