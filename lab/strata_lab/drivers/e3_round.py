"""Driver: one E3 round (strata_lab/suites/e3.py): starts 2 LC + 4 BE processes of
``strata-bench-e3-tenant`` together (a common start instant) under the round's scheduling
policies, waits for them, reads the CSV each wrote (E3's columns, one file per process and round)
and prints the round's metrics as one JSON line.

    python -m strata_lab.drivers.e3_round --tenant build/bin/strata-bench-e3-tenant \
        --work-per-us W --csv-dir DIR --lc-gap-us G --be-burst-us B [--lc-sched fifo:10] [--be-sched idle]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from strata_lab import machine, stats
from strata_lab.drivers import die_with_driver

CSV_COLUMNS = ["stream_id", "kernel_id", "priority", "kernel_type", "enqueue_time_ms",
               "start_time_ms", "end_time_ms", "duration_ms", "launch_latency_ms", "e2e_latency_ms"]
EVENT_THRESHOLD_MS = 1.0
LC_PROCS, BE_PROCS, STREAMS, KERNELS = 2, 4, 4, 50
LC_BURST_US = 500.0        # a latency-critical request: a short burst, then a gap


def read_kernels(path: str | Path) -> list[dict]:
    """One tenant CSV as a list of rows with numbers; checks E3's columns, and that every row has
    them all, as finite numbers (ids whole): ValueError naming the file and line otherwise.  A
    truncated row was a TypeError (float(None)), and a value of nan, a field too many or a
    kernel_id of 1.5 passed into the round's figures."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != CSV_COLUMNS:
            raise ValueError(f"{path}: columns {reader.fieldnames} are not E3's {CSV_COLUMNS}")
        rows = []
        for r in reader:
            where = f"{path}, line {reader.line_num}"
            if None in r or None in r.values():
                raise ValueError(f"{where}: not the {len(CSV_COLUMNS)} fields of E3's columns")
            row = {"kernel_type": r["kernel_type"]}
            for k in CSV_COLUMNS:
                if k == "kernel_type":
                    continue
                try:
                    v = float(r[k]) if k.endswith("_ms") else int(r[k])
                except ValueError:
                    v = math.nan
                if not math.isfinite(v):
                    raise ValueError(f"{where}: {k} is {r[k]!r}")
                row[k] = v
            rows.append(row)
    return rows


