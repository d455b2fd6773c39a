"""A deterministic discrete-event model of a device's hardware stream scheduler (seed 000).

- The host issues tasks in program order, one launch overhead apart (a plan can be
  host-bound).
- Each stream is a FIFO; streams beyond the device's hardware queues share queues (the
  ``k``-th of the streams in use, in ascending order, uses queue ``k mod hw_queues``: a plan
  on streams 0 and 4 gets two queues, whatever the ids), so they add no parallelism.
- The scheduler sweeps the queues round-robin: a queue's head task starts when the events it
  waits for are recorded and enough cores of its pool (block dim, capped at the pool, or at
  the plan's C2 core limit) are free; a dispatch costs one sweep.
- Memory-bound tasks running at the same time share the memory bandwidth (processor
  sharing): ``n`` of them each run at ``min(1, memory_streams / n)`` of their own speed
  (a CPU core alone cannot pull all of DRAM's bandwidth); compute-bound tasks run at full
  speed.
- Waiting for an event blocks only that queue; the time a head task waited for an event
  becomes an EVENT_WAIT interval on its stream. A task whose wait blocked is looked at again
  only ``wake_us`` after the event (a CPU worker thread's wake-up; 0 on devices): it takes
  no cores and no host lock while its worker sleeps.
- With a host lock (CPU streams: Python's interpreter lock), a task starts only when the
  lock is free as well, and holds it for its first ``host_us``; the others wait for it.
  With ``lock_wake_us`` a task also needs the lock when it ends (to hand over its result);
  one that finds it taken at its end or at its start goes on ``lock_wake_us`` after the
  release (its worker thread sleeps on the lock and is woken by the OS). At its start
  or its end it may find the lock taken again then and wait again (a woken thread does
  not get Python's lock ahead of a running one that takes it first), and at its end it
  gives its cores back while it sleeps.
- Optional seeded jitter scales each task's duration.

The loop is a hand-rolled heap keyed by (time, sequence), as in SimPy, without its
per-event generator overhead; the host's issue is an event only for a task that reaches the
head of an empty queue, since every queue's FIFO is fixed by program order. The result is a :class:`parastream.timeline.Timeline`, so
``parastream analyze`` reads a simulated run like a captured one.
"""

from __future__ import annotations

import array
import heapq
import random
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from ..timeline.model import KIND_COMPUTE, DeviceInfo, Interner, Timeline, core_code, make_timeline
from ..timeline.nogc import gc_paused

# pool codes: 0 = no cores (DMA, comm, host), 1 = cube / SM / CPU cores, 2 = vector
POOL_CODE = {"cube": 1, "vector": 2}


@dataclass(slots=True)
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
    #: microseconds at the task's start that need the host lock (``Device.host_lock``)
    host_us: float = 0.0


@dataclass
class Device:
    """What the engine needs of a device profile."""

    name: str
    cube_cores: int
    vector_cores: int
    hw_queues: int
    launch_us: float
    sweep_us: float
    #: memory-bound tasks that run at full speed at once (``DeviceProfile.memory_streams``)
    memory_streams: float = 1.0
    #: one lock that every task holds for its first ``host_us``: the Python interpreter
    #: lock of the CPU stream backend, whose worker threads run each op's Python part
    #: (the executor's dispatch, torch's argument parsing) one at a time
    host_lock: bool = False
    #: a task whose wait blocked starts this long after the event it waited for (a CPU
    #: stream's worker sleeps on the event and is woken by the OS)
    wake_us: float = 0.0
    #: with the host lock, a task needs it at its end too (a CPU worker takes Python's
    #: interpreter lock back to hand over the op's result): one that finds it taken, or
    #: that could not start for it, goes on this long after the lock's release (its worker
    #: sleeps on the lock). 0: no such wait, and a blocked start goes on at the release
    lock_wake_us: float = 0.0


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
    with gc_paused():  # millions of small tuples
        return _simulate(tasks, device, jitter, seed, name, shared_pool)


def _rr_distance(rr: int, q_count: int, q: int) -> int:
    return (q - rr) % q_count


def _rr_order(queues: set[int], rr: int, q_count: int) -> tuple[int, ...] | list[int]:
    """``queues`` in round-robin order from ``rr``, as a copy (the caller may clear the
    set); most sets hold no queue or one, so sorting happens only when it matters (a
    partial, not a closure: ``rr`` stays a fast local of the loop)."""
    if len(queues) > 1:
        return sorted(queues, key=partial(_rr_distance, rr, q_count))
    return tuple(queues)


