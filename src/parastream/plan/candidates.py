"""Candidate orchestrations per parallel point, ranked by estimated wall time.

For every parallel point (a fork whose branches have no path between them and meet at a
join) at least two orchestrations that differ in a real way:

- ``side-serial``: the dominating branch stays on stream 0, every other branch runs on ONE
  side stream, one after another; join at the join node (late join);
- ``side-each``: every non-dominating branch on a side stream of its own (2 or 3 streams, up
  to the cap): more concurrency, more events, more core pressure;
- ``early-join``: like ``side-serial`` but stream 0 waits for the side stream right after
  it would have issued the side work, before the rest of its own branch: less overlap,
  shorter tensor lifetimes, no reorder exposure;
- ``pinned``: when a cheap consumer of a side output sits on stream 0 (GE reorder risk), the
  same split with those precomputes pinned inside the side-stream block.

Cross-stage points (:mod:`parastream.plan.stages`: the next layer's independent prologue
beside the current layer) get the same orchestrations.

Streams are reused across parallel points (one shared side stream, or the same few), so a
deep model never uses more streams than the cap. Each candidate gets a description, a
Mermaid DAG with stream ownership and ``-.->`` event edges, its rung on the strength
ladder (:mod:`parastream.plan.ladder`: C2 core limits sized so concurrent block dims fit the
cores, only where the device documents them; C3 where its events are placed right after
producers that are not their stream's tail) and the enable switch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import msgspec

from ..graph.ir import Graph, validate
from ..mdtext import mermaid_label
from .estimate import make_estimate, wall_us
from .ladder import (core_limit_apis, no_core_limit_reason, placed_sync_points, strength,
                     stream_sync_events, supports_core_limits, without_implied)
from .lints import is_cheap, lint
from .assign import plan_from_assignment
from .model import Plan

SWITCH = "PARASTREAM_MULTI_STREAM"


@dataclass
class Point:
    """A parallel point at op level: ``branches`` are op lists in issue order; the
    ``dominant`` branch is the one with the most estimated time. Points that share a
    ``name`` are instances of one pattern (the same point in every layer)."""

    name: str
    fork: str | None
    join: str | None
    branches: list[list[str]]
    dominant: int = 0
    meta: dict = field(default_factory=dict)

    def side_branches(self) -> list[list[str]]:
        return [b for i, b in enumerate(self.branches) if i != self.dominant]


@dataclass
class DeviceFacts:
    """What candidates need to know about the device (from a device profile)."""

    name: str = "unit costs"
    cores: int | None = None
    hw_queues: int | None = None
    max_streams: int | None = None
    launch_us: float = 0.0
    kind: str = ""  # "npu", "gpu", "cpu" (the profile's kind)
    #: the profile's core-limit facts (ladder.core_limit_support); None: no core limit API
    core_limit: dict | None = None


def _plan(graph: Graph, order: list[str], assignment: dict[str, int], name: str, algorithm: str,
          point: Point | None) -> Plan:
    plan = plan_from_assignment(graph, assignment, algorithm, name, order=order)
    plan.parallel_point = point.name if point else None
    plan.switch = SWITCH
    return plan


def _pinned_ops(graph: Graph, assignment: dict[str, int]) -> dict[str, int]:
    """Cheap main-stream consumers of side outputs (followed through chains of cheap ops)."""
    ops = graph.index()
    succ: dict[str, list[str]] = {}
    for e in graph.edges:
        if e.type == "data":
            succ.setdefault(e.src, []).append(e.dst)
    moved: dict[str, int] = {}
    frontier = [(n, s) for n, s in assignment.items() if s != 0]
    while frontier:
        n, s = frontier.pop()
        for v in succ.get(n, ()):
            if assignment.get(v, 0) == 0 and v not in moved and is_cheap(ops[v].type):
                moved[v] = s
                frontier.append((v, s))
    return moved


def point_candidates(graph: Graph, order: list[str], instances: list[Point],
                     max_streams: int | None) -> list[Plan]:
    """The distinct orchestrations of one parallel point, applied to every instance of it
    (the same point in every layer: streams are reused, never one per layer); all other
    ops stay on stream 0."""
    point = instances[0]
    base = {n: 0 for n in order}
    out: list[Plan] = []
    serial = dict(base)
    for inst in instances:
        for b in inst.side_branches():
            for n in b:
                serial[n] = 1
    out.append(_plan(graph, order, serial, f"{point.name}/side-serial", "parallel-point", point))
    n_sides = max(len(i.side_branches()) for i in instances)
    if n_sides > 1 and (max_streams is None or max_streams > 2):
        each = dict(base)
        limit = (max_streams - 1) if max_streams else n_sides
        for inst in instances:
            for i, b in enumerate(inst.side_branches()):
                for n in b:
                    each[n] = 1 + i % max(1, limit)
        out.append(_plan(graph, order, each, f"{point.name}/side-each", "parallel-point", point))
    early = _plan(graph, order, serial, f"{point.name}/early-join", "parallel-point", point)
    for inst in instances:
        early.events = _early_join(graph, order, serial, early.events, inst)
    # the moved wait may order what another wait at the same op ordered (both side ops)
    early.events = without_implied(graph, early, early.events, order)
    if early.events != out[0].events:
        out.append(early)
    moved = _pinned_ops(graph, serial)
    if moved:
        pinned = dict(serial)
        pinned.update(moved)
        out.append(_plan(graph, order, pinned, f"{point.name}/pinned", "parallel-point", point))
    if len(out) < 2:  # always two real alternatives: swap which branch stays on stream 0
        swap = dict(base)
        for inst in instances:
            for n in inst.branches[inst.dominant]:
                swap[n] = 1
        out.append(_plan(graph, order, swap, f"{point.name}/dominant-on-side", "parallel-point",
                         point))
    for p in out:
        p.meta["instances"] = len(instances)
    return out


def _early_join(graph: Graph, order: list[str], assignment: dict[str, int], events, point: Point):
    """Move the waits for the side branches' results to the first stream-0 op issued after
    the side work (instead of at the consumer): stream 0 joins as early as it can."""
    side_ops = {n for b in point.side_branches() for n in b}
    if not side_ops:
        return events
    last_side = max(side_ops, key=order.index)
    after = [n for n in order[order.index(last_side) + 1:] if assignment[n] == 0]
    if not after:
        return events
    first_main = after[0]
    out = []
    moved = False
    for e in events:
        if e.record_after in side_ops and e.wait_before is not None \
                and assignment[e.wait_before] == 0 and e.wait_before != first_main \
                and order.index(e.wait_before) > order.index(first_main):
            if not moved:
                out.append(type(e)(record_after=last_side, wait_before=first_main))
                moved = True
            continue
        out.append(e)
    if not moved:
        return events
    # stream 0 now follows last_side's whole stream up to it: a final join of any of those
    # ops orders nothing more
    s = assignment[last_side]
    upto = order.index(last_side)
    return [e for e in out if not (e.wait_before is None and assignment[e.record_after] == s
                                   and order.index(e.record_after) <= upto)]


#: on a tie, the plainer orchestration first: late join (most overlap), then the variants
KIND_ORDER = ("side-serial", "side-each", "pinned", "early-join", "dominant-on-side")


def kind_rank(plan: Plan) -> int:
    kind = plan.name.rsplit("/", 1)[-1]
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def core_limits(plan: Plan, block_dims: dict[str, int], cores: int | None) -> tuple[dict, str]:
    """C2 core limits so the side streams' block dims fit next to the main stream's."""
    if not cores or len(set(plan.assignment.values())) < 2:
        return {}, "C1"
    by_stream: dict[int, int] = {}
    for n, s in plan.assignment.items():
        by_stream[s] = max(by_stream.get(s, 0), block_dims.get(n, 0))
    if sum(by_stream.values()) <= cores:
        return {}, "C1"
    main = min(by_stream.get(0, 0), cores)
    sides = [s for s in by_stream if s != 0]
    free = cores - main if main < cores else max(1, cores // 4)
    share = max(1, free // max(1, len(sides)))
    held = share * len(sides)
    reason = f"main uses up to {main} of {cores} cores"
    limits: dict = {}
    if main + held > cores and cores - held >= 1:
        # main alone would take every core: main + side <= device cores only
        # holds when main is limited too, to what the side streams leave
        limits["0"] = {"aicore_num": cores - held,
                       "reason": f"the side streams hold {held} of {cores} cores"}
        reason = f"main limited to {cores - held} of {cores} cores"
    for s in sides:
        limits[str(s)] = {"aicore_num": share, "reason": reason}
    return limits, "C2"


def _ev(record: str, wait: str | None) -> str:
    return f"{record} -> {wait or 'the end of stream 0'}"


def ladder_text(plan: Plan, placed: list[tuple], device: DeviceFacts, wall: float,
                c1_wall: float | None) -> dict:
    """The candidate's three rungs and its next step, in words (plan.md field 4), with the
    placed sync points and the C1 rung's estimated wall where C3 applies."""
    if plan.stream_count() < 2:
        return {"C1": "single stream: no side stream, no ladder", "C2": "-", "C3": "-",
                "next": "none: this is the original single-stream path the enable switch "
                        "falls back to"}
    limits_ok = supports_core_limits(device.core_limit)
    c1 = ("stream split; each consumer waits for the producer's whole stream as issued so "
          "far (wait_stream at the consumer; GE: npu_stream_switch blocks and npu_wait_tensor)")
    if c1_wall is not None:
        c1 += f": estimated {c1_wall:.1f} us"
    if not limits_ok:
        c2 = f"not available on {device.name}: {no_core_limit_reason(device.kind, device.core_limit)}"
    elif plan.core_limits:
        lim = ", ".join(f"stream {k}: {v.get('aicore_num')} cores"
                        for k, v in sorted(plan.core_limits.items()))
        c2 = f"core limits ({lim}) with {core_limit_apis(device.core_limit)}"
    elif plan.meta.get("c2_rejected"):
        c2 = "core limits simulated and rejected: they did not beat C1"
    else:
        c2 = "not needed: the concurrent block dims fit the cores (or are unknown)"
    out: dict = {"C1": c1, "C2": c2, "device_kind": device.kind}
    if placed:
        pts = "; ".join(f"record right after {e.record_after} (C1 would wait for {tail}), wait "
                        f"before {e.wait_before or 'the end of stream 0'}"
                        for e, tail in placed[:4])
        more = f" and {len(placed) - 4} more" if len(placed) > 4 else ""
        gain = (f"estimated {wall:.1f} us vs {c1_wall:.1f} us at C1" if c1_wall is not None
                else "")
        out["C3"] = f"{len(placed)} placed sync point(s): {pts}{more}; {gain}"
        out["placed"] = [{"record_after": e.record_after, "wait_before": e.wait_before,
                          "c1_record_after": tail} for e, tail in placed]
        if c1_wall is not None:
            out["c1_wall_us"] = round(c1_wall, 3)
        out["next"] = ("top of the ladder: measure it (parastream run --plan ... --check, then "
                       "analyze --plan) and keep the placed events only if the measured wall "
                       "beats the C1 rung's stream-wide waits"
                       + ("" if c1_wall is None or c1_wall > wall * (1 + 1e-9)
                          else "; the estimate shows no gain over C1, so C1 is the simpler choice"))
    else:
        out["C3"] = ("not needed: every event is recorded after its stream's last op at the "
                     "wait, so stream-wide waits (C1) order nothing extra")
        out["next"] = ("C2: add core limits if the measured timeline shows contention (the "
                       "concurrent Block Dim above the cores)" if limits_ok and not plan.core_limits
                       else "measure it (parastream run --plan ... --check) and check "
                            "overlap_pct; no higher rung applies")
    return out


