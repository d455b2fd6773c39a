"""Generate a model's forward as Python source with a multi-stream plan applied.

How it works:

1. :func:`trace` traces the module exactly as :func:`parastream.graph.torch_import.import_module`
   does (``torch.export.export(strict=False)`` under ``no_grad``, ``torch.fx.symbolic_trace``
   when export fails), so the FX node names are the plan's op names.
2. :func:`emit` writes one line per FX node
   (``linear_2 = torch.ops.aten.linear.default(view, p_mlp_gate_weight)``), grouped into the
   target's stream blocks, with the plan's events where the plan puts them (recorded right
   after ``record_after``, waited right before ``wait_before``; the final joins at the end of
   the origin stream), guarded by the plan's enable switch.
3. **Issue order** (:mod:`parastream.emit.order`): each stream's nodes keep their program
   order, and the streams are merged so that each node is issued as early as its inputs,
   the plan's events and the storage order (no two writers of a storage, nor a reader and a
   writer of it, swap) allow, side streams first among those ready: side work is launched
   before the main path's dominator even when the model writes it after.

Rules the generated code follows:

* **Stream of a node.** A plan op runs on its planned stream. A node the plan does not name
  (a folded view, ``getitem``, a size query) runs on the stream of the plan op that produced
  the tensor it views (its *base producer*), in that stream's order: the view of a
  side-stream output is taken inside the side-stream block. This pins cheap reshapes of
  side outputs on the side stream, which is the known fix for GE's precompute hoisting (a
  Reshape of a side output issued on the main stream can become a barrier). A node that
  views (or copies) a graph input, weight or buffer depends on no stream: it is written
  before the fork, so every stream reads it ordered (one that must follow a write is
  written right before its first reader instead). Export's ``_assert_tensor_metadata``
  checks are dropped (they compute nothing and name the trace device).
* **torchair** (GE graph mode): side ops inside ``torchair.scope.npu_stream_switch("s<k>", 0)``
  (plus ``torchair.scope.limit_core_num(aicore, vectorcore)`` for a C2 core limit). Each plan
  event becomes ``x_w = torchair.scope.npu_wait_tensor(x, dep)`` right before the waiting op,
  where ``x`` is an input of that op (the one made from the recorded op's output when there
  is one) and ``dep`` an output of the recorded op; the waiting op then reads ``x_w``. The
  rebinding matters: TorchAir converts ``wait_tensor`` into an ``Identity`` of ``x`` with a
  control edge from ``dep``, so only readers of the returned tensor are ordered. A final join
  waits the returned output on the side stream's last op. No ``record_stream`` (GE owns the
  memory of a graph); no Event objects.
* **npugraph_ex** and **cuda**: side streams (``torch.npu.Stream()`` /
  ``torch.cuda.Stream()``) are made on the first call, on the first input's device, one set
  per device; side ops run inside ``with npu.stream(S[k]):`` (plus
  ``npu.npugraph_ex.scope.limit_core_num(aicore, vectorcore)``, a stream-level limit, for C2
  limits; CUDA has no equivalent and says so in a comment). At the start every side stream
  waits on a *fork* event recorded on the caller's current stream (work queued before the
  forward, and graph capture, need it); per plan event an ``Event()`` is recorded on the
  producer's stream right after ``record_after`` (one event per recorded op) and waited on the
  consumer's stream right before ``wait_before``; joins wait on the origin stream at the end.
  A tensor made by an op on one stream and read by an op on another gets
  ``record_stream(t, S[reader])`` before the read; a side-stream tensor that the forward
  returns gets ``record_stream(t, S[0])``. Inputs, weights and buffers (long-lived) do not.
* **Switch.** ``MultiStreamForward(model)`` runs ``model`` itself unless the environment
  variable named by ``plan.switch`` is 1/true/yes/on (or ``enabled=True`` is passed): the
  original single-stream path is always there. The stream API is injectable
  (``MultiStreamForward(model, api=...)``): by default it is imported lazily (``torchair``;
  ``torch.npu`` after ``import torch_npu``; ``torch.cuda``), and
  :func:`parastream.emit.standins.standin` gives recording stand-ins that run on a CPU.
* Devices: a ``torch.device`` argument equal to the traced inputs' device is emitted as the
  runtime device of the first input (``_dev``), so a model traced on the CPU runs on the NPU.
"""

from __future__ import annotations

import keyword
import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..plan.model import Plan
from . import TARGETS
from .devices import has_core_limit_api, required_apis
from .order import OrderError, Unit, issue_order, storage_order

DEFAULT_CLASS = "MultiStreamForward"
#: vector cores per AI (cube) core when the plan gives no vectorcore_num (Atlas A2/A3: 24:48)
DEFAULT_VECTOR_PER_CUBE = 2.0


class EmitError(ValueError):
    """The plan cannot be applied to this model, or the model cannot be emitted."""


# ----------------------------------------------------------------------------- tracing
@dataclass
class Traced:
    """A traced model: the runnable FX graph whose node names are the plan's op names."""

    method: str                                  # "torch.export" | "torch.fx"
    graph: Any                                   # torch.fx.Graph
    #: placeholder name -> (kind, what): ("param"|"buffer"|"attr", fqn), ("input", index),
    #: ("value", tensor) for a constant created inside forward
    placeholders: dict[str, tuple[str, Any]]
    outputs: list[Any]                           # user outputs: fx nodes or constants
    out_spec: Any = None                         # pytree spec of the user outputs (export)
    fx_output: Any = None                        # fx: the output node's argument as is
    mutations: list[tuple[str, Any, Any]] = field(default_factory=list)  # (kind, target, node)
    device: Any = None                           # device of the first tensor input
    #: the traced call: positional arguments, keyword names, the arguments' structure
    #: (a pytree spec as JSON), the non-tensor leaves a torch.export trace built into
    #: the graph as constants (leaf index -> (what, value)), and the tensor leaves' shapes
    #: and dtypes it was specialised to (leaf index -> (what, shape, dtype))
    call: tuple[int, tuple[str, ...], str, dict[int, tuple[str, Any]],
                dict[int, tuple[str, tuple[int, ...], str]]] | None = None

    def nodes(self) -> list[Any]:
        return list(self.graph.nodes)


def trace(module: Any, inputs: Sequence[Any] | Any, *, kwargs: dict | None = None,
          method: str = "auto", program: Any = None) -> Traced:
    """Trace ``module`` on ``inputs`` with the importer's tracer (same trace, same names);
    ``program``: the :class:`~parastream.graph.trace.Trace` the importer already made of
    them (:func:`~parastream.graph.torch_import.import_trace`), read as it is."""
    import torch

    from ..graph.trace import METHODS, Trace

    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    inputs = tuple(inputs)
    if method not in METHODS:
        raise ValueError(f"method must be auto, export or fx, not {method!r}")
    device = next((t.device for t in inputs if isinstance(t, torch.Tensor)), None)
    tr = program if isinstance(program, Trace) else _trace(module, inputs, kwargs, method)
    traced = (_from_export(tr, module, device) if tr.source == "torch.export"
              else _from_fx(tr, device))
    # torch.fx keeps a non-tensor argument as a real input; torch.export bakes it in
    traced.call = _call_shape(tr, constants=traced.method == "torch.export")
    return traced


