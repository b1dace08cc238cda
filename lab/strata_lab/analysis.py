"""From a results document to the numbers tables and reports show: per cell and variant the
median with its interval, speedup and memory ratio against the baseline, per-round P99 of latency
metrics, the geometric mean across cells, and every warning a reader must see."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from . import stats
from .errors import LabError
from .model import RunDoc, Sample


BUSY_WARN = 0.10  # share of all CPUs used by other processes during samples


TARGET_WIDTH = 0.03  # default half-width of a ratio's interval that counts as converged


@dataclass
class VariantResult:
    """One variant in one cell: its counted samples' statistics and its ratios to the baseline."""

    n: int                                  # counted, successful samples
    failures: int
    failure_messages: list[str]
    values: list[float]                     # the primary metric, one per sample
    noisy: int = 0
    reruns: int = 0
    summary: stats.Summary | None = None
    rss: stats.Summary | None = None        # peak RSS, KiB
    rss_values: list[float] = field(default_factory=list)
    minor_faults: float | None = None       # median per sample
    latency: dict[str, stats.PerRoundP99 | None] = field(default_factory=dict)  # per latency metric
    warnings: list[str] = field(default_factory=list)
    paired: stats.PairedRatio | None = None       # speed against the baseline, paired by round
    speedup: float | None = None                  # > 1 is better
    speedup_ci: tuple | None = None
    rss_paired: stats.PairedRatio | None = None   # peak RSS against the baseline's: < 1 is smaller
    rss_ratio: float | None = None
    rss_ratio_ci: tuple | None = None
    p_value: float | None = None                  # Mann–Whitney against the baseline's values


@dataclass
class Versus:
    """A peer against strata on the same paired rounds, where the medians say it is both faster
    and leaner; `clear` when both intervals exclude 1."""

    speed: stats.PairedRatio | None
    rss: stats.PairedRatio | None
    clear: bool


@dataclass
class Pareto:
    frontier: list[str]                      # no other variant both better and leaner
    dominating: dict[str, list[str]]         # variant -> the peers both better and leaner
    versus: dict[str, Versus] = field(default_factory=dict)  # "peer/variant"


@dataclass
class CellResult:
    cell: dict                               # the cell as results.json records it
    by_variant: dict[str, VariantResult]
    pareto: Pareto

    @property
    def id(self) -> str:
        return self.cell["id"]

    @property
    def metric(self) -> str:
        return self.cell["metric"]

    @property
    def unit(self) -> str:
        return self.cell.get("unit", "")

    @property
    def higher_is_better(self) -> bool:
        return self.cell.get("higher_is_better", True)

    @property
    def workload(self) -> str:
        return self.cell["workload"]

    @property
    def threads(self) -> int:
        return self.cell["threads"]

    @property
    def oversubscribed(self) -> bool:
        return bool(self.cell.get("oversubscribed"))


@dataclass
class Geomean:
    speedup: float
    ci: tuple | None
    cells: int                               # cells with a ratio
    of: int                                  # cells in the run


@dataclass
class Noise:
    samples: int                             # timed samples of counted rounds (replaced ones too)
    noisy: int
    reruns: int
    other_cpu_frac: float | None             # medians over those samples
    steal_frac: float | None
    threshold: float | None


@dataclass
class CellConvergence:
    converged: bool
    half_width: dict[str, float | None]      # per non-baseline variant
    worst: float | None                      # the widest among the `converge` variants
    rounds: int
    why: str | None


@dataclass
class Convergence:
    target: float
    converge: list[str]
    cells: dict[str, CellConvergence] = field(default_factory=dict)
    not_converged: dict[str, str] = field(default_factory=dict)     # cell -> why
    widest: dict[str, tuple] = field(default_factory=dict)          # variant -> (cell, half-width)


@dataclass
class Instructions:
    """One variant's instruction count in one cell (cachegrind); `failed` runs when none succeeded."""

    failed: int = 0
    instructions: int | None = None
    per_op: float | None = None
    unit: str = ""
    value: float | None = None
    ratio: float | None = None               # to the baseline's: < 1 is fewer


@dataclass
class InstructionRow:
    cell: str
    by_variant: dict[str, Instructions]


