"""Allocation traces (STRATA_TRACE, docs/trace-format.md): reading, checking and statistics.

    t = trace.read(path)        # a Trace: the header, each thread's events; TraceError if corrupt
    s = trace.stats(t)          # sizes, lifetimes, cross-thread frees, peak live bytes

A trace cut short (the program was killed) reads up to its last whole chunk: `t.complete` is
False and `t.truncated` says where and why it ends.  Anything else that is wrong (another file,
another format version, a chunk that does not start where one should, a checksum that does not
match, an unknown event) is a TraceError naming the byte.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import LabError
from .text import printable

MAGIC = b"STRTRACE"
VERSION = 2
READABLE_VERSIONS = (1, 2)
FILE_HEADER = struct.Struct("<8sIIIIIIQQQ8x")  # 64 bytes
CHUNK_HEADER = struct.Struct("<IIIIQQQII")  # 48 bytes
CHUNK_MAGIC = 0x4B4E4843
CHUNK_THREAD_EXIT, CHUNK_END = 1, 2

OPS = {1: "malloc", 2: "calloc", 3: "realloc_from", 4: "realloc", 5: "aligned", 6: "free",
       7: "free_sized", 8: "time", 15: "extension"}
OP = {v: k for k, v in OPS.items()}
ALLOCS = (OP["malloc"], OP["calloc"], OP["realloc"], OP["aligned"])
FREES = (OP["free"], OP["free_sized"], OP["realloc_from"])
ADDRESS_FIELD = (1 << 45) - 1
SIZE_IN_EXTENSION = 0x7FFF
EXTENSION_SIZE_MASK = (1 << 54) - 1
# Version 2's short events (format.h): one 32-bit unit, tagged op + 8.
SHORT_TAG_OFFSET = 8
SHORT_SIZED = (OP["malloc"], OP["calloc"], OP["realloc"])
SHORT_FREES = (OP["free"], OP["realloc_from"])
SHORT_SIZE_LIMIT = 512
# Counter rates a machine can have, in ticks a nanosecond (format.h, clock_rate_plausible): the
# times are not checksummed, and a corrupt clock pair gave a 263-event trace a duration of 5 hours.
CLOCK_TICKS_PER_NS = (0.01, 20.0)
SHORT_SIZED_BIAS, SHORT_FREE_BIAS = 1 << 22, 1 << 31
LONG_TAGS = (1, 2, 3, 4, 5, 6, 7, 8, 15)


class TraceError(LabError):
    """A trace the tools cannot read: the message names the file and the byte."""


@dataclass
class Trace:
    path: Path
    pid: int
    parent_pid: int
    start_cycles: int
    start_ns: int
    file_bytes: int
    start_anon_kib: int = 0  # the program's anonymous resident KiB when recording began
    program_file_kib: int = 0  # its file-backed resident KiB at exit (from the end chunk)
    valid_bytes: int = 0
    complete: bool = False
    truncated: str = ""
    chunks: int = 0
    last_flush: tuple[int, int] | None = None  # (cycles, ns) of the last chunk written
    # Whether every chunk's times are in order (base, samples, flush, after the start): chunk
    # headers are not checksummed, and one flipped bit in a base_cycles made a 50 ms trace 423 s long.
    times_in_order: bool = True
    flushes: list = field(default_factory=list)  # each chunk's (cycles, ns) when written
    # Per event, in each thread's order, threads one after another:
    thread: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    op: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    address: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    size: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    alignment_log: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    cycles: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    # The sample before each event (an allocation's time; a free's lower bound): a thread's events
    # between two samples are in its order, which places its own frees among its allocations.
    cycles_before: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))

    @property
    def threads(self) -> int:
        return int(np.unique(self.thread).size)

    @property
    def events(self) -> int:
        return int(self.op.size)

    def seconds_per_cycle(self) -> float | None:
        """From the file header's clock pair and the last chunk's; None for a trace too short, or
        whose pairs give no rate a machine's counter can have (corrupt times)."""
        if not self.last_flush:
            return None
        dc, dn = self.last_flush[0] - self.start_cycles, self.last_flush[1] - self.start_ns
        if dc <= 0 or dn <= 0 or not CLOCK_TICKS_PER_NS[0] <= dc / dn <= CLOCK_TICKS_PER_NS[1]:
            return None
        # Each chunk's flush pair on the line through the header's and the last (format.h
        # chunk_clock_agrees): within 100 ms or a tenth of the span.
        slack = max(dn / 10, 1e8)
        for c, n in self.flushes:
            if c < self.start_cycles or abs(self.start_ns + (c - self.start_cycles) * dn / dc - n) > slack:
                return None
        if not self.times_in_order:
            return None
        return dn / dc * 1e-9

    def end_note(self) -> str:
        if self.complete:
            return f"complete ({self.valid_bytes} bytes, {self.chunks} chunks)"
        return (f"INCOMPLETE: {self.truncated}; the events up to byte {self.valid_bytes} of "
                f"{self.file_bytes} ({self.chunks} whole chunks) are read, each thread's events after "
                f"its last written chunk are lost")


