"""A deterministic discrete-event model of a device's hardware stream scheduler.

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
  no cores and no other resource while its worker sleeps.
- Anything else a task needs is a resource plugged into the engine
  (:mod:`parastream.sim.resource`): the CPU streams' host lock
  (:mod:`parastream.sim.hostlock`) is one, plugged in when ``Device.host_lock`` is set.
- Optional seeded jitter scales each task's duration.

The core is a heap of events keyed by (time, sequence), as SimPy's is, without its
per-event generator overhead: each step takes the next event (the host issues a task that
heads an empty queue, a task completes, or a resource's or a sleeping worker's signal
fires) and then dispatches the queues it may have made ready. The host's issue is an event
only for a task that reaches the head of an empty queue, since every queue's FIFO is fixed
by program order. The result is a :class:`parastream.timeline.Timeline`, so
``parastream analyze`` reads a simulated run like a captured one.
"""

from __future__ import annotations

import array
import heapq
import random
from dataclasses import dataclass
from functools import partial
from typing import Sequence

import numpy as np

from ..timeline.model import DeviceInfo, Interner, Timeline, core_code, make_timeline
from ..timeline.nogc import gc_paused
from .hostlock import host_lock_for
from .resource import Resource, ResourceFactory
from .tasks import Device, Task

__all__ = ["POOL_CODE", "Device", "Result", "Schedule", "Task", "build_timeline", "busy_cores",
           "simulate"]

# pool codes: 0 = no cores (DMA, comm, host), 1 = cube / SM / CPU cores, 2 = vector
POOL_CODE = {"cube": 1, "vector": 2}

#: a waiting interval: (task, start us, end us, the waited-on task that came last)
WaitInterval = tuple[int, float, float, int]


@dataclass
class Result:
    timeline: Timeline
    wall_us: float
    busy_cores_us: dict[str, float]
    tasks: int


def simulate(tasks: list[Task], device: Device, *, jitter: float = 0.0, seed: int = 0,
             name: str = "simulated", shared_pool: bool = False,
             resource: ResourceFactory | None = None) -> Result:
    """Run ``tasks`` (in issue order) on ``device``; deterministic for a given seed.

    ``shared_pool``: cube and vector work compete for the same cores (GPUs, CPUs, coupled
    Ascend parts). ``resource``: what tasks need besides cores, built for this run from
    the tasks (default: the device's host lock, :func:`parastream.sim.hostlock.host_lock_for`,
    or none).
    """
    factory = resource or host_lock_for(device)
    with gc_paused():  # millions of small tuples
        sim = _Sim(tasks, device, jitter, seed, shared_pool,
                   factory(tasks) if factory else None)
        sim.run()
        return sim.result(tasks, device, name)


def _rr_distance(rr: int, q_count: int, q: int) -> int:
    return (q - rr) % q_count


def _rr_order(queues: set[int], rr: int, q_count: int) -> tuple[int, ...] | list[int]:
    """``queues`` in round-robin order from ``rr``, as a copy (the caller may clear the
    set); most sets hold no queue or one, so sorting happens only when it matters."""
    if len(queues) > 1:
        return sorted(queues, key=partial(_rr_distance, rr, q_count))
    return tuple(queues)


def _durations(tasks: list[Task], jitter: float, seed: int) -> list[float]:
    """Each task's duration, scaled by the seeded jitter."""
    dur_of = [t.dur_us for t in tasks]
    if jitter:
        rng = random.Random(seed)
        dur_of = [d * (1.0 + jitter * (2 * rng.random() - 1)) for d in dur_of]
    return dur_of


def _pools(tasks: list[Task], device: Device,
           shared_pool: bool) -> tuple[list[int], np.ndarray, list[int]]:
    """Each task's pool code (as a list and an array) and the cores it needs of it: its
    block dim capped at the pool, at least 1; 0 for tasks without cores."""
    n = len(tasks)
    if shared_pool:
        pool_of = [1 if t.pool in POOL_CODE else 0 for t in tasks]
    else:
        pool_of = [POOL_CODE.get(t.pool, 0) for t in tasks]
    pools = np.array(pool_of, np.int8) if n else np.zeros(0, np.int8)
    pool_cap = np.array([0, device.cube_cores, device.vector_cores], np.int64)[pools]
    blocks = np.array([t.block_dim for t in tasks], np.int64) if n else np.zeros(0, np.int64)
    need = np.where(pool_cap > 0, np.clip(np.minimum(blocks, pool_cap), 1, None), 0).tolist()
    return pool_of, pools, need


