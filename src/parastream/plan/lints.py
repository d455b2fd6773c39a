"""Lints for the known multi-stream traps, each with a rule id, a
severity, the ops involved and a fix.

- ``ge-reorder``: a side-stream output consumed on the main stream by a cheap precompute
  (Cast, view-like, SiLU/Swish, Sigmoid, Mul) that does not depend on the main dominator:
  GE may issue it ahead of the dominator and serialise the streams (false parallelism);
- ``cross-stream-lifetime``: a tensor made on one stream and read on another is either
  joined back to its producer's stream (safe) or needs ``record_stream``;
- ``big-cross-stream-tensor``: a cross-stream tensor above the size threshold;
- ``streams-exceed-queues`` / ``streams-exceed-limit``: more streams than hardware queues
  (no extra parallelism) or than the device allows;
- ``too-small``: the estimated gain is below 5%, or a side stream's work is smaller than
  the launch overhead it adds: stay single stream.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from ..graph.ir import Graph, validate
from .hb import Layout, clocks, layout
from .model import SPEEDUP_MARGIN, Lint, Plan

#: lints sort most severe first
SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}

#: op types a graph compiler treats as cheap precomputes it may hoist (lower-case, prefixes)
CHEAP_PRECOMPUTE = ("cast", "_to_copy", "to", "reshape", "view", "_unsafe_view", "silu",
                    "swish", "sigmoid", "mul", "expand", "permute", "transpose", "t",
                    "contiguous", "unsqueeze", "squeeze", "flatten", "clone")
BIG_TENSOR_BYTES = 1 << 20


def is_cheap(op_type: str) -> bool:
    t = op_type.lower().split(".")[0]
    return t in CHEAP_PRECOMPUTE


def reach_sets(graph: Graph, order: list[str]) -> dict[str, int]:
    """Descendants of every op as a bitset over ``order``."""
    idx = {n: i for i, n in enumerate(order)}
    succ: dict[str, list[str]] = {n: [] for n in order}
    for e in graph.edges:
        succ[e.src].append(e.dst)
    reach: dict[str, int] = {}
    for n in reversed(order):
        r = 0
        for v in succ[n]:
            r |= (1 << idx[v]) | reach[v]
        reach[n] = r
    return reach


@dataclass(frozen=True)
class LintSettings:
    """What :func:`lint` checks a plan against (None / 0: that check is off)."""

    #: the device's hardware queues (``streams-exceed-queues``)
    hw_queues: int | None = None
    #: the streams the device allows (``streams-exceed-limit``)
    max_streams: int | None = None
    #: the per-op launch overhead a side stream's work must beat (``too-small``)
    launch_us: float = 0.0
    #: the size above which a cross-stream tensor is flagged
    big_tensor_bytes: int = BIG_TENSOR_BYTES
    #: the plan's estimated speedup (``too-small`` below ``1 + SPEEDUP_MARGIN``)
    speedup: float | None = None


@dataclass
class _Scan:
    """One plan's layout and happens-before clocks, shared by the per-edge rules."""

    graph: Graph
    order: list[str]
    dur: dict[str, float]
    lay: Layout
    op_clock: Any
    end: Any
    ops: dict[str, Any]
    idx: dict[str, int]
    by_stream: dict[int, list[str]]
    #: per (origin, reader) stream pair: the origin's clocks of the reader (binary search)
    seen: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    reach: dict[str, int] | None = None

    @classmethod
    def of(cls, graph: Graph, plan: Plan, dur: dict[str, float], order: list[str]) -> "_Scan":
        lay = layout(graph, plan.assignment, order)
        op_clock, end = clocks(lay, plan.events)
        by_stream: dict[int, list[str]] = {}
        for n in order:
            by_stream.setdefault(lay.stream_of[n], []).append(n)
        return cls(graph, order, dur, lay, op_clock, end, graph.index(),
                   {n: i for i, n in enumerate(order)}, by_stream)


