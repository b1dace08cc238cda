"""E3 — latency-critical (LC) vs best-effort (BE) tenants sharing a machine, CPU policy mode.

One sample is one *round*: this module, run as a driver (``python -m strata_lab.suites.e3``),
starts 2 LC + 4 BE processes of ``strata-bench-e3-tenant`` together (a common start instant),
waits for them, reads the CSV each wrote (E3's columns, one file per process and round) and
prints the round's metrics as one JSON line.  The lab interleaves the modes (variants) within
every round; ``summarise`` turns the rounds into E3's tables.

Modes (variants):
  native   every tenant at SCHED_OTHER nice 0.
  policy   BE under SCHED_IDLE (the scheduler's best-effort class), LC at SCHED_FIFO 10.
  be_idle  ablation: BE under SCHED_IDLE, LC left at SCHED_OTHER.  On the reference machine this
           alone was not enough (see docs/e3-e5.md): fair-class wake-ups of LC workers on the
           other CPU were sometimes delayed by milliseconds.
  lc_fifo  ablation: LC at SCHED_FIFO 10, BE left at SCHED_OTHER — what promoting LC alone does.

CPU mode models one contended device: the tenants share ``DEVICE_CPUS`` CPUs (the first ones of
the run's --cpus), and the BE kernel length is derived from it so a round takes ~2 s.
The GPU mode (CUDA spin kernels, stream priorities, a BE admission throttle) is not implemented
yet; it needs a machine with an NVIDIA GPU.
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
import tempfile
import time
from pathlib import Path

from strata_lab import machine, paths
from strata_lab.suite import Cell

DESCRIPTION = "E3: latency-critical vs best-effort tenants (2 LC + 4 BE processes), native vs scheduler policy"
VARIANTS = {
    "native": {"args": ["--lc-sched", "normal", "--be-sched", "normal"],
               "description": "all tenants SCHED_OTHER, nice 0"},
    "policy": {"args": ["--lc-sched", "fifo:10", "--be-sched", "idle"],
               "description": "BE SCHED_IDLE, LC SCHED_FIFO priority 10"},
    "be_idle": {"args": ["--lc-sched", "normal", "--be-sched", "idle"],
                "description": "ablation: BE SCHED_IDLE, LC SCHED_OTHER"},
    "lc_fifo": {"args": ["--lc-sched", "fifo:10", "--be-sched", "normal"],
                "description": "ablation: LC SCHED_FIFO 10, BE SCHED_OTHER"},
}
BASELINE = "native"
ROUNDS = 10
WARMUP = 1

CSV_COLUMNS = ["stream_id", "kernel_id", "priority", "kernel_type", "enqueue_time_ms",
               "start_time_ms", "end_time_ms", "duration_ms", "launch_latency_ms", "e2e_latency_ms"]
EVENT_THRESHOLD_MS = 1.0
TARGET_P99_DROP = -90.0    # % change of the LC per-round P99 mean
TARGET_BE_BAND = 2.0       # |% change| of BE throughput
FOREIGN_WARN = 0.05        # other processes' share of the device above which BE figures are noise

DEVICE_CPUS = 2            # the tenants share this many CPUs: one "device"
ROUND_S = 2.0              # target length of a round (BE work / DEVICE_CPUS)
LC_PROCS, BE_PROCS, STREAMS, KERNELS = 2, 4, 4, 50
LC_BURST_US = 500.0        # a latency-critical request: a short burst, then a gap
LC_SPREAD = 0.75           # LC requests arrive over this share of the round
SMOKE = {"kernels": 5, "lc_burst_us": 200.0, "lc_gap_us": 2000.0, "be_burst_us": 1000.0}


# ---- analysis (pure functions: unit-tested in lab/tests/test_e3.py) ----------------------------

def read_kernels(path: str | Path) -> list[dict]:
    """One tenant CSV as a list of rows with numbers; checks E3's columns."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != CSV_COLUMNS:
            raise ValueError(f"{path}: columns {reader.fieldnames} are not E3's {CSV_COLUMNS}")
        rows = []
        for r in reader:
            row = {k: float(r[k]) for k in CSV_COLUMNS if k != "kernel_type"}
            row["kernel_type"] = r["kernel_type"]
            for k in ("stream_id", "kernel_id", "priority"):
                row[k] = int(row[k])
            rows.append(row)
    return rows


