"""Suites: named sets of workload cells, one module each in strata_lab/suites/ (see lab/SUITES.md).

A cell is one command measured under every variant (allocator) of a run; a sample is one process
running one cell under one variant.  The contract below is what suite authors rely on: keep it
stable.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Callable, Mapping, Sequence

from . import paths
from .machine import parse_cpus
from .errors import LabError
from .results import check_metrics


@dataclass(frozen=True)
class Cell:
    """One workload configuration, measured once per variant per round.

    workload   -- name of the workload family, e.g. "e1-tiny"; cells of one workload that differ
                  only in `threads` are drawn as thread-scaling lines.
    threads    -- worker threads the workload runs (checked against the CPUs for oversubscription).
    argv       -- the command; the program prints one JSON object on stdout (its last line).
    metric     -- the key of the primary metric in that JSON (e.g. "ops_per_sec").
    unit       -- unit of the primary metric, for tables.
    higher_is_better -- False for times and latencies.
    params     -- descriptive parameters recorded with the results (band, pattern, ...).
    timeout_s  -- per-sample limit; a sample past it is killed and recorded as a failure.
    latency_metrics -- keys holding a per-sample P99 (a number) or raw latencies (a list): the
                  lab reports their per-round P99 (mean, median, std across rounds).
    peak_rss_metric -- key of the workload's own peak RSS in KiB, when the process the lab starts
                  is a driver and not the program under test (redis); else the lab's own wait4.
    preload    -- "env": the variant's library goes into LD_PRELOAD of the command;
                  "driver": it goes into STRATA_LAB_PRELOAD, and the command applies it itself.
    cpus       -- CPUs for this cell only (overrides --cpus), e.g. for a pinning matrix.
    env        -- extra environment variables for the command.
    name       -- the cell's id in the results; default "<workload>/t<threads>".
    """

    workload: str
    threads: int
    argv: Sequence[str]
    metric: str
    unit: str = ""
    higher_is_better: bool = True
    params: dict = field(default_factory=dict)
    timeout_s: float = 120.0
    latency_metrics: Sequence[str] = ()
    peak_rss_metric: str | None = None
    preload: str = "env"
    cpus: Sequence[int] | None = None
    env: dict = field(default_factory=dict)
    name: str | None = None

    @property
    def id(self) -> str:
        return self.name or f"{self.workload}/t{self.threads}"

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "workload": self.workload,
            "threads": self.threads,
            "argv": [str(a) for a in self.argv],
            "metric": self.metric,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "params": dict(self.params),
            "timeout_s": self.timeout_s,
            "latency_metrics": list(self.latency_metrics),
            "peak_rss_metric": self.peak_rss_metric,
            "preload": self.preload,
            "cpus": list(self.cpus) if self.cpus is not None else None,
            "env": dict(self.env),
        }


# ---- suite parameters (strata-lab run --param NAME=VALUE) -------------------------------------

@dataclass(frozen=True)
class Param:
    """One parameter of a suite, declared in the module's PARAMS list.

    name     -- what `--param NAME=VALUE` sets; lower case, [a-z][a-z0-9_]*.
    default  -- the value when nothing sets it (already parsed; JSON-serialisable).  None means
                "decided by the suite at run time": say how in `default_text`.
    help     -- one line for `strata-lab list` and for the error that lists the parameters.
    parse    -- text -> value; raises ValueError (its message says what is wrong) for bad text.
                The value must be JSON-serialisable: it is recorded in results.json.
    env      -- an environment variable still read when --param does not set the parameter
                (kept for commands that docs promised; --param wins over it).
    default_text -- how the default is shown (default: the default itself, formatted).
    """

    name: str
    default: object
    help: str
    parse: Callable[[str], object] = str
    env: str | None = None
    default_text: str | None = None

    def shown_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if isinstance(self.default, (list, tuple)):
            return ",".join(str(x) for x in self.default)
        return str(self.default)


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """A parser for a whole number in [lo, hi]."""

    def parse(text: str) -> int:
        try:
            v = int(text.strip())
        except ValueError:
            raise ValueError("not a whole number") from None
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise ValueError(f"out of range {lo if lo is not None else '…'}..{hi if hi is not None else '…'}")
        return v

    return parse


def one_of(*choices: str) -> Callable[[str], str]:
    """A parser for one word out of `choices`."""

    def parse(text: str) -> str:
        v = text.strip()
        if v not in choices:
            raise ValueError(f"choose one of {', '.join(choices)}")
        return v

    return parse


def cpu_list(text: str) -> str:
    """A CPU list such as 0 or 0-1 or 0,2, checked against the CPUs available here; kept as text."""
    try:
        parse_cpus(text)
    except LabError as e:
        raise ValueError(str(e)) from None
    return text


def list_of(item: Callable[[str], object], separators: str = ", ") -> Callable[[str], list]:
    """A parser for a non-empty list of `item`s separated by any of `separators`."""

    def parse(text: str) -> list:
        parts = re.split(f"[{re.escape(separators)}]+", text.strip())
        parts = [p for p in parts if p]
        if not parts:
            raise ValueError("empty list")
        return [item(p) for p in parts]

    return parse


def describe_params(suite_name: str, params: Sequence[Param]) -> str:
    """The parameters of a suite with their defaults, for `list` and for errors."""
    if not params:
        return f"suite {suite_name!r} takes no parameters"
    width = max(len(p.name) for p in params)
    lines = [f"parameters of suite {suite_name!r} (--param NAME=VALUE):"]
    for p in params:
        env = f"; or ${p.env}" if p.env else ""
        lines.append(f"  {p.name:<{width}}  {p.help} [default: {p.shown_default()}{env}]")
    return "\n".join(lines)


@dataclass
class SuiteContext:
    """What a suite's cells() may ask about the run it is building."""

    smoke: bool = False
    seconds: float | None = None  # --seconds: overrides the suite's per-sample duration
    threads: list[int] | None = None  # --threads: overrides the suite's thread counts
    cpus: list[int] = field(default_factory=lambda: sorted(os.sched_getaffinity(0)))
    params: dict = field(default_factory=dict)  # the suite's PARAMS, every one resolved
    out_root: Path | None = None  # --out: where the run's directory goes (default results/)
    # Which of `seconds` and `threads` the suite's cells() read: a --threads or --seconds given to
    # a suite that never reads it (programs, e4, redis, spark, ...) was ignored, and results.json
    # still recorded it as the run's setting.  run refuses it instead.
    consulted: set[str] = field(default_factory=set, repr=False, compare=False)

    def __getattribute__(self, name: str):
        if name in ("seconds", "threads"):
            object.__getattribute__(self, "consulted").add(name)
        return object.__getattribute__(self, name)

    def results_root(self) -> Path:
        """Where the run writes (--out, else results/): files a suite keeps beside its results."""
        return self.out_root if self.out_root is not None else paths.results_root()

    def bin(self, name: str) -> Path:
        """build/bin/strata-bench-<name>, or a LabError saying how to build it."""
        return paths.bench_bin(name)

    def duration(self, default: float, smoke: float = 0.05) -> float:
        if self.seconds is not None:
            return self.seconds
        return smoke if self.smoke else default

    def thread_counts(self, default: Sequence[int], smoke: Sequence[int] | None = None) -> list[int]:
        if self.threads:
            return list(self.threads)
        if self.smoke and smoke is not None:
            return list(smoke)
        return list(default)


