"""What a decode run measured: throughput, latency percentiles, fairness, waiting, the
device's busy share from the timeline, and the agreement of greedy tokens across modes.

- tokens/s and requests/s over the run's wall time (start to the last result);
- TTFT: a request's first token time minus its arrival; inter-token latency (ITL): the
  time between a request's consecutive tokens (p50 and p99 of each, in ms);
- Jain's fairness index over per-request service (tokens per second of the request's time
  in the system, arrival to last token): 1 when every request is served alike;
- the most scheduling passes any request waited, and the most it was skipped;
- busy share: the time some device lane ran a step over the wall time (the host's lane,
  ``scheduler``, not counted), and the host's own share;
- the host's share of a step: the host's time over the host's and the device's together
  (what the host adds to each step when nothing overlaps it, as in ``batch``); with the
  interpreter-free share of a step (:func:`parastream.decode.calibrate.probe_interpreter`,
  when the run took it) this is the condition under which ``batch+overlap`` can gain;
- TBO: the fewest decode rows of a split step (None: none split) and its calibration;
- idle between steps: the gaps between the device's busy intervals (p50 and p99, ms), and
  the time of one scheduling pass (p50 and p99, ms; the host's ``schedule`` spans).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..timeline import intervals as iv
from ..timeline.model import DeviceInfo, Timeline, TimelineBuilder
from .device import Live
from .modes import HOST_LANE, ModeRun
from .scheduler import FAILED, FINISHED
from .stats import percentiles

#: two top logits closer than this are a numerical tie: a differing token there is allowed
TIE = 1e-4


@dataclass(frozen=True)
class ModeMetrics:
    """One mode's figures (times in ms, shares in 0..1)."""

    mode: str
    requests: int
    finished: int
    failed: int
    tokens: int
    wall_s: float
    tokens_per_s: float
    requests_per_s: float
    ttft_ms: dict
    itl_ms: dict
    jain: float
    max_passes_waited: int
    max_skips: int
    preemptions: int
    busy_share: float
    host_share: float
    idle_between_steps_ms: dict
    schedule_ms: dict
    host_step_share: float = 0.0
    interpreter_free_share: float | None = None
    device: str = "cpu"
    prefill_chunk: int | None = None
    tbo_at: int | None = None
    tbo_calibration: dict | None = None
    interpreter_probe: dict | None = None
    one_step_ahead: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def measure(run: ModeRun) -> ModeMetrics:
    """The figures of ``run``."""
    lives = run.lives
    wall_ns = max(run.end_ns - run.start_ns, 1)
    tokens = sum(len(lv.tokens) for lv in lives)
    finished = sum(lv.outcome == FINISHED for lv in lives)
    arrive = [arrival_ns(run, lv) for lv in lives]
    ttft = [(lv.times_ns[0] - a) / 1e6 for lv, a in zip(lives, arrive) if lv.times_ns]
    itl = [d / 1e6 for lv in lives for d in np.diff(lv.times_ns).tolist()]
    service = [len(lv.tokens) / max(lv.times_ns[-1] - a, 1) * 1e9
               for lv, a in zip(lives, arrive) if lv.times_ns]
    return ModeMetrics(
        mode=run.mode, requests=len(lives), finished=finished,
        failed=sum(lv.outcome == FAILED for lv in lives), tokens=tokens,
        wall_s=wall_ns / 1e9, tokens_per_s=tokens / wall_ns * 1e9,
        requests_per_s=finished / wall_ns * 1e9, ttft_ms=percentiles(ttft),
        itl_ms=percentiles(itl), jain=jain(service),
        max_passes_waited=max((j.passes_waited for j in run.jobs), default=0),
        max_skips=max((j.skips for j in run.jobs), default=0),
        preemptions=run.preemptions, busy_share=lane_share(run, host=False, wall_ns=wall_ns),
        host_share=lane_share(run, host=True, wall_ns=wall_ns),
        idle_between_steps_ms=percentiles(device_gaps_ms(run)),
        schedule_ms=percentiles(schedule_ms(run)), host_step_share=host_step_share(run),
        interpreter_free_share=run.probe.free_share if run.probe else None,
        device=run.device, prefill_chunk=run.prefill_chunk, tbo_at=run.tbo_at,
        tbo_calibration=run.calibration.to_dict() if run.calibration else None,
        interpreter_probe=run.probe.to_dict() if run.probe else None,
        one_step_ahead=run.ahead)


def arrival_ns(run: ModeRun, live: Live) -> int:
    """When ``live``'s request arrived, on the run's clock (ns)."""
    return run.start_ns + int(live.request.arrival_s * 1e9)


def jain(values: list[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all are equal, 1/n when one
    gets everything; 1.0 for no values."""
    a = np.asarray(values, dtype=float)
    if not len(a) or not (a * a).sum():
        return 1.0
    return float(a.sum() ** 2 / (len(a) * (a * a).sum()))


def lane_share(run: ModeRun, *, host: bool, wall_ns: int) -> float:
    """The share of the wall time covered by the host lane's spans (``host``) or by any
    device lane's spans."""
    tl = run.timeline
    if not len(tl):
        return 0.0
    mask = ~_device_mask(run) if host else _device_mask(run)
    return iv.length(iv.union(tl.start_ns[mask], tl.end_ns[mask])) / wall_ns


def host_step_share(run: ModeRun) -> float:
    """The host's time over the host's and the device's (each lane's spans merged): the
    share of a step the host takes when the two do not overlap."""
    tl = run.timeline
    if not len(tl):
        return 0.0
    dev = _device_mask(run)
    host_ns = iv.length(iv.union(tl.start_ns[~dev], tl.end_ns[~dev]))
    device_ns = iv.length(iv.union(tl.start_ns[dev], tl.end_ns[dev]))
    return host_ns / max(host_ns + device_ns, 1)


def _device_mask(run: ModeRun) -> np.ndarray:
    tl = run.timeline
    host_code = tl.streams.index(HOST_LANE) if HOST_LANE in tl.streams else -1
    return tl.stream != host_code


def device_gaps_ms(run: ModeRun) -> list[float]:
    """The gaps between the device's busy intervals (any device lane busy), in ms."""
    tl = run.timeline
    mask = _device_mask(run)
    starts, ends = iv.union(tl.start_ns[mask], tl.end_ns[mask])
    return ((starts[1:] - ends[:-1]) / 1e6).tolist()


def schedule_ms(run: ModeRun) -> list[float]:
    """The time of each scheduling pass (the host's ``schedule`` spans), in ms."""
    tl = run.timeline
    if "schedule" not in tl.names:
        return []
    m = tl.name == tl.names.index("schedule")
    return ((tl.end_ns[m] - tl.start_ns[m]) / 1e6).tolist()


def request_gantt(run: ModeRun) -> Timeline:
    """The run per request, one lane each (``request-N``): ``waiting`` from its arrival to
    its first token (TTFT), ``decoding`` from its first token to its last."""
    b = TimelineBuilder(f"parastream decode {run.mode} requests", "parastream")
    b.device = DeviceInfo(name="CPU")
    for lv in run.lives:
        lane = f"request-{lv.request.rid}"
        arrive = arrival_ns(run, lv)
        b.streams.code(lane)
        if lv.times_ns:
            b.add_op(lane, "waiting", arrive, lv.times_ns[0], type="request")
            b.add_op(lane, "decoding", lv.times_ns[0], max(lv.times_ns[-1], lv.times_ns[0] + 1),
                     type="request")
    b.meta.update({"mode": run.mode, "view": "requests"})
    return b.build()


@dataclass(frozen=True)
class Agreement:
    """Greedy tokens of a mode against the reference mode: requests compared (finished in
    both), identical, differing at a numerical tie (the two top logits within
    :data:`TIE` where they first differ; the rest of such a request follows another path),
    and differing otherwise (a failure), with the request ids of each."""

    mode: str
    reference: str
    compared: int
    identical: int
    ties: list[int]
    mismatches: list[int]

    def to_dict(self) -> dict:
        return asdict(self)


def agreement(ref: ModeRun, other: ModeRun) -> Agreement:
    """Compare ``other``'s tokens with ``ref``'s, request by request."""
    same, ties, bad = 0, [], []
    pairs = [(a, b) for a, b in zip(ref.lives, other.lives)
             if a.outcome == FINISHED and b.outcome == FINISHED]
    for a, b in pairs:
        k = first_difference(a.tokens, b.tokens)
        if k is None:
            same += 1
        elif min(_gap(a.gaps, k), _gap(b.gaps, k)) < TIE:
            ties.append(a.request.rid)
        else:
            bad.append(a.request.rid)
    return Agreement(other.mode, ref.mode, len(pairs), same, ties, bad)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (a length difference counts), or
    None when they are equal."""
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))


def _gap(gaps: list[float], k: int) -> float:
    return gaps[k] if k < len(gaps) else float("inf")


__all__ = ["Agreement", "ModeMetrics", "TIE", "agreement", "arrival_ns", "device_gaps_ms",
           "first_difference", "host_step_share", "jain", "lane_share", "measure", "percentiles", "request_gantt",
           "schedule_ms"]
