"""``parastream demo``: the whole loop on a built-in model, on this machine.

Parses the command's arguments, runs :func:`parastream.workflow.demo.demo` (import,
decompose, calibrate, plan, simulate, run the best candidates against single stream,
analyse, write the report folder) and prints what was measured and the recommendation.
"""

from __future__ import annotations

import os
import sys

from ..cpu import malloc
from ..runtime.backend import backend_capabilities
from ..workflow.demo import DEFAULT_MODEL, DEFAULT_SCALE, DemoResult, DemoSettings


def add_parser(sub) -> None:
    """Add the ``demo`` subcommand."""
    from .args import add_command, shape_args

    p = add_command(sub, "demo", help="the whole loop on a built-in model: plan, simulate, run, "
                                      "verify",
                    description="Import a zoo model, decompose it, calibrate this CPU, plan and "
                    "simulate candidates, run the best ones and the single-stream baseline on "
                    "real CPU streams, analyse the captured timeline, and write a report folder.",
                    glossary=("candidates", "verdicts", "triage"))
    p.add_argument("--out", default="out/demo", metavar="DIR",
                   help="report folder (default out/demo)")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"zoo model (default {DEFAULT_MODEL}); your own model: "
                   "parastream run FILE.py:factory --auto")
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
    """Refuse what the demo cannot run (before any work), run it, print the table."""
    from ..workflow.demo import demo

    settings = DemoSettings(model=args.model, scale=args.scale, phase=args.phase,
                            runs=args.runs, candidates=args.candidates, profile=args.profile,
                            best_settings=args.best_settings, device=args.device,
                            progress=not args.no_progress)
    settings.validate()
    from ..graph.models import _need_torch

    _need_torch("demo")  # the zoo models are torch modules and the demo runs them
    settings.require_zoo_model()
    print(malloc.apply(args.malloc))
    r = demo(args.out, settings)
    on_host = backend_capabilities(args.device).host_threads
    where = f"this CPU ({os.cpu_count()} cores)" if on_host else r.device_name or args.device
    print(f"\nparastream demo: {r.model} on {where} in {r.seconds} s")
    _print_measured(r, args.device, where)
    for note in r.notes:
        print(note)
    print(f"recommendation: {r.recommended}" + (f" ({r.summary})" if r.summary else "")
          + (f"   triage: {r.verdict}" if r.verdict else ""))
    print(f"report: {os.path.join(r.out_dir, 'report.html')} (+ {', '.join(r.files[1:])})")
    sys.stdout.flush()
    return 0


def _print_measured(r: DemoResult, device: str, where: str) -> None:
    """The table of predicted and measured walls, and the separate processes' figures."""
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
    on_host = backend_capabilities(device).host_threads
    kind = "CPU" if on_host else where
    ops_from = ("the op times of the single-stream runs" if on_host
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