@dataclass
class Suite:
    name: str
    module: ModuleType

    @property
    def description(self) -> str:
        return getattr(self.module, "DESCRIPTION", "").strip()

    @property
    def allocators(self) -> list[str]:
        return list(getattr(self.module, "ALLOCATORS", ["glibc", "mimalloc"]))

    @property
    def variants(self) -> dict[str, dict] | None:
        v = getattr(self.module, "VARIANTS", None)
        return dict(v) if v else None

    @property
    def baseline(self) -> str:
        return getattr(self.module, "BASELINE", (list(self.variants) if self.variants else self.allocators)[0])

    @property
    def params(self) -> list[Param]:
        return list(getattr(self.module, "PARAMS", []))

    def resolve_params(self, assignments: Sequence[str] = (),
                       environ: Mapping[str, str] | None = None) -> tuple[dict, dict]:
        """Values of every parameter from `--param NAME=VALUE` assignments, then the declared
        environment variables, then the defaults.  Returns (values, sources), sources saying
        where each value came from ("command line", "environment STRATA_...", "default").
        An unknown name or a bad value is a LabError that lists the suite's parameters."""
        environ = os.environ if environ is None else environ
        declared = {p.name: p for p in self.params}
        given: dict[str, str] = {}
        for a in assignments:
            name, eq, text = a.partition("=")
            name = name.strip()
            if not eq or not name:
                raise LabError(f"--param takes NAME=VALUE, not {a!r}\n"
                               + describe_params(self.name, self.params))
            if name not in declared:
                raise LabError(f"suite {self.name!r} has no parameter {name!r}\n"
                               + describe_params(self.name, self.params))
            if name in given:
                raise LabError(f"--param {name} is given twice")
            given[name] = text
        values, sources = {}, {}
        for p in self.params:
            if p.name in given:
                text, source = given[p.name], "command line"
            elif p.env and environ.get(p.env, "") != "":
                text, source = environ[p.env], f"environment {p.env}"
            else:
                values[p.name], sources[p.name] = p.default, "default"
                continue
            try:
                values[p.name] = p.parse(text)
            except ValueError as e:
                where = "" if source == "command line" else f" (from {p.env})"
                raise LabError(f"bad value {text!r} for parameter {p.name!r} of suite {self.name!r}"
                               f"{where}: {e}\n" + describe_params(self.name, self.params)) from None
            sources[p.name] = source
        return values, sources

    @property
    def rounds(self) -> int:
        return int(getattr(self.module, "ROUNDS", 5))

    @property
    def time_budget(self) -> float | None:
        """TIME_BUDGET: seconds a run of the suite may take with its adaptive rounds (None: the
        lab's default)."""
        v = getattr(self.module, "TIME_BUDGET", None)
        return None if v is None else float(v)

    @property
    def target_width(self) -> float | None:
        """TARGET_WIDTH: the ratio intervals' half-width (a share) that ends a cell's adaptive
        rounds (None: the lab's default)."""
        v = getattr(self.module, "TARGET_WIDTH", None)
        return None if v is None else float(v)

    @property
    def converge(self) -> list[str] | None:
        """CONVERGE: the variants whose ratios to the baseline adaptive rounds bring within the
        target; only they and the baseline run the extra rounds (None: every variant)."""
        v = getattr(self.module, "CONVERGE", None)
        return None if v is None else [str(x) for x in v]

    @property
    def warmup(self) -> int:
        return int(getattr(self.module, "WARMUP", 1))

    def cells(self, ctx: SuiteContext) -> list[Cell]:
        missing = [p.name for p in self.params if p.name not in ctx.params]
        if missing:  # a context built without `strata-lab run` (list, tests): defaults and env
            ctx = replace(ctx, params={**self.resolve_params()[0], **ctx.params})
        cells = list(self.module.cells(ctx))
        ids = [c.id for c in cells]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise LabError(f"suite {self.name!r} declares duplicate cells: {sorted(dup)}")
        return cells

    def parse(self, cell: Cell, stdout: str) -> dict:
        fn: Callable | None = getattr(self.module, "parse", None)
        return fn(cell, stdout) if fn else parse_last_json(stdout)

    def summarise(self, results: dict) -> str:
        """The suite's own summary (markdown), after the metrics it reads (SUMMARY_METRICS) are
        checked: a damaged one is a LabError naming the file, the sample and the field."""
        fn = getattr(self.module, "summarise", None)
        if not fn:
            return ""
        check_metrics(results, getattr(self.module, "SUMMARY_METRICS", ()))
        return fn(results)


def parse_last_json(stdout: str) -> dict:
    """The last line of stdout that is a JSON object (workloads may log before it)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    # A whole-stdout document (pretty-printed JSON) is accepted too.
    try:
        obj = json.loads(stdout)
    except json.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        return obj
    raise ValueError("the workload printed no JSON object on stdout")


_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def available_suites() -> list[str]:
    from . import suites as pkg

    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))


def load_suite(name: str) -> Suite:
    names = available_suites()
    if not _NAME.match(name) or name not in names:
        raise LabError(f"unknown suite {name!r}; available suites: {', '.join(names)}")
    module = importlib.import_module(f"strata_lab.suites.{name}")
    if not callable(getattr(module, "cells", None)):
        raise LabError(f"suite module strata_lab/suites/{name}.py defines no cells(ctx) function")
    names = [p.name for p in getattr(module, "PARAMS", [])]
    bad = [n for n in names if not _NAME.match(n) or names.count(n) > 1]
    if bad:
        raise LabError(f"suite module strata_lab/suites/{name}.py declares bad or repeated "
                       f"parameter names: {sorted(set(bad))}")
    return Suite(name, module)
