"""``parastream emit PLAN --target torchair|npugraph_ex|cuda``: the model's forward as Python
source with a plan candidate applied. Loaded by :mod:`parastream.cli`; torch is imported
only when the command runs."""

from __future__ import annotations

import argparse
import contextlib
import sys

from ..errors import InputError, naming
from . import TARGETS


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``emit`` subcommand."""
    from ..cliargs import add_command, candidate_arg, output_arg, shape_args

    p = add_command(
        sub, "emit", help="generate the model's forward with a plan applied (TorchAir, "
                          "npugraph_ex or CUDA stream API)",
        description="Rebuild the model a plan was made for (the plan's source: model, scale, "
                    "phase), trace it as the importer does and write a Python module whose "
                    "forward runs every op in program order on its planned stream, with the "
                    "plan's events, in the target's own API: torchair.scope.npu_stream_switch "
                    "/ npu_wait_tensor (GE graph mode), torch.npu.Stream / Event / "
                    "record_stream (npugraph_ex), torch.cuda streams (cuda). The plan's enable "
                    "switch guards it: off, the original forward runs. 'python FILE' checks "
                    "the generated code on recording stand-ins and compares outputs.",
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


def _vector_per_cube(device: str | None) -> float:
    """Vector cores per AI core for C2 limits that name only aicore_num: from the plan's
    device profile (0 on Ascend parts without separate vector cores), else Atlas A2/A3's 2."""
    from .codegen import DEFAULT_VECTOR_PER_CUBE

    if not device or device == "?":
        return DEFAULT_VECTOR_PER_CUBE
    try:
        from ..device.profile import load_profile

        prof = load_profile(device)
    except Exception:
        return DEFAULT_VECTOR_PER_CUBE
    if prof.kind != "npu":
        return DEFAULT_VECTOR_PER_CUBE
    if prof.cores.cube == prof.cores.vector:  # coupled cube and vector units (910)
        return 0.0
    return prof.cores.vector / max(1, prof.cores.cube)


def emit_plan(plan_path: str, target: str, *, candidate: str | None = None,
              model: str | None = None, scale: str | None = None, phase: str | None = None,
              class_name: str = "MultiStreamForward", level: str = "auto",
              diff: bool = False):
    """Load ``plan_path``, rebuild its model and emit ``target`` code. Returns
    :class:`~parastream.emit.codegen.Emitted` (``level`` "module" or "op"; ``diff`` the
    unified diff when asked for); bad input raises :class:`InputError`."""
    from ..plan.io import load_doc, plan_shapes, require_fit

    doc, plan = load_doc(plan_path, candidate)
    source = dict(doc.source or {})
    if model:
        source["model"] = model
    # the plan's shapes: a --scale/--phase is for a plan that records none
    source["scale"], source["phase"] = plan_shapes(doc, plan_path, scale, phase)
    if not source.get("model"):
        raise InputError(plan_path, "the plan does not say which model it was made for; "
                                    "pass --model (and --scale/--phase)")
    from ..graph.torch_import import import_program
    from .codegen import EmitError, build_model, emit, trace

    # what the model's own code prints goes to stderr: the generated module may go to stdout
    with contextlib.redirect_stdout(sys.stderr):
        with naming(plan_path, "its source model: "):
            module, inputs = build_model(source)
        # one trace for both the plan check and the code (the importer's export program);
        # only a model that export cannot trace is traced again, by torch.fx
        graph, program = import_program(module, inputs, name=str(source["model"]))
        try:
            traced = trace(module, inputs, program=program, method="auto" if program else "fx")
        except EmitError as exc:
            raise InputError(source["model"], str(exc)) from None
    require_fit(graph, plan, plan_path, f"{source.get('model')} at scale {source.get('scale')}")
    device = doc.device if doc.device != "?" else None
    note = None
    if level != "op":
        from . import modlevel

        try:
            with contextlib.redirect_stdout(sys.stderr):
                return _module_level(traced, plan, target, module, inputs, graph, source,
                                     doc.model or str(source["model"]), device, diff)
        except modlevel.NotModuleLevel as exc:
            if level == "module" or diff:
                raise InputError(plan_path, f"no module-level patch: {exc}") from None
            note = f"no module-level patch, because {exc}"
    try:
        return emit(traced, plan, target, source=source, model_name=doc.model,
                    device_name=device, class_name=class_name,
                    vector_per_cube=_vector_per_cube(doc.device), level_note=note)
    except EmitError as exc:
        raise InputError(plan_path, str(exc)) from None


def _module_level(traced, plan, target: str, module, inputs: tuple, graph, source: dict,
                  model_name: str, device: str | None, diff: bool):
    """The module-level patch (:mod:`parastream.emit.modlevel`) as an ``Emitted``."""
    from . import modlevel
    from .codegen import Emitted, node_streams

    stream_of, real = node_streams(traced, plan)
    site = modlevel.analyse(traced, plan, module, inputs, graph, stream_of, real,
                            _vector_per_cube(device))
    patch = modlevel.render(site, target, plan=plan, source=source, model_name=model_name,
                            device_name=device, switch=plan.switch,
                            vector_per_cube=_vector_per_cube(device))
    text = modlevel.render_diff(site, patch, target, plan.switch) if diff else patch.source
    return Emitted(text, target, (), site.side, patch.waits, patch.records,
                   patch.record_streams, warnings=list(patch.warnings), level="module",
                   host=site.label)


def cmd_emit(args: argparse.Namespace) -> int:
    from ..report.atomic import check_outputs, spec_paths, write_atomic
    from .codegen import bad_class_name

    bad = bad_class_name(args.class_name, "--class-name")
    if bad:  # before the model is built and traced
        raise InputError(None, bad)
    check_outputs({"-o/--output": args.output}, spec_paths(args.plan, args.model))
    emitted = emit_plan(args.plan, args.target, candidate=args.candidate, model=args.model,
                        scale=args.scale, phase=args.phase, class_name=args.class_name,
                        level=args.level, diff=args.diff)
    what = (f"module-level patch of {emitted.host}" if emitted.level == "module"
            else f"{len(emitted.calls)} op calls")
    summary = (f"{args.target}: {what}, streams "
               f"{(0,) + emitted.side_streams}, {emitted.waits} waits, {emitted.records} "
               f"records, {emitted.record_streams} record_stream")
    if args.output:
        write_atomic(args.output, emitted.source)
        sys.stderr.write(f"parastream: wrote {args.output} ({summary})\n")
    else:
        sys.stdout.write(emitted.source)
    for ev in emitted.skipped_events:
        sys.stderr.write(f"parastream: warning: event {ev} has no {args.target} form here\n")
    for note in emitted.warnings:
        sys.stderr.write(f"parastream: warning: {note}\n")
    if emitted.unplanned:
        sys.stderr.write(f"parastream: warning: {len(emitted.unplanned)} op(s) the plan does not "
                         f"name run on stream 0: {', '.join(emitted.unplanned[:6])}\n")
    return 0


__all__ = ["add_parser", "cmd_emit", "emit_plan"]
