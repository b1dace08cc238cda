"""Driver: redis-server (the system's package) under the sample's allocator, loaded by
redis-benchmark on loopback.  Prints one JSON object: requests/s per test and overall, per-test
P99 latency, the server's peak RSS (VmHWM) and its RSS over time.

    python -m strata_lab.drivers.redis_bench [--requests N] [--clients C] [--data-size D]
                                             [--keyspace K] [--tests set,get,...] [--smoke]

The allocator comes from $STRATA_LAB_PRELOAD (set by the lab for cells with preload="driver").
Empty means glibc: the server then gets libc itself preloaded, because Debian's redis-server is
linked against libjemalloc, and without a preload it would measure jemalloc, not glibc.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from strata_lab.drivers import die_with_driver

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
LIBC_CANDIDATES = ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6",
                   "/lib/aarch64-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib64/libc.so.6")


def die(msg: str, code: int = 1) -> None:
    print(f"redis_bench: {msg}", file=sys.stderr)
    sys.exit(code)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def status_kb(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class RssSampler(threading.Thread):
    def __init__(self, pid: int, interval: float = 0.010):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.t_ms: list[float] = []
        self.rss_kb: list[int] = []
        self.stop = threading.Event()
        self.t0 = time.perf_counter()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with open(f"/proc/{self.pid}/statm") as f:
                    rss = int(f.read().split()[1]) * PAGE_KB
            except (OSError, ValueError, IndexError):
                return
            if not rss:
                return
            self.t_ms.append(round((time.perf_counter() - self.t0) * 1000, 1))
            self.rss_kb.append(rss)
            self.stop.wait(self.interval)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="redis_bench")
    ap.add_argument("--requests", type=int, default=40000, help="requests per test")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--data-size", type=int, default=256, help="value size in bytes")
    ap.add_argument("--keyspace", type=int, default=100000, help="random keys (-r)")
    ap.add_argument("--tests", default="set,get,lpush,lpop")
    ap.add_argument("--timeout", type=float, default=100.0, help="seconds for redis-benchmark")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args(argv)
    if a.smoke:
        a.requests, a.clients = min(a.requests, 500), min(a.clients, 4)

    server, bench = shutil.which("redis-server"), shutil.which("redis-benchmark")
    if not server or not bench:
        die("redis-server and redis-benchmark are needed: sudo apt-get install redis-server redis-tools", 3)
    preload = os.environ.get("STRATA_LAB_PRELOAD", "")
    if not preload:
        preload = next((p for p in LIBC_CANDIDATES if os.path.exists(p)), "")
    env = dict(os.environ)
    env.pop("STRATA_LAB_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    version = subprocess.run([server, "--version"], capture_output=True, text=True).stdout.strip()

    port = free_port()
    # An unnamed file: nothing is left behind however the driver ends.
    logf = tempfile.TemporaryFile("w+", prefix="strata-lab-redis-")
    # The server stays in the driver's process group, which the lab kills on a timeout or an
    # interrupt, and dies with the driver when only the driver is killed (kill -9 of the lab).
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
                             "--logfile", ""], stdout=logf, stderr=subprocess.STDOUT, env=env,
                            preexec_fn=die_with_driver())
    try:
        deadline = time.monotonic() + 15
        while not ping(port):
            if proc.poll() is not None:
                logf.seek(0)
                die(f"redis-server exited with status {proc.returncode}: {logf.read()[-1500:]}")
            if time.monotonic() > deadline:
                die("redis-server did not answer PING within 15 s")
            time.sleep(0.02)
        sampler = RssSampler(proc.pid)
        sampler.start()
        t0 = time.perf_counter()
        try:
            out = subprocess.run([bench, "-h", "127.0.0.1", "-p", str(port), "-n", str(a.requests),
                                  "-c", str(a.clients), "-d", str(a.data_size), "-r", str(a.keyspace),
                                  "-t", a.tests, "--csv"], capture_output=True, text=True,
                                 timeout=a.timeout, preexec_fn=die_with_driver(),
                                 env={k: v for k, v in os.environ.items()
                                      if k not in ("LD_PRELOAD", "STRATA_STATS_FILE")})
        except subprocess.TimeoutExpired:
            die(f"redis-benchmark took longer than {a.timeout:g} s")
        elapsed = time.perf_counter() - t0
        if proc.poll() is not None:
            logf.seek(0)
            die(f"redis-server died during the benchmark (status {proc.returncode}): {logf.read()[-1500:]}")
        peak = status_kb(proc.pid, "VmHWM:")
        rss_end = status_kb(proc.pid, "VmRSS:")
        sampler.stop.set()
        sampler.join()
        if out.returncode != 0:
            die(f"redis-benchmark exited with status {out.returncode}: {out.stderr[-1500:]}")
        rows = list(csv.DictReader(io.StringIO(out.stdout)))
        if not rows:
            die(f"redis-benchmark printed no results: {out.stdout[-500:]} {out.stderr[-500:]}")
        doc: dict = {"workload": "redis", "server": version, "threads": 1, "clients": a.clients,
                     "requests_per_test": a.requests, "data_size": a.data_size, "seconds": elapsed}
        rates = []
        for r in rows:
            name = r["test"].lower().split()[0]
            rate = float(r["rps"])
            rates.append(rate)
            doc[f"rps_{name}"] = rate
            doc[f"p99_ms_{name}"] = float(r["p99_latency_ms"])
            doc[f"p50_ms_{name}"] = float(r["p50_latency_ms"])
        # Every test sends the same number of requests: total requests / total time is the
        # harmonic mean of the per-test rates.
        doc["rps"] = len(rates) / sum(1 / x for x in rates)
        doc["server_peak_rss_kb"] = peak
        doc["server_rss_end_kb"] = rss_end
        doc["rss_timeline"] = {"interval_ms": 10, "t_ms": sampler.t_ms, "rss_kb": sampler.rss_kb}
        print(json.dumps(doc))
        return 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # lets strata write STRATA_STATS_FILE at exit
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        logf.close()


if __name__ == "__main__":
    sys.exit(main())
