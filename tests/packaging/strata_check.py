"""Shared by the packaging tests: run a program with strata's exit statistics written to files,
and check from them that strata served it."""
import glob
import json
import os
import subprocess
import tempfile
from pathlib import Path

CONSUMER = Path(__file__).resolve().parent / "consumer"  # the find_package(strata) project


class Failures:
    """Collects failed checks; each check prints one line."""

    def __init__(self):
        self.names = []

    def check(self, name, ok, detail=""):
        print(f"{name}: {'ok' if ok else 'FAILED'}{' (' + detail + ')' if detail else ''}", flush=True)
        if not ok:
            self.names.append(name)
        return ok

    def exit(self):
        if self.names:
            print("failed:", ", ".join(self.names))
            raise SystemExit(1)
        print("all passed")


def run_with_stats(cmd, env=None, timeout=120):
    """Runs cmd with STRATA_STATS_FILE=<dir>/strata-%p.json (one file per process).
    Returns (CompletedProcess, [statistics documents])."""
    with tempfile.TemporaryDirectory(prefix="strata-stats-") as d:
        e = dict(os.environ)
        e.pop("LD_PRELOAD", None)
        e.update(env or {})
        e["STRATA_STATS_FILE"] = os.path.join(d, "strata-%p.json")
        proc = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
        return proc, read_stats(d)


def read_stats(directory):
    docs = []
    for path in sorted(glob.glob(os.path.join(directory, "strata-*.json"))):
        with open(path) as f:
            text = f.read()
        docs.append(json.loads(text) if text else {})
    return docs


def served(doc, min_mallocs):
    """None when the statistics document shows strata served at least min_mallocs allocations
    without bad frees, else what is wrong."""
    if doc.get("allocator") != "strata":
        return f"not strata's statistics: {str(doc)[:200]}"
    if doc.get("malloc_count", 0) < min_mallocs:
        return f"only {doc.get('malloc_count')} mallocs through strata (want >= {min_mallocs})"
    if doc.get("bad_free_count", 0):
        return f"{doc['bad_free_count']} bad frees"
    return None


def soname(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "(SONAME)" in line:
            return line.split("[")[1].rstrip("]")
    return None


def sh(*cmd, **kw):
    """Runs a command that must succeed; on failure prints its output and stops the test."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        print(f"$ {' '.join(map(str, cmd))}\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
        raise SystemExit(f"command failed with status {r.returncode}")
    return r.stdout


def build_consumer(cmake, cxx, prefix, build_dir):
    """Configures and builds the consumer project against the strata installed under prefix."""
    sh(cmake, "-S", CONSUMER, "-B", build_dir, f"-DCMAKE_PREFIX_PATH={prefix}",
       f"-DCMAKE_CXX_COMPILER={cxx}", "-DCMAKE_BUILD_TYPE=Release")
    sh(cmake, "--build", build_dir)
    return Path(build_dir)


def check_consumer(f, name, exe, env=None):
    """Runs the consumer, which counts its own allocations; strata's counts (strata_stats_get
    in the program, the exit statistics file) must cover them."""
    proc, docs = run_with_stats([str(exe)], env)
    if not f.check(f"{name}: runs", proc.returncode == 0, proc.stderr[-300:]):
        return
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    grew = out["after"] - out["before"]
    f.check(f"{name}: strata_stats_get counts the program's mallocs", grew >= out["allocations"],
            f"{grew} counted for {out['allocations']} made")
    problem = served(docs[0], out["allocations"]) if len(docs) == 1 else f"{len(docs)} statistics files"
    f.check(f"{name}: exit statistics show strata served it", problem is None, problem or "")
