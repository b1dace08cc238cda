#!/usr/bin/env python3
"""Preload tests: real programs under LD_PRELOAD=libstrata.so.

Each program runs twice, without and with strata; the outputs must match, and strata's exit
statistics (STRATA_STATS_FILE) must show it served the allocations.  Usage:
    preload_test.py <libstrata.so> <cxx_workload>
"""
import os
import random
import subprocess
import sys
import tempfile

from preload_check import Checker

LIB, CXX = sys.argv[1], sys.argv[2]


def main():
    checker = Checker(LIB)
    out = subprocess.run(["ldd", LIB], capture_output=True, text=True).stdout
    deps = [line.split()[0] for line in out.splitlines() if line.strip()]
    allowed = ("linux-vdso", "libc.so", "/lib64/ld-linux", "ld-linux")
    extra = [d for d in deps if not d.startswith(allowed)]
    print(f"ldd {LIB}: {' '.join(deps)}")
    if extra:
        print("   FAILED: run-time dependencies beyond the C library:", extra)
        checker.failed.append("ldd")

    # glibc's own names for its allocator, which some programs call directly, and its heap
    # statistics must be strata's in the preloaded library too (tests/unit/conformance_test.cpp
    # checks what they do).
    out = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True, text=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    wanted = {"__libc_malloc", "__libc_calloc", "__libc_realloc", "__libc_free", "__libc_memalign",
              "__libc_valloc", "__libc_pvalloc", "__libc_mallinfo", "__libc_mallopt", "mallinfo", "mallinfo2",
              "malloc_stats", "malloc_info", "mallopt"}
    print(f"exports glibc's entry points and statistics: {'ok' if wanted <= names else 'FAILED, missing ' + str(sorted(wanted - names))}")
    (checker.passed if wanted <= names else checker.failed).append("__libc_* exports")

    py = ("import json, collections\n"
          "d = [{'id': i, 'name': 'x' * (i % 300), 'tags': list(range(i % 17))} for i in range(120000)]\n"
          "s = json.dumps(d)\n"
          "c = collections.Counter(len(x['name']) for x in json.loads(s))\n"
          "print(len(s), sum(c.values()), sorted(c.items())[:5])\n")
    # PYTHONMALLOC=malloc routes every Python object through malloc, not only large ones.
    os.environ["PYTHONMALLOC"] = "malloc"
    checker.check("python3 json workload", [sys.executable, "-c", py], min_mallocs=100000)
    os.environ.pop("PYTHONMALLOC")

    rng = random.Random(7)
    lines = "".join(f"{rng.randrange(10**9):09d} {'w' * rng.randrange(40)}\n" for _ in range(300000))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(lines)
        path = f.name
    try:
        checker.check("sort of a 300k-line file", ["sort", "-S", "64M", path], min_mallocs=100)
    finally:
        os.unlink(path)

    checker.check("C++ containers and threads", [CXX], min_mallocs=100000)

    # "%p" in STRATA_STATS_FILE is the process id: each process of a pipeline writes its own.
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, LD_PRELOAD=LIB, STRATA_STATS_FILE=os.path.join(d, "s.%p.json"))
        proc = subprocess.Popen([CXX], env=env, stdout=subprocess.DEVNULL)
        proc.wait(timeout=240)
        names = sorted(os.listdir(d))
        ok = names == [f"s.{proc.pid}.json"]
        print(f"STRATA_STATS_FILE with %p: {'ok' if ok else 'FAILED'} ({names})")
        (checker.passed if ok else checker.failed).append("stats file %p")

    # STRATA_SHOW_STATS prints to the stderr the program started with, at exit, after its own exit
    # handlers: `ls` closes stderr in one (coreutils' close_stdout), and nothing was printed; a
    # program that put a file of its own on descriptor 2 got the statistics written into it.
    env = dict(os.environ, LD_PRELOAD=LIB, STRATA_SHOW_STATS="1")
    err = subprocess.run(["ls", "/"], env=env, capture_output=True, text=True, timeout=60).stderr
    ok = "statistics (pid" in err
    print(f"STRATA_SHOW_STATS after the program closed stderr: {'ok' if ok else 'FAILED'} ({err[:80]!r})")
    (checker.passed if ok else checker.failed).append("show stats, stderr closed")
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "data.txt")
        run = subprocess.run(["bash", "-c", 'exec 2>"$0"; echo data >&2', log], env=env,
                             capture_output=True, text=True, timeout=60)
        with open(log) as f:
            data = f.read()
        ok = data == "data\n" and "statistics (pid" in run.stderr
        print(f"STRATA_SHOW_STATS with a file of the program's on descriptor 2: "
              f"{'ok' if ok else 'FAILED'} (file {data[:60]!r}, stderr {run.stderr[:40]!r})")
        (checker.passed if ok else checker.failed).append("show stats, descriptor 2 reused")
    # STRATA_STATS_FILE's warning at exit (here: a folder that does not exist) goes the same way:
    # it was written to descriptor 2 as it was then, into the program's own file.
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "data.txt")
        env_file = dict(os.environ, LD_PRELOAD=LIB, STRATA_STATS_FILE=os.path.join(d, "no", "s.json"))
        run = subprocess.run(["bash", "-c", 'exec 2>"$0"; echo data >&2', log], env=env_file,
                             capture_output=True, text=True, timeout=60)
        with open(log) as f:
            data = f.read()
        ok = data == "data\n" and "STRATA_STATS_FILE=" in run.stderr and "cannot be opened" in run.stderr
        print(f"STRATA_STATS_FILE's warning with a file of the program's on descriptor 2: "
              f"{'ok' if ok else 'FAILED'} (file {data[:100]!r}, stderr {run.stderr[:100]!r})")
        (checker.passed if ok else checker.failed).append("stats file warning, descriptor 2 reused")
    return checker.summary()


if __name__ == "__main__":
    sys.exit(main())
