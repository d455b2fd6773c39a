"""``parastream run MODEL (--plan FILE | --auto)``: execute plans on real streams.

Prints the single- vs multi-stream median wall, the speedup, the simulator's predicted
wall next to the measured one, the overlap verdicts of the captured timeline and the
recommendation (keep, change candidate, stay single-stream) with its evidence.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import InputError
from ..cpu import malloc
from ..runtime.backend import declared_capabilities


def add_parser(sub: Any) -> None:
    """Add the ``run`` subcommand."""
    from .args import add_command, candidate_arg, json_arg, model_arg, shape_args

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
                   "workers on one core; slower for tiny ops)")
    p.add_argument("--side-by-side-only", dest="best_settings", action="store_false",
                   help="on cpu, skip measuring each side again in a process of its own in its "
                   "best OpenMP setting (single stream with threads spinning, streams with them "
                   "sleeping); skipped anyway when OMP_WAIT_POLICY is set")
    malloc.add_argument(p)
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    """Check the outputs, run (:func:`parastream.workflow.run.run`), print the table and
    the recommendation, write ``--json``; 1 when a checked candidate's outputs differ."""
    from ..atomic import check_folder, check_not_input, check_writable, same_file
    from ..atomic import spec_paths, write_atomic
    from ..workflow.run import RunSettings, run

    check_folder(args.trace)  # both before a minute of measuring, not after it
    check_writable(args.json, made=args.trace)
    check_not_input("--json", args.json, spec_paths(args.model, args.plan, args.profile))
    if args.json and args.trace and same_file(args.json, args.trace):
        raise InputError(args.json, "--json names the --trace folder: give it a file's name")
    out = sys.stdout
    settings = RunSettings(
        scale=args.scale, phase=args.phase, runs=args.runs, warmup=args.warmup, drop=args.drop,
        top=args.top, margin=args.margin, check=args.check, jitter=args.jitter,
        profile=args.profile, pin=args.pin, best_settings=args.best_settings,
        malloc=args.malloc, trace=args.trace, json=args.json,
        on_note=lambda line: out.write(line + "\n"),
        on_warning=lambda note: print(f"parastream: note: {note}", file=sys.stderr))
    result = run(args.model, settings, device=args.device, plan=args.plan,
                 candidate=args.candidate or "auto")
    _print(out, result)
    for line in result.written:
        out.write(line + "\n")
    if args.json:  # named by a schema, as parastream's documents are (analyze DIR skips it)
        write_atomic(args.json, json.dumps(result.to_dict(), indent=1))
    return 1 if args.check and result.outputs_differ else 0


def _print(out: Any, result: Any) -> None:
    """The run's table (single vs multi-stream, predicted beside measured), the separate
    processes' figures, each candidate's check, executor and triage lines, and the
    recommendation with its evidence."""
    from rich.console import Console
    from rich.table import Table

    from ..runtime.executor import pin_streams

    console = Console(file=out, width=160)
    t = Table(title=f"single vs multi-stream, medians of {result.runs - result.drop} runs "
              f"(first {result.drop} dropped)",
              caption="speedup: median single-stream wall over median multi-stream wall; "
                      "(a-b): quartiles of the rounds' own speedups (each round's single-stream "
                      "wall over its multi-stream wall), which need not contain it when the "
                      "machine's speed moves between rounds")
    for col in ("candidate", "streams", "single us", "multi us", "speedup", "predicted us",
                "pred. speedup", "pred. from ops us", "overlap_pct", "verdicts", "triage",
                "outputs"):
        t.add_column(col)
    for r, d in zip(result.candidates, result.details):
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
    iso = result.separate_processes
    if iso:
        single = f"{iso['single_us']:,.0f} us" if iso.get("single_us") else "-"
        cands = "; ".join(f"{n[:40]} {us:,.0f} us" for n, us in iso["candidates_us"].items())
        console.print(f"in separate processes (each side in its best OpenMP setting): single "
                      f"stream, threads spinning {single}; candidates, threads sleeping: "
                      f"{cands or '-'}. The recommendation takes the faster figure of each side."
                      + (f" Not measured: {'; '.join(iso['errors'])}" if iso["errors"] else ""),
                      markup=False)
    for d in result.details:
        if d.get("check"):
            console.print(f"{d['candidate'][:60]}: check: {d['check']}", markup=False)
        m = d["measurement"]
        console.print(f"{d['candidate'][:60]}: single-stream executor {m['single_executor_median_us']:,.0f} us "
                      f"(plain module {m['single_median_us']:,.0f} us, {m['single_threads']} threads); "
                      f"multi {m['multi_threads_per_stream']} thread(s)/stream; triage "
                      f"{d['triage']['verdict']}: {d['triage']['summary']}", markup=False)
        line = faults_line(d["candidate"], m.get("faults_per_call"), result.device,
                           result.malloc)
        if line:
            console.print(line, markup=False)
        lag = d.get("start_lag") or {}
        if lag.get("frequent") and not pin_streams():
            console.print(f"{d['candidate'][:60]}: in {lag['late_runs']} of {lag['runs']} runs a "
                          f"stream started its first op {lag['threshold_us']:,.0f} us or more "
                          f"after it could (median of those {lag['late_median_us']:,.0f} us): "
                          "most likely the OS queued two stream workers on one core. --pin "
                          "gives each its own (slower for tiny ops)", markup=False)
    rec = result.recommendation
    word = {"keep": "KEEP", "change": "CHANGE CANDIDATE", "single": "STAY SINGLE-STREAM"}[rec.action]
    console.print(f"recommendation: {word} - {rec.summary}", markup=False)
    for e in rec.evidence:
        console.print(f"  evidence: {e}", markup=False)


def faults_line(candidate: str, faults: list | None, device: str | None,
                malloc_choice: str | None) -> str | None:
    """The line ``run`` prints about a candidate's page faults per call (plain module,
    multi-stream), or None when there were none (or not on a backend of host threads: on
    a device the process-wide count holds the driver's faults too)."""
    if not faults or max(faults) <= 0 or not declared_capabilities(device).host_threads:
        return None
    return (f"{candidate[:60]}: page faults per call, median: plain module {faults[0]:,.0f}, "
            f"multi-stream {faults[1]:,.0f} (mostly memory the allocator gave back to the OS "
            "and maps again, about a microsecond each on a VM; the prediction has none of it"
            + ("; --malloc keep avoids most" if malloc_choice == "system" else "") + ")")




__all__ = ["add_parser", "cmd_run", "faults_line"]
