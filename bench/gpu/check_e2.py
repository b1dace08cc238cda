#!/usr/bin/env python3
"""Checks strata-bench-e2-gpu's output (run by ctest).

  check_e2.py smoke BIN           --smoke --backend sim: valid JSON, every resource x threads x
                                  phase present with every metric
  check_e2.py replay BIN TRACE    record a trace with --trace, replay it against every resource
  check_e2.py no-driver BIN       --backend cuda with no driver: non-zero exit, clear message
  check_e2.py capped BIN          --smoke --cap-factor 1.5: every resource finishes on a device of
                                  1.5x each cell's live bound, and never holds more than it
  check_e2.py turns BIN           --smoke --fragment-in-turns: the fragment step's live peak stays
                                  near the serial bound, far under the concurrent one
"""
import json
import os
import subprocess
import sys

RESOURCES = ["cuda", "async", "pool", "arena", "strata"]
THREADS = [1, 4, 8, 16]
PHASES = ["baseline", "fragmented", "long_term"]
METRICS = ["time_ms", "change_pct", "alloc_ns_total", "operations", "lock_wait_ns",
           "fragmentation", "peak_reserved_bytes", "live_peak_bytes"]


def fail(msg):
    print("check_e2: " + msg, file=sys.stderr)
    sys.exit(1)


def run(args, env=None):
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=280)
    return p.returncode, p.stdout, p.stderr


def smoke(binary):
    rc, out, err = run([binary, "--smoke", "--backend", "sim", "--table"])
    if rc != 0:
        fail(f"exit status {rc}\n{err[-2000:]}")
    doc = json.loads(out)
    if doc.get("schema") != "strata.e2-gpu/1" or doc.get("backend") != "sim" or not doc.get("smoke"):
        fail("bad header: " + out[:300])
    if doc["phases"] != PHASES:
        fail(f"phases {doc['phases']}")
    cells = {(r["resource"], r["threads"]): r for r in doc["results"]}
    for res in RESOURCES:
        for t in THREADS:
            r = cells.get((res, t))
            if r is None:
                fail(f"missing cell {res} x {t}")
            if r["status"] != "ok":
                fail(f"{res} x {t}: {r.get('error')}")
            for ph in PHASES:
                m = r["phases"].get(ph)
                if m is None:
                    fail(f"{res} x {t}: missing phase {ph}")
                for k in METRICS:
                    if k not in m:
                        fail(f"{res} x {t} {ph}: missing {k}")
                if m["time_ms"] <= 0 or m["operations"] <= 0 or m["peak_reserved_bytes"] <= 0:
                    fail(f"{res} x {t} {ph}: implausible {m}")
                if res in ("pool", "arena", "strata") and m["lock_wait_ns"] is None:
                    fail(f"{res} has locks but reported no lock wait")
                if res == "async" and m["fragmentation"] is not None:
                    fail("async cannot know its fragmentation")
                if m["fragmentation"] is not None and not 0 <= m["fragmentation"] <= 1:
                    fail(f"{res} x {t} {ph}: fragmentation {m['fragmentation']}")
            if r["phases"]["baseline"]["change_pct"] != 0:
                fail("baseline change must be 0")
    sys.stderr.write(err)


def replay(binary, trace):
    rc, out, err = run([binary, "--smoke", "--backend", "sim", "--resource", "pool",
                        "--threads", "2", "--trace", trace])
    if rc != 0:
        fail(f"trace run: exit {rc}\n{err[-2000:]}")
    with open(trace) as f:
        lines = f.read().splitlines()
    if lines[0] != "op,thread,time_ns,ptr,bytes,stream,alignment" or len(lines) < 100:
        fail(f"trace has {len(lines)} lines, header {lines[0]!r}")
    allocs = sum(1 for l in lines[1:] if l.startswith("alloc,"))
    frees = sum(1 for l in lines[1:] if l.startswith("free,"))
    if allocs != frees:
        fail(f"trace: {allocs} allocs but {frees} frees")
    rc, out, err = run([binary, "--backend", "sim", "--replay", trace])
    if rc != 0:
        fail(f"replay: exit {rc}\n{err[-2000:]}")
    doc = json.loads(out)
    if doc["operations"] != allocs + frees:
        fail(f"replayed {doc['operations']} operations, trace has {allocs + frees}")
    got = [r["resource"] for r in doc["results"]]
    if got != RESOURCES:
        fail(f"replay resources {got}")
    for r in doc["results"]:
        if r["status"] != "ok" or r["failed_allocations"] != 0:
            fail(f"replay {r}")


