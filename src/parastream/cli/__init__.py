"""The ``parastream`` command line: parse arguments, call the library, render.

Bad input ends with one line ``parastream: <file>: <reason>`` on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .. import __version__
from ..errors import InputError

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse with the project's rule for bad input: one line and exit code 2 (argparse
    prints its whole usage block first; `run --runs abc` was eight lines)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; for ``analyze`` (``command``, the first argument) the
    other commands' modules are not imported: they would only slow its start."""
    p = _Parser(prog="parastream", description=(
        "Plan, run and verify multi-stream inference. "
        "'parastream analyze TRACE' proves or disproves overlap from a profiler timeline."))
    p.add_argument("--version", action="version", version=f"parastream {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    from .args import add_command, candidate_arg, format_arg, output_arg

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
                   help="local worker processes for many files or ranks, on a Dask cluster "
                        "started for the command (default: one per core, 1 = serial, in this "
                        "process)")
    a.add_argument("--scheduler", metavar="ADDRESS", help="analyse the files or ranks on the "
                   "running Dask cluster whose scheduler is at ADDRESS (tcp://HOST:PORT); its "
                   "workers read the paths given, so they must see them")
    a.add_argument("--scheduler-timeout", type=float, default=10.0, metavar="S",
                   help="seconds the --scheduler has to answer and to have a worker (default 10)")
    a.add_argument("--no-progress", action="store_true", help="no progress display")
    a.set_defaults(func=cmd_analyze)
    if command != "analyze":
        for module in _COMMAND_MODULES:
            _load_commands(module, sub)
    return p


#: modules that add their own subcommands with ``add_parser(subparsers)``; each lives with
#: the layer it drives, so this file stays a thin dispatcher
_COMMAND_MODULES = ("parastream.cli.graph", "parastream.cli.zoo", "parastream.cli.plan",
                    "parastream.cli.simulate", "parastream.cli.run", "parastream.cli.emit",
                    "parastream.cli.pipeline", "parastream.cli.decode", "parastream.cli.demo")


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
    """Analyse the traces (:func:`parastream.workflow.analyze.analyze`), render the report
    in ``--format`` and write the HTML and Perfetto files asked for."""
    from ..atomic import check_outputs, write_atomic
    from ..workflow.analyze import analyze

    # before reading any trace: no output is lost to a typo, and no trace to its report
    check_outputs({"-o/--output": args.output, "--html": args.html,
                   "--perfetto": args.perfetto},
                  [*(args.paths or []), args.baseline, args.plan])
    result = analyze(args.paths, baseline=args.baseline, plan=args.plan,
                     candidate=args.candidate, main_stream=args.main_stream,
                     side_regex=args.side, dominator_regex=args.dominator,
                     window_gap_us=args.window_gap, cold=args.cold, cores=args.cores,
                     vector_cores=args.vector_cores, max_points=args.max_points,
                     split_steps=not args.no_steps, strict=args.strict, jobs=args.jobs,
                     scheduler=args.scheduler, scheduler_timeout=args.scheduler_timeout,
                     timelines=bool(args.html or args.perfetto),
                     progress=not args.no_progress, warn=_say)
    doc = result.to_dict()
    out = _render_analysis(doc, args)
    if args.html:
        _write_html(args.html, result, doc, args.names)
    if args.perfetto:
        from ..report.perfetto import write_perfetto

        write_perfetto(args.perfetto, list(result.timelines), doc["captures"])
    if args.output:
        write_atomic(args.output, out)
    else:
        sys.stdout.write(out)
    for path in (args.html, args.perfetto):
        if path:
            print(f"wrote {path}", file=sys.stderr)
    return 0


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _render_analysis(doc: dict, args: argparse.Namespace) -> str:
    """The analysis document in ``args.format``: JSON, Markdown or text (as wide as the
    terminal, in colour, when stdout is one)."""
    if args.format == "json":
        from ..report.graph import render_json

        return render_json(doc, indent=2)
    if args.format == "md":
        from ..report.markdown import render_markdown

        return render_markdown(doc, names=args.names, summary_only=args.summary)
    from ..report.text import render_text

    tty = args.output is None and sys.stdout.isatty()
    return render_text(doc, width=max(120, _term_width()) if tty else 170, color=tty,
                       names=args.names, summary_only=args.summary)


def _write_html(path: str, result, doc: dict, names: str) -> None:
    """The self-contained HTML report: each capture with its timeline, and the summary
    with the triage, the per-rank rows and the broken members when there are any."""
    from ..report.html import write_html

    caps = list(zip(result.timelines, doc["captures"]))
    extra = {"triage": doc["triage"]} if "triage" in doc else {}
    if "ranks" in doc:  # (the summary's own "ranks" is their count)
        extra["per_rank"] = doc["ranks"]
    if "cluster" in doc:
        extra["cluster"] = doc["cluster"]
    if doc.get("broken"):
        extra["broken"] = doc["broken"]
    title = ", ".join(os.path.basename(p.rstrip("/")) for p in result.paths)
    write_html(path, caps, doc["summary"] | extra, names=names,
               title="parastream analyze: " + title)


def _term_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 170


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``parastream`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser(argv[0] if argv else None)
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
