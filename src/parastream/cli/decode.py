"""``parastream decode``: the same requests decoded in four modes on the built-in decoder
(sequential, streams, batch, batch+overlap), one table of CPU figures, the agreement of
the greedy tokens across modes, and each mode's timeline as a Kineto-style trace that
``parastream analyze`` reads. With ``--simulate --device PROFILE``: the modes predicted
on the device model at 7B shapes, swept over concurrency and arrival rate (labelled
simulated; no torch needed).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from typing import Any

MODES_HELP = "sequential, streams, batch, batch+overlap"
#: requests a prediction generates when --requests is not given (the workflow's default)
PREDICT_REQUESTS = 256
#: the flags only --simulate reads, and those it refuses (what they would set)
SIMULATE_ONLY = ("launch", "sweep", "rates", "host_us")
NOT_SIMULATED = {"threads": "--threads sets torch's threads of a measured run",
                 "streams": "--streams sets a measured run's worker threads; a prediction's "
                            "streams share the device profile's hardware queues",
                 "rate": "--rate is one rate of a measured run; a prediction sweeps --rates",
                 "concurrency": "--concurrency is one value of a measured run; a prediction "
                                "sweeps --sweep",
                 "html": "--html shows measured timelines; a prediction has none",
                 "output": "-o writes measured timelines; a prediction has none"}


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
    p.add_argument("--model", metavar="MODEL",
                   help="built-in decoder size: tiny or small (default small; 7b, the "
                        "default of --simulate, is for prediction only), or "
                        "path/to/file.py:factory returning a decoder that follows the "
                        "protocol in docs/decode.md")
    p.add_argument("--modes", default="all", metavar="M,...",
                   help=f"modes to run, comma-separated: {MODES_HELP} (default all)")
    p.add_argument("--requests", type=int, metavar="N",
                   help=f"requests to generate (default 32; {PREDICT_REQUESTS} with "
                        "--simulate)")
    p.add_argument("--concurrency", type=int, metavar="N",
                   help="most requests running at once (default 16)")
    p.add_argument("--streams", type=int, metavar="N",
                   help="streams of the 'streams' mode, its hardware queues (default: "
                        "--concurrency, at most 256; fewer are shared by the running requests)")
    p.add_argument("--rate", type=float, metavar="R",
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
    p.add_argument("--prefill-chunk", type=int, metavar="N",
                   help="batch modes: prefill in chunks of at most N positions per step, "
                        "beside the running requests' decode rows (default: each prefill "
                        "whole, on its own before the step)")
    p.add_argument("--tbo", default="auto", metavar="auto|off|N",
                   help="batch+overlap: split a step of at least N decode rows into two "
                        "micro-batches, one's attention beside the other's MLP; auto (the "
                        "default): N calibrated on the model before the run, and no split "
                        "unless it wins by 5%%")
    p.add_argument("--probe", action=argparse.BooleanOptionalAction, default=True,
                   help="before the batch+overlap run, measure the share of a step during "
                        "which the model's kernels leave the interpreter free (default on)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="torch intra-op threads for the run (default 1: the modes provide "
                        "the parallelism)")
    json_arg(p, "the figures, agreement and requests ended early")
    p.add_argument("--html", metavar="FILE", help="also write an HTML report: each mode's "
                   "steps timeline and its per-request Gantt (waiting, decoding)")
    output_arg(p, "each mode's timeline as a Kineto-style trace (FILE with the mode "
                  "before its extension when several modes run)", default=None)
    _simulate_args(p)
    p.set_defaults(func=cmd_decode)


def _simulate_args(p: argparse.ArgumentParser) -> None:
    """The prediction's flags (``--simulate`` and what only it reads)."""
    from .args import SHIPPED

    g = p.add_argument_group("prediction (--simulate)")
    g.add_argument("--simulate", action="store_true",
                   help="predict instead of measuring: the same scheduler and requests on "
                        "the discrete-event model of --device at the model's shapes "
                        "(default 7b), swept over concurrency and rate; no torch needed")
    g.add_argument("--device", metavar="D",
                   help="with --simulate: a device profile name or .json path (default "
                        f"ascend910b; shipped: {SHIPPED}); without: where the measured run "
                        "executes, cpu (default) or cuda (each worker on its own stream)")
    g.add_argument("--launch", choices=("eager", "graph"),
                   help="eager: the host launches every op (default); graph: one captured "
                        "graph per forward (needs the profile's graph_dispatch_us)")
    g.add_argument("--sweep", metavar="N,...",
                   help="concurrencies to sweep (default 1,4,16,64,256)")
    g.add_argument("--rates", metavar="R,...",
                   help="arrival rates to sweep, requests per second, inf = all at once "
                        "(default inf and two derived: a quarter and three quarters of the "
                        "highest concurrency's capacity)")
    g.add_argument("--host-us", metavar="STEP,PER_REQUEST",
                   help="the host's scheduling and sampling time per step: us per step and "
                        "us per request in it (default 100,5)")