def _call_shape(tr: Any, constants: bool = True
                ) -> tuple[int, tuple[str, ...], str, dict[int, tuple[str, Any]],
                           dict[int, tuple[str, tuple[int, ...], str]]]:
    """The traced call as :attr:`Traced.call` records it, from the trace's flattened call;
    ``constants`` (a torch.export trace): also the non-tensor leaves that can be written
    as literals, each with what it is (``argument 1``, ``keyword 'scale'``, ``argument
    0[1]`` inside a tuple argument), and the tensor leaves' shapes and dtypes, which the
    graph is specialised to (another shape would run the traced slices and views and
    give a wrong result, no error)."""
    import torch
    from torch.utils import _pytree as pytree

    consts, tensors = {}, {}
    for i, (path, v) in enumerate(zip(tr.input_paths, tr.flat_inputs)):
        if not constants:
            break
        top, where, rest = path[0], path[1], path[2:]
        what = (f"argument {getattr(where, 'idx', where)}" if getattr(top, "idx", 0) == 0
                else f"keyword {getattr(where, 'key', where)!r}") + pytree.keystr(rest)
        if isinstance(v, torch.Tensor):
            tensors[i] = (what, tuple(v.shape), str(v.dtype))
        elif _literal_ok(v):
            consts[i] = (what, v)
    return (len(tr.inputs), tuple(tr.kwargs), pytree.treespec_dumps(tr.input_spec), consts,
            tensors)


def _literal_ok(v: Any) -> bool:
    """A value whose repr reads back as an equal value of the same type: exactly None,
    bool, int, str or a finite float (not an IntEnum or a numpy scalar, whose repr needs
    imports the generated module does not have)."""
    if v is None or type(v) in (bool, int, str):
        return True
    return type(v) is float and v == v and v not in (float("inf"), float("-inf"))


def _trace(module: Any, inputs: tuple, kwargs: dict | None, method: str) -> Any:
    """The importer's one trace of the module (torch.export, then torch.fx), its
    one-line reason an :class:`EmitError`."""
    from ..errors import InputError
    from ..graph.trace import trace as trace_module

    try:
        return trace_module(module, inputs, kwargs, method)
    except InputError as exc:
        raise EmitError(exc.reason) from exc


def _from_export(tr: Any, module: Any, device: Any) -> Traced:
    """An exported trace as :class:`Traced`, from its parsed signature."""
    ph: dict[str, tuple[str, Any]] = {}
    user = 0
    for b in tr.bindings:
        ph[b.name] = _export_input(tr, module, b, user)
        user += ph[b.name][0] == "input"
    outputs: list[Any] = []
    mutations: list[tuple[str, Any, Any]] = []
    for out in tr.outputs:
        if out.kind == "user":
            outputs.append(out.value)
        elif out.kind in ("buffer_mutation", "input_mutation"):
            mutations.append((out.kind.split("_")[0], out.target, out.value))
        else:
            raise EmitError(f"unsupported export output of kind {out.kind.upper()}")
    return Traced("torch.export", tr.graph, ph, outputs, out_spec=tr.out_spec,
                  mutations=mutations, device=device)


def _export_input(tr: Any, module: Any, b: Any, user: int) -> tuple[str, Any]:
    """What an export input is, as :attr:`Traced.placeholders` records it (``user``: the
    index the next user input has)."""
    if b.kind in ("param", "buffer"):
        return (b.kind, b.target)
    if b.kind == "constant":
        if _has_tensor_attr(module, b.target):
            return ("attr", b.target)
        return ("value", tr.program.constants[b.target])
    if b.kind == "input":
        return ("input", user)
    raise EmitError(f"unsupported export input {b.name!r} of kind {b.kind.upper()}")


def _from_fx(tr: Any, device: Any) -> Traced:
    """An fx trace (node values already propagated on fake tensors) as :class:`Traced`:
    every placeholder an input, in order."""
    ph = {b.name: ("input", i) for i, b in enumerate(tr.bindings)}
    out = next((n.args[0] for n in tr.graph.nodes if n.op == "output"), None)
    return Traced("torch.fx", tr.graph, ph, [], fx_output=out, device=device)


def _has_tensor_attr(module: Any, fqn: str) -> bool:
    import torch

    obj = module
    for part in fqn.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return isinstance(obj, torch.Tensor)


# ----------------------------------------------------------------------------- model sources
def build_model(source: dict) -> tuple[Any, tuple]:
    """(module, example_inputs) of a plan's ``source`` ({"model", "scale", "phase"}): a zoo
    name or ``path/to/file.py:factory``, as :func:`parastream.graph.models.resolve` builds it.
    Raises :class:`~parastream.errors.InputError` for a model it cannot rebuild."""
    from ..errors import InputError
    from ..graph import models

    spec = source.get("model")
    scale = source.get("scale") or "small"
    phase = source.get("phase")
    if not spec:
        raise InputError(None, "the plan does not say which model it was made for "
                               "(no source.model); pass --model")
    if scale not in models.SCALES:
        raise InputError(None, f"unknown scale {scale!r}")
    if spec.endswith(".json"):
        raise InputError(spec, "the plan was made from a graph file, which holds no model to "
                               "run; pass --model with the torch model (zoo name or "
                               "path/to/file.py:factory)")
    module, inputs, _, _ = models.load_model(spec, scale, phase)
    if not isinstance(inputs, tuple):
        inputs = tuple(inputs) if isinstance(inputs, list) else (inputs,)
    return module, inputs


# ----------------------------------------------------------------------------- emission
@dataclass
class Emitted:
    """The generated module and what it contains."""

    source: str
    target: str
    calls: tuple[tuple[str, str], ...]  # (node, op) emitted as torch.ops calls, in issue order
    side_streams: tuple[int, ...]
    waits: int                        # plan events emitted (npu_wait_tensor / Event.wait)
    records: int                      # Event.record calls (npugraph_ex / cuda)
    record_streams: int               # record_stream calls
    unplanned: list[str] = field(default_factory=list)  # real ops the plan does not name
    skipped_events: list[str] = field(default_factory=list)
    #: emitted, but worth a look on the hardware (one line each)
    warnings: list[str] = field(default_factory=list)
    level: str = "op"                 # "module": a patch on the user's module; "op": the trace
    host: str = ""                    # the patched forward (module level)


_RESERVED = {
    "self", "args", "kwargs", "m", "S", "torch", "pytree", "functools", "os", "operator",
    "collections", "TRACE", "math", "record_stream", "fork", "npu", "cuda", "torchair", "api", "_get", "_dev",
    "_resolve", "_OUT_SPEC", "ENABLED", "SWITCH", "TARGET", "CLASS_NAME", "PLAN", "CALLS", "EVENTS",
    "ASSIGNMENT", "CORE_LIMITS", "SIDE_STREAMS", "SOURCE", "switch_on", "load_model",
    "TRACED_CALL", "_TRACED_SPEC", "_traced_call", "_leaves", "_streams_api", "NEEDS",
    "_check_needs", "LEVEL",
    "_tensor_record_stream",
    "print", "len", "float", "int", "list", "tuple", "dict", "slice", "getattr", "range",
}

#: names the generated module defines or reads at its top level: no class may take one
RESERVED_NAMES = frozenset(_RESERVED)

_VIEW_LIKE = None  # filled lazily from the importer's tables


def _view_like() -> frozenset:
    global _VIEW_LIKE
    if _VIEW_LIKE is None:
        from ..graph.op_tables import MAYBE_VIEW_OPS, VIEW_OPS

        _VIEW_LIKE = frozenset(VIEW_OPS | MAYBE_VIEW_OPS | {"dropout", "feature_dropout",
                                                             "alpha_dropout", "to",
                                                             "getitem"})
    return _VIEW_LIKE


def _short(node: Any) -> str:
    tgt = node.target
    schema = getattr(tgt, "_schema", None)
    if schema is not None:
        return schema.name.partition("::")[2] or schema.name
    if node.op in ("call_method",):
        return str(tgt)
    return getattr(tgt, "__name__", str(tgt))


