"""A driver's partners (servers, load generators, tenants) die with it, even when it is killed
with SIGKILL: the lab kills a sample's process group on a timeout or an interrupt, but kill -9 of
the lab reaches only the launcher and the driver (docs/lab.md: "even kill -9 of a run leaves no
workload behind").

Session 41's probe: redis_bench started redis-server in a session of its own, out of the group
the lab kills, and a driver killed before its cleanup left it running (after Ctrl-C, SIGTERM or
kill -9 of the lab, and after every timed-out sample); E5's servers and E3's tenants had no
parent-death signal and outlived kill -9 of the lab.  Everything here is on loopback."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from .conftest import program


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = [int(x) for x in f.read().split()]
                out += kids
                todo += kids
        except OSError:
            pass
    return out


def name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, not yet reaped
    except OSError:
        return False


def reap(driver, pids, group: bool = False) -> None:
    """A test's way out: the driver (its process group with `group`) and every pid still alive,
    killed."""
    if driver.poll() is None:
        if group:
            os.killpg(driver.pid, signal.SIGKILL)
        else:
            driver.kill()
        driver.wait()
    for k in pids:
        if alive(k):
            os.kill(k, signal.SIGKILL)


def kill_driver_and_check_partners(tmp_path, args: list[str], partners: list[str]) -> None:
    """Starts `python -m ARGS` in a process group of its own (as the lab's launcher runs it), waits
    until processes named `partners` run under it, kills it with SIGKILL, and expects each of them
    gone within 5 s.  Whatever is still there is killed, by pid, before the test ends."""
    driver = subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, start_new_session=True,
                              env=dict(os.environ, TMPDIR=str(tmp_path)))
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 30
        while True:
            kids = descendants(driver.pid)
            seen.update(kids)
            if all(any(name(k).startswith(p) for k in kids) for p in partners):
                break
            if driver.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{partners} did not start: {driver.communicate()[1][-1500:] if driver.poll() is not None else 'timed out'}")
            time.sleep(0.05)
        servers = [k for k in kids if any(name(k).startswith(p) for p in partners)]
        # In the driver's process group: the lab's kill of the group on a timeout reaches them.
        assert all(os.getpgid(k) == driver.pid for k in servers), [(k, name(k)) for k in servers]
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 5
        while any(alive(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [(k, name(k)) for k in kids if alive(k)]
        assert not left, f"outlived the driver killed with SIGKILL: {left}"
    finally:
        reap(driver, seen)


@pytest.mark.skipif(not (shutil.which("redis-server") and shutil.which("redis-benchmark")),
                    reason="redis-server and redis-benchmark are not installed")
def test_redis_bench_server_dies_with_its_driver(tmp_path):
    kill_driver_and_check_partners(
        tmp_path, ["strata_lab.drivers.redis_bench", "--requests", "100000000", "--clients", "1",
                   "--timeout", "60"], ["redis-server", "redis-benchmark"])
    assert list(tmp_path.iterdir()) == []  # the server's log had no name to leave behind


@pytest.mark.parametrize("server, partners", [("redis", ["redis-server"]), ("nginx", ["nginx", "wrk"])])
def test_e5_servers_die_with_their_driver(tmp_path, server, partners):
    for exe in partners:
        if not shutil.which(exe):
            pytest.skip(f"{exe} is not installed")
    cpus = sorted(os.sched_getaffinity(0))
    kill_driver_and_check_partners(
        tmp_path, ["strata_lab.drivers.e5_server", "--server", server, "--server-cpus", str(cpus[0]),
                   "--client-cpus", str(cpus[-1]), "--client-threads", "1", "--connections", "2",
                   "--seconds", "30", "--warmup-seconds", "30"], partners)


def test_e3_tenants_die_with_their_driver(tmp_path):
    tenant = program("strata-bench-e3-tenant")
    kill_driver_and_check_partners(
        tmp_path, ["strata_lab.drivers.e3_round", "--tenant", str(tenant), "--work-per-us", "1",
                   "--csv-dir", str(tmp_path / "csv"), "--lc-procs", "1", "--be-procs", "1",
                   "--kernels", "1000000", "--lc-gap-us", "1000", "--be-burst-us", "1000",
                   "--timeout-s", "60"], ["strata-bench-e3"])


def _spark_problem() -> str | None:
    try:
        from strata_lab.drivers import spark_job

        spark_job.spark_home()
        return spark_job.java_problem()
    except Exception as e:
        return str(e)


def _spark_scratch_in_tmp() -> set[str]:
    return {e.name for e in os.scandir("/tmp") if e.name.startswith(("spark-", "blockmgr-"))}


@pytest.mark.skipif(_spark_problem() is not None, reason=f"no Spark here: {_spark_problem()}")
def test_spark_job_killed_leaves_no_spark_directories_in_tmp(tmp_path):
    """The lab kills a timed-out sample's process group with SIGKILL and removes the sample's
    directory (the driver's TMPDIR).  Spark's scratch space (the driver's blockmgr-* and spark-*,
    the worker's spark-*/executor-* with the executors' shuffle files) was in /tmp, which the
    JVMs use whatever TMPDIR says: every killed Spark sample left four directories there."""
    before = _spark_scratch_in_tmp()
    driver = subprocess.Popen([sys.executable, "-m", "strata_lab.drivers.spark_job", "--smoke",
                               "--timeout", "120"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True, env=dict(os.environ, TMPDIR=str(tmp_path)))
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 150
        while True:  # until both executors run: every JVM has made its directories
            kids = descendants(driver.pid)
            seen.update(kids)
            executors = [k for k in kids if b"CoarseGrainedExecutorBackend" in _cmdline(k)]
            if len(executors) == 2:
                break
            if driver.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the executors did not start: "
                            f"{driver.communicate()[1][-1500:] if driver.poll() is not None else 'timed out'}")
            time.sleep(0.2)
        time.sleep(3)
        os.killpg(driver.pid, signal.SIGKILL)  # what the lab does past a sample's timeout
        driver.wait()
        deadline = time.monotonic() + 60
        while any(alive(k) for k in seen) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [k for k in seen if alive(k)]
        assert _spark_scratch_in_tmp() - before == set()
    finally:
        reap(driver, seen)


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


@pytest.mark.skipif(_spark_problem() is not None, reason=f"no Spark here: {_spark_problem()}")
def test_spark_job_with_hung_executors_ends_at_its_timeout(tmp_path):
    """--timeout ("seconds for the whole run") bounded the waits for the cluster and the
    executors, not the job: with both executors stopped (as a deadlock in the allocator under
    test would leave them) the driver still waited after 200 s of a 40 s --timeout."""
    driver = subprocess.Popen([sys.executable, "-m", "strata_lab.drivers.spark_job", "--timeout", "40"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True, env=dict(os.environ, TMPDIR=str(tmp_path)))
    seen: set[int] = set()
    try:
        while True:
            kids = descendants(driver.pid)
            seen.update(kids)
            executors = [k for k in kids if b"CoarseGrainedExecutorBackend" in _cmdline(k)]
            if len(executors) == 2:
                break
            if driver.poll() is not None:
                pytest.fail(f"the executors did not start: {driver.communicate()[1][-1500:]}")
            time.sleep(0.2)
        time.sleep(2)  # the job has begun
        for k in executors:
            os.kill(k, signal.SIGSTOP)
        try:
            out, err = driver.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            pytest.fail("the driver ran on past its --timeout with its executors hung")
        assert driver.returncode == 1 and "did not finish within --timeout" in err, err[-1500:]
        assert out == ""  # no figure for a job that did not end
    finally:
        reap(driver, seen, group=True)


@pytest.mark.parametrize("args, why", [(["--timeout", "nan"], "--timeout must be"),
                                       (["--timeout", "-1"], "--timeout must be"),
                                       (["--executors", "0"], "--executors must be")])
def test_spark_job_refuses_bad_arguments(args, why):
    """--timeout nan compared false with every deadline, so a cluster or executors that never came
    up were waited for without end; --executors 0 ended in the worker's Java stack trace."""
    r = subprocess.run([sys.executable, "-m", "strata_lab.drivers.spark_job", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr


def test_spark_executors_are_this_clusters_only():
    """executor_pids matched any process whose command line named the executor class and the app
    id; app ids (app-<second>-0000) repeat across clusters whose first applications start in the
    same second, so another run's executors were summed into this run's peak RSS."""
    from strata_lab.drivers import spark_job

    app = "app-20261128115642-0000"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                              spark_job.EXECUTOR_CLASS, "--app-id", app])
    mine = subprocess.Popen([sys.executable, "-c",
                             "import subprocess, sys; subprocess.run(sys.argv[1:])",
                             sys.executable, "-c", "import time; time.sleep(60)",
                             spark_job.EXECUTOR_CLASS, "--app-id", app])
    kids: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while not any(spark_job.EXECUTOR_CLASS.encode() in _cmdline(k) for k in kids):
            assert time.monotonic() < deadline, "the child did not start"
            time.sleep(0.05)
            kids = descendants(mine.pid)
        assert spark_job.executor_pids(app, mine.pid) == kids
    finally:
        for k in kids:
            os.kill(k, signal.SIGKILL)
        for p in (other, mine):
            p.kill()
            p.wait()
