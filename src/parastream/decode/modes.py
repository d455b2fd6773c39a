"""The four decode modes, each serving the same requests with the same scheduler:

- ``sequential``: one request at a time (the baseline);
- ``streams``: every running request's steps on its own stream (a worker thread), up to
  ``concurrency`` streams, reused by later requests; one scheduling pass per round, each
  running request decoding one token per round on its stream;
- ``batch``: continuous batching: requests join at step boundaries and leave when done;
  one device worker. A prefill runs on its own before the batched step, or, with
  ``prefill_chunk``, in chunks that ride along with the running requests' decode rows
  (each step: the decode rows and at most one chunk's positions), so a long prompt does
  not stall the running requests; a decoder without ``extend`` prefills whole;
- ``batch+overlap``: as ``batch``, with the host's scheduling of step t+1 and its
  processing of step t's tokens overlapped with device step t (one step ahead: the next
  step's input tokens never pass through the host, the device worker feeds them on),
  where it can pay: on a cpu device only when the interpreter probe finds the step's
  kernels leave the interpreter free for :data:`AHEAD_MIN_FREE` of a step (else the mode
  schedules as ``batch`` does, and says so). With ``tbo``, a step of at least the threshold's decode rows is split in two
  micro-batches, one's attention overlapping the other's MLP on a second worker
  (:mod:`.tbo`); ``tbo="auto"`` calibrates the threshold on the model before the run
  (:func:`.calibrate.calibrate_split`; "never" leaves it off).

``device="cuda"`` runs the model and its KV pool on the cuda device, each worker issuing
on its own stream (:mod:`.streams`): one per request in ``streams`` mode (up to
``streams``), the device worker's (and the micro-batch worker's) in the batch modes, the
host's scheduling on the host thread beside them; spans are timed by cuda events.

The host loop (:class:`Engine`) runs a scheduling pass, counts the step's tokens in the
scheduler as it submits the step (lengths are known, so the next pass need not wait for
the tokens), and records the tokens when the step's results come back. Spans go to the
timeline: the device worker's (lane ``device``, or one lane per request in ``streams``)
and the host's (lane ``scheduler``).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ..timeline.model import DeviceInfo, Timeline, TimelineBuilder
from .calibrate import (Calibration, InterpreterProbe, batch_sizes, calibrate_split,
                        probe_interpreter)
from .config import CHUNKED, MODES
from .device import Live, Outcome, Row, Split, Worker, now_ns, run_step
from .scheduler import FAILED, FINISHED, Job, Pass, Scheduler, SchedulerSettings
from .streams import Placement, place_model, placement
from .tbo import can_split, check_tbo
from .workload import Request

#: the lane of the host's scheduling and token processing
HOST_LANE = "scheduler"
#: the gate of batch+overlap's one-step-ahead scheduling: the host's work of step t+1
#: runs beside device step t only where the probe finds the step's kernels leave the
#: interpreter free for at least this share of the step (below it the host thread could
#: only wait for the interpreter, and handing steps across threads costs time)
AHEAD_MIN_FREE = 0.2


@dataclass(frozen=True)
class ModeSettings:
    """A run's settings: ``concurrency`` (most running requests), the KV budget
    ``kv_blocks``, ``max_skip``, the model's ``context``, ``streams`` (the streams of
    ``streams`` mode, its hardware queues; None = one per running request) and
    ``prefill_chunk`` (the batch modes' chunked prefill: the most prefill positions one
    step computes beside its decode rows; None = each prefill whole, on its own),
    ``tbo`` (``batch+overlap``'s two-micro-batch overlap: ``"off"``, ``"auto"`` for a
    threshold calibrated before the run, or the fewest decode rows of a split step),
    ``probe`` (measure the interpreter-free share of a step before a ``batch+overlap``
    run: :func:`.calibrate.probe_interpreter`) and ``device`` (``"cpu"`` or ``"cuda"``)."""

    concurrency: int = 16
    kv_blocks: int = 1024
    max_skip: int = 4
    context: int = 1 << 30
    streams: int | None = None
    prefill_chunk: int | None = None
    tbo: str | int = "off"
    probe: bool = False
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_tbo(self.tbo)

    def scheduler(self, mode: str, chunks: bool = True) -> SchedulerSettings:
        """The scheduler settings of ``mode`` (``sequential`` runs one at a time; only
        the batch modes chunk prefills, and only with ``chunks``: a decoder that can)."""
        running = 1 if mode == "sequential" else self.concurrency
        chunk = self.prefill_chunk if chunks and mode in CHUNKED else None
        return SchedulerSettings(max_running=running, kv_blocks=self.kv_blocks,
                                 max_skip=self.max_skip, context=self.context,
                                 prefill_chunk=chunk)


@dataclass
class ModeRun:
    """One mode's run: every request's :class:`Live` record (in request order), its
    scheduler :class:`Job`, the start and end (ns), the timeline, the scheduling passes,
    preemptions, the KV budget, the most blocks held at once, the prefill chunk the
    run used (None: whole prefills), the device, the fewest decode rows of a step split
    in two micro-batches (None: none split), TBO's calibration and the interpreter probe
    (each None when not taken)."""

    mode: str
    lives: list[Live]
    jobs: list[Job]
    start_ns: int
    end_ns: int
    timeline: Timeline
    passes: int = 0
    kv_blocks: int = 0
    peak_blocks: int = 0
    prefill_chunk: int | None = None
    device: str = "cpu"
    tbo_at: int | None = None
    calibration: Calibration | None = None
    probe: InterpreterProbe | None = None
    ahead: bool = False

    @property
    def preemptions(self) -> int:
        """Preemptions over every request (its jobs' counts)."""
        return sum(j.preemptions for j in self.jobs)


class _OneDevice:
    """Every step on one worker (``sequential``, ``batch``, ``batch+overlap``); with
    ``split_at``, a second worker runs the second micro-batch of split steps."""

    def __init__(self, model: Any, where: Placement, split_at: int | None = None) -> None:
        self.model = model
        self.worker = Worker("device", where)
        self.workers = [self.worker]
        self.split = None
        if split_at is not None:
            self.split = Split(split_at, Worker("device micro-batch", where))
            self.workers.append(self.split.helper)

    def submit(self, rows: list[Row]) -> list[Future]:
        return [self.worker.submit(run_step, self.model, rows, "device", self.split)]

    def close(self) -> None:
        for w in self.workers:
            w.close()


class _Streams:
    """Each running request's steps on its own stream: ``n`` workers (the hardware
    queues); a request keeps its worker while it runs, a new one takes a free worker, and
    beyond ``n`` running requests the workers are shared (multiplexed). Spans go to each
    request's own lane."""

    def __init__(self, model: Any, n: int, where: Placement) -> None:
        self.model = model
        self.workers = [Worker(f"stream {i}", where) for i in range(n)]
        self._of: dict[int, Worker] = {}

    def submit(self, rows: list[Row]) -> list[Future]:
        running = {r.live.request.rid for r in rows}
        self._of = {rid: w for rid, w in self._of.items() if rid in running}
        futures = []
        for k, r in enumerate(rows):
            futures.append(self._worker(r.live.request.rid, k).submit(
                run_step, self.model, [r]))
        return futures

    def _worker(self, rid: int, k: int) -> Worker:
        """The stream of request ``rid``: its own, else a free one, else shared."""
        if rid not in self._of:
            used = set(map(id, self._of.values()))
            free = [w for w in self.workers if id(w) not in used]
            self._of[rid] = free[0] if free else self.workers[k % len(self.workers)]
        return self._of[rid]

    def close(self) -> None:
        for w in self.workers:
            w.close()


@dataclass
class _Host:
    """The host loop's state: requests not arrived yet, the step in flight, spans."""

    pending: list[Request]
    inflight: list[Future] = field(default_factory=list)
    spans: list[tuple[str, str, int, int]] = field(default_factory=list)


class Engine:
    """Serves ``requests`` on ``model`` in ``mode`` (see the module docstring)."""

    def __init__(self, model: Any, mode: str, requests: list[Request],
                 settings: ModeSettings, device_mod: Any = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        self.where = placement(settings.device, device_mod)
        model = place_model(model, self.where)
        self.model, self.mode, self.settings = model, mode, settings
        # a decoder without ``extend`` cannot compute a chunk: its prefills stay whole
        self.sched = Scheduler(settings.scheduler(mode, chunks=hasattr(model, "extend")))
        pool = model.new_pool(settings.kv_blocks)
        self.lives = [Live(r, model.new_cache(r.rid, pool), history=list(r.prompt),
                           lane="device" if mode != "streams" else f"request-{r.rid}")
                      for r in requests]
        self.jobs = [Job(r.rid, r.rid, len(r.prompt), r.output_tokens) for r in requests]
        self.overlap = mode == "batch+overlap"
        self.ahead = self.overlap
        self.peak_blocks = 0
        self.streams = settings.streams or settings.concurrency

    def run(self) -> ModeRun:
        """Serve every request; each ends finished or failed with a reason."""
        calibration, probe = self._measure_before()
        split_at = self._split_at(calibration)
        self.ahead = self._ahead(probe)
        executor = (_Streams(self.model, self.streams, self.where)
                    if self.mode == "streams" else _OneDevice(self.model, self.where, split_at))
        host = _Host(pending=[lv.request for lv in self.lives])
        start = self.where.begin()
        try:
            while self._turn(host, executor, start):
                pass
        finally:
            executor.close()
        end = now_ns()
        self.where.synchronize()
        for job, live in zip(self.jobs, self.lives):
            self._settle(job, live)
        spans = [s for w in executor.workers for s in w.timed_spans()] + host.spans
        return ModeRun(self.mode, self.lives, self.jobs, start, end,
                       _timeline(self.mode, spans, self.where.label),
                       passes=self.sched.passes, kv_blocks=self.sched.settings.kv_blocks,
                       peak_blocks=self.peak_blocks,
                       prefill_chunk=self.sched.settings.prefill_chunk,
                       device=self.where.device, tbo_at=split_at, calibration=calibration,
                       probe=probe, ahead=self.ahead)

    def _measure_before(self) -> tuple[Calibration | None, InterpreterProbe | None]:
        """TBO's calibration (``tbo="auto"``) and the interpreter probe (``probe``), taken
        before a ``batch+overlap`` run on its model and device."""
        if not self.overlap:
            return None, None
        rows = max(1, min(self.settings.concurrency, len(self.lives)))
        calibration = (calibrate_split(self.model, batch_sizes(rows), where=self.where)
                       if self.settings.tbo == "auto" else None)
        probe = (probe_interpreter(self.model, rows, where=self.where)
                 if self.settings.probe else None)
        return calibration, probe

    def _ahead(self, probe: InterpreterProbe | None) -> bool:
        """Whether ``batch+overlap`` schedules one step ahead: always where workers issue
        on device streams (kernels run apart from the host: cuda), else where the probe
        found the interpreter free for :data:`AHEAD_MIN_FREE` of a step (no probe: on)."""
        if not self.overlap:
            return False
        if self.where.streams or probe is None:
            return True
        return probe.free_share >= AHEAD_MIN_FREE

    def _split_at(self, calibration: Calibration | None) -> int | None:
        """The fewest decode rows of a split step (None: no step is split)."""
        tbo = self.settings.tbo
        if not self.overlap or tbo == "off" or not can_split(self.model):
            return None
        return calibration.threshold if calibration is not None else int(tbo)

    def _turn(self, host: _Host, executor: Any, start: int) -> bool:
        """One scheduling pass and its step; False once every request has ended."""
        self._arrive(host, start)
        if self.sched.idle and not host.pending and not host.inflight:
            return False
        t0 = now_ns()
        plan = self.sched.schedule()
        self.peak_blocks = max(self.peak_blocks, self.sched.held)
        self._fail_now(plan)
        rows = self._rows(plan)
        self.sched.advance(plan)
        host.spans.append((HOST_LANE, "schedule", t0, now_ns()))
        submitted = executor.submit(rows) if rows else []
        if self.ahead:  # step t+1 is queued: now take step t's tokens
            self._collect(host, host.inflight)
            host.inflight = submitted
        else:
            self._collect(host, submitted)
        if not rows and not host.inflight:
            self._idle(host, start)
        return True

    def _arrive(self, host: _Host, start: int) -> None:
        """Queue every request whose arrival time has come."""
        now_s = (now_ns() - start) / 1e9
        while host.pending and host.pending[0].arrival_s <= now_s:
            r = host.pending.pop(0)
            self.sched.add(self.jobs[r.rid])
            if self.jobs[r.rid].state == FAILED:
                live = self.lives[r.rid]
                live.outcome, live.reason = FAILED, self.jobs[r.rid].reason

    def _idle(self, host: _Host, start: int) -> None:
        """Nothing runs: wait for the next arrival (a scheduler that neither runs nor
        admits anything while requests wait would be a bug: it raises)."""
        if not host.pending:
            if not self.sched.idle:
                raise RuntimeError("decode scheduler stalled with requests waiting")
            return
        wait_s = host.pending[0].arrival_s - (now_ns() - start) / 1e9
        if wait_s > 0:
            time.sleep(wait_s)

    def _rows(self, plan: Pass) -> list[Row]:
        """The step's rows: each job's live record and a snapshot of its block table."""
        return ([Row(self.lives[j.rid], True, tuple(j.table)) for j in plan.prefill]
                + [Row(self.lives[c.job.rid], True, tuple(c.job.table), (c.start, c.stop))
                   for c in plan.chunks]
                + [Row(self.lives[j.rid], False, tuple(j.table)) for j in plan.decode])

    def _fail_now(self, plan: Pass) -> None:
        for j in plan.failed:
            self.lives[j.rid].outcome, self.lives[j.rid].reason = FAILED, j.reason

    def _collect(self, host: _Host, futures: list[Future]) -> None:
        """Wait for a step's results and record them (tokens, or a failed request)."""
        if not futures:
            return
        out = Outcome()
        for f in futures:
            out.extend(f.result())
        t0 = now_ns()
        for live, token, gap, t in out.tokens:
            if live.outcome == FAILED:  # cancelled or failed: a step ahead is not counted
                continue
            live.tokens.append(token)
            live.gaps.append(gap)
            live.times_ns.append(t)
            self._cancel_if_asked(live)
        for live, reason in out.errors:
            live.outcome, live.reason = FAILED, reason
            self.sched.fail(self.jobs[live.request.rid], reason)
        host.spans.append((HOST_LANE, "collect", t0, now_ns()))

    def _cancel_if_asked(self, live: Live) -> None:
        """The client cancels its request once it has ``cancel_after_tokens`` tokens (when
        the request is not done by then): it ends failed, its blocks freed."""
        n = live.request.cancel_after_tokens
        if n is not None and len(live.tokens) == n < live.request.output_tokens:
            live.outcome, live.reason = FAILED, f"cancelled after {n} tokens"
            self.sched.fail(self.jobs[live.request.rid], live.reason)

    @staticmethod
    def _settle(job: Job, live: Live) -> None:
        """The request's outcome: failed when a step failed it, else the scheduler's."""
        if live.outcome == FAILED:
            return
        live.outcome = job.state if job.state in (FINISHED, FAILED) else FAILED
        live.reason = job.reason or "not ended by the scheduler"


def _timeline(mode: str, spans: list[tuple[str, str, int, int]],
              device: str = "CPU") -> Timeline:
    """The run's spans as a timeline (on ``device``): device lanes first, the host's
    last."""
    b = TimelineBuilder(f"parastream decode {mode}", "parastream")
    b.device = DeviceInfo(name=device)
    for lane in sorted({s[0] for s in spans}, key=lambda s: (s == HOST_LANE, _lane_key(s))):
        b.streams.code(lane)
    for lane, name, s, e in spans:
        b.add_op(lane, name, s, e, type="host" if lane == HOST_LANE else "device")
    b.meta.update({"mode": mode})
    return b.build()


def _lane_key(lane: str) -> tuple[int, str]:
    head, _, tail = lane.rpartition("-")
    return (int(tail), head) if tail.isdigit() else (-1, lane)


def run_mode(model: Any, mode: str, requests: list[Request], settings: ModeSettings,
             device_mod: Any = None) -> ModeRun:
    """Serve ``requests`` on ``model`` in ``mode``. ``device_mod``: a stand-in for
    ``torch.cuda`` (tests of the cuda code path; the tensors stay where they are)."""
    return Engine(model, mode, requests, settings, device_mod).run()


__all__ = ["CHUNKED", "HOST_LANE", "MODES", "Engine", "ModeRun", "ModeSettings", "run_mode"]
