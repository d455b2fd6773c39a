"""A multi-stream plan: op -> stream, the events that order them, limits, provenance.

Stream 0 is the origin (main) stream. Every stream runs its ops in the graph's program order
(the order of ``Graph.ops``, which is topological), as the host issues them. An event is
``record_after`` an op on its stream and waited on ``wait_before`` an op of another stream
(``None`` = at the end of stream 0: the final join every side stream needs before capture
ends).

JSON (``parastream.plan/1``, documented in docs/plan-format.md) holds one or more candidate
plans; see :mod:`parastream.plan.io`.
"""

from __future__ import annotations

import msgspec

SCHEMA = "parastream.plan/1"
#: a multi-stream plan must beat single stream by this share to be recommended (predicted
#: by the planner and the simulator, measured by `parastream run` and the demo)
SPEEDUP_MARGIN = 0.05


class Event(msgspec.Struct):
    """Record after ``record_after`` (on its stream); wait before ``wait_before`` (on
    another stream), or at the end of the origin stream when ``wait_before`` is None."""

    record_after: str
    wait_before: str | None = None


class Estimate(msgspec.Struct):
    wall_us: float
    single_stream_wall_us: float
    speedup: float
    source: str  # "critical-path estimate on <device>" / "simulated on <device>"


class Lint(msgspec.Struct):
    rule: str
    severity: str  # "error" | "warning" | "info"
    ops: list[str]
    message: str
    fix: str = ""


class Plan(msgspec.Struct):
    """One candidate orchestration."""

    name: str
    algorithm: str
    assignment: dict[str, int]
    events: list[Event] = []
    streams: int = 1
    parallel_point: str | None = None
    core_limits: dict[str, dict] = {}
    strength: str = "C1"
    switch: str = "PARASTREAM_MULTI_STREAM"
    description: str = ""
    mermaid: str = ""
    estimate: Estimate | None = None
    lints: list[Lint] = []
    meta: dict = {}

    @classmethod
    def single(cls, ops) -> "Plan":
        """The baseline: every op (names) on stream 0."""
        return cls(name="single", algorithm="single", assignment={n: 0 for n in ops})

    def stream_count(self) -> int:
        return len(set(self.assignment.values())) if self.assignment else 0


class PlanError(ValueError):
    """A plan that is not safe to run: names the ops involved."""
