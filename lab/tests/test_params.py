"""Suite parameters: `strata-lab run --param NAME=VALUE`, validated per suite, shown by `list`,
recorded in results.json, and reaching the workload."""

from __future__ import annotations

import json
import sys
import types

import pytest

from strata_lab import cli, results
from strata_lab import suite as suite_mod
from strata_lab.errors import LabError
from strata_lab.suite import Cell, Param, integer, list_of, load_suite, one_of

from .conftest import lab

# A workload that prints its arguments back as metrics: what the suite passed is what the
# sample measured.
ECHO = ("import json, sys; a = sys.argv[1:]; "
        "print(json.dumps({'threads': 1, 'size': int(a[0]), 'mode': a[1], 'ok': 1}))")


def _probe_module() -> types.ModuleType:
    m = types.ModuleType("strata_lab.suites.paramprobe")
    m.DESCRIPTION = "test suite: echoes its parameters"
    m.VARIANTS = {"only": {"args": []}}
    m.ROUNDS = 1
    m.WARMUP = 0
    m.PARAMS = [
        Param("size", 64, "object size in bytes", parse=integer(1, 4096), env="STRATA_PROBE_SIZE"),
        Param("modes", ["a"], "modes, comma-separated", parse=list_of(one_of("a", "b", "c"))),
    ]

    def cells(ctx):
        return [Cell(workload=f"probe-{mode}", threads=1, metric="size",
                     argv=[sys.executable, "-c", ECHO, ctx.params["size"], mode])
                for mode in ctx.params["modes"]]

    m.cells = cells
    return m


@pytest.fixture
def probe(monkeypatch):
    """The probe suite, visible to load_suite() in this process only."""
    module = _probe_module()
    monkeypatch.setitem(sys.modules, module.__name__, module)
    real = suite_mod.available_suites
    monkeypatch.setattr(suite_mod, "available_suites", lambda: sorted(real() + ["paramprobe"]))
    monkeypatch.delenv("STRATA_PROBE_SIZE", raising=False)
    return load_suite("paramprobe")


def test_defaults_environment_and_command_line_in_that_order(probe):
    assert probe.resolve_params([], environ={}) == ({"size": 64, "modes": ["a"]},
                                                   {"size": "default", "modes": "default"})
    values, sources = probe.resolve_params([], environ={"STRATA_PROBE_SIZE": "128"})
    assert values["size"] == 128 and sources["size"] == "environment STRATA_PROBE_SIZE"
    values, sources = probe.resolve_params(["size=256", "modes=b,c"], environ={"STRATA_PROBE_SIZE": "128"})
    assert values == {"size": 256, "modes": ["b", "c"]}
    assert sources == {"size": "command line", "modes": "command line"}


@pytest.mark.parametrize("assignment, needles", [
    (["colour=red"], ["suite 'paramprobe' has no parameter 'colour'"]),
    (["size=big"], ["bad value 'big' for parameter 'size'", "not a whole number"]),
    (["size=0"], ["bad value '0' for parameter 'size'", "out of range 1..4096"]),
    (["modes=a,z"], ["bad value 'a,z' for parameter 'modes'", "choose one of a, b, c"]),
    (["modes="], ["bad value '' for parameter 'modes'", "empty list"]),
    (["size"], ["--param takes NAME=VALUE, not 'size'"]),
    (["size=1", "size=2"], ["--param size is given twice"]),
])
def test_bad_parameters_are_clear_errors_listing_the_parameters(probe, assignment, needles):
    with pytest.raises(LabError) as e:
        probe.resolve_params(assignment, environ={})
    text = str(e.value)
    for n in needles:
        assert n in text
    if "twice" not in text:  # the listing: every parameter, its help and its default
        assert "parameters of suite 'paramprobe' (--param NAME=VALUE):" in text
        assert "object size in bytes [default: 64; or $STRATA_PROBE_SIZE]" in text
        assert "modes, comma-separated [default: a]" in text


