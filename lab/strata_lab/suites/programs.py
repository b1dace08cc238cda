"""Real programs, unmodified, as users run them: CPython (PYTHONMALLOC=malloc), sqlite3, perl, g++,
jq, git and redis, each on an input this module generates, with its output checked against a
plain run (no preload).  Per program and allocator: wall time (the primary metric), CPU time,
peak RSS and minor page faults of the program itself.

Each sample runs this module as a driver (preload="driver"):

    python -m strata_lab.suites.programs --program NAME [--smoke]

It generates the program's input once (cached under $STRATA_LAB_CACHE or ~/.cache/strata-lab/
programs/, keyed by the generator's version and size), records the output of a plain run, then
runs the program with $STRATA_LAB_PRELOAD in LD_PRELOAD, measures it with wait4 (its children
included: g++ runs cc1plus), compares the output's SHA-256 with the plain run's, and prints one
JSON object.  A different output is a failure, never a number.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from strata_lab.allocators import BUILTINS
from strata_lab.suite import Cell, Param, list_of, one_of

DESCRIPTION = ("real programs on generated inputs, output checked against a plain run: python, sqlite3, "
               "perl, g++, clang++, jq, git, redis; wall time, CPU, peak RSS, minor faults")
ALLOCATORS = list(BUILTINS)  # every allocator the lab knows
BASELINE = "mimalloc"
ROUNDS = 5
WARMUP = 1

GENERATOR_VERSION = 1  # bump when an input generator changes: the cache is keyed by it


def _python() -> str:
    # The system's CPython, not a pyenv shim (a shell script) and not the lab's own interpreter.
    for p in ("/usr/bin/python3", shutil.which("python3") or ""):
        if p and Path(p).is_file() and os.access(p, os.X_OK) and not _is_script(p):
            return p
    return sys.executable


def _is_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return True


# ---- input generators -----------------------------------------------------------------------
# Each takes (directory, size) and writes the program's input there; PROGRAMS below gives each
# program's full, bench and smoke sizes.

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
         "sigma tau upsilon phi chi psi omega malloc free arena slab page segment heap thread").split()


def gen_python(d: Path, n: int) -> None:
    (d / "work.py").write_text(f'''
import json, re, hashlib
N = {n}
class Node:
    __slots__ = ("key", "kids", "tag")
    def __init__(self, key, tag):
        self.key, self.kids, self.tag = key, [], tag
def tree(depth, key):
    node = Node(key, "n%d" % (key % 97))
    if depth:
        node.kids = [tree(depth - 1, key * 3 + i) for i in range(3)]
    return node
def walk(node):
    return node.key % 1000 + sum(walk(k) for k in node.kids)
h = hashlib.sha256()
total = 0
for rep in range(N):
    t = tree(7, rep)
    total += walk(t)
    d = {{("k%d" % i, i % 13): [i, str(i), {{"x": i * 2}}] for i in range(4000)}}
    s = json.dumps(sorted((a, b, v[0]) for (a, b), v in d.items() if b % 3 == 0))
    back = json.loads(s)
    words = re.findall(r"[a-z]+[0-9]", " ".join("w%d%s" % (i, "abc"[i % 3]) for i in range(6000)))
    total += len(back) + len(words) + len(set(x[:3] for x in words))
    h.update(s[:2000].encode())
print(total, h.hexdigest())
''')


def gen_sqlite(d: Path, n: int) -> None:
    (d / "work.sql").write_text(f"""
PRAGMA journal_mode = OFF;
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL, payload TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n})
INSERT INTO t(grp, name, val, payload)
  SELECT (x * 7919) % 1009, 'name-' || ((x * 104729) % 50000), (x * 37 % 1000) / 7.0,
         substr(hex(x * 2654435761), 1, 8) || printf('%0*d', 40 + x % 60, x)
  FROM c;