@dataclass
class Analysis:
    baseline: str
    variants: list[str]
    cells: list[CellResult]
    geomean: dict[str, Geomean | None]
    warnings: list[str]
    other_cpu_frac: float | None
    noise: Noise
    convergence: Convergence
    strata_dominated: list[tuple[str, str]]  # (cell, peer) where a peer beats strata on both
    instructions: list[InstructionRow]


@dataclass
class CompareRow:
    cell: str
    variant: str
    unit: str
    a: stats.Summary
    b: stats.Summary
    speedup: float
    speedup_ci: tuple | None
    p_value: float | None
    significant: bool
    verdict: str
    underpowered: bool                       # too few rounds for any difference to be significant


@dataclass
class Comparison:
    rows: list[CompareRow]
    notes: list[str]
    alpha: float


def by_round(samples: list[Sample]) -> dict[int, Sample]:
    """Samples by round (the last one when a round holds more)."""
    return {s.round: s for s in samples if s.round is not None}


def _both(rounds_v: dict, rounds_b: dict, get):
    """(value, baseline value) of each round both sides have a value for, in round order."""
    for r in sorted(set(rounds_v) & set(rounds_b)):
        a, b = get(rounds_v[r]), get(rounds_b[r])
        if a is not None and b is not None:
            yield a, b


def paired(rounds_v: dict, rounds_b: dict, get) -> tuple[list, list]:
    """Values of the rounds both sides have, in round order: round k with round k."""
    pv, pb = [], []
    for a, b in _both(rounds_v, rounds_b, get):
        if a > 0 and b > 0:
            pv.append(a)
            pb.append(b)
    return pv, pb


def non_positive_rounds(rounds_v: dict, rounds_b: dict, get) -> int:
    """Rounds both sides have that `paired` leaves out because a value is not positive (results
    files written before the runner made such samples failures count them as successes)."""
    return sum(a <= 0 or b <= 0 for a, b in _both(rounds_v, rounds_b, get))


