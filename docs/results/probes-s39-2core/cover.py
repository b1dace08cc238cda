#!/usr/bin/env python3
"""How many of a version-1 trace's events a 32-bit short form would hold, for three ways of
predicting an event's address (the design study behind format version 2; README section 1).

    cover.py TRACE     (a trace recorded by a version-1 recorder, e.g. 3425ad3's libstrata.so)

A short unit has 4 tag bits and 28 more: an allocation's hold its size (size_bits) and a zigzag
delta from the prediction in 16-byte steps (28 - size_bits), a free's the delta alone.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab"))
from strata_lab import trace as T  # noqa: E402

data = open(sys.argv[1], "rb").read()
off = T.FILE_HEADER.size
chunks = []
while off < len(data):
    words = T.CHUNK_HEADER.unpack_from(data, off)[2]
    chunks.append(np.frombuffer(data, "<u8", count=words, offset=off + T.CHUNK_HEADER.size))
    off += T.CHUNK_HEADER.size + 8 * words
w = np.concatenate(chunks)
op = (w & np.uint64(15)).astype(np.int64)
ev = (op >= 1) & (op <= 7)
address = ((((w >> np.uint64(4)) & np.uint64(T.ADDRESS_FIELD)) << np.uint64(3)).astype(np.int64))[ev]
size = (w >> np.uint64(49)).astype(np.int64)[ev]
op = op[ev]
sized, nosize = np.isin(op, [1, 2, 4]), np.isin(op, [3, 6])
others = int((~ev).sum())  # time samples and extensions: long
print("events", ev.sum(), "words", w.size, f"({w.size * 8 / ev.sum():.2f} bytes an event)")


def coverage(label: str, delta: np.ndarray) -> None:
    """The share of events that fit a short unit with their deltas from the prediction, and the
    bytes an event (a long one 8, plus about 2 of padding)."""
    print("---", label)
    aligned = (delta & 15) == 0
    for size_bits in (8, 9, 10, 11, 12):
        delta_fits = aligned & (np.abs(delta) < (1 << (28 - size_bits + 3)))
        short = (sized & (size < (1 << size_bits)) & delta_fits) | (nosize & aligned & (np.abs(delta) < (1 << 31)))
        longs = int((~short).sum()) + others
        per_event = (short.sum() * 4 + longs * 10) / ev.sum()
        print(f"size bits {size_bits}: short {short.mean() * 100:.1f} % of events (allocations "
              f"{short[sized].mean() * 100:.1f} %, their deltas fit {delta_fits[sized].mean() * 100:.1f} %), "
              f"~{per_event:.2f} bytes an event")


def deltas_within(groups: np.ndarray) -> np.ndarray:
    """Each event's address less the previous one's of its group (the first: from 0)."""
    order = np.lexsort((np.arange(address.size), groups))
    a, g = address[order], groups[order]
    d = np.diff(a, prepend=0)
    first = np.r_[True, g[1:] != g[:-1]]
    d[first] = a[first]
    out = np.empty_like(address)
    out[order] = d
    return out


coverage("from the event before", np.diff(address, prepend=0))
coverage("from the last allocation / the last free", deltas_within(sized.astype(np.int64)))
coverage("from the last allocation of the same 16-byte size step / the last free (version 2)",
         deltas_within(np.where(sized, np.minimum(size, 1023) >> 4, 1000)))
