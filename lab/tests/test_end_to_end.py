"""A tiny real run (smoke mode, glibc + strata) through the command line, and its report."""

import json

from strata_lab import results

from .conftest import lab


def test_smoke_run_glibc_and_strata(built, tmp_path):
    r = lab("run", "--suite", "e1", "--smoke", "--alloc", "glibc,strata", "--baseline", "glibc",
            "--rounds", "2", "--warmup", "1", "--threads", "1,4", "--out", str(tmp_path), "--report")
    assert r.returncode == 0, r.stderr
    [run_dir] = list(tmp_path.iterdir())
    doc = results.load(run_dir).to_json()
    assert doc["complete"] and doc["interrupted"] is None and doc["suite"] == "e1"
    assert set(doc["variants"]) == {"glibc", "strata"}
    assert doc["variants"]["strata"]["library"].endswith("libstrata.so")
    assert doc["variants"]["glibc"]["library"] is None
    for key in ("cpu_model", "cores", "kernel", "thp_enabled", "cpu_governor", "config_hz"):
        assert key in doc["machine"]
    assert len(doc["git"]["revision"]) == 40
    # 4 bands x 2 thread counts x 2 allocators x (2 rounds + 1 warm-up)
    assert len(doc["samples"]) == 4 * 2 * 2 * 3 == doc["settings"]["planned_samples"]
    bad = [(s["cell"], s["variant"], s["failure"]) for s in doc["samples"] if not s["ok"]]
    assert not bad, bad
    for s in doc["samples"]:
        assert s["metrics"]["ops_per_sec"] > 0 and s["peak_rss_kb"] > 0
        assert s["rss_timeline"]["t_ms"] is not None
    # 4 threads on this machine's CPUs is flagged when it oversubscribes
    flagged = {c["id"]: c["oversubscribed"] for c in doc["cells"]}
    assert flagged["e1-tiny/t4"] == (4 > len(doc["settings"]["cpus"]))
    assert flagged["e1-tiny/t1"] is False
    if flagged["e1-tiny/t4"]:
        assert "oversubscribed" in r.stdout
    # the table, and where the report is
    assert "speedup vs glibc" in r.stdout and "geometric mean" in r.stdout
    assert "report.html" in r.stdout
    html = (run_dir / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 5 and "<script src" not in html
    md = (run_dir / "summary.md").read_text()
    assert "| e1-tiny/t1" in md and "geometric mean" in md
    # strata's statistics file is stored with its samples
    strata = [s for s in doc["samples"] if s["variant"] == "strata"]
    assert any(isinstance(s.get("strata_stats"), dict) for s in strata)


def test_compare_two_runs(built, tmp_path):
    for _ in range(2):
        r = lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc", "--rounds", "3",
                "--warmup", "0", "--cells", "larson/*", "--out", str(tmp_path))
        assert r.returncode == 0, r.stderr
    a, b = sorted(tmp_path.iterdir())
    assert a != b  # a second run never overwrites the first
    r = lab("compare", str(a), str(b))
    assert r.returncode == 0, r.stderr
    assert "Mann–Whitney" in r.stdout and "differences are significant" in r.stdout
    assert "too few rounds" in r.stdout  # 3 vs 3 rounds can never reach p < 0.05 two-sided


def test_report_of_a_saved_run_is_reproducible(built, tmp_path):
    r = lab("run", "--suite", "patterns", "--smoke", "--alloc", "glibc", "--rounds", "2",
            "--warmup", "0", "--cells", "pareto/*", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    [d] = list(tmp_path.iterdir())
    one = lab("report", str(d), "--no-html").stdout
    two = lab("report", str(d / "results.json"), "--no-html").stdout
    assert one == two and "pareto/t2" in one
    json.loads((d / "results.json").read_text())
