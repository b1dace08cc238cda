import subprocess, sys, time, os
lib, args = sys.argv[1], sys.argv[2:]
env = dict(os.environ)
if lib != "glibc": env["LD_PRELOAD"] = lib
p = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL)
t0 = time.time(); samples = []
while p.poll() is None:
    try:
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS"): samples.append((time.time() - t0, int(line.split()[1]) / 1024))
    except OSError: break
    time.sleep(0.002)
n = len(samples)
pts = [samples[int(i * (n - 1) / 10)] for i in range(11)] if n else []
print(os.path.basename(lib)[:12].ljust(12), " ".join(f"{r:5.1f}" for _, r in pts), f" max {max(r for _, r in samples):.1f}")
