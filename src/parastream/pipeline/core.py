"""A pipeline of named stages with bounded queues between them.

Each stage is a callable bound to a stream kind (``host``, ``device``, ``copy``) and run by
``replicas`` persistent worker threads. Between stages sit bounded FIFO queues (``depth``
items each): a slow stage fills its input queue and blocks the one before it, back to the
source, so memory stays bounded. At most :attr:`Pipeline.capacity` items (all queue depths,
the output queue included, plus one per worker) are in flight at any time: the source takes
a slot before it pulls the next input, and a slot is freed only when the item's outcome is
final. Every blocking wait is a condition variable: nothing polls.

Items get ids in intake order. Every submitted item ends exactly once as ``completed``
(handed to the caller), ``failed`` (its stage raised) or ``cancelled`` (dropped after a
failure or an early stop). What a raising stage does depends on the error policy
(:mod:`.policy`, ``on_error``): under ``fail`` intake stops, queued items are cancelled,
running calls finish and are cancelled, all workers exit and the caller gets a
:class:`PipelineError` naming the stage and item id, with the counts; under ``skip`` and
``retry:N`` the failing item (after its retries) ends ``failed``, is named in the run's
:class:`~.policy.ErrorLog`, and the others go on, in order when ``ordered``.

On a host-synchronous backend (cpu) a stage's worker thread *is* its stream: the function
runs inline, because handing it to another thread costs a GIL hand-off per item.
On a device backend (cuda/npu later; ``null`` in tests) ``device``/``copy`` stages launch
on one backend stream per replica and pass an event downstream: a device stage waits on it
on its stream (the host does not block), a host stage or the caller synchronizes it first.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ..errors import one_line
from ..runtime.backend import STREAM_KINDS, Backend, get_backend
from ..runtime.host import cpu_name
from ..runtime.lanes import LaneRecorder, build_timeline
from ..timeline.model import Timeline
from .accounting import Admission, PipelineStats, StageStats
from .policy import Attempts, ErrorLog, ErrorPolicy, retry_after

now_ns = time.perf_counter_ns

COMPLETED, FAILED, CANCELLED = "completed", "failed", "cancelled"
SOURCE = "<source>"


@dataclass(frozen=True)
class Stage:
    """One step: ``fn(item) -> item``, run by ``replicas`` workers on a ``kind`` stream."""

    name: str
    fn: Callable[[Any], Any]
    kind: str = "host"
    replicas: int = 1

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError("a stage needs a non-empty name")
        if self.kind not in STREAM_KINDS:
            raise ValueError(f"stage {self.name!r}: kind must be one of {STREAM_KINDS}")
        if (not isinstance(self.replicas, int) or isinstance(self.replicas, bool)
                or self.replicas < 1):
            raise ValueError(f"stage {self.name!r}: replicas must be an integer >= 1")


@dataclass
class ItemResult:
    """One completed item: its intake id, output value and latency (intake -> last stage)."""

    id: int
    value: Any
    latency_ns: int


class PipelineError(RuntimeError):
    """A stage (or the source iterator) raised on an item; the run was stopped.

    ``stage`` and ``item_id`` say where, ``cause`` is the original exception (also the
    ``__cause__``), ``counts`` the final outcome of every submitted item. The message is
    one line (the cause's first line). ``run`` names the run it stopped when a caller
    compares several (``"serial"``, ``"pipelined"``; None otherwise), ``note`` is a
    caller's remark on it.
    """

    def __init__(self, stage: str, item_id: int, cause: BaseException,
                 counts: dict[str, int] | None = None, submitted: int = 0) -> None:
        self.stage, self.item_id, self.cause = stage, item_id, cause
        self.counts = dict(counts or {})
        self.submitted = submitted
        self.run: str | None = None
        #: a caller's remark on the failure, said after it (empty when none)
        self.note = ""
        super().__init__(f"stage {stage!r} failed on item {item_id}: {one_line(cause)}")


class _Entry:
    """An item in flight: id, payload, when it entered its current queue (set by
    :meth:`_Channel.put`), the event to wait on."""

    __slots__ = ("seq", "payload", "t", "ready")

    def __init__(self, seq: int, payload: Any, ready: Any = None) -> None:
        self.seq, self.payload, self.t, self.ready = seq, payload, 0, ready


class _Channel:
    """A bounded FIFO with close (drain, then end) and cancel (drop everything, wake all)."""

    __slots__ = ("depth", "_q", "_lock", "_not_empty", "_not_full", "_closed", "_cancelled")

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self._q: deque = deque()
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._closed = False
        self._cancelled = False

    def put(self, entry: _Entry) -> int:
        """Block while full. 0 when the channel was cancelled (the entry was not taken),
        1 when taken at once, 2 when taken after waiting for room."""
        with self._lock:
            waited = 1
            while len(self._q) >= self.depth and not self._cancelled:
                waited = 2
                self._not_full.wait()
            if self._cancelled:
                return 0
            # the time it entered the queue: a producer blocked on a full queue has not
            # queued it yet (that time is the producer's "blocked", not the queue's wait)
            entry.t = now_ns()
            self._q.append(entry)
            self._not_empty.notify()
            return waited

    def get(self) -> _Entry | None:
        """Block while empty; None once closed and drained, or cancelled."""
        with self._lock:
            while not self._q and not self._closed and not self._cancelled:
                self._not_empty.wait()
            if self._cancelled or not self._q:
                return None
            entry = self._q.popleft()
            self._not_full.notify()
            return entry

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._not_empty.notify_all()

    def cancel(self) -> list[_Entry]:
        with self._lock:
            self._cancelled = True
            dropped = list(self._q)
            self._q.clear()
            self._not_empty.notify_all()
            self._not_full.notify_all()
            return dropped


class _Acc:
    __slots__ = ("items", "busy", "qwait", "blocked")

    def __init__(self) -> None:
        self.items = self.busy = self.qwait = self.blocked = 0


def _call_stage(stage: Stage, stream: Any, e: _Entry,
                last: bool) -> tuple[tuple[Any, Any], BaseException | None]:
    """``stage.fn`` on ``e``'s payload: ((output, the event that marks it ready on a device
    stream or None), the exception it raised or None). A device launch is ordered after the
    producer's event; a host stage waits for a device producer; the ``last`` stage's output
    is synchronized, since the caller reads it on the host."""
    try:
        if stream is not None:  # device launch: order after the producer's event
            if e.ready is not None:
                stream.wait_event(e.ready)
            out = stream.submit(stage.fn, e.payload, name=stage.name).result()
            ready = stream.record_event()
        else:
            if e.ready is not None:  # host consumer of device output
                e.ready.synchronize()
            out = stage.fn(e.payload)
            ready = None
        if last and ready is not None:
            ready.synchronize()  # the caller reads the result on the host
        return (out, ready), None
    except BaseException as exc:  # noqa: BLE001 - reported to the caller
        return (None, None), exc


class _Run:
    """State of one pass of an iterable through the pipeline."""

    def __init__(self, pipe: "Pipeline") -> None:
        self.pipe = pipe
        self.stages = pipe.stages
        self.ordered = pipe.ordered
        self.capacity = pipe.capacity
        self.cond = threading.Condition()
        self.in_flight: dict[int, int] = {}  # id -> intake time (ns)
        self.ready: dict[int, tuple] | deque = {} if self.ordered else deque()
        self.next_id = 0  # ordered: the next id to hand out
        self.submitted = 0
        self.source_done = False
        self.aborted = False
        self.cancelled = threading.Event()  # set once an abort has cancelled everything
        self.failure: tuple[str, int, BaseException] | None = None
        self.counts = {COMPLETED: 0, FAILED: 0, CANCELLED: 0}
        self.errors = ErrorLog(pipe.on_error)
        self.dropped: set[int] = set()  # ordered: ids the policy dropped, not yet passed over
        self.latencies: list[int] = []
        self.max_in_flight = 0
        self.source_blocks = 0
        self.source_blocked_ns = 0
        self.t_start: int | None = None
        self.channels = [_Channel(pipe.depth) for _ in self.stages]
        self.remaining = [s.replicas for s in self.stages]
        self.lanes: list[LaneRecorder] = []
        self.accs: list[list[_Acc]] = [[] for _ in self.stages]
        self.threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ outcomes
    def finish(self, seq: int, status: str) -> None:
        """Give item ``seq`` its final status (exactly once) and free its slot."""
        with self.cond:
            if self.in_flight.pop(seq, None) is None:
                raise AssertionError(f"item {seq} reached a final status twice")
            self.counts[status] += 1
            self.cond.notify_all()

    def abort(self, failure: tuple[str, int, BaseException] | None) -> None:
        """Stop intake and cancel everything queued; the first failure is the one raised."""
        with self.cond:
            if failure is not None and self.failure is None:
                self.failure = failure
            first = not self.aborted
            self.aborted = True
            self.cond.notify_all()
        if not first:
            # another thread is cancelling (Pipeline.close from elsewhere): the caller may
            # count what is in flight once this returns, so it returns when that is done
            self.cancelled.wait()
            return
        for ch in self.channels:
            for entry in ch.cancel():
                self.finish(entry.seq, CANCELLED)
        with self.cond:
            pending = list(self.ready.keys()) if self.ordered else [e[0] for e in self.ready]
            self.ready.clear()
        for seq in pending:
            self.finish(seq, CANCELLED)
        self.cancelled.set()

    def drop(self, seq: int) -> None:
        """The error policy dropped item ``seq``: it ends ``failed`` and an ordered caller
        passes over its id."""
        with self.cond:
            if self.ordered:
                self.dropped.add(seq)
        self.finish(seq, FAILED)

    def arrive(self, seq: int, value: Any, t_done: int) -> None:
        """The last stage finished ``seq``: park it for the caller (or cancel after abort)."""
        with self.cond:
            if not self.aborted:
                latency = t_done - self.in_flight[seq]
                if self.ordered:
                    self.ready[seq] = (seq, value, latency)  # type: ignore[index]
                else:
                    self.ready.append((seq, value, latency))  # type: ignore[union-attr]
                self.cond.notify_all()
                return
        self.finish(seq, CANCELLED)

    # ------------------------------------------------------------------ threads
    def start(self, items: Iterable[Any]) -> None:
        backend = self.pipe.backend
        device_streams = not backend.host_synchronous
        for s, stage in enumerate(self.stages):
            for r in range(stage.replicas):
                lane_name = stage.name if stage.replicas == 1 else f"{stage.name}#{r}"
                lane = LaneRecorder(lane_name, stage.kind)
                acc = _Acc()
                self.lanes.append(lane)
                self.accs[s].append(acc)
                stream = None
                if device_streams and stage.kind != "host":
                    # one name per run: a backend refuses a name already in use, and a
                    # pipeline on a device backend could run only once
                    stream = backend.stream(f"{self.pipe.name}/{lane_name}"
                                            + (f"@{self.pipe.runs}" if self.pipe.runs > 1 else ""),
                                            stage.kind)
                t = threading.Thread(target=self._worker, args=(s, stage, lane, acc, stream),
                                     name=f"parastream-{lane_name}", daemon=True)
                self.threads.append(t)
        src = threading.Thread(target=self._source, args=(items,), name="parastream-source",
                               daemon=True)
        self.threads.append(src)
        started = []
        try:
            for t in self.threads:
                t.start()
                started.append(t)
        except BaseException:
            # the OS refused a thread: the ones running would wait on their queues for ever
            self.abort(None)  # cancels every channel: each waiting get/put wakes
            for t in started:
                t.join()
            self.threads = started
            raise

    def _source(self, items: Iterable[Any]) -> None:
        seq = 0
        first = self.channels[0]
        try:
            it = iter(items)
            while self._wait_for_room():
                try:
                    x = next(it)
                except StopIteration:
                    break
                if not self._feed(first, seq, x):
                    break
                seq += 1
        except BaseException as exc:  # noqa: BLE001 - the input iterator raised
            self.abort((SOURCE, seq, exc))
        finally:
            first.close()
            with self.cond:
                self.source_done = True
                self.cond.notify_all()

    def _wait_for_room(self) -> bool:
        """Block the source while ``capacity`` items are in flight (counted as a source
        block); False once the run is aborted."""
        with self.cond:
            if len(self.in_flight) >= self.capacity and not self.aborted:
                t0 = now_ns()
                self.source_blocks += 1
                while len(self.in_flight) >= self.capacity and not self.aborted:
                    self.cond.wait()
                self.source_blocked_ns += now_ns() - t0
            return not self.aborted

    def _feed(self, first: _Channel, seq: int, x: Any) -> bool:
        """Admit item ``seq`` (its intake time starts its latency) into the first stage's
        queue; False when the run was aborted or the queue cancelled (the item then has
        its final status)."""
        t = now_ns()
        with self.cond:
            if self.aborted:
                return False
            self.in_flight[seq] = t
            self.submitted += 1
            self.max_in_flight = max(self.max_in_flight, len(self.in_flight))
            if self.t_start is None:
                self.t_start = t
        put = first.put(_Entry(seq, x))
        if put == 2:  # back-pressure reached the source: it blocked on a full queue
            t_put = now_ns()
            with self.cond:
                self.source_blocks += 1
                self.source_blocked_ns += t_put - t
        if not put:
            self.finish(seq, CANCELLED)
            return False
        return True

    def _worker(self, s: int, stage: Stage, lane: LaneRecorder, acc: _Acc, stream: Any) -> None:
        inq = self.channels[s]
        outq = self.channels[s + 1] if s + 1 < len(self.stages) else None
        # a wait names the lane it waits on only when that stage has a single lane
        prev = self.stages[s - 1].name if s and self.stages[s - 1].replicas == 1 else None
        nxt = (self.stages[s + 1].name if outq is not None and self.stages[s + 1].replicas == 1
               else None)
        try:
            while True:
                t_w = now_ns()
                e = inq.get()
                t_g = now_ns()
                if e is None:
                    break
                lane.wait(t_w, t_g, on=prev, name="queue empty")
                acc.qwait += t_g - e.t
                if self.aborted:
                    self.finish(e.seq, CANCELLED)
                    continue
                self._process(e, stage, stream, (lane, acc), outq, nxt)
        finally:
            self._worker_done(s, outq)

    def _process(self, e: _Entry, stage: Stage, stream: Any, books: tuple[LaneRecorder, _Acc],
                 outq: _Channel | None, nxt: str | None) -> None:
        """Run ``stage`` on item ``e`` (its lane and accounts in ``books``; retried as the
        error policy says) and hand the result on: to the next stage's queue, to the caller
        after the last stage, a failure the policy stops on to :meth:`abort`, one it goes
        on past to :meth:`drop`."""
        lane, acc = books
        t0 = now_ns()
        (out, ready), error = _call_stage(stage, stream, e, last=outq is None)
        got = None if error is None else retry_after(
            error, lambda: _call_stage(stage, stream, e, last=outq is None), self.errors.policy)
        # a failed call is busy time too, as the timeline shows it; a worker's clock
        # only moves on, so its last op ended last
        t1 = now_ns()
        lane.op(stage.name, t0, t1)
        acc.busy += t1 - t0
        if got is not None:
            if self._failed(e.seq, stage.name, got):
                return
            out, ready = got.value
        acc.items += 1
        if outq is None:
            self.arrive(e.seq, out, t1)
            return
        e.payload, e.ready = out, ready
        put = outq.put(e)
        if not put:
            self.finish(e.seq, CANCELLED)
            return
        if put == 2:  # the queue was full: this worker waited for room
            t2 = now_ns()
            lane.wait(t1, t2, on=nxt, name="queue full")
            acc.blocked += t2 - t1

    def _failed(self, seq: int, stage: str, got: Attempts) -> bool:
        """Record item ``seq``'s calls at ``stage``; when they failed, end the item (and
        the run, if the policy stops on it): True, the item goes no further."""
        if self.errors.note(seq, stage, got):
            self.finish(seq, FAILED)
            self.abort((stage, seq, got.error))  # type: ignore[arg-type]
            return True
        if got.error is not None:
            self.drop(seq)
            return True
        return False

    def _worker_done(self, s: int, outq: _Channel | None) -> None:
        """A worker of stage ``s`` stopped: the stage's last one closes its output queue
        (the caller's wait wakes after the last stage)."""
        with self.cond:
            self.remaining[s] -= 1
            last = self.remaining[s] == 0
        if not last:
            return
        if outq is not None:
            outq.close()
        else:
            with self.cond:
                self.cond.notify_all()

    # ------------------------------------------------------------------ caller side
    def results(self) -> Iterator[ItemResult]:
        """Hand out completed items in order (or as they finish); raise on failure."""
        try:
            while True:
                with self.cond:
                    got = self._next_ready()
                    if got is None:
                        break
                    seq, value, latency = got
                    if self.ordered:
                        self.next_id += 1
                    self.latencies.append(latency)
                self.finish(seq, COMPLETED)
                yield ItemResult(seq, value, latency)
        finally:
            if not self.done_cleanly():
                self.abort(None)
            self.join()
            if self.in_flight:  # cannot happen: every exit path finishes its items
                raise AssertionError(f"items lost in the pipeline: {sorted(self.in_flight)[:10]}")
            self.stats().check_accounting()
        failure = self.failure
        if failure is not None:
            stage, seq, exc = failure
            raise PipelineError(stage, seq, exc, self.counts, self.submitted) from exc

    def _next_ready(self) -> tuple | None:
        """The next item to hand out, waiting for it (the lock held); None once every item
        is out or the run was aborted (an abort sets :attr:`failure` first, if any)."""
        while not self.aborted:
            if self.ordered:
                while self.next_id in self.dropped:  # the policy dropped it: pass over
                    self.dropped.discard(self.next_id)
                    self.next_id += 1
                got = self.ready.pop(self.next_id, None)  # type: ignore[union-attr]
            else:
                got = self.ready.popleft() if self.ready else None  # type: ignore[union-attr]
            if got is not None:
                return got
            if self.source_done and not self.in_flight:
                return None
            self.cond.wait()
        return None

    def done_cleanly(self) -> bool:
        with self.cond:
            return self.source_done and not self.in_flight and not self.aborted

    def join(self) -> None:
        for t in self.threads:
            if t is not threading.current_thread():
                t.join()

    def stats(self) -> PipelineStats:
        t_start = self.t_start or 0
        # to the last stage work, not only to the last item out: after an early break or
        # a failure the stages ran on (busy over wall x replicas, or a wall of 0); the last
        # stage's work ends when its items arrive, whichever replica reports last
        end = max([t_start, *(lane.ops[-1][2] for lane in self.lanes if lane.ops)])
        wall = max(0, end - t_start)
        stages = []
        for s, stage in enumerate(self.stages):
            st = StageStats(stage.name, stage.kind, stage.replicas, wall_ns=wall)
            for a in self.accs[s]:
                st.items += a.items
                st.busy_ns += a.busy
                st.queue_wait_ns += a.qwait
                st.blocked_ns += a.blocked
            stages.append(st)
        return PipelineStats("pipelined", stages, wall, dict(self.counts), self.submitted,
                             latencies_ns=np.asarray(self.latencies, np.int64),
                             ordered=self.ordered,
                             admission=Admission(self.pipe.depth, self.capacity,
                                                 self.source_blocks, self.source_blocked_ns,
                                                 self.max_in_flight),
                             errors=self.errors)


class Pipeline:
    """Named stages joined by bounded queues; see the module docstring.

    >>> with Pipeline([Stage("double", lambda x: 2 * x), Stage("inc", lambda x: x + 1)]) as p:
    ...     list(p.map(range(3)))
    [1, 3, 5]
    """

    def __init__(self, stages: Sequence[Stage], *, depth: int = 2, ordered: bool = True,
                 backend: str | Backend = "cpu", name: str = "pipeline",
                 on_error: str | ErrorPolicy = "fail") -> None:
        if not stages:
            raise ValueError("a pipeline needs at least one stage")
        names = [s.name for s in stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique: {names}")
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError("depth must be an integer >= 1")
        self.stages = list(stages)
        self.depth = depth
        self.ordered = ordered
        self.name = name
        #: what a stage raising on an item does: ``fail``, ``skip`` or ``retry:N`` (:mod:`.policy`)
        self.on_error = ErrorPolicy.parse(on_error)
        self.backend: Backend = get_backend(backend) if isinstance(backend, str) else backend
        self._run: _Run | None = None
        self._last: _Run | None = None
        self._closed = False
        self.runs = 0  # runs started: each run's device streams get their own names

    @property
    def workers(self) -> int:
        return sum(s.replicas for s in self.stages)

    @property
    def capacity(self) -> int:
        """Most items in flight: a queue of ``depth`` before each stage and one for the output,
        plus one item per worker."""
        return self.depth * (len(self.stages) + 1) + self.workers

    # ------------------------------------------------------------------ running
    def results(self, items: Iterable[Any]) -> Iterator[ItemResult]:
        """Run ``items`` through the stages; yield an :class:`ItemResult` per completed item
        (in intake order when ``ordered``). Raises :class:`PipelineError` on a failure the
        error policy stops on."""
        if self._closed:
            raise RuntimeError("pipeline is closed")
        return self._drive(items)

    def _drive(self, items: Iterable[Any]) -> Iterator[ItemResult]:
        # threads start on the first next(), so a generator never iterated leaves none behind
        if self._run is not None:
            raise RuntimeError("a run of this pipeline is still in progress")
        run = _Run(self)
        self._run = self._last = run
        self.runs += 1
        try:
            run.start(items)
            yield from run.results()
        finally:
            self._run = None

    def map(self, items: Iterable[Any]) -> Iterator[Any]:
        """Like :meth:`results`, yielding only the output values."""
        for r in self.results(items):
            yield r.value

    def run(self, items: Iterable[Any]) -> list[ItemResult]:
        """Run to the end and return every completed item."""
        return list(self.results(items))

    # ------------------------------------------------------------------ reports
    def stats(self) -> PipelineStats:
        """Accounting of the last run."""
        if self._last is None:
            raise RuntimeError("the pipeline has not run yet")
        return self._last.stats()

    def timeline(self) -> Timeline:
        """The last run as a Timeline: one lane per stage replica (its worker thread), ops
        for stage calls, waits for empty input / full output queues."""
        if self._last is None:
            raise RuntimeError("the pipeline has not run yet")
        st = self._last.stats()
        return build_timeline(self._last.lanes, self.name, "parastream-pipeline",
                              meta={"pipeline": st.to_dict()}, device=cpu_name())

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Cancel a run in progress and wait for every worker to exit."""
        self._closed = True
        run = self._run
        if run is not None:
            run.abort(None)
            run.join()
            self._run = None

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _call_fn(fn: Callable[[Any], Any], x: Any) -> tuple[Any, BaseException | None]:
    """``fn(x)`` -> (output, None), or (None, the :class:`Exception` it raised); anything
    else (Ctrl-C) propagates."""
    try:
        return fn(x), None
    except Exception as exc:  # noqa: BLE001 - the error policy decides
        return None, exc


class _Serial:
    """One serial pass: every stage in turn on the calling thread, one item at a time,
    with the same books as a pipelined run (a lane and accounts per stage)."""

    def __init__(self, stages: Sequence[Stage], policy: ErrorPolicy) -> None:
        self.stages = list(stages)
        self.lanes = [LaneRecorder(s.name, s.kind) for s in stages]
        self.accs = [_Acc() for _ in stages]
        self.errors = ErrorLog(policy)
        self.outs: list[Any] = []
        self.latencies: list[int] = []
        self.submitted = 0

    def counts(self, failed: int = 0) -> dict[str, int]:
        """The outcomes so far, with ``failed`` more failed items."""
        return {COMPLETED: len(self.outs), FAILED: len(self.errors.skipped) + failed,
                CANCELLED: 0}

    def items(self, items: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        """(id, input) in intake order; the input iterator's errors arrive as
        :class:`PipelineError` naming the source, as in a pipelined run."""
        it = iter(items)
        while True:
            try:
                x = next(it)
            except StopIteration:
                return
            except Exception as exc:
                raise PipelineError(SOURCE, self.submitted, exc, self.counts(),
                                    self.submitted) from exc
            self.submitted += 1
            yield self.submitted - 1, x

    def run_item(self, seq: int, x: Any) -> None:
        """Item ``seq`` through every stage; a failure the policy goes on past drops it,
        one it stops on raises :class:`PipelineError`."""
        t_in = now_ns()
        for st, lane, acc in zip(self.stages, self.lanes, self.accs):
            t0 = now_ns()
            out, error = _call_fn(st.fn, x)
            got = None if error is None else retry_after(
                error, functools.partial(_call_fn, st.fn, x), self.errors.policy)
            t1 = now_ns()
            lane.op(st.name, t0, t1)
            acc.busy += t1 - t0
            if got is not None:
                if self.errors.note(seq, st.name, got):
                    raise PipelineError(st.name, seq, got.error,  # type: ignore[arg-type]
                                        self.counts(failed=1), self.submitted) from got.error
                if got.error is not None:
                    return
                out = got.value
            x = out
            acc.items += 1
        self.outs.append(x)
        self.latencies.append(now_ns() - t_in)

    def stats(self, wall: int) -> PipelineStats:
        return PipelineStats("serial", [StageStats(s.name, s.kind, 1, items=a.items,
                                                   busy_ns=a.busy, wall_ns=wall)
                                        for s, a in zip(self.stages, self.accs)],
                             wall, self.counts(), self.submitted,
                             latencies_ns=np.asarray(self.latencies, np.int64), ordered=True,
                             admission=Admission.serial(), errors=self.errors)


def run_serial(stages: Sequence[Stage], items: Iterable[Any], name: str = "serial",
               on_error: str | ErrorPolicy = "fail") -> tuple[list[Any], PipelineStats, Timeline]:
    """The baseline: every stage in turn on the calling thread, one item at a time.

    Records the same accounting and timeline (one lane per stage) as a pipelined run, so
    utilizations and throughputs compare one to one, and follows the same error policy
    ``on_error``: the outputs are those of the items that completed, in order (the dropped
    ones are in ``stats.errors.skipped``). A failure the policy stops on raises
    :class:`PipelineError`.
    """
    run = _Serial(stages, ErrorPolicy.parse(on_error))
    t_start = now_ns()
    for seq, x in run.items(items):
        run.run_item(seq, x)
    stats = run.stats(now_ns() - t_start)
    stats.check_accounting()
    tl = build_timeline(run.lanes, name, "parastream-pipeline", meta={"pipeline": stats.to_dict()},
                        device=cpu_name())
    return run.outs, stats, tl
