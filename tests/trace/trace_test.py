#!/usr/bin/env python3
"""Recording and replay tests: trace_workload (known allocations) under LD_PRELOAD=libstrata.so
with STRATA_TRACE; the traces are read back by strata-bench-replay --check and replayed.  Also a
trace cut short, a corrupt one, another file, and STRATA_TRACE unset.  Usage:
    trace_test.py <libstrata.so> <trace_workload> <strata-bench-replay>
"""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

LIB, WORKLOAD, REPLAY = sys.argv[1:4]
failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def record(tmp, *args, trace="t.%p", env_extra=None, timeout=60):
    env = dict(os.environ, LD_PRELOAD=LIB, STRATA_TRACE=os.path.join(tmp, trace), **(env_extra or {}))
    return subprocess.run([WORKLOAD, *args], env=env, capture_output=True, text=True, timeout=timeout)


def check(path):
    r = subprocess.run([REPLAY, "--check", path], capture_output=True, text=True, timeout=60)
    return r.returncode, (json.loads(r.stdout) if r.returncode == 0 else None), r.stderr


def terminate(proc, wait=20):
    """SIGTERM to proc, then its output; a proc still running after `wait` s is killed (a hang
    reads as rc -9)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def one_trace(tmp, pid):
    path = os.path.join(tmp, f"t.{pid}")
    expect(os.path.isfile(path), f"no trace {path}")
    return path


with tempfile.TemporaryDirectory() as tmp:
    # Threads: every call the workload made is in the trace, cross-thread frees included.
    p = record(tmp, "threads", "3000")
    expect(p.returncode == 0, f"threads workload failed: {p.stderr}")
    want = json.loads(p.stdout)
    files = glob.glob(os.path.join(tmp, "t.*"))
    expect(len(files) == 1, f"one trace expected, found {files}")
    rc, got, err = check(files[0])
    expect(rc == 0, f"--check failed: {err}")
    if got:
        expect(got["complete"], "a normal exit leaves a complete trace")
        expect(got["threads"] >= 2, f"two threads recorded: {got['threads']}")
        expect(got["counts"]["malloc"] >= want["mallocs"], f"mallocs {got['counts']} < {want}")
        expect(got["counts"]["realloc"] >= want["reallocs"], f"reallocs {got['counts']} < {want}")
        expect(got["counts"]["aligned"] >= want["aligned"], f"aligned {got['counts']} < {want}")
        expect(got["counts"]["calloc"] >= want["callocs"], f"callocs {got['counts']} < {want}")
        expect(got["cross_thread_frees"] >= want["cross_thread_frees"],
               f"cross-thread frees {got['cross_thread_frees']} < {want['cross_thread_frees']}")
        # Most events are one 4-byte unit (format version 2): under 6 bytes an event with the
        # headers, time samples and long events (version 1: at least 8).
        events = sum(n for k, n in got["counts"].items() if k != "time")
        expect(os.path.getsize(files[0]) < 6 * events,
               f"{os.path.getsize(files[0])} bytes for {events} events: the short forms are not used")
        # Replayed without a preload (glibc): every operation runs.
        r = subprocess.run([REPLAY, files[0]], capture_output=True, text=True, timeout=60)
        expect(r.returncode == 0, f"replay failed: {r.stderr}")
        if r.returncode == 0:
            rep = json.loads(r.stdout)
            expect(rep["ops"] >= want["mallocs"] * 2, f"replayed ops {rep['ops']}")
            expect(rep["peak_rss_kib"] > 0, f"replay peak RSS {rep['peak_rss_kib']}")
        good = open(files[0], "rb").read()
        # Cut short inside a chunk: read up to the chunk before, said so, and still replayed.
        cut = os.path.join(tmp, "cut")
        open(cut, "wb").write(good[: len(good) - 100])
        rc, got_cut, err = check(cut)
        expect(rc == 0 and not got_cut["complete"] and "cut short" in got_cut["truncated"],
               f"a cut trace: rc {rc}, {got_cut}, {err}")
        # A flipped byte inside an event: a clear error, no crash.
        bad = bytearray(good)
        bad[64 + 48 + 20] ^= 0x40
        open(cut, "wb").write(bytes(bad))
        rc, _, err = check(cut)
        expect(rc == 2 and "checksum mismatch" in err, f"a corrupt trace: rc {rc}, {err}")
        open(cut, "wb").write(b"hello, not a trace" * 10)
        rc, _, err = check(cut)
        expect(rc == 2 and "not a strata trace" in err, f"another file: rc {rc}, {err}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)

    # Fork: with %p the child writes its own trace, naming its parent.
    p = record(tmp, "fork", "500")
    expect(p.returncode == 0, f"fork workload failed: {p.stderr}")
    info = json.loads(p.stdout)
    rc, child, err = check(one_trace(tmp, info["child"]))
    expect(rc == 0 and child["parent_pid"] > 0 and child["counts"]["malloc"] >= 500 and child["complete"],
           f"child trace: {child} {err}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)
    # fork and exit() from a thread made with PTHREAD_STACK_MIN (16 KiB), 6 KiB deep in its own
    # frames, as glibc allows: the child's header was written with the expanded path on that
    # stack (4 KiB) and exit() read /proc/self/status onto it (8 KiB).  Before, the child's
    # recorder and the parent's exit() were SIGSEGV (rc -11, the child's wait status 11).
    p = record(tmp, "smallstack", "500")
    expect(p.returncode == 0, f"smallstack workload: rc {p.returncode} {p.stderr!r}")
    if p.returncode == 0:
        info = json.loads(p.stdout)
        expect(info["child_status"] == 0, f"smallstack: the child's status {info['child_status']}")
        rc, child, err = check(one_trace(tmp, info["child"]))
        expect(rc == 0 and child["complete"] and child["counts"]["malloc"] >= 500, f"smallstack child: {child} {err}")
        rc, parent, err = check(one_trace(tmp, info["pid"]))
        expect(rc == 0 and parent["complete"] and parent["counts"]["malloc"] >= 500, f"smallstack parent: {parent} {err}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)
    # Without %p the child does not record (the parent's file is the parent's).
    p = record(tmp, "fork", "500", trace="fixed")
    rc, parent, err = check(os.path.join(tmp, "fixed"))
    expect(rc == 0 and parent["complete"] and parent["counts"]["malloc"] < 500,
           f"fixed path, parent only: {parent} {err}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)
    # "%%" is a "%" (as in STRATA_STATS_FILE): "fixed%%p" names the file "fixed%p", which holds
    # no process id, so again the child does not record.  Before, the path became "fixed%<pid>"
    # and the child wrote a second trace.
    p = record(tmp, "fork", "500", trace="fixed%%p")
    files = sorted(os.listdir(tmp))
    expect(files == ["fixed%p"], f"'%%' in the path: files {files}")
    rc, parent, err = check(os.path.join(tmp, "fixed%p"))
    expect(rc == 0 and parent["complete"] and parent["counts"]["malloc"] < 500,
           f"'%%' in the path, parent only: {parent} {err}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)

    # Threads recording at once: each keeps its two areas resident (512 KiB), and areas grow
    # (to 1 MiB each) only within one budget for all threads (16 MiB).  Before, every thread that
    # found the writer behind grew: 64 threads kept 2 MiB each, 128 MiB over the untraced run.
    env = dict(os.environ, LD_PRELOAD=LIB)
    env.pop("STRATA_TRACE", None)
    plain = subprocess.run([WORKLOAD, "busy", "300000"], env=env, capture_output=True, text=True, timeout=60)
    p = record(tmp, "busy", "300000", trace="/dev/null")
    expect(plain.returncode == 0 and p.returncode == 0, f"busy workload failed: {plain.stderr} {p.stderr}")
    if plain.returncode == 0 and p.returncode == 0:
        traced, untraced = json.loads(p.stdout), json.loads(plain.stdout)
        extra = traced["rss_kib"] - untraced["rss_kib"]
        most = traced["threads"] * (512 + 4) + 16 * 1024 + 16 * 1024  # areas, headers, growth, slack
        expect(extra <= most, f"busy: recording kept {extra} KiB resident for {traced['threads']} threads "
                              f"(at most {most})")

    # Thread churn: a thread's buffer goes to the next thread once its thread is done with it.
    # Each thread kept a mapped buffer (2 MiB of address space, its 4 KiB header resident) for
    # good: 2000 threads, 4 GB of address space.  Every thread's events are still there, under
    # numbers of their own.
    def churned(workload, name):
        """The trace of 2000 threads started one after another: the address space must stay
        level and every thread be in the trace; its check's result (None if the run failed)."""
        p = record(tmp, workload, "2000", trace=name)
        expect(p.returncode == 0, f"{workload} workload failed: {p.stderr}")
        if p.returncode != 0:
            return None
        grew = json.loads(p.stdout)["vm_growth_kib"]
        expect(0 <= grew < 64 * 1024, f"{workload}: the address space grew {grew} KiB over 2000 threads")
        rc, got, err = check(os.path.join(tmp, name))
        expect(rc == 0 and got["complete"], f"{workload} trace: {got} {err}")
        if got:
            expect(got["threads"] >= 2002, f"{workload}: {got['threads']} threads in the trace")
        return got

    got = churned("threadchurn", "churn")
    if got:
        expect(got["counts"]["malloc"] >= 200000, f"threadchurn: {got['counts']}")

    # Threads that allocate in every round of key destructors (a destructor that sets its key
    # again): the events recorded after the recorder's destructor in the last round kept the
    # thread's buffer, which no round followed to give back (2 MiB of address space a thread, 4 GB
    # over 2000).  The next thread given the dead one's thread pointer takes the buffer over, and
    # writes what was left in it as the dead thread's.
    got = churned("lateround", "lateround")
    if got:
        # Each thread: its block, one in each of the 4 rounds (the first one's free is the
        # block's); every one freed by the end.
        expect(got["counts"]["malloc"] >= 2001 * 5, f"lateround: {got['counts']}")
        expect(got["counts"]["free"] >= 2001 * 5, f"lateround: {got['counts']}")

    # The same threads alive at once: no thread starts after them to take over what their last
    # round left, which exit() writes from a snapshot.  The snapshot was cut to whole words: each
    # thread's last free (a short event after the round's two long ones) was lost, its block live
    # at exit in the trace and never freed in the replay.
    p = record(tmp, "latetogether", "4", trace="latetogether")
    want = json.loads(p.stdout) if p.returncode == 0 else {}
    expect(want.get("mallocs") == 20, f"latetogether workload: {p.stdout} {p.stderr}")
    rc, got, err = check(os.path.join(tmp, "latetogether"))
    expect(rc == 0 and got["complete"] and got["counts"]["free"] >= want.get("mallocs", 0),
           f"latetogether: every thread's blocks freed: {got} {err}")
    os.unlink(os.path.join(tmp, "latetogether"))

    # Every allocation call; the allocations refused are recorded as failed (posix_memalign's were
    # not recorded at all), and the replay makes the large alignments.
    p = record(tmp, "api", "10", trace="api")
    want = json.loads(p.stdout) if p.returncode == 0 else {}
    expect(want.get("failed") == 40 and want.get("misaligned") == 0, f"api workload: {p.stdout} {p.stderr}")
    rc, got, err = check(os.path.join(tmp, "api"))
    expect(rc == 0 and got["failed"] == 40 and got["counts"]["aligned"] >= 5 + 10
           and got["counts"]["realloc"] >= 1 and got["counts"]["free_sized"] >= 1,
           f"api: {got} {err}")
    r = subprocess.run([REPLAY, os.path.join(tmp, "api")], capture_output=True, text=True, timeout=60)
    expect(r.returncode == 0, f"api replay: {r.stdout} {r.stderr}")
    os.unlink(os.path.join(tmp, "api"))

    # Blocks handed from a producer thread to a consumer that frees them: every free matched.  The
    # merge took a consumer's free before the producer's allocation of its block when a free of
    # the producer's own (merged at the sample after it) held back the allocation after it: 1 % of
    # the frees unmatched, and those blocks never freed in the replay.
    p = record(tmp, "handoff", "200000", trace="handoff")
    expect(p.returncode == 0, f"handoff workload failed: {p.stderr}")
    rc, got, err = check(os.path.join(tmp, "handoff"))
    expect(rc == 0 and got["unmatched_frees"] == 0 and got["cross_thread_frees"] >= 200000,
           f"handoff: every free matched: {got and {k: got[k] for k in ('unmatched_frees', 'cross_thread_frees')}} {err}")
    r = subprocess.run([REPLAY, os.path.join(tmp, "handoff")], capture_output=True, text=True, timeout=60)
    expect(r.returncode == 0 and json.loads(r.stdout)["ops"] >= 800000, f"handoff replay: {r.stdout} {r.stderr}")
    os.unlink(os.path.join(tmp, "handoff"))

    # A child made without fork's handlers (_Fork, a raw clone): it records nothing.  It wrote its
    # chunks and end chunk into the parent's file (unreadable: data after the end chunk), or,
    # once the writer thread had started, waited for it for ever (no writer in the child).
    for trace in ("unseen.%p", "unseen"):
        env = dict(os.environ, LD_PRELOAD=LIB, STRATA_TRACE=os.path.join(tmp, trace))
        # Its own process group: a hung child is killed with it.
        w = subprocess.Popen([WORKLOAD, "unseenfork", "300000"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, errs = w.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(w.pid, 9)
            w.communicate()
            expect(False, f"{trace}: a child made without fork's handlers hangs")
            continue
        p = subprocess.CompletedProcess(w.args, w.returncode, out, errs)
        expect(p.returncode == 0 and json.loads(p.stdout)["child_status"] == 0,
               f"{trace}: unseenfork workload: rc {p.returncode}, {p.stdout!r} {p.stderr!r}")
        files = glob.glob(os.path.join(tmp, "unseen*"))
        expect(len(files) == 1, f"{trace}: one trace, the parent's: {files}")
        rc, got, err = check(files[0])
        expect(rc == 0 and got["complete"] and 300000 <= got["counts"]["malloc"] < 301000
               and got["unmatched_frees"] == 0, f"{trace}: the parent's trace: {got} {err}")
        for f in files:
            os.unlink(f)

    # Without %p, a program the recorded one starts (fork and exec) records nothing: it emptied the
    # parent's file and mixed its chunks with the parent's (a shell's: the trace named the shell's
    # pid and lost the parent's first events; /bin/true's end chunk made the parent's unreadable).
    p = record(tmp, "forkexec", "20000", trace="fixed")
    expect(p.returncode == 0, f"forkexec workload failed: {p.stderr}")
    rc, got, err = check(os.path.join(tmp, "fixed"))
    expect(rc == 0 and got["complete"] and got["counts"]["malloc"] >= 20000 and got["unmatched_frees"] < 100
           and got["pid"] != 0, f"fixed path, fork and exec: the parent's trace: {got} {err}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)

    # A program that closes every descriptor and opens its own file at the trace's number (900):
    # the trace's chunks went into the program's file.  Recording stops with one message.
    def with_own_file(workload, trace, fd, said):
        """A run of workload that opens a file of its own (DATA_FILE) on descriptor fd and writes
        "data" there: the file must hold that alone, and strata say `said` things on stderr."""
        data_file = os.path.join(tmp, "data")
        p = record(tmp, workload, "300000", trace=trace, env_extra={"DATA_FILE": data_file})
        expect(p.returncode == 0 and json.loads(p.stdout or "{}").get("data_fd") == fd,
               f"{workload} workload: {p.returncode} {p.stdout} {p.stderr!r}")
        expect(open(data_file, "rb").read() == b"data", f"the program's file on descriptor {fd}: "
                                                        f"{open(data_file, 'rb').read()[:200]!r}")
        expect(p.stderr.count("strata:") == said, f"{workload}: {p.stderr!r}")
        return p

    p = with_own_file("closeall", "closed", 900, 1)
    expect("descriptor" in p.stderr, f"closeall: {p.stderr!r}")
    rc, got, err = check(os.path.join(tmp, "closed"))
    expect(rc == 0 and not got["complete"], f"closeall trace: {got} {err}")
    # Its note says the recorder may have stopped: the program exited normally (the note said
    # only "killed, crashed or _exit").
    expect(rc == 0 and "recording stopped early" in got["truncated"], f"the note of a stopped trace: {got}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)

    # Writes that a signal interrupts (EINTR: a handler installed without SA_RESTART, the trace
    # streamed to a pipe whose reader lags): each goes on, nothing is lost, and the program's
    # errno is its own.  A malloc, free or posix_memalign that wrote an area returned with errno
    # EINTR (glibc's free keeps errno, and the README says posix_memalign leaves it alone).
    p = record(tmp, "eintr", "300000", trace="eintr")
    expect(p.returncode == 0 and p.stderr == "", f"eintr workload: {p.returncode} {p.stderr!r}")
    if p.returncode == 0:
        info = json.loads(p.stdout)
        expect(info["writes_interrupted"] > 0, f"eintr: no write was interrupted: {info}")
        expect(info["errno_changed"] == 0, f"eintr: calls that changed errno: {info}")
        rc, got, err = check(os.path.join(tmp, "eintr"))
        expect(rc == 0 and got["complete"] and got["counts"]["malloc"] >= 300000
               and got["counts"]["aligned"] >= 300000, f"eintr trace: {got} {err}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)

    # A write that fails (a full disk: here a file size limit) stops recording for good: threads
    # that exited once there was room again appended their chunks after the one cut short, and the
    # whole trace was unreadable ("checksum mismatch").
    p = record(tmp, "fsize", "300000", trace="full")
    expect(p.returncode == 0 and p.stderr.count("strata:") == 1, f"fsize workload: {p.returncode} {p.stderr!r}")
    rc, got, err = check(os.path.join(tmp, "full"))
    expect(rc == 0 and not got["complete"] and got["counts"]["malloc"] > 0, f"a trace whose write failed: {got} {err}")
    # The same with SIGXFSZ at its default action: the trace's write over the limit raised it in
    # the program's thread, and the program died of it (rc -25) instead of recording stopping.
    p = record(tmp, "fsizedefault", "300000", trace="full")
    expect(p.returncode == 0 and p.stderr.count("strata:") == 1,
           f"fsize workload, SIGXFSZ not ignored: {p.returncode} {p.stderr!r}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)

    # The same failure in a program that closed descriptor 2 and opened a file of its own there:
    # "recording stopped" was written into the program's file.  Descriptor 2 is no longer the
    # stderr the program started with, and only a copy of that would reach it: the message goes
    # nowhere (a copy kept a traced daemon's caller waiting, below).
    with_own_file("fsizestderr", "full", 2, 0)
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)

    # A traced daemon (a child that closes descriptors 0-2, its parent gone) held its caller's
    # stderr open through strata's copy of it, and `out=$(prog 2>&1)` waited until the daemon
    # ended.  No descriptor of the child may lead there.
    data_file = os.path.join(tmp, "daemon-fds")
    p = record(tmp, "daemonfds", "1000", trace="daemon.%p", env_extra={"DATA_FILE": data_file})
    expect(p.returncode == 0 and json.loads(p.stdout or "{}").get("child_exited") == 1,
           f"daemonfds workload: {p.returncode} {p.stdout} {p.stderr!r}")
    left = open(data_file).read() if os.path.exists(data_file) else "?"
    expect(left == "0", f"daemonfds: {left} descriptors of the daemon still open on the caller's stderr")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)

    # The same failure with stderr a pipe whose reader has gone (`program 2>&1 | head`): the
    # message, written by the program's thread (fsizedefault's limit: its first chunk), raised
    # SIGPIPE inside the program's malloc, and the program died of it (rc -13).
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = dict(os.environ, LD_PRELOAD=LIB, STRATA_TRACE=os.path.join(tmp, "full"))
    p = subprocess.run([WORKLOAD, "fsizedefault", "300000"], env=env, stdout=subprocess.PIPE, stderr=write_end,
                       text=True, timeout=60, restore_signals=True)
    os.close(write_end)
    expect(p.returncode == 0, f"fsize workload, stderr's reader gone: rc {p.returncode}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)

    # A program started without stdout (`program >&-`) under RLIMIT_NOFILE of 900 or less: the
    # trace took descriptor 1, the program's output went into it, and the trace was unreadable.
    def no_stdout():
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512))
        os.close(1)
    env = dict(os.environ, LD_PRELOAD=LIB, STRATA_TRACE=os.path.join(tmp, "nostdout"))
    p = subprocess.run([WORKLOAD, "stdoutclosed", "1000"], env=env, stderr=subprocess.PIPE, text=True,
                       timeout=60, preexec_fn=no_stdout)
    expect(p.returncode == 0 and p.stderr == "", f"stdoutclosed: its write to descriptor 1 worked, or {p.stderr!r}")
    rc, got, err = check(os.path.join(tmp, "nostdout"))
    expect(rc == 0 and got["complete"] and got["counts"]["malloc"] >= 2000, f"the trace of a program without stdout: {got} {err}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)

    # The same under RLIMIT_NOFILE of 3, where no number above 2 is free either: the trace stayed
    # on descriptor 1 and the program's output went into it.  It records nothing, and says so.
    def no_stdout_three():
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (3, 3))
        os.close(1)
    p = subprocess.run([WORKLOAD, "stdoutclosed", "1000"], env=env, stderr=subprocess.PIPE, text=True,
                       timeout=60, preexec_fn=no_stdout_three)
    expect(p.returncode == 0, f"stdoutclosed at 3 descriptors: its write to descriptor 1 went into the trace")
    expect("nothing is recorded" in p.stderr, f"stdoutclosed at 3 descriptors: {p.stderr!r}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)

    # quick_exit runs at_quick_exit's handlers only: the trace had no end chunk (read as a killed
    # program) and lost the areas still being filled.
    p = record(tmp, "quickexit", "300000", trace="quick")
    expect(p.returncode == 0 and p.stderr == "", f"quickexit workload: {p.returncode} {p.stderr!r}")
    rc, got, err = check(os.path.join(tmp, "quick"))
    expect(rc == 0 and got["complete"] and got["counts"]["malloc"] >= 300000,
           f"a program that left through quick_exit: {got} {err}")
    os.unlink(os.path.join(tmp, "quick"))

    # Paced (--pace), the replay waits for the recorded times: the workload slept 300 ms between
    # its allocations and its frees, so the replay lasts at least about that long.
    p = record(tmp, "pause", "1000", trace="paused")
    expect(p.returncode == 0, f"pause workload failed: {p.stderr}")
    paused = os.path.join(tmp, "paused")
    r = subprocess.run([REPLAY, "--pace", paused], capture_output=True, text=True, timeout=60)
    expect(r.returncode == 0, f"paced replay failed: {r.stderr}")
    if r.returncode == 0:
        rep = json.loads(r.stdout)
        expect(rep["paced"] and rep["seconds"] >= 0.25 and rep["ops"] >= 2000,
               f"a paced replay waits for the recorded times: {rep}")
    r = subprocess.run([REPLAY, paused], capture_output=True, text=True, timeout=60)
    expect(r.returncode == 0 and not json.loads(r.stdout)["paced"], f"unpaced replay: {r.stdout} {r.stderr}")
    # The header says which runtime libraries the program had (format.h runtime_libs): this C++
    # workload libstdc++ (bit 0), /bin/true not.
    def runtime_libs(path):
        return int.from_bytes(open(path, "rb").read(64)[56:64], "little")
    bits = runtime_libs(paused)
    expect(bits >> 63 == 1 and bits & 1 == 1, f"runtime_libs of a C++ program: {bits:#x}")
    env = dict(os.environ, LD_PRELOAD=LIB, STRATA_TRACE=os.path.join(tmp, "true"))
    subprocess.run(["/bin/true"], env=env, timeout=60)
    bits = runtime_libs(os.path.join(tmp, "true"))
    expect(bits >> 63 == 1 and bits & 1 == 0, f"runtime_libs of /bin/true: {bits:#x}")
    for f in glob.glob(os.path.join(tmp, "*")):
        os.unlink(f)

    # Many events, little memory: the replay's peak is the allocator's, not the replayer's reading
    # of the trace (its decoded entries, malloc'd, added 31 MB here to the 18 MB the replay showed
    # before and after: session 39).
    p = record(tmp, "churn", "2000000", trace="churn")
    expect(p.returncode == 0, f"churn workload failed: {p.stderr}")
    r = subprocess.run([REPLAY, os.path.join(tmp, "churn")], capture_output=True, text=True, timeout=60)
    expect(r.returncode == 0, f"churn replay failed: {r.stderr}")
    if r.returncode == 0:
        rep = json.loads(r.stdout)
        expect(rep["ops"] >= 4000000 and 0 < rep["peak_rss_kib"] < 32 * 1024,
               f"a replay of 4 M events with one block live peaks at {rep['peak_rss_kib']} KiB")
    os.unlink(os.path.join(tmp, "churn"))

    # Killed: the chunks written before the kill are there, and the trace says it is incomplete
    # and where it ends: after its last chunk ("no end chunk"), or inside the chunk the writer
    # thread was writing when the kill came (the kernel ends a write to a file early at a fatal
    # signal: "a chunk cut short", seen once in CI).  Lost: the area being filled and at most one
    # waiting for the writer, each at most 1 MiB of one-unit (4-byte) events once the thread has
    # found the writer behind (docs/trace-format.md).  (The bound was 350 000 of the 600 000
    # mallocs, for 256 KiB areas: four copies of this test at once on 2 cores gave 322 455 in one
    # run of 48, its areas grown to 1 MiB.)
    p = record(tmp, "kill", "600000", trace="killed")
    expect(p.returncode == -9, f"kill workload: {p.returncode}")
    rc, killed, err = check(os.path.join(tmp, "killed"))
    ends = killed.get("truncated", "")
    expect(rc == 0 and not killed["complete"] and ("no end chunk" in ends or "cut short" in ends)
           and killed["counts"]["malloc"] >= 600000 - 2 * (1 << 20) // 4 and killed["chunks"] >= 1,
           f"killed trace: {killed} {err}")
    os.unlink(os.path.join(tmp, "killed"))

    # The main thread calls pthread_exit: the process ends with its last thread, which the
    # writer thread (started once an area filled) never was: the program never ended, and, all
    # signals blocked in the writer, SIGTERM could not end it either.
    try:
        p = record(tmp, "mainexit", "100000", trace="mainexit", timeout=20)
        rc, got, err = check(os.path.join(tmp, "mainexit"))
        expect(p.returncode == 0 and p.stderr == "" and rc == 0 and got["complete"]
               and got["counts"]["malloc"] >= json.loads(p.stdout)["mallocs"],
               f"pthread_exit from main: rc {p.returncode} {p.stderr!r} {got} {err}")
    except subprocess.TimeoutExpired:
        expect(False, "pthread_exit from main: the program did not end")
    os.unlink(os.path.join(tmp, "mainexit"))

    # A FIFO (the trace streamed to a reader) and /dev/null are traces too: creating them emptied
    # them with ftruncate, which they refuse (EINVAL), and nothing was recorded.
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    streamed = os.path.join(tmp, "streamed")
    with open(streamed, "wb") as out:
        reader = subprocess.Popen(["cat", fifo], stdout=out)
        p = record(tmp, "threads", "3000", trace="fifo")
        reader.wait(timeout=60)
    rc, got, err = check(streamed)
    expect(p.returncode == 0 and p.stderr == "" and rc == 0 and got["complete"]
           and got["counts"]["malloc"] >= 3000, f"a trace through a FIFO: {p.stderr!r} {got} {err}")
    p = subprocess.run([WORKLOAD, "threads", "100"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, LD_PRELOAD=LIB, STRATA_TRACE="/dev/null"))
    expect(p.returncode == 0 and p.stderr == "", f"STRATA_TRACE=/dev/null: rc {p.returncode}, {p.stderr!r}")
    os.unlink(streamed)

    # A FIFO whose reader pauses once the program prints its line, so that two writes block on it
    # at once: writes to a FIFO over 4 KiB are not atomic, and two chunks interleaved.
    def paused_fifo(mode, n):
        rd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(rd, False)
        printed = threading.Event()

        def read_all():
            paused = False
            read = 0  # a FIFO reads as ended (no data) until the program opens it
            with open(streamed, "wb") as out:
                while True:
                    if printed.is_set() and not paused:
                        time.sleep(1.0)
                        paused = True
                    try:
                        data = os.read(rd, 1 << 16)
                    except BlockingIOError:
                        time.sleep(0.001)
                        continue
                    if not data and (read or proc.poll() is not None):
                        return
                    if not data:
                        time.sleep(0.001)
                    read += len(data)
                    out.write(data)

        env = dict(os.environ, LD_PRELOAD=LIB, STRATA_TRACE=fifo)
        proc = subprocess.Popen([WORKLOAD, mode, str(n)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        reader = threading.Thread(target=read_all, daemon=True)
        reader.start()
        line = proc.stdout.readline()
        printed.set()
        _, err = proc.communicate(timeout=60)
        reader.join(timeout=60)
        os.close(rd)
        rc, got, check_err = check(streamed)
        os.unlink(streamed)
        return proc.returncode, err, json.loads(line)["mallocs"] if line else -1, rc, got, check_err

    # A thread that exits while exit()'s handler writes its events: its own exit wrote them again
    # (into the handler's chunk, or after it: each malloc twice), and emptied its area under the
    # handler's write (a checksum mismatch).
    rc_p, err_p, want, rc, got, err = paused_fifo("exitrace", 30000)
    expect(rc_p == 0 and err_p == "" and rc == 0 and got["complete"] and got["reused_live"] == 0
           and want <= got["counts"]["malloc"] < 2 * want,
           f"a thread exiting during exit's trace: rc {rc_p} {err_p!r} {got} {err}")
    # A thread's exit chunk written while the writer thread writes another's: interleaved.
    rc_p, err_p, want, rc, got, err = paused_fifo("fifoexit", 40000)
    expect(rc_p == 0 and err_p == "" and rc == 0 and got["complete"] and got["reused_live"] == 0
           and got["counts"]["malloc"] >= want,
           f"a thread's exit chunk beside the writer's, through a FIFO: rc {rc_p} {err_p!r} {got} {err}")

    # A FIFO whose reader goes away (a compressor that exited): the next write raised SIGPIPE in
    # the program's thread, and the program died of it (rc -13) instead of recording stopping
    # with one message.
    env = dict(os.environ, LD_PRELOAD=LIB, STRATA_TRACE=fifo)
    proc = subprocess.Popen([WORKLOAD, "churn", "300000"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    with open(fifo, "rb") as rd:
        rd.read(64)  # the file header; then the reader leaves
    out, err = proc.communicate(timeout=60)
    expect(proc.returncode == 0 and err.count("strata:") == 1 and "recording stopped" in err
           and json.loads(out)["mallocs"] == 300000,
           f"a FIFO whose reader left: rc {proc.returncode} {err!r}")
    os.unlink(fifo)

    # A SIGTERM handler that calls exit() while its thread writes its own chunk (here into a FIFO
    # nobody reads): exit's handler locked the trace's write lock again, and the program hung.
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    env = dict(os.environ, LD_PRELOAD=LIB, STRATA_TRACE=fifo)
    proc = subprocess.Popen([WORKLOAD, "sigexit", "0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.readline()
    for _ in range(500):  # until the write waits for the reader (wchan may read 0: then 5 s)
        try:
            with open(f"/proc/{proc.pid}/wchan") as w:
                if "pipe" in w.read():
                    break
        except OSError:
            break
        time.sleep(0.01)
    out, err = terminate(proc)
    expect(proc.returncode == 3 and err.count("strata:") == 1 and "signal handler called exit()" in err,
           f"exit() from a signal handler during the trace's write: rc {proc.returncode} {err!r}")
    os.close(reader)
    os.unlink(fifo)
    # The same inside fork, whose handlers hold the recorder's locks (a signal that comes during
    # the fork system call runs its handler there): exit's handler spun on them for ever.
    forked = os.path.join(tmp, "forked")
    env = dict(os.environ, LD_PRELOAD=LIB, STRATA_TRACE=forked)
    proc = subprocess.Popen([WORKLOAD, "forkexit", "0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.readline()
    time.sleep(0.2)  # not needed for the check: more forks under way
    out, err = terminate(proc)
    rc, got, err2 = check(forked)
    expect(proc.returncode == 3 and rc == 0, f"exit() from a signal handler inside fork: rc {proc.returncode} "
           f"{err!r}; trace {got} {err2}")
    os.unlink(forked)

    # STRATA_TRACE unset: nothing is written.
    env = dict(os.environ, LD_PRELOAD=LIB)
    env.pop("STRATA_TRACE", None)
    subprocess.run([WORKLOAD, "threads", "100"], env=env, capture_output=True, cwd=tmp, timeout=60)
    expect(os.listdir(tmp) == [], f"files written with STRATA_TRACE unset: {os.listdir(tmp)}")

    # A trace that cannot be created: one message naming the file, and the program runs on.
    missing = os.path.join(tmp, "no-such-dir", "t")
    p = record(tmp, "threads", "100", trace=os.path.relpath(missing, tmp))
    expect(p.returncode == 0 and f"cannot create {missing}: No such file or directory: nothing is recorded"
           in p.stderr and p.stderr.count("strata:") == 1, f"an uncreatable trace: rc {p.returncode}, {p.stderr!r}")
    # A path too long: the options' one warning, no second message from the recorder.
    p = record(tmp, "threads", "100", trace="x" * 5000)
    expect(p.returncode == 0 and p.stderr.count("strata:") == 1 and "longer than 4095 bytes" in p.stderr,
           f"a path too long: rc {p.returncode}, {p.stderr!r}")

    # A daemon (a forked child that puts /dev/null on 0-2) let go of its starter's stderr: the
    # copy strata kept of it (for the statistics printed at exit) held the pipe open for the
    # daemon's life, and whatever read that stderr to its end (`$(cmd)`, `strata-lab record`)
    # waited for the daemon.  (STRATA_TRACE alone keeps no copy: daemonfds above.)
    daemon_dir = os.path.join(tmp, "daemon")
    os.mkdir(daemon_dir)
    env = dict(os.environ, LD_PRELOAD=LIB, STRATA_TRACE=os.path.join(daemon_dir, "t.%p"), STRATA_SHOW_STATS="1")
    # In a session of its own, so that the daemon and its `sleep` children go down together at
    # the end, before the directory is removed (a child that outlived the daemon's kill made its
    # trace file while the directory was being removed: "Directory not empty").
    proc = subprocess.Popen(["/bin/sh", "-c", "(exec </dev/null >/dev/null 2>&1; while :; do sleep 0.05; "
                             "done) & echo $!"], env=env, cwd=daemon_dir, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    daemon = proc.stdout.readline().strip()
    proc.wait(timeout=60)
    pipe = f"pipe:[{os.fstat(proc.stderr.fileno()).st_ino}]"
    held = []
    try:
        for _ in range(400):  # until the daemon has let go of its own stdio
            if os.readlink(f"/proc/{daemon}/fd/2") == "/dev/null":
                break
            time.sleep(0.05)
        for fd in os.listdir(f"/proc/{daemon}/fd"):
            try:
                if os.readlink(f"/proc/{daemon}/fd/{fd}") == pipe:
                    held.append(int(fd))
            except OSError:
                pass
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # nothing else ends it; no trace is written after
        out, err = proc.communicate(timeout=60)
        for _ in range(500):  # until every process of the group is gone (10 s at most)
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
    expect(held == [], f"a daemon holds its starter's stderr at descriptors {held}")

# The replayer's own check: a synthetic trace of known content.
r = subprocess.run([REPLAY, "--smoke"], capture_output=True, text=True, timeout=60)
expect(r.returncode == 0, f"replay --smoke: {r.stdout} {r.stderr}")

print("trace tests:", "FAILED" if failures else "passed")
sys.exit(1 if failures else 0)
