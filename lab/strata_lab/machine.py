"""What this machine is: recorded with every result so numbers are never read without context."""

from __future__ import annotations

import gzip
import os
import platform
import re
import subprocess
from pathlib import Path

from . import paths


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
