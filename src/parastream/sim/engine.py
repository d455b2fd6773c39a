"""A deterministic discrete-event model of a device's hardware stream scheduler (seed 000).

- The host issues tasks in program order, one launch overhead apart (a plan can be
  host-bound).
- Each stream is a FIFO; streams beyond the device's hardware queues share queues
  (stream ``s`` uses queue ``s mod hw_queues``), so they add no parallelism.
- The scheduler sweeps the queues round-robin: a queue's head task starts when the events it
  waits for are recorded and enough cores of its pool (block dim, capped at the pool, or at
  the plan's C2 core limit) are free; a dispatch costs one sweep.
- Memory-bound tasks running at the same time share the memory bandwidth (processor
  sharing); compute-bound tasks run at full speed.
- Waiting for an event blocks only that queue; the time a head task waited for an event
  becomes an EVENT_WAIT interval on its stream.
- Optional seeded jitter scales each task's duration.

The loop is a hand-rolled heap keyed by (time, priority, sequence), as in SimPy, without
its per-event generator overhead. The result is a :class:`parastream.timeline.Timeline`, so
``parastream analyze`` reads a simulated run like a captured one.
"""

from __future__ import annotations

import gc
import heapq
import random
from dataclasses import dataclass, field

import numpy as np

from ..timeline.model import KIND_COMPUTE, DeviceInfo, Interner, Timeline, core_code, make_timeline

POOLS = ("cube", "vector")


@dataclass
class Task:
    """One op as the device sees it."""

    name: str
    stream: int
    dur_us: float
    pool: str = "cube"  # "cube" | "vector" | "none" (DMA, comm, host: no cores)
    block_dim: int = 1
    memory_bound: bool = False
    waits: list[int] = field(default_factory=list)  # task indices whose completion it waits for
    type: str = ""
    kind: int = KIND_COMPUTE


@dataclass
class Device:
    """What the engine needs of a device profile."""

    name: str
    cube_cores: int
    vector_cores: int
    hw_queues: int
    launch_us: float
    sweep_us: float


@dataclass
class Result:
    timeline: Timeline
    wall_us: float
    busy_cores_us: dict[str, float]
    tasks: int


def simulate(tasks: list[Task], device: Device, *, jitter: float = 0.0, seed: int = 0,
             name: str = "simulated", shared_pool: bool = False) -> Result:
    """Run ``tasks`` (in issue order) on ``device``; deterministic for a given seed.

    ``shared_pool``: cube and vector work compete for the same cores (GPUs, CPUs, coupled
    Ascend parts).
    """
    gc_was = gc.isenabled()
    gc.disable()  # millions of small tuples and no cycles: collections would dominate
    try:
        return _simulate(tasks, device, jitter, seed, name, shared_pool)
    finally:
        if gc_was:
            gc.enable()


