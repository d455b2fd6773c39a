"""The whole loop on a built-in model, on this machine (:func:`demo` -> :class:`DemoResult`).

import -> decompose (modules, parallel points, headroom) -> calibrate the local CPU (or
load a profile) -> plan candidates -> simulate them -> run the best candidates (ranked
again from this model's op times in one short single-stream capture) and the
single-stream baseline on real streams -> analyse the captured timeline (placement,
overlap_pct per parallel point, triage) -> a report folder:

- ``report.html``: one self-contained page: the measured run's Gantt chart with side windows
  and dominators, the verdicts, and a summary with the module table and DAG, the candidates
  and predicted vs measured wall;
- ``plan.json`` / ``plan.md`` (the 8-field fragments, field 6 filled from the run);
- ``analysis.json`` (measured analysis, plan check, triage) and ``trace.json`` (the
  measured multi-stream run, readable by ``parastream analyze`` and Perfetto).

Every figure says where it comes from: "simulated on <profile>" or "measured, CPU".

On ``device="cuda"`` the same loop runs on the GPU: the model on the device, a quick
calibration of the GPU (:mod:`parastream.calibrate.device`) instead of the CPU's,
the cuda backend's streams, the measured run analysed from its kernels under the torch
profiler, figures labelled with the GPU's name; no separate-process pass (that is about
the CPU's OpenMP threads).
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

from ..errors import InputError
from ..runtime.backend import backend_capabilities, torch_device_name

DEFAULT_MODEL = "medusa_heads"
DEFAULT_SCALE = "small"
#: what the report folder holds (cpu-profile.json: the profile it predicted with, calibrated
#: or from a given profile file; cuda-profile.json on cuda)
DEMO_FILES = ("report.html", "plan.json", "plan.md", "analysis.json", "trace.json",
              "cpu-profile.json")
#: scales whose zoo models hold no weights (built on the meta device): nothing to time
META_SCALES = ("7b",)


@dataclass(frozen=True)
class DemoSettings:
    """What :func:`demo` runs: the zoo ``model`` at ``scale``/``phase``, ``runs`` timed
    runs per configuration (the first 2 dropped), the best ``candidates`` candidates,
    a device ``profile`` file (default: calibrate quickly now), ``best_settings`` (cpu:
    each side again in a process of its own in its best OpenMP setting), on ``device``
    (cpu or cuda); ``progress``: a progress bar on a terminal (each step as a line on
    stderr otherwise)."""

    model: str = DEFAULT_MODEL
    scale: str = DEFAULT_SCALE
    phase: str | None = None
    runs: int = 11
    candidates: int = 2
    profile: str | None = None
    best_settings: bool = True
    device: str = "cpu"
    progress: bool = True

    def validate(self) -> None:
        """An :class:`InputError` (one line) for what the demo cannot run, before any
        work: a scale without weights, a model that is not a built-in one, too few runs or
        candidates."""
        if self.scale in META_SCALES:
            raise InputError(None, f"--scale {self.scale}: the zoo builds its {self.scale} "
                                   "models on the meta device (shapes, no weights), so the "
                                   "demo cannot time them: use --scale tiny or small")
        if _names_a_file(self.model):
            raise InputError(self.model, "not a built-in demo model (the demo runs the zoo's "
                                         "models); to plan, run and measure your own: "
                                         f"parastream run {self.model} --auto")
        if self.runs < 5:
            raise InputError(None, "--runs must be at least 5 (the first 2 are dropped as cold)")
        if self.candidates < 1:
            raise InputError(None, f"--candidates must be at least 1, got {self.candidates}")

    def require_zoo_model(self) -> None:
        """An :class:`InputError` unless ``model`` is a built-in (zoo) model (imports
        torch)."""
        from ..zoo import ZOO

        if self.model not in ZOO:
            raise InputError(None, f"unknown model {self.model!r} (built-in: {', '.join(ZOO)}; "
                                   "your own model: parastream run FILE.py:factory --auto)")


def _names_a_file(spec: str) -> bool:
    """Whether ``spec`` names a model file (``path/to/file.py:factory``), not a zoo name."""
    return ":" in spec or spec.endswith(".py") or os.sep in spec


@dataclass
class DemoResult:
    """What the demo measured and wrote: the report folder (``out_dir``) and its
    ``files``, the recommendation (``recommended``, ``summary``), each measured candidate's
    row (``measured``), the measured run's triage ``verdict``, the wall ``seconds`` of
    the whole loop, ``notes`` (a separate process that failed), where it ran
    (``device_name``: "this CPU" or the GPU's name) and the ``analysis.json`` document
    (``analysis``; :meth:`to_dict`)."""

    out_dir: str
    model: str
    recommended: str
    measured: list[dict] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    verdict: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    summary: str = ""
    device_name: str = ""
    analysis: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The folder's ``analysis.json`` document (schema ``parastream.demo/1``)."""
        return self.analysis


@contextmanager
def _steps(enabled: bool, total: int) -> Iterator[Callable[[str], None]]:
    """A step reporter: a progress bar of ``total`` steps on a terminal when ``enabled``,
    else each step as a line on stderr."""
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


def demo(out: str = "out/demo", settings: DemoSettings | None = None,
         **options: Any) -> DemoResult:
    """Run the whole loop and write the report folder ``out``; returns what was measured.
    ``settings`` (:class:`DemoSettings`) with any of its fields given as keyword
    ``options``. Raises :class:`InputError` (one line) on bad input, before any work and
    without leaving a folder behind."""
    s = replace(settings or DemoSettings(), **options)
    s.validate()
    from ..graph.models import _need_torch

    _need_torch("demo")  # the zoo models are torch modules and the demo runs them
    s.require_zoo_model()
    run = _Demo(out, s)
    t_start = time.perf_counter()
    with _steps(s.progress, 9) as step:
        run.step = step
        result = run.execute()
        step("done")
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    result.seconds = round(time.perf_counter() - t_start, 1)
    return result


class _Demo:
    """One :func:`demo`: each step of the loop, with what the later steps read."""

    def __init__(self, out: str, settings: DemoSettings) -> None:
        from ..atomic import check_folder, check_writable

        self.out, self.s, self.device = out, settings, settings.device
        self.profile_file = f"{self.device}-profile.json"
        self.step: Callable[[str], None] = lambda msg: None
        check_folder(out)
        for name in DEMO_FILES + (self.profile_file,):  # a folder in the way fails now
            check_writable(os.path.join(out, name), made=out)
        self.caps = backend_capabilities(self.device)
        self.where = "this CPU"
        if self.caps.torch_device is not None:
            from ..runtime.cuda import require_device

            require_device(self.caps.torch_device)
            self.where = torch_device_name(self.device) or self.device

    def execute(self) -> DemoResult:
        from ..atomic import make_folder

        self.load()
        self.load_profile()
        make_folder(self.out)  # only once the model and the profile are good
        self.decompose()
        runs, multi = self.measure()
        return self.report(runs, multi)

    def load(self) -> None:
        """The model built, on the device and traced."""
        from ..graph.models import anchored, load_model
        from ..graph.torch_import import import_runnable
        from .run import Loaded, to_device

        s = self.s
        self.step(f"importing {s.model} ({s.scale})")
        module, inputs, _, meta = load_model(s.model, s.scale, s.phase)
        self.phase = meta.get("phase", s.phase)
        module, inputs = to_device(module, inputs, self.device)
        with anchored(meta):
            runnable = import_runnable(module, inputs, name=s.model)
        self.loaded = Loaded(module, inputs, runnable)
        self.graph = runnable.graph

    def load_profile(self) -> None:
        """The device profile: the given file (copied into the folder, as a calibrated one
        is: the plan names the profile, and ``parastream simulate OUT/plan.json`` finds it
        beside the plan; a shipped profile's name needs no copy), else calibrated now."""
        from ..device.profile import load_profile, loads_profile, read_profile_file
        from ..calibrate.profile import dumps as dump_profile

        path = self.s.profile
        self.profile_json = None
        if path:
            self.step(f"loading the device profile {path}")
            if os.path.isfile(path):  # the file is read once, for both
                self.profile_json = read_profile_file(path)
                self.profile = loads_profile(self.profile_json, path)
            else:
                self.profile = load_profile(path)
            return
        if self.caps.torch_device is not None:
            from ..calibrate.device import calibrate_device

            self.step(f"calibrating {self.where}")  # named as calibrate --device cuda names it
            self.profile_json = dump_profile(calibrate_device(self.device, quick=True))
        else:
            from ..cpu.overhead import calibrate_cpu

            self.step("calibrating the local CPU")
            self.profile_json = dump_profile(calibrate_cpu(
                quick=True, name="cpu-calibrated", warn=lambda note: self.step(f"warning: {note}")))
        self.profile = loads_profile(self.profile_json)

    def decompose(self) -> None:
        """Modules, parallel points and headroom; the plan's candidates, simulated."""
        from ..graph.headroom import analyze_graph
        from ..report.graph import analysis_document, module_dag, module_mermaid
        from .plan import build

        s = self.s
        self.step("decomposing the model")
        analysis = analyze_graph(self.graph, self.profile)
        self.graph_doc = analysis_document(analysis, self.graph, self.profile, source=s.model,
                                           scale=s.scale, phase=self.phase)
        self.graph_doc["module_dag_mermaid"] = module_mermaid(analysis.decomposition)
        self.module_graph = module_dag(analysis.decomposition)
        self.step("planning and simulating candidates")
        self.doc = build(self.graph, self.profile, algorithm=None, mapping=None,
                         max_streams=None,
                         source={"model": s.model, "scale": s.scale, "phase": self.phase})

    def measure(self) -> tuple[Any, list]:
        """The best candidates by this model's own op times (one short single-stream
        capture; cuda: its kernels, profiled once for this and the triage), measured
        against single stream; on cpu each side again in its best OpenMP setting."""
        from .run import CandidateSettings, measure_candidates, rank_by_op_times, single_kernels

        lo = self.loaded
        kernels = single_kernels(lo.module, lo.inputs, lo.runnable, self.device)
        multi, op_costs = rank_by_op_times(
            lo.module, lo.inputs, lo.runnable, self.profile,
            [c for c in self.doc.candidates if c.stream_count() > 1], device=self.device,
            kernels=kernels)
        multi = multi[:self.s.candidates]

        def running(k: int, n: int, cand: Any) -> None:
            self.step(f"running candidate {k}/{n}: {cand.name[:50]}")

        # the planner already simulated every candidate on this profile: its estimates stand
        settings = CandidateSettings(device=self.device, runs=self.s.runs, reuse_estimates=True,
                                     on_candidate=running)
        runs = measure_candidates(lo, self.doc, multi, self.profile, settings,
                                  op_costs=op_costs, kernel_single=kernels)
        if runs.busy:
            self.step(f"warning: {runs.busy}")
        self.iso = self.separate_processes(runs, multi)
        return runs, multi

    def separate_processes(self, runs: Any, multi: list) -> dict | None:
        """Each side again in a process of its own in its best OpenMP setting (cpu), its
        figures attached to the candidates' results; None when skipped."""
        from ..cpu import baseline

        if not self.caps.host_threads:
            self.step("separate processes skipped: they set the CPU's OpenMP threads")
            return None
        if not (self.s.best_settings and baseline.wanted()):
            self.step("separate processes skipped: " + (
                "--side-by-side-only" if not self.s.best_settings else "OMP_WAIT_POLICY is set"))
            return None
        s = self.s
        self.step("each side again in a process of its own (best OpenMP setting)")
        iso = baseline.best_settings(s.model, s.scale, self.phase, self.doc,
                                     [c.name for c in multi], runs=s.runs, warmup=2, drop=2)
        baseline.attach(runs.candidates, iso)
        return iso

    def report(self, runs: Any, multi: list) -> DemoResult:
        """The same decision as ``parastream run`` (never a plan under the speedup margin,
        each side taken in its best setting), the measured run analysed, the folder
        written."""
        from ..runtime.recommend import recommend
        from ..timeline.analyze import Options, analyze_capture

        measured = [_measured_row(c, r, d, runs.measurements[r.name][0])
                    for c, r, d in zip(multi, runs.candidates, runs.details)]
        self.step("analysing the measured timeline")
        decision = recommend(runs.candidates, notes=[runs.busy], busy_share=runs.busy_share,
                             device=self.device)
        # the report shows the recommended candidate's run, else the one closest to winning
        best = decision.closest
        m, res = runs.measurements[best] if best else (None, {})
        tl = m.multi_timeline if m else None
        cap = analyze_capture(tl, Options(main_stream="0")) if tl is not None else None
        if cap is not None and res.get("plan_check") is not None:
            cap["plan_check"] = res.get("plan_check")
        self.step("writing the report")
        rec = decision.candidate or "single stream"
        headroom = demo_headroom(self.graph_doc.get("headroom"), self.graph, self.profile,
                                 runs.op_costs, measured)
        analysis = self.analysis_json(rec, measured, decision, res, cap)
        analysis["headroom_from_op_times"] = headroom.get("bound (measured op times)")
        self.write_documents(runs, measured, decision, analysis)
        files = ["report.html", "plan.json", "plan.md", "analysis.json"]
        if tl is not None:
            files.append("trace.json")
            self.write_page(tl, cap, best, (rec, measured, res.get("triage"), headroom))
        notes = [f"not measured in a separate process: {e}"
                 for e in (self.iso or {}).get("errors", [])]
        return DemoResult(self.out, self.s.model, rec, measured, files,
                          (res.get("triage") or {}).get("verdict", ""), 0.0, notes,
                          decision.summary, self.where, analysis)

    def analysis_json(self, rec: str, measured: list, decision: Any, res: dict,
                      cap: dict | None) -> dict:
        """The ``analysis.json`` document (schema ``parastream.demo/1``)."""
        s = self.s
        return {"schema": "parastream.demo/1", "model": s.model, "scale": s.scale,
                "phase": self.phase, "device": self.device if self.caps.host_threads else self.where,
                "device_profile": self.profile.name, "recommended": rec, "measured": measured,
                "separate_processes": self.iso, "decision": decision.to_dict(),
                "headroom": self.graph_doc.get("headroom"),
                "triage": res.get("triage"), "plan_check": res.get("plan_check"),
                "capture": cap}

    def write_documents(self, runs: Any, measured: list, decision: Any, analysis: dict) -> None:
        """The profile, ``plan.json`` and ``plan.md`` recommending what the measurement
        chose (``emit plan.json`` with no candidate then generates it), ``analysis.json``."""
        import msgspec

        from ..plan.io import dumps as dump_plan
        from ..plan.io import with_recommendation
        from ..report.plan import render_markdown
        from ..atomic import write_atomic

        label = "measured, CPU" if self.caps.host_threads else f"measured, {self.where}"
        measured_by_name = {}
        for r in measured:
            mm, rr = runs.measurements[r["candidate"]]
            entry = dict(rr.get("plan_check") or {})
            entry["walls"] = {"single_median_us": mm.single_median_us,
                              "multi_median_us": mm.multi_median_us, "speedup": mm.speedup,
                              "label": label}
            measured_by_name[r["candidate"]] = entry
        self.doc = with_recommendation(self.doc, decision.candidate or "single")
        # the profile goes in with the documents made from it, not before: a run that
        # fails on the way leaves the folder's earlier profile beside its earlier plan
        if self.profile_json is not None:
            write_atomic(os.path.join(self.out, self.profile_file), self.profile_json)
        write_atomic(os.path.join(self.out, "plan.json"), dump_plan(self.doc))
        write_atomic(os.path.join(self.out, "plan.md"), render_markdown(self.doc, measured_by_name))
        write_atomic(os.path.join(self.out, "analysis.json"),
                     msgspec.json.format(msgspec.json.encode(analysis), indent=1))

    def write_page(self, tl: Any, cap: dict | None, best: str, shown: tuple) -> None:
        """``trace.json`` (labelled with its candidate, as run's trace files are: analyze
        with the plan beside it checks that candidate, not the plan's often single
        recommendation) and ``report.html``; ``shown``: (recommendation, measured rows,
        triage, headroom section)."""
        from ..report.html import write_html
        from ..report.kineto import write_kineto

        write_kineto(os.path.join(self.out, "trace.json"), tl, label=best)
        summary = self.summary(*shown)
        summary["module_dag"] = self.module_graph
        write_html(os.path.join(self.out, "report.html"), [(tl, cap)], summary,
                   title=f"parastream demo: {self.s.model} ({self.s.scale}) on {self.where}")

    def summary(self, rec: str, measured: list, triage: dict | None, headroom: dict) -> dict:
        """What the report's summary section shows (rendered as tables by the HTML report)."""
        mods = [{k: m.get(k) for k in ("module_id", "module_name", "module_type", "side_effect",
                                       "resource_hint")}
                for m in self.graph_doc.get("modules", [])][:40]
        cands = [{"candidate": c.name, "streams": c.streams, "waits": len(c.events),
                  "strength": c.strength,
                  "estimate": f"{c.estimate.wall_us:.1f} us, {c.estimate.speedup:.2f}x "
                              f"({c.estimate.source})" if c.estimate else "-",
                  "lints": sum(1 for x in c.lints if x.severity in ("error", "warning"))}
                 for c in self.doc.candidates[:12]]
        where = self.where
        out = {"model": f"{self.s.model} ({self.s.scale}, {self.phase})", "recommendation": rec,
               "figures": (f"measured: CPU ({os.cpu_count()} cores)" if where == "this CPU"
                           else f"measured: {where}") + ", median of the kept runs; "
                          f"predicted: simulated on {self.profile.name}",
               "predicted_vs_measured": measured, "headroom": headroom,
               "candidates": cands, "modules": mods,
               "module_dag_mermaid": self.graph_doc.get("module_dag_mermaid", "")}
        if triage:
            out["triage"] = {k: triage[k] for k in ("verdict", "summary", "wall_change_pct",
                                                    "evidence")}
        return out


def _measured_row(plan: Any, r: Any, d: dict, m: Any) -> dict:
    """A measured candidate's row: predicted and measured walls, speedups, overlap, the
    separate processes' figures. ``r``: its CandidateResult, ``d``: its detail, ``m``:
    its Measurement."""
    pred_speedup = r.predicted_speedup
    return {
        "candidate": r.name, "streams": plan.streams,
        "predicted_multi_us": round(r.predicted_wall_us, 1),
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
        "runs_kept": len(m.multi_walls_us),
        "separate_single_spinning_us": round(r.iso_single_us, 1) if r.iso_single_us else None,
        "separate_multi_us": round(r.iso_multi_us, 1) if r.iso_multi_us else None,
    }


def demo_headroom(device_bound: dict | None, graph: Any, profile: Any, op_costs: dict | None,
                  measured: list[dict]) -> dict:
    """The report's headroom section: the device model's bound (every op at the profile's
    cost, on the cores the profile gives it), the bound from this model's measured
    single-stream op times (an op torch runs on one thread holds one core, and the others
    are free for a second stream), the best measured speedup, and, when that speedup is
    above a bound, why: a bound takes each op's time as fixed, and the measured run did
    not."""
    from ..graph.headroom import graph_headroom
    from ..graph.ir import validate

    out: dict[str, Any] = {}
    if device_bound:
        out["bound (device model)"] = device_bound.get("summary")
    ops = graph_headroom(graph, op_costs, profile, validate(graph)) if op_costs else None
    if ops is not None:
        out["bound (measured op times)"] = ops.summary
    best = max(measured, key=lambda r: r["measured_speedup"], default=None)
    if best is None:
        return out
    sp = best["measured_speedup"]
    out["measured"] = f"{sp:.2f}x ({best['candidate']})"
    why = _why_above(sp, device_bound, ops)
    if why:
        out["why the measurement is above a bound"] = why
    return out


def _why_above(speedup: float, device_bound: dict | None, ops: Any) -> str:
    """The sentence explaining a measured speedup above the headroom bounds ("" when it is
    below both)."""
    parts = []
    dev = (device_bound or {}).get("bound_speedup")
    if dev and speedup > dev:
        work = device_bound.get("work_us") or 0.0
        line = (f"the device model's {dev:.2f}x is a bound on the profile's op costs "
                f"({work:,.0f} us of single-stream work)")
        if ops is not None and ops.work_us > work > 0:
            line += (f"; the single-stream capture's ops took {ops.work_us:,.0f} us "
                     f"({ops.work_us / work:.2f}x that): time in which an op leaves cores "
                     "idle, which a second stream fills")
        parts.append(line)
    if ops is not None and speedup > ops.bound_speedup:
        parts.append(f"the {ops.bound_speedup:.2f}x from the measured op times takes each "
                     "op's single-stream time as fixed; side by side the ops ran faster "
                     "than alone")
    return "; ".join(parts)


__all__ = ["DEFAULT_MODEL", "DEFAULT_SCALE", "DEMO_FILES", "DemoResult", "DemoSettings", "demo"]
