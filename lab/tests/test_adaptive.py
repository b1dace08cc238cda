"""The runner's noise record and re-runs, adaptive rounds and instruction counts, on commands whose
output is fixed (no test here depends on how fast the machine is)."""

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from strata_lab import analysis, machine, results, runner
from strata_lab.suite import Cell, parse_last_json

# The value depends on the variant (V) and, for the "spread" cell, on the round: fixed numbers.
STEADY = Cell("steady", 1, ["/bin/sh", "-c", 'echo "{\\"v\\": $((10 * V)), \\"ops\\": 1000}"'], "v")
SPREAD = Cell("spread", 1, ["/bin/sh", "-c",
                            'echo "{\\"v\\": $((10 * V + (STRATA_LAB_ROUND * 7 % 5) * (V - 1)))}"'], "v")
VARIANTS = [runner.Variant("base", env=(("V", "1"),), info={"kind": "suite"}),
            runner.Variant("x", env=(("V", "2"),), info={"kind": "suite"})]


def fake_suite():
    mod = SimpleNamespace(DESCRIPTION="test")
    return SimpleNamespace(name="t", description="test", module=mod,
                           parse=lambda cell, out: parse_last_json(out))


def execute(tmp_path: Path, cells, **kw):
    out = tmp_path / "run"
    out.mkdir()
    kw.setdefault("noise_threshold", None)  # this machine's own noise must not add re-runs
    doc = runner.execute(fake_suite(), cells, VARIANTS, rounds=kw.pop("rounds", 3), warmup=0,
                         cpus=sorted(os.sched_getaffinity(0)), out_dir=out, baseline="base", settings={}, command=["test"],
                         seed=1, **kw)
    assert results.load(out).to_json() == doc.to_json()  # what is on disk is what ran
    return doc


def test_every_sample_records_what_it_lost(tmp_path):
    doc = execute(tmp_path, [STEADY], time_budget_s=0, noise_threshold=0.1, max_reruns=0)
    for s in doc.samples:
        assert s.extra["steal_s"] >= 0 and s.extra["other_cpu_s"] >= 0 and s.extra["noise_cpus"] >= 1
        assert 0 <= s.steal_frac and 0 <= s.other_cpu_frac
        assert s.minor_faults > 0 and isinstance(s.noisy, bool)


def test_noisy_samples_are_run_again_and_the_worse_one_is_left_out(tmp_path, monkeypatch):
    # Every sample "loses" a second of steal on every CPU: all are noisy, and the re-runs stop
    # at the per-cell limit.
    ticks = {"n": 0}

    def fake_jiffies(cpus=None):
        ticks["n"] += 1
        return ticks["n"] * 1000, ticks["n"] * 1000

    monkeypatch.setattr(machine, "cpu_jiffies", fake_jiffies)
    doc = execute(tmp_path, [STEADY], rounds=3, max_reruns=2, time_budget_s=0, noise_threshold=0.1)
    samples = doc.samples
    assert len(samples) == 3 * 2 + 2 == doc.settings["planned_samples"]
    assert all(s.noisy for s in samples)
    reruns = [s for s in samples if s.rerun_of is not None]
    assert len(reruns) == 2
    for r in reruns:
        orig = samples[r.rerun_of]
        assert (orig.cell, orig.variant, orig.round) == (r.cell, r.variant, r.round)
        # one of the pair is superseded by the other, never both
        assert (orig.superseded_by == r.index) != (r.superseded_by == orig.index)
        assert r.index == orig.index + 1  # at once, next to its round
    an = analysis.analyse(doc)
    assert an.noise.reruns == 2 and an.noise.noisy == len(samples)
    for v in ("base", "x"):
        assert an.cells[0].by_variant[v].n == 3  # one value per round


def test_converged_cells_get_no_more_rounds_unconverged_ones_stop_at_the_limit(tmp_path):
    # steady: x is exactly 2x the baseline in every round (interval of width 0), but 3 rounds
    # give a 75 % interval: it converges at 6 rounds, where (min, max) covers 96.9 %;
    # spread: x's per-round ratio wanders by up to 20 % and never gets within ±3 %.
    doc = execute(tmp_path, [STEADY, SPREAD], rounds=3, time_budget_s=3600, max_rounds=7,
                  target_width=0.03)
    conv = doc.convergence["cells"]
    assert {k: v for k, v in conv["steady/t1"].items() if k != "spent_s"} == {
        "rounds": 6, "converged": True, "reason": None, "rounds_needed": None, "half_width": {"x": 0.0}}
    assert conv["spread/t1"]["rounds"] == 7 and not conv["spread/t1"]["converged"]
    assert conv["spread/t1"]["reason"] == "max_rounds"
    rounds = lambda cid: sorted(s.round for s in doc.samples if s.cell == cid and s.variant == "x")  # noqa: E731
    assert rounds("steady/t1") == list(range(6)) and rounds("spread/t1") == list(range(7))
    # every added round runs both variants (the pairs stay complete)
    assert len([s for s in doc.samples if s.cell == "spread/t1"]) == 14
    an = analysis.analyse(doc)
    assert "spread/t1" in an.convergence.not_converged
    assert "round limit" in an.convergence.not_converged["spread/t1"]
    assert an.convergence.cells["steady/t1"].converged


def test_a_spent_budget_is_named_as_the_reason(tmp_path):
    # A budget spent before round 2: the two rounds every cell runs, then nothing.  Rounds 0 1 of
    # the spread cell: ratios 20/10 22/10 -> interval [2.0, 2.2] around sqrt(4.4), ±4.77 %; the
    # log ratios' MAD gives sigma 0.0707, so ±3 % would take (2.456 * 0.0707 / 0.03)^2 -> 34 rounds.
    doc = execute(tmp_path, [SPREAD], rounds=3, time_budget_s=1e-6, max_rounds=100)
    cell = doc.convergence["cells"]["spread/t1"]
    assert (cell["rounds"], cell["reason"], cell["rounds_needed"]) == (2, "budget", 34)
    assert cell["half_width"]["x"] == pytest.approx(0.1 / 4.4 ** 0.5)
    assert "time budget spent, ~34 rounds needed" in analysis.analyse(doc).convergence.not_converged["spread/t1"]
    # past the round limit, more time would not have helped: the spread is named instead
    (tmp_path / "run").rename(tmp_path / "first")
    doc = execute(tmp_path, [SPREAD], rounds=3, time_budget_s=1e-6, max_rounds=20)
    assert doc.convergence["cells"]["spread/t1"]["reason"] == "spread"
    assert "too spread" in analysis.analyse(doc).convergence.not_converged["spread/t1"]


@pytest.mark.skipif(not shutil.which("valgrind"), reason="valgrind is not installed")
def test_instruction_counts_under_cachegrind(tmp_path):
    doc = execute(tmp_path, [STEADY], rounds=1, time_budget_s=0, instructions=True)
    ins = [s for s in doc.samples if s.kind == "instructions"]
    assert len(ins) == 2 and all(s.ok for s in ins), [s.failure for s in ins]
    for s in ins:
        assert s.instructions > 10000  # a shell's start alone runs far more
        assert s.instructions_per_op == s.instructions / 1000
        assert s.round is None and not s.warmup
    an = analysis.analyse(doc)
    [row] = an.instructions
    assert row.by_variant["base"].ratio == 1.0 and row.by_variant["x"].unit == "per op"
    # instruction runs are not timed samples: the time statistics do not see them
    assert an.cells[0].by_variant["x"].n == 1
