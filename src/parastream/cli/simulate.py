"""``parastream simulate MODEL|PLAN``: predicted wall per stream count on a device profile.

Every figure is labelled "simulated on <profile>": these are predictions, not measurements.
The simulation itself is :func:`parastream.workflow.simulate.simulate`; this module parses
the flags, and writes and renders its result.
"""

from __future__ import annotations

import argparse
import sys

from ..device.profile import DEFAULT_DEVICE
from ..errors import InputError
from ..sim.modes import MODES, mode_label

from ..workflow.simulate import ShapeSweep, Simulation, simulate


def add_parser(sub) -> None:
    """Add the ``simulate`` subcommand."""
    from .args import (add_command, candidate_arg, device_arg, format_arg, json_arg,
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


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate ``args.model``; write ``--trace`` and ``--json`` when asked, say which
    profile a plan ran on, and print the report."""
    from ..report.graph import render_json
    from ..atomic import check_outputs, spec_paths, write_atomic

    check_outputs({"-o/--output": args.output, "--trace": args.trace, "--json": args.json},
                  spec_paths(args.model, args.device))
    if args.trace and (args.batch or args.seq):
        raise InputError(None, "--trace writes one simulated run; --batch/--seq sweep many: "
                               "drop one of them")
    result = simulate(args.model, device=args.device, streams=args.streams, scale=args.scale,
                      phase=args.phase, batch=args.batch, seq=args.seq, mode=args.mode,
                      ge=args.ge, candidate=args.candidate, jitter=args.jitter, seed=args.seed)
    doc = render_json(result.to_dict(), indent=2)
    if isinstance(result, Simulation) and args.trace:
        from ..report.kineto import write_kineto

        write_kineto(args.trace, result.trace_run().result.timeline, label=result.label)
    if args.json:
        write_atomic(args.json, doc)
    for note in getattr(result, "notes", ()):
        print(note, file=sys.stderr)
    if args.format == "json":
        _write(args.output, doc)
    elif isinstance(result, ShapeSweep):
        _write(args.output, render_sweep(result))
    else:
        _write(args.output, render(result.to_dict()))
    return 0


def _write(output: str | None, text: str) -> None:
    """The report to ``-o/--output`` (said on stderr), else to stdout."""
    if output:
        from ..atomic import write_atomic

        write_atomic(output, text)
        print(f"wrote {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def render(out: dict) -> str:
    """The simulation document as text: the best plan per stream count, then every
    candidate's predicted wall with its flags, then the recommendation."""
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


def render_sweep(result: ShapeSweep) -> str:
    """A shape sweep as text: batch x sequence -> single-stream and best wall, speedup and
    recommendation, then what the model ignored."""
    lines = [f"{result.model} ({result.scale}, {result.phase or 'default phase'}): "
             f"{result.label}, {mode_label(result.mode, result.ge_reorder)}", "",
             f"{'batch':>6s} {'seq':>6s} {'1-stream us':>12s} {'best us':>10s} {'speedup':>8s}"
             "  recommendation"]
    for r in result.sweep:
        lines.append(f"{r['batch'] or '-':>6} {r['seq'] or '-':>6} {r['single_wall_us']:12.1f} "
                     f"{r['best_wall_us']:10.1f} {r['best_speedup']:7.2f}x  {r['recommendation']}")
    lines += [f"note: {n}" for n in result.ignored]
    return "\n".join(lines) + "\n"


__all__ = ["add_parser", "cmd_simulate", "render", "render_sweep"]
