"""Driver: a PySpark job on a small standalone Spark cluster on loopback, its executors under the
sample's allocator.  Prints one JSON object: the job's wall time, the executors' peak RSS
(VmHWM of each executor JVM), their pids, and — when strata is preloaded — each executor's
strata statistics.

    python -m strata_lab.drivers.spark_job [--preload LIB] [--executors N] [--stats-dir DIR]
                                           [--smoke] [--timeout S]

This process starts a master and a worker (bin/spark-class from the pyspark wheel, every socket
on 127.0.0.1), then runs the job as a client-mode driver; the worker launches the executors,
one JVM each (spark.executor.cores=1, spark.cores.max=N).  The allocator reaches them the way
users preload jemalloc into Spark: spark.executorEnv.LD_PRELOAD, with
spark.executorEnv.STRATA_STATS_FILE=<dir>/strata-%p.json so that each executor (and each Python
worker it forks) writes its own statistics when it exits.  Master, worker and this driver run
with the system's malloc.  The allocator comes from --preload, else $STRATA_LAB_PRELOAD (set by
the lab for cells with preload="driver"); empty means glibc.

The job: word counts over generated text through Python workers (RDD reduceByKey), then a
DataFrame aggregation with off-heap Tungsten memory (JVM malloc through Unsafe.allocateMemory).
Both results are checked against values computed here; a wrong result exits 1, never a number.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

from strata_lab.drivers import die_with_driver
from strata_lab.drivers.redis_bench import free_port, status_kb

LOCAL = "127.0.0.1"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


class JobError(Exception):
    pass


def spark_home() -> Path:
    try:
        import pyspark
    except ImportError:
        raise JobError("pyspark is not installed (scripts/setup.sh installs it into .venv: "
                       "pip install 'lab[spark]')") from None
    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").exists():
        raise JobError(f"{home}/bin/spark-class is missing: a broken pyspark installation")
    return home


def java_problem() -> str | None:
    """None when a Java runtime that Spark 4 accepts (17 or later) is on PATH, else why not."""
    java = shutil.which("java") or (os.environ.get("JAVA_HOME") and f"{os.environ['JAVA_HOME']}/bin/java")
    if not java or not os.path.exists(java):
        return "no java on PATH (Debian: apt-get install openjdk-17-jre-headless)"
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)', out)
    if not m or int(m.group(1)) < 17:
        return f"Spark 4 needs Java 17 or later, found: {out.splitlines()[0] if out else '?'}"
    return None


def listening(port: int) -> bool:
    try:
        with socket.create_connection((LOCAL, port), timeout=0.5):
            return True
    except OSError:
        return False


def scratch_env(workdir: Path) -> dict[str, str]:
    """Spark's scratch space (SPARK_LOCAL_DIRS: block managers, shuffle files, the executors'
    directories, pyspark's files) and the JVMs' java.io.tmpdir inside `workdir`, for every JVM
    of the run.  They defaulted to /tmp, which Java uses whatever $TMPDIR says: a sample the lab
    killed on its timeout, or a driver killed by a signal, left spark-*, blockmgr-* and
    executor-* directories there, where the lab's removal of the sample's directory (this
    driver's TMPDIR) never reached them."""
    local, tmp = workdir / "local", workdir / "tmp"
    local.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    return {"SPARK_LOCAL_DIRS": str(local), "SPARK_DAEMON_JAVA_OPTS": f"-Djava.io.tmpdir={tmp}"}


class Cluster:
    """A standalone master and one worker, each a JVM in its own process group."""

    def __init__(self, home: Path, workdir: Path, cores: int, worker_memory: str, deadline: float):
        self.home, self.workdir, self.deadline = home, workdir, deadline
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("LD_PRELOAD", "STRATA_STATS_FILE", "STRATA_LAB_PRELOAD")}
        self.env.update(SPARK_HOME=str(home), SPARK_LOCAL_IP=LOCAL, SPARK_LOCAL_HOSTNAME="localhost",
                        SPARK_DAEMON_MEMORY="384m", SPARK_LOG_DIR=str(workdir / "logs"),
                        SPARK_WORKER_DIR=str(workdir / "work"), **scratch_env(workdir))
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []
        self.master_port, self.master_ui = free_port(), free_port()
        self.url = f"spark://{LOCAL}:{self.master_port}"
        self.cores, self.worker_memory = cores, worker_memory

    def _start(self, name: str, *args: str) -> None:
        log = self.workdir / f"{name}.log"
        proc = subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], env=self.env,
                                stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_driver())  # spark-class execs the JVM: it keeps the signal
        self.procs.append((name, proc, log))

    def _wait(self, what: str, ready) -> None:
        while not ready():
            for name, proc, log in self.procs:
                if proc.poll() is not None:
                    raise JobError(f"the Spark {name} exited with status {proc.returncode}: "
                                   f"{log.read_text()[-1500:]}")
            if time.monotonic() > self.deadline:
                raise JobError(f"timed out waiting for {what}")
            time.sleep(0.2)

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://{LOCAL}:{self.master_ui}/json/", timeout=2) as r:
                return int(json.load(r).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    @property
    def worker_pid(self) -> int:
        """The worker's JVM (spark-class execs it), the parent of every executor."""
        return next(proc.pid for name, proc, _ in self.procs if name == "worker")

    def __enter__(self) -> "Cluster":
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", LOCAL,
                    "--port", str(self.master_port), "--webui-port", str(self.master_ui))
        self._wait("the master", lambda: listening(self.master_port))
        self._start("worker", "org.apache.spark.deploy.worker.Worker", self.url, "--host", LOCAL,
                    "--port", str(free_port()), "--webui-port", str(free_port()),
                    "--cores", str(self.cores), "--memory", self.worker_memory,
                    "--work-dir", str(self.workdir / "work"))
        self._wait("the worker to register", lambda: self.alive_workers() >= 1)
        return self

    def __exit__(self, *exc) -> None:
        for _, proc, _ in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc, _ in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def executor_pids(app_id: str, worker: int) -> list[int]:
    """The executor JVMs of this application: children of this run's worker whose command line
    names the app id.  The app id alone (app-<the second it started>-0000) is the same for two
    clusters whose first applications start in the same second: another run's executors were
    counted as this one's, their peak RSS added to this run's, and waited for at the end."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == worker and EXECUTOR_CLASS.encode() in cmd and app_id.encode() in cmd:
            pids.append(int(d.name))
    return sorted(pids)


def expected_words(n: int, vocabulary: int) -> dict[str, int]:
    return dict(Counter(f"w{(i * 7919) % vocabulary}" for i in range(n) for _ in range(3)))


def expected_groups(m: int, keys: int) -> dict[int, tuple[int, int, int]]:
    """Per k: (sum of 2*id, total length of repeat('x', id % 50), count) over ids with id % keys == k."""
    out = {}
    for k in range(keys):
        ids = range(k, m, keys)
        out[k] = (2 * sum(ids), sum(i % 50 for i in ids), len(ids))
    return out


def run_job(spark, smoke: bool) -> dict:
    from pyspark.sql import functions as F

    n, vocabulary, m, keys, parts = (2000, 50, 20000, 100, 4) if smoke else (400_000, 5000, 4_000_000, 1000, 16)
    sc = spark.sparkContext
    t0 = time.perf_counter()
    words = dict(sc.parallelize(range(n), parts)
                 .flatMap(lambda i: [f"w{(i * 7919) % vocabulary}"] * 3)
                 .map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b).collect())
    t1 = time.perf_counter()
    rows = (spark.range(0, m, numPartitions=parts)
            .select((F.col("id") % keys).alias("k"), (F.col("id") * 2).alias("v"),
                    F.expr("repeat('x', cast(id % 50 as int))").alias("s"))
            .groupBy("k").agg(F.sum("v").alias("v"), F.sum(F.length("s")).alias("l"), F.count("*").alias("c"))
            .collect())
    t2 = time.perf_counter()
    groups = {r["k"]: (r["v"], r["l"], r["c"]) for r in rows}
    if words != expected_words(n, vocabulary):
        raise JobError("the word counts are wrong")
    if groups != expected_groups(m, keys):
        raise JobError("the DataFrame aggregation is wrong")
    return {"words_s": round(t1 - t0, 4), "dataframe_s": round(t2 - t1, 4), "job_s": round(t2 - t0, 4),
            "records": n * 3 + m}


def run_job_by(spark, smoke: bool, deadline: float) -> dict:
    """run_job, its Spark jobs cancelled at `deadline`: --timeout bounded the waits for the cluster
    and the executors but not the job, so a job whose executors hung (stopped, or deadlocked in
    the allocator under test) kept the driver waiting for as long as Spark retried."""
    sc = spark.sparkContext
    timer = threading.Timer(max(deadline - time.monotonic(), 0.0), sc.cancelAllJobs)
    timer.daemon = True
    timer.start()
    try:
        return run_job(spark, smoke)
    except Exception:
        if time.monotonic() >= deadline:  # the cancelled job's error: say why it ended
            raise JobError("the job did not finish within --timeout") from None
        raise
    finally:
        timer.cancel()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spark_job")
    ap.add_argument("--preload", default=None, help="library for spark.executorEnv.LD_PRELOAD")
    ap.add_argument("--executors", type=int, default=2)
    ap.add_argument("--stats-dir", default=None, help="keep the executors' strata statistics here")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds for the whole run")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args(argv)
    if a.executors < 1:
        ap.error(f"--executors must be at least 1, not {a.executors}")
    if not 0 < a.timeout < 1e6:  # nan compared false with every deadline: waits never ended
        ap.error(f"--timeout must be a number of seconds in (0, 1e6), not {a.timeout:g}")
    preload = a.preload if a.preload is not None else os.environ.get("STRATA_LAB_PRELOAD", "")
    deadline = time.monotonic() + a.timeout
    try:
        home = spark_home()
        problem = java_problem()
        if problem:
            raise JobError(problem)
        with tempfile.TemporaryDirectory(prefix="strata-spark-") as tmp:
            tmp = Path(tmp)
            stats_dir = Path(a.stats_dir) if a.stats_dir else tmp / "stats"
            stats_dir.mkdir(parents=True, exist_ok=True)
            with Cluster(home, tmp, a.executors, f"{a.executors * 640}m", deadline) as cluster:
                result = run_on(cluster, preload, stats_dir, a, deadline)
    except JobError as e:
        print(f"spark_job: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


def run_on(cluster: Cluster, preload: str, stats_dir: Path, a, deadline: float) -> dict:
    scratch = scratch_env(cluster.workdir)
    os.environ.update(SPARK_HOME=str(cluster.home), SPARK_LOCAL_IP=LOCAL, PYSPARK_PYTHON=sys.executable,
                      PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_DIRS=scratch["SPARK_LOCAL_DIRS"])
    java_tmp = scratch["SPARK_DAEMON_JAVA_OPTS"]
    for k in ("LD_PRELOAD", "STRATA_STATS_FILE"):  # the driver JVM keeps the system's malloc
        os.environ.pop(k, None)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(cluster.url).appName("strata-spark-job")
               .config("spark.driver.host", LOCAL).config("spark.driver.bindAddress", LOCAL)
               .config("spark.driver.memory", "512m").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.extraJavaOptions", java_tmp)
               .config("spark.executor.extraJavaOptions", java_tmp)
               .config("spark.executor.memory", "512m").config("spark.executor.cores", "1")
               .config("spark.cores.max", str(a.executors))
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.memory.offHeap.enabled", "true").config("spark.memory.offHeap.size", "128m")
               .config("spark.executorEnv.STRATA_STATS_FILE", str(stats_dir / "strata-%p.json")))
    if preload:
        builder = builder.config("spark.executorEnv.LD_PRELOAD", preload)
    spark = builder.getOrCreate()
    try:
        spark.sparkContext.setLogLevel("WARN")
        app_id, worker = spark.sparkContext.applicationId, cluster.worker_pid
        while len(executor_pids(app_id, worker)) < a.executors:  # all executors up before timing
            if time.monotonic() > deadline:
                raise JobError(f"only {len(executor_pids(app_id, worker))} of {a.executors} executors started")
            time.sleep(0.2)
        timing = run_job_by(spark, a.smoke, deadline)
        pids = executor_pids(app_id, worker)
        peaks = [status_kb(p, "VmHWM:") or 0 for p in pids]
    finally:
        spark.stop()
    # Executors exit when the application ends; each writes its statistics at exit.
    while any(Path(f"/proc/{p}").exists() for p in pids):
        if time.monotonic() > deadline:
            raise JobError(f"executors {pids} still running after the application stopped")
        time.sleep(0.2)
    executors = []
    for pid, peak in zip(pids, peaks):
        f = stats_dir / f"strata-{pid}.json"
        doc = json.loads(f.read_text() or "{}") if f.exists() else None
        executors.append({"pid": pid, "peak_rss_kb": peak,
                          "strata_malloc_count": doc.get("malloc_count") if doc else None})
    return {"threads": a.executors, **timing, "executors": len(pids),
            "executor_peak_rss_kb": sum(peaks), "executor_peak_rss_max_kb": max(peaks, default=0),
            "executor_detail": executors, "preload": preload, "app_id": app_id}


if __name__ == "__main__":
    sys.exit(main())
