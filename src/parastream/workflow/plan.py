"""The planning pipeline behind ``parastream plan``: a model's op costs, its parallel points
at op level, the whole-graph and per-point candidates, ranked by the simulator.

:func:`plan` takes plain arguments and returns a :class:`PlanResult`; :func:`build` is the
pipeline over a graph and a loaded device profile that ``simulate``, ``run`` and ``demo``
share. No torch unless the model is a zoo name or a ``file.py:factory``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial, reduce
from operator import or_
from typing import Callable

from ..device.cost import estimate as op_cost
from ..device.cost import with_cold
from ..device.profile import DEFAULT_DEVICE, DeviceProfile
from ..errors import InputError
from ..graph.decompose import Decomposition, decompose
from ..graph.ir import Graph, is_whole, validate
from ..graph.models import model_source
from ..plan.assign import assign
from ..plan.candidates import DeviceFacts, Point, candidates
from ..plan.io import MAX_STREAM_ID, PlanDoc, dumps, to_builtins
from ..plan.ladder import core_limit_support
from ..plan.lints import SEVERITY_RANK, reach_sets
from ..plan.model import SPEEDUP_MARGIN, Plan, PlanError
from ..plan.stages import cross_stage_points, pattern
from ..sim.run import sim_label, simulate_plan
from .graph import GRAPH_SCALE, model_graph, profile_of

#: the whole-graph algorithms planned when none is named
GLOBAL_ALGORITHMS = ("matching", "critical-path", "resource-split")


@dataclass(frozen=True)
class PlanResult:
    """What ``parastream plan`` computes: the plan document (``doc``, what ``plan -o``
    writes) with the graph and the device profile it was made for."""

    doc: PlanDoc
    graph: Graph
    profile: DeviceProfile

    @property
    def recommended(self) -> Plan:
        """The recommended candidate (``single`` when no multi-stream one pays)."""
        return self.doc.candidate(self.doc.recommended)

    @property
    def candidates(self) -> list[Plan]:
        """Every candidate, best first."""
        return self.doc.candidates

    def to_dict(self) -> dict:
        """The plan document as ``plan --format json`` prints it."""
        return to_builtins(self.doc)

    def to_json(self) -> bytes:
        """The plan file's bytes (``plan -o``)."""
        return dumps(self.doc)


# ------------------------------------------------------------------ op-level points

@dataclass(frozen=True)
class _OpOrder:
    """The graph facts every point is regrouped with: the topological ``order``, each op's
    position ``idx``, descendants ``reach`` (bitsets over ``order``), successors ``succ``
    and the decomposition's modules by id."""

    order: list[str]
    idx: dict[str, int]
    reach: dict[str, int]
    succ: dict[str, list[str]]
    modules: dict


def points_from(graph: Graph, dec: Decomposition, dur: dict[str, float] | None = None,
                order: list[str] | None = None, reach: dict[str, int] | None = None
                ) -> list[Point]:
    """Op-level points for the planner from the decomposition's points.

    Branches are regrouped at op level: two branches that meet before the point's overall
    join (the first op every branch reaches) are one branch (the gate and up projections
    of an MLP meet at their product long before the MLP meets the routed experts); each
    branch then holds every op only it reaches before the join. The same point in every
    layer shares a name. ``reach``: :func:`reach_sets` over ``order``, when the caller
    has them.
    """
    order = order or validate(graph)
    succ: dict[str, list[str]] = {}
    for e in graph.edges:
        succ.setdefault(e.src, []).append(e.dst)
    ops = _OpOrder(order=order, idx={n: i for i, n in enumerate(order)},
                   reach=reach or reach_sets(graph, order), succ=succ,
                   modules={m.module_id: m for m in dec.modules})
    out: list[Point] = []
    for pp in dec.parallel_points:
        point = _op_point(graph, pp, ops, dur or {})
        if point is not None and not any(p.name == point.name and p.branches == point.branches
                                         for p in out):
            out.append(point)
    return out


def _op_point(graph: Graph, pp, ops: _OpOrder, dur: dict[str, float]) -> Point | None:
    """The op-level point of decomposition point ``pp``, or None when fewer than two
    branches of their own ops remain before its join."""
    seeds = _branch_seeds(pp, ops)
    if len(seeds) < 2:
        return None
    desc = [_descendants(s, ops) for s in seeds]
    meet = _first_meetings(desc)
    join_bit = max(meet.values()) if meet else len(ops.order)
    masks = _merge_early_meetings(desc, meet, join_bit)
    if len(masks) < 2:
        return None
    branches = [b for b in _own_ops(masks, join_bit, ops.order) if b]
    if len(branches) < 2:
        return None
    join = ops.order[join_bit] if join_bit < len(ops.order) else None
    dominant = max(range(len(branches)),
                   key=lambda k: sum(dur.get(n, 0.0) for n in branches[k]))
    return Point(name=_point_name(graph, branches, join), fork=pp.fork, join=join,
                 branches=branches, dominant=dominant,
                 meta={"id": pp.id, "level": pp.level, "verdict": pp.verdict})