def _written_args(node: Any) -> list[Any]:
    """The argument nodes an op writes, as its schema marks them (in-place, ``out=``, a
    mutable custom op; the importer reads the same marks), else its first argument when
    its name ends in ``_`` (a method call of an fx trace)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return list(node.args[:1]) if _short(node).endswith("_") else []
    from ..graph.records import written_args

    return [v for v in written_args(schema, node.args, node.kwargs) if hasattr(v, "op")]


def _aliases(node: Any) -> bool:
    """Whether a node's result may share its first argument's storage (a view, a
    ``getitem``, a ``to`` / ``reshape`` / ``contiguous`` that may return its input)."""
    from ..graph.records import aliasing_view

    return node.op != "placeholder" and (_short(node) in _view_like() or aliasing_view(node))


def _is_assert(node: Any) -> bool:
    return node.op == "call_function" and _short(node).startswith("_assert") and not node.users


def _tensor_val(node: Any) -> bool:
    import torch

    v = node.meta.get("val") if hasattr(node, "meta") else None
    return isinstance(v, torch.Tensor)


def _multi_val(node: Any) -> bool:
    v = node.meta.get("val") if hasattr(node, "meta") else None
    return isinstance(v, (tuple, list))


def _arg_nodes(a: Any) -> list[Any]:
    """The fx nodes inside a node's argument (tuples, lists and dict values), in order."""
    import torch.fx

    from ..graph.tensors import flat_leaves

    return flat_leaves(a, lambda x: isinstance(x, torch.fx.Node))


class _Names:
    """Python variable names for FX nodes (clashes with the generated code's own names are
    suffixed) and fresh names for events and waited tensors."""

    def __init__(self, nodes: list[Any]) -> None:
        self.taken = set(_RESERVED)
        self.var: dict[str, str] = {}
        for n in nodes:
            name = n.name if n.name.isidentifier() else re.sub(r"\W", "_", n.name)
            if keyword.iskeyword(name) or name in self.taken or name[0].isdigit():
                name = self.fresh(name + "_")
            self.taken.add(name)
            self.var[n.name] = name

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken or keyword.iskeyword(name):
            name = f"{base}{i}"
            i += 1
        self.taken.add(name)
        return name


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, depth: int, text: str = "") -> None:
        self.lines.append(("    " * depth + text) if text else "")


def bad_class_name(name: str, label: str = "class name") -> str | None:
    """Why ``name`` cannot name the generated class, or None: not a Python name, a keyword,
    or a name the module binds itself (a class named ``ENABLED`` would shadow the switch,
    one named ``torch`` break the module at call time). ``label`` names it in the message
    (``--class-name``)."""
    if not name.isidentifier() or keyword.iskeyword(name):
        return f"{label} {name!r} is not a Python name a class can have"
    if name in RESERVED_NAMES:
        return f"{label} {name!r} is a name the generated module uses itself: choose another"
    return None


@dataclass(frozen=True)
class DocNotes:
    """What the generated module's docstring says beyond the plan: the model's name
    (default: the plan source's model) and why the forward is op-level (a module-level
    patch was refused; default: it was requested)."""

    model_name: str | None = None
    level_note: str | None = None


@dataclass(frozen=True)
class _Settings:
    """How one module is written (see :func:`emit`)."""

    source: dict
    device_name: str | None = None
    class_name: str = DEFAULT_CLASS
    vector_per_cube: float = DEFAULT_VECTOR_PER_CUBE
    notes: DocNotes = DocNotes()


def emit(traced: Traced, plan: Plan, target: str, *, source: dict | None = None,
         device_name: str | None = None, class_name: str = DEFAULT_CLASS,
         vector_per_cube: float = DEFAULT_VECTOR_PER_CUBE,
         notes: DocNotes | None = None) -> Emitted:
    """The Python module applying ``plan`` to the traced model on ``target``.

    ``source`` ({"model", "scale", "phase"}) lets the generated file rebuild the model for
    its self-check (``python generated.py``); ``device_name`` (a device profile) decides
    whether the plan's core limits may be emitted; ``vector_per_cube`` gives the
    vector-core count of a C2 limit that names only ``aicore_num`` (0 on parts without
    separate vector cores); ``notes`` adds to the module's docstring.
    """
    if target not in TARGETS:
        raise EmitError(f"unknown target {target!r} (expected one of {', '.join(TARGETS)})")
    bad = bad_class_name(class_name)
    if bad:
        raise EmitError(bad)
    settings = _Settings(source or {}, device_name, class_name, vector_per_cube,
                         notes or DocNotes())
    return _Emitter(traced, plan, target, settings).run()


def node_streams(traced: Traced, plan: Plan) -> tuple[dict[str, int | None], set[str]]:
    """Each traced node's stream as the op-level rules give it (a folded view runs on its
    base producer's stream; None: no device work of its own) and the nodes that launch
    work (the plan's ops and real ops it does not name)."""
    em = _Emitter(traced, plan, "cuda", _Settings({}))
    em._analyse()
    return dict(em.stream), set(plan.assignment) | set(em.unplanned)


