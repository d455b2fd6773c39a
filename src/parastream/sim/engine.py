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

import heapq
import random
from dataclasses import dataclass, field

from ..timeline.model import (KIND_COMM, KIND_COMPUTE, KIND_MEMCPY, Timeline, TimelineBuilder,
                              core_code)

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
    n = len(tasks)
    rng = random.Random(seed)
    scale = [1.0 + jitter * (2 * rng.random() - 1) if jitter else 1.0 for _ in range(n)]
    q_count = max(1, device.hw_queues)
    queues: list[list[int]] = [[] for _ in range(q_count)]
    head = [0] * q_count
    free = {"cube": device.cube_cores, "vector": device.vector_cores}
    cap = {"cube": device.cube_cores, "vector": device.vector_cores}
    done_at = [-1.0] * n
    start_at = [0.0] * n
    started = [False] * n
    need = [0] * n
    pool_of = []
    for i, t in enumerate(tasks):
        p = t.pool if t.pool in POOLS else "none"
        if shared_pool and p == "vector":
            p = "cube"
        pool_of.append(p)
        need[i] = max(1, min(t.block_dim, cap[p])) if p != "none" else 0
    waiting_since = [-1.0] * n  # when the head task started waiting for an event
    wait_iv: list[tuple[int, float, float, int]] = []  # (task, start, end, waited-on task)
    # memory-bound tasks in flight, with remaining work in full-bandwidth microseconds
    mem_left: dict[int, float] = {}
    mem_mark = 0.0
    version = [0] * n
    heap: list[tuple[float, int, int, int, int]] = []  # (time, prio, seq, task, version)
    seq = 0
    issued = 0
    now = 0.0
    rr = 0  # round-robin start of the next sweep
    busy = {"cube": 0.0, "vector": 0.0}
    finished = 0

    def mem_rate() -> float:
        return 1.0 / len(mem_left) if mem_left else 1.0

    def settle_mem(t: float) -> None:
        nonlocal mem_mark
        if mem_left:
            r = mem_rate()
            for k in mem_left:
                mem_left[k] -= (t - mem_mark) * r
        mem_mark = t

    def reschedule_mem(t: float) -> None:
        nonlocal seq
        r = mem_rate()
        for k, left in mem_left.items():
            version[k] += 1
            seq += 1
            heapq.heappush(heap, (t + max(0.0, left) / r, 0, seq, k, version[k]))

    def sweep(t: float) -> None:
        nonlocal rr, seq
        progressed = True
        while progressed:
            progressed = False
            for j in range(q_count):
                qi = (rr + j) % q_count
                if head[qi] >= len(queues[qi]):
                    continue
                i = queues[qi][head[qi]]
                if started[i]:
                    continue
                blocked = [w for w in tasks[i].waits if done_at[w] < 0 or done_at[w] > t]
                if blocked:
                    if waiting_since[i] < 0:
                        waiting_since[i] = t
                    continue
                p = pool_of[i]
                if p != "none" and free[p] < need[i]:
                    continue
                if waiting_since[i] >= 0:
                    last = max(tasks[i].waits, key=lambda w: done_at[w])
                    wait_iv.append((i, waiting_since[i], t, last))
                if p != "none":
                    free[p] -= need[i]
                begin = t + device.sweep_us
                started[i] = True
                start_at[i] = begin
                dur = tasks[i].dur_us * scale[i]
                if tasks[i].memory_bound and dur > 0:
                    # the sweep is folded into the shared work so all memory bookkeeping
                    # happens at the current time
                    settle_mem(t)
                    mem_left[i] = dur + device.sweep_us
                    reschedule_mem(t)
                else:
                    seq += 1
                    heapq.heappush(heap, (begin + dur, 0, seq, i, version[i]))
                rr = (qi + 1) % q_count
                progressed = True
                break

    issue_times = [k * device.launch_us for k in range(n)]
    while finished < n:
        t_issue = issue_times[issued] if issued < n else float("inf")
        t_next = heap[0][0] if heap else float("inf")
        if t_issue <= t_next:
            now = t_issue
            i = issued
            queues[tasks[i].stream % q_count].append(i)
            issued += 1
            sweep(now)
            continue
        now, _, _, i, ver = heapq.heappop(heap)
        if ver != version[i] or done_at[i] >= 0:
            continue
        if i in mem_left:
            settle_mem(now)
            del mem_left[i]
            reschedule_mem(now)
        done_at[i] = now
        finished += 1
        p = pool_of[i]
        if p != "none":
            free[p] += need[i]
            busy[p] += need[i] * (now - start_at[i])
        qi = tasks[i].stream % q_count
        while head[qi] < len(queues[qi]) and done_at[queues[qi][head[qi]]] >= 0:
            head[qi] += 1
        sweep(now)

    b = TimelineBuilder(name, "simulated")
    for i, t in enumerate(tasks):
        b.add_op(str(t.stream), t.name, int(round(start_at[i] * 1000)), int(round(done_at[i] * 1000)),
                 type=t.type, kind=t.kind, core=core_code({"cube": "AI_CORE", "vector": "AI_VECTOR_CORE"}
                                                          .get(pool_of[i], "")),
                 block_dim=need[i] if pool_of[i] != "none" else -1)
    for i, s, e, w in wait_iv:
        b.add_wait(str(tasks[i].stream), int(round(s * 1000)), int(round(e * 1000)),
                   on_stream=str(tasks[w].stream), name="EVENT_WAIT")
    b.device.name = device.name
    b.device.ai_core_num = device.cube_cores
    b.device.vector_core_num = device.vector_cores
    b.meta["label"] = name
    wall = max(done_at) if n else 0.0
    return Result(b.build(), wall, busy, n)
