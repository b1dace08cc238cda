"""Paired per-round ratios, their exact intervals, the paired geometric mean, speed against memory."""

import math

import numpy as np
import pytest

from strata_lab import analysis, stats
from strata_lab.model import RunDoc

from .test_analysis import doc_with


def test_order_statistic_interval_of_the_median():
    # Coverage of [x_(k+1), x_(n-k)] is 1 - 2 P(Bin(n, 1/2) <= k).
    # n = 5: only (min, max), 1 - 2/32 = 93.75 %; n = 6: (min, max), 1 - 2/64 = 96.875 %
    assert stats.median_order_ci(5) == (0, 4, pytest.approx(0.9375))
    assert stats.median_order_ci(6) == (0, 5, pytest.approx(0.96875))
    # n = 9: k = 1 gives 1 - 2 (1 + 9)/512 = 96.1 %, k = 2 would give 1 - 2*46/512 = 82 %
    assert stats.median_order_ci(9) == (1, 7, pytest.approx(1 - 20 / 512))
    # n = 20: the textbook pair is the 6th and 15th values (95.9 %)
    lo, hi, cov = stats.median_order_ci(20)
    assert (lo, hi) == (5, 14) and cov == pytest.approx(0.9586, abs=1e-4)
    assert stats.median_order_ci(1) is None


def test_pairing_cancels_drift_that_independent_resampling_counts_twice():
    # The machine slows down round after round; the variant is exactly twice as fast in every
    # round.  Paired: 2.0 with a zero-width interval.  Unpaired: a wide interval.
    base = [10, 14, 20, 26, 33, 40, 50]
    var = [2 * b for b in base]
    p = stats.paired_speedup(var, base)
    assert p.ratio == 2.0 and (p.ci_low, p.ci_high) == (2.0, 2.0) and p.half_width == 0.0
    lo, hi = stats.speedup_ci(var, base)
    assert hi - lo > 1.0
    # times (lower is better): baseline 6 s, ours 3 s in each round -> 2.0x better
    t = stats.paired_speedup([3, 4, 5], [6, 8, 10], higher_is_better=False)
    assert t.ratio == 2.0 and t.per_round == (2.0, 2.0, 2.0)


def test_paired_ratio_median_and_interval_by_hand():
    # per-round ratios 1.0 1.1 1.2 1.3 1.4 1.5 (6 rounds): median = sqrt(1.2 * 1.3),
    # interval (min, max) = [1.0, 1.5] with 96.9 %; half-width 0.25 / sqrt(1.56)
    p = stats.paired_ratio([1.3, 1.0, 1.5, 1.1, 1.4, 1.2])
    assert p.ratio == pytest.approx(math.sqrt(1.56))
    assert (p.ci_low, p.ci_high) == (1.0, 1.5) and p.coverage == pytest.approx(0.96875)
    assert p.half_width == pytest.approx(0.25 / math.sqrt(1.56))
    with pytest.raises(ValueError):
        stats.paired_speedup([1, 2], [1])


def test_paired_geomean():
    # cell ratios exactly 2 and 8 in every round -> geometric mean 4, interval the point
    point, ci = stats.geomean_paired([[math.log(2)] * 5, [math.log(8)] * 5])
    assert point == pytest.approx(4.0) and ci == (pytest.approx(4.0), pytest.approx(4.0))
    # with spread, the interval brackets the point and stays within the cells' extremes
    point, (lo, hi) = stats.geomean_paired([[0.0, 0.1, 0.2, 0.3, 0.4], [0.2, 0.2, 0.3, 0.1, 0.2]])
    assert point == pytest.approx(math.exp((0.2 + 0.2) / 2))
    assert math.exp(0.05) <= lo <= point <= hi <= math.exp(0.4)