def _simulate(tasks: list[Task], device: Device, jitter: float, seed: int, name: str,
              shared_pool: bool) -> Result:
    n = len(tasks)
    rng = random.Random(seed)
    scale = [1.0 + jitter * (2 * rng.random() - 1) for _ in range(n)] if jitter else None
    q_count = max(1, device.hw_queues)
    queues: list[list[int]] = [[] for _ in range(q_count)]
    head = [0] * q_count
    cap = {"cube": device.cube_cores, "vector": device.vector_cores, "none": 0}
    free = dict(cap)
    done_at = [-1.0] * n
    start_at = [0.0] * n
    started = [False] * n
    pending = [0] * n  # waits not yet satisfied
    waiters: list[list[int] | None] = [None] * n  # tasks waiting for task i
    dur_of = [t.dur_us for t in tasks]
    if scale:
        dur_of = [d * f for d, f in zip(dur_of, scale)]
    mem_bound = [t.memory_bound for t in tasks]
    streams_of = [t.stream for t in tasks]
    raw_pool = [t.pool for t in tasks]
    if shared_pool:
        pool_of = ["cube" if p in POOLS else "none" for p in raw_pool]
    else:
        pool_of = [p if p in POOLS else "none" for p in raw_pool]
    pool_cap = np.array([cap[p] for p in pool_of], np.int64) if n else np.zeros(0, np.int64)
    blocks = np.array([t.block_dim for t in tasks], np.int64) if n else np.zeros(0, np.int64)
    need = np.where(pool_cap > 0, np.clip(np.minimum(blocks, pool_cap), 1, None), 0).tolist()
    queue_of = (np.array(streams_of, np.int64) % q_count).tolist() if n else []
    for i, t in enumerate(tasks):
        if t.waits:
            pending[i] = len(t.waits)
            for w in t.waits:
                lst = waiters[w]
                if lst is None:
                    waiters[w] = [i]
                else:
                    lst.append(i)
    waiting_since = [-1.0] * n  # when a head task started waiting for an event
    wait_iv: list[tuple[int, float, float, int]] = []  # (task, start, end, waited-on task)
    last_done: list[int] = [-1] * n  # the wait that was satisfied last
    # memory-bound tasks in flight, with remaining work in full-bandwidth microseconds
    mem_left: dict[int, float] = {}
    mem_mark = 0.0
    expect = [0] * n  # the sequence number of a task's live completion entry (older = stale)
    heap: list[tuple[float, int, int]] = []  # (time, seq, task)
    seq = 0
    rr = 0  # round-robin start: the queue after the last one that dispatched
    blocked_cores: dict[str, set[int]] = {"cube": set(), "vector": set()}
    busy = {"cube": 0.0, "vector": 0.0, "none": 0.0}
    sweep_us = device.sweep_us
    push = heapq.heappush

    def settle_mem(t: float) -> None:
        nonlocal mem_mark
        if mem_left:
            d = (t - mem_mark) / len(mem_left)
            for k in mem_left:
                mem_left[k] -= d
        mem_mark = t

    def reschedule_mem(t: float) -> None:
        nonlocal seq
        k_n = len(mem_left)
        for k, left in mem_left.items():
            seq += 1
            expect[k] = seq
            push(heap, (t + (left if left > 0 else 0.0) * k_n, seq, k))

    def try_dispatch(qs, t: float) -> None:
        """Dispatch the ready heads of the queues ``qs`` (in round-robin order)."""
        nonlocal rr, seq
        if len(qs) > 1:
            qs = sorted(qs, key=lambda q: (q - rr) % q_count)
        qlist = queues
        for qi in qs:
            h = head[qi]
            qq = qlist[qi]
            if h >= len(qq):
                continue
            i = qq[h]
            if started[i]:
                continue
            if pending[i]:
                if waiting_since[i] < 0:
                    waiting_since[i] = t
                continue
            p = pool_of[i]
            if need[i] > free[p]:
                blocked_cores[p].add(qi)
                continue
            if p != "none":
                bcp = blocked_cores[p]
                if bcp:
                    bcp.discard(qi)
                free[p] -= need[i]
            if waiting_since[i] >= 0:
                # the wait lasts until the last awaited event, not until cores were free
                end = done_at[last_done[i]]
                if end > waiting_since[i]:
                    wait_iv.append((i, waiting_since[i], end, last_done[i]))
            started[i] = True
            begin = t + sweep_us
            start_at[i] = begin
            dur = dur_of[i]
            if mem_bound[i] and dur > 0:
                # the sweep is folded into the shared work so memory bookkeeping stays at t
                settle_mem(t)
                mem_left[i] = dur + sweep_us
                reschedule_mem(t)
            else:
                seq += 1
                expect[i] = seq
                push(heap, (begin + dur, seq, i))
            rr = (qi + 1) % q_count

    issued = 0
    launch = device.launch_us
    finished = 0
    has_mem = any(mem_bound)
    inf = float("inf")
    pop = heapq.heappop
    while finished < n:
        t_heap = heap[0][0] if heap else inf
        if issued < n and issued * launch <= t_heap:
            # issue every task the host launches before the next completion, in one go
            while issued < n and issued * launch <= t_heap:
                t_issue = issued * launch
                qi = queue_of[issued]
                qq = queues[qi]
                qq.append(issued)
                issued += 1
                if head[qi] == len(qq) - 1:
                    try_dispatch((qi,), t_issue)
                    if heap and heap[0][0] < t_heap:
                        t_heap = heap[0][0]
            continue
        if not heap:
            raise RuntimeError("simulation stalled: a wait can never be satisfied")
        now, sq, i = pop(heap)
        if sq != expect[i]:
            continue
        if has_mem and i in mem_left:
            settle_mem(now)
            del mem_left[i]
            reschedule_mem(now)
        done_at[i] = now
        finished += 1
        p = pool_of[i]
        free[p] += need[i]
        qi = queue_of[i]
        head[qi] += 1  # the head is the task that just finished (FIFO per queue)
        wl = waiters[i]
        bc = blocked_cores[p] if p != "none" else None
        if not wl and not bc:
            try_dispatch((qi,), now)
            continue
        check = {qi}
        for w in wl or ():
            pending[w] -= 1
            last_done[w] = i
            check.add(queue_of[w])
        if bc:
            check |= bc
        try_dispatch(check, now)

    # core-microseconds each pool was busy, from the final start/end times
    if n:
        work = np.array(need, np.float64) * (np.array(done_at) - np.array(start_at))
        pools = np.array(pool_of)
        for p_name in ("cube", "vector"):
            busy[p_name] = float(work[pools == p_name].sum())
    tl = build_timeline(tasks, start_at, done_at, pool_of, need, wait_iv, device, name)
    wall = max(done_at) if n else 0.0
    return Result(tl, wall, busy, n)