def analyse(doc: RunDoc, baseline: str | None = None) -> Analysis:
    variants = list(doc.variants)
    baseline = baseline or doc.baseline or variants[0]
    if baseline not in variants:
        raise LabError(f"baseline {baseline!r} is not among this run's variants: {', '.join(variants)}")
    rounds_planned = doc.settings.get("rounds", 0)
    target = doc.settings.get("target_width") or TARGET_WIDTH
    warnings: list[str] = []
    if not doc.complete:
        why = f" ({doc.interrupted})" if doc.interrupted else ""
        # planned_samples counts warm-ups, re-runs and instruction runs: so does the count of done.
        warnings.append(f"INCOMPLETE run{why}: {len(doc.samples)} of {doc.settings.get('planned_samples', '?')} "
                        f"planned samples finished (warm-ups included)")
    cells_out = []
    few: list[str] = []
    low_coverage: set[int] = set()
    geo_logs: dict[str, list] = defaultdict(list)
    for c in doc.cells:
        hib = c.get("higher_is_better", True)
        metric = c["metric"]
        per_v = {}
        rounds_of = {}
        for v in variants:
            ok, failed = doc.counted(c["id"], v), doc.failed(c["id"], v)
            samples = ok + failed
            rounds_of[v] = by_round(ok)
            entry = VariantResult(
                n=len(ok), failures=len(failed),
                failure_messages=sorted({f"{s.failure['kind']}: {s.failure['message']}"
                                         for s in failed if s.failure}),
                values=[s.metrics[metric] for s in ok], noisy=sum(1 for s in samples if s.noisy),
                reruns=sum(1 for s in samples if s.rerun_of is not None))
            if ok:
                entry.summary = stats.summarize(entry.values)
                entry.rss_values = [s.peak_rss_kb for s in ok if s.peak_rss_kb is not None]
                entry.rss = stats.summarize(entry.rss_values) if entry.rss_values else None
                faults = [s.minor_faults for s in ok if s.minor_faults is not None]
                entry.minor_faults = stats.median(faults) if faults else None
                entry.warnings = stats.spread_warnings(entry.summary, max(stats.MIN_ROUNDS, 1))
                if entry.summary.ci_coverage is not None and entry.summary.ci_coverage < stats.CONFIDENCE:
                    low_coverage.add(entry.n)
                for key in c.get("latency_metrics") or ():
                    entry.latency[key] = stats.per_round_p99([s.metric(key) for s in ok])
            if failed:
                entry.warnings.append(f"{len(failed)} failed sample{'s' if len(failed) > 1 else ''}")
            per_v[v] = entry
        for v, entry in per_v.items():
            if not (entry.n and per_v[baseline].n):
                continue
            if v == baseline:  # the baseline against itself is 1 by definition
                entry.speedup, entry.speedup_ci = 1.0, (1.0, 1.0)
                if entry.rss_values:
                    entry.rss_ratio, entry.rss_ratio_ci = 1.0, (1.0, 1.0)
                continue
            pv, pb = paired(rounds_of[v], rounds_of[baseline], lambda s: s.metric(metric))
            left_out = non_positive_rounds(rounds_of[v], rounds_of[baseline], lambda s: s.metric(metric))
            if left_out:
                warnings.append(f"{c['id']} / {v}: {left_out} round{'s' if left_out > 1 else ''} left out "
                                f"of the ratio ({metric} <= 0)")
            if pv:
                p = stats.paired_speedup(pv, pb, hib)
                entry.paired, entry.speedup = p, p.ratio
                entry.speedup_ci = (p.ci_low, p.ci_high) if p.ci_low is not None else None
                if p.coverage is not None and p.coverage < stats.CONFIDENCE:
                    low_coverage.add(p.n)
                geo_logs[v].append(stats.round_log_ratios(pv, pb, hib))
                entry.p_value = stats.mann_whitney(entry.values, per_v[baseline].values)
            rv, rb = paired(rounds_of[v], rounds_of[baseline], lambda s: s.peak_rss_kb)
            if rv:
                p = stats.paired_speedup(rv, rb, True)  # v / baseline: < 1 is smaller
                entry.rss_paired, entry.rss_ratio = p, p.ratio
                entry.rss_ratio_ci = (p.ci_low, p.ci_high) if p.ci_low is not None else None
        front = pareto(per_v, hib)
        # How sure: the peer against strata on the same paired rounds, speed and peak RSS.
        for who, peers in front.dominating.items():
            for peer in peers:
                sp, sb = paired(rounds_of[peer], rounds_of[who], lambda s: s.metric(metric))
                rp, rb = paired(rounds_of[peer], rounds_of[who], lambda s: s.peak_rss_kb)
                speed = stats.paired_speedup(sp, sb, hib) if sp else None
                mem = stats.paired_speedup(rp, rb, True) if rp else None
                clear = bool(speed and mem and speed.ci_low is not None and mem.ci_high is not None
                             and speed.ci_low > 1 and mem.ci_high < 1)
                front.versus[f"{peer}/{who}"] = Versus(speed, mem, clear)
        cells_out.append(CellResult(c, per_v, front))
        if c.get("oversubscribed"):
            warnings.append(f"{c['id']}: oversubscribed ({c['threads']} threads on "
                            f"{len(c['cpus']) if c.get('cpus') else len(doc.settings.get('cpus') or [])} CPUs)")
        wide = []
        for v, entry in per_v.items():
            for w in entry.warnings:
                if w.startswith("only "):
                    few.append(f"{c['id']}/{v} ({entry.n})")
                elif w.startswith("wide spread"):
                    wide.append(f"{v} {entry.summary.cv * 100:.0f} %")
                else:
                    warnings.append(f"{c['id']} / {v}: {w}")
            for m in entry.failure_messages:
                warnings.append(f"{c['id']} / {v}: failure — {m}")
        if wide:
            warnings.append(f"{c['id']}: wide spread (CV > {stats.CV_WARN * 100:.0f} %) for " + ", ".join(wide))
    # Noise is counted over every timed sample of a counted round, the replaced ones included.
    timed = [s for s in doc.samples if s.timed and not s.warmup]
    busy = [s.other_cpu_frac for s in timed if s.other_cpu_frac is not None]
    steal = [s.steal_frac for s in timed if s.steal_frac is not None]
    other_cpu = float(stats.median(busy)) if busy else None
    noise = Noise(samples=len(timed), noisy=sum(1 for s in timed if s.noisy),
                  reruns=sum(1 for s in timed if s.rerun_of is not None), other_cpu_frac=other_cpu,
                  steal_frac=float(stats.median(steal)) if steal else None,
                  threshold=doc.settings.get("noise_threshold"))
    if other_cpu is not None and other_cpu > BUSY_WARN:
        warnings.insert(0, f"BUSY MACHINE: other processes used a median {other_cpu * 100:.0f} % of the "
                           f"samples' CPUs while they ran; expect noise and rerun on a quiet machine")
    if noise.steal_frac is not None and noise.steal_frac > BUSY_WARN:
        warnings.insert(0, f"STOLEN CPU: the hypervisor took a median {noise.steal_frac * 100:.0f} % of "
                           "the samples' CPU time (steal in /proc/stat)")
    if few:
        warnings.append(f"fewer than {stats.MIN_ROUNDS} successful rounds in {len(few)} cell/variant "
                        f"pairs: " + ", ".join(few[:8]) + (" …" if len(few) > 8 else ""))
    if rounds_planned < stats.MIN_ROUNDS and few:  # adaptive rounds may have made up for it
        warnings.append(f"only {rounds_planned} rounds per cell were planned (< {stats.MIN_ROUNDS}): "
                        "intervals and tests are weak")
    if low_coverage:
        cov = {n: stats.median_order_ci(n)[2] for n in sorted(low_coverage)}
        warnings.append("intervals (of the medians and the ratios) from " + ", ".join(
                            f"{n} rounds cover {c * 100:.1f} %" for n, c in cov.items())
                        + f" only, not {stats.CONFIDENCE * 100:.0f} % ((min, max) of the values "
                          "or per-round ratios; 6 rounds or more reach 95 %)")
    geo: dict[str, Geomean | None] = {}
    no_ci: dict[str, int] = {}   # variant -> the fewest rounds of a cell, where that left no interval
    rough: dict[str, int] = {}
    for v in variants:
        if v == baseline:
            n = sum(1 for c in cells_out if c.by_variant[v].n)
            geo[v] = Geomean(1.0, (1.0, 1.0), n, len(doc.cells)) if n else None
            continue
        logs = geo_logs.get(v, [])
        if not logs:
            geo[v] = None
            continue
        point, ci = stats.geomean_paired(logs)
        geo[v] = Geomean(point, ci, len(logs), len(doc.cells))
        fewest = min(len(x) for x in logs)
        if len(logs) > 1 and fewest < 6:
            (no_ci if ci is None else rough)[v] = fewest
    # A bootstrap of a handful of rounds per cell is narrower than the spread it stands for.
    if no_ci:
        warnings.append("geometric means without an interval (a cell has fewer than "
                        f"{stats.GEOMEAN_MIN_ROUNDS} paired rounds): "
                        + ", ".join(f"{v} ({n} round{'s' if n != 1 else ''})" for v, n in no_ci.items()))
    if rough:
        warnings.append("geometric means whose interval is a bootstrap of cells with fewer than 6 rounds "
                        f"and may cover well under {stats.CONFIDENCE * 100:.0f} %: "
                        + ", ".join(f"{v} ({n} rounds)" for v, n in rough.items()))
    conv = convergence(doc, cells_out, variants, baseline, target)
    if conv.not_converged:
        worst = {cid: conv.cells[cid].worst for cid in conv.not_converged}
        warnings.append(f"ratio intervals not within ±{target * 100:g} % as 95 % intervals in {len(worst)} of "
                        f"{len(cells_out)} cells (see the ratio intervals): " + ", ".join(
                            cid + ("" if w is None else f" ±{w * 100:.1f} %") for cid, w in worst.items()))
    dominated = [(c.id, d) for c in cells_out for d in c.pareto.dominating.get("strata", [])]
    return Analysis(baseline=baseline, variants=variants, cells=cells_out, geomean=geo,
                    warnings=warnings, other_cpu_frac=other_cpu, noise=noise, convergence=conv,
                    strata_dominated=dominated, instructions=instructions(doc, variants, baseline))


