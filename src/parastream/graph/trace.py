"""The torch frontend's one trace: a module and its example inputs in, a :class:`Trace` out.

:func:`trace` runs ``torch.export.export(strict=False)`` under ``no_grad`` and, when that
fails (``method="auto"``), ``torch.fx.symbolic_trace`` with a shape-propagating interpreter
on fake tensors; a module neither can trace raises :class:`~parastream.errors.InputError`
naming the model and the first line of each reason. Eager experts modules are traced as
one opaque op each (:mod:`.opaque`).

The :class:`Trace` it returns is what the importer (:mod:`.torch_import`, Trace -> Graph),
the runnable (:mod:`.runnable`, Trace + Graph -> Runnable) and the code generator read:
the runnable graph module, the call's inputs flattened once (:func:`flatten_call`), and
the export signature parsed once into plain fields (:class:`Binding` per placeholder,
:class:`Output` per graph output), so no reader parses ``graph_signature`` again.
"""

from __future__ import annotations

import contextlib
import io
import logging
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from ..errors import InputError, one_line
from .opaque import opaque_experts
from .tensors import is_tensor

EXPORT, FX = "torch.export", "torch.fx"
METHODS = ("auto", "export", "fx")

#: torch's InputKind names -> the kind a :class:`Binding` says
_INPUT_KINDS = {"USER_INPUT": "input", "PARAMETER": "param", "BUFFER": "buffer",
                "CONSTANT_TENSOR": "constant"}
#: torch's OutputKind names -> the kind an :class:`Output` says
_OUTPUT_KINDS = {"USER_OUTPUT": "user", "BUFFER_MUTATION": "buffer_mutation",
                 "USER_INPUT_MUTATION": "input_mutation"}


@dataclass(frozen=True)
class Binding:
    """One placeholder of the traced graph and what feeds it.

    ``kind``: ``input`` (a leaf of the call's inputs, in order), ``param``, ``buffer`` or
    ``constant`` (a tensor created in forward, lifted by export; ``target`` names it in
    the program's constants), or torch's own kind name in lower case for anything else
    (``custom_obj``, ``token``). ``tensor``: export describes it as a tensor argument."""

    name: str                      # the placeholder node's name
    kind: str
    target: str | None = None      # fully qualified name of a param/buffer/constant
    tensor: bool = True


@dataclass(frozen=True)
class Output:
    """One output of an exported graph: ``kind`` ``user`` (a user output, in order),
    ``buffer_mutation`` (the new value of buffer ``target``), ``input_mutation`` (the new
    value of the user input whose placeholder is ``target``), or torch's own kind name in
    lower case; ``value`` the fx node that produces it, or the constant it is."""

    kind: str
    target: str | None
    name: str | None               # the producing node's name (None for a constant)
    value: Any
    tensor: bool = True


@dataclass
class Trace:
    """A module traced once on its example inputs, as every reader of the trace needs it.

    ``graph_module`` is the runnable FX graph (an exported program's own, or the fx trace
    with each node's fake value in ``meta["val"]``); its node names are the plan's op
    names. ``flat_inputs``/``input_paths``/``input_spec`` are the call ``(inputs, kwargs)``
    flattened once (:func:`flatten_call`): an exported graph has one input placeholder per
    leaf, an fx graph one per positional argument. ``bindings`` follow the placeholders in
    order; ``outputs`` and ``out_spec`` (the user outputs' pytree structure) are the
    exported graph's, empty and None after the fx fallback.
    """

    source: str                    # "torch.export" | "torch.fx"
    graph_module: Any
    program: Any                   # the ExportedProgram; None for torch.fx
    method: str                    # the method asked for: auto, export or fx
    inputs: tuple
    kwargs: dict
    flat_inputs: list
    input_paths: list              # a pytree key path per flat input
    input_spec: Any                # pytree spec of (inputs, kwargs)
    bindings: list[Binding]
    outputs: list[Output] = field(default_factory=list)
    out_spec: Any = None
    export_error: str | None = None  # why torch.export failed, after the fx fallback
    notes: list[str] = field(default_factory=list)  # what was traced opaque, and why

    @property
    def graph(self) -> Any:
        """The traced ``torch.fx.Graph``."""
        return self.graph_module.graph

    @property
    def user_inputs(self) -> list[str]:
        """Placeholder names fed from the call's inputs, in order."""
        return [b.name for b in self.bindings if b.kind == "input"]

    def state(self, *kinds: str) -> dict[str, str]:
        """Placeholder name -> target of the tensor bindings of ``kinds``, in order."""
        return {b.name: b.target for b in self.bindings
                if b.kind in kinds and b.tensor and isinstance(b.target, str)}

    def mutated(self, *kinds: str) -> dict[str, str]:
        """Producing node name -> target of the tensor outputs of ``kinds``
        (``buffer_mutation``, ``input_mutation``), in order."""
        return {o.name: o.target for o in self.outputs
                if o.kind in kinds and o.tensor and isinstance(o.target, str)}

    # the exported program's own attributes, so that code written against the program
    # (the code generator's ``program=``) takes an exported Trace as it is
    @property
    def graph_signature(self) -> Any:
        """The exported program's graph signature."""
        return self.program.graph_signature

    @property
    def constants(self) -> Any:
        """The exported program's lifted constants."""
        return self.program.constants

    @property
    def call_spec(self) -> Any:
        """The exported program's call spec."""
        return self.program.call_spec


