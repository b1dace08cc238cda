"""E5 — HTTP/key-value servers under load with CPU pinning, under each allocator.

A cell is one point of the pinning matrix: server × server CPUs × client CPUs × client threads;
the variants are the allocators, preloaded into the *server only*.  One sample is one fresh
server process: the driver (strata_lab/drivers/e5_server.py) starts the server pinned to its
CPUs, warms it up with an uncounted client run, then measures one counted client run pinned to
the client CPUs, and prints one JSON line: requests/s, latency p50/p90/p99, voluntary and
involuntary context switches per second per thread of server and client, CPU use of both, and
the server's peak RSS (VmHWM, summed over its processes).

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

import os
import shutil
import sys
from pathlib import Path

from strata_lab import machine, stats
from strata_lab.drivers.e5_server import CONNECTIONS, DEFAULT_SECONDS, SERVERS, WARMUP_S
from strata_lab.model import Sample
from strata_lab.results import LIST, NUMBER, counted_metrics, or_null, write_plot
from strata_lab.suite import Cell, Param, cpu_list, integer, list_of, one_of

DESCRIPTION = "E5: servers (strata httpd, nginx, redis) under a CPU-pinning matrix, wrk/redis-benchmark on loopback"
ALLOCATORS = ["glibc", "mimalloc", "jemalloc", "tcmalloc", "strata"]
BASELINE = "glibc"
ROUNDS = 5
WARMUP = 0           # every sample warms its own fresh server up first (WARMUP_S, not counted)

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
    connections = 8 if ctx.smoke else m["connections"]
    out = []
    for server in servers:
        if available(server):
            continue
        for sc in (m["server_cpus"][:1] if ctx.smoke else m["server_cpus"]):
            for cc in (m["client_cpus"][:1] if ctx.smoke else m["client_cpus"]):
                for t in (m["client_threads"][:1] if ctx.smoke else m["client_threads"]):
                    s_cpus, c_cpus = machine.parse_cpus(sc), machine.parse_cpus(cc)
                    argv = [sys.executable, "-m", "strata_lab.drivers.e5_server", "--server", server,
                            "--server-cpus", sc, "--client-cpus", cc, "--client-threads", t,
                            "--connections", connections, "--seconds", secs,
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
                                "client_threads": t, "connections": connections,
                                "shared_cores": shared},
                        name=f"e5-{server}/s{sc}/c{cc}/t{t}"))
    return out


# ---- the report -----------------------------------------------------------------------------

def _median(v: list) -> float | None:
    return stats.median(v) if v else None


KEYS = ("requests_per_sec", "latency_p50_ms", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms",
        "server_vol_cs_per_s_per_thread", "server_invol_cs_per_s_per_thread",
        "client_vol_cs_per_s_per_thread", "client_invol_cs_per_s_per_thread",
        "server_cpu_cores", "client_cpu_cores", "server_peak_rss_kb", "errors", "foreign_cpu_share")
# What summarise() reads of each sample (checked before it runs: results.check_metrics): absent
# or null is shown as "–"; the server's threads as /proc gave them.
SUMMARY_METRICS = tuple((k, or_null(NUMBER), False) for k in KEYS) + (
    ("server_threads", or_null(LIST), False, (("cpu", NUMBER, True), ("vol_per_s", NUMBER, True),
                                              ("invol_per_s", NUMBER, True))),)


def cell_table(results: dict) -> list[dict]:
    """Per cell and allocator: medians across the counted, successful samples."""
    rows = []
    for c in results.get("cells", []):
        for v in results.get("variants", {}):
            ok = counted_metrics(results, c["id"], v)
            failed = sum(1 for s in map(Sample.from_json, results.get("samples", []))
                         if s.cell == c["id"] and s.variant == v and s.counted and not s.ok)
            row = {"cell": c["id"], "variant": v, "n": len(ok), "failures": failed,
                   **{k: c.get("params", {}).get(k) for k in ("server", "server_cpus", "client_cpus",
                                                              "client_threads")}}
            for k in KEYS:
                vals = [m[k] for m in ok if m.get(k) is not None]
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
    out += ["", "CPU columns are in cores (1.00 = one core busy). Client context switches come from wait4 "
            "over all of the client's threads, divided by the client threads; server ones are per thread "
            "from /proc: the mean over all server threads, and in brackets the busiest thread (most CPU). 'other CPU' is the share of the machine's CPU time that "
            "other processes used during the counted window (a shared machine's noise). redis cells "
            "show p95 where p90 is (redis-benchmark has no p90)."]
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
    written = write_plot(fig, path, dpi=90)
    plt.close(fig)
    return path.name if written else None

