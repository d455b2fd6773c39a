"""Emit: a plan applied to its model, as Python source in a target's own stream API
(:func:`emit` -> :class:`EmitResult`).

The plan file names the model it was made for (its ``source``: model, scale, phase); the
model is rebuilt and traced once, the plan is checked against the trace, and the code is
written at module level (a patch on the user's own module, :mod:`parastream.emit.modlevel`)
where the plan's branches are whole submodule calls, else at op level (every op of the
trace, :mod:`parastream.emit.codegen`). torch is imported only when :func:`emit` runs.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Any

from ..emit import TARGETS
from ..errors import InputError, naming

#: what ``level`` may ask for: ``diff`` is the module-level patch as a unified diff
LEVELS = ("auto", "module", "op", "diff")
DEFAULT_CLASS = "MultiStreamForward"


@dataclass(frozen=True)
class EmitResult:
    """The generated code (``source``) and what it contains; :meth:`to_dict` is the
    summary ``parastream emit`` prints beside the file it writes."""

    source: str                            # the module, or the unified diff (level "diff")
    target: str                            # torchair | npugraph_ex | cuda
    level: str                             # "module": a patch on the user's module; "op"
    candidate: str                         # the plan candidate applied
    host: str = ""                         # the patched forward (module level)
    calls: tuple[tuple[str, str], ...] = ()  # (node, op) issued as torch.ops calls (op level)
    side_streams: tuple[int, ...] = ()
    waits: int = 0                         # plan events emitted as waits
    records: int = 0                       # Event.record calls (npugraph_ex / cuda)
    record_streams: int = 0                # record_stream calls
    unplanned: tuple[str, ...] = ()        # real ops the plan does not name: on stream 0
    skipped_events: tuple[str, ...] = ()   # plan events with no form in the target
    warnings: tuple[str, ...] = ()         # emitted, but worth a look on the hardware

    def to_dict(self) -> dict:
        """Everything but the source, JSON-ready."""
        return {"target": self.target, "level": self.level, "candidate": self.candidate,
                "host": self.host, "calls": [list(c) for c in self.calls],
                "side_streams": list(self.side_streams), "waits": self.waits,
                "records": self.records, "record_streams": self.record_streams,
                "unplanned": list(self.unplanned),
                "skipped_events": list(self.skipped_events),
                "warnings": list(self.warnings)}


@dataclass(frozen=True)
class _Subject:
    """The plan's model, rebuilt and traced once: what both levels of emission read."""

    plan: Any                   # the candidate (parastream.plan.model.Plan)
    source: dict                # {"model", "scale", "phase"} the model was rebuilt from
    model_name: str | None      # the plan document's name for the model
    device: str | None          # the plan's device profile; None when it names none
    module: Any
    inputs: tuple
    graph: Any                  # the importer's graph of the same trace
    traced: Any                 # parastream.emit.codegen.Traced


def emit(plan: str | os.PathLike[str], *, target: str = "npugraph_ex",
         model: str | None = None, candidate: str | None = None, scale: str | None = None,
         phase: str | None = None, level: str = "auto",
         class_name: str = DEFAULT_CLASS) -> EmitResult:
    """Apply candidate ``candidate`` (default: the recommended one) of the plan file ``plan``
    to the model it was made for (``model``: a zoo name or ``path/to/file.py:factory``,
    when the plan names none it can rebuild) and return the code for ``target``.

    ``level``: ``module`` (refused with the reason when the plan cuts inside a submodule
    call), ``op``, ``auto`` (module where the plan allows it, else op, the file saying
    why) or ``diff`` (the module-level patch as a unified diff of the host's source file).
    ``scale``/``phase`` are for a plan that records none; ``class_name`` names the
    op-level module's class. Bad input raises :class:`~parastream.errors.InputError`
    naming the file; what the model's own code prints goes to stderr."""
    plan_path = os.fspath(plan)
    _check_request(target, level, class_name)
    subject = _rebuild(plan_path, candidate, model, (scale, phase))
    note = None
    if level != "op":
        from ..emit.modlevel import NotModuleLevel

        try:
            with contextlib.redirect_stdout(sys.stderr):
                return _module_level(subject, target, diff=level == "diff")
        except NotModuleLevel as exc:
            if level != "auto":
                raise InputError(plan_path, f"no module-level patch: {exc}") from None
            note = f"no module-level patch, because {exc}"
    return _op_level(subject, plan_path, target, class_name, note)


