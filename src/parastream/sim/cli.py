"""``parastream simulate MODEL|PLAN``: predicted wall per stream count on a device profile.

Every figure is labelled "simulated on <profile>": these are predictions, not measurements.
"""

from __future__ import annotations

import argparse
import sys

from ..device.profile import DEFAULT_DEVICE
from ..errors import InputError, naming

from ..plan.model import SPEEDUP_MARGIN
from .modes import MODES



def add_parser(sub) -> None:
    from ..cliargs import (add_command, candidate_arg, device_arg, format_arg, json_arg,
                           model_arg, output_arg, shape_args)

    p = add_command(sub, "simulate", help="predict multi-stream gains on a modelled device",
                    description="Plan the model for 1..N streams, run each plan through a "
                    "discrete-event model of the device's stream scheduler, and report "
                    "predicted wall, speedup, overlap verdicts and core occupancy.",
                    glossary=("candidates", "ladder", "verdicts"))
    model_arg(p, metavar="MODEL|PLAN", help="zoo name, file.py:factory, graph JSON, or a "
              "plan.json from 'parastream plan'")
    device_arg(p, default=None, note=f"a plan's own device, else {DEFAULT_DEVICE} as in "
                                     "'parastream graph' and 'parastream plan'")
    p.add_argument("--streams", help="stream counts to try (default 1,2,3,4)")
    shape_args(p, scale_note="small; a plan's own is fixed")
    p.add_argument("--batch", help="zoo batch sizes to sweep, e.g. 1,8,32")
    p.add_argument("--seq", help="zoo sequence lengths to sweep, e.g. 512,1024,2048")
    p.add_argument("--mode", choices=MODES, help="how the tasks are issued: eager (the host "
                   "launches each op, launch_overhead_us apart; the default) or graph (from a "
                   "captured graph: no host launch per op, the profile's graph_dispatch_us per "
                   "task on its queue)")
    p.add_argument("--ge", action="store_true", help="emulate GE's auto-reorder of cheap "
                   "precomputes (Ascend graph mode); implies --mode graph: each ge-reorder "
                   "lint's precompute is issued on the main stream ahead of its dominator. "
                   "Compare with --mode graph to see what the reorder costs")
    candidate_arg(p, what="simulate alone beside the single-stream baseline",
                  default="every candidate of the plan")
    output_arg(p, "the report (text, or --format json)")
    json_arg(p, "the simulation document (the --format json output)")
    p.add_argument("--jitter", type=float, default=0.0, help="relative duration jitter (e.g. 0.1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", metavar="FILE", help="write the best multi-stream run as a trace "
                   "that 'parastream analyze' and Perfetto read (one model, not a --batch/--seq "
                   "sweep)")
    format_arg(p, ("text", "json"))
    p.set_defaults(func=cmd_simulate)


