"""analysis: ratios against the baseline, geometric mean, failures and oversubscription, compare."""

import pytest

from strata_lab import analysis, results
from strata_lab.model import RunDoc


def doc_with(values: dict, cells=None, complete=True, failures=()):
    """values: {(cell, variant): [metric per round]}."""
    cells = cells or [{"id": "a/t1", "workload": "a", "threads": 1, "metric": "ops", "unit": "ops/s",
                       "higher_is_better": True, "oversubscribed": False, "latency_metrics": []},
                      {"id": "b/t4", "workload": "b", "threads": 4, "metric": "ms", "unit": "ms",
                       "higher_is_better": False, "oversubscribed": True, "latency_metrics": ["p99"]}]
    samples = []
    for (cell, variant), vals in values.items():
        for r, v in enumerate(vals):
            samples.append({"cell": cell, "variant": variant, "round": r, "warmup": False, "ok": True,
                            "metrics": {cells[[c["id"] for c in cells].index(cell)]["metric"]: v, "p99": v * 2},
                            "peak_rss_kb": 1000 * (2 if variant == "x" else 1)})
        # a warm-up sample with an absurd value must not count
        samples.append({"cell": cell, "variant": variant, "round": None, "warmup": True, "ok": True,
                        "metrics": {"ops": 1e12, "ms": 1e12}, "peak_rss_kb": 1})
    for cell, variant in failures:
        samples.append({"cell": cell, "variant": variant, "round": 0, "warmup": False, "ok": False,
                        "failure": {"kind": "crash", "message": "killed by signal SIGSEGV",
                                    "exit_status": -11, "stderr_tail": "boom"}})
    for i, s in enumerate(samples):
        s["index"] = i
    return {"schema": results.SCHEMA, "schema_version": 1, "run_id": "t", "suite": "s",
            "complete": complete, "interrupted": None if complete else "SIGINT",
            "settings": {"rounds": 5, "cpus": [0, 1], "baseline": "base", "planned_samples": 99},
            "variants": {"base": {}, "x": {}}, "cells": cells, "samples": samples,
            "machine": {}, "git": {}}


def test_ratios_geomean_and_warnings():
    d = doc_with({("a/t1", "base"): [10, 10, 10, 10, 10], ("a/t1", "x"): [20, 20, 20, 20, 20],
                  ("b/t4", "base"): [8, 8, 8, 8, 8], ("b/t4", "x"): [4, 4, 4, 4, 4]})
    an = analysis.analyse(RunDoc.from_json(d))
    a, b = an.cells
    assert a.by_variant["x"].speedup == 2.0          # 20 / 10 ops/s
    assert b.by_variant["x"].speedup == 2.0          # 8 ms / 4 ms, lower is better
    assert a.by_variant["x"].rss_ratio == 2.0         # 2000 / 1000 KiB
    assert an.geomean["x"].speedup == pytest.approx(2.0)
    assert an.geomean["base"].speedup == 1.0
    assert a.by_variant["x"].summary.median == 20     # warm-up 1e12 excluded
    # per-round P99 of the latency metric: p99 = 2 * ms = 8 in every round for x
    assert b.by_variant["x"].latency["p99"].mean == 8.0
    assert any("oversubscribed" in w for w in an.warnings)


def test_failures_are_counted_never_averaged():
    d = doc_with({("a/t1", "base"): [10, 11, 12, 10, 11], ("a/t1", "x"): [20, 21, 22, 20, 21],
                  ("b/t4", "base"): [8] * 5, ("b/t4", "x"): []}, failures=[("b/t4", "x")] * 5)
    an = analysis.analyse(RunDoc.from_json(d))
    e = an.cells[1].by_variant["x"]
    assert e.n == 0 and e.failures == 5 and e.summary is None and e.speedup is None
    assert any("failure — crash: killed by signal SIGSEGV" in w for w in an.warnings)
    assert an.geomean["x"].cells == 1  # only the cell where both succeeded


def test_wide_spread_and_incomplete_are_flagged():
    d = doc_with({("a/t1", "base"): [10, 10, 10, 10, 10], ("a/t1", "x"): [5, 10, 20, 10, 15],
                  ("b/t4", "base"): [8] * 5, ("b/t4", "x"): [8] * 5}, complete=False)
    an = analysis.analyse(RunDoc.from_json(d))
    assert any(w.startswith("INCOMPLETE") for w in an.warnings)
    # 5 10 20 10 15: mean 12, sample std sqrt(32.5) = 5.70 -> CV 48 %
    assert "a/t1: wide spread (CV > 10 %) for x 48 %" in an.warnings


def test_incomplete_counts_finished_samples_as_the_plan_does():
    """Probe s40b: the plan counts warm-ups, so the finished count must too ("0 of 84" was shown
    with 2 warm-ups finished)."""
    d = doc_with({("a/t1", "base"): [], ("a/t1", "x"): []}, complete=False)  # 2 warm-ups only
    an = analysis.analyse(RunDoc.from_json(d))
    assert any(w.startswith("INCOMPLETE run (SIGINT): 2 of 99 planned samples finished") for w in an.warnings), \
        an.warnings


