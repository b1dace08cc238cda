#!/usr/bin/env python3
"""ov.py ROUNDS name=lib[:trace] ... [-- CMD ...]  paired per-round CPU and wall ratios vs the
first variant.  CMD: python3 work.py (size in /tmp/w/s27/work.py) with PYTHONMALLOC=malloc unless
given (then run as it is; session 31 measured clang this way)."""
import os, sys, time, random, statistics as st, glob
rounds = int(sys.argv[1])
args, cmd = sys.argv[2:], None
if "--" in args:
    args, cmd = args[:args.index("--")], args[args.index("--") + 1:]
vars_ = []
for a in args:
    name, spec = a.split("=", 1)
    lib, _, tr = spec.partition(":")
    vars_.append((name, lib, tr == "trace"))
extra_env = {} if cmd else {"PYTHONMALLOC": "malloc"}
cmd = cmd or ["/usr/bin/python3", "/tmp/w/s27/work.py"]
res = {v[0]: ([], []) for v in vars_}
trace_bytes = []
def one(lib, trace):
    env = dict(os.environ, LD_PRELOAD=lib, **extra_env)
    env.pop("STRATA_TRACE", None)
    if trace: env["STRATA_TRACE"] = os.environ.get("TRDIR","/tmp/w/s27/tr") + "/t.%p"
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        fd = os.open("/dev/null", os.O_WRONLY); os.dup2(fd, 1)
        os.execvpe(cmd[0], cmd, env)
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    files = glob.glob(os.environ.get("TRDIR","/tmp/w/s27/tr") + "/t.*")
    if trace: trace_bytes.append(sum(os.path.getsize(f) for f in files))
    for f in files: os.unlink(f)
    return ru.ru_utime + ru.ru_stime, wall
os.makedirs("/tmp/w/s27/tr", exist_ok=True)
for v in vars_: one(v[1], v[2])
for r in range(rounds):
    order = list(vars_); random.shuffle(order)
    for name, lib, tr in order:
        c, w = one(lib, tr); res[name][0].append(c); res[name][1].append(w)
base = vars_[0][0]
if os.environ.get("RAW"):
    for n in res: print(n, " ".join(f"{x*1000:.0f}" for x in res[n][0]))
for name, _, _ in vars_:
    c, w = res[name]
    rc = [c[i] / res[base][0][i] for i in range(rounds)]
    rw = [w[i] / res[base][1][i] for i in range(rounds)]
    q = lambda x: st.quantiles(x, n=4)
    print(f"{name:10s} cpu {st.median(c)*1000:7.1f} ms  wall {st.median(w)*1000:7.1f} ms  "
          f"min {min(c)*1000:6.1f} q1 {st.quantiles(c,n=4)[0]*1000:6.1f}  cpu/base {st.median(rc):.3f} [{q(rc)[0]:.3f}-{q(rc)[2]:.3f}]  wall/base {st.median(rw):.3f} [{q(rw)[0]:.3f}-{q(rw)[2]:.3f}]")
if trace_bytes: print(f"trace: median {st.median(trace_bytes)/1e6:.1f} MB a run")