def cmd_decode(args: argparse.Namespace) -> int:
    """Run the modes (:func:`parastream.workflow.decode.decode`), print the table, write
    the JSON document and the traces."""
    from ..atomic import check_outputs, spec_paths, write_atomic
    from ..decode.workload import WorkloadOptions
    from ..workflow.decode import DecodeSettings, check_modes, decode

    if args.simulate:
        return cmd_predict(args)
    _refuse_unless_simulate(args)
    modes = check_modes(args.modes)
    traces = trace_paths(args.output, modes)
    check_outputs({"--json": args.json, "--html": args.html,
                   **{f"-o/--output ({m})": p for m, p in traces.items()}},
                  spec_paths(args.workload, args.model))
    wl = WorkloadOptions(requests=_given(args.requests, 32),
                         rate=_given(args.rate, float("inf")), lengths=args.lengths,
                         seed=args.seed, file=args.workload)
    settings = DecodeSettings(concurrency=_given(args.concurrency, 16),
                              kv_blocks=args.kv_blocks, max_skip=args.max_skip,
                              threads=_given(args.threads, 1), streams=args.streams,
                              prefill_chunk=args.prefill_chunk, tbo=_tbo(args.tbo),
                              probe=args.probe, device=args.device or "cpu")
    result = decode(_given(args.model, "small"), modes, workload=wl, settings=settings)
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


def _tbo(text: str) -> str | int:
    """``--tbo``: "auto", "off" or a row count (ModeSettings refuses a bad one)."""
    text = text.strip().lower()
    return int(text) if text.lstrip("-").isdigit() else text


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
    summary = {f"{r['mode']} tokens/s ({doc['device']})": round(r["tokens_per_s"], 1)
               for r in doc["modes"]}
    summary |= {f"{r['mode']} x sequential": r["vs_sequential"] for r in doc["modes"]}
    summary["tokens identical across modes"] = all(not a["mismatches"]
                                                   for a in doc["agreement"])
    write_html(path, caps, summary, title=f"parastream decode: {doc['model']['name']} model, "
                                          f"{doc['workload']['requests']} requests ({doc['device']})")


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
                    f"requests, concurrency {st['concurrency']}, measured on {doc['device']}",
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
    """Per mode: the host's share of the wall time and of a step, a scheduling pass, the
    device's idle gaps between steps; then what batch+overlap measured before its run
    (the interpreter-free share of a step, the two-micro-batch calibration)."""
    out = [f"{r['mode']}: host {_fmt(r['host_share'], '.1%')} of the wall time and "
           f"{_fmt(r.get('host_step_share'), '.1%')} of a step, a scheduling pass p50 "
           f"{_fmt(r['schedule_ms']['p50'], '.3f')} ms, device idle between steps p50 "
           f"{_fmt(r['idle_between_steps_ms']['p50'], '.3f')} ms / p99 "
           f"{_fmt(r['idle_between_steps_ms']['p99'], '.3f')} ms" for r in doc["modes"]]
    return out + [line for r in doc["modes"] for line in _overlap_lines(r)]