def _branch_seeds(pp, ops: _OpOrder) -> list[list[str]]:
    """The ops each branch of ``pp`` starts with: every consumer of the fork's ops, or,
    for a shared external input, the decomposition's own branches."""
    modules, idx = ops.modules, ops.idx
    fork_ops = set(modules[pp.fork].ops) if pp.fork in modules else (
        {pp.fork} if pp.fork in idx else set())
    if fork_ops:
        firsts = sorted({v for o in fork_ops for v in ops.succ.get(o, ()) if v not in fork_ops},
                        key=idx.__getitem__)
        return [[v] for v in firsts]
    seeds = []
    for b in pp.branches:
        members = [o for node in b.nodes
                   for o in (modules[node].ops if node in modules else [node])]
        members = [o for o in members if o in idx]
        if members:
            seeds.append(members)
    return seeds


def _descendants(seed: list[str], ops: _OpOrder) -> int:
    """The ops ``seed`` holds and every op they reach, as a bitset over the order."""
    m = 0
    for o in seed:
        m |= (1 << ops.idx[o]) | ops.reach[o]
    return m


def _first_meetings(desc: list[int]) -> dict[tuple[int, int], int]:
    """For each pair of branches that meet: the position of the first op both reach."""
    meet = {}
    for i in range(len(desc)):
        for j in range(i + 1, len(desc)):
            c = desc[i] & desc[j]
            if c:
                meet[i, j] = (c & -c).bit_length() - 1
    return meet


