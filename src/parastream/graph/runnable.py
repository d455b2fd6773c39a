"""Trace + Graph -> :class:`Runnable`: the traced graph module bound to the module's own
tensors, with the plan op of every node, for the executor to run on real tensors.

Everything comes from the :class:`~parastream.graph.trace.Trace` the graph was imported
from: its bindings say which placeholders are parameters, buffers and constants, its
outputs which graph outputs are the user's and which write a buffer or an input back.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Sequence

from .ir import Graph
from .tensors import is_tensor
from .trace import EXPORT, Trace, call_leaves


@dataclass
class Runnable:
    """A traced module that runs on real tensors, with the operator graph traced from the
    same FX graph, so the executor runs exactly the nodes a plan names.

    ``node_op`` maps every ``call_*`` node name of ``graph_module`` to the plan op it belongs
    to: itself for an op of ``graph``, the op it was folded into for a view (``None`` when
    it views a graph input, a parameter, or does no work). ``node_kind`` says ``op``,
    ``view`` (folded: moves no data) or ``skip`` (runtime asserts, size queries).
    """

    graph_module: Any
    graph: Graph
    node_op: dict[str, str | None]
    node_kind: dict[str, str]
    source: str                    # "torch.export" | "torch.fx"
    state: dict[str, Any]          # placeholder name -> bound parameter/buffer/constant
    user_inputs: list[str]         # placeholder names fed from the call's inputs, in order
    out_spec: Any = None           # pytree spec of the user outputs (export), None for fx
    user_output_index: list[int] = field(default_factory=list)
    buffer_writes: dict[int, Any] = field(default_factory=dict)  # output index -> buffer
    #: functional IR (a lowered program): output index -> placeholder of the user input
    #: the call writes in place (``x.mul_(2)``), copied back as eager mode would leave it
    input_writes: dict[int, str] = field(default_factory=dict)

    def bind(self, inputs: Sequence[Any]) -> list[Any]:
        """Values of the graph's placeholders, in order, for one call with ``inputs``.
        torch.export flattens nested inputs (a tuple or dict argument) into one placeholder
        per leaf, so an exported program's ``inputs`` are flattened the same way, even
        when the count would match without it (a one-element tuple); a torch.fx trace
        keeps one placeholder per argument."""
        if self.source == EXPORT:
            leaves = call_leaves(inputs)
            if len(leaves) != len(self.user_inputs):
                raise TypeError(f"expected {len(self.user_inputs)} input(s) once nested ones "
                                f"are flattened, got {len(leaves)}")
            inputs = leaves
        elif len(inputs) != len(self.user_inputs):
            raise TypeError(f"expected {len(self.user_inputs)} input(s), got {len(inputs)}")
        feed = dict(zip(self.user_inputs, inputs))
        return [self.state[n.name] if n.name in self.state else feed[n.name]
                for n in self.graph_module.graph.nodes if n.op == "placeholder"]

    def outputs(self, flat: Any, placeholders: dict[str, Any] | None = None) -> Any:
        """The module's outputs from the graph's raw output (export: user outputs only, in
        the module's structure; functional buffer updates are copied back, and input
        updates into ``placeholders``' values, the call's bound inputs by name)."""
        if self.out_spec is None:
            return flat
        import torch.utils._pytree as pytree

        flat = list(flat) if isinstance(flat, (tuple, list)) else [flat]
        for i, buf in self.buffer_writes.items():
            buf.copy_(flat[i])
        for i, name in self.input_writes.items():
            if placeholders is not None and name in placeholders:
                placeholders[name].copy_(flat[i])
        return pytree.tree_unflatten([flat[i] for i in self.user_output_index], self.out_spec)


def runnable(tr: Trace, module: Any, g: Graph) -> Runnable:
    """The trace ``g`` was imported from as a :class:`Runnable` of ``module``: an exported
    program's parameters, buffers and constants bound to the module's own tensors, and
    what each graph output is; an fx trace runs as it is, every placeholder an input."""
    node_op, node_kind = node_ops(tr.graph_module, g)
    if tr.source != EXPORT:
        return Runnable(tr.graph_module, g, node_op, node_kind, tr.source, {},
                        tr.user_inputs)
    state = {b.name: _state_tensor(tr, module, b.kind, b.target)
             for b in tr.bindings if b.kind != "input"}
    user_out, buffer_writes, input_writes = _output_roles(tr, module)
    return Runnable(tr.graph_module, g, node_op, node_kind, tr.source, state, tr.user_inputs,
                    out_spec=tr.out_spec, user_output_index=user_out,
                    buffer_writes=buffer_writes, input_writes=input_writes)


def _output_roles(tr: Trace, module: Any) -> tuple[list[int], dict[int, Any], dict[int, str]]:
    """The exported graph's outputs by role: the indexes of the user outputs, the
    buffers functional updates are copied back into (output index -> the module's
    buffer), and the user inputs written in place (output index -> placeholder)."""
    buffer_writes: dict[int, Any] = {}
    input_writes: dict[int, str] = {}
    user_out: list[int] = []
    for i, out in enumerate(tr.outputs):
        if out.kind == "user":
            user_out.append(i)
            continue
        if out.kind == "input_mutation" and out.target:
            input_writes[i] = out.target  # the placeholder of the input written in place
            continue
        if out.kind == "buffer_mutation" and out.target:
            with contextlib.suppress(KeyError):
                buffer_writes[i] = _state_tensor(tr, module, "buffer", out.target)
    return user_out, buffer_writes, input_writes


def _state_tensor(tr: Trace, module: Any, kind: str, target: str) -> Any:
    """The module's own parameter/buffer for ``target``, else the exported copy."""
    try:
        if kind == "param":
            return module.get_parameter(target)
        if kind == "buffer":
            return module.get_buffer(target)
    except (AttributeError, KeyError):
        pass
    if target in tr.program.constants:
        return tr.program.constants[target]
    if target in tr.program.state_dict:
        return tr.program.state_dict[target]
    raise KeyError(target)


def node_ops(gm: Any, g: Graph) -> tuple[dict[str, str | None], dict[str, str]]:
    """Plan op of every call node: itself, the producer a view folds into, or None."""
    ops = {o.name for o in g.ops}
    node_op: dict[str, str | None] = {}
    node_kind: dict[str, str] = {}
    for n in gm.graph.nodes:
        if n.op not in ("call_function", "call_method", "call_module"):
            continue
        if n.name in ops:
            node_op[n.name], node_kind[n.name] = n.name, "op"
            continue
        src = next((a for a in _flat_fx_nodes(n.args) + _flat_fx_nodes(n.kwargs)), None)
        out = n.meta.get("val")
        if src is not None and (is_tensor(out) or isinstance(out, (tuple, list))):
            node_op[n.name], node_kind[n.name] = node_op.get(src.name), "view"
        else:
            node_op[n.name], node_kind[n.name] = None, "skip"
    return node_op, node_kind


def _flat_fx_nodes(a: Any) -> list[Any]:
    """The fx nodes inside a node's arguments, in order (torch.fx's own traversal)."""
    import torch.fx

    out: list[Any] = []
    torch.fx.node.map_arg(a, lambda n: out.append(n) or n)
    return out