def build_timeline(tasks: list[Task], start_at: list[float], done_at: list[float],
                   pool_of: list[str], need: list[int],
                   wait_iv: list[tuple[int, float, float, int]], device: Device,
                   name: str) -> Timeline:
    """The simulated run as a Timeline (shared with the SimPy oracle, so both give the same
    output); times in us become integer ns."""
    n = len(tasks)
    streams_of = [t.stream for t in tasks]
    pool_cap = np.array([device.cube_cores if p == "cube" else device.vector_cores
                         if p == "vector" else 0 for p in pool_of], np.int64)
    b_names = [t.name for t in tasks]
    stream_ids = sorted(set(streams_of))
    code = {s: k for k, s in enumerate(stream_ids)}
    core_of = {"cube": core_code("AI_CORE"), "vector": core_code("AI_VECTOR_CORE"), "none": 0}
    types = Interner()
    type_code: dict[str, int] = {}
    ops = dict(
        stream=np.array([code[x] for x in streams_of], np.int32),
        name=np.arange(n, dtype=np.int32),
        type=np.array([type_code[x] if x in type_code else type_code.setdefault(x, types.code(x))
                       for x in (t.type for t in tasks)], np.int32),
        start_ns=np.rint(np.array(start_at) * 1000).astype(np.int64),
        end_ns=np.rint(np.array(done_at) * 1000).astype(np.int64),
        kind=np.array([t.kind for t in tasks], np.int8),
        core=np.array([core_of[p] for p in pool_of], np.int8),
        block_dim=np.where(pool_cap > 0, np.array(need, np.int64), -1).astype(np.int32),
        mix_block_dim=np.full(n, -1, np.int32), step=np.full(n, -1, np.int32))
    wait_name = len(b_names)
    waits = None
    if wait_iv:
        waits = dict(
            wait_stream=np.array([code[tasks[i].stream] for i, _, _, _ in wait_iv], np.int32),
            wait_on=np.array([code[tasks[w].stream] if w >= 0 else -1 for _, _, _, w in wait_iv], np.int32),
            wait_start_ns=np.rint(np.array([a for _, a, _, _ in wait_iv]) * 1000).astype(np.int64),
            wait_end_ns=np.rint(np.array([e for _, _, e, _ in wait_iv]) * 1000).astype(np.int64),
            wait_name=np.full(len(wait_iv), wait_name, np.int32))
    dev = DeviceInfo(name=device.name, ai_core_num=device.cube_cores,
                     vector_core_num=device.vector_cores)
    return make_timeline(name, "simulated", [str(s) for s in stream_ids], b_names + ["EVENT_WAIT"],
                       types.values, ops, waits, device=dev, meta={"label": name})
