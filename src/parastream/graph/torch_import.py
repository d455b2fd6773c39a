"""Import a ``torch.nn.Module`` into the operator graph IR (:mod:`parastream.graph.ir`).

How it works:

1. ``torch.export.export(module, inputs, strict=False)`` traces the module into an aten-level
   FX graph. Export runs on fake tensors, so a module built on the ``meta`` device (no real
   weights) imports as cheaply as a tiny one: a 7B-like decoder layer costs no memory. The
   exported graph is the *training IR*: in-place ops (``copy_``, ``index_copy_``, ``add_``)
   are kept as they are, which is what tells us who writes a buffer.
2. When export fails, ``torch.fx.symbolic_trace`` plus a shape-propagating interpreter on
   fake tensors is tried (``method="auto"``); a module neither can trace raises
   :class:`~parastream.errors.InputError` naming the model and the first line of the reason.
   Both steps are :func:`parastream.graph.trace.trace`, which traces once and hands the
   same :class:`~parastream.graph.trace.Trace` (the graph module, the flattened inputs, the
   export signature parsed once) to this importer, to the runnable
   (:mod:`parastream.graph.runnable`) and to the code generator (:func:`import_trace`).
3. Each node becomes a record (:mod:`parastream.graph.records`, names from
   :mod:`parastream.graph.op_tables`); each remaining op record becomes an
   :class:`~parastream.graph.ir.Op` with shapes from ``node.meta["val"]``, FLOPs and bytes
   from those shapes (:mod:`parastream.graph.op_costs`), the module path from
   ``node.meta["nn_module_stack"]`` and a resource class (here).

Choices worth knowing:

* **Views are folded.** ``view``, ``reshape`` of a contiguous tensor, ``transpose``,
  ``permute``, ``slice``, ``select``, ``expand``, ``split``, ``getitem``, ``detach``,
  ``contiguous`` of a contiguous tensor, eval-mode ``dropout`` and ``wait_tensor`` move no
  data, so they are not ops: their consumers are wired to the op that produced the
  underlying tensor (the consumer's input Tensor keeps the viewed shape). A module table is
  then never cut at a lone reshape, and a planner never puts a free op on a stream. A
  ``reshape``/``contiguous`` that really copies (non-contiguous input) stays as a memory op.
* **Edges.** ``data``: fx def-use through folded views. ``state``: per storage (a parameter,
  buffer, user input or op output, tracked through views), read-after-write, write-after-read
  and write-after-write between ops, for in-place ops and buffer mutations; granularity is
  the whole buffer (two writes to disjoint slices of a KV cache still order). A state edge is
  skipped where a data edge already orders the pair. ``collective_order``: collectives chain
  in program order, as every rank must issue them in the same order.
* **Resources.** matmul/conv/attention and grouped GEMMs -> ``cube``; copies, non-casting
  ``_to_copy``, ``clone``, ``cat``, ``index_copy``/``index_put``, gathers (``embedding``,
  ``index_select``) and fills -> ``memory``; functional collectives (``_c10d_functional``, ``c10d``) and
  ``parastream::`` collectives -> ``comm``; ops inside a module with the attribute
  ``parastream_resource = "host"`` (or on the CPU while the model lives on another device)
  -> ``host``; everything else (elementwise, norms, softmax, reductions) -> ``vector``.
* **Opaque experts.** A Hugging Face experts module (the ``experts(hidden_states,
  top_k_index, top_k_weights)`` contract of transformers' MoE blocks) running its default
  ``eager`` implementation loops over the experts the router picked: data-dependent
  control flow no tracer can follow. It is traced as ONE op, ``parastream::module_call``,
  that calls the module itself (so a run computes what the module computes, bit for bit),
  with the routed experts' cost at the block's top-k; the rest of the block stays
  op-level, so a shared expert beside it is its own branch. ``graph.meta["notes"]`` says so.
* **FLOPs.** ``2*M*K*N`` for matmuls (``linear``: ``2*tokens*in*out`` + bias), ``2 * out
  elements * Cin/groups * kernel`` for convolutions, ``4*B*H*L*S*E`` for attention (full,
  not halved for causal masks, as ``torch.utils.flop_counter`` counts; ``meta.causal`` says
  so), a small per-element factor for vector ops, 0 for copies and collectives.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ..errors import InputError
from .ir import Edge, Graph, Op, Tensor
from .op_costs import op_costs
from .op_tables import (COLLECTIVES, COMM_NAMESPACES, CUBE_OPS,  # noqa: F401
                        LAYOUT_INPLACE_OPS, MAYBE_VIEW_OPS, MEMORY_OPS, RANDOM_OPS, VIEW_OPS)
from .opaque import is_module_call, opaque_entry
from .records import Record, records, schema_args
from .runnable import Runnable, runnable
from .tensors import (dtype_name, flat_nodes, flat_tensors, is_tensor,  # noqa: F401
                      nbytes_of, node_value, shape_of, size_of)
from .trace import EXPORT, Trace, call_leaves, check_call, trace

# ----------------------------------------------------------------------------- public API
def import_module(module: Any, example_inputs: Sequence[Any] | Any, name: str = "model",
                  meta: dict | None = None, method: str = "auto",
                  kwargs: dict | None = None) -> Graph:
    """Trace ``module`` on ``example_inputs`` and return its operator graph.

    ``method``: ``"auto"`` (torch.export, then torch.fx on failure), ``"export"`` or ``"fx"``.
    Inputs and weights may live on the ``meta`` device: nothing real is allocated or run.
    Raises :class:`InputError` (path = ``name``) when the model cannot be traced.
    """
    return import_trace(module, example_inputs, name, meta, method, kwargs)[0]


def import_trace(module: Any, example_inputs: Sequence[Any] | Any, name: str = "model",
                 meta: dict | None = None, method: str = "auto",
                 kwargs: dict | None = None) -> tuple[Graph, Trace]:
    """Like :func:`import_module`, but also return the :class:`~.trace.Trace` the graph was
    built from, for code that needs the same trace again (the runnable, the code
    generator: tracing a model twice costs seconds, and both must see the same names)."""
    tr = trace(module, example_inputs, kwargs, method, name)
    return import_traced(tr, module, name, meta), tr


def import_program(module: Any, example_inputs: Sequence[Any] | Any, name: str = "model",
                   meta: dict | None = None) -> tuple[Graph, Trace | None]:
    """Like :func:`import_trace`, but the trace only where ``torch.export`` made it (None
    after the torch.fx fallback). An exported :class:`~.trace.Trace` answers the
    attributes of the ``torch.export`` program it holds that the code generator reads
    (``graph``, ``graph_signature``, ``constants``, ``call_spec``)."""
    g, tr = import_trace(module, example_inputs, name, meta)
    return g, tr if tr.source == EXPORT else None


def import_runnable(module: Any, example_inputs: Sequence[Any] | Any, name: str = "model",
                    meta: dict | None = None, method: str = "auto") -> Runnable:
    """Like :func:`import_module`, but also return the runnable FX graph module.

    The graph and the graph module come from one trace: op names are FX node names. With
    ``torch.export`` the parameters, buffers and constants are bound to the module's own
    tensors (in-place buffer writes change the module's state, as the module itself would).
    Inputs must be real tensors here, since the graph module is meant to run: inputs on
    the meta device (a zoo model at 7b scale) are an :class:`InputError`.
    """
    inputs = check_call(module, example_inputs, name, method)
    if any(is_tensor(t) and t.device.type == "meta" for t in call_leaves(inputs)):
        raise InputError(None, f"{name} lives on the meta device (no real weights), so it cannot "
                               "run: use a scale with real tensors (tiny or small in the zoo)")
    g, tr = import_trace(module, inputs, name, meta, method)
    return runnable(tr, module, g)


def import_traced(tr: Trace, module: Any, name: str = "model", meta: dict | None = None
                  ) -> Graph:
    """The operator graph of a trace of ``module`` (Trace -> Graph): each op record an
    :class:`Op`; ``meta`` added to the graph's meta, then why torch.export failed (after
    the fx fallback) and the notes on what was traced opaque."""
    recs, info = records(tr)
    info["input_values"] = _input_values(tr, info)
    g = _build(recs, info, module, name, tr.source, meta)
    if tr.export_error:
        g.meta["export_error"] = tr.export_error
    if tr.notes:
        g.meta["notes"] = g.meta.get("notes", []) + tr.notes
    return g


def _input_values(tr: Trace, info: dict) -> dict[str, Any]:
    """The example tensor behind each graph input's label, where the placeholders line up
    with the inputs: torch.export's one per leaf of the flattened inputs, torch.fx's one
    per positional argument. Empty when they do not (keyword inputs)."""
    names = [info["labels"][n] for n, k in info["kinds"].items() if k == "input"]
    values = tr.flat_inputs if tr.source == EXPORT else list(tr.inputs)
    if tr.kwargs or len(names) != len(values):
        return {}
    return {n: v for n, v in zip(names, values) if is_tensor(v)}


# ----------------------------------------------------------------------------- graph building
@dataclass
class _Ref:
    """What a traced value is: its producing op (for data edges) and its storage (for state)."""

    producer: str | None       # op name, or None for a graph input / parameter
    tensor: str                # tensor name shown on edges and Tensors
    storage: str               # storage key: an input label or "op:<name>:<i>"


def _channels_last(t: Any) -> bool:
    """A 4-d tensor laid out channels-last (NHWC strides) rather than contiguous NCHW, as
    an image permuted from HWC is: some CPU kernels (pooling) run 10-20x faster on it."""
    import torch

    try:
        return (t.dim() == 4 and not t.is_contiguous()
                and t.is_contiguous(memory_format=torch.channels_last))
    except Exception:  # a tensor subclass without strides
        return False


def _build(recs: list[Record], info: dict, module: Any, name: str, source: str,
           meta: dict | None) -> Graph:
    """The operator graph of one trace: each op record an :class:`Op`, each folded view
    wired through to what it views, edges for data, state and collective order."""
    b = _GraphBuilder(recs, info, module)
    for rec in recs:
        if rec.kind == "skip":
            continue
        if rec.kind == "view" or rec.short in VIEW_OPS or _folds(rec):
            b.fold_view(rec)
        else:
            b.add_op(rec)
    labels: dict[str, str] = info["labels"]
    kinds: dict[str, str] = info["kinds"]
    gmeta = {"source": source, "model": name, "folded_views": b.folded,
             "params_bytes": _params_bytes(module),
             "inputs": {lbl: k for lbl, k in ((labels[n], kinds.get(n)) for n in labels)
                        if k == "input"}}
    gmeta.update(meta or {})
    return Graph(name=name, ops=b.ops, edges=b.edges, meta=gmeta)


class _GraphBuilder:
    """One graph under construction, op record by op record in program order: what each
    traced value is (:class:`_Ref`), the ops and edges so far, and what orders the next
    op (the last writer and the readers of every storage, the collectives so far, the
    folded views not yet computed)."""

    def __init__(self, recs: list[Record], info: dict, module: Any) -> None:
        labels: dict[str, str] = info["labels"]
        self.mutated_outputs: dict[str, str] = info["mutated_outputs"]
        #: fx node name -> ref (a list for a multi-output node)
        self.refs: dict[str, list[_Ref] | _Ref] = {}
        same = _shared_memory(module, set(labels.values()), info.get("input_values", {}))
        for node_name, label in labels.items():
            self.refs[node_name] = _Ref(None, label, "in:" + same.get(label, label))
        self.host_paths = set(_module_attr(module, "parastream_resource", "host"))
        self.copy_paths = _module_attr(module, "parastream_copy")
        self.main_device = _main_device(recs)
        self.ops: list[Op] = []
        self.edges: list[Edge] = []
        self.edge_set: set[tuple[str, str, str]] = set()
        self.last_writer: dict[str, str] = {}
        self.readers: dict[str, list[str]] = {}
        self.collectives: list[str] = []
        self.folded = 0
        #: folded views by name -> the nodes they read; each is computed by the first op
        #: that reads it (the executor runs views lazily, inside that op's interval)
        self.view_reads: dict[str, list[str]] = {}
        #: a tuple element picked from a view that splits (chunk, split, unbind): no torch
        #: call of its own, but the views behind it run when it is read
        self.passes: dict[str, list[str]] = {}
        self.views_done: set[str] = set()
        #: the node an in-place op's result is the same tensor as (x.add_(1) returns x):
        #: the first node of that tensor, so a layout change through a later name
        #: (h.add_(1).t_() in torch.export's graph reads the add_) finds the views taken
        #: from an earlier one
        self.same_tensor: dict[str, str] = {}

    # ---- edges and refs
    def add_edge(self, src: str, dst: str, typ: str, reason: str,
                 tensor: str | None = None) -> None:
        """One edge, once per (src, dst, type); a state edge where a data edge already
        orders the pair is left out."""
        if src == dst or (src, dst, typ) in self.edge_set:
            return
        if typ == "state" and (src, dst, "data") in self.edge_set:
            return  # a data edge already orders them
        self.edge_set.add((src, dst, typ))
        self.edges.append(Edge(src, dst, typ, reason, tensor))

    def ref_of(self, a: Any) -> _Ref | None:
        """The single-output ref of an argument node (None for a constant or a tuple)."""
        r = self.refs.get(getattr(a, "name", None))
        return r if isinstance(r, _Ref) else None

    # ---- folded views
    def fold_view(self, rec: Record) -> None:
        """A view moves no data: its readers are wired to what it views, and it is
        computed by the first op that reads it."""
        node = rec.node
        self.folded += 1
        src = rec.args[0] if rec.args else None
        reads = [a.name for a in node.all_input_nodes]
        # picking a tuple element runs no torch call; indexing a tensor does
        if rec.short != "getitem" or is_tensor(node_value(src) if src is not None else None):
            self.view_reads[node.name] = reads
        else:
            self.passes[node.name] = reads
        if rec.short == "getitem":
            self._pick(rec, src)
            return
        base = self.ref_of(src)
        if base is None:
            return
        out = node_value(node)
        if isinstance(out, (tuple, list)):  # split/unbind: each piece views the base
            self.refs[node.name] = [base] * len(out)
        else:
            self.refs[node.name] = base

    def _pick(self, rec: Record, src: Any) -> None:
        """``getitem``: the element's ref of a multi-output node, else the base's."""
        base = self.refs.get(getattr(src, "name", None))
        idx = rec.args[1] if len(rec.args) > 1 else 0
        if isinstance(base, list) and isinstance(idx, int) and idx < len(base):
            self.refs[rec.node.name] = base[idx]
        elif isinstance(base, _Ref):
            self.refs[rec.node.name] = base

    def views_first_read(self, node: Any) -> int:
        """How many folded views ``node`` is the first reader of (through tuple picks):
        the executor computes them inside its interval. Marks them done."""
        count, stack = 0, [a.name for a in node.all_input_nodes]
        while stack:
            a = stack.pop()
            if a in self.views_done:
                continue
            if a in self.view_reads:
                self.views_done.add(a)
                count += 1
                stack.extend(self.view_reads[a])
            elif a in self.passes:
                self.views_done.add(a)
                stack.extend(self.passes[a])
        return count

    def note_same_tensor(self, rec: Record) -> None:
        """An in-place op's single result is the tensor it wrote: record its first node."""
        mutated = [a for pos, a in enumerate(rec.args) if pos in rec.mutates
                   and hasattr(a, "name")]
        if mutated and not isinstance(node_value(rec.node), (tuple, list)):
            self.same_tensor[rec.node.name] = self.same_tensor.get(mutated[0].name,
                                                                   mutated[0].name)

    def views_before(self, rec: Record, op_name: str) -> list[str]:
        """Views of this op's input not read yet, when it changes that input's layout in
        place (v = h[0]; h.t_(); v * 2): the executor computes a view where it is first
        read, which would be after the change (a column of h.t() instead of a row), so
        this op takes them first, in program order, as eager mode does."""
        taken: list[str] = []
        if not (rec.short in LAYOUT_INPLACE_OPS and rec.args and hasattr(rec.args[0], "name")):
            return taken
        base = self.same_tensor.get(rec.args[0].name, rec.args[0].name)
        for v in self.view_reads:
            if v in self.views_done:
                continue
            bases = _view_bases(v, self.view_reads, self.passes)
            if base in {self.same_tensor.get(b, b) for b in bases}:
                taken.append(v)
                self.views_done.add(v)
                self._take_view(v, bases, base, op_name)
        return taken

    def _take_view(self, v: str, bases: set[str], base: str, op_name: str) -> None:
        """What else the view ``v`` reads is an input of ``op_name`` now: data edges."""
        for b in bases:
            found = self.refs.get(b)
            for r in (found if isinstance(found, list) else [found]):
                if r is not None and r.producer is not None:
                    self.add_edge(r.producer, op_name, "data",
                                  f"{op_name} takes the view {v} of {r.tensor} "
                                  f"before changing {base}'s layout", r.tensor)

    # ---- ops
    def add_op(self, rec: Record) -> None:
        """One op: its tensors, costs, resource, side effects and meta, then its edges."""
        node = rec.node
        op_name = node.name
        self.note_same_tensor(rec)
        views_before = self.views_before(rec, op_name)
        arg_refs, in_tensors = self.arguments(rec)
        outs = flat_tensors(node_value(node))
        mutated_refs = [r for pos, r, _ in arg_refs if pos in rec.mutates]
        out_tensors = self.outputs(rec, outs, mutated_refs)
        flops, bytes_read, bytes_written = op_costs(rec, arg_refs, outs)
        resource, op_meta = _classify(rec, arg_refs, outs, self.host_paths, self.main_device)
        if resource == "memory" and "copy" not in op_meta:
            self._copy_direction(rec, op_meta)
        side, written = self.side_effects(rec, mutated_refs, outs)
        kind = COLLECTIVES.get(rec.short) if resource == "comm" else None
        if kind:
            side.append(f"collective:{kind}")
        path = rec.stack[-1][0] if rec.stack else ""
        self._describe(rec, arg_refs, views_before, op_meta)
        self.ops.append(Op(name=op_name, type=rec.short, module=path, inputs=in_tensors,
                           outputs=out_tensors, flops=float(flops), bytes_read=int(bytes_read),
                           bytes_written=int(bytes_written), resource=resource,
                           side_effects=list(dict.fromkeys(side)), meta=op_meta))
        # data edges first (so a state edge on the same pair is redundant)
        self.data_edges(op_name, arg_refs)
        self.state_edges(op_name, arg_refs, set(written))
        if kind:
            self.collective_edge(op_name)

    def arguments(self, rec: Record) -> tuple[list[tuple[int, _Ref, Any]], list[Tensor]]:
        """The op's tensor arguments as (schema position, ref, value), and as Tensors.
        Each argument sits at its schema position: positional ones in order, keywords by
        name (``out=`` after an omitted default sits at another index than its kwargs
        order)."""
        arg_refs: list[tuple[int, _Ref, Any]] = []
        in_tensors: list[Tensor] = []
        schema = getattr(getattr(rec.node, "target", None), "_schema", None)
        named = {a.name: i for i, a in enumerate(schema.arguments)} if schema else {}
        placed = list(enumerate(rec.args)) + [
            (named.get(k, len(rec.args) + j), v) for j, (k, v) in enumerate(rec.kwargs.items())]
        for pos, a in placed:
            for n in flat_nodes(a):
                r = self.ref_of(n)
                v = node_value(n)
                if r is None or not is_tensor(v):
                    continue
                arg_refs.append((pos, r, v))
                in_tensors.append(Tensor(shape_of(v), dtype_name(v.dtype), nbytes_of(v), r.tensor))
        return arg_refs, in_tensors

    def outputs(self, rec: Record, outs: list, mutated_refs: list[_Ref]) -> list[Tensor]:
        """The op's output Tensors, recording their refs: an in-place result aliases the
        storage it wrote; an in-place op returning nothing still orders its readers."""
        op_name = rec.node.name
        multi = isinstance(node_value(rec.node), (tuple, list))
        out_refs: list[_Ref] = []
        for i, _ in enumerate(outs):
            tname = f"{op_name}:{i}" if multi else op_name
            storage = f"op:{op_name}:{i}"
            if rec.mutates and i < len(mutated_refs):
                storage = mutated_refs[i].storage  # an in-place result aliases what it wrote
            out_refs.append(_Ref(op_name, tname, storage))
        if not out_refs:  # an in-place op returning nothing still orders its readers
            out_refs = [_Ref(op_name, op_name, f"op:{op_name}:0")]
        self.refs[rec.node.name] = out_refs if multi else out_refs[0]
        return [Tensor(shape_of(t), dtype_name(t.dtype), nbytes_of(t), r.tensor)
                for t, r in zip(outs, out_refs)]

    def _copy_direction(self, rec: Record, op_meta: dict) -> None:
        """A copy inside a module marked ``parastream_copy``: the direction it says."""
        for p, _ in reversed(rec.stack):
            if p in self.copy_paths:  # the module says what this copy stands for (h2d/d2h)
                op_meta["copy"] = self.copy_paths[p]
                break

    def side_effects(self, rec: Record, mutated_refs: list[_Ref], outs: list
                     ) -> tuple[list[str], list[str]]:
        """The op's side effects (``writes:<storage>``) and the storages it writes."""
        side: list[str] = []
        written: list[str] = []
        for r in mutated_refs:
            written.append(r.storage)
            if r.storage.startswith("in:"):
                side.append(f"writes:{r.storage[3:]}")
        if _draws_random(rec):
            # every draw advances the device's one generator: draws on two streams would
            # take each other's numbers in whatever order they ran, so they keep program
            # order (write-after-write edges on the generator)
            gen = f"in:{RANDOM_GENERATOR} ({_device_of(outs, self.main_device)})"
            written.append(gen)
            side.append(f"writes:{gen[3:]}")
        buf = self.mutated_outputs.get(rec.node.name)
        if buf is not None:
            side.append(f"writes:{buf}")
        return side, written

    def _describe(self, rec: Record, arg_refs: list, views_before: list[str],
                  op_meta: dict) -> None:
        """The op's meta beyond its class: memory format, target, the folded views it
        computes first, its module's class."""
        if arg_refs and _channels_last(arg_refs[0][2]):
            op_meta["memory_format"] = "channels_last"
        op_meta["target"] = rec.target
        views = self.views_first_read(rec.node) + len(views_before)
        if views:
            op_meta["views"] = views
        if views_before:
            op_meta["views_before"] = views_before
        if rec.stack:
            op_meta["module_class"] = rec.stack[-1][1].rsplit(".", 1)[-1]

    def data_edges(self, op_name: str, arg_refs: list) -> None:
        """An edge from the producer of every tensor the op reads."""
        for _, r, _ in arg_refs:
            if r.producer is not None:
                self.add_edge(r.producer, op_name, "data", f"{r.tensor} is an input", r.tensor)

    def state_edges(self, op_name: str, arg_refs: list, written: set[str]) -> None:
        """Read-after-write for the storages it reads, write-after-read and
        write-after-write for those it writes; then it is their last writer."""
        for _, r, _ in arg_refs:
            if r.storage in written:
                continue
            w = self.last_writer.get(r.storage)
            if w is not None:
                self.add_edge(w, op_name, "state", f"reads {_storage_label(r.storage)} after "
                              f"{w} wrote it (read-after-write)", r.tensor)
            self.readers.setdefault(r.storage, []).append(op_name)
        for s in written:
            self._write_edges(op_name, s)
            self.last_writer[s] = op_name
            self.readers[s] = []

    def _write_edges(self, op_name: str, s: str) -> None:
        """Edges ordering a write of storage ``s`` after its readers since the last
        write, or after the last write when none read it since."""
        tensor = s[3:] if s.startswith("in:") else None
        prev_readers = [x for x in self.readers.get(s, []) if x != op_name]
        for rd in prev_readers:
            self.add_edge(rd, op_name, "state", f"writes {_storage_label(s)} that {rd} reads "
                          "(write-after-read)", tensor)
        w = self.last_writer.get(s)
        if w is not None and not prev_readers:
            self.add_edge(w, op_name, "state", f"writes {_storage_label(s)} after {w} wrote it "
                          "(write-after-write)", tensor)

    def collective_edge(self, op_name: str) -> None:
        """Collectives run in program order on every rank: chain each to the one before."""
        if self.collectives:
            prev = self.collectives[-1]
            self.add_edge(prev, op_name, "collective_order",
                          f"collectives run in program order on every rank ({prev} "
                          f"before {op_name})")
        self.collectives.append(op_name)


