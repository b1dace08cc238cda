"""A real program: redis-server from the system's packages under each allocator, driven by
redis-benchmark on 127.0.0.1 (requests/s, per-round P99 latency, server peak RSS)."""

import shutil
import sys

from strata_lab.allocators import BUILTINS
from strata_lab.suite import Cell

DESCRIPTION = "redis-server preloaded with each allocator, redis-benchmark on loopback: req/s, P99, peak RSS"
ALLOCATORS = list(BUILTINS)  # every allocator the lab knows
BASELINE = "mimalloc"
ROUNDS = 5
WARMUP = 1


def smoke_skip():
    if not (shutil.which("redis-server") and shutil.which("redis-benchmark")):
        return "redis-server/redis-benchmark not installed (sudo apt-get install redis-server redis-tools)"
    return None


def cells(ctx):
    requests = 500 if ctx.smoke else 40000
    argv = [sys.executable, "-m", "strata_lab.drivers.redis_bench", "--requests", requests]
    if ctx.smoke:
        argv.append("--smoke")
    return [Cell(workload="redis", threads=1, argv=argv, metric="rps", unit="req/s",
                 params={"requests_per_test": requests, "tests": "set,get,lpush,lpop",
                         "clients": 4 if ctx.smoke else 32, "data_size": 256},
                 latency_metrics=("p99_ms_set", "p99_ms_get"), peak_rss_metric="server_peak_rss_kb",
                 preload="driver", timeout_s=180.0)]