def _overlap_lines(row: dict) -> list[str]:
    """What a batch+overlap row says of its condition: the interpreter-free share of a
    step (the host can only work beside a step that leaves it free) and the two-micro-batch
    gate's calibration."""
    out = []
    if row.get("interpreter_free_share") is not None:
        gate = ("the host worked one step ahead" if row.get("one_step_ahead") else
                "below the gate's 20%: scheduled as batch, not one step ahead")
        out.append(f"{row['mode']}: the model's kernels left the interpreter free for "
                   f"{row['interpreter_free_share']:.0%} of a step (probed before the run): "
                   f"{gate}")
    cal = row.get("tbo_calibration")
    if cal:
        at = row.get("tbo_at")
        verdict = (f"steps of {at}+ rows split" if at else
                   "the split never won by the margin: no step split")
        timed = ", ".join(f"{b}: {w:.1f}/{x:.1f} ms" for b, w, x in
                          zip(cal["sizes"], cal["whole_ms"], cal["split_ms"]))
        out.append(f"{row['mode']}: two micro-batches, whole/split step by rows "
                   f"({timed or cal.get('reason') or 'none timed'}): {verdict}")
    elif row.get("tbo_at"):
        out.append(f"{row['mode']}: two micro-batches for steps of {row['tbo_at']}+ rows")
    return out


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


# ------------------------------------------------------------------ prediction

def _given(value: Any, default: Any) -> Any:
    return default if value is None else value


def _refuse_unless_simulate(args: argparse.Namespace) -> None:
    """InputError for a prediction's flag given to a measured run."""
    from ..errors import InputError

    given = [f"--{k.replace('_', '-')}" for k in SIMULATE_ONLY if getattr(args, k) is not None]
    if given:
        raise InputError(None, f"{', '.join(given)}: only with --simulate (a prediction)")


def _refuse_for_simulate(args: argparse.Namespace) -> None:
    """InputError for a measured run's flag given with --simulate (one line naming it)."""
    from ..errors import InputError

    for key, why in NOT_SIMULATED.items():
        if getattr(args, key) is not None:
            raise InputError(None, f"{why}: not with --simulate")


def _numbers(text: str | None, flag: str, kind: type, example: str) -> tuple | None:
    """Comma-separated numbers of ``flag`` (None when not given); InputError otherwise."""
    from ..errors import InputError

    if text is None:
        return None
    try:
        vals = tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        vals = ()
    if not vals:
        raise InputError(None, f"{flag} wants {example}, not {text!r}")
    return vals


def predict_settings(args: argparse.Namespace) -> Any:
    """The sweep settings of the prediction flags."""
    from ..decode.predict import HostCost
    from ..decode.predict_sweep import DEFAULT_CONCURRENCY, SweepSettings

    host = _numbers(args.host_us, "--host-us", float, "two numbers like 100,5")
    if host is not None and len(host) != 2:
        from ..errors import InputError

        raise InputError(None, f"--host-us wants two numbers like 100,5, not {args.host_us!r}")
    return SweepSettings(
        concurrency=_numbers(args.sweep, "--sweep", int, "concurrencies like 1,4,16")
        or DEFAULT_CONCURRENCY,
        rates=_numbers(args.rates, "--rates", float, "rates like inf,20,50"),
        launch=args.launch or "eager", host=HostCost(*host) if host else HostCost(),
        max_skip=args.max_skip, kv_blocks=args.kv_blocks, seed=args.seed,
        prefill_chunk=args.prefill_chunk)


def cmd_predict(args: argparse.Namespace) -> int:
    """``decode --simulate``: the sweep (:func:`parastream.workflow.decode.predict`) as a
    table, and its document with ``--json``."""
    from ..atomic import check_outputs, spec_paths, write_atomic
    from ..decode.workload import WorkloadOptions
    from ..workflow.decode import PREDICT_MODEL, check_modes, predict

    _refuse_for_simulate(args)
    modes = check_modes(args.modes)
    check_outputs({"--json": args.json}, spec_paths(args.workload, args.model))
    wl = WorkloadOptions(requests=_given(args.requests, PREDICT_REQUESTS),
                         lengths=args.lengths, seed=args.seed, file=args.workload)
    result = predict(_given(args.model, PREDICT_MODEL), args.device, modes, workload=wl,
                     settings=predict_settings(args))
    doc = result.to_dict()
    sys.stdout.write(render_prediction(doc))
    if args.json:
        from ..report.graph import render_json

        write_atomic(args.json, render_json(doc, indent=2))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def _rate_text(rate: Any) -> str:
    return rate if isinstance(rate, str) else f"{rate:g}/s"


