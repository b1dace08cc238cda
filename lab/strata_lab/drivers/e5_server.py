"""Driver: one E5 sample (strata_lab/suites/e5.py): a fresh server (strata's httpd, nginx or
redis) pinned to its CPUs with $STRATA_LAB_PRELOAD as its allocator, an uncounted warm-up client
run, then one counted client run (wrk or redis-benchmark) pinned to the client CPUs.  Prints one
JSON line: requests/s, latency p50/p90/p99, context switches per second per thread of server and
client (the server's per thread from /proc), CPU use of both, the server's peak RSS (VmHWM summed
over its processes) and the CPU share other processes took during the window.

    python -m strata_lab.drivers.e5_server --server httpd|nginx|redis --server-cpus 0 \
        --client-cpus 1 --client-threads 2 [--connections N] [--seconds S] [--warmup-seconds S]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from strata_lab import machine
from strata_lab.drivers import die_with_driver

SERVERS = ("httpd", "nginx", "redis")
DEFAULT_SECONDS = 3.0
WARMUP_S = 1.0
CONNECTIONS = 100
CLK_TCK = machine.CLK_TCK
LUA_REPORT = Path(__file__).resolve().parents[3] / "bench" / "e3e5" / "wrk_report.lua"


# ---- /proc: per-thread context switches and CPU time ----------------------------------------

def process_tree(pid: int) -> list[int]:
    """pid and its descendants (nginx: master and workers)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def thread_counters(pids: list[int]) -> dict[int, dict]:
    """tid -> {name, vol, invol, cpu_ticks} for every thread of these processes."""
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            base = f"/proc/{pid}/task/{tid}"
            try:
                status = Path(f"{base}/status").read_text()
                stat = Path(f"{base}/stat").read_text()
            except OSError:
                continue
            fields = {k: v.strip() for k, _, v in (l.partition(":") for l in status.splitlines())}
            after = stat.rsplit(")", 1)[1].split()
            out[int(tid)] = {"name": fields.get("Name", "?"), "pid": pid,
                             "vol": int(fields.get("voluntary_ctxt_switches", 0)),
                             "invol": int(fields.get("nonvoluntary_ctxt_switches", 0)),
                             "cpu_ticks": int(after[11]) + int(after[12])}  # utime + stime
    return out


def counter_deltas(before: dict[int, dict], after: dict[int, dict], seconds: float) -> dict:
    """Per-thread rates over a window; threads that appeared during it count from zero."""
    threads = []
    for tid, a in sorted(after.items()):
        b = before.get(tid, {"vol": 0, "invol": 0, "cpu_ticks": 0})
        threads.append({"tid": tid, "name": a["name"],
                        "vol_per_s": (a["vol"] - b["vol"]) / seconds,
                        "invol_per_s": (a["invol"] - b["invol"]) / seconds,
                        "cpu": (a["cpu_ticks"] - b["cpu_ticks"]) / CLK_TCK / seconds})
    n = max(len(threads), 1)
    return {"threads": threads, "thread_count": len(threads),
            "vol_per_s_per_thread": sum(t["vol_per_s"] for t in threads) / n,
            "invol_per_s_per_thread": sum(t["invol_per_s"] for t in threads) / n,
            "cpu_cores": sum(t["cpu"] for t in threads)}


def peak_rss_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


# ---- servers ----------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ANSWER_TIMEOUT_S = 5.0  # as wrk's --timeout


def wrong_answer(server: str, port: int, body_bytes: int, timeout: float = ANSWER_TIMEOUT_S) -> str | None:
    """None when the server answers one request rightly within `timeout` seconds, else what was
    wrong.  wrk looks at statuses only: this request checks the body too."""
    if server == "redis":
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
                s.sendall(b"PING\r\n")
                got = s.makefile("rb").readline()
        except OSError as e:
            return f"no answer to PING within {timeout:g} s ({e})"
        return None if got == b"+PONG\r\n" else f"PING answered {got[:80]!r}"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/")
        resp = conn.getresponse()
        body = resp.read()
    except (OSError, http.client.HTTPException) as e:
        return f"no answer to GET / within {timeout:g} s ({e!r})"
    finally:
        conn.close()
    if resp.status != 200 or body != b"x" * body_bytes:
        return f"GET / answered {resp.status} with {body[:40]!r} ({len(body)} bytes), not {body_bytes} x"
    return None


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 15.0, probe: bytes | None = None,
              expect: bytes = b"") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                if probe is None:
                    return
                s.sendall(probe)
                if s.recv(256).startswith(expect):
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"server did not answer on port {port} within {timeout:g} s")


