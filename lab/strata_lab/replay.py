"""strata-lab record / replay / trace-stats: a program's allocations recorded once (STRATA_TRACE in
strata's preload library), replayed under every allocator (suite "replay"), and summarised.

    strata-lab record [-o TRACE] -- PROGRAM ARGS...
    strata-lab replay TRACE [--alloc ...] [any option of strata-lab run]
    strata-lab trace-stats TRACE [--json] [--out DIR]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from . import allocators, results, trace
from .errors import LabError


def cmd_record(a: argparse.Namespace) -> int:
    argv = list(a.program)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise LabError("record: give the command after --, e.g. strata-lab record -- python3 work.py")
    strata = allocators.resolve("strata")
    out = Path(a.output).resolve()
    # Checked before the command runs: afterwards its trace would be left at TRACE.<pid>.
    if out.is_dir():
        raise LabError(f"record: -o {out} is a directory; give the trace's file name, e.g. -o {out / 'strata.trace'}")
    results.make_dir(out.parent, "record: cannot create the directory")
    # The recorder expands "%p" to the process id and "%%" to "%": a "%" of the name is doubled.
    template = str(out).replace("%", "%%") + ".%p"
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(x for x in (strata.library, env.get("LD_PRELOAD")) if x)
    env["STRATA_TRACE"] = template
    before = _traces_beside(out)
    try:
        proc = subprocess.Popen(argv, env=env)
    except OSError as e:
        raise LabError(f"record: cannot start {argv[0]}: {e.strerror}") from None
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.wait()
        rc = proc.returncode
    main = out.with_name(f"{out.name}.{proc.pid}")
    # Only the traces this command wrote: earlier recordings' TRACE.<pid> files stay unnamed (the
    # recorder truncates a file whose pid comes round again, which changes its inode time stamps).
    others = sorted(p for p, stamp in _traces_beside(out).items() if p != main and before.get(p) != stamp)
    if not main.is_file():
        # Its children's traces are there all the same (a static launcher of dynamic programs).
        left = f"; its processes left {_names(others)}" if others else ""
        raise LabError(f"record: {argv[0]} left no trace at {main} (is it a static binary, or did it "
                       f"replace its environment?){left}")
    try:
        main.replace(out)
    except OSError as e:
        raise LabError(f"record: cannot move the trace to {out}: {e.strerror}; it is at {main}") from None
    t = trace.read(out)
    print(f"strata-lab: {out}: {t.events} events, {t.threads} threads, {t.end_note()}", file=sys.stderr)
    if others:
        print(f"strata-lab: {len(others)} more trace(s) from processes it started: {_names(others)}", file=sys.stderr)
        # A process that outlived the command (a daemon) still writes its trace: read now, it
        # looks killed ("no end chunk") and holds only what was written so far.
        running = [p for p in others if _still_written(p)]
        if running:
            print(f"strata-lab: {len(running)} of them still being written by processes that run on: "
                  f"{_names(running)}", file=sys.stderr)
    if rc > 0:
        print(f"strata-lab: {argv[0]} exited with status {rc}", file=sys.stderr)
    elif rc < 0:
        print(f"strata-lab: {argv[0]} was killed by {_signal_name(-rc)}", file=sys.stderr)
    return rc if rc >= 0 else 128 - rc


def _names(paths: list[Path]) -> str:
    return f"{', '.join(p.name for p in paths[:5])}{' ...' if len(paths) > 5 else ''}"


def _still_written(p: Path) -> bool:
    """Whether a process holds the trace's lock: the recorder flock()s its file while it lives."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)  # releases the lock, if taken


def _signal_name(sig: int) -> str:
    try:
        return f"signal {sig} ({signal.Signals(sig).name})"
    except ValueError:
        return f"signal {sig}"


def _traces_beside(out: Path) -> dict[Path, tuple]:
    """TRACE.<pid> files next to `out`, each with what tells a rewritten file from an old one."""
    found = {}
    for p in out.parent.glob(out.name + ".*"):
        if p.suffix[1:].isdigit():
            try:
                st = p.stat()
            except OSError:
                continue
            found[p] = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    return found


def cmd_replay(a: argparse.Namespace) -> int:
    from . import cli

    t = trace.read(a.trace)  # a clear error before any run starts
    if t.events == 0:
        # Every sample would fail (no operations, no ops/s): nothing to compare.
        raise LabError(f"replay: {a.trace} holds no events to replay ({t.end_note()})")
    if not t.complete:
        print(f"strata-lab: warning: {a.trace}: {t.end_note()}", file=sys.stderr)
    return cli.main(["run", "--suite", "replay", "--param", f"trace={Path(a.trace).resolve()}", *a.run_args])


def cmd_trace_stats(a: argparse.Namespace) -> int:
    out = Path(a.out) if a.out else None
    if out is not None:  # a bad --out before the work, not after the numbers are printed
        results.make_dir(out, "trace-stats: cannot create the directory", " (--out is a directory)")
    t = trace.read(a.trace)
    s = trace.stats(t)
    if a.json:
        print(json.dumps(s, indent=1))
    else:
        print(trace.markdown(s))
    if out is not None:
        try:
            # Each file whole or not at all: a full disk left a trace-stats.json cut mid-number.
            results.write_text_atomic(out / "trace-stats.json", json.dumps(s, indent=1), ".trace-stats.json-")
            png = trace.plot(s, out / "trace-stats.png")
            results.write_text_atomic(out / "trace-stats.md", trace.markdown(s) + f"\n![{png.name}]({png.name})\n",
                                      ".trace-stats.md-")
        except OSError as e:
            raise LabError(f"trace-stats: cannot write into {out}: {e.strerror}: {e.filename or out}") from None
        print(f"strata-lab: wrote {out / 'trace-stats.md'}, {out / 'trace-stats.json'} and {png}",
              file=sys.stderr)
    return 0


def add_parsers(sub) -> None:
    r = sub.add_parser("record", help="run a command under strata, recording its allocations to a trace")
    r.add_argument("-o", "--output", default="strata.trace", help="the trace to write (default: strata.trace); "
                   "processes the command starts leave theirs beside it as TRACE.<pid>")
    r.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS...")
    r.set_defaults(func=cmd_record)

    p = sub.add_parser("replay", help="replay a trace under each allocator (suite replay; options as for run)")
    p.add_argument("trace")
    p.add_argument("run_args", nargs=argparse.REMAINDER, help="options of strata-lab run: --alloc, --rounds, ...")
    p.set_defaults(func=cmd_replay)

    s = sub.add_parser("trace-stats", help="sizes, lifetimes, cross-thread frees and peak live bytes of a trace")
    s.add_argument("trace")
    s.add_argument("--json", action="store_true", help="print the numbers as JSON")
    s.add_argument("--out", help="also write trace-stats.{md,json,png} (the plot) into this directory")
    s.set_defaults(func=cmd_trace_stats)
