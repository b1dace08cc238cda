"""Statistics against values computed by hand (shown in the comments)."""

import math

import numpy as np
import pytest

from strata_lab import stats
from strata_lab.analysis import _min_possible_p


def test_median_and_mad():
    # sorted 1 2 3 4 100 -> median 3; |x-3| = 2 1 0 1 97 -> sorted 0 1 1 2 97 -> MAD 1
    assert stats.median([4, 1, 100, 3, 2]) == 3
    assert stats.mad([4, 1, 100, 3, 2]) == 1
    # even count: median of 1 2 3 4 = 2.5; |x-2.5| = 1.5 .5 .5 1.5 -> MAD 1.0
    assert stats.median([1, 2, 3, 4]) == 2.5
    assert stats.mad([1, 2, 3, 4]) == 1.0


def test_cv():
    # mean 3, sample variance (4+1+0+1+4)/4 = 2.5 -> std 1.5811388, CV 0.5270463
    assert stats.cv([1, 2, 3, 4, 5]) == pytest.approx(math.sqrt(2.5) / 3)
    assert stats.cv([7]) is None


def test_summary_of_one_value_has_no_interval():
    s = stats.summarize([5.0])
    assert (s.n, s.median, s.mad, s.std, s.cv, s.ci_low, s.ci_high) == (1, 5.0, 0.0, None, None, None, None)


def test_median_ci_brackets_the_median_within_the_data():
    vals = [10, 11, 12, 13, 30]
    lo, hi = stats.median_ci(vals)
    assert 10 <= lo <= 12 <= hi <= 30
    assert stats.median_ci([4, 4, 4]) == (4, 4)  # no spread: the point itself


def test_speedup_higher_and_lower_is_better():
    # throughput: median 12 / median 6 = 2.0
    assert stats.speedup([10, 12, 14], [5, 6, 7]) == 2.0
    # times: baseline 4 s, ours 2 s -> 2.0x better
    assert stats.speedup([2, 2, 2], [4, 4, 4], higher_is_better=False) == 2.0
    assert stats.ratio([3, 3], [6, 6]) == 0.5


def test_speedup_ci():
    assert stats.speedup_ci([10, 10, 10], [5, 5, 5]) == (2.0, 2.0)
    # every resampled median ratio lies between min/max = 10/7 and max/min = 14/5
    lo, hi = stats.speedup_ci([10, 11, 12, 13, 14], [5, 5.5, 6, 6.5, 7])
    assert 10 / 7 <= lo <= 2.0 <= hi <= 14 / 5
    assert stats.speedup_ci([1], [2]) is None


def test_geomean():
    assert stats.geomean([2, 8]) == pytest.approx(4.0)
    assert stats.geomean([1, 4, 16]) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        stats.geomean([1, 0])


def test_geomean_interval_of_constant_cells_is_the_point():
    # speedups 4/2 = 2 and 9/3 = 3 -> geometric mean sqrt(6)
    lo, hi = stats.geomean_speedup_ci([([4, 4], [2, 2], True), ([9, 9], [3, 3], True)])
    assert lo == pytest.approx(math.sqrt(6)) and hi == pytest.approx(math.sqrt(6))
    # lower-is-better cell: baseline 6 / ours 3 = 2; with a throughput cell of 8 -> sqrt(16) = 4
    lo, hi = stats.geomean_speedup_ci([([3, 3], [6, 6], False), ([8, 8], [1, 1], True)])
    assert lo == pytest.approx(4.0) and hi == pytest.approx(4.0)