def _merge_early_meetings(desc: list[int], meet: dict[tuple[int, int], int],
                          join_bit: int) -> list[int]:
    """The branches' reach after merging every two that meet before the join."""
    parent = list(range(len(desc)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for (i, j), at in meet.items():
        if at < join_bit:  # they meet before the join: one branch
            parent[find(i)] = find(j)
    groups: dict[int, int] = {}
    for i in range(len(desc)):
        groups[find(i)] = groups.get(find(i), 0) | desc[i]
    return list(groups.values())


def _own_ops(masks: list[int], join_bit: int, order: list[str]) -> list[list[str]]:
    """Each merged branch's ops: those only it reaches before the join, in order."""
    before_join = (1 << join_bit) - 1
    branches = []
    for k, m in enumerate(masks):
        others = reduce(or_, masks[:k] + masks[k + 1:], 0)  # what every other branch reaches
        own = m & ~others & before_join
        branches.append([order[i] for i in range(len(order)) if (own >> i) & 1])
    return branches


def _point_name(graph: Graph, branches: list[list[str]], join: str | None) -> str:
    """``<branch patterns> @ <join pattern> [<ops per branch> ops]``: the same in every
    layer."""
    pats = [pattern(graph, b) for b in branches]
    uniq = list(dict.fromkeys(pats))
    name = (f"{uniq[0]} ({len(pats)} branches)" if len(uniq) == 1
            else " || ".join(uniq[:3]) + (" || ..." if len(uniq) > 3 else ""))
    return (f"{name} @ {pattern(graph, [join]) if join else 'end'} "
            f"[{'+'.join(str(len(b)) for b in branches)} ops]")


# ------------------------------------------------------------------ candidates

def _fastest_cap(plan_at: Callable[[int], Plan], cap: int,
                 wall: Callable[[Plan], float]) -> Plan:
    """The plan ``plan_at(k)`` that simulates fastest for stream caps ``k`` from 2 to
    ``cap``, the fewest streams on a tie; a cap that gives an assignment already seen (it
    did not bind, or the algorithm takes none: resource-split) is not simulated again."""
    best, best_wall = None, float("inf")
    seen: set[tuple] = set()
    for k in range(2, cap + 1):
        plan = plan_at(k)
        key = tuple(sorted(plan.assignment.items()))
        if key not in seen:
            seen.add(key)
            w = wall(plan)
            if best is None or w < best_wall * (1 - 1e-9):  # the first, even at a wall of inf
                best, best_wall = plan, w
        if plan.stream_count() < k:
            # the cap no longer binds, and no larger one would (every algorithm opens at
            # most one stream per chain): a --max-streams 512 tried 511 caps
            break
    return best


@dataclass(frozen=True)
class _Costs:
    """The op costs planning works from: ``costs`` per op (the simulator adds cold costs
    itself), ``dur`` the durations with cold costs that rank and bound candidates,
    ``bound`` what limits each op (``comm`` for communication)."""

    costs: dict
    ranked: dict
    dur: dict[str, float]
    bound: dict[str, str]


def _op_costs(graph: Graph, profile: DeviceProfile, order: list[str]) -> _Costs:
    costs = {o.name: op_cost(o, profile) for o in graph.ops}
    ranked = with_cold(graph.index(), costs, order, profile)
    return _Costs(costs=costs, ranked=ranked, dur={n: c.dur_us for n, c in ranked.items()},
                  bound={n: ("comm" if c.unit == "comm" else c.bound)
                         for n, c in costs.items()})


def _global_plans(graph: Graph, order: list[str], c: _Costs, algos: list[str], *,
                  cap: int, mapping: dict | None,
                  wall: Callable[[Plan], float] | None) -> list[Plan]:
    """The single-stream baseline and one plan per whole-graph algorithm; with ``wall``,
    each at the stream cap up to ``cap`` that simulates fastest."""
    plans = [assign(graph, "single", durations=c.dur, order=order)]
    for a in algos:
        def plan_at(k: int, a: str = a) -> Plan:
            return assign(graph, a, durations=c.dur, bound=c.bound, max_streams=k,
                          mapping=mapping, order=order)

        if wall is not None and a != "manual" and cap > 2:
            # fewer streams can be faster: each stream the algorithm opens adds events and
            # splits the cores; --max-streams is a cap, not a count
            plans.append(_fastest_cap(plan_at, cap, wall))
        else:
            plans.append(plan_at(cap))
    return plans


def confirm_ge_reorder(graph: Graph, plan: Plan, *, profile: DeviceProfile, c: _Costs,
                       order: list[str]) -> None:
    """Check ``plan``'s ge-reorder warnings in the simulator: its graph-mode wall with GE's
    reorder against without. A warning stays one only where the reorder costs at least the
    cheapest hoisted precompute; elsewhere it becomes ``info`` (GE may still reorder, but at
    these shapes main waits for nothing it would not wait for anyway). Either way the lint
    says what the simulator found."""
    lints = [x for x in plan.lints if x.rule == "ge-reorder" and x.severity == "warning"]
    if not lints:
        return
    kw = {"costs": c.costs, "order": order}
    base = simulate_plan(graph, plan, profile, mode="graph", **kw).result.wall_us
    ge = simulate_plan(graph, plan, profile, ge=True, **kw)
    cost = ge.result.wall_us - base
    hoisted = {v for v, _ in ge.reorder.hoisted}
    pre = min((c.dur[v] for v in hoisted), default=None)
    harmful = pre is not None and cost >= pre
    for x in lints:
        if harmful:
            x.message += f" (simulated in graph mode: GE's reorder costs {cost:,.1f} us)"
            continue
        x.severity = "info"
        x.message += (f" (simulated in graph mode at these shapes, GE's reorder costs "
                      f"{cost:,.1f} us, less than the precompute: harmless here)")
    plan.lints.sort(key=lambda x: SEVERITY_RANK[x.severity])


def _device_facts(profile: DeviceProfile) -> DeviceFacts:
    return DeviceFacts(name=profile.name, cores=profile.cores.cube, hw_queues=profile.hw_queues,
                       max_streams=profile.max_streams, launch_us=profile.launch_overhead_us,
                       kind=profile.kind, core_limit=core_limit_support(profile))


def _recommended(plans: list[Plan]) -> str:
    """The best multi-stream candidate when it beats single stream by the margin, else
    ``single``."""
    best = next((p for p in plans if p.algorithm != "single"), None)
    pays = best and best.estimate and best.estimate.speedup >= 1 + SPEEDUP_MARGIN
    return best.name if pays else "single"


def _point_rows(points: list[Point]) -> list[dict]:
    """One row per point name, with how many instances (layers) it has."""
    seen, rows = set(), []
    for p in points:
        if p.name not in seen:
            seen.add(p.name)
            rows.append({"name": p.name, "fork": p.fork, "join": p.join, "branches": p.branches,
                         "dominant": p.dominant,
                         "instances": sum(1 for q in points if q.name == p.name)})
    return rows


def build(graph: Graph, profile: DeviceProfile, *, algorithm: str | None, mapping: dict | None,
          max_streams: int | None, simulate: bool = True, source: dict | None = None) -> PlanDoc:
    """Everything `parastream plan` computes, as a plan document. With ``simulate`` the
    candidates are ranked by the simulator's prediction instead of the critical-path
    estimate."""
    order = validate(graph)  # once: every step below needs the same topological order
    c = _op_costs(graph, profile, order)
    dec = decompose(graph, profile, c.ranked, order)
    reach = reach_sets(graph, order)  # once: points, cross-stage points and lints share it
    points = points_from(graph, dec, c.dur, order, reach)
    points += cross_stage_points(graph, order, reach, c.dur)
    cap = max_streams or profile.hw_queues
    wall, source_label = None, None
    if simulate:
        def wall(plan: Plan) -> float:
            return simulate_plan(graph, plan, profile, costs=c.costs, order=order).result.wall_us

        source_label = sim_label(profile)
    algos = [algorithm] if algorithm else list(GLOBAL_ALGORITHMS)
    global_plans = _global_plans(graph, order, c, algos, cap=cap, mapping=mapping, wall=wall)
    # core limits are sized on the matrix (cube) cores, where two streams really collide
    cube_bd = {n: x.block_dim for n, x in c.costs.items() if x.unit == "cube"}
    plans = candidates(graph, points, c.dur, block_dims=cube_bd, device=_device_facts(profile),
                       max_streams=cap, global_plans=global_plans, wall=wall,
                       source=source_label, ladder=simulate, order=order, reach=reach,
                       check_lints=partial(confirm_ge_reorder, graph, profile=profile, c=c,
                                           order=order)
                       if simulate and profile.graph_dispatch_us is not None else None)
    return PlanDoc(model=graph.name, device=profile.name, recommended=_recommended(plans),
                   candidates=plans, parallel_points=_point_rows(points), source=source or {})


# ------------------------------------------------------------------ the command

def parse_mapping(mapping: dict | str | None) -> dict | None:
    """A manual mapping (op/module/type pattern -> stream) from a dict or its JSON text;
    an InputError unless every stream is a whole number from 0 to :data:`MAX_STREAM_ID`."""
    if mapping is None or mapping == "":
        return None
    try:
        value = json.loads(mapping) if isinstance(mapping, str) else mapping
        # JSON's true is an int to Python; a stream past int32 is one no plan file can hold
        assert isinstance(value, dict) and all(
            is_whole(v) and 0 <= v <= MAX_STREAM_ID for v in value.values())
    except (ValueError, AssertionError):
        raise InputError(None, "--mapping must be a JSON object of pattern -> stream number "
                               f"(0 to {MAX_STREAM_ID})") from None
    return value


def plan(model: str | Graph, *, scale: str | None = None, phase: str | None = None,
         device: str | DeviceProfile = DEFAULT_DEVICE, algorithm: str | None = None,
         mapping: dict | str | None = None, max_streams: int | None = None) -> PlanResult:
    """Plan ``model`` (a zoo name, ``file.py:factory``, graph JSON path, or a Graph) on
    ``device`` (a profile name, .json path or a loaded profile): candidates per parallel
    point and whole-graph algorithm, ranked by simulated wall time. ``mapping`` (pattern ->
    stream, or its JSON) adds the ``manual`` plan. Bad input raises
    :class:`~parastream.errors.InputError`."""
    if max_streams is not None and max_streams < 1:
        raise InputError(None, f"--max-streams must be at least 1, got {max_streams}")
    profile = profile_of(device)  # bad names and files raise a one-line InputError
    mapping = parse_mapping(mapping)
    if mapping:
        algorithm = algorithm or "manual"
    if algorithm == "manual" and not mapping:
        raise InputError(None, "--algorithm manual needs --mapping")
    scale = scale or GRAPH_SCALE
    graph = model_graph(model, scale, phase, device)
    where = graph.name if isinstance(model, Graph) else model
    source = {} if isinstance(model, Graph) else {"model": model_source(model), "scale": scale,
                                                  "phase": phase}
    if not graph.ops:
        raise InputError(where, "the graph has no ops: nothing to plan")
    try:
        doc = build(graph, profile, algorithm=algorithm, mapping=mapping,
                    max_streams=max_streams, source=source)
    except PlanError as exc:
        raise InputError(where, str(exc)) from None
    return PlanResult(doc=doc, graph=graph, profile=profile)


__all__ = ["GLOBAL_ALGORITHMS", "PlanResult", "build", "parse_mapping", "pattern", "plan",
           "points_from"]