def test_rounds_needed_from_the_spread_of_the_rounds():
    p = stats.paired_ratio([1.0, 1.06, 1.03, 1.0, 1.06, 1.03])  # (1.06 - 1.0) / 2 / ~1.03 = ±2.9 %
    assert stats.rounds_needed(p, 0.03) == 6  # within the target: what it has
    # the median's standard error from the log ratios' MAD: quartering the target -> 16x rounds
    logs = np.log(p.per_round)
    sigma = 1.4826 * np.median(np.abs(logs - np.median(logs)))
    assert stats.rounds_needed(p, 0.015) == math.ceil((1.96 * 1.2533 * sigma / 0.015) ** 2)
    assert stats.rounds_needed(p, 0.015 / 4) == pytest.approx(16 * stats.rounds_needed(p, 0.015), rel=0.01)
    # one outlier round sets a (min, max) interval but not the estimate: it asks for the rounds
    # the order-statistic interval needs to drop it (9: (x_2, x_8) covers 96 %), not hundreds
    out = stats.paired_ratio([2.0, 2.0, 2.0, 2.0, 2.6])
    assert out.half_width > 0.1 and stats.rounds_needed(out, 0.05) == 9


def test_analysis_pairs_round_k_with_round_k():
    base = [10, 20, 30, 40, 50, 60]
    d = doc_with({("a/t1", "base"): base, ("a/t1", "x"): [b * 1.5 for b in base],
                  ("b/t4", "base"): [8] * 6, ("b/t4", "x"): [4] * 6})
    an = analysis.analyse(RunDoc.from_json(d))
    e = an.cells[0].by_variant["x"]
    assert e.speedup == 1.5 and e.speedup_ci == (1.5, 1.5)
    assert an.geomean["x"].speedup == pytest.approx(math.sqrt(1.5 * 2))
    assert an.convergence.cells["a/t1"].converged


def test_superseded_samples_and_failed_rounds_are_left_out_of_the_pairs():
    d = doc_with({("a/t1", "base"): [10] * 6, ("a/t1", "x"): [20] * 6,
                  ("b/t4", "base"): [8] * 6, ("b/t4", "x"): [4] * 6})
    # a noisy sample of x in round 2, replaced by its re-run (same round)
    noisy = dict(next(s for s in d["samples"] if s["cell"] == "a/t1" and s["variant"] == "x" and s["round"] == 2))
    noisy.update(metrics={"ops": 1.0, "p99": 2.0}, noisy=True, superseded_by=999)
    d["samples"].append(noisy)
    # round 3 of the baseline failed: x's round 3 has no partner
    for s in d["samples"]:
        if s["cell"] == "a/t1" and s["variant"] == "base" and s["round"] == 3:
            s.update(ok=False, failure={"kind": "crash", "message": "killed", "exit_status": -11})
            s.pop("metrics")
    an = analysis.analyse(RunDoc.from_json(d))
    e = an.cells[0].by_variant["x"]
    assert e.paired.n == 5 and e.speedup == 2.0       # rounds 0 1 2 4 5, the re-run's value
    assert e.n == 6 and 1.0 not in e.values
    assert an.cells[0].by_variant["base"].failures == 1


def test_rounds_left_out_of_a_ratio_for_a_metric_of_zero_are_reported():
    """Session 41's probe: in a results file whose samples reported 0 (written before the runner
    made such samples failures), the ratio left those rounds out silently: B = 120, 0, 130, 110,
    0 against 100 showed 1.20x [1.10-1.30] as if all five rounds agreed."""
    d = doc_with({("a/t1", "base"): [100] * 5, ("a/t1", "x"): [120, 0, 130, 110, 0],
                  ("b/t4", "base"): [8] * 5, ("b/t4", "x"): [4] * 5})
    an = analysis.analyse(RunDoc.from_json(d))
    assert an.cells[0].by_variant["x"].paired.n == 3
    assert "a/t1 / x: 2 rounds left out of the ratio (ops <= 0)" in an.warnings
    assert not any(w.startswith("b/t4 / x: ") and "left out" in w for w in an.warnings)


