"""``parastream emit PLAN --target torchair|npugraph_ex|cuda``: the model's forward as Python
source with a plan candidate applied. Loaded by :mod:`parastream.cli`; torch is imported
only when the command runs."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..errors import InputError
from ..emit import TARGETS

if TYPE_CHECKING:
    from ..workflow.emit import EmitResult


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``emit`` subcommand."""
    from .args import add_command, candidate_arg, output_arg, shape_args

    p = add_command(
        sub, "emit", help="generate the model's forward with a plan applied (TorchAir, "
                          "npugraph_ex or CUDA stream API)",
        description="Rebuild the model a plan was made for (the plan's source: model, scale, "
                    "phase), trace it as the importer does and write the plan in the target's "
                    "own API: torchair.scope.npu_stream_switch / npu_wait_tensor (GE graph "
                    "mode), torch.npu.Stream / Event / record_stream (npugraph_ex), "
                    "torch.cuda streams (cuda). Where the plan allows it, a patch on your own "
                    "module whose forward calls your submodules inside the stream blocks "
                    "(patch(model) applies it); else an op-level module whose forward runs "
                    "every op of the trace on its planned stream. The plan's enable switch "
                    "guards both: off, the original forward runs. 'python FILE' checks an "
                    "op-level file on recording stand-ins and compares outputs; a patch is "
                    "checked with parastream.emit.standins.run_patch (docs/emit.md).",
        glossary=("candidates", "ladder"))
    p.add_argument("plan", metavar="PLAN",
                   help="plan.json written by 'parastream plan MODEL -o FILE'")
    p.add_argument("--target", required=True, choices=TARGETS,
                   help="torchair (GE graph mode), npugraph_ex (aclgraph / eager torch_npu) "
                        "or cuda")
    candidate_arg(p, what="apply")
    output_arg(p, "the module")
    p.add_argument("--model", metavar="MODEL",
                   help="the model, when the plan does not name one it can rebuild: zoo name "
                        "or path/to/file.py:factory")
    shape_args(p, scale_note="the plan's; one that differs from it is refused",
               phase_note="the plan's")
    p.add_argument("--class-name", default="MultiStreamForward", metavar="NAME",
                   help="name of the generated nn.Module of an op-level forward (default "
                        "MultiStreamForward; a module-level patch is named after your class)")
    p.add_argument("--level", choices=("auto", "module", "op"), default="auto",
                   help="module: a patch on your own module whose forward calls your "
                        "submodules inside the stream blocks (refused, with the reason, when "
                        "the plan cuts inside a submodule call); op: every op of the trace; "
                        "auto (default): module where the plan allows it, else op")
    p.add_argument("--diff", action="store_true",
                   help="write the module-level change as a unified diff of the source file "
                        "that defines the patched module ('patch -p1' from this directory)")
    p.set_defaults(func=cmd_emit)


def cmd_emit(args: argparse.Namespace) -> int:
    """Emit the plan's code (:func:`parastream.workflow.emit.emit`), write it to
    ``-o`` or stdout and say what it holds on stderr."""
    from ..atomic import check_outputs, spec_paths, write_atomic
    from ..workflow.emit import emit
    from ..emit.codegen import bad_class_name

    bad = bad_class_name(args.class_name, "--class-name")
    if bad:  # before the model is built and traced
        raise InputError(None, bad)
    check_outputs({"-o/--output": args.output}, spec_paths(args.plan, args.model))
    # --diff is the module-level patch as a diff; beside --level op it has nothing to show
    level = "diff" if args.diff and args.level != "op" else args.level
    result = emit(args.plan, target=args.target, candidate=args.candidate, model=args.model,
                  scale=args.scale, phase=args.phase, class_name=args.class_name, level=level)
    if args.output:
        write_atomic(args.output, result.source)
        sys.stderr.write(f"parastream: wrote {args.output} ({_summary(result)})\n")
    else:
        sys.stdout.write(result.source)
    for ev in result.skipped_events:
        sys.stderr.write(f"parastream: warning: event {ev} has no {args.target} form here\n")
    for note in result.warnings:
        sys.stderr.write(f"parastream: warning: {note}\n")
    if result.unplanned:
        sys.stderr.write(f"parastream: warning: {len(result.unplanned)} op(s) the plan does not "
                         f"name run on stream 0: {', '.join(result.unplanned[:6])}\n")
    return 0


def _summary(result: EmitResult) -> str:
    """One line: the target, what the file holds, its streams and stream calls."""
    what = (f"module-level patch of {result.host}" if result.level == "module"
            else f"{len(result.calls)} op calls")
    return (f"{result.target}: {what}, streams {(0,) + result.side_streams}, "
            f"{result.waits} waits, {result.records} records, {result.record_streams} "
            "record_stream")


__all__ = ["add_parser", "cmd_emit"]
