"""A results file the lab did not write, or that a person edited: every field the readers use is
checked when it is loaded (results.load), so `report` and `compare` refuse damage in one line that
names the file and the field (status 2, as for the lab's other input errors), never a traceback
and never a table drawn from a wrong reading."""

import gzip
import io
import json
from types import SimpleNamespace

import pytest
from rich.console import Console

from strata_lab import cli, tables
from strata_lab.suites import replay as replay_suite
from strata_lab.text import printable

from .test_analysis import doc_with


def good_doc() -> dict:
    d = doc_with({("a/t1", "base"): [10, 11, 12, 10, 11, 12], ("a/t1", "x"): [20, 21, 22, 20, 21, 22],
                  ("b/t4", "base"): [8, 8, 9, 8, 8, 9], ("b/t4", "x"): [4, 4, 5, 4, 4, 5]},
                 failures=[("a/t1", "x")])
    d["schema_version"] = 2
    d["settings"].update(warmup=1, target_width=0.03, noise_threshold=0.1, converge=["x"])
    d["convergence"] = {"target_width": 0.03,
                        "cells": {"a/t1": {"rounds": 6, "converged": False, "reason": "budget"}}}
    d["git"] = {"revision": "a" * 40, "dirty": False}
    for s in d["samples"]:
        s["rss_timeline"] = {"interval_ms": 10, "source": "lab", "t_ms": [0, 10], "rss_kb": [100, 200]}
    return d


FAILED = -1  # the failed sample doc_with appends last


def sample(n):
    return lambda d: d["samples"][n]


# (what is damaged, how, the field the message names): each ended report or compare with a
# traceback, or was read as something else without a word.
DAMAGE = [
    ("failure as a string", lambda d: sample(FAILED)(d).update(failure="killed"),
     'samples[{failed}].failure must be an object, or null, not "killed"'),
    ("failure without its kind", lambda d: sample(FAILED)(d)["failure"].pop("kind"),
     "samples[{failed}].failure.kind is missing (it must be a string)"),
    ("string peak_rss_kb", lambda d: sample(0)(d).update(peak_rss_kb="1000"),
     'samples[0].peak_rss_kb must be a finite number, 0 or more, or null, not "1000"'),
    ("negative peak_rss_kb", lambda d: sample(0)(d).update(peak_rss_kb=-5),
     "samples[0].peak_rss_kb must be a finite number, 0 or more, or null, not -5"),
    ("string settings.rounds", lambda d: d["settings"].update(rounds="5"),
     'settings.rounds must be an integer, 0 or more, not "5"'),
    ("fractional settings.rounds", lambda d: d["settings"].update(rounds=5.5),
     "settings.rounds must be an integer, 0 or more, not 5.5"),
    ("string target_width", lambda d: d["settings"].update(target_width="3 %"),
     'settings.target_width must be a number above 0 and below 1, or null, not "3 %"'),
    ("negative target_width", lambda d: d["settings"].update(target_width=-0.5),
     "settings.target_width must be a number above 0 and below 1, or null, not -0.5"),
    ("NaN target_width", lambda d: d["settings"].update(target_width=float("nan")),
     "settings.target_width must be a number above 0 and below 1, or null, not NaN"),
    ("string noise_threshold", lambda d: d["settings"].update(noise_threshold="0.1"),
     'settings.noise_threshold must be a number above 0, at most 1, or null, not "0.1"'),
    ("null suite", lambda d: d.update(suite=None), "suite must be a string, not null"),
    ("cell without metric", lambda d: d["cells"][0].pop("metric"),
     "cells[0].metric is missing (it must be a string)"),
    ("cell metric a list", lambda d: d["cells"][0].update(metric=["ops"]),
     'cells[0].metric must be a string, not ["ops"]'),
    ("cell without workload", lambda d: d["cells"][1].pop("workload"),
     "cells[1].workload is missing (it must be a string)"),
    ("string threads", lambda d: d["cells"][0].update(threads="1"),
     'cells[0].threads must be an integer above 0, not "1"'),
    ("string latency metric", lambda d: [s["metrics"].update(p99="slow") for s in d["samples"]
                                         if s["cell"] == "b/t4"],
     'samples[{b_first}].metrics.p99 must be a finite number, a list of them, or null, not "slow"'),
    ("sample cell a list", lambda d: sample(0)(d).update(cell=["a/t1"]),
     'samples[0].cell must be a string, not ["a/t1"]'),
    ("sample ok as a string", lambda d: sample(FAILED)(d).update(ok="false"),
     'samples[{failed}].ok must be true or false, not "false"'),
    ("string round", lambda d: sample(0)(d).update(round="0"),
     'samples[0].round must be an integer, 0 or more, or null, not "0"'),
    ("unknown kind", lambda d: sample(0)(d).update(kind="timed"),
     'samples[0].kind must be "time" or "instructions", not "timed"'),
    ("metric past any float", lambda d: sample(0)(d)["metrics"].update(ops=10 ** 400),
     "sample 0 is ok but its 'ops' is 1000"),
    ("RSS timeline of two lengths", lambda d: sample(0)(d)["rss_timeline"].update(rss_kb=[1]),
     "samples[0].rss_timeline has 2 times and 1 sizes"),
    ("RSS timeline of strings", lambda d: sample(0)(d)["rss_timeline"].update(t_ms=["0", "10"]),
     'samples[0].rss_timeline.t_ms must be a list of finite numbers, not ["0", "10"]'),
    ("variant null", lambda d: d["variants"].update(x=None), "variants.x must be an object, not null"),
    ("git revision a number", lambda d: d["git"].update(revision=5), "git.revision must be a string, not 5"),
    ("convergence record a string", lambda d: d["convergence"]["cells"].update({"a/t1": "budget"}),
     'convergence.cells.a/t1 must be an object, not "budget"'),
    ("settings.cpus of strings", lambda d: d["settings"].update(cpus="0-1"),
     'settings.cpus must be a list of integers, 0 or more, or null, not "0-1"'),
]