CREATE INDEX t_name ON t(name);
CREATE INDEX t_grp_val ON t(grp, val);
SELECT grp, count(*), round(sum(val), 3), max(length(payload)) FROM t GROUP BY grp ORDER BY grp LIMIT 20;
SELECT name, count(*) AS k FROM t GROUP BY name HAVING k > 1 ORDER BY k DESC, name LIMIT 20;
SELECT count(DISTINCT substr(payload, 1, 4)) FROM t;
SELECT a.grp, count(*) FROM t a JOIN t b ON a.name = b.name AND a.id < b.id GROUP BY a.grp ORDER BY 2 DESC, 1 LIMIT 10;
""")


def gen_perl(d: Path, n: int) -> None:
    rng = random.Random(11)
    with open(d / "input.txt", "w") as f:
        for i in range(n):
            ws = [rng.choice(WORDS) + str(rng.randrange(500)) for _ in range(rng.randrange(4, 16))]
            f.write(f"{i}\t{rng.randrange(10**6)}\t" + " ".join(ws) + f"\tkey={rng.choice(WORDS)};v={i % 97}\n")
    (d / "work.pl").write_text(r'''
use strict; use warnings;
my (%count, %by_key, %pairs, @rows);
open(my $fh, '<', $ARGV[0]) or die "input: $!";
while (my $line = <$fh>) {
    chomp $line;
    my ($id, $num, $text, $kv) = split /\t/, $line;
    my @w = split / /, $text;
    $count{$_}++ for @w;
    for my $i (0 .. $#w - 1) { $pairs{"$w[$i] $w[$i+1]"}++ }
    if ($kv =~ /^key=(\w+);v=(\d+)$/) { push @{ $by_key{$1} }, $2 + 0 }
    push @rows, [$id, $num, scalar(@w)] if $num % 3 == 0;
}
my @top = (sort { $count{$b} <=> $count{$a} || $a cmp $b } keys %count)[0 .. 19];
print "$_ $count{$_}\n" for @top;
for my $k (sort keys %by_key) { my $s = 0; $s += $_ for @{ $by_key{$k} }; print "$k $s\n" }
my @p = grep { $pairs{$_} > 2 } sort keys %pairs;
print scalar(@p), " ", scalar(@rows), " ", scalar(keys %pairs), "\n";
my $joined = join ",", map { $_->[0] } sort { $a->[1] <=> $b->[1] || $a->[0] <=> $b->[0] } @rows;
print length($joined), "\n";
''')


def gen_gxx(d: Path, n: int) -> None:
    parts = ["#include <map>", "#include <string>", "#include <vector>", "#include <functional>",
             "#include <algorithm>", "#include <memory>", "#include <sstream>", ""]
    for i in range(n):
        parts.append(f"""
