"""``parastream decode``: the same requests decoded in four modes on the built-in decoder
(sequential, streams, batch, batch+overlap), one table of CPU figures, the agreement of
the greedy tokens across modes, and each mode's timeline as a Kineto-style trace that
``parastream analyze`` reads.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from typing import Any

MODES_HELP = "sequential, streams, batch, batch+overlap"


def add_parser(subparsers: Any) -> None:
    """Add the ``decode`` subcommand."""
    from .args import add_command, json_arg, output_arg

    p = add_command(
        subparsers, "decode", help="decode the same requests sequentially, on streams, batched "
                                   "and batched with overlap, and compare",
        description=(
            "Serve the same requests on the built-in Llama-style decoder (RMSNorm, RoPE, GQA, "
            "SwiGLU, KV cache, greedy) in four modes: sequential (one request at a time), "
            "streams (each running request's steps on its own stream), batch (continuous "
            "batching) and batch+overlap (the host's scheduling of step t+1 overlapped with "
            "step t). One fair scheduler for all: FCFS with aging (--max-skip), a KV budget "
            "in blocks with preemption by recompute. Prints tokens/s, requests/s, TTFT and "
            "inter-token latency p50/p99, Jain's fairness, the most passes a request waited, "
            "the device's busy share and the ratio to sequential; the figures are measured "
            "on CPU threads."))
    p.add_argument("--model", default="small", metavar="MODEL",
                   help="built-in decoder size: tiny or small (default small; 7b is for "
                        "prediction, not built yet), or path/to/file.py:factory returning "
                        "a decoder that follows the protocol in docs/decode.md")
    p.add_argument("--modes", default="all", metavar="M,...",
                   help=f"modes to run, comma-separated: {MODES_HELP} (default all)")
    p.add_argument("--requests", type=int, default=32, metavar="N",
                   help="requests to generate (default 32)")
    p.add_argument("--concurrency", type=int, default=16, metavar="N",
                   help="most requests running at once (default 16)")
    p.add_argument("--streams", type=int, metavar="N",
                   help="streams of the 'streams' mode, its hardware queues (default: "
                        "--concurrency; fewer are shared by the running requests)")
    p.add_argument("--rate", type=float, default=float("inf"), metavar="R",
                   help="Poisson arrivals per second (default inf: all at the start)")
    p.add_argument("--lengths", default="uniform", metavar="NAME",
                   help="prompt and output length distribution: fixed, uniform or "
                        "lognormal (default uniform)")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of arrivals, lengths and prompts (default 0)")
    p.add_argument("--workload", metavar="FILE.jsonl",
                   help="requests from a JSONL file (arrival_s, prompt_tokens or prompt, "
                        "output_tokens per line) instead of generated ones")
    p.add_argument("--max-skip", type=int, default=4, metavar="N",
                   help="most scheduling passes a waiting request may be passed over "
                        "(default 4)")
    p.add_argument("--kv-blocks", type=int, metavar="N",
                   help="KV budget in blocks of 16 positions (default: room for "
                        "--concurrency requests at the model's full context)")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="torch intra-op threads for the run (default 1: the modes provide "
                        "the parallelism)")
    json_arg(p, "the figures, agreement and requests ended early")
    p.add_argument("--html", metavar="FILE", help="also write an HTML report: each mode's "
                   "steps timeline and its per-request Gantt (waiting, decoding)")
    output_arg(p, "each mode's timeline as a Kineto-style trace (FILE with the mode "
                  "before its extension when several modes run)", default=None)
    p.set_defaults(func=cmd_decode)


def cmd_decode(args: argparse.Namespace) -> int:
    """Run the modes (:func:`parastream.workflow.decode.decode`), print the table, write
    the JSON document and the traces."""
    from ..atomic import check_outputs, spec_paths, write_atomic
    from ..decode.workload import WorkloadOptions
    from ..workflow.decode import DecodeSettings, check_modes, decode

    modes = check_modes(args.modes)
    traces = trace_paths(args.output, modes)
    check_outputs({"--json": args.json, "--html": args.html,
                   **{f"-o/--output ({m})": p for m, p in traces.items()}},
                  spec_paths(args.workload, args.model))
    wl = WorkloadOptions(requests=args.requests, rate=args.rate, lengths=args.lengths,
                         seed=args.seed, file=args.workload)
    settings = DecodeSettings(concurrency=args.concurrency, kv_blocks=args.kv_blocks,
                              max_skip=args.max_skip, threads=args.threads,
                              streams=args.streams)
    result = decode(args.model, modes, workload=wl, settings=settings)
    doc = result.to_dict()
    sys.stdout.write(render_text(doc))
    if args.json:
        from ..report.graph import render_json

        write_atomic(args.json, render_json(doc, indent=2))
        print(f"wrote {args.json}", file=sys.stderr)
    if args.html:
        write_report(args.html, doc, result.runs)
        print(f"wrote {args.html}", file=sys.stderr)
    for mode, path in traces.items():
        from ..report.kineto import write_kineto

        write_kineto(path, result.timeline(mode), f"decode {mode}")
        print(f"wrote {path}", file=sys.stderr)
    return 0


def write_report(path: str, doc: dict, runs: Any) -> None:
    """Each mode's steps timeline and per-request Gantt in one HTML report, with the
    figures as its summary."""
    from ..decode.metrics import request_gantt
    from ..report.html import write_html
    from ..timeline.analyze import analyze_capture

    caps = []
    for run in runs:
        for tl, view in ((run.timeline, "steps"), (request_gantt(run), "requests")):
            caps.append((tl, analyze_capture(tl, label=f"{run.mode}: {view}")))
    summary = {f"{r['mode']} tokens/s (CPU)": round(r["tokens_per_s"], 1)
               for r in doc["modes"]}
    summary |= {f"{r['mode']} x sequential": r["vs_sequential"] for r in doc["modes"]}
    summary["tokens identical across modes"] = all(not a["mismatches"]
                                                   for a in doc["agreement"])
    write_html(path, caps, summary, title=f"parastream decode: {doc['model']['name']} model, "
                                          f"{doc['workload']['requests']} requests (CPU)")


def trace_paths(output: str | None, modes: tuple[str, ...]) -> dict[str, str]:
    """Where each mode's trace goes: ``output`` itself for one mode, else ``output`` with
    the mode before its extension (``t.json`` -> ``t.batch+overlap.json``, ``.json.gz``
    kept whole)."""
    if not output:
        return {}
    if len(modes) == 1:
        return {modes[0]: output}
    head, tail = os.path.split(output)
    stem, dot, ext = tail.partition(".")
    return {m: os.path.join(head, f"{stem}.{m}{dot}{ext}") for m in modes}


def _fmt(v: Any, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def render_text(doc: dict) -> str:
    """The figures as a terminal table (rich, rendered to text) and the lines under it:
    agreement, requests ended early, notes."""
    from rich.console import Console
    from rich.table import Table

    wl, st = doc["workload"], doc["settings"]
    t = Table(title=f"parastream decode: {doc['model']['name']} model, {wl['requests']} "
                    f"requests, concurrency {st['concurrency']}, measured on CPU",
              title_justify="left")
    cols = ("mode", "tokens/s", "req/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms",
            "ITL p99 ms", "Jain", "max passes waited", "busy", "x sequential")
    for col in cols:
        t.add_column(col, justify="left" if col == "mode" else "right")
    for r in doc["modes"]:
        t.add_row(r["mode"], _fmt(r["tokens_per_s"]), _fmt(r["requests_per_s"], ".2f"),
                  _fmt(r["ttft_ms"]["p50"]), _fmt(r["ttft_ms"]["p99"]),
                  _fmt(r["itl_ms"]["p50"], ".2f"), _fmt(r["itl_ms"]["p99"], ".2f"),
                  _fmt(r["jain"], ".3f"), str(r["max_passes_waited"]),
                  _fmt(r["busy_share"], ".0%"), _fmt(r["vs_sequential"], ".2f"))
    console = Console(record=True, width=140, file=io.StringIO(), color_system=None)
    console.print(t)
    lines = [console.export_text().rstrip(), *host_lines(doc), *agreement_lines(doc),
             *ended_lines(doc)]
    lines += [f"note: {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"


def host_lines(doc: dict) -> list[str]:
    """Per mode: the host's share of the wall time, a scheduling pass, the device's idle
    gaps between steps."""
    return [f"{r['mode']}: host {_fmt(r['host_share'], '.1%')} of the wall time, a "
            f"scheduling pass p50 {_fmt(r['schedule_ms']['p50'], '.3f')} ms, device idle "
            f"between steps p50 {_fmt(r['idle_between_steps_ms']['p50'], '.3f')} ms / p99 "
            f"{_fmt(r['idle_between_steps_ms']['p99'], '.3f')} ms" for r in doc["modes"]]


def agreement_lines(doc: dict) -> list[str]:
    """One line per compared mode: identical, ties and mismatches."""
    out = []
    for a in doc["agreement"]:
        ties, bad = len(a["ties"]), len(a["mismatches"])
        verdict = "MISMATCH" if bad else "agree"
        out.append(f"tokens {a['mode']} vs {a['reference']}: {verdict}: {a['identical']} of "
                   f"{a['compared']} identical, {ties} differ at a tie (top-2 logits within "
                   f"1e-4), {bad} differ otherwise"
                   + (f" (requests {', '.join(map(str, a['mismatches'][:10]))})" if bad else ""))
    return out


def ended_lines(doc: dict, limit: int = 10) -> list[str]:
    """The requests that did not finish normally, ``limit`` at most, then their count."""
    early = doc["ended_early"]
    out = [f"request {e['request']} ({e['mode']}): {e['outcome']}: {e['reason']}"
           for e in early[:limit]]
    if len(early) > limit:
        out.append(f"... {len(early) - limit} more (see --json)")
    return out


__all__ = ["add_parser", "cmd_decode", "render_text", "trace_paths"]
