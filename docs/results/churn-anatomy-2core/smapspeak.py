import subprocess, sys, time, os, re, collections
lib, args = sys.argv[1], sys.argv[2:]
env = dict(os.environ)
if lib != "glibc": env["LD_PRELOAD"] = lib
p = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL)
best = (0, None)
while p.poll() is None:
    try:
        with open(f"/proc/{p.pid}/smaps") as f: txt = f.read()
    except OSError: break
    vmas = []; cur = None
    for line in txt.splitlines():
        m = re.match(r'^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$', line)
        if m:
            cur = [int(m.group(1), 16), int(m.group(2), 16), m.group(4), 0, m.group(3)]; vmas.append(cur)
        elif line.startswith("Rss:") and cur: cur[3] = int(line.split()[1])
    tot = sum(v[3] for v in vmas)
    if tot > best[0]: best = (tot, vmas)
    time.sleep(0.003)
tot, vmas = best
cls = collections.Counter(); cnt = collections.Counter()
for lo, hi, name, rss, perm in vmas:
    size = hi - lo
    if name: k = "file:" + os.path.basename(name)[:20] if not name.startswith("[") else name
    elif perm.startswith("---"): k = "guard"
    elif size == 8 << 20 or size == (8 << 20) + 4096: k = "8MiB (stack?)"
    elif size == 32 << 20: k = "32MiB (segment)"
    else: k = "anon other"
    if k.startswith("file:"): k = "files"
    cls[k] += rss; cnt[k] += 1
for lo, hi, name, rss, perm in sorted(vmas, key=lambda v: -v[3])[:16]: print(f"  {(hi-lo)/2**20:9.2f} MiB  rss {rss/1024:6.1f} MiB  {perm} {name}  {lo:x}")
print(os.path.basename(lib)[:14], f"peak total {tot/1024:.1f} MiB:", ", ".join(f"{k} {v/1024:.1f} MiB ({cnt[k]})" for k, v in cls.most_common()))