def render_prediction(doc: dict) -> str:
    """The prediction as text: the header (SIMULATED, the profile, the host's cost), the
    tokens/s of each mode per concurrency and rate with the winner, the latencies, the
    two-micro-batch calibration and gate."""
    modes = doc["settings"]["modes"]
    wl = doc["workload"]
    said = (f"file {wl['file']}" if wl["file"] else
            f"{wl['lengths']} lengths, seed {wl['seed']}")
    lines = [f"parastream decode --simulate: {doc['model']['name']} model, "
             f"{wl['requests']} requests ({said}), SIMULATED on {doc['device']}, "
             f"{doc['launch']} launch",
             f"{doc['host']['said']}; streams share the device's "
             f"{doc['settings']['hw_queues']} hardware queues" + _chunk_said(doc), "",
             "tokens/s (SIMULATED on " + doc["device"] + ")",
             f"{'concurrency':>11s} {'rate':>8s} " + " ".join(f"{m:>13s}" for m in modes)
             + "  winner"]
    for r in doc["sweep"]:
        lines.append(f"{r['concurrency']:>11d} {_rate_text(r['rate']):>8s} "
                     + " ".join(f"{r['modes'][m]['tokens_per_s']:>13.1f}" for m in modes)
                     + f"  {r['winner']}")
    lines += ["", "TTFT p50 / TTFT p99 / ITL p50, ms (SIMULATED on " + doc["device"] + ")",
              f"{'concurrency':>11s} {'rate':>8s} " + " ".join(f"{m:>22s}" for m in modes)]
    for r in doc["sweep"]:
        cells = []
        for m in modes:
            f = r["modes"][m]
            cells.append(f"{_fmt(f['ttft_ms']['p50'], '.0f')}/{_fmt(f['ttft_ms']['p99'], '.0f')}"
                         f"/{_fmt(f['itl_ms']['p50'], '.2f')}")
        lines.append(f"{r['concurrency']:>11d} {_rate_text(r['rate']):>8s} "
                     + " ".join(f"{c:>22s}" for c in cells))
    return "\n".join(lines + [""] + gate_lines(doc) + winner_lines(doc)) + "\n"


def _chunk_said(doc: dict) -> str:
    chunk = doc["settings"]["prefill_chunk"]
    return f"; batch modes prefill in chunks of {chunk} positions" if chunk else ""


def gate_lines(doc: dict) -> list[str]:
    """The two-micro-batch calibration (forward tokens -> speedup over one forward) and
    where the gate opens."""
    gate = doc["two_micro_batch"]
    curve = ", ".join(f"{c['forward']} {c['tokens']}: {c['speedup']:.2f}x"
                      for c in gate["curve"])
    at = gate["threshold_tokens"]
    verdict = (f"on from {at} tokens per forward" if at is not None
               else "off: two micro-batches win at no calibrated size")
    return [f"two micro-batches vs one forward (SIMULATED), by forward tokens: {curve}",
            f"two-micro-batch gate of batch+overlap: {verdict}"]


def winner_lines(doc: dict) -> list[str]:
    """How many sweep points each mode won (by tokens/s)."""
    wins: dict[str, int] = {}
    for r in doc["sweep"]:
        wins[r["winner"]] = wins.get(r["winner"], 0) + 1
    said = ", ".join(f"{m} at {n}" for m, n in sorted(wins.items(), key=lambda kv: -kv[1]))
    return [f"winner by tokens/s over {len(doc['sweep'])} points: {said}"]


__all__ = ["add_parser", "cmd_decode", "cmd_predict", "predict_settings", "render_prediction",
           "render_text", "trace_paths"]
