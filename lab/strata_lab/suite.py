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
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable, Sequence

from . import paths
from .errors import LabError


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


@dataclass
class SuiteContext:
    """What a suite's cells() may ask about the run it is building."""

    smoke: bool = False
    seconds: float | None = None  # --seconds: overrides the suite's per-sample duration
    threads: list[int] | None = None  # --threads: overrides the suite's thread counts
    cpus: list[int] = field(default_factory=lambda: sorted(os.sched_getaffinity(0)))

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
    def rounds(self) -> int:
        return int(getattr(self.module, "ROUNDS", 5))

    @property
    def warmup(self) -> int:
        return int(getattr(self.module, "WARMUP", 1))

    def cells(self, ctx: SuiteContext) -> list[Cell]:
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
        fn = getattr(self.module, "summarise", None)
        return fn(results) if fn else ""


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
    return Suite(name, module)
