"""``parastream plan MODEL``: candidates per parallel point, ranked, linted, written out."""

from __future__ import annotations

import argparse
import sys

from ..workflow.plan import plan
from ..report.plan import render_markdown, render_text


def add_parser(sub) -> None:
    """Add the ``plan`` subcommand."""
    from .args import (add_command, device_arg, format_arg, model_arg, output_arg,
                           shape_args)

    p = add_command(sub, "plan", help="plan multi-stream orchestrations for a model",
                    description="Stream assignment with minimal events, at least two candidate "
                    "orchestrations per parallel point, core limits and lints, ranked by "
                    "estimated wall time on a device profile.",
                    glossary=("candidates", "ladder", "graph"))
    model_arg(p)
    p.add_argument("--algorithm", choices=("matching", "critical-path", "resource-split", "manual"),
                   help="also build this whole-graph plan (default: matching, critical-path and "
                   "resource-split)")
    p.add_argument("--mapping", metavar="JSON", help='manual mapping, e.g. \'{"FlashAttention": 0, '
                   '"shared_expert": 1}\' (op/module/type patterns -> stream)')
    p.add_argument("--max-streams", type=int, metavar="N",
                   help="stream cap (default: the device's hardware queues)")
    device_arg(p)
    shape_args(p, default_scale="small")
    output_arg(p, "the plan JSON", default=None, hidden=("--out",))
    p.add_argument("--report", metavar="FILE", help="write the Markdown report here")
    format_arg(p, ("text", "json", "md"))
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    """Plan ``args.model`` (:func:`parastream.workflow.plan.plan`), write the plan file and
    the report when asked, and print the plan in ``--format``."""
    from ..atomic import check_outputs, spec_paths, write_atomic

    # both before either is written; neither over the model, the device file or each other
    check_outputs({"-o/--output": args.output, "--report": args.report},
                  spec_paths(args.model, args.device))
    result = plan(args.model, scale=args.scale, phase=args.phase, device=args.device,
                  algorithm=args.algorithm, mapping=args.mapping, max_streams=args.max_streams)
    doc = result.doc
    if args.output:
        write_atomic(args.output, result.to_json())
    if args.report:
        write_atomic(args.report, render_markdown(doc))
    if args.format == "json":
        sys.stdout.write(result.to_json().decode() + "\n")
    elif args.format == "md":
        sys.stdout.write(render_markdown(doc))
    else:
        sys.stdout.write(render_text(doc))
    return 0


__all__ = ["add_parser", "cmd_plan"]
