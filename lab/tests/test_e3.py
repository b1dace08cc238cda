"""E3 suite: the per-round analysis, the tables, and one real smoke round of the tenants."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from strata_lab.suite import SuiteContext
from strata_lab.drivers import e3_round
from strata_lab.suites import e3

from .conftest import BUILD, program


@pytest.fixture(scope="module")
def tenant() -> Path:
    return program("strata-bench-e3-tenant")


def kernels(n, launch, start=0.0, enqueue_step=1.0, duration=0.5):
    rows = []
    for i in range(n):
        enq = start + i * enqueue_step
        st = enq + launch[i % len(launch)]
        rows.append({"stream_id": 0, "kernel_id": i, "priority": 0, "kernel_type": "cpu_burst",
                     "enqueue_time_ms": enq, "start_time_ms": st, "end_time_ms": st + duration,
                     "duration_ms": duration, "launch_latency_ms": st - enq,
                     "e2e_latency_ms": st + duration - enq})
    return rows


def test_round_metrics_counts_events_and_throughput():
    lc = kernels(100, [0.01] * 98 + [2.0, 5.0])
    be = kernels(50, [3.0, 0.1], enqueue_step=10.0, duration=10.0)
    m = e3_round.round_metrics(lc, be)
    assert m["lc_kernels"] == 100 and m["be_kernels"] == 50
    assert m["lc_events_over_1ms"] == 2
    assert m["be_events_over_1ms"] == 25
    assert m["lc_launch_p99_ms"] == pytest.approx(float(np.percentile([r["launch_latency_ms"] for r in lc], 99)))
    span_ms = max(r["end_time_ms"] for r in be) - 0.0
    assert m["be_throughput_kps"] == pytest.approx(50 / span_ms)  # kernels per ms = k kernels/s
    with pytest.raises(ValueError):
        e3_round.round_metrics([], be)


def _sample(variant, rnd, p99_ms, thr, lc_ev=0, ok=True):
    s = {"variant": variant, "round": rnd, "warmup": rnd is None, "ok": ok, "cell": "e3/lc2-be4"}
    if ok:
        s["metrics"] = {"lc_launch_p99_ms": p99_ms, "be_throughput_kps": thr, "lc_events_over_1ms": lc_ev,
                        "be_events_over_1ms": 5, "lc_kernels": 400, "be_kernels": 800,
                        "foreign_cpu_share": 0.01}
    return s


def test_tables_and_verdict():
    samples = [_sample("native", None, 99.0, 1.0)]  # a warm-up: never counted
    for r in range(10):
        samples.append(_sample("native", r, 10.0 + r, 0.360, lc_ev=20))
        samples.append(_sample("policy", r, 0.1 + r / 100, 0.358))
        samples.append(_sample("be_idle", r, 5.0, 0.30))
    samples.append(_sample("policy", 10, 0, 0, ok=False))
    samples.append({**_sample("native", 3, 1e6, 1e6), "superseded_by": 0})  # replaced by a re-run
    samples.append({**_sample("policy", None, 0, 0, ok=False), "warmup": False, "kind": "instructions"})
    for i, s in enumerate(samples):
        s["index"] = i
    t = e3.mode_table(samples)
    assert t["native"]["rounds"] == 10 and t["policy"]["failures"] == 1
    assert t["native"]["lc_p99_us"]["mean"] == pytest.approx(14500.0)
    assert t["native"]["lc_p99_us"]["median"] == pytest.approx(14500.0)
    assert t["native"]["lc_p99_us"]["std"] == pytest.approx(float(np.std([1e4 + 1e3 * r for r in range(10)], ddof=1)))
    assert t["native"]["lc_events_over_1ms"] == 200
    v = e3.verdict(t["native"], t["policy"])
    assert v["lc_p99_mean_change_pct"] < -90 and abs(v["be_throughput_change_pct"]) < 2 and v["met"]
    assert not e3.verdict(t["native"], t["be_idle"])["met"]
    bp = v["be_paired"]
    assert bp["rounds"] == 10 and bp["mean_pct"] == pytest.approx((0.358 - 0.360) / 0.360 * 100)
    assert bp["low_pct"] == pytest.approx(bp["mean_pct"]) and bp["within_band"]  # no spread here
    md = e3.summarise({"samples": samples})
    assert "LC per-round P99 launch latency, mean (µs)" in md and "**met**" in md and "**missed**" in md
    assert "paired by round" in md
    assert "failed rounds" in md and "warning" not in md
    for smp in samples:
        if smp.get("ok"):
            smp["metrics"]["foreign_cpu_share"] = 0.3
    assert "not trustworthy" in e3.summarise({"samples": samples})
    assert "No successful native rounds" in e3.summarise({"samples": []})


def test_shape_fills_the_device_for_the_round():
    sh = e3.shape(2, smoke=False)
    be_work_s = e3_round.BE_PROCS * sh["streams"] * sh["kernels"] * sh["be_burst_us"] / 1e6
    assert be_work_s / 2 == pytest.approx(e3.ROUND_S)
    lc_span_s = sh["kernels"] * (sh["lc_gap_us"] + sh["lc_burst_us"]) / 1e6
    assert lc_span_s < e3.ROUND_S  # LC requests arrive while BE still runs
    assert e3.shape(2, smoke=True)["kernels"] == e3.SMOKE["kernels"]


def test_tenant_smoke_program(tenant):
    for args in (["--role", "lc"], ["--role", "be", "--sched", "idle"]):
        r = subprocess.run([str(tenant), "--smoke", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout.strip().splitlines()[-1])
        assert d["smoke"] == "ok" and d["kernels_done"] == d["streams"] * d["kernels_per_stream"]
    r = subprocess.run([str(tenant), "--role", "xx"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "lc or be" in r.stderr


def test_one_round_end_to_end(tenant, tmp_path, monkeypatch):
    """A smoke-sized round through the driver: 6 CSVs with E3's columns and S*K rows each."""
    monkeypatch.setenv("STRATA_BUILD", str(BUILD))
    cell = e3.cells(SuiteContext(smoke=True))[0]
    assert cell.metric == "lc_launch_p99_ms" and not cell.higher_is_better
    argv = [str(a) for a in cell.argv]
    argv[argv.index("--csv-dir") + 1] = str(tmp_path)
    argv.remove("--discard-csv")
    import resource

    # SCHED_FIFO needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO allowance; else check the native mode.
    rt_ok = os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_RTPRIO)[0] >= 10
    mode = "policy" if rt_ok else "native"
    env = {**os.environ, **cell.env, "STRATA_LAB_VARIANT": mode, "STRATA_LAB_ROUND": "0"}
    r = subprocess.run(argv + e3.VARIANTS[mode]["args"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout.strip().splitlines()[-1])
    s, k = cell.params["streams"], cell.params["kernels"]
    assert m["lc_kernels"] == e3_round.LC_PROCS * s * k and m["be_kernels"] == e3_round.BE_PROCS * s * k
    expected = {"lc": ["fifo:10"], "be": ["idle"]} if rt_ok else {"lc": ["normal"], "be": ["normal"]}
    assert m["sched_observed"] == expected
    files = sorted(tmp_path.glob(f"round0-{mode}-*.csv"))
    assert len(files) == e3_round.LC_PROCS + e3_round.BE_PROCS
    for f in files:
        with open(f, newline="") as fh:
            rows = list(csv.DictReader(fh))
            assert list(rows[0].keys()) == e3_round.CSV_COLUMNS
        assert len(rows) == s * k
        for row in rows:
            assert float(row["enqueue_time_ms"]) <= float(row["start_time_ms"]) <= float(row["end_time_ms"])
            assert float(row["launch_latency_ms"]) == pytest.approx(
                float(row["start_time_ms"]) - float(row["enqueue_time_ms"]), abs=2e-6)
            assert row["priority"] == ("-1" if "-lc" in f.name else "0")


def test_a_rerun_of_a_round_keeps_the_first_samples_csvs(tenant, tmp_path, monkeypatch):
    """The lab runs a noisy sample again with the same round and mode: the re-run wrote over the
    CSVs the first sample's "csv" names, so a kept first sample named the re-run's kernels."""
    monkeypatch.setenv("STRATA_BUILD", str(BUILD))
    cell = e3.cells(SuiteContext(smoke=True))[0]
    argv = [str(a) for a in cell.argv]
    argv[argv.index("--csv-dir") + 1] = str(tmp_path)
    argv.remove("--discard-csv")
    env = {**os.environ, **cell.env, "STRATA_LAB_VARIANT": "native", "STRATA_LAB_ROUND": "3"}
    runs = []
    for _ in range(2):
        r = subprocess.run(argv + e3.VARIANTS["native"]["args"], capture_output=True, text=True, env=env,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    first, again = runs
    assert not set(first["csv"]) & set(again["csv"])
    assert len(list(tmp_path.glob("*.csv"))) == 2 * (e3_round.LC_PROCS + e3_round.BE_PROCS)
    for m in runs:  # each sample's files still give its own figures
        lc = [r for p in m["csv"] if "-lc" in Path(p).name for r in e3_round.read_kernels(p)]
        be = [r for p in m["csv"] if "-be" in Path(p).name for r in e3_round.read_kernels(p)]
        assert e3_round.round_metrics(lc, be)["lc_launch_p99_ms"] == m["lc_launch_p99_ms"]


@pytest.mark.parametrize("args, why", [(["--lc-procs", "0"], "at least one LC"),
                                       (["--timeout-s", "5"], "more than 10"),
                                       (["--timeout-s", "nan"], "more than 10")])
def test_round_driver_refuses_a_round_it_cannot_run(tmp_path, args, why):
    """--lc-procs 0 ended in a traceback after the round; --timeout-s 10 or less reached the
    tenants as a timeout of 0 or below, which they refused with a message about their own
    --timeout-s."""
    r = subprocess.run([sys.executable, "-m", "strata_lab.drivers.e3_round", "--tenant", "/bin/true",
                        "--work-per-us", "1", "--csv-dir", str(tmp_path / "csv"), "--lc-gap-us", "1",
                        "--be-burst-us", "1", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "csv").exists()


HEADER = ",".join(e3_round.CSV_COLUMNS) + "\n"
ROW = "0,0,-1,cpu_burst,1.0,1.5,2.0,0.5,0.5,1.0\n"


@pytest.mark.parametrize("text, why", [(HEADER + ROW + "0,1,-1,cpu", "line 3: not the 10 fields"),
                                       (HEADER + ROW.rstrip() + ",9\n", "line 2: not the 10 fields"),
                                       (HEADER + ROW.replace("0.5,0.5,", "0.5,nan,"), "launch_latency_ms is 'nan'"),
                                       (HEADER + ROW.replace("2.0", "inf"), "end_time_ms is 'inf'"),
                                       (HEADER + ROW.replace("0,0,-1", "0,1.5,-1"), "kernel_id is '1.5'")])
def test_read_kernels_refuses_a_damaged_csv(tmp_path, text, why):
    """A truncated row was a TypeError (float(None)); nan, inf, a field too many and a kernel_id of
    1.5 went into the round's figures (nan then failed the P99 with 'non-finite value')."""
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(ValueError, match=why):
        e3_round.read_kernels(p)


def test_read_kernels_reads_a_hand_made_csv(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(HEADER + ROW + "\n" + ROW.replace("0,0,-1", "1,3,-1"))  # a blank line is no row
    rows = e3_round.read_kernels(p)
    assert [(r["stream_id"], r["kernel_id"], r["priority"]) for r in rows] == [(0, 0, -1), (1, 3, -1)]
    assert rows[0]["launch_latency_ms"] == 0.5 and rows[0]["kernel_type"] == "cpu_burst"
    (tmp_path / "h.csv").write_text(HEADER)
    assert e3_round.read_kernels(tmp_path / "h.csv") == []
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(ValueError, match="are not E3's"):
        e3_round.read_kernels(tmp_path / "e.csv")


@pytest.mark.parametrize("seconds", [None, 2.0, 100.0, 1000.0])
def test_a_round_of_seconds_is_given_time_to_finish(monkeypatch, seconds):
    """--seconds sets the length of a round (shape); the driver's --timeout-s stayed at its default
    of 90 s (the tenants 80 s), so with --seconds 100 every round failed after 80 s."""
    monkeypatch.setenv("STRATA_BUILD", str(BUILD))
    cell = e3.cells(SuiteContext(seconds=seconds))[0]
    argv = [str(a) for a in cell.argv]
    driver_s = float(argv[argv.index("--timeout-s") + 1]) if "--timeout-s" in argv else 90.0
    round_s = seconds or e3.ROUND_S
    assert driver_s - 10 >= 2 * round_s  # the tenants' own limit, with room for a loaded machine
    assert cell.timeout_s > driver_s     # the lab does not kill a round its driver still times


def test_a_round_longer_than_the_tenants_run_is_refused(monkeypatch):
    from strata_lab.errors import LabError

    monkeypatch.setenv("STRATA_BUILD", str(BUILD))
    with pytest.raises(LabError, match="--seconds"):
        e3.cells(SuiteContext(seconds=1e6))


def test_a_failed_round_with_discard_csv_leaves_nothing(tmp_path):
    """--discard-csv (the smoke runs, in /tmp) removed the CSVs only after a round that
    succeeded: a tenant that failed after writing its CSV (a timeout, exit 5) left them there."""
    fake = tmp_path / "tenant"
    fake.write_text("#!/bin/sh\n"
                    "while [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n"
                    f"echo '{HEADER.strip()}' > \"$out\"\n"
                    "echo 'timed out' >&2; exit 5\n")
    fake.chmod(0o755)
    csv_dir = tmp_path / "csv"
    r = subprocess.run([sys.executable, "-m", "strata_lab.drivers.e3_round", "--tenant", str(fake),
                        "--work-per-us", "1", "--csv-dir", str(csv_dir), "--lc-gap-us", "1",
                        "--be-burst-us", "1", "--discard-csv"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "exited with status 5" in r.stderr
    assert not csv_dir.exists()


def test_the_kernels_csvs_go_under_the_runs_out_directory(monkeypatch, tmp_path):
    """`run --out DIR`: the rounds' kernel CSVs went to results/e3-kernels/ whatever --out said
    (a run kept out of the tree still wrote into it)."""
    monkeypatch.setenv("STRATA_BUILD", str(BUILD))
    monkeypatch.setenv("STRATA_RESULTS", str(tmp_path / "default-root"))
    out = tmp_path / "elsewhere"
    given = Path(e3.cells(SuiteContext(out_root=out))[0].params["csv_dir"])
    assert given.parent == out / "e3-kernels"
    unset = Path(e3.cells(SuiteContext())[0].params["csv_dir"])
    assert unset.parent == tmp_path / "default-root" / "e3-kernels"
