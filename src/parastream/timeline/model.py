"""The one timeline model every source is read into.

A :class:`Timeline` is a single capture (one profiler run, or one step of it) of device
work: per op its stream, start and end in integer nanoseconds, name, type, accelerator
core kind, block dim and step, stored column-wise in numpy arrays. Strings (stream
labels, op names, op types) are interned: the per-op columns hold small integer codes
into a list. Wait intervals (Ascend ``EVENT_WAIT``, CUDA ``Stream Wait Event``) are
kept apart from ops, because a wait is not work.

Epoch timestamps are never stored as float64: 1.7e15 us in a double has a resolution
of 0.25 us, which is larger than many of the gaps users look for.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

import numpy as np

from .collectives import Collectives

#: op kinds (column ``kind``)
KIND_COMPUTE, KIND_MEMCPY, KIND_MEMSET, KIND_COMM = 0, 1, 2, 3
KINDS = ("compute", "memcpy", "memset", "comm")

#: accelerator core kinds (column ``core``); "" is unknown
CORES = ("", "AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "HCCL", "CUDA", "DMA")

#: name of the lane that holds communication rows without a stream id (Ascend HCCL)
COMM_LANE = "HCCL"


def core_code(value: str | None) -> int:
    """Code of an accelerator core name; unknown names map to 0 ("")."""
    if not value:
        return 0
    try:
        return CORES.index(value.strip().upper())
    except ValueError:
        return 0


@dataclass
class DeviceInfo:
    """What the source says about the device; ``None`` where it says nothing."""

    name: str | None = None
    ai_core_num: int | None = None
    vector_core_num: int | None = None
    sm_count: int | None = None

    def cores(self) -> int | None:
        """The count that block dims are compared with: AI cores on Ascend, SMs on CUDA."""
        return self.ai_core_num if self.ai_core_num else self.sm_count


class Interner:
    """Maps strings to dense integer codes (first seen, first coded)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self.values: list[str] = []
        self._index: dict[str, int] = {}
        for v in values:
            self.code(v)

    def code(self, value: str) -> int:
        idx = self._index.get(value)
        if idx is None:
            idx = len(self.values)
            self._index[value] = idx
            self.values.append(value)
        return idx

    def codes(self, values: Iterable[str]) -> np.ndarray:
        return np.fromiter((self.code(v) for v in values), dtype=np.int32)


def value_flags(values: Sequence[str], test) -> np.ndarray:
    """``test`` over a column's distinct values, as a bool table to index with its codes
    (so a per-name regex runs once per name, not once per row)."""
    return np.array([bool(test(v)) for v in values] or [False], dtype=bool)


