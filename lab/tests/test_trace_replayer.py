"""Traces whose unchecked fields (thread numbers, clock pairs: no checksum covers them) are odd or
corrupt, read by both tools the same way (session 40's probes): the replayer starts one thread per
recorded thread that has events, whatever its number, and neither tool turns cycles into time
from clock pairs no machine's counter could give."""

from __future__ import annotations

import json
import re
import subprocess
import time

import numpy as np
import pytest

from strata_lab import trace
from .test_trace import OP, chunk, event, sample

REPLAYER = "strata-bench-replay"


def write(tmp_path, threads: list[int], start_ns: int = 0, end_ns: int = 2_000_000):
    """One malloc and its free in each of `threads`; the file header's clock pair is (1000,
    start_ns), the end chunk's (2_000_000, end_ns)."""
    data = trace.FILE_HEADER.pack(trace.MAGIC, 1, 64, 48, 8, 1234, 0, 1000, start_ns, 0)
    for i, th in enumerate(threads):
        a = 0x10000 * (i + 1)
        data += chunk(th, [event(OP["malloc"], a, 64), sample(1100 + i), event(OP["free"], a)], 1000 + i,
                      flush=(1200 + i, start_ns + 200 + i))
    data += chunk(0, [], 0, trace.CHUNK_END, flush=(2_000_000, end_ns))
    p = tmp_path / "t.trace"
    p.write_bytes(data)
    return p


def trace_of(tmp_path, name: str, chunks: bytes):
    """A version 1 trace at tmp_path/name: the file header, `chunks`, the end chunk."""
    p = tmp_path / name
    p.write_bytes(trace.FILE_HEADER.pack(trace.MAGIC, 1, 64, 48, 8, 1234, 0, 1000, 0, 0) + chunks
                  + chunk(0, [], 0, trace.CHUNK_END, flush=(2_000_000, 2_000_000)))
    return p


def replayer(built):
    path = built / "bin" / REPLAYER
    if not path.exists():
        pytest.skip(f"{REPLAYER} is not built")
    return path