def _queues(tasks: list[Task], q_count: int) -> tuple[np.ndarray, list[int], list[list[int]]]:
    """The tasks' stream column, each task's queue and each queue's FIFO (program order).

    Queues go by rank among the streams in use, not by id: ids are labels."""
    n = len(tasks)
    streams = np.array([t.stream for t in tasks], np.int64) if n else np.zeros(0, np.int64)
    q_arr = (np.unique(streams, return_inverse=True)[1].reshape(-1) % q_count
             if n else streams)
    q_split = np.cumsum(np.bincount(q_arr, minlength=q_count))[:-1]
    queues = [x.tolist() for x in np.split(np.argsort(q_arr, kind="stable"), q_split)]
    return streams, q_arr.tolist(), queues


def _wait_graph(tasks: list[Task]) -> tuple[list[int], list[list[int] | None]]:
    """Each task's count of unsatisfied waits and, per task, the tasks waiting for it."""
    n = len(tasks)
    pending = [0] * n
    waiters: list[list[int] | None] = [None] * n
    for i, ws in enumerate([t.waits for t in tasks]):
        if not ws:
            continue
        pending[i] = len(ws)
        for w in ws:
            lst = waiters[w]
            if lst is None:
                waiters[w] = [i]
            else:
                lst.append(i)
    return pending, waiters


