#!/usr/bin/env python3
"""trov.py ROUNDS LIB -- CMD...: paired CPU and wall time of CMD under LIB with STRATA_TRACE unset and set."""
import os, sys, time, random, statistics as st, glob, shutil
rounds, lib = int(sys.argv[1]), sys.argv[2]
cmd = sys.argv[sys.argv.index("--") + 1:]
trdir = "/tmp/s31/tr"; os.makedirs(trdir, exist_ok=True)
def one(trace):
    env = dict(os.environ, LD_PRELOAD=lib); env.pop("STRATA_TRACE", None)
    if trace: env["STRATA_TRACE"] = trdir + "/t.%p"
    t0 = time.perf_counter(); pid = os.fork()
    if pid == 0:
        fd = os.open("/dev/null", os.O_WRONLY); os.dup2(fd, 1); os.execvpe(cmd[0], cmd, env)
    _, status, ru = os.wait4(pid, 0); wall = time.perf_counter() - t0
    size = sum(os.path.getsize(f) for f in glob.glob(trdir + "/t.*"))
    for f in glob.glob(trdir + "/t.*"): os.unlink(f)
    return ru.ru_utime + ru.ru_stime, wall, size
one(False); one(True)
res = {False: [], True: []}; sizes = []
for r in range(rounds):
    order = [False, True]; random.shuffle(order)
    for tr in order:
        c, w, s = one(tr); res[tr].append((c, w))
        if tr: sizes.append(s)
rc = sorted(res[True][i][0] / res[False][i][0] for i in range(rounds))
rw = sorted(res[True][i][1] / res[False][i][1] for i in range(rounds))
q = lambda x: st.quantiles(x, n=4)
print(f"off cpu {st.median(c for c, _ in res[False]):.3f}s wall {st.median(w for _, w in res[False]):.3f}s; "
      f"on: cpu x{st.median(rc):.3f} [{q(rc)[0]:.3f}-{q(rc)[2]:.3f}] wall x{st.median(rw):.3f} [{q(rw)[0]:.3f}-{q(rw)[2]:.3f}] "
      f"trace {st.median(sizes)/1e6:.1f} MB, {rounds} pairs")
