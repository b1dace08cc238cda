"""The runner: one process per sample, warm-ups first, variants interleaved within each round,
pinned to the chosen CPUs, with resource usage from wait4, RSS sampled from /proc every ~10 ms,
a per-sample timeout, and results.json rewritten atomically after every sample.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from . import __version__, machine, results
from .allocators import Allocator
from .errors import LabError
from .model import RunDoc, Sample
from .suite import Cell, Suite

RSS_INTERVAL_S = 0.010
TIMELINE_MAX_POINTS = 400
STDERR_TAIL = 2000


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Variant:
    """One of the things compared: a preloaded allocator, or a suite-defined variant."""

    name: str
    library: str | None = None  # preloaded allocator library (None: glibc / not an allocator)
    args: tuple = ()
    env: tuple = ()  # (key, value) pairs
    info: dict | None = None  # what results.json records about it
    stats_env: str | None = None  # the library writes its statistics to the file this names

    @classmethod
    def from_allocator(cls, a: Allocator) -> "Variant":
        return cls(a.name, a.library, info=a.to_json(), stats_env=a.stats_env)

    @classmethod
    def from_suite(cls, name: str, spec: dict) -> "Variant":
        return cls(name, None, tuple(str(x) for x in spec.get("args", ())),
                   tuple(sorted((str(k), str(v)) for k, v in spec.get("env", {}).items())),
                   info={"kind": "suite", **{k: v for k, v in spec.items()}})


def _downsample(t: list, v: list, n: int = TIMELINE_MAX_POINTS) -> tuple[list, list]:
    """Keep at most n points, each the max of its bucket so peaks stay visible."""
    if len(t) <= n:
        return t, v
    step = math.ceil(len(t) / n)
    ts, vs = [], []
    for i in range(0, len(t), step):
        ts.append(t[i])
        vs.append(max(v[i:i + step]))
    return ts, vs


def _tail(path: Path, n: int = STDERR_TAIL) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-n:].decode("utf-8", "replace")


_SPAWN: dict = {}


def spawner() -> str | None:
    """The strata-lab-spawn launcher (spawn.c), compiled on first use into build/lab/ (or
    ~/.cache/strata-lab/); None when no C compiler is there, and samples then record that their
    peak RSS is an upper bound."""
    if "path" in _SPAWN:
        return _SPAWN["path"]
    import shutil

    from . import paths

    src = Path(__file__).with_name("spawn.c")
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    path = None
    for d in (paths.build_dir() / "lab", Path.home() / ".cache" / "strata-lab"):
        exe = d / "strata-lab-spawn"
        try:
            if exe.is_file() and exe.stat().st_mtime >= src.stat().st_mtime and os.access(exe, os.X_OK):
                path = str(exe)
                break
            if not cc:
                continue
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f".strata-lab-spawn.{os.getpid()}"
            r = subprocess.run([cc, "-O2", "-o", str(tmp), str(src)], capture_output=True, text=True)
            if r.returncode == 0:
                os.replace(tmp, exe)
                path = str(exe)
                break
        except OSError:
            continue
    _SPAWN["path"] = path
    return path


def _read_launcher(prefix: Path, suffix: str) -> str | None:
    try:
        return (prefix.parent / (prefix.name + suffix)).read_text()
    except OSError:
        return None


@dataclass
class Ran:
    """What one process did, as the lab watched it (run_sample turns it into a sample)."""

    code: int                   # exit code, or -signal
    timed_out: bool
    wall_s: float
    usage: dict                 # maxrss, utime, stime, nvcsw, nivcsw, minflt, majflt
    rusage_source: str
    stdout: str
    stderr_tail: str
    t_ms: list                  # RSS the lab sampled: times and values
    rss_kb: list
    noise: dict                 # what the sample lost on its CPUs; empty without /proc/stat
    t0_ns: int = 0              # CLOCK_MONOTONIC at t_ms 0 (a workload's rss_window is on it)


def _command(cell: Cell, variant: Variant, extra_env: dict, stats_file: Path | None,
             launcher: str | None, prefix: Path) -> tuple[list[str], list[str], dict]:
    """(the command as recorded, what is spawned, its environment).  The variant's library goes
    into LD_PRELOAD of the command, or to a driver cell's command as STRATA_LAB_PRELOAD; with the
    launcher, the launcher sets LD_PRELOAD for the command only, so it never runs under the
    allocator it measures."""
    argv = [str(a) for a in cell.argv] + list(variant.args)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    # A STRATA_TRACE left exported from recording (docs/lab.md's `STRATA_TRACE=/tmp/app.%p`) made
    # every strata sample record itself: slower by recording's cost, and a trace per sample.
    env.pop("STRATA_TRACE", None)
    env.update({k: str(v) for k, v in cell.env.items()})
    env.update(dict(variant.env))
    env.update(extra_env)
    if stats_file is not None and variant.stats_env:
        env[variant.stats_env] = str(stats_file)
    if cell.preload == "driver":
        env["STRATA_LAB_PRELOAD"] = variant.library or ""
        # A driver killed on a timeout or an interrupt (SIGKILL) cannot clean up after itself: its
        # temporary files (E5's nginx directory) go in the sample's, which the lab removes.
        env["TMPDIR"] = str(prefix.parent)
    elif variant.library:
        env["STRATA_LAB_SPAWN_PRELOAD" if launcher else "LD_PRELOAD"] = variant.library
    return argv, ([launcher, str(prefix)] + argv) if launcher else argv, env


def _watch(full: list[str], env: dict, cpus: list[int] | None, timeout_s: float,
           launcher: str | None, prefix: Path) -> Ran:
    """Spawn the command pinned to `cpus` and wait for it, sampling its RSS every ~10 ms and
    killing its process group past `timeout_s`.  OSError when it cannot be spawned; an interrupt
    (Ctrl-C, SIGTERM) takes the workload down and is raised again."""
    out_p, err_p = prefix.with_name("stdout"), prefix.with_name("stderr")
    with open(out_p, "wb") as fo, open(err_p, "wb") as fe:
        noise_cpus = cpus if cpus and len(cpus) < (os.cpu_count() or 1) else None
        jiffies0, self0 = machine.cpu_jiffies(noise_cpus), machine.self_cpu_s()
        t0, t0_ns = time.perf_counter(), time.monotonic_ns()
        t_ms, rss = [], []
        timed_out = False
        held: list[int] = []
        with _interrupts_held(held), machine.pinned(cpus):
            proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
                                    env=env, start_new_session=True)
        try:
            for s in held:
                signal.raise_signal(s)  # raised here, where the sample is taken down
            target = None if launcher else proc.pid
            while True:
                pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                el = time.perf_counter() - t0
                if target is None:
                    text = _read_launcher(prefix, ".pid")
                    target = int(text) if text and text.strip().isdigit() else None
                r = machine.rss_kb(target) if target else None
                if r is not None:
                    t_ms.append(round(el * 1000, 1))
                    rss.append(r)
                if el > timeout_s:
                    timed_out = True
                    _kill_group(proc.pid)
                    pid, status, ru = os.wait4(proc.pid, 0)
                    break
                time.sleep(RSS_INTERVAL_S)
        except BaseException:
            _kill_group(proc.pid)
            try:
                os.wait4(proc.pid, 0)
            except ChildProcessError:
                pass
            proc.returncode = -9
            raise
        wall = time.perf_counter() - t0
        jiffies1, self1 = machine.cpu_jiffies(noise_cpus), machine.self_cpu_s()
        _kill_group(proc.pid)  # stragglers the workload left in its group
        proc.returncode = os.waitstatus_to_exitcode(status)
    status, usage, source = _usage(status, ru, launcher, prefix)
    return Ran(code=os.waitstatus_to_exitcode(status), timed_out=timed_out, wall_s=wall, usage=usage,
               rusage_source=source, stdout=out_p.read_text("utf-8", "replace"),
               stderr_tail=_tail(err_p), t_ms=t_ms, rss_kb=rss, t0_ns=t0_ns,
               noise=_noise(jiffies0, jiffies1, self1 - self0, usage, wall, noise_cpus))


@contextmanager
def _interrupts_held(pending: list[int]):
    """SIGINT, SIGTERM and SIGHUP handled by Python (KeyboardInterrupt, Interrupted) are held in
    the block and added to `pending`, for the caller to raise again once it can take the sample
    down: one that came while Popen waited for the child's exec left Popen without the process,
    and the sample, in a session of its own, ran on after the lab had gone (179 of 200 interrupts
    in a sample's first 4 ms).  Only the main thread handles signals (and may set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if callable(signal.getsignal(s)):
            old[s] = signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        del pending[1:]
        if pending and sys.exc_info()[0] is not None:
            signal.raise_signal(pending[0])  # nothing was spawned (OSError): raised now


def _usage(status: int, ru, launcher: str | None, prefix: Path) -> tuple[int, dict, str]:
    """(wait status, resource usage, where it came from): the launcher's exact figures for the
    command alone when it wrote them, else wait4's for what the lab spawned."""
    text = _read_launcher(prefix, ".rusage") if launcher else None
    if text:
        f = text.split()
        return int(f[0]), {"maxrss": int(f[1]), "utime": float(f[2]), "stime": float(f[3]),
                           "nvcsw": int(f[4]), "nivcsw": int(f[5]), "minflt": int(f[6]),
                           "majflt": int(f[7])}, "launcher"
    usage = {"maxrss": ru.ru_maxrss, "utime": ru.ru_utime, "stime": ru.ru_stime, "nvcsw": ru.ru_nvcsw,
             "nivcsw": ru.ru_nivcsw, "minflt": ru.ru_minflt, "majflt": ru.ru_majflt}
    if launcher:
        return status, usage, "launcher killed before the command ended: usage of the launcher"
    return status, usage, "direct (peak RSS includes the lab's own image: an upper bound)"


def _noise(jiffies0, jiffies1, lab_cpu_s: float, usage: dict, wall: float,
           noise_cpus: list[int] | None) -> dict:
    """What the sample lost on its CPUs while it ran: time stolen by the hypervisor, and CPU used
    by everything else (busy time, which counts steal, minus the steal, the sample's own CPU and
    the lab's polling).  A noisy neighbour shows here before it shows as a wide spread."""
    if jiffies0 is None or jiffies1 is None or wall <= 0:
        return {}
    if jiffies1[0] < jiffies0[0] or jiffies1[1] < jiffies0[1]:
        # Counters that went back measured nothing: the aggregate line loses an unplugged CPU's
        # ticks, and steal steps back under some hypervisors and in lxcfs's /proc/stat.  A
        # negative steal_frac made the lab's own results.json one that load() refuses.
        return {}
    ncpu = len(noise_cpus) if noise_cpus else (os.cpu_count() or 1)
    busy = (jiffies1[0] - jiffies0[0]) / machine.CLK_TCK
    steal = (jiffies1[1] - jiffies0[1]) / machine.CLK_TCK
    other = max(0.0, busy - steal - usage["utime"] - usage["stime"] - lab_cpu_s)
    return {"noise_cpus": ncpu, "steal_s": round(steal, 3), "steal_frac": round(steal / (wall * ncpu), 4),
            "other_cpu_s": round(other, 3), "other_cpu_frac": round(other / (wall * ncpu), 4)}


def _preload_ignored(err_p: Path, library: str | None) -> str | None:
    """ld.so's own message when it refused to preload `library` into a process of the sample.

    ld.so only warns ("ERROR: ld.so: object '<lib>' from LD_PRELOAD cannot be preloaded (<why>):
    ignored.") and runs the program under glibc's malloc, exit 0: without this check such a sample
    would be glibc measured under the variant's name.  allocators.resolve() refuses files that are
    not ELF shared objects before a run starts; this catches what only ld.so knows (a
    position-independent executable, a library replaced during the run).  The message comes first
    on stderr, so the head is read, not the tail; it must name this very library, so a workload's
    own children preloading something else never fail the sample."""
    if not library:
        return None
    try:
        with open(err_p, "rb") as f:
            head = f.read(64 * 1024).decode("utf-8", "replace")
    except OSError:
        return None
    for line in head.splitlines():
        if f"ld.so: object '{library}'" in line and "cannot be preloaded" in line:
            return line.strip()
    return None


def _outcome(rec: dict, cell: Cell, ran: Ran, parse: Callable[[Cell, str], dict],
             preload_ignored: str | None = None) -> dict:
    """The sample's verdict: a failure (timeout, preload ignored, exit, crash, unreadable output)
    or its metrics, with a driver's own figures (timeline, the program's peak RSS and faults) in
    place of the lab's."""
    code = ran.code

    def fail(kind: str, message: str) -> dict:
        rec["failure"] = {"kind": kind, "message": message, "exit_status": code,
                          "signal": _signal_name(code), "stderr_tail": ran.stderr_tail,
                          "stdout_tail": ran.stdout[-STDERR_TAIL:]}
        return rec

    if ran.timed_out:
        return fail("timeout", f"killed after {cell.timeout_s:g} s (per-sample timeout)")
    if preload_ignored:
        # "spawn" (docs/results-schema.md's kinds): the command did not start as asked, under the allocator.
        return fail("spawn", f"the allocator was not loaded: {preload_ignored}")
    if code != 0:
        return fail("crash" if code < 0 else "exit",
                    f"killed by signal {_signal_name(code)}" if _signal_name(code) else f"exited with status {code}")
    try:
        metrics = parse(cell, ran.stdout)
    except (ValueError, KeyError, TypeError) as e:
        return fail("parse", f"could not read the workload's output: {e}")
    value = metrics.get(cell.metric)
    if not results.finite_number(value):
        return fail("parse", f"the workload's JSON has no finite number {cell.metric!r}")
    if value <= 0:
        # Every primary metric is a rate or a time, compared as a ratio: 0 is a measurement that
        # did not happen (E4's NUMA group without its buffer), and must not count as one.
        return fail("parse", f"the workload's {cell.metric!r} is {value:g}, not a positive number "
                             "(ratios need one)")
    timeline = metrics.pop("rss_timeline", None)
    window = metrics.pop("rss_window", None)
    if isinstance(window, dict) and rec.get("rss_timeline", {}).get("source") == "lab":
        # The part of the lab's samples that measured the workload, less what is not its (the
        # replayer's tables and reading of the trace: a replay of a program with 12 KiB live
        # drew 310 MB over time beside its 2 MiB peak).
        try:
            lo, hi = (window["begin_monotonic_ns"] - ran.t0_ns) / 1e6, (window["end_monotonic_ns"] - ran.t0_ns) / 1e6
            less = window["less_kib"]
            inside = [(t, max(0, v - less)) for t, v in zip(ran.t_ms, ran.rss_kb) if lo <= t <= hi]
        except (KeyError, TypeError) as e:
            return fail("parse", f"the workload's rss_window is not as expected: {e!r}")
        ts, vs = _downsample([round(t - lo, 1) for t, _ in inside], [v for _, v in inside])
        rec["rss_timeline"] = {"interval_ms": RSS_INTERVAL_S * 1000, "source": "lab", "t_ms": ts, "rss_kb": vs}
    if isinstance(timeline, dict) and timeline.get("t_ms"):
        ts, vs = _downsample(list(timeline["t_ms"]), list(timeline["rss_kb"]))
        rec["rss_timeline"] = {"interval_ms": timeline.get("interval_ms"), "source": "workload",
                               "t_ms": ts, "rss_kb": vs}
    if cell.peak_rss_metric:
        own = metrics.get(cell.peak_rss_metric)
        if isinstance(own, (int, float)):
            rec["process_peak_rss_kb"] = rec["peak_rss_kb"]
            rec["peak_rss_kb"] = own
        # A driver that measured its program's own minor faults reports them the same way.
        faults = metrics.get("minor_faults")
        if isinstance(faults, int) and not isinstance(faults, bool):
            rec["process_minor_faults"] = rec["minor_faults"]
            rec["minor_faults"] = faults
    rec["metrics"] = metrics
    rec["ok"] = True
    return rec


def _signal_name(code: int) -> str | None:
    return signal.Signals(-code).name if code < 0 and -code in signal.Signals._value2member_map_ else None


SCRATCH_PREFIX = "strata-lab-run-"
SCRATCH_GRACE_S = 60.0  # a scratch directory without its lock yet: being made, unless this old
_SCRATCH: dict = {"dir": None}  # the running execute()'s scratch directory


def sweep_scratch(parent: Path | None = None) -> list[Path]:
    """Remove the scratch directories that runs killed with SIGKILL (or a crash of Python, a
    reboot without a tmpfs /tmp) left in the system's temporary directory: those whose `lock`
    no process holds.  A run holds an exclusive flock on its own for as long as it lives, and the
    kernel drops it when the process dies however it dies, so a running lab's directory (another
    run's beside this one included) is never touched.  Returns what was removed."""
    parent = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    removed = []
    try:
        entries = [e for e in os.scandir(parent)
                   if e.name.startswith((SCRATCH_PREFIX, "." + SCRATCH_PREFIX))
                   and e.is_dir(follow_symlinks=False)]
    except OSError:
        return removed
    for e in entries:
        d = Path(e.path)
        try:
            young = time.time() - e.stat(follow_symlinks=False).st_mtime < SCRATCH_GRACE_S
            fd = os.open(d / "lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = None  # no lock: a run between mkdtemp and its lock, or a crash right there
        except OSError:
            continue
        try:
            if fd is None or e.name.startswith("."):
                if young:
                    continue
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # its run is alive
            shutil.rmtree(d, ignore_errors=True)
            if not os.path.lexists(d):
                removed.append(d)
        finally:
            if fd is not None:
                os.close(fd)
    return removed


@contextmanager
def scratch_dir():
    """The run's scratch directory, $TMPDIR/strata-lab-run-XXXXXXXX/: every sample's temporary
    directory (the launcher's files, a driver's TMPDIR, cachegrind's output) is made in it and
    removed after the sample.  The run removes it when it ends, interrupted (SIGINT, SIGTERM,
    SIGHUP) or not; after SIGKILL the next run removes it (sweep_scratch)."""
    sweep_scratch()
    # Made under a hidden name and locked before it takes its real one, so that a sweep by
    # another run never sees it unlocked.
    try:
        tmp = Path(tempfile.mkdtemp(prefix="." + SCRATCH_PREFIX))
    except OSError as e:  # a full /tmp, no inodes left: one line, not a traceback
        raise LabError(f"cannot make the run's scratch directory ($TMPDIR, else /tmp): "
                       f"{e.strerror or e}" + (f": {e.filename}" if e.filename else "")) from None
    fd = None
    try:
        try:
            fd = os.open(tmp / "lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, f"{os.getpid()}\n".encode())  # for a person: which lab made it
            d = tmp.with_name(tmp.name[1:])
            os.rename(tmp, d)
        except OSError as e:
            raise LabError(f"cannot make the run's scratch directory {tmp}: {e.strerror or e} "
                           "($TMPDIR says where)") from None
        tmp = d
        _SCRATCH["dir"] = str(d)
        yield d
    finally:
        _SCRATCH["dir"] = None
        shutil.rmtree(tmp, ignore_errors=True)
        if fd is not None:
            os.close(fd)


def run_sample(cell: Cell, variant: Variant, cpus: list[int] | None, extra_env: dict,
               stats_file: Path | None, parse: Callable[[Cell, str], dict]) -> dict:
    """Run one process and describe it.  Never raises for a workload's failure: a crash, a
    timeout or unparsable output comes back as {"ok": False, "failure": {...}}."""
    launcher = spawner()
    with tempfile.TemporaryDirectory(prefix="sample-" if _SCRATCH["dir"] else "strata-lab-",
                                     dir=_SCRATCH["dir"]) as tmp:
        prefix = Path(tmp) / "sample"
        argv, full, env = _command(cell, variant, extra_env, stats_file, launcher, prefix)
        rec: dict = {"started": now_iso(), "argv": argv, "cpus": cpus, "ok": False, "failure": None}
        try:
            ran = _watch(full, env, cpus, cell.timeout_s, launcher, prefix)
        except OSError as e:
            rec["failure"] = {"kind": "spawn", "message": str(e), "exit_status": None,
                              "stderr_tail": ""}
            return rec
        ignored = _preload_ignored(prefix.with_name("stderr"), variant.library)
    u = ran.usage
    rec.update({
        "wall_s": ran.wall_s, "user_s": u["utime"], "sys_s": u["stime"],
        "peak_rss_kb": u["maxrss"], "voluntary_ctx_switches": u["nvcsw"],
        "involuntary_ctx_switches": u["nivcsw"], "minor_faults": u["minflt"],
        "major_faults": u["majflt"], "exit_status": ran.code, "rusage_source": ran.rusage_source,
        **ran.noise,
    })
    ts, vs = _downsample(ran.t_ms, ran.rss_kb)
    rec["rss_timeline"] = {"interval_ms": RSS_INTERVAL_S * 1000, "source": "lab", "t_ms": ts, "rss_kb": vs}
    return _outcome(rec, cell, ran, parse, ignored)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Interrupted(Exception):
    def __init__(self, signame: str):
        super().__init__(signame)
        self.signame = signame


@contextmanager
def sigterm_as_interrupt():
    def handler(signum, frame):
        raise Interrupted(signal.Signals(signum).name)
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def oversubscribed(cell: Cell, cpus: list[int]) -> bool:
    return cell.threads > len(cell.cpus if cell.cpus is not None else cpus)


def plan(cells: list[Cell], variants: list[Variant], rounds: int, warmup: int, seed: int):
    """The sample order: warm-ups of each cell before its first counted sample, then per round
    every cell with the variants in a fresh random order (interleaved, so drift in the machine
    spreads over all variants instead of biasing one)."""
    rng = random.Random(seed)
    order = []
    for r in range(rounds):
        for cell in cells:
            vs = list(variants)
            rng.shuffle(vs)
            if r == 0:
                for _ in range(warmup):
                    for v in vs:
                        order.append((cell, v, None))
            for v in vs:
                order.append((cell, v, r))
    return order


NOISE_THRESHOLD = 0.10  # a sample that lost more than this share of its CPUs is re-run
MAX_RERUNS = 6          # re-runs per cell (over all its variants and rounds)
TARGET_WIDTH = 0.03     # a cell has converged when every ratio's interval is within ±3 %
TIME_BUDGET_S = 600.0   # the whole run, adaptive rounds included, ends within this many seconds
MAX_ROUNDS = 50
ALWAYS_ROUNDS = 2       # rounds every cell runs even past the budget: an interval needs two pairs


def instructions_argv(cell: Cell, out_file: Path) -> list:
    """The cell's command under cachegrind: counts the instructions the program executes, a
    figure a shared machine's noise does not move (single-threaded cells only)."""
    return ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--branch-sim=no",
            f"--cachegrind-out-file={out_file}", *cell.argv]


def run_instructions(cell: Cell, variant: Variant, cpus, extra_env: dict, parse) -> dict:
    """One sample of `cell` under cachegrind: the workload's own JSON plus `instructions` (Ir of
    the program) and, when the workload reports `ops`, `instructions_per_op`."""
    with tempfile.TemporaryDirectory(prefix="cachegrind-" if _SCRATCH["dir"] else "strata-lab-cg-",
                                     dir=_SCRATCH["dir"]) as tmp:
        out = Path(tmp) / "cachegrind.out"
        vcell = replace(cell, argv=instructions_argv(cell, out), timeout_s=cell.timeout_s * 20)
        rec = run_sample(vcell, variant, cpus, extra_env, None, parse)
        rec["kind"] = "instructions"
        if not rec["ok"]:
            return rec
        ir = None
        try:
            for line in out.read_text().splitlines():
                if line.startswith("summary:"):
                    ir = int(line.split()[1])
        except (OSError, ValueError, IndexError):
            ir = None
    if ir is None:
        rec["ok"] = False
        rec.pop("metrics", None)
        rec["failure"] = {"kind": "parse", "message": "cachegrind wrote no instruction count",
                          "exit_status": rec.get("exit_status"), "signal": None, "stderr_tail": "",
                          "stdout_tail": ""}
        return rec
    rec["instructions"] = ir
    ops = rec["metrics"].get("ops")
    if isinstance(ops, (int, float)) and ops > 0:
        rec["instructions_per_op"] = ir / ops
    return rec


def instruction_cells(cells: list[Cell]) -> list[Cell]:
    """Cells valgrind can count: one thread (it serialises threads), the allocator preloaded into
    the command itself (a driver would count its own instructions)."""
    return [c for c in cells if c.threads == 1 and c.preload == "env"]


def cell_ratios(doc: RunDoc, cell: Cell, variants: list[Variant], baseline: str) -> dict:
    """Paired ratio (stats.PairedRatio or None) of every non-baseline variant of a cell so far."""
    from . import analysis, stats

    rb = analysis.by_round(doc.counted(cell.id, baseline))
    out = {}
    for v in variants:
        if v.name == baseline:
            continue
        rv = analysis.by_round(doc.counted(cell.id, v.name))
        pv, pb = analysis.paired(rv, rb, lambda s: s.metric(cell.metric))
        out[v.name] = stats.paired_speedup(pv, pb, cell.higher_is_better) if pv else None
    return out


def converged(ratios: dict, target: float) -> bool:
    """Every ratio's interval within ±target and of full 95 % coverage (PairedRatio.within): a
    (min, max) of fewer than 6 rounds does not end a cell's adaptive rounds however narrow."""
    return all(p is not None and p.within(target) for p in ratios.values())


def divide(budget: float, needs: dict) -> dict:
    """Split `budget` seconds among cells by what each still needs to reach its target: from the
    smallest need up, each cell that still fits gets all it needs; the cells that do not fit
    share what is left evenly.  The most cells finish, and a cell that cannot finish in time only
    gets what no cell that could was going to use."""
    out, left = {}, max(0.0, budget)
    items = sorted(needs.items(), key=lambda kv: (kv[1], str(kv[0])))
    rest = []
    for key, need in items:
        if not rest and need <= left:
            out[key] = max(0.0, need)
            left -= out[key]
        else:
            rest.append(key)
    for key in rest:
        out[key] = left / len(rest)
    return out


class Clock:
    """Seconds since the run started, and how the run's time was spent per cell and variant: the
    estimates the budget is divided by.  Tests replace `now` with a virtual clock."""

    def __init__(self, budget_s: float, now: Callable[[], float] = time.monotonic):
        self.now = now
        self.t0 = now()
        self.budget_s = budget_s
        self.spent: dict[tuple[str, str], list[float]] = {}

    def elapsed(self) -> float:
        return self.now() - self.t0

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def record(self, cell_id: str, variant: str, seconds: float) -> None:
        self.spent.setdefault((cell_id, variant), []).append(seconds)

    def cost(self, cell_id: str, variants) -> float | None:
        """What one round of `variants` in the cell takes: the sum of each one's median time per
        sample so far (re-runs included); None before every variant has run once."""
        total = 0.0
        for v in variants:
            got = self.spent.get((cell_id, v))
            if not got:
                return None
            total += sorted(got)[len(got) // 2]
        return total

    def cell_spent(self, cell_id: str) -> float:
        return sum(sum(x) for (c, _), x in self.spent.items() if c == cell_id)

    def fits(self, seconds: float | None) -> bool:
        return self.budget_s <= 0 or seconds is None or self.elapsed() + seconds <= self.budget_s


def execute(suite: Suite, cells: list[Cell], variants: list[Variant], *, rounds: int, warmup: int,
            cpus: list[int], out_dir: Path, baseline: str, settings: dict, command: list[str],
            on_sample: Callable[[int, int, Sample], None] | None = None,
            on_start: Callable[[int, int, Cell, Variant, int | None], None] | None = None,
            seed: int | None = None, noise_threshold: float | None = NOISE_THRESHOLD,
            max_reruns: int = MAX_RERUNS, target_width: float = TARGET_WIDTH,
            time_budget_s: float = 0.0, max_rounds: int = MAX_ROUNDS,
            converge: list[str] | None = None, instructions: bool = False,
            now: Callable[[], float] = time.monotonic) -> RunDoc:
    """Run everything, writing out_dir/results.json after every sample.  Returns the document.

    1. The planned samples: warm-ups, then `rounds` interleaved rounds, round after round over all
       cells.  A counted sample that lost more than `noise_threshold` of its CPUs (steal and other
       processes) is run again at once, at most `max_reruns` times per cell; the worse of the two
       is kept, marked `superseded_by`, and left out of the statistics.
    2. With `instructions`, one cachegrind sample per single-threaded cell and variant.
    3. Adaptive rounds: cells whose ratios to the baseline (those of the `converge` variants;
       default: every variant) are not all within ±`target_width` get more rounds of the
       baseline and the `converge` variants, up to `max_rounds`.

    `time_budget_s` (> 0) is the whole run's: past ALWAYS_ROUNDS, a cell's planned round that
    would end after it is left out, and what is left after the planned rounds is divided among
    the unconverged cells (`divide`), so the run ends on time.  0: the planned rounds only.  Why
    a cell stopped short is recorded under `convergence`."""
    clock = Clock(time_budget_s, now)
    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    order = plan(cells, variants, rounds, warmup, seed)
    icells = instruction_cells(cells) if instructions else []
    names = [v.name for v in variants]
    goal = [n for n in (converge if converge is not None else names) if n in names and n != baseline]
    if not goal:
        goal = [n for n in names if n != baseline]
    focus = [v for v in variants if v.name == baseline or v.name in goal]  # adaptive rounds run these
    doc = RunDoc(
        schema=results.SCHEMA, schema_version=results.SCHEMA_VERSION,
        run_id=out_dir.name, suite=suite.name, description=suite.description,
        created=now_iso(), command=command, lab_version=__version__,
        git=machine.git_revision(), machine=machine.describe(),
        settings={**settings, "rounds": rounds, "warmup": warmup, "cpus": cpus,
                  "baseline": baseline, "order_seed": seed,
                  "planned_samples": len(order) + len(icells) * len(variants),
                  "noise_threshold": noise_threshold, "max_reruns_per_cell": max_reruns,
                  "target_width": target_width, "time_budget_s": time_budget_s,
                  "max_rounds": max_rounds, "converge": goal, "instructions": bool(instructions)},
        variants={v.name: v.info for v in variants},
        cells=[{**c.to_json(), "oversubscribed": oversubscribed(c, cpus)} for c in cells],
        samples=[])
    path = out_dir / results.FILENAME
    saved = {"samples": None}  # how many samples the last results.json written holds

    def stop(e: OSError, what: Path | str) -> LabError:
        # A disk that fills up or a run directory that becomes read-only mid-run: the run stops
        # (what it measured next could not be kept either) with one line saying what is kept,
        # not a traceback.  write_atomic leaves the previous results.json whole.
        n = saved["samples"]
        kept = ("nothing was written" if n is None else
                # The run directory removed under the run (a /tmp cleaner, a hasty rm -r): the
                # message said the samples were in a file that no longer existed.
                f"nothing is kept: {path} is gone (its directory was removed or moved)"
                if not path.is_file() else
                f"no sample had finished ({path} is marked incomplete)" if n == 0 else
                f"the 1 sample that finished is in {path} (marked incomplete)" if n == 1 else
                f"the {n} samples that finished are in {path} (marked incomplete)")
        return LabError(f"cannot write {what}: {e.strerror or e}; the run stops: {kept}")

    def save() -> None:
        try:
            results.write_atomic(path, doc)
        except OSError as e:
            raise stop(e, path) from None
        saved["samples"] = len(doc.samples)

    save()
    stats_dir = out_dir / "strata-stats"
    reruns: dict[str, int] = {c.id: 0 for c in cells}

    def total() -> int:
        return doc.settings["planned_samples"]

    def one(cell: Cell, v: Variant, rnd: int | None, rerun_of: int | None = None,
            kind: str = "time") -> Sample:
        i = len(doc.samples)
        if on_start:
            on_start(i, total(), cell, v, rnd)
        stats_file = None
        extra = {"STRATA_LAB_VARIANT": v.name, "STRATA_LAB_CELL": cell.id,
                 "STRATA_LAB_ROUND": "warmup" if rnd is None and kind == "time" else str(rnd)}
        run_cpus = list(cell.cpus) if cell.cpus is not None else cpus
        try:
            if v.stats_env and v.library:
                stats_dir.mkdir(exist_ok=True)
                stats_file = stats_dir / f"{i:05d}.json"
            if kind == "instructions":
                rec = run_instructions(cell, v, run_cpus, extra, suite.parse)
            else:
                rec = run_sample(cell, v, run_cpus, extra, stats_file, suite.parse)
        except OSError as e:
            # The run directory's strata-stats/ or the sample's temporary directory could not be
            # made (a full disk or /tmp, no inodes left, a directory made read-only): as for
            # results.json, one line, not a traceback.  A workload that fails to start is a
            # failed sample (run_sample), not this.
            raise stop(e, e.filename or "the run's files") from None
        if stats_file is not None and stats_file.is_file():
            try:
                rec["strata_stats"] = json.loads(stats_file.read_text())
            except (json.JSONDecodeError, OSError) as e:
                rec["strata_stats"] = {"error": f"unreadable STRATA_STATS_FILE: {e}"}
        s = Sample.from_json({"index": i, "cell": cell.id, "variant": v.name, "round": rnd,
                              "warmup": rnd is None and kind == "time", "rerun_of": rerun_of, **rec})
        if kind == "time" and noise_threshold is not None and rnd is not None:
            s = replace(s, noisy=s.lost > noise_threshold)
        doc.samples.append(s)
        save()
        if on_sample:
            on_sample(i, total(), s)
        return s

    def measured(cell: Cell, v: Variant, rnd: int | None) -> None:
        t0 = clock.now()
        s = one(cell, v, rnd)
        if s.noisy and s.ok and reruns[cell.id] < max_reruns:
            # Run it again at once (still next to the other variants of its round, so the
            # pairing holds); keep the one that lost less, never hide a failure.
            reruns[cell.id] += 1
            doc.settings["planned_samples"] += 1
            again = one(cell, v, rnd, rerun_of=s.index)
            if again.ok:
                keep, drop = (again, s) if again.lost <= s.lost else (s, again)
                doc.samples[drop.index] = replace(drop, superseded_by=keep.index)
                save()
        clock.record(cell.id, v.name, clock.now() - t0)

    with sigterm_as_interrupt(), scratch_dir():
        try:
            done = {c.id: 0 for c in cells}  # counted rounds run per cell
            stopped: dict[str, str] = {}
            checked: set[tuple[str, int]] = set()
            for cell, v, rnd in order:
                if cell.id in stopped:
                    continue
                first = rnd is not None and (cell.id, rnd) not in checked
                checked.add((cell.id, rnd))
                if first and rnd >= ALWAYS_ROUNDS and not clock.fits(clock.cost(cell.id, names)):
                    # Its next planned round would end past the budget: the cell stops here
                    # (later rounds would not fit either).
                    stopped[cell.id] = "budget"
                    doc.settings["planned_samples"] -= len(variants) * (rounds - rnd)
                    continue
                measured(cell, v, rnd)
                if rnd is not None:
                    done[cell.id] = rnd + 1
            for cell in icells:
                for v in variants:
                    one(cell, v, None, kind="instructions")
            _adaptive_rounds(doc, cells, focus, goal, baseline, clock, done, stopped, measured,
                             target_width, max_rounds, seed)
            _record_convergence(doc, cells, variants, goal, baseline, clock, done, stopped,
                                target_width, max_rounds)
            save()
        except KeyboardInterrupt:
            doc.interrupted = "SIGINT"
            save()
            raise
        except Interrupted as e:
            doc.interrupted = e.signame
            save()
            raise
    doc.complete = True
    doc.finished = now_iso()
    save()
    return doc


def _goal_ratios(doc: dict, cell: Cell, variants: list[Variant], goal: list[str], baseline: str) -> dict:
    return {v: p for v, p in cell_ratios(doc, cell, variants, baseline).items() if v in goal}


def _rounds_needed(ratios: dict, target: float) -> int | None:
    from . import stats

    need = [stats.rounds_needed(p, target) for p in ratios.values() if p is not None]
    return max([n for n in need if n is not None], default=None)


def _adaptive_rounds(doc, cells, focus, goal, baseline, clock, done, stopped, measured,
                     target_width, max_rounds, seed) -> None:
    """More rounds of the `focus` variants for the cells not yet within the target, pass after
    pass, while the budget lasts.  Each pass divides the time left among the unconverged cells
    by what each would still need (rounds needed x the cost of one of its rounds); a cell runs
    one more round when its share covers it, the cheapest to finish first."""
    if clock.budget_s <= 0:
        return
    rng = random.Random(seed + 1)
    names = [v.name for v in focus]
    while True:
        pending, need = [], {}
        for c in cells:
            if c.id in stopped:
                continue
            ratios = _goal_ratios(doc, c, focus, goal, baseline)
            if converged(ratios, target_width):
                continue
            if any(p is None for p in ratios.values()):
                stopped[c.id] = "failures"
                continue
            if done[c.id] >= max_rounds:
                stopped[c.id] = "max_rounds"
                continue
            cost = clock.cost(c.id, names) or 0.0
            more = min(max_rounds, _rounds_needed(ratios, target_width) or max_rounds) - done[c.id]
            pending.append((c, cost))
            need[c.id] = max(1, more) * cost
        share = divide(clock.left(), need)
        ran = False
        for c, cost in sorted(pending, key=lambda x: (need[x[0].id], x[0].id)):
            if share[c.id] < cost or not clock.fits(cost):
                continue  # not this pass; time freed by cells that converge may come back to it
            vs = list(focus)
            rng.shuffle(vs)
            doc.settings["planned_samples"] += len(vs)
            for v in vs:
                measured(c, v, done[c.id])
            done[c.id] += 1
            ran = True
        if not ran:
            return


def _record_convergence(doc, cells, variants, goal, baseline, clock, done, stopped,
                        target_width, max_rounds) -> None:
    state = {}
    for c in cells:
        ratios = _goal_ratios(doc, c, variants, goal, baseline)
        ok = converged(ratios, target_width)
        need = _rounds_needed(ratios, target_width)
        reason = None
        if not ok:
            if any(p is None for p in ratios.values()):
                reason = "failures"
            elif clock.budget_s <= 0:
                reason = "rounds"
            else:
                reason = stopped.get(c.id) or "budget"
                if reason == "budget" and need is not None and need > max_rounds:
                    reason = "spread"
        state[c.id] = {"rounds": done[c.id], "converged": ok, "reason": reason,
                       "rounds_needed": None if ok else need,
                       "spent_s": round(clock.cell_spent(c.id), 1),
                       "half_width": {v: (p.half_width if p is not None else None)
                                      for v, p in ratios.items()}}
    doc.convergence = {"target_width": target_width, "time_budget_s": clock.budget_s,
                          "max_rounds": max_rounds, "converge": goal,
                          "elapsed_s": round(clock.elapsed(), 1), "cells": state}
