"""``parastream demo``: the whole loop on a built-in model, on this machine.

import -> decompose (modules, parallel points, headroom) -> calibrate the local CPU (or
load ``--profile``) -> plan candidates -> simulate them -> run the best candidates (ranked
again from this model's op times in one short single-stream capture) and the single-stream
baseline on real streams (the cpu backend) -> analyse the captured timeline (placement, overlap_pct
per parallel point, triage) -> a report folder:

- ``report.html``: one self-contained page: the measured run's Gantt chart with side windows
  and dominators, the verdicts, and a summary with the module table and DAG, the candidates
  and predicted vs measured wall;
- ``plan.json`` / ``plan.md`` (the 8-field fragments, field 6 filled from the run);
- ``analysis.json`` (measured analysis, plan check, triage) and ``trace.json`` (the
  measured multi-stream run, readable by ``parastream analyze`` and Perfetto).

Every figure says where it comes from: "simulated on <profile>" or "measured, CPU".

``--device cuda`` runs the same loop on the GPU: the model on the device, a quick
calibration of the GPU (:mod:`parastream.runtime.device_calibrate`) instead of the CPU's,
the cuda backend's streams, the measured run analysed from its kernels under the torch
profiler, figures labelled with the GPU's name; no separate-process pass (that is about
the CPU's OpenMP threads).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from .runtime import malloc

DEFAULT_MODEL = "medusa_heads"
DEFAULT_SCALE = "small"
#: what the report folder holds (cpu-profile.json: the profile it predicted with, calibrated
#: or from --profile FILE; cuda-profile.json with --device cuda)
DEMO_FILES = ("report.html", "plan.json", "plan.md", "analysis.json", "trace.json",
              "cpu-profile.json")


@dataclass
class DemoResult:
    out_dir: str
    model: str
    recommended: str
    measured: list[dict] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    verdict: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # e.g. a separate process that failed
    summary: str = ""  # the recommendation's one line ("use matching: 1.58x measured")
    device_name: str = ""  # where it ran: "this CPU", or the GPU's name


@contextmanager
def _steps(enabled: bool, total: int):
    import sys

    if not enabled or not sys.stderr.isatty():
        yield lambda msg: print(f"  {msg}", file=sys.stderr)
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=False) as prog:
        task = prog.add_task("parastream demo", total=total)

        def step(msg: str) -> None:
            prog.update(task, description=msg)
            prog.advance(task)

        yield step


def run_demo(out_dir: str = "out/demo", model: str = DEFAULT_MODEL, scale: str = DEFAULT_SCALE,
             phase: str | None = None, runs: int = 11, candidates_to_run: int = 2,
             progress: bool = True, profile_path: str | None = None,
             best_settings: bool = True, device: str = "cpu") -> DemoResult:
    """Run the whole loop and write the report folder; returns what was measured."""
    import msgspec
    import torch

    from .device.profile import load_profile, loads_profile, read_profile_file
    from .graph.calibrate import dumps as dump_profile
    from .runtime.overhead import calibrate_cpu
    from .graph.headroom import analyze_graph
    from .graph.render import analysis_document, module_dag, module_mermaid
    from .graph.torch_import import import_runnable
    from .plan.cli import build
    from .plan.io import dumps as dump_plan
    from .plan.io import with_recommendation
    from .plan.report import render_markdown
    from .report.atomic import check_folder, check_writable, make_folder, write_atomic
    from .report.html import write_html
    from .report.kineto import write_kineto
    from .runtime import baseline
    from .runtime.recommend import recommend
    from .timeline.analyze import Options, analyze_capture

    profile_file = f"{device}-profile.json"
    check_folder(out_dir)
    for name in DEMO_FILES + (profile_file,):  # a folder in the way fails now, not at the end
        check_writable(os.path.join(out_dir, name), made=out_dir)
    where = "this CPU"
    if device == "cuda":
        from .runtime.cuda import require_device

        require_device("cuda")
        where = torch.cuda.get_device_name()
    t_start = time.perf_counter()
    with _steps(progress, 9) as step:
        step(f"importing {model} ({scale})")
        from .graph.models import anchored, load_model

        module, inputs, _, meta = load_model(model, scale, phase)
        phase = meta.get("phase", phase)
        from .runtime.cli import to_device

        module, inputs = to_device(module, inputs, device)
        with anchored(meta):
            runnable = import_runnable(module, inputs, name=model)
        graph = runnable.graph

        if profile_path:
            step(f"loading the device profile {profile_path}")
            # a copy in the report folder, as when the demo calibrates: the plan names the
            # profile, and 'parastream simulate out/demo/plan.json' finds it beside the plan
            # (a shipped profile's name needs no copy); the file is read once, for both
            profile_json = None
            if os.path.isfile(profile_path):
                profile_json = read_profile_file(profile_path)
                profile = loads_profile(profile_json, profile_path)
            else:
                profile = load_profile(profile_path)
        elif device == "cuda":
            from .runtime.device_calibrate import calibrate_device

            step(f"calibrating {where}")  # named as calibrate --device cuda names it
            profile_json = dump_profile(calibrate_device("cuda", quick=True))
            profile = loads_profile(profile_json)
        else:
            step("calibrating the local CPU")
            profile_json = dump_profile(calibrate_cpu(quick=True, name="cpu-calibrated",
                                                      warn=lambda note: step(f"warning: {note}")))
            profile = loads_profile(profile_json)
        make_folder(out_dir)  # only once the model and the profile are good

        step("decomposing the model")
        analysis = analyze_graph(graph, profile)
        graph_doc = analysis_document(analysis, graph, profile, source=model, scale=scale,
                                      phase=phase)
        graph_doc["module_dag_mermaid"] = module_mermaid(analysis.decomposition)
        module_graph = module_dag(analysis.decomposition)

        step("planning and simulating candidates")
        doc = build(graph, profile, algorithm=None, mapping=None, max_streams=None,
                    source={"model": model, "scale": scale, "phase": phase})
        from .runtime.cli import rank_by_op_times, run_candidates, single_kernels

        # the candidates to run: best first by this model's own op times (one short
        # single-stream capture; cuda: its kernels, profiled once for this and the triage),
        # which the profile alone predicts 20-50% low, unevenly
        kernels = single_kernels(module, inputs, runnable, device)
        multi, op_costs = rank_by_op_times(module, inputs, runnable, profile,
                                           [c for c in doc.candidates if c.stream_count() > 1],
                                           device=device, kernels=kernels)
        multi = multi[:candidates_to_run]

        def running(k: int, n: int, cand) -> None:
            step(f"running candidate {k}/{n}: {cand.name[:50]}")

        # the planner already simulated every candidate on this profile: its estimates stand
        result = run_candidates(module, inputs, runnable, doc, multi, profile, runs=runs,
                                reuse_estimates=True, on_candidate=running, op_costs=op_costs,
                                device=device, kernel_single=kernels)
        busy = result["busy"]
        if busy:
            step(f"warning: {busy}")
        runs_by_name = result["_runs"]
        iso = None
        if device != "cpu":
            step("separate processes skipped: they set the CPU's OpenMP threads")
        elif best_settings and baseline.wanted():
            step("each side again in a process of its own (best OpenMP setting)")
            iso = baseline.best_settings(model, scale, phase, doc, [c.name for c in multi],
                                         runs=runs, warmup=2, drop=2)
            baseline.attach(result["candidates"], iso)
        else:
            step("separate processes skipped: " + ("--side-by-side-only" if not best_settings
                                                   else "OMP_WAIT_POLICY is set"))
        measured: list[dict] = []
        for c, r, d in zip(multi, result["candidates"], result["details"]):
            predicted = r.predicted_wall_us
            pred_speedup = r.predicted_speedup
            measured.append({
                "candidate": r.name, "streams": c.streams,
                "predicted_multi_us": round(predicted, 1),
                "predicted_single_us": round(r.predicted_single_us, 1),
                "predicted_speedup": round(pred_speedup, 4) if pred_speedup else None,
                "predicted_from_ops_us": round(r.predicted_from_ops_us, 1)
                if r.predicted_from_ops_us is not None else None,
                "measured_single_us": round(r.single_median_us, 1),
                "measured_multi_us": round(r.multi_median_us, 1),
                "measured_speedup": round(r.speedup, 3),
                "prediction_error_pct": round(100 * d["prediction_error"], 1)
                if d["prediction_error"] is not None else None,
                "overlap_pct": [round(p, 4) for p in r.overlap_pcts],
                "busy_overlap_pct": [round(p, 4) for p in r.busy_overlap_pcts],
                "runs_kept": len(runs_by_name[r.name][0].multi_walls_us),
                "separate_single_spinning_us": round(r.iso_single_us, 1)
                if r.iso_single_us else None,
                "separate_multi_us": round(r.iso_multi_us, 1) if r.iso_multi_us else None,
            })
        step("analysing the measured timeline")
        # the same decision as `parastream run`: never a plan under the speedup margin, each
        # side taken in its best setting
        decision = recommend(result["candidates"], notes=[busy],
                             busy_share=result["busy_share"], device=device)
        rec = decision.candidate or "single stream"
        # the report shows the recommended candidate's run, else the one closest to winning
        best = decision.closest
        m, res = runs_by_name[best] if best else (None, {})
        plan_check = res.get("plan_check")
        tl = m.multi_timeline if m else None
        cap = analyze_capture(tl, Options(main_stream="0")) if tl is not None else None
        if cap is not None and plan_check is not None:
            cap["plan_check"] = plan_check

        step("writing the report")
        measured_by_name = {}
        for r in measured:
            mm, rr = runs_by_name[r["candidate"]]
            entry = dict(rr.get("plan_check") or {})
            entry["walls"] = {"single_median_us": mm.single_median_us, "multi_median_us": mm.multi_median_us,
                              "speedup": mm.speedup,
                              "label": "measured, CPU" if device == "cpu" else f"measured, {where}"}
            measured_by_name[r["candidate"]] = entry
        # the folder's documents agree on one recommendation, the measured one: `emit
        # plan.json` with no --candidate then generates what the measurement chose
        doc = with_recommendation(doc, decision.candidate or "single")
        # the profile goes in with the documents made from it, not before: a run that
        # fails on the way leaves the folder's earlier profile beside its earlier plan
        if profile_json is not None:
            write_atomic(os.path.join(out_dir, profile_file), profile_json)
        write_atomic(os.path.join(out_dir, "plan.json"), dump_plan(doc))
        write_atomic(os.path.join(out_dir, "plan.md"), render_markdown(doc, measured_by_name))
        analysis_json = {"schema": "parastream.demo/1", "model": model, "scale": scale, "phase": phase,
                         "device": device if device == "cpu" else where,
                         "device_profile": profile.name, "recommended": rec, "measured": measured,
                         "separate_processes": iso, "decision": decision.to_dict(),
                         "headroom": graph_doc.get("headroom"),
                         "triage": res.get("triage"), "plan_check": plan_check,
                         "capture": cap}
        write_atomic(os.path.join(out_dir, "analysis.json"),
                     msgspec.json.format(msgspec.json.encode(analysis_json), indent=1))
        files = ["report.html", "plan.json", "plan.md", "analysis.json"]
        if tl is not None:
            # labelled with its candidate, as run --trace's timelines are: analyze --plan
            # beside it checks that candidate, not the plan's (often single) recommendation
            write_kineto(os.path.join(out_dir, "trace.json"), tl, label=best)
            files.append("trace.json")
            summary = _summary(model, scale, phase, profile.name, rec, measured, graph_doc, doc,
                               res.get("triage"), where=where)
            summary["module_dag"] = module_graph
            write_html(os.path.join(out_dir, "report.html"), [(tl, cap)], summary,
                       title=f"parastream demo: {model} ({scale}) on {where}")
        step("done")
    torch.set_num_threads(os.cpu_count() or 1)
    verdict = (res.get("triage") or {}).get("verdict", "")
    notes = [f"not measured in a separate process: {e}" for e in (iso or {}).get("errors", [])]
    return DemoResult(out_dir, model, rec, measured, files, verdict,
                      round(time.perf_counter() - t_start, 1), notes, decision.summary, where)


def _summary(model, scale, phase, device, rec, measured, graph_doc, doc, triage,
             where: str = "this CPU") -> dict:
    """What the report's summary section shows (rendered as tables by the HTML report)."""
    mods = [{k: m.get(k) for k in ("module_id", "module_name", "module_type", "side_effect",
                                   "resource_hint")} for m in graph_doc.get("modules", [])][:40]
    cands = [{"candidate": c.name, "streams": c.streams, "waits": len(c.events),
              "strength": c.strength,
              "estimate": f"{c.estimate.wall_us:.1f} us, {c.estimate.speedup:.2f}x ({c.estimate.source})"
              if c.estimate else "-",
              "lints": sum(1 for l in c.lints if l.severity in ("error", "warning"))}
             for c in doc.candidates[:12]]
    out = {"model": f"{model} ({scale}, {phase})", "recommendation": rec,
           "figures": (f"measured: CPU ({os.cpu_count()} cores)" if where == "this CPU"
                       else f"measured: {where}") + ", median of the kept runs; "
                      f"predicted: simulated on {device}",
           "predicted_vs_measured": measured, "headroom": graph_doc.get("headroom"),
           "candidates": cands, "modules": mods,
           "module_dag_mermaid": graph_doc.get("module_dag_mermaid", "")}
    if triage:
        out["triage"] = {k: triage[k] for k in ("verdict", "summary", "wall_change_pct", "evidence")}
    return out


