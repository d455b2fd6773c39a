"""The prediction sweep: every decode mode simulated over concurrencies and arrival
rates on one device profile (:func:`predict_sweep`), and which mode wins where.

The same requests (lengths and prompts) serve every point; a finite rate re-times their
arrivals (Poisson, seeded). Without rates given, the sweep runs all-at-once (``inf``)
first, then two finite rates at a quarter and three quarters of the most requests per
second any mode reached at the highest concurrency: a light and a heavy load for that
device. A workload file keeps its own arrivals (rate ``file``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .config import CHUNKED, MODES, blocks_for
from .predict import Gate, HostCost, calibrate_two_micro, figures, serve
from .predict_cost import StepCosts
from .scheduler import SchedulerSettings
from .workload import Request

DEFAULT_CONCURRENCY = (1, 4, 16, 64, 256)
#: the finite rates derived from the highest concurrency's capacity (fractions of it)
LOADS = (0.25, 0.75)


@dataclass(frozen=True)
class SweepSettings:
    """What to sweep: ``concurrency`` values, ``rates`` (requests per second, ``inf`` =
    all at once; None = ``inf`` and two derived, see the module docstring; ignored for a
    workload file's own arrivals), ``modes``, the ``launch`` mode (``eager`` or
    ``graph``), the :class:`HostCost`, ``max_skip``, the KV budget ``kv_blocks`` (None:
    room for each concurrency's requests at the model's full context), ``seed`` (of
    the re-timed arrivals) and ``prefill_chunk`` (the batch modes' chunked prefill: the
    most prefill positions of one step; None: each prefill whole, on its own)."""

    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    rates: tuple[float, ...] | None = None
    modes: tuple[str, ...] = MODES
    launch: str = "eager"
    host: HostCost = field(default_factory=HostCost)
    max_skip: int = 4
    kv_blocks: int | None = None
    seed: int = 0
    prefill_chunk: int | None = None


@dataclass
class Sweep:
    """The sweep's rows (one per concurrency and rate: each mode's figures and the
    winner by tokens/s), the rates run and the two-micro-batch gate."""

    rows: list[dict]
    rates: list[Any]
    gate: Gate


def at_rate(requests: list[Request], rate: float, seed: int) -> list[Request]:
    """``requests`` re-timed: Poisson arrivals at ``rate`` per second from 0 (all at 0
    for ``inf``), drawn from ``seed``."""
    if math.isinf(rate):
        return [replace(r, arrival_s=0.0) for r in requests]
    rng = np.random.default_rng([seed, 1])
    gaps = rng.exponential(1.0 / rate, max(0, len(requests) - 1))
    arrivals = np.concatenate(([0.0], np.cumsum(gaps)))
    return [replace(r, arrival_s=float(a)) for r, a in zip(requests, arrivals)]


def winner(modes: dict[str, dict]) -> str:
    """The mode of the most tokens/s (the first in :data:`MODES` order among equals)."""
    return max(modes, key=lambda m: (modes[m]["tokens_per_s"], -MODES.index(m)))


#: the modes that serve one request at a time at concurrency 1 exactly as ``sequential``
#: does (one stream; a batch of one, its prefills whole): the same schedule and forwards
ONE_AT_A_TIME = ("sequential", "streams", "batch")


class _Point:
    """Runs sweep points on one device model. The sequential run is kept per rate (it
    serves one request at a time whatever the concurrency), and at concurrency 1 it
    stands for every mode of :data:`ONE_AT_A_TIME`."""

    def __init__(self, cfg: Any, costs: StepCosts, settings: SweepSettings,
                 gate: Gate) -> None:
        self.cfg, self.costs, self.settings, self.gate = cfg, costs, settings, gate
        self._sequential: dict[Any, dict] = {}

    def row(self, concurrency: int, rate: Any, requests: list[Request]) -> dict:
        s = self.settings
        blocks = s.kv_blocks or concurrency * blocks_for(self.cfg.context)
        sched = SchedulerSettings(max_running=concurrency, kv_blocks=blocks,
                                  max_skip=s.max_skip, context=self.cfg.context,
                                  prefill_chunk=s.prefill_chunk)
        modes = {}
        for m in s.modes:
            if m == "sequential" or (concurrency == 1 and self.one_at_a_time(m)):
                modes[m] = self.sequential(rate, requests, sched)
            else:
                modes[m] = figures(serve(m, requests, sched, self.costs, s.host, self.gate))
        return {"concurrency": concurrency, "rate": rate, "modes": modes,
                "winner": winner(modes)}

    def one_at_a_time(self, mode: str) -> bool:
        """Whether ``mode`` at concurrency 1 is ``sequential``: one of
        :data:`ONE_AT_A_TIME`, and not a batch mode that chunks its prefills."""
        return mode in ONE_AT_A_TIME and not (mode in CHUNKED and self.settings.prefill_chunk)

    def sequential(self, rate: Any, requests: list[Request],
                   sched: SchedulerSettings) -> dict:
        """The sequential figures at ``rate`` (run once)."""
        if rate not in self._sequential:
            self._sequential[rate] = figures(serve("sequential", requests, sched, self.costs,
                                                   self.settings.host, self.gate))
        return self._sequential[rate]


def predict_sweep(cfg: Any, profile: Any, requests: list[Request], settings: SweepSettings,
                  *, own_arrivals: bool = False) -> Sweep:
    """Each mode of ``settings`` at each concurrency and rate, on ``profile``'s device
    model at the shapes of ``cfg``; ``own_arrivals``: keep the requests' arrivals (one
    rate, ``file``)."""
    costs = StepCosts(cfg, profile, settings.launch)
    gate = _gate(costs, requests, max(settings.concurrency))
    point = _Point(cfg, costs, settings, gate)
    if own_arrivals:
        rows = [point.row(c, "file", requests) for c in settings.concurrency]
        return Sweep(rows, ["file"], gate)
    rates: list[Any] = list(settings.rates) if settings.rates else [math.inf]
    rows = []
    for rate in rates:
        reqs = at_rate(requests, rate, settings.seed)
        rows += [point.row(c, rate_label(rate), reqs) for c in settings.concurrency]
    if not settings.rates:
        top = [r for r in rows if r["concurrency"] == max(settings.concurrency)][0]
        capacity = max(m["requests_per_s"] for m in top["modes"].values())
        for load in LOADS:
            rate = _significant(capacity * load)
            if rate <= 0:
                continue
            rates.append(rate)
            reqs = at_rate(requests, rate, settings.seed)
            rows += [point.row(c, rate, reqs) for c in settings.concurrency]
    return Sweep(rows, [rate_label(r) for r in rates], gate)


def _gate(costs: StepCosts, requests: list[Request], max_batch: int) -> Gate:
    """The two-micro-batch gate calibrated at the requests' mean prompt and mean
    context (prompt and half the output)."""
    prompt = max(1, round(float(np.mean([len(r.prompt) for r in requests]))))
    context = max(1, round(float(np.mean([len(r.prompt) + r.output_tokens / 2
                                          for r in requests]))))
    return calibrate_two_micro(costs, prompt, context, max_batch)


def rate_label(rate: float) -> float | str:
    """An arrival rate as the documents write it: "inf" for all at once, else the rate."""
    return "inf" if math.isinf(rate) else rate


def _significant(x: float, digits: int = 2) -> float:
    """``x`` to ``digits`` significant digits."""
    if x <= 0 or not math.isfinite(x):
        return 0.0
    return round(x, digits - 1 - math.floor(math.log10(x)))


__all__ = ["DEFAULT_CONCURRENCY", "LOADS", "Sweep", "SweepSettings", "at_rate",
           "predict_sweep", "winner"]
