"""Shared fixtures: the repository, the built workload programs and library, a lab runner."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("STRATA_BUILD", ROOT / "build"))
TARGETS = ["strata-bench-e1-sizeclass", "strata-bench-patterns", "strata-bench-e2-frag", "strata_shared"]
NEEDED = [BUILD / "bin" / "strata-bench-e1-sizeclass", BUILD / "bin" / "strata-bench-patterns",
          BUILD / "bin" / "strata-bench-e2-frag", BUILD / "lib" / "libstrata.so"]


@pytest.fixture(scope="session")
def built() -> Path:
    """The build directory with the workloads and libstrata.so; builds them when missing
    (`make test` has built them already).  A build failure fails the tests that need it."""
    if all(p.exists() for p in NEEDED):
        return BUILD
    if not shutil.which("cmake"):
        pytest.skip("cmake is not installed, so build/ cannot be made (scripts/setup.sh installs it)")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    for cmd in (["cmake", "-S", str(ROOT), "-B", str(BUILD), *gen, "-DCMAKE_BUILD_TYPE=Release"],
                ["cmake", "--build", str(BUILD), "--target", *TARGETS]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            pytest.fail(f"building the lab's prerequisites failed: {' '.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    missing = [str(p) for p in NEEDED if not p.exists()]
    if missing:
        pytest.fail(f"build finished but these are missing: {missing}")
    return BUILD


def program(target: str) -> Path:
    """build/bin/<target>; only that target is configured and built when it is missing."""
    exe = BUILD / "bin" / target
    if exe.exists():
        return exe
    if not shutil.which("cmake"):
        pytest.skip("cmake is not installed")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    for cmd in (["cmake", "-S", str(ROOT), "-B", str(BUILD), *gen, "-DCMAKE_BUILD_TYPE=Release"],
                ["cmake", "--build", str(BUILD), "--target", target]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return exe


def lab(*args: str, env: dict | None = None, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """Run the strata-lab command line in a child process (as a user would)."""
    e = dict(os.environ)
    e.update(env or {})
    e["STRATA_ROOT"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "strata_lab", *args], capture_output=True, text=True,
                          env=e, timeout=timeout, **kw)


@pytest.fixture
def run_lab():
    return lab