NGINX_CONF = """\
worker_processes {workers};
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy; fastcgi_temp_path {dir}/fcgi;
  uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{ return 200 "{body}"; }}
  }}
}}
"""


def libc_path() -> str:
    """Debian's redis-server links jemalloc: "glibc" must preload libc's malloc to mean glibc
    (the same reasoning as strata_lab/drivers/redis_bench.py)."""
    from strata_lab.drivers.redis_bench import LIBC_CANDIDATES

    return next((p for p in LIBC_CANDIDATES if os.path.exists(p)), "")


def start_server(kind: str, cpus: list[int], preload: str, workdir: Path, httpd: str | None,
                 body_bytes: int) -> tuple[subprocess.Popen, int, str]:
    """Starts the server pinned to `cpus` with `preload` as LD_PRELOAD; returns (proc, port,
    version)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "STRATA_LAB_PRELOAD")}
    if kind == "redis" and not preload:
        preload = libc_path()
    if preload:
        env["LD_PRELOAD"] = preload
    log = open(workdir / "server.log", "w+")
    # Servers die with the driver (kill -9 of the lab reaches only the launcher and the driver).
    # nginx gets SIGTERM, on which its master stops its workers: they would outlive a killed one.
    preexec = die_with_driver(signal.SIGTERM if kind == "nginx" else signal.SIGKILL,
                              then=lambda: os.sched_setaffinity(0, cpus))

    if kind == "httpd":
        if not httpd:
            raise RuntimeError("no httpd binary")
        proc = subprocess.Popen([httpd, "--port", "0", "--threads", str(len(cpus)),
                                 "--body-bytes", str(body_bytes), "--max-seconds", "300"],
                                stdout=subprocess.PIPE, stderr=log, env=env, preexec_fn=preexec, text=True)
        line = proc.stdout.readline()  # {"event":"ready","port":P,...}
        if not line:
            proc.wait(10)
            log.seek(0)
            raise RuntimeError(f"httpd exited with status {proc.returncode}: {log.read()[-800:]}")
        port = json.loads(line)["port"]
        wait_port(port, proc)
        return proc, port, "strata-bench-e5-httpd"
    port = free_port()
    if kind == "nginx":
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
        conf = workdir / "nginx.conf"
        conf.write_text(NGINX_CONF.format(workers=len(cpus), dir=workdir, port=port,
                                          body="x" * body_bytes))
        proc = subprocess.Popen([exe, "-p", str(workdir), "-e", str(workdir / "error.log"), "-c", str(conf)],
                                stdout=log, stderr=log, env=env, preexec_fn=preexec)
        version = subprocess.run([exe, "-v"], capture_output=True, text=True).stderr.strip()
        wait_port(port, proc, probe=b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", expect=b"HTTP/1.1 200")
        return proc, port, version
    if kind == "redis":
        exe = shutil.which("redis-server")
        proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--daemonize", "no", "--logfile", ""],
                                stdout=log, stderr=log, env=env, preexec_fn=preexec)
        version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
        wait_port(port, proc, probe=b"PING\r\n", expect=b"+PONG")
        return proc, port, version
    raise ValueError(f"unknown server {kind!r}")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # strata writes STRATA_STATS_FILE at exit
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- clients ----------------------------------------------------------------------------------

def run_client(argv: list[str], cpus: list[int], timeout: float) -> tuple[str, str, dict]:
    """Runs the load generator pinned to `cpus`; returns stdout, stderr and its exact rusage."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err,
                                preexec_fn=die_with_driver(then=lambda: os.sched_setaffinity(0, cpus)))
        t0 = time.monotonic()
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise RuntimeError(f"{Path(argv[0]).name} ran past {timeout:g} s")
            time.sleep(0.01)
        wall = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{Path(argv[0]).name} exited with status {code}: {stderr[-800:]}")
    return stdout, stderr, {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
                            "nvcsw": ru.ru_nvcsw, "nivcsw": ru.ru_nivcsw}


