"""The workload programs' command line: bench/common/args.hpp, which every program in bench/host,
bench/e3e5 and bench/e4 parses its flags with, refuses a value that is not wholly a number."""

import subprocess

import pytest

from .conftest import program

# (program, arguments that make a short run, the flag, a bad value): each bad value was read as
# a number before (atoi/atof/strtoull read the leading digits, or wrapped "-1"), and the program
# ran with it and exited 0.
CASES = [
    ("strata-bench-e1-sizeclass", ["--band", "tiny", "--smoke"], "--threads", "1x"),
    ("strata-bench-e1-sizeclass", ["--band", "tiny", "--smoke"], "--seconds", "0.05s"),
    ("strata-bench-e1-sizeclass", ["--band", "tiny", "--smoke"], "--slots", "-1"),
    ("strata-bench-e1-sizeclass", ["--band", "tiny", "--smoke"], "--seed", "42z"),
    ("strata-bench-patterns", ["--pattern", "larson", "--smoke"], "--threads", "1.5"),
    ("strata-bench-patterns", ["--pattern", "larson", "--smoke"], "--seconds", "0.05 "),
    ("strata-bench-patterns", ["--pattern", "larson", "--smoke"], "--ops", "1e3"),
    ("strata-bench-e2-frag", ["--smoke"], "--scale", "0.01x"),
    ("strata-bench-e2-frag", ["--smoke"], "--seed", "-1"),
    ("strata-bench-e2-frag", ["--smoke"], "--threads", " 1"),
    ("strata-bench-e4", ["--group", "numa", "--sample-ms", "0.01"], "--samples", "5abc"),
    ("strata-bench-e4", ["--group", "numa", "--samples", "1"], "--sample-ms", "0.01ms"),
    ("strata-bench-e4", ["--group", "numa", "--smoke"], "--threads", "abc"),
    ("strata-bench-e4", ["--group", "numa", "--smoke"], "--seconds", "1s"),
    ("strata-bench-e3-tenant", ["--role", "lc", "--smoke"], "--streams", "1x"),
    ("strata-bench-e3-tenant", ["--role", "lc", "--smoke"], "--start-at-ns", "1.5"),
    ("strata-bench-e3-tenant", ["--role", "lc", "--smoke"], "--timeout-s", "9s"),
    ("strata-bench-e5-httpd", ["--smoke"], "--threads", "1x"),
    ("strata-bench-e5-httpd", ["--smoke"], "--body-bytes", "-1"),
    ("strata-bench-e5-httpd", ["--smoke"], "--idle-timeout", "5s"),
]


@pytest.mark.parametrize("target, args, flag, value", CASES,
                         ids=[f"{t[13:]}{f}={v}" for t, _, f, v in CASES])
def test_a_number_with_trailing_garbage_is_refused(target, args, flag, value):
    """Session 42's probe: `strata-bench-e4 --samples 5abc` ran 5 samples, while `--samples abc`
    was refused (atoi gave 0, out of range)."""
    exe = program(target)
    r = subprocess.run([str(exe), *args, flag, value], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[:200], r.stderr)
    assert f'{flag} wants' in r.stderr and f'not "{value}"' in r.stderr and "usage:" in r.stderr, r.stderr


@pytest.mark.parametrize("flag, value, needle", [
    ("--threads", "0", "--threads must be 1..1024"),
    ("--threads", "-3", "--threads must be 1..1024"),
    ("--threads", "100000", "--threads must be 1..1024"),
    ("--seconds", "0", "--seconds must be a finite number above 0"),
    ("--seconds", "-1", "--seconds must be a finite number above 0"),
    ("--seconds", "nan", "--seconds must be a finite number above 0"),
    ("--seconds", "inf", "--seconds must be a finite number above 0"),
])
def test_e4_checks_the_numbers_it_does_not_use(flag, value, needle):
    """Session 50's probe: strata-bench-e4 takes --threads and --seconds for the lab's uniform
    command lines (its sizes are fixed) and refused "abc", but ran and exited 0 with a thread
    count of 0 or -3 and with nan, inf or negative seconds, which every other program refuses."""
    r = subprocess.run([str(program("strata-bench-e4")), "--group", "numa", "--smoke", flag, value],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[:200], r.stderr)
    assert needle in r.stderr and "usage:" in r.stderr, r.stderr