def p99(values: list[float]) -> float:
    """99th percentile, linear interpolation (numpy's default; same as strata_lab.stats.p99)."""
    v = sorted(values)
    if not v:
        raise ValueError("no values")
    pos = 0.99 * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


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
        "lc_launch_p99_ms": p99(lc_launch),
        "lc_launch_p50_ms": lc_sorted[len(lc_sorted) // 2],
        "lc_launch_max_ms": lc_sorted[-1],
        "lc_e2e_p99_ms": p99([r["e2e_latency_ms"] for r in lc]),
        "lc_events_over_1ms": sum(x > EVENT_THRESHOLD_MS for x in lc_launch),
        "be_events_over_1ms": sum(x > EVENT_THRESHOLD_MS for x in be_launch),
        "be_span_s": be_span_s,
        "be_throughput_kps": len(be) / be_span_s / 1000.0 if be_span_s > 0 else 0.0,
        "lc_span_s": (max(r["end_time_ms"] for r in lc) - min(r["enqueue_time_ms"] for r in lc)) / 1000.0,
    }


def _mean(v):
    return sum(v) / len(v)


def _median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _std(v):
    if len(v) < 2:
        return None
    m = _mean(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))


def _change(new, old):
    return None if old in (None, 0) or new is None else (new - old) / old * 100.0


def mode_table(samples: list[dict]) -> dict:
    """Per mode (variant): E3's statistics across the counted, successful rounds."""
    by_mode: dict[str, list[dict]] = {}
    failures: dict[str, int] = {}
    for s in samples:
        if s.get("warmup"):
            continue
        if not s.get("ok"):
            failures[s["variant"]] = failures.get(s["variant"], 0) + 1
            continue
        by_mode.setdefault(s["variant"], []).append({**s["metrics"], "_round": s.get("round")})
    out = {}
    for mode, rounds in by_mode.items():
        p99s = [m["lc_launch_p99_ms"] * 1000.0 for m in rounds]
        thr = [m["be_throughput_kps"] for m in rounds]
        out[mode] = {
            "rounds": len(rounds), "failures": failures.get(mode, 0),
            "lc_p99_us": {"mean": _mean(p99s), "median": _median(p99s), "std": _std(p99s),
                          "values": p99s},
            "lc_events_over_1ms": sum(m["lc_events_over_1ms"] for m in rounds),
            "be_events_over_1ms": sum(m["be_events_over_1ms"] for m in rounds),
            "lc_kernels": sum(m["lc_kernels"] for m in rounds),
            "be_kernels": sum(m["be_kernels"] for m in rounds),
            "be_throughput_kps": {"mean": _mean(thr), "median": _median(thr), "std": _std(thr),
                                  "by_round": {m["_round"]: m["be_throughput_kps"] for m in rounds}},
            "foreign_cpu_share": _mean([m.get("foreign_cpu_share", 0.0) for m in rounds]),
        }
    for mode in failures:
        out.setdefault(mode, {"rounds": 0, "failures": failures[mode]})
    return out


def verdict(native: dict, policy: dict) -> dict:
    """The issue's target for one policy against native."""
    p99_change = _change(policy["lc_p99_us"]["mean"], native["lc_p99_us"]["mean"])
    be_change = _change(policy["be_throughput_kps"]["mean"], native["be_throughput_kps"]["mean"])
    met = (p99_change is not None and be_change is not None and p99_change <= TARGET_P99_DROP
           and abs(be_change) <= TARGET_BE_BAND)
    return {"lc_p99_mean_change_pct": p99_change, "be_throughput_change_pct": be_change, "met": met,
            "be_paired": paired_change(native["be_throughput_kps"].get("by_round", {}),
                                       policy["be_throughput_kps"].get("by_round", {}))}


