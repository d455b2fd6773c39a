"""Per-lane records of op and wait intervals, merged into one
:class:`~parastream.timeline.model.Timeline` at the end.

A backend whose streams record their own intervals (the cpu backend's worker threads, the
null backend, a device backend's host-side records) keeps one :class:`LaneRecorder` per
stream, written by one thread only, and merges them with :func:`build_timeline`: the
shared :class:`~parastream.timeline.model.TimelineBuilder` interner is not thread-safe, and
a lock per op would cost more than the op record itself. Times are
``time.perf_counter_ns`` integers.
"""

from __future__ import annotations

import time
from typing import Iterable

from ..timeline.model import KIND_COMPUTE, KIND_MEMCPY, DeviceInfo, Timeline, TimelineBuilder

now_ns = time.perf_counter_ns

#: waits shorter than this are not drawn: reading two clocks costs about as much
MIN_WAIT_NS = 2_000


class LaneRecorder:
    """Op and wait intervals of one lane (stream / worker), written by one thread only."""

    __slots__ = ("lane", "kind", "ops", "waits")

    def __init__(self, lane: str, kind: str = "device") -> None:
        self.lane = lane
        self.kind = kind
        self.ops: list[tuple[str, int, int]] = []
        self.waits: list[tuple[int, int, str | None, str]] = []

    def op(self, name: str, start_ns: int, end_ns: int) -> None:
        self.ops.append((name, start_ns, end_ns))

    def wait(self, start_ns: int, end_ns: int, on: str | None = None, name: str = "wait") -> None:
        if end_ns - start_ns >= MIN_WAIT_NS:
            self.waits.append((start_ns, end_ns, on, name))


def build_timeline(lanes: Iterable[LaneRecorder], source: str, fmt: str,
                   meta: dict | None = None, device: str | None = None) -> Timeline:
    """Merge lane records into a Timeline (copy lanes as memcpy ops, the rest compute);
    ``device`` names where it ran (a trace written from it says so, not "simulated")."""
    b = TimelineBuilder(source, fmt)
    if device:
        b.device = DeviceInfo(name=device)
    lanes = list(lanes)
    for lane in lanes:  # intern lane names first so stream codes follow creation order
        b.streams.code(lane.lane)
    for lane in lanes:
        kind = KIND_MEMCPY if lane.kind == "copy" else KIND_COMPUTE
        for name, s, e in lane.ops:
            b.add_op(lane.lane, name, s, e, type=lane.kind, kind=kind)
        for s, e, on, name in lane.waits:
            b.add_wait(lane.lane, s, e, on_stream=on, name=name)
    b.meta.update(meta or {})
    return b.build()
