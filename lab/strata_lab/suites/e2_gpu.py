"""E2 on the device memory resources: three phases per resource and thread count.

Runs build/bin/strata-bench-e2-gpu once per sample with one resource (the variant) and one
thread count (the cell).  The device is the real GPU when the CUDA driver loads, otherwise the
simulated device; `--param backend=sim|cuda` (or the environment's STRATA_E2_BACKEND, which
docs/gpu.md gives) forces one.  Simulated timings say how the resources behave on the host side
(locks, stream ordering), not how fast a GPU is.

The capped variant (`--param cap=1.5`, simulated device only) gives each cell a device of 1.5x
the cell's live bound (its threads' own live peaks added up, from a dry run of their scripts), so
every resource should finish; a cell that runs out of memory is recorded as a failure.
`--param cap_basis=serial` sizes the device from the serial bound instead (the threads one after
another), which a resource can only meet by making threads wait for each other's frees.

`--param fragment=turns` makes the workload take its fragment step (where the live peak is) one
thread at a time, so every resource sees about the same live bytes and peak reserved compares at
equal live bytes; the timed phases still run all threads together.  Every cell also records the
untimed steps (time, live peak) and both live bounds (docs/gpu.md).
"""

import ctypes
import json
import math

from strata_lab.errors import LabError
from strata_lab.results import NUMBER, counted_metrics, or_null
from strata_lab.suite import Cell, Param, integer, one_of

RESOURCES = ["strata", "pool", "arena", "async", "cuda"]
DESCRIPTION = ("E2 GPU device resources: baseline / fragmented / long-term time, % change, time in "
               "allocate/deallocate, lock wait, fragmentation and peak reserved, per thread count")
VARIANTS = {
    "strata": {"args": ["--resource", "strata"], "description": "strata_resource: per-(thread, stream) heaps"},
    "pool": {"args": ["--resource", "pool"], "description": "coalescing best-fit pool, one lock"},
    "arena": {"args": ["--resource", "arena"], "description": "per-stream/thread arenas over a global arena"},
    "async": {"args": ["--resource", "async"], "description": "driver stream-ordered pool (cudaMallocAsync)"},
    "cuda": {"args": ["--resource", "cuda"], "description": "cuMemAlloc/cuMemFree per request"},
}
BASELINE = "pool"
ROUNDS = 5
WARMUP = 1

PHASES = ("baseline", "fragmented", "long_term")
PARAMS = [
    Param("backend", "auto", "device: cuda (the GPU), sim (the simulated device), or auto: cuda "
          "when libcuda.so.1 loads, else sim", parse=one_of("auto", "cuda", "sim"),
          env="STRATA_E2_BACKEND"),
    Param("cap", None, "simulated device only: a device of CAP x each cell's live bound "
          "(a number >= 1)", parse=lambda t: _factor(t), default_text="no cap (16 GiB)"),
    Param("cap_basis", "concurrent", "what --param cap multiplies (only with cap): concurrent "
          "(every thread at its own peak at once) or serial (one thread after another)",
          parse=one_of("concurrent", "serial")),
    Param("fragment", "together", "together, or turns: the workload takes its fragment step one "
          "thread at a time (peak reserved at equal live bytes)", parse=one_of("together", "turns")),
    Param("pool_mib", None, "first chunk of pool, arena and strata in MiB (--pool-mib)",
          parse=integer(0, 1 << 20), default_text="the benchmark's: 1024, or 0 (grow as needed) under a cap"),
    Param("iterations", None, "iterations of the workload W per phase (--iterations)",
          parse=integer(1, 10_000_000), default_text="the benchmark's: 2000"),
]


