"""The suites' own summaries read the workloads' metrics beyond the cell's one (E2's
med['baseline_ms'], E4's comparisons, E5's server threads): each suite declares them
(SUMMARY_METRICS) and they are checked before its summary is drawn, so a sample without one, or
holding a string, true, NaN or 10**400 there, is one line naming the file, the sample and the
field (status 2), never a traceback (KeyError, OverflowError, AttributeError) nor a summary that
left the value out or read "false" as true without a word."""

import json
import math

import pytest

from strata_lab import cli
from strata_lab.suite import load_suite

from .test_analysis import doc_with

COMPARISON = {"a": "general", "b": "object_pool", "significant": True, "ratio_b_over_a": 0.6}
POLICY = {"pages_per_node": {"0": 64}, "kernel_policy": "default", "placement_matches_policy": True}
THREAD = {"tid": 1, "name": "srv", "cpu": 0.9, "vol_per_s": 20.0, "invol_per_s": 1.0}

# suite -> (its cell, the metrics of a good sample, the variants)
SUITES = {
    "e2": ({"workload": "e2-frag", "metric": "probe_ms"},
           {"probe_ms": 2.0, "baseline_ms": 1.0, "fragmented_ms": 1.5, "longterm_ms": 1.7,
            "fragmented_change_pct": 50.0, "longterm_change_pct": 70.0, "rss_baseline_kb": 1024,
            "rss_fragmented_kb": 2048, "rss_longterm_kb": 4096}, ("base", "x")),
    "e2_gpu": ({"workload": "e2-gpu", "metric": "long_term_ms"},
               {"long_term_ms": 3.0, "baseline_ms": 1.0, "fragmented_ms": 2.0, "fragmented_change_pct": 100.0,
                "long_term_change_pct": 200.0, "long_term_peak_reserved_bytes": 1 << 20,
                "long_term_live_peak_bytes": 1 << 19, "fragment_ms": 4.0}, ("base", "x")),
    "e3": ({"workload": "e3-cpu", "metric": "lc_launch_p99_ms"},
           {"lc_launch_p99_ms": 0.5, "be_throughput_kps": 10.0, "lc_events_over_1ms": 0,
            "be_events_over_1ms": 3, "lc_kernels": 50, "be_kernels": 400, "foreign_cpu_share": 0.01},
           ("native", "policy")),
    "e4": ({"workload": "e4-pool_vs_general", "metric": "pool_vs_general.cycle/general"},
           {"pool_vs_general.cycle/general": 3.0,
            "groups": {"pool_vs_general": {"comparisons": [COMPARISON]}, "numa": {"policies": {"local": POLICY}}}},
           ("base", "x")),
    "e5": ({"workload": "e5-httpd", "metric": "requests_per_sec"},
           {"requests_per_sec": 1000.0, "latency_p50_ms": 0.3, "latency_p99_ms": 1.1, "errors": 0,
            "server_cpu_cores": 0.9, "server_peak_rss_kb": 4000, "server_threads": [THREAD]},
           ("base", "x")),
}

E2 = ("baseline_ms", "fragmented_ms", "longterm_ms", "fragmented_change_pct", "longterm_change_pct",
      "rss_baseline_kb", "rss_fragmented_kb", "rss_longterm_kb")
E2_GPU = ("baseline_ms", "fragmented_ms", "fragmented_change_pct", "long_term_change_pct",
          "long_term_peak_reserved_bytes", "long_term_live_peak_bytes", "fragment_ms")
E5 = ("latency_p50_ms", "latency_p99_ms", "errors", "server_cpu_cores", "server_peak_rss_kb")
# (suite, the field as a path into the metrics, where absent and null are damage too: the summary
# needs a value there, not "–")
FIELDS = ([("e2", (k,), True) for k in E2] + [("e2_gpu", (k,), False) for k in E2_GPU]
          + [("e3", (k,), True) for k in SUITES["e3"][1] if k not in ("lc_launch_p99_ms", "foreign_cpu_share")]
          + [("e3", ("foreign_cpu_share",), False)]
          + [("e4", ("groups",), True), ("e4", ("groups", "pool_vs_general"), False)]
          + [("e4", ("groups", "pool_vs_general", "comparisons", 0, k), True) for k in COMPARISON]
          + [("e4", ("groups", "numa", "policies", "local"), False)]
          + [("e4", ("groups", "numa", "policies", "local", k), True) for k in ("kernel_policy",)]
          + [("e5", (k,), False) for k in E5] + [("e5", ("server_threads",), False)]
          + [("e5", ("server_threads", 0, k), True) for k in ("cpu", "vol_per_s", "invol_per_s")])