def parse_wrk(stdout: str) -> dict:
    """The JSON line of bench/e3e5/wrk_report.lua."""
    for line in reversed(stdout.splitlines()):
        if line.startswith('{"wrk"'):
            d = json.loads(line)
            secs = d["duration_us"] / 1e6
            lat = d["latency_us"]
            errors = sum(d["errors"].values())
            return {"requests": d["requests"], "seconds": secs,
                    "requests_per_sec": d["requests"] / secs if secs > 0 else 0.0,
                    "latency_p50_ms": lat["p50"] / 1000, "latency_p90_ms": lat["p90"] / 1000,
                    "latency_p99_ms": lat["p99"] / 1000, "latency_max_ms": lat["max"] / 1000,
                    "errors": errors, "error_detail": d["errors"]}
    raise ValueError("wrk printed no report line (is bench/e3e5/wrk_report.lua there?)")


def parse_redis_csv(stdout: str) -> dict:
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(stdout)))
    if not rows:
        raise ValueError(f"redis-benchmark printed no CSV: {stdout[-300:]}")
    r = rows[0]
    return {"requests_per_sec": float(r["rps"]), "latency_p50_ms": float(r["p50_latency_ms"]),
            "latency_p95_ms": float(r["p95_latency_ms"]), "latency_p99_ms": float(r["p99_latency_ms"]),
            "latency_max_ms": float(r["max_latency_ms"]), "errors": 0, "test": r["test"]}


def client_argv(kind: str, port: int, threads: int, connections: int, seconds: float,
                requests: int | None = None) -> list[str]:
    if kind in ("httpd", "nginx"):
        return [shutil.which("wrk") or "wrk", "-t", str(threads), "-c", str(max(connections, threads)),
                "-d", f"{max(seconds, 1):.0f}s" if seconds >= 1 else "1s", "--timeout", "5s",
                "-s", str(LUA_REPORT), f"http://127.0.0.1:{port}/"]
    return [shutil.which("redis-benchmark") or "redis-benchmark", "-h", "127.0.0.1", "-p", str(port),
            "-c", str(connections), "-n", str(requests or 10000), "--threads", str(threads),
            "-t", "set", "-r", "100000", "-d", "128", "--csv"]


# ---- the driver: one sample -----------------------------------------------------------------

def drive(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m strata_lab.drivers.e5_server",
                                 description="one E5 sample: a fresh server, a warm-up, one counted client run")
    ap.add_argument("--server", choices=SERVERS, required=True)
    ap.add_argument("--server-cpus", required=True)
    ap.add_argument("--client-cpus", required=True)
    ap.add_argument("--client-threads", type=int, required=True)
    ap.add_argument("--connections", type=int, default=CONNECTIONS)
    ap.add_argument("--seconds", type=float, default=DEFAULT_SECONDS)
    ap.add_argument("--warmup-seconds", type=float, default=WARMUP_S)
    ap.add_argument("--body-bytes", type=int, default=64)
    ap.add_argument("--httpd")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args(argv)
    server_cpus, client_cpus = machine.parse_cpus(a.server_cpus), machine.parse_cpus(a.client_cpus)
    if a.server != "redis":
        a.connections = max(a.connections, a.client_threads)  # wrk: a connection per thread at least
    preload = os.environ.get("STRATA_LAB_PRELOAD", "")
    with tempfile.TemporaryDirectory(prefix="strata-e5-") as tmp:
        workdir = Path(tmp)
        try:
            proc, port, version = start_server(a.server, server_cpus, preload, workdir, a.httpd,
                                               a.body_bytes)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            print(f"e5: {a.server} did not start: {e}", file=sys.stderr)
            return 1
        try:
            doc = measure(a, proc, port, server_cpus, client_cpus)
        except (RuntimeError, ValueError, OSError) as e:
            print(f"e5: {a.server}: {e}", file=sys.stderr)
            return 1
        finally:
            stop_server(proc)
    doc.update({"server": a.server, "server_version": version, "server_cpus": server_cpus,
                "client_cpus": client_cpus, "threads": a.client_threads,
                "client_threads": a.client_threads, "connections": a.connections,
                "allocator_preload": preload or ("libc (redis links jemalloc)" if a.server == "redis" else "")})
    print(json.dumps(doc))
    return 0