def describe(graph: Graph, plan: Plan, point: Point | None) -> str:
    """One paragraph: what runs in parallel, how it is split, where it joins, why it may
    gain (for a multi-stream candidate), the main risk."""
    est = plan.estimate
    if plan.stream_count() < 2:
        return (f"All {len(plan.assignment)} ops on stream 0 in program order: the baseline "
                f"every candidate is measured against and the path the enable switch falls "
                f"back to" + (f"; estimated {est.wall_us:.1f} us ({est.source})." if est else "."))
    streams: dict[int, list[str]] = {}
    for n, s in plan.assignment.items():
        streams.setdefault(s, []).append(n)
    side = {s: ops for s, ops in streams.items() if s != 0}
    joins = sorted({e.wait_before or "the end of stream 0" for e in plan.events})
    what = ""
    if point is not None and point.meta.get("kind") == "cross-stage":
        what = (f"Cross-stage point: {len(point.branches[1])} op(s) of "
                f"{point.meta.get('next_stage')} need nothing from {point.meta.get('stage')} "
                f"and can run beside it (its dominator {point.meta.get('dominator')}); they "
                f"meet at {point.join or 'the output'}. ")
    elif point is not None:
        what = (f"Parallel point {point.name}: {len(point.branches)} branches from "
                f"{point.fork or 'the inputs'} meet at {point.join or 'the output'}. ")
    split = "; ".join(f"stream {s}: {len(ops)} op(s) ({', '.join(ops[:3])}"
                      f"{', ...' if len(ops) > 3 else ''})" for s, ops in sorted(side.items()))
    risk = next((l.message for l in plan.lints if l.severity in ("error", "warning")),
                "none flagged by the lints")
    gain = (f"estimated {est.speedup:.2f}x over one stream ({est.source})" if est else "")
    return (f"{what}{plan.algorithm} split, {plan.streams} stream(s): {split}."
            f" Joins with {len(plan.events)} wait(s) at {', '.join(joins[:4]) or '-'}."
            f" Why it may gain: the side work runs while stream 0 runs its own ops; "
            f"{gain}. Main risk: {risk}")