KINDS = {"a string": "7", "true": True, "NaN": math.nan, "10**400": 10 ** 400, "a list": [1], "null": None}
# what is no damage where the field is of that kind (one printed as it is takes any value)
VALID = {"a": {"a string"}, "b": {"a string"}, "significant": {"true"}, "server_threads": {"a list"},
         "kernel_policy": set(KINDS)}


def cases():
    for suite, path, needed in FIELDS:
        kinds = (["missing"] if needed else []) + \
                [k for k in KINDS if (needed or k != "null") and k not in VALID.get(path[-1], ())]
        for kind in kinds:
            yield pytest.param(suite, path, kind, id=f"{suite}-{'.'.join(map(str, path))}-{kind}")


def suite_doc(suite: str) -> dict:
    cell, metrics, (base, other) = SUITES[suite]
    cell = {"id": "c", "threads": 1, "unit": "ms", "higher_is_better": True, **cell}
    d = doc_with({("c", "base"): [1, 1, 1], ("c", "x"): [1, 1, 1]}, cells=[cell])
    d["suite"], d["variants"], d["settings"]["baseline"] = suite, {base: {}, other: {}}, base
    d["samples"] = [s for s in d["samples"] if not s["warmup"]]
    for i, s in enumerate(d["samples"]):
        s.update(index=i, variant=base if s["variant"] == "base" else other,
                 metrics=json.loads(json.dumps(metrics)))
    return d


def damaged(doc: dict, path: tuple, kind: str) -> dict:
    holder = doc["samples"][0]["metrics"]
    for k in path[:-1]:
        holder = holder[k]
    if kind == "missing":
        del holder[path[-1]]
    else:
        holder[path[-1]] = KINDS[kind]
    return doc


def shown(path: tuple) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path)


@pytest.mark.parametrize("suite", SUITES)
def test_each_suite_summarises_the_undamaged_document(tmp_path, capsys, suite):
    (tmp_path / "results.json").write_text(json.dumps(suite_doc(suite)))
    assert cli.main(["report", str(tmp_path), "--no-html"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("suite, path, kind", list(cases()))
def test_damage_in_a_field_a_summary_reads_is_refused_by_name(tmp_path, capsys, suite, path, kind):
    (tmp_path / "results.json").write_text(json.dumps(damaged(suite_doc(suite), path, kind)))
    assert cli.main(["report", str(tmp_path), "--no-html"]) == 2
    out, err = capsys.readouterr()
    assert f"strata-lab: error: corrupt results file {tmp_path / 'results.json'}: " \
           f"samples[0].metrics{shown(path)} " in err, err
    assert "Traceback" not in err and out == ""  # one line, before any table


@pytest.mark.parametrize("kind", ["null", "missing"])
def test_a_device_metric_the_workload_did_not_give_is_shown_as_a_dash(kind):
    """E2 on device resources shows "–" for a value a sample lacks (the lab writes a non-finite
    one as null): no damage."""
    doc = suite_doc("e2_gpu")
    for i in range(len(doc["samples"])):
        doc["samples"][i] = damaged({"samples": [doc["samples"][i]]}, ("baseline_ms",), kind)["samples"][0]
    md = load_suite("e2_gpu").summarise(doc)
    assert "| 1 | base | – | 2.00 (+100.0 %) |" in md, md


@pytest.mark.parametrize("suite, png", [("e3", "e3-rounds.png"), ("e5", "e5-matrix.png")])
@pytest.mark.parametrize("html", [False, True], ids=["no-html", "html"])
def test_a_summary_plot_that_cannot_be_written_leaves_the_report_without_it(tmp_path, capsys, suite, png, html):
    """E3's and E5's summaries draw a plot beside results.json.  `report` (--no-html too) of a run
    kept where the reader may not write (a read-only mount, another user's results: here the
    plot's name taken by a directory) ended in an OSError traceback; now the summary comes without
    the plot."""
    (tmp_path / "results.json").write_text(json.dumps(suite_doc(suite)))
    (tmp_path / png).mkdir()
    args = ["report", str(tmp_path)] + ([] if html else ["--no-html"])
    assert cli.main(args) == 0, capsys.readouterr().err
    assert "Traceback" not in capsys.readouterr().err
    if html:
        assert f"({png})" not in (tmp_path / "summary.md").read_text()
    (tmp_path / png).rmdir()
    assert cli.main(args) == 0
    assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"
    if html:
        assert f"({png})" in (tmp_path / "summary.md").read_text()