def paired_change(base: dict, new: dict) -> dict | None:
    """BE throughput change paired by round (the modes of a round share LC arrivals and run
    back to back): mean per-round change in % of the native mean, with a 95 % t interval."""
    rounds = sorted(set(base) & set(new), key=str)
    if len(rounds) < 2:
        return None
    from scipy import stats as sps

    ref = _mean([base[r] for r in rounds])
    d = [(new[r] - base[r]) / ref * 100.0 for r in rounds]
    half = float(sps.t.ppf(0.975, len(d) - 1)) * _std(d) / math.sqrt(len(d))
    m = _mean(d)
    return {"rounds": len(d), "mean_pct": m, "low_pct": m - half, "high_pct": m + half,
            "within_band": -TARGET_BE_BAND <= m - half and m + half <= TARGET_BE_BAND}


def _f(x, fmt="{:.1f}"):
    return "–" if x is None else fmt.format(x)


def _pct(x):
    return "–" if x is None else f"{x:+.1f} %"


def summarise(results: dict) -> str:
    """E3's tables in the original's terms: native against each policy, with the change in %."""
    table = mode_table(results.get("samples", []))
    if BASELINE not in table or not table[BASELINE].get("rounds"):
        return "### E3\nNo successful native rounds: nothing to compare.\n"
    nat = table[BASELINE]
    others = [m for m in table if m != BASELINE and table[m].get("rounds")]
    head = "| metric | native | " + " | ".join(f"{m} | change" for m in others) + " |"
    sep = "|---|---:|" + "---:|---:|" * len(others)
    rows = []

    def row(label, get, fmt="{:.1f}", change=True):
        cells = [label, _f(get(nat), fmt)]
        for m in others:
            v = get(table[m])
            cells += [_f(v, fmt), _pct(_change(v, get(nat))) if change else ""]
        rows.append("| " + " | ".join(cells) + " |")

    row("LC per-round P99 launch latency, mean (µs)", lambda t: t["lc_p99_us"]["mean"])
    row("LC per-round P99 launch latency, median (µs)", lambda t: t["lc_p99_us"]["median"])
    row("LC per-round P99 launch latency, std (µs)", lambda t: t["lc_p99_us"]["std"])
    row("LC launches > 1 ms (all rounds)", lambda t: t["lc_events_over_1ms"], "{:d}")
    row("BE launches > 1 ms (all rounds)", lambda t: t["be_events_over_1ms"], "{:d}")
    row("BE throughput, mean over rounds (k kernels/s)", lambda t: t["be_throughput_kps"]["mean"], "{:.4f}")
    row("BE throughput, std over rounds (k kernels/s)", lambda t: t["be_throughput_kps"]["std"], "{:.4f}", False)
    row("rounds (failed)", lambda t: t["rounds"], "{:d}", False)
    row("CPU used by other processes (share of the device)", lambda t: t["foreign_cpu_share"] * 100, "{:.1f} %", False)
    out = [f"### E3 — LC vs BE tenants, CPU policy mode ({nat['rounds']} rounds per mode)", "",
           head, sep, *rows, ""]
    for m in others:
        v = verdict(nat, table[m])
        out.append(f"- **{m}**: LC per-round P99 mean {_pct(v['lc_p99_mean_change_pct'])}, BE throughput "
                   f"{_pct(v['be_throughput_change_pct'])} — target (≤ {TARGET_P99_DROP:.0f} % and within "
                   f"±{TARGET_BE_BAND:.0f} %) **{'met' if v['met'] else 'missed'}**")
        bp = v["be_paired"]
        if bp:
            out.append(f"  - BE throughput change paired by round: {bp['mean_pct']:+.2f} % "
                       f"[{bp['low_pct']:+.2f}, {bp['high_pct']:+.2f}] (95 %, {bp['rounds']} rounds): the "
                       f"interval {'lies' if bp['within_band'] else 'does not lie'} within ±{TARGET_BE_BAND:.0f} %")
    noisy = {m: t["foreign_cpu_share"] for m, t in table.items()
             if t.get("rounds") and t["foreign_cpu_share"] > FOREIGN_WARN}
    if noisy:
        out.append("- **warning**: other processes used "
                   + ", ".join(f"{v * 100:.0f} % ({m})" for m, v in noisy.items())
                   + " of the device during the rounds; BE tenants under SCHED_IDLE yield to them, so "
                   "the BE-throughput comparison is not trustworthy — rerun on a quiet machine")
    fails = {m: t["failures"] for m, t in table.items() if t.get("failures")}
    if fails:
        out.append(f"- failed rounds (not counted): {fails}")
    plot = _plot(results, table)
    if plot:
        out += ["", f"![E3 per-round P99 and BE throughput]({plot})"]
    out.append("")
    return "\n".join(out)