def mermaid(graph: Graph, plan: Plan, limit: int = 60, order: list[str] | None = None) -> str:
    """``flowchart LR``: one subgraph per stream, ``-->`` data/state edges, ``-.->`` events."""
    order = order or validate(graph)
    keep = [n for n in order if plan.assignment.get(n, 0) != 0]
    if plan.parallel_point is None or not keep:
        keep = order
    # show the side ops and their neighbours on stream 0
    near = set(keep)
    for e in graph.edges:
        if e.src in keep or e.dst in keep:
            near.update((e.src, e.dst))
    shown = [n for n in order if n in near][:limit]
    sid = {n: f"n{i}" for i, n in enumerate(shown)}
    lines = ["flowchart LR"]
    for s in sorted({plan.assignment[n] for n in shown}):
        lines.append(f"  subgraph s{s}[stream {s}{' (origin)' if s == 0 else ''}]")
        for n in shown:
            if plan.assignment[n] == s:
                lines.append(f'    {sid[n]}["{_label(n)}"]')
        lines.append("  end")
    for e in graph.edges:
        if e.src in sid and e.dst in sid:
            arrow = "-->" if e.type in ("data", "state") else "==>"
            lines.append(f"  {sid[e.src]} {arrow} {sid[e.dst]}")
    for ev in plan.events:
        if ev.record_after in sid and ev.wait_before in sid:
            lines.append(f"  {sid[ev.record_after]} -.->|event| {sid[ev.wait_before]}")
    if len(near) > limit:
        lines.append(f"  more[\"... {len(near) - limit} more ops\"]")
    return "\n".join(lines)


