"""The null backend: runs nothing, records what would have been issued.

Every ``submit`` / ``record`` / ``wait`` is appended to :attr:`NullBackend.program` in issue
order, so tests can check event logic (who waits on what, in which order) without a device.
:meth:`NullBackend.timeline` replays the program with a fixed cost per op: each stream is a
FIFO, and a wait holds its stream until the recording it captured was reached. Issue order
is a valid replay order, because a wait can only capture a recording issued before it.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any, Callable

from ..timeline.model import Timeline
from .backend import STREAM_KINDS, BackendBase
from .lanes import LaneRecorder, build_timeline


@dataclass(frozen=True)
class Command:
    """One issued command: ``op`` ('submit' | 'record' | 'wait'), the stream, the op name
    (submit) or the recording id (record/wait), the cost in ns (submit)."""

    op: str
    stream: str
    name: str = ""
    record_id: int = -1
    cost_ns: int = 0


class NullWork:
    """A call that never ran: done at once, its result is ``None``."""

    def done(self) -> bool:
        return True

    def result(self) -> Any:
        return None


class NullEvent:
    def __init__(self, backend: "NullBackend") -> None:
        self._backend = backend
        self.record_id = -1  # the latest recording; -1 = never recorded

    def record(self, stream: "NullStream | None" = None) -> None:
        stream = stream or self._backend.default_stream()
        self.record_id = self._backend._issue("record", stream.name)

    def wait(self, stream: "NullStream | None" = None) -> None:
        (stream or self._backend.default_stream()).wait_event(self)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end: "NullEvent") -> float:
        return 0.0


class NullStream:
    def __init__(self, backend: "NullBackend", name: str, kind: str) -> None:
        if kind not in STREAM_KINDS:
            raise ValueError(f"stream kind must be one of {STREAM_KINDS}, not {kind!r}")
        self._backend = backend
        self.name = name
        self.kind = kind

    def submit(self, fn: Callable[..., Any], *args: Any, name: str | None = None,
               cost_ns: int | None = None, **kwargs: Any) -> NullWork:
        """Record the call without running ``fn``."""
        self._backend._issue("submit", self.name, name or getattr(fn, "__name__", "op"),
                             cost_ns if cost_ns is not None else self._backend.op_cost_ns)
        return NullWork()

    def record_event(self, event: NullEvent | None = None) -> NullEvent:
        event = event or NullEvent(self._backend)
        event.record(self)
        return event

    def wait_event(self, event: NullEvent) -> None:
        if event.record_id >= 0:
            self._backend._issue("wait", self.name, record_id=event.record_id)

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


class NullBackend(BackendBase):
    """Records commands; ``op_cost_ns`` is each op's duration in the replayed timeline.
    Declares no capabilities beyond the core protocol."""

    name = "null"
    host_synchronous = False

    def __init__(self, op_cost_ns: int = 1_000) -> None:
        self.op_cost_ns = op_cost_ns
        self.program: list[Command] = []
        self._streams: dict[str, NullStream] = {}
        self._kinds: dict[str, str] = {}
        self._lock = threading.Lock()  # pipelines issue from several worker threads
        self._ids = itertools.count()

    def _issue(self, op: str, stream: str, name: str = "", cost_ns: int = 0,
               record_id: int = -1) -> int:
        with self._lock:
            if op == "record":
                record_id = len(self.program)
            self.program.append(Command(op, stream, name, record_id, cost_ns))
            return record_id

    def stream(self, name: str | None = None, kind: str = "device") -> NullStream:
        with self._lock:
            name = name or f"stream{next(self._ids)}"
            if name in self._streams:
                raise ValueError(f"stream name {name!r} already used")
            s = self._streams[name] = NullStream(self, name, kind)
            self._kinds[name] = kind
            return s

    def default_stream(self) -> NullStream:
        return self._streams.get("default") or self.stream("default")

    def event(self, enable_timing: bool = True) -> NullEvent:
        return NullEvent(self)

    def synchronize(self) -> None:
        return None

    def timeline(self, source: str | None = None) -> Timeline:
        """Replay the program: ops of ``op_cost_ns``, waits until the captured recording."""
        cursor: dict[str, int] = {}
        reached: dict[int, int] = {}  # recording id -> time its stream reached it
        lanes = {n: LaneRecorder(n, k) for n, k in self._kinds.items()}
        for i, c in enumerate(self.program):
            t = cursor.get(c.stream, 0)
            if c.op == "submit":
                lanes[c.stream].op(c.name, t, t + c.cost_ns)
                cursor[c.stream] = t + c.cost_ns
            elif c.op == "record":
                reached[i] = t
            else:
                ready = reached[c.record_id]
                if ready > t:
                    rec_stream = self.program[c.record_id].stream
                    lanes[c.stream].waits.append((t, ready, rec_stream, "wait"))
                    cursor[c.stream] = ready
        return build_timeline(lanes.values(), source or "null-backend", "parastream-null")

    def close(self) -> None:
        return None