def _plot(results: dict, table: dict) -> str | None:
    """Per-round LC P99 (log scale) and BE throughput per mode, next to results.json."""
    where = results.get("_path")
    if not where:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    by_mode: dict[str, list] = {}
    for s in results.get("samples", []):
        if s.get("ok") and not s.get("warmup"):
            by_mode.setdefault(s["variant"], []).append((s["round"], s["metrics"]))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, pts in by_mode.items():
        pts.sort(key=lambda x: x[0])
        a1.plot([r for r, _ in pts], [m["lc_launch_p99_ms"] * 1000 for _, m in pts], "o-", label=mode)
        a2.plot([r for r, _ in pts], [m["be_throughput_kps"] for _, m in pts], "o-", label=mode)
    a1.set_yscale("log")
    a1.set_title("LC launch latency, P99 per round (µs)")
    a2.set_title("BE throughput per round (k kernels/s)")
    for a in (a1, a2):
        a.set_xlabel("round")
        a.legend(fontsize=8)
    fig.tight_layout()
    path = Path(where).parent / "e3-rounds.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


# ---- the suite ----------------------------------------------------------------------------

def rt_allowed(priority: int = 10) -> bool:
    """Whether this user may put LC tenants under SCHED_FIFO (root, or an RLIMIT_RTPRIO grant;
    CAP_SYS_NICE alone is not detected and is reported by the tenant when it fails)."""
    import resource

    return os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_RTPRIO)[0] >= priority


def smoke_skip():
    if not rt_allowed():
        return ("the policy mode puts LC tenants under SCHED_FIFO, which needs root or an "
                "RLIMIT_RTPRIO of 10 (ulimit -r 10)")
    return None


def calibrate(exe: str | Path) -> float:
    """Loop iterations per µs on an idle CPU, measured once so every round and mode runs the same
    work per kernel."""
    out = subprocess.run([str(exe), "--calibrate"], capture_output=True, text=True, timeout=60,
                         check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["work_per_us"])


def shape(n_cpus: int, smoke: bool, seconds: float | None = None) -> dict:
    """Kernel lengths for a round of ~`seconds` on `n_cpus` CPUs: BE work fills the device for the
    round; LC requests arrive over LC_SPREAD of it (on 2 CPUs they use ~7 % of the device)."""
    if smoke:
        return {"streams": 2, **SMOKE}
    round_s = seconds or ROUND_S
    be_burst_us = round_s * n_cpus * 1e6 / (BE_PROCS * STREAMS * KERNELS)
    lc_gap_us = max(LC_SPREAD * round_s * 1e6 / KERNELS - LC_BURST_US, 0.0)
    return {"streams": STREAMS, "kernels": KERNELS, "lc_burst_us": LC_BURST_US,
            "lc_gap_us": round(lc_gap_us, 1), "be_burst_us": round(be_burst_us, 1)}