def _label(name: str) -> str:
    return mermaid_label(name.replace("[", "(").replace("]", ")"), limit=40)


@dataclass(frozen=True)
class CandidateSettings:
    """How :func:`candidates` estimates and caps its plans."""

    #: each op's block dim (sizes C2 core limits); None: no limits sized
    block_dims: dict[str, int] | None = None
    #: the device (default: unit costs, no caps)
    device: DeviceFacts | None = None
    #: the stream cap (default: the device's hardware queues)
    max_streams: int | None = None
    #: a plan's wall time (default: the critical-path estimate; the planner passes the
    #: simulator) and where the figures come from
    wall: Callable[[Plan], float] | None = None
    source: str | None = None
    #: keep a candidate's C2 core limits only when ``wall`` says they beat plain C1
    ladder: bool = False
    #: checks a candidate's lints against a model the planner does not hold (the simulator's
    #: GE reorder), and may change their severity, before the description is written
    check_lints: Callable[[Plan], None] | None = None


def candidates(graph: Graph, points: list[Point], dur: dict[str, float],
               settings: CandidateSettings | None = None, *,
               global_plans: list[Plan] | None = None, order: list[str] | None = None,
               reach: dict[str, int] | None = None, **overrides: Any) -> list[Plan]:
    """All candidates (per parallel point, plus ``global_plans``), estimated, linted,
    described and ranked by estimated wall time (best first), under ``settings`` (keyword
    ``overrides`` such as ``device=...`` or ``ladder=True`` replace its fields; TypeError
    for an unknown one); ``order``: the graph's validated order, ``reach`` its
    :func:`~parastream.plan.lints.reach_sets` when the caller has them."""
    cfg = dataclasses.replace(settings or CandidateSettings(), **overrides)
    device = cfg.device or DeviceFacts()
    cap = cfg.max_streams or device.hw_queues
    order = order or validate(graph)
    wall, source = cfg.wall, cfg.source
    if wall is None:
        def wall(plan: Plan) -> float:
            return wall_us(graph, plan, dur, launch_us=device.launch_us,
                           hw_queues=device.hw_queues, order=order)
        source = f"critical-path estimate on {device.name}"
    scoring = _Scoring(graph, order, dur, device, wall, source or f"estimate on {device.name}",
                       cfg.block_dims or {}, cfg.ladder, cfg.check_lints, reach)
    plans: list[Plan] = []
    groups: dict[str, list[Point]] = {}
    for p in points:
        groups.setdefault(p.name, []).append(p)
    for instances in groups.values():
        if cap is None or cap >= 2:  # a point's orchestrations all open a side stream
            plans.extend(point_candidates(graph, order, instances, cap))
    plans.extend(global_plans or [])
    by_name = {p.name: p for p in points}
    single = wall(Plan.single(order))
    for plan in plans:
        scoring.score(plan, by_name.get(plan.parallel_point or ""), single)
    # ties: the plan that moves less work off stream 0 (fewer cross-stream risks) first
    plans.sort(key=lambda p: (p.estimate.wall_us if p.estimate else 0.0,
                              sum(dur[n] for n, s in p.assignment.items() if s != 0),
                              p.streams, kind_rank(p), p.name))
    return plans


