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
