"""``parastream run MODEL (--plan FILE | --auto)``: execute plans on real streams.

Prints the single- vs multi-stream median wall, the speedup, the simulator's predicted
wall next to the measured one, the overlap verdicts of the captured timeline and the
recommendation (keep, change candidate, stay single-stream) with its evidence.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
from typing import Any, Iterable, Iterator

from ..errors import InputError
from . import malloc

#: the shipped profile a device predicts with when none is given and none is calibrated
#: in-process (cuda calibrates one: runtime.device_calibrate)
DEVICE_PROFILES = {"npu": "ascend910b"}


def add_parser(sub) -> None:
    from ..cliargs import add_command, candidate_arg, json_arg, model_arg, shape_args

    p = add_command(sub, "run", help="run a model's multi-stream plan on real streams and "
                                     "measure it",
                    description="Execute plan candidates on real streams (cpu worker threads, "
                    "cuda or npu streams), measure them against the single-stream model in the "
                    "same process (warm-up, N runs, first ones dropped, medians), compare with "
                    "the simulator's prediction, check overlap, and recommend.",
                    glossary=("candidates", "verdicts", "triage"))
    model_arg(p, help="zoo name or path/to/file.py:factory")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--plan", metavar="FILE", help="a parastream.plan/1 document (parastream "
                   "plan -o FILE); its scale and phase are the run's, and a --scale or --phase "
                   "that differs is refused")
    g.add_argument("--auto", action="store_true", help="plan, simulate the candidates, run the "
                   "best few and keep the measured winner")
    candidate_arg(p, what="run with --plan")
    p.add_argument("--device", choices=("cpu", "cuda", "npu"), default="cpu",
                   help="where the streams run (default cpu: run executes here)")
    p.add_argument("--runs", type=int, default=7, metavar="N", help="timed runs per variant (>= 5; "
                   "default 7)")
    p.add_argument("--warmup", type=int, default=2, metavar="N", help="untimed warm-up runs (default 2)")
    p.add_argument("--drop", type=int, default=2, metavar="N", help="first timed runs dropped as "
                   "cold (default 2)")
    p.add_argument("--top", type=int, default=3, metavar="K", help="with --auto: candidates run "
                   "(default 3)")
    p.add_argument("--margin", type=float, default=0.05, help="speedup margin a candidate must "
                   "beat single stream by (default 0.05)")
    p.add_argument("--trace", metavar="DIR", help="write the captured timelines (Kineto JSON, "
                   "read by parastream analyze) and the plan document here; on cuda also "
                   "each run's torch profiler trace (<candidate>-torch.json, "
                   "single-torch.json)")
    p.add_argument("--check", action="store_true", help="compare every candidate's outputs with "
                   "the single-stream model (bitwise on cpu, tolerance on devices); exit 1 on a "
                   "mismatch")
    p.add_argument("--jitter", type=int, default=0, metavar="RUNS", help="with --check: also run "
                   "RUNS times with random per-op delays and stream interleavings")
    p.add_argument("--profile", metavar="FILE", help="device profile for the prediction (from "
                   "parastream calibrate [--device cuda] -o FILE); default on cpu and cuda: a quick "
                   "in-process calibration (npu: the shipped ascend910b profile)")
    shape_args(p, scale_note="a --plan's own, else small; 7b is meta-only")
    json_arg(p, "the result")
    p.add_argument("--pin", action="store_true", help="cpu: pin each stream's worker to its "
                   "own cores when they fit (no late stream starts from the OS placing two "
                   "workers on one core; slower for tiny ops: docs/benchmarks-run.md section 9)")
    p.add_argument("--side-by-side-only", dest="best_settings", action="store_false",
                   help="on cpu, skip measuring each side again in a process of its own in its "
                   "best OpenMP setting (single stream with threads spinning, streams with them "
                   "sleeping); skipped anyway when OMP_WAIT_POLICY is set")
    malloc.add_argument(p)
    p.set_defaults(func=cmd_run)


def require_runs(module: Any, inputs: tuple, runnable: Any, device: str, where: str) -> None:
    """Refuse (an :class:`InputError` naming ``where``) a model that raises on its example
    inputs, or whose traced program does, before a calibration and minutes of measuring
    are spent on it: an embedding index out of range only shows on real data, and a
    buffer rebound with another shape (``self.cache = torch.cat(...)``) is written back in
    place by the exported program. Inputs and state the call writes are restored."""
    from ..plan.model import Plan
    from .executor import MultiStreamExecutor, call_model

    single = Plan.single(o.name for o in runnable.graph.ops)
    with MultiStreamExecutor(module, inputs, single, backend=device, runnable=runnable) as ex, \
            model_fails(where, "on its example inputs",
                        traced="(parastream runs the graph torch.export or torch.fx traced; "
                               "the module itself ran)"), \
            ex.kept_state(inputs, every_input=True) as restore:
        call_model(module, inputs)
        restore()
        ex(*inputs)


#: why a call after the first can fail (:func:`later_calls_run`)
_LATER = "(the first call ran; its state, buffers or attributes, carries over from call to call)"


@contextlib.contextmanager
def model_fails(where: str, when: str, traced: str = "", model: str = "") -> Iterator[None]:
    """The model's own failure said in one line naming ``where`` (an :class:`InputError`),
    not as a traceback: a traced op that raised (:class:`StreamError`; the op, or a folded
    view it reads) or the module itself (:class:`ModelCallError`), ``when`` (``on its
    example inputs``), each with its note."""
    from ..errors import one_line
    from .backend import ModelCallError, StreamError

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


# ----------------------------------------------------------------------------- loading
def load_profile_for(args: argparse.Namespace) -> tuple[Any, str]:
    """The device profile and a sentence saying which one it is."""
    from ..device.profile import load_profile, profile_warning

    if args.profile:
        try:
            profile = load_profile(args.profile)
            note = profile_warning(profile)
            return profile, f"profile {args.profile}" + (f" ({note})" if note else "")
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(args.profile, f"not a device profile: {exc}") from None
    if args.device == "cpu":
        from .overhead import calibrated_profile

        notes: list[str] = []
        prof = calibrated_profile(quick=True, name="cpu-quick", warn=notes.append)
        return prof, "; ".join(["profile: calibrated in-process (quick mode); pass --profile "
                                "FILE from 'parastream calibrate -o FILE' for a steadier "
                                "prediction", *notes])
    if args.device == "cuda":
        import torch

        from .device_calibrate import calibrated_device_profile

        prof = calibrated_device_profile("cuda", quick=True, name="cuda-quick")
        return prof, (f"profile: calibrated in-process on {torch.cuda.get_device_name()} (quick: "
                      f"the executor's host cost {prof.launch_overhead_us:.3g} us per op, "
                      "matmul rates, copy bandwidth); pass --profile FILE from 'parastream "
                      "calibrate --device cuda -o FILE' for a steadier prediction")
    name = DEVICE_PROFILES[args.device]
    return load_profile(name), (f"profile: built-in {name!r} (not measured on this device; pass "
                                "--profile)")


def to_device(module: Any, inputs: tuple, device: str) -> tuple[Any, tuple]:
    """The module and its inputs (nested ones too) on ``device``; as they are on cpu."""
    if device == "cpu":
        return module, inputs
    import torch

    if device == "npu":
        from .cuda import import_torch_npu

        import_torch_npu()
    from torch.utils._pytree import tree_map

    dev = torch.device(device)  # nested inputs (a tuple or dict argument) move too
    return module.to(dev), tuple(tree_map(
        lambda t: t.to(dev) if isinstance(t, torch.Tensor) else t, tuple(inputs)))


#: what a busy machine means for a measured comparison (:class:`BusyWatch`'s note)
MEASURE_BUSY_ADVICE = ("the walls and speedups may be off (an OpenMP team stalls when "
                       "one of its threads is descheduled); measure again on a quiet machine")


# ----------------------------------------------------------------------------- the command
def cmd_run(args: argparse.Namespace) -> int:
    from ..cliargs import DEFAULT_SCALE
    from ..plan.io import (PlanDoc, dumps, load_doc, plan_shapes, require_fit,
                           with_recommendation)
    from ..plan.model import PlanError
    from ..report.atomic import (check_folder, check_not_input, check_writable, make_folder,
                                 same_file, spec_paths, write_atomic)

    check_folder(args.trace)  # both before a minute of measuring, not after it
    check_writable(args.json, made=args.trace)
    check_not_input("--json", args.json, spec_paths(args.model, args.plan, args.profile))
    if args.json and args.trace and same_file(args.json, args.trace):
        raise InputError(args.json, "--json names the --trace folder: give it a file's name")
    _check_trace_files(args, ("plan", "single"))
    if args.jitter < 0:
        raise InputError(None, f"--jitter must not be negative, got {args.jitter}")
    if args.jitter and not args.check:
        raise InputError(None, "--jitter RUNS checks outputs under random delays: it needs "
                               "--check")
    if args.candidate and not args.plan:
        raise InputError(None, "--candidate picks a candidate of --plan FILE; with --auto the "
                               "candidates are the planner's")
    if args.runs < 5:
        raise InputError(None, "--runs must be at least 5 (the first runs are dropped as cold)")
    if not 0 <= args.drop < args.runs:
        raise InputError(None, "--drop must be >= 0 and below --runs")
    if args.warmup < 0 or args.top < 1 or not 0 <= args.margin < float("inf"):
        raise InputError(None, "--warmup and --margin must be zero or more (--margin a finite "
                               "number), --top at least 1")
    if args.pin:
        from .executor import PIN_ENV

        os.environ[PIN_ENV] = "1"  # every executor here and in the processes it starts
    # before anything is measured, calibration included: it then runs as the model does
    malloc_note = malloc.apply(args.malloc)
    doc_in: PlanDoc | None = None
    op_costs = None  # op times from a single-stream capture (--auto)
    kernels = None  # cuda, --auto: the single-stream kernels, profiled once (single_kernels)
    if args.plan:
        doc_in, chosen = load_doc(args.plan, args.candidate)
        if args.candidate:
            args.candidate = chosen.name
        # the plan's shapes are the run's: one made at another scale has the same op names
        args.scale, args.phase = plan_shapes(doc_in, args.plan, args.scale, args.phase)
    args.scale = args.scale or DEFAULT_SCALE
    if args.device != "cpu":
        from .cuda import require_device

        require_device(args.device)
    from ..graph.models import load_model, model_source

    module, inputs, name, meta = load_model(args.model, args.scale, args.phase)
    module, inputs = to_device(module, inputs, args.device)
    from ..graph.models import anchored
    from ..graph.torch_import import import_runnable

    with anchored(meta):
        runnable = import_runnable(module, inputs, name=name,
                                   meta={"scale": args.scale, "phase": args.phase})
    graph = runnable.graph
    for note in graph.meta.get("notes", ()):  # as graph, plan and simulate say it
        print(f"parastream: note: {args.model}: {note}", file=sys.stderr)
    if not graph.ops:  # as plan and simulate say it, before a calibration is spent on it
        raise InputError(args.model, "the graph has no ops: nothing to run")
    if doc_in is not None:  # a plan for another model fails before anything is printed
        require_fit(graph, doc_in.candidate(args.candidate or doc_in.recommended), args.plan)
    require_runs(module, inputs, runnable, args.device, args.model)
    profile, profile_note = load_profile_for(args)
    out = sys.stdout
    out.write(f"model {name} (scale {args.scale}): {len(graph.ops)} ops; device {args.device}\n")
    out.write(profile_note + "\n")
    out.write(malloc_note + "\n")

    from ..plan.cli import build

    if doc_in is not None:
        doc = doc_in
        chosen = [doc.candidate(args.candidate or doc.recommended)]
        if chosen[0].algorithm == "single" or chosen[0].stream_count() <= 1:
            multi = [c for c in doc.candidates if c.stream_count() > 1]
            if multi:
                out.write(f"the plan recommends {chosen[0].name!r} (single stream); also running "
                          f"its best multi-stream candidate {multi[0].name!r}\n")
                chosen.append(multi[0])
        current = chosen[0].name
    else:
        try:
            doc = build(graph, profile, algorithm=None, mapping=None, max_streams=None,
                        source={"model": model_source(args.model), "scale": args.scale,
                                "phase": args.phase})
        except PlanError as exc:
            raise InputError(args.model, str(exc)) from None
        multi = [c for c in doc.candidates if c.stream_count() > 1]
        # (cuda: the single-stream kernels profiled once, for the ranking and the triage)
        with later_calls_run(args.model):
            kernels = single_kernels(module, inputs, runnable, args.device) if multi else None
            ranked, op_costs = rank_by_op_times(module, inputs, runnable, profile, multi,
                                                device=args.device, kernels=kernels)
        chosen = ranked[:args.top]
        current = doc.recommended if doc.recommended != "single" else None
        if not multi:
            out.write(f"--auto: {len(doc.candidates)} candidates simulated, none of them "
                      "multi-stream (the model has no parallel point the planner can use)\n")
        else:
            how = (("again from the op times of a single-stream capture (5 runs)"
                    if args.device != "cuda" else "again from the kernels of a profiled "
                    "single-stream run") if op_costs is not None else "on the profile")
            out.write(f"--auto: {len(doc.candidates)} candidates simulated, the multi-stream "
                      f"ones {how}; running the best {len(chosen)}\n")
    for c in chosen:
        require_fit(graph, c, args.plan or args.model)
    # every file --trace will hold, before the measuring: a folder in the place of one
    # (tr/plan.json/) failed after the whole run and left the others written
    _check_trace_files(args, [_candidate_label(c.name) for c in chosen]
                       + ([_torch_label(c.name) for c in chosen] + ["single-torch"]
                          if args.device == "cuda" else []))

    # a plan file's estimates may come from another calibration of the same name: only
    # estimates made now, on this profile, are reused
    with later_calls_run(args.model):
        result = run_candidates(module, inputs, runnable, doc, chosen, profile,
                                device=args.device, runs=args.runs, warmup=args.warmup,
                                drop=args.drop, check=args.check, jitter=args.jitter,
                                reuse_estimates=doc_in is None, op_costs=op_costs,
                                kernel_single=kernels)
    if result["busy"]:
        out.write(f"warning: {result['busy']}\n")
    from . import baseline
    from .recommend import recommend

    if args.device == "cpu" and args.best_settings and baseline.wanted():
        out.write("measuring each side again in a process of its own: single stream with "
                  "OpenMP threads spinning, the candidates with them sleeping\n")
        iso = baseline.best_settings(args.model, args.scale, args.phase, doc,
                                     [c.name for c in chosen if c.stream_count() > 1],
                                     runs=args.runs, warmup=args.warmup, drop=args.drop)
        result["separate_processes"] = iso
        baseline.attach(result["candidates"], iso)
    rec = recommend(result["candidates"], current=current, margin=args.margin,
                    busy_share=result["busy_share"], notes=[result["busy"]],
                    device=args.device)
    result["recommendation"] = rec.to_dict()
    result["profile"] = profile_note
    result["malloc"] = args.malloc
    result["malloc_note"] = malloc_note
    _print(out, result, rec)
    if args.trace:
        make_folder(args.trace)
        from ..report.kineto import write_kineto

        for label, tl in _run_timelines(result["_runs"]):
            write_kineto(_trace_file(args.trace, label), tl, label)
        # recommending what the measurement chose, as the demo's folder does
        write_atomic(_trace_file(args.trace, "plan"),
                     dumps(with_recommendation(doc, rec.candidate or "single")))
        out.write(f"timelines written to {args.trace}/ (parastream analyze DIR/<candidate>.json "
                  f"--baseline DIR/single.json --plan DIR/plan.json)\n")
        if result.get("_torch"):
            _torch_traces(args.trace, module, inputs, result["_torch"], args.device, out)
    result.pop("_runs", None)
    result.pop("_torch", None)
    if args.json:  # named by a schema, as parastream's documents are (analyze DIR skips it)
        write_atomic(args.json, json.dumps({"schema": "parastream.run/1",
                                            **_jsonable(result)}, indent=1))
    if args.check and any(c.outputs_ok is False for c in result["candidates"]):
        return 1
    return 0


def single_kernels(module: Any, inputs: tuple, runnable: Any, device: str) -> Any:
    """On cuda, the single-stream plan's ops as its kernels ran in one profiled run
    (:func:`_profiled`; None without annotation spans): the op times of ``--auto``'s
    ranking and the baseline every candidate's kernels are triaged on. None elsewhere."""
    from ..plan.model import Plan

    if device != "cuda":
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
    from ..sim.run import measured_costs
    from .measure import measure

    if device == "cuda":
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
    (:func:`capture_op_costs`; on cuda from ``kernels`` when given). The profile alone under-predicts ops inside a model by
    20-50% on a CPU, unevenly across op types (docs/benchmarks-run.md section 7), which
    can misorder candidates; the op times do better. Returns (ranked, costs); the
    candidates in their given order and None when there is no capture."""
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


def run_candidates(module: Any, inputs: tuple, runnable: Any, doc: Any, chosen: list,
                   profile: Any, *, device: str = "cpu", runs: int = 7, warmup: int = 2,
                   drop: int = 2, check: bool = False, jitter: int = 0,
                   reuse_estimates: bool = False, on_candidate: Any = None,
                   op_costs: dict | None = None, kernel_single: Any = None) -> dict:
    """Measure each chosen candidate against single stream; predict, analyse, check.

    ``op_costs``: op times from a separate single-stream capture (:func:`rank_by_op_times`)
    for the "predicted from ops" figure; without them the first candidate's own
    single-stream runs give them (on cuda: the single-stream kernels). ``kernel_single``
    (cuda): :func:`single_kernels` when the caller already profiled them; else profiled
    here.

    Returns ``candidates`` (:class:`CandidateResult` s), ``details`` (JSON-ready), ``busy``
    (a warning when other tasks took half the cores during the measurement, else None),
    and, for callers that write reports, ``_runs`` (candidate name -> (Measurement,
    analysis)).
    ``on_candidate(k, n, plan)`` is called before each candidate runs (progress)."""
    from ..graph.ir import validate
    from ..sim.run import measured_costs, sim_label, simulate_plan
    from ..plan.model import Plan
    from .executor import Jitter, MultiStreamExecutor
    from .measure import analyse, late_starts, measure
    from .recommend import CandidateResult, busy_evidence

    graph = runnable.graph
    order = validate(graph)  # once for every plan simulated below
    label = sim_label(profile)
    single_wall: dict[str, float] = {}

    def predicted(plan: Plan) -> tuple[float, float]:
        """(multi, single) predicted walls: the plan's own estimate when the planner just
        simulated it on this profile, else a fresh simulation."""
        if reuse_estimates and plan.estimate is not None and plan.estimate.source == label:
            return plan.estimate.wall_us, plan.estimate.single_stream_wall_us
        if "single" not in single_wall:
            base = Plan.single(o.name for o in graph.ops)
            single_wall["single"] = simulate_plan(graph, base, profile,
                                                  order=order).result.wall_us
        return (simulate_plan(graph, plan, profile, order=order).result.wall_us,
                single_wall["single"])

    results: list[CandidateResult] = []
    details: list[dict] = []
    # op_costs: given, or from the first measured single-stream executor runs
    runs_by_name: dict[str, tuple[Any, dict]] = {}
    torch_raw: dict[str, bytes] = {}  # cuda: each candidate's annotated profiler trace
    # cuda: the single-stream plan's kernels, the baseline every candidate's are triaged on,
    # and the op times when none were given (the timed runs record no timeline there)
    if kernel_single is None:
        kernel_single = single_kernels(module, inputs, runnable, device)
    if op_costs is None and kernel_single is not None:
        op_costs = capture_op_costs(module, inputs, runnable, profile, device=device,
                                    kernels=kernel_single)
    from ..graph.calibrate import BusyWatch, cpu_count

    @functools.cache
    def single_program_ok() -> bool:
        """Whether the traced program on one stream gives the module's outputs (checked
        once, when a candidate's do not): tells a plan's missing wait from a wrong trace."""
        single = Plan.single(o.name for o in graph.ops)
        with MultiStreamExecutor(module, inputs, single, backend=device,
                                 runnable=runnable) as ex:
            return ex.check(*inputs, runs=2).ok

    # the host's threads issue every backend's ops: a neighbour on the cores skews them
    with BusyWatch(cpu_count()) as watch:
        for k, c in enumerate(chosen, 1):
            if on_candidate is not None:
                on_candidate(k, len(chosen), c)
            pred, pred_single = predicted(c)
            ok = None
            check_note = None
            if check:
                with MultiStreamExecutor(module, inputs, c, backend=device,
                                         runnable=runnable) as ex:
                    cmp = ex.check(*inputs, runs=2)
                if cmp.ok and jitter:
                    with MultiStreamExecutor(module, inputs, c, backend=device, runnable=runnable,
                                             jitter=Jitter(seed=1)) as ex:
                        cmp = ex.check(*inputs, runs=jitter)
                ok, check_note = cmp.ok, cmp.describe() if cmp.ok else (cmp.error or cmp.describe())
                if not cmp.ok and not single_program_ok():
                    check_note += ("; the single-stream program differs too: the traced "
                                   "program is not the module's (an import problem, not "
                                   "this plan's)")
                if cmp.ok:
                    check_note += (f" in 2 runs, then {jitter} runs with random delays and stream "
                                   "orders" if jitter else " in 2 runs")
            # on cuda the timed runs go without the backend's per-op timing events (a host
            # cost the plain module does not pay): the kernels come from a profiled run. An
            # npu has no such run here, so its event timeline stays the one analysed
            m = measure(module, inputs, c, backend=device, runs=runs, warmup=warmup,
                        drop=drop, runnable=runnable, timelines=device != "cuda")
            if op_costs is None and m.single_timelines:
                op_costs = measured_costs(graph, profile, m.single_timelines)
            from_ops = (simulate_plan(graph, c, profile, costs=op_costs, order=order).result.wall_us
                        if op_costs is not None else None)
            if device == "cuda":
                # the kernels as they ran, not the launch-inclusive event brackets: the
                # analysis below and --trace's timelines take these (runtime/profiler.py)
                raw, tl = _profiled(module, inputs, runnable, c, device)
                torch_raw[c.name] = raw
                if tl is not None:
                    m.multi_timeline, m.multi_timelines = tl, [tl]
                if kernel_single is not None:
                    m.single_timeline, m.single_timelines = kernel_single, [kernel_single]
            an = analyse(m, doc, c.name)
            runs_by_name[c.name] = (m, an)
            pts = an.get("plan_check", {}).get("parallel_points", [])
            found = [p for p in pts if p.get("found")]
            results.append(CandidateResult(
                name=c.name, speedup=m.speedup, single_median_us=m.single_median_us,
                multi_median_us=m.multi_median_us, predicted_wall_us=pred,
                predicted_single_us=pred_single, predicted_from_ops_us=from_ops,
                overlap_pcts=[p["overlap_pct"] for p in found], verdicts=[p["verdict"] for p in found],
                busy_overlap_pcts=[p["busy_overlap_pct"] for p in found],
                triage=an.get("triage", {}).get("verdict"), outputs_ok=ok,
                speedup_quartiles=m.speedup_quartiles, streams=m.streams))
            tri = an.get("triage", {})
            details.append({"candidate": c.name, "algorithm": c.algorithm, "streams": m.streams,
                            "measurement": m.summary(), "predicted_wall_us": round(pred, 3),
                            "predicted_single_us": round(pred_single, 3),
                            "prediction_error": round((pred - m.multi_median_us) / m.multi_median_us, 4)
                            if m.multi_median_us else None,
                            "predicted_from_ops_us": round(from_ops, 3) if from_ops is not None else None,
                            "prediction_from_ops_error": round((from_ops - m.multi_median_us)
                                                               / m.multi_median_us, 4)
                            if from_ops is not None and m.multi_median_us else None,
                            "parallel_points": found,
                            "placement": {k: an.get("plan_check", {}).get(k) for k in
                                          ("misplaced_count", "side_stream_never_ran", "stream_mapping")},
                            "triage": {"verdict": tri.get("verdict"), "summary": tri.get("summary"),
                                       "evidence": tri.get("evidence", [])},
                            "start_lag": late_starts(m, c) if device == "cpu" else {},
                            "timeline": ("torch profiler: each op's kernels "
                                         "(gpu_user_annotation spans), one run"
                                         if m.multi_timeline is not None
                                         and m.multi_timeline.format == "torch-profiler"
                                         else "the backend's own recording"),
                            "check": check_note})
    return {"model": graph.name, "device": device, "runs": runs, "drop": drop,
            "candidates": results, "details": details, "_runs": runs_by_name,
            "_torch": torch_raw,
            "busy": watch.note("the measurement", MEASURE_BUSY_ADVICE),
            # what withholds a win (recommend)
            "busy_share": busy_evidence(watch.busy_share(), len(watch.samples), device)}


def _run_timelines(runs_by_name: dict) -> list[tuple[str, Any]]:
    """(label, timeline) pairs of :func:`run_candidates`' runs: each candidate's median
    multi-stream run, then the first single-stream run (the baseline for analyze)."""
    out = [(_candidate_label(name), m.multi_timeline) for name, (m, _) in runs_by_name.items()
           if m.multi_timeline is not None]
    single = next((m.single_timeline for m, _ in runs_by_name.values()
                   if m.single_timeline is not None), None)
    if single is not None:
        out.append(("single", single))
    return out


def _print(out, result: dict, rec) -> None:
    from rich.console import Console
    from rich.table import Table

    from .executor import pin_streams

    console = Console(file=out, width=160)
    t = Table(title=f"single vs multi-stream, medians of {result['runs'] - result['drop']} runs "
              f"(first {result['drop']} dropped)",
              caption="speedup: median single-stream wall over median multi-stream wall; "
                      "(a-b): quartiles of the rounds' own speedups (each round's single-stream "
                      "wall over its multi-stream wall), which need not contain it when the "
                      "machine's speed moves between rounds")
    for col in ("candidate", "streams", "single us", "multi us", "speedup", "predicted us",
                "pred. speedup", "pred. from ops us", "overlap_pct", "verdicts", "triage",
                "outputs"):
        t.add_column(col)
    for r, d in zip(result["candidates"], result["details"]):
        pred_sp = r.predicted_speedup or 0.0
        t.add_row(r.name[:48], str(d["streams"]), f"{r.single_median_us:,.0f}",
                  f"{r.multi_median_us:,.0f}", f"{r.speedup:.2f}x" + (
                      f" ({r.speedup_quartiles[0]:.2f}-{r.speedup_quartiles[1]:.2f})"
                      if r.speedup_quartiles else ""),
                  f"{r.predicted_wall_us:,.0f}" if r.predicted_wall_us is not None else "-",
                  f"{pred_sp:.2f}x",
                  f"{r.predicted_from_ops_us:,.0f}" if r.predicted_from_ops_us is not None else "-",
                  ", ".join(f"{p:.2f}" for p in r.overlap_pcts[:3]) or "-",
                  ", ".join(r.verdicts[:3]) or "-", r.triage or "-",
                  "-" if r.outputs_ok is None else ("identical" if r.outputs_ok else "DIFFER"))
    console.print(t)
    iso = result.get("separate_processes")
    if iso:
        single = f"{iso['single_us']:,.0f} us" if iso.get("single_us") else "-"
        cands = "; ".join(f"{n[:40]} {us:,.0f} us" for n, us in iso["candidates_us"].items())
        console.print(f"in separate processes (each side in its best OpenMP setting): single "
                      f"stream, threads spinning {single}; candidates, threads sleeping: "
                      f"{cands or '-'}. The recommendation takes the faster figure of each side."
                      + (f" Not measured: {'; '.join(iso['errors'])}" if iso["errors"] else ""),
                      markup=False)
    for d in result["details"]:
        if d.get("check"):
            console.print(f"{d['candidate'][:60]}: check: {d['check']}", markup=False)
        m = d["measurement"]
        console.print(f"{d['candidate'][:60]}: single-stream executor {m['single_executor_median_us']:,.0f} us "
                      f"(plain module {m['single_median_us']:,.0f} us, {m['single_threads']} threads); "
                      f"multi {m['multi_threads_per_stream']} thread(s)/stream; triage "
                      f"{d['triage']['verdict']}: {d['triage']['summary']}", markup=False)
        line = faults_line(d["candidate"], m.get("faults_per_call"), result.get("device"),
                           result.get("malloc"))
        if line:
            console.print(line, markup=False)
        lag = d.get("start_lag") or {}
        if lag.get("frequent") and not pin_streams():
            console.print(f"{d['candidate'][:60]}: in {lag['late_runs']} of {lag['runs']} runs a "
                          f"stream started its first op {lag['threshold_us']:,.0f} us or more "
                          f"after it could (median of those {lag['late_median_us']:,.0f} us): "
                          "most likely the OS queued two stream workers on one core. --pin "
                          "gives each its own (slower for tiny ops; docs/benchmarks-run.md "
                          "section 9)", markup=False)
    word = {"keep": "KEEP", "change": "CHANGE CANDIDATE", "single": "STAY SINGLE-STREAM"}[rec.action]
    console.print(f"recommendation: {word} - {rec.summary}", markup=False)
    for e in rec.evidence:
        console.print(f"  evidence: {e}", markup=False)


def faults_line(candidate: str, faults: list | None, device: str | None,
                malloc_choice: str | None) -> str | None:
    """The line ``run`` prints about a candidate's page faults per call (plain module,
    multi-stream), or None when there were none (or not on the cpu backend, where the
    process-wide count holds the driver's faults too)."""
    if not faults or max(faults) <= 0 or device != "cpu":
        return None
    return (f"{candidate[:60]}: page faults per call, median: plain module {faults[0]:,.0f}, "
            f"multi-stream {faults[1]:,.0f} (mostly memory the allocator gave back to the OS "
            "and maps again, about a microsecond each on a VM; the prediction has none of it"
            + ("; --malloc keep avoids most" if malloc_choice == "system" else "") + ")")


def _check_trace_files(args: argparse.Namespace, labels: Iterable[str]) -> None:
    """Each of ``--trace``'s files for ``labels`` can be written, and none is ``--json``
    (the run's summary replaced the single-stream trace)."""
    from ..report.atomic import check_writable, same_file

    if not args.trace:
        return
    for label in labels:
        path = _trace_file(args.trace, label)
        check_writable(path, made=args.trace)
        if args.json and same_file(args.json, path):
            raise InputError(args.json, f"--json and --trace's {label} timeline name the "
                                        "same file")


def _torch_traces(folder: str, module: Any, inputs: tuple, raws: dict[str, bytes],
                  device: str, out: Any) -> None:
    """On cuda, also each candidate's annotated run and the plain model as the torch
    profiler saw them (``<candidate>-torch.json``, ``single-torch.json``)."""
    from ..report.atomic import write_atomic
    from .profiler import capture_torch_trace

    for name, raw in raws.items():
        write_atomic(_trace_file(folder, _torch_label(name)), raw)
    capture_torch_trace(lambda: module(*inputs), _trace_file(folder, "single-torch"), device)
    out.write(f"torch profiler traces written to {folder}/ (parastream analyze "
              "DIR/<candidate>-torch.json --baseline DIR/single-torch.json)\n")


def _candidate_label(candidate: str) -> str:
    """A candidate's file label in ``--trace``'s folder: ``single`` and ``plan`` name the
    baseline and the plan document there, so a candidate of either name gets ``-plan`` /
    ``-candidate`` added (a plan's own single-stream candidate ran through the executor is
    another run than the single-stream baseline)."""
    return {"single": "single-plan", "plan": "plan-candidate"}.get(_safe(candidate), candidate)


def _torch_label(candidate: str) -> str:
    """A candidate's torch profiler trace's label (``single-torch`` is the plain model's)."""
    return f"{_candidate_label(candidate)}-torch"


def _profiled(module: Any, inputs: tuple, runnable: Any, plan: Any,
              device: str) -> tuple[bytes, Any]:
    """One run of ``plan`` under the torch profiler with each op annotated: the trace's
    bytes and the plan's ops from it (:func:`~parastream.runtime.profiler.kernel_timeline`;
    None when the trace has no annotation spans)."""
    from .executor import MultiStreamExecutor
    from .profiler import kernel_timeline, profile_call

    import msgspec
    import torch

    with MultiStreamExecutor(module, inputs, plan, backend=device, runnable=runnable) as ex:
        ex.annotate = True
        raw = profile_call(lambda: ex.run(*inputs), device)
    return raw, kernel_timeline(msgspec.json.decode(raw), plan.assignment,
                                f"{plan.name} (torch profiler)",
                                device=torch.cuda.get_device_name() if device == "cuda" else None)


def _trace_file(folder: str, label: str) -> str:
    """Where ``--trace`` writes ``label``'s file (a candidate, ``single``, ``plan``): one
    name for the up-front checks and the writes."""
    return os.path.join(folder, _safe(label) + ".json")


def _safe(label: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)
    return keep.strip("_")[:80] or "candidate"


def _jsonable(x: Any) -> Any:
    from dataclasses import asdict, is_dataclass

    if is_dataclass(x):
        return asdict(x)
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


__all__ = ["add_parser", "cmd_run", "run_candidates"]