class _Emitter:
    def __init__(self, traced: Traced, plan: Plan, target: str, settings: _Settings) -> None:
        self.t = traced
        self.plan = plan
        self.target = target
        self.source = settings.source
        self.model_name = settings.notes.model_name or self.source.get("model") or "model"
        self.device_name = settings.device_name
        self.class_name = settings.class_name
        self.vpc = settings.vector_per_cube
        self.level_note = settings.notes.level_note
        self.nodes = [n for n in traced.nodes() if not _is_assert(n)]
        self.names = _Names(self.nodes)
        self.by_name = {n.name: n for n in self.nodes}
        self.api_name = {"torchair": "torchair", "npugraph_ex": "npu", "cuda": "cuda"}[target]

    # ------------------------------------------------------------------ analysis
    def _analyse(self) -> None:
        plan = self.plan
        known = set(self.by_name)
        unknown = sorted(set(plan.assignment) - known)
        if unknown:
            raise EmitError(
                f"the plan names {len(unknown)} op(s) that the traced model does not have "
                f"({', '.join(unknown[:6])}{' ...' if len(unknown) > 6 else ''}): it was made "
                "for another model, scale or phase")
        for e in plan.events:
            for op in (e.record_after, e.wait_before):
                if op is not None and op not in plan.assignment:
                    raise EmitError(f"plan event names op {op!r} that has no stream")
        for s in plan.assignment.values():
            if not isinstance(s, int) or s < 0:
                raise EmitError(f"stream ids must be integers >= 0, not {s!r}")
        view_like = _view_like()
        from ..graph.records import aliasing_view
        self.base: dict[str, str | None] = {}
        self.stream: dict[str, int | None] = {}
        self.unplanned: list[str] = []
        self.warnings: list[str] = []
        for n in self.nodes:
            if n.op in ("placeholder", "output", "get_attr"):
                self.base[n.name] = None
                self.stream[n.name] = None
                continue
            if n.name in plan.assignment:
                self.base[n.name] = n.name
                self.stream[n.name] = plan.assignment[n.name]
                continue
            short = _short(n)
            if plan.assignment and short not in view_like and not aliasing_view(n) and (
                    _tensor_val(n) or _multi_val(n)) and n.op != "call_module":
                # a real op the plan does not name (a partial plan): the origin stream
                self.unplanned.append(n.name)
                self.base[n.name] = n.name
                self.stream[n.name] = 0
                continue
            first = next(iter(_arg_nodes(list(n.args) + list(n.kwargs.values()))), None)
            b = self.base.get(first.name) if first is not None else None
            self.base[n.name] = b
            self.stream[n.name] = self.stream.get(b) if b else None
        used = sorted({s for n, s in plan.assignment.items()})
        self.side = tuple(s for s in used if s != 0)
        self.records: dict[str, list[int]] = {}
        self.waits: dict[str | None, list[int]] = {}
        for i, e in enumerate(plan.events):
            self.records.setdefault(e.record_after, []).append(i)
            self.waits.setdefault(e.wait_before, []).append(i)
        self.limits: dict[int, tuple[int, int]] = {}
        for key, spec in (plan.core_limits or {}).items():
            try:
                s = int(key)
                a = int(spec["aicore_num"])
            except (KeyError, TypeError, ValueError):
                raise EmitError(f"core limit {key!r}: {spec!r} is not "
                                '{"aicore_num": N[, "vectorcore_num": M]}') from None
            v = spec.get("vectorcore_num")
            v = int(v) if v is not None else int(round(a * self.vpc))
            self.limits[s] = (a, v)
        self.dropped_limits: dict[int, tuple[int, int]] = {}
        if self.limits and has_core_limit_api(self.target):
            from .devices import core_limit

            facts = core_limit(self.device_name)
            if not facts.allows(self.target):
                # only where the device's documentation lists the API (docs/emit.md)
                self.dropped_limits, self.limits = self.limits, {}
                self.warnings.append(f"core limits {self.dropped_limits} not emitted for "
                                     f"{self.device_name or 'an unnamed device'}: "
                                     f"{facts.source}")

    # ------------------------------------------------------------------ rendering helpers
    def v(self, node: Any) -> str:
        return self.subst.get(node.name, self.names.var[node.name])

    def render(self, a: Any) -> str:
        import torch
        import torch.fx

        if isinstance(a, torch.fx.Node):
            return self.v(a)
        if isinstance(a, tuple):
            inner = ", ".join(self.render(x) for x in a)
            return f"({inner},)" if len(a) == 1 else f"({inner})"
        if isinstance(a, list):
            return "[" + ", ".join(self.render(x) for x in a) + "]"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{self.render(k)}: {self.render(x)}"
                                   for k, x in a.items()) + "}"
        if a is None or isinstance(a, (bool, str)):
            return repr(a)
        if isinstance(a, int):
            return repr(int(a))
        if isinstance(a, float):
            if math.isnan(a):
                return "float('nan')"
            if math.isinf(a):
                return "float('inf')" if a > 0 else "float('-inf')"
            return repr(a)
        if isinstance(a, torch.dtype):
            return str(a)
        if isinstance(a, torch.device):
            if self.t.device is not None and a == self.t.device and self.has_dev:
                return "_dev"
            return f"torch.device({str(a)!r})"
        if isinstance(a, (torch.layout, torch.memory_format)):
            return str(a)
        if isinstance(a, slice):
            return f"slice({self.render(a.start)}, {self.render(a.stop)}, {self.render(a.step)})"
        if a is Ellipsis:
            return "..."
        if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise EmitError("the traced graph has symbolic shapes; emit needs static shapes")
        raise EmitError(f"cannot write a {type(a).__name__} argument into Python source")

    def call(self, n: Any) -> str:
        import operator

        args = [self.render(a) for a in n.args]
        args += [f"{k}={self.render(x)}" for k, x in n.kwargs.items()]
        joined = ", ".join(args)
        tgt = n.target
        if n.op == "call_function":
            if tgt is operator.getitem:
                return f"{self.render(n.args[0])}[{self.render(n.args[1])}]"
            schema = getattr(tgt, "_schema", None)
            if schema is not None and schema.name == "parastream::module_call":
                return self.module_call(n)
            if schema is not None:
                ns, _, op = schema.name.partition("::")
                overload = getattr(tgt, "_overloadname", "default") or "default"
                self.calls.append((n.name, f"{ns}.{op}.{overload}"))
                return f"torch.ops.{ns}.{op}.{overload}({joined})"
            return f"{self.qualname(tgt)}({joined})"
        if n.op == "call_method":
            rest = ", ".join(args[1:])
            return f"{args[0]}.{tgt}({rest})"
        if n.op == "call_module":
            return f"_get(m, {str(tgt)!r})({joined})"
        if n.op == "get_attr":
            return f"_get(m, {str(tgt)!r})"
        raise EmitError(f"cannot emit node {n.name} ({n.op})")

    def module_call(self, n: Any) -> str:
        """An opaque module op (a Hugging Face experts module the importer kept whole): the
        original model's own submodule, called by its path on the op's inputs."""
        from ..graph.opaque import opaque_module_path

        path = opaque_module_path(n.args[0])
        if path is None:
            raise EmitError(f"op {n.name} calls a module traced in another process: emit the "
                            "plan in the process that imports the model")
        inputs = ", ".join(self.render(a) for a in n.args[1])
        return f"m.get_submodule({path!r})({inputs})"

    def qualname(self, fn: Any) -> str:
        from torch.fx.node import _get_qualified_name

        try:
            q = _get_qualified_name(fn)
        except Exception:
            q = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', fn)}"
        q = q.replace("_operator.", "operator.", 1) if q.startswith("_operator.") else q
        if "." not in q:  # a builtin (getattr, len)
            return q
        root = q.split(".", 1)[0]
        if root in ("torch", "operator", "math"):
            self.imports.add(root)
            return q
        if root == "builtins":
            return q.split(".", 1)[1]
        mod, _, attr = q.rpartition(".")
        self.resolves = True
        return f"_resolve({mod!r}, {attr!r})"

    def tensor_inputs(self, n: Any) -> list[Any]:
        found = [a for a in _arg_nodes(list(n.args) + list(n.kwargs.values()))
                 if _tensor_val(a)]
        # activations first, weights and buffers last
        return sorted(dict.fromkeys(found), key=lambda a: a.op in ("placeholder", "get_attr")
                      and self.t.placeholders.get(a.name, ("input",))[0] != "input")

    def home(self, node: Any) -> int | None:
        b = self.base.get(node.name)
        return self.stream.get(b) if b else None

    # ------------------------------------------------------------------ target pieces
    def open_block(self, s: int) -> str | None:
        limit = self.limits.get(s)
        parts = []
        if self.target == "torchair":
            if s != 0:
                parts.append(f'torchair.scope.npu_stream_switch("s{s}", 0)')
            if limit:
                parts.append(f"torchair.scope.limit_core_num({limit[0]}, {limit[1]})")
        else:
            if s != 0:
                parts.append(f"{self.api_name}.stream(S[{s}])")
            if limit and self.target == "npugraph_ex":
                parts.append(f"npu.npugraph_ex.scope.limit_core_num({limit[0]}, {limit[1]})")
        return ("with " + ", ".join(parts) + ":") if parts else None

    def event_comment(self, i: int) -> str:
        e = self.plan.events[i]
        src = f"{e.record_after} (stream {self.plan.assignment[e.record_after]})"
        if e.wait_before is None:
            return f"e{i}: {src} -> end of stream 0 (join)"
        return f"e{i}: {src} -> {e.wait_before} (stream {self.plan.assignment[e.wait_before]})"

    def event_var(self, op: str) -> str:
        """The variable of the Event recorded after plan op ``op``."""
        if op not in self.ev_names:
            self.ev_names[op] = self.names.fresh(f"ev_{self.names.var[op]}")
        return self.ev_names[op]

    def dep_expr(self, op: str) -> str | None:
        """An output tensor of plan op ``op`` as an expression."""
        node = self.by_name[op]
        var = self.names.var[op]
        if _multi_val(node):
            vals = node.meta["val"]
            import torch

            for i, x in enumerate(vals):
                if isinstance(x, torch.Tensor):
                    return f"{var}[{i}]"
            return None
        return var

    # ------------------------------------------------------------------ main
    def run(self) -> Emitted:
        self._analyse()
        self.subst: dict[str, str] = {}
        self.ev_names: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []
        self.resolves = False
        self.imports: set[str] = set()
        self.n_waits = self.n_records = self.n_rs = 0
        self.skipped: list[str] = []
        first_input = next((n for n in self.nodes if n.op == "placeholder"
                            and self.t.placeholders.get(n.name, ("",))[0] == "input"
                            and _tensor_val(n)), None)
        self.has_dev = first_input is not None and self.t.device is not None
        w = _Writer()
        body = self.forward_body(first_input)
        self.body_text = "\n".join(body)
        header = self.module_header()
        w.lines.extend(header)
        w.lines.extend(body)
        w.lines.extend(self.module_footer())
        src = "\n".join(w.lines).rstrip() + "\n"
        return Emitted(src, self.target, tuple(self.calls), self.side, self.n_waits,
                       self.n_records, self.n_rs, list(self.unplanned), list(self.skipped),
                       list(self.warnings))

    def forward_body(self, first_input: Any) -> list[str]:
        """The generated ``forward``: the switch test, the inputs and weights, the nodes
        every stream may read (before the fork), the target's streams and fork, every other
        node in issue order (:mod:`parastream.emit.order`) in its stream's block with the
        plan's waits and records, the joins, the mutations export moved out, the return."""
        w = _Writer()
        self.forward_inputs(w, first_input)
        deps = self.node_deps()
        hoisted = self.hoist_free(w, deps)
        self.stream_prelude(w)
        blocks = _Blocks(self, w)
        recorded_to: set[tuple[str, int]] = set()
        for name, s in self.issue_order(deps, hoisted):
            blocks.switch(s)
            self.issue(w, blocks, self.by_name[name], recorded_to)
        # ---- joins at the end of the origin stream
        blocks.switch(0)
        out_exprs = self.join(w, blocks.depth)
        self.write_mutations(w, blocks.depth)
        w(blocks.depth, f"return {out_exprs}")
        return w.lines

    def node_deps(self) -> dict[str, set[str]]:
        """What each node (placeholders and the output left out) must be issued after: the
        nodes it reads, the storage order (no two writers of a storage, nor a reader and a
        writer of it, swap; a view aliases its base) and, for a plan op, the ops whose
        events it waits for."""
        root: dict[str, str] = {}
        deps: dict[str, set[str]] = {}
        accesses: list[tuple[str, set[str], set[str]]] = []
        for n in self.nodes:
            args = _arg_nodes(list(n.args) + list(n.kwargs.values()))
            root[n.name] = root[args[0].name] if args and _aliases(n) else n.name
            if n.op in ("placeholder", "output"):
                continue
            deps[n.name] = {a.name for a in args}
            writes = {root[a.name] for a in _written_args(n) if getattr(a, "name", None) in root}
            accesses.append((n.name, {root[a.name] for a in args}, writes))
        for name, after in storage_order(accesses).items():
            deps[name] |= after
        for e in self.plan.events:
            if e.wait_before is not None:
                deps[e.wait_before].add(e.record_after)
        return deps

    def issue_order(self, deps: dict[str, set[str]], hoisted: set[str]
                    ) -> list[tuple[str, int]]:
        """``(node, block stream)`` for every node but the placeholders, the output and
        ``hoisted``: each stream's nodes in program order, merged so that each is issued as
        early as ``deps`` allow, side streams first."""
        units = [Unit(n.name, self.stream[n.name], deps[n.name]) for n in self.nodes
                 if n.op not in ("placeholder", "output") and n.name not in hoisted]
        try:
            return issue_order(units)
        except OrderError as exc:
            raise EmitError(str(exc)) from None

    def forward_inputs(self, w: _Writer, first_input: Any) -> None:
        """The switch test, the call's inputs (checked against the traced call), the
        device of the first one, and the weights, buffers and constants."""
        w(1, "def forward(self, *args, **kwargs):")
        w(2, "if not self.enabled:")
        w(3, "return self.original(*args, **kwargs)  # the original single-stream path")
        w(2, "m = self.original")
        inputs = [n for n in self.nodes if n.op == "placeholder"
                  and self.t.placeholders[n.name][0] == "input"]
        inputs.sort(key=lambda n: self.t.placeholders[n.name][1])
        names = [self.names.var[n.name] for n in inputs]
        # the graph holds the traced call's non-tensor arguments as constants: a call
        # shaped otherwise is refused rather than silently computed with the old values
        w(2, "_leaves = _traced_call(args, kwargs)")
        if names:
            lhs = names[0] + "," if len(names) == 1 else ", ".join(names)
            w(2, f"{lhs} = _leaves")
        if self.has_dev:
            w(2, f"_dev = {self.names.var[first_input.name]}.device")
        weights = [n for n in self.nodes if n.op == "placeholder"
                   and self.t.placeholders[n.name][0] != "input"]
        if weights:
            w(2, "# weights, buffers and constants of the original module")
        for n in weights:
            kind, what = self.t.placeholders[n.name]
            var = self.names.var[n.name]
            if kind in ("param", "buffer", "attr"):
                w(2, f"{var} = _get(m, {what!r})")
            else:
                w(2, f"{var} = {self.tensor_literal(what)}")

    def hoist_free(self, w: _Writer, deps: dict[str, set[str]]) -> set[str]:
        """Nodes of no stream (views and copies of inputs, weights and constants: a
        constant tensor made in forward, ``lift_fresh_copy``) that follow nothing but the
        inputs, the weights and each other, written before the fork so every stream's
        readers are ordered after them (issued inside an open side-stream block, one would
        be read on stream 0 with no event). Returns their names."""
        hoisted: set[str] = set()
        for n in self.nodes:
            if (n.op in ("placeholder", "output") or n.name in self.plan.assignment
                    or self.stream.get(n.name) is not None):
                continue
            if all(d in hoisted or self.by_name[d].op == "placeholder" for d in deps[n.name]):
                hoisted.add(n.name)
                w(2, f"{self.names.var[n.name]} = {self.call(n)}  # before the fork")
        return hoisted

    def stream_prelude(self, w: _Writer) -> None:
        """The stream API, and for npugraph_ex / cuda the streams and the fork: each side
        stream starts after the work already queued on the origin stream."""
        api = self.api_name
        w(2, f"{api} = self.api")
        if self.target != "torchair":
            w(2, "record_stream = self.record_stream")
            dev = "_dev" if self.has_dev else "None"
            w(2, f"S = {{0: {api}.current_stream(), **self.side_streams({dev})}}")
            if self.side:
                w(2, "# fork: each side stream starts after the work already queued on the "
                     "origin stream")
                w(2, f"fork = {api}.Event()")
                w(2, "fork.record(S[0])")
                for s in self.side:
                    w(2, f"fork.wait(S[{s}])")
        if self.limits and not has_core_limit_api(self.target):
            w(2, f"# plan core limits {self.limits} have no torch.cuda equivalent: not applied")

    def issue(self, w: _Writer, blocks: "_Blocks", n: Any,
              recorded_to: set[tuple[str, int]]) -> None:
        """Node ``n`` in the open block: a plan op with its waits before it and its event
        after it."""
        s, depth = blocks.cur, blocks.depth
        planned = n.name in self.plan.assignment
        if planned:
            self.before_op(w, depth, n, s, recorded_to)
        w(depth, f"{self.names.var[n.name]} = {self.call(n)}")
        self.subst = {}  # a waited tensor is read by the waiting op only
        if planned and n.name in self.records:
            self.after_op(w, depth, n, s)

    def write_mutations(self, w: _Writer, depth: int) -> None:
        """The buffer and input writes export moved out of the graph."""
        for kind, target, node in self.t.mutations:
            src = self.render(node)
            if kind == "buffer":
                w(depth, f"_get(m, {target!r}).copy_({src})")
            else:
                ph = self.names.var.get(target, target)
                w(depth, f"{ph}.copy_({src})")

    def before_op(self, w: _Writer, depth: int, n: Any, s: int,
                  recorded_to: set[tuple[str, int]]) -> None:
        waits = self.waits.get(n.name, [])
        if self.target == "torchair":
            ins = self.tensor_inputs(n)
            for i in waits:
                a = self.plan.events[i].record_after
                dep = self.dep_expr(a)
                if not ins or dep is None:
                    self.skipped.append(self.event_comment(i))
                    w(depth, f"# {self.event_comment(i)}: not expressible with npu_wait_tensor "
                             f"({'no tensor input' if not ins else 'no tensor output'})")
                    continue
                # an in-place op writes its first input: wait through another one where it
                # has one (TorchAir's wait_tensor declares no alias, so a write to its result
                # may not reach the original tensor, a buffer update among them)
                written = _written_args(n)
                pool = [y for y in ins if y not in written] or ins
                if written and pool[0] in written:
                    note = (f"{self.event_comment(i)}: {n.name} writes its only tensor input, "
                            "so the wait goes through the tensor it writes; TorchAir's "
                            "npu_wait_tensor declares no alias: check on the NPU that the "
                            "write lands (a buffer update)")
                    self.warnings.append(note)
                    w(depth, f"# note: {note}")
                made = [x for x in pool if self.base.get(x.name) == a]
                self.wait_tensor(w, depth, (made or pool)[0], dep, i)
            return
        for i in waits:
            a = self.plan.events[i].record_after
            w(depth, f"{self.event_var(a)}.wait(S[{s}])  # {self.event_comment(i)}")
            self.n_waits += 1
        for x in self.tensor_inputs(n):
            h = self.home(x)
            if h is None or h == s or (x.name, s) in recorded_to or not _tensor_val(x):
                continue
            recorded_to.add((x.name, s))
            w(depth, f"record_stream({self.names.var[x.name]}, S[{s}])  # made on stream {h}")
            self.n_rs += 1

    def wait_tensor(self, w: _Writer, depth: int, x: Any, dep: str, i: int) -> None:
        """Plan event ``i`` as TorchAir's ``x_w = npu_wait_tensor(x, dep)``: the readers of
        ``x`` that follow (the waiting op only) read ``x_w``."""
        cur = self.subst.get(x.name, self.names.var[x.name])
        new = self.names.fresh(f"{self.names.var[x.name]}_w{i}")
        w(depth, f"{new} = torchair.scope.npu_wait_tensor({cur}, {dep})  "
                 f"# {self.event_comment(i)}")
        self.subst[x.name] = new
        self.n_waits += 1

    def after_op(self, w: _Writer, depth: int, n: Any, s: int) -> None:
        if self.target == "torchair":
            return  # npu_wait_tensor needs no record: the dependency is the tensor itself
        ev = self.event_var(n.name)
        ids = ", ".join(f"e{i}" for i in self.records[n.name])
        w(depth, f"{ev} = {self.api_name}.Event()")
        w(depth, f"{ev}.record(S[{s}])  # {ids}: after {n.name}")
        self.n_records += 1

    def join(self, w: _Writer, depth: int) -> str:
        """Emit the final joins; return the return expression."""
        leaves: list[Any] = []
        if self.t.method == "torch.export":
            leaves = list(self.t.outputs)
        else:
            leaves = _arg_nodes(self.t.fx_output)
        joins = self.waits.get(None, [])
        if joins:
            w(depth, "# join: the origin stream waits for every side stream's last op")
        tensor_leaf = next((x for x in leaves if hasattr(x, "op") and _tensor_val(x)), None)
        for i in joins:
            a = self.plan.events[i].record_after
            if self.target == "torchair":
                dep = self.dep_expr(a)
                if tensor_leaf is None or dep is None:
                    self.skipped.append(self.event_comment(i))
                    w(depth, f"# {self.event_comment(i)}: no tensor output to wait on; the "
                             "graph ends after every stream's work")
                    continue
                self.wait_tensor(w, depth, tensor_leaf, dep, i)
            else:
                w(depth, f"{self.event_var(a)}.wait(S[0])  # {self.event_comment(i)}")
                self.n_waits += 1
        if self.target != "torchair":
            done: set[str] = set()
            for x in leaves:
                if not hasattr(x, "op") or x.name in done:
                    continue
                h = self.home(x)
                if h not in (None, 0) and _tensor_val(x):
                    done.add(x.name)
                    w(depth, f"record_stream({self.names.var[x.name]}, S[0])  "
                             f"# returned; made on stream {h}")
                    self.n_rs += 1
        # ---- the return expression
        if self.t.method == "torch.fx":
            return self.render(self.t.fx_output)
        rendered = iter([self.render(x) for x in leaves])
        if self.t.out_spec is None:
            return next(rendered, "None")
        return self.spec_expr(self.t.out_spec, rendered)

    def spec_expr(self, spec: Any, leaves: Any) -> str:
        """The Python expression rebuilding the output structure ``spec`` from ``leaves``."""
        import collections

        if spec.is_leaf():
            return next(leaves)
        kids = [self.spec_expr(spec.child(i), leaves) for i in range(spec.num_children)]
        typ = spec.type
        if typ is tuple:
            return f"({kids[0]},)" if len(kids) == 1 else "(" + ", ".join(kids) + ")"
        if typ is list:
            return "[" + ", ".join(kids) + "]"
        if typ is type(None):
            return "None"
        if typ in (dict, collections.OrderedDict):
            body = ", ".join(f"{self.render(k)}: {v}" for k, v in zip(spec.context, kids))
            return "{" + body + "}" if typ is dict else f"collections.OrderedDict({{{body}}})"
        if getattr(typ, "__module__", "") == "torch.return_types":  # topk, max, sort, ...
            return f"torch.return_types.{typ.__name__}(({', '.join(kids)},))"
        cls = spec.context if isinstance(spec.context, type) else typ
        if isinstance(cls, type) and hasattr(cls, "_fields"):  # a namedtuple
            self.resolves = True
            return f"_resolve({cls.__module__!r}, {cls.__qualname__!r})({', '.join(kids)})"
        raise EmitError(f"cannot write the model's output structure ({typ}) into Python source")

    def tensor_literal(self, value: Any) -> str:
        import torch

        if not isinstance(value, torch.Tensor):
            return self.render(value)
        if value.numel() > 4096:
            raise EmitError(f"the model creates a {tuple(value.shape)} tensor constant inside "
                            "forward; register it as a buffer so the generated code can read it")
        data = value.detach().cpu().tolist()
        dev = "_dev" if self.has_dev else f"torch.device({str(value.device)!r})"
        return f"torch.tensor({data!r}, dtype={value.dtype}, device={dev})"

    # ------------------------------------------------------------------ module text
    def module_header(self) -> list[str]:
        """The module's text above the forward: docstring, imports, the plan as constants,
        the run-time helpers and the class head."""
        lines = [_wrap_doc(x) for x in self.module_doc()]
        lines += self.module_constants()
        lines += ["", "", *_SWITCH_LINES, "", "", "def _streams_api():", *self.api_function(),
                  *_CALL_CHECK_LINES]
        if self.target != "torchair":
            lines[-1:-1] = _RECORD_STREAM_LINES
        if self.resolves:
            lines += _RESOLVE_LINES
        lines += self.class_head()
        lines.append("")
        return lines

    def module_doc(self) -> list[str]:
        """The module docstring's lines (unwrapped), quotes included."""
        plan, t = self.plan, self.target
        src = self.source
        where = ", ".join(f"{k} {src[k]}" for k in ("scale", "phase") if src.get(k))
        doc = [
            f'"""Multi-stream forward of {self.model_name}'
            + (f" ({where})" if where else "") + f": plan candidate {plan.name!r}"
            + (f" for {self.device_name}" if self.device_name else "") + ".",
            "",
            f"Target: {_API_DOC[t]}.",
            f"Generated by `parastream emit --target {t}`; regenerate it from the plan rather "
            "than editing it.",
            "",
            "Use:",
            f"    model = {self.class_name}(model)   # the original forward unless "
            f"{plan.switch}=1",
            "    out = model(*inputs)",
            "The stream API is injectable:",
            f"    {self.class_name}(model, api=parastream.emit.standins.standin({t!r}))",
            "runs this file on a CPU and records every stream call; `python <this file>` "
            "checks it that way (needs parastream).",
            "",
            f"Algorithm {plan.algorithm}, strength {plan.strength}, {len(plan.events)} event(s).",
            *self.doc_streams_and_events(),
            "Nodes the plan does not name (folded views, getitem) run on the stream of the op "
            "that produced the tensor they view; views of inputs and weights run where they "
            "stand.",
        ]
        if self.unplanned:
            doc.append("Ops missing from the plan run on stream 0: "
                       + ", ".join(self.unplanned[:8]))
        if self.skipped:
            doc.append("Events not expressible here: " + "; ".join(self.skipped[:8]))
        if self.dropped_limits:
            doc.append(f"Core limits {self.dropped_limits} are not applied: {self.warnings[0]}")
        doc.append("Op-level forward (every op of the trace; each stream's in program "
                   "order, side streams issued first as far as their inputs allow): "
                   + (self.level_note or "requested"))
        doc = [doc[0]] + [_doc_safe(x) for x in doc[1:]]
        doc[0] = '"""' + _doc_safe(doc[0][3:])
        doc.append('"""')
        return doc

    def doc_streams_and_events(self) -> list[str]:
        """One docstring line per stream (its ops, the first four) and per event (40 at
        most)."""
        plan = self.plan
        ops_on: dict[int, list[str]] = {}
        for op, s in plan.assignment.items():
            ops_on.setdefault(s, []).append(op)
        doc = []
        for s in sorted(ops_on):
            ops = ops_on[s]
            label = "origin (the caller's current stream)" if s == 0 else (
                f'tag "s{s}"' if self.target == "torchair" else "side stream")
            lim = f", core limit {self.limits[s]}" if s in self.limits else ""
            doc.append(f"Stream {s}: {len(ops)} op(s), {label}{lim}: "
                       f"{', '.join(ops[:4])}{', ...' if len(ops) > 4 else ''}")
        for i in range(min(len(plan.events), 40)):
            doc.append("Event " + self.event_comment(i))
        if len(plan.events) > 40:
            doc.append(f"... and {len(plan.events) - 40} more events")
        return doc

    def module_constants(self) -> list[str]:
        """The imports and the module's constants: the plan, the traced call, the API the
        module needs."""
        plan, t = self.plan, self.target
        return [
            "",
            *(["import collections"] if "collections.OrderedDict(" in self.body_text else []),
            "import functools",
            *[f"import {x}" for x in sorted(self.imports - {"torch"})],
            "import os",
            "",
            "import torch",
            "from torch.utils import _pytree as pytree",
            "",
            f"TARGET = {t!r}",
            "LEVEL = 'op'",
            f"CLASS_NAME = {self.class_name!r}",
            f"TRACE = {self.t.method!r}",
            f"PLAN = {plan.name!r}",
            f"SWITCH = {plan.switch!r}",
            f"SIDE_STREAMS = {self.side!r}",
            "#: plan stream -> (aicore, vectorcore) of a C2 core limit",
            f"CORE_LIMITS = {self.limits!r}",
            "#: API this module calls -> the release that documents it (checked when the switch is on)",
            f"NEEDS = {required_apis(t, bool(self.limits))!r}",
            "#: side-stream ops of the plan (every other op runs on stream 0)",
            "ASSIGNMENT = " + _dict_literal({k: v for k, v in plan.assignment.items() if v}),
            "#: the plan's events: (record_after, wait_before); None = join at the end",
            "EVENTS = " + _tuple_literal([(e.record_after, e.wait_before)
                                          for e in plan.events]),
            "#: (node, op) issued as torch.ops calls, in order (checked by the stand-ins)",
            "CALLS = " + _tuple_literal(self.calls),
            f"SOURCE = {dict(self.source)!r}",
            "#: the traced call: positional count, keyword names, the arguments' structure "
            "(a pytree spec), the non-tensor arguments the graph holds as constants "
            "(leaf index -> (which, value)), and the tensors' shapes and dtypes it was "
            "traced with (leaf index -> (which, shape, dtype))",
            f"TRACED_CALL = {self.call_literal()}",
        ]

    def class_head(self) -> list[str]:
        """The generated class up to its forward: the switch, the API, the side streams."""
        lines = [
            "",
            f"class {self.class_name}(torch.nn.Module):",
            '    """The plan applied to a model; the original forward when the switch is off."""',
            "",
            "    def __init__(self, original, api=None, enabled=None):",
            "        super().__init__()",
            "        self.original = original",
            "        self.enabled = ENABLED if enabled is None else bool(enabled)",
            "        self.api = None",
            *(["        self.streams = {}",
               "        self.record_stream = _tensor_record_stream"]
              if self.target != "torchair" else []),
            "        if not self.enabled:",
            "            return",
            "        self.api = _streams_api() if api is None else api",
        ]
        if self.target != "torchair":
            lines += _SIDE_STREAMS_LINES
        return lines

    def call_literal(self) -> str:
        """:attr:`Traced.call` as Python source; ``None`` when no call was recorded (the
        generated module then takes any call)."""
        if self.t.call is None:  # traced without its example call: nothing to check
            return "None"
        n, keys, spec, consts, tensors = self.t.call
        return f"({n}, {tuple(keys)!r}, {spec!r}, {consts!r}, {tensors!r})"

    def api_function(self) -> list[str]:
        """The body of the generated ``_streams_api``: the target's stream API, imported
        when the switch is on."""
        if self.target == "torchair":
            return _api_import("torchair (GE graph mode); needs torch_npu and torchair.",
                               ("torch_npu  # noqa: F401", "torchair"), "torchair", "torchair")
        if self.target == "npugraph_ex":
            return _api_import("torch.npu, as registered by torch_npu.",
                               ("torch_npu  # noqa: F401",), "torch_npu", "torch.npu")
        return [
            '    """torch.cuda."""',
            "    if not torch.cuda.is_available():",
            '        raise RuntimeError(f"{SWITCH} is on but CUDA is not available; "',
            '                           f"unset {SWITCH} for the original path")',
            "    return torch.cuda",
        ]

    def module_footer(self) -> list[str]:
        return [
            "",
            "",
            "def load_model():",
            '    """(model, example_inputs) the plan was made for (needs parastream)."""',
            "    from parastream.emit.codegen import build_model",
            "",
            "    return build_model(SOURCE)",
            "",
            "",
            'if __name__ == "__main__":  # run on the stand-ins, check the calls and outputs',
            "    import sys",
            "",
            "    from parastream.emit.standins import self_check",
            "",
            "    sys.exit(self_check(sys.modules[__name__]))",
        ]


