"""Run a model's multi-stream plan candidates on real streams and measure them
(:func:`run` -> :class:`RunResult`).

The candidates come from a plan file or, with ``candidate="auto"`` and no plan, from
planning the model here and ranking the multi-stream candidates by this model's own op
times. Each runs against the single-stream model in the same process (warm-up, N runs,
first ones dropped, medians), beside the simulator's prediction, with the overlap of the
captured timeline analysed; the recommendation (keep, change candidate, stay
single-stream) takes the measured speedups. Needs torch.

The building blocks (:func:`measure_candidates`, :func:`rank_by_op_times`,
:func:`capture_op_costs`, :func:`to_device`) are the demo's too.
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from typing import Any, Callable, Iterable, Iterator

from ..errors import InputError
from ..cpu import malloc
from ..runtime.backend import backend_capabilities, torch_device_name

#: the shipped profile a device predicts with when none is given and none is calibrated
#: in-process (cuda calibrates one: calibrate.device)
DEVICE_PROFILES = {"npu": "ascend910b"}

#: what a busy machine means for a measured comparison (:class:`BusyWatch`'s note)
MEASURE_BUSY_ADVICE = ("the walls and speedups may be off (an OpenMP team stalls when "
                       "one of its threads is descheduled); measure again on a quiet machine")

#: why a call after the first can fail (:func:`later_calls_run`)
_LATER = "(the first call ran; its state, buffers or attributes, carries over from call to call)"


def kernels_profiled(device: str) -> bool:
    """Whether runs on backend ``device`` are analysed from the kernels of a run under the
    torch profiler: its streams run on a torch device whose kernels that profiler records
    (:data:`~parastream.runtime.profiler.PROFILED`: cuda; npu has a profiler of its own)."""
    from ..runtime.profiler import PROFILED

    on = backend_capabilities(device).torch_device
    return on is not None and on in PROFILED


# ----------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class Loaded:
    """A model ready to run: its module and example inputs on the device, and the program
    traced from them (``runnable.graph`` is its graph)."""

    module: Any
    inputs: tuple
    runnable: Any


def to_device(module: Any, inputs: tuple, device: str) -> tuple[Any, tuple]:
    """The module and its inputs (nested ones too) on backend ``device``'s torch device;
    as they are on a backend that runs on the host (no ``torch_device``)."""
    on = backend_capabilities(device).torch_device
    if on is None:
        return module, inputs
    import torch
    from torch.utils._pytree import tree_map

    from ..runtime.cuda import device_module

    device_module(on)  # registers the device with torch where an adapter does (torch_npu)
    dev = torch.device(on)  # nested inputs (a tuple or dict argument) move too
    return module.to(dev), tuple(tree_map(
        lambda t: t.to(dev) if isinstance(t, torch.Tensor) else t, tuple(inputs)))


def require_runs(module: Any, inputs: tuple, runnable: Any, device: str, where: str) -> None:
    """Refuse (an :class:`InputError` naming ``where``) a model that raises on its example
    inputs, or whose traced program does, before a calibration and minutes of measuring
    are spent on it: an embedding index out of range only shows on real data, and a
    buffer rebound with another shape (``self.cache = torch.cat(...)``) is written back in
    place by the exported program. Inputs and state the call writes are restored."""
    from ..plan.model import Plan
    from ..runtime.executor import MultiStreamExecutor, call_model

    single = Plan.single(o.name for o in runnable.graph.ops)
    with MultiStreamExecutor(module, inputs, single, backend=device, runnable=runnable) as ex, \
            model_fails(where, "on its example inputs",
                        traced="(parastream runs the graph torch.export or torch.fx traced; "
                               "the module itself ran)"), \
            ex.kept_state(inputs, every_input=True) as restore:
        call_model(module, inputs)
        restore()
        ex(*inputs)


@contextlib.contextmanager
def model_fails(where: str, when: str, traced: str = "", model: str = "") -> Iterator[None]:
    """The model's own failure said in one line naming ``where`` (an :class:`InputError`),
    not as a traceback: a traced op that raised (:class:`StreamError`; the op, or a folded
    view it reads) or the module itself (:class:`ModelCallError`), ``when`` (``on its
    example inputs``), each with its note."""
    from ..errors import one_line
    from ..runtime.backend import ModelCallError, StreamError

    def said(what: str, cause: BaseException, note: str) -> InputError:
        return InputError(where, " ".join(filter(None, (f"{what} {when}: {one_line(cause)}",
                                                        note))))

    try:
        yield
    except StreamError as exc:
        raise said(f"the traced program fails at op {exc.op!r} (or a view it reads)",
                   exc.cause, traced) from None
    except ModelCallError as exc:
        raise said("the model raises", exc.cause, model) from None


def later_calls_run(where: str) -> contextlib.AbstractContextManager[None]:
    """A traced op or the module itself that fails on a later call, after
    :func:`require_runs` saw the first run, is the model's: its state changes from call
    to call until a call cannot run (each call starts from the inputs as given, not from
    the first call's state)."""
    return model_fails(where, "on a later call", traced=_LATER, model=_LATER)


def load_run_profile(device: str, path: str | None) -> tuple[Any, str]:
    """The device profile a run predicts with and a sentence saying which one it is:
    ``path`` when given, else a quick in-process calibration (cpu, cuda) or the shipped
    profile of the device (npu)."""
    from ..device.profile import load_profile, profile_warning

    if path:
        try:
            profile = load_profile(path)
            note = profile_warning(profile)
            return profile, f"profile {path}" + (f" ({note})" if note else "")
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(path, f"not a device profile: {exc}") from None
    caps = backend_capabilities(device)
    if caps.host_threads:
        from ..cpu.overhead import calibrated_profile

        notes: list[str] = []
        prof = calibrated_profile(quick=True, name="cpu-quick", warn=notes.append)
        return prof, "; ".join(["profile: calibrated in-process (quick mode); pass --profile "
                                "FILE from 'parastream calibrate -o FILE' for a steadier "
                                "prediction", *notes])
    if caps.torch_device is not None and device not in DEVICE_PROFILES:
        from ..calibrate.device import calibrated_device_profile

        prof = calibrated_device_profile(device, quick=True, name=f"{device}-quick")
        return prof, (f"profile: calibrated in-process on {torch_device_name(device)} (quick: "
                      f"the executor's host cost {prof.launch_overhead_us:.3g} us per op, "
                      "matmul rates, copy bandwidth); pass --profile FILE from 'parastream "
                      f"calibrate --device {device} -o FILE' for a steadier prediction")
    name = DEVICE_PROFILES[device]
    return load_profile(name), (f"profile: built-in {name!r} (not measured on this device; pass "
                                "--profile)")


# ----------------------------------------------------------------------------- op times
def _profiled(module: Any, inputs: tuple, runnable: Any, plan: Any,
              device: str) -> tuple[bytes, Any]:
    """One run of ``plan`` under the torch profiler with each op annotated: the trace's
    bytes and the plan's ops from it (:func:`~parastream.runtime.profiler.kernel_timeline`;
    None when the trace has no annotation spans)."""
    import msgspec

    from ..runtime.executor import MultiStreamExecutor
    from ..runtime.profiler import kernel_timeline, profile_call

    with MultiStreamExecutor(module, inputs, plan, backend=device, runnable=runnable) as ex:
        ex.annotate = True
        raw = profile_call(lambda: ex.run(*inputs), device)
    return raw, kernel_timeline(msgspec.json.decode(raw), plan.assignment,
                                f"{plan.name} (torch profiler)",
                                device=torch_device_name(device))


def single_kernels(module: Any, inputs: tuple, runnable: Any, device: str) -> Any:
    """On cuda, the single-stream plan's ops as its kernels ran in one profiled run
    (:func:`_profiled`; None without annotation spans): the op times of the ``auto``
    ranking and the baseline every candidate's kernels are triaged on. None elsewhere."""
    from ..plan.model import Plan

    if not kernels_profiled(device):
        return None
    return _profiled(module, inputs, runnable, Plan.single(o.name for o in runnable.graph.ops),
                     device)[1]


def capture_op_costs(module: Any, inputs: tuple, runnable: Any, profile: Any, *,
                     device: str = "cpu", runs: int = 5, kernels: Any = None) -> dict | None:
    """This model's op costs from one single-stream executor capture (``runs`` timed
    runs, the first 2 dropped) through :func:`parastream.sim.run.measured_costs`; None
    when the backend captured no timeline. On cuda: each op's kernels in one profiled run
    (``kernels``, else :func:`single_kernels` now), the device's time only; the host's
    issue is the profile's launch cost, which the simulator adds (the event brackets held
    the launch too, and counted it twice)."""
    from ..plan.model import Plan
    from ..runtime.measure import measure
    from ..sim.run import measured_costs

    if kernels_profiled(device):
        if kernels is None:
            kernels = single_kernels(module, inputs, runnable, device)
        return measured_costs(runnable.graph, profile, [kernels]) if kernels is not None else None
    single = Plan.single(o.name for o in runnable.graph.ops)
    cal = measure(module, inputs, single, backend=device, runs=runs, warmup=1, drop=2,
                  runnable=runnable, single_executor=False, rewarm=False)
    if not cal.multi_timelines:
        return None
    return measured_costs(runnable.graph, profile, cal.multi_timelines)


def rank_by_op_times(module: Any, inputs: tuple, runnable: Any, profile: Any,
                     candidates: list, *, device: str = "cpu",
                     kernels: Any = None) -> tuple[list, dict | None]:
    """Candidates best first by their wall simulated from this model's own op times
    (:func:`capture_op_costs`; on cuda from ``kernels`` when given). The profile alone
    can under-predict ops inside a model, unevenly across op types, which can misorder
    candidates; the op times do better. Returns (ranked, costs); the candidates in their
    given order and None when there is no capture."""
    from ..graph.ir import validate
    from ..sim.run import simulate_plan

    if not candidates:
        return candidates, None
    costs = capture_op_costs(module, inputs, runnable, profile, device=device, kernels=kernels)
    if costs is None:
        return candidates, None
    graph = runnable.graph
    order = validate(graph)
    wall = {c.name: simulate_plan(graph, c, profile, costs=costs, order=order).result.wall_us
            for c in candidates}
    return sorted(candidates, key=lambda c: wall[c.name]), costs


# ----------------------------------------------------------------------------- candidates
@dataclass(frozen=True)
class CandidateSettings:
    """How :func:`measure_candidates` measures: ``runs`` timed runs per side after
    ``warmup`` untimed ones, the first ``drop`` dropped; ``check`` compares outputs with
    the single-stream model (``jitter`` more runs with random delays); with
    ``reuse_estimates`` a candidate's own estimate stands when the planner made it on this
    profile; ``on_candidate(k, n, plan)`` is called before each candidate runs."""

    device: str = "cpu"
    runs: int = 7
    warmup: int = 2
    drop: int = 2
    check: bool = False
    jitter: int = 0
    reuse_estimates: bool = False
    on_candidate: Callable[[int, int, Any], None] | None = None


@dataclass
class CandidateRuns:
    """What :func:`measure_candidates` measured: one :class:`CandidateResult` and one
    JSON-ready detail per candidate, each candidate's (Measurement, analysis) by name
    (``measurements``), the cuda profiler traces by name (``torch_traces``), a warning when
    other tasks took half the cores (``busy``), the busy share the recommendation weighs
    (``busy_share``) and the op costs the "predicted from ops" walls were simulated from
    (``op_costs``; None when no single-stream run recorded them)."""

    model: str
    device: str
    runs: int
    drop: int
    candidates: list = field(default_factory=list)
    details: list[dict] = field(default_factory=list)
    measurements: dict[str, tuple[Any, dict]] = field(default_factory=dict)
    torch_traces: dict[str, bytes] = field(default_factory=dict)
    busy: str | None = None
    busy_share: Any = None
    op_costs: dict | None = None


def measure_candidates(loaded: Loaded, doc: Any, chosen: list, profile: Any,
                       settings: CandidateSettings | None = None, *,
                       op_costs: dict | None = None, kernel_single: Any = None) -> CandidateRuns:
    """Measure each chosen candidate against single stream; predict, analyse, check.

    ``op_costs``: op times from a separate single-stream capture (:func:`rank_by_op_times`)
    for the "predicted from ops" figure; without them the first candidate's own
    single-stream runs give them (on cuda: the single-stream kernels). ``kernel_single``
    (cuda): :func:`single_kernels` when the caller already profiled them; else profiled
    here."""
    from ..cpu.busy import BusyWatch
    from ..runtime.host import cpu_count
    from ..runtime.recommend import busy_evidence

    s = settings or CandidateSettings()
    bench = _Bench(loaded, doc, profile, s, op_costs, kernel_single)
    out = CandidateRuns(loaded.runnable.graph.name, s.device, s.runs, s.drop)
    # the host's threads issue every backend's ops: a neighbour on the cores skews them
    with BusyWatch(cpu_count()) as watch:
        for k, c in enumerate(chosen, 1):
            if s.on_candidate is not None:
                s.on_candidate(k, len(chosen), c)
            bench.measure(c, out)
    out.busy = watch.note("the measurement", MEASURE_BUSY_ADVICE)
    # what withholds a win (recommend)
    out.busy_share = busy_evidence(watch.busy_share(), len(watch.samples), s.device)
    out.op_costs = bench.op_costs
    return out


class _Bench:
    """The measuring of :func:`measure_candidates`, one candidate at a time, with what the
    candidates share: the graph's order, the single-stream prediction, the op times."""

    def __init__(self, loaded: Loaded, doc: Any, profile: Any, settings: CandidateSettings,
                 op_costs: dict | None, kernel_single: Any) -> None:
        from ..graph.ir import validate
        from ..sim.run import sim_label

        self.loaded, self.doc, self.profile, self.s = loaded, doc, profile, settings
        self.graph = loaded.runnable.graph
        self.order = validate(self.graph)  # once for every plan simulated below
        self.label = sim_label(profile)
        self.single_wall: float | None = None
        # cuda: the single-stream plan's kernels, the baseline every candidate's are triaged
        # on, and the op times when none were given (the timed runs record no timeline there)
        if kernel_single is None:
            kernel_single = single_kernels(loaded.module, loaded.inputs, loaded.runnable,
                                           settings.device)
        if op_costs is None and kernel_single is not None:
            op_costs = capture_op_costs(loaded.module, loaded.inputs, loaded.runnable, profile,
                                        device=settings.device, kernels=kernel_single)
        self.kernel_single, self.op_costs = kernel_single, op_costs

    def predicted(self, plan: Any) -> tuple[float, float]:
        """(multi, single) predicted walls: the plan's own estimate when the planner just
        simulated it on this profile, else a fresh simulation."""
        from ..plan.model import Plan
        from ..sim.run import simulate_plan

        if (self.s.reuse_estimates and plan.estimate is not None
                and plan.estimate.source == self.label):
            return plan.estimate.wall_us, plan.estimate.single_stream_wall_us
        if self.single_wall is None:
            base = Plan.single(o.name for o in self.graph.ops)
            self.single_wall = simulate_plan(self.graph, base, self.profile,
                                             order=self.order).result.wall_us
        return (simulate_plan(self.graph, plan, self.profile, order=self.order).result.wall_us,
                self.single_wall)

    @functools.cached_property
    def single_program_ok(self) -> bool:
        """Whether the traced program on one stream gives the module's outputs (checked
        once, when a candidate's do not): tells a plan's missing wait from a wrong trace."""
        from ..plan.model import Plan
        from ..runtime.executor import MultiStreamExecutor

        lo = self.loaded
        single = Plan.single(o.name for o in self.graph.ops)
        with MultiStreamExecutor(lo.module, lo.inputs, single, backend=self.s.device,
                                 runnable=lo.runnable) as ex:
            return ex.check(*lo.inputs, runs=2).ok

    def check_outputs(self, plan: Any) -> tuple[bool | None, str | None]:
        """(outputs identical, the check's note) of ``plan`` against the single-stream
        model; (None, None) without ``check``."""
        from ..runtime.executor import Jitter, MultiStreamExecutor

        if not self.s.check:
            return None, None
        lo, jitter = self.loaded, self.s.jitter
        with MultiStreamExecutor(lo.module, lo.inputs, plan, backend=self.s.device,
                                 runnable=lo.runnable) as ex:
            cmp = ex.check(*lo.inputs, runs=2)
        if cmp.ok and jitter:
            with MultiStreamExecutor(lo.module, lo.inputs, plan, backend=self.s.device,
                                     runnable=lo.runnable, jitter=Jitter(seed=1)) as ex:
                cmp = ex.check(*lo.inputs, runs=jitter)
        note = cmp.describe() if cmp.ok else (cmp.error or cmp.describe())
        if not cmp.ok and not self.single_program_ok:
            note += ("; the single-stream program differs too: the traced program is not the "
                     "module's (an import problem, not this plan's)")
        if cmp.ok:
            note += (f" in 2 runs, then {jitter} runs with random delays and stream orders"
                     if jitter else " in 2 runs")
        return cmp.ok, note

    def timed(self, plan: Any, out: CandidateRuns) -> Any:
        """The side-by-side measurement of ``plan`` (on cuda with the kernels of a profiled
        run as its timelines); the op times from its single-stream runs when none yet."""
        from ..runtime.measure import measure
        from ..sim.run import measured_costs

        lo, device = self.loaded, self.s.device
        # on cuda the timed runs go without the backend's per-op timing events (a host
        # cost the plain module does not pay): the kernels come from a profiled run. An
        # npu has no such run here, so its event timeline stays the one analysed
        m = measure(lo.module, lo.inputs, plan, backend=device, runs=self.s.runs,
                    warmup=self.s.warmup, drop=self.s.drop, runnable=lo.runnable,
                    timelines=not (backend_capabilities(device).timing_events
                                   and kernels_profiled(device)))
        if self.op_costs is None and m.single_timelines:
            self.op_costs = measured_costs(self.graph, self.profile, m.single_timelines)
        if kernels_profiled(device):
            # the kernels as they ran, not the launch-inclusive event brackets: the
            # analysis and the trace's timelines take these (runtime/profiler.py)
            raw, tl = _profiled(lo.module, lo.inputs, lo.runnable, plan, device)
            out.torch_traces[plan.name] = raw
            if tl is not None:
                m.multi_timeline, m.multi_timelines = tl, [tl]
            if self.kernel_single is not None:
                m.single_timeline, m.single_timelines = self.kernel_single, [self.kernel_single]
        return m

    def measure(self, plan: Any, out: CandidateRuns) -> None:
        """Predict, check, measure and analyse ``plan``; its result and detail go to
        ``out``."""
        from ..runtime import measure as measuring
        from ..sim.run import simulate_plan

        pred, pred_single = self.predicted(plan)
        ok, check_note = self.check_outputs(plan)
        m = self.timed(plan, out)
        from_ops = (simulate_plan(self.graph, plan, self.profile, costs=self.op_costs,
                                  order=self.order).result.wall_us
                    if self.op_costs is not None else None)
        an = measuring.analyse(m, self.doc, plan.name)
        out.measurements[plan.name] = (m, an)
        found = [p for p in an.get("plan_check", {}).get("parallel_points", []) if p.get("found")]
        out.candidates.append(_candidate_result(plan, m, an, found, (pred, pred_single, from_ops),
                                                ok))
        lag = (measuring.late_starts(m, plan) if backend_capabilities(self.s.device).host_threads
               else {})
        out.details.append(_detail(plan, m, an, found, (pred, pred_single, from_ops),
                                   {"start_lag": lag, "check": check_note}))


def _candidate_result(plan: Any, m: Any, an: dict, found: list, predictions: tuple,
                      ok: bool | None) -> Any:
    """The :class:`CandidateResult` the recommendation weighs; ``predictions``: (multi,
    single, from op times) predicted walls."""
    from ..runtime.recommend import CandidateResult

    pred, pred_single, from_ops = predictions
    return CandidateResult(
        name=plan.name, speedup=m.speedup, single_median_us=m.single_median_us,
        multi_median_us=m.multi_median_us, predicted_wall_us=pred,
        predicted_single_us=pred_single, predicted_from_ops_us=from_ops,
        overlap_pcts=[p["overlap_pct"] for p in found], verdicts=[p["verdict"] for p in found],
        busy_overlap_pcts=[p["busy_overlap_pct"] for p in found],
        triage=an.get("triage", {}).get("verdict"), outputs_ok=ok,
        speedup_quartiles=m.speedup_quartiles, streams=m.streams)


def _error(predicted: float | None, measured: float) -> float | None:
    """(predicted - measured) / measured, rounded; None without either."""
    if predicted is None or not measured:
        return None
    return round((predicted - measured) / measured, 4)


def _detail(plan: Any, m: Any, an: dict, found: list, predictions: tuple, extra: dict) -> dict:
    """A candidate's JSON-ready detail: the measurement, the predictions and their errors,
    the parallel points found, the placement, the triage, the timeline's kind, and
    ``extra`` (``start_lag``, ``check``)."""
    pred, pred_single, from_ops = predictions
    tri = an.get("triage", {})
    check = an.get("plan_check", {})
    torch_tl = m.multi_timeline is not None and m.multi_timeline.format == "torch-profiler"
    return {"candidate": plan.name, "algorithm": plan.algorithm, "streams": m.streams,
            "measurement": m.summary(), "predicted_wall_us": round(pred, 3),
            "predicted_single_us": round(pred_single, 3),
            "prediction_error": _error(pred, m.multi_median_us),
            "predicted_from_ops_us": round(from_ops, 3) if from_ops is not None else None,
            "prediction_from_ops_error": _error(from_ops, m.multi_median_us),
            "parallel_points": found,
            "placement": {k: check.get(k) for k in
                          ("misplaced_count", "side_stream_never_ran", "stream_mapping")},
            "triage": {"verdict": tri.get("verdict"), "summary": tri.get("summary"),
                       "evidence": tri.get("evidence", [])},
            "start_lag": extra["start_lag"],
            "timeline": ("torch profiler: each op's kernels (gpu_user_annotation spans), one run"
                         if torch_tl else "the backend's own recording"),
            "check": extra["check"]}


# ----------------------------------------------------------------------------- trace files
def trace_file(folder: str, label: str) -> str:
    """Where a run's trace folder holds ``label``'s file (a candidate, ``single``,
    ``plan``): one name for the up-front checks and the writes."""
    return os.path.join(folder, safe_label(label) + ".json")


def safe_label(label: str) -> str:
    """``label`` as a file name: letters, digits and ``-_.``, at most 80 characters."""
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)
    return keep.strip("_")[:80] or "candidate"