def round_metrics(lc: list[dict], be: list[dict]) -> dict:
    """E3's per-round figures from the round's LC and BE kernel rows (all processes)."""
    if not lc or not be:
        raise ValueError("a round needs LC and BE kernels")
    lc_launch = [r["launch_latency_ms"] for r in lc]
    be_launch = [r["launch_latency_ms"] for r in be]
    be_start = min(r["enqueue_time_ms"] for r in be)
    be_end = max(r["end_time_ms"] for r in be)
    be_span_s = (be_end - be_start) / 1000.0
    lc_sorted = sorted(lc_launch)
    return {
        "lc_kernels": len(lc), "be_kernels": len(be),
        "lc_launch_p99_ms": stats.p99(lc_launch),
        "lc_launch_p50_ms": lc_sorted[len(lc_sorted) // 2],
        "lc_launch_max_ms": lc_sorted[-1],
        "lc_e2e_p99_ms": stats.p99([r["e2e_latency_ms"] for r in lc]),
        "lc_events_over_1ms": sum(x > EVENT_THRESHOLD_MS for x in lc_launch),
        "be_events_over_1ms": sum(x > EVENT_THRESHOLD_MS for x in be_launch),
        "be_span_s": be_span_s,
        "be_throughput_kps": len(be) / be_span_s / 1000.0 if be_span_s > 0 else 0.0,
        "lc_span_s": (max(r["end_time_ms"] for r in lc) - min(r["enqueue_time_ms"] for r in lc)) / 1000.0,
    }


def claim_tag(out_dir: Path, base: str) -> str:
    """The name prefix of this sample's CSVs: `base` (round<R>-<mode>), or base-rerun<N> when a
    sample of the same round and mode already wrote there.  The lab runs a noisy sample again
    (and a second warm-up, and a run started in the same second shares the directory): the
    re-run wrote over the CSVs that the first sample's "csv" names, so a kept sample could name
    the dropped one's kernels.  The claim is an exclusive create, so two drivers never share
    a name."""
    for n in range(100000):
        tag = base if n == 0 else f"{base}-rerun{n}"
        try:
            os.close(os.open(out_dir / f"{tag}-lc0.csv", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue
        return tag
    raise RuntimeError(f"{out_dir}: no free name for {base}")


def _children_cpu_s() -> float:
    import resource

    c, s = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    return c.ru_utime + c.ru_stime + s.ru_utime + s.ru_stime


def run_round(a, tenants: list, variant: str, rnd: str, cpus: list[int]) -> int:
    """Starts the tenants, waits for them, prints the round's figures: the exit status."""
    busy0, cpu0, t0 = machine.cpu_jiffies(cpus)[0], _children_cpu_s(), time.monotonic()
    # Tenants die with the driver: after kill -9 of the lab they would run to their own timeout.
    procs = [(role, p, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        preexec_fn=die_with_driver()))
             for role, p, cmd in tenants]
    deadline = time.monotonic() + a.timeout_s
    summaries, errors = [], []
    for role, csv_path, proc in procs:
        try:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            for _, _, q in procs:
                if q.poll() is None:
                    q.send_signal(signal.SIGKILL)
            proc.communicate()
            errors.append(f"{role} tenant {proc.pid} timed out after {a.timeout_s:g} s")
            continue
        if proc.returncode != 0:
            errors.append(f"{role} tenant exited with status {proc.returncode}: {err.strip()[-400:]}")
            continue
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.monotonic() - t0
    busy_s = (machine.cpu_jiffies(cpus)[0] - busy0) / machine.CLK_TCK
    own_s = _children_cpu_s() - cpu0
    if errors:
        print("e3 round failed: " + "; ".join(errors), file=sys.stderr)
        return 1

    try:
        kernels = {p: read_kernels(p) for _, p, _ in tenants}
    except (OSError, ValueError) as e:
        print(f"e3 round failed: {e}", file=sys.stderr)
        return 1
    lc = [r for role, p, _ in tenants if role == "lc" for r in kernels[p]]
    be = [r for role, p, _ in tenants if role == "be" for r in kernels[p]]
    expected = a.streams * a.kernels
    short = [str(p) for _, p, _ in tenants if len(kernels[p]) != expected]
    if short:
        print(f"e3 round failed: tenants without {expected} kernels: {short}", file=sys.stderr)
        return 1
    m = round_metrics(lc, be)
    foreign = max(busy_s - own_s, 0.0)
    m.update({
        "threads": (a.lc_procs + a.be_procs) * a.streams, "variant": variant, "round": rnd,
        "lc_sched": a.lc_sched, "be_sched": a.be_sched,
        "sched_observed": {role: sorted({x for s in summaries if s["role"] == role
                                         for x in s["sched_observed"]}) for role in ("lc", "be")},
        "wall_s": wall, "tenant_cpu_s": own_s, "foreign_cpu_s": foreign,
        "foreign_cpu_share": foreign / (len(cpus) * wall) if wall > 0 else 0.0,
        "cpus": cpus, "csv": [] if a.discard_csv else [str(p) for _, p, _ in tenants],
    })
    print(json.dumps(m))
    return 0


def drive(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m strata_lab.drivers.e3_round",
                                 description="one E3 round: 2 LC + 4 BE tenants started together")
    ap.add_argument("--tenant", required=True)
    ap.add_argument("--work-per-us", type=float, required=True)
    ap.add_argument("--csv-dir", required=True)
    ap.add_argument("--lc-procs", type=int, default=LC_PROCS)
    ap.add_argument("--be-procs", type=int, default=BE_PROCS)
    ap.add_argument("--streams", type=int, default=STREAMS)
    ap.add_argument("--kernels", type=int, default=KERNELS)
    ap.add_argument("--lc-burst-us", type=float, default=LC_BURST_US)
    ap.add_argument("--lc-gap-us", type=float, required=True)
    ap.add_argument("--be-burst-us", type=float, required=True)
    ap.add_argument("--lc-sched", default="normal")
    ap.add_argument("--be-sched", default="normal")
    ap.add_argument("--timeout-s", type=float, default=90.0)
    ap.add_argument("--discard-csv", action="store_true")
    a = ap.parse_args(argv)
    if a.lc_procs < 1 or a.be_procs < 1:
        ap.error("a round needs at least one LC and one BE tenant (--lc-procs, --be-procs)")
    if not 10.0 < a.timeout_s < 1e6:  # the tenants get 10 s less, to be stopped before the driver
        ap.error(f"--timeout-s must be more than 10 (and below 1e6), not {a.timeout_s:g}")

    variant = os.environ.get("STRATA_LAB_VARIANT", f"{a.lc_sched}-{a.be_sched}".replace(":", ""))
    rnd = os.environ.get("STRATA_LAB_ROUND", "x")
    seed_base = 1000 if not rnd.isdigit() else int(rnd)  # same arrivals for every mode of a round
    out_dir = Path(a.csv_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cpus = sorted(os.sched_getaffinity(0))
    start_at = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 300_000_000
    common = ["--streams", a.streams, "--kernels", a.kernels, "--work-per-us", a.work_per_us,
              "--start-at-ns", start_at, "--timeout-s", a.timeout_s - 10]
    tag = claim_tag(out_dir, f"round{rnd}-{variant}")
    tenants = []
    for role, n, sched, burst, gap in (("lc", a.lc_procs, a.lc_sched, a.lc_burst_us, a.lc_gap_us),
                                       ("be", a.be_procs, a.be_sched, a.be_burst_us, 0.0)):
        for i in range(n):
            csv_path = out_dir / f"{tag}-{role}{i}.csv"
            cmd = [a.tenant, "--role", role, "--sched", sched, "--burst-us", burst, "--gap-us", gap,
                   "--seed", seed_base * 100 + (0 if role == "lc" else 50) + i, "--out", csv_path,
                   *common]
            tenants.append((role, csv_path, [str(x) for x in cmd]))

    try:
        return run_round(a, tenants, variant, rnd, cpus)
    finally:
        if a.discard_csv:  # on every way out: a failed smoke round left its CSVs in /tmp
            for _, p, _ in tenants:
                p.unlink(missing_ok=True)
            try:
                out_dir.rmdir()
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(drive())