def test_pareto_frontier_and_the_peers_both_faster_and_leaner():
    def entry(m, rss):
        return analysis.VariantResult(n=1, failures=0, failure_messages=[], values=[m],
                                      summary=stats.summarize([m]), rss=stats.summarize([rss]))

    # throughput: a is fastest but fat, b slower and lean, strata slower than c and fatter than c
    per = {"a": entry(100, 50), "b": entry(60, 10), "strata": entry(70, 30), "c": entry(80, 20)}
    p = analysis.pareto(per, True)
    assert sorted(p.frontier) == ["a", "b", "c"]
    assert p.dominating == {"strata": ["c"]}
    # times: lower is better -> the fastest is the smallest value
    per = {"strata": entry(10, 30), "c": entry(8, 20)}
    assert analysis.pareto(per, False).dominating == {"strata": ["c"]}
    assert analysis.pareto(per, True).dominating == {}


def test_a_ratio_is_within_the_target_only_as_a_95_percent_interval():
    """Adaptive rounds stopped as soon as a cell's interval was within ±target, though below 6
    rounds that interval is (min, max) of 50-94 % coverage: 3 rounds that agreed within ±3 %
    ended the cell with a 75 % interval.  Stopping that way held the true ratio in about 75 %
    of the final intervals (log ratios N(0, 0.03), 3 planned rounds, target ±3 %)."""
    from strata_lab import runner

    p3 = stats.paired_ratio([2.0, 2.0, 2.0])
    assert p3.half_width == 0.0 and not p3.within(0.03)
    assert not runner.converged({"x": p3}, 0.03)
    assert stats.rounds_needed(p3, 0.03) == 6
    p6 = stats.paired_ratio([2.0] * 6)
    assert p6.within(0.03) and runner.converged({"x": p6}, 0.03)
    assert stats.rounds_needed(p6, 0.03) == 6

    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(1000):
        logs = list(rng.normal(0.0, 0.03, 3))
        while len(logs) < 50 and not runner.converged({"x": stats.paired_ratio(np.exp(logs))}, 0.03):
            logs.append(rng.normal(0.0, 0.03))
        p = stats.paired_ratio(np.exp(logs))
        hits += p.ci_low <= 1.0 <= p.ci_high
    assert hits / 1000 >= 0.93

    # the report: 5 rounds that agree exactly are not "within ±3 %" as a 95 % interval
    d = doc_with({("a/t1", "base"): [10] * 5, ("a/t1", "x"): [20] * 5,
                  ("b/t4", "base"): [8] * 6, ("b/t4", "x"): [4] * 6})
    conv = analysis.analyse(RunDoc.from_json(d)).convergence
    assert not conv.cells["a/t1"].converged and conv.cells["b/t4"].converged
    assert "x (5 rounds: an interval that covers 93.8 %, not 95 %) ±0.0 % after 5 rounds" in conv.not_converged["a/t1"]


def test_the_geometric_mean_has_no_interval_when_a_cell_has_one_round():
    """A cell with a single paired round was resampled as itself: the geometric mean's interval
    treated its ratio as exact.  With cells of 1, 1 and 10 rounds it held the true geometric
    mean 42 % of the time; now there is no interval, as for that cell's own ratio."""
    point, ci = stats.geomean_paired([[math.log(2.0)], [0.1, 0.2, 0.3]])
    assert point == pytest.approx(math.exp((math.log(2.0) + 0.2) / 2)) and ci is None
    d = doc_with({("a/t1", "base"): [10], ("a/t1", "x"): [20],
                  ("b/t4", "base"): [8, 9, 8], ("b/t4", "x"): [4, 5, 4]})
    an = analysis.analyse(RunDoc.from_json(d))
    assert an.geomean["x"].speedup > 1 and an.geomean["x"].ci is None
    assert an.cells[1].by_variant["x"].speedup_ci is not None


