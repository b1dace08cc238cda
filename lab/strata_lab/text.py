"""Strings the lab does not choose (a trace's file name, names and messages in a results file),
made safe to show: in a terminal, a Markdown table, a plot's title."""

from __future__ import annotations

import unicodedata


def printable(text: str) -> str:
    """`text` with each control character written as its escape (newline as `\\n`, ESC as `\\x1b`),
    each format character and line or paragraph separator as `\\uNNNN`, and each byte of a file
    name that is not UTF-8 (Python's lone surrogate for it) as `\\xNN`.  A newline split a row of
    summary.md, an escape sequence rewrote the terminal, and the surrogate could be neither drawn
    nor written as UTF-8 (a traceback after the run)."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        kind = unicodedata.category(ch)
        if kind == "Cc":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch, f"\\x{ord(ch):02x}"))
        elif kind == "Cs":  # os.fsdecode turns byte b into U+DC00 + b
            out.append(f"\\x{ord(ch) - 0xDC00:02x}" if 0xDC80 <= ord(ch) <= 0xDCFF else f"\\u{ord(ch):04x}")
        elif kind in ("Cf", "Zl", "Zp"):
            # Format characters draw nothing but act: U+202E (right-to-left override) reverses
            # the rest of a terminal line, U+200B hides a difference between two names; line and
            # paragraph separators break a line where some viewers do.
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "".join(out)