def test_sparse_thread_numbers_replay_only_the_threads_with_events(built, tmp_path):
    # Thread numbers are never reused by the recorder, and one flipped bit of an unchecked field
    # made the replayer start 131 072 threads; numbers past 2^20 were refused by the replayer
    # while the lab read them.
    p = write(tmp_path, [0, 300, (1 << 21) + 5])
    assert trace.read(p).threads == 3
    r = subprocess.run([str(replayer(built)), "--check", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["threads"] == 3
    assert doc["unmatched_frees"] == 0


def test_a_plausible_clock_paces_and_gives_times(built, tmp_path):
    p = write(tmp_path, [0, 1])
    assert trace.read(p).seconds_per_cycle() == pytest.approx(1e-9, rel=0.01)
    r = subprocess.run([str(replayer(built)), "--pace", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["paced"] is True


def assert_no_times_and_cannot_pace(built, p):
    """The trace at p reads and replays, but gives no times, and a paced replay is refused."""
    t = trace.read(p)
    assert t.seconds_per_cycle() is None
    assert trace.stats(t)["duration_s"] is None
    r = subprocess.run([str(replayer(built)), "--pace", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "cannot pace" in r.stderr
    r = subprocess.run([str(replayer(built)), str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ops"] == 4


def test_an_implausible_clock_gives_no_times_and_cannot_pace(built, tmp_path):
    # 2 M counter ticks in 10^15 ns (11 days): a counter at 2 mHz.  With the file header's start
    # time zeroed, a paced replay of a 263-event trace waited for the machine's uptime.
    p = write(tmp_path, [0, 1], end_ns=10**15)
    assert_no_times_and_cannot_pace(built, p)


@pytest.mark.parametrize("field", ["base", "flush", "sample"])
def test_a_chunk_whose_times_disagree_with_the_clock_gives_no_times_and_cannot_pace(built, tmp_path, field):
    # Chunk headers are not checksummed: one flipped bit (2^40) in a chunk's base_cycles of a
    # 50 ms CPython trace made trace-stats call it 423 s long and a paced replay wait 7 minutes,
    # while the file header's and the last chunk's clock pairs were plausible.
    base, flush, smp = 1000, (1200, 200), 1100
    if field == "base":
        base |= 1 << 40
    elif field == "flush":
        flush = (flush[0] | 1 << 40, flush[1])
    else:
        smp |= 1 << 40  # a checksummed sample, out of its chunk's bounds
    p = trace_of(tmp_path, "t.trace",
                 chunk(0, [event(OP["malloc"], 0x10000, 64), sample(smp), event(OP["free"], 0x10000)], base,
                       flush=flush)
                 + chunk(1, [event(OP["malloc"], 0x20000, 64), sample(1101), event(OP["free"], 0x20000)], 1001,
                         flush=(1201, 201)))
    assert_no_times_and_cannot_pace(built, p)


def test_an_error_in_a_version_2_chunk_names_the_entry_s_byte(built, tmp_path):
    # Helper H5's probe: a version 2 chunk's entries are not its words (a short event is half of
    # one), and both tools named the byte of entry k as 8 k: an extension after 4 short events and
    # a time sample, at byte 64 + 48 + 24, was reported at byte 152.
    from .test_trace import header, units_chunk

    short = [OP["malloc"] + 8 | 16 << 4 | (1 << 18) << 13] * 4  # units 0-3
    t, e = sample(1100)[0], 15 | 64 << 4  # units 4-5, 6-7: an extension that follows no event
    p = tmp_path / "ext.trace"
    for version, data, at in (
            (2, units_chunk(0, short + [t & 0xFFFFFFFF, t >> 32, e & 0xFFFFFFFF, e >> 32], 1000,
                            flush=(1200, 200)), 64 + 48 + 24),
            (1, chunk(0, [event(OP["malloc"], 0x1000, 16), sample(1100), (e,)], 1000, flush=(1200, 200)),
             64 + 48 + 16)):
        p.write_bytes(header(version) + data)
        want = f"byte {at}: corrupt trace: an extension (word 15) that follows no event"
        with pytest.raises(trace.TraceError, match=re.escape(want)):
            trace.read(p)
        r = subprocess.run([str(replayer(built)), "--check", str(p)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and want in r.stderr, r.stderr


def test_frees_without_a_time_sample_are_merged_in_linear_time(built, tmp_path):
    # Helper H5's probe: the merge placed each free at the first time sample after it by scanning
    # its chunk onward, once per free: a 640 kB chunk of 160 000 frees and no sample took 11 s to
    # --check, this one (1 M, 4 MB) 7 minutes.  The recorder samples every 512 bytes, but a
    # reader of a damaged or foreign trace must not hang on one.  (The timeout is a hang guard:
    # the merge takes well under a second.)
    from .test_trace import header, units_chunk

    n = 1_000_000
    units = np.full(n, OP["free"] + 8 | ((1 << 31) >> 4) << 4, np.uint32)  # each a free of the last address
    units[0] = OP["free"] + 8 | (((1 << 31) + 0x1000) >> 4) << 4  # 0x1000
    p = tmp_path / "frees.trace"
    p.write_bytes(header(2) + units_chunk(0, units.tolist(), 1000, flush=(1200, 200)))
    r = subprocess.run([str(replayer(built)), "--check", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["counts"]["free"] == n and doc["unmatched_frees"] == n


def test_the_replay_s_rss_window_is_its_replay_less_what_its_peak_leaves_out(built, tmp_path):
    """The lab draws its RSS samples of this window less less_kib: the replayer's whole process's,
    reading the trace and building its tables included, were drawn beside the corrected peak."""
    p = write(tmp_path, [0, 1])
    before = time.monotonic_ns()
    r = subprocess.run([str(replayer(built)), "--pace", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    w = doc["rss_window"]
    assert before <= w["begin_monotonic_ns"] <= w["end_monotonic_ns"] <= time.monotonic_ns()
    assert w["less_kib"] == doc["process_peak_rss_kib"] - doc["peak_rss_kib"]


def check(built, p) -> dict:
    r = subprocess.run([str(replayer(built)), "--check", str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_realloc_of_a_block_whose_allocation_was_held_back_is_matched(built, tmp_path):
    # Issue 16's probe: thread 1 frees X and allocates Y with no time sample between (its free's
    # time, its chunk's flush, holds back the allocation in the merge), thread 0 reallocates Y
    # before its next sample.  A free there was matched with Y late (build_plan's orphans), a
    # realloc's old block was not: the replayer counted it unmatched, reallocated NULL and never
    # freed Y, while trace-stats matched both frees across threads.
    X, Y, Z = 0x10000, 0x20000, 0x30000
    t0 = [event(OP["malloc"], X, 32), sample(1100), event(OP["realloc_from"], Y), event(OP["realloc"], Z, 4000),
          sample(1300), event(OP["free"], Z)]
    t1 = [event(OP["free"], X), event(OP["malloc"], Y, 48)]
    p = trace_of(tmp_path, "held.trace",
                 chunk(0, t0, 1000, flush=(1400, 400)) + chunk(1, t1, 1050, flush=(2000, 1000)))
    s = trace.stats(trace.read(p))
    assert s["frees_matched"] == 3 and s["frees_unmatched"] == 0 and s["cross_thread_frees"] == 2
    doc = check(built, p)
    assert doc["unmatched_frees"] == 0 and doc["cross_thread_frees"] == 2 and doc["reused_live"] == 0
    r = subprocess.run([str(replayer(built)), str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ops"] == 5  # the realloc's pair of events is one operation


def test_a_failed_realloc_frees_nothing_in_either_tool(built, tmp_path):
    # Issue 16's probe: realloc(p, huge) fails and p lives on (the recorder writes its old block,
    # then a new block of 0 and the size asked).  trace-stats took the old block's event for a
    # free: p's later free was unmatched and its lifetime ended at the realloc; the replayer
    # counted a failed realloc's unmatched old block as an unmatched free, and a failed realloc of
    # another thread's block as a cross-thread free.
    A, B, C = 0x10000, 0x20000, 0x30000
    huge = 1 << 40
    t0 = [event(OP["malloc"], A, 100), event(OP["realloc_from"], A), event(OP["realloc"], 0, huge),
          event(OP["malloc"], C, 64), event(OP["free"], A), sample(1100),
          event(OP["realloc_from"], B), event(OP["realloc"], 0, huge)]  # B: from before the recording
    t1 = [event(OP["realloc_from"], C), event(OP["realloc"], 0, huge), sample(2100), event(OP["free"], C)]
    p = trace_of(tmp_path, "failed.trace",
                 chunk(0, t0, 1000, flush=(1200, 200)) + chunk(1, t1, 2000, flush=(2200, 1200)))
    s = trace.stats(trace.read(p))
    assert s["frees_matched"] == 2 and s["frees_unmatched"] == 0 and s["cross_thread_frees"] == 1
    assert s["peak_live_bytes"] == 164  # A lives on past its failed realloc
    doc = check(built, p)
    assert doc["failed"] == 3 and doc["unmatched_frees"] == 0 and doc["cross_thread_frees"] == 1


def test_a_realloc_matched_late_that_closes_a_cycle_of_waits_is_unmatched(built, tmp_path):
    # The realloc's form of the replayer's smoke_wait_cycle: thread 0 reallocates Y before thread
    # 1's allocation of Y is merged (so it is matched late), then allocates X; thread 1 frees X (a
    # block from before the recording: matched late with thread 0's X), then allocates Y.  Each
    # waits for the other; the realloc's wait is dropped and the replay ends.
    X, Y, Z, W = 0x200000, 0x300000, 0x400000, 0x500000
    t0 = [event(OP["realloc_from"], Y), event(OP["realloc"], W, 64), event(OP["free"], Z), event(OP["malloc"], X, 32)]
    t1 = [event(OP["free"], X), event(OP["malloc"], Y, 32)]
    p = trace_of(tmp_path, "cycle.trace", chunk(0, t0, 1000, flush=(3000, 0)) + chunk(1, t1, 1000, flush=(5000, 0)))
    # (The timeout is a hang guard: the replay takes milliseconds.)
    r = subprocess.run([str(replayer(built)), str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ops"] == 4 and doc["unmatched_frees"] == 2 and doc["cross_thread_frees"] == 1


def test_the_replayer_counts_time_samples(built, tmp_path):
    # Issue 16's probe: `--check`'s counts had "time": 0 for every trace (the merge steps over the
    # samples without counting them), beside the real counts of the other events.
    p = write(tmp_path, [0, 1, 2])
    doc = check(built, p)
    assert doc["counts"]["time"] == 3 and doc["counts"]["malloc"] == 3


def test_a_free_ends_its_own_thread_s_block_before_an_older_one_of_another_thread(built, tmp_path):
    # Issue 16's probe (16 threads freeing each other's blocks): thread 1 frees thread 0's X and
    # then records nothing until its exit, so its free is timed at its chunk's flush; meanwhile
    # thread 2 allocates X and frees it.  The replayer ended the oldest live block at X with
    # thread 2's free (thread 0's, though thread 2 frees only after its own allocation of X) and
    # thread 1's late free with thread 2's block: every later pair at an address shifted by one
    # block (4 243 of 320 000 frees paired with a block of another size).
    X = 0x10000
    t0 = [event(OP["malloc"], X, 32)]
    t1 = [event(OP["free"], X)]
    t2 = [event(OP["malloc"], X, 48), sample(1300), event(OP["free_sized"], X, 48)]
    p = trace_of(tmp_path, "own.trace", chunk(0, t0, 1000, flush=(1100, 100)) + chunk(2, t2, 1200, flush=(1400, 400))
                 + chunk(1, t1, 1000, flush=(5000, 4000)))
    doc = check(built, p)
    # Thread 2's free its own block, thread 1's thread 0's: one cross-thread free (before: two).
    assert doc["unmatched_frees"] == 0 and doc["cross_thread_frees"] == 1 and doc["reused_live"] == 1
    r = subprocess.run([str(replayer(built)), str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ops"] == 4


def test_a_cycle_of_waits_is_cut_at_its_late_match_not_at_a_thread_waiting_behind_it(built, tmp_path):
    # Issue 16's probe (16 threads freeing each other's blocks: 147 frees unmatched of 320 000,
    # from 26 late matches): where every replay thread waits, the replayer unmatched the first
    # thread's wait, usually an ordinary one behind the cycle, and went on until it reached the
    # cycle.  Threads 1 and 2 wait for each other as in the replayer's smoke_wait_cycle (thread
    # 2's free of X is matched late with thread 1's X); thread 0 frees W, which thread 1 allocates
    # after its wait.  Only thread 2's late match is unmatched now (before: thread 0's free of W and
    # thread 1's of Y as well, neither replayed).
    X, Y, Z, W = 0x200000, 0x300000, 0x400000, 0x500000
    t0 = [event(OP["free"], W)]
    t1 = [event(OP["free"], Y), event(OP["free"], Z), event(OP["malloc"], X, 32), event(OP["malloc"], W, 32)]
    t2 = [event(OP["free"], X), event(OP["malloc"], Y, 32)]
    p = trace_of(tmp_path, "bystander.trace", chunk(0, t0, 1000, flush=(4000, 0)) + chunk(1, t1, 1000, flush=(3000, 0))
                 + chunk(2, t2, 1000, flush=(2000, 0)))
    doc = check(built, p)
    assert doc["unmatched_frees"] == 2 and doc["cross_thread_frees"] == 2  # Z and thread 2's X
    # (The timeout is a hang guard: the replay takes milliseconds.)
    r = subprocess.run([str(replayer(built)), str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ops"] == 5
