"""The run-wide time budget: divided among the cells, respected, and the cells that did not get
within the target named with the reason.  Samples here are fakes that take virtual seconds (a
clock the test advances), so nothing depends on how fast or busy this machine is."""

import os
from types import SimpleNamespace

import pytest

from strata_lab import analysis, results, runner, tables
from strata_lab.suite import Cell

# Per-round ratio of x to the baseline, by cell:
#   steady:   2.0 in every round: converged after the planned rounds (5), once it has 6 (the
#             first count whose (min, max) covers 95 %);
#   close:    one low and one high outlier (rounds 0 and 1), then 2.0: within ±5 % once the
#             order-statistic interval drops them (9 rounds);
#   hopeless: cycles through 1.6-2.4: would need ~60 rounds.
RATIOS = {
    "steady": lambda r: 2.0,
    "close": lambda r: {0: 1.8, 1: 2.2}.get(r, 2.0),
    "hopeless": lambda r: (1.6, 1.8, 2.0, 2.2, 2.4)[r % 5],
}
CELLS = [Cell(name, 1, ["true"], "v", name=name) for name in RATIOS]


class FakeMachine:
    """run_sample's stand-in: every sample takes `cost` virtual seconds of the cell."""

    def __init__(self, cost: dict):
        self.cost = cost
        self.t = 0.0
        self.ran: list[tuple] = []

    def now(self) -> float:
        return self.t

    def run_sample(self, cell, variant, cpus, extra_env, stats_file, parse):
        self.t += self.cost[cell.id]
        rnd = extra_env["STRATA_LAB_ROUND"]
        r = 0 if rnd == "warmup" else int(rnd)
        self.ran.append((cell.id, variant.name, rnd))
        wobble = {"base": 1.0, "x": RATIOS[cell.id](r), "y": (1.5, 2.5)[r % 2]}[variant.name]
        return {"ok": True, "failure": None, "wall_s": self.cost[cell.id], "metrics": {"v": 10.0 * wobble}}


VARIANTS = [runner.Variant(n, info={"kind": "suite"}) for n in ("base", "x", "y")]


def run(tmp_path, monkeypatch, budget, *, cells=CELLS, variants=VARIANTS[:2], cost=None, rounds=5,
        warmup=0, max_rounds=30, converge=None, name="run"):
    fake = FakeMachine(cost or {c.id: 1.0 for c in cells})
    monkeypatch.setattr(runner, "run_sample", fake.run_sample)
    out = tmp_path / name
    out.mkdir()
    suite = SimpleNamespace(name="t", description="test", module=SimpleNamespace(), parse=None)
    doc = runner.execute(suite, cells, variants, rounds=rounds, warmup=warmup,
                         cpus=sorted(os.sched_getaffinity(0)), out_dir=out, baseline="base", settings={},
                         command=["test"], seed=1, noise_threshold=None, target_width=0.05,
                         time_budget_s=budget, max_rounds=max_rounds, converge=converge, now=fake.now)
    assert results.load(out).to_json() == doc.to_json()
    return doc, fake


def rounds_of(doc, cell, variant="x"):
    return sorted(s.round for s in doc.samples if s.cell == cell and s.variant == variant
                  and s.round is not None)


def test_divide_serves_the_cells_that_can_finish_first():
    # everything fits: each gets what it needs
    assert runner.divide(10, {"a": 2, "b": 3}) == {"a": 2, "b": 3}
    # not everything: the smallest needs in full, the rest share what is left evenly
    assert runner.divide(10, {"a": 2, "b": 3, "c": 50, "d": 40}) == {"a": 2, "b": 3, "c": 2.5, "d": 2.5}
    assert runner.divide(1, {"a": 2, "b": 3}) == {"a": 0.5, "b": 0.5}
    assert runner.divide(-5, {"a": 2}) == {"a": 0.0}
    assert sum(runner.divide(7, {"a": 1, "b": 9, "c": 9}).values()) == pytest.approx(7)


def test_the_run_ends_within_its_budget(tmp_path, monkeypatch):
    for budget in (12, 20, 31, 38, 46, 200):
        doc, fake = run(tmp_path, monkeypatch, budget, name=f"b{budget}")
        # the two rounds every cell runs cost 3 cells x 2 variants x 2 rounds = 12 s
        assert fake.t <= budget, budget
        assert doc.convergence["elapsed_s"] == pytest.approx(fake.t, abs=0.05)
        assert doc.settings["planned_samples"] == len(doc.samples)


