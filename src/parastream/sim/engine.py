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
  (:mod:`parastream.cpu.hostlock`) is one, plugged in by name when ``Device.host_lock`` is set.
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
import itertools
import random
from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence

import numpy as np

from ..timeline.model import DeviceInfo, Timeline, core_code, make_timeline
from ..timeline.nogc import gc_paused
from .resource import Resource, ResourceFactory, resource_for
from .tasks import Device, Task

__all__ = ["POOL_CODE", "Device", "Result", "Schedule", "Task", "build_timeline", "busy_cores",
           "simulate"]

# pool codes: 0 = no cores (DMA, comm, host), 1 = cube / SM / CPU cores, 2 = vector
POOL_CODE = {"cube": 1, "vector": 2}

#: a waiting interval: (task, start us, end us, the waited-on task that came last)
WaitInterval = tuple[int, float, float, int]

#: a queue's head once it started (the queue is busy until it completes)
_RUNNING = -2


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
    the tasks (default: the device's host lock, :func:`parastream.sim.resource.resource_for`,
    or none).
    """
    factory = resource or resource_for(device)
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
           shared_pool: bool) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Each task's pool code (as a list and an array) and the cores it needs of it: its
    block dim capped at the pool, at least 1; 0 for tasks without cores."""
    n = len(tasks)
    if shared_pool:
        pool_of = [1 if t.pool in POOL_CODE else 0 for t in tasks]
    else:
        pool_of = [POOL_CODE.get(t.pool, 0) for t in tasks]
    pools = np.fromiter(pool_of, np.int8, n)
    pool_cap = np.array([0, device.cube_cores, device.vector_cores], np.int64)[pools]
    blocks = np.fromiter([t.block_dim for t in tasks], np.int64, n)
    need = np.where(pool_cap > 0, np.clip(np.minimum(blocks, pool_cap), 1, None), 0)
    return pool_of, pools, need