def read(path: str | Path) -> Trace:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceError(f"{path}: {e.strerror}") from None
    if len(data) < FILE_HEADER.size or data[:8] != MAGIC:
        raise TraceError(f"{path}: not a strata trace (no {MAGIC.decode()} header)")
    magic, version, hbytes, cbytes, ebytes, pid, ppid, c0, n0, anon = FILE_HEADER.unpack_from(data)
    if version not in READABLE_VERSIONS:
        raise TraceError(f"{path}: trace format version {version}; this lab reads versions "
                         f"{READABLE_VERSIONS[0]} to {READABLE_VERSIONS[-1]}")
    if (hbytes, cbytes, ebytes) != (FILE_HEADER.size, CHUNK_HEADER.size, 8):
        raise TraceError(f"{path}: byte 8: unexpected header, chunk header or word sizes "
                         f"({hbytes}, {cbytes}, {ebytes})")
    t = Trace(path=path, pid=pid, parent_pid=ppid, start_cycles=c0, start_ns=n0, file_bytes=len(data),
              start_anon_kib=anon)
    parts: dict[int, list] = {}
    off = FILE_HEADER.size
    while off < len(data):
        if len(data) - off < CHUNK_HEADER.size:
            t.truncated = f"a chunk header cut short at byte {off}"
            break
        magic, thread, events, flags, base, fc, fn, tid, checksum = CHUNK_HEADER.unpack_from(data, off)  # events: words
        if magic != CHUNK_MAGIC:
            raise TraceError(f"{path}: byte {off}: corrupt trace: no chunk starts here")
        payload = 8 * events  # `events` counts words here
        if len(data) - off - CHUNK_HEADER.size < payload:
            t.truncated = f"a chunk cut short at byte {off}"
            break
        words = np.frombuffer(data, "<u8", count=events, offset=off + CHUNK_HEADER.size)
        s = int(words.sum(dtype=np.uint64)) if events else 0
        if ((s ^ (s >> 32)) & 0xFFFFFFFF) != checksum:
            raise TraceError(f"{path}: byte {off}: corrupt trace: chunk checksum mismatch")
        # unit: where each entry starts, in 32-bit units (version 2's entries are not its words:
        # an error named a byte past the entry's, 16 bytes on after 4 short events)
        words, unit, bad_unit = _entries(words) if version >= 2 else (words, 2 * np.arange(events), -1)
        if bad_unit >= 0:
            tag = data[off + CHUNK_HEADER.size + 4 * bad_unit] & 15
            raise TraceError(f"{path}: byte {off + CHUNK_HEADER.size + 4 * bad_unit}: corrupt trace: unknown unit {tag}")
        events = words.size
        op = (words & np.uint64(15)).astype(np.uint8)
        ext = op == OP["extension"]
        after_event = np.r_[False, (op[:-1] >= 1) & (op[:-1] <= 7)] if events else ext
        bad = np.flatnonzero((op == 0) | ((op > 8) & ~ext) | (ext & ~after_event))
        if bad.size:
            at = off + CHUNK_HEADER.size + 4 * int(unit[bad[0]])
            what = ("an extension (word 15) that follows no event" if ext[bad[0]]
                    else f"unknown word {int(op[bad[0]])}")
            raise TraceError(f"{path}: byte {at}: corrupt trace: {what}")
        off += CHUNK_HEADER.size + payload
        t.chunks += 1
        t.last_flush = (fc, fn)
        t.flushes.append((fc, fn))
        if not flags & CHUNK_END:  # (the end chunk's base is a size)
            samples = words[op == OP["time"]] >> np.uint64(4)
            if base < c0 or fc < base or (samples.size and (int(samples.min()) < base or int(samples.max()) > fc)):
                t.times_in_order = False
        if flags & CHUNK_END:
            t.complete = True
            t.program_file_kib = base
            if off != len(data):
                raise TraceError(f"{path}: byte {off}: corrupt trace: data after the end chunk")
            break
        cycles, before = _times(op, words, base, fc, with_before=True)
        has_ext = np.r_[ext[1:], False] if events else ext
        nxt = np.r_[words[1:], np.uint64(0)] if events else words
        size = np.where(has_ext, (nxt >> np.uint64(4)) & np.uint64(EXTENSION_SIZE_MASK), words >> np.uint64(49))
        alog = np.where(has_ext, nxt >> np.uint64(58), np.uint64(0)).astype(np.uint8)
        keep = (op >= 1) & (op <= 7)
        parts.setdefault(thread, []).append((op[keep], words[keep], size[keep], alog[keep], cycles[keep],
                                             before[keep]))
    t.valid_bytes = off
    if not t.complete and not t.truncated:
        t.truncated = ("no end chunk: the program did not exit normally (killed, crashed or _exit), or "
                       "recording stopped early (a write error, its descriptor closed, no memory: its "
                       "stderr says which)")
    cols = []
    for th in sorted(parts):
        for op, w, size, alog, cyc, bef in parts[th]:
            cols.append((np.full(op.size, th, np.uint32), op, w, size, alog, cyc, bef))
    if cols:
        t.thread = np.concatenate([c[0] for c in cols])
        t.op = np.concatenate([c[1] for c in cols])
        w = np.concatenate([c[2] for c in cols])
        t.size = np.concatenate([c[3] for c in cols])
        t.alignment_log = np.concatenate([c[4] for c in cols])
        t.cycles = np.concatenate([c[5] for c in cols])
        t.cycles_before = np.concatenate([c[6] for c in cols])
        t.address = ((w >> np.uint64(4)) & np.uint64(ADDRESS_FIELD)) << np.uint64(3)
    return t


