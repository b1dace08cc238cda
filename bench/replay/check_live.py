#!/usr/bin/env python3
"""Replay against reality (docs/lab.md, issue 16): records PROGRAM once under strata, then per
allocator the live program's peak RSS (2 runs) against the replay's (2 runs), the gap and the
ranking; or, with --overhead, the program's cost with STRATA_TRACE set against unset.

    bench/replay/check_live.py python|sqlite|redis
    bench/replay/check_live.py --overhead python|sqlite|redis|perl|gxx|jq|git [ROUNDS]

Uses the lab's inputs (suite programs' python and sqlite generators), its redis driver and its
launcher (so ru_maxrss is the program's own); $STRATA_BUILD (default build/) has libstrata.so and
strata-bench-replay.  Timings: run it under flock /tmp/strata-timing.lock.
"""
import glob
import json
import os
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab"))
from strata_lab import allocators, paths, runner  # noqa: E402
from strata_lab.suites import programs  # noqa: E402

BUILD = paths.build_dir()
REPLAY = str(BUILD / "bin" / "strata-bench-replay")
STRATA = str(BUILD / "lib" / "libstrata.so")
SPAWN = runner.spawner()
WORK = Path(tempfile.mkdtemp(prefix="strata-check-live-"))


def command(which):
    """(argv, stdin file or None, extra environment)"""
    if which == "python":
        programs.gen_python(WORK, 3)
        return ["/usr/bin/python3", str(WORK / "work.py")], None, {"PYTHONMALLOC": "malloc"}
    if which == "sqlite":
        programs.gen_sqlite(WORK, 60000)
        return ["/usr/bin/sqlite3", ":memory:"], str(WORK / "work.sql"), {}
    if which == "redis":
        return ([sys.executable, "-m", "strata_lab.drivers.redis_bench", "--requests", "40000"], None,
                {"PYTHONPATH": str(ROOT / "lab")})
    if which in ("perl", "gxx", "jq", "git"):  # the lab's programs at make bench's size
        prog = programs.PROGRAMS[which]
        prog["gen"](WORK, prog["sizes"][1])
        return [str(x) for x in prog["argv"](WORK)], None, prog.get("env", {})
    sys.exit(f"unknown program {which!r}: python, sqlite, redis, perl, gxx, jq or git")