@dataclass
class Timeline:
    """One capture of device work, column-wise; ops sorted by (start, end, stream).

    Per-op columns (all the same length ``n``): ``stream``, ``name``, ``type`` are codes into
    ``streams``, ``names``, ``types``; ``start_ns``/``end_ns`` are int64 nanoseconds;
    ``kind`` is one of :data:`KINDS`; ``core`` one of :data:`CORES`; ``block_dim`` and
    ``mix_block_dim`` are -1 when unknown; ``step`` is -1 when the source has no steps.
    ``shapes`` optionally holds input shapes as text (a numpy object array).

    Wait columns: ``wait_stream`` (the stream that waits), ``wait_on`` (the stream waited
    on, -1 when unknown), ``wait_start_ns``/``wait_end_ns`` and ``wait_name`` (code into
    ``names``).
    """

    source: str
    format: str
    streams: list[str]
    names: list[str]
    types: list[str]
    stream: np.ndarray
    name: np.ndarray
    type: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    kind: np.ndarray
    core: np.ndarray
    block_dim: np.ndarray
    mix_block_dim: np.ndarray
    step: np.ndarray
    shapes: np.ndarray | None = None
    #: host time the op was launched (CUDA runtime call / ac2g flow), -1 unknown; None if no source
    launch_ns: np.ndarray | None = None
    #: share of the device's SM warp slots a CUDA kernel holds while it runs (0..1, from the
    #: profiler's occupancy estimate), NaN unknown; None when the source has none
    sm_share: np.ndarray | None = None
    wait_stream: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    wait_on: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    wait_start_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    wait_end_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    wait_name: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    device: DeviceInfo = field(default_factory=DeviceInfo)
    warnings: list[str] = field(default_factory=list)
    #: free-form facts from the source (rank, world size, step label, ...)
    meta: dict = field(default_factory=dict)
    #: the source's collective calls (group, sequence, size), for matching across ranks;
    #: None when the reader records none. Whole-source: select() and split_steps() keep it
    collectives: Collectives | None = None

    # ----------------------------------------------------------------- basics
    def __len__(self) -> int:
        return int(self.start_ns.shape[0])

    @property
    def n_waits(self) -> int:
        return int(self.wait_start_ns.shape[0])

    @property
    def dur_ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns

    @property
    def t0_ns(self) -> int:
        """Earliest op or wait start: the origin of relative times in reports."""
        firsts = []
        if len(self):
            firsts.append(int(self.start_ns.min()))
        if self.n_waits:
            firsts.append(int(self.wait_start_ns.min()))
        return min(firsts) if firsts else 0

    def stream_ops(self, s: int) -> np.ndarray:
        """Indices of the ops on stream code ``s``, in start order."""
        return np.flatnonzero(self.stream == s)

    def op_name(self, i: int) -> str:
        return self.names[int(self.name[i])]

    def select(self, mask: np.ndarray, wait_mask: np.ndarray | None = None, **changes) -> "Timeline":
        """A new timeline with the ops where ``mask`` is true (and waits where ``wait_mask``)."""
        cols = {
            c: getattr(self, c)[mask]
            for c in ("stream", "name", "type", "start_ns", "end_ns", "kind", "core",
                      "block_dim", "mix_block_dim", "step")
        }
        if self.shapes is not None:
            cols["shapes"] = self.shapes[mask]
        if self.launch_ns is not None:
            cols["launch_ns"] = self.launch_ns[mask]
        if self.sm_share is not None:
            cols["sm_share"] = self.sm_share[mask]
        if wait_mask is not None:
            for c in ("wait_stream", "wait_on", "wait_start_ns", "wait_end_ns", "wait_name"):
                cols[c] = getattr(self, c)[wait_mask]
        cols["warnings"] = list(self.warnings)
        cols["meta"] = dict(self.meta)
        cols.update(changes)
        return replace(self, **cols)

    def split_steps(self) -> list["Timeline"]:
        """One timeline per step when the source has steps, else ``[self]``.

        Waits are given to the step whose op span contains their start.
        """
        steps = np.unique(self.step[self.step >= 0]) if len(self) else np.zeros(0, np.int32)
        if len(steps) <= 1:
            return [self]
        out = []
        outside = self.step < 0
        # said once, on the first step's capture: the ops outside every step are in none
        note = []
        if outside.any():
            op_us = int((self.end_ns[outside] - self.start_ns[outside]).sum()) / 1000
            note = [f"skipped {int(outside.sum())} op(s) outside every step ({op_us:,.3f} us "
                    f"of op time): no capture holds them; --no-steps analyses the file as one "
                    f"capture"]
        for st in steps:
            m = self.step == st
            lo, hi = int(self.start_ns[m].min()), int(self.end_ns[m].max())
            wm = (self.wait_start_ns >= lo) & (self.wait_start_ns <= hi)
            meta = dict(self.meta)
            meta["step"] = int(st)
            first = {"warnings": self.warnings + note} if note and not out else {}
            out.append(self.select(m, wm, meta=meta, **first))
        return out


@dataclass(frozen=True)
class OpAttrs:
    """An op's facts besides its stream, name and times (see :class:`Timeline` for the
    columns): -1 / "" / None where the source does not say."""

    type: str = ""
    kind: int = KIND_COMPUTE
    core: int = 0
    block_dim: int = -1
    mix_block_dim: int = -1
    step: int = -1
    shapes: str | None = None
    sm_share: float | None = None


class TimelineBuilder:
    """Collects ops and waits row by row (readers of small or irregular sources) or as
    whole columns (vectorised readers), then builds a sorted, validated :class:`Timeline`.
    """

    def __init__(self, source: str, fmt: str) -> None:
        self.source = source
        self.format = fmt
        self.streams = Interner()
        self.names = Interner()
        self.types = Interner()
        self._rows: list[tuple] = []
        self._waits: list[tuple] = []
        self._shapes: list[str] = []
        self._has_shapes = False
        self._sm_share: list[float] = []
        self.device = DeviceInfo()
        self.warnings: list[str] = []
        self.meta: dict = {}

    def add_op(self, stream: str, name: str, start_ns: int, end_ns: int, **attrs) -> None:
        """Add one op; ``attrs`` are the fields of :class:`OpAttrs` (type, kind, core,
        block dims, step, shapes, SM share), each defaulting to "unknown"."""
        a = OpAttrs(**attrs)
        self._sm_share.append(float("nan") if a.sm_share is None else float(a.sm_share))
        self._rows.append((self.streams.code(stream), self.names.code(name),
                           self.types.code(a.type), start_ns, end_ns, a.kind, a.core,
                           a.block_dim, a.mix_block_dim, a.step))
        if a.shapes is not None:
            self._has_shapes = True
        self._shapes.append(a.shapes or "")

    def add_wait(self, stream: str, start_ns: int, end_ns: int, *, on_stream: str | None = None,
                 name: str = "wait") -> None:
        on = -1 if on_stream is None else self.streams.code(on_stream)
        self._waits.append((self.streams.code(stream), on, start_ns, end_ns, self.names.code(name)))

    def build(self) -> Timeline:
        n = len(self._rows)
        if n:
            cols = list(zip(*self._rows))
        else:
            cols = [()] * 10
        ops = dict(
            stream=np.array(cols[0], np.int32), name=np.array(cols[1], np.int32),
            type=np.array(cols[2], np.int32), start_ns=np.array(cols[3], np.int64),
            end_ns=np.array(cols[4], np.int64), kind=np.array(cols[5], np.int8),
            core=np.array(cols[6], np.int8), block_dim=np.array(cols[7], np.int32),
            mix_block_dim=np.array(cols[8], np.int32), step=np.array(cols[9], np.int32),
            sm_share=np.array(self._sm_share, np.float64),
        )
        w = list(zip(*self._waits)) if self._waits else [()] * 5
        waits = dict(
            wait_stream=np.array(w[0], np.int32), wait_on=np.array(w[1], np.int32),
            wait_start_ns=np.array(w[2], np.int64), wait_end_ns=np.array(w[3], np.int64),
            wait_name=np.array(w[4], np.int32),
        )
        return make_timeline(self.source, self.format, self.streams.values, self.names.values,
                             self.types.values, ops, waits,
                             shapes=self._shapes if self._has_shapes else None,
                             device=self.device, warnings=self.warnings, meta=self.meta)