def candidate_label(candidate: str) -> str:
    """A candidate's file label in the trace folder: ``single`` and ``plan`` name the
    baseline and the plan document there, so a candidate of either name gets ``-plan`` /
    ``-candidate`` added (a plan's own single-stream candidate ran through the executor is
    another run than the single-stream baseline)."""
    return {"single": "single-plan", "plan": "plan-candidate"}.get(safe_label(candidate),
                                                                    candidate)


def torch_label(candidate: str) -> str:
    """A candidate's torch profiler trace's label (``single-torch`` is the plain model's)."""
    return f"{candidate_label(candidate)}-torch"


def check_trace_files(folder: str | None, labels: Iterable[str], json_path: str | None) -> None:
    """Each of the trace folder's files for ``labels`` can be written, and none is
    ``json_path`` (the run's summary would replace a timeline)."""
    from ..atomic import check_writable, same_file

    if not folder:
        return
    for label in labels:
        path = trace_file(folder, label)
        check_writable(path, made=folder)
        if json_path and same_file(json_path, path):
            raise InputError(json_path, f"--json and --trace's {label} timeline name the "
                                        "same file")


def run_timelines(measurements: dict) -> list[tuple[str, Any]]:
    """(label, timeline) pairs of measured candidates (name -> (Measurement, analysis)):
    each candidate's median multi-stream run, then the first single-stream run (the
    baseline for analyze)."""
    out = [(candidate_label(name), m.multi_timeline) for name, (m, _) in measurements.items()
           if m.multi_timeline is not None]
    single = next((m.single_timeline for m, _ in measurements.values()
                   if m.single_timeline is not None), None)
    if single is not None:
        out.append(("single", single))
    return out