class _Sim:
    """One run's state and its steps: :meth:`step` takes the next event (issue, complete
    or signal) and :meth:`dispatch` starts the head tasks of the queues it names.

    Heap entries are ``(time, seq, code)``: ``code >= 0`` completes task ``code``;
    ``~j`` with ``j < n`` is the resource's signal about task ``j``; ``~(n + q)`` looks at
    queue ``q``'s head again (a woken worker). ``seq`` breaks ties in scheduling order."""

    def __init__(self, tasks: list[Task], device: Device, jitter: float, seed: int,
                 shared_pool: bool, resource: Resource | None) -> None:
        n = self.n = len(tasks)
        q_count = self.q_count = max(1, device.hw_queues)
        self.head = [0] * q_count
        self.running = [False] * q_count  # the queue's head task has been dispatched
        self.free = [0, device.cube_cores, device.vector_cores]  # indexed by pool code
        self.dur_of = _durations(tasks, jitter, seed)
        self.mem_bound = [t.memory_bound for t in tasks]
        self.pool_of, self.pools, self.need = _pools(tasks, device, shared_pool)
        self.streams, self.queue_of, self.queues = _queues(tasks, q_count)
        self.pending, self.waiters = _wait_graph(tasks)
        # C doubles, not float objects: the result arrays are then views, not boxes
        self.done_at = array.array("d", bytes(8 * n))
        self.start_at = array.array("d", bytes(8 * n))
        self.waiting_since = [-1.0] * n  # when a head task started waiting for an event
        self.wait_iv: list[WaitInterval] = []
        self.last_done = [-1] * n  # the wait that was satisfied last
        # memory-bound tasks in flight, with remaining work in full-bandwidth microseconds
        self.mem_left: dict[int, float] = {}
        self.mem_mark = 0.0
        self.mem_streams = max(1.0, device.memory_streams)
        self.has_mem = any(self.mem_bound)
        self.expect = [0] * n  # the seq of a task's live completion entry (older = stale)
        self.heap: list[tuple[float, int, int]] = []
        self.seq = 0
        self.rr = 0  # round-robin start: the queue after the last one that dispatched
        self.blocked: list[set[int]] = [set(), set(), set()]  # per pool: heads lacking cores
        self.cores_back = [False] * n  # a held completion already gave its cores back
        self.retry_at_of = [-1.0] * q_count  # when a queue's woken head is next looked at
        self.sweep_us = device.sweep_us
        self.wake_us = device.wake_us
        self.launch = device.launch_us
        self.resource = resource
        # tasks at the head of their queue the host has not issued yet, by index (= issue time)
        self.wake = [qq[0] for qq in self.queues if qq]
        heapq.heapify(self.wake)
        self.now = 0.0

    # -- the event core -------------------------------------------------------------

    def run(self) -> None:
        """Steps until no event is left; RuntimeError when a wait can never be satisfied."""
        step, dispatch = self.step, self.dispatch
        while True:
            qs = step()
            if qs is None:
                return
            if qs:
                dispatch(qs, self.now)

    def step(self) -> Sequence[int] | None:
        """Take the next event (issues that come no later than the next completion go
        first) and return the queues that may have become ready; None when done."""
        wake, heap = self.wake, self.heap
        if wake and (not heap or wake[0] * self.launch <= heap[0][0]):
            i = heapq.heappop(wake)
            self.now = i * self.launch
            return (self.queue_of[i],)
        if not heap:
            if any(h < len(qq) for h, qq in zip(self.head, self.queues)):
                raise RuntimeError("simulation stalled: a wait can never be satisfied")
            return None
        t, sq, code = heapq.heappop(heap)
        self.now = t
        if code >= 0:
            return self.complete(code, sq, t)
        j = ~code
        if j >= self.n:  # a woken worker is ready: sweep its queue again
            return (j - self.n,)
        return self.resource.signal(self, j, t)

    def _push(self, t: float, code: int) -> int:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, code))
        return self.seq

    # the engine's side of the resource hooks (:class:`parastream.sim.resource.Core`)

    def signal_at(self, t: float, task: int) -> None:
        self._push(t, ~task)

    def complete_at(self, t: float, task: int) -> None:
        self.seq += 1
        self.expect[task] = self.seq
        heapq.heappush(self.heap, (t, self.seq, task))

    def retry_at(self, t: float, queue: int) -> None:
        self._push(t, ~(self.n + queue))

    def in_rr_order(self, queues: set[int]) -> Sequence[int]:
        return _rr_order(queues, self.rr, self.q_count)

    # -- memory bandwidth sharing ---------------------------------------------------

    def settle_mem(self, t: float) -> None:
        """Charge the memory-bound tasks in flight their share of the time since the last
        change of shares."""
        mem_left = self.mem_left
        if mem_left:
            d = (t - self.mem_mark) * min(1.0, self.mem_streams / len(mem_left))
            for k in mem_left:
                mem_left[k] -= d
        self.mem_mark = t

    def reschedule_mem(self, t: float) -> None:
        """New completion entries for the memory-bound tasks in flight at the new shares
        (older entries go stale)."""
        slow = max(1.0, len(self.mem_left) / self.mem_streams)  # each task's stretch
        for k, left in self.mem_left.items():
            self.complete_at(t + (left if left > 0 else 0.0) * slow, k)

    # -- complete ---------------------------------------------------------------------

    def complete(self, i: int, sq: int, t: float) -> Sequence[int]:
        """Task ``i``'s kernel ends at ``t``: it completes, unless its entry is stale or
        the resource holds its completion (then its cores go back now)."""
        if self.has_mem:
            if sq != self.expect[i]:
                return ()  # superseded when bandwidth shares changed
            if i in self.mem_left:
                self.settle_mem(t)
                del self.mem_left[i]
                self.reschedule_mem(t)
        res = self.resource
        if res is not None and res.holds_completion(i):
            return self._cores_back_early(i)
        return self._finish(i, t)

    def _cores_back_early(self, i: int) -> Sequence[int]:
        """A held task's kernel is done: its cores go back once, to whoever waits."""
        if self.cores_back[i]:
            return ()
        self.cores_back[i] = True
        p = self.pool_of[i]
        if not p:
            return ()
        self.free[p] += self.need[i]
        if not self.blocked[p]:
            return ()
        return _rr_order(self.blocked[p], self.rr, self.q_count)

    def _finish(self, i: int, t: float) -> Sequence[int]:
        """Task ``i`` completes at ``t``: its queue's next task heads it, its cores go
        back, its event is recorded for its waiters."""
        self.done_at[i] = t
        qi = self.queue_of[i]
        h = self.head[qi] + 1  # the head is the task that just finished (FIFO per queue)
        self.head[qi] = h
        self.running[qi] = False
        qq = self.queues[qi]
        if h < len(qq) and qq[h] * self.launch > t:
            heapq.heappush(self.wake, qq[h])
        p = self.pool_of[i]
        if p and not self.cores_back[i]:
            self.free[p] += self.need[i]
            bc = self.blocked[p]
        else:
            bc = None
        return self._record(i, qi, bc)

    def _record(self, i: int, qi: int, bc: set[int] | None) -> Sequence[int]:
        """Satisfy the waits on task ``i``; the queues to sweep: ``qi``, its waiters' and
        ``bc`` (queues blocked on the cores it returned), in round-robin order."""
        wl = self.waiters[i]
        if not bc and (not wl or len(wl) == 1):
            if not wl:
                return (qi,)
            # the common wait: one task released, at most two queues to sweep
            w = wl[0]
            self.pending[w] -= 1
            self.last_done[w] = i
            qw = self.queue_of[w]
            if qw == qi:
                return (qi,)
            rr, q_count = self.rr, self.q_count
            return (qi, qw) if (qi - rr) % q_count < (qw - rr) % q_count else (qw, qi)
        check = {qi}
        for w in wl or ():
            self.pending[w] -= 1
            self.last_done[w] = i
            check.add(self.queue_of[w])
        if bc:
            check |= bc
        return _rr_order(check, self.rr, self.q_count)

    # -- dispatch ----------------------------------------------------------------------

    def dispatch(self, qs: Sequence[int], t: float) -> None:
        """Start each of ``qs``'s head tasks at ``t`` whose events are recorded and whose
        cores and resource are free."""
        for qi in qs:
            qq = self.queues[qi]
            h = self.head[qi]
            if self.running[qi] or h >= len(qq):
                continue
            i = qq[h]
            if i * self.launch > t:
                continue  # not issued yet: its wake-up comes
            if self.pending[i]:
                if self.waiting_since[i] < 0:
                    self.waiting_since[i] = t
                continue
            self._try_start(qi, i, t)

    def _try_start(self, qi: int, i: int, t: float) -> None:
        """Start head task ``i`` of queue ``qi`` at ``t`` unless its worker still sleeps,
        its cores are taken or the resource blocks it."""
        ws = self.waiting_since[i]
        awaited_end = self.done_at[self.last_done[i]] if ws >= 0 else 0.0
        if ws >= 0 and self.wake_us and self._asleep(qi, ws, awaited_end, t):
            return
        p = self.pool_of[i]
        if p and self.need[i] > self.free[p]:
            self.blocked[p].add(qi)
            return
        res = self.resource
        if res is not None and res.blocks(i, qi):
            return
        if p:
            bp = self.blocked[p]
            if bp:
                bp.discard(qi)
            self.free[p] -= self.need[i]
        if ws >= 0 and awaited_end > ws:
            # the wait lasts until the last awaited event, not until cores were free
            self.wait_iv.append((i, ws, awaited_end, self.last_done[i]))
        self._start(qi, i, t)

    def _asleep(self, qi: int, ws: float, awaited_end: float, t: float) -> bool:
        """A wait that blocked: the worker runs again one wake-up after the event and
        takes no cores and no resource before that (its queue is looked at again then)."""
        ready = awaited_end + self.wake_us
        if awaited_end > ws and t < ready:
            if self.retry_at_of[qi] != ready:
                self.retry_at_of[qi] = ready
                self.retry_at(ready, qi)
            return True
        return False

    def _start(self, qi: int, i: int, t: float) -> None:
        """Task ``i`` starts one sweep after ``t``; its completion is scheduled (a
        memory-bound one's at its share of the bandwidth)."""
        begin = t + self.sweep_us
        self.running[qi] = True
        self.start_at[i] = begin
        dur = self.dur_of[i]
        if self.resource is not None:
            self.resource.take(self, i, begin, dur)
        self.seq += 1
        if self.has_mem and self.mem_bound[i] and dur > 0:
            # the sweep is folded into the shared work so memory bookkeeping stays at t
            self.settle_mem(t)
            self.mem_left[i] = dur + self.sweep_us
            self.reschedule_mem(t)
        else:
            if self.has_mem:
                self.expect[i] = self.seq
            heapq.heappush(self.heap, (begin + dur, self.seq, i))
        self.rr = qi + 1 if qi + 1 < self.q_count else 0

    # -- result -----------------------------------------------------------------------

    def result(self, tasks: list[Task], device: Device, name: str) -> Result:
        """The run as a :class:`Result`."""
        n = self.n
        start = np.frombuffer(self.start_at, np.float64) if n else np.zeros(0)
        done = np.frombuffer(self.done_at, np.float64) if n else np.zeros(0)
        sched = Schedule(start, done, self.pools, self.need, self.wait_iv, self.streams)
        tl = build_timeline(tasks, sched, device, name)
        wall = float(done.max()) if n else 0.0
        return Result(tl, wall, busy_cores(start, done, self.pools, self.need), n)