def test_compare_says_which_differences_are_significant():
    a = doc_with({("a/t1", "base"): [1, 2, 3, 4, 5], ("a/t1", "x"): [10, 11, 12, 13, 14],
                  ("b/t4", "base"): [8] * 5, ("b/t4", "x"): [8] * 5})
    b = doc_with({("a/t1", "base"): [6, 7, 8, 9, 10], ("a/t1", "x"): [10, 12, 11, 14, 13],
                  ("b/t4", "base"): [8] * 5, ("b/t4", "x"): [8] * 5})
    cmp = analysis.compare(RunDoc.from_json(a), RunDoc.from_json(b))
    rows = {(r.cell, r.variant): r for r in cmp.rows}
    base = rows[("a/t1", "base")]
    assert base.significant and base.p_value == pytest.approx(2 / 252)
    assert base.speedup == 8 / 3 and base.verdict == "faster"
    assert not rows[("a/t1", "x")].significant
    assert rows[("b/t4", "x")].verdict == "no significant difference"


def test_compare_notes_what_is_not_like_for_like():
    """Probe h6 D5: compare matched cells by id alone and dropped variants only one run had without
    a word; a --smoke run against a full one (another workload under the same cell id), or runs
    pinned to other CPUs, came out as the allocators' differences."""
    values = {("a/t1", "base"): [1, 2, 3, 4, 5], ("a/t1", "x"): [10, 11, 12, 13, 14],
              ("b/t4", "base"): [8] * 5, ("b/t4", "x"): [8] * 5}
    a, b = doc_with(values), doc_with(values)
    for d, (exe, extra) in ((a, ("/one/build/bin/bench", ["--smoke"])), (b, ("/two/build/bin/bench", []))):
        for c in d["cells"]:
            c["argv"] = [exe, "--band", c["workload"], "--seconds", "0.3"] + extra
    b["cells"][1]["argv"] = ["/two/build/bin/bench", "--band", "b", "--seconds", "0.3", "--smoke"]
    for d, root in ((a, "/one"), (b, "/two")):  # a driver's paths: the checkout's, not the workload
        d["cells"][1]["argv"] += ["--httpd", f"{root}/build/bin/strata-bench-e5-httpd"]
        d["cells"][1]["env"] = {"PYTHONPATH": f"{root}/lab"}
    a["variants"]["only-a"] = {}
    b["settings"]["cpus"] = [1]
    cmp = analysis.compare(RunDoc.from_json(a), RunDoc.from_json(b))
    assert "a/t1: not the same workload in A and B (A: --band a --seconds 0.3 --smoke; B: --band a " \
           "--seconds 0.3): its differences are not the allocators'" in cmp.notes, cmp.notes
    assert not any(n.startswith("b/t4") for n in cmp.notes), cmp.notes  # only the program's path differs
    assert "variant only-a: only in A" in cmp.notes
    assert "the runs were pinned to different CPUs (A: [0, 1], B: [1])" in cmp.notes
    assert len(cmp.rows) == 4


def test_unknown_baseline_is_an_error():
    from strata_lab.errors import LabError

    d = doc_with({("a/t1", "base"): [1], ("a/t1", "x"): [2], ("b/t4", "base"): [1], ("b/t4", "x"): [1]})
    with pytest.raises(LabError, match="baseline 'nope'"):
        analysis.analyse(RunDoc.from_json(d), "nope")


def test_busy_machine_is_flagged():
    d = doc_with({("a/t1", "base"): [10] * 5, ("a/t1", "x"): [10] * 5,
                  ("b/t4", "base"): [8] * 5, ("b/t4", "x"): [8] * 5})
    for s in d["samples"]:
        s["other_cpu_frac"] = 0.02
    assert not any("BUSY" in w for w in analysis.analyse(RunDoc.from_json(d)).warnings)
    for s in d["samples"]:
        s["other_cpu_frac"] = 0.5
    an = analysis.analyse(RunDoc.from_json(d))
    assert an.other_cpu_frac == 0.5 and an.warnings[0].startswith("BUSY MACHINE: other processes used a median 50 %")


def test_compare_leaves_out_a_metric_of_zero_instead_of_dividing_by_it():
    """A results file written before the runner made a metric <= 0 a failure holds such samples
    as successes; `compare` took the median of 0 and divided by it (ZeroDivisionError)."""
    a = RunDoc.from_json(doc_with({("a/t1", "base"): [0, 0, 10], ("a/t1", "x"): [20, 21, 22],
                                   ("b/t4", "base"): [8, 9, 8], ("b/t4", "x"): [0, 0, 0]}))
    b = RunDoc.from_json(doc_with({("a/t1", "base"): [11, 12, 11], ("a/t1", "x"): [20, 21, 22],
                                   ("b/t4", "base"): [8, 9, 8], ("b/t4", "x"): [4, 5, 4]}))
    cmp = analysis.compare(a, b)
    row = next(r for r in cmp.rows if (r.cell, r.variant) == ("a/t1", "base"))
    assert row.speedup == pytest.approx(1.1) and row.a.n == 1
    assert "a/t1 / base: 2 samples of A left out (ops <= 0)" in cmp.notes
    assert "b/t4 / x: no successful samples in A" in cmp.notes
    assert not any((r.cell, r.variant) == ("b/t4", "x") for r in cmp.rows)


def test_a_variant_with_one_sample_beside_tied_baseline_values_is_analysed():
    """`report` died of scipy's ValueError (its permutation test wants two values a side) on a
    cell where a variant kept one successful sample and the baseline's values tied."""
    d = doc_with({("a/t1", "base"): [10, 10, 11], ("a/t1", "x"): [20],
                  ("b/t4", "base"): [8, 9, 8], ("b/t4", "x"): [4, 5, 4]})
    an = analysis.analyse(RunDoc.from_json(d))
    assert an.cells[0].by_variant["x"].p_value == pytest.approx(0.5)