#: the storage name random draws write (``writes:random generator (cpu)``)
RANDOM_GENERATOR = "random generator"


def random_draws(g: Graph) -> list[str]:
    """The ops of ``g`` that draw from a random generator (their side effect says so)."""
    mark = f"writes:{RANDOM_GENERATOR}"
    return [o.name for o in g.ops if any(e.startswith(mark) for e in o.side_effects)]


def _draws_random(rec: Record) -> bool:
    """Whether an op draws from a random generator: torch's ``nondeterministic_seeded``
    tag, else its name (:data:`RANDOM_OPS`)."""
    import torch

    tags = getattr(rec.node.target, "tags", ()) or ()
    if not (torch.Tag.nondeterministic_seeded in tags or rec.short in RANDOM_OPS):
        return False
    # ops that draw only for a dropout (attention's dropout_p, dropout's train flag) draw
    # nothing at inference: tagged all the same, they would chain every attention together
    schema = getattr(rec.node.target, "_schema", None)
    if schema is None:
        return True
    given = schema_args(schema, rec.args, rec.kwargs)
    for a in schema.arguments:
        if a.name in ("dropout_p", "train"):
            value = given.get(a.name, a.default_value if a.has_default_value() else None)
            if isinstance(value, (bool, int, float)) and not value:
                return False
    return True


