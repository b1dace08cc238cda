#!/usr/bin/env python3
"""Memory-limit test (issue 13): the phases program under LD_PRELOAD=libstrata.so inside a memory
cgroup of its own.

Each phase of the program touches 60 % of the limit in one size class with two threads and frees
it (half of it by the other thread).  The program must survive (no OOM kill) and, where it calls
strata_collect between phases, strata's statistics and the cgroup's own count must show the memory
given back.  The cgroup is made with cgroup v2 (memory.max) where the memory controller can be
enabled there, else with v1's memory controller (memory.limit_in_bytes); where neither is allowed
(no such file system, not root, a read-only or delegated tree) the test is skipped, saying why.

Usage: cgroup_test.py <libstrata.so> <phases> <between>...   (between: none | idle | force, see
phases.cpp).  Exit status 0 passed, 1 failed, 77 skipped (ctest's SKIP_RETURN_CODE).
"""
import json
import os
import subprocess
import sys
import time

MiB = 1 << 20
LIMIT = 256 * MiB
FILL = 0.6
PHASES = 7
SKIP = 77


class Skip(Exception):
    pass


def mounts(fstype):
    with open("/proc/self/mounts") as f:
        for line in f:
            _, point, kind, opts = line.split()[:4]
            if kind == fstype:
                yield point, opts.split(",")


