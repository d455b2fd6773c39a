"""``parastream pipeline``: the image-classification demo, serial then pipelined.

Decode + resize deterministic JPEGs, normalise, copy, run a small CNN, copy back, softmax +
top-k — first as a serial loop, then as a pipeline (replicas from ``--replicas`` or planned
from the serial run's stage times). Prints throughput, per-stage utilization, the
efficiency E and the speedup; checks the pipelined outputs equal the serial ones; writes
the HTML report (both runs' timelines) and a Kineto-style trace that ``parastream analyze``
reads.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from typing import Any, Iterable, Iterator

from ..errors import InputError


def add_parser(subparsers: Any) -> None:
    """Add the ``pipeline`` subcommand."""
    from ..cliargs import add_command, format_arg, output_arg

    p = add_command(
        subparsers, "pipeline", help="run the image pipeline demo serially, then pipelined, and compare",
        description=("Run a real workload (JPEG decode+resize, normalise, copy, CNN inference, "
                     "copy, softmax/top-k) first as a serial loop, then with every stage on its "
                     "own worker/stream and bounded queues between them. Reports throughput, "
                     "per-stage utilization, efficiency E (throughput x bottleneck stage time) "
                     "and speedup."))
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
    p.add_argument("--html", metavar="FILE", help="write an HTML report of both runs")
    p.add_argument("--trace", metavar="FILE",
                   help="write the pipelined run as a Kineto-style trace (parastream analyze FILE)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    format_arg(p, ("text", "json"))
    output_arg(p, "the comparison (text, or --format json)")
    p.set_defaults(func=cmd_pipeline)


#: replicas of one stage at most: each is a worker thread, and thousands exhaust the
#: process's threads (a traceback after the whole serial run) long before they pay
MAX_REPLICAS = 256
MAX_ITEMS = 100_000
MAX_BATCH = 4096
MAX_THREADS = 1024


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


def _ticking(it: Iterable[Any], prog: Any, description: str, total: int) -> Iterator[Any]:
    if prog is None:
        yield from it
        return
    task = prog.add_task(description, total=total)
    for x in it:
        yield x
        prog.advance(task)
    prog.remove_task(task)


def cmd_pipeline(args: argparse.Namespace) -> int:
    """Run the demo; see the module docstring."""
    # the items are made up front and the threads are torch's: past these bounds a run is a
    # MemoryError or an allocation failure of the OpenMP runtime, not a measurement
    for flag, v, most in (("--items", args.items, MAX_ITEMS), ("--batch", args.batch, MAX_BATCH),
                          ("--threads", args.threads, MAX_THREADS)):
        if not 1 <= v <= most:
            raise InputError(None, f"{flag} must be from 1 to {most}, got {v}")
    if args.depth is not None and args.depth < 1:
        raise InputError(None, "--depth must be >= 1")
    from .workload import STAGE_NAMES

    replicas = None if args.replicas == "auto" else parse_replicas(args.replicas, STAGE_NAMES)
    try:
        import torch  # noqa: F401
        import PIL  # noqa: F401
    except ImportError as exc:
        raise InputError(None, f"the pipeline demo needs torch and pillow "
                               f"(pip install 'parastream[torch]'): {exc}") from None
    from ..report.atomic import check_outputs

    # both before the run: no output left behind for a bad one, nor one over the other
    check_outputs({"-o/--output": args.output, "--html": args.html, "--trace": args.trace})
    doc, serial_tl, pipe_tl = run_demo(args.items, args.batch, replicas, args.depth,
                                       not args.unordered, args.threads, not args.no_progress)
    if args.format == "json":
        from ..graph.render import render_json

        text = render_json(doc, indent=2)
    else:
        text = render_text(doc)
    if args.output:
        from ..report.atomic import write_atomic

        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    if args.html:
        write_report(args.html, doc, serial_tl, pipe_tl)
    if args.trace:
        write_trace(args.trace, pipe_tl)
    for path in (args.output, args.html, args.trace):
        if path:
            print(f"wrote {path}", file=sys.stderr)
    return 0


def run_demo(items: int, batch: int, replicas: dict[str, int] | None, depth: int | None,
             ordered: bool, threads: int, progress: bool) -> tuple[dict, Any, Any]:
    """Serial run, plan, pipelined run; the comparison as a JSON-ready dict + both timelines."""
    from ..runtime.cpu import set_intra_op_threads
    from ..report.text import progress as progress_display
    from .core import Pipeline, run_serial
    from .planner import plan
    from .workload import WorkloadConfig, make_items, make_model, make_stages, same_outputs

    set_intra_op_threads(threads)  # once, here, in the main thread — never in a worker
    cfg = WorkloadConfig(batch=batch)
    model = make_model(cfg.classes)
    with progress_display(progress) as prog:
        data = make_items(items, cfg)
        warm = make_stages(cfg, model=model)
        run_serial(warm, data[:2])  # first calls allocate and pick kernels: not timed
        serial_out, serial, serial_tl = run_serial(
            warm, _ticking(data, prog, "serial", items), name="serial")
        times = {s.name: s.mean_ns / 1e9 for s in serial.stages}
        suggestion = plan(times, cores=os.cpu_count() or 1)
        reps = replicas if replicas is not None else suggestion.replicas
        # at least the largest replica count (docs/pipeline.md), of the replicas used
        qdepth = depth if depth is not None else max(suggestion.depth, *reps.values())
        stages = make_stages(cfg, reps, model=model)
        with Pipeline(stages, depth=qdepth, ordered=ordered, name="pipelined") as pipe:
            results = list(_ticking(pipe.results(data), prog, "pipelined", items))
            stats = pipe.stats()
            pipe_tl = pipe.timeline()
    got = [r.value for r in sorted(results, key=lambda r: r.id)]
    if ordered:
        in_order = [r.id for r in results] == list(range(len(results)))
    else:
        in_order = None
    b = stats.bottleneck
    serial_b = next(s for s in serial.stages if b is not None and s.name == b.name)
    doc = {
        "device": f"cpu, {os.cpu_count()} cores, torch intra-op threads {threads}",
        "items": items, "images_per_item": batch,
        "plan": suggestion.to_dict(), "replicas": {s.name: s.replicas for s in stages},
        "depth": qdepth, "ordered": ordered,
        "serial": serial.to_dict(), "pipelined": stats.to_dict(),
        "speedup": round(stats.throughput / serial.throughput, 3) if serial.throughput else None,
        "efficiency": round(stats.efficiency, 4),
        "bottleneck": b.name if b else None,
        "bottleneck_utilization": {"serial": round(serial_b.utilization, 4),
                                   "pipelined": round(b.utilization, 4) if b else None},
        "outputs_identical": same_outputs(serial_out, got),
        "in_order": in_order,
    }
    return doc, serial_tl, pipe_tl


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
    ]
    return "\n".join(lines) + "\n"


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
               "outputs identical": doc["outputs_identical"]}
    write_html(path, caps, summary, title="parastream pipeline: serial vs pipelined")


def write_trace(path: str, tl: Any) -> None:
    """The timeline as Kineto-style JSON, which ``parastream analyze`` reads back lane for
    lane (lane names kept)."""
    from ..report.kineto import write_kineto

    write_kineto(path, tl, "pipelined")