def _device_of(outs: list, default: Any) -> str:
    for t in outs:
        dev = getattr(t, "device", None)
        if dev is not None and dev.type != "meta":
            return dev.type
    return str(getattr(default, "type", default) or "cpu")


def _storage_label(s: str) -> str:
    if s.startswith("in:"):
        return s[3:]
    return "the output of " + s.split(":")[1]


def _folds(rec: Record) -> bool:
    """Ops that are free here: reshape/contiguous of contiguous data, eval dropout, no-op to()."""
    a0 = node_value(rec.args[0]) if rec.args else None
    if rec.short in MAYBE_VIEW_OPS:
        # contiguous(memory_format=torch.channels_last) of NCHW data copies
        fmt = rec.kwargs.get("memory_format")
        try:
            return is_tensor(a0) and bool(
                a0.is_contiguous(memory_format=fmt) if fmt is not None else a0.is_contiguous())
        except Exception:
            return True
    if rec.short in ("dropout", "feature_dropout", "alpha_dropout"):
        train = rec.args[2] if len(rec.args) > 2 else rec.kwargs.get("train", False)
        return not bool(train)
    if rec.short in ("_to_copy", "to") and is_tensor(a0):
        out = node_value(rec.node)
        if rec.short == "to" and is_tensor(out):
            copy = rec.kwargs.get("copy", False) or any(a is True for a in rec.args[1:])
            # to(memory_format=...) keeps dtype and device and still copies: the layout too
            return (not copy and out.dtype == a0.dtype and out.device == a0.device
                    and _same_layout(out, a0))
    return False


