"""One sample = one process: results, failures (exit, signal, timeout, bad output), preload, CPUs."""

import errno
import os
import sys

import pytest

from strata_lab import allocators, machine, runner
from strata_lab.errors import LabError
from strata_lab.suite import Cell, parse_last_json


def sample(script: str, timeout: float = 30, metric: str = "v", variant=None, **kw):
    cell = Cell(workload="sh", threads=1, argv=["/bin/sh", "-c", script], metric=metric,
                timeout_s=timeout, **kw)
    return runner.run_sample(cell, variant or runner.Variant("glibc"), None, {}, None,
                             lambda c, out: parse_last_json(out))


def test_success_records_metrics_and_usage():
    rec = sample('echo "log line"; echo \'{"v": 42.5, "threads": 1, "extra": [1,2]}\'')
    assert rec["ok"] and rec["failure"] is None
    assert rec["metrics"] == {"v": 42.5, "threads": 1, "extra": [1, 2]}
    for key in ("wall_s", "user_s", "sys_s", "peak_rss_kb", "voluntary_ctx_switches",
                "involuntary_ctx_switches", "minor_faults", "major_faults"):
        assert rec[key] is not None and rec[key] >= 0
    assert rec["exit_status"] == 0
    assert rec["other_cpu_s"] >= 0 and 0 <= rec["other_cpu_frac"]
    # the launcher gives the command's own peak RSS, not the lab's (~100 MiB with numpy loaded)
    assert rec["rusage_source"] == "launcher" and rec["peak_rss_kb"] < 20000


def test_nonzero_exit_is_a_failure_with_stderr_tail():
    rec = sample('echo "{\\"v\\": 1}"; echo "it went wrong" >&2; exit 3')
    assert not rec["ok"] and "metrics" not in rec
    f = rec["failure"]
    assert f["kind"] == "exit" and f["exit_status"] == 3 and "it went wrong" in f["stderr_tail"]


def test_crash_is_recorded_with_its_signal():
    rec = sample('echo partial >&2; kill -SEGV $$')
    assert not rec["ok"]
    assert rec["failure"]["kind"] == "crash" and rec["failure"]["signal"] == "SIGSEGV"
    assert rec["exit_status"] == -11 and "partial" in rec["failure"]["stderr_tail"]


def test_timeout_kills_the_process_group():
    rec = sample("sleep 30 & sleep 30; echo '{\"v\": 1}'", timeout=0.3)
    assert not rec["ok"] and rec["failure"]["kind"] == "timeout"
    assert "0.3 s" in rec["failure"]["message"]


@pytest.mark.parametrize("script, why", [("echo not json", "no JSON"),
                                         ("echo '{\"other\": 1}'", "no finite number 'v'"),
                                         ("echo '{\"v\": \"fast\"}'", "no finite number 'v'")])
def test_output_without_the_metric_is_a_failure(script, why):
    rec = sample(script)
    assert not rec["ok"] and rec["failure"]["kind"] == "parse" and why in rec["failure"]["message"]


@pytest.mark.parametrize("value", [0, -3.5])
def test_a_primary_metric_that_is_not_positive_is_a_failure(value):
    """Session 41's probe: a sample reporting 0 (E4's NUMA group when it could not allocate its
    buffer) counted as a success, and the ratios then left its round out without a word."""
    rec = sample(f"echo '{{\"v\": {value}}}'")
    assert not rec["ok"] and rec["failure"]["kind"] == "parse"
    assert "not a positive number" in rec["failure"]["message"]


def test_a_drivers_temporary_files_go_with_its_sample(tmp_path):
    """Session 41's probe: an E5 driver killed on a timeout (SIGKILL: no cleanup) left its
    /tmp/strata-e5-* directory behind.  A driver's temporary files are made in the sample's
    directory, which the lab removes whatever the sample did."""
    where = tmp_path / "where"
    rec = sample(f'd=$(mktemp -d) && echo "$d" > {where} && sleep 30', timeout=1.0, preload="driver")
    assert rec["failure"]["kind"] == "timeout"
    made = where.read_text().strip()
    try:
        assert made and not os.path.exists(made)
    finally:
        if made and os.path.isdir(made):
            os.rmdir(made)


def test_allocator_goes_into_ld_preload_of_the_command_only():
    lib = allocators.locate("jemalloc") or allocators.locate("mimalloc")
    if lib is None:
        pytest.skip("no peer allocator installed (scripts/setup.sh installs them)")
    v = runner.Variant.from_allocator(lib)
    rec = sample('printf \'{"v": 1, "preload": "%s"}\\n\' "$LD_PRELOAD"', variant=v)
    assert rec["ok"] and rec["metrics"]["preload"] == lib.library
    rec = sample('printf \'{"v": 1, "preload": "%s", "driver": "%s"}\\n\' "$LD_PRELOAD" "$STRATA_LAB_PRELOAD"',
                 variant=v, preload="driver")
    assert rec["metrics"]["preload"] == "" and rec["metrics"]["driver"] == lib.library


