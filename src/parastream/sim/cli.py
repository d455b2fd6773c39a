"""``parastream simulate MODEL|PLAN``: predicted wall per stream count on a device profile.

Every figure is labelled "simulated on <profile>": these are predictions, not measurements.
"""

from __future__ import annotations

import argparse
import sys

from ..device.profile import DEFAULT_DEVICE
from ..errors import InputError, naming

from ..plan.model import SPEEDUP_MARGIN



def add_parser(sub) -> None:
    p = sub.add_parser("simulate", help="predict multi-stream gains on a modelled device",
                       description="Plan the model for 1..N streams, run each plan through a "
                       "discrete-event model of the device's stream scheduler, and report "
                       "predicted wall, speedup, overlap verdicts and core occupancy.")
    p.add_argument("model", metavar="MODEL|PLAN", help="zoo name, file.py:factory, graph JSON, or "
                   "a plan.json from 'parastream plan'")
    p.add_argument("--device", metavar="D", help="device profile name or .json path (default: "
                   f"a plan's own device, else {DEFAULT_DEVICE} as in 'parastream graph')")
    p.add_argument("--streams", help="stream counts to try (default 1,2,3,4)")
    p.add_argument("--scale", help="zoo scale (default small)")
    p.add_argument("--phase", help="zoo phase (prefill, decode or infer, as the model has them)")
    p.add_argument("--batch", help="zoo batch sizes to sweep, e.g. 1,8,32")
    p.add_argument("--seq", help="zoo sequence lengths to sweep, e.g. 512,1024,2048")
    p.add_argument("--ge", action="store_true", help="emulate GE's auto-reorder of cheap "
                   "precomputes (Ascend graph mode)")
    p.add_argument("--jitter", type=float, default=0.0, help="relative duration jitter (e.g. 0.1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", metavar="FILE", help="write the best multi-stream run as a trace "
                   "that 'parastream analyze' and Perfetto read (one model, not a --batch/--seq "
                   "sweep)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_simulate)


def sweep(graph, profile, stream_counts: list[int], *, ge: bool = False, jitter: float = 0.0,
          seed: int = 0, plans: list | None = None) -> dict:
    """Simulate the best plan for every stream count (or the given plans)."""
    from ..device.cost import estimate, with_cold
    from ..graph.ir import validate
    from ..plan.assign import assign
    from ..plan.cli import build
    from ..timeline.analyze import analyze_capture
    from .run import sim_label, simulate_plan

    costs = {o.name: estimate(o, profile) for o in graph.ops}  # the simulator adds cold costs
    order = validate(graph)  # once for every plan simulated below
    dur = {n: c.dur_us for n, c in with_cold(graph.index(), costs, order, profile).items()}
    rows = []
    best_runs = {}
    for k in stream_counts:
        if plans is not None:
            # the streams its assignment uses, not its `streams` field (a hand edit of that
            # made a 4-stream candidate the single-stream baseline)
            cands = [p for p in plans if p.stream_count() == k] if k else plans
        elif k == 1:
            cands = [assign(graph, "single", durations=dur, order=order)]
        else:
            # the planner simulates every candidate (and keeps C2 limits only where they pay);
            # its best within k streams is the answer, unless GE reorder or jitter change the
            # run: then the best few are rerun under those options
            doc = build(graph, profile, algorithm=None, mapping=None, max_streams=k)
            cands = [c for c in doc.candidates if 2 <= c.stream_count() <= k]  # k >= 2 streams
            cands = cands[:3] if (ge or jitter) else cands[:1]
        if not cands:
            continue
        runs = [simulate_plan(graph, c, profile, ge=ge, jitter=jitter, seed=seed, costs=costs,
                              order=order) for c in cands]
        if plans is None and k >= 2:
            # a budget of k streams allows every plan found for fewer: the planner's
            # candidates at cap k need not hold its best at a smaller cap (moe_layer 7b on
            # ascend910b: matching merged to 2 streams beat every 3-stream candidate)
            runs += [r for kk, r in best_runs.items() if 2 <= kk < k]
        run = min(runs, key=lambda r: (r.result.wall_us, r.plan.stream_count(), r.plan.name))
        best_runs[k] = run
        cap = analyze_capture(run.result.timeline)
        cores = profile.cores.cube
        occ = run.result.busy_cores_us["cube"] / (cores * run.result.wall_us) if run.result.wall_us else 0.0
        rows.append({"streams": k, "plan": run.plan.name, "plan_streams": run.plan.stream_count(),
                     "wall_us": round(run.result.wall_us, 3),
                     "throughput_per_s": round(1e6 / run.result.wall_us, 3) if run.result.wall_us else None,
                     "verdict_counts": cap["verdict_counts"],
                     "overlap_pct_median": cap["overlap_pct_median"],
                     "parallelism": cap["parallelism"], "core_occupancy": round(occ, 4)})
    base = next((r["wall_us"] for r in rows if r["streams"] == 1), rows[0]["wall_us"] if rows else 0)
    for r in rows:
        r["speedup"] = round(base / r["wall_us"], 4) if r["wall_us"] else None
    best = min(rows, key=lambda r: r["wall_us"]) if rows else None
    rec = 1
    if best and best["speedup"] and best["speedup"] >= 1 + SPEEDUP_MARGIN:
        # the streams the plan uses: a "2 of 3" row recommends 2
        rec = min(r["plan_streams"] for r in rows if r["wall_us"] <= best["wall_us"] * 1.02)
    return {"schema": "parastream.simulation/1", "model": graph.name, "device": profile.name,
            "label": sim_label(profile), "ge_reorder": ge, "rows": rows,
            "recommended_streams": rec,
            "recommendation": ("single stream: multi-stream does not pay here" if rec == 1
                               else f"{rec} streams"),
            "_runs": best_runs}


def cmd_simulate(args: argparse.Namespace) -> int:
    from ..device.profile import load_profile, warn_if_noted
    from ..graph.models import load_graph
    from ..graph.render import render_json
    from ..report.atomic import check_outputs, spec_paths
    from ..report.kineto import write_kineto

    check_outputs({"--trace": args.trace}, spec_paths(args.model, args.device))
    spec = args.model
    plan_data = _plan_data(spec)
    is_plan = plan_data is not None
    # a plan fixes its model, scale, phase and candidates: a flag that would change them
    # is refused, never silently dropped
    fixed = [f"--{flag}" for flag in ("scale", "phase", "batch", "seq", "streams")
             if is_plan and getattr(args, flag) is not None]
    if fixed:
        raise InputError(spec, f"{', '.join(fixed)} cannot apply to a plan (its model, scale, "
                               "phase and candidates are fixed): simulate the model instead")
    if args.trace and (args.batch or args.seq):
        raise InputError(None, "--trace writes one simulated run; --batch/--seq sweep many: "
                               "drop one of them")
    from ..graph.models import is_graph_file

    if (args.batch or args.seq) and is_graph_file(spec):
        raise InputError(spec, "--batch and --seq rebuild a model at other shapes; a graph "
                               "file's shapes are fixed: simulate the model instead")
    args.scale = args.scale or "small"
    if args.streams is not None and not args.streams.strip():
        raise InputError(None, "--streams wants stream counts like 1,2,3,4, not an empty list")
    args.streams = args.streams or "1,2,3,4"
    try:
        counts = sorted({int(x) for x in args.streams.split(",") if x.strip()})
        assert counts and counts[0] >= 1
    except (ValueError, AssertionError):
        raise InputError(None, f"--streams wants stream counts like 1,2,3,4, not {args.streams!r}") from None
    if not 0 <= args.jitter <= 1:  # also refuses nan; over 1 makes durations negative
        raise InputError(None, f"--jitter must be from 0 to 1, got {args.jitter}")
    doc = None
    if is_plan:
        from ..plan.io import loads, require_fit

        try:
            doc = loads(plan_data)
        except ValueError as exc:
            raise InputError(spec, str(exc)) from None
    # a plan's core limits and stream count were chosen for its own device: predict on that
    # one unless told otherwise, never silently on another
    from_plan = not args.device and doc is not None and bool(doc.device)
    device = args.device or (doc.device if from_plan else DEFAULT_DEVICE)
    # a calibrated profile: the plan keeps its name, not its path; the demo's folder and
    # `calibrate -o` beside the plan hold it. One there goes first, over a shipped profile
    # of the same name (a hand-renamed calibration was simulated on the shipped part)
    beside, broken = _profile_beside(spec, device) if from_plan else (None, "")
    # said once the simulation stands (never before an error): which profile it ran on
    note = (f"parastream: {spec}: simulated on {beside[0]}, the profile {device!r} beside "
            "the plan" if beside else None)
    profile = beside[1] if beside else None
    if profile is None:
        try:
            profile = load_profile(device)
        except InputError:
            if not from_plan:
                raise
            why = f" (passed over: {broken})" if broken else ""
            raise InputError(spec, f"made for device {device!r}, which is neither a shipped "
                                   "profile nor a profile file beside the plan: name its "
                                   f"profile file with --device{why}") from None
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(device, f"not a device profile: {exc}") from None
        if broken:  # broken files beside the plan, one maybe meant to stand for this name
            note = (f"parastream: warning: {spec}: simulated on the shipped profile "
                    f"{device!r}; passed over beside the plan: {broken}")
    warn_if_noted(profile)
    plans = None
    if doc is not None:
        src = doc.source or {}
        if not src.get("model"):
            raise InputError(spec, "the plan does not say which model it was made for")
        with naming(spec, "its source model: "):
            graph = load_graph(src["model"], src.get("scale", "small"), src.get("phase"), None)
        plans = doc.candidates
        if not plans:
            raise InputError(spec, "the plan has no candidates")
        for c in plans:  # as run and emit do: never predict from a plan that is not safe
            require_fit(graph, c, spec, f"{src['model']} at scale {src.get('scale', 'small')}")
        if not any(c.stream_count() == 1 for c in plans):
            # speedups are over single stream: simulate that baseline too (a plan cut down
            # to one multi-stream candidate was its own baseline, 1.00x)
            from ..plan.model import Plan

            plans = [Plan.single(o.name for o in graph.ops), *plans]
        counts = sorted({c.stream_count() for c in plans})
    elif args.batch or args.seq:
        return _shape_sweep(args, profile, counts)
    else:
        graph = load_graph(spec, args.scale, args.phase, device)
    if not graph.ops:
        raise InputError(spec, "the graph has no ops: nothing to simulate")
    out = sweep(graph, profile, counts, ge=args.ge, jitter=args.jitter, seed=args.seed, plans=plans)
    runs = out.pop("_runs")
    if not out["rows"]:
        raise InputError(spec, f"nothing to simulate for --streams {args.streams}: the model "
                               "has no multi-stream candidate (1 adds the single-stream row)")
    if args.trace:
        multi = [k for k in runs if k > 1] or list(runs)
        best = min(multi, key=lambda k: runs[k].result.wall_us)
        write_kineto(args.trace, runs[best].result.timeline, label=out["label"])
    if note:
        print(note, file=sys.stderr)
    if args.format == "json":
        sys.stdout.write(render_json(out, indent=2))
    else:
        sys.stdout.write(render(out))
    return 0


def _plan_data(spec: str) -> bytes | None:
    """The bytes of ``spec`` when it is a plan document (a JSON object whose ``schema`` is
    the plan's, wherever the key stands: a plan saved with sorted keys has it after 4 KB
    of candidates, and was taken for a graph), else None."""
    import msgspec

    from ..plan.io import plan_shaped
    from ..plan.model import SCHEMA as PLAN_SCHEMA

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


#: a profile is a few kB; a larger JSON beside a plan (a trace) is not read whole
_PROFILE_MAX_BYTES = 4 << 20


def _profile_beside(plan_path: str, name: str):
    """((its file, the device profile) called ``name`` in a JSON file in the plan's own
    folder, or None; why the broken profiles there were passed over, or ""). Two such
    files that differ are refused (which one the plan was made with is unknown)."""
    import glob
    import os

    from ..device.profile import SCHEMA as PROFILE_SCHEMA
    from ..device.profile import loads_profile, read_profile_file

    found, rejected = [], []
    for path in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(plan_path)),
                                              "*.json"))):
        try:
            if os.path.getsize(path) > _PROFILE_MAX_BYTES:
                continue
            data = read_profile_file(path)
            if f'"{PROFILE_SCHEMA}"'.encode() not in data:  # it may come last (sorted keys)
                continue
            profile = loads_profile(data, path)
        except OSError:
            continue
        except InputError as exc:  # a profile, but a broken one: said if none is found
            rejected.append(str(exc))
            continue
        if profile.name == name:
            found.append((path, profile))
    if any(p != found[0][1] for _, p in found[1:]):  # copies of one profile are no doubt
        raise InputError(plan_path, f"{len(found)} profiles named {name!r} beside the plan "
                                    f"({', '.join(os.path.basename(p) for p, _ in found)}): "
                                    "name the one it was made with by --device")
    return (found[0] if found else None), "; ".join(rejected)