def _shared_memory(module: Any, labels: set[str],
                   inputs: dict[str, Any] | None = None) -> dict[str, str]:
    """Parameters, buffers and graph inputs (``inputs``: label -> example tensor) among
    ``labels`` whose bytes overlap another one's (a buffer registered as a view of
    another, tied weights, a tensor passed next to a view of it): each to the first one's
    name, so that a write through one orders the reads through the others. Views of one
    storage that do not overlap (a cache's k and v halves) stay apart."""
    try:
        named = [*module.named_parameters(remove_duplicate=False),
                 *module.named_buffers(remove_duplicate=False)]
    except Exception:  # not a module with named tensors
        named = []
    named += list((inputs or {}).items())
    spans: list[tuple[int, int, int, int, str]] = []  # (storage, lo, hi, order, name)
    for k, (fqn, t) in enumerate(named):
        if fqn not in labels or not is_tensor(t) or t.device.type == "meta" or not t.numel():
            continue
        try:
            base = t.untyped_storage().data_ptr()
            lo = t.data_ptr()
            last = sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 1)
        except Exception:  # no storage (a tensor subclass)
            continue
        if base:
            spans.append((base, lo, lo + (last + 1) * t.element_size(), k, fqn))
    out: dict[str, str] = {}
    group: list[tuple[int, str]] = []
    end, storage = -1, None
    for base, lo, hi, k, fqn in sorted(spans):
        if base != storage or lo >= end:  # a new run of overlapping spans
            _name_group(group, out)
            group, storage, end = [], base, hi
        group.append((k, fqn))
        end = max(end, hi)
    _name_group(group, out)
    return out


