"""Minimal synchronisation for an assignment: the fewest waits that order every
cross-stream dependency and rejoin every side stream.

Walk the ops in issue order with vector clocks; before an op, wait only for a predecessor
on another stream that is not already ordered by earlier waits (the latest predecessor per
stream first, since waiting for it usually orders the earlier ones too); at the end, join
each side stream whose last op the origin stream does not already follow. A last pass drops
any wait that the other waits at the same op already imply. An event is recorded only after
ops some wait needs.
"""

from __future__ import annotations

import numpy as np

from ..graph.ir import Graph, validate
from .hb import Layout, layout
from .model import Event


def minimal_events(graph: Graph, assignment: dict[str, int],
                   order: list[str] | None = None) -> tuple[list[Event], Layout]:
    """The waits for ``assignment``, and its layout."""
    lay = layout(graph, assignment, order or validate(graph))
    k = len(lay.streams)
    preds: dict[str, list[str]] = {}
    for e in graph.edges:
        if lay.stream_of[e.src] != lay.stream_of[e.dst]:
            preds.setdefault(e.dst, []).append(e.src)
    stream_clock = {s: np.zeros(k, np.int64) for s in lay.streams}
    op_clock: dict[str, np.ndarray] = {}
    waits: dict[str | None, list[str]] = {}
    for n in lay.order:
        s = lay.stream_of[n]
        c = stream_clock[s].copy()
        # the latest predecessor on each other stream is the only one that can need a wait
        latest: dict[int, str] = {}
        for p in preds.get(n, ()):
            sp = lay.stream_of[p]
            if sp not in latest or lay.pos[p] > lay.pos[latest[sp]]:
                latest[sp] = p
        for p in sorted(latest.values(), key=lambda x: -lay.issue[x]):
            if c[lay.slot[lay.stream_of[p]]] < lay.pos[p]:
                np.maximum(c, op_clock[p], out=c)
                waits.setdefault(n, []).append(p)
        c[lay.slot[s]] = lay.pos[n]
        op_clock[n] = c
        stream_clock[s] = c
    end = stream_clock[0].copy()
    for s in sorted((x for x in lay.streams if x != 0 and lay.count[x]),
                    key=lambda x: -lay.issue[lay.last[x]]):
        if end[lay.slot[s]] < lay.count[s]:
            np.maximum(end, op_clock[lay.last[s]], out=end)
            waits.setdefault(None, []).append(lay.last[s])
    _drop_implied(lay, op_clock, stream_clock_before(lay, op_clock), waits)
    events = [Event(record_after=p, wait_before=n) for n in lay.order for p in waits.get(n, ())]
    events += [Event(record_after=p, wait_before=None) for p in waits.get(None, ())]
    return events, lay


def stream_clock_before(lay: Layout, op_clock: dict[str, np.ndarray]) -> dict[str | None, np.ndarray]:
    """Each op's stream clock just before its waits (the previous op on its stream)."""
    k = len(lay.streams)
    prev = {s: np.zeros(k, np.int64) for s in lay.streams}
    out: dict[str | None, np.ndarray] = {}
    for n in lay.order:
        s = lay.stream_of[n]
        out[n] = prev[s]
        prev[s] = op_clock[n]
    out[None] = prev[0]
    return out


def _drop_implied(lay: Layout, op_clock: dict[str, np.ndarray],
                  before: dict[str | None, np.ndarray], waits: dict[str | None, list[str]]) -> None:
    """Remove waits that the other waits at the same op already imply.

    Dropping such a wait leaves that op's clock unchanged, so no other op is affected.
    """
    for n, ps in waits.items():
        if len(ps) < 2:
            continue
        keep = list(ps)
        for p in list(ps):
            others = [q for q in keep if q != p]
            c = before[n].copy()
            for q in others:
                np.maximum(c, op_clock[q], out=c)
            if c[lay.slot[lay.stream_of[p]]] >= lay.pos[p]:
                keep = others
        ps[:] = keep