def _entries(words: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """A chunk's words as long entries (version 1's words; format.h decode_units), the unit where
    each starts, and the index of its first unit that is none (-1 if every one is).  A version 1
    chunk holds long entries only, and comes back as it is."""
    u = words.view("<u4")
    tag = (u & np.uint32(15)).astype(np.int64)
    even = (np.arange(u.size) & 1) == 0
    long_start = even & np.isin(tag, LONG_TAGS)
    second = np.r_[False, long_start[:-1]] if u.size else long_start
    short_tags = [o + SHORT_TAG_OFFSET for o in SHORT_SIZED + SHORT_FREES]
    short = ~long_start & ~second & np.isin(tag, short_tags)
    bad = ~(long_start | second | short | (tag == 0))
    if bad.any():
        return words, np.zeros(0, np.int64), int(np.flatnonzero(bad)[0])
    if not short.any() and 2 * int(long_start.sum()) == u.size:
        return words, 2 * np.arange(words.size), -1  # long entries only (version 1, or no event fitted a short form)
    entry = np.flatnonzero(long_start | short)
    is_long = long_start[entry]
    unit = u[entry].astype(np.uint64)
    nxt = u[np.minimum(entry + 1, u.size - 1)].astype(np.uint64)
    lw = np.where(is_long, unit | (nxt << np.uint64(32)), np.uint64(0))
    op = np.where(is_long, lw & np.uint64(15), (unit & np.uint64(15)) - np.uint64(SHORT_TAG_OFFSET)).astype(np.int64)
    sized_op = np.isin(op, SHORT_SIZED)
    free_op = np.isin(op, SHORT_FREES)
    size = np.where(is_long, lw >> np.uint64(49),
                    np.where(sized_op, (unit >> np.uint64(4)) & np.uint64(SHORT_SIZE_LIMIT - 1), np.uint64(0)))
    # Each short event's address is a delta from the last event of its register (an allocation's
    # by its 16-byte size step, a free's one for all), 0 at the chunk's start; a long event of the
    # register sets it.  Per register, a cumulative sum that restarts at every long event.
    reg = np.full(entry.size, -1, np.int64)
    sized_reg = sized_op & (~is_long | (size < SHORT_SIZE_LIMIT))
    reg[sized_reg] = (size[sized_reg] >> np.uint64(4)).astype(np.int64)
    reg[free_op] = SHORT_SIZE_LIMIT >> 4
    long_address = (((lw >> np.uint64(4)) & np.uint64(ADDRESS_FIELD)) << np.uint64(3)).astype(np.int64)
    delta = np.where(sized_op, ((unit >> np.uint64(13)).astype(np.int64) << 4) - SHORT_SIZED_BIAS,
                     ((unit >> np.uint64(4)).astype(np.int64) << 4) - SHORT_FREE_BIAS)
    value = np.where(is_long, long_address, delta)
    members = np.flatnonzero(reg >= 0)
    order = members[np.argsort(reg[members], kind="stable")]
    r, v = reg[order], value[order]
    restart = np.r_[True, r[1:] != r[:-1]] | is_long[order] if order.size else is_long[order]
    total = np.cumsum(v)
    starts = np.flatnonzero(restart)
    before = total[starts] - v[starts]
    address = long_address.copy()
    address[order] = total - before[np.cumsum(restart) - 1]
    short_word = (op.astype(np.uint64) | ((address.astype(np.uint64) >> np.uint64(3)) & np.uint64(ADDRESS_FIELD)) << np.uint64(4)
                  | (size << np.uint64(49)))
    return np.where(is_long, lw, short_word), entry, -1


def _times(op: np.ndarray, words: np.ndarray, base: int, flush: int, with_before: bool = False):
    """Each event's time (format.h): an allocation at the sample before it (or the chunk's base),
    a free at the sample after it (or the chunk's flush), so a block is allocated before it is
    freed, also across threads."""
    n = op.size
    if n == 0:
        return (np.zeros(0, np.uint64), np.zeros(0, np.uint64)) if with_before else np.zeros(0, np.uint64)
    is_time = op == OP["time"]
    pos = np.arange(n)
    before = np.maximum.accumulate(np.where(is_time, pos, -1))
    after = np.minimum.accumulate(np.where(is_time, pos, n)[::-1])[::-1]
    sample = words >> np.uint64(4)
    lo = np.where(before >= 0, sample[np.clip(before, 0, None)], np.uint64(base))
    hi = np.where(after < n, sample[np.clip(after, None, n - 1)], np.uint64(flush))
    times = np.where(np.isin(op, FREES), hi, lo).astype(np.uint64)
    return (times, lo.astype(np.uint64)) if with_before else times


def _log2_histogram(values: np.ndarray, unit: str) -> list[dict]:
    """Power-of-two buckets: [lo, 2*lo) with their counts (0 has its own bucket)."""
    if values.size == 0:
        return []
    v = values.astype(np.float64)
    zero = int(np.count_nonzero(v <= 0))
    pos = v[v > 0]
    out = [{"lo": 0, "hi": 0, "count": zero, "unit": unit}] if zero else []
    if pos.size:
        e = np.floor(np.log2(pos)).astype(np.int64)
        for k, n in zip(*np.unique(e, return_counts=True)):
            out.append({"lo": float(2.0 ** k), "hi": float(2.0 ** (k + 1)), "count": int(n), "unit": unit})
    return out


def failed_reallocs(t: Trace) -> np.ndarray:
    """The realloc_from events whose realloc failed (its new block 0 with a size above 0): the old
    block lives on, as the replayer keeps it (a free of it later was unmatched, and the block was
    taken out of the live bytes while the program still had it)."""
    i = np.flatnonzero(t.op[:-1] == OP["realloc_from"])  # op_realloc follows in the same chunk
    failed = ((t.op[i + 1] == OP["realloc"]) & (t.address[i + 1] == 0) & (t.size[i + 1] > 0)
              & (t.thread[i + 1] == t.thread[i]))
    out = np.zeros(t.events, bool)
    out[i[failed]] = True
    return out


def lifetimes(t: Trace) -> dict:
    """Each allocation matched with a free of its address: per address, in time order
    (allocations first at equal times), the k-th free ends the k-th block, as the tools'
    rule "a free ends the oldest live block there" does; frees before an address's first
    allocation are unmatched, and a failed realloc frees nothing.  Indexes into t's arrays, and
    which were freed by another thread."""
    idx = np.flatnonzero((t.address != 0) & ~failed_reallocs(t))
    free_first = np.isin(t.op[idx], FREES).astype(np.int8)
    order = idx[np.lexsort((free_first, t.cycles[idx], t.address[idx]))]
    addr, op = t.address[order], t.op[order]
    isa, isf = np.isin(op, ALLOCS), np.isin(op, FREES)
    start = np.r_[True, addr[1:] != addr[:-1]] if addr.size else np.zeros(0, bool)
    gid = np.cumsum(start) - 1
    starts = np.flatnonzero(start)
    ca = np.cumsum(isa)
    a_before_group = (ca - isa)[starts]  # allocations in earlier groups
    a_in_group_before = ca - isa - a_before_group[gid]
    eligible = isf & (a_in_group_before > 0)
    cf = np.cumsum(eligible)
    f_before_group = (cf - eligible)[starts]
    rank = cf - 1 - f_before_group[gid]  # this free is the rank-th eligible one of its address
    a_total = np.bincount(gid, weights=isa, minlength=starts.size).astype(np.int64) if addr.size else np.zeros(0, np.int64)
    apos = np.flatnonzero(isa)
    ok = eligible & (rank < a_total[gid] if addr.size else eligible)
    free_pos = np.flatnonzero(ok)
    alloc_pos = apos[a_before_group[gid[free_pos]] + rank[free_pos]]
    keep = alloc_pos < free_pos
    alloc_i, free_i = order[alloc_pos[keep]], order[free_pos[keep]]
    return {"alloc": alloc_i, "free": free_i, "cross": t.thread[alloc_i] != t.thread[free_i]}


def stats(t: Trace) -> dict:
    """What a user needs to understand a program's allocation pattern, as JSON-ready numbers."""
    allocs = np.isin(t.op, ALLOCS) & (t.address != 0)
    frees = np.isin(t.op, (OP["free"], OP["free_sized"]))
    m = lifetimes(t)
    spc = t.seconds_per_cycle()
    life_cycles = (t.cycles[m["free"]] - t.cycles[m["alloc"]]).astype(np.float64)
    life = life_cycles * spc if spc else life_cycles
    # Live bytes over time: + at each allocation, - at the free matched with it (frees first at
    # equal times here: a free's time is an upper bound, an allocation's a lower one).  A free of a
    # block its own thread allocated before it is placed in that thread's order, at the sample
    # before it: at the sample after, every free between two samples came after every allocation
    # there, and a program that freed 100 blocks of 100 kB and then allocated 10 of 2 MiB peaked
    # at 23.8 MB instead of 21.0.
    delta = np.zeros(t.events, np.int64)
    delta[allocs] = t.size[allocs].astype(np.int64)
    delta[m["free"]] -= t.size[m["alloc"]].astype(np.int64)
    key = t.cycles.copy()
    own = m["free"][~m["cross"] & (m["alloc"] < m["free"])]
    if t.cycles_before.size == t.events:
        key[own] = t.cycles_before[own]
    free_first = np.isin(t.op, FREES)
    free_first[own] = False  # in its thread's order (below) among the allocations at its sample
    order = np.lexsort((np.arange(t.events), ~free_first, key))
    live = np.cumsum(delta[order])
    peak = int(live.max()) if live.size else 0
    duration = None
    if spc and t.events:
        duration = float(int(t.cycles.max()) - int(t.cycles.min())) * spc
    matched_frees = int(m["free"].size)
    cross = int(np.count_nonzero(m["cross"]))
    counts = {name: int(np.count_nonzero(t.op == k)) for k, name in OPS.items() if k <= 7}
    return {
        "trace": str(t.path), "pid": t.pid, "parent_pid": t.parent_pid, "complete": t.complete,
        "end": t.end_note(), "threads": t.threads, "events": t.events, "counts": counts,
        "duration_s": duration,
        "allocations": int(np.count_nonzero(allocs)), "allocated_bytes": int(t.size[allocs].sum()),
        "frees_matched": matched_frees,
        "frees_unmatched": (int(np.count_nonzero(frees)) + counts["realloc_from"]
                            - int(np.count_nonzero(failed_reallocs(t))) - matched_frees),
        "cross_thread_frees": cross,
        "cross_thread_free_share": cross / matched_frees if matched_frees else 0.0,
        "peak_live_bytes": peak,
        "size_histogram": _log2_histogram(t.size[allocs], "bytes"),
        "lifetime_histogram": _log2_histogram(life, "s" if spc else "cycles"),
        "live_bytes": _downsampled(key[order], live, t, spc),
    }


def _downsampled(cycles: np.ndarray, live: np.ndarray, t: Trace, spc: float | None, n: int = 400) -> dict:
    if live.size == 0:
        return {"t": [], "bytes": []}
    step = max(1, live.size // n)
    # The maximum of each step, so the peak survives the thinning.
    k = live.size // step * step
    peaks = live[:k].reshape(-1, step).max(axis=1) if k else live
    at = cycles[:k:step] if k else cycles
    t0 = int(cycles[0])
    x = [(int(c) - t0) * (spc or 1.0) for c in at]
    return {"t": x, "bytes": [int(v) for v in peaks], "unit": "s" if spc else "cycles"}


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _bucket(h: dict) -> str:
    if h["hi"] == 0:
        return "0"
    if h["unit"] == "bytes":
        return f"{_human(h['lo'])}–{_human(h['hi'])}"
    if h["unit"] == "s":
        return f"{_seconds(h['lo'])}–{_seconds(h['hi'])}"
    return f"{h['lo']:.0f}–{h['hi']:.0f} cycles"


def _seconds(s: float) -> str:
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= f:
            return f"{s / f:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def markdown(s: dict) -> str:
    lines = [f"# trace {printable(s['trace'])}", "",
             f"- process {s['pid']}" + (f" (forked from {s['parent_pid']})" if s["parent_pid"] else ""),
             f"- {s['end']}",
             f"- {s['threads']} threads, {s['events']} events"
             + (f" over {s['duration_s']:.3g} s" if s["duration_s"] else ""),
             "- " + ", ".join(f"{k} {v}" for k, v in s["counts"].items() if v),
             f"- {s['allocations']} allocations, {_human(s['allocated_bytes'])} in all; "
             f"peak live {_human(s['peak_live_bytes'])}",
             f"- frees matched to an allocation in the trace: {s['frees_matched']}; unmatched "
             f"(allocated before recording began, or lost): {s['frees_unmatched']}",
             f"- freed by another thread than the allocating one: {s['cross_thread_frees']} "
             f"({100 * s['cross_thread_free_share']:.1f} % of matched frees)", ""]
    for title, key in (("sizes", "size_histogram"), ("lifetimes", "lifetime_histogram")):
        rows = s[key]
        total = sum(h["count"] for h in rows) or 1
        lines += [f"## {title}", "", "| range | count | share |", "|---|---:|---:|"]
        lines += [f"| {_bucket(h)} | {h['count']} | {100 * h['count'] / total:.1f} % |" for h in rows]
        lines.append("")
    return "\n".join(lines)


def plot(s: dict, out: Path) -> Path:
    """Three panels: the size histogram, the lifetime histogram, live bytes over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from . import results

    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for a, key, title in ((ax[0], "size_histogram", "allocation sizes"),
                          (ax[1], "lifetime_histogram", "lifetimes (matched frees)")):
        rows = s[key]
        a.bar(range(len(rows)), [h["count"] for h in rows])
        a.set_xticks(range(len(rows)), [_bucket(h).split("–")[0] for h in rows], rotation=60, fontsize=7)
        a.set_title(title)
        a.set_ylabel("count")
    lb = s["live_bytes"]
    ax[2].plot(lb["t"], [b / 2**20 for b in lb["bytes"]])
    ax[2].set_title(f"live bytes (peak {_human(s['peak_live_bytes'])})")
    ax[2].set_xlabel(lb.get("unit", "s"))
    ax[2].set_ylabel("MiB")
    fig.suptitle(printable(Path(s["trace"]).name), parse_math=False)  # a file name, not TeX: '$' pairs are common
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    # Whole or not at all: on a full disk savefig left a cut PNG under the final name.
    results.write_text_atomic(Path(out), buf.getvalue(), "." + Path(out).name + "-")
    return out