def _name_group(group: list[tuple[int, str]], out: dict[str, str]) -> None:
    """Every name of an overlapping group to its first registered one."""
    if len(group) > 1:
        owner = min(group)[1]
        out.update((fqn, owner) for _, fqn in group if fqn != owner)


def _view_bases(v: str, view_reads: dict[str, list[str]], passes: dict[str, list[str]]
                ) -> set[str]:
    """Every node a folded view reads, through the views and tuple picks it reads."""
    seen: set[str] = set()
    stack = list(view_reads.get(v, ()))
    while stack:
        a = stack.pop()
        if a not in seen:
            seen.add(a)
            stack.extend(view_reads.get(a, passes.get(a, ())))
    return seen


def _same_layout(a: Any, b: Any) -> bool:
    """Same shape and strides (True when either has none to compare)."""
    try:
        return tuple(a.shape) == tuple(b.shape) and tuple(a.stride()) == tuple(b.stride())
    except Exception:  # no strides (a sparse or nested tensor): as before, by dtype and device
        return True


def _classify(rec: Record, arg_refs: list, outs: list, host_paths: set[str],
              main_device: str | None) -> tuple[str, dict]:
    """An op's resource class (``cube``, ``vector``, ``memory``, ``comm``, ``host``) and
    the meta that explains it (``causal``, ``head_dims``, ``opaque``, ``cast``, ``copy``)."""
    if _is_collective(rec):
        return "comm", {}
    meta: dict = {}
    if rec.short in ("scaled_dot_product_attention",):
        meta.update(_attention_meta(rec, arg_refs))
    resource = _unit(rec, arg_refs, outs, meta)
    if resource != "memory" and _runs_on_host(rec, arg_refs, outs, host_paths, main_device):
        resource = "host"
    return resource, meta


