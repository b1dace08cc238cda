"""What this machine is, recorded with every result so numbers are never read without context;
and what the lab asks the kernel while it runs: the CPUs it may use (CPU lists, pinning) and what
/proc says about them (busy and stolen time, a process's RSS)."""

from __future__ import annotations

import errno
import gzip
import os
import platform
import re
import subprocess
from contextlib import contextmanager
from pathlib import Path

from . import paths
from .errors import LabError

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _selected(text: str | None) -> str | None:
    """'always [madvise] never' -> 'madvise'."""
    if not text:
        return None
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text


def cpu_model() -> str:
    info = _read("/proc/cpuinfo") or ""
    for key in ("model name", "Hardware", "cpu model"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", info, re.M)
        if m:
            return m.group(1).strip()
    return platform.processor() or "unknown"


def config_hz() -> int | None:
    """CONFIG_HZ from the kernel's config (/boot/config-<release> or /proc/config.gz)."""
    text = _read(f"/boot/config-{platform.release()}")
    if text is None:
        try:
            with gzip.open("/proc/config.gz", "rt") as f:
                text = f.read()
        except OSError:
            return None
    m = re.search(r"^CONFIG_HZ=(\d+)$", text, re.M)
    return int(m.group(1)) if m else None


def git_revision() -> dict:
    root = paths.repo_root()
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                                 timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None
    rev = git("rev-parse", "HEAD") or "unknown"
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"revision": rev, "dirty": bool(status) if status is not None else None}


def describe() -> dict:
    governors = sorted({g for g in (_read(p) for p in
                        Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")) if g})
    mem_kb = None
    m = re.search(r"^MemTotal:\s+(\d+) kB", _read("/proc/meminfo") or "", re.M)
    if m:
        mem_kb = int(m.group(1))
    return {
        "hostname": platform.node(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "kernel_version": platform.version(),
        "arch": platform.machine(),
        "memory_kb": mem_kb,
        "thp_enabled": _selected(_read("/sys/kernel/mm/transparent_hugepage/enabled")),
        "thp_defrag": _selected(_read("/sys/kernel/mm/transparent_hugepage/defrag")),
        "cpu_governor": ",".join(governors) if governors else None,
        "config_hz": config_hz(),
        "os": (re.search(r'^PRETTY_NAME="?([^"\n]+)', _read("/etc/os-release") or "", re.M) or [None, None])[1],
        "python": platform.python_version(),
        "loadavg": _read("/proc/loadavg"),
    }


# ---- CPU sets and /proc, while the lab runs ----------------------------------------------------

def parse_cpus(text: str) -> list[int]:
    """'0,2-3' -> [0, 2, 3], checked against the CPUs this process may use."""
    allowed = sorted(os.sched_getaffinity(0))
    out: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if not part:
                raise ValueError
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi or lo < 0:
                    raise ValueError
                # Only the CPUs that exist are kept: a range is not expanded past them ('0-10**20'
                # built a set until the machine ran out of memory), and the first CPU past them
                # stands for the rest in the message.
                top = allowed[-1] + 1 if allowed else 0
                out.update(range(lo, min(hi, max(lo, top)) + 1))
            else:
                v = int(part)
                if v < 0:
                    raise ValueError
                out.add(v)
    except ValueError:
        raise LabError(f"bad CPU list {text!r}: use e.g. 0 or 0,1 or 0-3 "
                       f"(CPUs available here: {cpu_ranges(allowed)})") from None
    bad = sorted(out - set(allowed))
    if bad:
        raise LabError(f"bad CPU list {text!r}: CPU {', '.join(map(str, bad))} not available "
                       f"(CPUs available here: {cpu_ranges(allowed)})")
    return sorted(out)


def cpu_ranges(cpus: list[int]) -> str:
    parts, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


@contextmanager
def pinned(cpus: list[int] | None):
    """Children inherit the spawning thread's CPU mask: set it around the spawn only."""
    if not cpus:
        yield
        return
    old = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise  # not permitted here at all (a seccomp filter): as the kernel says
        got = set()
    else:
        got = os.sched_getaffinity(0)
    if got != set(cpus):
        # The CPUs the lab may use shrank since the run began (its cpuset rewritten, a CPU taken
        # offline): the kernel refuses a mask wholly outside them (EINVAL, which alone named
        # nothing) and quietly narrows one that overlaps them, and the sample would run on fewer
        # CPUs than recorded (an oversubscribed cell not flagged).  The sample fails, saying so.
        try:
            os.sched_setaffinity(0, old)
        except OSError:
            pass
        gave = f"the kernel gave only CPUs {cpu_ranges(sorted(got))}" if got else "the kernel refused them"
        raise OSError(errno.EINVAL, f"cannot pin to CPUs {cpu_ranges(sorted(cpus))}: {gave} (the CPUs "
                                    "the lab may use shrank after the run began: a cpuset rewritten, a "
                                    "CPU taken offline)")
    try:
        yield
    finally:
        try:
            os.sched_setaffinity(0, old)
        except OSError:
            pass  # none of `old` is left to the lab: it keeps what the kernel gave it


def rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as f:
            kb = int(f.read().split()[1]) * PAGE_KB
    except (OSError, ValueError, IndexError):
        return None
    return kb or None  # 0: an exiting process whose memory is already gone


def cpu_jiffies(cpus: list[int] | None = None) -> tuple[int, int] | None:
    """(busy, steal) jiffies since boot summed over `cpus` (the aggregate line when None), from
    /proc/stat.  Busy counts every non-idle state, steal included (time the hypervisor gave our
    virtual CPU's turn to someone else)."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    want = {"cpu"} if not cpus else {f"cpu{c}" for c in cpus}
    busy = steal = 0
    seen = 0
    for line in lines:
        parts = line.split()
        if not parts or parts[0] not in want:
            continue
        try:
            user, nice, system, idle, iowait, irq, softirq, st = (int(x) for x in parts[1:9])
        except ValueError:
            return None
        busy += user + nice + system + irq + softirq + st
        steal += st
        seen += 1
    return (busy, steal) if seen == len(want) else None


def self_cpu_s() -> float:
    """CPU seconds the lab itself has used (its RSS polling runs while the sample does)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime
