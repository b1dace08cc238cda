"""strata_lab.trace: traces of known content (written here) read back, their statistics, and the
errors for traces cut short or corrupt; strata-lab record / trace-stats / replay end to end when
the build is there."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from strata_lab import cli, trace

OP = trace.OP


def event(op: int, address: int, size: int = 0, align_log: int = 0) -> tuple[int, ...]:
    """An event's words (format.h): the size inline, or in an extension word."""
    head = op | (address >> 3) << 4
    if op == OP["aligned"] or size >= 0x7FFF:
        return head | 0x7FFF << 49, 15 | size << 4 | align_log << 58
    return (head | size << 49,)


def sample(cycles: int) -> tuple[int]:
    return (OP["time"] | cycles << 4,)


def chunk(thread: int, events: list, base: int, flags: int = 0, flush: tuple = (0, 0)) -> bytes:
    words = np.array([w for e in events for w in e], dtype="<u8")
    s = int(words.sum(dtype=np.uint64)) if words.size else 0
    head = trace.CHUNK_HEADER.pack(trace.CHUNK_MAGIC, thread, words.size, flags, base, flush[0], flush[1], 1,
                                   (s ^ (s >> 32)) & 0xFFFFFFFF)
    return head + words.tobytes()


def header(version: int = 1) -> bytes:
    return trace.FILE_HEADER.pack(trace.MAGIC, version, 64, 48, 8, 1234, 0, 1000, 0, 0)


def sample_trace(tmp_path, end: bool = True):
    """Thread 0: blocks A (100 B) and B (300 B); thread 1, later: frees A, allocates C (50 B) and
    reallocates it to D (70 B); thread 0, last: frees B and an address never allocated."""
    A, B, C, D = 0x1000, 0x2000, 0x3000, 0x4000
    t0 = [event(OP["malloc"], A, 100), sample(1100), event(OP["aligned"], B, 300, align_log=6)]
    t1 = [event(OP["free"], A), sample(1600), event(OP["malloc"], C, 50), event(OP["realloc_from"], C),
          sample(1700), event(OP["realloc"], D, 70)]
    t0b = [event(OP["free_sized"], B, 300), sample(2100), event(OP["free"], 0x9000)]
    data = (header() + chunk(0, t0, 1000, flush=(1200, 0)) + chunk(1, t1, 1500, flush=(1800, 0))
            + chunk(0, t0b, 2000, flush=(1_000_000, 1_000_000)))
    if end:
        data += chunk(0, [], 0, trace.CHUNK_END, flush=(2_000_000, 2_000_000))
    p = tmp_path / "t.trace"
    p.write_bytes(data)
    return p


def test_peak_in_thread_order(tmp_path):
    """A thread that frees its blocks and then allocates bigger ones, all between two samples:
    the peak is the bigger ones', as the program had them (its frees were placed at the sample
    after them, after every allocation there: the peak was the sum of both).  Another thread's
    free stays at the sample after it: after the allocation of its block."""
    small = [0x10000 + 0x100 * i for i in range(3)]
    big = [0x20000 + 0x1000 * i for i in range(2)]
    t0 = ([event(OP["malloc"], a, 100) for a in small] + [event(OP["free"], a) for a in small]
          + [event(OP["malloc"], a, 1000) for a in big] + [sample(1500)] + [event(OP["free"], big[0])])
    t1 = [event(OP["free"], big[1])]
    data = (header() + chunk(0, t0, 1000, flush=(1600, 0)) + chunk(1, t1, 1000, flush=(1200, 0))
            + chunk(0, [], 0, trace.CHUNK_END, flush=(2_000_000, 2_000_000)))
    p = tmp_path / "t.trace"
    p.write_bytes(data)
    s = trace.stats(trace.read(p))
    assert s["frees_matched"] == 5 and s["cross_thread_frees"] == 1
    assert s["peak_live_bytes"] == 2 * 1000  # the program's: 3 * 100 freed before the 2 * 1000
    assert s["live_bytes"]["bytes"][-1] == 0


def test_failed_realloc_frees_nothing(tmp_path):
    """realloc(A, 1 << 50) failed (new block 0): A lives on until its free, which is matched, as
    the replayer counts it (it was taken as freed by the realloc, its free unmatched, and the live
    bytes fell by A's size while the program still had A).  realloc(B, 0) freeing B (new block 0,
    size 0) is a free."""
    A, B = 0x1000, 0x2000
    t0 = [event(OP["malloc"], A, 48), event(OP["realloc_from"], A), event(OP["realloc"], 0, 1 << 50),
          event(OP["malloc"], B, 100), event(OP["free"], A), event(OP["realloc_from"], B),
          event(OP["realloc"], 0, 0)]
    p = tmp_path / "t.trace"
    p.write_bytes(header() + chunk(0, t0, 1000, flush=(1600, 0))
                  + chunk(0, [], 0, trace.CHUNK_END, flush=(2_000_000, 2_000_000)))
    s = trace.stats(trace.read(p))
    assert s["allocations"] == 2 and s["frees_matched"] == 2 and s["frees_unmatched"] == 0
    assert s["peak_live_bytes"] == 148
    assert max(s["live_bytes"]["bytes"]) == 148 and s["live_bytes"]["bytes"][-1] == 0


def test_read_and_stats(tmp_path):
    t = trace.read(sample_trace(tmp_path))
    assert t.complete and t.threads == 2 and t.events == 8  # samples are not events
    s = trace.stats(t)
    assert s["counts"]["malloc"] == 2 and s["counts"]["aligned"] == 1 and s["counts"]["realloc"] == 1
    aligned = t.op == OP["aligned"]
    assert t.alignment_log[aligned].tolist() == [6] and t.size[aligned].tolist() == [300]
    assert t.address[aligned].tolist() == [0x2000]
    assert s["allocations"] == 4 and s["allocated_bytes"] == 100 + 300 + 50 + 70
    # A freed by thread 1 (cross), C by its realloc (same thread), B by thread 0: 1 of 3.
    assert s["frees_matched"] == 3 and s["cross_thread_frees"] == 1
    assert s["cross_thread_free_share"] == pytest.approx(1 / 3)
    assert s["frees_unmatched"] == 1
    # Live: A+B = 400, -A = 300, +C = 350, -C = 300, +D = 370 (the peak), -B = 70.
    assert s["peak_live_bytes"] == 400
    assert sum(h["count"] for h in s["size_histogram"]) == 4
    assert sum(h["count"] for h in s["lifetime_histogram"]) == 3
    assert s["lifetime_histogram"][0]["unit"] == "s"  # converted with the clock pairs


def test_cut_short_reads_up_to_the_last_whole_chunk(tmp_path):
    p = sample_trace(tmp_path, end=False)
    t = trace.read(p)
    assert not t.complete and "no end chunk" in t.truncated and t.events == 8
    # The recorder stops without an end chunk too (a write error, its descriptor closed, no
    # memory for a buffer) in a program that then exits normally: not only a crash.
    assert "recording stopped early" in t.truncated
    data = p.read_bytes()
    p.write_bytes(data[:-20])
    t = trace.read(p)
    assert not t.complete and "cut short" in t.truncated and t.events == 6
    assert "INCOMPLETE" in t.end_note() and str(t.valid_bytes) in t.end_note()


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[:64 + 48 + 3] + bytes([d[64 + 48 + 3] ^ 1]) + d[64 + 48 + 4:], "checksum mismatch"),
    (lambda d: d[:64] + b"XXXX" + d[68:], "no chunk starts here"),
    (lambda d: b"NOTATRACE" + d[9:], "not a strata trace"),
    (lambda d: header(3) + d[64:], "version 3"),
    (lambda d: d + b"more", "data after the end chunk"),
])
def test_corrupt_traces_are_clear_errors(tmp_path, damage, message):
    p = sample_trace(tmp_path)
    p.write_bytes(damage(p.read_bytes()))
    with pytest.raises(trace.TraceError, match=message):
        trace.read(p)


def test_unknown_event_is_named(tmp_path):
    p = tmp_path / "u.trace"
    p.write_bytes(header() + chunk(0, [event(12, 0x1000, 8)], 0))
    with pytest.raises(trace.TraceError, match="unknown word 12"):
        trace.read(p)


def test_trace_stats_command(tmp_path, capsys):
    p = sample_trace(tmp_path)
    assert cli.main(["trace-stats", str(p), "--json", "--out", str(tmp_path / "out")]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["peak_live_bytes"] == 400
    assert (tmp_path / "out" / "trace-stats.png").stat().st_size > 1000
    p.write_bytes(b"garbage" * 20)
    assert cli.main(["trace-stats", str(p)]) == 2
    assert "not a strata trace" in capsys.readouterr().err


@pytest.mark.parametrize("end", [False, True], ids=["cut-before-any-chunk", "complete-but-empty"])
def test_replay_of_a_trace_without_events_is_refused(built, tmp_path, capsys, end):
    """Session 42's probe: `strata-lab replay` of a trace cut short before its first whole chunk
    warned INCOMPLETE, then ran every sample of every allocator (48 in smoke mode), each failing
    with ops_per_sec 0, and exited 0."""
    p = tmp_path / "e.trace"
    p.write_bytes(header() + (chunk(0, [], 0, trace.CHUNK_END, flush=(2_000_000, 2_000_000)) if end else b""))
    assert trace.read(p).events == 0
    out = tmp_path / "out"
    assert cli.main(["replay", str(p), "--alloc", "glibc", "--smoke", "--rounds", "1", "--warmup", "0",
                     "--no-progress", "--out", str(out)]) == 2
    assert "holds no events to replay" in capsys.readouterr().err
    assert not out.exists()


def test_trace_stats_out_that_is_a_file(tmp_path, capsys):
    """Probe s40b D4: --out naming an existing file was a FileExistsError traceback."""
    p = sample_trace(tmp_path)
    f = tmp_path / "afile"
    f.write_text("")
    assert cli.main(["trace-stats", str(p), "--out", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"cannot create the directory {f}" in err and "a file of that name exists" in err


def test_trace_stats_on_a_full_disk_leaves_no_cut_file(tmp_path, capsys, monkeypatch):
    """A disk that filled up while trace-stats --out wrote left trace-stats.json cut mid-number
    (and would have left the PNG cut where matplotlib stopped): each file is now whole or absent."""
    import errno

    from matplotlib.figure import Figure

    p = sample_trace(tmp_path)
    real = Figure.savefig

    def savefig(self, fname, **kw):  # writes part of the image, then the disk is full
        real(self, fname, **kw)
        if hasattr(fname, "truncate"):
            fname.truncate(100)
        else:
            with open(fname, "r+b") as f:
                f.truncate(100)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Figure, "savefig", savefig)
    out = tmp_path / "out"
    assert cli.main(["trace-stats", str(p), "--out", str(out)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert sorted(f.name for f in out.iterdir()) == ["trace-stats.json"]
    assert json.loads((out / "trace-stats.json").read_text())["peak_live_bytes"] == 400


def test_report_of_a_replay_run_whose_plot_cannot_be_written(built, tmp_path, capsys, monkeypatch):
    """`report` (--no-html too) of a replay run kept where the reader may not write (a read-only
    mount, another user's results) ended in an OSError traceback: the replay summary draws the
    trace's plot beside results.json.  The tables come out, with a line saying so."""
    import errno

    out = tmp_path / "out"
    assert cli.main(["replay", str(sample_trace(tmp_path)), "--alloc", "glibc", "--smoke", "--rounds", "1",
                     "--warmup", "0", "--no-progress", "--out", str(out)]) == 0
    (run_dir,) = out.iterdir()
    capsys.readouterr()

    def plot(s, where):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(where))

    monkeypatch.setattr(trace, "plot", plot)
    assert cli.main(["report", "--no-html", str(run_dir)]) == 0
    got = capsys.readouterr()
    assert "the plot of the trace could not be written beside the results: Read-only file system" in got.out
    assert "Traceback" not in got.err


def record(built, tmp_path, *args):
    env = dict(os.environ, STRATA_BUILD=str(built))
    return subprocess.run([sys.executable, "-m", "strata_lab", "record", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def test_record_into_a_directory_is_refused_and_leaves_nothing(built, tmp_path):
    """Probe s40b D4: -o <existing directory> was an IsADirectoryError traceback after the
    command ran, and left the trace at <dir>.<pid> beside it."""
    (tmp_path / "adir").mkdir()
    r = record(built, tmp_path, "-o", str(tmp_path / "adir"), "--", "/bin/true")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "is a directory" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"] and not list((tmp_path / "adir").iterdir())


def test_record_keeps_percent_signs_of_the_output_name(built, tmp_path):
    """Probe s40b: -o 'x.%p' said 'left no trace at x.%p.<pid>' although the recorder had
    expanded %p and written x.<pid>.<pid>; it was refused since.  The recorder now reads "%%" as
    "%", so the lab doubles the name's "%" signs and any name is recorded into as given."""
    for name in ("x.%p", "y%%p", "z%"):
        r = record(built, tmp_path, "-o", str(tmp_path / "d%p" / name), "--", "/bin/true")
        assert r.returncode == 0, r.stderr
        assert sorted(p.name for p in (tmp_path / "d%p").iterdir()) == [name], r.stderr
        (tmp_path / "d%p" / name).unlink()


def test_record_names_only_the_traces_of_this_recording(built, tmp_path):
    """Probe s40b: a TRACE.<pid> left by an earlier recording was listed as from a process the
    command started."""
    stale = tmp_path / "t.trace.99999"
    stale.write_bytes(b"an earlier recording's child")
    r = record(built, tmp_path, "-o", str(tmp_path / "t.trace"), "--", "/bin/sh", "-c", "/bin/true; /bin/true; exit 0")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "t.trace").is_file()
    assert "99999" not in r.stderr, r.stderr
    assert "2 more trace(s) from processes it started" in r.stderr, r.stderr


def test_record_names_the_traces_its_processes_left_when_the_command_left_none(built, tmp_path):
    """Probe s52 H48: a command that leaves no trace of its own (a static launcher of dynamic
    programs; here the shell removes its own) was "left no trace", and the traces of the
    programs it started were not named."""
    r = record(built, tmp_path, "-o", "t.trace", "--", "/bin/sh", "-c", 'rm t.trace.$$; /bin/true; exit 0')
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "left no trace" in r.stderr and "its processes left t.trace." in r.stderr, r.stderr


def test_record_says_which_traces_are_still_being_written(built, tmp_path):
    """Probe s52 H48: a process that outlives the command (a daemon: a double fork, `cmd &`)
    still writes its trace when record ends; record listed it as any other, and read at once it
    looked like a killed program's."""
    stop = tmp_path / "stop"
    script = ('(exec </dev/null >/dev/null 2>&1; while [ ! -e stop ]; do sleep 0.05; done) & '
              'while [ ! -s t.trace.$! ]; do :; done; echo $! > daemon; exit 0')
    try:
        r = record(built, tmp_path, "-o", "t.trace", "--", "/bin/sh", "-c", script)
        assert r.returncode == 0, r.stderr
        daemon = (tmp_path / "daemon").read_text().strip()
        assert "still being written by processes that run on: " in r.stderr, r.stderr
        assert f"t.trace.{daemon}" in r.stderr.split("still being written")[1], r.stderr
        assert "still being written" not in record(built, tmp_path, "-o", "u.trace", "--", "/bin/true").stderr
    finally:
        stop.touch()  # the daemon leaves within 50 ms
        pid = (tmp_path / "daemon").read_text().strip() if (tmp_path / "daemon").exists() else ""
        deadline = time.monotonic() + 10
        while pid and os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.05)


def test_record_says_which_signal_killed_the_command(built, tmp_path):
    """Probe s52 H48: a command killed by a signal was said to have "exited with status -9"."""
    r = record(built, tmp_path, "-o", "t.trace", "--", "/bin/sh", "-c", "kill -9 $$")
    assert r.returncode == 137, r.stderr
    assert "was killed by signal 9 (SIGKILL)" in r.stderr and "status -9" not in r.stderr, r.stderr


def test_record_and_replay_a_real_program(built, tmp_path):
    """strata-lab record on a Python one-liner, then the trace replayed (smoke run, two allocators)."""
    out = tmp_path / "py.trace"
    env = dict(os.environ, STRATA_BUILD=str(built), PYTHONMALLOC="malloc")
    code = "d = {i: str(i) * 3 for i in range(20000)}; print(len(d))"
    r = subprocess.run([sys.executable, "-m", "strata_lab", "record", "-o", str(out), "--", sys.executable,
                        "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "20000" in r.stdout and "complete" in r.stderr
    s = trace.stats(trace.read(out))
    assert s["allocations"] >= 20000 and s["peak_live_bytes"] > 20000 * 8
    if not (built / "bin" / "strata-bench-replay").exists():
        pytest.skip("strata-bench-replay is not built")
    r = subprocess.run([sys.executable, "-m", "strata_lab", "replay", str(out), "--alloc", "glibc,strata",
                        "--rounds", "1", "--warmup", "0", "--time-budget", "0", "--max-reruns", "0", "--no-progress", "--strict",
                        "--report", "--out", str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(next(tmp_path.glob("*-replay/results.json")).read_text())
    samples = [x for x in doc["samples"] if not x.get("warmup")]
    assert len(samples) == 2 and all(x["ok"] for x in samples)
    assert all(x["metrics"]["ops"] >= 20000 and x["peak_rss_kb"] > 0 for x in samples)
    assert all(x["metrics"]["paced"] is True for x in samples)  # at the program's pace by default
    run_dir = next(tmp_path.glob("*-replay"))
    assert (run_dir / "trace-stats.png").stat().st_size > 1000  # the trace's plot in the report
    assert "peak live" in (run_dir / "summary.md").read_text()


def test_a_free_swapped_with_the_next_allocation_of_its_address(tmp_path):
    """Thread 0 frees X, then thread 1 gets X: between two samples the free's time (the sample
    after it) may come after the allocation's (the sample before it).  The free still ends the
    older block, so nothing crosses threads."""
    X = 0x5000
    t0 = [event(OP["malloc"], X, 10), event(OP["free"], X), sample(2000)]
    t1 = [sample(1500), event(OP["malloc"], X, 20), event(OP["free"], X), sample(2500)]
    p = tmp_path / "swap.trace"
    p.write_bytes(header() + chunk(0, t0, 1000, flush=(2000, 0)) + chunk(1, t1, 1400, flush=(2500, 0)))
    s = trace.stats(trace.read(p))
    assert s["frees_matched"] == 2 and s["cross_thread_frees"] == 0 and s["frees_unmatched"] == 0


def units_chunk(thread: int, units: list[int], base: int, flush: tuple = (0, 0)) -> bytes:
    """A version 2 chunk of 32-bit units (padded with a 0 unit to whole words)."""
    if len(units) % 2:
        units = units + [0]
    words = np.array(units, dtype="<u4").view("<u8")
    s = int(words.sum(dtype=np.uint64)) if words.size else 0
    head = trace.CHUNK_HEADER.pack(trace.CHUNK_MAGIC, thread, words.size, 0, base, flush[0], flush[1], 1,
                                   (s ^ (s >> 32)) & 0xFFFFFFFF)
    return head + words.tobytes()


def encode_v2(events: list[tuple[int, int, int]]) -> list[int]:
    """Units for (op, address, size) events as docs/trace-format.md describes version 2: a short
    unit where the event fits one (written here from the document, not from the recorder), else
    the long entry at a whole word, after a time sample where one is given (op "time")."""
    units: list[int] = []
    last_sized: dict[int, int] = {}
    last_free = 0
    for op, address, size in events:
        if op in (OP["malloc"], OP["calloc"], OP["realloc"]) and size < 512:
            d = address - last_sized.get(size >> 4, 0) + (1 << 22)
            last_sized[size >> 4] = address
            if 0 <= d < (1 << 23) and d % 16 == 0:
                units.append(op + 8 | size << 4 | (d >> 4) << 13)
                continue
        elif op in (OP["free"], OP["realloc_from"]):
            d = address - last_free + (1 << 31)
            last_free = address
            if 0 <= d < (1 << 32) and d % 16 == 0:
                units.append(op + 8 | (d >> 4) << 4)
                continue
        if len(units) % 2:
            units.append(0)
        words = sample(address) if op == OP["time"] else event(op, address, size)
        for w in words:
            units += [w & 0xFFFFFFFF, w >> 32]
    return units


def test_version_2_short_events_read_back(tmp_path):
    """Short units (deltas below and above the register's last address, several size steps, a
    free whose register a long event set, a delta too large for a short unit) read back as the
    events they encode, between long entries, padding and a time sample."""
    base = 0x7F00_0000_0000
    events = [(OP["malloc"], base + 0x100, 24), (OP["malloc"], base + 0x140, 24), (OP["malloc"], base + 0x80, 20),
              (OP["malloc"], base + 0x9000, 200), (OP["free"], base + 0x100, 0), (OP["time"], 1500, 0),
              (OP["calloc"], base + 0x180, 30), (OP["malloc"], base + 0x10000, 5000), (OP["free"], base + 0x140, 0),
              (OP["realloc_from"], base + 0x80, 0), (OP["realloc"], base + 0x50_0000, 20),  # 5 MiB away: long
              (OP["free"], base + 0x9000, 0), (OP["free"], base + 0x10000, 0), (OP["free"], base + 0x180, 0),
              (OP["free"], base + 0x50_0000, 0)]
    units = encode_v2(events)
    assert len(units) <= 2 * 6 + 9 + 3  # 9 short events, 6 long entries and their padding
    p = tmp_path / "v2.trace"
    p.write_bytes(header(2) + units_chunk(0, units, 1000, flush=(2000, 0))
                  + chunk(0, [], 0, trace.CHUNK_END, flush=(3000, 0)))
    t = trace.read(p)
    assert t.complete
    want = [e for e in events if e[0] != OP["time"]]
    assert list(zip(t.op.tolist(), t.address.tolist(), t.size.tolist())) == want
    # allocations at the sample before them, frees at the one after (format.h)
    assert t.cycles.tolist()[:7] == [1000] * 4 + [1500] * 3
    s = trace.stats(t)
    assert s["frees_unmatched"] == 0 and s["frees_matched"] == 7


def test_version_2_unit_errors(tmp_path):
    p = tmp_path / "bad.trace"
    # a long entry may not start at an odd unit
    p.write_bytes(header(2) + units_chunk(0, [OP["malloc"] + 8 | 16 << 4 | (1 << 18) << 13, OP["free"], 0, 0], 0))
    with pytest.raises(trace.TraceError, match=f"byte {64 + 48 + 4}: corrupt trace: unknown unit 6"):
        trace.read(p)
    # an aligned allocation (tag 13) has no short form
    p.write_bytes(header(2) + units_chunk(0, [13, 0], 0))
    with pytest.raises(trace.TraceError, match="unknown unit 13"):
        trace.read(p)
    # version 1 knows no short units
    p.write_bytes(header(1) + units_chunk(0, [OP["malloc"] + 8 | 16 << 4, 0], 0))
    with pytest.raises(trace.TraceError, match="unknown word 9"):
        trace.read(p)