def instructions(doc: RunDoc, variants: list[str], baseline: str) -> list[InstructionRow]:
    """Instruction counts (--metric instructions): per cell and variant, instructions per
    operation when the workload reports `ops` (timed workloads run as many operations as fit in
    their time), else per run; and the ratio to the baseline's (< 1 is fewer)."""
    rows = []
    for c in doc.cells:
        per = {}
        for v in variants:
            got = [s for s in doc.of(c["id"], v) if s.kind == "instructions"]
            ok = [s for s in got if s.ok and s.instructions]
            if not got:
                continue
            if not ok:
                per[v] = Instructions(failed=len(got))
                continue
            s = ok[-1]
            per[v] = Instructions(instructions=s.instructions, per_op=s.instructions_per_op)
        if not per:
            continue
        key = "per_op" if all(x.per_op for x in per.values() if not x.failed) else "instructions"
        b = getattr(per[baseline], key) if baseline in per else None
        for x in per.values():
            x.unit = "per op" if key == "per_op" else "per run"
            x.value = getattr(x, key)
            x.ratio = x.value / b if x.value and b else None
        rows.append(InstructionRow(c["id"], per))
    return rows


def convergence(doc: RunDoc, cells: list[CellResult], variants: list[str], baseline: str,
                target: float) -> Convergence:
    """Per cell: the widest ratio interval among the variants (half-width relative to the ratio)
    and whether it is within the target; why not, from what the runner recorded (budget, spread,
    failures) or from the data."""
    recorded = (doc.convergence or {}).get("cells") or {}
    goal = [v for v in doc.settings.get("converge") or variants if v in variants and v != baseline]
    out = Convergence(target, goal)
    for c in cells:
        widths = {}
        for v in variants:
            if v == baseline:
                continue
            p = c.by_variant[v].paired
            widths[v] = p.half_width if p is not None else None
            if widths[v] is not None:
                best = out.widest.get(v)
                if best is None or widths[v] > best[1]:
                    out.widest[v] = (c.id, widths[v])
        known = [w for v, w in widths.items() if w is not None and v in goal]
        missing = [v for v, w in widths.items() if w is None and v in goal]
        worst = max(known) if known else None
        # Within the target means a 95 % interval within it: fewer than 6 rounds give (min, max)
        # of lower coverage, however narrow.
        short = [v for v in goal if widths.get(v) is not None and not c.by_variant[v].paired.full_coverage]
        ok = not missing and not short and (worst is None or worst <= target)
        rec = recorded.get(c.id) or {}
        rounds = max((c.by_variant[v].n for v in variants), default=0)
        why = None
        if not ok:
            if missing:
                why = "no interval for " + ", ".join(missing) + " (failures or fewer than 2 paired rounds)"
            else:
                worst_v = max((v for v in goal if widths[v] is not None), key=lambda v: widths[v])
                reason = rec.get("reason") or "rounds"
                need = rec.get("rounds_needed")
                if worst <= target:  # narrow enough, but from too few rounds to be a 95 % interval
                    worst_v = short[0]
                    cov = c.by_variant[worst_v].paired.coverage
                    worst_v += (f" ({c.by_variant[worst_v].paired.n} rounds: an interval that "
                                f"covers {cov * 100:.1f} %, not {stats.CONFIDENCE * 100:.0f} %)")
                why = (f"{worst_v} ±{worst * 100:.1f} % after {rounds} rounds; "
                       + {"budget": "time budget spent",
                          "spread": "per-round ratios too spread to get there within the round limit",
                          "max_rounds": "round limit reached",
                          "rounds": "no adaptive rounds (--time-budget 0, --smoke or an older run)"}.get(reason, reason)
                       + (f", ~{need} rounds needed" if need else ""))
            out.not_converged[c.id] = why
        out.cells[c.id] = CellConvergence(ok, widths, worst, rounds, why)
    return out


