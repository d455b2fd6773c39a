"""``parastream pipeline``: the image-classification demo, serial then pipelined.

Decode + resize deterministic JPEGs, normalise, copy, run a small CNN, copy back, softmax +
top-k — first as a serial loop, then as a pipeline (replicas from ``--replicas`` or planned
from the serial run's stage times). Prints throughput, per-stage utilization, the
efficiency E and the speedup; checks the pipelined outputs equal the serial ones; writes
the HTML report (both runs' timelines) and a Kineto-style trace that ``parastream analyze``
reads.

Exit codes: 0 when both runs ended (under ``--on-error skip`` or ``retry:N`` with items
dropped, named in the report), 2 for bad input, :data:`EXIT_STAGE_FAILED` (1) when a stage
raised on an item and the error policy stopped the run: one line naming the run, the stage,
the item and the error, and nothing written.
"""

from __future__ import annotations

import argparse
import io
import sys
from typing import Any, Iterable

from ..errors import InputError

#: a stage raised on an item and the error policy stopped the run (bad input is 2)
EXIT_STAGE_FAILED = 1

ON_ERROR_HELP = (
    "what a stage raising on an item does, in both runs: fail (the default: stop, one line "
    "naming the stage and the item, exit 1), skip (drop the item, its outcome 'failed', and "
    "go on), retry:N (call the stage again on the item up to N times, N from 1 to 100; an "
    "item that still fails is dropped as under skip and the run goes on). The report names "
    "every skipped and retried item; items in = out + failed")


