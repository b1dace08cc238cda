"""A recorded program replayed (strata-lab record, docs/trace-format.md): strata-bench-replay plays
the trace under each allocator, one thread per recorded thread.  Replay ops/s and the replay's peak
RSS (the allocator's memory: the replayer's own tables are taken out).  `strata-lab replay TRACE`
runs this suite; without a trace (--smoke) it replays the replayer's own small synthetic trace."""

from pathlib import Path

from strata_lab.allocators import BUILTINS
from strata_lab.errors import LabError
from strata_lab.suite import Cell, Param

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


PARAMS = [Param("trace", None, "the trace to replay (strata-lab record writes one)", _path,
                default_text="none: --smoke replays a built-in one")]


def cells(ctx):
    exe = ctx.bin("replay")
    trace = ctx.params.get("trace")
    if trace is None:
        if not ctx.smoke:
            raise LabError("suite replay needs a trace: strata-lab replay TRACE, or --param trace=PATH")
        argv, name = [exe, "--smoke"], "smoke"
    else:
        argv, name = [exe, trace], Path(trace).name
    return [Cell(workload=f"replay-{name}", threads=1, argv=argv, metric="ops_per_sec", unit="ops/s",
                 params={"trace": trace or "(built-in)"}, peak_rss_metric="peak_rss_kib",
                 timeout_s=600.0)]
