"""Stream assignment algorithms. Each returns a :class:`Plan` with minimal events.

- ``single``: everything on stream 0 (the baseline);
- ``matching``: Nimble's construction: transitive reduction, maximum bipartite matching on
  its edges (each matched edge keeps two ops on one stream, so no wait is needed between
  them), the resulting minimum chain cover as streams; mutually unreachable ops never share a
  stream. With a cap, the chains that overlap least in an as-soon-as-possible schedule are
  merged until the cap holds, the chain carrying the critical path staying on stream 0;
- ``critical-path``: the longest path by estimated duration on stream 0, the other ops'
  chains beside it, merged like matching's (least ASAP overlap first) until the cap holds;
- ``resource-split``: compute-bound ops on stream 0, memory- and communication-bound ops on
  stream 1;
- ``manual``: the user's pattern -> stream mapping (e.g. ``{"FlashAttention": 0,
  "MLP gate": 1}``), completed with events.

Streams are reused across layers: the count never grows with depth beyond the cap.
"""

from __future__ import annotations

import fnmatch
from collections import deque
from typing import Callable, Iterator

from ..graph.headroom import critical_path as longest_path
from ..graph.ir import Graph, validate
from .model import Plan, PlanError
from .sync import minimal_events

ALGORITHMS = ("single", "matching", "critical-path", "resource-split", "manual")


# ------------------------------------------------------------------ graph helpers
def successors(graph: Graph) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {o.name: set() for o in graph.ops}
    for e in graph.edges:
        out[e.src].add(e.dst)
    return out


def transitive_reduction(order: list[str], succ: dict[str, set[str]]) -> dict[str, list[str]]:
    """Edges of the transitive reduction (bitset reachability, reverse topological order)."""
    idx = {n: i for i, n in enumerate(order)}
    reach = [0] * len(order)
    red: dict[str, list[str]] = {}
    for n in reversed(order):
        r, kept = 0, []
        for v in sorted(succ[n], key=idx.__getitem__):
            j = idx[v]
            if (r >> j) & 1:  # reachable through an earlier successor: redundant edge
                continue
            kept.append(v)
            r |= (1 << j) | reach[j]
        reach[idx[n]] = r
        red[n] = kept
    return red


def max_matching(order: list[str], adj: dict[str, list[str]]) -> dict[str, str]:
    """Hopcroft-Karp maximum matching of the bipartite graph (u as left, v as right) of
    ``adj``; returns left -> right. Deterministic for a given order."""
    match_l: dict[str, str] = {}
    match_r: dict[str, str] = {}
    inf = len(order) + 1
    while True:
        dist, found = _layers(order, adj, match_l, match_r)
        if not found:
            return match_l
        for u in order:
            if u not in match_l:
                _augment(u, adj, dist, (match_l, match_r), inf)


def _layers(order: list[str], adj: dict[str, list[str]], match_l: dict[str, str],
            match_r: dict[str, str]) -> tuple[dict[str, int], bool]:
    """One phase's BFS from the free left vertices: each reached left vertex's layer, and
    whether a free right vertex was reached (an augmenting path exists)."""
    dist: dict[str, int] = {}
    q: deque[str] = deque()
    for u in order:
        if u not in match_l:
            dist[u] = 0
            q.append(u)
    found = False
    while q:
        u = q.popleft()
        for v in adj.get(u, ()):
            w = match_r.get(v)
            if w is None:
                found = True
            elif w not in dist:
                dist[w] = dist[u] + 1
                q.append(w)
    return dist, found


def _augment(u: str, adj: dict[str, list[str]], dist: dict[str, int],
             matching: tuple[dict[str, str], dict[str, str]], inf: int) -> None:
    """Iterative DFS from free ``u`` along layered alternating paths; the first augmenting
    path found is flipped into ``matching`` (left -> right, right -> left). A dead end is
    marked ``inf`` for the rest of the phase."""
    match_l, match_r = matching
    stack = [(u, iter(adj.get(u, ())))]
    path: list[tuple[str, str]] = []
    while stack:
        x, it = stack[-1]
        step = _next_edge(x, it, dist, match_r, inf)
        if step is None:  # dead end for this phase
            stack.pop()
            dist[x] = inf
            if path:
                path.pop()
            continue
        v, w = step
        path.append((x, v))
        if w is None:
            for a, b in path:
                match_l[a] = b
                match_r[b] = a
            return
        stack.append((w, iter(adj.get(w, ()))))