def _queues(tasks: list[Task], q_count: int) -> tuple[np.ndarray, list[int], list[int], list[int]]:
    """The tasks' stream column, each task's queue, each queue's first task and the task
    behind each in its queue (-1: none): every queue is a FIFO in program order.

    Queues go by rank among the streams in use, not by id: ids are labels."""
    n = len(tasks)
    streams = np.fromiter([t.stream for t in tasks], np.int64, n)
    q_arr = _stream_codes(streams)[1] % q_count
    first = np.full(q_count, -1, np.int64)
    behind = np.full(n, -1, np.int64)
    if n:
        # the tasks grouped by queue, in program order within each (a stable sort of small
        # integers is a radix sort)
        order = np.argsort(q_arr.astype(np.int16) if q_count < 1 << 15 else q_arr,
                           kind="stable")
        queue = q_arr[order]
        same = queue[1:] == queue[:-1]  # a task and the next in the order share a queue
        behind[order[:-1][same]] = order[1:][same]
        heads = np.flatnonzero(np.r_[True, ~same])
        first[queue[heads]] = order[heads]
    return streams, q_arr.tolist(), first.tolist(), behind.tolist()


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
    """One run's state and its steps over it.

    :meth:`run` takes one event at a time: the host *issues* a task that heads an empty
    queue, a task *completes* (:meth:`_complete_step`), or a resource's or a sleeping
    worker's signal fires (:meth:`_signal`); then it *dispatches* the queues that event may
    have made ready. The complete step is built once per run as a function over the run's
    lists, so its state is bound once rather than looked up at every event; the rarer
    paths (memory bandwidth sharing, a plugged resource, sleeping workers, many waiters)
    are methods.

    Heap entries are ``(time, seq, code)``: ``code >= 0`` completes task ``code``;
    ``~j`` with ``j < n`` is the resource's signal about task ``j``; ``~(n + q)`` looks at
    queue ``q``'s head again (a woken worker). ``seq`` breaks ties in scheduling order."""

    __slots__ = ("n", "q_count", "head", "behind", "free", "dur_of", "mem_bound",
                 "pool_of", "pools", "need", "need_cores", "streams", "queue_of", "pending",
                 "waiters", "done_at", "start_at", "waiting_since", "wait_iv", "last_done",
                 "mem_left", "mem_streams", "has_mem", "expect", "heap", "seq",
                 "last_q", "blocked", "retry_at_of", "sweep_us", "wake_us",
                 "launch", "resource", "wake")

    def __init__(self, tasks: list[Task], device: Device, jitter: float, seed: int,
                 shared_pool: bool, resource: Resource | None) -> None:
        n = self.n = len(tasks)
        q_count = self.q_count = max(1, device.hw_queues)
        self.free = [0, device.cube_cores, device.vector_cores]  # indexed by pool code
        self.dur_of = _durations(tasks, jitter, seed)
        self.mem_bound = [t.memory_bound for t in tasks]
        self.pool_of, self.pools, self.need_cores = _pools(tasks, device, shared_pool)
        self.need = self.need_cores.tolist()
        # each queue's head task waiting to start (_RUNNING: it started; -1: the FIFO is
        # done) and the task behind each in its FIFO (-1: none)
        self.streams, self.queue_of, self.head, self.behind = _queues(tasks, q_count)
        self.pending, self.waiters = _wait_graph(tasks)
        # C doubles, not float objects: the result arrays are then views, not boxes
        self.done_at = array.array("d", bytes(8 * n))
        self.start_at = array.array("d", bytes(8 * n))
        self.waiting_since = [-1.0] * n  # when a head task started waiting for an event
        self.wait_iv: list[WaitInterval] = []
        self.last_done = [-1] * n  # the wait that was satisfied last
        # memory-bound tasks in flight, with remaining work in full-bandwidth microseconds
        self.mem_left: dict[int, float] = {}
        self.mem_streams = max(1.0, device.memory_streams)
        self.has_mem = any(self.mem_bound)
        self.expect = [0] * n  # the seq of a task's live completion entry (older = stale)
        self.heap: list[tuple[float, int, int]] = []
        self.seq = itertools.count(1)  # heap entries' tie-break, in scheduling order
        self.last_q = -1  # the queue that dispatched last: the round-robin starts after it
        self.blocked: list[set[int]] = [set(), set(), set()]  # per pool: heads lacking cores
        self.retry_at_of = [-1.0] * q_count  # when a queue's woken head is next looked at
        self.sweep_us = device.sweep_us
        self.wake_us = device.wake_us
        self.launch = device.launch_us
        self.resource = resource
        # tasks at the head of their queue the host has not issued yet, by index (= issue time)
        self.wake = [i for i in self.head if i >= 0]
        heapq.heapify(self.wake)

    # -- the event core -------------------------------------------------------------

    def run(self) -> None:
        """Steps until no event is left; RuntimeError when a wait can never be satisfied.

        Each step takes the next event: the host *issues* a task that heads an empty queue
        (issues no later than the next heap event go first), a task's kernel ends
        (:meth:`_complete_step`) or a signal fires (:meth:`_signal`). Then it *dispatches*
        the queues that event may have made ready: each one's head task starts one sweep
        later if its events are recorded, its worker is awake and its cores and the
        resource are free. The dispatch is written into the loop: it runs at every event,
        where a call would cost more than the step."""
        reshare = self._reshare_step()
        complete, signal, asleep = self._complete_step(reshare), self._signal, self._asleep
        res, has_mem, expect, mem_bound = self.resource, self.has_mem, self.expect, self.mem_bound
        wake, heap, launch, queue_of = self.wake, self.heap, self.launch, self.queue_of
        head, started = self.head, _RUNNING
        pending, waiting_since, done_at, last_done = (self.pending, self.waiting_since,
                                                      self.done_at, self.last_done)
        pool_of, need, free, blocked = self.pool_of, self.need, self.free, self.blocked
        start_at, dur_of, wait_iv = self.start_at, self.dur_of, self.wait_iv
        sweep_us, wake_us = self.sweep_us, self.wake_us
        pop, push, next_seq = heapq.heappop, heapq.heappush, self.seq.__next__
        while wake or heap:
            if wake and (not heap or wake[0] * launch <= heap[0][0]):
                i = pop(wake)  # issue
                t = i * launch
                qs: Sequence[int] = (queue_of[i],)
            else:
                t, sq, i = pop(heap)
                if i < 0:
                    qs = signal(~i, t)
                elif has_mem and sq != expect[i]:
                    continue  # superseded when bandwidth shares changed
                else:
                    qs = complete(i, t)
            for qi in qs:  # dispatch
                i = head[qi]
                if i < 0:
                    continue  # its head task runs, or its FIFO is done
                if i * launch > t:
                    continue  # not issued yet: its issue event comes
                if pending[i]:
                    if waiting_since[i] < 0:
                        waiting_since[i] = t
                    continue
                ws = waiting_since[i]
                if ws >= 0:  # it waited for events: the last one recorded ends the wait
                    awaited_end = done_at[last_done[i]]
                    if wake_us and asleep(qi, ws, awaited_end, t):
                        continue
                p, k = pool_of[i], need[i]
                if p and k > free[p]:
                    blocked[p].add(qi)
                    continue
                if res is not None and res.blocks(i, qi):
                    continue
                if p:
                    if blocked[p]:
                        blocked[p].discard(qi)
                    free[p] -= k
                if ws >= 0 and awaited_end > ws:
                    # the wait lasts until the last awaited event, not until cores were free
                    wait_iv.append((i, ws, awaited_end, last_done[i]))
                head[qi] = started
                begin = start_at[i] = t + sweep_us
                dur = dur_of[i]
                if res is not None:
                    res.take(self, i, begin, dur)
                if has_mem and mem_bound[i] and dur > 0:
                    # shares the bandwidth: the sweep is folded into the shared work so the
                    # bookkeeping stays at t
                    reshare(t, i, dur + sweep_us)
                else:
                    sq = expect[i] = next_seq()
                    push(heap, (begin + dur, sq, i))
                self.last_q = qi
        self._check_drained()

    def _check_drained(self) -> None:
        """No event is left: every queue must have run all its tasks."""
        if any(i != -1 for i in self.head):
            raise RuntimeError("simulation stalled: a wait can never be satisfied")

    def _signal(self, j: int, t: float) -> Sequence[int]:
        """A signal fires at ``t``: a woken worker's queue is swept again (``j >= n``), or
        the resource's event about task ``j`` returns the queues to sweep."""
        if j >= self.n:
            return (j - self.n,)
        return self.resource.signal(self, j, t)

    # the engine's side of the resource hooks (:class:`parastream.sim.resource.Core`)

    def signal_at(self, t: float, task: int) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), ~task))

    def complete_at(self, t: float, task: int) -> None:
        sq = self.expect[task] = next(self.seq)
        heapq.heappush(self.heap, (t, sq, task))

    def retry_at(self, t: float, queue: int) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), ~(self.n + queue)))

    def in_rr_order(self, queues: set[int]) -> Sequence[int]:
        return _rr_order(queues, self.last_q + 1, self.q_count)

    # -- memory bandwidth sharing ---------------------------------------------------

    def _reshare_step(self) -> Callable[[float, int, float | None], None]:
        """``reshare(t, task, work)``: the memory-bound tasks in flight change at ``t``:
        ``task`` joins with ``work`` (full-bandwidth microseconds) or leaves (``work``
        None). Those in flight before are charged their share of the time since the last
        change; all get new completion entries at the new shares (older entries go
        stale). Each of ``n`` tasks in flight runs at ``min(1, memory_streams / n)``."""
        mem_left, mem_streams, heap, expect = self.mem_left, self.mem_streams, self.heap, self.expect
        next_seq, push = self.seq.__next__, heapq.heappush
        mark = 0.0  # the last change of shares

        def reshare(t: float, task: int, work: float | None) -> None:
            nonlocal mark
            if mem_left:
                share = mem_streams / len(mem_left)
                d = (t - mark) * (share if share < 1.0 else 1.0)
                for k in mem_left:
                    mem_left[k] -= d
            mark = t
            if work is None:
                del mem_left[task]
            else:
                mem_left[task] = work
            slow = len(mem_left) / mem_streams  # each task's stretch
            if slow < 1.0:
                slow = 1.0
            for k, left in mem_left.items():
                sq = expect[k] = next_seq()
                push(heap, (t + (left if left > 0 else 0.0) * slow, sq, k))

        return reshare

    # -- complete ---------------------------------------------------------------------

    def _complete_step(self, reshare: Callable[[float, int, float | None], None]
                       ) -> Callable[[int, float], Sequence[int]]:
        """The complete step: ``complete(i, t)`` when task ``i``'s kernel ends at ``t``
        (its entry is not stale). It completes (it leaves the bandwidth share, its queue's
        next task heads it, its cores go back, its event is recorded for its waiters)
        unless the resource holds its completion (then its cores go back now). Returns
        the queues to sweep, in round-robin order."""
        done_at, queue_of, head = self.done_at, self.queue_of, self.head
        behind, wake, launch = self.behind, self.wake, self.launch
        pool_of, need, free, blocked = self.pool_of, self.need, self.free, self.blocked
        waiters, pending, last_done = self.waiters, self.pending, self.last_done
        q_count, has_mem, res = self.q_count, self.has_mem, self.resource
        mem_left = self.mem_left
        push, record_many = heapq.heappush, self._record_many

        def complete(i: int, t: float) -> Sequence[int]:
            if has_mem and i in mem_left:
                reshare(t, i, None)
            if res is not None and res.holds_completion(i):
                return self._cores_back_early(i)
            done_at[i] = t
            qi = queue_of[i]
            nxt = head[qi] = behind[i]  # i headed its queue: the task behind it heads it now
            if nxt >= 0 and nxt * launch > t:
                push(wake, nxt)  # not issued yet: its issue is an event
            p = pool_of[i]
            wl = waiters[i]
            if p:
                free[p] += need[i]
                if blocked[p]:  # queues wait for the cores it returned
                    return record_many(i, qi, wl, blocked[p])
            if not wl:
                return (qi,)
            if len(wl) > 1:
                return record_many(i, qi, wl, None)
            # the common wait: one task released, at most two queues to sweep
            w = wl[0]
            pending[w] -= 1
            last_done[w] = i
            qw = queue_of[w]
            if qw == qi:
                return (qi,)
            rr = self.last_q + 1
            return (qi, qw) if (qi - rr) % q_count < (qw - rr) % q_count else (qw, qi)

        return complete

    def _record_many(self, i: int, qi: int, wl: list[int] | None,
                     bc: set[int] | None) -> Sequence[int]:
        """Satisfy the waits ``wl`` on task ``i``; the queues to sweep: ``qi``, its
        waiters' and ``bc`` (queues blocked on the cores it returned), in round-robin
        order."""
        check = {qi}
        for w in wl or ():
            self.pending[w] -= 1
            self.last_done[w] = i
            check.add(self.queue_of[w])
        if bc:
            check |= bc
        return _rr_order(check, self.last_q + 1, self.q_count)

    def _cores_back_early(self, i: int) -> Sequence[int]:
        """A held task's kernel is done: its cores go back once, to whoever waits (its
        pool becomes none, so its completion returns no cores again)."""
        p = self.pool_of[i]
        if not p:
            return ()
        self.pool_of[i] = 0
        self.free[p] += self.need[i]
        if not self.blocked[p]:
            return ()
        return _rr_order(self.blocked[p], self.last_q + 1, self.q_count)

    # -- dispatch ----------------------------------------------------------------------

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

    # -- result -----------------------------------------------------------------------

    def result(self, tasks: list[Task], device: Device, name: str) -> Result:
        """The run as a :class:`Result`."""
        n = self.n
        start = np.frombuffer(self.start_at, np.float64) if n else np.zeros(0)
        done = np.frombuffer(self.done_at, np.float64) if n else np.zeros(0)
        sched = Schedule(start, done, self.pools, self.need_cores, self.wait_iv, self.streams)
        tl = build_timeline(tasks, sched, device, name)
        wall = float(done.max()) if n else 0.0
        return Result(tl, wall, busy_cores(start, done, self.pools, self.need_cores), n)