def _check_request(target: str, level: str, class_name: str) -> None:
    """Refuse an unknown target or level and a class name the module cannot have, before
    the model is built and traced."""
    from ..emit.codegen import bad_class_name

    if target not in TARGETS:
        raise InputError(None, f"unknown target {target!r} (expected one of "
                               f"{', '.join(TARGETS)})")
    if level not in LEVELS:
        raise InputError(None, f"unknown level {level!r} (expected one of "
                               f"{', '.join(LEVELS)})")
    bad = bad_class_name(class_name, "class name")
    if bad:
        raise InputError(None, bad)


def _rebuild(plan_path: str, candidate: str | None, model: str | None,
             shapes: tuple[str | None, str | None]) -> _Subject:
    """Read the plan, rebuild its model at the plan's scale and phase, trace it once (the
    importer's trace serves the plan check and the code alike, whichever tracer made it)
    and check that the plan fits."""
    from ..plan.io import load_doc, plan_shapes, require_fit

    doc, plan = load_doc(plan_path, candidate)
    source = dict(doc.source or {})
    if model:
        source["model"] = model
    source["scale"], source["phase"] = plan_shapes(doc, plan_path, *shapes)
    if not source.get("model"):
        raise InputError(plan_path, "the plan does not say which model it was made for; "
                                    "pass --model (and --scale/--phase)")
    from ..emit.codegen import EmitError, build_model, trace
    from ..graph.torch_import import import_trace

    with contextlib.redirect_stdout(sys.stderr):
        with naming(plan_path, "its source model: "):
            module, inputs = build_model(source)
        graph, program = import_trace(module, inputs, name=str(source["model"]))
        try:
            traced = trace(module, inputs, program=program)
        except EmitError as exc:
            raise InputError(source["model"], str(exc)) from None
    require_fit(graph, plan, plan_path, f"{source.get('model')} at scale {source.get('scale')}")
    device = doc.device if doc.device != "?" else None
    return _Subject(plan, source, doc.model, device, module, inputs, graph, traced)


def _module_level(subject: _Subject, target: str, diff: bool) -> EmitResult:
    """The module-level patch (or its diff); raises ``NotModuleLevel`` with the reason when
    the plan cannot be written on one module's forward."""
    from ..emit import modlevel
    from ..emit.codegen import DEFAULT_VECTOR_PER_CUBE, node_streams
    from ..emit.devices import vector_per_cube

    plan = subject.plan
    vpc = vector_per_cube(subject.device, DEFAULT_VECTOR_PER_CUBE)
    stream_of, real = node_streams(subject.traced, plan)
    site = modlevel.analyse(subject.traced, plan, subject.module, subject.inputs,
                            subject.graph, stream_of, real, vpc)
    patch = modlevel.render(site, target, plan=plan, source=subject.source,
                            model_name=subject.model_name or str(subject.source["model"]),
                            device_name=subject.device, switch=plan.switch,
                            vector_per_cube=vpc)
    text = modlevel.render_diff(site, patch, target, plan.switch) if diff else patch.source
    return EmitResult(text, target, "module", plan.name, host=site.label,
                      side_streams=tuple(site.side), waits=patch.waits, records=patch.records,
                      record_streams=patch.record_streams, warnings=tuple(patch.warnings))


def _op_level(subject: _Subject, plan_path: str, target: str, class_name: str,
              note: str | None) -> EmitResult:
    """The op-level module: every op of the trace on its planned stream; ``note`` says why
    it is not a module-level patch."""
    from ..emit.codegen import DEFAULT_VECTOR_PER_CUBE, DocNotes, EmitError, emit
    from ..emit.devices import vector_per_cube

    try:
        e = emit(subject.traced, subject.plan, target, source=subject.source,
                 device_name=subject.device, class_name=class_name,
                 vector_per_cube=vector_per_cube(subject.device, DEFAULT_VECTOR_PER_CUBE),
                 notes=DocNotes(model_name=subject.model_name, level_note=note))
    except EmitError as exc:
        raise InputError(plan_path, str(exc)) from None
    return EmitResult(e.source, target, "op", subject.plan.name, calls=tuple(e.calls),
                      side_streams=tuple(e.side_streams), waits=e.waits, records=e.records,
                      record_streams=e.record_streams, unplanned=tuple(e.unplanned),
                      skipped_events=tuple(e.skipped_events), warnings=tuple(e.warnings))


__all__ = ["EmitResult", "LEVELS", "emit"]