def flatten_call(inputs: Sequence[Any], kwargs: dict | None = None
                 ) -> tuple[list[Any], list[Any], Any]:
    """The call ``(inputs, kwargs)`` flattened as torch.export flattens it: (leaves, a
    pytree key path per leaf, the spec). The frontend's one flattener of call arguments."""
    from torch.utils import _pytree as pytree

    with_paths, spec = pytree.tree_flatten_with_path((tuple(inputs), dict(kwargs or {})))
    return [v for _, v in with_paths], [p for p, _ in with_paths], spec


def call_leaves(inputs: Sequence[Any], kwargs: dict | None = None) -> list[Any]:
    """The leaves of the call ``(inputs, kwargs)`` in :func:`flatten_call`'s order, without
    the paths (what a run binds to an exported graph's input placeholders)."""
    from torch.utils import _pytree as pytree

    return pytree.tree_leaves((tuple(inputs), dict(kwargs or {})))


def check_call(module: Any, example_inputs: Any, name: str, method: str) -> tuple:
    """The example inputs as a tuple, after checking the module and the method."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise InputError(name, f"expected a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    if method not in METHODS:
        raise ValueError(f"method must be auto, export or fx, not {method!r}")
    return tuple(example_inputs)


def trace(module: Any, example_inputs: Sequence[Any] | Any, kwargs: dict | None = None,
          method: str = "auto", name: str = "model") -> Trace:
    """Trace ``module`` on ``example_inputs`` (and ``kwargs``) once: torch.export, then
    torch.fx when it fails and ``method`` is ``auto``. Raises :class:`InputError` (path =
    ``name``) when the module cannot be traced; ``ValueError`` for an unknown method."""
    inputs = check_call(module, example_inputs, name, method)
    kwargs = dict(kwargs or {})
    with opaque_experts(module) as notes:
        tr = _trace_once(module, inputs, kwargs, method, name)
    tr.notes = list(notes)
    return tr


def _trace_once(module: Any, inputs: tuple, kwargs: dict, method: str, name: str) -> Trace:
    """torch.export, then torch.fx (``method="auto"``), with the one-line error rules."""
    errors: list[str] = []
    if method in ("auto", "export"):
        try:
            return _export_trace(export_program(module, inputs, kwargs), inputs, kwargs,
                                 method)
        # torch raises many types; the user needs the reason (a sys.exit() in forward is
        # the model's, not ours: it ended the process with no word)
        except (Exception, SystemExit) as exc:
            if method == "export":
                raise InputError(name, "cannot be traced by torch.export: "
                                 + one_line(exc)) from exc
            errors.append("torch.export: " + one_line(exc))
    try:
        tr = _fx_trace(module, inputs, kwargs, method)
    except (Exception, SystemExit) as exc:
        errors.append("torch.fx: " + one_line(exc))
        raise InputError(name, "cannot be traced (" + "; ".join(errors) + ")") from exc
    tr.export_error = errors[0] if errors else None
    return tr


def export_program(module: Any, inputs: tuple, kwargs: dict) -> Any:
    """``torch.export.export(strict=False)`` under ``no_grad``: the importer's and the code
    generator's one tracer, so both see the same graph and node names."""
    import torch

    with torch.no_grad(), quiet_torch():
        ep = torch.export.export(module, inputs, kwargs=kwargs or None, strict=False)
        if _has_subgraph_calls(ep.graph):
            # `with torch.autocast(...)` / `torch.enable_grad()` blocks come out as one
            # higher-order call of a nested graph, whose ops would have no cost, stream or
            # state edge of their own. Lowering inlines them (autocast's casts made
            # explicit) and makes mutations functional, which the importer reads from the
            # signature; a graph without such calls keeps its in-place ops.
            ep = ep.run_decompositions({})
        return ep


