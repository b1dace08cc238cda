"""`strata-lab run` without --suite runs the default suite (what `make bench` runs)."""

from strata_lab import results

from .conftest import lab


def test_run_without_suite_runs_the_default_suite(built, tmp_path):
    r = lab("run", "--smoke", "--alloc", "glibc", "--rounds", "1", "--warmup", "0", "--cells", "larson*",
            "--out", str(tmp_path), "--no-progress")
    assert r.returncode == 0, r.stderr
    [d] = list(tmp_path.iterdir())
    doc = results.load(d).to_json()
    assert doc["suite"] == "default" and d.name.endswith("-default")
    assert doc["samples"] and all(s["ok"] for s in doc["samples"])
    # smoke runs add no adaptive rounds and no re-runs
    assert doc["settings"]["time_budget_s"] == 0 and doc["settings"]["max_reruns_per_cell"] == 0
