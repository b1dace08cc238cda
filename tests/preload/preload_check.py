"""Runs a program with and without LD_PRELOAD=libstrata.so and compares (preload tests).

A program runs twice, without and with strata; the outputs must match, strata must report no
errors, and strata's exit statistics must show it served the allocations.  Each process of the
run (a shell's children, git's helpers) writes its own statistics (STRATA_STATS_FILE with %p);
the counts are summed over them.
"""
import json
import os
import subprocess
import tempfile


class Checker:
    def __init__(self, lib, timeout=240):
        self.lib = os.path.abspath(lib)  # runs may change directory
        self.timeout = timeout
        self.passed = []
        self.failed = []
        self.skipped = []

    def run(self, cmd, preload, stdin=None, env=None, cwd=None):
        """Returns (CompletedProcess, [statistics of each process]) for one run."""
        full_env = dict(os.environ if env is None else env)
        full_env.pop("LD_PRELOAD", None)
        with tempfile.TemporaryDirectory() as stats_dir:
            if preload:
                full_env.update(LD_PRELOAD=self.lib, STRATA_STATS_FILE=os.path.join(stats_dir, "s.%p.json"))
            proc = subprocess.run(cmd, env=full_env, input=stdin, capture_output=True, timeout=self.timeout,
                                  cwd=cwd)
            docs = []
            for name in sorted(os.listdir(stats_dir)):
                with open(os.path.join(stats_dir, name)) as f:
                    text = f.read()
                docs.append(json.loads(text) if text else None)
        return proc, docs

    def check(self, name, cmd, stdin=None, min_mallocs=1000, env=None, cwd=None, normalize=None):
        """Runs cmd without and with strata; normalize(stdout) may drop what legitimately differs
        between two runs (none of the programs here needs it for the allocator's sake)."""
        plain, _ = self.run(cmd, False, stdin, env, cwd)
        strata, stats = self.run(cmd, True, stdin, env, cwd)
        norm = normalize or (lambda out: out)
        problems = []
        if plain.returncode != 0:
            problems.append(f"the run without strata failed ({plain.returncode}): {plain.stderr[-500:]!r}")
        if strata.returncode != 0:
            problems.append(f"exit status {strata.returncode}: {strata.stderr[-500:]!r}")
        if norm(strata.stdout) != norm(plain.stdout):
            problems.append("output differs from the run without strata")
        if not plain.stdout.strip():
            problems.append("no output to compare")
        if b"strata: error" in strata.stderr:
            problems.append(f"strata reported errors: {strata.stderr[-500:]!r}")
        mallocs = 0
        if not stats:
            problems.append("no statistics written at exit")
        for doc in stats:
            if doc is None or doc.get("allocator") != "strata":
                problems.append(f"statistics not strata's: {doc}")
                continue
            mallocs += doc["malloc_count"]
            if doc["bad_free_count"] != 0:
                problems.append(f"{doc['bad_free_count']} bad frees")
        if stats and mallocs < min_mallocs:
            problems.append(f"only {mallocs} mallocs went through strata")
        status = "ok" if not problems else "FAILED"
        print(f"{name}: {status} ({mallocs} mallocs through strata in {len(stats)} processes)")
        for p in problems:
            print("   ", p)
        (self.failed if problems else self.passed).append(name)

    def skip(self, name, why):
        print(f"{name}: skipped: {why}")
        self.skipped.append(name)

    def summary(self):
        print(f"{len(self.passed)} passed, {len(self.failed)} failed, {len(self.skipped)} skipped")
        return 1 if self.failed else 0