def test_bad_environment_value_names_the_variable(probe):
    with pytest.raises(LabError, match=r"bad value 'x' for parameter 'size' of suite 'paramprobe' "
                                       r"\(from STRATA_PROBE_SIZE\): not a whole number"):
        probe.resolve_params([], environ={"STRATA_PROBE_SIZE": "x"})


def test_values_reach_the_workload_and_results_json(probe, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STRATA_PROBE_SIZE", "100")  # overridden by --param below
    rc = cli.main(["run", "--suite", "paramprobe", "--param", "size=300", "--param", "modes=b,c",
                   "--out", str(tmp_path), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    assert "parameters: size=300 (command line), modes=b,c (command line)" in capsys.readouterr().err
    [run] = list(tmp_path.iterdir())
    doc = results.load(run).to_json()
    assert doc["settings"]["params"] == {"size": 300, "modes": ["b", "c"]}
    assert doc["settings"]["params_source"] == {"size": "command line", "modes": "command line"}
    assert [c["id"] for c in doc["cells"]] == ["probe-b/t1", "probe-c/t1"]
    measured = {s["cell"]: s["metrics"] for s in doc["samples"]}
    assert measured == {"probe-b/t1": {"threads": 1, "size": 300, "mode": "b", "ok": 1},
                        "probe-c/t1": {"threads": 1, "size": 300, "mode": "c", "ok": 1}}


def test_bad_parameter_on_the_command_line_exits_2_and_writes_nothing(tmp_path):
    r = lab("run", "--suite", "e5", "--param", "colour=red", "--alloc", "glibc", "--out", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "suite 'e5' has no parameter 'colour'" in r.stderr
    for name in ("servers", "server_cpus", "client_cpus", "client_threads", "connections"):
        assert f"\n  {name} " in r.stderr
    assert "[default: 100; or $STRATA_E5_CONNECTIONS]" in r.stderr
    assert list(tmp_path.iterdir()) == []
    r = lab("run", "--suite", "patterns", "--param", "x=1", "--alloc", "glibc")
    assert r.returncode == 2 and "suite 'patterns' takes no parameters" in r.stderr


def test_list_shows_each_suites_parameters():
    r = lab("list", "suites")
    assert r.returncode == 0, r.stderr
    assert "--param NAME=VALUE" in r.stdout
    for needle in ("connections (100)", "backend (auto)", "client_threads (auto"):
        assert needle in r.stdout, needle


def test_every_suites_parameters_are_well_formed():
    """Defaults are JSON (they go into results.json) and survive the suite's own parser."""
    for name in suite_mod.available_suites():
        s = load_suite(name)
        values, _ = s.resolve_params([], environ={})
        json.dumps(values)
        for p in s.params:
            assert p.help and p.shown_default()
            if p.default is not None and p.default_text is None:
                assert p.parse(p.shown_default()) == p.default, (name, p.name)


@pytest.mark.parametrize("value", ["inf", "1e400", "nan", "0.5"])
def test_e2_gpu_cap_that_is_not_a_finite_factor_is_refused(value):
    """--param cap=inf (or 1e400, which float() reads as inf) was accepted, and
    strata-bench-e2-gpu refused --cap-factor inf in every sample: a run of failed samples."""
    with pytest.raises(LabError) as e:
        load_suite("e2_gpu").resolve_params([f"cap={value}"], environ={})
    assert f"bad value '{value}' for parameter 'cap' of suite 'e2_gpu'" in str(e.value)


def test_e2_gpu_cap_basis_without_a_cap_is_refused(tmp_path):
    """--param cap_basis=serial without --param cap ran uncapped, and results.json recorded
    cap_basis 'serial' for a run that had no cap."""
    r = lab("run", "--suite", "e2_gpu", "--smoke", "--param", "backend=sim", "--param",
            "cap_basis=serial", "--alloc", "pool", "--no-progress", "--out", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert "--param cap_basis=serial needs --param cap" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []
