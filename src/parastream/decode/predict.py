"""Decode predicted on a device profile: the decode modes' scheduler (the same
:class:`~parastream.decode.scheduler.Scheduler`, settings and requests) driven on a
simulated clock, each step's forward priced by the discrete-event device model
(:mod:`parastream.decode.predict_cost`).

A pass of the scheduler decides a step, as in the measured modes; here:

- ``sequential`` and ``batch``: the host's work for the step (scheduling and sampling,
  :class:`HostCost`), then the step's prefills as one forward (the requests admitted this
  pass, prefilled on their own before the step), then one batched decode forward (with
  the pass's prefill chunks in it when the scheduler chunks prefills, batch modes only).
  Its tokens come out at the end of the forward that made them.
- ``streams``: one round per pass: every running request's prefill or decode step on its
  own stream, all at once (the device's hardware queues shared past their count).
- ``batch+overlap``: as ``batch``, the host's work for step t+1 done while the device runs
  step t (the host schedules the next step once it has launched this one), and a forward
  of at least the calibrated number of tokens (:func:`calibrate_two_micro`) run as two
  micro-batches (one half's attention beside the other's MLP).

Everything is deterministic: the same requests and settings give the same figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .config import CHUNKED, MODES
from .predict_cost import Forward, StepCosts, Work, chunk_work, decode_work, prefill_work
from .scheduler import FAILED, FINISHED, Job, Pass, Scheduler, SchedulerSettings
from .stats import percentiles
from .workload import Request


@dataclass(frozen=True)
class HostCost:
    """The host's time for one step (us): scheduling the pass and sampling, taking and
    handing over its tokens: ``step_us`` per step plus ``request_us`` per request in it.
    A stated constant, not a figure of the device profile."""

    step_us: float = 100.0
    request_us: float = 5.0

    def of(self, requests: int) -> float:
        return self.step_us + self.request_us * requests

    def describe(self) -> str:
        return (f"host scheduling and sampling {self.step_us:g} us per step + "
                f"{self.request_us:g} us per request per step (a stated constant)")


@dataclass(frozen=True)
class Gate:
    """When ``batch+overlap`` runs a forward as two micro-batches: at ``threshold``
    tokens or more (None: never), calibrated on the device model; ``curve`` holds the
    calibration, (kind, forward tokens, plain forward time over two micro-batches')."""

    threshold: int | None
    curve: tuple[tuple[str, int, float], ...] = ()

    def on(self, tokens: int) -> bool:
        return self.threshold is not None and tokens >= self.threshold


def calibrate_two_micro(costs: StepCosts, prompt: int, context: int,
                        max_batch: int) -> Gate:
    """Two micro-batches against one forward on ``costs``' device, over prefills of 1, 2,
    4, ... prompts of ``prompt`` positions (up to 16k tokens) and decode steps of 2, 4,
    ... ``max_batch`` requests at ``context`` positions: the threshold is the fewest
    tokens from which two micro-batches win at every calibrated size (None: nowhere)."""
    grid: list[tuple[str, int, list[Work]]] = []
    b = 2
    while b <= max(2, max_batch):
        grid.append(("decode", b, [decode_work([context])] * b))
        b *= 2
    k = 1
    while k * prompt <= 16384:
        grid.append(("prefill", k * prompt, [prefill_work([prompt])] * k))
        k *= 2
    curve = []
    for kind, tokens, work in grid:
        ratio = costs.batched(work).wall_us / costs.batched(work, two_micro=True).wall_us
        curve.append((kind, tokens, ratio))
    threshold = None
    for _, tokens, _ in sorted(curve, key=lambda c: c[1]):
        if all(r > 1.0 for _, t, r in curve if t >= tokens):
            threshold = tokens
            break
    return Gate(threshold, tuple(sorted(curve, key=lambda c: (c[1], c[0]))))


@dataclass
class Served:
    """One mode's simulated run: per request its token times and outcome (us from the
    first arrival), passes, forwards run as two micro-batches, the device's busy time."""

    mode: str
    requests: list[Request]
    times_us: list[list[float]]
    outcomes: list[str]
    passes: int = 0
    two_micro: int = 0
    busy_us: float = 0.0

    @property
    def end_us(self) -> float:
        return max((t[-1] for t in self.times_us if t), default=0.0)


@dataclass
class _Clock:
    """The simulated time: when the host runs its next pass, and when the device is
    free (us)."""

    host: float = 0.0
    device: float = 0.0


@dataclass
class _Run:
    sched: Scheduler
    jobs: list[Job]
    served: Served
    pending: list[Request]
    clock: _Clock = field(default_factory=_Clock)


def serve(mode: str, requests: list[Request], settings: SchedulerSettings, costs: StepCosts,
          host: HostCost, gate: Gate | None = None) -> Served:
    """Serve ``requests`` in ``mode`` on the simulated device; every request ends once,
    finished or failed with the scheduler's reason (RuntimeError if the scheduler stalls
    with requests waiting)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    if mode not in CHUNKED:  # one at a time, or each request's own step: prefills whole
        settings = replace(settings, prefill_chunk=None,
                           max_running=1 if mode == "sequential" else settings.max_running)
    run = _Run(Scheduler(settings), [Job(r.rid, r.rid, len(r.prompt), r.output_tokens)
                                     for r in requests],
               Served(mode, requests, [[] for _ in requests], [""] * len(requests)),
               sorted(requests, key=lambda r: (r.arrival_s, r.rid)))
    while _pass(run, mode, costs, host, gate or Gate(None)):
        pass
    for j in run.jobs:
        run.served.outcomes[j.rid] = j.state if j.state in (FINISHED, FAILED) else FAILED
    run.served.passes = run.sched.passes
    return run.served


def _pass(run: _Run, mode: str, costs: StepCosts, host: HostCost, gate: Gate) -> bool:
    """One scheduling pass and its step on the simulated clock; False once all ended."""
    _arrive(run)
    if run.sched.idle and not run.pending:
        return False
    plan = run.sched.schedule()
    if not plan:
        if not run.pending:
            raise RuntimeError("decode scheduler stalled with requests waiting")
        run.clock.host = max(run.clock.host, run.pending[0].arrival_s * 1e6)
        return True
    prompts = [j.positions for j in plan.prefill]
    contexts = [j.positions - 1 for j in plan.decode]
    chunks = [chunk_work(c.start, c.stop, c.final) for c in plan.chunks]
    run.sched.advance(plan)
    work_us = host.of(len(plan.jobs))
    if mode == "streams":
        items = [prefill_work([p]) for p in prompts] + [decode_work([c]) for c in contexts]
        _streams_round(run, plan, costs.streams(items), work_us)
        return True
    pre = _forward(run, costs, [prefill_work([p]) for p in prompts], [], mode, gate)
    dec = _forward(run, costs, chunks, contexts, mode, gate)
    _batched_step(run, plan, (pre, dec), work_us, overlap=mode == "batch+overlap")
    return True


def _streams_round(run: _Run, plan: Pass, rnd: Forward, work_us: float) -> None:
    """A ``streams`` round on the clock: the host's work, then every stream's step; the
    round's tokens at its end."""
    start = run.clock.host + work_us
    _tokens(run, plan.jobs, start + rnd.wall_us)
    run.clock.host = run.clock.device = start + rnd.wall_us
    run.served.busy_us += rnd.wall_us


def _batched_step(run: _Run, plan: Pass, forwards: tuple[Forward, Forward], work_us: float,
                  overlap: bool) -> None:
    """A batched step on the clock: the prefill forward, then the decode forward (with
    the chunks), each one's tokens at its end. Without ``overlap`` the host's work comes
    first and the next pass waits for the step's end; with it the host's work was done
    during the device's previous step, and the next pass comes once this step is
    launched."""
    pre, dec = forwards
    if overlap:
        start = max(run.clock.host + work_us, run.clock.device)
        run.clock.host = start + pre.launch_us + dec.launch_us
    else:
        start = run.clock.host + work_us
    _tokens(run, plan.prefill, start + pre.wall_us)
    end = start + pre.wall_us + dec.wall_us
    _tokens(run, [c.job for c in plan.chunks if c.final] + plan.decode, end)
    run.clock.device = end
    if not overlap:
        run.clock.host = end
    run.served.busy_us += pre.wall_us + dec.wall_us


_NOTHING = Forward(0.0, 0.0, 0)


def _forward(run: _Run, costs: StepCosts, work: list[Work], contexts: list[int], mode: str,
             gate: Gate) -> Forward:
    """One batched forward over ``work`` and decode rows at ``contexts`` (nothing when
    both are empty), on two micro-batches where ``batch+overlap``'s gate opens for its
    tokens (then each decode row is its own item, for the split)."""
    tokens = sum(w.tokens for w in work) + len(contexts)
    if not tokens:
        return _NOTHING
    two = mode == "batch+overlap" and gate.on(tokens)
    run.served.two_micro += two
    rows = ([decode_work([c]) for c in contexts] if two else
            [decode_work(contexts)] if contexts else [])
    return costs.batched(work + rows, two_micro=two)


def _arrive(run: _Run) -> None:
    """Queue every request that has arrived by the host's next pass."""
    while run.pending and run.pending[0].arrival_s * 1e6 <= run.clock.host:
        r = run.pending.pop(0)
        run.sched.add(run.jobs[r.rid])


def _tokens(run: _Run, jobs: list[Job], at_us: float) -> None:
    """Record a token at ``at_us`` for each of ``jobs`` still running or just finished;
    a request whose client cancels after this many tokens ends failed."""
    for j in jobs:
        if j.state == FAILED:
            continue
        times = run.served.times_us[j.rid]
        times.append(at_us)
        n = run.served.requests[j.rid].cancel_after_tokens
        if n is not None and len(times) == n < j.output:
            run.sched.fail(j, f"cancelled after {n} tokens")


def figures(served: Served) -> dict:
    """Tokens/s and requests/s over the run (the first arrival to the last token), TTFT
    and inter-token latency p50/p99 (ms), the requests in, finished and failed, passes,
    two-micro-batch forwards and the device's busy share."""
    times, reqs = served.times_us, served.requests
    wall_s = max(served.end_us, 1e-9) / 1e6
    ttft = [(t[0] - r.arrival_s * 1e6) / 1e3 for t, r in zip(times, reqs) if t]
    itl = [d / 1e3 for t in times for d in np.diff(t).tolist()]
    finished = sum(o == FINISHED for o in served.outcomes)
    tokens = sum(len(t) for t in times)
    return {"tokens_per_s": round(tokens / wall_s, 1),
            "requests_per_s": round(finished / wall_s, 2),
            "ttft_ms": percentiles(ttft, 2), "itl_ms": percentiles(itl, 2),
            "requests": len(reqs), "finished": finished,
            "failed": sum(o == FAILED for o in served.outcomes), "tokens": tokens,
            "passes": served.passes, "two_micro_forwards": served.two_micro,
            "busy_share": round(served.busy_us / max(served.end_us, 1e-9), 3)}


__all__ = ["Gate", "HostCost", "MODES", "Served", "calibrate_two_micro", "figures", "serve"]
