"""Statistics the lab reports, on numpy/scipy: medians with spread, bootstrap intervals, paired
per-round ratios against a baseline, geometric means, Mann–Whitney tests and per-round P99.

Conventions: MAD is the raw median absolute deviation (not scaled to sigma); CV is the sample
standard deviation (ddof=1) over the mean.  The interval of a median (a variant's, and that of the
per-round ratios against the baseline from paired rounds, paired_speedup) is the exact
distribution-free order-statistic interval, whose true coverage is known for every count of rounds
(below 6 rounds it is under 95 %, and the report says so); a percentile bootstrap of the median
covers 50 % with 2 values and 75 % with 3 while calling itself 95 %.  The geometric mean across
cells and `compare`'s unpaired ratios use 95 % percentile bootstraps with a fixed seed, so a
report is reproducible from its results.json.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95
N_RESAMPLES = 2000
SEED = 20240611
CV_WARN = 0.10
MIN_ROUNDS = 5


def _sps():
    """scipy.stats, imported on first use: the workload drivers use this module's plain helpers
    (mean, std, p99) and should not pay scipy's second of import time in every sample."""
    from scipy import stats

    return stats


def _arr(values: Sequence[float]) -> np.ndarray:
    a = np.asarray(list(values), dtype=float)
    if a.ndim != 1:
        raise ValueError("expected a flat sequence of numbers")
    if not np.all(np.isfinite(a)):
        raise ValueError("non-finite value in a sample set")
    return a


def median(values: Sequence[float]) -> float:
    return float(np.median(_arr(values)))


def mean(values: Sequence[float]) -> float:
    return float(np.mean(_arr(values)))


def std(values: Sequence[float]) -> float | None:
    """Sample standard deviation (ddof=1); None for fewer than 2 values."""
    a = _arr(values)
    return float(np.std(a, ddof=1)) if len(a) > 1 else None


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    a = _arr(values)
    return float(np.median(np.abs(a - np.median(a))))


def cv(values: Sequence[float]) -> float | None:
    """Coefficient of variation: sample std (ddof=1) / mean; None for fewer than 2 values."""
    a = _arr(values)
    if len(a) < 2 or np.mean(a) == 0:
        return None
    return float(np.std(a, ddof=1) / abs(np.mean(a)))


