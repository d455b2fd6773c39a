"""Trace -> op records: each node of a :class:`~parastream.graph.trace.Trace` as a
:class:`Record`, independent of the tracer that made it.

An exported graph's ``call_function`` nodes carry aten schemas (what they write, what their
result aliases); an fx trace's ``call_module``/``call_function``/``call_method`` nodes are
named as aten would name them. Each record is an ``op``, a ``view`` (moves no data) or a
``skip`` (runtime asserts, size queries). The importer (:mod:`.torch_import`) builds the
graph from them.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Sequence

from .op_tables import VIEW_OPS
from .tensors import flat_tensors, is_tensor, node_value
from .trace import EXPORT, Trace


def records(tr: Trace) -> tuple[list[Record], dict]:
    """The trace's nodes as op records, and what the graph's inputs are: ``labels``
    (placeholder or attribute node -> its name), ``kinds`` (``param``, ``buffer``,
    ``input``) and ``mutated_outputs`` (output node -> the buffer or input it writes)."""
    if tr.source == EXPORT:
        return _recs_from_export(tr)
    return _recs_from_fx(tr.graph_module)

@dataclass
class Record:
    """One traced node, independent of the tracer that produced it."""

    node: Any                      # the fx node (args refer to other fx nodes)
    short: str                     # "linear", "copy_", "all_reduce"
    target: str                    # "aten.linear.default", "parastream.all_reduce.default"
    namespace: str                 # "aten", "_c10d_functional", "parastream", "" (fx)
    args: list                     # positional args (fx nodes or python values)
    kwargs: dict
    mutates: list[int] = field(default_factory=list)  # positions of args written in place
    stack: list[tuple[str, str]] = field(default_factory=list)  # (module path, class) outer->inner
    kind: str = "op"               # "op" | "view" | "skip"


def _module_stack(node: Any) -> list[tuple[str, str]]:
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for v in stack.values():
        path, cls = v[0], v[1]
        cls = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
        out.append((clean_path(path), cls))
    return out


def clean_path(path: str) -> str:
    # export records paths of nested calls as "layers.0.attn" but sometimes
    # "L['self'].layers[0]"-style for strict mode; normalise the common forms
    path = str(path)
    if path.startswith("L['self']"):
        path = path[len("L['self']"):]
    path = path.replace("[", ".").replace("]", "").replace("'", "").replace('"', "")
    return path.strip(".")


def _recs_from_export(tr: Trace) -> tuple[list[Record], dict]:
    """An exported graph's records; its inputs as the parsed signature names them."""
    labels: dict[str, str] = {**tr.state("param"), **tr.state("buffer"),
                              **tr.state("constant")}
    kinds = {**{k: "param" for k in tr.state("param")},
             **{k: "buffer" for k in tr.state("buffer")}}
    user_inputs = [n for n in tr.graph.nodes if n.op == "placeholder" and n.name not in labels]
    for n in user_inputs:
        labels[n.name] = n.name
        kinds[n.name] = "input"
    recs = [_export_rec(node) for node in tr.graph.nodes if node.op == "call_function"]
    # functional IR (after run_decompositions) names buffer mutations in the signature
    mutated = {**tr.mutated("buffer_mutation"), **tr.mutated("input_mutation")}
    return recs, {"labels": labels, "kinds": kinds, "mutated_outputs": mutated}