#: the docstring's account of each target's API
_API_DOC = {
    "torchair": "TorchAir GE graph mode (torch.compile with torchair's npu backend, "
                "max-autotune): torchair.scope.npu_stream_switch / npu_wait_tensor / "
                "limit_core_num",
    "npugraph_ex": "npugraph_ex / aclgraph (torch.compile(backend=\"npugraph_ex\") or "
                   "eager torch_npu): torch.npu.Stream / stream / Event / "
                   "Tensor.record_stream / npugraph_ex.scope.limit_core_num",
    "cuda": "CUDA (eager or CUDA graphs): torch.cuda.Stream / stream / Event / "
            "Tensor.record_stream",
}

#: the generated module's switch, read once at import
_SWITCH_LINES = [
    "def switch_on() -> bool:",
    '    """True when the environment variable SWITCH turns the multi-stream path on."""',
    '    return os.environ.get(SWITCH, "").strip().lower() in ("1", "true", "yes", "on")',
    "",
    "",
    "ENABLED = switch_on()",
]

#: the generated module's API check, attribute lookup and traced-call check
_CALL_CHECK_LINES = [
    "",
    "",
    "def _check_needs(api, label):",
    '    """api, once it has every name this module calls; else one line naming the',
    '    release that documents the missing one."""',
    "    for name, version in NEEDS.items():",
    "        if functools.reduce(lambda o, p: getattr(o, p, None), name.split('.'), api) is None:",
    '            raise ImportError(f"{label}.{name} is missing: this module needs {version} "',
    '                              f"or newer (or unset {SWITCH} for the original path)")',
    "    return api",
    "",
    "",
    "def _get(root, fqn):",
    "    return functools.reduce(getattr, fqn.split(\".\"), root)",
    "",
    "",
    "_TRACED_SPEC = pytree.treespec_loads(TRACED_CALL[2]) if TRACED_CALL else None",
    "",
    "",
    "def _traced_call(args, kwargs):",
    '    """The call\'s leaves, when the call is shaped as the traced one was; else an error',
    '    naming the difference (the original path, switch off, takes any call)."""',
    "    if TRACED_CALL is None:",
    "        return pytree.tree_leaves((args, kwargs))",
    "    n_args, keywords, _, constants, tensors = TRACED_CALL",
    "    if len(args) != n_args or sorted(kwargs) != sorted(keywords):",
    '        raise TypeError(f"{CLASS_NAME} was generated for a call with {n_args} positional "',
    '                        f"argument(s) and keywords {sorted(keywords)}; this call has "',
    '                        f"{len(args)} and {sorted(kwargs)}: generate it again for this "',
    '                        f"call, or unset {SWITCH} for the original path")',
    "    leaves, spec = pytree.tree_flatten((tuple(args), {k: kwargs[k] for k in keywords}))",
    "    if spec != _TRACED_SPEC:",
    '        raise TypeError(f"{CLASS_NAME} was generated for arguments structured as the traced "',
    '                        "call\'s, and this call\'s differ (a tuple or list argument of "',
    '                        f"another length or kind): generate it again for this call, or "',
    '                        f"unset {SWITCH} for the original path")',
    "    for i, (what, value) in constants.items():",
    "        got = leaves[i]",
    "        if type(got) is not type(value) or got != value:",
    '            shown = (f"a tensor of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor)',
    "                     else repr(got))",
    '            raise ValueError(f"{what} is {shown}, but {CLASS_NAME} was generated with "',
    '                             f"{value!r} built into its graph: generate it again for "',
    '                             f"this value, or unset {SWITCH} for the original path")',
    "    for i, (what, shape, dtype) in tensors.items():",
    "        got = leaves[i]",
    "        if (not isinstance(got, torch.Tensor) or tuple(got.shape) != shape",
    "                or str(got.dtype) != dtype):",
    '            shown = (f"{tuple(got.shape)} {got.dtype}" if isinstance(got, torch.Tensor)',
    "                     else repr(got))",
    '            raise ValueError(f"{what} is {shown}, but {CLASS_NAME} was traced with "',
    '                             f"{shape} {dtype} (its graph is specialised to the shapes): "',
    '                             f"generate it again for this shape, or unset {SWITCH} for "',
    '                             "the original path")',
    "    return leaves",
    "",
]