def own_path(controller):
    """This process's cgroup path in the hierarchy that has `controller` ("" for v2's)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            names = controllers.split(",") if controllers else []
            if (controller == "" and not names) or controller in names:
                return path
    return None


def write(path, value):
    with open(path, "w") as f:
        f.write(value)


def read_int(path):
    with open(path) as f:
        return int(f.read().split()[0])


class MemoryCgroup:
    """A child cgroup with a memory limit; `procs` is the file a pid is written to to join it."""

    def __init__(self, limit):
        self.limit = limit
        self.dir = None
        reasons = []
        for make in (self._make_v2, self._make_v1):
            try:
                make()
                return
            except (Skip, OSError) as e:
                reasons.append(str(e))
        raise Skip("; ".join(reasons))

    def _child_dir(self, parent):
        path = os.path.join(parent, f"strata-fault-{os.getpid()}")
        os.mkdir(path)
        self.dir = path
        return path

    def _make_v2(self):
        points = [p for p, _ in mounts("cgroup2")]
        if not points:
            raise Skip("cgroup v2: not mounted")
        mount = points[0]
        own = own_path("") or "/"
        why = []
        # Our own cgroup first (a delegated subtree), else the root, where processes may stay
        # while a controller is enabled for the children.
        for parent in dict.fromkeys([os.path.join(mount, own.lstrip("/")), mount]):
            try:
                with open(os.path.join(parent, "cgroup.controllers")) as f:
                    if "memory" not in f.read().split():
                        why.append(f"{parent}: the memory controller is not available (cgroup.controllers)")
                        continue
                with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                    if "memory" not in f.read().split():
                        write(os.path.join(parent, "cgroup.subtree_control"), "+memory")
                d = self._child_dir(parent)
                write(os.path.join(d, "memory.max"), str(self.limit))
                if os.path.exists(os.path.join(d, "memory.swap.max")):
                    write(os.path.join(d, "memory.swap.max"), "0")
                self.version, self.procs = 2, os.path.join(d, "cgroup.procs")
                self.usage = os.path.join(d, "memory.current")
                return
            except OSError as e:
                self.remove()
                why.append(f"{parent}: {e}")
        raise Skip("cgroup v2: " + "; ".join(why))

    def _make_v1(self):
        points = [p for p, opts in mounts("cgroup") if "memory" in opts]
        if not points:
            raise Skip("cgroup v1: no memory controller mounted")
        own = own_path("memory") or "/"
        parent = os.path.join(points[0], own.lstrip("/"))
        try:
            d = self._child_dir(parent)
            write(os.path.join(d, "memory.limit_in_bytes"), str(self.limit))
            if os.path.exists(os.path.join(d, "memory.memsw.limit_in_bytes")):
                write(os.path.join(d, "memory.memsw.limit_in_bytes"), str(self.limit))  # no swap
        except OSError as e:
            self.remove()
            raise Skip(f"cgroup v1: {parent}: {e}")
        self.version, self.procs = 1, os.path.join(d, "cgroup.procs")
        self.usage = os.path.join(d, "memory.usage_in_bytes")

    def oom_kills(self):
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        with open(os.path.join(self.dir, name)) as f:
            for line in f:
                key, value = line.split()
                if key == "oom_kill":
                    return int(value)
        return 0

    def remove(self):
        if self.dir is None:
            return
        for _ in range(50):  # the last process's charge may take a moment to leave
            try:
                os.rmdir(self.dir)
                break
            except OSError:
                time.sleep(0.1)
        self.dir = None


def run_phases(cg, lib, phases, between):
    env = dict(os.environ, LD_PRELOAD=lib, STRATA_FAULT_CGROUP_USAGE=cg.usage)
    env.pop("STRATA_PURGE_DELAY", None)
    kills = cg.oom_kills()
    proc = subprocess.run([phases, str(cg.limit), str(FILL), between], env=env, capture_output=True, text=True,
                          timeout=240, preexec_fn=lambda: write(cg.procs, str(os.getpid())))
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, rows, cg.oom_kills() - kills


def check(cg, lib, phases, between):
    proc, rows, kills = run_phases(cg, lib, phases, between)
    name = f"phases, {between} between them, in a {cg.limit // MiB} MiB cgroup v{cg.version}"
    print(f"{name}: exit status {proc.returncode}, {kills} OOM kills")
    print("    phase    size  peak MB  after free  before next  cgroup peak  cgroup before next")
    for r in rows:
        print(f"    {r['phase']:5} {r['size']:8} {r['committed_peak'] / 1e6:8.1f} {r['committed_after_free'] / 1e6:11.1f}"
              f" {r['committed_before_next'] / 1e6:12.1f} {r['cgroup_at_peak'] / 1e6:12.1f}"
              f" {r['cgroup_before_next'] / 1e6:19.1f}")
    problems = []
    if kills or proc.returncode == -9:
        problems.append(f"killed by the OOM killer inside the limit (phase {len(rows)} of {PHASES})")
    elif proc.returncode != 0:
        problems.append(f"exit status {proc.returncode}: {proc.stderr[-500:]!r}")
    elif len(rows) != PHASES:
        problems.append(f"{len(rows)} phases reported, not {PHASES}")
    if "strata: error" in proc.stderr:
        problems.append(f"strata reported errors: {proc.stderr[-500:]!r}")
    if between != "none":
        # Most of each phase's memory given back before the next, by strata's count and the kernel's.
        for r in rows:
            if r["committed_before_next"] > r["committed_peak"] / 4:
                problems.append(f"phase {r['phase']} ({r['size']} B): {r['committed_before_next'] / 1e6:.1f} MB "
                                f"still committed of {r['committed_peak'] / 1e6:.1f} MB at its peak")
            if r["cgroup_before_next"] > r["cgroup_at_peak"] / 2:
                problems.append(f"phase {r['phase']} ({r['size']} B): the cgroup still charges "
                                f"{r['cgroup_before_next'] / 1e6:.1f} MB of {r['cgroup_at_peak'] / 1e6:.1f} MB")
    for p in problems:
        print("    FAILED:", p)
    return not problems


def main():
    lib, phases, modes = sys.argv[1], sys.argv[2], sys.argv[3:]
    if os.geteuid() != 0:
        print(f"SKIP: making a memory cgroup needs root here (euid {os.geteuid()})")
        return SKIP
    try:
        cg = MemoryCgroup(LIMIT)
    except Skip as e:
        print(f"SKIP: no memory cgroup can be made: {e}")
        return SKIP
    try:
        results = [check(cg, lib, phases, between) for between in modes]
    finally:
        cg.remove()
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
