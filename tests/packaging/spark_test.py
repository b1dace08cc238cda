#!/usr/bin/env python3
"""Spark test: a real PySpark job on a standalone cluster on loopback (a master and a worker
started here, two executors as separate JVMs), with spark.executorEnv.LD_PRELOAD naming
libstrata.so and spark.executorEnv.STRATA_STATS_FILE=<dir>/strata-%p.json.  The job runs through
the lab's driver (lab/strata_lab/drivers/spark_job.py), which checks the job's results; this test
checks from the statistics files that every executor JVM — and every Python worker they
started — was served by strata.  Exit 77 (skipped) when pyspark or Java 17 is missing.  Usage:
    spark_test.py <python with pyspark and strata_lab> <libstrata.so>
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from strata_check import Failures, read_stats, served

PYTHON, LIB = sys.argv[1], sys.argv[2]
SKIP = 77
f = Failures()


def main():
    probe = subprocess.run([PYTHON, "-c", "import pyspark, strata_lab.drivers.spark_job as j; "
                            "print(j.java_problem() or '')"], capture_output=True, text=True)
    if probe.returncode != 0 or probe.stdout.strip():
        print("skipped: " + (probe.stdout.strip() or probe.stderr.strip().splitlines()[-1]))
        print("scripts/setup.sh installs pyspark (lab[spark]) and Java 17")
        raise SystemExit(SKIP)
    with tempfile.TemporaryDirectory(prefix="strata-spark-test-") as tmp:
        stats = Path(tmp) / "stats"
        proc = subprocess.run([PYTHON, "-m", "strata_lab.drivers.spark_job", "--smoke", "--executors", "2",
                               "--preload", LIB, "--stats-dir", str(stats), "--timeout", "240"],
                              capture_output=True, text=True, timeout=280)
        ok = proc.returncode == 0
        if not f.check("the job ran and its results are right", ok, "" if ok else proc.stderr[-3000:]):
            f.exit()
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"job: {out['job_s']} s, executors {[e['pid'] for e in out['executor_detail']]}")
        f.check("two executor JVMs", out["executors"] == 2, str(out["executors"]))
        for e in out["executor_detail"]:
            path = stats / f"strata-{e['pid']}.json"
            doc = json.loads(path.read_text() or "{}") if path.exists() else {}
            problem = served(doc, 10_000) if doc else f"no statistics file {path.name}"
            f.check(f"executor {e['pid']} was served by strata", problem is None,
                    problem or f"{doc['malloc_count']} mallocs")
        others = read_stats(stats)
        bad = [d for d in others if served(d, 1) is not None]
        f.check("every process the executors started was served by strata (Python workers)",
                len(others) > 2 and not bad, f"{len(others)} statistics files")
    f.exit()


if __name__ == "__main__":
    main()
