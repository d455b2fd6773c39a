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
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from ..plan.model import Plan
from ..timeline.model import Timeline

__all__ = ["LATE_START_FRACTION", "LATE_START_US", "MeasureSettings", "Measurement", "analyse",
           "late_starts", "measure", "paired_quartiles", "start_lags_us"]


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
        allocator gave back to the OS and maps again (:mod:`parastream.cpu.malloc`)."""
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


@dataclass(frozen=True)
class MeasureSettings:
    """How :func:`measure` times a plan: ``runs`` (>= 5) timed rounds after ``warmup``
    untimed ones, the first ``drop`` rounds left out; ``cores`` for the single-stream
    side (default: all this process may use), ``multi_threads`` per stream (default
    ``cores // streams``); ``single_executor``: also time the single-stream executor;
    ``rewarm`` and ``timelines``: see :func:`measure`."""

    backend: str = "cpu"
    runs: int = 7
    warmup: int = 2
    drop: int = 2
    cores: int | None = None
    multi_threads: int | None = None
    single_executor: bool = True
    rewarm: bool = True
    timelines: bool = True

    def check(self) -> None:
        """ValueError unless the rounds leave something to keep."""
        if self.runs < 5:
            raise ValueError("measure at least 5 timed runs (the first few are dropped)")
        if not 0 <= self.drop < self.runs:
            raise ValueError("drop must be >= 0 and less than runs")


def measure(module: Any, inputs: Sequence[Any], plan: Plan,
            settings: MeasureSettings | None = None, *, runnable: Any = None,
            executor: Any = None, **options: Any) -> Measurement:
    """Measure ``plan`` against the single-stream module, alternating in this process.

    ``settings`` (:class:`MeasureSettings`), with any of its fields given as keyword
    ``options`` on top. ``runnable``: the module's traced program (traced here when not
    given); ``executor``: a multi-stream executor to time instead of a new one (left
    open).

    ``timelines=False`` on a backend whose streams bracket each op with timing events
    (cuda, npu) times the executors without those events, and the measurement then has
    no timelines: the events are a host cost per op that the plain module it is compared
    with does not pay. A cpu backend's timeline is its own bookkeeping and always kept.

    With ``rewarm`` (backends whose streams share the host's OpenMP thread team) each
    timed multi-stream run follows untimed ones, for as long as the single-stream runs'
    thread team keeps spinning after its last op
    (:func:`~parastream.runtime.host.team_spin_s`): the spinning thread takes a core from
    the streams' workers, and a stream's first op then starts late. Waiting instead does
    not work on a virtual machine whose idle vCPUs halt: waking them slows every thread
    hand-off of the next run. A multi-stream plan run on its own has no such neighbour:
    its streams' teams are its own. In turn, the timed single-stream run follows an
    untimed one: after those untimed runs the team has gone to sleep, and waking it
    slows the next call."""
    settings = replace(settings or MeasureSettings(), **options)
    settings.check()
    with _SideBySide(module, tuple(inputs), plan, settings, runnable, executor) as run:
        run.rounds()
        return run.result()


class _SideBySide:
    """One side-by-side measurement (:func:`measure`): the executors, the timed rounds
    and what they recorded."""

    def __init__(self, module: Any, inputs: tuple, plan: Plan, settings: MeasureSettings,
                 runnable: Any, executor: Any) -> None:
        from ..graph.torch_import import import_runnable
        from .backend import backend_capabilities
        from .executor import _cores, default_threads

        self.module, self.inputs, self.plan, self.settings = module, inputs, plan, settings
        self.cores = settings.cores or _cores()
        self.runnable = runnable or import_runnable(module, inputs)
        self.streams = len(set(plan.assignment.values()) | {0})
        self.multi_threads = settings.multi_threads or default_threads(self.streams, self.cores)
        caps = backend_capabilities(settings.backend)
        # a device's streams run asynchronously and share no thread team with the host
        self.device = not caps.host_threads
        # a device backend without its timing events: one instance per executor
        self.quiet = not settings.timelines and caps.timing_events
        self.own_executor = executor is None
        self.multi = executor or self._executor(plan, self.multi_threads)
        self.single = None
        if settings.single_executor:
            self.single = self._executor(Plan.single(o.name for o in self.runnable.graph.ops),
                                         self.cores)
        self.walls: dict[str, list[float]] = {"plain": [], "multi": [], "single": []}
        self.timelines: dict[str, list[Timeline]] = {"multi": [], "single": []}
        self.faults: dict[str, list[int]] = {"plain": [], "multi": []}
        self.fresh_inputs: Any = None

    def _executor(self, plan: Plan, threads: int) -> Any:
        from .backend import untimed
        from .executor import MultiStreamExecutor

        backend = untimed(self.settings.backend) if self.quiet else self.settings.backend
        return MultiStreamExecutor(self.module, self.inputs, plan, backend=backend,
                                   intra_op_threads=threads, runnable=self.runnable)

    def __enter__(self) -> "_SideBySide":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.single is not None:
            self.single.close()
        if self.own_executor:
            self.multi.close()

    # ------------------------------------------------------------------ calls
    def plain(self, *a: Any) -> Any:
        from .executor import call_model

        return call_model(self.module, a)

    def sync(self) -> None:
        if self.device and self.multi.backend is not None:
            self.multi.backend.synchronize()

    def call(self, fn: Callable[..., Any]) -> None:
        """An untimed call. Every call sees the inputs as given: a model that writes its
        input in place (x.add_(1)) would otherwise be timed on what the previous calls
        left there, as a server's next request never is, and one that changes its layout
        (x.t_()) would fail on its second call; the module's state (a cache, a counter)
        carries over, as it does in serving. A model that writes no input restores
        nothing."""
        self.fresh_inputs()
        fn(*self.inputs)

    def timed(self, fn: Callable[..., Any], faults: list[int] | None = None) -> float:
        """One timed call's wall in microseconds (the device synchronised before and
        after); its page faults appended to ``faults`` where the OS counts them."""
        from .host import page_faults

        self.fresh_inputs()  # untimed
        self.sync()
        f0 = page_faults()
        t0 = time.perf_counter_ns()
        fn(*self.inputs)
        self.sync()
        t1 = time.perf_counter_ns()
        if faults is not None and f0 is not None:
            faults.append(page_faults() - f0)
        return (t1 - t0) / 1000.0

    # ------------------------------------------------------------------ rounds
    def rounds(self) -> None:
        """Warm-up calls, then the timed rounds, with every input put back for the caller
        at the end (the eager module may write one the traced program does not) and,
        between calls, those the program writes."""
        from .host import set_intra_op_threads, team_spin_s

        s = self.settings
        rewarm = s.rewarm and not self.device
        settle_s = team_spin_s(self.cores) if rewarm else 0.0
        with self.multi.kept_state(self.inputs, state=False, every_input=True), \
                self.multi.kept_state(self.inputs, state=False) as self.fresh_inputs:
            set_intra_op_threads(self.cores)
            for _ in range(s.warmup):
                self.call(self.plain)
                if self.single is not None:
                    self.call(self.single)
                self.call(self.multi)
            for _ in range(s.runs):
                self._single_side(rewarm)
                self._multi_side(settle_s if rewarm else None)

    def _single_side(self, rewarm: bool) -> None:
        """The plain module timed (after an untimed call that wakes the thread team the
        streams' runs left asleep), then the single-stream executor."""
        if rewarm:
            self.call(self.plain)
        self.walls["plain"].append(self.timed(self.plain, self.faults["plain"]))
        if self.single is not None:
            self.walls["single"].append(self.timed(self.single))
            if not self.quiet:
                name = self.runnable.graph.name
                self.timelines["single"].append(self.single.timeline(f"{name}: single stream"))

    def _multi_side(self, settle_s: float | None) -> None:
        """The multi-stream executor timed; with ``settle_s``, after untimed calls for
        that long (the single-stream team's spin)."""
        if settle_s is not None:
            settled = time.perf_counter() + settle_s
            self.call(self.multi)
            while time.perf_counter() < settled:
                self.call(self.multi)
        self.walls["multi"].append(self.timed(self.multi, self.faults["multi"]))
        if not self.quiet:
            label = f"{self.runnable.graph.name}: {self.plan.name}"
            self.timelines["multi"].append(self.multi.timeline(label))

    def result(self) -> Measurement:
        """The kept rounds as a :class:`Measurement`, the median-wall runs' timelines as
        its representative ones."""
        keep = slice(self.settings.drop, None)
        m_walls, e_walls = self.walls["multi"][keep], self.walls["single"][keep]
        m_tls, e_tls = self.timelines["multi"][keep], self.timelines["single"][keep]
        m = Measurement(self.plan.name, self.walls["plain"][keep], m_walls, e_walls,
                        self.settings.drop, self.cores, self.multi_threads, self.streams,
                        multi_timelines=m_tls, single_timelines=e_tls,
                        single_faults=self.faults["plain"][keep],
                        multi_faults=self.faults["multi"][keep])
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
    not running (the OS put two workers on one core)."""
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
