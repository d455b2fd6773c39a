"""The prediction behind ``parastream simulate``: every candidate of a model or a plan run
through the discrete-event model of a device's stream scheduler, a row per stream count,
and the recommendation no implausible candidate can be.

Every figure is a prediction labelled "simulated on <profile>", never a measurement.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from dataclasses import dataclass
from typing import Any, Sequence

import msgspec

from ..device.cost import estimate, with_cold
from ..device.profile import DEFAULT_DEVICE
from ..device.profile import SCHEMA as PROFILE_SCHEMA
from ..device.profile import (DeviceProfile, load_profile, loads_profile, read_profile_file,
                              warn_if_noted)
from ..errors import InputError, naming
from ..graph.ir import Graph, validate
from ..graph.models import is_graph_file, resolve
from ..plan.assign import assign
from ..plan.io import PlanDoc, loads, pick, plan_shaped, require_fit
from ..plan.model import SCHEMA as PLAN_SCHEMA
from ..plan.model import SPEEDUP_MARGIN, Plan
from ..sim.modes import MODES
from ..sim.run import SimRun, require_mode, sim_label, simulate_plan
from ..timeline.analyze import analyze_capture
from .graph import GRAPH_SCALE, model_graph, model_name
from .plan import build
from .result import document, extra

SCHEMA = "parastream.simulation/1"
SWEEP_SCHEMA = "parastream.simulation-sweep/1"
#: the stream counts simulated when none are given
DEFAULT_STREAMS = (1, 2, 3, 4)
#: a profile is a few kB; a larger JSON beside a plan (a trace) is not read whole
_PROFILE_MAX_BYTES = 4 << 20


@dataclass(frozen=True)
class Simulation:
    """One model's (or plan's) simulation: ``rows`` holds the fastest plan per stream count,
    ``candidates`` every simulated candidate fastest first with its flags, and the
    recommendation. ``runs`` (stream count -> the row's simulated run, with its timeline)
    and ``notes`` (which profile a plan was simulated on) are not in :meth:`to_dict`."""

    schema: str
    model: str
    device: str
    label: str
    mode: str
    ge_reorder: bool
    hw_queues: int
    rows: list[dict]
    candidates: list[dict]
    recommended_streams: int
    recommended_candidate: str | None
    recommendation: str
    runs: dict[int, SimRun] = extra(default_factory=dict)
    notes: tuple[str, ...] = extra(default=())

    def to_dict(self) -> dict:
        """The simulation document (``simulate --format json``)."""
        return document(self)

    def trace_run(self) -> SimRun:
        """The run ``simulate --trace`` writes: the fastest multi-stream row's, else the
        only row's."""
        multi = [k for k in self.runs if k > 1] or list(self.runs)
        return self.runs[min(multi, key=lambda k: self.runs[k].result.wall_us)]


@dataclass(frozen=True)
class ShapeSweep:
    """A ``--batch``/``--seq`` sweep: one entry of ``sweep`` per shape (its single-stream
    and best wall, the recommendation and its whole simulation's rows and candidates);
    ``ignored`` says which flags the model does not take."""

    schema: str
    model: str
    device: str
    label: str
    sweep: list[dict]
    mode: str
    ge_reorder: bool
    ignored: list[str]
    scale: str | None = extra(default=None)
    phase: str | None = extra(default=None)

    def to_dict(self) -> dict:
        """The sweep document (``simulate --batch/--seq --format json``)."""
        return document(self)


@dataclass(frozen=True)
class SimulateOptions:
    """What ``simulate`` takes besides the model and the device, as the flags of the same
    names: ``streams`` (counts, or their ``1,2,3`` text), ``scale``/``phase`` of a zoo model,
    ``batch``/``seq`` to sweep (counts or text), ``mode`` (:data:`MODES`; default graph
    with ``ge``, else eager), ``ge`` (GE's reorder), ``candidate`` (one candidate of a
    plan), ``jitter`` (relative duration jitter, 0 to 1) and its ``seed``."""

    streams: str | Sequence[int] | None = None
    scale: str | None = None
    phase: str | None = None
    batch: str | Sequence[int] | None = None
    seq: str | Sequence[int] | None = None
    mode: str | None = None
    ge: bool = False
    candidate: str | None = None
    jitter: float = 0.0
    seed: int = 0

    def sweep_settings(self) -> dict:
        """The keywords of :func:`sweep` these options set."""
        return {"mode": self.run_mode(), "ge": self.ge, "jitter": self.jitter,
                "seed": self.seed}

    def run_mode(self) -> str:
        """The mode to simulate in: ``mode``, else graph with ``ge``, else eager."""
        return self.mode or ("graph" if self.ge else "eager")


# ------------------------------------------------------------------ the sweep

def sweep(graph: Graph, profile: DeviceProfile, stream_counts: list[int], *,
          mode: str = "eager", ge: bool = False, jitter: float = 0.0, seed: int = 0,
          plans: list | None = None) -> Simulation:
    """Simulate every candidate (the given plans, else the planner's for each stream count)
    in ``mode`` (with GE's reorder when ``ge``): a row per stream count with its fastest
    plan, every candidate's wall in ``candidates`` with what makes it implausible
    (:func:`flags`), and the recommendation, which no flagged candidate can be."""
    runner = _Runner(graph, profile, dict(mode=mode, ge=ge, jitter=jitter, seed=seed))
    best_runs: dict[int, SimRun] = {}
    for k in stream_counts:
        cands = _candidates_within(k, runner, plans)
        if not cands:
            continue
        runs = [runner.run(c) for c in cands]
        if plans is None and k >= 2:
            # a budget of k streams allows every plan found for fewer: the planner's
            # candidates at cap k need not hold its best at a smaller cap
            runs += [r for kk, r in best_runs.items() if 2 <= kk < k]
        best_runs[k] = min(runs, key=lambda r: (r.result.wall_us, r.plan.stream_count(),
                                                r.plan.name))
    simulated = list(runner.memo.values())
    single = [r.result.wall_us for r in simulated if r.plan.stream_count() == 1]
    base = min(single) if single else min((r.result.wall_us for r in simulated), default=0.0)
    cands = _candidates(simulated, base, profile)
    names = _name_counts(simulated)
    rows = [_row(k, run, base, profile, names) for k, run in best_runs.items()]
    by_name = {c["name"]: c for c in cands}
    for r in rows:
        r["flags"] = by_name[r["plan"]]["flags"]
    rec, rec_plan = _recommend(cands)
    return Simulation(schema=SCHEMA, model=graph.name, device=profile.name,
                      label=sim_label(profile), mode=mode, ge_reorder=ge,
                      hw_queues=profile.hw_queues, rows=rows, candidates=cands,
                      recommended_streams=rec, recommended_candidate=rec_plan,
                      recommendation=("single stream: multi-stream does not pay here"
                                      if rec == 1 else f"{rec} streams ({rec_plan})"),
                      runs=best_runs)


class _Runner:
    """Simulates plans of one graph once each: the op costs and topological order are
    computed once, and a plan seen before (a cap that did not bind gives the same one) is
    not simulated again (``memo`` holds every distinct run, in the order first seen)."""

    def __init__(self, graph: Graph, profile: DeviceProfile, settings: dict) -> None:
        self.graph, self.profile, self.settings = graph, profile, settings
        self.costs = {o.name: estimate(o, profile) for o in graph.ops}  # sim adds cold costs
        self.order = validate(graph)
        self.dur = {n: c.dur_us
                    for n, c in with_cold(graph.index(), self.costs, self.order, profile).items()}
        self.memo: dict[tuple, SimRun] = {}

    def run(self, plan: Plan) -> SimRun:
        """``plan`` simulated (once per distinct plan)."""
        key = (plan.name, tuple(sorted(plan.assignment.items())), repr(plan.core_limits),
               tuple((e.record_after, e.wait_before) for e in plan.events))
        if key not in self.memo:
            self.memo[key] = simulate_plan(self.graph, plan, self.profile, costs=self.costs,
                                           order=self.order, **self.settings)
        return self.memo[key]


def _candidates_within(k: int, runner: _Runner, plans: list | None) -> list[Plan]:
    """The plans a budget of ``k`` streams simulates: the given plans using ``k`` streams
    (all of them for ``k`` 0), else the single-stream plan, else every candidate of the
    planner within ``k`` streams (graph mode, GE's reorder or jitter can change the order
    it ranks them in)."""
    if plans is not None:
        # the streams its assignment uses, not its `streams` field (a hand edit of that
        # made a 4-stream candidate the single-stream baseline)
        return [p for p in plans if p.stream_count() == k] if k else plans
    if k == 1:
        return [assign(runner.graph, "single", durations=runner.dur, order=runner.order)]
    doc = build(runner.graph, runner.profile, algorithm=None, mapping=None, max_streams=k)
    return [c for c in doc.candidates if 2 <= c.stream_count() <= k]


def _recommend(cands: list[dict]) -> tuple[int, str | None]:
    """The recommended stream count and candidate: the fewest streams within 2% of the
    fastest unflagged multi-stream candidate when it beats single stream by the margin,
    else single stream."""
    ok = [c for c in cands if c["streams"] >= 2 and not c["flags"]]
    best = min(ok, key=lambda c: (c["wall_us"], c["streams"], c["name"]), default=None)
    rec, rec_plan = 1, next((c["name"] for c in cands if c["streams"] == 1), None)
    if best and best["speedup"] and best["speedup"] >= 1 + SPEEDUP_MARGIN:
        # the fewest streams within 2% of the fastest: a "2 of 3" row recommends 2
        rec = min(c["streams"] for c in ok if c["wall_us"] <= best["wall_us"] * 1.02)
        rec_plan = min((c for c in ok if c["streams"] == rec),
                       key=lambda c: (c["wall_us"], c["name"]))["name"]
    for c in cands:
        c["recommended"] = c["name"] == rec_plan
    return rec, rec_plan


def flags(streams: int, speedup: float | None, hw_queues: int,
          bound: float | None = None) -> list[str]:
    """Why a candidate's prediction cannot be recommended: a speedup over single stream
    above its stream count (``k`` streams can at most share the work ``k`` ways: more
    says the single-stream baseline or the model is wrong) or above the headroom bound
    ``bound`` when the plan carries one; more streams than the device's hardware queues
    (streams past them add no parallelism: the planner's own lint)."""
    out = []
    eps = 1e-9
    if speedup is not None and streams >= 1 and speedup > streams * (1 + eps):
        out.append(f"implausible: above {streams} stream{'s' * (streams > 1)}")
    elif speedup is not None and bound and speedup > bound * (1 + eps):
        out.append(f"implausible: above the headroom bound {bound:.2f}x")
    if streams > hw_queues:
        out.append(f"{streams} streams on {hw_queues} hardware queues")
    return out


def _bound(plan: Plan) -> float | None:
    """The headroom bound a plan carries (``meta["bound_speedup"]``), if any."""
    b = (plan.meta or {}).get("bound_speedup")
    return float(b) if isinstance(b, (int, float)) and not isinstance(b, bool) and b > 0 else None


def _name_counts(runs: list[SimRun]) -> dict[str, int]:
    """How many simulated plans carry each name."""
    names: dict[str, int] = {}
    for r in runs:
        names[r.plan.name] = names.get(r.plan.name, 0) + 1
    return names


def _candidates(runs: list[SimRun], base: float, profile: DeviceProfile) -> list[dict]:
    """Every simulated candidate, fastest first; a name the planner gave two different
    plans (at two stream caps) is told apart by its stream count (:func:`_label`)."""
    names = _name_counts(runs)
    out = []
    for r in sorted(runs, key=lambda r: (r.result.wall_us, r.plan.stream_count(), r.plan.name)):
        k = r.plan.stream_count()
        wall = r.result.wall_us
        speedup = round(base / wall, 4) if wall else None
        hoisted = [list(x) for x in r.reorder.hoisted] if r.reorder else []
        out.append({"name": _label(r.plan, names), "streams": k, "wall_us": round(wall, 3),
                    "speedup": speedup,
                    "flags": flags(k, speedup, profile.hw_queues, _bound(r.plan)),
                    "lints": sorted({lint.rule for lint in r.plan.lints}),
                    "ge_hoisted": hoisted})
    return out


def _label(plan: Plan, names: dict[str, int]) -> str:
    """``plan``'s name in the output, with its stream count when ``names`` (name -> how
    many simulated plans carry it) says another plan has the same name."""
    k = plan.stream_count()
    return plan.name if names.get(plan.name, 1) == 1 else f"{plan.name} [{k} streams]"


def _row(k: int, run: SimRun, base: float, profile: DeviceProfile,
         names: dict[str, int]) -> dict:
    """One stream count's row: its fastest plan's simulated run, analysed."""
    cap = analyze_capture(run.result.timeline)
    wall = run.result.wall_us
    occ = run.result.busy_cores_us["cube"] / (profile.cores.cube * wall) if wall else 0.0
    return {"streams": k, "plan": _label(run.plan, names),
            "plan_streams": run.plan.stream_count(), "wall_us": round(wall, 3),
            "throughput_per_s": round(1e6 / wall, 3) if wall else None,
            "speedup": round(base / wall, 4) if wall else None,
            "verdict_counts": cap["verdict_counts"],
            "overlap_pct_median": cap["overlap_pct_median"],
            "parallelism": cap["parallelism"], "core_occupancy": round(occ, 4)}


# ------------------------------------------------------------------ checking the input

def _counts(text: str | Sequence[int] | None, what: str, example: str) -> list[int] | None:
    """Positive whole numbers from ``1,8,32`` text or a sequence; None when not given;
    an InputError saying ``what`` wants ``example`` otherwise."""
    if not text:
        return None
    try:
        vals = ([int(x) for x in text.split(",") if x.strip()] if isinstance(text, str)
                else [int(x) for x in text])
        assert vals and min(vals) > 0
        return vals
    except (ValueError, TypeError, AssertionError):
        raise InputError(None, f"{what} wants {example}, not {text!r}") from None


def _stream_counts(streams: str | Sequence[int] | None) -> list[int]:
    if isinstance(streams, str) and not streams.strip():
        raise InputError(None, "--streams wants stream counts like 1,2,3,4, not an empty list")
    counts = _counts(streams, "--streams", "stream counts like 1,2,3,4")
    return sorted(set(counts or DEFAULT_STREAMS))


def _check_options(model: str | Graph, opts: SimulateOptions, is_plan: bool) -> list[int]:
    """Refuse options that contradict each other or the input, before anything is built;
    the stream counts to simulate."""
    spec = model_name(model)

    if opts.ge and opts.mode == "eager":
        raise InputError(None, "--ge emulates a graph compiler's reorder, which eager mode "
                               "has none of: drop --mode eager (--ge implies --mode graph)")
    if opts.mode is not None and opts.mode not in MODES:
        raise InputError(None, f"--mode must be one of {', '.join(MODES)}, not {opts.mode!r}")
    # a plan fixes its model, scale, phase and candidates: a flag that would change them
    # is refused, never silently dropped
    fixed = [f"--{flag}" for flag in ("scale", "phase", "batch", "seq", "streams")
             if is_plan and getattr(opts, flag) is not None]
    if fixed:
        raise InputError(spec, f"{', '.join(fixed)} cannot apply to a plan (its model, scale, "
                               "phase and candidates are fixed): simulate the model instead")
    if opts.candidate is not None and not is_plan:
        raise InputError(spec, "--candidate picks a candidate of a plan file (from "
                               "'parastream plan -o plan.json'): simulate that file")
    if (opts.batch or opts.seq) and (isinstance(model, Graph) or is_graph_file(model)):
        raise InputError(spec, "--batch and --seq rebuild a model at other shapes; a graph "
                               "file's shapes are fixed: simulate the model instead")
    counts = _stream_counts(opts.streams)
    if not 0 <= opts.jitter <= 1:  # also refuses nan; over 1 makes durations negative
        raise InputError(None, f"--jitter must be from 0 to 1, got {opts.jitter}")
    return counts


def plan_data(spec: str) -> bytes | None:
    """The bytes of ``spec`` when it is a plan document (a JSON object whose ``schema`` is
    the plan's, wherever the key stands: a plan saved with sorted keys has it after 4 KB
    of candidates, and was taken for a graph), else None."""
    try:
        with open(spec, "rb") as f:
            data = f.read()
    except OSError:
        return None
    mark = PLAN_SCHEMA.encode()
    if data.lstrip()[:1] != b"{" or (mark not in data and b'"candidates"' not in data
                                     and b'"assignment"' not in data):
        return None
    try:
        # without its schema key, or one bare candidate, as analyze --plan and emit read it
        is_plan = plan_shaped(msgspec.json.decode(data, type=dict))
    except msgspec.DecodeError:
        is_plan = mark in data[:4096]  # a broken plan: its loader says why
    return data if is_plan else None


def _read_plan(spec: str, data: bytes, candidate: str | None) -> tuple[PlanDoc, Plan | None]:
    """The plan document in ``data`` and the candidate ``candidate`` names (None: all);
    an unknown or ambiguous name fails before the model is built."""
    try:
        doc = loads(data)
    except ValueError as exc:
        raise InputError(spec, str(exc)) from None
    return doc, (pick(doc, candidate, spec) if candidate is not None else None)


# ------------------------------------------------------------------ the device

def profile_beside(plan_path: str, name: str) -> tuple[tuple[str, DeviceProfile] | None, str]:
    """((its file, the device profile) called ``name`` in a JSON file in the plan's own
    folder, or None; why the broken profiles there were passed over, or ""). Two such
    files that differ are refused (which one the plan was made with is unknown)."""
    found, rejected = [], []
    folder = os.path.dirname(os.path.abspath(plan_path))
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        try:
            profile = _profile_file(path)
        except InputError as exc:  # a profile, but a broken one: said if none is found
            rejected.append(str(exc))
            continue
        if profile is not None and profile.name == name:
            found.append((path, profile))
    if any(p != found[0][1] for _, p in found[1:]):  # copies of one profile are no doubt
        raise InputError(plan_path, f"{len(found)} profiles named {name!r} beside the plan "
                                    f"({', '.join(os.path.basename(p) for p, _ in found)}): "
                                    "name the one it was made with by --device")
    return (found[0] if found else None), "; ".join(rejected)


def _profile_file(path: str) -> DeviceProfile | None:
    """The device profile in JSON file ``path``, None when it holds none (or cannot be
    read, or is too large to be one); an InputError when it is a broken profile."""
    try:
        if os.path.getsize(path) > _PROFILE_MAX_BYTES:
            return None
        data = read_profile_file(path)
    except OSError:
        return None
    if f'"{PROFILE_SCHEMA}"'.encode() not in data:  # it may come last (sorted keys)
        return None
    return loads_profile(data, path)


def _device_for(spec: str, device: str | DeviceProfile | None,
                doc: PlanDoc | None) -> tuple[DeviceProfile, tuple[str, ...]]:
    """The profile to simulate on and the note saying which one, for stderr.

    A plan's core limits and stream count were chosen for its own device: it is
    predicted on that one unless told otherwise, never silently on another. A calibrated
    profile is recorded by name: one of that name beside the plan goes first, over a
    shipped profile of the same name."""
    if isinstance(device, DeviceProfile):
        return device, ()
    from_plan = not device and doc is not None and bool(doc.device)
    name = device or (doc.device if from_plan else DEFAULT_DEVICE)
    beside, broken = profile_beside(spec, name) if from_plan else (None, "")
    if beside:
        return beside[1], (f"parastream: {spec}: simulated on {beside[0]}, the profile "
                           f"{name!r} beside the plan",)
    try:
        profile = load_profile(name)
    except InputError:
        if not from_plan:
            raise
        why = f" (passed over: {broken})" if broken else ""
        raise InputError(spec, f"made for device {name!r}, which is neither a shipped "
                               "profile nor a profile file beside the plan: name its "
                               f"profile file with --device{why}") from None
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(name, f"not a device profile: {exc}") from None
    if broken:  # broken files beside the plan, one maybe meant to stand for this name
        return profile, (f"parastream: warning: {spec}: simulated on the shipped profile "
                         f"{name!r}; passed over beside the plan: {broken}",)
    return profile, ()


# ------------------------------------------------------------------ plans and shapes

def _plan_candidates(spec: str, doc: PlanDoc, picked: Plan | None) -> tuple[Graph, list[Plan]]:
    """The plan's model rebuilt from its source and the candidates to simulate (the
    picked one or all, each checked to fit the model), with a single-stream baseline."""
    src = doc.source or {}
    if not src.get("model"):
        raise InputError(spec, "the plan does not say which model it was made for")
    with naming(spec, "its source model: "):
        graph = model_graph(src["model"], src.get("scale", GRAPH_SCALE), src.get("phase"),
                            None)
    plans = doc.candidates
    if not plans:
        raise InputError(spec, "the plan has no candidates")
    if picked is not None:
        plans = [picked]
    for c in plans:  # as run and emit do: never predict from a plan that is not safe
        require_fit(graph, c, spec, f"{src['model']} at scale {src.get('scale', GRAPH_SCALE)}")
    if not any(c.stream_count() == 1 for c in plans):
        # speedups are over single stream: simulate that baseline too (a plan cut down
        # to one multi-stream candidate was its own baseline, 1.00x)
        plans = [Plan.single(o.name for o in graph.ops), *plans]
    return graph, plans


def shape_sweep(model: str, profile: DeviceProfile, counts: list[int],
                opts: SimulateOptions) -> ShapeSweep:
    """``model`` simulated at every ``batch`` x ``seq`` of ``opts`` (streams ``counts`` and
    the single-stream base): its best wall and recommendation per shape."""
    rows = []
    work: dict[str, dict] = {"batch": {}, "seq": {}}  # value -> the graph's work, per flag
    scale = opts.scale or GRAPH_SCALE
    for b in _counts(opts.batch, "--batch", "positive integers like 1,8,32") or [None]:
        for q in _counts(opts.seq, "--seq", "positive integers like 1,8,32") or [None]:
            graph = resolve(model, scale=scale, phase=opts.phase, batch=b, seq=q)
            size = (sum(o.flops for o in graph.ops), sum(o.bytes_read for o in graph.ops))
            work["batch"].setdefault(b, set()).add(size)
            work["seq"].setdefault(q, set()).add(size)
            sim = sweep(graph, profile, sorted({1, *counts}), **opts.sweep_settings())
            rows.append(_shape_row(b, q, sim))
    # a model that does not take the override gives one graph for every value: say so
    # rather than print a table of equal rows as if the shape did not matter
    ignored = [f"--{flag}" for flag, by in work.items()
               if len(by) > 1 and len(set.union(*by.values())) == 1]
    return ShapeSweep(schema=SWEEP_SCHEMA, model=model, device=profile.name,
                      label=sim_label(profile), sweep=rows, mode=opts.run_mode(),
                      ge_reorder=opts.ge,
                      ignored=[f"{model} ignores {f}: the same graph for every value"
                               for f in ignored], scale=scale, phase=opts.phase)


def _shape_row(batch: int | None, seq: int | None, sim: Simulation) -> dict:
    best = min(sim.rows, key=lambda r: r["wall_us"])
    return {"batch": batch, "seq": seq, "single_wall_us": sim.rows[0]["wall_us"],
            "best_wall_us": best["wall_us"], "best_speedup": best["speedup"],
            "recommended_streams": sim.recommended_streams,
            "recommendation": sim.recommendation, "rows": sim.rows,
            "candidates": sim.candidates}


# ------------------------------------------------------------------ the command

def simulate(model: str | Graph, *, device: str | DeviceProfile | None = None,
             **options: Any) -> Simulation | ShapeSweep:
    """Simulate ``model`` (zoo name, ``file.py:factory``, graph JSON, a Graph, or a plan
    file from ``parastream plan``) on ``device`` (default: a plan's own device, else
    :data:`DEFAULT_DEVICE`); ``options`` are the fields of :class:`SimulateOptions`. With
    ``batch`` or ``seq`` the result is a :class:`ShapeSweep`, else a :class:`Simulation`.
    Bad input raises :class:`~parastream.errors.InputError`."""
    opts = SimulateOptions(**options)
    spec = model_name(model)
    data = None if isinstance(model, Graph) else plan_data(model)
    counts = _check_options(model, opts, data is not None)
    doc, picked = _read_plan(spec, data, opts.candidate) if data is not None else (None, None)
    profile, notes = _device_for(spec, device, doc)
    warn_if_noted(profile)
    require_mode(profile, opts.run_mode(), device if isinstance(device, str) and device
                 else profile.name)
    plans = None
    if doc is not None:
        graph, plans = _plan_candidates(spec, doc, picked)
        counts = sorted({c.stream_count() for c in plans})
    elif opts.batch or opts.seq:
        return shape_sweep(spec, profile, counts, opts)
    else:
        graph = model_graph(model, opts.scale, opts.phase, device or DEFAULT_DEVICE)
    if not graph.ops:
        raise InputError(spec, "the graph has no ops: nothing to simulate")
    sim = sweep(graph, profile, counts, plans=plans, **opts.sweep_settings())
    if not sim.rows:
        said = opts.streams if isinstance(opts.streams, str) else ",".join(map(str, counts))
        raise InputError(spec, f"nothing to simulate for --streams {said}: the model "
                               "has no multi-stream candidate (1 adds the single-stream row)")
    return dataclasses.replace(sim, notes=notes)


__all__ = ["DEFAULT_STREAMS", "SCHEMA", "SWEEP_SCHEMA", "ShapeSweep", "SimulateOptions",
           "Simulation", "flags", "plan_data", "profile_beside", "shape_sweep", "simulate",
           "sweep"]