# ----------------------------------------------------------------------------- the run
@dataclass(frozen=True)
class RunSettings:
    """How :func:`run` builds, measures and records a model.

    ``scale``/``phase``: the model's shapes (a plan file's own when given; default small);
    ``runs`` timed runs per variant (>= 5) after ``warmup`` untimed ones, the first
    ``drop`` dropped; ``top``: candidates run in auto mode; ``margin``: the speedup a
    candidate must beat single stream by; ``check``: outputs compared with the
    single-stream model (``jitter`` more runs with random delays); ``profile``: a device
    profile file (default: a quick calibration here, or the device's shipped profile);
    ``pin``: cpu stream workers pinned to their own cores; ``best_settings``: on cpu, each
    side measured again in a process of its own in its best OpenMP setting; ``malloc``:
    ``keep`` or ``system`` (:mod:`parastream.cpu.malloc`); ``trace``: a folder for the
    captured timelines and the plan; ``json``: the file the caller writes the result to
    (no trace file may be it); ``on_note``: each progress line as it happens;
    ``on_warning``: each note about the model (the graph import's)."""

    scale: str | None = None
    phase: str | None = None
    runs: int = 7
    warmup: int = 2
    drop: int = 2
    top: int = 3
    margin: float = 0.05
    check: bool = False
    jitter: int = 0
    profile: str | None = None
    pin: bool = False
    best_settings: bool = True
    malloc: str = "keep"
    trace: str | None = None
    json: str | None = None
    on_note: Callable[[str], None] | None = None
    on_warning: Callable[[str], None] | None = None

    def validate(self, plan: str | None, candidate: str) -> None:
        """An :class:`InputError` for values no run can take."""
        if self.jitter < 0:
            raise InputError(None, f"--jitter must not be negative, got {self.jitter}")
        if self.jitter and not self.check:
            raise InputError(None, "--jitter RUNS checks outputs under random delays: it needs "
                                   "--check")
        if candidate != "auto" and not plan:
            raise InputError(None, "--candidate picks a candidate of --plan FILE; with --auto "
                                   "the candidates are the planner's")
        if self.runs < 5:
            raise InputError(None, "--runs must be at least 5 (the first runs are dropped as "
                                   "cold)")
        if not 0 <= self.drop < self.runs:
            raise InputError(None, "--drop must be >= 0 and below --runs")
        if self.warmup < 0 or self.top < 1 or not 0 <= self.margin < float("inf"):
            raise InputError(None, "--warmup and --margin must be zero or more (--margin a "
                                   "finite number), --top at least 1")