def lint(graph: Graph, plan: Plan, dur: dict[str, float],
         settings: LintSettings | None = None, *, order: list[str] | None = None,
         reach: dict[str, int] | None = None, **overrides: Any) -> list[Lint]:
    """All lints of ``plan`` (most severe first) against ``settings`` (keyword
    ``overrides`` such as ``hw_queues=4`` replace its fields; TypeError for an unknown
    one); ``order``: the graph's validated order, ``reach`` its :func:`reach_sets` (else
    computed when a rule needs them)."""
    cfg = dataclasses.replace(settings or LintSettings(), **overrides)
    scan = _Scan.of(graph, plan, dur, order or validate(graph))
    scan.reach = reach
    lay = scan.lay
    n_streams = len([s for s in lay.streams if lay.count[s]])
    out = _stream_count_lints(n_streams, cfg)
    joined: dict[tuple[int, int], list[tuple[str, str, str]]] = {}
    for e in graph.edges:
        su, sv = lay.stream_of[e.src], lay.stream_of[e.dst]
        if e.type != "data" or su == sv:
            continue
        out += _big_tensor_lints(scan, e.src, e.dst, cfg.big_tensor_bytes)
        join = _join_of(scan, su, sv, e.src, e.dst)
        if join is None:
            out.append(Lint("cross-stream-lifetime", "warning", [e.src, e.dst],
                            f"the output of {e.src} (stream {su}) is read on stream {sv} by "
                            f"{e.dst} and its stream never joins back to stream {su}",
                            f"call record_stream(stream {sv}) on it, or join stream {sv} back"))
        else:
            joined.setdefault((su, sv), []).append((e.src, e.dst, join))
        if sv == 0 and su != 0 and is_cheap(scan.ops[e.dst].type):
            out += _ge_reorder_lints(scan, e.src, e.dst, su)
    out += _joined_lints(joined)
    out += _too_small_lints(scan, n_streams, cfg)
    out.sort(key=lambda x: SEVERITY_RANK[x.severity])
    return out


def _stream_count_lints(n_streams: int, cfg: LintSettings) -> list[Lint]:
    """More streams than the device allows, or than its hardware queues."""
    out = []
    if cfg.max_streams is not None and n_streams > cfg.max_streams:
        out.append(Lint("streams-exceed-limit", "error", [],
                        f"{n_streams} streams, the device allows {cfg.max_streams}",
                        "cap the streams (--max-streams) or reuse one side stream across layers"))
    if cfg.hw_queues is not None and n_streams > cfg.hw_queues:
        out.append(Lint("streams-exceed-queues", "warning", [],
                        f"{n_streams} streams on a device with {cfg.hw_queues} hardware queues: "
                        f"the extra streams add no parallelism",
                        f"use at most {cfg.hw_queues} streams"))
    return out


def _big_tensor_lints(scan: _Scan, src: str, dst: str, limit: int) -> list[Lint]:
    """A cross-stream tensor (``src`` -> ``dst``) above ``limit`` bytes."""
    size = sum(t.bytes for t in scan.ops[src].outputs)
    if size <= limit:
        return []
    su, sv = scan.lay.stream_of[src], scan.lay.stream_of[dst]
    return [Lint("big-cross-stream-tensor", "warning", [src, dst],
                 f"{size / 1e6:.1f} MB cross from stream {su} to {sv} ({src} -> {dst})",
                 "keep cross-stream tensors small (tens of elements per token) or "
                 "move the consumer to the producer's stream")]


def _join_of(scan: _Scan, su: int, sv: int, src: str, dst: str) -> str | None:
    """Where the reader's stream joins back to the producer's: some later op on ``su``
    waits (transitively) for ``dst``, or stream 0's end does; None when nothing does."""
    lay = scan.lay
    join = _first_waiting(lay, scan.op_clock, scan.by_stream, scan.seen, su, sv, src, dst)
    if join is None and su == 0 and scan.end[lay.slot[sv]] >= lay.pos[dst]:
        join = "the end of the origin stream"
    return join