@dataclass(frozen=True)
class CaptureFacts:
    """What a capture carries besides its op and wait columns: input shapes per op (in
    the ops' given order), the device, warnings met while reading, and free-form facts."""

    shapes: "np.ndarray | list[str] | None" = None
    device: DeviceInfo | None = None
    warnings: list[str] | None = None
    meta: dict | None = None


def make_timeline(source: str, fmt: str, streams: Sequence[str], names: Sequence[str],
                  types: Sequence[str], ops: dict, waits: dict | None = None,
                  **facts) -> Timeline:
    """Validate and sort columns into a :class:`Timeline`; ``facts`` are the fields of
    :class:`CaptureFacts` (shapes, device, warnings, meta).

    Ops with a negative duration are dropped with a warning (a zero-length op is kept:
    profilers emit them for tiny tasks). Ops are sorted by (start, end, stream) so every
    metric can rely on start order; waits by start, negative ones dropped likewise.
    """
    f = CaptureFacts(**facts)
    warnings = list(f.warnings or [])
    idx, cols = _sorted_ops(source, ops, warnings)
    shapes = None if f.shapes is None else np.asarray(f.shapes, dtype=object)[idx]
    w_cols = _sorted_waits(waits or {}, warnings)
    return Timeline(source=source, format=fmt, streams=list(streams), names=list(names),
                    types=list(types), shapes=shapes, device=f.device or DeviceInfo(),
                    warnings=warnings, meta=dict(f.meta or {}), **cols, **w_cols)


def _sorted_ops(source: str, ops: dict, warnings: list[str]) -> tuple[np.ndarray, dict]:
    """The op columns without negative-duration ops, in (start, end, stream) order, and
    the row order taken from ``ops``; optional columns that know nothing become None.
    Raises InputError when no op is left."""
    start = np.asarray(ops["start_ns"], np.int64)
    end = np.asarray(ops["end_ns"], np.int64)
    bad = end < start
    if bad.size and bad.all():  # nothing left to analyse is bad input, not a warning
        from ..errors import InputError

        raise InputError(source, f"all {int(bad.size)} op(s) have a negative duration "
                                 "(end before start)")
    if bad.any():
        warnings.append(f"skipped {int(bad.sum())} op(s) with a negative duration")
    keep = ~bad
    order = np.lexsort((np.asarray(ops["stream"])[keep], end[keep], start[keep]))
    idx = np.flatnonzero(keep)[order]
    cols = {k: np.asarray(v)[idx] for k, v in ops.items()}
    if cols.get("launch_ns") is not None and not (cols["launch_ns"] >= 0).any():
        cols["launch_ns"] = None
    if cols.get("sm_share") is not None and not np.isfinite(cols["sm_share"]).any():
        cols["sm_share"] = None
    return idx, cols


def _sorted_waits(waits: dict, warnings: list[str]) -> dict:
    """The wait columns without negative-duration waits, in start order (stable)."""
    if not waits or not len(waits.get("wait_start_ns", ())):
        return {}
    ws = np.asarray(waits["wait_start_ns"], np.int64)
    we = np.asarray(waits["wait_end_ns"], np.int64)
    wk = we >= ws
    if (~wk).any():
        warnings.append(f"skipped {int((~wk).sum())} wait(s) with a negative duration")
    wo = np.argsort(ws[wk], kind="stable")
    w_idx = np.flatnonzero(wk)[wo]
    return {k: np.asarray(v)[w_idx] for k, v in waits.items()}