#: npugraph_ex / cuda: record_stream through a function the stand-ins can replace
_RECORD_STREAM_LINES = [
    "",
    "",
    "def _tensor_record_stream(t, s):",
    '    """t.record_stream(s): the caching allocator keeps t\'s memory until the work '
    'queued on s is done."""',
    "    t.record_stream(s)",
]

#: a callable the trace names by module and qualified name
_RESOLVE_LINES = [
    "",
    "def _resolve(module, name):",
    "    import importlib",
    "",
    "    return getattr(importlib.import_module(module), name)",
    "",
]

#: npugraph_ex / cuda: the stand-in's record_stream, and side streams made per device
_SIDE_STREAMS_LINES = [
    "        if getattr(self.api, \"PARASTREAM_STANDIN\", False):  # CPU tensors "
    "cannot record_stream",
    "            self.record_stream = self.api.record_stream",
    "",
    "    def side_streams(self, device):",
    '        """The side streams of ``device``, made on their first use there (one set',
    '        per device; a wrapper built before set_device(rank) still gets its own)."""',
    "        if device not in self.streams:",
    "            with self.api.device(device):",
    "                self.streams[device] = {s: self.api.Stream() for s in SIDE_STREAMS}",
    "        return self.streams[device]",
]


class _Blocks:
    """The stream block open in the forward being written: its stream (None before the
    first node) and the depth its lines are written at."""

    def __init__(self, em: "_Emitter", w: _Writer) -> None:
        self.em, self.w = em, w
        self.cur: int | None = None
        self.depth = 2

    def switch(self, s: int) -> None:
        """Open the block of stream ``s`` unless it is the open one (stream 0 without a
        core limit is the top level)."""
        if s == self.cur:
            return
        head = self.em.open_block(s)
        self.cur = s
        if head is None:
            self.depth = 2
            return
        tag = f" (tag s{s})" if self.em.target == "torchair" and s else ""
        self.w(2, f"# ---- stream {s}{tag}")
        self.w(2, head)
        self.depth = 3


