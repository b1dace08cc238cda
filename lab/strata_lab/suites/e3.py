"""E3 — latency-critical (LC) vs best-effort (BE) tenants sharing a machine, CPU policy mode.

One sample is one *round*: the driver (strata_lab/drivers/e3_round.py) starts 2 LC + 4 BE
processes of ``strata-bench-e3-tenant`` together (a common start instant), waits for them, reads
the CSV each wrote (E3's columns, one file per process and round) and prints the round's metrics
as one JSON line.  The lab interleaves the modes (variants) within
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

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from strata_lab import stats
from strata_lab.errors import LabError
from strata_lab.drivers.e3_round import BE_PROCS, KERNELS, LC_BURST_US, LC_PROCS, STREAMS
from strata_lab.model import Sample
from strata_lab.results import AMOUNT, COUNT, NUMBER, write_plot
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

TARGET_P99_DROP = -90.0    # % change of the LC per-round P99 mean
TARGET_BE_BAND = 2.0       # |% change| of BE throughput
FOREIGN_WARN = 0.05        # other processes' share of the device above which BE figures are noise

DEVICE_CPUS = 2            # the tenants share this many CPUs: one "device"
ROUND_S = 2.0              # target length of a round (BE work / DEVICE_CPUS)
LC_SPREAD = 0.75           # LC requests arrive over this share of the round
SMOKE = {"kernels": 5, "lc_burst_us": 200.0, "lc_gap_us": 2000.0, "be_burst_us": 1000.0}

# What summarise() reads of each round (checked before it runs: results.check_metrics); 10**400
# events would be summed into the table as if counted.
EVENTS = "an integer, 0 or more, below 2**63", lambda v: COUNT[1](v) and v < 2 ** 63
SUMMARY_METRICS = (("lc_launch_p99_ms", NUMBER, True), ("be_throughput_kps", NUMBER, True),
                   ("lc_events_over_1ms", EVENTS, True), ("be_events_over_1ms", EVENTS, True),
                   ("lc_kernels", EVENTS, True), ("be_kernels", EVENTS, True),
                   ("foreign_cpu_share", AMOUNT, False))


# ---- analysis (pure functions: unit-tested in lab/tests/test_e3.py) ----------------------------

def _change(new, old):
    return None if old in (None, 0) or new is None else (new - old) / old * 100.0


def mode_table(samples: list[dict]) -> dict:
    """Per mode (variant): E3's statistics across the counted, successful rounds."""
    by_mode: dict[str, list[dict]] = {}
    failures: dict[str, int] = {}
    for s in map(Sample.from_json, samples):
        if not s.counted:
            continue
        if not s.ok:
            failures[s.variant] = failures.get(s.variant, 0) + 1
            continue
        by_mode.setdefault(s.variant, []).append({**s.metrics, "_round": s.round})
    out = {}
    for mode, rounds in by_mode.items():
        p99s = [m["lc_launch_p99_ms"] * 1000.0 for m in rounds]
        thr = [m["be_throughput_kps"] for m in rounds]
        out[mode] = {
            "rounds": len(rounds), "failures": failures.get(mode, 0),
            "lc_p99_us": {"mean": stats.mean(p99s), "median": stats.median(p99s), "std": stats.std(p99s),
                          "values": p99s},
            "lc_events_over_1ms": sum(m["lc_events_over_1ms"] for m in rounds),
            "be_events_over_1ms": sum(m["be_events_over_1ms"] for m in rounds),
            "lc_kernels": sum(m["lc_kernels"] for m in rounds),
            "be_kernels": sum(m["be_kernels"] for m in rounds),
            "be_throughput_kps": {"mean": stats.mean(thr), "median": stats.median(thr), "std": stats.std(thr),
                                  "by_round": {m["_round"]: m["be_throughput_kps"] for m in rounds}},
            "foreign_cpu_share": stats.mean([m.get("foreign_cpu_share", 0.0) for m in rounds]),
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

    ref = stats.mean([base[r] for r in rounds])
    d = [(new[r] - base[r]) / ref * 100.0 for r in rounds]
    half = float(sps.t.ppf(0.975, len(d) - 1)) * stats.std(d) / math.sqrt(len(d))
    m = stats.mean(d)
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
    for s in map(Sample.from_json, results.get("samples", [])):
        if s.counted and s.ok:
            by_mode.setdefault(s.variant, []).append((s.round, s.metrics))
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
    written = write_plot(fig, path, dpi=90)
    plt.close(fig)
    return path.name if written else None


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


def round_timeout_s(smoke: bool, seconds: float | None = None) -> float:
    """The driver's --timeout-s for a round of ~`seconds` (its tenants get 10 s less): the
    driver's default of 90 s for the default round, three times the round past it.  --seconds 100
    made rounds of 100 s whose tenants were stopped at 80 s: every round failed."""
    return 90.0 if smoke else max(90.0, 3.0 * (seconds or ROUND_S) + 10.0)


def cells(ctx):
    exe = ctx.bin("e3-tenant")
    cpus = list(ctx.cpus)[:DEVICE_CPUS]
    sh = shape(len(cpus), ctx.smoke, ctx.seconds)
    timeout_s = round_timeout_s(ctx.smoke, ctx.seconds)
    if sh["be_burst_us"] > 1e9 or timeout_s >= 1e6:
        raise LabError(f"--seconds {ctx.seconds:g} makes E3 rounds longer than its tenants run "
                       f"(BE kernels of {sh['be_burst_us'] / 1e6:g} s; at most 1000 s each)")
    work = calibrate(exe)
    if ctx.smoke:
        csv_dir = Path(tempfile.gettempdir()) / f"strata-e3-smoke-{os.getpid()}"
    else:
        csv_dir = ctx.results_root() / "e3-kernels" / time.strftime("%Y%m%d-%H%M%S")
    argv = [sys.executable, "-m", "strata_lab.drivers.e3_round", "--tenant", str(exe),
            "--work-per-us", f"{work:.3f}", "--csv-dir", str(csv_dir),
            "--streams", sh["streams"], "--kernels", sh["kernels"],
            "--lc-burst-us", sh["lc_burst_us"], "--lc-gap-us", sh["lc_gap_us"],
            "--be-burst-us", sh["be_burst_us"], "--timeout-s", timeout_s]
    if ctx.smoke:
        argv.append("--discard-csv")
    return [Cell(workload="e3", threads=(LC_PROCS + BE_PROCS) * sh["streams"], argv=argv,
                 metric="lc_launch_p99_ms", unit="ms", higher_is_better=False,
                 latency_metrics=["lc_launch_p99_ms"], cpus=cpus, timeout_s=max(180.0, timeout_s + 30.0),
                 env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
                 params={**sh, "lc_procs": LC_PROCS, "be_procs": BE_PROCS, "work_per_us": work,
                         "device_cpus": cpus, "csv_dir": str(csv_dir)},
                 name="e3/lc2-be4")]


