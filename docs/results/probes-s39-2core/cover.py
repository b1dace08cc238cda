#!/usr/bin/env python3
"""How many of a version-1 trace's events a 32-bit short form would hold, for three ways of
predicting an event's address (the design study behind format version 2; README section 1).

    cover.py TRACE     (a trace recorded by a version-1 recorder, e.g. 3425ad3's libstrata.so)
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab"))
from strata_lab import trace as T  # noqa: E402

data = open(sys.argv[1], 'rb').read()
off = T.FILE_HEADER.size; chunks = []
while off < len(data):
    magic, thread, events, flags, base, fc, fn, tid, ck = T.CHUNK_HEADER.unpack_from(data, off)
    chunks.append(np.frombuffer(data, '<u8', count=events, offset=off + T.CHUNK_HEADER.size)); off += T.CHUNK_HEADER.size + 8 * events
w = np.concatenate(chunks)
op = (w & np.uint64(15)).astype(np.int64)
A = (((w >> np.uint64(4)) & np.uint64((1 << 45) - 1)) << np.uint64(3)).astype(np.int64)
S = (w >> np.uint64(49)).astype(np.int64)
ev = (op >= 1) & (op <= 7)
Ae = A[ev]; oe = op[ev]; Se = S[ev]
d = np.diff(Ae, prepend=0)
al = (d & 15) == 0
print("events", ev.sum(), "words", w.size)
for sb in (9, 10, 11, 12):
    db = 28 - sb
    sized = np.isin(oe, [1, 2, 4]); nosize = np.isin(oe, [3, 6])
    ok_s = sized & al & (Se < (1 << sb)) & (np.abs(d) < (1 << (db + 3)))
    ok_n = nosize & al & (np.abs(d) < (1 << 31))
    short = ok_s | ok_n
    # bytes: short 4; long 8 (+8 ext if op 5 or size >= 0x7fff) + ~2 avg pad
    longn = (~short).sum()
    bytes_ = short.sum() * 4 + longn * 8 + (~ev).sum() * 8 + longn * 2 + (~ev).sum() * 2
    print(f"size bits {sb} delta bits {db}: short {short.mean()*100:.1f}% of events (sized ok {ok_s.sum()/sized.sum()*100:.1f}%, nosize ok {ok_n.sum()/nosize.sum()*100:.1f}%), ~{bytes_/ev.sum():.2f} bytes/event vs {w.size*8/ev.sum():.2f}")
print("--- separate last per kind")
sized = np.isin(oe, [1, 2, 4]); nosize = np.isin(oe, [3, 6])
d2 = np.zeros_like(Ae)
for m in (sized, ~sized):
    d2[m] = np.diff(Ae[m], prepend=0)
al2 = (d2 & 15) == 0
for sb in (8, 9, 10):
    db = 28 - sb
    ok_s = sized & al2 & (Se < (1 << sb)) & (np.abs(d2) < (1 << (db + 3)))
    ok_n = nosize & al2 & (np.abs(d2) < (1 << 31))
    short = ok_s | ok_n
    longn = (~short).sum()
    bytes_ = short.sum() * 4 + longn * 8 + (~ev).sum() * 8 + longn * 2 + (~ev).sum() * 2
    print(f"size bits {sb}: short {short.mean()*100:.1f}% (sized ok {ok_s.sum()/sized.sum()*100:.1f}%: size fits {(Se[sized] < (1<<sb)).mean()*100:.1f}%, delta fits {(al2 & (np.abs(d2) < (1 << (db + 3))))[sized].mean()*100:.1f}%), ~{bytes_/ev.sum():.2f} B/event")
print("--- malloc-like keyed by size>>4, frees one last")
key = np.where(sized, np.minimum(Se, 1023) >> 4, 1000)
order = np.lexsort((np.arange(Ae.size), key))
As = Ae[order]; ks = key[order]
ds = np.diff(As, prepend=0); first = np.r_[True, ks[1:] != ks[:-1]]; ds[first] = As[first]
d3 = np.empty_like(Ae); d3[order] = ds
d3[~sized] = d2[~sized]
al3 = (d3 & 15) == 0
for sb in (8, 9, 10):
    db = 28 - sb
    ok_s = sized & al3 & (Se < (1 << sb)) & (np.abs(d3) < (1 << (db + 3)))
    ok_n = nosize & al3 & (np.abs(d3) < (1 << 31))
    short = ok_s | ok_n
    longn = (~short).sum()
    bytes_ = short.sum() * 4 + longn * 8 + (~ev).sum() * 8 + longn * 2 + (~ev).sum() * 2
    print(f"size bits {sb}: short {short.mean()*100:.1f}% (sized ok {ok_s.sum()/sized.sum()*100:.1f}%: delta fits {(al3 & (np.abs(d3) < (1 << (db + 3))))[sized].mean()*100:.1f}%), ~{bytes_/ev.sum():.2f} B/event")