def test_markdown_says_over_how_many_cells_a_geometric_mean_is_taken():
    """The terminal table said "(1/2 cells)" under a geometric mean that left out a cell where
    the variant failed every sample; summary.md and report.html showed the bare number."""
    from strata_lab import tables

    d = doc_with({("a/t1", "base"): [10, 11, 12, 10, 11], ("a/t1", "x"): [20, 21, 22, 20, 21],
                  ("b/t4", "base"): [8] * 5, ("b/t4", "x"): []}, failures=[("b/t4", "x")] * 5)
    doc = RunDoc.from_json(d)
    md = tables.markdown(analysis.analyse(doc), doc)
    geo = next(line for line in md.splitlines() if line.startswith("| geometric mean |"))
    assert "(1/2 cells)" in geo


def test_few_planned_rounds_are_not_flagged_once_every_cell_has_enough():
    """Adaptive rounds brought every cell to 50 rounds, yet the report warned "only 3 rounds per
    cell were planned (< 5): intervals and tests are weak"."""
    d = doc_with({("a/t1", "base"): [10, 11, 12, 10, 11, 10], ("a/t1", "x"): [20, 21, 22, 20, 21, 20],
                  ("b/t4", "base"): [8] * 6, ("b/t4", "x"): [4] * 6})
    d["settings"]["rounds"] = 3
    assert not any("rounds per cell were planned" in w for w in analysis.analyse(RunDoc.from_json(d)).warnings)
    d = doc_with({("a/t1", "base"): [10, 11, 12], ("a/t1", "x"): [20, 21, 22],
                  ("b/t4", "base"): [8] * 3, ("b/t4", "x"): [4] * 3})
    d["settings"]["rounds"] = 3
    assert any("only 3 rounds per cell were planned" in w for w in analysis.analyse(RunDoc.from_json(d)).warnings)


def test_the_geometric_mean_of_one_cell_is_that_cells_ratio_and_interval():
    """With one cell the run printed glibc 0.70x [0.63-0.78] in the cell and 0.70x [0.64-0.76]
    as the geometric mean of the same ratio: a bootstrap beside the exact interval."""
    r = [0.6, 0.65, 0.7, 0.72, 0.75, 0.8, 0.66]
    p = stats.paired_ratio(r)
    point, ci = stats.geomean_paired([np.log(r)])
    assert point == pytest.approx(p.ratio) and ci == (pytest.approx(p.ci_low), pytest.approx(p.ci_high))


def test_the_geometric_mean_has_no_interval_when_a_cell_has_two_rounds():
    """The median of 2 resampled rounds is one of them or their mean: the bootstrap saw half the
    spread, and the "95 %" interval of geometric means over cells of 2 rounds held the true
    geometric mean 54-78 % of the time (2-10 cells, normal, t2 and skewed noise).  Now there is no
    interval, and the report says why; from 3 rounds it says the interval may fall short."""
    point, ci = stats.geomean_paired([[0.0, 0.1], [0.2, 0.3, 0.1, 0.2]])
    assert point == pytest.approx(math.exp((0.05 + 0.2) / 2)) and ci is None
    d = doc_with({("a/t1", "base"): [10, 10], ("a/t1", "x"): [20, 22],
                  ("b/t4", "base"): [8, 9, 8], ("b/t4", "x"): [4, 5, 4]})
    an = analysis.analyse(RunDoc.from_json(d))
    assert an.geomean["x"].ci is None
    assert "geometric means without an interval (a cell has fewer than 3 paired rounds): x (2 rounds)" in an.warnings
    d = doc_with({("a/t1", "base"): [10, 10, 11], ("a/t1", "x"): [20, 22, 21],
                  ("b/t4", "base"): [8, 9, 8], ("b/t4", "x"): [4, 5, 4]})
    an = analysis.analyse(RunDoc.from_json(d))
    assert an.geomean["x"].ci is not None
    assert any(w.startswith("geometric means whose interval is a bootstrap of cells with fewer than 6 "
                            "rounds") and w.endswith(": x (3 rounds)") for w in an.warnings)
