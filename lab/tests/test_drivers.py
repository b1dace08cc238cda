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
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for k in seen:
            if alive(k):
                os.kill(k, signal.SIGKILL)


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