def _ge_reorder_lints(scan: _Scan, src: str, v: str, su: int) -> list[Lint]:
    """GE reorder risk: ``v``, a cheap consumer of side output ``src`` on the main stream,
    independent of a main-stream op that costs more than twice as much (the dominator)."""
    if scan.reach is None:
        scan.reach = reach_sets(scan.graph, scan.order)
    reach, idx, dur = scan.reach, scan.idx, scan.dur
    cands = [d for d in scan.by_stream[0]
             if d != v and not (reach[d] >> idx[v]) & 1 and not (reach[v] >> idx[d]) & 1
             and dur.get(d, 0.0) > 2 * dur.get(v, 0.0)]
    if not cands:
        return []
    d = max(cands, key=lambda x: (dur.get(x, 0.0), -idx[x]))
    return [Lint("ge-reorder", "warning", [src, v, d],
                 f"{v} ({scan.ops[v].type}) consumes side output {src} on the main "
                 f"stream and does not depend on the dominator {d}: GE may issue it "
                 f"ahead of {d}, so main waits for the side stream (false parallel)",
                 f"pin {v} inside the side-stream block (compute it on stream {su})")]


def _joined_lints(joined: dict[tuple[int, int], list[tuple[str, str, str]]]) -> list[Lint]:
    """One note per stream pair whose cross-stream tensors are joined back."""
    out = []
    for (su, sv), pairs in joined.items():
        src, dst, join = pairs[0]
        out.append(Lint("cross-stream-lifetime", "info", sorted({x for p in pairs for x in p[:2]})[:10],
                        f"{len(pairs)} tensor(s) made on stream {su} and read on stream {sv} are "
                        f"joined back to stream {su} (e.g. {src} -> {dst}, joined at {join}); "
                        f"any freed before the join needs record_stream",
                        "record_stream for short-lived tensors; nothing for weights and caches"))
    return out


def _too_small_lints(scan: _Scan, n_streams: int, cfg: LintSettings) -> list[Lint]:
    """A speedup within the margin, and side streams whose work is below its launch cost."""
    out = []
    if cfg.speedup is not None and cfg.speedup < 1 + SPEEDUP_MARGIN and n_streams > 1:
        out.append(Lint("too-small", "warning", [],
                        f"estimated speedup {cfg.speedup:.3f}x: the parallel branches are too "
                        f"small or too serial to gain", "stay single stream (keep the switch off)"))
    if cfg.launch_us <= 0:
        return out
    lay = scan.lay
    for s in lay.streams:
        if s == 0 or not lay.count[s]:
            continue
        work = sum(scan.dur[n] for n in scan.by_stream[s])
        if work < cfg.launch_us * lay.count[s]:
            out.append(Lint("too-small", "info", scan.by_stream[s][:5],
                            f"stream {s} does {work:.1f} us of work in {lay.count[s]} op(s), "
                            f"less than their launch overhead", "keep these ops on stream 0"))
    return out


def _first_waiting(lay: Layout, op_clock, by_stream: dict[int, list[str]],
                   seen: dict[tuple[int, int], list[int]], su: int, sv: int, src: str,
                   dst: str) -> str | None:
    """The first op on ``su`` after ``src`` that happens after ``dst`` (on ``sv``), if any.

    Clocks only grow along a stream, so a binary search over that stream's view of ``sv``
    finds it."""
    key = (su, sv)
    if key not in seen:
        seen[key] = [int(op_clock[x][lay.slot[sv]]) for x in by_stream[su]]
    view = seen[key]
    i = bisect_left(view, lay.pos[dst], lo=lay.pos[src])  # ops after src (pos is 1-based)
    return by_stream[su][i] if i < len(view) else None