def add_parser(sub) -> None:
    from .cliargs import add_command, shape_args

    p = add_command(sub, "demo", help="the whole loop on a built-in model: plan, simulate, run, "
                                      "verify",
                    description="Import a zoo model, decompose it, calibrate this CPU, plan and "
                    "simulate candidates, run the best ones and the single-stream baseline on "
                    "real CPU streams, analyse the captured timeline, and write a report folder.",
                    glossary=("candidates", "verdicts", "triage"))
    p.add_argument("--out", default="out/demo", metavar="DIR",
                   help="report folder (default out/demo)")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"zoo model (default {DEFAULT_MODEL})")
    shape_args(p, default_scale=DEFAULT_SCALE)
    p.add_argument("--runs", type=int, default=11, help="timed runs per configuration (default 11, "
                   "first 2 dropped)")
    p.add_argument("--candidates", type=int, default=2, help="candidates to run (default 2)")
    p.add_argument("--profile", help="a device profile from 'parastream calibrate' (default: "
                   "calibrate quickly now)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the streams run (default cpu; cuda: torch's cuda streams, the "
                        "GPU calibrated instead of the CPU)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar: each step as a plain line on stderr (as when stderr "
                        "is no terminal)")
    p.add_argument("--side-by-side-only", dest="best_settings", action="store_false",
                   help="skip measuring each side again in a process of its own in its best "
                   "OpenMP setting (single stream with threads spinning, streams sleeping)")
    malloc.add_argument(p)
    p.set_defaults(func=cmd_demo)


