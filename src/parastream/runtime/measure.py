"""Single-stream vs multi-stream, measured side by side in one process.

Discipline (the profiling rule: at least 5 runs, the first dropped as cold): warm-up calls first, then ``runs`` (>= 5) timed calls of each
variant, alternating (single, single-stream executor, multi, single, ...), the first
``drop`` timed runs dropped, the median reported. The baseline is the best single-stream
setting: the plain module with torch's intra-op threads = all cores. The multi-stream
executor runs with ``cores // streams`` threads per stream (set once per worker). A
single-stream executor run (all ops on stream 0, all cores) gives the single-stream
*timeline* the triage compares against, and shows the executor's own hand-off cost.

Timelines: on the cpu backend each executor run records its own (integer ns, per-stream
op intervals, waits); the run with the median wall is the representative one.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..plan.model import Plan
from ..timeline.model import Timeline

__all__ = ["LATE_START_FRACTION", "LATE_START_US", "Measurement", "analyse", "late_starts",
           "measure", "paired_quartiles", "start_lags_us"]


@dataclass
class Measurement:
    """Walls in microseconds of the kept (warm) runs and the representative timelines."""

    plan: str
    single_walls_us: list[float]
    multi_walls_us: list[float]
    single_executor_walls_us: list[float]
    dropped: int
    single_threads: int
    multi_threads: int
    streams: int
    multi_timeline: Timeline | None = None
    single_timeline: Timeline | None = None
    multi_timelines: list[Timeline] = field(default_factory=list)
    single_timelines: list[Timeline] = field(default_factory=list)
    #: page faults each kept timed call took (process-wide), where the OS counts them
    single_faults: list[int] = field(default_factory=list)
    multi_faults: list[int] = field(default_factory=list)

    @property
    def faults_per_call(self) -> tuple[float, float] | None:
        """Median page faults per call (single, multi), None where not counted: memory the
        allocator gave back to the OS and maps again (:mod:`parastream.runtime.malloc`)."""
        if not self.single_faults or not self.multi_faults:
            return None
        return statistics.median(self.single_faults), statistics.median(self.multi_faults)

    @property
    def single_median_us(self) -> float:
        return statistics.median(self.single_walls_us)

    @property
    def multi_median_us(self) -> float:
        return statistics.median(self.multi_walls_us)

    @property
    def single_executor_median_us(self) -> float:
        return statistics.median(self.single_executor_walls_us) if self.single_executor_walls_us else float("nan")

    @property
    def speedup(self) -> float:
        """Single-stream median wall / multi-stream median wall."""
        return self.single_median_us / self.multi_median_us if self.multi_median_us else 0.0

    @property
    def speedup_quartiles(self) -> tuple[float, float]:
        """Lower and upper quartile of the per-round speedups (each round's single-stream
        wall over the multi-stream wall of the same round): how far the speedup moves
        between rounds. Pairing the rounds cancels a machine that slows down for a while,
        which the two medians alone would hide or blame on the plan."""
        return paired_quartiles(self.single_walls_us, self.multi_walls_us)

    def summary(self) -> dict:
        faults = self.faults_per_call
        return {"plan": self.plan, "streams": self.streams, "runs_kept": len(self.multi_walls_us),
                "dropped": self.dropped, "single_threads": self.single_threads,
                "multi_threads_per_stream": self.multi_threads,
                "single_median_us": round(self.single_median_us, 3),
                "single_executor_median_us": round(self.single_executor_median_us, 3),
                "multi_median_us": round(self.multi_median_us, 3),
                "speedup": round(self.speedup, 4),
                "speedup_quartiles": [round(q, 4) for q in self.speedup_quartiles],
                "single_walls_us": [round(x, 3) for x in self.single_walls_us],
                "multi_walls_us": [round(x, 3) for x in self.multi_walls_us],
                "faults_per_call": list(faults) if faults else None}


def paired_quartiles(single_us: Sequence[float], multi_us: Sequence[float]) -> tuple[float, float]:
    """(lower, upper) quartile of ``single_us[i] / multi_us[i]`` over the rounds (both
    quartiles the one ratio for one round; (0, 0) for none)."""
    ratios = [s / m for s, m in zip(single_us, multi_us) if m > 0]
    if len(ratios) < 2:
        return (ratios[0], ratios[0]) if ratios else (0.0, 0.0)
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return q1, q3


def median_wall_us(fn: Any, runs: int, warmup: int = 2, drop: int = 0,
                   before: Any = None) -> float:
    """Median wall (us) of ``runs`` calls of ``fn`` after ``warmup`` untimed ones, the first
    ``drop`` timed calls left out: for a single configuration timed alone (the side-by-side
    alternation is :func:`measure`). ``before``, when given, runs untimed before every
    call (putting back the inputs a call writes:
    :func:`~parastream.runtime.executor.keep_inputs`)."""
    before = before or (lambda: None)
    for _ in range(warmup):
        before()
        fn()
    walls = []
    for _ in range(runs):
        before()
        t0 = time.perf_counter_ns()
        fn()
        walls.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(walls[drop:])


def _median_index(walls: list[float]) -> int:
    order = sorted(range(len(walls)), key=walls.__getitem__)
    return order[(len(order) - 1) // 2]


def measure(module: Any, inputs: Sequence[Any], plan: Plan, *, backend: str = "cpu",
            runs: int = 7, warmup: int = 2, drop: int = 2, cores: int | None = None,
            multi_threads: int | None = None, runnable: Any = None,
            single_executor: bool = True, executor: Any = None,
            rewarm: bool = True, timelines: bool = True) -> Measurement:
    """Measure ``plan`` against the single-stream module, alternating in this process.

    ``timelines=False`` on a device backend (cuda, npu) times the executors without their
    per-op timing events, and the measurement then has no timelines: two events bracket
    every op on its stream, a host cost of 6-11 us per op on an H200 (the zoo models at
    small scale, 23-28 ops: 1,095 against 888 us a call for medusa_heads' single-stream
    executor), which the plain module it is compared with does not pay. A cpu backend's
    timeline is its own bookkeeping and always kept.

    With ``rewarm`` (cpu backend) each timed multi-stream run follows untimed ones, for
    as long as the single-stream runs' OpenMP thread team keeps spinning after its last op
    (:func:`~parastream.runtime.cpu.team_spin_s`, 8-10 ms on this 2-vCPU VM with libgomp;
    libiomp's default is about 200 ms): the spinning
    thread takes a core from the streams' workers (llama_layer at small scale: a stream's
    first op started 3.6 ms late, the wall 25-30% longer; two_chains small, 1.3-1.5 ms
    calls: stream 0's first op took 1.2 ms instead of 0.13 ms for the first 4-8 calls, the
    wall 2.1-2.7 ms instead of 1.3-1.5 ms, while one untimed call was the rule). Waiting
    instead does not work on this virtual machine: idle vCPUs halt, and waking them slows
    every thread hand-off of the next run (a tiny model: 1.9 ms instead of 1.0-1.2 ms after
    a 20 ms sleep). A multi-stream plan run on its own has no such neighbour: its streams'
    teams are its own. In turn, the timed single-stream run follows an untimed one: after
    those untimed runs the team has gone to sleep, and waking it slowed the next call
    (two_chains tiny: 270-320 us instead of 145-175 us)."""
    from .backend import TIMED_DEVICES, untimed
    from .cpu import set_intra_op_threads, team_spin_s
    from .executor import MultiStreamExecutor, _cores, call_model, default_threads
    from .malloc import page_faults

    if runs < 5:
        raise ValueError("measure at least 5 timed runs (the first few are dropped)")
    if not 0 <= drop < runs:
        raise ValueError("drop must be >= 0 and less than runs")
    inputs = tuple(inputs)
    cores = cores or _cores()
    device = backend != "cpu"
    from ..graph.torch_import import import_runnable

    runnable = runnable or import_runnable(module, inputs)
    streams = len(set(plan.assignment.values()) | {0})
    multi_threads = multi_threads or default_threads(streams, cores)

    # a device backend without its timing events: one instance per executor
    quiet = not timelines and backend in TIMED_DEVICES

    def new_backend() -> Any:
        return untimed(backend) if quiet else backend

    multi = executor or MultiStreamExecutor(module, inputs, plan, backend=new_backend(),
                                            intra_op_threads=multi_threads, runnable=runnable)
    single = None
    if single_executor:
        single_plan = Plan.single(o.name for o in runnable.graph.ops)
        single = MultiStreamExecutor(module, inputs, single_plan, backend=new_backend(),
                                     intra_op_threads=cores, runnable=runnable)

    def sync() -> None:
        if device and multi.backend is not None and hasattr(multi.backend, "synchronize"):
            multi.backend.synchronize()

    def call(fn) -> None:
        # every call sees the inputs as given: a model that writes its input in place
        # (x.add_(1)) would otherwise be timed on what the previous calls left there, as
        # a server's next request never is, and one that changes its layout (x.t_())
        # would fail on its second call; the module's state (a cache, a counter) carries
        # over, as it does in serving. A model that writes no input restores nothing.
        fresh_inputs()
        fn(*inputs)

    def timed(fn, faults: list[int] | None = None) -> float:
        fresh_inputs()  # untimed
        sync()
        f0 = page_faults()
        t0 = time.perf_counter_ns()
        fn(*inputs)
        sync()
        t1 = time.perf_counter_ns()
        if faults is not None and f0 is not None:
            faults.append(page_faults() - f0)
        return (t1 - t0) / 1000.0

    def plain(*a):
        return call_model(module, a)

    s_walls, m_walls, e_walls = [], [], []
    m_tls, e_tls = [], []
    s_faults: list[int] = []
    m_faults: list[int] = []
    rewarm = rewarm and not device  # a device's streams share no thread team with the host
    settle_s = team_spin_s(cores) if rewarm else 0.0
    try:
        # every input back for the caller at the end (the eager module may write one the
        # traced program does not); between calls, those the program writes
        with multi.kept_state(inputs, state=False, every_input=True), \
                multi.kept_state(inputs, state=False) as fresh_inputs:
            set_intra_op_threads(cores)
            for _ in range(warmup):
                call(plain)
                if single is not None:
                    call(single)
                call(multi)
            for _ in range(runs):
                if rewarm:
                    call(plain)  # wakes the team the streams' runs left asleep
                s_walls.append(timed(plain, s_faults))
                if single is not None:
                    e_walls.append(timed(single))
                    if not quiet:
                        e_tls.append(single.timeline(f"{runnable.graph.name}: single stream"))
                if rewarm:
                    settled = time.perf_counter() + settle_s
                    call(multi)
                    while time.perf_counter() < settled:
                        call(multi)
                m_walls.append(timed(multi, m_faults))
                if not quiet:
                    m_tls.append(multi.timeline(f"{runnable.graph.name}: {plan.name}"))
    finally:
        if single is not None:
            single.close()
        if executor is None:
            multi.close()
    keep = slice(drop, None)
    m_walls, s_walls, e_walls = m_walls[keep], s_walls[keep], e_walls[keep]
    m_tls, e_tls = m_tls[keep], e_tls[keep]
    m = Measurement(plan.name, s_walls, m_walls, e_walls, drop, cores, multi_threads, streams,
                    multi_timelines=m_tls, single_timelines=e_tls,
                    single_faults=s_faults[keep], multi_faults=m_faults[keep])
    if m_tls:
        m.multi_timeline = m_tls[_median_index(m_walls)]
    if e_tls:
        m.single_timeline = e_tls[_median_index(e_walls)]
    return m


def analyse(m: Measurement, doc: Any = None, candidate: str | None = None) -> dict:
    """The captured timelines through the analysis: per-capture metrics of the multi runs,
    the plan's placement check and overlap_pct per planned parallel point (when ``doc``,
    a PlanDoc, is given), and the triage against the single-stream captures."""
    from ..timeline.analyze import Options, analyze
    from ..timeline.triage import triage

    out: dict = {}
    opts = Options(main_stream="0", cold=0)
    multi_doc = analyze(m.multi_timelines, opts) if m.multi_timelines else None
    single_doc = analyze(m.single_timelines, opts) if m.single_timelines else None
    if multi_doc is not None:
        # the measured medians, not the executor timelines' own spans, decide "faster"
        multi_doc["summary"]["median_wall_us"] = round(m.multi_median_us, 3)
        out["multi"] = multi_doc
    if single_doc is not None:
        single_doc["summary"]["median_wall_us"] = round(m.single_median_us, 3)
        out["single"] = single_doc
    if multi_doc is not None and single_doc is not None:
        out["triage"] = triage(single_doc, multi_doc)
    if doc is not None and m.multi_timeline is not None:
        from ..plan.verify import verify

        out["plan_check"] = verify(m.multi_timeline, doc, candidate or m.plan)
    return out


#: a stream that starts its first op this much after it could, in a third of the runs or
#: more, is reported (and at least this fraction of the median wall)
LATE_START_US = 200.0
LATE_START_FRACTION = 0.1


def start_lags_us(tl: Timeline, plan: Plan) -> dict[str, float]:
    """Per stream of a captured run: microseconds between the moment its first op could
    start and its start. "Could" is the run's first op anywhere, or later the end of the
    ops whose events that first op waits for (the plan's events); the stream that starts
    first lags 0. A lag well above a worker's wake-up is a worker that was runnable but
    not running (docs/benchmarks-run.md section 9: the OS put two workers on one core)."""
    if len(tl) == 0:
        return {}
    t0 = int(tl.start_ns.min())
    code = {name: c for c, name in enumerate(tl.names)}
    deps: dict[str, list[str]] = {}
    for e in plan.events:
        if e.wait_before is not None:
            deps.setdefault(e.wait_before, []).append(e.record_after)
    # each stream's first op: the earliest start among its rows
    order = np.lexsort((tl.start_ns, tl.stream))
    firsts = order[np.r_[True, np.diff(tl.stream[order]) != 0]]
    out: dict[str, float] = {}
    for i in firsts.tolist():
        ends = [tl.end_ns[tl.name == code[d]] for d in deps.get(tl.op_name(i), ()) if d in code]
        ready = max([t0] + [int(e.max()) for e in ends if len(e)])
        out[tl.streams[int(tl.stream[i])]] = max(0.0, (int(tl.start_ns[i]) - ready) / 1e3)
    return out


def late_starts(m: Measurement, plan: Plan) -> dict:
    """Over a measurement's multi-stream runs: the worst stream lag of each run
    (:func:`start_lags_us`), its median, and how many runs had one above the threshold
    (``LATE_START_US`` and ``LATE_START_FRACTION`` of the median multi-stream wall);
    ``frequent`` when a third of the runs or more did."""
    lags = [max(start_lags_us(tl, plan).values(), default=0.0) for tl in m.multi_timelines]
    if not lags:
        return {}
    threshold = max(LATE_START_US, LATE_START_FRACTION * m.multi_median_us)
    late = [lag for lag in lags if lag >= threshold]
    return {"median_lag_us": round(statistics.median(lags), 1), "late_runs": len(late),
            "late_median_us": round(statistics.median(late), 1) if late else None,
            "runs": len(lags), "threshold_us": round(threshold, 1),
            "frequent": 3 * len(late) >= len(lags)}