@pytest.mark.parametrize("target, args", [
    ("strata-bench-e1-sizeclass", ["--band", "tiny", "--smoke", "--threads", "+1", "--seconds",
                                   "5e-2", "--slots", "64", "--seed", "18446744073709551615"]),
    ("strata-bench-patterns", ["--pattern", "larson", "--smoke", "--threads", "1", "--seconds",
                               "0.05", "--seed", "7"]),
    ("strata-bench-e2-frag", ["--smoke", "--scale", ".01", "--threads", "1"]),
])
def test_numbers_still_read(target, args):
    """What the lab and people write is still read: a sign, an exponent, the largest seed."""
    r = subprocess.run([str(program(target)), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("threads", ["1x", "2,4x", "0x1", "-1"])
def test_e2_gpu_thread_list_with_garbage_is_refused(threads):
    """strata-bench-e2-gpu has its own parser (bench/gpu/e2_gpu.cpp, not args.hpp): every other
    number it reads was already checked whole, but --threads read each item with atoi."""
    r = subprocess.run([str(program("strata-bench-e2-gpu")), "--backend", "sim", "--smoke",
                        "--resource", "pool", "--threads", threads],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[:200], r.stderr)
    assert "bad thread count" in r.stderr, r.stderr


@pytest.mark.parametrize("sched, code", [("nice:5x", 2), ("nice:", 2), ("fifo:x", 2), ("bogus", 2),
                                         ("nice:5", 0), ("idle", 0)])
def test_e3_tenant_sched_is_read_whole(sched, code):
    """--sched nice:N read N with atoi ("nice:5x" ran at nice 5, "nice:x" at 0); an unknown class
    was found only after parsing (exit 3, no usage)."""
    r = subprocess.run([str(program("strata-bench-e3-tenant")), "--smoke", "--role", "be",
                        "--sched", sched], capture_output=True, text=True, timeout=60)
    assert r.returncode == code, (r.returncode, r.stderr)
    if code:
        assert "--sched must be" in r.stderr and "usage:" in r.stderr, r.stderr


# (program, arguments of a short run, flag, value): numbers args.hpp reads ("inf" and "nan" are
# numbers to it) that the program's own range checks let through.  Session 42's probe: the tenant
# with --burst-us nan or --work-per-us nan ran one kernel of 2^63 iterations past its own
# --timeout-s, with --burst-us inf ran kernels of no work (exit 0), with --gap-us nan no gaps, and
# with --timeout-s nan / inf / 1e10 timed out before its first kernel; a --start-at-ns of
# INT64_MAX overflowed the deadline.  The server with --max-seconds nan stopped right after its
# ready line; with inf it ran unbounded; --bind ::1 said "cannot listen on ::1:0: Success".
E3_SHORT = ["--role", "lc", "--streams", "1", "--kernels", "2", "--burst-us", "10", "--work-per-us",
            "300", "--timeout-s", "10"]
UNRUNNABLE = [
    ("strata-bench-e3-tenant", E3_SHORT, "--burst-us", "nan"),
    ("strata-bench-e3-tenant", E3_SHORT, "--burst-us", "inf"),
    ("strata-bench-e3-tenant", E3_SHORT, "--gap-us", "nan"),
    ("strata-bench-e3-tenant", E3_SHORT, "--gap-us", "1e300"),
    ("strata-bench-e3-tenant", E3_SHORT, "--jitter", "nan"),
    ("strata-bench-e3-tenant", E3_SHORT, "--work-per-us", "nan"),
    ("strata-bench-e3-tenant", E3_SHORT, "--work-per-us", "inf"),
    ("strata-bench-e3-tenant", E3_SHORT, "--timeout-s", "nan"),
    ("strata-bench-e3-tenant", E3_SHORT, "--timeout-s", "inf"),
    ("strata-bench-e3-tenant", E3_SHORT, "--timeout-s", "1e10"),
    ("strata-bench-e3-tenant", E3_SHORT, "--start-at-ns", "9223372036854775807"),
    # Values that round to nothing (session 43's probe: --burst-us 1e-9 ran kernels of no work and
    # exited 0): a burst below one loop iteration at --work-per-us, a gap below 1 ns, a timeout
    # below 1 ns.
    ("strata-bench-e3-tenant", E3_SHORT, "--burst-us", "1e-9"),
    ("strata-bench-e3-tenant", E3_SHORT, "--burst-us", "0.003"),
    ("strata-bench-e3-tenant", E3_SHORT, "--work-per-us", "1e-300"),
    ("strata-bench-e3-tenant", E3_SHORT, "--gap-us", "1e-4"),
    ("strata-bench-e3-tenant", E3_SHORT, "--timeout-s", "1e-10"),
    ("strata-bench-e5-httpd", ["--port", "0"], "--max-seconds", "nan"),
    ("strata-bench-e5-httpd", ["--port", "0"], "--max-seconds", "inf"),
    ("strata-bench-e5-httpd", ["--port", "0"], "--bind", "::1"),
    ("strata-bench-e5-httpd", ["--port", "0"], "--idle-timeout", "nan"),
    ("strata-bench-e5-httpd", ["--port", "0"], "--idle-timeout", "inf"),
    ("strata-bench-e5-httpd", ["--port", "0"], "--idle-timeout", "0"),
    ("strata-bench-e5-httpd", ["--port", "0"], "--idle-timeout", "-1"),
]


@pytest.mark.parametrize("target, args, flag, value", UNRUNNABLE,
                         ids=[f"{t[13:]}{f}={v}" for t, _, f, v in UNRUNNABLE])
def test_a_value_the_program_cannot_run_is_refused(target, args, flag, value):
    r = subprocess.run([str(program(target)), *args, flag, value], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[:200], r.stderr)
    assert flag in r.stderr and "usage:" in r.stderr, r.stderr


def test_e3_tenant_short_run_still_runs():
    r = subprocess.run([str(program("strata-bench-e3-tenant")), *E3_SHORT, "--gap-us", "50",
                        "--jitter", "1", "--start-at-ns", "-5"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and '"kernels_done":2' in r.stdout, (r.returncode, r.stdout, r.stderr)


@pytest.mark.parametrize("flag, value", [("--gap-us", "1e9"), ("--burst-us", "1e9")])
def test_e3_tenant_stops_at_its_timeout(flag, value):
    """--timeout-s was checked only between kernels: a gap of 1e9 us slept, and a kernel of 1e9 us
    ran, up to 1000 s past a --timeout-s of 1."""
    r = subprocess.run([str(program("strata-bench-e3-tenant")), *E3_SHORT[:-2], "--timeout-s", "1",
                        flag, value], capture_output=True, text=True, timeout=20)
    assert r.returncode == 5 and '"timed_out":true' in r.stdout, (r.returncode, r.stdout, r.stderr)
    assert "timed out after 1.0 s" in r.stderr, r.stderr


def test_e3_tenant_burst_of_no_work_names_the_value_and_the_minimum():
    """Refused before any kernel runs, with the minimum: 1 / --work-per-us, given or calibrated."""
    r = subprocess.run([str(program("strata-bench-e3-tenant")), *E3_SHORT, "--burst-us", "1e-9"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    assert "--burst-us 1e-09 is below the minimum 0.00333333" in r.stderr, r.stderr
    r = subprocess.run([str(program("strata-bench-e3-tenant")), "--role", "lc", "--burst-us", "1e-9"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    assert "--burst-us 1e-09 is below the minimum" in r.stderr and "calibrated here" in r.stderr, r.stderr
    # The smallest burst that does one iteration still runs, and the summary shows it (it read 0.0).
    r = subprocess.run([str(program("strata-bench-e3-tenant")), *E3_SHORT, "--burst-us", "0.004"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and '"burst_us":0.004,' in r.stdout, (r.returncode, r.stdout, r.stderr)


def _inotify_created(directory):
    """An inotify descriptor reporting files created in (or moved into) directory."""
    import ctypes
    import os
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0, ctypes.get_errno()
    assert libc.inotify_add_watch(fd, os.fsencode(directory), 0x100 | 0x80) >= 0, ctypes.get_errno()
    return fd


def _created_names(fd):
    import os
    import struct
    names, data = [], b""
    while True:
        try:
            data += os.read(fd, 65536)
        except BlockingIOError:
            break
    while data:
        _, _, _, n = struct.unpack_from("iIII", data)
        names.append(data[16:16 + n].rstrip(b"\0").decode(errors="replace"))
        data = data[16 + n:]
    return names


@pytest.mark.parametrize("kill", [None, "SIGTERM", "SIGINT"])
def test_e3_tenant_smoke_leaves_no_file(kill):
    """--smoke without --out wrote its CSV to /tmp/strata-bench-e3-tenant-smoke-<pid>.csv and removed
    it at the end: a run killed before then left it.  Now no file is ever made (inotify sees every
    creation, however brief)."""
    import os
    import signal
    import tempfile
    import time
    tmp = "/tmp"
    fd = _inotify_created(tmp)
    try:
        p = subprocess.Popen([str(program("strata-bench-e3-tenant")), "--smoke", "--role", "lc"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if kill:
            time.sleep(0.05)
            p.send_signal(getattr(signal, kill))
        out, err = p.communicate(timeout=60)
        if not kill:
            assert p.returncode == 0 and '"smoke":"ok"' in out, (p.returncode, out, err)
        made = [n for n in _created_names(fd) if n.startswith("strata-bench-e3-tenant")]
    finally:
        os.close(fd)
    left = [n for n in os.listdir(tmp) if n.startswith(f"strata-bench-e3-tenant-smoke-{p.pid}")]
    assert made == [] and left == [], (made, left)


def test_e3_tenant_memory_follows_the_kernels_run():
    """The per-kernel records were sized streams x kernels up front: --streams 32 --kernels 1000000
    (in range) zeroed 768 MB before the first kernel, 6 GB at --streams 256, whatever ran."""
    import sys
    probe = ("import resource, subprocess, sys\n"
             "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    r = subprocess.run([sys.executable, "-c", probe, str(program("strata-bench-e3-tenant")),
                        "--role", "be", "--streams", "32", "--kernels", "1000000", "--burst-us", "10",
                        "--work-per-us", "300", "--timeout-s", "0.3"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) < 200 * 1024, f"peak RSS {r.stdout.strip()} KiB"


def test_e3_tenant_summary_is_json_whatever_the_csv_path(tmp_path):
    """The --out path went into the summary verbatim: a quote or a backslash made it invalid JSON."""
    import json
    out = tmp_path / 'a"b\\c.csv'
    r = subprocess.run([str(program("strata-bench-e3-tenant")), "--role", "lc", "--smoke", "--out",
                        str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["csv"] == str(out)


@pytest.mark.parametrize("target, args", [
    ("strata-bench-e3-tenant", ["--role", "lc", "--smoke"]),
    ("strata-bench-e3-tenant", ["--calibrate"]),
    ("strata-bench-e4", ["--group", "numa", "--smoke"]),
])
def test_a_result_that_cannot_be_written_fails_the_run(target, args):
    """Their one line on stdout is the result: written to a full disk, it was lost and the
    program still exited 0."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([str(program(target)), *args], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=60)
    assert r.returncode != 0 and "cannot write" in r.stderr, (r.returncode, r.stderr)


@pytest.mark.parametrize("args, needle", [
    (["--scale", "inf"], "--scale must be a finite number above 0, not inf"),
    (["--smoke", "--scale", "inf"], "--scale must be a finite number above 0, not inf"),
    (["--scale", "0"], "--scale must be a finite number above 0, not 0"),
    (["--scale", "1e300"], "more than this machine's"),
    (["--scale", "1e6"], "more than this machine's"),
    (["--threads", "1024", "--scale", "100"], "--scale 100 with --threads 1024 needs about"),
])
def test_e2_frag_scale_it_cannot_run_is_refused(args, needle):
    """--scale had no upper bound: 1e300 converted to a garbage object count (a tiny run that
    reported scale 1e+300), 1e6 asked for a 320 GB vector before its first malloc, and inf passed
    the `> 0` check (undefined conversion without --smoke)."""
    r = subprocess.run([str(program("strata-bench-e2-frag")), *args], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[:200], r.stderr)
    assert needle in r.stderr and "usage:" in r.stderr, r.stderr


@pytest.mark.parametrize("target, args", [
    ("strata-bench-e2-frag", ["--smoke"]),
    ("strata-bench-e2-gpu", ["--backend", "sim", "--smoke", "--resource", "pool", "--threads", "1"]),
])
def test_an_e2_result_that_cannot_be_written_fails_the_run(target, args):
    """Both E2 programs printed their JSON to a full disk and exited 0: the result was lost."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([str(program(target)), *args], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=60)
    assert r.returncode != 0 and "cannot write the results" in r.stderr, (r.returncode, r.stderr)


@pytest.mark.parametrize("target", sorted({c[0] for c in CASES} | {"strata-bench-patterns", "strata-bench-e2-gpu"}))
def test_help_prints_the_usage_and_exits_0(target):
    """`--help` was an unknown argument: the usage went to stderr with exit status 2, as for a
    bad command line."""
    r = subprocess.run([program(target), "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: {target}")
    assert r.stderr == ""
