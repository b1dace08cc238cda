"""E5 suite: /proc counters, client output parsing, the matrix, the report, and real smoke runs of
strata's HTTP server (answers, then one driver sample under wrk)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strata_lab.errors import LabError
from strata_lab.suite import SuiteContext, load_suite
from strata_lab.drivers import e5_server
from strata_lab.suites import e5

from .conftest import BUILD, program


@pytest.fixture(scope="module")
def httpd() -> Path:
    return program("strata-bench-e5-httpd")


two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1")


def e5_context(cpus, environ=None, assignments=(), **kw) -> SuiteContext:
    """A context whose parameters are resolved as `strata-lab run` resolves them."""
    params, _ = load_suite("e5").resolve_params(assignments, environ=environ or {})
    return SuiteContext(cpus=cpus, params=params, **kw)


def test_thread_counters_of_this_process():
    pid = os.getpid()
    before = e5_server.thread_counters([pid])
    assert pid in before and before[pid]["vol"] >= 0 and before[pid]["cpu_ticks"] >= 0
    t0 = time.monotonic()
    for _ in range(20):
        time.sleep(0.001)  # voluntary switches
    x = sum(i * i for i in range(300000))  # some CPU
    after = e5_server.thread_counters([pid])
    d = e5_server.counter_deltas(before, after, time.monotonic() - t0)
    me = next(t for t in d["threads"] if t["tid"] == pid)
    assert me["vol_per_s"] > 0 and x > 0
    assert d["thread_count"] == len(after) and d["cpu_cores"] >= 0
    assert e5_server.process_tree(pid)[0] == pid
    assert e5_server.peak_rss_kb([pid]) > 0


def test_counter_deltas_math():
    before = {1: {"name": "a", "vol": 10, "invol": 2, "cpu_ticks": 100}}
    after = {1: {"name": "a", "vol": 30, "invol": 6, "cpu_ticks": 100 + e5_server.CLK_TCK},
             2: {"name": "b", "vol": 10, "invol": 0, "cpu_ticks": 0}}  # appeared in the window
    d = e5_server.counter_deltas(before, after, 2.0)
    assert [t["vol_per_s"] for t in d["threads"]] == [10.0, 5.0]
    assert d["vol_per_s_per_thread"] == 7.5 and d["invol_per_s_per_thread"] == 1.0
    assert d["cpu_cores"] == pytest.approx(0.5)


def test_parse_wrk_and_redis():
    line = ('{"wrk":1,"requests":1000,"duration_us":2000000,"bytes":5,"errors":{"connect":0,"read":1,'
            '"write":0,"status":0,"timeout":0},"latency_us":{"min":1,"mean":2.0,"stdev":1.0,"max":900,'
            '"p50":100,"p75":150,"p90":200,"p99":500,"p999":800}}')
    w = e5_server.parse_wrk("Running 2s test\n" + line + "\n")
    assert w["requests_per_sec"] == 500 and w["latency_p90_ms"] == 0.2 and w["latency_p99_ms"] == 0.5
    assert w["errors"] == 1
    with pytest.raises(ValueError):
        e5_server.parse_wrk("no report")
    csv_text = ('"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",'
                '"p99_latency_ms","max_latency_ms"\n"SET","19479.98","2.5","0.1","2.799","14.135","18.063","21.807"\n')
    r = e5_server.parse_redis_csv(csv_text)
    assert r["requests_per_sec"] == pytest.approx(19479.98) and r["latency_p95_ms"] == pytest.approx(14.135)
    assert "latency_p90_ms" not in r


@two_cpus
def test_matrix_defaults_parameters_and_environment():
    m2 = e5.matrix(e5_context([0, 1]))
    assert m2["servers"] == list(e5.SERVERS) and m2["connections"] == e5.CONNECTIONS
    assert m2["server_cpus"] == ["0"] and m2["client_cpus"] == ["1", "0"] and m2["client_threads"] == [1, 2]
    m16 = e5.matrix(e5_context(list(range(16))))
    assert m16["server_cpus"] == ["0", "0-1", "0,1,2,3"] and m16["client_cpus"] == ["4,5,6,7"]
    m = e5.matrix(e5_context([0, 1], assignments=["servers=httpd", "server_cpus=0 0-1", "client_cpus=1",
                                                  "client_threads=3", "connections=7"]))
    assert m == {"servers": ["httpd"], "server_cpus": ["0", "0-1"], "client_cpus": ["1"],
                 "client_threads": [3], "connections": 7}
    # The environment variables docs/e3-e5.md gave still work; --param wins over them.
    env = {"STRATA_E5_SERVERS": "httpd", "STRATA_E5_SERVER_CPUS": "0;0-1", "STRATA_E5_CLIENT_CPUS": "1",
           "STRATA_E5_CLIENT_THREADS": "3", "STRATA_E5_CONNECTIONS": "9"}
    m = e5.matrix(e5_context([0, 1], environ=env))
    assert m["servers"] == ["httpd"] and m["server_cpus"] == ["0", "0-1"] and m["client_threads"] == [3]
    assert m["connections"] == 9
    assert e5.matrix(e5_context([0, 1], environ=env, assignments=["connections=5"]))["connections"] == 5
    assert e5.matrix(e5_context([0, 1], environ=env, threads=[4]))["client_threads"] == [4]  # --threads
    with pytest.raises(LabError, match="STRATA_E5_SERVERS.*choose one of httpd, nginx, redis"):
        e5_context([0, 1], environ={"STRATA_E5_SERVERS": "apache"})


@two_cpus
def test_parameters_shape_the_cells(httpd, monkeypatch):
    """--param values reach the cells: their names, argv and recorded params."""
    monkeypatch.setenv("STRATA_BUILD", str(BUILD))
    ctx = e5_context([0, 1], assignments=["servers=httpd", "server_cpus=1", "client_cpus=0;0-1",
                                          "client_threads=2", "connections=33"])
    cells = load_suite("e5").cells(ctx)
    if e5.available("httpd"):
        assert cells == []  # no wrk here: the server is left out
        return
    assert [c.id for c in cells] == ["e5-httpd/s1/c0/t2", "e5-httpd/s1/c0-1/t2"]
    for c in cells:
        argv = [str(a) for a in c.argv]
        assert argv[argv.index("--connections") + 1] == "33" and c.params["connections"] == 33
        assert argv[argv.index("--server-cpus") + 1] == "1"
    # a smoke run opens 8 connections, and records 8
    smoke = load_suite("e5").cells(e5_context([0, 1], assignments=["connections=33"], smoke=True))
    argv = [str(a) for a in smoke[0].argv]
    assert argv[argv.index("--connections") + 1] == "8" and smoke[0].params["connections"] == 8


def test_summarise_table():
    cell = {"id": "e5-httpd/s0/c1/t1", "params": {"server": "httpd", "server_cpus": "0", "client_cpus": "1",
                                                   "client_threads": 1}}
    metrics = {"requests_per_sec": 1000.0, "latency_p50_ms": 1.0, "latency_p90_ms": 2.0, "latency_p99_ms": 3.0,
               "server_vol_cs_per_s_per_thread": 10.0, "server_invol_cs_per_s_per_thread": 1.0,
               "client_vol_cs_per_s_per_thread": 5.0, "client_invol_cs_per_s_per_thread": 0.5,
               "server_cpu_cores": 0.9, "client_cpu_cores": 0.8, "server_peak_rss_kb": 2048, "errors": 0,
               "foreign_cpu_share": 0.0,
               "server_threads": [{"name": "main", "vol_per_s": 20.0, "invol_per_s": 0.0, "cpu": 0.0},
                                  {"name": "worker", "vol_per_s": 900.0, "invol_per_s": 70.0, "cpu": 0.9}]}
    samples = [{"cell": cell["id"], "variant": v, "warmup": False, "ok": True,
                "metrics": {**metrics, "requests_per_sec": rps}}
               for v, rps in (("glibc", 900.0), ("glibc", 1100.0), ("glibc", 1000.0), ("mimalloc", 2000.0))]
    samples.append({"cell": cell["id"], "variant": "mimalloc", "warmup": False, "ok": False})
    # Replaced by a re-run, and an instruction count: never counted, neither as a value nor a failure.
    samples.append({"cell": cell["id"], "variant": "glibc", "warmup": False, "ok": True, "superseded_by": 0,
                    "metrics": {**metrics, "requests_per_sec": 1e9}})
    samples.append({"cell": cell["id"], "variant": "mimalloc", "warmup": False, "ok": False, "kind": "instructions"})
    for i, s in enumerate(samples):
        s.update(index=i, round=i)
    doc = {"cells": [cell], "variants": {"glibc": {}, "mimalloc": {}}, "samples": samples,
           "settings": {"cpus": [0, 1]}}
    rows = e5.cell_table(doc)
    assert rows[0]["requests_per_sec"] == 1000.0 and rows[0]["n"] == 3
    assert rows[1]["n"] == 1 and rows[1]["failures"] == 1
    assert rows[0]["server_busiest_vol_per_s"] == 900.0 and rows[0]["server_busiest_invol_per_s"] == 70.0
    md = e5.summarise(doc)
    assert "| httpd | 0 | 1 | 1 | glibc | 1,000 |" in md and "16-core" in md and "10 (900)" in md


def test_httpd_smoke_program(httpd):
    r = subprocess.run([str(httpd), "--smoke"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["smoke"] == "ok"


def test_httpd_answers_http_clients(httpd):
    proc = subprocess.Popen([str(httpd), "--port", "0", "--threads", "2", "--body-bytes", "37",
                             "--max-seconds", "30"], stdout=subprocess.PIPE, text=True)
    try:
        port = json.loads(proc.stdout.readline())["port"]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        for path in ("/", "/a/b?c=d"):
            conn.request("GET", path)
            resp = conn.getresponse()
            assert resp.status == 200 and resp.read() == b"x" * 37
            assert resp.getheader("Content-Length") == "37"
        conn.request("DELETE", "/")
        resp = conn.getresponse()
        assert resp.status == 405 and resp.read() == b""
        conn.close()
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    summary = json.loads(out.strip().splitlines()[-1])
    assert proc.returncode == 0 and summary["requests"] == 3 and summary["peak_rss_kb"] > 0


@pytest.mark.skipif(not shutil.which("wrk"), reason="wrk not installed (scripts/setup.sh installs it)")
def test_one_sample_end_to_end(httpd, monkeypatch):
    """A smoke-sized sample through the driver: a fresh pinned server, one wrk run, the metrics."""
    monkeypatch.setenv("STRATA_BUILD", str(BUILD))
    cells = load_suite("e5").cells(SuiteContext(smoke=True, cpus=sorted(os.sched_getaffinity(0))))
    assert len(cells) == 1 and cells[0].preload == "driver" and cells[0].metric == "requests_per_sec"
    c = cells[0]
    r = subprocess.run([str(a) for a in c.argv], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **c.env, "STRATA_LAB_PRELOAD": ""})
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout.strip().splitlines()[-1])
    assert m["requests"] > 0 and m["errors"] == 0 and m["requests_per_sec"] > 0
    assert 0 < m["latency_p50_ms"] <= m["latency_p90_ms"] <= m["latency_p99_ms"]
    assert m["server_peak_rss_kb"] > 0 and m["server_cpu_cores"] > 0
    assert m["server_vol_cs_per_s_per_thread"] >= 0 and m["client_vol_cs_per_s_per_thread"] >= 0
    assert len(m["server_threads"]) >= 2  # main thread + at least one worker


# A stand-in for strata-bench-e5-httpd (same command line, same ready line) that misbehaves as
# FAKE_MODE says: "status500" answers every request with 500; "wrongbody" with 200 and y's, not
# x's; "stall" answers the first 20 requests, then none (alive, but stuck, as a deadlocked server
# is); any other mode answers rightly.
FAKE_HTTPD = '''\
import json, os, signal, socket, sys, threading
mode = os.environ["FAKE_MODE"]
body = (b"y" if mode == "wrongbody" else b"x") * int(sys.argv[sys.argv.index("--body-bytes") + 1])
srv = socket.create_server(("127.0.0.1", 0), backlog=128)
print(json.dumps({"event": "ready", "port": srv.getsockname()[1]}), flush=True)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
answered, lock = [0], threading.Lock()
def serve(c):
    buf = b""
    while data := c.recv(65536):
        buf += data
        while b"\\r\\n\\r\\n" in buf:
            _, buf = buf.split(b"\\r\\n\\r\\n", 1)
            with lock:
                answered[0] += 1
                stuck = mode == "stall" and answered[0] > 20
            if stuck:
                threading.Event().wait()
            status = b"500 Oops" if mode == "status500" else b"200 OK"
            c.sendall(b"HTTP/1.1 %s\\r\\nContent-Length: %d\\r\\n\\r\\n%s" % (status, len(body), body))
while True:
    threading.Thread(target=serve, args=(srv.accept()[0],), daemon=True).start()
'''


def run_fake_sample(tmp_path, mode: str, *args: str) -> subprocess.CompletedProcess:
    fake = tmp_path / "fake_httpd"
    fake.write_text(f"#!{sys.executable}\n" + FAKE_HTTPD)
    fake.chmod(0o755)
    cpu = str(min(os.sched_getaffinity(0)))
    return subprocess.run([sys.executable, "-m", "strata_lab.drivers.e5_server", "--server", "httpd",
                           "--server-cpus", cpu, "--client-cpus", cpu, "--seconds", "1",
                           "--warmup-seconds", "0", "--httpd", str(fake), *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "FAKE_MODE": mode, "STRATA_LAB_PRELOAD": "",
                               "PYTHONPATH": str(Path(e5_server.__file__).resolve().parents[2])})


@pytest.mark.skipif(not shutil.which("wrk"), reason="wrk not installed (scripts/setup.sh installs it)")
def test_recorded_connections_are_the_ones_wrk_opened(tmp_path):
    """wrk opens a connection per thread at least: the sample records what it opened."""
    r = run_fake_sample(tmp_path, "ok", "--client-threads", "2", "--connections", "1")
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout.strip().splitlines()[-1])
    assert m["connections"] == 2 and m["client_threads"] == 2 and m["errors"] == 0


@pytest.mark.skipif(not shutil.which("wrk"), reason="wrk not installed (scripts/setup.sh installs it)")
@pytest.mark.parametrize("mode, why", [("status500", "requests failed"),
                                       ("wrongbody", "answered 200 with b'yyy"),
                                       ("stall", "no answer to GET")])
def test_misbehaving_server_fails_the_sample(tmp_path, mode, why):
    """A server answering 500 or a wrong body, or one that stops answering but stays alive, is a
    failed sample, not a requests/s figure (wrk counts all three as requests, and counts no
    timeout in a 1 s run)."""
    r = run_fake_sample(tmp_path, mode, "--client-threads", "1", "--connections", "2")
    assert r.returncode == 1 and r.stdout == "", r.stdout
    assert why in r.stderr, r.stderr
