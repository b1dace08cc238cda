"""A PySpark job on a standalone Spark cluster on loopback (a master, a worker, two executor JVMs),
the executors under each allocator through spark.executorEnv.LD_PRELOAD — the way Spark users
preload jemalloc.  Per allocator: the job's wall time (primary metric) and the executors' peak
RSS (sum of their VmHWM).  Master, worker and the driver keep the system's malloc.

Each sample runs strata_lab.drivers.spark_job as a driver (preload="driver"): it starts the
cluster, waits for both executors, times the job (Python-worker word counts, then a DataFrame
aggregation with off-heap memory), checks its results, and stops everything.  Starting JVMs
makes a sample take about a minute on a 2-core machine: keep rounds few.
"""

from __future__ import annotations

import sys

from strata_lab.suite import Cell

DESCRIPTION = "Spark: a PySpark job on a loopback standalone cluster, executors preloading each allocator; job time, executor peak RSS"
ALLOCATORS = ["glibc", "jemalloc", "mimalloc", "strata"]
BASELINE = "jemalloc"  # what Spark deployments usually preload
ROUNDS = 3
WARMUP = 0
TIME_BUDGET = 0  # the planned rounds only: a sample takes about a minute


def smoke_skip():
    from strata_lab.drivers import spark_job

    try:
        spark_job.spark_home()
    except spark_job.JobError as e:
        return str(e)
    return spark_job.java_problem()


def cells(ctx):
    return [Cell(workload="spark-job", threads=2,
                 argv=[sys.executable, "-m", "strata_lab.drivers.spark_job", "--executors", 2]
                      + (["--smoke"] if ctx.smoke else []),
                 metric="job_s", unit="s", higher_is_better=False, peak_rss_metric="executor_peak_rss_kb",
                 preload="driver", timeout_s=300)]
