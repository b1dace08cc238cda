"""E5 — HTTP/key-value servers under load with CPU pinning, under each allocator.

A cell is one point of the pinning matrix: server × server CPUs × client CPUs × client threads;
the variants are the allocators, preloaded into the *server only*.  One sample is one fresh
server process: this module, run as a driver (``python -m strata_lab.suites.e5``), starts the
server pinned to its CPUs, warms it up with an uncounted client run, then measures one counted
client run pinned to the client CPUs, and prints one JSON line: requests/s, latency p50/p90/p99,
voluntary and involuntary context switches per second per thread of server and client, CPU use
of both, and the server's peak RSS (VmHWM, summed over its processes).

Servers:
  httpd  strata's own epoll server (build/bin/strata-bench-e5-httpd), loaded by wrk
  nginx  nginx from the system's packages (`return 200` from a generated config), loaded by wrk
  redis  redis-server from the system's packages, loaded by redis-benchmark (SET, random keys);
         redis-benchmark reports p50/p95/p99, so the redis cells carry p95 and no p90

The matrix comes from the suite's parameters (PARAMS below; `strata-lab list suites` shows them):
  strata-lab run --suite e5 --param servers=httpd,redis --param server_cpus="0 0-1" \\
      --param client_cpus="1 0" --param client_threads=1,2 --param connections=100 --seconds 3
CPU sets are separated by spaces or ';' (a set itself may hold commas: 0,1,2,3).  The lab's
--threads, when given, overrides client_threads.  The environment variables STRATA_E5_SERVERS,
_SERVER_CPUS, _CLIENT_CPUS, _CLIENT_THREADS and _CONNECTIONS, which earlier docs gave, still set
the same parameters when --param does not.
"""

from __future__ import annotations

import argparse
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

from strata_lab import machine, paths
from strata_lab.results import counted_metrics
from strata_lab.suite import Cell, Param, cpu_list, integer, list_of, one_of

DESCRIPTION = "E5: servers (strata httpd, nginx, redis) under a CPU-pinning matrix, wrk/redis-benchmark on loopback"
ALLOCATORS = ["glibc", "mimalloc", "jemalloc", "tcmalloc", "strata"]
BASELINE = "glibc"
ROUNDS = 5
WARMUP = 0           # every sample warms its own fresh server up first (WARMUP_S, not counted)
SERVERS = ("httpd", "nginx", "redis")
DEFAULT_SECONDS = 3.0
WARMUP_S = 1.0
CONNECTIONS = 100
CLK_TCK = machine.CLK_TCK
LUA_REPORT = Path(__file__).resolve().parents[3] / "bench" / "e3e5" / "wrk_report.lua"