def sweep(graph, profile, stream_counts: list[int], *, mode: str = "eager", ge: bool = False,
          jitter: float = 0.0, seed: int = 0, plans: list | None = None) -> dict:
    """Simulate every candidate (the given plans, else the planner's for each stream count)
    in ``mode`` (with GE's reorder when ``ge``): a row per stream count with its fastest
    plan, every candidate's wall in ``candidates`` with what makes it implausible
    (:func:`flags`), and the recommendation, which no flagged candidate can be."""
    from ..device.cost import estimate, with_cold
    from ..graph.ir import validate
    from ..plan.assign import assign
    from ..plan.cli import build
    from ..timeline.analyze import analyze_capture
    from .run import sim_label, simulate_plan

    costs = {o.name: estimate(o, profile) for o in graph.ops}  # the simulator adds cold costs
    order = validate(graph)  # once for every plan simulated below
    dur = {n: c.dur_us for n, c in with_cold(graph.index(), costs, order, profile).items()}
    memo: dict[tuple, object] = {}

    def run_of(plan):
        # one simulation per distinct plan (a cap that did not bind gives the same one)
        key = (plan.name, tuple(sorted(plan.assignment.items())), repr(plan.core_limits),
               tuple((e.record_after, e.wait_before) for e in plan.events))
        if key not in memo:
            memo[key] = simulate_plan(graph, plan, profile, mode=mode, ge=ge, jitter=jitter,
                                      seed=seed, costs=costs, order=order)
        return memo[key]

    best_runs: dict[int, object] = {}
    for k in stream_counts:
        if plans is not None:
            # the streams its assignment uses, not its `streams` field (a hand edit of that
            # made a 4-stream candidate the single-stream baseline)
            cands = [p for p in plans if p.stream_count() == k] if k else plans
        elif k == 1:
            cands = [assign(graph, "single", durations=dur, order=order)]
        else:
            # every candidate of the planner within k streams: it ranks them in eager mode,
            # and graph mode, GE's reorder or jitter can change the order
            doc = build(graph, profile, algorithm=None, mapping=None, max_streams=k)
            cands = [c for c in doc.candidates if 2 <= c.stream_count() <= k]  # k >= 2 streams
        if not cands:
            continue
        runs = [run_of(c) for c in cands]
        if plans is None and k >= 2:
            # a budget of k streams allows every plan found for fewer: the planner's
            # candidates at cap k need not hold its best at a smaller cap (moe_layer 7b on
            # ascend910b: matching merged to 2 streams beat every 3-stream candidate)
            runs += [r for kk, r in best_runs.items() if 2 <= kk < k]
        best_runs[k] = min(runs, key=lambda r: (r.result.wall_us, r.plan.stream_count(),
                                                r.plan.name))
    single = [r for r in memo.values() if r.plan.stream_count() == 1]
    base = (min(r.result.wall_us for r in single) if single
            else min((r.result.wall_us for r in memo.values()), default=0.0))
    cands = _candidates(list(memo.values()), base, profile)
    names: dict[str, int] = {}
    for r in memo.values():
        names[r.plan.name] = names.get(r.plan.name, 0) + 1
    rows = [_row(k, run, base, profile, analyze_capture, names) for k, run in best_runs.items()]
    by_name = {c["name"]: c for c in cands}
    for r in rows:
        r["flags"] = by_name[r["plan"]]["flags"]
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
    return {"schema": "parastream.simulation/1", "model": graph.name, "device": profile.name,
            "label": sim_label(profile), "mode": mode, "ge_reorder": ge,
            "hw_queues": profile.hw_queues, "rows": rows, "candidates": cands,
            "recommended_streams": rec, "recommended_candidate": rec_plan,
            "recommendation": ("single stream: multi-stream does not pay here" if rec == 1
                               else f"{rec} streams ({rec_plan})"),
            "_runs": best_runs}


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


def _bound(plan) -> float | None:
    """The headroom bound a plan carries (``meta["bound_speedup"]``), if any."""
    b = (plan.meta or {}).get("bound_speedup")
    return float(b) if isinstance(b, (int, float)) and not isinstance(b, bool) and b > 0 else None


def _candidates(runs: list, base: float, profile) -> list[dict]:
    """Every simulated candidate, fastest first; a name the planner gave two different
    plans (at two stream caps) is told apart by its stream count (:func:`_label`)."""
    names: dict[str, int] = {}
    for r in runs:
        names[r.plan.name] = names.get(r.plan.name, 0) + 1
    out = []
    for r in sorted(runs, key=lambda r: (r.result.wall_us, r.plan.stream_count(), r.plan.name)):
        k = r.plan.stream_count()
        wall = r.result.wall_us
        speedup = round(base / wall, 4) if wall else None
        name = _label(r.plan, names)
        hoisted = [list(x) for x in r.reorder.hoisted] if r.reorder else []
        out.append({"name": name, "streams": k, "wall_us": round(wall, 3), "speedup": speedup,
                    "flags": flags(k, speedup, profile.hw_queues, _bound(r.plan)),
                    "lints": sorted({l.rule for l in r.plan.lints}),
                    "ge_hoisted": hoisted})
    return out


def _label(plan, names: dict[str, int]) -> str:
    """``plan``'s name in the output, with its stream count when ``names`` (name -> how
    many simulated plans carry it) says another plan has the same name."""
    k = plan.stream_count()
    return plan.name if names.get(plan.name, 1) == 1 else f"{plan.name} [{k} streams]"


