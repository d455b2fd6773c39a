"""The ``parastream`` command line: parse arguments, call the library, render.

Bad input ends with one line ``parastream: <file>: <reason>`` on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from importlib import resources
from typing import Sequence

from . import __version__
from .errors import InputError

EXIT_BAD_INPUT = 2


def default_trace() -> str:
    """The real trace shipped with the package (3 CUDA streams, Stream Wait Events)."""
    return str(resources.files("parastream") / "data" / "cuda_event_sync_multi_stream.json.gz")


class _Parser(argparse.ArgumentParser):
    """argparse with the project's rule for bad input: one line and exit code 2 (argparse
    prints its whole usage block first; `run --runs abc` was eight lines)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="parastream", description=(
        "Plan, run and verify multi-stream inference. "
        "'parastream analyze TRACE' proves or disproves overlap from a profiler timeline."))
    p.add_argument("--version", action="version", version=f"parastream {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    from .cliargs import add_command, candidate_arg, format_arg, output_arg

    a = add_command(sub, "analyze", help="prove or disprove multi-stream overlap from profiler "
                                          "traces",
                    description=(
                        "Read profiler timelines (PyTorch/Kineto .json[.gz], Ascend "
                        "kernel_details.csv, op_summary_*.csv, trace_view.json, profiler .db, "
                        "or a profiler output directory; the format is found from the content) "
                        "and report per-stream busy time, parallel points with overlap_pct and "
                        "verdicts, barriers, gaps, core contention and, with --baseline, the "
                        "3a/3b/3c triage."),
                    glossary=("verdicts", "triage", "candidates"))
    a.add_argument("paths", nargs="*", metavar="TRACE",
                   help="trace files or profiler directories; several = several captures "
                        "(default: the sample trace shipped with parastream)")
    a.add_argument("--baseline", metavar="TRACE", help="single-stream capture to triage against")
    a.add_argument("--main-stream", metavar="ID", help="the main stream of the traces analysed "
                   "(default: the compute stream with the most busy time; a --baseline always "
                   "takes that default)")
    a.add_argument("--side", metavar="REGEX", help="side ops by name (default: every op of each "
                   "side stream, grouped into windows)")
    a.add_argument("--dominator", metavar="REGEX", help="dominator candidates by name among "
                   "main-stream ops (default: any main op)")
    a.add_argument("--window-gap", metavar="US", type=float, help="idle time that separates side "
                   "windows (default: 3x the side stream's median op duration, at least 1 us)")
    a.add_argument("--cold", type=int, default=2, metavar="N",
                   help="captures dropped as cold before medians (default 2)")
    a.add_argument("--cores", type=int, metavar="N", help="AI cores (Ascend) or SMs (CUDA) of the "
                   "device, when the source does not say")
    a.add_argument("--vector-cores", type=int, metavar="N", help="vector cores (Ascend)")
    a.add_argument("--max-points", type=int, default=50, metavar="N",
                   help="parallel points listed per capture, longest first (0 = all; all are counted)")
    a.add_argument("--no-steps", action="store_true", help="do not split a file into its steps")
    a.add_argument("--strict", action="store_true", help="a folder member (rank, capture) that "
                   "cannot be read fails the command (default: the others are analysed and each "
                   "broken member is named in a warning)")
    format_arg(a, ("text", "json", "md"))
    a.add_argument("--names", choices=("short", "full"), default="short",
                   help="op and kernel names in text, Markdown and HTML tables: short (template "
                        "arguments, parameter lists and return types dropped; the whole name on "
                        "hover in HTML) or full (JSON always has full names)")
    a.add_argument("--summary", action="store_true", help="text and Markdown: only the summary "
                   "(across ranks: slowest and fastest rank, wall spread, the ranks slowest "
                   "first), no per-capture detail")
    output_arg(a, "the report")
    a.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    a.add_argument("--perfetto", metavar="FILE", help="also write Chrome-trace JSON for Perfetto")
    a.add_argument("--plan", metavar="PLAN", help="plan.json from 'parastream plan': check each op "
                   "ran on its planned stream and compute overlap_pct per planned parallel point")
    candidate_arg(a, what="check", default="the candidate a trace from 'parastream run "
                                           "--trace' names, else the recommended one")
    a.add_argument("-j", "--jobs", type=int, default=0, metavar="N",
                   help="worker processes for many files (default: one per core, 1 = serial)")
    a.add_argument("--no-progress", action="store_true", help="no progress display")
    a.set_defaults(func=cmd_analyze)
    for module in _COMMAND_MODULES:
        _load_commands(module, sub)
    return p


#: modules that add their own subcommands with ``add_parser(subparsers)``; each lives with
#: the layer it drives, so this file stays a thin dispatcher
_COMMAND_MODULES = ("parastream.graph.cli_graph", "parastream.graph.cli_zoo",
                    "parastream.plan.cli", "parastream.sim.cli", "parastream.runtime.cli",
                    "parastream.emit.cli", "parastream.pipeline.cli", "parastream.demo")


def _load_commands(module: str, sub) -> None:
    import importlib
    import importlib.util

    try:
        if importlib.util.find_spec(module) is None:  # a layer not built yet
            return
    except ModuleNotFoundError:  # its package is not there either
        return
    importlib.import_module(module).add_parser(sub)


def cmd_analyze(args: argparse.Namespace) -> int:
    from .report.atomic import check_outputs, write_atomic
    from .timeline import analyze as an
    from .timeline.ranks import analyze_paths

    # before reading any trace: no output is lost to a typo, and no trace to its report
    check_outputs({"-o/--output": args.output, "--html": args.html,
                   "--perfetto": args.perfetto},
                  [*(args.paths or []), args.baseline, args.plan])
    if args.baseline and any(os.path.realpath(args.baseline) == os.path.realpath(p)
                             for p in args.paths or []):
        raise InputError(args.baseline, "--baseline is one of the traces analysed: compare "
                                        "against a single-stream capture of the same model")
    for flag, v in (("--cold", args.cold), ("--max-points", args.max_points),
                    ("-j/--jobs", args.jobs)):
        if v < 0:
            raise InputError(None, f"{flag} must not be negative, got {v}")
    paths = args.paths or [default_trace()]
    opts = an.Options(main_stream=args.main_stream, side_regex=args.side,
                      dominator_regex=args.dominator, window_gap_us=args.window_gap,
                      cold=args.cold, cores=args.cores, vector_cores=args.vector_cores,
                      max_points=args.max_points, split_steps=not args.no_steps)
    for flag, v in (("--cores", args.cores), ("--vector-cores", args.vector_cores)):
        if v is not None and v <= 0:
            raise InputError(None, f"{flag} must be positive")
    if args.window_gap is not None and not 0 <= args.window_gap < float("inf"):
        raise InputError(None, "--window-gap must be a finite, non-negative number of "
                               "microseconds")
    if args.candidate and not args.plan:
        raise InputError(None, "--candidate picks the candidate of --plan FILE to check")
    plan_doc = None
    if args.plan:
        from .plan.io import load_doc

        plan_doc, _ = load_doc(args.plan, args.candidate)  # an unknown --candidate fails now
    need_timelines = bool(args.html or args.perfetto or plan_doc)
    from .report.text import progress

    with progress(not args.no_progress) as prog:
        doc, timelines = analyze_paths(paths, opts, jobs=args.jobs, keep_timelines=need_timelines,
                                       progress=prog, strict=args.strict)
        if args.baseline:
            from .timeline.triage import triage

            # --main-stream names a stream of the traces analysed; the single-stream
            # baseline's stream ids are its own (its main is its busiest compute stream)
            base_opts = dataclasses.replace(opts, main_stream=None)
            base_doc, _ = analyze_paths([args.baseline], base_opts, jobs=1, progress=prog)
            doc["triage"] = triage(base_doc, doc)
            doc["baseline"] = {"source": args.baseline, "summary": base_doc["summary"]}

    _warn_broken(doc)
    if plan_doc is not None:
        from .plan.verify import verify

        for cap, tl in zip(doc["captures"], timelines):  # each its own candidate (verify)
            cap["plan_check"] = verify(tl, plan_doc, args.candidate)
        checks = [c["plan_check"] for c in doc["captures"]]
        if checks and all(c["ops_found"] == 0 and c["ops_planned"] for c in checks):
            raise InputError(args.plan, f"none of the {checks[0]['ops_planned']} ops of "
                                        f"candidate {checks[0]['candidate']!r} is in the trace: "
                                        "the plan is for another model, or the trace names ops "
                                        "otherwise")
    if args.format == "json":
        from .graph.render import render_json

        out = render_json(doc, indent=2)
    elif args.format == "md":
        from .report.markdown import render_markdown

        out = render_markdown(doc, names=args.names, summary_only=args.summary)
    else:
        from .report.text import render_text

        tty = args.output is None and sys.stdout.isatty()
        out = render_text(doc, width=max(120, _term_width()) if tty else 170, color=tty,
                          names=args.names, summary_only=args.summary)
    if args.html:
        from .report.html import write_html

        caps = list(zip(timelines, doc["captures"]))
        # the per-rank rows too: the page showed only the medians across ranks
        extra = {"triage": doc["triage"]} if "triage" in doc else {}
        if "ranks" in doc:  # (the summary's own "ranks" is their count)
            extra["per_rank"] = doc["ranks"]
        if doc.get("broken"):
            extra["broken"] = doc["broken"]
        write_html(args.html, caps, doc["summary"] | extra, names=args.names,
                   title="parastream analyze: " + ", ".join(os.path.basename(p.rstrip("/")) for p in paths))
    if args.perfetto:
        from .report.perfetto import write_perfetto

        write_perfetto(args.perfetto, timelines, doc["captures"])
    if args.output:
        write_atomic(args.output, out)
    else:
        sys.stdout.write(out)
    for path in (args.html, args.perfetto):
        if path:
            print(f"wrote {path}", file=sys.stderr)
    return 0


def _warn_broken(doc: dict) -> None:
    """One stderr line per folder member that could not be read, then the count analysed."""
    broken = doc.get("broken") or []
    for b in broken:
        print(f"parastream: warning: {b['source']}: {b['error']} (skipped)", file=sys.stderr)
    if broken:
        s = doc["summary"]
        print(f"parastream: warning: {s['units_analysed']} of {s['units']} analysed "
              "(--strict makes a broken member an error)", file=sys.stderr)


def _term_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 170


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``parastream`` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        msg = " ".join(str(exc).split())
        print(f"parastream: {msg}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("parastream: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
