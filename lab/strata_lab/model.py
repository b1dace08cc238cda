"""The lab's data model, after pyperf's Run / Benchmark / BenchmarkSuite: a results.json is one
RunDoc (a run of a suite: its settings, machine, variants and cells) holding Samples (one process
each, in the order they ran).

`from_json` reads a document of any version results.py reads; `to_json` gives back what it read
(keys this model does not name travel in `extra`), so a document loaded and written again is the
same document.  Which samples statistics use is decided here, once: `Sample.counted`, and
`RunDoc.counted` for a cell and variant's counted, successful samples.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field, fields

def finite(obj):
    """JSON has no NaN/inf: they are stored as null rather than written as an invalid document."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def dumps(obj) -> str:
    return json.dumps(finite(obj), separators=(",", ":"), allow_nan=False)


# Keys written only when set: a sample without them reads back the same.
_OPTIONAL = ("metrics", "noisy", "rerun_of", "superseded_by", "peak_rss_kb", "minor_faults",
             "steal_frac", "other_cpu_frac", "instructions", "instructions_per_op", "rss_timeline")


@dataclass(frozen=True)
class Sample:
    """One process: one cell under one variant in one round (docs/results-schema.md, samples[])."""

    index: int
    cell: str
    variant: str
    round: int | None
    warmup: bool = False
    kind: str = "time"                   # "time", or "instructions" (a cachegrind run)
    ok: bool = False
    failure: dict | None = None          # None when ok
    metrics: dict | None = None          # the workload's JSON; only when ok
    noisy: bool | None = None
    rerun_of: int | None = None
    superseded_by: int | None = None
    peak_rss_kb: int | None = None
    minor_faults: int | None = None
    steal_frac: float | None = None
    other_cpu_frac: float | None = None
    instructions: int | None = None
    instructions_per_op: float | None = None
    rss_timeline: dict | None = None
    extra: dict = field(default_factory=dict)  # every other key (wall_s, argv, strata_stats, ...)

    @property
    def timed(self) -> bool:
        return self.kind == "time"

    @property
    def counted(self) -> bool:
        """Whether statistics use it (when it succeeded): a timed sample of a counted round, not
        replaced by a re-run.  Warm-ups, replaced samples and instruction runs are kept for the
        record only."""
        return self.timed and not self.warmup and self.superseded_by is None

    def metric(self, key: str):
        return (self.metrics or {}).get(key)

    @property
    def lost(self) -> float:
        """The share of its CPUs the sample lost: to steal and to other processes."""
        return (self.steal_frac or 0.0) + (self.other_cpu_frac or 0.0)

    @classmethod
    def from_json(cls, d: dict) -> "Sample":
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {k: d[k] for k in names if k in d}
        known.setdefault("kind", "time")
        known.setdefault("warmup", False)
        return cls(**known, extra={k: v for k, v in d.items() if k not in names})

    def to_json(self) -> dict:
        out = {"index": self.index, "cell": self.cell, "variant": self.variant,
               "round": self.round, "warmup": self.warmup}
        if self.kind != "time":
            out["kind"] = self.kind
        out["ok"] = self.ok
        out["failure"] = self.failure
        for k in _OPTIONAL:
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        out.update(self.extra)
        return out

    @functools.cached_property
    def json_text(self) -> str:
        """The sample as results.json holds it.  A sample never changes, so it is encoded once:
        the runner rewrites the whole document after every sample, and encoding every sample
        again made that write grow with the run (0.2-0.4 s per sample at 1300 samples)."""
        return dumps(self.to_json())


# Top-level keys of a results document, in the order the runner writes them.
_TOP = ("schema", "schema_version", "run_id", "suite", "description", "created", "finished",
        "complete", "interrupted", "command", "lab_version", "git", "machine", "settings",
        "variants", "cells", "samples", "convergence")


@dataclass
class RunDoc:
    """One run of a suite (docs/results-schema.md, top level).  Mutable while the runner fills it
    in; its samples are not: a sample replaced by a re-run is replaced in `samples`."""

    schema: str
    schema_version: int
    suite: str
    settings: dict
    variants: dict               # name -> what results.json records about it; table column order
    cells: list                  # the suites' Cell.to_json() plus "oversubscribed"
    samples: list[Sample]
    complete: bool = False
    run_id: str = ""
    description: str = ""
    created: str | None = None
    finished: str | None = None
    interrupted: str | None = None
    command: list = field(default_factory=list)
    lab_version: str | None = None
    git: dict = field(default_factory=dict)
    machine: dict = field(default_factory=dict)
    convergence: dict | None = None
    extra: dict = field(default_factory=dict)
    path: str | None = None      # where it was loaded from (not part of the document)
    read_keys: tuple | None = field(default=None, repr=False, compare=False)  # the loaded document's

    @property
    def baseline(self) -> str | None:
        return self.settings.get("baseline")

    def cell(self, cell_id: str) -> dict:
        return next(c for c in self.cells if c["id"] == cell_id)

    def of(self, cell_id: str, variant: str) -> list[Sample]:
        """Every sample of a cell and variant, in run order."""
        return [s for s in self.samples if s.cell == cell_id and s.variant == variant]

    def counted(self, cell_id: str, variant: str) -> list[Sample]:
        """The samples statistics use: counted (Sample.counted) and successful."""
        return [s for s in self.of(cell_id, variant) if s.counted and s.ok]

    def failed(self, cell_id: str, variant: str) -> list[Sample]:
        """Counted samples that failed: reported as failures, never averaged."""
        return [s for s in self.of(cell_id, variant) if s.counted and not s.ok]

    @classmethod
    def from_json(cls, d: dict, path: str | None = None) -> "RunDoc":
        names = {f.name for f in fields(cls)} - {"extra", "path", "samples"}
        known = {k: d[k] for k in names if k in d}
        extra = {k: v for k, v in d.items() if k not in names and k not in ("samples", "_path")}
        return cls(**known, samples=[Sample.from_json(s) for s in d["samples"]], extra=extra,
                   path=path, read_keys=tuple(k for k in d if k != "_path"))

    def to_json(self, samples: bool = True) -> dict:
        """The document; one that was read gives back its own keys (an older version's lack of
        `convergence`, a test's minimal document), plus any the lab has set since.  samples=False:
        `samples` holds None (json_text fills it in)."""
        defaults = {f.name: (f.default_factory() if callable(f.default_factory) else f.default)
                    for f in fields(self)}
        out = {}
        for k in _TOP:
            if k == "samples":
                v = [s.to_json() for s in self.samples] if samples else None
            else:
                v = getattr(self, k)
            if self.read_keys is None or k in self.read_keys or k not in defaults or v != defaults[k]:
                out[k] = v
        out.update(self.extra)
        return out

    def json_text(self) -> str:
        """The document as results.json holds it, each sample's text encoded once."""
        parts = []
        for k, v in self.to_json(samples=False).items():
            text = "[" + ",".join(s.json_text for s in self.samples) + "]" if k == "samples" else dumps(v)
            parts.append(json.dumps(k) + ":" + text)
        return "{" + ",".join(parts) + "}"
