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
* ``stream_overhead_us``: per forward call, what each stream beyond the first adds;
* ``view_us``: per folded view an op computes (a ``view``, ``transpose``, ``slice`` that is
  no op of the plan: the executor runs it inside the interval of the first op reading it).

The per-op and per-call costs come from chains of varied tiny ops run through the executor
on one stream (:func:`varied_chain`: folded views, ``cat``, ``linear``, ``silu``,
``layer_norm``, ``softmax``, adds, as in a model's layers), at two lengths: the slope per op
less the ops' own costs at the profile's op rates is the per-op cost (at least the slope
less the same chains' in eager mode, timed alternating with them), the intercept the
per-call cost. (Chains of ``x + 1`` alone would understate it: one op type over and
over is the cheapest case there is.) Chains
of ``x + 1`` on 16 floats alternating between two streams (every op waits for the one
before it, on the other stream) give the wake-up per wait as their extra slope over the
same chains on one stream; the chains with only their first op on a second stream give
the second stream's cost per call. Medians of repeated calls; each figure taken within a
round (:func:`per_round`), the median over the rounds.
"""

from __future__ import annotations

import statistics
from functools import partial
from typing import Any, Callable

from ..calibrate.chains import VARIED_LONG, VARIED_SHORT, chain_module, per_round, varied_chain

SHORT, LONG = 4, 64


def _add_step(m: Any, x: Any) -> Any:
    """``x + 1``: one op type over and over, the cheapest case there is."""
    return x + 1


#: folded views each op of :func:`_view_step` reads its input through
VIEWS = 3


def _view_step(m: Any, x: Any) -> Any:
    """An add on its input read through :data:`VIEWS` folded views (``unsqueeze``,
    ``transpose``, ``squeeze``): against :func:`_add_step`, the executor's cost per view."""
    return x.unsqueeze(0).transpose(0, 1).squeeze(1) + 1


#: times the varied chains are measured at most, until the executor's slope is over eager's
VARIED_TRIES = 3


def per_op_cost(chain_op_us: float, own_op_us: float, eager_op_us: float) -> float:
    """The executor's cost per op from a chain's slope through the executor
    (``chain_op_us``), the ops' own costs at the profile's rates (``own_op_us``) and the
    same chain's slope in eager mode (``eager_op_us``): the slope less the ops' own costs,
    but never less than the executor's slope over eager mode's. The op rates are timed
    apart from the chain, and on a busy machine they can come out above the chain's whole
    slope, while the executor's extra over eager, timed in the same rounds, is what it
    spends at least."""
    return max(0.0, chain_op_us - own_op_us, chain_op_us - eager_op_us)


def measure_executor_overhead(quick: bool = False, rounds: int = 3,
                              profile: Any = None) -> dict[str, float]:
    """``{"per_op_us", "per_run_us", "chain_op_us", "eager_op_us", "view_us",
    "event_wake_us", "stream_us", "op_inside_us"}`` of the cpu backend. The varied chain's ops' own
    costs at ``profile``'s op rates (a :class:`~parastream.device.profile.DeviceProfile`;
    none: nothing is taken out) and its folded views at the measured ``view_us`` are taken
    out of the per-op figure (never below :func:`per_op_cost`'s floor); ``chain_op_us`` is
    its slope with them in, ``eager_op_us`` the same chains' slope in eager mode. Each
    figure is the median over ``2 * rounds + 1`` rounds of :func:`per_round`."""
    import torch

    bench = _OverheadBench(calls=15 if quick else 40, n_rounds=2 * rounds + 1)
    try:
        with torch.no_grad():
            view, wake, second = bench.add_chains()
            chain_op, eager_op, w1, inside_op = bench.varied_chains(profile, view)
    finally:
        bench.close()
    chain_op, eager_op = max(0.0, chain_op), max(0.0, eager_op)
    own_op = (bench.own[VARIED_LONG] - bench.own[VARIED_SHORT]) / bench.per_op_of
    per_op = per_op_cost(chain_op, own_op, eager_op)
    per_run = max(0.0, w1 - bench.ops[VARIED_SHORT] * chain_op)
    # a difference of two noisy walls: on a busy machine single quick rounds scatter
    # widely; a second stream's setup is part of a call's fixed cost, so it is capped there
    stream_us = min(max(0.0, second - wake), 2.0 * per_run)
    # the part of the per-op cost inside an op's recorded interval (reading its inputs,
    # storing its value, freeing): the slope per op less its part outside the intervals
    outside_op = max(0.0, chain_op - max(0.0, inside_op))
    op_inside = min(per_op, max(0.0, per_op - outside_op))
    return {"per_op_us": per_op, "per_run_us": per_run, "chain_op_us": chain_op,
            "eager_op_us": eager_op, "view_us": view, "event_wake_us": wake,
            "stream_us": stream_us, "op_inside_us": op_inside}


def _median(rows: list[dict], f: Callable[[dict], float]) -> float:
    return statistics.median(f(r) for r in rows)


def _slope(r: dict, label: Any, short: int = SHORT, long: int = LONG,
           per: float = LONG - SHORT) -> float:
    """The per-op slope of ``label``'s walls between its two chain lengths in round ``r``."""
    return (r[label, long] - r[label, short]) / per


def _single(rn: Any) -> Any:
    from ..plan.model import Plan

    return Plan.single(o.name for o in rn.graph.ops)


class _OverheadBench:
    """The executors and timers of one :func:`measure_executor_overhead` (closed at the
    end): ``calls`` calls a median wall, ``n_rounds`` rounds a figure."""

    def __init__(self, calls: int, n_rounds: int) -> None:
        from ..runtime.executor import _cores

        self.calls, self.n_rounds = calls, n_rounds
        self.cores = _cores()
        self.executors: list[Any] = []
        self.ops: dict[int, int] = {}
        self.own: dict[int, float] = {}
        self.per_op_of = 0

    def executor(self, module: Any, rn: Any, plan: Any, threads: int | None, arg: Any) -> Any:
        """An executor for ``plan`` (closed when the measurement ends)."""
        from ..runtime.executor import MultiStreamExecutor

        ex = MultiStreamExecutor(module, (arg,), plan, intra_op_threads=threads, runnable=rn)
        self.executors.append(ex)
        return ex

    def wall(self, fn: Callable[[Any], Any], arg: Any) -> Callable[[], float]:
        """The median call wall of ``fn(arg)``."""
        from ..runtime.measure import median_wall_us

        return lambda: median_wall_us(lambda: fn(arg), self.calls)

    @staticmethod
    def inside(ex: Any, arg: Any, times: int = 5) -> Callable[[], float]:
        """The median over ``times`` calls of the ops' recorded intervals, summed."""
        def timed() -> float:
            sums = []
            for _ in range(times):
                ex(arg)
                tl = ex.timeline()
                sums.append(float((tl.end_ns - tl.start_ns).sum()) / 1e3)
            return statistics.median(sums)
        return timed

    def close(self) -> None:
        for ex in self.executors:
            ex.close()

    def add_chains(self) -> tuple[float, float, float]:
        """(us per folded view, us per blocking wait's wake-up, us a second stream adds
        per call) from chains of ``x + 1`` at two lengths."""
        import torch

        from ..graph.torch_import import import_runnable
        from ..plan.assign import plan_from_assignment

        x = torch.randn(16)
        timers: dict[tuple[str, int], Callable[[], float]] = {}
        for n in (SHORT, LONG):
            module = chain_module(n, _view_step)
            rn = import_runnable(module, (x,), name=f"views{n}")
            timers["views", n] = self.wall(self.executor(module, rn, _single(rn), self.cores, x), x)
            module = chain_module(n, _add_step)
            rn = import_runnable(module, (x,), name=f"chain{n}")
            names = [o.name for o in rn.graph.ops]
            timers["single", n] = self.wall(self.executor(module, rn, _single(rn), self.cores, x), x)
            for label, assignment in (
                    ("ping-pong", {o: i % 2 for i, o in enumerate(names)}),
                    ("second stream", {o: int(i == 0) for i, o in enumerate(names)})):
                plan = plan_from_assignment(rn.graph, assignment, name=label)
                timers[label, n] = self.wall(self.executor(module, rn, plan, None, x), x)
        adds = per_round(timers, self.n_rounds)
        view = max(0.0, _median(adds, lambda r: (_slope(r, "views") - _slope(r, "single"))
                                / VIEWS))
        wake = max(0.0, _median(adds, lambda r: _slope(r, "ping-pong") - _slope(r, "single")))
        # the second stream's chains wait once (their second op), so one wake-up is
        # not its cost
        second = _median(adds, lambda r: statistics.fmean(r["second stream", n] - r["single", n]
                                                          for n in (SHORT, LONG)))
        return view, wake, second

    def varied_chains(self, profile: Any, view: float) -> tuple[float, float, float, float]:
        """(slope per op through the executor, in eager mode, the short chain's wall, the
        slope per op of the ops' recorded intervals) of the varied chains; their ops' own
        costs at ``profile``'s rates go to ``own``."""
        import msgspec
        import torch

        from ..device.cost import estimate
        from ..graph.torch_import import import_runnable

        xv = torch.randn(1, 16)
        varied: dict[tuple[str, int], Callable[[], float]] = {}
        # the varied chain's ops' own costs and its views' without the executor's
        # per-op cost (the figure being measured)
        bare = msgspec.structs.replace(profile, launch_overhead_us=0.0, view_us=view) \
            if profile is not None else None
        for n in (VARIED_SHORT, VARIED_LONG):
            module = varied_chain(n)
            rn = import_runnable(module, (xv,), name=f"varied{n}")
            self.own[n] = sum(estimate(o, bare).dur_us for o in rn.graph.ops) if bare else 0.0
            self.ops[n] = len(rn.graph.ops)
            ex = self.executor(module, rn, _single(rn), self.cores, xv)
            varied["executor", n], varied["inside", n] = self.wall(ex, xv), self.inside(ex, xv)
            varied["eager", n] = self.wall(module, xv)
        self.per_op_of = self.ops[VARIED_LONG] - self.ops[VARIED_SHORT]
        return self._best_try(varied)

    def _best_try(self, varied: dict) -> tuple[float, float, float, float]:
        """The executor spends something on every op, so a slope at or under eager
        mode's (or an eager slope at or under 0) is a noisy measurement: measured again,
        up to VARIED_TRIES times, keeping the try with the executor's largest extra over
        eager."""
        best = None
        for _ in range(max(1, VARIED_TRIES)):
            rows = per_round(varied, self.n_rounds)
            chain_op, eager_op, inside_op = (
                _median(rows, partial(_slope, label=k, short=VARIED_SHORT, long=VARIED_LONG,
                                      per=self.per_op_of))
                for k in ("executor", "eager", "inside"))
            w1 = _median(rows, lambda r: r["executor", VARIED_SHORT])
            if best is None or chain_op - eager_op > best[0] - best[1]:
                best = (chain_op, eager_op, w1, inside_op)
            if chain_op > eager_op > 0:
                break
        return best


def calibrated_profile(quick: bool = True, name: str = "cpu-calibrated",
                       warn: Callable[[str], None] | None = None, repeat: int = 1) -> Any:
    """:func:`calibrate_cpu`'s profile as a checked
    :class:`~parastream.device.profile.DeviceProfile`, ready for the simulator."""
    import msgspec

    from ..device.profile import loads_profile

    return loads_profile(msgspec.json.encode(calibrate_cpu(quick, name, warn, repeat)))


def calibrate_cpu(quick: bool = False, name: str = "cpu-calibrated",
                  warn: Callable[[str], None] | None = None, repeat: int = 1) -> dict:
    """:func:`parastream.cpu.calibrate.calibrate` plus the executor's own costs: the
    profile ``parastream run`` and ``parastream demo`` predict with (without torch, just
    the former: there is no executor to measure). ``warn`` is told, in one line each,
    when other tasks run on the cores as it starts
    (:func:`~parastream.cpu.busy.busy_note`) and when they took the cores during
    it (:class:`~parastream.cpu.busy.BusyWatch`): the figures are then noisy. What
    it was told is kept in the profile too (``sources["warning"]``), which ``graph``,
    ``plan``, ``simulate`` and ``run --profile`` repeat whenever they use it.
    ``repeat`` > 1 calibrates that many times, one after another, and keeps the median of
    each figure (:func:`~parastream.calibrate.profile.median_profile`)."""
    from ..calibrate.profile import median_profile

    notes: list[str] = []

    def told(note: str) -> None:
        notes.append(note)
        warn(note)

    profile = median_profile([_watched_calibration(quick, name, told if warn else None)
                              for _ in range(max(1, repeat))])
    if notes:
        profile["sources"]["warning"] = "calibrated on a busy machine: " + "; ".join(notes)
    return profile


def _watched_calibration(quick: bool, name: str,
                         warn: Callable[[str], None] | None) -> dict:
    if warn is None:
        return _calibrate_cpu(quick, name)
    from .busy import BusyWatch, busy_note, cpu_count

    cores = cpu_count()
    before = busy_note(cores)
    if before:
        warn(before)
    with BusyWatch(cores) as watch:
        profile = _calibrate_cpu(quick, name)
    during = watch.note()
    if during:
        warn(during)
    return profile


def _calibrate_cpu(quick: bool, name: str) -> dict:
    import importlib.util

    import msgspec

    from ..device.profile import loads_profile
    from .calibrate import calibrate
    from ..calibrate.profile import sig

    profile = calibrate(quick=quick, name=name)
    if importlib.util.find_spec("torch") is None:
        return profile
    ov = measure_executor_overhead(quick, rounds=2 if quick else 3,
                                   profile=loads_profile(msgspec.json.encode(profile)))
    handoff = profile["launch_overhead_us"]
    for key, figure in (("launch_overhead_us", "per_op_us"), ("run_overhead_us", "per_run_us"),
                        ("op_inside_us", "op_inside_us"), ("view_us", "view_us"),
                        ("event_wake_us", "event_wake_us"), ("stream_overhead_us", "stream_us")):
        profile[key] = sig(ov[figure])
    by = profile["sources"]["launch_overhead_us"].split(":")[0]
    profile["sources"]["launch_overhead_us"] = (
        f"{by}: the cpu backend's executor on one stream, chains of {VARIED_SHORT} and "
        f"{VARIED_LONG} rounds of nine varied tiny ops (folded views, cat, linear, silu, "
        f"layer_norm, softmax, adds), median call wall; the slope per op "
        f"({ov['chain_op_us']:.3g} us) less the ops' own costs at the op rates and their "
        f"views' at view_us, but at least its excess over the same chains' slope in eager "
        f"mode ({ov['eager_op_us']:.3g} us per op, timed alternating with them); a bare "
        f"hand-off round trip to a worker thread measured {handoff:.3g} us")
    profile["sources"]["run_overhead_us"] = (
        f"{by}: the intercept of the same two chains: the executor's fixed cost per call")
    profile["sources"]["op_inside_us"] = (
        f"{by}: the per-op cost less the same chains' slope per op outside the ops' "
        "recorded intervals (call wall less the intervals' sum)")
    profile["sources"]["view_us"] = (
        f"{by}: chains of {SHORT} and {LONG} 'x + 1' ops each reading its input through "
        f"{VIEWS} folded views, their slope per op less the plain chains', per view")
    profile["sources"]["event_wake_us"] = (
        f"{by}: chains of {SHORT} and {LONG} 'x + 1' ops on 16 floats alternating between two "
        "streams (each op waits for the one before it): their slope per op less the same "
        "chains' on one stream")
    profile["sources"]["stream_overhead_us"] = (
        f"{by}: the same chains with their first op on a second stream, less the one-stream "
        "chains and one wake-up (median of the two lengths)")
    profile["description"] = profile["description"].rsplit(",", 1)[0] + (
        f", executor {profile['launch_overhead_us']:.3g} us per op and "
        f"{profile['run_overhead_us']:.3g} us per call.")
    return profile