def run(which, cmd, stdin, extra, lib, trace=None):
    """The program once under lib: (peak RSS KiB, CPU seconds or req/s)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "STRATA_TRACE")}
    env.update(extra)
    if trace:
        env["STRATA_TRACE"] = trace
    inp = open(stdin) if stdin else None
    if which == "redis":
        if lib:
            env["STRATA_LAB_PRELOAD"] = lib
        out = subprocess.run(cmd, env=env, stdin=inp, capture_output=True, text=True).stdout
        doc = json.loads(out.strip().splitlines()[-1])
        return doc["server_peak_rss_kb"], doc["rps"]
    if lib:
        env["STRATA_LAB_SPAWN_PRELOAD"] = lib
    prefix = str(WORK / "spawn")
    subprocess.run([SPAWN, prefix, *cmd], env=env, stdin=inp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    f = open(prefix + ".rusage").read().split()
    return int(f[1]), float(f[2]) + float(f[3])


def check_live(which):
    cmd, stdin, extra = command(which)
    run(which, cmd, stdin, extra, STRATA, str(WORK / "trace.%p"))
    tr = max(glob.glob(str(WORK / "trace.*")), key=os.path.getsize)
    chk = json.loads(subprocess.run([REPLAY, "--check", tr], capture_output=True, text=True).stdout)
    print(f"{which}: trace {os.path.getsize(tr) // 1024} KiB, {chk['words']} words, {chk['threads']} threads, "
          f"complete {chk['complete']}, unmatched frees {chk['unmatched_frees']}", flush=True)
    rows = []
    for a in (a for a in allocators.inventory().values() if a):
        live = [run(which, cmd, stdin, extra, a.library)[0] for _ in range(2)]
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        if a.library:
            env["LD_PRELOAD"] = a.library
        rep = [json.loads(subprocess.run([REPLAY, "--pace", tr], env=env, capture_output=True, text=True).stdout)["peak_rss_kib"]
               for _ in range(2)]
        lv, rp = st.median(live), st.median(rep)
        rows.append((a.name, lv, rp, max(live) - min(live), max(rep) - min(rep)))
        print(f"{which} {a.name:10s} live {lv / 1024:7.1f} MiB  replay {rp / 1024:7.1f} MiB  "
              f"{(rp - lv) / lv * 100:+6.1f} %  (live {live}, replay {rep})", flush=True)
    print(which, "ranking live  ", [r[0] for r in sorted(rows, key=lambda r: r[1])])
    print(which, "ranking replay", [r[0] for r in sorted(rows, key=lambda r: r[2])])
    print(which, "within 15 %:", sum(abs(r[2] - r[1]) <= 0.15 * r[1] for r in rows), "of", len(rows))
    # Pairs ordered one way live and the other replayed.  A pair whose live peaks lie within the
    # live runs' own spread (or 1 %) is a tie: the live runs do not order it either.  A pair the
    # live runs do order but whose replayed peaks lie within the replays' own spread (or 1 %) is
    # one the replay does not resolve: it orders it neither way.  Both are listed, apart.
    ties, unresolved, discordant = [], [], []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if (a[1] - b[1]) * (a[2] - b[2]) >= 0:
                continue
            pair = (f"{a[0]}/{b[0]} (live {a[1] / 1024:.2f}/{b[1] / 1024:.2f} MiB, "
                    f"replay {a[2] / 1024:.2f}/{b[2] / 1024:.2f} MiB)")
            if abs(a[1] - b[1]) <= max(a[3], b[3], 0.01 * max(a[1], b[1])):
                ties.append(pair)
            elif abs(a[2] - b[2]) <= max(a[4], b[4], 0.01 * max(a[2], b[2])):
                unresolved.append(pair)
            else:
                discordant.append(pair)
    verdict = ("disagrees on " + ", ".join(discordant) if discordant
               else "agrees where the replay resolves the order" if unresolved else "agrees")
    print(which, "ranking:", verdict,
          "; swapped ties: " + (", ".join(ties) if ties else "none"),
          "; not resolved by the replay: " + (", ".join(unresolved) if unresolved else "none"))


def overhead(which, rounds):
    cmd, stdin, extra = command(which)
    got = {"off": [], "on": []}
    walls = {"off": [], "on": []}
    for _ in range(rounds):
        for mode in got:
            t0, s0 = time.time(), [int(x) for x in open("/proc/stat").readline().split()[1:]]
            got[mode].append(run(which, cmd, stdin, extra, STRATA, str(WORK / "ov.%p") if mode == "on" else None)[1])
            s1, wall = [int(x) for x in open("/proc/stat").readline().split()[1:]], time.time() - t0
            walls[mode].append(wall)
            for f in glob.glob(str(WORK / "ov.*")):
                os.unlink(f)
            print(f"{which} {mode}: {got[mode][-1]:.4g} (machine busy {sum(s1[i] - s0[i] for i in (0, 1, 2, 5, 6)) / 100 / (os.cpu_count() * wall):.2f}, "
                  f"steal {(s1[7] - s0[7]) / 100 / (os.cpu_count() * wall):.3f})", flush=True)
    unit = "req/s" if which == "redis" else "CPU s"
    for mode, v in got.items():
        print(f"{which} {mode}: median {st.median(v):.4g} {unit} of {v}")
    print(f"{which}: on/off {st.median(got['on']) / st.median(got['off']):.3f}; wall time (launcher "
          f"included) {st.median(walls['off']):.4f} -> {st.median(walls['on']):.4f} s, on/off "
          f"{st.median(walls['on']) / st.median(walls['off']):.3f}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--overhead":
        overhead(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5)
    elif len(sys.argv) == 2:
        check_live(sys.argv[1])
    else:
        sys.exit(__doc__)