template <typename T> struct Box{i} {{
  std::vector<T> items; std::map<std::string, T> index;
  void add(const std::string& k, T v) {{ items.push_back(v); index[k + "{i}"] = v; }}
  T total() const {{ T s{{}}; for (auto& x : items) s += x; return s; }}
  std::string dump() const {{ std::ostringstream o; for (auto& [k, v] : index) o << k << v; return o.str(); }}
}};
int use{i}(int x) {{
  Box{i}<int> a; Box{i}<double> b; Box{i}<long> c;
  std::vector<std::function<int(int)>> fs;
  for (int j = 0; j < x; ++j) {{ a.add(std::to_string(j), j); b.add("b", j * 0.5); c.add("c", j);
    fs.push_back([j](int y) {{ return y * j + {i}; }}); }}
  std::sort(a.items.begin(), a.items.end(), std::greater<int>());
  auto p = std::make_shared<Box{i}<int>>(a);
  return a.total() + int(b.total()) + int(c.total()) + int(p->dump().size()) + fs.back()(x);
}}""")
    parts.append("int main() { int s = 0;")
    parts += [f"  s += use{i}({i % 7 + 1});" for i in range(n)]
    parts.append("  return s & 1; }")
    (d / "tu.cpp").write_text("\n".join(parts) + "\n")


def gen_clang(d: Path, n: int) -> None:
    """A translation unit without #include: clang's time goes to its own semantic analysis and
    optimiser (inlining, unrolling, the virtual calls it devirtualises), which allocate through
    malloc (about 330 k calls at make bench's size), not to parsing the standard headers."""
    parts = ["template <int N> struct Fib { static constexpr long v = Fib<N - 1>::v + Fib<N - 2>::v; };",
             "template <> struct Fib<0> { static constexpr long v = 0; };",
             "template <> struct Fib<1> { static constexpr long v = 1; };",
             "struct Base { virtual ~Base() {} virtual long f(long) = 0; };",
             "template <typename T, int K> struct Ring { T a[K]; int at = 0;",
             "  void put(T v) { a[at] = v; at = (at + 1) % K; }",
             "  long sum() const { long s = 0; for (int j = 0; j < K; ++j) s += long(a[j]) * (j + 1); return s; } };"]
    for i in range(n):
        parts.append(f"""
template <typename T, int K> struct Node{i} : Base {{
  Ring<T, K> r{{}};
  long f(long x) override {{
    long s = {i};
    for (int j = 0; j < K * 3; ++j) {{ r.put(T(x * j + {i})); s ^= r.sum() + (s << 1); }}
    switch (x % 5) {{ case 0: s += Fib<{i % 30 + 2}>::v; break; case 1: s -= {i}; break;
      case 2: s *= 3; break; case 3: s /= 7; break; default: s += r.at; }}
    return s;
  }}
}};
long run{i}(long x) {{
  Node{i}<int, {i % 7 + 2}> a; Node{i}<long, {i % 5 + 3}> b; Node{i}<short, {i % 3 + 4}> c;
  Base* all[3] = {{&a, &b, &c}};
  long s = 0;
  for (Base* p : all) s += p->f(x + s);
  auto g = [&](long y) {{ return s * y + {i}; }};
  return g(x) + g(s & 15);
}}""")
    parts.append("int main(int argc, char**) { long s = argc;")
    parts += [f"  s += run{i}(s & 1023);" for i in range(n)]
    parts.append("  return int(s & 1); }")
    (d / "tu.cpp").write_text("\n".join(parts) + "\n")


def gen_jq(d: Path, n: int) -> None:
    rng = random.Random(5)
    with open(d / "input.json", "w") as f:
        f.write("[")
        for i in range(n):
            rec = {"id": i, "k": rng.choice(WORDS), "v": rng.randrange(1000),
                   "tags": [rng.choice(WORDS) for _ in range(rng.randrange(1, 6))],
                   "nested": {"a": rng.random(), "b": [rng.randrange(10) for _ in range(4)]}}
            f.write(("," if i else "") + json.dumps(rec, separators=(",", ":")))
        f.write("]\n")
    (d / "filter.jq").write_text(
        'group_by(.k) | map({k: .[0].k, n: length, s: (map(.v) | add),'
        ' t: ([.[].tags[]] | unique | length), b: (map(.nested.b | add) | add),'
        ' top: (sort_by(-.v, .id) | .[0:3] | map(.id))})\n')


def gen_git(d: Path, n: int) -> None:
    """A repository of n commits over 40 files, built with fast-import (no working tree)."""
    rng = random.Random(3)
    repo = d / "repo.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True, env=_git_env(d))
    files = {f"src/f{i:02d}.txt": [f"{rng.choice(WORDS)} {j}" for j in range(200)] for i in range(40)}
    stream = []
    for c in range(n):
        stream.append(f"commit refs/heads/main\nmark :{c + 1}\n"
                      f"committer Lab <lab@example.org> {1700000000 + c * 60} +0000\n")
        msg = f"change {c}: {rng.choice(WORDS)}\n"
        stream.append(f"data {len(msg.encode())}\n{msg}")
        if c:
            stream.append(f"from :{c}\n")
        for name in rng.sample(sorted(files), 4):
            lines = files[name]
            for _ in range(6):
                k = rng.randrange(len(lines))
                lines[k] = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {c}"
            if rng.random() < 0.3:
                lines.insert(rng.randrange(len(lines)), f"new {c}")
            body = "\n".join(lines) + "\n"
            stream.append(f"M 100644 inline {name}\ndata {len(body.encode())}\n{body}")
        stream.append("\n")
    subprocess.run(["git", "--git-dir", str(repo), "fast-import", "--quiet"], input="".join(stream).encode(),
                   check=True, env=_git_env(d))


def _git_env(d: Path) -> dict:
    return {**os.environ, "HOME": str(d), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
            "LC_ALL": "C", "TZ": "UTC"}


# ---- the programs ----------------------------------------------------------------------------
# name -> executables needed, generator sizes (full, bench, smoke), generator, command (given the
# input directory), environment, stdin file (or None).  `bench` is make bench's size: about
# 0.2-0.6 s a run under glibc on a 2-core VM, so that every program fits in its time budget
# (g++'s is one template family: parsing the standard headers alone takes most of a second).

PROGRAMS = {
    "python": {"needs": [], "sizes": (40, 15, 1), "gen": gen_python,
               "argv": lambda d: [_python(), "-S", str(d / "work.py")],
               "env": {"PYTHONMALLOC": "malloc", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}},
    "sqlite": {"needs": ["sqlite3"], "sizes": (200000, 60000, 5000), "gen": gen_sqlite,
               "argv": lambda d: ["sqlite3", "-batch", ":memory:"], "stdin": "work.sql"},
    "perl": {"needs": ["perl"], "sizes": (30000, 8000, 3000), "gen": gen_perl,
             "argv": lambda d: ["perl", str(d / "work.pl"), str(d / "input.txt")],
             "env": {"PERL_HASH_SEED": "0", "PERL_PERTURB_KEYS": "0"}},
    "gxx": {"needs": ["g++"], "sizes": (8, 1, 2), "gen": gen_gxx,
            "argv": lambda d: ["g++", "-std=c++17", "-O1", "-frandom-seed=strata", "-S", "-o", "-",
                               str(d / "tu.cpp")]},
    # GCC keeps most of its data in its own garbage-collected pages, so g++ barely tells the
    # allocators apart; clang allocates through malloc.
    "clang": {"needs": ["clang++"], "sizes": (25, 6, 1), "gen": gen_clang,
              "argv": lambda d: ["clang++", "-std=c++17", "-O2", "-S", "-o", "-", str(d / "tu.cpp")]},
    "jq": {"needs": ["jq"], "sizes": (30000, 8000, 3000), "gen": gen_jq,
           "argv": lambda d: ["jq", "-c", "-f", str(d / "filter.jq"), str(d / "input.json")]},
    "git": {"needs": ["git"], "sizes": (2000, 500, 60), "gen": gen_git,
            "argv": lambda d: ["git", "--git-dir", str(d / "repo.git"), "-c", "core.pager=cat",
                               "log", "-p", "--stat", "--no-color", "main"]},
}
REDIS_REQUESTS = (20000, 5000, 500)

SCALES = ("full", "bench")  # and the smoke size under --smoke
PARAMS = [Param("programs", list(PROGRAMS) + ["redis"], "programs to run, comma-separated",
                parse=list_of(one_of(*PROGRAMS, "redis"))),
          Param("scale", "full", "input sizes: full (~0.5-2 s a run) or bench (make bench's, ~0.2-0.6 s)",
                parse=one_of(*SCALES))]


def missing(name: str) -> list[str]:
    if name == "redis":
        return [x for x in ("redis-server", "redis-benchmark") if not shutil.which(x)]
    return [x for x in PROGRAMS[name]["needs"] if not shutil.which(x)]


def smoke_skip():
    gone = {n: missing(n) for n in list(PROGRAMS) + ["redis"]}
    gone = {n: m for n, m in gone.items() if m}
    if len(gone) == len(PROGRAMS) + 1:
        return "none of the programs is installed (make setup installs them)"
    return None


def _size(sizes: tuple, ctx, scale: str):
    return sizes[2] if ctx.smoke else sizes[SCALES.index(scale)]


def cells(ctx, scale: str | None = None, programs=None):
    """`scale`, `programs`: the suite's parameters when not given (the default suite gives them)."""
    scale = scale or ctx.params.get("scale", "full")
    out = []
    for name in programs or ctx.params.get("programs", list(PROGRAMS) + ["redis"]):
        if missing(name):
            print(f"strata-lab: programs: skipping {name}: {', '.join(missing(name))} not installed "
                  "(make setup installs it)", file=sys.stderr)
            continue
        if name == "redis":
            n = _size(REDIS_REQUESTS, ctx, scale)
            argv = [sys.executable, "-m", "strata_lab.drivers.redis_bench", "--requests", n]
            out.append(Cell(workload="redis", threads=1, name="redis",
                            argv=argv + (["--smoke"] if ctx.smoke else []), metric="rps", unit="req/s",
                            params={"requests_per_test": n}, latency_metrics=("p99_ms_set", "p99_ms_get"),
                            peak_rss_metric="server_peak_rss_kb", preload="driver", timeout_s=180.0))
            continue
        size = _size(PROGRAMS[name]["sizes"], ctx, scale)
        argv = [sys.executable, "-m", "strata_lab.suites.programs", "--program", name, "--size", size]
        out.append(Cell(workload=name, threads=1, name=name, argv=argv, metric="wall_s", unit="s",
                        higher_is_better=False, params={"size": size}, peak_rss_metric="peak_rss_kb",
                        preload="driver", timeout_s=300.0))
    return out


# ---- the driver --------------------------------------------------------------------------------

def cache_root() -> Path:
    base = os.environ.get("STRATA_LAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "strata-lab")
    return Path(base) / "programs"


def run(argv: list[str], env: dict, stdin: Path | None, out: Path, preload: str | None) -> dict:
    """Run one program, stdout to `out`, measured by the lab's launcher (strata-lab-spawn): its
    wait4 covers the program and its children (g++ runs cc1plus), and the peak RSS is the
    program's own, not this Python driver's image carried over the exec."""
    from strata_lab.runner import spawner

    env = dict(env)
    env.pop("LD_PRELOAD", None)
    env.pop("STRATA_LAB_SPAWN_PRELOAD", None)
    launcher = spawner()
    prefix = out.with_name(out.name + ".sample")
    if launcher:
        full = [launcher, str(prefix), *argv]
        if preload:
            env["STRATA_LAB_SPAWN_PRELOAD"] = preload
    else:
        full = argv
        if preload:
            env["LD_PRELOAD"] = preload
    err_path = out.with_suffix(".stderr")
    with open(out, "wb") as fo, (open(stdin, "rb") if stdin else open(os.devnull, "rb")) as fi, \
            open(err_path, "wb") as fe:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdin=fi, stdout=fo, stderr=fe, env=env, cwd=out.parent)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
    usage = {"maxrss": ru.ru_maxrss, "utime": ru.ru_utime, "stime": ru.ru_stime, "minflt": ru.ru_minflt,
             "majflt": ru.ru_majflt, "nvcsw": ru.ru_nvcsw, "nivcsw": ru.ru_nivcsw}
    source = "driver (peak RSS includes the driver's pre-exec image)"
    try:
        f = prefix.with_name(prefix.name + ".rusage").read_text().split()
        status = int(f[0])
        usage = {"maxrss": int(f[1]), "utime": float(f[2]), "stime": float(f[3]), "nvcsw": int(f[4]),
                 "nivcsw": int(f[5]), "minflt": int(f[6]), "majflt": int(f[7])}
        source = "launcher"
    except (OSError, ValueError, IndexError):
        pass
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = err_path.read_bytes()[-1500:].decode("utf-8", "replace")
        raise SystemExit(f"programs: {argv[0]} exited with status {code}\n{tail}")
    return {"wall_s": wall, "user_s": usage["utime"], "sys_s": usage["stime"],
            "cpu_s": usage["utime"] + usage["stime"], "peak_rss_kb": usage["maxrss"],
            "minor_faults": usage["minflt"], "major_faults": usage["majflt"],
            "voluntary_ctx_switches": usage["nvcsw"], "involuntary_ctx_switches": usage["nivcsw"],
            "rusage_source": source}


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def prepare(name: str, size: int) -> tuple[Path, dict, str]:
    """The input directory (generated once, under a lock), the environment and the expected
    output digest (from a plain run without any preload)."""
    spec = PROGRAMS[name]
    d = cache_root() / f"{name}-{size}-v{GENERATOR_VERSION}"
    d.mkdir(parents=True, exist_ok=True)
    env = {**_git_env(d), **spec.get("env", {})}
    with open(d / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (d / ".generated").exists():
            spec["gen"](d, size)
            (d / ".generated").write_text("ok\n")
        expected = d / "expected.json"
        if not expected.exists():
            stdin = d / spec["stdin"] if spec.get("stdin") else None
            out = d / "plain.out"
            run(spec["argv"](d), env, stdin, out, None)
            expected.write_text(json.dumps({"sha256": digest(out), "bytes": out.stat().st_size}))
            out.unlink()
        want = json.loads(expected.read_text())["sha256"]
    return d, env, want


def main(args: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m strata_lab.suites.programs")
    ap.add_argument("--program", required=True, choices=sorted(PROGRAMS))
    ap.add_argument("--size", type=int, help="input size (default: the full one)")
    ap.add_argument("--smoke", action="store_true", help="the smoke size")
    a = ap.parse_args(args)
    spec = PROGRAMS[a.program]
    size = a.size or spec["sizes"][2 if a.smoke else 0]
    gone = missing(a.program)
    if gone:
        print(f"programs: {', '.join(gone)} not installed", file=sys.stderr)
        return 2
    d, env, want = prepare(a.program, size)
    import tempfile

    with tempfile.TemporaryDirectory(prefix=f"strata-lab-{a.program}-") as tmp:
        out = Path(tmp) / "out"
        stdin = d / spec["stdin"] if spec.get("stdin") else None
        usage = run(spec["argv"](d), env, stdin, out, os.environ.get("STRATA_LAB_PRELOAD") or None)
        got = digest(out)
        size_out = out.stat().st_size
    if got != want:
        print(f"programs: {a.program}: output differs from the plain run's (sha256 {got[:16]}… vs "
              f"{want[:16]}…, {size_out} bytes)", file=sys.stderr)
        return 1
    print(json.dumps({"program": a.program, "size": size, "threads": 1, **usage,
                      "output_bytes": size_out, "output_sha256": got}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
