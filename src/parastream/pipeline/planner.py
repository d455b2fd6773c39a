"""Suggest stage replicas and queue depth from measured stage times.

The time per item of a pipeline is set by its bottleneck: the stage with the highest
``time / replicas``. The planner adds a replica to the bottleneck while that shortens the
predicted period by at least ``min_gain`` (2%), within a worker budget. Two host limits
keep it honest on small machines: ``cores`` (stages that use a core cannot go faster in sum
than ``sum(time) / cores``) and ``gil_bound`` stages (pure-Python stages share one GIL, so
their times add up whatever their replica count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np


@dataclass
class Plan:
    """Suggested replicas per stage and queue depth, with the predicted period per item."""

    replicas: dict[str, int]
    depth: int
    bottleneck: str
    period_s: float
    steps: list[str] = field(default_factory=list)

    @property
    def throughput_per_s(self) -> float:
        return 1.0 / self.period_s if self.period_s > 0 else math.inf

    def replicas_arg(self) -> str:
        """The plan as the CLI's ``--replicas`` value."""
        return ",".join(f"{k}={v}" for k, v in self.replicas.items())

    def to_dict(self) -> dict:
        return {"replicas": dict(self.replicas), "depth": self.depth,
                "bottleneck": self.bottleneck, "period_ms": round(self.period_s * 1e3, 4),
                "throughput_per_s": round(self.throughput_per_s, 3), "steps": list(self.steps)}


def _mean_and_tail(v: float | Sequence[float]) -> tuple[float, float]:
    """Mean and p95/mean of a time or a list of measured times (seconds)."""
    a = np.asarray(v, dtype=float).ravel()
    if a.size == 0 or not np.all(np.isfinite(a)) or (a < 0).any():
        raise ValueError("stage times must be non-empty, finite and >= 0")
    mean = float(a.mean())
    tail = float(np.percentile(a, 95)) / mean if mean > 0 else 1.0
    return mean, tail


def predict_period(times: Mapping[str, float], replicas: Mapping[str, int], *,
                   cores: int | None = None, cpu_stages: Iterable[str] | None = None,
                   gil_bound: Iterable[str] = ()) -> float:
    """Predicted seconds per item: the slowest of the bottleneck stage, the core limit and
    the GIL limit."""
    period = max(times[s] / replicas[s] for s in times)
    if cores:
        cpu = list(times) if cpu_stages is None else list(cpu_stages)
        period = max(period, sum(times[s] for s in cpu) / cores)
    gil = [s for s in gil_bound if s in times]
    if gil:
        period = max(period, sum(times[s] for s in gil))
    return period


def plan(stage_times: Mapping[str, float | Sequence[float]], *, cores: int | None = None,
         cpu_stages: Iterable[str] | None = None, gil_bound: Iterable[str] = (),
         max_workers: int | None = None, min_gain: float = 0.02,
         max_replicas: int = 16) -> Plan:
    """Replicas and depth for stages with the given times (seconds, or lists of samples).

    ``cores`` bounds stages in ``cpu_stages`` (default: all) to ``sum(time) / cores`` per
    item; ``max_workers`` caps the total worker count. Depth is at least 2, at least the
    largest replica count (so every replica of a consumer can find an item queued) and at
    least the p95/mean ratio of the most jittery stage (to absorb a slow item).
    """
    if not stage_times:
        raise ValueError("no stage times")
    if cores is not None and cores < 1:  # 0 or less would read as "no core bound"
        raise ValueError(f"cores must be at least 1, got {cores}")
    if max_workers is not None and max_workers < len(stage_times):
        # every stage has a worker: a smaller budget cannot be kept, only reported as kept
        raise ValueError(f"max_workers must be at least the {len(stage_times)} stages, "
                         f"got {max_workers}")
    if max_replicas < 1:
        raise ValueError(f"max_replicas must be at least 1, got {max_replicas}")
    cpu = None if cpu_stages is None else list(cpu_stages)  # read twice below
    gil = list(gil_bound)
    unknown = sorted((set(cpu or ()) | set(gil)) - set(stage_times))
    if unknown:
        raise ValueError(f"no stage named {', '.join(map(repr, unknown))} "
                         f"(stages: {', '.join(stage_times)})")
    stats = {k: _mean_and_tail(v) for k, v in stage_times.items()}
    times = {k: m for k, (m, _) in stats.items()}
    reps = {k: 1 for k in times}
    steps: list[str] = []

    def period(r: Mapping[str, int]) -> float:
        return predict_period(times, r, cores=cores, cpu_stages=cpu, gil_bound=gil)

    while True:
        current = period(reps)
        worst = max(times[s] / reps[s] for s in times)
        # stages tied at the bottleneck grow together: one alone would gain nothing
        tied = [s for s in times if times[s] / reps[s] >= worst * (1 - 1e-9)]
        label = "+".join(tied)
        if max_workers is not None and sum(reps.values()) + len(tied) > max_workers:
            steps.append(f"stop: worker budget {max_workers} reached")
            break
        if any(reps[s] >= max_replicas for s in tied):
            steps.append(f"stop: {label} at the maximum of {max_replicas} replicas")
            break
        trial = dict(reps, **{s: reps[s] + 1 for s in tied})
        new = period(trial)
        gain = current / new - 1.0 if new > 0 else 0.0
        if gain < min_gain:
            steps.append(f"stop: another {label} replica gains {gain:.1%} (< {min_gain:.0%})")
            break
        steps.append(f"{label}: +1 replica, period {current * 1e3:.3f} -> {new * 1e3:.3f} ms "
                     f"(+{gain:.1%})")
        reps = trial
    tail = max(t for _, t in stats.values())
    depth = max(2, max(reps.values()), math.ceil(tail))
    b = max(times, key=lambda s: times[s] / reps[s])
    return Plan(reps, depth, b, period(reps), steps)