def _row(k: int, run, base: float, profile, analyze_capture, names: dict[str, int]) -> dict:
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


def cmd_simulate(args: argparse.Namespace) -> int:
    from ..device.profile import load_profile, warn_if_noted
    from ..graph.models import load_graph
    from ..graph.render import render_json
    from ..report.atomic import check_outputs, spec_paths
    from ..report.kineto import write_kineto

    from ..report.atomic import write_atomic

    check_outputs({"-o/--output": args.output, "--trace": args.trace, "--json": args.json},
                  spec_paths(args.model, args.device))
    if args.ge and args.mode == "eager":
        raise InputError(None, "--ge emulates a graph compiler's reorder, which eager mode "
                               "has none of: drop --mode eager (--ge implies --mode graph)")
    mode = args.mode or ("graph" if args.ge else "eager")
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
    if args.candidate is not None and not is_plan:
        raise InputError(spec, "--candidate picks a candidate of a plan file (from "
                               "'parastream plan -o plan.json'): simulate that file")
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
        from ..plan.io import loads, pick, require_fit

        try:
            doc = loads(plan_data)
        except ValueError as exc:
            raise InputError(spec, str(exc)) from None
        # before the model is built: an unknown or ambiguous name costs no import
        picked = pick(doc, args.candidate, spec) if args.candidate is not None else None
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
    from .run import require_mode

    require_mode(profile, mode, args.device or profile.name)
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
        if picked is not None:
            plans = [picked]
        for c in plans:  # as run and emit do: never predict from a plan that is not safe
            require_fit(graph, c, spec, f"{src['model']} at scale {src.get('scale', 'small')}")
        if not any(c.stream_count() == 1 for c in plans):
            # speedups are over single stream: simulate that baseline too (a plan cut down
            # to one multi-stream candidate was its own baseline, 1.00x)
            from ..plan.model import Plan

            plans = [Plan.single(o.name for o in graph.ops), *plans]
        counts = sorted({c.stream_count() for c in plans})
    elif args.batch or args.seq:
        return _shape_sweep(args, profile, counts, mode)
    else:
        graph = load_graph(spec, args.scale, args.phase, device)
    if not graph.ops:
        raise InputError(spec, "the graph has no ops: nothing to simulate")
    out = sweep(graph, profile, counts, mode=mode, ge=args.ge, jitter=args.jitter,
                seed=args.seed, plans=plans)
    runs = out.pop("_runs")
    if not out["rows"]:
        raise InputError(spec, f"nothing to simulate for --streams {args.streams}: the model "
                               "has no multi-stream candidate (1 adds the single-stream row)")
    if args.trace:
        multi = [k for k in runs if k > 1] or list(runs)
        best = min(multi, key=lambda k: runs[k].result.wall_us)
        write_kineto(args.trace, runs[best].result.timeline, label=out["label"])
    if args.json:
        write_atomic(args.json, render_json(out, indent=2))
    if note:
        print(note, file=sys.stderr)
    _write(args.output, render_json(out, indent=2) if args.format == "json" else render(out))
    return 0


