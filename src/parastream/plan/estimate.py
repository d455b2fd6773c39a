"""Critical-path estimate of a plan's wall time (until the simulator replaces it).

Ops are issued by the host in program order, one launch overhead apart; each starts when
its stream's previous op has finished, every event it waits on has been recorded, and the
host has issued it. Streams beyond the device's hardware queues add no parallelism: streams
are folded onto the queues round-robin (streams beyond the queues are ignored).
"""

from __future__ import annotations

from ..graph.ir import Graph
from .hb import layout
from .model import Estimate, Plan


def schedule(graph: Graph, plan: Plan, dur: dict[str, float], *, launch_us: float = 0.0,
             hw_queues: int | None = None, order: list[str] | None = None
             ) -> dict[str, tuple[float, float]]:
    """Start/end (us) of every op under ``plan``."""
    lay = layout(graph, plan.assignment, order)
    waits: dict[str, list[str]] = {}
    for e in plan.events:
        if e.wait_before is not None:
            waits.setdefault(e.wait_before, []).append(e.record_after)
    queue_of = {s: (i % hw_queues if hw_queues else i) for i, s in enumerate(lay.streams)}
    free: dict[int, float] = {}
    t: dict[str, tuple[float, float]] = {}
    for i, n in enumerate(lay.order):
        q = queue_of[lay.stream_of[n]]
        start = max(free.get(q, 0.0), i * launch_us,
                    max((t[p][1] for p in waits.get(n, ())), default=0.0))
        t[n] = (start, start + dur[n])
        free[q] = start + dur[n]
    return t


def wall_us(graph: Graph, plan: Plan, dur: dict[str, float], *, launch_us: float = 0.0,
            hw_queues: int | None = None, order: list[str] | None = None) -> float:
    """The estimated wall of ``plan``: when its last op ends (``order``: the graph's
    validated topological order, when the caller has it)."""
    t = schedule(graph, plan, dur, launch_us=launch_us, hw_queues=hw_queues, order=order)
    return max((e for _, e in t.values()), default=0.0)


def make_estimate(wall: float, single: float, source: str) -> Estimate:
    """An :class:`Estimate` from a plan's wall and the single-stream wall."""
    return Estimate(wall_us=round(wall, 3), single_stream_wall_us=round(single, 3),
                    speedup=round(single / wall, 4) if wall > 0 else 1.0, source=source)


def estimate(graph: Graph, plan: Plan, dur: dict[str, float], *, launch_us: float = 0.0,
             hw_queues: int | None = None, device: str = "unit costs") -> Estimate:
    """Estimated wall of ``plan`` next to the single-stream wall of the same ops."""
    single = Plan.single(plan.assignment)
    kw = {"launch_us": launch_us, "hw_queues": hw_queues}
    return make_estimate(wall_us(graph, plan, dur, **kw), wall_us(graph, single, dur, **kw),
                         f"critical-path estimate on {device}")
