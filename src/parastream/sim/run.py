"""From a graph, a plan and a device profile to simulated tasks and a simulated timeline.

Also emulates GE's auto-reorder: a cheap precompute that consumes a side
output on the main stream is issued ahead of the main dominator, so the main stream's FIFO
blocks on the side stream: parallelism the plan promises and the run does not get.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any, Iterable

import msgspec
import numpy as np

from ..device.cost import (OpCost, cold_idles, cold_us, estimate, has_cold, runs_serial,
                           with_cores)
from ..device.profile import DeviceProfile
from ..graph.ir import Graph, validate
from ..plan.lints import lint
from ..plan.model import Plan
from ..timeline.model import KIND_COMM, KIND_COMPUTE, KIND_MEMCPY, Timeline
from .engine import Device, Result, Task, simulate
from .modes import MODES


def sim_label(profile: DeviceProfile) -> str:
    """How every simulated figure is labelled (and how a plan's estimate names its source)."""
    return f"simulated on {profile.name}"


def require_mode(profile: DeviceProfile, mode: str, where: str | None = None) -> None:
    """Refuse (InputError naming ``where``) a mode the profile cannot simulate: graph mode
    needs the profile's ``graph_dispatch_us``."""
    from ..errors import InputError

    if mode not in MODES:
        raise InputError(where, f"unknown mode {mode!r} (one of {', '.join(MODES)})")
    if mode == "graph" and profile.graph_dispatch_us is None:
        raise InputError(where, f"device profile {profile.name!r} has no graph_dispatch_us: "
                                "graph mode needs the device's per-task dispatch cost of a "
                                "captured graph (add it to the profile with its source)")


def device_of(profile: DeviceProfile, mode: str = "eager") -> Device:
    """The engine's device for ``profile`` in ``mode`` (:data:`MODES`). In graph mode the
    host issues nothing per op (the whole graph is in the queues when it starts) and each
    task pays the profile's ``graph_dispatch_us`` on its queue instead of the eager
    scheduler sweep; :func:`require_mode` says whether the profile has that figure."""
    graph = mode == "graph"
    return Device(name=profile.name, cube_cores=profile.cores.cube,
                  vector_cores=profile.cores.vector, hw_queues=profile.hw_queues,
                  launch_us=0.0 if graph else profile.launch_overhead_us,
                  sweep_us=(profile.graph_dispatch_us or 0.0) if graph
                  else profile.scheduler_sweep_us,
                  memory_streams=profile.memory_streams,
                  # CPU streams are Python threads: each task's host part (dispatch, folded
                  # views) holds the interpreter lock, the resource the engine plugs in
                  # for it (:mod:`parastream.cpu.hostlock`); a device's host work overlaps
                  host_lock=profile.on_host,
                  wake_us=profile.event_wake_us,
                  # a worker sleeping on the interpreter lock is woken like one sleeping on
                  # an event: the same OS wake-up, which calibrate measures
                  lock_wake_us=profile.event_wake_us)


@dataclass
class Reorder:
    """GE's issue order for one plan (:func:`ge_reorder`)."""

    order: list[str]
    #: op -> producers on other streams it must wait for: a hoisted op runs ahead of the
    #: main-stream op whose event wait used to cover it, so it waits for its inputs itself
    waits: dict[str, list[str]]
    #: (precompute, dominator) pairs whose precompute now runs ahead of the dominator
    hoisted: list[tuple[str, str]]
    #: (precompute, dominator, why) for lints whose precompute did not move
    kept: list[tuple[str, str, str]]


def ge_reorder(graph: Graph, plan: Plan, order: list[str], dur: dict[str, float], *,
               hw_queues: int | None = None) -> Reorder:
    """The issue order GE would produce: each ``ge-reorder`` lint's precompute (a cheap
    main-stream consumer of a side output that does not depend on the dominator) is
    issued on the main stream just ahead of the dominator, with its main-stream ancestors
    that came after the dominator (it cannot run before its inputs), so the main FIFO
    blocks on the side output before the dominator runs. Each moved op waits for its
    producers on other streams itself. A move that would deadlock the queues (a side
    FIFO holding the side output behind work that waits for main ops issued later; the
    queues are shared as in :mod:`parastream.sim.engine`, by ``hw_queues``) is not made."""
    order = list(order)
    preds = graph.predecessor_names()
    stream = {n: plan.assignment.get(n, 0) for n in order}
    waits: dict[str, list[str]] = {}
    hoisted: list[tuple[str, str]] = []
    kept: list[tuple[str, str, str]] = []
    groups: dict[tuple[str, str], set[str]] = {}  # each hoist's moved ops
    for l in lint(graph, plan, dur):
        if l.rule != "ge-reorder":
            continue
        _, v, d = l.ops
        pos = {n: i for i, n in enumerate(order)}
        if pos[v] < pos[d]:
            # the plan already issues it ahead of the dominator: the run without the
            # reorder pays the same wait
            kept.append((v, d, "already ahead of the dominator in program order"))
            continue
        moved = _main_ancestors_after(v, pos[d], preds, stream, pos)
        # an earlier hoist's dominator moving ahead of ``d`` takes that hoist's precompute
        # group along, so the earlier precompute stays ahead of its dominator
        grow = True
        while grow:
            grow = False
            for (v2, d2), group in groups.items():
                if d2 in moved and not group <= moved:
                    moved |= {m for m in group if pos[m] > pos[d]}
                    grow = True
        new = [n for n in order if n not in moved]
        at = new.index(d)
        new[at:at] = sorted(moved, key=pos.__getitem__)
        extra = {m: sorted({p for p in preds.get(m, ()) if stream[p] != stream[m]})
                 for m in moved}
        trial = {**waits, **{m: w for m, w in extra.items() if w}}
        if not _runs_through(new, plan, stream, trial, hw_queues):
            kept.append((v, d, "moving it would deadlock the stream queues"))
            continue
        order, waits = new, trial
        hoisted.append((v, d))
        groups[(v, d)] = moved
    return Reorder(order, waits, hoisted, kept)


def _main_ancestors_after(v: str, at: int, preds: dict[str, list[str]],
                          stream: dict[str, int], pos: dict[str, int]) -> set[str]:
    """``v`` and its ancestors on ``v``'s stream issued after position ``at``."""
    out, todo, seen = {v}, [v], {v}
    while todo:
        for p in preds.get(todo.pop(), ()):
            if p in seen or pos[p] <= at:
                continue  # issued earlier, and so are its own inputs (``order`` is topological)
            seen.add(p)
            todo.append(p)
            if stream[p] == stream[v]:
                out.add(p)
    return out


def _runs_through(order: list[str], plan: Plan, stream: dict[str, int],
                  extra: dict[str, list[str]], hw_queues: int | None) -> bool:
    """Whether every task of ``order`` can run: each queue's FIFO (streams share queues by
    rank, as the engine maps them) and every event wait (the plan's and ``extra``) form
    no cycle."""
    ids = sorted(set(stream.values()))
    q = max(1, hw_queues or len(ids))
    queue = {s: i % q for i, s in enumerate(ids)}
    after: dict[str, list[str]] = {n: [] for n in order}
    need = dict.fromkeys(order, 0)
    last: dict[int, str] = {}
    for n in order:
        k = queue[stream[n]]
        if k in last:
            after[last[k]].append(n)
            need[n] += 1
        last[k] = n
    for e in plan.events:
        if e.wait_before is not None:
            after[e.record_after].append(e.wait_before)
            need[e.wait_before] += 1
    for n, ws in extra.items():
        for w in ws:
            after[w].append(n)
            need[n] += 1
    ready = [n for n in order if not need[n]]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for m in after[n]:
            need[m] -= 1
            if not need[m]:
                ready.append(m)
    return done == len(order)


def tasks_for(graph: Graph, plan: Plan, profile: DeviceProfile, *, costs: dict[str, OpCost],
              order: list[str], extra_waits: dict[str, list[str]] | None = None) -> list[Task]:
    """Tasks in ``order`` (the issue order); plan events become waits, and so do
    ``extra_waits`` (op -> ops it waits for: :attr:`Reorder.waits`); C2 core limits and a
    CPU stream's share of the cores rescale the ``costs``."""
    ops = graph.index()
    idx = {n: i for i, n in enumerate(order)}
    limits = {int(s): int(v.get("aicore_num", 0)) for s, v in (plan.core_limits or {}).items()
              if isinstance(v, dict)}
    streams = sorted(set(plan.assignment.values()))
    if profile.on_host and len(streams) > 1:
        # CPU streams are worker threads that split the cores (intra-op threads per stream)
        share = max(1, profile.cores.cube // len(streams))
        for st in streams:
            limits.setdefault(st, share)
    waits: dict[str, list[int]] = {}
    for e in plan.events:
        if e.wait_before is not None:
            waits.setdefault(e.wait_before, []).append(idx[e.record_after])
    for n, ws in (extra_waits or {}).items():
        have = waits.setdefault(n, [])
        have += [idx[w] for w in ws if idx[w] not in have]
    # CPU streams are Python threads: each op's dispatch (the executor's per-op cost) holds
    # the interpreter lock, so two streams' dispatches never overlap, only their kernels
    host_us = profile.op_host_us
    # the cold cost goes on after a stream's share of the cores is known (it depends on it)
    idle, data = cold_idles(ops, costs, order, profile) if has_cold(profile) else ({}, {})
    out = []
    for n in order:
        c = costs[n]
        s = plan.assignment.get(n, 0)
        if limits.get(s):
            c = with_cores(c, profile, limits[s])
        extra = cold_us(c, profile, idle[n], data.get(n)) if idle else 0.0
        if extra:
            c = msgspec.structs.replace(c, dur_us=c.dur_us + extra)
        pool = c.unit if c.unit in ("cube", "vector") else "none"
        kind = {"comm": KIND_COMM, "memory": KIND_MEMCPY}.get(c.unit, KIND_COMPUTE)
        out.append(Task(name=n, stream=s, dur_us=c.dur_us, pool=pool, block_dim=c.block_dim,
                        memory_bound=(c.bound == "memory" and c.unit != "comm"),
                        waits=waits.get(n, []), type=ops[n].type, kind=kind,
                        # its folded views are Python-level torch calls: lock held too
                        host_us=host_us + c.views_us))
    return out


def measured_costs(graph: Graph, profile: DeviceProfile,
                   timelines: Iterable[Timeline]) -> dict[str, OpCost]:
    """Op costs from captured single-stream runs: each op's median duration over
    ``timelines`` (matched by name; ops never seen keep the profile's estimate), plus the
    profile's per-op launch cost on a CPU, less its part inside a recorded interval
    (``op_inside_us``). On a CPU the op ran on all cores' intra-op
    threads: that becomes its block dim, so a plan that gives its stream fewer cores
    scales it by the profile's op rates (:func:`parastream.device.cost.with_cores`). A
    device kernel keeps the blocks the profile says it asks for (taking every core would
    serialise all streams in the simulation).

    This is how a multi-stream plan is predicted from one single-stream profile run, the
    loop an engineer runs on a real device: capture once, simulate the candidates."""
    ops = graph.index()
    seen: dict[str, list[float]] = {}
    for tl in timelines:
        dur = ((tl.end_ns - tl.start_ns) / 1e3).tolist()
        names = np.asarray(tl.names, dtype=object)[tl.name].tolist()  # one lookup per run
        for name, d in zip(names, dur):
            if name in ops:
                seen.setdefault(name, []).append(d)
    on_host = profile.on_host
    # the captured interval already holds the executor's work inside it (reading the
    # inputs, storing the value): only the rest of its per-op cost comes on top (a device
    # profile has no per-op host cost: 0)
    launch = max(0.0, profile.op_host_us - profile.op_inside_us)
    k = profile.cores.cube
    out: dict[str, OpCost] = {}
    for n, op in ops.items():
        c = estimate(op, profile)
        if n in seen:
            # the captured interval holds the op's folded views too
            c = msgspec.structs.replace(c, dur_us=statistics.median(seen[n]) + launch,
                                        measured=True, views_us=0.0)
            if on_host and not (c.rate_key and runs_serial(op, c.rate_key, profile)):
                # (an op torch runs on the calling thread ran on one whatever the count;
                # on a 1-core profile k is 1 anyway)
                on_cores = c.unit in ("cube", "vector")
                c = msgspec.structs.replace(
                    c, block_dim=min(k, profile.unit_cores(c.unit)) if on_cores else 0,
                    threads=k if c.rate_key else 0)
        out[n] = c
    return out


@dataclass
class SimRun:
    plan: Plan
    result: Result
    mode: str = "eager"
    #: GE's reorder as simulated (``ge=True``), else None
    reorder: Reorder | None = None


@dataclass(frozen=True)
class SimOptions:
    """How :func:`simulate_plan` simulates a plan."""

    #: :data:`MODES`; None: ``graph`` with ``ge``, else ``eager``
    mode: str | None = None
    #: apply GE's reorder (:func:`ge_reorder`) to the issue order first
    ge: bool = False
    #: relative duration jitter, seeded by ``seed``
    jitter: float = 0.0
    seed: int = 0


def simulate_plan(graph: Graph, plan: Plan, profile: DeviceProfile,
                  options: SimOptions | None = None, *, costs: dict[str, OpCost] | None = None,
                  order: list[str] | None = None, **overrides: Any) -> SimRun:
    """Simulate one plan with ``options`` (:class:`SimOptions`; keyword ``overrides`` such
    as ``mode="graph"`` or ``ge=True`` replace its fields): in ``mode`` (:data:`MODES`;
    default ``graph`` with ``ge``, else ``eager``); ``ge=True`` first applies GE's reorder
    (:func:`ge_reorder`) to the issue order, a graph-mode compiler pass. Pass ``costs`` and
    the graph's validated ``order`` when simulating many plans of one graph. InputError
    when the profile cannot simulate the mode (:func:`require_mode`); TypeError for an
    unknown override."""
    opts = dataclasses.replace(options or SimOptions(), **overrides)
    ge = opts.ge
    mode = opts.mode or ("graph" if ge else "eager")
    require_mode(profile, mode)
    order = order or validate(graph)
    if costs is None:
        ops = graph.index()
        costs = {n: estimate(ops[n], profile) for n in order}
    reorder = None
    if ge:
        reorder = ge_reorder(graph, plan, order, {n: c.dur_us for n, c in costs.items()},
                             hw_queues=profile.hw_queues)
        order = reorder.order
    tasks = tasks_for(graph, plan, profile, costs=costs, order=order,
                      extra_waits=reorder.waits if reorder else None)
    res = simulate(tasks, device_of(profile, mode), jitter=opts.jitter, seed=opts.seed,
                   name=f"{graph.name}: {plan.name} ({sim_label(profile)})",
                   shared_pool=profile.shared_cores)
    # a CPU executor's fixed cost per forward call (setup, rejoin; more with every extra
    # stream) is part of every wall it measures, so the predicted wall includes it; the
    # timeline holds the ops only (its span is the wall less this overhead)
    res.wall_us += profile.run_overhead_us + profile.stream_overhead_us * max(
        0, plan.stream_count() - 1)
    return SimRun(plan, res, mode, reorder)