def busy_cores(start: np.ndarray, done: np.ndarray, pools: np.ndarray,
               need: Sequence[int] | np.ndarray) -> dict[str, float]:
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
    need: Sequence[int] | np.ndarray
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


def _type_codes(tasks: list[Task]) -> tuple[list[str], np.ndarray]:
    """The tasks' distinct types (first seen, first coded) and each task's code."""
    names = [t.type for t in tasks]
    code = {x: k for k, x in enumerate(dict.fromkeys(names))}
    return list(code), np.fromiter(map(code.__getitem__, names), np.int32, len(names))


def build_timeline(tasks: list[Task], schedule: Schedule, device: Device,
                   name: str) -> Timeline:
    """The simulated run as a Timeline (shared with the SimPy oracle, so both give the same
    output); times in us become integer ns."""
    n = len(tasks)
    stream = schedule.stream
    if stream is None:
        stream = np.fromiter([t.stream for t in tasks], np.int64, n)
    stream_ids, s_code = _stream_codes(stream)
    pools = np.asarray(schedule.pools, np.int64)
    pool_cap = np.array([0, device.cube_cores, device.vector_cores], np.int64)[pools]
    core_of = np.array([0, core_code("AI_CORE"), core_code("AI_VECTOR_CORE")], np.int8)
    types, type_codes = _type_codes(tasks)
    ops = dict(
        stream=s_code,
        name=np.arange(n, dtype=np.int32),
        type=type_codes,
        start_ns=np.rint(np.array(schedule.start_us, np.float64) * 1000).astype(np.int64),
        end_ns=np.rint(np.array(schedule.done_us, np.float64) * 1000).astype(np.int64),
        kind=np.fromiter([t.kind for t in tasks], np.int8, n),
        core=core_of[pools],
        block_dim=np.where(pool_cap > 0, np.array(schedule.need, np.int64), -1).astype(np.int32),
        mix_block_dim=np.full(n, -1, np.int32), step=np.full(n, -1, np.int32))
    waits = _wait_columns(schedule.waits, s_code, n)
    dev = DeviceInfo(name=device.name, ai_core_num=device.cube_cores,
                     vector_core_num=device.vector_cores)
    return make_timeline(name, "simulated", [str(s) for s in stream_ids.tolist()],
                         [t.name for t in tasks] + ["EVENT_WAIT"], types, ops, waits,
                         device=dev, meta={"label": name})