def test_an_exported_strata_trace_does_not_reach_the_samples(tmp_path, monkeypatch):
    """Probe s52 H48: with STRATA_TRACE exported (left from recording a program), every sample
    under strata recorded itself: `replay --alloc glibc,strata` wrote a trace per strata sample
    beside the user's and measured strata with recording's cost."""
    monkeypatch.setenv("STRATA_TRACE", str(tmp_path / "app.%p"))
    rec = sample('printf \'{"v": 1, "trace": "%s"}\\n\' "${STRATA_TRACE-unset}"')
    assert rec["ok"] and rec["metrics"]["trace"] == "unset", rec
    rec = sample('printf \'{"v": 1, "trace": "%s"}\\n\' "${STRATA_TRACE-unset}"', preload="driver")
    assert rec["ok"] and rec["metrics"]["trace"] == "unset", rec


def test_a_library_ld_so_refuses_to_preload_fails_the_sample(tmp_path):
    """Probe s40b D3: ld.so ignores a bad LD_PRELOAD with a warning and the program runs under
    glibc, exit 0; the sample must fail rather than record glibc under the variant's name."""
    import shutil

    text = tmp_path / "text.so"
    text.write_text("not an ELF\n")
    pie = tmp_path / "pie.so"  # an executable: ELF, ET_DYN, but ld.so will not preload it
    shutil.copy(os.path.realpath(shutil.which("true")), pie)
    for lib in (text, pie):
        rec = sample('echo \'{"v": 1}\'', variant=runner.Variant("fake", library=str(lib)))
        assert not rec["ok"] and rec["failure"]["kind"] == "spawn", rec
        assert "not loaded" in rec["failure"]["message"] and str(lib) in rec["failure"]["message"]


def test_pinning_reaches_the_command():
    cpu = sorted(os.sched_getaffinity(0))[-1]
    cell = Cell(workload="sh", threads=1, metric="v", argv=[
        "/bin/sh", "-c", "printf '{\"v\": 1, \"allowed\": \"%s\"}\\n' \"$(grep Cpus_allowed_list /proc/self/status | cut -f2)\""])
    rec = runner.run_sample(cell, runner.Variant("glibc"), [cpu], {}, None, lambda c, o: parse_last_json(o))
    assert rec["metrics"]["allowed"] == str(cpu) and rec["cpus"] == [cpu]
    assert os.sched_getaffinity(0) != {cpu} or len(os.sched_getaffinity(0)) == 1  # lab restored