def _simulate(tasks: list[Task], device: Device, jitter: float, seed: int, name: str,
              shared_pool: bool) -> Result:
    n = len(tasks)
    q_count = max(1, device.hw_queues)
    head = [0] * q_count
    running = [False] * q_count  # the queue's head task has been dispatched
    free = [0, device.cube_cores, device.vector_cores]  # indexed by pool code
    dur_of = [t.dur_us for t in tasks]
    if jitter:
        rng = random.Random(seed)
        dur_of = [d * (1.0 + jitter * (2 * rng.random() - 1)) for d in dur_of]
    mem_bound = [t.memory_bound for t in tasks]
    code = POOL_CODE
    if shared_pool:
        pool_of = [1 if t.pool in code else 0 for t in tasks]
    else:
        pool_of = [code.get(t.pool, 0) for t in tasks]
    pools = np.array(pool_of, np.int8) if n else np.zeros(0, np.int8)
    pool_cap = np.array(free, np.int64)[pools]
    blocks = np.array([t.block_dim for t in tasks], np.int64) if n else np.zeros(0, np.int64)
    need = np.where(pool_cap > 0, np.clip(np.minimum(blocks, pool_cap), 1, None), 0).tolist()
    streams = np.array([t.stream for t in tasks], np.int64) if n else np.zeros(0, np.int64)
    # by rank among the streams in use, not by id: ids are labels (a hand-edited plan on
    # streams 0 and 4 was serialised on one queue of 4 by s mod 4)
    q_arr = (np.unique(streams, return_inverse=True)[1].reshape(-1) % q_count
             if n else streams)
    queue_of = q_arr.tolist()
    # The host issues tasks in program order, so every queue's FIFO is known up front; a task
    # has been issued at time t when index * launch <= t.
    q_split = np.cumsum(np.bincount(q_arr, minlength=q_count))[:-1]
    queues = [x.tolist() for x in np.split(np.argsort(q_arr, kind="stable"), q_split)]
    pending = [0] * n  # waits not yet satisfied
    waiters: list[list[int] | None] = [None] * n  # tasks waiting for task i
    for i, ws in enumerate([t.waits for t in tasks]):
        if ws:
            pending[i] = len(ws)
            for w in ws:
                lst = waiters[w]
                if lst is None:
                    waiters[w] = [i]
                else:
                    lst.append(i)
    # C doubles, not float objects: the result arrays are then views, not 2M scattered boxes
    done_at = array.array("d", bytes(8 * n))
    start_at = array.array("d", bytes(8 * n))
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
    blocked: list[set[int]] = [set(), set(), set()]  # per pool: queues whose head lacks cores
    sweep_us = device.sweep_us
    wake_us = device.wake_us
    push = heapq.heappush

    mem_streams = max(1.0, device.memory_streams)

    def settle_mem(t: float) -> None:
        nonlocal mem_mark
        if mem_left:
            d = (t - mem_mark) * min(1.0, mem_streams / len(mem_left))
            for k in mem_left:
                mem_left[k] -= d
        mem_mark = t

    def reschedule_mem(t: float, seq: int) -> int:
        slow = max(1.0, len(mem_left) / mem_streams)  # each task's stretch at this share
        for k, left in mem_left.items():
            seq += 1
            expect[k] = seq
            push(heap, (t + (left if left > 0 else 0.0) * slow, seq, k))
        return seq

    host_of = [t.host_us for t in tasks] if device.host_lock else [0.0] * n
    lock_busy = False
    lock_holder = -1  # the task holding it (a task never waits for its own release)
    lock_blocked: set[int] = set()  # queues whose head waits for the host lock
    # a CPU op's worker takes the lock again when its kernel ends (to hand over the result):
    # finished tasks that found it taken, and whether a task already waited so
    lock_wake_us = device.lock_wake_us if device.host_lock else 0.0
    done_blocked: list[int] = []
    deferred = [False] * n
    retry_at = [-1.0] * q_count  # when a queue's woken head is next looked at
    launch = device.launch_us
    # tasks at the head of their queue that the host has not issued yet, by index (= issue time)
    wake = [qq[0] for qq in queues if qq]
    heapq.heapify(wake)
    has_mem = any(mem_bound)
    pop = heapq.heappop
    # One event per iteration: the host issues a task that heads its queue (issues that come
    # no later than the next completion go first), or a task completes; then the queues that
    # may have become ready are swept. Tasks issued behind others need no event of their own.
    # The sweep is inlined: it runs at least once per task, and a call per sweep costs more
    # than the rest of it.
    while True:
        if wake and (not heap or wake[0] * launch <= heap[0][0]):
            i = pop(wake)
            t = i * launch
            qs = (queue_of[i],)
        else:
            if not heap:
                if any(h < len(qq) for h, qq in zip(head, queues)):
                    raise RuntimeError("simulation stalled: a wait can never be satisfied")
                break
            t, sq, i = pop(heap)
            if i < 0:
                j = ~i
                if j >= n:  # a woken worker is ready: sweep its queue again
                    qs = (j - n,)
                else:  # task j released the host lock: sweep the queues waiting for it
                    lock_busy = False
                    lock_holder = -1
                    for k in done_blocked:  # finished kernels waiting to return
                        seq += 1
                        expect[k] = seq
                        push(heap, (t + lock_wake_us, seq, k))
                    done_blocked.clear()
                    qs = _rr_order(lock_blocked, rr, q_count)
                    lock_blocked.clear()
                    if lock_wake_us and qs:
                        # their workers sleep on the lock: each is looked at again one
                        # wake-up later (and may find it taken again by then)
                        for qw in qs:
                            seq += 1
                            push(heap, (t + lock_wake_us, seq, ~(n + qw)))
                        qs = ()
            else:
                if has_mem:
                    if sq != expect[i]:
                        continue  # superseded when bandwidth shares changed
                    if i in mem_left:
                        settle_mem(t)
                        del mem_left[i]
                        seq = reschedule_mem(t, seq)
                if lock_busy and lock_holder != i and lock_wake_us and host_of[i]:
                    # its worker needs the lock back to hand over the result, and another
                    # stream's task holds it: it sleeps until the release and one wake-up,
                    # and again if by then the lock is taken again (a woken waiter does not
                    # get Python's lock ahead of a running thread that takes it first)
                    done_blocked.append(i)
                    if deferred[i]:
                        continue  # its cores went back when it first slept
                    deferred[i] = True
                    # its kernel is done: its cores go back now, to whoever waits for them
                    p = pool_of[i]
                    if not p:
                        continue
                    free[p] += need[i]
                    if not blocked[p]:
                        continue
                    qs = _rr_order(blocked[p], rr, q_count)
                else:
                    done_at[i] = t
                    p = pool_of[i]
                    qi = queue_of[i]
                    h = head[qi] + 1  # the head is the task that just finished (FIFO per queue)
                    head[qi] = h
                    running[qi] = False
                    qq = queues[qi]
                    if h < len(qq) and qq[h] * launch > t:
                        push(wake, qq[h])
                    wl = waiters[i]
                    if p and not deferred[i]:  # (a deferred task gave its cores back)
                        free[p] += need[i]
                        bc = blocked[p]
                    else:
                        bc = None
                    if not bc and (not wl or len(wl) == 1):
                        if not wl:
                            qs = (qi,)
                        else:  # the common wait: one task released, at most two queues to sweep
                            w = wl[0]
                            pending[w] -= 1
                            last_done[w] = i
                            qw = queue_of[w]
                            if qw == qi:
                                qs = (qi,)
                            elif (qi - rr) % q_count < (qw - rr) % q_count:
                                qs = (qi, qw)
                            else:
                                qs = (qw, qi)
                    else:
                        check = {qi}
                        for w in wl or ():
                            pending[w] -= 1
                            last_done[w] = i
                            check.add(queue_of[w])
                        if bc:
                            check |= bc
                        qs = _rr_order(check, rr, q_count)
        for qi in qs:
            # start queue qi's head task at t if its events are recorded and its cores free
            qq = queues[qi]
            h = head[qi]
            if running[qi] or h >= len(qq):
                continue
            i = qq[h]
            if i * launch > t:
                continue  # not issued yet: its wake-up comes
            if pending[i]:
                if waiting_since[i] < 0:
                    waiting_since[i] = t
                continue
            ws = waiting_since[i]
            if ws >= 0:
                last = last_done[i]
                awaited_end = done_at[last]
            if ws >= 0 and wake_us:
                # a wait that blocked: the worker runs again one wake-up after the event,
                # and takes no cores and no lock before that
                ready = awaited_end + wake_us
                if awaited_end > ws and t < ready:
                    if retry_at[qi] != ready:
                        retry_at[qi] = ready
                        seq += 1
                        push(heap, (ready, seq, ~(n + qi)))
                    continue
            p = pool_of[i]
            if p:
                k = need[i]
                if k > free[p]:
                    blocked[p].add(qi)
                    continue
            hu = host_of[i]
            if hu and lock_busy:
                lock_blocked.add(qi)
                continue
            if p:
                bp = blocked[p]
                if bp:
                    bp.discard(qi)
                free[p] -= k
            begin = t + sweep_us
            if ws >= 0 and awaited_end > ws:
                # the wait lasts until the last awaited event, not until cores were free
                wait_iv.append((i, ws, awaited_end, last))
            running[qi] = True
            start_at[i] = begin
            dur = dur_of[i]
            if hu:
                lock_busy = True
                lock_holder = i
                seq += 1
                push(heap, (begin + min(hu, dur), seq, ~i))
            seq += 1
            if has_mem and mem_bound[i] and dur > 0:
                # the sweep is folded into the shared work so memory bookkeeping stays at t
                settle_mem(t)
                mem_left[i] = dur + sweep_us
                seq = reschedule_mem(t, seq)
            else:
                if has_mem:
                    expect[i] = seq
                push(heap, (begin + dur, seq, i))
            rr = qi + 1 if qi + 1 < q_count else 0

    start = np.frombuffer(start_at, np.float64) if n else np.zeros(0)
    done = np.frombuffer(done_at, np.float64) if n else np.zeros(0)
    tl = build_timeline(tasks, start, done, pools, need, wait_iv, device, name, streams)
    wall = float(done.max()) if n else 0.0
    return Result(tl, wall, busy_cores(start, done, pools, need), n)