@dataclass(frozen=True)
class _Scoring:
    """What each candidate is estimated, laddered, linted and described with."""

    graph: Graph
    order: list[str]
    dur: dict[str, float]
    device: DeviceFacts
    wall: Callable[[Plan], float]
    source: str
    block_dims: dict[str, int]
    ladder: bool
    check_lints: Callable[[Plan], None] | None = None
    reach: dict[str, int] | None = None

    def score(self, plan: Plan, point: Point | None, single: float) -> None:
        """Fill ``plan``'s core limits, strength, estimate (against the ``single``-stream
        wall), ladder text, lints, description and Mermaid DAG."""
        graph, order, device, wall = self.graph, self.order, self.device, self.wall
        plan.core_limits = core_limits(plan, self.block_dims, device.cores)[0] \
            if supports_core_limits(device.core_limit) else {}
        w = self._laddered_wall(plan)
        placed = placed_sync_points(graph, plan, order)
        plan.strength = strength(plan, placed)
        c1_wall = wall(msgspec.structs.replace(plan, events=stream_sync_events(graph, plan, order))) \
            if placed else None
        plan.estimate = make_estimate(w, single, self.source)
        plan.meta["ladder"] = ladder_text(plan, placed, device, w, c1_wall)
        plan.lints = lint(graph, plan, self.dur, hw_queues=device.hw_queues,
                          max_streams=device.max_streams, launch_us=device.launch_us,
                          speedup=plan.estimate.speedup, order=order, reach=self.reach)
        if self.check_lints is not None:
            self.check_lints(plan)
        plan.description = describe(graph, plan, point)
        plan.mermaid = mermaid(graph, plan, order=order)

    def _laddered_wall(self, plan: Plan) -> float:
        """``plan``'s wall; with the ladder, C2 core limits that do not beat plain C1 are
        dropped (and recorded in ``meta['c2_rejected']``)."""
        w = self.wall(plan)
        if self.ladder and plan.core_limits:
            limits, plan.core_limits = plan.core_limits, {}
            c1 = self.wall(plan)
            if c1 <= w:
                w = c1
                plan.meta["c2_rejected"] = {"limits": limits, "reason": "did not beat C1"}
            else:
                plan.core_limits = limits
        return w