def _next_edge(x: str, it: Iterator[str], dist: dict[str, int], match_r: dict[str, str],
               inf: int) -> tuple[str, str | None] | None:
    """The next edge ``x -> v`` of ``it``: to a free ``v`` (``w`` None) or to one matched
    to ``w`` one layer deeper; None when ``it`` is exhausted."""
    for v in it:
        w = match_r.get(v)
        if w is None or dist.get(w, inf) == dist[x] + 1:
            return v, w
    return None


def chains(order: list[str], matching: dict[str, str]) -> list[list[str]]:
    """Chains of matched edges, in issue order of their first op."""
    has_pred = set(matching.values())
    out = []
    for n in order:
        if n in has_pred:
            continue
        c = [n]
        while c[-1] in matching:
            c.append(matching[c[-1]])
        out.append(c)
    return out


def asap(order: list[str], preds: dict[str, list[str]],
         dur: dict[str, float]) -> dict[str, tuple[float, float]]:
    """As-soon-as-possible start/end of every op with unlimited streams (``preds``:
    :meth:`Graph.predecessor_names`)."""
    t: dict[str, tuple[float, float]] = {}
    for n in order:
        s = max((t[p][1] for p in preds[n]), default=0.0)
        t[n] = (s, s + dur[n])
    return t


def critical_path(order: list[str], preds: dict[str, list[str]],
                  dur: dict[str, float]) -> list[str]:
    """The longest path by duration: the headroom bound's own (graph.headroom)."""
    return longest_path(order, preds, dur)[1]


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total time two sorted interval lists overlap."""
    i = j = 0
    t = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            t += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return t


def merge_chains(cs: list[list[str]], cap: int, order: list[str], times: dict[str, tuple[float, float]],
                 main: set[str]) -> list[list[str]]:
    """Merge chains until at most ``cap`` remain: repeatedly fold the chain with the least
    work into the chain it overlaps least in the ASAP schedule (the concurrency lost is that
    overlap, ties to the chain with least work). The chain with most critical-path work is
    stream 0 and is never folded away; with no ``main`` ops no chain is kept first, and the
    chains come in the order of their first ops."""
    idx = {n: i for i, n in enumerate(order)}
    work = [sum(times[n][1] - times[n][0] for n in c) for c in cs]
    head = max(range(len(cs)), key=lambda i: (sum(1 for n in cs[i] if n in main), work[i], -i)) \
        if main else None
    groups = [sorted(c, key=idx.__getitem__) for c in cs]
    iv = [sorted(times[n] for n in c) for c in groups]
    alive = list(range(len(groups)))
    while len(alive) > max(1, cap):
        small = min((i for i in alive if i != head), key=lambda i: (work[i], i))
        target = min((j for j in alive if j != small),
                     key=lambda j: (_overlap(iv[small], iv[j]), j != head, work[j], j))
        groups[target] = sorted(groups[target] + groups[small], key=idx.__getitem__)
        iv[target] = sorted(iv[target] + iv[small])
        work[target] += work[small]
        alive.remove(small)
    ordered = ([head] if head is not None else []) \
        + sorted((i for i in alive if i != head), key=lambda i: idx[groups[i][0]])
    return [groups[i] for i in ordered]


# ------------------------------------------------------------------ algorithms
def plan_from_assignment(graph: Graph, assignment: dict[str, int], algorithm: str = "manual",
                         name: str | None = None, *, order: list[str] | None = None,
                         **meta) -> Plan:
    """The plan of a stream assignment: its minimal events (plan.sync) and the streams it
    uses; ``order`` is the graph's validated topological order when the caller has it."""
    events, lay = minimal_events(graph, assignment, order)
    return Plan(name=name or algorithm, algorithm=algorithm, assignment=assignment, events=events,
                streams=len([s for s in lay.streams if lay.count[s]]), meta=meta)


def plan_single(graph: Graph, order: list[str], **_) -> Plan:
    return plan_from_assignment(graph, {n: 0 for n in order}, "single", order=order)


def plan_matching(graph: Graph, order: list[str], dur: dict[str, float], max_streams: int | None,
                  **_) -> Plan:
    red = transitive_reduction(order, successors(graph))
    cs = chains(order, max_matching(order, red))
    preds = graph.predecessor_names()
    times = asap(order, preds, dur)
    main = set(critical_path(order, preds, dur))
    width = len(cs)
    cs = merge_chains(cs, max_streams or len(cs), order, times, main)
    assignment = {n: s for s, c in enumerate(cs) for n in c}
    return plan_from_assignment(graph, assignment, "matching", order=order,
                                chain_cover=width, cap=max_streams)


