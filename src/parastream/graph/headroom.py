"""Headroom: how much any stream assignment could gain, before anything is changed.

For a set of ops with estimated durations (``device.cost``)::

    work_us           sum of durations (one stream runs them back to back)
    critical_path_us  the longest dependency chain (infinitely many streams, free cores)
    logical_speedup   work / critical path

Streams share the device, so the makespan is also at least each resource's busy time::

    cube / vector     sum(dur x block_dim) / cores of the pool (one pool on GPUs, CPUs and
                      coupled Ascend parts; separate cube and vector pools on A2)
    memory            sum of traffic at full bandwidth
    comm / host       sum of communication / host durations (one link, one host thread)
    queues            work / min(hw_queues, max_streams)

``bound_speedup = work / max(critical path, resource floors)`` bounds every assignment;
``limited_by`` names the term that set it. A decode layer at batch 1 is a chain of
memory-bound ops: its memory floor is nearly its work, and the bound says 'little'.
For a parallel point the same is computed over its branches: serial = sum of branch times,
ideal = the dominating (longest) branch.

``launch_floor_us`` (ops x host launch overhead) is what an eager host needs just to issue
the tasks; when it exceeds the device floor the run is host-bound and graph mode, not
streams, is the fix. It is reported, not folded into the bound.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

import msgspec

from ..device.cost import OpCost, estimate, with_cold
from ..timeline.nogc import gc_paused
from ..device.profile import DeviceProfile
from .decompose import Decomposition, decompose
from .ir import Graph, validate

LITTLE = 1.1  #: below this bound a multi-stream plan is not worth it
SOME = 1.5


class Headroom(msgspec.Struct):
    """What any stream assignment could gain for one op set (a graph or a parallel point)."""

    work_us: float
    critical_path_us: float
    bound_speedup: float
    logical_speedup: float
    resource_floor_us: float
    limited_by: str
    gain_us: float
    launch_floor_us: float
    floors_us: dict[str, float]
    verdict: str
    summary: str


def critical_path(order: list[str], preds: dict[str, Iterable[str]],
                  dur: dict[str, float]) -> tuple[float, list[str]]:
    """Length and nodes of the longest path through a DAG (``order`` topological, node
    weights ``dur``)."""
    finish: dict[str, float] = {}
    back: dict[str, str | None] = {}
    best_end, best = None, 0.0
    for n in order:
        start, via = 0.0, None
        for p in preds.get(n, ()):
            # a zero-length predecessor still heads the path (the planner follows it)
            if via is None or finish[p] > start:
                start, via = finish[p], p
        finish[n] = start + dur[n]
        back[n] = via
        if best_end is None or finish[n] > best:
            best_end, best = n, finish[n]
    path: list[str] = []
    while best_end is not None:
        path.append(best_end)
        best_end = back[best_end]
    return best, path[::-1]


def resource_floors(names: Iterable[str], costs: dict[str, OpCost],
                    profile: DeviceProfile) -> dict[str, float]:
    """Lower bounds on the makespan of ``names`` run concurrently, one per shared resource."""
    floors: dict[str, float] = defaultdict(float)
    shared = profile.shared_cores
    for n in names:
        c = costs[n]
        if c.unit in ("cube", "vector"):
            pool = "cores" if shared else f"{c.unit} cores"
            floors[pool] += c.dur_us * c.block_dim / profile.unit_cores(c.unit)
        elif c.unit == "comm":
            floors["communication"] += c.dur_us
        elif c.unit == "host":
            floors["host"] += c.dur_us
        if c.unit != "host":
            floors["memory bandwidth"] += c.memory_full_us
    return dict(floors)


def _verdict(bound: float, work: float, gain: float, limited_by: str) -> tuple[str, str]:
    pct = 100.0 * gain / work if work > 0 else 0.0
    if bound < LITTLE:
        word = "little"
    elif bound < SOME:
        word = "some"
    else:
        word = "large"
    return word, (f"{word}: any stream assignment gains at most {bound:.2f}x "
                  f"({gain:.1f} of {work:.1f} us, {pct:.0f}%), limited by {limited_by}")


def _headroom(work: float, cp: float, names: list[str], costs: dict[str, OpCost],
              profile: DeviceProfile) -> Headroom:
    floors = resource_floors(names, costs, profile)
    queues = min(profile.hw_queues, profile.max_streams)
    floors[f"hardware queues ({queues})"] = work / queues if queues else work
    floors = {k: v for k, v in floors.items() if v > 0}
    limited_by, floor = "critical path (data dependencies)", cp
    for k, v in floors.items():
        if v > floor * (1 + 1e-9):
            limited_by, floor = k, v
    floor = max(floor, cp)
    mem = floors.get("memory bandwidth", 0.0)
    if limited_by.endswith("cores") and mem >= 0.95 * floor:
        # memory-bound ops hold their cores while they wait on memory: name the cause
        limited_by = "memory bandwidth"
    bound = work / floor if floor > 0 else 1.0
    logical = work / cp if cp > 0 else 1.0
    gain = max(0.0, work - floor)
    launch = len(names) * profile.launch_overhead_us if not profile.on_host else 0.0
    word, text = _verdict(bound, work, gain, limited_by)
    if launch > floor and launch > 0:
        text += (f"; eager launch needs {launch:.1f} us for {len(names)} tasks: host-bound "
                 f"unless captured (graph mode)")
    return Headroom(work, cp, bound, logical, max(floors.values(), default=0.0), limited_by,
                    gain, launch, floors, word, text)


def graph_headroom(g: Graph, costs: dict[str, OpCost], profile: DeviceProfile,
                   order: list[str]) -> Headroom:
    """Headroom of the whole graph (``order``: a topological order from ``validate``)."""
    dur = {n: costs[n].dur_us for n in order}
    cp, _ = critical_path(order, g.predecessor_names(), dur)
    return _headroom(sum(dur.values()), cp, order, costs, profile)


def point_headroom(branch_ops: list[list[str]], costs: dict[str, OpCost],
                   profile: DeviceProfile) -> Headroom:
    """Headroom of one parallel point: each branch on its own stream (serial inside), all
    branches at once. ``branch_ops`` lists each branch's op names."""
    times = [sum(costs[n].dur_us for n in b) for b in branch_ops]
    names = [n for b in branch_ops for n in b]
    return _headroom(sum(times), max(times, default=0.0), names, costs, profile)


class Analysis(msgspec.Struct):
    """The decomposition with headroom for the graph and for every parallel point."""

    decomposition: Decomposition
    headroom: Headroom
    point_headroom: dict[str, Headroom]


@gc_paused()  # hundreds of thousands of small acyclic objects: the collector only costs time
def analyze_graph(g: Graph, profile: DeviceProfile) -> Analysis:
    """Validate, cost, decompose and bound ``g`` on ``profile`` in one call."""
    order = validate(g)
    ops = g.index()
    costs = with_cold(ops, {n: estimate(ops[n], profile) for n in order}, order, profile)
    dec = decompose(g, profile, costs=costs, order=order)
    members = {m.module_id: m.ops for m in dec.modules}
    per_point = {}
    for p in dec.parallel_points:
        if p.level == "module":
            branch_ops = [[o for mid in b.nodes for o in members[mid]] for b in p.branches]
        else:
            branch_ops = [list(b.nodes) for b in p.branches]
        per_point[p.id] = point_headroom(branch_ops, costs, profile)
    return Analysis(dec, graph_headroom(g, costs, profile, order), per_point)


__all__ = ["Analysis", "Headroom", "LITTLE", "analyze_graph", "critical_path", "graph_headroom", "point_headroom",
           "resource_floors"]
