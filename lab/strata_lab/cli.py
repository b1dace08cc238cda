"""strata-lab: run, compare, report, list, env.  Errors print one clear message and exit 2."""

from __future__ import annotations

import sys

# The console script and `python -m strata_lab` import this module before main() runs, and the
# lab's modules take ~0.1 s to load (more on a busy machine): a Ctrl-C then ends the command as
# it does later, one line and status 130, not a traceback of the import.
try:
    import argparse
    import errno
    import json
    import math
    import os
    import signal
    import time
    from dataclasses import replace
    from pathlib import Path

    from . import __version__, allocators, machine, paths, results, runner
    from .errors import LabError
    from .suite import SuiteContext, available_suites, load_suite
except KeyboardInterrupt:
    print("strata-lab: interrupted", file=sys.stderr)
    raise SystemExit(130) from None


def _console(stderr: bool = False):
    from rich.console import Console

    # Wide enough for six allocator columns when stdout is a file or a pipe (make, CI logs).
    width = None if sys.stdout.isatty() else 200
    return Console(stderr=stderr, width=width, highlight=False)


def _split(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return out


MAX_THREADS = 1024  # what the workload programs take (bench/host, bench/gpu: --threads 1..1024)


def _int_list(text: str, what: str, most: int = MAX_THREADS) -> list[int]:
    """Positive integers separated by commas, each at most `most`.  An empty item ("1,,2", "1,")
    was dropped, and a count past the programs' limit ran a suite whose every sample failed."""
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        vals = []
    if not vals or any(v < 1 for v in vals):
        raise LabError(f"bad {what} {text!r}: use positive integers separated by commas, e.g. 1,2,4")
    if max(vals) > most:
        raise LabError(f"bad {what} {text!r}: {max(vals)} is more than the workload programs take "
                       f"({most})")
    twice = sorted({v for v in vals if vals.count(v) > 1})
    if twice:
        raise LabError(f"bad {what} {text!r}: {', '.join(map(str, twice))} given twice")
    return vals


def _given(value: str | None, option: str) -> str | None:
    """An option's value as given; an empty one (--cells '', --alloc ,) is an error, never the
    default: it would run what the option was meant to narrow down."""
    if value is not None and not _split([value] if isinstance(value, str) else value):
        raise LabError(f"{option} is empty: give a value, or leave the option out for the default")
    return value


def _seconds(value: float | None, option: str, zero: bool = False) -> None:
    """A number of seconds: positive (or 0 where `zero`) and finite.  nan passed every comparison
    that was false for it (a nan time budget left the planned rounds out, one by one), and inf made
    every sample of a timed workload run into its timeout."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise LabError(f"{option} must be a finite number of seconds, "
                       + ("0 or more" if zero else "more than 0") + f", not {value:g}")


def cmd_run(a: argparse.Namespace) -> int:
    suite = load_suite(a.suite)
    cpus = machine.parse_cpus(a.cpus) if a.cpus is not None else sorted(os.sched_getaffinity(0))
    if a.rounds is not None and a.rounds < 1:
        raise LabError("--rounds must be at least 1")
    if a.warmup is not None and a.warmup < 0:
        raise LabError("--warmup must be 0 or more")
    _seconds(a.seconds, "--seconds")
    if a.target_width is not None and not 0 < a.target_width < 1:
        raise LabError("--target-width must be between 0 and 1 (0.03 is ±3 %)")
    _seconds(a.time_budget, "--time-budget (0: no adaptive rounds)", zero=True)
    _seconds(a.timeout, "--timeout")
    for option in ("cells", "alloc", "baseline", "converge"):
        _given(getattr(a, option), "--" + option)
    if a.max_rounds is not None and a.max_rounds < 1:
        raise LabError("--max-rounds must be at least 1")
    if not 0 < a.noise_threshold <= 1:
        raise LabError("--noise-threshold must be a share between 0 and 1 (0.10 is 10 %)")
    if a.max_reruns < 0:
        raise LabError("--max-reruns must be 0 or more")
    instructions = a.metric == "instructions"
    if instructions:
        import shutil

        if not shutil.which("valgrind"):
            raise LabError("--metric instructions needs valgrind (sudo apt-get install valgrind)")
    params, sources = suite.resolve_params(a.param or [])
    ctx = SuiteContext(smoke=a.smoke, seconds=a.seconds,
                       threads=_int_list(a.threads, "thread list") if a.threads else None, cpus=cpus,
                       params=params, out_root=Path(a.out) if a.out else None)

    # What is compared: the suite's own variants, or allocators.
    names = _split(a.alloc)
    if suite.variants:
        variants = []
        for n in names or list(suite.variants):
            if n not in suite.variants:
                raise LabError(f"suite {suite.name!r} compares its own variants; unknown variant {n!r} "
                               f"(available: {', '.join(suite.variants)})")
            variants.append(runner.Variant.from_suite(n, suite.variants[n]))
    else:
        if names:
            allocs = allocators.resolve_all(names)
        else:
            found = allocators.inventory()
            missing = [n for n in suite.allocators if n in found and found[n] is None]
            if missing and not a.skip_missing:
                # Fails with the clear "not installed; install with ..." message.
                allocators.resolve_all(suite.allocators)
            allocs = allocators.resolve_all([n for n in suite.allocators if n not in missing])
            for n in missing:
                print(f"strata-lab: warning: skipping {n} (not installed)", file=sys.stderr)
        variants = [runner.Variant.from_allocator(x) for x in allocs]
    names = [v.name for v in variants]
    baseline = a.baseline or (suite.baseline if suite.baseline in names else names[0])
    if baseline not in names:
        raise LabError(f"baseline {baseline!r} is not among the variants of this run: {', '.join(names)}")

    ctx.consulted.clear()
    cells = suite.cells(ctx)
    for option, given in (("--threads", a.threads), ("--seconds", a.seconds)):
        if given is not None and option[2:] not in ctx.consulted:
            raise LabError(f"suite {suite.name!r} does not take {option}: none of its cells reads it "
                           "(it would be ignored); leave it out")
    if a.cells:
        import fnmatch

        cells = [c for c in cells if any(fnmatch.fnmatch(c.id, p) for p in _split([a.cells]))]
        if not cells:
            raise LabError(f"--cells {a.cells!r} matches no cell of suite {suite.name!r}")
    if a.timeout is not None:
        cells = [replace(c, timeout_s=a.timeout) for c in cells]
    rounds = a.rounds if a.rounds is not None else suite.rounds
    warmup = a.warmup if a.warmup is not None else suite.warmup
    # Adaptive rounds and re-runs of noisy samples: not in smoke runs (they check that things run).
    if a.time_budget is not None:
        budget = a.time_budget
    else:
        budget = 0.0 if a.smoke else (suite.time_budget if suite.time_budget is not None
                                      else runner.TIME_BUDGET_S)
    if a.max_rounds is not None and a.max_rounds < rounds:
        # Raised silently to the rounds before: a cap below the planned rounds asks for two things.
        raise LabError(f"--max-rounds {a.max_rounds} is below the {rounds} planned rounds"
                       + ("" if a.rounds is not None else f" (suite {suite.name}'s; give --rounds too)"))
    max_rounds = max(rounds, a.max_rounds if a.max_rounds is not None else runner.MAX_ROUNDS)
    target = a.target_width if a.target_width is not None else (suite.target_width or runner.TARGET_WIDTH)
    converge = _split([a.converge]) if a.converge else suite.converge
    if a.converge:
        unknown = [n for n in converge if n not in names]
        if unknown:
            raise LabError(f"--converge {', '.join(unknown)}: not among this run's variants ({', '.join(names)})")
    if converge is not None:
        # The suite's choice, restricted to what this run compares (--alloc may leave strata out).
        converge = [n for n in converge if n in names and n != baseline] or None
    max_reruns = 0 if a.smoke else a.max_reruns

    settings = {"smoke": a.smoke, "seconds": a.seconds, "threads": ctx.threads,
                "timeout_s": a.timeout, "cells_filter": a.cells,
                "params": params, "params_source": sources}
    console = _console()
    err = _console(stderr=True)
    over = [c.id for c in cells if runner.oversubscribed(c, cpus)]
    err.print(f"strata-lab: suite {suite.name}: {len(cells)} cells × {len(variants)} variants "
              f"({', '.join(names)}; baseline {baseline}), {rounds} rounds + {warmup} warm-up, "
              f"CPUs {machine.cpu_ranges(cpus)}")
    if budget > 0:
        who = "" if converge is None else f" ({', '.join(converge)} against {baseline}, only they run them)"
        err.print(f"strata-lab: adaptive rounds: more rounds (up to {max_rounds}) for cells whose ratio "
                  f"intervals{who} are wider than ±{target * 100:g} % or not yet 95 % intervals (fewer than 6 "
                  f"rounds); the run ends within {budget:g} s "
                  f"(after {runner.ALWAYS_ROUNDS} rounds, rounds that would end later are left out)")
    if instructions:
        n = len(runner.instruction_cells(cells))
        err.print(f"strata-lab: instruction counts under cachegrind for {n} single-threaded cell"
                  f"{'s' if n != 1 else ''}")
    if over:
        err.print(f"[yellow]strata-lab: oversubscribed (threads > CPUs): {', '.join(over)}[/]")
    if params:
        err.print("strata-lab: parameters: " + ", ".join(
            f"{k}={_show_value(v)}" + ("" if sources[k] == "default" else f" ({sources[k]})")
            for k, v in params.items()), markup=False)

    # The run directory is made inside the interruptible part: Ctrl-C, SIGTERM or SIGHUP before
    # the run's first write (it describes the machine first) leaves no empty directory behind.
    out_dir, finish = None, lambda: None
    try:
        with runner.sigterm_as_interrupt():
            out_dir = results.new_run_dir(ctx.results_root(), suite.name)
            err.print(f"strata-lab: writing {_path(out_dir / results.FILENAME)}", markup=False)
            progress_cb, start_cb, finish = _progress(err, a.no_progress)
            doc = runner.execute(suite, cells, variants, rounds=rounds, warmup=warmup, cpus=cpus,
                                 out_dir=out_dir, baseline=baseline, settings=settings,
                                 command=sys.argv, on_sample=progress_cb, on_start=start_cb, seed=a.seed,
                                 noise_threshold=a.noise_threshold, max_reruns=max_reruns,
                                 target_width=target, time_budget_s=budget, max_rounds=max_rounds,
                                 converge=converge, instructions=instructions)
    except LabError:  # results.json could not be written (a full disk): the message says what is kept
        finish()
        if out_dir is not None and not (out_dir / results.FILENAME).exists():
            try:
                out_dir.rmdir()
            except OSError:
                pass
        raise
    except (KeyboardInterrupt, runner.Interrupted) as e:
        finish()
        why = e.signame if isinstance(e, runner.Interrupted) else "SIGINT"
        if out_dir is not None and not (out_dir / results.FILENAME).exists():
            try:
                out_dir.rmdir()  # only ever empty here: samples come after the first write
                out_dir = None
            except OSError:
                pass
        if out_dir is None:
            err.print(f"[bold yellow]strata-lab: interrupted ({why}) before the first sample; "
                      "nothing was written[/]")
        else:
            from .tables import escape

            err.print(f"[bold yellow]strata-lab: interrupted ({why}); the samples that finished are in "
                      f"{escape(_path(out_dir / results.FILENAME))} (marked incomplete)[/]")
        return 128 + int(getattr(signal, why))  # the shell's status for that signal: 130, 143, 129
    finish()
    _show(results.load(out_dir), console, a.baseline, write_report=a.report)
    failures = sum(1 for s in doc.samples if not s.ok)
    return 1 if failures and a.strict else 0


def _path(p) -> str:
    """A path as printed: --out and the results path are the user's, and a name a script made can
    hold a newline, an escape sequence or bytes that are not UTF-8 (printed, these split the line,
    rewrote the terminal or could not be encoded); rich markup in it is escaped where printed."""
    from .text import printable

    return printable(str(p))


def _show_value(v) -> str:
    from .text import printable

    if v is None:
        return "auto"
    if isinstance(v, (list, tuple)):
        return ",".join(printable(str(x)) for x in v)
    return printable(str(v))  # a trace's path: a newline or an escape sequence in it


def _progress(err, disabled: bool):
    """A rich progress bar on a terminal; plain lines every ~10 % otherwise (logs, make)."""
    state = {"failed": 0}
    if disabled:
        return None, None, lambda: None
    if err.is_terminal:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        from .tables import escape

        prog = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[failed]}"),
                        console=err, transient=False)
        prog.start()
        task = {"id": None}

        def on_start(i, n, cell, v, rnd):
            if task["id"] is None:
                task["id"] = prog.add_task("", total=n, failed="")
            # Drawn as rich markup: a trace file named "[red]x" (replay's cell id) turned red, and
            # one with "[/x]" ended the run with a MarkupError.
            prog.update(task["id"], total=n, description=f"{escape(cell.id)} {escape(v.name)} "
                                                f"{'warm-up' if rnd is None else f'round {rnd + 1}'}")

        def on_sample(i, n, s):
            if not s.ok:
                state["failed"] += 1
            prog.update(task["id"], advance=1,
                        failed=f"[red]{state['failed']} failed[/]" if state["failed"] else "")

        return on_sample, on_start, prog.stop
    t0 = time.monotonic()

    def on_sample_plain(i, n, s):
        if not s.ok:
            state["failed"] += 1
            err.print(f"strata-lab: sample {i + 1} ({s.cell} {s.variant}) failed: "
                      f"{s.failure['kind']}: {s.failure['message']}", markup=False)
        if s.rerun_of is not None:
            err.print(f"strata-lab: sample {s.rerun_of + 1} ({s.cell} {s.variant}) lost "
                      f"more than the noise threshold of its CPUs: run again", markup=False)
        step = max(1, n // 10)
        if (i + 1) % step == 0 or i + 1 == n:
            el = time.monotonic() - t0
            eta = el / (i + 1) * (n - i - 1)
            err.print(f"strata-lab: [{'#' * ((i + 1) * 20 // n):<20}] {i + 1}/{n} samples, "
                      f"{el:.0f} s elapsed, ~{eta:.0f} s left", markup=False)

    return on_sample_plain, None, lambda: None


def _show(doc, console, baseline: str | None, write_report: bool) -> None:
    from . import analysis, tables

    an = analysis.analyse(doc, baseline)
    try:
        suite = load_suite(doc.suite)
    except LabError:  # a suite this lab does not have: its tables without its own summary
        suite = None
    # Before any table: damage in what the summary reads is one line, as load() gives for the rest.
    extra = suite.summarise(results.for_suite(doc)) if suite else ""
    tables.print_analysis(an, console, doc)
    if extra:
        from rich.markdown import Markdown

        console.print(Markdown(extra))
    run_dir = Path(doc.path).parent
    escape = tables.escape
    if write_report:
        from . import report

        html, md = report.write(doc, an, run_dir, extra)
        console.print(f"\n[bold]report:[/] {escape(_path(html))}\n[bold]summary:[/] {escape(_path(md))}\n"
                      f"[bold]results:[/] {escape(_path(doc.path))}")
    else:
        again = run_dir if Path(doc.path).name == results.FILENAME else doc.path
        console.print(f"\n[bold]results:[/] {escape(_path(doc.path))}  (strata-lab report "
                      f"{escape(_path(again))} writes the report)")


def cmd_report(a: argparse.Namespace) -> int:
    _given(a.baseline, "--baseline")
    doc = results.load(a.results)
    _show(doc, _console(), a.baseline, write_report=not a.no_html)
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    from . import analysis, tables
    from .tables import escape
    from .text import printable

    if not 0 < a.alpha < 1:
        raise LabError("--alpha must be between 0 and 1")
    da, db = results.load(a.a), results.load(a.b)
    cmp = analysis.compare(da, db, a.alpha)
    console = _console()
    if not cmp.rows:
        raise LabError("the two result sets share no cell and variant with successful samples")
    console.print(tables.compare_table(cmp, da.run_id, db.run_id))
    sig = [r for r in cmp.rows if r.significant]
    console.print(f"{len(sig)} of {len(cmp.rows)} differences are significant at α = {a.alpha}.")
    for r in sig:
        console.print(f"  • {printable(r.cell)} / {printable(r.variant)}: B is {r.speedup:.2f}× "
                      f"{'better' if r.speedup > 1 else 'worse'} (p = {r.p_value:.3g})", markup=False)
    for n in cmp.notes:
        console.print(f"  [yellow]note:[/] {escape(n)}")
    if da.machine.get("cpu_model") != db.machine.get("cpu_model") or \
            da.machine.get("hostname") != db.machine.get("hostname"):
        console.print("[yellow]warning: the two runs come from different machines; compare ratios "
                      "measured within one run instead[/]")
    if da.suite != db.suite:
        # A cell id can recur in another suite (default runs e1's and patterns' cells at its own
        # sizes): the rows are compared, but their settings need not match.
        console.print(f"[yellow]warning: A is a run of suite {escape(repr(da.suite))} and B of suite "
                      f"{escape(repr(db.suite))}; a cell of the same name may not be the same workload[/]")
    for d, label in ((da, "A"), (db, "B")):
        if not d.complete:
            console.print(f"[yellow]warning: {label} is an incomplete run[/]")
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    console = _console()
    what = a.what
    if what in ("allocators", "all"):
        from rich.markup import escape
        from rich.table import Table

        t = Table(title="allocators", header_style="bold")
        for col in ("name", "status", "version", "library / how to install"):
            t.add_column(col)
        for name, found in allocators.inventory().items():
            b = allocators.BUILTINS[name]
            if found:
                t.add_row(name, "[green]available[/]", escape(found.version), escape(found.library or "(no preload)"))
            else:
                t.add_row(name, "[red]missing[/]", "", b.install)
        console.print(t)
        console.print("any other: --alloc NAME=/path/to/lib.so")
    if what in ("suites", "all"):
        from rich.markup import escape
        from rich.table import Table

        t = Table(title="suites", header_style="bold")
        t.add_column("suite")
        t.add_column("description")
        t.add_column("parameters: --param NAME=VALUE (default)")
        for n in available_suites():
            try:
                s = load_suite(n)
                shown = "\n".join(f"{p.name} ({p.shown_default()}): {p.help}" for p in s.params)
                t.add_row(n, s.description, escape(shown) or "–")
            except Exception as e:  # a broken plug-in must not hide the others
                t.add_row(n, f"[red]cannot load: {escape(str(e))}[/]", "")
        console.print(t)
    if what in ("workloads", "all"):
        from rich.table import Table

        t = Table(title="workloads (cells per suite)", header_style="bold")
        for col in ("suite", "cells", "command"):
            t.add_column(col)
        for n in available_suites():
            try:
                cells = load_suite(n).cells(SuiteContext())
                progs = sorted({Path(str(c.argv[0])).name if not str(c.argv[0]).endswith("python")
                                and "python" not in Path(str(c.argv[0])).name
                                else " ".join(str(x) for x in c.argv[1:3]) for c in cells})
                t.add_row(n, ", ".join(c.id for c in cells), ", ".join(progs))
            except LabError as e:
                t.add_row(n, "[red]unavailable[/]", str(e).splitlines()[0])
            except Exception as e:
                t.add_row(n, "[red]cannot load[/]", str(e))
        console.print(t)
    return 0


def cmd_env(a: argparse.Namespace) -> int:
    info = {"machine": machine.describe(), "git": machine.git_revision(),
            "repo_root": str(paths.repo_root()), "build_dir": str(paths.build_dir()),
            "python": sys.executable, "lab_version": __version__,
            "allocators": {n: (x.to_json() if x else None) for n, x in allocators.inventory().items()}}
    if a.json:
        print(json.dumps(info, indent=2))
        return 0
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="this machine", show_header=False)
    t.add_column("key", style="bold")
    t.add_column("value")
    for k, v in info["machine"].items():
        t.add_row(k, escape(str(v)))
    t.add_row("git", f"{info['git']['revision']}{' (dirty)' if info['git']['dirty'] else ''}")
    t.add_row("repo", escape(info["repo_root"]))
    t.add_row("build", escape(info["build_dir"]))
    for n, x in info["allocators"].items():
        t.add_row(f"allocator {n}", escape(f"{x['version']}  {x['library'] or '(no preload)'}") if x else "missing")
    _console().print(t)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="strata-lab", description=__doc__)
    p.add_argument("--version", action="version", version=f"strata-lab {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a suite; writes a new results directory")
    r.add_argument("--suite", default="default",
                   help="suite name (strata-lab list suites; default: default, what make bench runs)")
    r.add_argument("--alloc", action="append", metavar="NAME[=LIB]",
                   help="allocator(s) to compare (repeat or comma-separate); NAME=/path/lib.so adds any other")
    r.add_argument("--baseline", help="variant the ratios are against (default: the suite's)")
    r.add_argument("--rounds", type=int, help="counted rounds (default: the suite's, normally 5)")
    r.add_argument("--warmup", type=int, help="uncounted runs per cell and variant first (default: the suite's, normally 1)")
    r.add_argument("--threads", help="thread counts, e.g. 1,2,4 (overrides the suite's)")
    r.add_argument("--seconds", type=float, help="seconds per sample for timed workloads")
    r.add_argument("--cpus", help="pin every sample to these CPUs, e.g. 0 or 0-1 or 0,2")
    r.add_argument("--timeout", type=float, help="per-sample timeout in seconds (overrides the suite's)")
    r.add_argument("--cells", help="only cells whose id matches one of these globs, e.g. 'e1-tiny/*'")
    r.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="a parameter of the suite (repeat for several; strata-lab list suites shows them)")
    r.add_argument("--smoke", action="store_true", help="tiny workloads: checks that everything runs")
    r.add_argument("--out", help="parent directory of the run directory (default: results/)")
    r.add_argument("--report", action="store_true", help="also write report.html and summary.md")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--skip-missing", action="store_true",
                   help="run without the suite's allocators that are not installed instead of failing")
    r.add_argument("--strict", action="store_true", help="exit 1 when any sample failed")
    r.add_argument("--seed", type=int, help="seed of the interleaving order (default: random, recorded)")
    r.add_argument("--target-width", type=float, metavar="SHARE",
                   help="adaptive rounds: a cell is done when every ratio's 95 %% interval is within "
                        f"± this share of the ratio (default: the suite's, else {runner.TARGET_WIDTH:g})")
    r.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="the whole run ends within this many seconds: planned rounds past the first "
                        f"{runner.ALWAYS_ROUNDS} that would end later are left out, and what is left is "
                        "divided among the cells not yet within the target for adaptive rounds (default: "
                        f"the suite's, else {runner.TIME_BUDGET_S:g}; 0: only the planned rounds; --smoke: 0)")
    r.add_argument("--converge", metavar="VARIANTS",
                   help="adaptive rounds: the variants whose ratios must come within the target; only "
                        "they and the baseline run the extra rounds (default: the suite's, else every variant)")
    r.add_argument("--max-rounds", type=int, help=f"adaptive rounds: at most this many per cell "
                                                  f"(default {runner.MAX_ROUNDS})")
    r.add_argument("--noise-threshold", type=float, default=runner.NOISE_THRESHOLD, metavar="SHARE",
                   help="a sample that lost more than this share of its CPUs (steal and other "
                        "processes) is flagged and run again (default 0.10)")
    r.add_argument("--max-reruns", type=int, default=runner.MAX_RERUNS,
                   help=f"noisy samples run again, at most this many per cell (default {runner.MAX_RERUNS}; "
                        "0 under --smoke)")
    r.add_argument("--metric", choices=["time", "instructions"], default="time",
                   help="instructions: also count each single-threaded cell's instructions under "
                        "valgrind --tool=cachegrind (one run per cell and variant), beside time")
    r.set_defaults(func=cmd_run)

    rep = sub.add_parser("report", help="tables, report.html and summary.md for a results directory")
    rep.add_argument("results", help="run directory or its results.json")
    rep.add_argument("--baseline")
    rep.add_argument("--no-html", action="store_true", help="print the tables only")
    rep.set_defaults(func=cmd_report)

    c = sub.add_parser("compare", help="which differences between two result sets are significant")
    c.add_argument("a", help="results A (the reference)")
    c.add_argument("b", help="results B")
    c.add_argument("--alpha", type=float, default=0.05)
    c.set_defaults(func=cmd_compare)

    ls = sub.add_parser("list", help="allocators, workloads, suites")
    ls.add_argument("what", nargs="?", default="all", choices=["allocators", "workloads", "suites", "all"])
    ls.set_defaults(func=cmd_list)

    e = sub.add_parser("env", help="what this machine is (as recorded with results)")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_env)

    from . import replay

    replay.add_parsers(sub)  # record, replay, trace-stats
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)  # imports the trace tools (numpy): Ctrl-C lands here too
        return args.func(args)
    except LabError as e:
        from .text import printable

        # A message names the user's paths and names: an escape sequence or a byte that is not
        # UTF-8 in one rewrote the terminal or could not be printed.  Its own lines stay lines.
        text = "\n".join(printable(line) for line in str(e).split("\n"))
        print(f"strata-lab: error: {text}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        return 1
    except OSError as e:
        # Output that cannot be written (stdout on a full disk: `strata-lab env > /dev/full`): one
        # line, like every error, not a traceback.  Other OSErrors are bugs: their traceback stays.
        if e.filename is not None or e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
            raise
        try:  # what is still buffered for stdout would fail again when Python exits
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        print(f"strata-lab: error: cannot write: {e.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C outside a run's samples: one line, not a traceback
        print("strata-lab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
