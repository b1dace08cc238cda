"""results.json: creation of a run directory, atomic writes, loading with validation.

The schema is documented in docs/results-schema.md; bump SCHEMA_VERSION on any incompatible
change and keep load() reading the old versions it can.  It reads every version there has been:
1 (before re-runs, instruction samples and `convergence`; its samples are all timed and none is
replaced, so the one rule of model.Sample.counted reads it unchanged) and 2.  The documents under
docs/results/ of both versions are read in lab/tests/test_model.py.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
import time
from pathlib import Path

from .errors import LabError
from .model import RunDoc, Sample, dumps
from .text import printable

SCHEMA = "strata-lab/results"
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
FILENAME = "results.json"


def make_dir(path: Path, what: str, hint: str = "") -> None:
    """mkdir -p, or a LabError "<what> <path>: <why><hint>" (a file of that name, a directory it
    may not write to) instead of a traceback."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        why = "a file of that name exists" if isinstance(e, FileExistsError) else e.strerror
        raise LabError(f"{what} {path}: {why}{hint}") from None


def new_run_dir(parent: Path, suite: str) -> Path:
    """A fresh directory results/<date>-<time>-<suite>[-N]: never an existing one."""
    make_dir(parent, "cannot create the results directory",
             " (--out is the directory that holds the run directories)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        d = parent / (f"{stamp}-{suite}" + (f"-{n}" if n else ""))
        try:
            d.mkdir()
            return d
        except FileExistsError:
            continue
        except OSError as e:
            raise LabError(f"cannot create a run directory under {parent}: {e.strerror}") from None
    raise LabError(f"could not create a new run directory under {parent}")


def write_text_atomic(path: Path, text: str | bytes, prefix: str) -> None:
    """Write text (or bytes: a plot) to a temporary file (prefix + random + .tmp) in path's
    directory, fsync, then rename it over path: a reader (or a run killed mid-write) sees the old
    file or the new one, never half, and the temporary file goes whatever stops the write (an
    error, Ctrl-C)."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; results and reports are meant to be read
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_plot(fig, path: Path, dpi: int) -> bool:
    """A suite summary's matplotlib figure as a PNG beside the results, whole or not at all; False
    when it cannot be written (`report` of a run kept on a read-only mount or in another user's
    directory ended in a traceback, --no-html too): the summary goes without its plot."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    try:
        write_text_atomic(Path(path), buf.getvalue(), "." + Path(path).name + "-")
    except OSError:
        return False
    return True


def write_atomic(path: Path, doc: dict | RunDoc) -> None:
    """The results document, written atomically (write_text_atomic).  Non-finite numbers are
    written as null."""
    text = doc.json_text() if isinstance(doc, RunDoc) else dumps(doc)
    write_text_atomic(Path(path), text + "\n", ".results-")


def counted_metrics(doc: dict, cell_id: str, variant: str) -> list[dict]:
    """The metrics of one cell and variant's counted, successful samples (RunDoc.counted), from
    the document as a suite's summarise() gets it: what it takes medians of."""
    mine = (Sample.from_json(s) for s in doc.get("samples", [])
            if s["cell"] == cell_id and s["variant"] == variant)
    return [s.metrics for s in mine if s.counted and s.ok]


def resolve_path(arg: str | Path) -> Path:
    """A results file, or the one in a run directory: results.json, else results.json.gz (how
    docs/results keeps them)."""
    p = Path(arg)
    if p.is_dir():
        p = p / FILENAME
        if not p.exists() and p.with_name(FILENAME + ".gz").is_file():
            p = p.with_name(FILENAME + ".gz")
    return p


def beside(results_path: str | Path, name: str) -> Path:
    """Where a file made from a results file goes (summary.md, report.html, trace-stats.png): next to
    it, named `name` beside a results.json, `<stem>.<name>` beside any other name (two results
    files in one folder would otherwise write over each other's)."""
    p = Path(results_path)
    stored = p.name.removesuffix(".gz")  # results.json.gz is results.json, compressed
    return p.parent / (name if stored == FILENAME else f"{Path(stored).stem}.{name}")


def finite_number(v) -> bool:
    """A JSON number that is a real measurement: not a boolean, NaN or infinite, nor an integer
    past any float (1 followed by 400 zeros: math.isfinite raised OverflowError)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


# What the readers (analysis, tables, report, compare, the suites' summaries) take from a
# document, checked once when it is loaded: (what it must be, the test).  A hand-edited or foreign
# file ended `report` with a traceback (a failure written as a string, a string peak_rss_kb or
# settings.rounds, a null suite, a cell without its metric) or drew a wrong table without a word
# (a negative target_width: no cell ever within it; "ok": "false" read as a success).
def or_null(kind: tuple) -> tuple:
    return kind[0] + ", or null", lambda v: v is None or kind[1](v)


STRING = "a string", lambda v: isinstance(v, str)
BOOL = "true or false", lambda v: isinstance(v, bool)
OBJECT = "an object", lambda v: isinstance(v, dict)
LIST = "a list", lambda v: isinstance(v, list)
COUNT = "an integer, 0 or more", lambda v: type(v) is int and v >= 0
POSITIVE = "an integer above 0", lambda v: type(v) is int and v > 0
NUMBER = "a finite number", finite_number
AMOUNT = "a finite number, 0 or more", lambda v: finite_number(v) and v >= 0
SHARE = "a number above 0 and below 1", lambda v: finite_number(v) and 0 < v < 1
STRINGS = "a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)
COUNTS = "a list of integers, 0 or more", lambda v: isinstance(v, list) and all(COUNT[1](x) for x in v)
NUMBERS = "a list of finite numbers", lambda v: isinstance(v, list) and all(finite_number(x) for x in v)
LATENCY = ("a finite number, a list of them, or null",
           lambda v: v is None or finite_number(v) or NUMBERS[1](v))

# (field, kind, required): an absent field the readers have a default for is no damage.  A fourth
# element, a spec of the same form, is what each element of a list field (or each value of an
# object field) must be: an object with those fields.
TOP_FIELDS = (("suite", STRING, True), ("complete", BOOL, True), ("run_id", STRING, False),
              ("description", STRING, False), ("interrupted", or_null(STRING), False),
              ("git", OBJECT, False), ("convergence", or_null(OBJECT), False))
GIT_FIELDS = (("revision", STRING, False),)
SETTINGS_FIELDS = (("rounds", COUNT, False), ("warmup", or_null(COUNT), False),
                   ("planned_samples", COUNT, False), ("cpus", or_null(COUNTS), False),
                   ("baseline", or_null(STRING), False), ("target_width", or_null(SHARE), False),
                   ("noise_threshold", or_null(("a number above 0, at most 1",
                                                 lambda v: finite_number(v) and 0 < v <= 1)), False),
                   ("converge", or_null(STRINGS), False), ("params", or_null(OBJECT), False))
CELL_FIELDS = (("metric", STRING, True), ("workload", STRING, True), ("threads", POSITIVE, True),
               ("unit", STRING, False), ("latency_metrics", or_null(STRINGS), False),
               ("oversubscribed", BOOL, False), ("cpus", or_null(COUNTS), False),
               ("argv", or_null(LIST), False), ("env", or_null(OBJECT), False))
SAMPLE_FIELDS = (("cell", STRING, True), ("variant", STRING, True), ("index", COUNT, True),
                 ("round", or_null(COUNT), True), ("warmup", BOOL, False), ("ok", BOOL, True),
                 ("kind", ("\"time\" or \"instructions\"", lambda v: v in ("time", "instructions")), False),
                 ("failure", or_null(OBJECT), False), ("metrics", or_null(OBJECT), False),
                 ("noisy", or_null(BOOL), False), ("rerun_of", or_null(COUNT), False),
                 ("superseded_by", or_null(COUNT), False), ("peak_rss_kb", or_null(AMOUNT), False),
                 ("minor_faults", or_null(AMOUNT), False), ("steal_frac", or_null(AMOUNT), False),
                 ("other_cpu_frac", or_null(AMOUNT), False), ("instructions", or_null(COUNT), False),
                 ("instructions_per_op", or_null(AMOUNT), False), ("rss_timeline", or_null(OBJECT), False))
FAILURE_FIELDS = (("kind", STRING, True), ("message", STRING, True))
TIMELINE_FIELDS = (("t_ms", NUMBERS, False), ("rss_kb", NUMBERS, False))
CONVERGED_FIELDS = (("reason", or_null(STRING), False), ("rounds_needed", or_null(COUNT), False))


def _check(p: Path, where: str, obj: dict, spec: tuple) -> None:
    """Each field of `spec` in `obj` (the object at `where`) what it must be, or a LabError naming
    the file and the field."""
    for key, (what, test), required, *each in spec:
        name = f"{where}.{key}" if where else key
        if key not in obj:
            if required:
                raise LabError(f"corrupt results file {p}: {name} is missing (it must be {what})")
        elif not test(obj[key]):
            raise LabError(f"corrupt results file {p}: {name} must be {what}, not {_shown(obj[key])}")
        elif each and obj[key] is not None:
            items = obj[key].items() if isinstance(obj[key], dict) else enumerate(obj[key])
            for k, item in items:
                at = f"{name}[{k}]" if isinstance(k, int) else f"{name}.{printable(k)}"
                if not isinstance(item, dict):
                    raise LabError(f"corrupt results file {p}: {at} must be an object, not {_shown(item)}")
                _check(p, at, item, each[0])


def _shown(v) -> str:
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:39] + "…"


def _check_fields(p: Path, doc: dict) -> None:
    """Every field the readers use (docs/results-schema.md) of the type they take."""
    _check(p, "", doc, TOP_FIELDS)
    _check(p, "git", doc.get("git") or {}, GIT_FIELDS)
    _check(p, "settings", doc["settings"], SETTINGS_FIELDS)
    for name, info in doc["variants"].items():
        if not isinstance(info, dict):
            raise LabError(f"corrupt results file {p}: variants.{printable(name)} must be an object, "
                           f"not {_shown(info)}")
    for i, c in enumerate(doc["cells"]):
        _check(p, f"cells[{i}]", c, CELL_FIELDS)
    latency = {c["id"]: c.get("latency_metrics") or () for c in doc["cells"]}
    for i, s in enumerate(doc["samples"]):
        if not isinstance(s, dict):
            raise LabError(f"corrupt results file {p}: samples[{i}] must be an object, not {_shown(s)}")
        _check(p, f"samples[{i}]", s, SAMPLE_FIELDS)
        if s.get("failure") is not None:
            _check(p, f"samples[{i}].failure", s["failure"], FAILURE_FIELDS)
        if s.get("rss_timeline") is not None:
            tl = s["rss_timeline"]
            _check(p, f"samples[{i}].rss_timeline", tl, TIMELINE_FIELDS)
            if len(tl.get("t_ms") or ()) != len(tl.get("rss_kb") or ()):
                raise LabError(f"corrupt results file {p}: samples[{i}].rss_timeline has "
                               f"{len(tl.get('t_ms') or ())} times and {len(tl.get('rss_kb') or ())} sizes")
        if s["ok"] and isinstance(s.get("metrics"), dict):
            _check(p, f"samples[{i}].metrics", s["metrics"],
                   tuple((k, LATENCY, False) for k in latency.get(s["cell"], ())))
    conv = doc.get("convergence") or {}
    _check(p, "convergence", conv, (("cells", or_null(OBJECT), False),))
    for cid, rec in (conv.get("cells") or {}).items():
        if not isinstance(rec, dict):
            raise LabError(f"corrupt results file {p}: convergence.cells.{printable(cid)} must be an "
                           f"object, not {_shown(rec)}")
        _check(p, f"convergence.cells.{printable(cid)}", rec, CONVERGED_FIELDS)


REQUIRED = ("schema", "schema_version", "suite", "complete", "settings", "variants", "cells", "samples")


def load(arg: str | Path) -> RunDoc:
    """Load and validate a results.json (or a run directory holding one)."""
    p = resolve_path(arg)
    if not p.is_file():
        raise LabError(f"no results file at {p} (give a run directory or its results.json)")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise LabError(f"cannot read {p}: {e.strerror}") from None
    if data[:2] == b"\x1f\x8b":  # gzip's magic: docs/results keeps runs as results.json.gz
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise LabError(f"corrupt results file {p}: not a whole gzip file ({e})") from None
    try:
        doc = json.loads(data.decode())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LabError(f"corrupt results file {p}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise LabError(f"corrupt results file {p}: not a strata-lab results document")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise LabError(f"corrupt results file {p}: missing {', '.join(missing)}")
    # type(): true and 1.0 equal 1, and are no version this lab ever wrote.
    if type(doc["schema_version"]) is not int or doc["schema_version"] not in READABLE_VERSIONS:
        # !r: a version written as the string "2" read "has schema version 2; this lab reads
        # versions 1, 2".
        raise LabError(f"results file {p} has schema version {doc['schema_version']!r}; this lab "
                       f"reads versions {', '.join(map(str, READABLE_VERSIONS))}")
    if not isinstance(doc["samples"], list) or not isinstance(doc["cells"], list):
        raise LabError(f"corrupt results file {p}: samples and cells must be lists")
    # settings: null ended `report` with a traceback (AttributeError); "higher_is_better": "yes"
    # was read as true, whatever was written.
    for key in ("settings", "variants", "machine"):
        if key in doc and not isinstance(doc[key], dict):
            raise LabError(f"corrupt results file {p}: {key} must be an object, not "
                           f"{json.dumps(doc[key])[:40]}")
    for i, c in enumerate(doc["cells"]):
        if not isinstance(c, dict) or not isinstance(c.get("id"), str) or \
                not isinstance(c.get("higher_is_better", True), bool):
            raise LabError(f"corrupt results file {p}: cell {i} needs a string id, and "
                           f"higher_is_better, where given, true or false")
    ids = [c["id"] for c in doc["cells"]]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise LabError(f"corrupt results file {p}: cell {twice[0]!r} is listed twice (two runs "
                       f"merged into one file? compare them with strata-lab compare A B)")
    _check_fields(p, doc)
    metric_of = {c["id"]: c["metric"] for c in doc["cells"]}
    for i, s in enumerate(doc["samples"]):
        if not isinstance(s, dict) or s.get("cell") not in metric_of or s.get("variant") not in doc["variants"]:
            raise LabError(f"corrupt results file {p}: sample {i} names an unknown cell or variant")
        if s.get("ok") and not isinstance(s.get("metrics"), dict):
            raise LabError(f"corrupt results file {p}: sample {i} is ok but has no metrics")
        # The runner marks a sample ok only when its cell's metric is a positive finite number (a
        # workload that gave none is a failed sample, whose metrics are not read), so null (how
        # NaN and inf are written), 0, a string, a list or a boolean here is damage, not a missing
        # value: 0 ended compare with a traceback (ZeroDivisionError in the ratio of medians).
        metric = metric_of[s["cell"]]
        value = s["metrics"].get(metric) if s["ok"] else 1
        if not (finite_number(value) and value > 0):
            raise LabError(f"corrupt results file {p}: sample {i} is ok but its {metric!r} is "
                           f"{json.dumps(value)[:40]}, not a finite number above 0")
    try:
        run = RunDoc.from_json(doc, path=str(p))
    except TypeError as e:  # a key the model requires is missing, or one it does not know
        raise LabError(f"corrupt results file {p}: {e}") from None
    # A round holds one counted success per cell and variant (a noisy sample's re-run supersedes
    # one of the two).  Two runs' samples in one file were read as one run: medians over both,
    # the paired ratios over the last run's rounds only, without a word.
    first: dict[tuple, int] = {}
    for i, s in enumerate(run.samples):
        if s.counted and s.ok and s.round is not None:
            key = (s.cell, s.variant, s.round)
            if key in first:
                raise LabError(f"corrupt results file {p}: samples {first[key]} and {i} are both "
                               f"round {s.round} of {s.cell!r} under {s.variant!r} (two runs merged "
                               f"into one file? compare them with strata-lab compare A B)")
            first[key] = i
    return run


def check_metrics(results: dict, spec: tuple) -> None:
    """The metrics a suite's summary reads (its SUMMARY_METRICS, a spec as _check takes) in every
    successful sample of `results` (as for_suite gives it), or a LabError naming the file, the
    sample and the field.  load() checks only the cells' own metrics: a summary's med['baseline_ms']
    of a sample without it, or holding a string or 10**400, ended `report` with a traceback, and a
    string, true or NaN in a median it took where it could was left out or counted without a word."""
    p = results.get("_path")
    for i, s in enumerate(results.get("samples", [])):
        if s.get("ok") and isinstance(s.get("metrics"), dict):
            _check(p, f"samples[{i}].metrics", s["metrics"], spec)


def for_suite(doc: RunDoc) -> dict:
    """The document as a suite's summarise() takes it: the JSON, and `_path` (where it lies, for
    the plots a suite writes beside it)."""
    return {**doc.to_json(), "_path": doc.path}
