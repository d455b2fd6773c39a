"""Happens-before on a plan: vector clocks over the host's issue order.

The host issues ops in the graph's program order. On each stream ops run in that order; a
wait before op Y on event E (recorded after op X) makes everything up to X happen before Y.
A vector clock per op (one component per stream: how many ops of that stream are known to
have finished) decides "X happens before Y" in O(1), which is all the validator and the
event minimiser need.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph.ir import Graph, validate
from .model import Event, Plan, PlanError


@dataclass
class Layout:
    """Issue order and per-stream positions of a plan's ops."""

    order: list[str]
    issue: dict[str, int]
    stream_of: dict[str, int]
    streams: list[int]  # stream ids in use, 0 first
    slot: dict[int, int]  # stream id -> vector-clock component
    pos: dict[str, int]  # 1-based position of the op on its stream
    count: dict[int, int]  # ops per stream
    last: dict[int, str]  # last op of each stream


def layout(graph: Graph, assignment: dict[str, int], order: list[str] | None = None) -> Layout:
    """Check the assignment covers exactly the graph's ops and lay them out."""
    order = order or validate(graph)
    names = set(order)
    unknown = sorted(set(assignment) - names)
    if unknown:
        raise PlanError(f"assignment names op(s) not in the graph: {', '.join(unknown[:10])}")
    missing = [n for n in order if n not in assignment]
    if missing:
        raise PlanError(f"op(s) without a stream: {', '.join(missing[:10])}"
                        + (" ..." if len(missing) > 10 else ""))
    streams = sorted(set(assignment.values()) | {0})
    if streams[0] < 0:
        raise PlanError(f"negative stream id {streams[0]}")
    slot = {s: i for i, s in enumerate(streams)}
    pos: dict[str, int] = {}
    count = {s: 0 for s in streams}
    last: dict[int, str] = {}
    for n in order:
        s = assignment[n]
        count[s] += 1
        pos[n] = count[s]
        last[s] = n
    return Layout(order, {n: i for i, n in enumerate(order)}, dict(assignment), streams, slot,
                  pos, count, last)


def clocks(lay: Layout, events: list[Event]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Vector clock of every op (after it ran) and of the origin stream after the final joins.

    Raises PlanError for an event on an unknown op, or one whose wait is issued before its
    record (the wait would not see it: a race, or a waiting cycle).
    """
    k = len(lay.streams)
    waits_at: dict[str | None, list[Event]] = {}
    for e in events:
        if e.record_after not in lay.issue:
            raise PlanError(f"event records after unknown op {e.record_after!r}")
        if e.wait_before is not None:
            if e.wait_before not in lay.issue:
                raise PlanError(f"event waits before unknown op {e.wait_before!r}")
            if lay.issue[e.record_after] >= lay.issue[e.wait_before]:
                raise PlanError(
                    f"waiting cycle: {e.wait_before!r} waits for an event recorded after "
                    f"{e.record_after!r}, which is issued later (the wait cannot see it)")
        waits_at.setdefault(e.wait_before, []).append(e)
    stream_clock = {s: np.zeros(k, np.int64) for s in lay.streams}
    op_clock: dict[str, np.ndarray] = {}
    for n in lay.order:
        s = lay.stream_of[n]
        c = stream_clock[s].copy()
        for e in waits_at.get(n, ()):
            np.maximum(c, op_clock[e.record_after], out=c)
        c[lay.slot[s]] = lay.pos[n]
        op_clock[n] = c
        stream_clock[s] = c
    end = stream_clock[0].copy()
    for e in waits_at.get(None, ()):
        np.maximum(end, op_clock[e.record_after], out=end)
    return op_clock, end


def happens_before(lay: Layout, op_clock: dict[str, np.ndarray], u: str, v: str) -> bool:
    """Does op ``u`` finish before op ``v`` starts in every execution of the plan?"""
    su = lay.stream_of[u]
    if su == lay.stream_of[v]:
        return lay.pos[u] < lay.pos[v]
    return bool(op_clock[v][lay.slot[su]] >= lay.pos[u])


def check(graph: Graph, plan: Plan, order: list[str] | None = None) -> Layout:
    """Prove a plan safe or raise PlanError naming the ops.

    Safe means: every dependency edge (data, state, event, collective_order) that crosses
    streams is ordered by a chain of events; no wait can deadlock; and every side stream
    rejoins the origin stream before the end (so graph capture can close).
    """
    lay = layout(graph, plan.assignment, order)
    op_clock, end = clocks(lay, plan.events)
    for e in graph.edges:
        if not happens_before(lay, op_clock, e.src, e.dst):
            raise PlanError(f"unordered {e.type} dependency {e.src!r} (stream "
                            f"{lay.stream_of[e.src]}) -> {e.dst!r} (stream {lay.stream_of[e.dst]}):"
                            f" no event chain between them")
    for s in lay.streams:
        if s != 0 and lay.count[s] and end[lay.slot[s]] < lay.count[s]:
            raise PlanError(f"side stream {s} never rejoins stream 0: its last op "
                            f"{lay.last[s]!r} is not waited on before the end")
    return lay
