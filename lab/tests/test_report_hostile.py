"""Strings the lab does not choose (a replayed trace's file name in a cell id, a failed sample's
message, variant names and paths in a results file) are printed and drawn as they are: never read
as rich markup or matplotlib mathtext (a bad one ended `report`, `compare` or `env` with a
traceback), never as HTML.  A report that cannot be written says so in one line and keeps the
results; a schema version that is no integer is refused."""

import io
import json
import os
import re
from html import escape as html_escape

import pytest
from rich.console import Console

from strata_lab import analysis, cli, report, tables
from strata_lab.model import RunDoc

from .conftest import lab
from .test_analysis import doc_with

CELL = "replay-<b>a[/b]$\\frac$.trace/t1"   # `strata-lab replay` names the cell after the trace file
VARIANT = "x[/v]$\\y$"
MESSAGE = "could not read the workload's output: [/x] [bold]<script>alert(1)</script>"


def hostile_doc():
    d = doc_with({(CELL, "base"): [10, 11, 12, 10, 11], (CELL, "x"): [20, 21, 22, 20, 21]},
                 cells=[{"id": CELL, "workload": "replay-a", "threads": 1, "metric": "ops", "unit": "ops/s",
                         "higher_is_better": True, "oversubscribed": False, "latency_metrics": []}])
    d["samples"].append({"index": len(d["samples"]), "cell": CELL, "variant": "x", "round": 5,
                         "warmup": False, "ok": False,
                         "failure": {"kind": "parse", "message": MESSAGE, "exit_status": 0,
                                     "stderr_tail": "</pre><script>alert(2)</script>"}})
    d["variants"] = {"base": {}, VARIANT: {"library": "/tmp/a'\"<img src=x onerror=alert(1)>/lib.so"}}
    for s in d["samples"]:
        if s["variant"] == "x":
            s["variant"] = VARIANT
    return d


def test_terminal_tables_show_the_strings_as_given():
    doc = RunDoc.from_json(hostile_doc())
    an = analysis.analyse(doc, "base")
    out = io.StringIO()
    tables.print_analysis(an, Console(file=out, width=400), doc)
    text = out.getvalue()
    assert CELL in text and VARIANT in text
    assert f"failure — parse: {MESSAGE}" in text


def test_report_html_draws_and_escapes_the_strings():
    doc = RunDoc.from_json(hostile_doc())
    an = analysis.analyse(doc, "base")
    page = report.render_html(doc, an, "")
    assert "<script" not in page and "<img src=x" not in page and "<b>a" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_compare_prints_cells_only_one_run_has(tmp_path, capsys):
    a = doc_with({("a/t1", "base"): [10, 11, 12, 10, 11], ("a/t1", "x"): [20, 21, 22, 20, 21]})
    b = hostile_doc()
    b["cells"].insert(0, a["cells"][0])
    b["variants"]["x"] = {}
    b["samples"] += [dict(s, index=len(b["samples"]) + i) for i, s in enumerate(a["samples"])
                     if s["cell"] == "a/t1"]
    for name, d in (("a", a), ("b", b)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(d))
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert f"{CELL}: only in B" in capsys.readouterr().out


def test_env_shows_a_build_path_with_brackets(tmp_path):
    build = tmp_path / "[/x] build"
    r = lab("env", env={"STRATA_BUILD": str(build)})
    assert r.returncode == 0, r.stderr
    assert "[/x]" in r.stdout


def test_trace_stats_of_a_trace_with_dollars_in_its_name(tmp_path, capsys):
    from .test_trace import sample_trace

    p = sample_trace(tmp_path)
    named = p.rename(tmp_path / "run$\\frac$.trace")  # the plot's title is the file's name
    assert cli.main(["trace-stats", str(named), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "trace-stats.png").stat().st_size > 1000


def test_a_report_that_cannot_be_written_keeps_the_results(tmp_path, capsys):
    d = doc_with({("a/t1", "base"): [10, 11, 12, 10, 11], ("a/t1", "x"): [20, 21, 22, 20, 21]})
    (tmp_path / "results.json").write_text(json.dumps(d))
    (tmp_path / "report.html").mkdir()  # as a directory the user may not write to would
    assert cli.main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and f"the results are in {tmp_path / 'results.json'}" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "results.json", "summary.md"]


def test_a_schema_version_that_is_not_an_integer_is_refused(tmp_path, capsys):
    d = doc_with({("a/t1", "base"): [10] * 5, ("a/t1", "x"): [20] * 5})
    d["schema_version"] = True
    (tmp_path / "results.json").write_text(json.dumps(d))
    assert cli.main(["report", str(tmp_path), "--no-html"]) == 2
    assert "schema version True" in capsys.readouterr().err