def test_planned_rounds_past_the_budget_are_left_out_and_named(tmp_path, monkeypatch):
    # 3 cells x 5 rounds x 2 variants = 30 s planned; 20 s: rounds 0 and 1 always, round 2 of
    # every cell (18 s), round 3 of the first cell only (20 s)
    doc, fake = run(tmp_path, monkeypatch, 20)
    assert fake.t == 20
    assert [rounds_of(doc, c.id) for c in CELLS] == [[0, 1, 2, 3], [0, 1, 2], [0, 1, 2]]
    conv = doc.convergence["cells"]
    # 4 rounds all at 2.0: a zero-width interval, but one that covers 87.5 %, not 95 %
    assert (conv["steady"]["converged"], conv["steady"]["reason"], conv["steady"]["rounds"]) == (False, "budget", 4)
    # 3 rounds, two of them outliers: its spread looks wide (~48 rounds needed, over the limit)
    assert (conv["close"]["converged"], conv["close"]["reason"], conv["close"]["rounds"]) == (False, "spread", 3)
    assert conv["hopeless"]["reason"] == "spread"
    an = analysis.analyse(doc)
    assert set(an.convergence.not_converged) == {"steady", "close", "hopeless"}
    assert "4 rounds: an interval that covers 87.5 %, not 95 %" in an.convergence.not_converged["steady"]
    assert "after 3 rounds; per-round ratios too spread" in an.convergence.not_converged["close"]
    # with a higher round limit the same cut is the budget's
    doc, fake = run(tmp_path, monkeypatch, 20, max_rounds=100, name="limit100")
    assert doc.convergence["cells"]["close"]["reason"] == "budget"
    assert "time budget spent" in analysis.analyse(doc).convergence.not_converged["close"]
    # and the table says so under the ratio intervals
    lines = tables.convergence_lines(an)
    assert any(line.startswith("not converged: close:") for line in lines)
    assert lines[0] == "ratio intervals within ±5 %: 0 of 3 cells"


def test_a_cell_that_can_finish_gets_the_time_before_one_that_cannot(tmp_path, monkeypatch):
    # 30 s of planned rounds leave 10 s: 1 more round of `steady` (6 in all, the first count
    # whose interval covers 95 %) and 4 more of `close` (9 in all) bring them within ±5 %;
    # `hopeless` would need ~60 rounds and gets nothing (an even split would have left both short).
    doc, fake = run(tmp_path, monkeypatch, 40)
    conv = doc.convergence["cells"]
    assert rounds_of(doc, "close") == list(range(9)) and conv["close"]["converged"]
    assert rounds_of(doc, "hopeless") == list(range(5))
    assert not conv["hopeless"]["converged"] and conv["hopeless"]["reason"] == "spread"
    assert conv["hopeless"]["rounds_needed"] > 30
    assert rounds_of(doc, "steady") == list(range(6)) and conv["steady"]["converged"]
    assert fake.t == 40
    # with time to spare, the hopeless cell gets rounds too, up to the round limit
    doc, fake = run(tmp_path, monkeypatch, 200, name="more")
    assert rounds_of(doc, "hopeless") == list(range(30))
    assert doc.convergence["cells"]["hopeless"]["reason"] == "max_rounds"
    assert rounds_of(doc, "close") == list(range(9))


def test_adaptive_rounds_run_only_the_variants_that_must_converge(tmp_path, monkeypatch):
    # y's ratio never settles, but only x must converge: the extra rounds run base and x only,
    # and y keeps its planned rounds (its ratio still reported, from those).
    doc, fake = run(tmp_path, monkeypatch, 200, variants=VARIANTS, cells=[CELLS[1]], converge=["x"])
    assert rounds_of(doc, "close", "x") == rounds_of(doc, "close", "base") == list(range(9))
    assert rounds_of(doc, "close", "y") == list(range(5))
    assert doc.settings["converge"] == ["x"] and doc.convergence["converge"] == ["x"]
    assert doc.convergence["cells"]["close"]["converged"]
    an = analysis.analyse(doc)
    assert an.convergence.cells["close"].converged and not an.convergence.not_converged
    assert "y" in an.convergence.widest  # still shown
    # without `converge`, every variant must: y holds the cell back
    doc, _ = run(tmp_path, monkeypatch, 200, variants=VARIANTS, cells=[CELLS[1]], name="all")
    assert doc.settings["converge"] == ["x", "y"]
    assert not doc.convergence["cells"]["close"]["converged"]
    assert rounds_of(doc, "close", "y") == rounds_of(doc, "close", "x")


def test_time_is_divided_by_what_a_round_costs(tmp_path, monkeypatch):
    # Two cells with the same outliers, one ten times dearer per sample: with time for only the
    # cheap one to finish, the cheap one finishes.
    cells = [Cell("close", 1, ["true"], "v", name="close"), Cell("close", 2, ["true"], "v", name="dear")]
    RATIOS["dear"] = RATIOS["close"]
    try:
        cost = {"close": 1.0, "dear": 10.0}
        planned = 5 * 2 * (1 + 10)
        doc, fake = run(tmp_path, monkeypatch, planned + 8 + 5, cells=cells, cost=cost)
    finally:
        del RATIOS["dear"]
    assert rounds_of(doc, "close") == list(range(9)) and rounds_of(doc, "dear") == list(range(5))
    assert doc.convergence["cells"]["dear"]["reason"] == "budget"
    assert doc.convergence["cells"]["dear"]["spent_s"] == pytest.approx(100)
    assert fake.t <= planned + 13


def test_no_budget_runs_the_planned_rounds_only(tmp_path, monkeypatch):
    doc, fake = run(tmp_path, monkeypatch, 0)
    assert all(rounds_of(doc, c.id) == list(range(5)) for c in CELLS)
    assert doc.convergence["cells"]["close"]["reason"] == "rounds"