def _api_import(doc: str, imports: Sequence[str], package: str, api: str) -> list[str]:
    """The body of the generated ``_streams_api`` of an Ascend target: import ``imports``
    (one line naming ``package`` and the switch when that fails) and check ``api``."""
    return [
        f'    """{doc}"""',
        "    try:",
        *[f"        import {m}" for m in imports],
        "    except ImportError as exc:",
        f'        raise ImportError(f"{{SWITCH}} is on but {package} is not installed "',
        '                          f"({exc}); "',
        '                          f"unset {SWITCH} for the original path") from exc',
        f"    return _check_needs({api}, {api!r})",
    ]


def _doc_safe(text: str) -> str:
    """Text that cannot end or escape the generated module's docstring."""
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def _wrap_doc(line: str, width: int = 96) -> str:
    import textwrap

    if len(line) <= width or line.startswith("    "):
        return line
    indent = "    " if line.startswith(("Stream ", "Event ")) else ""
    return "\n".join(textwrap.wrap(line, width, subsequent_indent=indent,
                                   break_on_hyphens=False))


def _dict_literal(d: dict) -> str:
    if not d:
        return "{}"
    items = [f"    {k!r}: {v!r}," for k, v in d.items()]
    return "{\n" + "\n".join(items) + "\n}"


def _tuple_literal(items: Sequence) -> str:
    if not items:
        return "()"
    return "(\n" + "\n".join(f"    {x!r}," for x in items) + "\n)"


__all__ = ["DocNotes", "EmitError", "Emitted", "Traced", "build_model", "emit", "trace", "TARGETS"]