def _factor(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError("not a number") from None
    if not v >= 1.0:
        raise ValueError("must be at least 1")
    if not math.isfinite(v):  # "inf", "1e400": the benchmark refuses them in every sample
        raise ValueError("must be a finite number")
    return v


def backend(choice: str = "auto") -> str:
    if choice in ("sim", "cuda"):
        return choice
    try:
        ctypes.CDLL("libcuda.so.1")
        return "cuda"
    except OSError:
        return "sim"


def cells(ctx, threads=(1, 4, 8, 16)):
    exe = ctx.bin("e2-gpu")
    p = ctx.params
    dev = backend(p["backend"])
    extra = []
    if p.get("cap") is not None:
        if dev != "sim":
            raise LabError("suite e2_gpu: --param cap needs the simulated device (--param backend=sim)")
        extra += ["--cap-factor", str(p["cap"]), "--cap-basis", p["cap_basis"]]
    elif p["cap_basis"] != "concurrent":  # it multiplies the cap: without one it was ignored
        raise LabError(f"suite e2_gpu: --param cap_basis={p['cap_basis']} needs --param cap")
    if p["fragment"] == "turns":
        extra += ["--fragment-in-turns"]
    if p.get("pool_mib") is not None:
        extra += ["--pool-mib", str(p["pool_mib"])]
    if p.get("iterations") is not None:
        extra += ["--iterations", str(p["iterations"])]
    out = []
    for t in ctx.thread_counts(threads, smoke=[1, 4]):
        argv = [exe, "--backend", dev, "--threads", t] + (["--smoke"] if ctx.smoke else []) + extra
        out.append(Cell(workload="e2-gpu", threads=t, argv=argv, metric="long_term_ms", unit="ms",
                        higher_is_better=False,
                        params={"backend": dev, "phases": list(PHASES), "cap": p.get("cap"),
                                "cap_basis": p["cap_basis"], "fragment": p["fragment"],
                                "pool_mib": p.get("pool_mib"), "iterations": p.get("iterations")},
                        timeout_s=300.0))
    return out


def parse(cell, stdout: str) -> dict:
    """One cell of strata-bench-e2-gpu's document, flattened to numbers."""
    doc = json.loads(stdout)
    [r] = doc["results"]
    if r["status"] != "ok":
        raise ValueError(f"{r['resource']} x {r['threads']} threads failed: {r.get('error')}")
    m = {"threads": r["threads"]}
    for k in ("device_bytes", "live_bound_bytes", "serial_live_bound_bytes"):
        if r.get(k) is not None:
            m[k] = r[k]
    for ph in PHASES:
        p = r["phases"][ph]
        m[f"{ph}_ms"] = p["time_ms"]
        m[f"{ph}_change_pct"] = p["change_pct"]
        m[f"{ph}_alloc_ns"] = p["alloc_ns_total"]
        m[f"{ph}_peak_reserved_bytes"] = p["peak_reserved_bytes"]
        if p.get("live_peak_bytes") is not None:
            m[f"{ph}_live_peak_bytes"] = p["live_peak_bytes"]
        if p.get("step_live_peak_bytes") is not None:
            m[f"{ph}_step_live_peak_bytes"] = p["step_live_peak_bytes"]
        if p["lock_wait_ns"] is not None:
            m[f"{ph}_lock_wait_ns"] = p["lock_wait_ns"]
        if p["fragmentation"] is not None:
            m[f"{ph}_fragmentation"] = p["fragmentation"]
    for step, p in r.get("setup", {}).items():  # untimed: fragment, churn
        m[f"{step}_ms"] = p["time_ms"]
        m[f"{step}_peak_reserved_bytes"] = p["peak_reserved_bytes"]
        m[f"{step}_step_live_peak_bytes"] = p["step_live_peak_bytes"]
    return m


# What summarise() reads of each sample (checked before it runs: results.check_metrics): absent
# or null (a non-finite value, as the lab writes it) is shown as "–".
SUMMARY_METRICS = tuple((k, or_null(NUMBER), False) for k in (
    "baseline_ms", "fragmented_ms", "fragmented_change_pct", "long_term_ms", "long_term_change_pct",
    "long_term_alloc_ns", "long_term_lock_wait_ns", "long_term_fragmentation",
    "long_term_peak_reserved_bytes", "long_term_live_peak_bytes", "live_bound_bytes",
    "serial_live_bound_bytes", "fragment_ms"))


def _median(ok: list, key: str):
    import statistics

    xs = [m[key] for m in ok if m.get(key) is not None]
    return statistics.median(xs) if xs else None


def _fmt(x, scale=1.0, spec=".2f") -> str:
    return "–" if x is None else format(x / scale, spec)


def summarise(results: dict) -> str:
    """Per thread count and resource: baseline -> fragmented (Δ %) -> long term (Δ %), with the
    long-term phase's time in allocate/deallocate, lock wait, fragmentation and peak reserved
    (medians over rounds); then memory: peak reserved against the workload's live peak in that
    run and its two bounds, and the issue-12 target (strata <= 1.25 x the least of pool, arena
    and async)."""
    mib = 1048576.0
    lines = ["## E2 on device resources (medians over rounds)", "",
             "| threads | resource | baseline ms | fragmented ms (Δ %) | long term ms (Δ %) | "
             "alloc ms | lock wait ms | fragmentation | peak reserved MiB | live peak MiB |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    memory = ["", "## Memory (medians over rounds, MiB)", "",
              "live peak: the most the workload held at once in that run; bounds: every thread at "
              "its own peak at once / one thread after another (dry runs).", "",
              "| threads | resource | peak reserved | live peak | reserved / live | fragment step ms | "
              "bounds | target 1.25 × least of pool, arena, async |",
              "|---:|---|---:|---:|---:|---:|---|---|"]
    for c in results["cells"]:
        if c["workload"] != "e2-gpu":
            continue
        reserved, rows = {}, {}
        for v in results["variants"]:
            ok = counted_metrics(results, c["id"], v)
            if not ok:
                lines.append(f"| {c['threads']} | {v} | failed | | | | | | | |")
                rows[v] = f"| {c['threads']} | {v} | failed | | | | |"
                continue

            def med(k, ok=ok):
                return _median(ok, k)

            lines.append(
                f"| {c['threads']} | {v} | {_fmt(med('baseline_ms'))} | "
                f"{_fmt(med('fragmented_ms'))} ({_fmt(med('fragmented_change_pct'), spec='+.1f')} %) | "
                f"{_fmt(med('long_term_ms'))} ({_fmt(med('long_term_change_pct'), spec='+.1f')} %) | "
                f"{_fmt(med('long_term_alloc_ns'), 1e6)} | {_fmt(med('long_term_lock_wait_ns'), 1e6)} | "
                f"{_fmt(med('long_term_fragmentation'), spec='.3f')} | "
                f"{_fmt(med('long_term_peak_reserved_bytes'), mib, '.1f')} | "
                f"{_fmt(med('long_term_live_peak_bytes'), mib, '.1f')} |")
            peak, live = med("long_term_peak_reserved_bytes"), med("long_term_live_peak_bytes")
            reserved[v] = peak
            ratio = _fmt(peak / live if peak and live else None, spec=".2f")
            bounds = (f"{_fmt(med('live_bound_bytes'), mib, '.0f')} / "
                      f"{_fmt(med('serial_live_bound_bytes'), mib, '.0f')}")
            rows[v] = (f"| {c['threads']} | {v} | {_fmt(peak, mib, '.0f')} | {_fmt(live, mib, '.0f')} | "
                       f"{ratio} | {_fmt(med('fragment_ms'))} | {bounds} |")
        others = [reserved[v] for v in ("pool", "arena", "async") if reserved.get(v)]
        for v, row in rows.items():
            target = ""
            if v == "strata" and reserved.get(v) and others:
                limit = 1.25 * min(others)
                target = f"{limit / mib:.0f}: {'met' if reserved[v] <= limit else 'not met'}"
            memory.append(f"{row} {target} |")
    return "\n".join(lines + memory)
