#!/usr/bin/env python3
"""Recording's cost under CPython (PYTHONMALLOC=malloc, the suite programs' work.py at N=30:
about 9 M events in 0.4 s), interleaved and paired by round.

    ab.py OFF_LIB ROUNDS MODE...     MODE: off | on | on@LIB | on@LIB@VAR=V,... (STRATA_TRACE set,
                                     that library, those variables set)

Prints each mode's median wall and CPU time (the children's rusage: the writer thread's CPU
included) and trace size, and each mode's ratios to the first, with the quartiles of the paired
ratios.  Run it on a quiet machine; nothing else timed beside it.
"""
import glob
import os
import resource
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab"))
from strata_lab.suites import programs  # noqa: E402

lib, rounds, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:] or ["off", "on"]
work = Path(tempfile.mkdtemp(prefix="strata-s39-"))
programs.gen_python(work, 30)
res = {m: [] for m in modes}
for _ in range(rounds):
    for m in modes:
        parts = m.split("@")  # on@LIB@VAR=V,VAR2=V2 (session 40: a scratch recorder's modes)
        env = dict(os.environ, PYTHONMALLOC="malloc", LD_PRELOAD=parts[1] if len(parts) > 1 and parts[1] else lib)
        for kv in parts[2].split(",") if len(parts) > 2 else []:
            k, v = kv.split("=", 1)
            env[k] = v
        env.pop("STRATA_TRACE", None)
        if m.startswith("on"):
            env["STRATA_TRACE"] = str(work / "t.%p")
        r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(["/usr/bin/python3", str(work / "work.py")], env=env, stdout=subprocess.DEVNULL, check=True)
        wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        traces = glob.glob(str(work / "t.*"))
        res[m].append((wall, cpu, sum(os.path.getsize(f) for f in traces)))
        for f in traces:
            os.unlink(f)
for m in modes:
    print(f"{m}: wall {st.median(x[0] for x in res[m]):.4f} s, CPU {st.median(x[1] for x in res[m]):.4f} s, "
          f"trace {st.median(x[2] for x in res[m]) / 1e6:.0f} MB")
for m in modes[1:]:
    for k, name in ((0, "wall"), (1, "CPU")):
        r = sorted(a[k] / b[k] for a, b in zip(res[m], res[modes[0]]))
        print(f"{m} / {modes[0]} {name}: {st.median(r):.3f} [{r[len(r) // 4]:.3f}-{r[3 * len(r) // 4]:.3f}]")