@pytest.mark.parametrize("ask", ["outside", "overlapping"])
def test_cpus_a_cpuset_took_from_the_lab_fail_the_sample_naming_them(monkeypatch, ask):
    """The cpuset the lab runs in loses CPUs mid-run (a cgroup's cpuset.cpus rewritten).  The
    kernel refuses a mask wholly outside it: every sample failed as `[Errno 22] Invalid
    argument`.  It narrows a mask that overlaps it: the samples ran on fewer CPUs than results.json
    records, a 2-thread cell on 1 CPU not flagged oversubscribed.  Both fail now, naming the CPUs."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    before, real = os.sched_getaffinity(0), os.sched_setaffinity
    left = {allowed[-1]}  # what the shrunk cpuset keeps

    def setaffinity(pid, cpus):  # what the kernel does to a mask under a cpuset
        cpus = set(cpus) & left
        if not cpus:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        real(pid, cpus)

    want = [allowed[0]] if ask == "outside" else allowed
    cell = Cell(workload="sh", threads=len(want), metric="v", argv=["/bin/sh", "-c", "echo '{\"v\": 1}'"])
    monkeypatch.setattr(machine.os, "sched_setaffinity", setaffinity)
    try:
        rec = runner.run_sample(cell, runner.Variant("glibc"), want, {}, None, lambda c, o: parse_last_json(o))
    finally:
        monkeypatch.undo()
        os.sched_setaffinity(0, before)
    assert not rec["ok"] and rec["failure"]["kind"] == "spawn", rec
    gave = "the kernel refused them" if ask == "outside" else f"the kernel gave only CPUs {allowed[-1]}"
    assert f"cannot pin to CPUs {machine.cpu_ranges(want)}: {gave}" in rec["failure"]["message"]
    assert "the CPUs the lab may use shrank after the run began" in rec["failure"]["message"]


def test_workload_timeline_and_own_peak_rss_override():
    rec = sample('echo \'{"v": 1, "srv_kb": 777, "rss_timeline": {"t_ms": [0, 10], "rss_kb": [5, 6]}}\'',
                 peak_rss_metric="srv_kb")
    assert rec["peak_rss_kb"] == 777 and rec["rss_timeline"]["source"] == "workload"
    assert rec["rss_timeline"]["rss_kb"] == [5, 6] and "rss_timeline" not in rec["metrics"]


def test_workload_rss_window_trims_and_lowers_the_lab_timeline():
    """The replayer's rss_window: the lab's RSS samples of the replay only, less its tables.  Its
    whole process's were drawn (the trace read and the tables built before the replay: 310 MB over
    time beside a 2 MiB peak)."""
    script = ("import json, sys, time\n"
              "b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.3); del b\n"
              "t0 = time.monotonic_ns(); time.sleep(0.3)\n"
              "print(json.dumps({'v': 1, 'rss_window': {'begin_monotonic_ns': t0, "
              "'end_monotonic_ns': time.monotonic_ns(), 'less_kib': 1000}}))\n")
    cell = Cell(workload="py", threads=1, argv=[sys.executable, "-c", script], metric="v", timeout_s=30)
    rec = runner.run_sample(cell, runner.Variant("glibc"), None, {}, None, lambda c, o: parse_last_json(o))
    tl = rec["rss_timeline"]
    assert rec["ok"] and "rss_window" not in rec["metrics"] and tl["source"] == "lab"
    assert len(tl["t_ms"]) >= 5 and tl["t_ms"][0] >= 0 and tl["t_ms"][-1] <= 400
    assert 0 < max(tl["rss_kb"]) < 100 << 10  # the 200 MiB before the window is not in it


@pytest.mark.parametrize("text, expected", [("0", [0]), ("0-0", [0]), (" 0 ", [0])])
def test_parse_cpus(text, expected):
    assert machine.parse_cpus(text) == expected


@pytest.mark.parametrize("text", ["", "a", "1-0", "-1", "0,,1", "9999", "0-9999", "0;1"])
def test_bad_cpu_lists(text):
    with pytest.raises(LabError, match="bad CPU list"):
        machine.parse_cpus(text)


def test_a_huge_cpu_range_is_refused_without_expanding_it():
    # Session 40's probe: 0-99999999999999999999 built the whole set and the lab was killed for
    # its memory.  Refused at once now, naming a CPU that does not exist.
    with pytest.raises(LabError, match="not available"):
        machine.parse_cpus("0-" + "9" * 20)
    with pytest.raises(LabError, match="not available"):
        machine.parse_cpus("100000000-100000001")


def test_plan_interleaves_variants_within_rounds():
    cells = [Cell("a", 1, ["x"], "m"), Cell("b", 1, ["x"], "m")]
    vs = [runner.Variant("p"), runner.Variant("q"), runner.Variant("r")]
    order = runner.plan(cells, vs, rounds=5, warmup=1, seed=3)
    assert len(order) == 2 * 3 * (5 + 1)
    counted = [(c.id, v.name, r) for c, v, r in order if r is not None]
    for r in range(5):  # every cell and variant exactly once per round, rounds in order
        block = [x for x in counted if x[2] == r]
        assert sorted(block) == sorted((c.id, v.name, r) for c in cells for v in vs)
    rounds_seen = [r for _, _, r in counted]
    assert rounds_seen == sorted(rounds_seen)
    # warm-ups of a cell come before its first counted sample
    first = {c.id: next(i for i, (cc, _, r) in enumerate(order) if cc.id == c.id and r is not None) for c in cells}
    for i, (c, _, r) in enumerate(order):
        if r is None:
            assert i < first[c.id]
    # the order within rounds is shuffled (not always the same permutation)
    perms = {tuple(v for cid, v, rr in counted if rr == r and cid == "a/t1") for r in range(5)}
    assert len(perms) > 1


def test_the_statistics_file_goes_to_the_variable_the_variant_names(tmp_path):
    f = tmp_path / "stats.json"
    script = 'printf \'{"v": 1, "mine": "%s", "strata": "%s"}\\n\' "$MY_STATS" "$STRATA_STATS_FILE"'
    cell = Cell(workload="sh", threads=1, argv=["/bin/sh", "-c", script], metric="v")
    rec = runner.run_sample(cell, runner.Variant("other", stats_env="MY_STATS"), None,
                            {"STRATA_STATS_FILE": ""}, f, lambda c, o: parse_last_json(o))
    assert rec["metrics"]["mine"] == str(f) and rec["metrics"]["strata"] == ""
    rec = runner.run_sample(cell, runner.Variant("strata"), None, {"STRATA_STATS_FILE": ""}, f,
                            lambda c, o: parse_last_json(o))
    assert rec["metrics"]["mine"] == "" and rec["metrics"]["strata"] == ""  # a name alone asks for none


def test_strata_is_the_allocator_that_writes_statistics(built, monkeypatch):
    monkeypatch.setenv("STRATA_BUILD", str(built))
    assert allocators.locate("strata").stats_env == "STRATA_STATS_FILE"
    assert runner.Variant.from_allocator(allocators.locate("strata")).stats_env == "STRATA_STATS_FILE"
    assert allocators.locate("glibc").stats_env is None


def test_steal_is_not_counted_as_other_processes_cpu():
    """/proc/stat's busy time counts steal, and the other CPU was busy less the sample's own: a
    sample that lost 30 % of its CPU to the hypervisor on a machine running nothing else read
    "other processes 30 %" beside "steal 30 %" (and warned of a busy machine).  Re-runs still
    go by what the two together took."""
    from strata_lab.model import Sample

    hz = machine.CLK_TCK
    # 2 CPUs for 1 s: 1.6 s busy, of which 0.6 s stolen and 1.0 s the sample's own
    noise = runner._noise((0, 0), (int(1.6 * hz), int(0.6 * hz)), 0.0, {"utime": 0.8, "stime": 0.2}, 1.0, [0, 1])
    assert noise["steal_frac"] == pytest.approx(0.3) and noise["other_cpu_frac"] == pytest.approx(0.0)
    # another process took 0.2 s besides
    noise = runner._noise((0, 0), (int(1.8 * hz), int(0.6 * hz)), 0.0, {"utime": 0.8, "stime": 0.2}, 1.0, [0, 1])
    assert noise["other_cpu_frac"] == pytest.approx(0.1)
    s = Sample(index=0, cell="c", variant="v", round=0, steal_frac=0.06, other_cpu_frac=0.06)
    assert s.lost == pytest.approx(0.12)


def test_proc_stat_counters_that_go_back_measure_no_noise(built, tmp_path, monkeypatch, capsys):
    """/proc/stat's steal stepping back between the reads around a sample (an unplugged CPU leaves
    the aggregate line; some hypervisors and lxcfs step steal back) was written as a negative
    steal_frac, which load() refuses: the run ended "corrupt results file" after its last sample,
    and report and compare refused the run for good."""
    from strata_lab import cli, results

    hz = machine.CLK_TCK
    assert runner._noise((100, 50), (200, 40), 0.0, {"utime": 0.1, "stime": 0.0}, 1.0, [0]) == {}
    assert runner._noise((100, 50), (90, 50), 0.0, {"utime": 0.1, "stime": 0.0}, 1.0, [0]) == {}
    assert runner._noise((0, 0), (hz, 0), 0.0, {"utime": 0.5, "stime": 0.0}, 1.0, [0])["other_cpu_frac"] == \
        pytest.approx(0.5)
    reads = iter(range(10**6, 0, -7))
    monkeypatch.setattr(machine, "cpu_jiffies", lambda cpus=None: (10**6, next(reads)))
    code = cli.main(["run", "--suite", "e1", "--smoke", "--alloc", "glibc", "--cells", "e1-tiny/t1", "--rounds", "2",
                     "--warmup", "0", "--no-progress", "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    (run_dir,) = tmp_path.iterdir()
    samples = results.load(run_dir).to_json()["samples"]
    assert len(samples) == 2 and all(s["ok"] and s.get("steal_frac") is None for s in samples)


def test_an_interrupt_that_lands_while_the_sample_is_spawned_takes_the_sample_down(monkeypatch, tmp_path):
    """Ctrl-C (or SIGTERM) arriving while Popen waits for the child's exec: the exception left
    Popen before `_watch` had the process, and the sample, in a session of its own, ran on after
    the lab had gone (179 of 200 interrupts timed at random in the first 4 ms of a sample)."""
    import signal
    import subprocess
    started = []
    real_popen = subprocess.Popen

    def popen_then_interrupt(*a, **kw):
        proc = real_popen(*a, **kw)
        started.append(proc.pid)
        signal.raise_signal(signal.SIGINT)  # as if it came before Popen returned
        return proc

    monkeypatch.setattr(runner.subprocess, "Popen", popen_then_interrupt)
    prefix = tmp_path / "sample"
    # Python's own SIGINT handler, as in a lab started from a terminal: a test run started in
    # the background of a non-interactive shell (a CI job) inherits SIGINT ignored.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            runner._watch(["/bin/sh", "-c", "sleep 30"], dict(os.environ), None, 60, None, prefix)
    finally:
        signal.signal(signal.SIGINT, old)
    assert started
    try:
        os.kill(started[0], 0)
        alive = True
        os.kill(started[0], signal.SIGKILL)
        os.waitpid(started[0], 0)
    except ProcessLookupError:
        alive = False
    assert not alive, "the sample still ran after the interrupt"