@dataclass
class RunResult:
    """What :func:`run` measured and decided. :meth:`to_dict` is the document
    ``parastream run --json`` writes (schema ``parastream.run/1``); ``measurements``
    (candidate name -> (Measurement, analysis)), ``torch_traces`` (cuda profiler traces by
    candidate) and ``written`` (a line per thing written to the trace folder) are not in
    it."""

    model: str
    device: str
    runs: int
    drop: int
    candidates: list
    details: list[dict]
    busy: str | None
    busy_share: Any
    recommendation: Any
    profile: str
    malloc: str
    malloc_note: str
    separate_processes: dict | None = None
    measurements: dict[str, tuple[Any, dict]] = field(default_factory=dict)
    torch_traces: dict[str, bytes] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)

    @property
    def outputs_differ(self) -> bool:
        """Whether a checked candidate's outputs differed from the single-stream model's."""
        return any(c.outputs_ok is False for c in self.candidates)

    def to_dict(self) -> dict:
        """The JSON document of the run."""
        doc: dict[str, Any] = {"schema": "parastream.run/1", "model": self.model,
                               "device": self.device, "runs": self.runs, "drop": self.drop,
                               "candidates": _jsonable(self.candidates),
                               "details": _jsonable(self.details), "busy": self.busy,
                               "busy_share": _jsonable(self.busy_share)}
        if self.separate_processes is not None:
            doc["separate_processes"] = _jsonable(self.separate_processes)
        doc.update(recommendation=self.recommendation.to_dict(), profile=self.profile,
                   malloc=self.malloc, malloc_note=self.malloc_note)
        return doc


