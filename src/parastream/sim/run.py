"""From a graph, a plan and a device profile to simulated tasks and a simulated timeline.

Also emulates GE's auto-reorder (DOMAIN.md §3): a cheap precompute that consumes a side
output on the main stream is issued ahead of the main dominator, so the main stream's FIFO
blocks on the side stream — the seed's false parallelism.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable

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


def sim_label(profile: DeviceProfile) -> str:
    """How every simulated figure is labelled (and how a plan's estimate names its source)."""
    return f"simulated on {profile.name}"


def device_of(profile: DeviceProfile) -> Device:
    return Device(name=profile.name, cube_cores=profile.cores.cube,
                  vector_cores=profile.cores.vector, hw_queues=profile.hw_queues,
                  launch_us=profile.launch_overhead_us, sweep_us=profile.scheduler_sweep_us,
                  memory_streams=profile.memory_streams,
                  # CPU streams are Python threads: each task's host part (dispatch, folded
                  # views) holds the interpreter lock; a device's host work overlaps
                  host_lock=profile.kind == "cpu",
                  wake_us=profile.event_wake_us,
                  # a worker sleeping on the interpreter lock is woken like one sleeping on
                  # an event: the same OS wake-up, which calibrate measures
                  lock_wake_us=profile.event_wake_us)


def ge_reorder(graph: Graph, plan: Plan, order: list[str], dur: dict[str, float]) -> list[str]:
    """The issue order GE would produce: each cheap main-stream consumer of a side output
    (the ``ge-reorder`` lint) moved to just before the dominator it does not depend on."""
    order = list(order)
    preds = graph.predecessor_names()
    for l in lint(graph, plan, dur):
        if l.rule != "ge-reorder":
            continue
        _, v, d = l.ops
        if order.index(v) < order.index(d):
            continue
        order.remove(v)
        # as early as its own inputs allow, but ahead of the dominator
        after = max((order.index(p) + 1 for p in preds.get(v, ())), default=0)
        order.insert(max(after, 0) if after > order.index(d) else order.index(d), v)
    return order


def tasks_for(graph: Graph, plan: Plan, profile: DeviceProfile, *, costs: dict[str, OpCost],
              order: list[str]) -> list[Task]:
    """Tasks in ``order`` (the issue order); plan events become waits; C2 core limits and a
    CPU stream's share of the cores rescale the ``costs``."""
    ops = graph.index()
    idx = {n: i for i, n in enumerate(order)}
    limits = {int(s): int(v.get("aicore_num", 0)) for s, v in (plan.core_limits or {}).items()
              if isinstance(v, dict)}
    streams = sorted(set(plan.assignment.values()))
    if profile.kind == "cpu" and len(streams) > 1:
        # CPU streams are worker threads that split the cores (intra-op threads per stream)
        share = max(1, profile.cores.cube // len(streams))
        for st in streams:
            limits.setdefault(st, share)
    waits: dict[str, list[int]] = {}
    for e in plan.events:
        if e.wait_before is not None:
            waits.setdefault(e.wait_before, []).append(idx[e.record_after])
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
    cpu = profile.kind == "cpu"
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
            if cpu and not (c.rate_key and runs_serial(op, c.rate_key, profile)):
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


def simulate_plan(graph: Graph, plan: Plan, profile: DeviceProfile, *, ge: bool = False,
                  jitter: float = 0.0, seed: int = 0, costs: dict[str, OpCost] | None = None,
                  order: list[str] | None = None) -> SimRun:
    """Simulate one plan; ``ge=True`` first applies GE's reorder to the issue order. Pass
    ``costs`` and the graph's validated ``order`` when simulating many plans of one graph."""
    order = order or validate(graph)
    if costs is None:
        ops = graph.index()
        costs = {n: estimate(ops[n], profile) for n in order}
    if ge:
        order = ge_reorder(graph, plan, order, {n: c.dur_us for n, c in costs.items()})
    tasks = tasks_for(graph, plan, profile, costs=costs, order=order)
    res = simulate(tasks, device_of(profile), jitter=jitter, seed=seed,
                   name=f"{graph.name}: {plan.name} ({sim_label(profile)})",
                   shared_pool=profile.shared_cores)
    # a CPU executor's fixed cost per forward call (setup, rejoin; more with every extra
    # stream) is part of every wall it measures, so the predicted wall includes it; the
    # timeline holds the ops only (its span is the wall less this overhead)
    res.wall_us += profile.run_overhead_us + profile.stream_overhead_us * max(
        0, plan.stream_count() - 1)
    return SimRun(plan, res)