def _write(output: str | None, text: str) -> None:
    """The report to ``-o/--output`` (said on stderr), else to stdout."""
    if output:
        from ..report.atomic import write_atomic

        write_atomic(output, text)
        print(f"wrote {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)


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
    """The simulation document as text: the best plan per stream count, then every
    candidate's predicted wall with its flags, then the recommendation."""
    from .modes import mode_label

    said = mode_label(out["mode"], out["ge_reorder"])
    lines = [f"{out['model']}: {out['label']}, {said}", "",
             f"{'streams':>7s} {'wall us':>12s} {'per s':>10s} {'speedup':>8s} {'overlap':>8s} "
             f"{'true/partial/false':>18s} {'cores busy':>10s}  plan"]
    for r in out["rows"]:
        v = r["verdict_counts"]
        ov = r["overlap_pct_median"]
        used = r.get("plan_streams", r["streams"])
        # at most k streams: the best plan may use fewer, which the column then shows
        k = f"{used} of {r['streams']}" if used != r["streams"] else str(r["streams"])
        flag = f"  [{'; '.join(r['flags'])}]" if r.get("flags") else ""
        lines.append(f"{k:>7s} {r['wall_us']:12.1f} {r['throughput_per_s'] or 0:10.1f} "
                     f"{r['speedup']:7.2f}x {('-' if ov is None else f'{ov:.2f}'):>8s} "
                     f"{v['true']:>6d}/{v['partial']}/{v['false']:<9d} {100 * r['core_occupancy']:9.1f}%"
                     f"  {r['plan']}{flag}")
    lines += ["", f"candidates ({len(out['candidates'])}, fastest first):",
              f"{'streams':>7s} {'wall us':>12s} {'speedup':>8s}  candidate"]
    for c in out["candidates"]:
        notes = list(c["flags"])
        if c.get("ge_hoisted"):
            notes.append("GE issues " + ", ".join(f"{v} ahead of {d}" for v, d in c["ge_hoisted"]))
        mark = "* " if c.get("recommended") else "  "
        note = f"  [{'; '.join(notes)}]" if notes else ""
        lines.append(f"{c['streams']:>7d} {c['wall_us']:12.1f} {c['speedup'] or 0:7.2f}x"
                     f"{mark}{c['name']}{note}")
    lines += ["", f"recommended (*): {out['recommendation']} ({out['label']}, {said})", ""]
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


def _shape_sweep(args: argparse.Namespace, profile, counts: list[int], mode: str) -> int:
    """A table like seed 003's (batch x sequence -> streams), derived from the model."""
    from ..graph.models import resolve
    from ..graph.render import render_json
    from ..report.atomic import write_atomic
    from .modes import mode_label
    from .run import sim_label

    rows = []
    work: dict[str, dict] = {"batch": {}, "seq": {}}  # value -> the graph's work, per flag
    for b in _ints(args.batch, "--batch"):
        for q in _ints(args.seq, "--seq"):
            graph = resolve(args.model, scale=args.scale, phase=args.phase, batch=b, seq=q)
            size = (sum(o.flops for o in graph.ops), sum(o.bytes_read for o in graph.ops))
            work["batch"].setdefault(b, set()).add(size)
            work["seq"].setdefault(q, set()).add(size)
            out = sweep(graph, profile, sorted({1, *counts}), mode=mode, ge=args.ge,
                        jitter=args.jitter, seed=args.seed)  # the single-stream row: the base
            out.pop("_runs")
            best = min(out["rows"], key=lambda r: r["wall_us"])
            rows.append({"batch": b, "seq": q, "single_wall_us": out["rows"][0]["wall_us"],
                         "best_wall_us": best["wall_us"], "best_speedup": best["speedup"],
                         "recommended_streams": out["recommended_streams"],
                         "recommendation": out["recommendation"], "rows": out["rows"],
                         "candidates": out["candidates"]})
    # a model that does not take the override gives one graph for every value: say so
    # rather than print a table of equal rows as if the shape did not matter
    ignored = [f"--{flag}" for flag, by in work.items()
               if len(by) > 1 and len(set.union(*by.values())) == 1]
    doc = {"schema": "parastream.simulation-sweep/1", "model": args.model, "device": profile.name,
           "label": sim_label(profile), "sweep": rows,
           "mode": mode, "ge_reorder": args.ge,
           "ignored": [f"{args.model} ignores {f}: the same graph for every value"
                       for f in ignored]}
    if args.json:
        write_atomic(args.json, render_json(doc, indent=2))
    if args.format == "json":
        _write(args.output, render_json(doc, indent=2))
        return 0
    lines = [f"{args.model} ({args.scale}, {args.phase or 'default phase'}): {doc['label']}, "
             f"{mode_label(mode, args.ge)}", "",
             f"{'batch':>6s} {'seq':>6s} {'1-stream us':>12s} {'best us':>10s} {'speedup':>8s}  recommendation"]
    for r in rows:
        lines.append(f"{r['batch'] or '-':>6} {r['seq'] or '-':>6} {r['single_wall_us']:12.1f} "
                     f"{r['best_wall_us']:10.1f} {r['best_speedup']:7.2f}x  {r['recommendation']}")
    lines += [f"note: {n}" for n in doc["ignored"]]
    _write(args.output, "\n".join(lines) + "\n")
    return 0