def measure(a, proc: subprocess.Popen, port: int, server_cpus: list[int], client_cpus: list[int]) -> dict:
    timeout = a.seconds * 5 + 30
    if a.server == "redis":
        # redis-benchmark counts requests, not seconds: size the counted run from the warm-up's rate.
        out, _, _ = run_client(client_argv("redis", port, a.client_threads, a.connections, 0,
                                           2000 if a.smoke else 20000), client_cpus, timeout)
        rate = parse_redis_csv(out)["requests_per_sec"]
        requests = int(min(max(rate * a.seconds, 1000), 5_000_000))
        argv = client_argv("redis", port, a.client_threads, a.connections, a.seconds, requests)
    else:
        if a.warmup_seconds > 0:
            run_client(client_argv(a.server, port, a.client_threads, a.connections, a.warmup_seconds),
                       client_cpus, timeout)
        argv = client_argv(a.server, port, a.client_threads, a.connections, a.seconds)
    pids = process_tree(proc.pid)
    all_cpus = sorted(os.sched_getaffinity(0))
    busy0 = machine.cpu_jiffies(all_cpus)[0]
    before, t0 = thread_counters(pids), time.monotonic()
    out, _, ru = run_client(argv, client_cpus, timeout)
    after, window = thread_counters(pids), time.monotonic() - t0
    busy_s = (machine.cpu_jiffies(all_cpus)[0] - busy0) / CLK_TCK
    if proc.poll() is not None:
        raise RuntimeError(f"server died during the run (status {proc.returncode})")
    res = parse_wrk(out) if a.server != "redis" else parse_redis_csv(out)
    # wrk counts a wrong status, a dropped connection or a timed-out request as a request all the
    # same: a server answering 500 at once would report its best requests/s.
    if res["errors"]:
        raise RuntimeError(f"{res['errors']} of {res['requests']} requests failed: {res['error_detail']}")
    # A server that stops answering but stays alive (a deadlock) leaves wrk's requests in flight,
    # and wrk counts no timeout for a run shorter than its --timeout: only the rate drops.
    wrong = wrong_answer(a.server, port, a.body_bytes)
    if wrong:
        raise RuntimeError(f"after the run, {wrong}")
    if a.server == "redis":
        res["requests"] = requests
        res["seconds"] = ru["wall_s"]
    srv = counter_deltas(before, after, window)
    # The client's threads are gone when it ends: its counters come from wait4 (all threads) and
    # are shared out over the client threads it was asked for.
    cl_secs = ru["wall_s"]
    return {**res,
            "server_peak_rss_kb": peak_rss_kb(pids),
            "server_cpu_cores": srv["cpu_cores"],
            "server_vol_cs_per_s_per_thread": srv["vol_per_s_per_thread"],
            "server_invol_cs_per_s_per_thread": srv["invol_per_s_per_thread"],
            "server_threads": srv["threads"],
            "client_cpu_cores": ru["cpu_s"] / cl_secs,
            "client_vol_cs_per_s_per_thread": ru["nvcsw"] / cl_secs / a.client_threads,
            "client_invol_cs_per_s_per_thread": ru["nivcsw"] / cl_secs / a.client_threads,
            # CPU time other processes took on these CPUs during the window (a shared machine)
            "foreign_cpu_share": max(busy_s - srv["cpu_cores"] * window - ru["cpu_s"], 0.0)
            / (len(all_cpus) * window),
            "window_s": window}


if __name__ == "__main__":
    sys.exit(drive())
