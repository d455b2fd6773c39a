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
  the launch overhead it adds: stay single stream (seed 003: "batch=1 gains nothing").
"""

from __future__ import annotations

from bisect import bisect_left

from ..graph.ir import Graph, validate
from .hb import Layout, clocks, layout
from .model import SPEEDUP_MARGIN, Lint, Plan

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


def lint(graph: Graph, plan: Plan, dur: dict[str, float], *, hw_queues: int | None = None,
         max_streams: int | None = None, launch_us: float = 0.0,
         big_tensor_bytes: int = BIG_TENSOR_BYTES, speedup: float | None = None,
         order: list[str] | None = None) -> list[Lint]:
    """All lints of ``plan`` (most severe first); ``order``: the graph's validated order."""
    order = order or validate(graph)
    lay = layout(graph, plan.assignment, order)
    op_clock, end = clocks(lay, plan.events)
    ops = graph.index()
    idx = {n: i for i, n in enumerate(order)}
    out: list[Lint] = []
    n_streams = len([s for s in lay.streams if lay.count[s]])

    if max_streams is not None and n_streams > max_streams:
        out.append(Lint("streams-exceed-limit", "error", [],
                        f"{n_streams} streams, the device allows {max_streams}",
                        "cap the streams (--max-streams) or reuse one side stream across layers"))
    if hw_queues is not None and n_streams > hw_queues:
        out.append(Lint("streams-exceed-queues", "warning", [],
                        f"{n_streams} streams on a device with {hw_queues} hardware queues: "
                        f"the extra streams add no parallelism",
                        f"use at most {hw_queues} streams"))

    reach = None
    seen: dict[tuple[int, int], list[int]] = {}
    joined: dict[tuple[int, int], list[tuple[str, str, str]]] = {}
    by_stream: dict[int, list[str]] = {}
    for n in order:
        by_stream.setdefault(lay.stream_of[n], []).append(n)
    for e in graph.edges:
        if e.type != "data":
            continue
        su, sv = lay.stream_of[e.src], lay.stream_of[e.dst]
        if su == sv:
            continue
        size = sum(t.bytes for t in ops[e.src].outputs)
        if size > big_tensor_bytes:
            out.append(Lint("big-cross-stream-tensor", "warning", [e.src, e.dst],
                            f"{size / 1e6:.1f} MB cross from stream {su} to {sv} "
                            f"({e.src} -> {e.dst})",
                            "keep cross-stream tensors small (tens of elements per token) or "
                            "move the consumer to the producer's stream"))
        # joined back: some later op on the producer's stream waits (transitively) for the reader
        join = _first_waiting(lay, op_clock, by_stream, seen, su, sv, e.src, e.dst)
        if join is None and su == 0 and end[lay.slot[sv]] >= lay.pos[e.dst]:
            join = "the end of the origin stream"
        if join is None:
            out.append(Lint("cross-stream-lifetime", "warning", [e.src, e.dst],
                            f"the output of {e.src} (stream {su}) is read on stream {sv} by "
                            f"{e.dst} and its stream never joins back to stream {su}",
                            f"call record_stream(stream {sv}) on it, or join stream {sv} back"))
        else:
            joined.setdefault((su, sv), []).append((e.src, e.dst, join))
        # GE reorder risk: a cheap consumer of a side output on the main stream
        if sv == 0 and su != 0 and is_cheap(ops[e.dst].type):
            if reach is None:
                reach = reach_sets(graph, order)
            v = e.dst
            cands = [d for d in by_stream[0]
                     if d != v and not (reach[d] >> idx[v]) & 1 and not (reach[v] >> idx[d]) & 1
                     and dur.get(d, 0.0) > 2 * dur.get(v, 0.0)]
            if cands:
                d = max(cands, key=lambda x: (dur.get(x, 0.0), -idx[x]))
                out.append(Lint("ge-reorder", "warning", [e.src, v, d],
                                f"{v} ({ops[v].type}) consumes side output {e.src} on the main "
                                f"stream and does not depend on the dominator {d}: GE may issue it "
                                f"ahead of {d}, so main waits for the side stream (false parallel)",
                                f"pin {v} inside the side-stream block (compute it on stream {su})"))

    for (su, sv), pairs in joined.items():
        src, dst, join = pairs[0]
        out.append(Lint("cross-stream-lifetime", "info", sorted({x for p in pairs for x in p[:2]})[:10],
                        f"{len(pairs)} tensor(s) made on stream {su} and read on stream {sv} are "
                        f"joined back to stream {su} (e.g. {src} -> {dst}, joined at {join}); "
                        f"any freed before the join needs record_stream",
                        "record_stream for short-lived tensors; nothing for weights and caches"))
    if speedup is not None and speedup < 1 + SPEEDUP_MARGIN and n_streams > 1:
        out.append(Lint("too-small", "warning", [],
                        f"estimated speedup {speedup:.3f}x: the parallel branches are too small "
                        f"or too serial to gain", "stay single stream (keep the switch off)"))
    if launch_us > 0:
        for s in lay.streams:
            if s == 0 or not lay.count[s]:
                continue
            work = sum(dur[n] for n in by_stream[s])
            if work < launch_us * lay.count[s]:
                out.append(Lint("too-small", "info", by_stream[s][:5],
                                f"stream {s} does {work:.1f} us of work in {lay.count[s]} op(s), "
                                f"less than their launch overhead", "keep these ops on stream 0"))
    rank = {"error": 0, "warning": 1, "info": 2}
    out.sort(key=lambda x: rank[x.severity])
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