def plan_critical_path(graph: Graph, order: list[str], dur: dict[str, float],
                       max_streams: int | None, **_) -> Plan:
    """The longest path on stream 0; the other ops' chain cover beside it, folded by
    :func:`merge_chains` (least overlap in the ASAP schedule lost first) until the side
    streams fit ``max_streams - 1``. No cap: one side stream per chain."""
    preds = graph.predecessor_names()
    path = set(critical_path(order, preds, dur))
    red = transitive_reduction(order, successors(graph))
    rest = [n for n in order if n not in path]
    sub = {n: [v for v in red[n] if v not in path] for n in rest}
    cs = chains(rest, max_matching(rest, sub))
    assignment = dict.fromkeys(order, 0)
    sides = (max_streams - 1) if max_streams else len(cs)
    if cs and sides > 0:  # a cap of one stream leaves nothing beside the path
        # (a round robin put chains that run at the same time on one side stream and
        # chains that never meet on two)
        cs = merge_chains(cs, sides, order, asap(order, preds, dur), set())
        for s, c in enumerate(cs, start=1):
            assignment.update(dict.fromkeys(c, s))
    return plan_from_assignment(graph, assignment, "critical-path", order=order)


def plan_resource_split(graph: Graph, order: list[str], bound: dict[str, str],
                        max_streams: int | None = None, **_) -> Plan:
    assignment = {n: (1 if bound.get(n) in ("memory", "comm") else 0) for n in order}
    if len(set(assignment.values())) < 2 or max_streams == 1:
        # one class only, or one stream allowed: nothing to split, stream 0 it is
        assignment = dict.fromkeys(order, 0)
    return plan_from_assignment(graph, assignment, "resource-split", order=order)


def plan_manual(graph: Graph, order: list[str], mapping: dict[str, int] | None,
                max_streams: int | None = None, **_) -> Plan:
    if not mapping:
        raise PlanError("the manual algorithm needs a mapping (pattern -> stream)")
    ops = graph.index()
    hits: dict[str, list[str]] = {p: [] for p in mapping}
    assignment: dict[str, int] = {}
    for n in order:
        o = ops[n]
        fields = (o.name, o.module, o.type)
        best = None
        for p in mapping:
            if _matches(p, fields) and (best is None or len(p) > len(best)):
                best = p
        if best is not None:
            hits[best].append(n)
            assignment[n] = int(mapping[best])
        else:
            assignment[n] = 0
    unknown = [p for p, h in hits.items() if not h]
    # a pattern that only lost to longer ones still names ops: it is not unknown
    unknown = [p for p in unknown
               if not any(_matches(p, (ops[n].name, ops[n].module, ops[n].type)) for n in order)]
    if unknown:
        raise PlanError(f"manual mapping names that match no op: {', '.join(map(repr, unknown))}")
    plan = plan_from_assignment(graph, assignment, "manual", order=order, mapping=dict(mapping))
    if max_streams is not None and plan.stream_count() > max_streams:
        # the algorithms keep to the cap; a mapping names its streams itself
        raise PlanError(f"the mapping puts ops on {plan.stream_count()} streams, above "
                        f"--max-streams {max_streams}")
    return plan


def _matches(pattern: str, fields: tuple[str, ...]) -> bool:
    p = pattern.lower()
    for f in fields:
        f = f.lower()
        if p in f or fnmatch.fnmatchcase(f, p):
            return True
    return False


_PLANNERS: dict[str, Callable[..., Plan]] = {
    "single": plan_single, "matching": plan_matching, "critical-path": plan_critical_path,
    "resource-split": plan_resource_split, "manual": plan_manual,
}


def assign(graph: Graph, algorithm: str, *, durations: dict[str, float] | None = None,
           bound: dict[str, str] | None = None, max_streams: int | None = None,
           mapping: dict[str, int] | None = None, order: list[str] | None = None) -> Plan:
    """Run one assignment algorithm on ``graph`` (``order``: its validated topological
    order, when the caller has it).

    ``durations`` (us per op) drive the critical path and chain merging (default: each op's
    ``meta["dur_us"]`` or 1); ``bound`` ("compute"/"memory"/"comm" per op) drives
    resource-split (default: from the op's resource class).
    """
    if algorithm not in _PLANNERS:
        raise PlanError(f"unknown algorithm {algorithm!r} (expected one of {', '.join(ALGORITHMS)})")
    if max_streams is not None and max_streams < 1:
        raise PlanError("--max-streams must be at least 1")
    order = order or validate(graph)
    dur = durations or {o.name: float(o.meta.get("dur_us", 1.0)) for o in graph.ops}
    if bound is None:
        bound = {o.name: {"memory": "memory", "comm": "comm"}.get(o.resource, "compute")
                 for o in graph.ops}
    return _PLANNERS[algorithm](graph, order, dur=dur, bound=bound, max_streams=max_streams,
                                mapping=mapping)
