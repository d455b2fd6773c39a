"""Pieces of a JSON array in a plain file, read where they lie.

A big array of objects (a trace's events) is cut at boundaries between two elements into
spans of about a given size, found by reading a small window at each nominal cut; each
span is later read on its own, by whichever process decodes it, straight into a reused
buffer with ``[`` and ``]`` around it. No process holds the file, and no bytes travel
between processes. A boundary found inside a string makes its two spans undecodable
alone: the caller joins them (see :func:`join_failed`).
"""

from __future__ import annotations

import re
from typing import Iterable

from ...errors import InputError

#: the text between two objects of an array (a "}" then a comma then a "{")
BOUNDARY = re.compile(rb"\}\s*,\s*\{")
#: bytes read around a nominal cut to find the boundary after it (doubled until found)
WINDOW_BYTES = 64 << 10


def _boundary_after(f, at: int, end: int) -> tuple[int, int] | None:
    """(end of the element before, start of the element after) of the first boundary at
    or after ``at`` and before ``end``; None when there is none."""
    window = WINDOW_BYTES
    while at < end:
        f.seek(at)
        text = f.read(min(window, end - at))
        m = BOUNDARY.search(text)
        if m is not None:
            return at + m.start() + 1, at + m.end() - 1
        if at + len(text) >= end:
            return None
        at += max(1, len(text) - 8)  # a boundary across the window's end: overlap
        window *= 2
    return None


def cut_spans(path: str, start: int, end: int, size: int) -> list[tuple[int, int]]:
    """The file's bytes ``[start, end)`` (the elements of an array, without its brackets)
    as (start, end) spans of about ``size`` bytes, cut between elements; the last span
    runs to ``end``."""
    spans, a = [], start
    with open(path, "rb") as f:
        while a + size < end:
            cut = _boundary_after(f, a + size, end)
            if cut is None:
                break
            spans.append((a, cut[0]))
            a = cut[1]
    spans.append((a, end))
    return spans


class SpanReader:
    """Reads spans of one file as framed JSON arrays into a buffer it reuses (no new
    memory, and no page faults, per span). A view it returns is valid until the next
    read: decode it, and keep nothing that points into it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.buffer = bytearray()

    def framed(self, a: int, b: int) -> memoryview:
        """``[`` + the file's bytes ``[a, b)`` + ``]``; InputError when the file is
        shorter than that (it changed while being read)."""
        n = b - a
        if len(self.buffer) < n + 2:
            self.buffer = bytearray(n + 2 + (1 << 20))
        view = memoryview(self.buffer)
        got = 0
        with open(self.path, "rb", buffering=0) as f:
            f.seek(a)
            while got < n:
                k = f.readinto(view[1 + got:1 + n])
                if not k:
                    raise InputError(self.path, "the file changed while it was read "
                                                f"(shorter than {b} bytes)")
                got += k
        view[0], view[n + 1] = ord("["), ord("]")
        return view[:n + 2]


def read_range(path: str, a: int, b: int) -> bytes:
    """The file's bytes ``[a, b)`` (fewer when it is shorter)."""
    with open(path, "rb") as f:
        f.seek(a)
        return f.read(b - a)


class TooLong(Exception):
    """Spans joined because they did not decode grew past the limit given."""


def join_failed(spans: list[tuple[int, int]], results: Iterable, scan, limit: int
                ) -> tuple[list, int | None]:
    """The results of ``spans`` in order, where a span whose result is ``"decode"`` (a
    cut fell inside a value) is joined with the spans after it and scanned again with
    ``scan(a, b)`` until the joined span decodes. Returns the results and, when the last
    spans never decoded, where the joined text begins (the caller reads it with the
    rest); None otherwise. :class:`TooLong` when a joined span grows past ``limit``
    bytes."""
    out, carry = [], None
    for (a, b), res in zip(spans, results):
        if carry is not None:
            a, res = carry, scan(carry, b)
        if res == "decode":
            if b - a > limit:
                raise TooLong(f"{b - a} bytes joined")
            carry = a
            continue
        carry = None
        out.append(res)
    return out, carry