def cells(ctx):
    exe = ctx.bin("e3-tenant")
    cpus = list(ctx.cpus)[:DEVICE_CPUS]
    sh = shape(len(cpus), ctx.smoke, ctx.seconds)
    work = calibrate(exe)
    if ctx.smoke:
        csv_dir = Path(tempfile.gettempdir()) / f"strata-e3-smoke-{os.getpid()}"
    else:
        csv_dir = paths.results_root() / "e3-kernels" / time.strftime("%Y%m%d-%H%M%S")
    argv = [sys.executable, "-m", "strata_lab.suites.e3", "--tenant", str(exe),
            "--work-per-us", f"{work:.3f}", "--csv-dir", str(csv_dir),
            "--streams", sh["streams"], "--kernels", sh["kernels"],
            "--lc-burst-us", sh["lc_burst_us"], "--lc-gap-us", sh["lc_gap_us"],
            "--be-burst-us", sh["be_burst_us"]]
    if ctx.smoke:
        argv.append("--discard-csv")
    return [Cell(workload="e3", threads=(LC_PROCS + BE_PROCS) * sh["streams"], argv=argv,
                 metric="lc_launch_p99_ms", unit="ms", higher_is_better=False,
                 latency_metrics=["lc_launch_p99_ms"], cpus=cpus, timeout_s=180,
                 env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
                 params={**sh, "lc_procs": LC_PROCS, "be_procs": BE_PROCS, "work_per_us": work,
                         "device_cpus": cpus, "csv_dir": str(csv_dir)},
                 name="e3/lc2-be4")]


# ---- the driver: one round ----------------------------------------------------------------

def _children_cpu_s() -> float:
    import resource

    c, s = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    return c.ru_utime + c.ru_stime + s.ru_utime + s.ru_stime


def drive(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m strata_lab.suites.e3",
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

    variant = os.environ.get("STRATA_LAB_VARIANT", f"{a.lc_sched}-{a.be_sched}".replace(":", ""))
    rnd = os.environ.get("STRATA_LAB_ROUND", "x")
    seed_base = 1000 if not rnd.isdigit() else int(rnd)  # same arrivals for every mode of a round
    out_dir = Path(a.csv_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cpus = sorted(os.sched_getaffinity(0))
    start_at = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 300_000_000
    common = ["--streams", a.streams, "--kernels", a.kernels, "--work-per-us", a.work_per_us,
              "--start-at-ns", start_at, "--timeout-s", a.timeout_s - 10]
    tenants = []
    for role, n, sched, burst, gap in (("lc", a.lc_procs, a.lc_sched, a.lc_burst_us, a.lc_gap_us),
                                       ("be", a.be_procs, a.be_sched, a.be_burst_us, 0.0)):
        for i in range(n):
            csv_path = out_dir / f"round{rnd}-{variant}-{role}{i}.csv"
            cmd = [a.tenant, "--role", role, "--sched", sched, "--burst-us", burst, "--gap-us", gap,
                   "--seed", seed_base * 100 + (0 if role == "lc" else 50) + i, "--out", csv_path,
                   *common]
            tenants.append((role, csv_path, [str(x) for x in cmd]))

    busy0, cpu0, t0 = machine.cpu_jiffies(cpus)[0], _children_cpu_s(), time.monotonic()
    procs = [(role, p, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
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

    lc = [r for role, p, _ in tenants if role == "lc" for r in read_kernels(p)]
    be = [r for role, p, _ in tenants if role == "be" for r in read_kernels(p)]
    expected = a.streams * a.kernels
    short = [str(p) for _, p, _ in tenants if len(read_kernels(p)) != expected]
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
    if a.discard_csv:
        for _, p, _ in tenants:
            p.unlink(missing_ok=True)
        try:
            out_dir.rmdir()
        except OSError:
            pass
    print(json.dumps(m))
    return 0


if __name__ == "__main__":
    sys.exit(drive())