def _jsonable(x: Any) -> Any:
    if is_dataclass(x) and not isinstance(x, type):
        return asdict(x)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def run(model: str, settings: RunSettings | None = None, *, device: str = "cpu",
        candidate: str = "auto", plan: str | None = None, **options: Any) -> RunResult:
    """Run ``model`` (a zoo name or ``path/to/file.py:factory``) on ``device``'s streams
    (cpu, cuda, npu) and measure it.

    With ``plan`` (a ``parastream.plan/1`` file) the candidate named ``candidate`` runs
    (``auto``: the plan's recommendation, with its best multi-stream candidate beside a
    single-stream one); without, the model is planned here and the best
    ``settings.top`` multi-stream candidates by this model's op times run. ``settings``
    (:class:`RunSettings`) with any of its fields given as keyword ``options``. Raises
    :class:`InputError` (one line, naming the file) on bad input."""
    s = replace(settings or RunSettings(), **options)
    from ..atomic import check_folder

    check_folder(s.trace)  # before a minute of measuring, not after it
    check_trace_files(s.trace, ("plan", "single"), s.json)
    s.validate(plan, candidate)
    return _Run(model, s, device).execute(plan, candidate)


class _Run:
    """One :func:`run`: load, choose candidates, measure, decide, write the trace."""

    def __init__(self, model: str, settings: RunSettings, device: str) -> None:
        self.model, self.s, self.device = model, settings, device
        self.scale, self.phase = settings.scale, settings.phase
        self.name = model  # the model's name once built

    def say(self, line: str) -> None:
        if self.s.on_note is not None:
            self.s.on_note(line)

    def execute(self, plan_path: str | None, candidate: str) -> RunResult:
        from ..graph.models import DEFAULT_SCALE
        from ..plan.io import load_doc, plan_shapes, require_fit

        if self.s.pin:
            from ..runtime.executor import PIN_ENV

            os.environ[PIN_ENV] = "1"  # every executor here and in the processes it starts
        # before anything is measured, calibration included: it then runs as the model does
        malloc_note = malloc.apply(self.s.malloc)
        doc_in, name = None, None
        if plan_path:
            doc_in, chosen = load_doc(plan_path, None if candidate == "auto" else candidate)
            name = chosen.name if candidate != "auto" else None
            # the plan's shapes are the run's: one made at another scale has the same op names
            self.scale, self.phase = plan_shapes(doc_in, plan_path, self.scale, self.phase)
        self.scale = self.scale or DEFAULT_SCALE
        loaded = self.load()
        graph = loaded.runnable.graph
        if doc_in is not None:  # a plan for another model fails before anything is printed
            require_fit(graph, doc_in.candidate(name or doc_in.recommended), plan_path)
        require_runs(loaded.module, loaded.inputs, loaded.runnable, self.device, self.model)
        profile, profile_note = load_run_profile(self.device, self.s.profile)
        self.say(f"model {self.name} (scale {self.scale}): {len(graph.ops)} ops; "
                 f"device {self.device}")
        self.say(profile_note)
        self.say(malloc_note)
        picked = (self.from_plan(doc_in, name) if doc_in is not None
                  else self.auto(loaded, profile))
        for c in picked.chosen:
            require_fit(graph, c, plan_path or self.model)
        # every file of the trace folder, before the measuring: a folder in the place of
        # one (tr/plan.json/) failed after the whole run and left the others written
        check_trace_files(self.s.trace, [candidate_label(c.name) for c in picked.chosen]
                          + ([torch_label(c.name) for c in picked.chosen] + ["single-torch"]
                             if kernels_profiled(self.device) else []), self.s.json)
        result = self.measure(loaded, profile, picked, reuse=doc_in is None)
        result.profile, result.malloc_note = profile_note, malloc_note
        if self.s.trace:
            self.write_trace(loaded, picked.doc, result)
        return result

    def load(self) -> Loaded:
        """The model built, on the device and traced; the import's notes said."""
        from ..graph.models import anchored, load_model
        from ..graph.torch_import import import_runnable

        caps = backend_capabilities(self.device)
        if not caps.host_threads:
            from ..runtime.cuda import require_device

            require_device(caps.torch_device or self.device)
        module, inputs, self.name, meta = load_model(self.model, self.scale, self.phase)
        module, inputs = to_device(module, inputs, self.device)
        with anchored(meta):
            runnable = import_runnable(module, inputs, name=self.name,
                                       meta={"scale": self.scale, "phase": self.phase})
        for note in runnable.graph.meta.get("notes", ()):  # as graph, plan and simulate say it
            if self.s.on_warning is not None:
                self.s.on_warning(f"{self.model}: {note}")
        if not runnable.graph.ops:  # as plan and simulate say it, before a calibration
            raise InputError(self.model, "the graph has no ops: nothing to run")
        return Loaded(module, inputs, runnable)

    def from_plan(self, doc: Any, name: str | None) -> "_Picked":
        """A plan file's candidate, with its best multi-stream candidate beside a
        single-stream pick."""
        chosen = [doc.candidate(name or doc.recommended)]
        if chosen[0].algorithm == "single" or chosen[0].stream_count() <= 1:
            multi = [c for c in doc.candidates if c.stream_count() > 1]
            if multi:
                self.say(f"the plan recommends {chosen[0].name!r} (single stream); also "
                         f"running its best multi-stream candidate {multi[0].name!r}")
                chosen.append(multi[0])
        return _Picked(doc, chosen, chosen[0].name)

    def auto(self, loaded: Loaded, profile: Any) -> "_Picked":
        """Plan the model here; its best ``top`` multi-stream candidates by this model's op
        times (cuda: the single-stream kernels, profiled once for the ranking and the
        triage)."""
        from ..graph.models import model_source
        from .plan import build
        from ..plan.model import PlanError

        try:
            doc = build(loaded.runnable.graph, profile, algorithm=None, mapping=None,
                        max_streams=None, source={"model": model_source(self.model),
                                                  "scale": self.scale, "phase": self.phase})
        except PlanError as exc:
            raise InputError(self.model, str(exc)) from None
        multi = [c for c in doc.candidates if c.stream_count() > 1]
        with later_calls_run(self.model):
            kernels = (single_kernels(loaded.module, loaded.inputs, loaded.runnable, self.device)
                       if multi else None)
            ranked, op_costs = rank_by_op_times(loaded.module, loaded.inputs, loaded.runnable,
                                                profile, multi, device=self.device,
                                                kernels=kernels)
        chosen = ranked[:self.s.top]
        if not multi:
            self.say(f"--auto: {len(doc.candidates)} candidates simulated, none of them "
                     "multi-stream (the model has no parallel point the planner can use)")
        else:
            how = (("again from the op times of a single-stream capture (5 runs)"
                    if not kernels_profiled(self.device) else "again from the kernels of a profiled "
                    "single-stream run") if op_costs is not None else "on the profile")
            self.say(f"--auto: {len(doc.candidates)} candidates simulated, the multi-stream "
                     f"ones {how}; running the best {len(chosen)}")
        return _Picked(doc, chosen, doc.recommended if doc.recommended != "single" else None,
                       op_costs, kernels)

    def measure(self, loaded: Loaded, profile: Any, picked: "_Picked", reuse: bool) -> RunResult:
        """The candidates measured, each side again in its best setting (cpu), and the
        recommendation. A plan file's estimates may come from another calibration of the
        same name: only estimates made now, on this profile, are reused (``reuse``)."""
        from ..cpu import baseline
        from ..runtime.recommend import recommend

        s = self.s
        settings = CandidateSettings(device=self.device, runs=s.runs, warmup=s.warmup,
                                     drop=s.drop, check=s.check, jitter=s.jitter,
                                     reuse_estimates=reuse)
        with later_calls_run(self.model):
            runs = measure_candidates(loaded, picked.doc, picked.chosen, profile, settings,
                                      op_costs=picked.op_costs, kernel_single=picked.kernels)
        if runs.busy:
            self.say(f"warning: {runs.busy}")
        iso = None
        if backend_capabilities(self.device).host_threads and s.best_settings \
                and baseline.wanted():
            self.say("measuring each side again in a process of its own: single stream with "
                     "OpenMP threads spinning, the candidates with them sleeping")
            iso = baseline.best_settings(self.model, self.scale, self.phase, picked.doc,
                                         [c.name for c in picked.chosen if c.stream_count() > 1],
                                         runs=s.runs, warmup=s.warmup, drop=s.drop)
            baseline.attach(runs.candidates, iso)
        rec = recommend(runs.candidates, current=picked.current, margin=s.margin,
                        busy_share=runs.busy_share, notes=[runs.busy], device=self.device)
        return RunResult(runs.model, runs.device, runs.runs, runs.drop, runs.candidates,
                         runs.details, runs.busy, runs.busy_share, rec, "", s.malloc, "",
                         separate_processes=iso, measurements=runs.measurements,
                         torch_traces=runs.torch_traces)

    def write_trace(self, loaded: Loaded, doc: Any, result: RunResult) -> None:
        """The captured timelines (Kineto JSON) and the plan recommending what the
        measurement chose, as the demo's folder does; on cuda also each candidate's torch
        profiler trace and the plain model's."""
        from ..plan.io import dumps, with_recommendation
        from ..atomic import make_folder, write_atomic
        from ..report.kineto import write_kineto

        folder = self.s.trace
        make_folder(folder)
        for label, tl in run_timelines(result.measurements):
            write_kineto(trace_file(folder, label), tl, label)
        write_atomic(trace_file(folder, "plan"),
                     dumps(with_recommendation(doc, result.recommendation.candidate or "single")))
        result.written.append(f"timelines written to {folder}/ (parastream analyze "
                              "DIR/<candidate>.json --baseline DIR/single.json --plan "
                              "DIR/plan.json)")
        if result.torch_traces:
            self.write_torch_traces(loaded, result)

    def write_torch_traces(self, loaded: Loaded, result: RunResult) -> None:
        """On cuda, each candidate's annotated run and the plain model as the torch
        profiler saw them (``<candidate>-torch.json``, ``single-torch.json``)."""
        from ..atomic import write_atomic
        from ..runtime.profiler import capture_torch_trace

        folder = self.s.trace
        for name, raw in result.torch_traces.items():
            write_atomic(trace_file(folder, torch_label(name)), raw)
        capture_torch_trace(lambda: loaded.module(*loaded.inputs),
                            trace_file(folder, "single-torch"), self.device)
        result.written.append(f"torch profiler traces written to {folder}/ (parastream "
                              "analyze DIR/<candidate>-torch.json --baseline "
                              "DIR/single-torch.json)")


@dataclass
class _Picked:
    """The candidates a run measures: the plan document they come from, the chosen
    candidates, the one currently recommended (None: single stream), and in auto mode
    the op times and (cuda) single-stream kernels of the ranking."""

    doc: Any
    chosen: list
    current: str | None
    op_costs: dict | None = None
    kernels: Any = None


__all__ = ["CandidateRuns", "CandidateSettings", "Loaded", "RunResult", "RunSettings",
           "capture_op_costs", "load_run_profile", "measure_candidates", "rank_by_op_times",
           "run", "single_kernels", "to_device"]