def _is_collective(rec: Record) -> bool:
    """A functional collective (or any op of a collectives namespace but parastream's
    own), or a collective called by name."""
    short = rec.short
    if rec.namespace in COMM_NAMESPACES and (short in COLLECTIVES or rec.namespace != "parastream"):
        return True
    return short in COLLECTIVES and rec.namespace in ("", "parastream")


def _attention_meta(rec: Record, arg_refs: list) -> dict:
    """``causal``, and ``head_dims: mixed`` when q/k and v head dims differ (MLA's
    decoupled rope: CPU torch cannot use its fused kernel and runs the unfused math
    path, about half the FLOP rate)."""
    causal = rec.kwargs.get("is_causal", rec.args[5] if len(rec.args) > 5 else False)
    meta: dict = {"causal": bool(causal)}
    vals = [v for _, _, v in arg_refs[:3]]
    if len(vals) == 3 and size_of(vals[0].shape[-1]) != size_of(vals[2].shape[-1]):
        meta["head_dims"] = "mixed"
    return meta


def _unit(rec: Record, arg_refs: list, outs: list, meta: dict) -> str:
    """The device unit an op runs on: ``cube`` (matrix products, the opaque experts'
    GEMMs), ``memory`` (copies, gathers, fills; a cast is ``vector``), else ``vector``."""
    short = rec.short
    if is_module_call(rec.node):
        entry = opaque_entry(rec.args[0]) if rec.args else None
        meta["opaque"] = entry.cls if entry else "module"
        return "cube"  # the routed experts' GEMMs
    if short in CUBE_OPS:
        return "cube"
    if short not in MEMORY_OPS:
        return "vector"
    src = [v for _, _, v in arg_refs]
    if not (short in ("_to_copy", "to", "copy_") and src and outs):
        return "memory"
    a, b = (src[-1], src[0]) if short == "copy_" else (src[0], outs[0])
    if a.dtype != b.dtype and str(a.device) == str(b.device):
        meta["cast"] = f"{dtype_name(a.dtype)}->{dtype_name(b.dtype)}"
        return "vector"   # a cast computes; it is not a DMA copy
    if str(a.device) != str(b.device):
        meta["copy"] = _direction(str(a.device), str(b.device))
    return "memory"


