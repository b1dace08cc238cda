"""The data model (model.py) and the older schema versions results.py says it reads, on the
results committed under docs/results/: real documents of every version there has been."""

import json
from pathlib import Path

import pytest

from strata_lab import analysis, results, tables
from strata_lab.model import RunDoc, Sample

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted((ROOT / "docs" / "results").rglob("results.json"))


def _id(p: Path) -> str:
    return str(p.parent.relative_to(ROOT / "docs" / "results"))


def test_every_readable_version_has_a_committed_document():
    versions = {json.loads(p.read_text())["schema_version"] for p in COMMITTED}
    assert versions == set(results.READABLE_VERSIONS)


@pytest.mark.parametrize("path", COMMITTED, ids=_id)
def test_committed_documents_read_and_write_back_unchanged(path):
    raw = json.loads(path.read_text())
    doc = results.load(path)
    assert doc.schema_version == raw["schema_version"] and doc.path == str(path)
    assert len(doc.samples) == len(raw["samples"]) and all(isinstance(s, Sample) for s in doc.samples)
    assert doc.to_json() == raw
    if raw["schema_version"] == 1:
        assert "convergence" not in doc.to_json()  # version 1 had none: not made up on the way out


def _counted_by_the_schema(raw: dict, cell: str, variant: str) -> int:
    """Successful samples statistics use, by docs/results-schema.md's words for the document's own
    version: version 1, every non-warm-up sample; version 2 also leaves out samples replaced by a
    re-run and instruction runs."""
    n = 0
    for s in raw["samples"]:
        if s["cell"] != cell or s["variant"] != variant or s["warmup"] or not s["ok"]:
            continue
        if raw["schema_version"] >= 2 and (s.get("superseded_by") is not None
                                           or s.get("kind", "time") != "time"):
            continue
        n += 1
    return n


@pytest.mark.parametrize("path", COMMITTED, ids=_id)
def test_committed_documents_are_analysed_by_their_versions_rules(path):
    raw = json.loads(path.read_text())
    doc = results.load(path)
    an = analysis.analyse(doc)
    md = tables.markdown(an, doc)
    for c in an.cells:
        assert f"| {c.id} " in md
        for v in an.variants:
            assert c.by_variant[v].n == _counted_by_the_schema(raw, c.id, v)
            assert len(results.counted_metrics(raw, c.id, v)) == c.by_variant[v].n


def _sample(**kw) -> Sample:
    return Sample.from_json({"index": 0, "cell": "c", "variant": "v", "round": 0, "warmup": False,
                             "ok": True, "failure": None, "metrics": {"m": 1}, **kw})


def test_which_samples_count():
    assert _sample().counted
    assert not _sample(warmup=True, round=None).counted
    assert not _sample(superseded_by=3).counted
    assert not _sample(kind="instructions", round=None).counted
    failed = _sample(ok=False, metrics=None, failure={"kind": "crash", "message": "x"})
    assert failed.counted and not failed.ok  # counted, so reported as a failure, never averaged
    doc = RunDoc(schema=results.SCHEMA, schema_version=results.SCHEMA_VERSION, suite="s", settings={},
                 variants={"v": {}}, cells=[{"id": "c"}],
                 samples=[_sample(), _sample(index=1, warmup=True, round=None), _sample(index=2, superseded_by=0),
                          failed])
    assert [s.index for s in doc.counted("c", "v")] == [0] and doc.failed("c", "v") == [failed]


def test_unknown_keys_travel_and_absent_ones_stay_absent():
    raw = {"index": 4, "cell": "c", "variant": "v", "round": None, "warmup": True, "ok": True,
           "failure": None, "metrics": {"m": 2.5}, "wall_s": 0.5, "strata_stats": {"heaps": 1},
           "future_field": [1, 2]}
    s = Sample.from_json(raw)
    assert s.extra == {"wall_s": 0.5, "strata_stats": {"heaps": 1}, "future_field": [1, 2]}
    assert s.to_json() == raw and "noisy" not in s.to_json() and "kind" not in s.to_json()
    assert Sample.from_json({**raw, "kind": "instructions"}).to_json()["kind"] == "instructions"


def test_a_document_in_progress_has_every_top_level_key(tmp_path):
    doc = RunDoc(schema=results.SCHEMA, schema_version=results.SCHEMA_VERSION, suite="s",
                 settings={"rounds": 1}, variants={"v": {}},
                 cells=[{"id": "c", "workload": "c", "threads": 1, "metric": "m"}], samples=[_sample()])
    out = doc.to_json()
    assert out["convergence"] is None and out["complete"] is False and out["interrupted"] is None
    results.write_atomic(tmp_path / results.FILENAME, out)
    assert results.load(tmp_path).to_json() == out


def test_a_sample_missing_what_every_sample_has_is_a_corrupt_file(tmp_path):
    raw = json.loads(COMMITTED[0].read_text())
    del raw["samples"][0]["index"]
    (tmp_path / results.FILENAME).write_text(json.dumps(raw))
    from strata_lab.errors import LabError

    with pytest.raises(LabError, match="corrupt results file"):
        results.load(tmp_path)


def test_a_run_is_written_from_each_samples_text_the_same_as_from_its_json(tmp_path):
    raw = json.loads(COMMITTED[-1].read_text())
    doc = RunDoc.from_json(raw)
    doc.samples.append(_sample(index=len(doc.samples), cell=raw["cells"][0]["id"],
                               variant=next(iter(raw["variants"])), metrics={"m": float("inf")}))
    results.write_atomic(tmp_path / "a.json", doc)
    results.write_atomic(tmp_path / "b.json", doc.to_json())
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()
    back = json.loads((tmp_path / "a.json").read_text())
    assert back["samples"][-1]["metrics"]["m"] is None  # JSON has no inf
    assert back["samples"][:-1] == raw["samples"]


STORED = sorted((ROOT / "docs" / "results").rglob("*results.json*"))


@pytest.mark.parametrize("path", STORED, ids=lambda p: str(p.relative_to(ROOT / "docs" / "results")))
def test_every_stored_results_file_reads_with_what_its_summary_needs(path):
    """Every results file kept under docs/results, compressed or not, is one run `report` reads:
    probes-s35-2core/peers-one-block-results.json.gz held session 33's run (a copy of
    probes-s33-2core/peers-default-results.json.gz) before its own, and was refused as not JSON."""
    from strata_lab.suite import load_suite

    doc = results.load(path)
    spec = getattr(load_suite(doc.suite).module, "SUMMARY_METRICS", ())
    results.check_metrics(results.for_suite(doc), spec)