@pytest.mark.parametrize("how", ["report", "report .json.gz", "compare"])
@pytest.mark.parametrize("what, damage, needle", DAMAGE, ids=[x[0] for x in DAMAGE])
def test_a_damaged_field_is_refused_by_name(tmp_path, capsys, what, damage, needle, how):
    good = good_doc()
    failed = len(good["samples"]) - 1
    b_first = next(i for i, s in enumerate(good["samples"]) if s["cell"] == "b/t4")
    bad = json.loads(json.dumps(good))
    damage(bad)
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "results.json").write_text(json.dumps(good))
    (tmp_path / "bad").mkdir()
    text = json.dumps(bad)  # NaN as NaN, as a hand edit (or another program) may leave it
    if how == "report .json.gz":
        path = tmp_path / "bad" / "results.json.gz"
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path = tmp_path / "bad" / "results.json"
        path.write_text(text)
    args = {"report": ["report", str(tmp_path / "bad")],
            "report .json.gz": ["report", str(tmp_path / "bad")],
            "compare": ["compare", str(tmp_path / "good"), str(tmp_path / "bad")]}[how]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert f"strata-lab: error: corrupt results file {path}: " \
           f"{needle.format(failed=failed, b_first=b_first)}" in err, err
    assert sorted(p.name for p in (tmp_path / "bad").iterdir()) == [path.name]  # no report of it


def test_the_undamaged_document_is_read(tmp_path, capsys):
    (tmp_path / "results.json").write_text(json.dumps(good_doc()))
    assert cli.main(["report", str(tmp_path), "--no-html"]) == 0
    assert cli.main(["compare", str(tmp_path), str(tmp_path)]) == 0


def test_the_progress_bar_draws_a_cell_id_with_brackets_as_given():
    """`strata-lab replay` names its cell after the trace file: "[red]" in the name turned the
    progress line red, and "[/x]" ended the run with a MarkupError after its first sample."""
    out = io.StringIO()
    err = Console(file=out, force_terminal=True, width=300, color_system=None)
    on_sample, on_start, finish = cli._progress(err, disabled=False)
    cell = SimpleNamespace(id="replay-[red]a[/red][/x].trace/t1")
    on_start(0, 1, cell, SimpleNamespace(name="[bold]v"), 0)
    on_sample(0, 1, SimpleNamespace(ok=True))
    finish()
    assert "replay-[red]a[/red][/x].trace/t1 [bold]v round 1" in out.getvalue()


@pytest.mark.parametrize("ch, shown", [("\u202e", "\\u202e"), ("\u200b", "\\u200b"), ("\u2066", "\\u2066"),
                                       ("\u2028", "\\u2028"), ("\U000e0001", "\\U000e0001")])
def test_format_characters_are_shown_as_escapes(ch, shown):
    """U+202E (right-to-left override) in a trace's name reversed the rest of the terminal line
    (a table row read backwards), U+200B made two different names look the same."""
    name = f"replay-a{ch}cba.trace/t1"
    assert printable(name) == f"replay-a{shown}cba.trace/t1"
    assert ch not in tables.escape(name) and ch not in tables.md(name)


def test_trace_stats_names_every_file_it_wrote(tmp_path, capsys):
    from .test_trace import sample_trace

    assert cli.main(["trace-stats", str(sample_trace(tmp_path)), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    for name in ("trace-stats.md", "trace-stats.json", "trace-stats.png"):
        assert (tmp_path / "out" / name).is_file()
        assert str(tmp_path / "out" / name) in err, err


@pytest.mark.parametrize("trace", [5, ["a.trace"], {"path": "a.trace"}])
def test_replay_summary_of_a_trace_param_that_is_no_file_name(trace):
    """The replay suite's summary opened settings.params.trace as it was: a number or a list
    ended `report` with a traceback (TypeError)."""
    text = replay_suite.summarise({"settings": {"params": {"trace": trace}}})
    assert f"settings.params.trace is {json.dumps(trace)}, not a file name" in text