def render(out: dict) -> str:
    lines = [f"{out['model']}: {out['label']}" + (" (GE reorder emulated)" if out["ge_reorder"] else ""),
             "", f"{'streams':>7s} {'wall us':>12s} {'per s':>10s} {'speedup':>8s} {'overlap':>8s} "
             f"{'true/partial/false':>18s} {'cores busy':>10s}  plan"]
    for r in out["rows"]:
        v = r["verdict_counts"]
        ov = r["overlap_pct_median"]
        used = r.get("plan_streams", r["streams"])
        # at most k streams: the best plan may use fewer, which the column then shows
        k = f"{used} of {r['streams']}" if used != r["streams"] else str(r["streams"])
        lines.append(f"{k:>7s} {r['wall_us']:12.1f} {r['throughput_per_s'] or 0:10.1f} "
                     f"{r['speedup']:7.2f}x {('-' if ov is None else f'{ov:.2f}'):>8s} "
                     f"{v['true']:>6d}/{v['partial']}/{v['false']:<9d} {100 * r['core_occupancy']:9.1f}%"
                     f"  {r['plan']}")
    lines += ["", f"recommended: {out['recommendation']} ({out['label']})", ""]
    return "\n".join(lines)


def _ints(text: str | None, what: str) -> list[int | None]:
    if not text:
        return [None]
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
        assert vals and min(vals) > 0
        return vals
    except (ValueError, AssertionError):
        raise InputError(None, f"{what} wants positive integers like 1,8,32, not {text!r}") from None


