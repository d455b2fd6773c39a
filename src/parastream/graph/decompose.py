"""Module decomposition, dependency table, parallelism verdicts and parallel points.

The direction-level analysis, computed from an operator graph:

1. **Modules.** Ops are grouped by their ``module`` path (the nn.Module hierarchy), then cut
   along communication (collectives), state (writes to a buffer such as a KV cache), sync
   (record / wait) and resource (compute vs memory copy vs host) boundaries. A module is a
   *convex, connected* piece of the op DAG: each op gets a stage number ``t`` that grows by
   one whenever an edge crosses from one group key to another, the ops of one ``(key, t)``
   are split into their weakly connected pieces (edges inside the piece), and each piece is
   a module — so no path leaves a module and comes back, and ops of one scope that the DAG
   does not relate are never one module. A module made only of views (reshape, transpose,
   ...) is folded into its producer or consumer: never a lone reshape. A chain of
   convolutional layers (conv, norm, activation, pool, dropout; one module feeding only the
   next, the next fed only by it) under one parent scope and holding a convolution is one
   module, named by that scope: a conv+bn+relu block or an Inception branch, not its relu. Module ids follow a
   topological order of the module DAG. A module's type comes from its name where the
   name agrees with its dominant work (the op with the most FLOPs), else from
   that work (a grouped GEMM of routed experts is ``moe.experts`` or ``matmul``, never
   ``residual``).
2. **Dependency table.** Op edges between modules, one row per (from, to, type), with the
   tensor or reason. A tensor read by two modules is *not* an edge between them: the
   producer is their common upstream node, and an external input read by several modules
   becomes a shared-input node (``in:<tensor>``); the call's start (``in:input``) is one
   when several modules begin from different call inputs (``a(x) + b(y)``).
3. **Parallel points.** A fork node with two or more successors; each successor that no
   other successor reaches starts a branch, holding every node reachable from it and from
   no other start — so no path connects two branches. The join is the first node (in a
   topological order) that every branch reaches: their nearest common descendant, ``end``
   when they never meet; for modules, the first module with an op that an op of every
   branch reaches. The dominating branch is the one with the longest estimated time.
   Found on the module DAG and, inside each module, on its operator DAG (the join is then
   an op, inside the module or after it).
4. **Verdicts.** ``serial`` (data dependency, shared writable state, collective order, inner
   step of), ``parallel_candidate`` (no data path; results meet only at the join) or
   ``parallel_pending_validation`` (resource conflict, tiny shapes) with the reason.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

import msgspec

from ..device.cost import OpCost, estimate
from ..device.profile import DeviceProfile
from .ir import Graph, Op, validate

SERIAL = "serial"
CANDIDATE = "parallel_candidate"
PENDING = "parallel_pending_validation"

#: op types that only change a tensor's view (never a module on their own)
VIEW_TYPES = frozenset({
    "reshape", "view", "transpose", "permute", "flatten", "unflatten", "squeeze",
    "unsqueeze", "expand", "contiguous", "identity", "split", "chunk", "slice", "select",
    "getitem", "narrow", "view_as", "t", "alias", "unsafe_view", "_unsafe_view", "expanddims",
    "transdata", "flatten_dense_tensors", "to"})
#: op types that are explicit stream synchronisation in the source
SYNC_TYPES = frozenset({
    "record", "wait", "event_record", "event_wait", "record_event", "wait_event",
    "wait_stream", "npu_wait_tensor", "npu_tagged_event_record", "npu_tagged_event_wait",
    "synchronize", "stream_wait_event", "barrier"})
#: (keyword in module path or op type, module_type), first match wins
_TYPE_RULES = (
    ("shared_expert", "moe.shared_expert"), ("experts", "moe.experts"),
    ("expert", "moe.experts"), ("router", "moe.gate"), ("routed", "moe.experts"),
    ("lm_head", "lm_head"),
    ("embed", "embedding"), ("rotary", "rope"), ("rope", "rope"), ("norm", "norm"),
    ("q_proj", "attention.proj"), ("k_proj", "attention.proj"), ("v_proj", "attention.proj"),
    ("qkv", "attention.proj"), ("q_a", "attention.proj"), ("q_b", "attention.proj"),
    ("kv_a", "attention.proj"), ("kv_b", "attention.proj"), ("o_proj", "attention.out"),
    ("out_proj", "attention.out"), ("attn", "attention"), ("attention", "attention"),
    ("gate_proj", "mlp"), ("up_proj", "mlp"), ("down_proj", "mlp"), ("gate", "moe.gate"),
    ("dispatch", "moe.dispatch"), ("combine", "moe.combine"), ("mlp", "mlp"), ("ffn", "mlp"),
    ("moe", "moe"), ("conv", "conv"), ("pool", "pool"),
    ("concat", "merge"), ("cat", "merge"), ("merge", "merge"), ("combine", "merge"),
    ("add", "residual"), ("residual", "residual"), ("branch", "branch"))


# ----------------------------------------------------------------------------- results

class Module(msgspec.Struct, gc=False):
    """One row of the module table plus what the analysis needs."""

    module_id: str
    module_name: str
    module_type: str
    inputs: list[str]
    outputs: list[str]
    side_effect: str
    resource_hint: str
    ops: list[str]
    path: str = ""
    resource: str = "vector"
    bound: str = "compute"
    dur_us: float = 0.0
    block_dim: int = 0


class ModuleEdge(msgspec.Struct, gc=False, rename={"src": "from", "dst": "to"}):
    """One row of the dependency table."""

    src: str
    dst: str
    dependency_type: str
    reason: str


class SharedInput(msgspec.Struct, gc=False):
    """An external tensor read by several modules: their common upstream node."""

    node: str
    tensor: str
    consumers: list[str]


class Branch(msgspec.Struct, gc=False):
    """One branch of a parallel point: its nodes (module ids or op names), its time on one
    stream, what it mostly uses, its widest block dim and its longest op (the dominator a
    side stream would hide behind when this branch is the main one)."""

    nodes: list[str]
    dur_us: float
    resource: str
    bound: str
    block_dim: int
    dominator: str


class Verdict(msgspec.Struct, gc=False):
    """Whether two modules (or the branches of a point) may run on different streams."""

    a: str
    b: str
    verdict: str
    reason: str
    point: str = ""


class ParallelPoint(msgspec.Struct, gc=False):
    """Nodes that share an input (``fork``), have no data path between them, and meet at
    ``join``. ``level`` is ``module`` (nodes are module ids) or ``op`` (op names inside the
    module ``scope``)."""

    id: str
    level: str
    fork: str
    join: str
    members: list[str]
    branches: list[Branch]
    dominating_branch: int
    verdict: str
    reason: str
    scope: str = ""


class OpDag(msgspec.Struct, gc=False):
    """The operator DAG inside one candidate module (edges within it, plus the outside
    nodes it reads from and feeds)."""

    module_id: str
    ops: list[str]
    edges: list[tuple[str, str, str]]
    inputs_from: list[str]
    outputs_to: list[str]
    points: list[str]


class Decomposition(msgspec.Struct):
    """Everything the direction-level analysis document shows."""

    graph: str
    device: str
    order: list[str]
    costs: dict[str, OpCost]
    op_module: dict[str, str]
    modules: list[Module]
    module_edges: list[ModuleEdge]
    shared_inputs: list[SharedInput]
    verdicts: list[Verdict]
    parallel_points: list[ParallelPoint]
    op_dags: list[OpDag]

    def module(self, module_id: str) -> Module:
        for m in self.modules:
            if m.module_id == module_id:
                return m
        raise KeyError(module_id)


# ----------------------------------------------------------------------------- op classes

def op_class(op: Op) -> str:
    """``comm``, ``sync``, ``state``, or the resource group ``compute``/``memory``/``host``:
    the cut rules in one word."""
    effects = op.side_effects
    if op.resource == "comm" or any(s.startswith("collective") for s in effects):
        return "comm"
    if op.type.lower() in SYNC_TYPES or any(s.startswith("event") for s in effects):
        return "sync"
    if any(s.startswith("writes:") for s in effects):
        return "state"
    return "compute" if op.resource in ("cube", "vector") else op.resource


def is_view(op: Op) -> bool:
    """A view-only op (reshape, transpose, ...): no work of its own."""
    if op_class(op) != "compute":
        return False
    return op.type.lower() in VIEW_TYPES or (
        op.flops == 0 and op.bytes_read == 0 and op.bytes_written == 0
        and op.resource == "vector" and not op.side_effects)


def _buffers(op: Op) -> tuple[set[str], set[str]]:
    """(buffers written, buffers read) named in side effects ``writes:X`` / ``reads:X``."""
    w = {s.split(":", 1)[1] for s in op.side_effects if s.startswith("writes:")}
    r = {s.split(":", 1)[1] for s in op.side_effects if s.startswith("reads:")}
    return w, r


class _Facts:
    """Per-op facts computed once: cut class, view-only flag, buffers written / read."""

    def __init__(self, order: list[str], ops: dict[str, Op]) -> None:
        self.cls = {n: op_class(ops[n]) for n in order}
        self.view = {n: self.cls[n] == "compute" and is_view(ops[n]) for n in order}
        self.writes: dict[str, set[str]] = {}
        self.reads: dict[str, set[str]] = {}
        for n in order:
            if ops[n].side_effects:
                self.writes[n], self.reads[n] = _buffers(ops[n])


# ----------------------------------------------------------------------------- entry point

def decompose(g: Graph, profile: DeviceProfile, costs: dict[str, OpCost] | None = None,
              order: list[str] | None = None) -> Decomposition:
    """Decompose ``g`` into modules, dependencies, verdicts and parallel points, with op
    costs on ``profile`` (pass ``costs``/``order`` when already computed)."""
    order = order if order is not None else validate(g)
    ops = g.index()
    costs = costs if costs is not None else {n: estimate(ops[n], profile) for n in order}
    preds: dict[str, list] = defaultdict(list)
    succs: dict[str, list] = defaultdict(list)
    for e in g.edges:
        preds[e.dst].append(e)
        succs[e.src].append(e)

    facts = _Facts(order, ops)
    op_group, groups, paths = _group_ops(order, ops, facts, preds, succs)
    op_module, modules, module_edges, mod_succs = _build_modules(
        ops, costs, facts, op_group, groups, paths, preds, succs)
    mod_by_id = {m.module_id: m for m in modules}
    user_inputs = {k for k, kind in ((g.meta or {}).get("inputs") or {}).items()
                   if kind == "input"}
    shared = _shared_inputs(order, ops, op_module, preds, user_inputs)

    verdicts = _edge_verdicts(module_edges, mod_by_id)
    points: list[ParallelPoint] = []
    ctx = _PointContext(costs, facts, profile)

    # module-level points on the module DAG (with shared-input nodes as forks)
    node_succ = {m.module_id: sorted(mod_succs[m.module_id], key=_module_rank)
                 for m in modules if mod_succs[m.module_id]}
    for s in shared:
        node_succ[s.node] = list(s.consumers)
    members_of = {m.module_id: m.ops for m in modules}
    mod_nodes = _BranchNodes({m.module_id: m.dur_us for m in modules}, members_of)
    # the validated op order and the module ids (after the shared inputs) are topological
    op_reach = _Reach(order, {n: [e.dst for e in succs[n]] for n in order}, in_order=True)
    mod_reach = _Reach([s.node for s in shared] + [m.module_id for m in modules], node_succ,
                       in_order=True)
    joins = _ModuleJoins(mod_reach, op_reach, members_of)
    for fork, _, branches in _distinct(_points(mod_reach, node_succ)):
        pid = f"P{len(points) + 1}"
        point, pairs = _make_point(pid, "module", fork, joins.join(branches), branches,
                                   mod_nodes, ctx)
        points.append(point)
        for i, k, v, why in pairs:
            verdicts.append(Verdict(" + ".join(point.branches[i].nodes),
                                    " + ".join(point.branches[k].nodes), v, why, pid))

    # op-level points inside each module, and the op DAGs of candidate modules
    candidates = {n for p in points if p.verdict != SERIAL for n in p.members}
    op_dags: list[OpDag] = []
    op_shared = _op_shared_inputs(order, ops, preds)
    for m in modules:
        dag = _op_dag(m, preds, succs, op_shared)
        mine: list[str] = []
        if len(m.ops) > 1:
            op_nodes = _BranchNodes({n: costs[n].dur_us for n in m.ops},
                                    {n: [n] for n in m.ops})
            for fork, join, branches in _op_points(m, dag, op_reach, preds,
                                                    op_shared):
                pid = f"P{len(points) + 1}"
                point, _ = _make_point(pid, "op", fork, join, branches, op_nodes, ctx,
                                       scope=m.module_id)
                points.append(point)
                mine.append(pid)
        if m.module_id in candidates or mine:
            dag.points = mine
            op_dags.append(dag)
    return Decomposition(g.name, profile.name, order, costs, op_module, modules, module_edges,
                         shared, verdicts, points, op_dags)


def _distinct(found: Iterable[tuple[str, str, list[list[str]]]]
              ) -> Iterable[tuple[str, str, list[list[str]]]]:
    """The points found, each set of branches once (a shared input and the op that reads
    it can fork the same branches)."""
    seen: set[tuple] = set()
    for fork, join, branches in found:
        key = tuple(sorted(map(tuple, branches)))
        if key not in seen:
            seen.add(key)
            yield fork, join, branches


def _op_dag(m: Module, preds, succs, op_shared) -> OpDag:
    """The operator DAG of one module: its inner edges, the outside nodes (producer ops,
    ``in:<tensor>`` shared inputs) it reads from, and the outside ops it feeds."""
    inner = set(m.ops)
    outside_in: list[str] = []
    outside_out: list[str] = []
    edges: list[tuple[str, str, str]] = []
    for n in m.ops:
        for e in preds[n]:
            if e.src not in inner and e.src not in outside_in:
                outside_in.append(e.src)
        for tensor, _ in op_shared.get(n, ()):
            if f"in:{tensor}" not in outside_in:
                outside_in.append(f"in:{tensor}")
    for n in m.ops:
        for e in succs[n]:
            if e.dst in inner:
                edges.append((n, e.dst, e.type))
            elif e.dst not in outside_out:
                outside_out.append(e.dst)
    return OpDag(m.module_id, list(m.ops), edges, outside_in, outside_out, [])


def _op_points(m: Module, dag: OpDag, reach: _Reach, preds, op_shared
               ) -> Iterable[tuple[str, str, list[list[str]]]]:
    """Points inside one module: forks are the outside nodes it reads from and its own ops;
    the branches hold its ops only (the module is convex: a path between two of its ops
    stays inside); the join is the first op, here or later in the graph, that every branch
    reaches."""
    into: dict[str, list[str]] = defaultdict(list)
    for n in m.ops:
        for e in preds[n]:
            into[e.src].append(n)
        for tensor, _ in op_shared.get(n, ()):
            into[f"in:{tensor}"].append(n)
    keep = reach.mask(m.ops)
    found = []
    for f in [*dag.inputs_from, *m.ops]:
        starts = list(dict.fromkeys(into.get(f, ())))
        if len(starts) >= 2:
            point = _point_at(reach, starts, keep)
            if point is not None:
                found.append((f, point[0], point[1]))
    return _distinct(found)


def _module_rank(mid: str) -> int:
    return int(mid[1:]) if mid[1:].isdigit() else 0


# ----------------------------------------------------------------------------- grouping

class _Groups:
    """Ops partitioned into groups (union-find over op names), each with a scope path."""

    def __init__(self, order: list[str]) -> None:
        self.parent = {n: n for n in order}
        self.path: dict[str, str] = {}

    def find(self, n: str) -> str:
        root = n
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[n] != root:
            self.parent[n], n = root, self.parent[n]
        return root

    def union(self, a: str, b: str) -> str:
        """Merge b's group into a's; return the root (a's)."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
        return ra

    def members(self, order: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for n in order:
            out.setdefault(self.find(n), []).append(n)
        return out


def _group_ops(order: list[str], ops: dict[str, Op], facts: _Facts, preds, succs
               ) -> tuple[dict[str, int], list[list[str]], list[str]]:
    """Convex, connected groups of ops (see the module docstring). Returns op -> group
    index, the groups (each in op order; the groups in a topological order of the group
    DAG) and each group's scope path."""
    grp = _Groups(order)
    _stage_pieces(order, ops, facts, preds, grp)
    _fold_views(order, facts, preds, succs, grp)
    _fold_conv_chains(order, ops, facts, succs, grp)
    groups = _topological_groups(order, succs, grp)
    op_group = {n: i for i, gm in enumerate(groups) for n in gm}
    paths = [grp.path.get(grp.find(gm[0])) or _first_path(gm, ops, facts) for gm in groups]
    return op_group, groups, paths


def _first_path(members: list[str], ops: dict[str, Op], facts: _Facts) -> str:
    """The scope of a group's first op that does work (its first op when all are views)."""
    return ops[next((n for n in members if not facts.view[n]), members[0])].module


def _stage_pieces(order, ops, facts: _Facts, preds, grp: _Groups) -> None:
    """Same (module path, cut class) and the same stage ``t``, joined only along edges
    inside: an op's stage is its predecessors' (same key) or one more (another key), so
    every edge between two groups goes to a higher stage (the group DAG is acyclic) and no
    path leaves a group and comes back (it would have to come back at a higher stage)."""
    key = {n: (ops[n].module, facts.cls[n]) for n in order}
    stage: dict[str, int] = {}
    for n in order:
        k, t = key[n], 0
        for e in preds[n]:
            t = max(t, stage[e.src] if key[e.src] == k else stage[e.src] + 1)
        stage[n] = t
        for e in preds[n]:
            if key[e.src] == k and stage[e.src] == t:
                grp.union(e.src, n)


def _fold_views(order, facts: _Facts, preds, succs, grp: _Groups) -> None:
    """Fold every view-only group into the one group it reads from (else the one it
    feeds): its edges then stay inside, so the result is as convex and acyclic as before."""
    for root, members in grp.members(order).items():
        if not all(facts.view[n] for n in members):
            continue
        inside = set(members)
        up = {grp.find(e.src) for n in members for e in preds[n] if e.src not in inside}
        down = {grp.find(e.dst) for n in members for e in succs[n] if e.dst not in inside}
        target = next(iter(up)) if len(up) == 1 else next(iter(down)) if len(down) == 1 else None
        if target is not None and target != grp.find(root):
            grp.union(target, root)


#: op type words of a convolutional network's layers (convolution, normalisation,
#: activation, pooling, dropout): chains of these fold into their block
_CONV_NET_WORDS = ("conv", "norm", "relu", "pool", "dropout", "sigmoid", "swish", "silu",
                   "gelu", "hardtanh", "clamp", "elu", "mish")


def _conv_layer(members: list[str], ops: dict[str, Op], facts: _Facts) -> bool:
    """A compute group whose work is all convolutional-network layers."""
    work = [n for n in members if not facts.view[n]]
    return bool(work) and all(facts.cls[n] == "compute" for n in members) and all(
        any(w in ops[n].type.lower() for w in _CONV_NET_WORDS) for n in work)


def _common_scope(a: str, b: str) -> str:
    out = []
    for x, y in zip(a.split("."), b.split(".")):
        if x != y:
            break
        out.append(x)
    return ".".join(out)


def _fold_conv_chains(order, ops, facts: _Facts, succs, grp: _Groups) -> None:
    """Merge group B into group A when A feeds only B, B is fed only by A, both are
    convolutional layers under one parent scope and the chain holds a convolution. Such a
    merge keeps the group convex (a path leaving A goes through B) and the group DAG
    acyclic; the merged group is named by the common scope."""
    if not any("conv" in ops[n].type.lower() for n in order):
        return  # no convolution, no chain to fold
    members = grp.members(order)
    path = {r: _first_path(m, ops, facts) for r, m in members.items()}
    conv = {r: _conv_layer(m, ops, facts) for r, m in members.items()}
    has_conv = {r: any("conv" in ops[n].type.lower() for n in m) for r, m in members.items()}
    out_g: dict[str, set[str]] = {r: set() for r in members}
    in_g: dict[str, set[str]] = {r: set() for r in members}
    for r, m in members.items():
        for n in m:
            for e in succs[n]:
                d = grp.find(e.dst)
                if d != r:
                    out_g[r].add(d)
                    in_g[d].add(r)
    for r in list(members):  # roots in op order: a chain is walked from its head
        if grp.find(r) != r or not conv[r]:
            continue
        while len(out_g[r]) == 1:
            b = next(iter(out_g[r]))
            scope = _common_scope(path[r], path[b])
            if not (in_g[b] == {r} and conv[b] and scope and (has_conv[r] or has_conv[b])):
                break
            grp.union(r, b)
            path[r], has_conv[r] = scope, True
            out_g[r] = out_g.pop(b)
            for d in out_g[r]:
                in_g[d].discard(b)
                in_g[d].add(r)
            grp.path[r] = scope


def _topological_groups(order, succs, grp: _Groups) -> list[list[str]]:
    """The groups in a topological order of the group DAG (Kahn's algorithm, the group
    whose first op comes first in ``order`` when several are ready)."""
    import heapq

    members = grp.members(order)
    rank = {r: i for i, r in enumerate(members)}  # members() lists roots in op order
    out_g: dict[str, set[str]] = {r: set() for r in members}
    indeg = dict.fromkeys(members, 0)
    for r, m in members.items():
        for n in m:
            for e in succs[n]:
                d = grp.find(e.dst)
                if d != r and d not in out_g[r]:
                    out_g[r].add(d)
                    indeg[d] += 1
    ready = [rank[r] for r, k in indeg.items() if k == 0]
    heapq.heapify(ready)
    roots = list(members)
    out: list[list[str]] = []
    while ready:
        r = roots[heapq.heappop(ready)]
        out.append(members[r])
        for d in out_g[r]:
            indeg[d] -= 1
            if indeg[d] == 0:
                heapq.heappush(ready, rank[d])
    return out


def _tensor_name(op: Op, edge=None) -> str:
    if edge is not None and edge.tensor:
        return edge.tensor
    for t in op.outputs:
        if t.name:
            return t.name
    return f"{op.name}.out"


#: roles a name may give a module whose dominant op is a matrix multiply
_MATMUL_ROLES = frozenset({
    "attention.proj", "attention.out", "attention", "mlp", "moe", "moe.experts",
    "moe.shared_expert", "moe.gate", "lm_head", "embedding"})
#: roles a name may not give a module without matrix or convolution work (a relu in a
#: ``conv1`` block is an activation, not a convolution)
_HEAVY_ROLES = frozenset({"conv", "attention.proj", "attention.out", "lm_head"})
#: (word in op type, work kind) for the dominant op, first match wins
_WORK_RULES = (("conv", "conv"), ("attention", "attention"), ("flash", "attention"),
               ("norm", "norm"), ("pool", "pool"))
_MATMUL_TYPES = frozenset({"mm", "bmm", "addmm", "baddbmm", "linear", "einsum"})
_ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid", "tanh", "swish", "elu", "mish")


def _rule(text: str) -> str | None:
    for word, kind in _TYPE_RULES:
        if word in text:
            return kind
    return None


def _work_kind(op_type: str) -> str | None:
    """What the dominant op's type says about a module's work: ``matmul``, ``conv``,
    ``attention``, ``norm``, ``pool`` or None (element-wise and other light work)."""
    t = op_type.lower()
    if t in _MATMUL_TYPES or "matmul" in t or "gemm" in t:
        return "matmul"
    return next((kind for word, kind in _WORK_RULES if word in t), None)


def _module_type(path: str, cls: str, members: list[str], ops: dict[str, Op],
                 costs: dict[str, OpCost], facts: _Facts) -> str:
    """The module's type: its cut class for comm/state/sync/copy/host; else its name's role
    where that agrees with its dominant work (the op with the most FLOPs, the longest
    estimated time among equals), else the work itself."""
    if cls in ("comm", "state", "sync"):
        return cls
    if cls == "memory":
        return "copy"
    if cls == "host":
        return "host"
    work_ops = [n for n in members if not facts.view[n]] or members
    top = max(work_ops, key=lambda n: (ops[n].flops, costs[n].dur_us))
    work = _work_kind(ops[top].type)
    low = path.lower()
    named = _rule(low.rsplit(".", 1)[-1]) or _rule(low)
    if work == "matmul":
        if named in _MATMUL_ROLES:
            return named
        return "moe.experts" if any(w in low for w in ("expert", "moe", "routed")) else "matmul"
    if work is not None:
        return work
    if named and named not in _HEAVY_ROLES:
        return named
    top_type = ops[top].type.lower()
    if any(w in top_type for w in _ACTIVATIONS):
        return "activation"
    kind = _rule(top_type)
    return kind if kind and kind not in _HEAVY_ROLES else "compute"


def _build_modules(ops, costs, facts: _Facts, op_group, groups, paths, preds, succs):
    """Module rows, the op -> module id map and the dependency table from the groups
    (``paths``: each group's scope)."""
    modules: list[Module] = []
    ids = [f"M{i + 1}" for i in range(len(groups))]
    op_module = {n: ids[gi] for n, gi in op_group.items()}
    name_count: dict[str, int] = defaultdict(int)
    mod_succs: dict[str, set[str]] = defaultdict(set)
    rows: dict[tuple[str, str, str], list] = {}
    for gi, members in enumerate(groups):
        mid = ids[gi]
        mem_ops = [ops[n] for n in members]
        cls = facts.cls[next((n for n in members if not facts.view[n]), members[0])]
        path = paths[gi]
        base = path or "+".join(dict.fromkeys(o.type for o in mem_ops[:3]))
        if cls in ("comm", "state", "sync", "memory", "host"):
            base = f"{base}[{cls}]"
        name_count[base] += 1
        name = base if name_count[base] == 1 else f"{base}#{name_count[base]}"
        inputs: list[str] = []
        outputs: list[str] = []
        inside = set(members)
        for n in members:
            op = ops[n]
            for e in preds[n]:
                if e.src not in inside:
                    inputs.append(_tensor_name(ops[e.src], e))
            if not preds[n]:
                inputs.extend(t.name for t in op.inputs if t.name)
            for e in succs[n]:
                if e.dst not in inside:
                    outputs.append(_tensor_name(op, e))
            if not succs[n]:
                outputs.extend(t.name or f"{n}.out" for t in op.outputs[:1]) if op.outputs \
                    else outputs.append(f"{n}.out")
        effects = sorted({s for o in mem_ops for s in o.side_effects})
        dur = sum(costs[n].dur_us for n in members)
        by_unit: dict[str, float] = defaultdict(float)
        by_bound: dict[str, float] = defaultdict(float)
        for n in members:
            by_unit[costs[n].unit] += costs[n].dur_us
            by_bound[costs[n].bound] += costs[n].dur_us
        unit = max(by_unit, key=by_unit.__getitem__)
        bound = max(by_bound, key=by_bound.__getitem__)
        blk = max(costs[n].block_dim for n in members if costs[n].unit == unit)
        hint = f"{_heavy(unit, bound)}, blk={blk}, dur={dur:.1f}us"
        modules.append(Module(mid, name, _module_type(path, cls, members, ops, costs, facts),
                              list(dict.fromkeys(inputs)), list(dict.fromkeys(outputs)),
                              ", ".join(effects) if effects else "-", hint, list(members),
                              path, unit, bound, dur, blk))
        for n in members:
            for e in succs[n]:
                dst = op_module[e.dst]
                if dst == mid:
                    continue
                mod_succs[mid].add(dst)
                rows.setdefault((mid, dst, e.type), []).append(e)
    module_edges = [ModuleEdge(a, b, t, _edge_reason(t, es, ops))
                    for (a, b, t), es in sorted(rows.items(), key=lambda kv: (
                        _module_rank(kv[0][0]), _module_rank(kv[0][1]), kv[0][2]))]
    return op_module, modules, module_edges, mod_succs


def _heavy(unit: str, bound: str) -> str:
    if unit in ("cube", "vector"):
        return f"{unit}-heavy" if bound == "compute" else f"{unit}, {bound}-bound"
    return {"memory": "memory-copy", "comm": "communication", "host": "host"}.get(unit, unit)


def _edge_reason(etype: str, edges: list, ops: dict[str, Op]) -> str:
    given = next((e.reason for e in edges if e.reason), "")
    if etype == "data":
        names = list(dict.fromkeys(_tensor_name(ops[e.src], e) for e in edges))
        text = ", ".join(names[:3]) + (f" (+{len(names) - 3})" if len(names) > 3 else "")
        return given or f"tensor {text}"
    if given:
        return given
    if etype == "state":
        bufs = sorted({b for e in edges for b in _buffers(ops[e.src])[0]})
        return f"read-after-write on {', '.join(bufs) or 'mutable state'}"
    if etype == "event":
        return f"explicit sync {edges[0].src} -> {edges[0].dst}"
    return f"collectives keep their order: {edges[0].src} before {edges[0].dst}"


def _shared_inputs(order, ops, op_module, preds,
                   user_inputs: set[str] = frozenset()) -> list[SharedInput]:
    """External tensors (named inputs no op produces) read by two or more modules; plus one
    ``in:input`` node, the call's start, over the source modules (an op of theirs has no
    predecessor) when several read unnamed graph inputs, or when several read the call's
    ``user_inputs`` and no one shared input reaches them all: branches that start from
    different inputs (``a(x) + b(y)``, or a layer's ``x`` path against its ``pos`` path)
    are as independent as branches that read one."""
    produced = {t.name for o in ops.values() for t in o.outputs if t.name}
    readers: dict[str, list[str]] = {}
    unnamed_sources: list[str] = []
    input_sources: list[str] = []
    for n in order:
        op = ops[n]
        names = [t.name for t in op.inputs if t.name and t.name not in produced]
        for t in names:
            lst = readers.setdefault(t, [])
            if op_module[n] not in lst:
                lst.append(op_module[n])
        if preds[n]:
            continue
        if not names and op_module[n] not in unnamed_sources:
            unnamed_sources.append(op_module[n])
        if user_inputs.intersection(names) and op_module[n] not in input_sources:
            input_sources.append(op_module[n])
    out = [SharedInput(f"in:{t}", t, ms) for t, ms in readers.items() if len(ms) >= 2]
    if len(unnamed_sources) >= 2:
        out.append(SharedInput("in:input", "input", unnamed_sources))
    elif len(input_sources) >= 2 and not any(set(input_sources) <= set(s.consumers)
                                             for s in out):
        out.append(SharedInput("in:input", "input", input_sources))
    return out


def _op_shared_inputs(order, ops, preds) -> dict[str, list[tuple[str, list[str]]]]:
    """Op-level shared external inputs: op -> [(tensor, all its readers)]."""
    produced = {t.name for o in ops.values() for t in o.outputs if t.name}
    readers: dict[str, list[str]] = defaultdict(list)
    for n in order:
        for t in ops[n].inputs:
            if t.name and t.name not in produced:
                readers[t.name].append(n)
    out: dict[str, list] = defaultdict(list)
    for t, rs in readers.items():
        if len(rs) >= 2:
            for n in rs:
                out[n].append((t, rs))
    return out


# ----------------------------------------------------------------------------- points

class _Reach:
    """Every node's descendants, itself included, as a bitset over a topological order of
    the DAG ``succ`` (``nodes`` in any order, ties keep their order there; ``in_order``: they
    are in a topological order already)."""

    def __init__(self, nodes: list[str], succ: dict[str, list[str]], in_order: bool = False
                 ) -> None:
        self.order = list(nodes) if in_order else _topological(nodes, succ)
        self.index = {n: i for i, n in enumerate(self.order)}
        self.desc: dict[str, int] = {}
        for n in reversed(self.order):
            r = 1 << self.index[n]
            for s in succ.get(n, ()):
                r |= self.desc[s]
            self.desc[n] = r

    def mask(self, nodes: Iterable[str]) -> int:
        m = 0
        for n in nodes:
            m |= 1 << self.index[n]
        return m

    def nodes(self, mask: int) -> list[str]:
        """The nodes of ``mask`` in topological order."""
        out = []
        while mask:
            low = mask & -mask
            out.append(self.order[low.bit_length() - 1])
            mask ^= low
        return out


def _topological(nodes: list[str], succ: dict[str, list[str]]) -> list[str]:
    """``nodes`` (with every successor named in ``succ``) in a topological order, Kahn's
    algorithm taking the earliest-listed ready node first."""
    import heapq

    listed = list(dict.fromkeys([*nodes, *(s for n in nodes for s in succ.get(n, ()))]))
    rank = {n: i for i, n in enumerate(listed)}
    indeg = dict.fromkeys(listed, 0)
    for n in listed:
        for s in set(succ.get(n, ())):
            indeg[s] += 1
    ready = [rank[n] for n in listed if indeg[n] == 0]
    heapq.heapify(ready)
    out: list[str] = []
    while ready:
        n = listed[heapq.heappop(ready)]
        out.append(n)
        for s in set(succ.get(n, ())):
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, rank[s])
    if len(out) != len(listed):
        raise ValueError("find_points needs a DAG: the successors have a cycle")
    return out


def _point_at(reach: _Reach, starts: list[str], keep: int = -1
              ) -> tuple[str, list[list[str]]] | None:
    """The point whose branches start at ``starts`` (the successors of one fork): each
    start that no other start reaches holds the nodes reachable from it and from no other
    start (restricted to ``keep``); the join is the first node every branch reaches
    (``"end"`` when none). None when fewer than two branches are left."""
    starts = list(dict.fromkeys(starts))
    desc = [reach.desc[s] for s in starts]
    heads = [i for i, s in enumerate(starts)
             if not any(j != i and desc[j] >> reach.index[s] & 1 for j in range(len(starts)))]
    if len(heads) < 2:
        return None
    desc = [desc[i] for i in heads]
    branches: list[list[str]] = []
    common = -1
    for i, d in enumerate(desc):
        others = 0
        for j, o in enumerate(desc):
            if j != i:
                others |= o
        own = d & ~others & keep
        if own:
            branches.append(reach.nodes(own))
            common &= d
    if len(branches) < 2:
        return None
    join = reach.nodes(common & -common)[0] if common > 0 else "end"
    return join, branches


def find_points(nodes: list[str], succ: dict[str, list[str]]
                ) -> Iterable[tuple[str, str, list[list[str]]]]:
    """Fork/join structures of a DAG (``nodes``: every node, in any order; ``succ``: each
    node's successors).

    For every node with two or more successors, in a topological order: a successor that
    another successor reaches (fork -> a -> b and fork -> b) starts no branch, it comes
    after a; every other successor starts a branch holding the nodes reachable from it and
    from no other start, so no path connects two branches (a rope op reading both the Q and
    K projections is past their meeting point and belongs to no branch). The join is the
    first node every branch reaches, ``"end"`` when they never meet. Yields
    (fork, join, branches), the branches' nodes in topological order.
    """
    reach = _Reach(nodes, succ)
    yield from _points(reach, succ)


def _points(reach: _Reach, succ: dict[str, list[str]]
            ) -> Iterable[tuple[str, str, list[list[str]]]]:
    """:func:`find_points` on a DAG whose reachability is computed."""
    for f in reach.order:
        outs = list(dict.fromkeys(succ.get(f, ())))
        if len(outs) < 2:
            continue
        found = _point_at(reach, outs)
        if found is not None:
            yield f, found[0], found[1]


class _ModuleJoins:
    """The join of module-level branches, taken on the op DAG: a module is one piece of
    it, yet an op path need not run from every op it reads to every op it feeds, so the
    module DAG can show branches meeting where no op of theirs does."""

    def __init__(self, mod_reach: _Reach, op_reach: _Reach,
                 members_of: dict[str, list[str]]) -> None:
        self.mods, self.ops, self.members_of = mod_reach, op_reach, members_of
        self.op_mask = {m: op_reach.mask(ms) for m, ms in members_of.items()}

    def join(self, branches: list[list[str]]) -> str:
        """The first module, in id order, that every branch reaches on the op DAG (each
        branch some op of it, not necessarily the same op: a module that reads every
        branch's result waits for all of them), ``"end"`` when there is none. Op edges go
        forward in id order, so the first such module is one no other such module
        reaches."""
        reached = []
        below = -1
        for b in branches:
            r = 0
            for mid in b:
                for o in self.members_of[mid]:
                    r |= self.ops.desc[o]
            reached.append(r)
            below &= self.mods.desc[b[0]]  # a branch's first node reaches all of it
        # an op path implies a module path: the module DAG's common descendants bound the
        # search, the op DAG decides
        for m in self.mods.nodes(below if below > 0 else 0):
            mask = self.op_mask.get(m, 0)
            if mask and all(r & mask for r in reached):
                return m
        return "end"


def _summarise(nodes: list[str], weight: dict[str, float], members_of, costs) -> Branch:
    names = [o for n in nodes for o in members_of[n]]
    by_unit: dict[str, float] = defaultdict(float)
    by_bound: dict[str, float] = defaultdict(float)
    for o in names:
        by_unit[costs[o].unit] += costs[o].dur_us
        by_bound[costs[o].bound] += costs[o].dur_us
    unit = max(by_unit, key=by_unit.__getitem__) if by_unit else "vector"
    bound = max(by_bound, key=by_bound.__getitem__) if by_bound else "compute"
    blk = max((costs[o].block_dim for o in names if costs[o].unit == unit), default=0)
    dom = max(names, key=lambda o: costs[o].dur_us) if names else ""
    return Branch(list(nodes), sum(weight[n] for n in nodes), unit, bound, blk, dom)


@dataclass(frozen=True)
class _PointContext:
    """What every point is judged with: the op costs, the ops' side effects, the device."""

    costs: dict[str, OpCost]
    facts: _Facts
    profile: DeviceProfile


@dataclass(frozen=True)
class _BranchNodes:
    """The DAG a point's branches run over: each node's duration (us) and the ops it
    stands for (a module's ops, or at op level the op itself)."""

    weight: dict[str, float]
    members_of: dict[str, list[str]]


def _make_point(pid: str, level: str, fork: str, join: str, branches: list[list[str]],
                nodes: _BranchNodes, ctx: _PointContext, scope: str = ""
                ) -> tuple[ParallelPoint, list[tuple[int, int, str, str]]]:
    """A point with its branches longest first (branch 0 dominates), its overall verdict,
    and the verdict of every branch pair (i, k, verdict, reason)."""
    members_of = nodes.members_of
    summ = sorted((_summarise(b, nodes.weight, members_of, ctx.costs) for b in branches),
                  key=lambda b: -b.dur_us)
    pairs = []
    for i in range(len(summ)):
        for k in range(i + 1, len(summ)):
            ops_i = [members_of[n] for n in summ[i].nodes]
            ops_k = [members_of[n] for n in summ[k].nodes]
            pairs.append((i, k, *_pair_verdict(summ[i], summ[k], ops_i, ops_k, ctx.facts,
                                               ctx.profile, join)))
    # the point is as good as its best pair: one candidate pair is a stream split to try
    rank = {CANDIDATE: 0, PENDING: 1, SERIAL: 2}
    _, _, verdict, reason = min(pairs, key=lambda p: rank[p[2]])
    members = [n for b in summ for n in b.nodes]
    return ParallelPoint(pid, level, fork, join, members, summ, 0, verdict, reason,
                         scope), pairs


def tiny_us(profile: DeviceProfile) -> float:
    """A branch shorter than this cannot pay for a stream switch and its events."""
    return max(5.0, 2.0 * profile.launch_overhead_us)


def _pair_verdict(a: Branch, b: Branch, a_ops: list[list[str]], b_ops: list[list[str]],
                  facts: _Facts, profile: DeviceProfile, join: str) -> tuple[str, str]:
    """The verdict for two branches that have no data path between them."""
    def effects(groups):
        w: set[str] = set()
        r: set[str] = set()
        coll: list[str] = []
        for grp in groups:
            for n in grp:
                if n in facts.writes:
                    w |= facts.writes[n]
                    r |= facts.reads[n]
                if facts.cls[n] == "comm":
                    coll.append(n)
        return w, r, coll

    wa, ra, ca = effects(a_ops)
    wb, rb, cb = effects(b_ops)
    clash = sorted((wa & (wb | rb)) | (wb & ra))
    if clash:
        return SERIAL, f"shared writable state {', '.join(clash)}"
    if ca and cb:
        return SERIAL, f"collective order ({ca[0]} and {cb[0]} must keep their order)"
    small = min(a.dur_us, b.dur_us)
    limit = tiny_us(profile)
    if small < limit:
        return PENDING, f"tiny shapes (< {limit:g} us: the shorter branch takes {small:.1f} us)"
    if a.bound == "memory" and b.bound == "memory" and a.resource != "comm" != b.resource:
        return PENDING, (f"resource conflict (both memory-bound, sharing "
                         f"{profile.memory_bandwidth_gbps:g} GB/s)")
    units = {a.resource, b.resource}
    compute = units <= {"cube", "vector"}
    same_pool = compute and (len(units) == 1 or profile.shared_cores)
    if same_pool:
        cores = profile.unit_cores(a.resource)
        if a.block_dim + b.block_dim > cores:
            what = f"both {a.resource}-bound" if len(units) == 1 else \
                f"{a.resource} and {b.resource} share cores"
            return PENDING, (f"resource conflict ({what}, block dims "
                             f"{a.block_dim}+{b.block_dim} > {cores} cores)")
    return CANDIDATE, f"no data path; results meet at {join}"


def _edge_verdicts(module_edges: list[ModuleEdge], mods: dict[str, Module]) -> list[Verdict]:
    """One ``serial`` verdict per module pair joined by an edge, with its strongest reason."""
    strength = {"state": 0, "collective_order": 1, "event": 2, "data": 3}
    best: dict[tuple[str, str], ModuleEdge] = {}
    for e in module_edges:
        k = (e.src, e.dst)
        if k not in best or strength[e.dependency_type] < strength[best[k].dependency_type]:
            best[k] = e
    return [Verdict(a, b, SERIAL, _serial_reason(e, mods[a], mods[b]))
            for (a, b), e in best.items()]


#: how each kind of module edge reads as the reason of a serial verdict
_SERIAL_REASONS = {"data": "data dependency", "state": "shared writable state",
                   "event": "explicit sync", "collective_order": "collective order"}


def _serial_reason(e: ModuleEdge, ma: Module, mb: Module) -> str:
    """Why two modules joined by ``e`` run in order: a data edge between a module and
    one nested in it is an inner step of the outer one; otherwise the edge's kind."""
    pa, pb = ma.path, mb.path
    if e.dependency_type == "data" and pa and pb and pa != pb and (
            pb.startswith(pa + ".") or pa.startswith(pb + ".")):
        outer = ma if len(pa) < len(pb) else mb
        inner = mb if outer is ma else ma
        return f"inner step of {outer.module_name} ({inner.module_name})"
    kind = _SERIAL_REASONS.get(e.dependency_type, "collective order")
    return f"{kind} ({e.reason})"


__all__ = ["CANDIDATE", "PENDING", "SERIAL", "Branch", "Decomposition", "Module", "ModuleEdge",
           "OpDag", "ParallelPoint", "SharedInput", "Verdict", "decompose", "find_points",
           "is_view", "op_class", "tiny_us"]
