"""The peers built from crates.io sources (scripts/build_peers.sh): found with their versions, and
really serving a program's allocations when preloaded.  Skipped, with the fix, when not built."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from strata_lab import allocators
from strata_lab.errors import LabError

from .conftest import ROOT, program

BUILT_PEERS = ("snmalloc", "rpmalloc")

# Run under LD_PRELOAD: where does the process's malloc come from, is that library mapped, and does
# a block it returns lie outside the brk heap (glibc's main arena; both peers map their memory)?
PROBE = r"""
import ctypes, json, sys
class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc_usable_size.argtypes = [ctypes.c_void_p]
info = DlInfo()
libc.dladdr(ctypes.cast(libc.malloc, ctypes.c_void_p), ctypes.byref(info))
blocks = [libc.malloc(n) for n in (16, 100, 4000, 100000, 3 << 20)]
heap = []
maps = open("/proc/self/maps").read()
for line in maps.splitlines():
    if line.endswith("[heap]"):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        heap.append((lo, hi))
print(json.dumps({"malloc_from": info.fname.decode(), "mapped": sys.argv[1] in maps,
                  "in_brk_heap": [any(lo <= p < hi for lo, hi in heap) for p in blocks],
                  "usable": [libc.malloc_usable_size(p) for p in blocks]}))
"""


def _peer(name: str) -> allocators.Allocator:
    a = allocators.locate(name)
    if a is None:
        pytest.skip(f"{name} is not built here (run scripts/build_peers.sh)")
    return a


@pytest.mark.parametrize("name", BUILT_PEERS)
def test_peer_found_with_version(name):
    a = _peer(name)
    assert a.library and a.library.startswith(str(allocators.peers_dir().resolve()))
    assert a.source.startswith("crate:")
    assert a.version != "unknown" and a.extra.get("crate_version"), a
    info = json.loads((allocators.peers_dir() / "versions.json").read_text())
    assert info[name]["crate_version"] in a.version


@pytest.mark.parametrize("name", BUILT_PEERS)
def test_peer_serves_allocations_when_preloaded(name):
    a = _peer(name)
    r = subprocess.run([sys.executable, "-c", PROBE, a.library], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "LD_PRELOAD": a.library})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert os.path.realpath(got["malloc_from"]) == os.path.realpath(a.library), got
    assert got["mapped"], got
    assert not any(got["in_brk_heap"]), got  # not glibc's main arena
    assert all(u >= n for u, n in zip(got["usable"], (16, 100, 4000, 100000, 3 << 20))), got


@pytest.mark.parametrize("name", BUILT_PEERS)
@pytest.mark.parametrize("pattern", ["prodcon-batch-mixed", "churn", "bigbuf", "randsize", "larson"])
def test_peer_runs_workloads(name, pattern):
    """Threads, remote frees, threads that exit, big blocks: the peer survives each (smoke sizes)."""
    a = _peer(name)
    exe = program("strata-bench-patterns")
    r = subprocess.run([str(exe), "--pattern", pattern, "--threads", "2", "--smoke"], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "LD_PRELOAD": a.library})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["ops"] > 0


def test_missing_peer_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(allocators, "peers_dir", lambda: tmp_path)
    assert allocators.locate("snmalloc") is None
    with pytest.raises(LabError, match="scripts/build_peers.sh"):
        allocators.resolve("rpmalloc")


def test_build_peers_is_idempotent():
    """Already built: the script checks its stamps and does nothing (no fetch, no compile)."""
    for name in BUILT_PEERS:
        _peer(name)
    before = {p: p.stat().st_mtime_ns for p in allocators.peers_dir().iterdir()}
    r = subprocess.run([str(ROOT / "scripts" / "build_peers.sh")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "", r.stdout
    assert {p: p.stat().st_mtime_ns for p in allocators.peers_dir().iterdir()} == before