def test_mann_whitney_exact_p_values():
    # completely separated 3 vs 3: U = 0, exact two-sided p = 2 / C(6,3) = 2/20 = 0.1
    assert stats.mann_whitney([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    # 5 vs 5 separated: 2 / C(10,5) = 2/252
    assert stats.mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    # interleaved 1 3 5 7 9 vs 2 4 6 8 10: U = 10 of 25 -> not significant
    assert stats.mann_whitney([1, 3, 5, 7, 9], [2, 4, 6, 8, 10]) > 0.5
    assert stats.mann_whitney([3, 3], [3, 3]) == 1.0
    assert _min_possible_p(5, 5) == pytest.approx(2 / 252)
    assert _min_possible_p(2, 2) == pytest.approx(2 / 6)


def test_p99_and_per_round_p99():
    # numpy linear interpolation: position 0.99 * 99 = 98.01 -> 99 + 0.01 = 99.01
    assert stats.p99(range(1, 101)) == pytest.approx(99.01)
    # two rounds of raw latencies: P99s 99.01 and 199.01 -> mean = median 149.01, std 100/sqrt(2)
    r = stats.per_round_p99([list(range(1, 101)), list(range(101, 201))])
    assert r.values == pytest.approx([99.01, 199.01])
    assert r.mean == pytest.approx(149.01) and r.median == pytest.approx(149.01)
    assert r.std == pytest.approx(100 / math.sqrt(2))
    # rounds that already computed their P99: 1, 2, 6 -> mean 3, median 2, std sqrt((4+1+9)/2)
    r = stats.per_round_p99([1.0, 2.0, 6.0])
    assert (r.mean, r.median) == (3.0, 2.0)
    assert r.std == pytest.approx(math.sqrt(7))
    assert stats.per_round_p99([None, []]) is None


def test_spread_warnings():
    s = stats.summarize([100, 100, 100, 100, 100])
    assert stats.spread_warnings(s) == []
    s = stats.summarize([80, 100, 120])  # CV = 20/100 = 20 %
    w = stats.spread_warnings(s)
    assert any("only 3 rounds" in x for x in w) and any("CV 20 %" in x for x in w)


def test_non_finite_values_are_refused():
    with pytest.raises(ValueError):
        stats.summarize([1.0, float("nan")])


def test_median_interval_is_the_exact_order_statistic_interval():
    """The table's "median ± half 95 % interval" was a percentile bootstrap: (min, max) up to 5
    values, so it held the true median 50 % of the time with 2 rounds, 75 % with 3, 87.5 % with
    4, and about 93 % from 6 rounds on, under a 95 % label.  Now it is the order-statistic
    interval, whose coverage is exact and recorded."""
    s = stats.summarize([3.0, 1.0, 2.0])
    assert (s.ci_low, s.ci_high) == (1.0, 3.0) and s.ci_coverage == pytest.approx(0.75)
    # 8 values: (x_2, x_7) would cover only 93 %, so (min, max) with 99.2 %; the bootstrap gave
    # an interval inside the data's range
    assert stats.median_ci([5, 1, 8, 3, 7, 2, 6, 4]) == (1.0, 8.0)
    assert stats.median_ci(range(1, 21)) == (6.0, 15.0)   # the 6th and 15th of 20: 95.9 %
    # coverage over many sets of 20 values: at least 95 % (the bootstrap gave ~93.8 %)
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(2000):
        lo, hi = stats.median_ci(rng.lognormal(0.0, 0.1, 20))
        hits += lo <= 1.0 <= hi
    assert hits / 2000 >= 0.95


def test_mann_whitney_with_ties_is_exact_for_small_sets():
    """With ties scipy's 'auto' took the normal approximation: 3 tied values against 3 gave
    p = 0.047, "significant", although no split of 6 values can give less than 2/20 = 0.1."""
    assert stats.mann_whitney([1, 1, 1], [2, 2, 2]) == pytest.approx(0.1)
    assert stats.mann_whitney([1, 1, 2], [3, 3, 4]) == pytest.approx(0.1)
    # 4 against 4 with ties: the exact permutation p (2/70 for a complete separation)
    assert stats.mann_whitney([1, 1, 1, 1], [2, 2, 2, 2]) == pytest.approx(2 / 70)
    # without ties unchanged
    assert stats.mann_whitney([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)


def test_mann_whitney_with_one_value_and_ties_is_exact():
    """One value against tied ones went to scipy's permutation test, which wants two values a
    side: a ValueError out of `compare` for a cell that kept one successful sample in a run.
    Exact over the 4 splits: 10 against 11, 12, 11 ranks lowest, p = 2 x 1/4."""
    assert stats.mann_whitney([10], [11, 12, 11]) == pytest.approx(0.5)
    assert stats.mann_whitney([12, 12, 11], [11]) == pytest.approx(1.0)
    # the same rule as scipy's for two values or more
    assert stats._tied_rank_sum_p(np.array([1.0, 2, 2, 3, 1, 5]), 2) == pytest.approx(
        stats.mann_whitney([1, 2], [2, 3, 1, 5]))
