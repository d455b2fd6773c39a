"""``parastream graph MODEL``: decompose a model into modules, verdicts, parallel points and
headroom (the direction-level analysis).

MODEL is a graph JSON file (recognised by its content: ``"schema": "parastream.graph/1"``),
or anything else :func:`parastream.graph.models.resolve` accepts (a zoo name, a
``file.py:factory`` spec) — that module is imported only then, since it needs torch.
"""

from __future__ import annotations

import argparse
import sys

FORMATS = ("text", "json", "md", "mermaid")


def add_parser(subparsers) -> None:
    """Register ``graph`` on the top-level parser's subparsers."""
    from .args import add_command, device_arg, format_arg, model_arg, output_arg, shape_args

    p = add_command(
        subparsers, "graph",
        help="decompose a model: modules, dependencies, parallel points, headroom",
        description=("Decompose a model (graph JSON file, zoo name, or file.py:factory) into "
                     "modules cut along sub-network, communication, state, sync and resource "
                     "boundaries; give the dependency table, serial / parallel_candidate / "
                     "parallel_pending_validation verdicts, parallel points with their join "
                     "and dominating branch, and the bound on what any stream assignment "
                     "could gain on a device."),
        glossary=("graph",))
    model_arg(p)
    device_arg(p)
    shape_args(p)
    format_arg(p, FORMATS)
    output_arg(p, "the analysis")
    p.set_defaults(func=cmd_graph)


def cmd_graph(args: argparse.Namespace) -> int:
    """Decompose ``args.model`` (:func:`parastream.workflow.graph.graph`) and write the
    analysis in ``--format``."""
    from ..atomic import check_outputs, spec_paths
    from ..workflow.graph import graph
    from ..report.graph import render_json, render_md, render_mermaid, render_text

    check_outputs({"-o/--output": args.output}, spec_paths(args.model, args.device))
    result = graph(args.model, scale=args.scale, phase=args.phase, device=args.device)
    a, g, profile = result.analysis, result.graph, result.profile
    if args.format == "json":
        out = render_json(result.to_dict())
    elif args.format == "md":
        out = render_md(a, g, profile, source=result.source, scale=result.scale,
                        phase=result.phase)
    elif args.format == "mermaid":
        out = render_mermaid(a)
    else:
        # the device in the first line, as plan and simulate say it
        out = render_text(a, g, profile, source=f"{result.source}, device {profile.name}")
    if args.output:
        from ..atomic import write_atomic

        write_atomic(args.output, out)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(out)
    return 0