@contextlib.contextmanager
def quiet_torch() -> Iterator[None]:
    """Hold back what a failing trace prints: a failed export dumps its partial graph to
    stderr, and fake tensors log a whole traceback (40 lines for a shape mismatch) at
    ERROR level. The reason reaches the user in parastream's one-line error (or
    g.meta["export_error"] after the fx fallback). Python-level stderr only: the process
    is not silenced, and other threads' output in this window is held back too."""
    torch_log = logging.getLogger("torch")
    level = torch_log.level
    torch_log.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        torch_log.setLevel(level)


def _has_subgraph_calls(graph: Any) -> bool:
    """Whether an exported graph calls a higher-order op (``wrap_with_autocast``,
    ``wrap_with_set_grad_enabled``, ...) on a nested graph module."""
    from torch._ops import HigherOrderOperator

    return any(n.op == "call_function" and isinstance(n.target, HigherOrderOperator)
               for n in graph.nodes)


def _export_trace(ep: Any, inputs: tuple, kwargs: dict, method: str) -> Trace:
    """An exported program as a :class:`Trace`: its signature read once."""
    from torch.export.graph_signature import TensorArgument

    bindings = [Binding(s.arg.name, _INPUT_KINDS.get(s.kind.name, s.kind.name.lower()),
                        s.target, isinstance(s.arg, TensorArgument))
                for s in ep.graph_signature.input_specs]
    by_name = {n.name: n for n in ep.graph.nodes}
    outputs = []
    for s in ep.graph_signature.output_specs:
        name = getattr(s.arg, "name", None)
        value = by_name[name] if name in by_name else getattr(s.arg, "value", None)
        outputs.append(Output(_OUTPUT_KINDS.get(s.kind.name, s.kind.name.lower()), s.target,
                              name, value, isinstance(s.arg, TensorArgument)))
    flat, paths, spec = flatten_call(inputs, kwargs)
    return Trace(EXPORT, ep.graph_module, ep, method, inputs, kwargs, flat, paths, spec,
                 bindings, outputs, out_spec=ep.call_spec.out_spec)


def _fx_trace(module: Any, inputs: tuple, kwargs: dict, method: str) -> Trace:
    """torch.fx.symbolic_trace + shape propagation on fake tensors (no real compute)."""
    import torch.fx

    if kwargs:
        raise ValueError("the torch.fx fallback takes positional example inputs only")
    gm = torch.fx.symbolic_trace(module)
    propagate_fake(gm, inputs)
    bindings = [Binding(n.name, "input", None, True)
                for n in gm.graph.nodes if n.op == "placeholder"]
    flat, paths, spec = flatten_call(inputs, kwargs)
    return Trace(FX, gm, None, method, inputs, kwargs, flat, paths, spec, bindings)


def propagate_fake(gm: Any, inputs: Sequence[Any]) -> None:
    """Run ``gm`` on fake copies of ``inputs``, recording each node's value in
    ``node.meta["val"]`` as torch.export does."""
    import torch
    import torch.fx
    from torch._subclasses.fake_tensor import FakeTensorMode

    class _Prop(torch.fx.Interpreter):
        def run_node(self, n):  # record each node's value, like export's meta["val"]
            result = super().run_node(n)
            n.meta["val"] = result
            return result

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake_inputs = [mode.from_tensor(t) if is_tensor(t) else t for t in inputs]
    with mode, torch.no_grad(), quiet_torch():
        _Prop(gm).run(*fake_inputs)
