"""results.json: round trip, never overwriting a run, clear errors for corrupt files."""

import json
import os

import pytest

from strata_lab import results
from strata_lab.errors import LabError

from .conftest import lab


def minimal_doc():
    return {
        "schema": results.SCHEMA, "schema_version": results.SCHEMA_VERSION, "run_id": "x",
        "suite": "patterns", "complete": True, "interrupted": None, "settings": {"rounds": 1, "cpus": [0]},
        "variants": {"glibc": {"kind": "allocator", "library": None, "version": "2.36"}},
        "cells": [{"id": "larson/t1", "workload": "larson", "threads": 1, "metric": "ops_per_sec"}],
        "samples": [{"index": 0, "cell": "larson/t1", "variant": "glibc", "round": 0, "warmup": False,
                     "ok": True, "failure": None, "metrics": {"ops_per_sec": 1.5e6, "nested": {"a": [1, 2]}},
                     "peak_rss_kb": 3000}],
    }


def test_round_trip(tmp_path):
    doc = minimal_doc()
    results.write_atomic(tmp_path / "results.json", doc)
    back = results.load(tmp_path)
    assert back.path == str(tmp_path / "results.json")
    assert back.to_json() == doc
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_non_finite_numbers_become_null(tmp_path):
    doc = minimal_doc()
    doc["samples"][0]["metrics"]["ratio"] = float("inf")
    results.write_atomic(tmp_path / "results.json", doc)
    assert json.loads((tmp_path / "results.json").read_text())["samples"][0]["metrics"]["ratio"] is None


def test_new_run_dir_never_reuses_a_directory(tmp_path):
    dirs = {results.new_run_dir(tmp_path, "e1") for _ in range(3)}
    assert len(dirs) == 3 and all(d.is_dir() for d in dirs)


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"schema": "something else"}', "not a strata-lab results document"),
    ('{"schema": "strata-lab/results", "schema_version": 1}', "missing"),
    ("", "not valid JSON"),
])
def test_corrupt_files_are_refused(tmp_path, content, message):
    (tmp_path / "results.json").write_text(content)
    with pytest.raises(LabError, match=message):
        results.load(tmp_path)


def test_sample_naming_unknown_cell_is_corrupt(tmp_path):
    doc = minimal_doc()
    doc["samples"][0]["cell"] = "nope/t1"
    results.write_atomic(tmp_path / "results.json", doc)
    with pytest.raises(LabError, match="unknown cell"):
        results.load(tmp_path)


def test_newer_schema_version_is_refused(tmp_path):
    doc = minimal_doc()
    doc["schema_version"] = 99
    results.write_atomic(tmp_path / "results.json", doc)
    with pytest.raises(LabError, match="schema version 99"):
        results.load(tmp_path)


def test_cli_report_on_corrupt_file_exits_nonzero(tmp_path):
    (tmp_path / "results.json").write_text('{"schema": "strata-lab/results", "samples": [')
    r = lab("report", str(tmp_path))
    assert r.returncode == 2
    assert "corrupt results file" in r.stderr and "Traceback" not in r.stderr


def test_cli_report_on_missing_file(tmp_path):
    r = lab("report", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "no results file" in r.stderr


@pytest.mark.parametrize("value", [None, float("nan"), float("inf"), "fast", [1], True, "missing"],
                         ids=["null", "NaN", "inf", "string", "list", "bool", "missing"])
def test_ok_sample_whose_metric_is_not_a_finite_number_is_corrupt(tmp_path, value):
    """Probe s40b D5: the runner keeps a sample ok only when its metric is a finite number, so
    anything else in an ok sample is damage: a clear error, not a traceback from the statistics."""
    doc = minimal_doc()
    if value == "missing":
        del doc["samples"][0]["metrics"]["ops_per_sec"]
    else:
        doc["samples"][0]["metrics"]["ops_per_sec"] = value
    (tmp_path / "results.json").write_text(json.dumps(doc))  # NaN and Infinity as Python writes them
    with pytest.raises(LabError, match="corrupt results file .*sample 0 is ok but its 'ops_per_sec'"):
        results.load(tmp_path)
    r = lab("report", "--no-html", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "corrupt results file" in r.stderr and "not a finite number" in r.stderr


@pytest.mark.parametrize("value", [0, -5.0])
def test_ok_sample_whose_metric_is_not_positive_is_corrupt(tmp_path, value):
    """Probe h6 D4: the runner fails a sample whose metric is 0 or less (ratios need a positive
    one), but load() took it: compare then ended with a traceback (ZeroDivisionError)."""
    doc = minimal_doc()
    doc["samples"][0]["metrics"]["ops_per_sec"] = value
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_text(json.dumps(minimal_doc()))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.json").write_text(json.dumps(doc))
    with pytest.raises(LabError, match="sample 0 is ok but its 'ops_per_sec' is .*not a finite number above 0"):
        results.load(tmp_path / "b")
    r = lab("compare", str(tmp_path / "b"), str(tmp_path / "a"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "corrupt results file" in r.stderr


def test_failed_and_interrupted_samples_without_a_metric_still_load(tmp_path):
    """A failed sample has no metric to read (or a null one): the document is not corrupt."""
    doc = minimal_doc()
    doc["complete"], doc["interrupted"] = False, "SIGINT"
    failure = {"kind": "parse", "message": "no finite number", "exit_status": 0, "stderr_tail": ""}
    doc["samples"] += [
        {"index": 1, "cell": "larson/t1", "variant": "glibc", "round": 1, "warmup": False, "ok": False,
         "failure": failure},
        {"index": 2, "cell": "larson/t1", "variant": "glibc", "round": 2, "warmup": False, "ok": False,
         "failure": failure, "metrics": {"ops_per_sec": None}},
    ]
    results.write_atomic(tmp_path / "results.json", doc)
    from strata_lab import analysis

    an = analysis.analyse(results.load(tmp_path))
    assert an.cells[0].by_variant["glibc"].n == 1 and an.cells[0].by_variant["glibc"].failures == 2
