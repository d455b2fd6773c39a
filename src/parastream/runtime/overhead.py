"""The CPU stream backend's own costs, measured for the device profile.

``parastream calibrate`` measures the CPU (matmul rate, bandwidth, op rates); what the
executor adds on top belongs in the same profile, or the simulator under-predicts every
small model:

* ``launch_overhead_us``: per op, what the executor spends besides the op itself (walking
  the graph, handing the op to its stream's worker, recording its interval);
* ``run_overhead_us``: per forward call, the fixed part (binding inputs, starting the
  workers' batch, rejoining the streams, collecting outputs);
* ``event_wake_us``: per cross-stream wait that blocks, the time from the event's record to
  the waiting worker running again (it sleeps on a condition; the wake-up is an OS thread
  switch);
* ``stream_overhead_us``: per forward call, what each stream beyond the first adds.

Both come from running chains of ``x + 1`` on 16 floats through the executor on one stream,
at two lengths: the slope is the per-op cost (less the add's own cost from the op rates: on
16 floats it runs on the worker's own thread, at the one-thread line), the intercept the per-call cost. The same chains alternating between
two streams (every op waits for the one before it, on the other stream) give the wake-up
per wait as the extra slope; the chains with only their first op on a second stream give
the second stream's cost per call. Medians of repeated calls, the lowest of a few rounds.
"""

from __future__ import annotations

import statistics
from typing import Any

SHORT, LONG = 4, 64


class _Chain:
    """A chain of ``n`` adds, built lazily so importing this module needs no torch."""

    @staticmethod
    def make(n: int) -> Any:
        import torch

        class Chain(torch.nn.Module):
            def forward(self, x):
                for _ in range(n):
                    x = x + 1
                return x

        return Chain().eval()


def measure_executor_overhead(quick: bool = False, rounds: int = 3,
                              add_rate: Any = None) -> dict[str, float]:
    """``{"per_op_us", "per_run_us", "chain_op_us", "event_wake_us", "stream_us"}`` of the
    cpu backend; the chain add's own cost at ``add_rate`` (an :class:`OpRate`, on one
    thread: far under torch's intra-op grain) is taken out of the per-op figure."""
    import torch

    from ..graph.torch_import import import_runnable
    from ..plan.assign import plan_from_assignment
    from ..plan.model import Plan
    from .executor import MultiStreamExecutor, _cores
    from .measure import median_wall_us

    x = torch.randn(16)
    cores = _cores()
    add_us = add_rate.duration_us(3.0 * x.nbytes, 1, cores) if add_rate is not None else 0.0
    walls: dict[tuple[str, int], float] = {}
    calls = 15 if quick else 40
    with torch.no_grad():
        for n in (SHORT, LONG):
            module = _Chain.make(n)
            rn = import_runnable(module, (x,), name=f"chain{n}")
            names = [o.name for o in rn.graph.ops]
            plans = {"single": (Plan.single(names), cores)}
            for label, assignment in (
                    ("ping-pong", {o: i % 2 for i, o in enumerate(names)}),
                    ("second stream", {o: int(i == 0) for i, o in enumerate(names)})):
                plans[label] = (plan_from_assignment(rn.graph, assignment, name=label), None)
            for label, (plan, threads) in plans.items():
                ex = MultiStreamExecutor(module, (x,), plan, intra_op_threads=threads, runnable=rn)
                try:
                    walls[label, n] = min(median_wall_us(lambda: ex(x), calls)
                                          for _ in range(rounds))
                finally:
                    ex.close()

    def line(label: str) -> tuple[float, float]:
        slope = max(0.0, (walls[label, LONG] - walls[label, SHORT]) / (LONG - SHORT))
        return slope, max(0.0, walls[label, SHORT] - SHORT * slope)

    slope, per_run = line("single")
    wake = max(0.0, line("ping-pong")[0] - slope)
    # the second stream's chains wait once (their second op), so one wake-up is not its cost
    second = statistics.median(walls["second stream", n] - walls["single", n] for n in (SHORT, LONG))
    # a difference of two noisy walls: on a busy 2-core VM single quick rounds gave 0 to
    # 384 us; a second stream's setup is part of a call's fixed cost, so it is capped there
    stream_us = min(max(0.0, second - wake), 2.0 * per_run)
    return {"per_op_us": max(0.0, slope - add_us), "per_run_us": per_run,
            "chain_op_us": slope, "event_wake_us": wake, "stream_us": stream_us}


def calibrate_cpu(quick: bool = False, name: str = "cpu-calibrated") -> dict:
    """:func:`parastream.graph.calibrate.calibrate` plus the executor's own costs: the
    profile ``parastream run`` and ``parastream demo`` predict with (without torch, just
    the former: there is no executor to measure)."""
    import importlib.util

    import msgspec

    from ..device.profile import OpRate
    from ..graph.calibrate import calibrate

    profile = calibrate(quick=quick, name=name)
    if importlib.util.find_spec("torch") is None:
        return profile
    add = profile.get("op_rates", {}).get("add")
    ov = measure_executor_overhead(quick, rounds=2 if quick else 3,
                                   add_rate=msgspec.convert(add, OpRate) if add else None)
    handoff = profile["launch_overhead_us"]
    profile["launch_overhead_us"] = float(f"{ov['per_op_us']:.4g}")
    profile["run_overhead_us"] = float(f"{ov['per_run_us']:.4g}")
    by = profile["sources"]["launch_overhead_us"].split(":")[0]
    profile["sources"]["launch_overhead_us"] = (
        f"{by}: the cpu backend's executor on one stream, chains of {SHORT} and {LONG} "
        f"'x + 1' ops on 16 floats, median call wall; the slope per op ({ov['chain_op_us']:.3g} "
        f"us) less the add's own cost; a bare hand-off round trip to a worker thread "
        f"measured {handoff:.3g} us")
    profile["sources"]["run_overhead_us"] = (
        f"{by}: the intercept of the same two chains: the executor's fixed cost per call")
    profile["event_wake_us"] = float(f"{ov['event_wake_us']:.4g}")
    profile["stream_overhead_us"] = float(f"{ov['stream_us']:.4g}")
    profile["sources"]["event_wake_us"] = (
        f"{by}: the same chains alternating between two streams (each op waits for the one "
        "before it): their slope per op less the one-stream slope")
    profile["sources"]["stream_overhead_us"] = (
        f"{by}: the same chains with their first op on a second stream, less the one-stream "
        "chains and one wake-up (median of the two lengths)")
    profile["description"] = profile["description"].rsplit(",", 1)[0] + (
        f", executor {profile['launch_overhead_us']:.3g} us per op and "
        f"{profile['run_overhead_us']:.3g} us per call.")
    return profile