@pytest.mark.parametrize("version, shown", [("2", "'2'"), (3, "3"), (2.0, "2.0")])
def test_a_schema_version_this_lab_does_not_read_is_named_as_written(tmp_path, capsys, version, shown):
    """The string "2" was refused as "has schema version 2; this lab reads versions 1, 2"."""
    d = doc_with({("a/t1", "base"): [10] * 5, ("a/t1", "x"): [20] * 5})
    d["schema_version"] = version
    (tmp_path / "results.json").write_text(json.dumps(d))
    assert cli.main(["report", str(tmp_path), "--no-html"]) == 2
    assert f"has schema version {shown}; this lab reads versions 1, 2" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["b[/x]", "[red]y", "nl\nx", "esc\x1b[2Jx", os.fsdecode(b"ff\xff")])
def test_a_run_into_an_out_directory_with_a_hostile_name(built, tmp_path, capsys, name):
    """--out is the user's, but a script can make any name: `[/x]` ended the run in a MarkupError
    before its first sample (an empty run directory left), `[red]` vanished from the paths printed
    (a directory that does not exist), a newline split the line, ESC reached the terminal, and a
    byte that is not UTF-8 ended --report in a UnicodeEncodeError after every sample was taken."""
    from strata_lab.text import printable

    out = tmp_path / name
    code = cli.main(["run", "--suite", "patterns", "--alloc", "glibc", "--cells", "larson/t1", "--seconds",
                     "0.05", "--rounds", "1", "--warmup", "0", "--time-budget", "0", "--no-progress",
                     "--report", "--out", str(out)])
    got = capsys.readouterr()
    assert code == 0, got.err
    (run_dir,) = out.iterdir()
    shown = printable(str(run_dir))
    assert f"strata-lab: writing {shown}/results.json" in got.err
    assert f"results: {shown}/results.json" in got.out and f"report: {shown}/report.html" in got.out
    assert "\x1b" not in got.out + got.err
    assert f"results: {html_escape(shown)}/results.json" in (run_dir / "report.html").read_text()


def piped_doc():
    """A cell and a variant whose names hold a '|', which splits a Markdown table's column."""
    d = doc_with({("a|b/t1", "base"): [10, 11, 12, 10, 11], ("a|b/t1", "x|y"): [20, 21, 22, 20, 21]},
                 cells=[{"id": "a|b/t1", "workload": "a|b", "threads": 1, "metric": "ops", "unit": "ops/s",
                         "higher_is_better": True, "oversubscribed": False, "latency_metrics": ["p99"]}])
    d["variants"] = {"base": {}, "x|y": {}}
    for s in d["samples"]:
        if s["variant"] == "x":
            s["variant"] = "x|y"
    return RunDoc.from_json(d)


def test_a_pipe_in_a_name_does_not_split_a_table_column():
    doc = piped_doc()
    an = analysis.analyse(doc, "base")
    md = tables.markdown(an, doc)
    rows = [line for line in md.splitlines() if line.startswith("|")]
    header_columns = {}
    for line in rows:
        n = len([x for x in line.replace("\\|", "").split("|")]) - 2  # columns between the outer bars
        if line.startswith("| cell |"):
            header_columns["now"] = n
        assert n == header_columns["now"], line
    assert "a\\|b/t1" in md and "x\\|y" in md
    page = report.render_html(doc, an, "")
    assert "<td>a|b/t1</td>" in page and "<th>x|y</th>" in page
    assert "\\|" not in page
    for table in re.findall(r"<table>(.*?)</table>", page, re.S):
        widths = {row.count("<td>") + row.count("<th>") for row in re.findall(r"<tr>.*?</tr>", table)}
        assert len(widths) <= 1, table