def busy_cores(start: np.ndarray, done: np.ndarray, pools: np.ndarray,
               need: list[int]) -> dict[str, float]:
    """Core-microseconds each pool was busy, from the final start/end times."""
    work = np.array(need, np.float64) * (np.asarray(done) - np.asarray(start))
    pools = np.asarray(pools)
    return {name: float(work[pools == code].sum()) for name, code in POOL_CODE.items()}


@dataclass(frozen=True)
class Schedule:
    """What a simulation decided for its tasks (in issue order): the engine's and the
    SimPy oracle's shared output, turned into a Timeline by :func:`build_timeline`."""

    start_us: Sequence[float]
    done_us: Sequence[float]
    #: each task's pool code (0 none, 1 cube, 2 vector)
    pools: np.ndarray
    #: the cores each task held
    need: list[int]
    waits: list[WaitInterval]
    #: the tasks' stream column when the caller has it (else read from the tasks)
    stream: np.ndarray | None = None


def _stream_codes(stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct stream ids, sorted, and each task's index among them."""
    if len(stream) and stream.min() >= 0 and stream.max() < 1 << 16:
        # few small stream ids: a lookup table instead of sorting a million ids
        stream_ids = np.flatnonzero(np.bincount(stream))
        lut = np.zeros(int(stream_ids[-1]) + 1, np.int32)
        lut[stream_ids] = np.arange(len(stream_ids), dtype=np.int32)
        return stream_ids, lut[stream]
    stream_ids = np.unique(stream)
    return stream_ids, np.searchsorted(stream_ids, stream).astype(np.int32)


def _wait_columns(waits: list[WaitInterval], s_code: np.ndarray,
                  wait_name: int) -> dict[str, np.ndarray] | None:
    """The EVENT_WAIT intervals as the timeline's wait columns."""
    if not waits:
        return None
    iv = np.array(waits, np.float64)  # (task, start, end, waited-on task)
    task = iv[:, 0].astype(np.int64)
    on = iv[:, 3].astype(np.int64)
    return dict(
        wait_stream=s_code[task],
        wait_on=np.where(on >= 0, s_code[np.maximum(on, 0)], -1).astype(np.int32),
        wait_start_ns=np.rint(iv[:, 1] * 1000).astype(np.int64),
        wait_end_ns=np.rint(iv[:, 2] * 1000).astype(np.int64),
        wait_name=np.full(len(waits), wait_name, np.int32))


def build_timeline(tasks: list[Task], schedule: Schedule, device: Device,
                   name: str) -> Timeline:
    """The simulated run as a Timeline (shared with the SimPy oracle, so both give the same
    output); times in us become integer ns."""
    n = len(tasks)
    stream = schedule.stream
    if stream is None:
        stream = np.array([t.stream for t in tasks], np.int64) if n else np.zeros(0, np.int64)
    stream_ids, s_code = _stream_codes(stream)
    pools = np.asarray(schedule.pools, np.int64)
    pool_cap = np.array([0, device.cube_cores, device.vector_cores], np.int64)[pools]
    core_of = np.array([0, core_code("AI_CORE"), core_code("AI_VECTOR_CORE")], np.int8)
    types = Interner()
    type_code: dict[str, int] = {}
    ops = dict(
        stream=s_code,
        name=np.arange(n, dtype=np.int32),
        type=np.array([type_code[x] if x in type_code else type_code.setdefault(x, types.code(x))
                       for x in [t.type for t in tasks]], np.int32),
        start_ns=np.rint(np.array(schedule.start_us, np.float64) * 1000).astype(np.int64),
        end_ns=np.rint(np.array(schedule.done_us, np.float64) * 1000).astype(np.int64),
        kind=np.array([t.kind for t in tasks], np.int8),
        core=core_of[pools],
        block_dim=np.where(pool_cap > 0, np.array(schedule.need, np.int64), -1).astype(np.int32),
        mix_block_dim=np.full(n, -1, np.int32), step=np.full(n, -1, np.int32))
    waits = _wait_columns(schedule.waits, s_code, n)
    dev = DeviceInfo(name=device.name, ai_core_num=device.cube_cores,
                     vector_core_num=device.vector_cores)
    return make_timeline(name, "simulated", [str(s) for s in stream_ids.tolist()],
                         [t.name for t in tasks] + ["EVENT_WAIT"], types.values, ops, waits,
                         device=dev, meta={"label": name})
