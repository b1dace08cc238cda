"""Where the lab finds the repository, its build and its results."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import LabError


def repo_root() -> Path:
    """The strata checkout: $STRATA_ROOT, else the checkout this package lives in, else cwd."""
    env = os.environ.get("STRATA_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parent.parent.parent  # lab/strata_lab/ -> repo
    if (here / "lab").is_dir() and (here / "CMakeLists.txt").is_file():
        return here
    return Path.cwd().resolve()


def build_dir() -> Path:
    return Path(os.environ.get("STRATA_BUILD", repo_root() / "build")).resolve()


def bench_bin(name: str) -> Path:
    """Path of build/bin/strata-bench-<name>; a clear error when it has not been built."""
    path = build_dir() / "bin" / f"strata-bench-{name}"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise LabError(
            f"workload program {path} is missing.\n"
            f"  build it with: cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && "
            f"cmake --build build --target strata-bench-{name}\n"
            f"  (or simply: make build)"
        )
    return path


def results_root() -> Path:
    return Path(os.environ.get("STRATA_RESULTS", repo_root() / "results"))