def test_the_trace_plot_of_a_summary_is_an_image_in_the_html(tmp_path):
    (tmp_path / "trace-stats.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    doc = piped_doc()
    doc.path = str(tmp_path / "results.json")
    an = analysis.analyse(doc, "base")
    page = report.render_html(doc, an, "### the trace\n\n![sizes and lifetimes](trace-stats.png)\n")
    assert "![" not in page
    assert "<img alt='sizes and lifetimes' src='data:image/png;base64," in page


def test_two_results_files_in_one_folder_get_their_own_reports(tmp_path, capsys):
    for name, x in (("a.json", 20), ("b.json", 30)):
        d = doc_with({("a/t1", "base"): [10, 11, 12, 10, 11], ("a/t1", "x"): [x, x + 1, x + 2, x, x + 1]})
        d["run_id"] = name
        (tmp_path / name).write_text(json.dumps(d))
        assert cli.main(["report", str(tmp_path / name)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["a.json", "a.report.html", "a.summary.md", "b.json", "b.report.html", "b.summary.md"]
    assert "— a.json" in (tmp_path / "a.summary.md").read_text()
    assert "— b.json" in (tmp_path / "b.summary.md").read_text()
    out = capsys.readouterr().out
    assert "b.report.html" in out and "b.summary.md" in out


def test_a_report_interrupted_while_written_leaves_no_temporary_file(tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM, once the run is over) while report.html is written: no report.html.tmp
    is left beside the results."""
    d = doc_with({("a/t1", "base"): [10, 11, 12, 10, 11], ("a/t1", "x"): [20, 21, 22, 20, 21]})
    (tmp_path / "results.json").write_text(json.dumps(d))
    doc = cli.results.load(tmp_path)
    real = os.replace

    def replace(src, dst):
        if str(dst).endswith("report.html"):
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(report.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        report.write(doc, analysis.analyse(doc, "base"), tmp_path)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "summary.md"]


def test_compare_of_two_suites_says_so(tmp_path, capsys):
    """Two results files of different suites that share a cell id were compared without a word:
    `default` runs e1's and patterns' cells at its own sizes, under the same names."""
    a = doc_with({("a/t1", "base"): [10, 11, 12, 10, 11], ("a/t1", "x"): [20, 21, 22, 20, 21]})
    b = json.loads(json.dumps(a))
    b["suite"] = "e2"
    for name, d in (("a", a), ("b", b)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(d))
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"warning: A is a run of suite {a['suite']!r} and B of suite 'e2'" in out, out


@pytest.mark.parametrize("damage, needle", [
    (lambda d: d.update(settings=None), "settings must be an object, not null"),
    (lambda d: d.update(machine=[]), "machine must be an object, not []"),
    (lambda d: d["cells"][0].update(higher_is_better="no"),
     "cell 0 needs a string id, and higher_is_better, where given, true or false"),
])
@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_results_file_with_a_damaged_object_is_refused(tmp_path, capsys, damage, needle, command):
    """`settings: null` (or `machine: null`) ended report and compare with a traceback
    (AttributeError), and `"higher_is_better": "no"` was read as true: the ratios upside down."""
    good = doc_with({("a/t1", "base"): [10, 11, 12, 10, 11], ("a/t1", "x"): [20, 21, 22, 20, 21]})
    bad = json.loads(json.dumps(good))
    damage(bad)
    for name, d in (("good", good), ("bad", bad)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(d))
    args = ["report", str(tmp_path / "bad"), "--no-html"] if command == "report" else \
        ["compare", str(tmp_path / "good"), str(tmp_path / "bad")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert f"corrupt results file {tmp_path / 'bad' / 'results.json'}: {needle}" in err, err


# A trace's file name may hold anything but '/' and NUL; `strata-lab replay` names its cell after it.
NAME = "a\nb|c<script>\tx\x1b[2J\x1b]0;owned\x07.trace"


def named_doc(cell: str) -> RunDoc:
    d = doc_with({(cell, "base"): [10, 11, 12, 10, 11], (cell, "x"): [20, 21, 22, 20, 21]},
                 cells=[{"id": cell, "workload": "replay", "threads": 1, "metric": "ops", "unit": "ops/s",
                         "higher_is_better": True, "oversubscribed": False, "latency_metrics": []}],
                 failures=[(cell, "x")])
    return RunDoc.from_json(d)


def test_control_characters_in_a_cell_id_break_no_table_and_reach_no_terminal():
    """A newline in a cell id split its row of every summary.md table (the HTML table's rows
    became paragraphs), and an escape sequence in it went raw to the terminal (clear the screen,
    set the window title), also in the ratio-interval lines and the warnings."""
    cell = f"replay-{NAME}/t1"
    doc = named_doc(cell)
    an = analysis.analyse(doc, "base")
    out = io.StringIO()
    tables.print_analysis(an, Console(file=out, width=400), doc)
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "replay-a\\nb|c<script>\\tx\\x1b[2J\\x1b]0;owned\\x07.trace/t1" in text
    md = tables.markdown(an, doc)
    assert "\x1b" not in md and "\t" not in md
    for line in md.splitlines():
        assert not line.startswith("|") or line.endswith("|"), line  # no row split in two
    assert "| replay-a\\nb\\|c<script>" in md
    page = report.render_html(doc, an, "")
    assert "\x1b" not in page and "<script" not in page
    for table in re.findall(r"<table>(.*?)</table>", page, re.S):
        widths = {row.count("<td") + row.count("<th>") for row in re.findall(r"<tr>.*?</tr>", table)}
        assert len(widths) <= 1, table


def test_report_of_a_cell_named_after_a_file_name_that_is_not_utf8(tmp_path, capsys):
    """The lab before wrote such a trace's name with the byte's lone surrogate (\\udcff) into
    results.json; the report's plots could not draw it: a traceback, no report."""
    doc = named_doc("replay-bad\udcff.trace/t1")
    (tmp_path / "results.json").write_text(json.dumps(doc.to_json()))
    assert cli.main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "replay-bad\\xff.trace/t1" in out
    assert "replay-bad\\xff.trace/t1" in (tmp_path / "summary.md").read_text()
    assert "replay-bad\\xff.trace/t1" in (tmp_path / "report.html").read_text()


def test_a_trace_whose_name_is_not_utf8_or_holds_control_characters(tmp_path, capsys):
    """trace-stats --out (and replay's summary, which draws the same plot after the run) ended
    in a traceback for a name with a byte that is not UTF-8; replay's cell took the name raw."""
    from strata_lab.suite import SuiteContext, load_suite

    from .test_trace import sample_trace

    named = sample_trace(tmp_path).rename(tmp_path / os.fsdecode(b"bad\xff" + NAME.encode()))
    assert cli.main(["trace-stats", str(named), "--out", str(tmp_path / "out")]) == 0
    shown = "bad\\xffa\\nb|c<script>\\tx\\x1b[2J\\x1b]0;owned\\x07.trace"
    assert f"# trace {tmp_path}/{shown}" in capsys.readouterr().out
    assert (tmp_path / "out" / "trace-stats.png").stat().st_size > 1000
    assert (tmp_path / "out" / "trace-stats.md").read_text().startswith(f"# trace {tmp_path}/{shown}")
    (cell,) = load_suite("replay").cells(SuiteContext(params={"trace": str(named), "pace": True}))
    assert cell.id == f"replay-{shown}/t1"
    assert str(named) in cell.argv  # the file itself is still what is replayed


def test_two_runs_merged_into_one_file_are_refused(tmp_path, capsys):
    """Two runs' samples in one results.json (or a cell listed twice) were read as one run: the
    medians over both runs, the paired ratios over the second's rounds only, without a word.  A
    round's failed re-run beside its success is not such a repeat (the runner never hides a
    failure)."""
    one = doc_with({("a/t1", "base"): [10, 11, 12, 10, 11], ("a/t1", "x"): [20, 21, 22, 20, 21]},
                   failures=[("a/t1", "x")])
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "results.json").write_text(json.dumps(one))
    assert cli.main(["report", str(tmp_path / "one"), "--no-html"]) == 0
    capsys.readouterr()
    merged = json.loads(json.dumps(one))
    merged["samples"] += json.loads(json.dumps(one))["samples"]
    twice = json.loads(json.dumps(one))
    twice["cells"].append(twice["cells"][0])
    for name, d, needle in (("merged", merged, f"samples 0 and {len(one['samples'])} are both round 0 of "
                                                 "'a/t1' under 'base' (two runs merged into one file?"),
                            ("twice", twice, "cell 'a/t1' is listed twice (two runs merged into one file?")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(d))
        for args in (["report", str(tmp_path / name), "--no-html"],
                     ["compare", str(tmp_path / "one"), str(tmp_path / name)]):
            assert cli.main(args) == 2
            err = capsys.readouterr().err
            assert f"corrupt results file {tmp_path / name / 'results.json'}: {needle}" in err, err


def test_results_kept_compressed_are_read(tmp_path, capsys):
    """docs/results keeps runs as results.json.gz: `report DIR` said there was no results file,
    and `report FILE.json.gz` (or compare) called the file corrupt ("not valid JSON")."""
    import gzip

    d = doc_with({("a/t1", "base"): [10, 11, 12, 10, 11], ("a/t1", "x"): [20, 21, 22, 20, 21]})
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json.gz").write_bytes(gzip.compress(json.dumps(d).encode()))
    (tmp_path / "peers-results.json.gz").write_bytes(gzip.compress(json.dumps(d).encode()))
    assert cli.main(["report", str(tmp_path / "run")]) == 0
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["report.html", "results.json.gz", "summary.md"]
    assert cli.main(["report", str(tmp_path / "peers-results.json.gz"), "--no-html"]) == 0
    assert cli.main(["compare", str(tmp_path / "run"), str(tmp_path / "peers-results.json.gz")]) == 0
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(json.dumps(d).encode())[:40])
    capsys.readouterr()
    assert cli.main(["report", str(tmp_path / "cut.json.gz"), "--no-html"]) == 2
    assert f"corrupt results file {tmp_path / 'cut.json.gz'}: not a whole gzip file" in capsys.readouterr().err