def pareto(per_v: dict[str, VariantResult], higher_is_better: bool) -> Pareto:
    """Speed against memory in one cell, from medians: the variants no other beats on both the
    primary metric and peak RSS (the Pareto frontier), and for each variant the peers that are
    both faster (better) and leaner."""
    pts = {}
    for v, e in per_v.items():
        if e.summary and e.rss:
            m = e.summary.median
            pts[v] = (m if higher_is_better else -m, e.rss.median)

    def beats(a, b):  # a strictly better than b on both
        return pts[a][0] > pts[b][0] and pts[a][1] < pts[b][1]

    dominating = {v: [p for p in pts if p != v and beats(p, v)] for v in pts}
    frontier = [v for v in pts if not dominating[v]]
    return Pareto(frontier, {v: d for v, d in dominating.items() if d})


def compare(a: RunDoc, b: RunDoc, alpha: float = 0.05) -> Comparison:
    """Cell by cell and variant by variant, B against A: the change of the median and whether the
    samples differ significantly (two-sided Mann–Whitney U at `alpha`)."""
    a_cells = {c["id"]: c for c in a.cells}
    rows, notes = [], []
    for label, mine, theirs in (("A", a, b), ("B", b, a)):
        notes += [f"variant {v}: only in {label}" for v in mine.variants if v not in theirs.variants]
    if a.settings.get("cpus") != b.settings.get("cpus"):
        notes.append(f"the runs were pinned to different CPUs (A: {a.settings.get('cpus')}, "
                     f"B: {b.settings.get('cpus')})")
    for c in b.cells:
        if c["id"] not in a_cells:
            notes.append(f"{c['id']}: only in B")
            continue
        ca = a_cells[c["id"]]
        if ca.get("metric") != c.get("metric"):
            notes.append(f"{c['id']}: different metrics ({ca.get('metric')} vs {c.get('metric')}), skipped")
            continue
        if _workload(ca) != _workload(c):
            # A --smoke run against a full one, another --seconds or --param: the same cell id,
            # another workload, whose difference is no allocator's.
            notes.append(f"{c['id']}: not the same workload in A and B (A: {_workload(ca)}; "
                         f"B: {_workload(c)}): its differences are not the allocators'")
        hib = c.get("higher_is_better", True)
        for v in b.variants:
            if v not in a.variants:
                continue
            # A metric <= 0 is a failure (files written before the runner made it one count it as
            # a success): left out, as from the paired ratios, not divided by.
            va = [s.metrics[c["metric"]] for s in a.counted(c["id"], v)]
            vb = [s.metrics[c["metric"]] for s in b.counted(c["id"], v)]
            for label, vals in (("A", va), ("B", vb)):
                if left_out := sum(x <= 0 for x in vals):
                    notes.append(f"{c['id']} / {v}: {left_out} sample{'s' if left_out > 1 else ''} of {label} "
                                 f"left out ({c['metric']} <= 0)")
            va, vb = [x for x in va if x > 0], [x for x in vb if x > 0]
            if not va or not vb:
                notes.append(f"{c['id']} / {v}: no successful samples in {'A' if not va else 'B'}")
                continue
            p = stats.mann_whitney(va, vb)
            sp = stats.speedup(vb, va, hib)
            sig = p is not None and p < alpha
            verdict = ("faster" if sp > 1 else "slower") if sig else "no significant difference"
            if sig and not hib:
                verdict = "better" if sp > 1 else "worse"
            min_p = _min_possible_p(len(va), len(vb))
            rows.append(CompareRow(cell=c["id"], variant=v, unit=c.get("unit", ""),
                                   a=stats.summarize(va), b=stats.summarize(vb), speedup=sp,
                                   speedup_ci=stats.speedup_ci(vb, va, hib), p_value=p,
                                   significant=sig, verdict=verdict, underpowered=min_p >= alpha))
    for c in a.cells:
        if c["id"] not in {x["id"] for x in b.cells}:
            notes.append(f"{c['id']}: only in A")
    return Comparison(rows, notes, alpha)


def _workload(cell: dict) -> str:
    """What a cell ran, as compare matches it: the arguments and environment of its command, with
    absolute paths cut to their last part (two checkouts build the same programs, and keep the
    lab's drivers, in two places)."""
    def plain(x) -> str:
        return Path(str(x)).name if str(x).startswith("/") else str(x)

    argv = " ".join(plain(x) for x in (cell.get("argv") or [])[1:])
    env = " ".join(f"{k}={plain(v)}" for k, v in sorted((cell.get("env") or {}).items()))
    return " ".join(x for x in (env, argv) if x) or "–"


def _min_possible_p(n1: int, n2: int) -> float:
    """Smallest two-sided exact Mann–Whitney p-value with these sample sizes: 2 / C(n1+n2, n1)."""
    from math import comb

    return min(1.0, 2 / comb(n1 + n2, n1))