def _export_rec(node: Any) -> Record:
    """One ``call_function`` node of an exported graph as an op, view or skip record."""
    tgt = node.target
    if tgt is operator.getitem:
        return Record(node, "getitem", "getitem", "", list(node.args), dict(node.kwargs),
                    stack=_module_stack(node), kind="view")
    schema = getattr(tgt, "_schema", None)
    if schema is None:  # a python function left in the graph (sym ops, asserts)
        return Record(node, getattr(tgt, "__name__", str(tgt)), str(tgt), "",
                    list(node.args), dict(node.kwargs), kind="skip")
    ns, _, rest = schema.name.partition("::")
    short = rest or ns
    overload = getattr(tgt, "_overloadname", "default") or "default"
    mutates = [i for i, a in enumerate(schema.arguments)
               if a.alias_info is not None and a.alias_info.is_write]
    if not mutates and not flat_tensors(node.meta.get("val")):
        # runtime checks (_assert_tensor_metadata, _assert_scalar) and size queries do
        # no work on a device
        return Record(node, short, schema.name, ns, list(node.args), dict(node.kwargs),
                    kind="skip")
    # a result that aliases an input without writing it (Tensor(a) in the schema) is a
    # view, whatever its name: unfold and tensor_split were taken for copies, and a
    # write to their base after a read of the view got no edge
    aliases = aliasing_view(node)  # (never an op that writes an argument)
    return Record(node, short, f"{ns}.{short}.{overload}", ns, list(node.args),
                dict(node.kwargs), mutates=mutates, stack=_module_stack(node),
                kind="view" if aliases else "op")

_MODULE_TYPES = {
    "Linear": "linear", "Conv1d": "conv1d", "Conv2d": "conv2d", "Conv3d": "conv3d",
    "ConvTranspose2d": "conv_transpose2d", "LayerNorm": "layer_norm", "RMSNorm": "rms_norm",
    "BatchNorm1d": "batch_norm", "BatchNorm2d": "batch_norm", "GroupNorm": "group_norm",
    "Embedding": "embedding", "ReLU": "relu", "GELU": "gelu", "SiLU": "silu",
    "Sigmoid": "sigmoid", "Tanh": "tanh", "Softmax": "softmax", "Dropout": "dropout",
    "MaxPool2d": "max_pool2d", "AvgPool2d": "avg_pool2d",
    "AdaptiveAvgPool2d": "adaptive_avg_pool2d",
    "Identity": "alias", "Flatten": "flatten", "MultiheadAttention": "multi_head_attention_forward",
}


def _recs_from_fx(gm: Any) -> tuple[list[Record], dict]:
    """An fx trace's records (its nodes' values propagated on fake tensors); a
    ``get_attr`` node is a parameter or buffer input, a ``call_module`` one op."""
    labels: dict[str, str] = {}
    kinds: dict[str, str] = {}
    recs: list[Record] = []
    params = dict(gm.named_parameters())
    buffers = dict(gm.named_buffers())
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            labels[node.name] = node.target
            kinds[node.name] = _fx_input_kind(node, params, buffers)
        elif node.op == "call_module":
            recs.append(_fx_module_rec(gm, node, labels, kinds))
        elif node.op in ("call_function", "call_method"):
            recs.append(_fx_call_rec(node))
    for r in recs:
        _normalise_fx_rec(r)
    return recs, {"labels": labels, "kinds": kinds, "mutated_outputs": {}}

def _fx_input_kind(node: Any, params: dict[str, Any], buffers: dict[str, Any]) -> str:
    """``input`` for a placeholder; ``param`` or ``buffer`` for a ``get_attr``, whose
    value (none propagated) is the module's own tensor."""
    if node.op == "placeholder":
        return "input"
    if node.meta.get("val") is None:
        node.meta["val"] = params.get(node.target, buffers.get(node.target))
    return "param" if node.target in params else "buffer"


def _fx_module_rec(gm: Any, node: Any, labels: dict[str, str], kinds: dict[str, str]) -> Record:
    """A ``call_module`` node as one op named after its module type; the module's own
    weight and bias become pseudo inputs, as aten would see them."""
    sub = gm.get_submodule(node.target)
    cls = type(sub).__name__
    short = _MODULE_TYPES.get(cls, cls.lower())
    args = list(node.args)
    for pname, p in sub.named_parameters(recurse=False):
        pnode = _FakeNode(f"{node.target}.{pname}", p)
        labels[pnode.name] = pnode.name
        kinds[pnode.name] = "param"
        args.append(pnode)
    stack = _module_stack(node) + [(str(node.target), cls)]
    kind = "view" if short in ("dropout", "alias") else "op"
    return Record(node, short, f"module.{cls}", "", args, dict(node.kwargs), stack=stack,
                kind=kind)


