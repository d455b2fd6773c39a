"""Where a pipeline's time went: per stage busy time, queue wait, utilization; per item
latency; throughput and the efficiency E against the bottleneck stage.

E = measured throughput x max over stages of (mean stage time / replicas). The second
factor is the time per item of the slowest stage at its replica count — the best any
pipeline of these stages can do — so E = 1 means the pipeline runs at its bottleneck's
limit and everything else (hand-offs, queues, GIL, too few cores) cost nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .policy import ErrorLog


@dataclass
class StageStats:
    """One stage over one run (times in integer ns)."""

    name: str
    kind: str
    replicas: int
    items: int = 0
    busy_ns: int = 0
    #: summed time items sat in this stage's input queue
    queue_wait_ns: int = 0
    #: summed time workers were blocked handing results to a full next queue
    blocked_ns: int = 0
    wall_ns: int = 0

    @property
    def mean_ns(self) -> float:
        """Mean busy time per item (one replica)."""
        return self.busy_ns / self.items if self.items else 0.0

    @property
    def limit_ns(self) -> float:
        """Time per item this stage needs with its replicas: mean / replicas."""
        return self.mean_ns / self.replicas

    @property
    def utilization(self) -> float:
        """Busy fraction of the stage's workers over the run's wall time."""
        return self.busy_ns / (self.wall_ns * self.replicas) if self.wall_ns else 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "replicas": self.replicas,
                "items": self.items, "busy_ms": round(self.busy_ns / 1e6, 3),
                "mean_ms": round(self.mean_ns / 1e6, 4),
                "limit_ms": round(self.limit_ns / 1e6, 4),
                "queue_wait_ms": round(self.queue_wait_ns / 1e6, 3),
                "mean_queue_wait_ms": round(self.queue_wait_ns / self.items / 1e6, 4)
                if self.items else 0.0,
                "blocked_ms": round(self.blocked_ns / 1e6, 3),
                "utilization": round(self.utilization, 4)}


def efficiency(throughput_per_s: float, stage_limits_ns: Sequence[float]) -> float:
    """E = throughput x max(stage time / replicas); 0 when nothing ran."""
    if not stage_limits_ns or throughput_per_s <= 0:
        return 0.0
    return throughput_per_s * max(stage_limits_ns) / 1e9


@dataclass
class Admission:
    """How the source fed a run: queues of ``depth`` items, at most ``capacity`` items in
    flight; ``blocks`` times the source found the pipeline full and waited ``blocked_ns`` in
    all; the most items in flight at once."""

    depth: int
    capacity: int
    blocks: int
    blocked_ns: int
    max_in_flight: int

    @classmethod
    def serial(cls) -> "Admission":
        """One item at a time, straight from the source: nothing queued, never blocked."""
        return cls(depth=0, capacity=1, blocks=0, blocked_ns=0, max_in_flight=1)


@dataclass
class PipelineStats:
    """A whole run: stage stats, outcome counts, wall time, latencies, admission and the
    items its error policy retried or dropped (``errors``)."""

    mode: str  # "pipelined" | "serial"
    stages: list[StageStats]
    wall_ns: int
    counts: dict[str, int]
    submitted: int
    latencies_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ordered: bool = True
    admission: Admission = field(default_factory=Admission.serial)
    errors: ErrorLog = field(default_factory=ErrorLog)

    @property
    def completed(self) -> int:
        return self.counts.get("completed", 0)

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0)

    def check_accounting(self) -> None:
        """Every submitted item ended exactly once: submitted = completed + failed +
        cancelled, and every item the policy dropped is one of the failed (an
        :class:`AssertionError` otherwise: an item lost or counted twice)."""
        if sum(self.counts.values()) != self.submitted:
            raise AssertionError(f"items lost or counted twice: {self.submitted} submitted, "
                                 f"outcomes {self.counts}")
        if len(self.errors.skipped) > self.failed:
            raise AssertionError(f"{len(self.errors.skipped)} items skipped but only "
                                 f"{self.failed} failed")

    @property
    def throughput(self) -> float:
        """Completed items per second of wall time."""
        return self.completed / (self.wall_ns / 1e9) if self.wall_ns else 0.0

    @property
    def bottleneck(self) -> StageStats | None:
        """The stage with the highest mean time / replicas."""
        return max(self.stages, key=lambda s: s.limit_ns) if self.stages else None

    @property
    def efficiency(self) -> float:
        return efficiency(self.throughput, [s.limit_ns for s in self.stages])

    def latency_ms(self, q: float) -> float:
        """Latency percentile ``q`` (0-100) in ms; 0 with no items."""
        if not self.latencies_ns.size:
            return 0.0
        return float(np.percentile(self.latencies_ns, q)) / 1e6

    def to_dict(self) -> dict:
        b = self.bottleneck
        adm = self.admission
        return {"mode": self.mode, "ordered": self.ordered, "depth": adm.depth,
                "capacity": adm.capacity, "submitted": self.submitted, "counts": dict(self.counts),
                "wall_ms": round(self.wall_ns / 1e6, 3),
                "throughput_per_s": round(self.throughput, 3),
                "efficiency": round(self.efficiency, 4),
                "bottleneck": b.name if b else None,
                "bottleneck_utilization": round(b.utilization, 4) if b else None,
                "latency_ms": {"p50": round(self.latency_ms(50), 4),
                               "p95": round(self.latency_ms(95), 4),
                               "max": round(self.latency_ms(100), 4)},
                "source_blocks": adm.blocks,
                "source_blocked_ms": round(adm.blocked_ns / 1e6, 3),
                "max_in_flight": adm.max_in_flight,
                "stages": [s.to_dict() for s in self.stages],
                **self.errors.to_dict()}