def no_driver(binary):
    env = dict(os.environ, STRATA_CUDA_LIBRARY="/nonexistent/strata-check-libcuda.so.1")
    rc, out, err = run([binary, "--smoke", "--backend", "cuda"], env=env)
    if rc == 0:
        fail("--backend cuda without a driver exited 0")
    if "cannot use the cuda backend" not in err or "cannot load the CUDA driver library" not in err:
        fail("unclear message: " + err)
    if out.strip():
        fail("printed results without a device: " + out[:200])


def capped(binary):
    rc, out, err = run([binary, "--smoke", "--backend", "sim", "--cap-factor", "1.5"])
    doc = json.loads(out)
    if doc["config"]["cap_factor"] != 1.5:
        fail(f"config {doc['config']}")
    for r in doc["results"]:
        cell = f"{r['resource']} x {r['threads']}"
        if r["status"] != "ok":
            fail(f"{cell} did not finish under a 1.5x cap: {r.get('error')}")
        bound, device = r["live_bound_bytes"], r["device_bytes"]
        if not 1.5 * bound <= device < 1.5 * bound + (1 << 20):
            fail(f"{cell}: device {device} for a live bound of {bound}")
        for ph, m in r["phases"].items():
            if not 0 < m["live_peak_bytes"] <= bound:
                fail(f"{cell} {ph}: live peak {m['live_peak_bytes']} outside (0, {bound}]")
            if m["peak_reserved_bytes"] > device:
                fail(f"{cell} {ph}: reserved {m['peak_reserved_bytes']} on a {device}-byte device")
    if rc != 0:
        fail(f"exit status {rc}\n{err[-2000:]}")


def turns(binary):
    rc, out, err = run([binary, "--smoke", "--backend", "sim", "--resource", "strata,pool",
                        "--fragment-in-turns"])
    if rc != 0:
        fail(f"exit status {rc}\n{err[-2000:]}")
    doc = json.loads(out)
    if doc["config"]["fragment_in_turns"] is not True:
        fail(f"config {doc['config']}")
    for r in doc["results"]:
        cell = f"{r['resource']} x {r['threads']}"
        concurrent, serial = r["live_bound_bytes"], r["serial_live_bound_bytes"]
        if not 0 < serial <= concurrent:
            fail(f"{cell}: serial bound {serial}, concurrent {concurrent}")
        steps = dict(r["phases"], **r["setup"])
        if sorted(steps) != sorted(PHASES + ["fragment", "churn"]):
            fail(f"{cell}: steps {sorted(steps)}")
        for name, m in steps.items():
            if not 0 < m["step_live_peak_bytes"] <= concurrent:
                fail(f"{cell} {name}: live peak {m['step_live_peak_bytes']} outside (0, {concurrent}]")
        # Taken in turns, only the pinned blocks of the threads before add to one thread's peak
        # (the order of the turns may differ from the serial bound's, hence the margin).
        if steps["fragment"]["step_live_peak_bytes"] > 1.5 * serial:
            fail(f"{cell}: fragment step held {steps['fragment']['step_live_peak_bytes']} "
                 f"in turns, serial bound {serial}")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "smoke":
        smoke(sys.argv[2])
    elif mode == "replay":
        replay(sys.argv[2], sys.argv[3])
    elif mode == "no-driver":
        no_driver(sys.argv[2])
    elif mode == "capped":
        capped(sys.argv[2])
    elif mode == "turns":
        turns(sys.argv[2])
    else:
        fail("unknown mode " + mode)