def _fx_call_rec(node: Any) -> Record:
    """A ``call_method`` (``Tensor.<name>``; a trailing ``_`` writes its tensor) or
    ``call_function`` node (``inplace=True`` writes its first argument)."""
    stack = _module_stack(node)
    args = list(node.args)
    if node.op == "call_method":
        short = str(node.target)
        mut = [0] if short.endswith("_") and not short.startswith("__") else []
        return Record(node, short, f"Tensor.{short}", "", args, dict(node.kwargs),
                    mutates=mut, stack=stack)
    tgt = node.target
    short = getattr(tgt, "__name__", str(tgt))
    if tgt is operator.getitem:
        short = "getitem"
    mut = [0] if node.kwargs.get("inplace") else []
    mod = getattr(tgt, "__module__", "") or ""
    return Record(node, short.lstrip("_") if short.startswith("__") else short,
                f"{mod}.{short}".strip("."), "", args, dict(node.kwargs),
                mutates=mut, stack=stack)


def _normalise_fx_rec(r: Record) -> None:
    """Python operators as aten names them (operator.add -> add, operator.iadd -> add_),
    views as views, and calls that return no tensor and write nothing skipped."""
    if r.short in ("add__", "mul__"):
        r.short = r.short[:-1]
    if r.short in ("iadd", "imul", "isub"):
        r.short, r.mutates = r.short[1:] + "_", [0]
    if r.short == "getitem" or r.short in VIEW_OPS:
        r.kind = "view"
    out = node_value(r.node)
    if not is_tensor(out) and not isinstance(out, (tuple, list)) \
            and r.kind == "op" and not r.mutates:
        r.kind = "skip"


class _FakeNode:
    """A parameter handed to an fx call_module as if it were an argument node."""

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.meta = {"val": value}


def schema_args(schema: Any, args: Sequence[Any], kwargs: dict) -> dict[str, Any]:
    """An op call's arguments by their schema names (positional ones, then keywords)."""
    given = dict(zip((a.name for a in schema.arguments), args))
    given.update(kwargs)
    return given


def written_args(schema: Any, args: Sequence[Any], kwargs: dict) -> list[Any]:
    """The values an op call passes for the arguments its schema marks written (in-place,
    ``out=``, a mutable custom op), in schema order; absent ones left out."""
    given = schema_args(schema, args, kwargs)
    return [given[a.name] for a in schema.arguments
            if a.alias_info is not None and a.alias_info.is_write and a.name in given]


def aliasing_view(node: Any) -> bool:
    """Whether an fx node of an aten op returned a view of its input: its schema says the
    result aliases an argument without writing it, and it did (:func:`_shares_storage`).
    The importer folds such nodes; ``emit`` treats them as views too."""
    schema = getattr(node.target, "_schema", None)
    if schema is None or schema.is_mutable:  # it writes an argument: an op, not a view
        return False
    return any(r.alias_info is not None and not r.alias_info.is_write
               for r in schema.returns) and _shares_storage(node)


def _shares_storage(node: Any) -> bool:
    """Whether an op whose schema says its result may alias its input really returned a
    view here: its example value (a fake tensor, or each of a list) shares storage with
    its first argument's. ``to``, ``reshape`` and ``contiguous`` alias only when they
    need not copy (a dtype change, a transposed input); those that copied are ops."""
    from torch.multiprocessing.reductions import StorageWeakRef

    base = node_value(node.args[0]) if node.args else None
    out = node_value(node)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not is_tensor(base) or not outs or not all(is_tensor(t) for t in outs):
        return False
    try:
        ref = StorageWeakRef(base.untyped_storage())
        return all(StorageWeakRef(t.untyped_storage()) == ref for t in outs)
    except Exception:  # no storage to compare (a tensor subclass): not taken for a view
        return False