def _bootstrap(data: tuple, statistic, seed: int) -> tuple[float, float] | None:
    if any(len(d) < 2 for d in data):
        return None
    if all(np.all(d == d[0]) for d in data):  # no spread: the interval is the point
        v = float(statistic(*[d[None, :] for d in data], axis=-1)[0])
        return v, v
    res = _sps().bootstrap(data, statistic, n_resamples=N_RESAMPLES, confidence_level=CONFIDENCE,
                        method="percentile", vectorized=True, paired=False,
                        random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def median_ci(values: Sequence[float], seed: int = SEED) -> tuple[float, float] | None:
    """Exact order-statistic interval of the median (median_order_ci: 95 % from 6 values on,
    (min, max) with its lower coverage below that); None for fewer than 2 values.  `seed` is
    unused (kept for callers): the interval is not random.  A percentile bootstrap was used
    before; with n values its interval is (min, max) up to n = 5, so it covered 50 % at 2 values,
    75 % at 3 and 87.5 % at 4 while the table called it 95 %, and about 93 % from 6 on."""
    a = np.sort(_arr(values))
    ci = median_order_ci(len(a))
    if ci is None:
        return None
    return float(a[ci[0]]), float(a[ci[1]])


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mad: float
    mean: float
    std: float | None
    cv: float | None
    min: float
    max: float
    ci_low: float | None
    ci_high: float | None
    ci_coverage: float | None = None  # the interval's true confidence (median_order_ci)

    def to_json(self) -> dict:
        return asdict(self)


def summarize(values: Sequence[float], seed: int = SEED) -> Summary:
    a = _arr(values)
    if len(a) == 0:
        raise ValueError("no values to summarise")
    ci = median_ci(a, seed)
    order = median_order_ci(len(a))
    return Summary(n=len(a), median=float(np.median(a)), mad=mad(a), mean=float(np.mean(a)),
                   std=std(a), cv=cv(a),
                   min=float(a.min()), max=float(a.max()),
                   ci_low=ci[0] if ci else None, ci_high=ci[1] if ci else None,
                   ci_coverage=order[2] if order else None)


def speedup(values: Sequence[float], baseline: Sequence[float], higher_is_better: bool = True) -> float:
    """How many times better than the baseline, from medians: >1 means better (faster)."""
    m, b = median(values), median(baseline)
    return m / b if higher_is_better else b / m


def _speedup_stat(higher_is_better: bool):
    if higher_is_better:
        return lambda x, y, axis: np.median(x, axis=axis) / np.median(y, axis=axis)
    return lambda x, y, axis: np.median(y, axis=axis) / np.median(x, axis=axis)


def speedup_ci(values, baseline, higher_is_better: bool = True, seed: int = SEED):
    """95 % bootstrap interval of speedup(), resampling both sets independently."""
    return _bootstrap((_arr(values), _arr(baseline)), _speedup_stat(higher_is_better), seed)


def ratio(values: Sequence[float], baseline: Sequence[float]) -> float:
    """Plain ratio of medians (used for memory: <1 means smaller than the baseline)."""
    return median(values) / median(baseline)


def ratio_ci(values, baseline, seed: int = SEED):
    return _bootstrap((_arr(values), _arr(baseline)), _speedup_stat(True), seed)


def geomean(values: Sequence[float]) -> float:
    a = _arr(values)
    if len(a) == 0 or np.any(a <= 0):
        raise ValueError("geometric mean needs positive values")
    return float(_sps().gmean(a))


def geomean_speedup_ci(pairs: list[tuple[Sequence[float], Sequence[float], bool]], seed: int = SEED):
    """Interval of the geometric mean of per-cell speedups: each bootstrap replicate resamples
    every cell's two sets independently and takes the geometric mean of the replicate speedups."""
    if not pairs:
        return None
    data, flags = [], []
    for v, b, hib in pairs:
        data += [_arr(v), _arr(b)]
        flags.append(hib)
    if any(len(d) < 2 for d in data):
        return None

    def stat(*xs, axis):
        logs = []
        for i, hib in enumerate(flags):
            mv, mb = np.median(xs[2 * i], axis=axis), np.median(xs[2 * i + 1], axis=axis)
            logs.append(np.log(mv / mb if hib else mb / mv))
        return np.exp(np.mean(logs, axis=0))

    if all(np.all(d == d[0]) for d in data):
        v = float(stat(*[d[None, :] for d in data], axis=-1)[0])
        return v, v
    res = _sps().bootstrap(tuple(data), stat, n_resamples=N_RESAMPLES, confidence_level=CONFIDENCE,
                        method="percentile", vectorized=True, paired=False,
                        random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


# ---- paired per-round ratios --------------------------------------------------------------------
#
# Rounds are interleaved: round k of every variant of a cell runs back to back, in a random order.
# Round k of a variant is therefore paired with round k of the baseline, and machine drift that
# moves both cancels in their ratio.  Ratios and their intervals come from those per-round ratios,
# never from two independent resamplings (which count the drift twice and give intervals such as
# [0.82-118]).


def round_log_ratios(values: Sequence[float], baseline: Sequence[float],
                     higher_is_better: bool = True) -> np.ndarray:
    """Per-round log speedups, oriented so > 0 is better: log(v/b) for throughputs, log(b/v) for
    times.  `values[k]` and `baseline[k]` must come from the same round."""
    v, b = _arr(values), _arr(baseline)
    if len(v) != len(b):
        raise ValueError("paired ratios need one baseline value per round")
    if np.any(v <= 0) or np.any(b <= 0):
        raise ValueError("ratios need positive values")
    lr = np.log(v) - np.log(b)
    return lr if higher_is_better else -lr


@functools.lru_cache(maxsize=None)
def median_order_ci(n: int, confidence: float = CONFIDENCE) -> tuple[int, int, float] | None:
    """Exact distribution-free interval of a median from order statistics: 0-based indices (lo, hi)
    into the sorted values and the interval's true coverage, 1 - 2 P(Bin(n, 1/2) <= lo).  The
    narrowest symmetric pair reaching `confidence`; with n <= 5 no pair does, and (min, max) is
    returned with its lower coverage (5 rounds: 93.75 %).  None for n < 2."""
    if n < 2:
        return None
    cdf = _sps().binom.cdf(np.arange(n), n, 0.5)
    best = (0, n - 1, float(1 - 2 * cdf[0]))
    for k in range(n // 2):
        coverage = float(1 - 2 * cdf[k])
        if coverage >= confidence - 1e-12:
            best = (k, n - 1 - k, coverage)
        else:
            break
    return best


@dataclass(frozen=True)
class PairedRatio:
    """The ratio of a variant to the baseline from paired rounds.  `ratio` is the median of the
    per-round ratios (for an even count, the geometric mean of the middle two); the interval is the
    exact order-statistic interval of that median, `coverage` its true confidence."""

    n: int
    ratio: float
    ci_low: float | None
    ci_high: float | None
    coverage: float | None
    per_round: tuple  # the per-round ratios, in round order

    @property
    def half_width(self) -> float | None:
        """Half the interval's width relative to the ratio (0.03 = ±3 %)."""
        if self.ci_low is None:
            return None
        return (self.ci_high - self.ci_low) / 2 / self.ratio

    @property
    def full_coverage(self) -> bool:
        """Whether the interval reaches CONFIDENCE (6 rounds or more)."""
        return self.coverage is not None and self.coverage >= CONFIDENCE - 1e-12

    def within(self, target: float) -> bool:
        """Within ±target as a 95 % interval: narrow enough and of full coverage.  A (min, max) of
        3 rounds within ±3 % is a 75 % interval; adaptive rounds that stopped on it left intervals
        that held the true ratio about 75-85 % of the time."""
        hw = self.half_width
        return hw is not None and hw <= target and self.full_coverage

    def to_json(self) -> dict:
        return {**asdict(self), "per_round": list(self.per_round), "half_width": self.half_width}


def paired_ratio(ratios: Sequence[float]) -> PairedRatio | None:
    """Median and exact interval of per-round ratios (positive numbers, in round order)."""
    r = _arr(ratios)
    if len(r) == 0:
        return None
    if np.any(r <= 0):
        raise ValueError("ratios must be positive")
    srt = np.sort(r)
    n = len(r)
    point = float(srt[n // 2]) if n % 2 else float(math.sqrt(srt[n // 2 - 1] * srt[n // 2]))
    ci = median_order_ci(n)
    lo = hi = cov = None
    if ci:
        lo, hi, cov = float(srt[ci[0]]), float(srt[ci[1]]), ci[2]
    return PairedRatio(n=n, ratio=point, ci_low=lo, ci_high=hi, coverage=cov,
                       per_round=tuple(float(x) for x in r))


def paired_speedup(values, baseline, higher_is_better: bool = True) -> PairedRatio | None:
    """Speedup (> 1 is better) of paired rounds: values[k] and baseline[k] ran in round k."""
    v, b = _arr(values), _arr(baseline)
    if len(v) != len(b):
        raise ValueError("paired ratios need one baseline value per round")
    if np.any(v <= 0) or np.any(b <= 0):
        raise ValueError("ratios need positive values")
    return paired_ratio(v / b if higher_is_better else b / v)


GEOMEAN_MIN_ROUNDS = 3  # rounds every cell needs for the geometric mean's bootstrap interval


def geomean_paired(cells: list[Sequence[float]], seed: int = SEED) -> tuple[float, tuple | None]:
    """Geometric mean across cells of the per-cell median log ratio (for an even count of rounds
    the mean of the middle two, matching paired_ratio), with a 95 % percentile
    bootstrap interval that resamples rounds within each cell (pairs stay together; cells are
    strata).  `cells`: per cell, its per-round log ratios.  Returns (point, (low, high) or None):
    no interval when a cell has a single round, since resampling it always gives that round back
    and the interval would treat its ratio as exact (two cells of 1 and 1 round beside one of 10
    covered the true geometric mean 42 % of the time).  Nor when a cell has fewer than
    GEOMEAN_MIN_ROUNDS rounds beside other cells: the median of 2 resampled rounds is one of them
    or their mean, half the spread of the real thing, and the "95 %" interval held the true
    geometric mean 54-78 % of the time (2-10 cells of 2 rounds, normal, t2 and skewed noise).
    From 3 rounds it is still a bootstrap of few rounds (85-92 % with 2 or 3 cells of 3 rounds),
    which the report says (analysis)."""
    arrs = [_arr(c) for c in cells if len(c)]
    if not arrs:
        raise ValueError("no cells")
    point = float(np.exp(np.mean([np.median(a) for a in arrs])))
    if any(len(a) < 2 for a in arrs):
        return point, None
    if len(arrs) == 1:  # one cell: its own ratio, with that ratio's exact interval
        p = paired_ratio(np.exp(arrs[0]))
        return point, (p.ci_low, p.ci_high)
    if any(len(a) < GEOMEAN_MIN_ROUNDS for a in arrs):
        return point, None
    if all(np.all(a == a[0]) for a in arrs):
        return point, (point, point)
    rng = np.random.default_rng(seed)
    total = np.zeros(N_RESAMPLES)
    for a in arrs:
        idx = rng.integers(0, len(a), size=(N_RESAMPLES, len(a)))
        total += np.median(a[idx], axis=1)
    reps = np.exp(total / len(arrs))
    alpha = (1 - CONFIDENCE) / 2
    return point, (float(np.quantile(reps, alpha)), float(np.quantile(reps, 1 - alpha)))


def rounds_needed(p: PairedRatio, target: float, limit: int = 1000) -> int | None:
    """Rounds a cell would need for its interval to reach ±target: a rough figure to divide a
    time budget by and to say whether more rounds would help.  The larger of two counts, at least
    one round more than it has:
    * the spread: the per-round log ratios' MAD, scaled to a standard deviation σ (the odd
      outlier round that sets a small count's (min, max) interval does not make a cell look
      hopeless); the median's standard error is 1.2533 σ / √n, and a 95 % half-width of 1.96 of
      those must come within the target;
    * the outliers: even if every further round landed on the median, the order-statistic
      interval only drops its extreme rounds once it has enough rounds (one outlier on each side
      takes 9), and reaches 95 % only from 6 rounds on.  Counted up to `limit`."""
    hw = p.half_width
    if hw is None or target <= 0:
        return None
    if p.within(target):
        return p.n
    logs = np.log(_arr(p.per_round))
    sigma = 1.4826 * float(np.median(np.abs(logs - np.median(logs))))
    spread = int(math.ceil((1.96 * 1.2533 * sigma / target) ** 2))
    outliers = limit
    for n in range(p.n + 1, limit + 1):
        q = paired_ratio(list(p.per_round) + [p.ratio] * (n - p.n))
        if q.within(target):
            outliers = n
            break
    return max(p.n + 1, spread, outliers)


EXACT_SPLITS = 5000  # up to this many ways to split the pooled values, ties get an exact p


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided Mann–Whitney U p-value; None if undefined.  Exact for small sets: without ties
    scipy's exact distribution; with ties (scipy's 'auto' then takes the normal approximation,
    which gives 3 against 3 tied values p = 0.047 where no split of 6 values can go below 0.1) the
    exact permutation distribution of U over every split, up to EXACT_SPLITS of them."""
    x, y = _arr(a), _arr(b)
    if len(x) < 1 or len(y) < 1:
        return None
    if np.all(x == x[0]) and np.all(y == y[0]) and x[0] == y[0]:
        return 1.0
    sps = _sps()
    pooled = np.concatenate([x, y])
    if len(np.unique(pooled)) < len(pooled) and math.comb(len(pooled), len(x)) <= EXACT_SPLITS:
        if min(len(x), len(y)) < 2:  # scipy's permutation test wants two values a side
            return _tied_rank_sum_p(pooled, len(x))
        method = sps.PermutationMethod(n_resamples=np.inf)
    else:
        method = "auto"
    return float(min(1.0, sps.mannwhitneyu(x, y, alternative="two-sided", method=method).pvalue))


def _tied_rank_sum_p(pooled: np.ndarray, n1: int) -> float:
    """Exact two-sided p of the rank sum of the first n1 of `pooled` (mid-ranks for ties) over
    every split: twice the smaller tail, as scipy's permutation test gives it."""
    ranks = _sps().rankdata(pooled)
    seen = ranks[:n1].sum()
    sums = np.array([ranks[list(c)].sum() for c in itertools.combinations(range(len(pooled)), n1)])
    tail = min(np.mean(sums <= seen + 1e-9), np.mean(sums >= seen - 1e-9))
    return float(min(1.0, 2 * tail))


def p99(values: Sequence[float]) -> float:
    """99th percentile with linear interpolation (numpy's default)."""
    return float(np.percentile(_arr(values), 99))


@dataclass(frozen=True)
class PerRoundP99:
    rounds: int
    values: list       # each round's P99
    mean: float
    median: float
    std: float | None  # ddof=1; None for one round


def per_round_p99(rounds: Sequence) -> PerRoundP99 | None:
    """Per-round P99: each round contributes its own P99 (a number it already computed, or the
    P99 of its raw latencies); then mean, median and std (ddof=1) across rounds.  A whole-run P99
    would hide a rare bad round."""
    per = []
    for r in rounds:
        if isinstance(r, (list, tuple, np.ndarray)):
            if len(r):
                per.append(p99(r))
        elif r is not None:
            per.append(float(r))
    if not per:
        return None
    a = np.asarray(per)
    return PerRoundP99(rounds=len(a), values=[float(x) for x in a], mean=float(a.mean()),
                       median=float(np.median(a)), std=std(a))


def spread_warnings(s: Summary, min_rounds: int = MIN_ROUNDS, cv_max: float = CV_WARN) -> list[str]:
    w = []
    if s.n < min_rounds:
        w.append(f"only {s.n} round{'s' if s.n != 1 else ''} (< {min_rounds})")
    if s.cv is not None and s.cv > cv_max:
        w.append(f"wide spread (CV {s.cv * 100:.0f} % > {cv_max * 100:.0f} %)")
    return w


def fmt_ratio(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x:.2f}×"
