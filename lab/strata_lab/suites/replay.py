"""A recorded program replayed (strata-lab record, docs/trace-format.md): strata-bench-replay plays
the trace under each allocator, one thread per recorded thread.  Replay ops/s and the replay's peak
RSS (the allocator's memory: the replayer's own tables are taken out).  `strata-lab replay TRACE`
runs this suite; without a trace (--smoke) it replays the replayer's own small synthetic trace.

Paced by default (--param pace=off: back to back): each event waits for its recorded time, so an
allocator that returns memory on a timer (strata, mimalloc) does so as under the program, and the
replay's peak RSS is the program's; ops/s is then per second of replaying, the waits left out."""

import json
from pathlib import Path

from strata_lab.allocators import BUILTINS
from strata_lab.errors import LabError
from strata_lab.results import beside
from strata_lab.suite import Cell, Param
from strata_lab.text import printable

DESCRIPTION = "a recorded trace (--param trace=PATH, or strata-lab replay TRACE) replayed under each allocator"
ALLOCATORS = list(BUILTINS)
BASELINE = "glibc"
ROUNDS = 5
WARMUP = 1


def _path(text: str) -> str:
    p = Path(text).expanduser()
    if not p.is_file():
        raise ValueError(f"no such file: {p}")
    return str(p.resolve())


def _on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise ValueError(f"{text!r}: on or off")
    return text == "on"


PARAMS = [Param("trace", None, "the trace to replay (strata-lab record writes one)", _path,
                default_text="none: --smoke replays a built-in one"),
          Param("pace", True, "on: each event waits for its recorded time (the program's pace, its "
                "peak RSS); off: back to back", _on_off, default_text="on")]


def cells(ctx):
    exe = ctx.bin("replay")
    trace = ctx.params.get("trace")
    if trace is None:
        if not ctx.smoke:
            raise LabError("suite replay needs a trace: strata-lab replay TRACE, or --param trace=PATH")
        argv, name = [exe, "--smoke"], "smoke"
    else:
        # The cell is named after the file as it can be shown: a newline, an escape sequence or a
        # byte that is not UTF-8 in the name went into every table, terminal and plot.
        argv, name = [exe, *(["--pace"] if ctx.params.get("pace", True) else []), trace], printable(Path(trace).name)
    return [Cell(workload=f"replay-{name}", threads=1, argv=argv, metric="ops_per_sec", unit="ops/s",
                 params={"trace": trace or "(built-in)", "pace": bool(trace and ctx.params.get("pace", True))},
                 peak_rss_metric="peak_rss_kib",
                 timeout_s=600.0)]


def summarise(results: dict) -> str:
    """The trace's own numbers (strata-lab trace-stats) beside the replay's, and its plot written
    into the run's directory as trace-stats.png."""
    from strata_lab import trace as tr

    path = ((results.get("settings") or {}).get("params") or {}).get("trace")
    if not path:
        return ""
    if not isinstance(path, str):  # a hand-edited file: open() ended `report` with a traceback
        return f"### the trace\nsettings.params.trace is {json.dumps(path)[:40]}, not a file name\n"
    try:
        s = tr.stats(tr.read(path))
    except LabError as e:
        return f"### the trace\n{e}\n"
    md = tr.markdown(s).replace("# trace ", "### trace ", 1).replace("\n## ", "\n#### ")
    where = results.get("_path")
    if where:
        try:
            png = tr.plot(s, beside(where, "trace-stats.png"))
        except OSError as e:
            # `report` of a run kept where the reader may not write (a read-only mount, another
            # user's results) ended in a traceback, even with --no-html: the tables without it.
            return md + f"\n(the plot of the trace could not be written beside the results: {e.strerror})\n"
        md += f"\n![sizes, lifetimes and live bytes of the trace]({png.name})\n"
    return md