def add_parser(subparsers: Any) -> None:
    """Add the ``pipeline`` subcommand."""
    from .args import add_command, format_arg, output_arg

    p = add_command(
        subparsers, "pipeline", help="run the image pipeline demo serially, then pipelined, and compare",
        description=("Run a real workload (JPEG decode+resize, normalise, copy, CNN inference, "
                     "copy, softmax/top-k) first as a serial loop, then with every stage on its "
                     "own worker/stream and bounded queues between them. Reports throughput, "
                     "per-stage utilization, efficiency E (throughput x bottleneck stage time) "
                     "and speedup, with a warning when other tasks took the cores while it "
                     "measured or the speedup is above what its workers or the cores can give. "
                     "A stage raising on an item stops the command with one line and exit "
                     "code 1 unless --on-error skip or retry:N goes on past it."))
    p.add_argument("--items", type=int, default=48, metavar="N",
                   help="items (batches of images) to process (default 48)")
    p.add_argument("--batch", type=int, default=4, metavar="B", help="images per item (default 4)")
    p.add_argument("--replicas", metavar="STAGE=N,...", default="auto",
                   help="workers per stage, e.g. decode=2,infer=1 (default: planned from the "
                        "serial run's stage times); stages: decode, normalize, h2d, infer, d2h, "
                        "postprocess")
    p.add_argument("--depth", type=int, metavar="N", help="queue depth between stages "
                   "(default: planned, at least 2 and at least the largest replica count)")
    p.add_argument("--unordered", action="store_true",
                   help="hand out items as they finish instead of in input order")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="torch intra-op threads, set once for both runs (default 1: the stages "
                        "provide the parallelism)")
    p.add_argument("--on-error", default="fail", metavar="fail|skip|retry:N", help=ON_ERROR_HELP)
    p.add_argument("--corrupt", metavar="ITEM,...", default="",
                   help="items (ids from 0) whose first image is a truncated JPEG, so the "
                        "decode stage raises on them: a fault to try --on-error with")
    p.add_argument("--html", metavar="FILE", help="write an HTML report of both runs")
    p.add_argument("--trace", metavar="FILE",
                   help="write the pipelined run as a Kineto-style trace (parastream analyze FILE)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    format_arg(p, ("text", "json"))
    output_arg(p, "the comparison (text, or --format json)")
    p.set_defaults(func=cmd_pipeline)


from ..workflow.pipeline import MAX_REPLICAS


def parse_replicas(spec: str, stages: Iterable[str]) -> dict[str, int]:
    """``"decode=2,infer=1"`` -> ``{"decode": 2, "infer": 1}``; InputError on bad text."""
    names = list(stages)
    out: dict[str, int] = {}
    for part in filter(None, (s.strip() for s in spec.split(","))):
        name, eq, num = part.partition("=")
        name = name.strip()
        if not eq or name not in names:
            raise InputError(None, f"--replicas: {part!r} is not STAGE=N with STAGE one of "
                                   f"{', '.join(names)}")
        try:
            n = int(num)
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_REPLICAS:  # each replica is a thread of this process
            raise InputError(None, f"--replicas: {part!r}: N must be an integer from 1 to "
                                   f"{MAX_REPLICAS}")
        if name in out:
            raise InputError(None, f"--replicas: {name} is given twice")
        out[name] = n
    return out


def parse_items(spec: str) -> tuple[int, ...]:
    """``"3,96"`` -> ``(3, 96)``; InputError naming ``--corrupt`` on anything else."""
    out = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        try:
            out.append(int(part))
        except ValueError:
            raise InputError(None, f"--corrupt: {part!r} is not an item id (an integer from "
                                   "0)") from None
    return tuple(out)


def settings_from(args: argparse.Namespace) -> Any:
    """The run's :class:`~parastream.workflow.pipeline.PipelineSettings` from the flags,
    checked (an InputError naming the flag)."""
    from ..pipeline.workload import STAGE_NAMES
    from ..workflow.pipeline import PipelineSettings, check_settings

    replicas = None if args.replicas == "auto" else parse_replicas(args.replicas, STAGE_NAMES)
    s = PipelineSettings(args.items, args.batch, replicas, args.depth, not args.unordered,
                         args.threads, not args.no_progress, args.on_error,
                         parse_items(args.corrupt))
    check_settings(s)
    return s


def stage_failed(exc: Any) -> str:
    """The one line for a run the error policy stopped (:class:`PipelineError`)."""
    run = f"the {exc.run} run" if exc.run else "the run"
    why = f" ({exc.note})" if exc.note else (" (--on-error skip or retry:N goes on past a "
                                             "failing item)")
    return f"parastream: pipeline: {run} stopped: {exc}{why}"


def cmd_pipeline(args: argparse.Namespace) -> int:
    """Run the demo (:func:`parastream.workflow.pipeline.compare_runs`) and print or write
    the comparison, the HTML report and the trace; a run the error policy stopped is one
    line on stderr and :data:`EXIT_STAGE_FAILED`, with nothing written."""
    from ..atomic import check_outputs
    from ..pipeline.core import PipelineError
    from ..workflow.pipeline import compare_runs, require_workload_packages

    settings = settings_from(args)
    require_workload_packages()
    # both before the run: no output left behind for a bad one, nor one over the other
    check_outputs({"-o/--output": args.output, "--html": args.html, "--trace": args.trace})
    try:
        result = compare_runs(settings)
    except PipelineError as exc:
        print(" ".join(stage_failed(exc).split()), file=sys.stderr)
        return EXIT_STAGE_FAILED
    doc = result.to_dict()
    if args.format == "json":
        from ..report.graph import render_json

        text = render_json(doc, indent=2)
    else:
        text = render_text(doc)
    if args.output:
        from ..atomic import write_atomic

        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    if args.html:
        write_report(args.html, doc, result.serial_timeline, result.pipelined_timeline)
    if args.trace:
        write_trace(args.trace, result.pipelined_timeline)
    for path in (args.output, args.html, args.trace):
        if path:
            print(f"wrote {path}", file=sys.stderr)
    return 0


def render_text(doc: dict) -> str:
    """The comparison as a terminal table (rich, rendered to text)."""
    from rich.console import Console
    from rich.table import Table

    ser, pip = doc["serial"], doc["pipelined"]
    t = Table(title=f"parastream pipeline — {doc['items']} items x {doc['images_per_item']} "
                    f"images, {doc['device']}", title_justify="left")
    for col in ("stage", "replicas", "serial ms/item", "pipelined ms/item", "serial util",
                "pipelined util", "queue wait ms/item"):
        t.add_column(col, justify="left" if col == "stage" else "right")
    for s, p in zip(ser["stages"], pip["stages"]):
        mark = " *" if p["name"] == doc["bottleneck"] else ""
        t.add_row(p["name"] + mark, str(p["replicas"]), f"{s['mean_ms']:.3f}",
                  f"{p['mean_ms']:.3f}", f"{s['utilization']:.1%}", f"{p['utilization']:.1%}",
                  f"{p['mean_queue_wait_ms']:.3f}")
    console = Console(record=True, width=110, file=io.StringIO(), color_system=None)
    console.print(t)
    bu = doc["bottleneck_utilization"]
    planned = ", ".join(f"{k}={v}" for k, v in doc["plan"]["replicas"].items() if v > 1)
    lines = [
        console.export_text().rstrip(),
        "* bottleneck: highest stage time / replicas",
        f"throughput: serial {ser['throughput_per_s']:.2f} items/s, pipelined "
        f"{pip['throughput_per_s']:.2f} items/s, speedup {doc['speedup']}x",
        f"bottleneck ({doc['bottleneck']}) utilization: serial {bu['serial']:.1%} -> pipelined "
        f"{bu['pipelined']:.1%}",
        f"efficiency E = throughput x bottleneck time: {doc['efficiency']:.3f}",
        f"latency ms: p50 {pip['latency_ms']['p50']:.2f}, p95 {pip['latency_ms']['p95']:.2f} "
        f"(serial p50 {ser['latency_ms']['p50']:.2f})",
        f"queues: depth {doc['depth']}, {'ordered' if doc['ordered'] else 'unordered'}, at most "
        f"{pip['max_in_flight']} of {pip['capacity']} items in flight, source blocked "
        f"{pip['source_blocks']} times",
        f"plan from serial stage times: {planned or 'one worker each'}"
        f", depth {doc['plan']['depth']} (predicted {doc['plan']['throughput_per_s']:.2f} items/s)",
        f"outputs identical to the serial loop: {'yes' if doc['outputs_identical'] else 'NO'}",
        error_line(pip),
        *(f"warning: {w}" for w in (doc["busy"], doc["implausible"]) if w),
    ]
    return "\n".join(lines) + "\n"


def error_line(run: dict, most: int = 10) -> str:
    """The pipelined run's error policy and its items: in = out + failed, the skipped and
    retried items named (item id, stage, the error's first line; the first ``most``)."""
    c = run["counts"]
    line = (f"errors (--on-error {run['on_error']}): {run['submitted']} items in = "
            f"{c['completed']} out + {c['failed']} failed"
            + (f" + {c['cancelled']} cancelled" if c["cancelled"] else ""))
    recovered = [e for e in run["retried"] if e["recovered"]]
    if run["retried"]:
        line += (f"\n  retried {len(run['retried'])}: {len(recovered)} succeeded on a later "
                 "call, the others are skipped")
    for what, found in (("skipped", run["skipped"]), ("retried, then succeeded", recovered)):
        if found:
            named = "; ".join(_named(e) for e in found[:most])
            more = f"; and {len(found) - most} more" if len(found) > most else ""
            line += f"\n  {what} {len(found)}: {named}{more}"
    return line


def _named(e: dict) -> str:
    """One skipped or retried item: ``item 96 at decode (OSError: ..., 3 calls)``."""
    calls = f", {e['attempts']} calls" if e["attempts"] > 1 else ""
    return f"item {e['item']} at {e['stage']} ({e['error']}{calls})"


def write_report(path: str, doc: dict, serial_tl: Any, pipe_tl: Any) -> None:
    """Both runs in one HTML report, each with its analysis."""
    from ..report.html import write_html
    from ..timeline.analyze import analyze_capture

    caps = [(tl, analyze_capture(tl, label=label))
            for tl, label in ((serial_tl, "serial"), (pipe_tl, "pipelined"))]
    summary = {"throughput serial (items/s)": doc["serial"]["throughput_per_s"],
               "throughput pipelined (items/s)": doc["pipelined"]["throughput_per_s"],
               "speedup": doc["speedup"], "efficiency E": doc["efficiency"],
               "bottleneck": doc["bottleneck"],
               "bottleneck utilization serial": doc["bottleneck_utilization"]["serial"],
               "bottleneck utilization pipelined": doc["bottleneck_utilization"]["pipelined"],
               "outputs identical": doc["outputs_identical"],
               "on error": doc["on_error"],
               "items failed (pipelined)": doc["pipelined"]["counts"]["failed"]}
    summary.update({f"warning ({k})": doc[k] for k in ("busy", "implausible") if doc[k]})
    write_html(path, caps, summary, title="parastream pipeline: serial vs pipelined")


def write_trace(path: str, tl: Any) -> None:
    """The timeline as Kineto-style JSON, which ``parastream analyze`` reads back lane for
    lane (lane names kept)."""
    from ..report.kineto import write_kineto

    write_kineto(path, tl, "pipelined")