def _shape_sweep(args: argparse.Namespace, profile, counts: list[int]) -> int:
    """A table like seed 003's (batch x sequence -> streams), derived from the model."""
    from ..graph.models import resolve
    from ..graph.render import render_json
    from .run import sim_label

    rows = []
    work: dict[str, dict] = {"batch": {}, "seq": {}}  # value -> the graph's work, per flag
    for b in _ints(args.batch, "--batch"):
        for q in _ints(args.seq, "--seq"):
            graph = resolve(args.model, scale=args.scale, phase=args.phase, batch=b, seq=q)
            size = (sum(o.flops for o in graph.ops), sum(o.bytes_read for o in graph.ops))
            work["batch"].setdefault(b, set()).add(size)
            work["seq"].setdefault(q, set()).add(size)
            out = sweep(graph, profile, sorted({1, *counts}), ge=args.ge, jitter=args.jitter,
                        seed=args.seed)  # the single-stream row: what speedups are over
            out.pop("_runs")
            best = min(out["rows"], key=lambda r: r["wall_us"])
            rows.append({"batch": b, "seq": q, "single_wall_us": out["rows"][0]["wall_us"],
                         "best_wall_us": best["wall_us"], "best_speedup": best["speedup"],
                         "recommended_streams": out["recommended_streams"],
                         "recommendation": out["recommendation"], "rows": out["rows"]})
    # a model that does not take the override gives one graph for every value: say so
    # rather than print a table of equal rows as if the shape did not matter
    ignored = [f"--{flag}" for flag, by in work.items()
               if len(by) > 1 and len(set.union(*by.values())) == 1]
    doc = {"schema": "parastream.simulation-sweep/1", "model": args.model, "device": profile.name,
           "label": sim_label(profile), "sweep": rows,
           "ignored": [f"{args.model} ignores {f}: the same graph for every value"
                       for f in ignored]}
    if args.format == "json":
        sys.stdout.write(render_json(doc, indent=2))
        return 0
    lines = [f"{args.model} ({args.scale}, {args.phase or 'default phase'}): {doc['label']}", "",
             f"{'batch':>6s} {'seq':>6s} {'1-stream us':>12s} {'best us':>10s} {'speedup':>8s}  recommendation"]
    for r in rows:
        lines.append(f"{r['batch'] or '-':>6} {r['seq'] or '-':>6} {r['single_wall_us']:12.1f} "
                     f"{r['best_wall_us']:10.1f} {r['best_speedup']:7.2f}x  {r['recommendation']}")
    lines += [f"note: {n}" for n in doc["ignored"]]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