PARAMS = [
    Param("servers", list(SERVERS), "servers to run, comma-separated: " + ", ".join(SERVERS),
          parse=list_of(one_of(*SERVERS)), env="STRATA_E5_SERVERS"),
    Param("server_cpus", None, "CPU sets the server is pinned to, separated by spaces or ';'",
          parse=list_of(cpu_list, " ;"), env="STRATA_E5_SERVER_CPUS",
          default_text="auto: 0 on 2-7 CPUs; 0, 0-1, 0-3 on 8 or more"),
    Param("client_cpus", None, "CPU sets the load generator is pinned to, separated by spaces or ';'",
          parse=list_of(cpu_list, " ;"), env="STRATA_E5_CLIENT_CPUS",
          default_text="auto: 1 and 0 on 2-7 CPUs; 4-7 on 8 or more"),
    Param("client_threads", None, "load-generator thread counts, comma-separated (--threads overrides)",
          parse=list_of(integer(1, 1024)), env="STRATA_E5_CLIENT_THREADS",
          default_text="auto: 1,2 on 2-7 CPUs; 2,4,6 on 8 or more"),
    Param("connections", CONNECTIONS, "client connections (wrk -c, redis-benchmark -c)",
          parse=integer(1, 100000), env="STRATA_E5_CONNECTIONS"),
]


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

    def pin():
        os.sched_setaffinity(0, cpus)

    if kind == "httpd":
        if not httpd:
            raise RuntimeError("no httpd binary")
        proc = subprocess.Popen([httpd, "--port", "0", "--threads", str(len(cpus)),
                                 "--body-bytes", str(body_bytes), "--max-seconds", "300"],
                                stdout=subprocess.PIPE, stderr=log, env=env, preexec_fn=pin, text=True)
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
                                stdout=log, stderr=log, env=env, preexec_fn=pin)
        version = subprocess.run([exe, "-v"], capture_output=True, text=True).stderr.strip()
        wait_port(port, proc, probe=b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", expect=b"HTTP/1.1 200")
        return proc, port, version
    if kind == "redis":
        exe = shutil.which("redis-server")
        proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--daemonize", "no", "--logfile", ""],
                                stdout=log, stderr=log, env=env, preexec_fn=pin)
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
        proc = subprocess.Popen(argv, stdout=out, stderr=err, preexec_fn=lambda: os.sched_setaffinity(0, cpus))
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
    ap = argparse.ArgumentParser(prog="python -m strata_lab.suites.e5",
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


# ---- the suite ----------------------------------------------------------------------------

def matrix(ctx) -> dict:
    """The pinning matrix: the suite's parameters, and where they say "auto" a default sized to
    this machine."""
    n = len(ctx.cpus)
    c = [str(x) for x in ctx.cpus]
    if n >= 8:   # e.g. 16 cores: server on 1/2/4 cores, client on the next 4
        d_server = [c[0], f"{c[0]}-{c[1]}", ",".join(c[:4])]
        d_client = [",".join(c[4:8])]
        d_threads = [2, 4, 6]
    elif n >= 2:  # 2 cores: separate cores or one shared core
        d_server, d_client, d_threads = [c[0]], [c[1], c[0]], [1, 2]
    else:
        d_server, d_client, d_threads = [c[0]], [c[0]], [1]
    p = ctx.params
    return {
        "servers": list(p["servers"]),
        "server_cpus": p["server_cpus"] or d_server,
        "client_cpus": p["client_cpus"] or d_client,
        "client_threads": ctx.threads or p["client_threads"] or d_threads,
        "connections": p["connections"],
    }


def available(server: str) -> str | None:
    """None if the server and its client are installed, else what is missing."""
    need = {"httpd": ["wrk"], "nginx": ["nginx", "wrk"], "redis": ["redis-server", "redis-benchmark"]}[server]
    missing = [x for x in need if not (shutil.which(x) or os.path.exists(f"/usr/sbin/{x}"))]
    return f"{', '.join(missing)} not installed (scripts/setup.sh installs them)" if missing else None


def smoke_skip():
    return available("httpd")


def cells(ctx):
    m = matrix(ctx)
    httpd = str(ctx.bin("e5-httpd")) if "httpd" in m["servers"] else None
    secs = ctx.duration(DEFAULT_SECONDS, smoke=1.0)
    servers = ["httpd"] if ctx.smoke else m["servers"]
    out = []
    for server in servers:
        if available(server):
            continue
        for sc in (m["server_cpus"][:1] if ctx.smoke else m["server_cpus"]):
            for cc in (m["client_cpus"][:1] if ctx.smoke else m["client_cpus"]):
                for t in (m["client_threads"][:1] if ctx.smoke else m["client_threads"]):
                    s_cpus, c_cpus = machine.parse_cpus(sc), machine.parse_cpus(cc)
                    argv = [sys.executable, "-m", "strata_lab.suites.e5", "--server", server,
                            "--server-cpus", sc, "--client-cpus", cc, "--client-threads", t,
                            "--connections", 8 if ctx.smoke else m["connections"], "--seconds", secs,
                            "--warmup-seconds", 0 if ctx.smoke else WARMUP_S]
                    if httpd:
                        argv += ["--httpd", httpd]
                    if ctx.smoke:
                        argv.append("--smoke")
                    shared = sorted(set(s_cpus) & set(c_cpus))
                    out.append(Cell(
                        workload=f"e5-{server}", threads=t, argv=argv, metric="requests_per_sec",
                        unit="req/s", higher_is_better=True, preload="driver",
                        latency_metrics=["latency_p99_ms"], peak_rss_metric="server_peak_rss_kb",
                        cpus=sorted(set(s_cpus) | set(c_cpus)), timeout_s=secs * 5 + 60,
                        env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
                        params={"server": server, "server_cpus": sc, "client_cpus": cc,
                                "client_threads": t, "connections": m["connections"],
                                "shared_cores": shared},
                        name=f"e5-{server}/s{sc}/c{cc}/t{t}"))
    return out


# ---- the report -----------------------------------------------------------------------------

def _median(v):
    s = sorted(v)
    n = len(s)
    return None if not n else (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2)


def cell_table(results: dict) -> list[dict]:
    """Per cell and allocator: medians across the counted, successful samples."""
    rows = []
    keys = ["requests_per_sec", "latency_p50_ms", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms",
            "server_vol_cs_per_s_per_thread", "server_invol_cs_per_s_per_thread",
            "client_vol_cs_per_s_per_thread", "client_invol_cs_per_s_per_thread",
            "server_cpu_cores", "client_cpu_cores", "server_peak_rss_kb", "errors", "foreign_cpu_share"]
    for c in results.get("cells", []):
        for v in results.get("variants", {}):
            ok = counted_metrics(results, c["id"], v)
            counted = sum(1 for s in results.get("samples", []) if s["cell"] == c["id"]
                          and s["variant"] == v and not s.get("warmup"))
            row = {"cell": c["id"], "variant": v, "n": len(ok), "failures": counted - len(ok),
                   **{k: c.get("params", {}).get(k) for k in ("server", "server_cpus", "client_cpus",
                                                              "client_threads")}}
            for k in keys:
                vals = [m[k] for m in ok if isinstance(m.get(k), (int, float))]
                row[k] = _median(vals)
            # pidstat-style view of the thread doing the work: the server thread with most CPU
            busiest = [max(m["server_threads"], key=lambda t: t["cpu"]) for m in ok if m.get("server_threads")]
            row["server_busiest_vol_per_s"] = _median([t["vol_per_s"] for t in busiest])
            row["server_busiest_invol_per_s"] = _median([t["invol_per_s"] for t in busiest])
            rows.append(row)
    return rows


def _fmt(x, spec):
    return "–" if x is None else format(x, spec)


def summarise(results: dict) -> str:
    rows = cell_table(results)
    if not rows:
        return ""
    out = ["### E5 — servers under a pinning matrix (medians over rounds)", "",
           "| server | server CPUs | client CPUs | client threads | allocator | req/s | p50 ms | p90 ms | "
           "p99 ms | srv vcs/s/thr (busiest) | srv ivcs/s/thr (busiest) | cli vcs/s/thr | cli ivcs/s/thr | srv CPU | cli CPU | "
           "srv peak RSS MiB | other CPU | n (failed) |",
           "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        p90 = _fmt(r["latency_p90_ms"], ".3f") if r["latency_p90_ms"] is not None else (
            f"p95 {_fmt(r['latency_p95_ms'], '.3f')}" if r["latency_p95_ms"] is not None else "–")
        rss = None if r["server_peak_rss_kb"] is None else r["server_peak_rss_kb"] / 1024
        out.append(f"| {r['server']} | {r['server_cpus']} | {r['client_cpus']} | {r['client_threads']} | "
                   f"{r['variant']} | {_fmt(r['requests_per_sec'], ',.0f')} | {_fmt(r['latency_p50_ms'], '.3f')} | "
                   f"{p90} | {_fmt(r['latency_p99_ms'], '.3f')} | "
                   f"{_fmt(r['server_vol_cs_per_s_per_thread'], ',.0f')} ({_fmt(r['server_busiest_vol_per_s'], ',.0f')}) | "
                   f"{_fmt(r['server_invol_cs_per_s_per_thread'], ',.0f')} ({_fmt(r['server_busiest_invol_per_s'], ',.0f')}) | "
                   f"{_fmt(r['client_vol_cs_per_s_per_thread'], ',.0f')} | {_fmt(r['client_invol_cs_per_s_per_thread'], ',.0f')} | "
                   f"{_fmt(r['server_cpu_cores'], '.2f')} | {_fmt(r['client_cpu_cores'], '.2f')} | {_fmt(rss, '.1f')} | "
                   f"{_fmt(None if r['foreign_cpu_share'] is None else r['foreign_cpu_share'] * 100, '.0f')} % | "
                   f"{r['n']} ({r['failures']}) |")
    ncpu = len(results.get("settings", {}).get("cpus") or [])
    out += ["", f"CPU columns are in cores (1.00 = one core busy). Client context switches come from wait4 "
            f"over all of the client's threads, divided by the client threads; server ones are per thread "
            f"from /proc: the mean over all server threads, and in brackets the busiest thread (most CPU). 'other CPU' is the share of the machine's CPU time that "
            f"other processes used during the counted window (a shared machine's noise). redis cells "
            f"show p95 where p90 is (redis-benchmark has no p90)."]
    if ncpu and ncpu < 8:
        out.append(f"This machine has {ncpu} CPUs: the pinning matrix is small (server and client on "
                   f"separate cores, or sharing one). Run the wider matrix on a 16-core machine.")
    plot = _plot(results, rows)
    if plot:
        out += ["", f"![E5 requests/s per cell]({plot})"]
    return "\n".join(out) + "\n"


def _plot(results: dict, rows: list[dict]) -> str | None:
    """requests/s per cell and allocator, next to results.json; None when it cannot be drawn."""
    where = results.get("_path")
    if not where or not rows:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.4 * len(cells)), 4.5))
    width = 0.8 / max(len(variants), 1)
    for i, v in enumerate(variants):
        vals = {r["cell"]: r for r in rows if r["variant"] == v}
        xs = [j + i * width for j in range(len(cells))]
        axes[0].bar(xs, [vals[c]["requests_per_sec"] or 0 for c in cells], width, label=v)
        axes[1].bar(xs, [vals[c]["latency_p99_ms"] or 0 for c in cells], width, label=v)
    for ax, title in zip(axes, ("requests/s (median)", "latency p99 ms (median)")):
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cells))])
        ax.set_xticklabels([c.removeprefix("e5-") for c in cells], rotation=45, ha="right", fontsize=7)
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path = Path(where).parent / "e5-matrix.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


if __name__ == "__main__":
    sys.exit(drive())