def busy_cores(start: np.ndarray, done: np.ndarray, pools: np.ndarray,
               need: list[int]) -> dict[str, float]:
    """Core-microseconds each pool was busy, from the final start/end times."""
    work = np.array(need, np.float64) * (np.asarray(done) - np.asarray(start))
    pools = np.asarray(pools)
    return {name: float(work[pools == code].sum()) for name, code in POOL_CODE.items()}


def build_timeline(tasks: list[Task], start_at: list[float], done_at: list[float],
                   pools: np.ndarray, need: list[int],
                   wait_iv: list[tuple[int, float, float, int]], device: Device,
                   name: str, stream: np.ndarray | None = None) -> Timeline:
    """The simulated run as a Timeline (shared with the SimPy oracle, so both give the same
    output); ``pools`` holds each task's pool code (0 none, 1 cube, 2 vector); times in us
    become integer ns; ``stream`` is the tasks' stream column when the caller has it."""
    n = len(tasks)
    if stream is None:
        stream = np.array([t.stream for t in tasks], np.int64) if n else np.zeros(0, np.int64)
    if n and stream.min() >= 0 and stream.max() < 1 << 16:
        # few small stream ids: a lookup table instead of sorting a million ids
        stream_ids = np.flatnonzero(np.bincount(stream))
        lut = np.zeros(int(stream_ids[-1]) + 1, np.int32)
        lut[stream_ids] = np.arange(len(stream_ids), dtype=np.int32)
        s_code = lut[stream]
    else:
        stream_ids = np.unique(stream)
        s_code = np.searchsorted(stream_ids, stream).astype(np.int32)
    pools = np.asarray(pools, np.int64)
    pool_cap = np.array([0, device.cube_cores, device.vector_cores], np.int64)[pools]
    core_of = np.array([0, core_code("AI_CORE"), core_code("AI_VECTOR_CORE")], np.int8)
    types = Interner()
    type_code: dict[str, int] = {}
    ops = dict(
        stream=s_code,
        name=np.arange(n, dtype=np.int32),
        type=np.array([type_code[x] if x in type_code else type_code.setdefault(x, types.code(x))
                       for x in [t.type for t in tasks]], np.int32),
        start_ns=np.rint(np.array(start_at, np.float64) * 1000).astype(np.int64),
        end_ns=np.rint(np.array(done_at, np.float64) * 1000).astype(np.int64),
        kind=np.array([t.kind for t in tasks], np.int8),
        core=core_of[pools],
        block_dim=np.where(pool_cap > 0, np.array(need, np.int64), -1).astype(np.int32),
        mix_block_dim=np.full(n, -1, np.int32), step=np.full(n, -1, np.int32))
    wait_name = n
    waits = None
    if wait_iv:
        iv = np.array(wait_iv, np.float64)  # (task, start, end, waited-on task)
        task = iv[:, 0].astype(np.int64)
        on = iv[:, 3].astype(np.int64)
        waits = dict(
            wait_stream=s_code[task],
            wait_on=np.where(on >= 0, s_code[np.maximum(on, 0)], -1).astype(np.int32),
            wait_start_ns=np.rint(iv[:, 1] * 1000).astype(np.int64),
            wait_end_ns=np.rint(iv[:, 2] * 1000).astype(np.int64),
            wait_name=np.full(len(wait_iv), wait_name, np.int32))
    dev = DeviceInfo(name=device.name, ai_core_num=device.cube_cores,
                     vector_core_num=device.vector_cores)
    return make_timeline(name, "simulated", [str(s) for s in stream_ids.tolist()],
                         [t.name for t in tasks] + ["EVENT_WAIT"], types.values, ops, waits,
                         device=dev, meta={"label": name})