def _runs_on_host(rec: Record, arg_refs: list, outs: list, host_paths: set[str],
                  main_device: str | None) -> bool:
    """Inside a module marked as host work, or CPU-only work in a model living on
    another device."""
    if any(p in host_paths for p, _ in rec.stack):
        return True
    devices = {str(v.device) for _, _, v in arg_refs} | {str(t.device) for t in outs}
    return bool(main_device and main_device != "cpu" and devices == {"cpu"})


def _direction(src: str, dst: str) -> str:
    if src == "cpu":
        return "h2d"
    if dst == "cpu":
        return "d2h"
    return "d2d"


def _module_attr(module: Any, attr: str, only: str | None = None) -> dict[str, str]:
    """Paths of submodules that declare ``attr`` (``parastream_resource = "host"``,
    ``parastream_copy = "d2h"``), with its value."""
    out: dict[str, str] = {}
    try:
        for path, sub in module.named_modules():
            v = getattr(sub, attr, None)
            if isinstance(v, str) and (only is None or v == only):
                out[path] = v
    except Exception:
        pass
    return out


def _main_device(recs: list[Record]) -> str | None:
    counts: dict[str, int] = {}
    for r in recs:
        for t in flat_tensors(node_value(r.node)):
            d = str(t.device).split(":")[0]
            counts[d] = counts.get(d, 0) + 1
    return max(counts, key=counts.get) if counts else None


def _params_bytes(module: Any) -> int:
    try:
        return int(sum(p.numel() * p.element_size() for p in module.parameters()))
    except Exception:
        return 0


@contextlib.contextmanager
def no_mha_fastpath() -> Iterator[None]:
    """torch.backends.mha's fast path off inside, as it was after: eager inference of
    nn.MultiheadAttention / TransformerEncoderLayer takes a fused kernel that the traced
    program cannot (its ops are the unfused ones), and the two round apart (4.8e-7 on a
    TransformerEncoderLayer's outputs). A torch without the switch: nothing to do."""
    import torch

    mha = getattr(torch.backends, "mha", None)
    get = getattr(mha, "get_fastpath_enabled", None)
    was = get() if get is not None else None
    if was:
        mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        if was:
            mha.set_fastpath_enabled(True)