def cmd_demo(args) -> int:
    import sys

    from .errors import InputError
    from .graph.models import _need_torch

    _need_torch("demo")  # the zoo models are torch modules and the demo runs them
    from .graph.zoo import ZOO

    if args.model not in ZOO:
        raise InputError(None, f"unknown model {args.model!r} (built-in: {', '.join(ZOO)})")
    if args.runs < 5:
        raise InputError(None, "--runs must be at least 5 (the first 2 are dropped as cold)")
    if args.candidates < 1:
        raise InputError(None, f"--candidates must be at least 1, got {args.candidates}")
    print(malloc.apply(args.malloc))
    r = run_demo(args.out, args.model, args.scale, args.phase, args.runs, args.candidates,
                 progress=not args.no_progress, profile_path=args.profile,
                 best_settings=args.best_settings, device=args.device)
    where = (f"this CPU ({os.cpu_count()} cores)" if args.device == "cpu"
             else r.device_name or args.device)
    print(f"\nparastream demo: {r.model} on {where} in {r.seconds} s")
    print(f"{'candidate':44s} {'pred. single':>12s} {'pred. multi':>11s} {'from ops':>9s} "
          f"{'meas. single':>12s} {'meas. multi':>11s} {'speedup':>8s}  overlap_pct (busy)")
    for m in r.measured:
        ops = m.get("predicted_from_ops_us")
        pcts = ", ".join(f"{p:.2f}" for p in m.get("overlap_pct") or []) or "-"
        if m.get("busy_overlap_pct"):
            pcts += " (" + ", ".join(f"{p:.2f}" for p in m["busy_overlap_pct"]) + ")"
        print(f"{m['candidate'][:44]:44s} {m['predicted_single_us'] or 0:12.1f} "
              f"{m['predicted_multi_us']:11.1f} {ops if ops is not None else '-':>9} "
              f"{m['measured_single_us']:12.1f} {m['measured_multi_us']:11.1f} "
              f"{m['measured_speedup']:7.2f}x  {pcts}")
    kind = "CPU" if args.device == "cpu" else where
    ops_from = ("the op times of the single-stream runs" if args.device == "cpu"
                else "the kernels of a profiled single-stream run")
    print(f"(predicted = simulated on the calibrated {kind} profile; from ops = simulated from "
          f"{ops_from}; measured = median of the kept runs, {kind})")
    if any(m.get("separate_single_spinning_us") or m.get("separate_multi_us") for m in r.measured):
        print("in separate processes, each side in its best OpenMP setting (single stream with "
              "threads spinning, streams with them sleeping):")
        for m in r.measured:
            single, multi = m["separate_single_spinning_us"], m["separate_multi_us"]
            print(f"  {m['candidate'][:56]:56s} single {single or 0:10.1f}  multi {multi or 0:10.1f}"
                  + (f"  {single / multi:5.2f}x" if single and multi else ""))
        print("(the recommendation takes the faster figure of each side)")
    for note in r.notes:
        print(note)
    print(f"recommendation: {r.recommended}" + (f" ({r.summary})" if r.summary else "")
          + (f"   triage: {r.verdict}" if r.verdict else ""))
    print(f"report: {os.path.join(r.out_dir, 'report.html')} (+ {', '.join(r.files[1:])})")
    sys.stdout.flush()
    return 0
