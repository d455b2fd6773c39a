"""Module decomposition, dependency table, parallelism verdicts and parallel points.

The direction-level analysis of docs/DOMAIN.md §3, computed from an operator graph:

1. **Modules.** Ops are grouped by their ``module`` path (the nn.Module hierarchy), then cut
   along communication (collectives), state (writes to a buffer such as a KV cache), sync
   (record / wait) and resource (compute vs memory copy vs host) boundaries. A module is
   always *convex* — no path leaves it and comes back — so the module graph is a DAG: each
   op gets a stage number ``t`` that grows by one whenever an edge crosses from one group
   key to another, and ``(key, t)`` is the module. A module made only of views (reshape,
   transpose, ...) is folded into its producer or consumer: never a lone reshape.
2. **Dependency table.** Op edges between modules, one row per (from, to, type), with the
   tensor or reason. A tensor read by two modules is *not* an edge between them: the
   producer is their common upstream node, and an external input read by several modules
   becomes a shared-input node (``in:<tensor>``); the call's start (``in:input``) is one
   when several modules begin from different call inputs (``a(x) + b(y)``).
3. **Parallel points.** A fork node with two or more successors, its join = the immediate
   post-dominator, and its branches = the nodes between them, grouped so that no data path
   connects two branches. The dominating branch is the one with the longest estimated time.
   Found on the module DAG and, inside each module, on its operator DAG.
4. **Verdicts.** ``serial`` (data dependency, shared writable state, collective order, inner
   step of), ``parallel_candidate`` (no data path; results meet only at the join) or
   ``parallel_pending_validation`` (resource conflict, tiny shapes) with the reason.
"""

from __future__ import annotations

from collections import defaultdict
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
    ("expert", "moe.experts"), ("router", "moe.gate"), ("lm_head", "lm_head"),
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
    """One row of the module table (DOMAIN.md §3) plus what the analysis needs."""

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
    the cut rules of DOMAIN.md §3 in one word."""
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
    op_group, groups = _group_ops(order, ops, facts, preds, succs)
    op_module, modules, module_edges, mod_succs = _build_modules(
        ops, costs, facts, op_group, groups, preds, succs)
    mod_by_id = {m.module_id: m for m in modules}
    user_inputs = {k for k, kind in ((g.meta or {}).get("inputs") or {}).items()
                   if kind == "input"}
    shared = _shared_inputs(order, ops, op_module, preds, user_inputs)

    verdicts = _edge_verdicts(module_edges, mod_by_id)
    points: list[ParallelPoint] = []

    # module-level points on the module DAG (with shared-input nodes as forks)
    mod_order = [m.module_id for m in modules]
    node_succ = {mid: sorted(mod_succs[mid], key=_module_rank) for mid in mod_order}
    src_nodes = [s.node for s in shared]
    for s in shared:
        node_succ[s.node] = list(s.consumers)
    weight = {m.module_id: m.dur_us for m in modules}
    members_of = {m.module_id: m.ops for m in modules}
    for fork, join, branches in find_points(src_nodes + mod_order, node_succ):
        pid = f"P{len(points) + 1}"
        point, pairs = _make_point(pid, "module", fork, join, branches, weight, members_of,
                                   costs, facts, profile)
        points.append(point)
        for i, k, v, why in pairs:
            verdicts.append(Verdict(" + ".join(point.branches[i].nodes),
                                    " + ".join(point.branches[k].nodes), v, why, pid))

    # op-level points inside each module, and the op DAGs of candidate modules
    candidates = {n for p in points if p.verdict != SERIAL for n in p.members}
    op_dags: list[OpDag] = []
    op_shared = _op_shared_inputs(order, ops, preds)
    for m in modules:
        inner = set(m.ops)
        sub_succ: dict[str, list[str]] = {}
        outside_in: list[str] = []
        outside_out: list[str] = []
        edges: list[tuple[str, str, str]] = []
        for n in m.ops:
            for e in preds[n]:
                if e.src not in inner and e.src not in sub_succ:
                    sub_succ[e.src] = []
                    outside_in.append(e.src)
                if e.src not in inner:
                    sub_succ[e.src].append(n)
            for tensor, consumers in op_shared.get(n, ()):
                node = f"in:{tensor}"
                if node not in sub_succ:
                    sub_succ[node] = []
                    outside_in.append(node)
                sub_succ[node].append(n)
        for n in m.ops:
            sub_succ.setdefault(n, [])
            for e in succs[n]:
                if e.dst in inner:
                    edges.append((n, e.dst, e.type))
                elif e.dst not in outside_out:
                    outside_out.append(e.dst)
                sub_succ[n].append(e.dst)
        for n in outside_out:
            sub_succ.setdefault(n, [])
        node_order = outside_in + m.ops + [n for n in outside_out if n not in inner]
        mine: list[str] = []
        if len(m.ops) > 1:
            w = {n: costs[n].dur_us for n in m.ops}
            for fork, join, branches in find_points(node_order, sub_succ):
                branches = [[n for n in b if n in inner] for b in branches]
                branches = [b for b in branches if b]
                if len(branches) < 2:
                    continue
                pid = f"P{len(points) + 1}"
                point, _ = _make_point(pid, "op", fork, join, branches, w,
                                       {n: [n] for n in m.ops}, costs, facts, profile,
                                       scope=m.module_id)
                points.append(point)
                mine.append(pid)
        if m.module_id in candidates or mine:
            op_dags.append(OpDag(m.module_id, list(m.ops), edges, outside_in, outside_out,
                                 mine))
    return Decomposition(g.name, profile.name, order, costs, op_module, modules, module_edges,
                         shared, verdicts, points, op_dags)


def _module_rank(mid: str) -> int:
    return int(mid[1:]) if mid[1:].isdigit() else 0


# ----------------------------------------------------------------------------- grouping

def _group_ops(order: list[str], ops: dict[str, Op], facts: _Facts, preds, succs
               ) -> tuple[dict[str, int], list[list[str]]]:
    """Convex groups of ops: same (module path, cut class) and the same stage ``t``; then
    view-only groups folded into a neighbour. Returns op -> group index and the groups
    (in topological order of their first op)."""
    key: dict[str, tuple[str, str]] = {}
    for n in order:
        op = ops[n]
        key[n] = (op.module, facts.cls[n])
    stage: dict[str, int] = {}
    gid_of: dict[tuple[str, str, int], int] = {}
    group_of: dict[str, int] = {}
    groups: list[list[str]] = []
    for n in order:
        t = 0
        k = key[n]
        for e in preds[n]:
            tp = stage[e.src] if key[e.src] == k else stage[e.src] + 1
            if tp > t:
                t = tp
        stage[n] = t
        gk = (k[0], k[1], t)
        gi = gid_of.get(gk)
        if gi is None:
            gi = gid_of[gk] = len(groups)
            groups.append([])
        groups[gi].append(n)
        group_of[n] = gi

    # fold view-only groups into the one group they read from (or feed)
    alive = [True] * len(groups)
    for gi, members in enumerate(groups):
        if not all(facts.view[n] for n in members):
            continue
        inside = set(members)
        up = {group_of[e.src] for n in members for e in preds[n] if e.src not in inside}
        down = {group_of[e.dst] for n in members for e in succs[n] if e.dst not in inside}
        target = next(iter(up)) if len(up) == 1 else next(iter(down)) if len(down) == 1 else None
        if target is None or target == gi:
            continue
        for n in members:
            group_of[n] = target
        groups[target].extend(members)
        groups[gi] = []
        alive[gi] = False
    pos = {n: i for i, n in enumerate(order)}
    kept = [sorted(gm, key=pos.__getitem__) for gm, a in zip(groups, alive) if a and gm]
    kept.sort(key=lambda gm: pos[gm[0]])
    op_group = {n: i for i, gm in enumerate(kept) for n in gm}
    return op_group, kept


def _tensor_name(op: Op, edge=None) -> str:
    if edge is not None and edge.tensor:
        return edge.tensor
    for t in op.outputs:
        if t.name:
            return t.name
    return f"{op.name}.out"


def _module_type(path: str, cls: str, members: list[Op]) -> str:
    if cls in ("comm", "state", "sync"):
        return cls
    if cls == "memory":
        return "copy"
    if cls == "host":
        return "host"
    last = path.rsplit(".", 1)[-1].lower() if path else ""
    for word, kind in _TYPE_RULES:  # the innermost module name decides first
        if word in last:
            return kind
    types = " ".join(o.type.lower() for o in members)
    for word, kind in _TYPE_RULES:
        if word in types:
            return kind
    low = path.lower()
    for word, kind in _TYPE_RULES:
        if word in low:
            return kind
    return "compute"


def _build_modules(ops, costs, facts: _Facts, op_group, groups, preds, succs):
    """Module rows, the op -> module id map and the dependency table from the groups."""
    modules: list[Module] = []
    ids = [f"M{i + 1}" for i in range(len(groups))]
    op_module = {n: ids[gi] for n, gi in op_group.items()}
    name_count: dict[str, int] = defaultdict(int)
    mod_succs: dict[str, set[str]] = defaultdict(set)
    rows: dict[tuple[str, str, str], list] = {}
    for gi, members in enumerate(groups):
        mid = ids[gi]
        mem_ops = [ops[n] for n in members]
        first = mem_ops[0]
        cls = facts.cls[next((n for n in members if not facts.view[n]), members[0])]
        path = first.module
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
        modules.append(Module(mid, name, _module_type(path, cls, mem_ops),
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

def post_dominators(nodes: list[str], succ: dict[str, list[str]]) -> dict[str, str | None]:
    """Immediate post-dominator of every node of a DAG given in topological order; a node
    whose paths only meet at the end maps to ``None`` (the virtual exit)."""
    rank: dict[str, int] = {}
    ipdom: dict[str, str | None] = {}
    exit_rank = -1
    for r, v in enumerate(reversed(nodes)):
        rank[v] = r
        nxt = [s for s in succ.get(v, ()) if s in rank]
        if not nxt:
            ipdom[v] = None
            continue
        cur: str | None = nxt[0]
        for s in nxt[1:]:
            a, b = cur, s
            while a != b:
                ra = rank[a] if a is not None else exit_rank
                rb = rank[b] if b is not None else exit_rank
                if ra > rb:
                    a = ipdom[a]
                else:
                    b = ipdom[b]
            cur = a
            if cur is None:
                break
        ipdom[v] = cur
    return ipdom


def find_points(nodes: list[str], succ: dict[str, list[str]]
                ) -> Iterable[tuple[str, str, list[list[str]]]]:
    """Fork/join structures of a DAG (``nodes`` in topological order).

    For every node with two or more successors: its join is its immediate post-dominator
    (``"end"`` when the branches only meet at the end of the graph); each successor starts
    a branch holding the nodes before the join reachable from that successor *only*. No
    path connects two branches (a node reached from two successors is past a partial join,
    e.g. a rope op reading both the Q and K projections, and belongs to no branch). Yields
    (fork, join, branches) when two or more branches are non-empty.
    """
    ipdom = post_dominators(nodes, succ)
    pos = {n: i for i, n in enumerate(nodes)}
    for f in nodes:
        outs = list(dict.fromkeys(succ.get(f, ())))
        if len(outs) < 2:
            continue
        j = ipdom[f]
        starts = [s for s in outs if s != j]
        if len(starts) < 2:
            continue
        # the region: everything reachable from the fork before the join
        region: set[str] = set()
        stack = list(starts)
        while stack:
            x = stack.pop()
            if x in region or x == j:
                continue
            region.add(x)
            stack.extend(succ.get(x, ()))
        ordered = sorted(region, key=pos.__getitem__)
        reach = _reach(ordered, succ, region, starts)
        # a successor reached through another one (fork -> a -> b and fork -> b) starts no
        # branch of its own: b comes after a
        inner = {s for i, s in enumerate(starts) if reach[s] != 1 << i}
        if inner:
            starts = [s for s in starts if s not in inner]
            if len(starts) < 2:
                continue
            reach = _reach(ordered, succ, region, starts)
        groups: dict[int, list[str]] = {}
        for x in ordered:
            r = reach.get(x, 0)
            if r and r & (r - 1) == 0:  # reached from exactly one start
                groups.setdefault(r, []).append(x)
        branches = [groups[1 << i] for i in range(len(starts)) if (1 << i) in groups]
        if len(branches) >= 2:
            yield f, (j if j is not None else "end"), branches


def _reach(ordered: list[str], succ, region: set[str], starts: list[str]) -> dict[str, int]:
    """Which starts reach each region node (bit i = ``starts[i]``), in topological order."""
    reach: dict[str, int] = {s: 1 << i for i, s in enumerate(starts)}
    for x in ordered:
        rx = reach.get(x, 0)
        if not rx:
            continue
        for y in succ.get(x, ()):
            if y in region:
                reach[y] = reach.get(y, 0) | rx
    return reach


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


def _make_point(pid, level, fork, join, branches, weight, members_of, costs, facts, profile,
                scope: str = "") -> tuple[ParallelPoint, list[tuple[int, int, str, str]]]:
    """A point with its branches longest first (branch 0 dominates), its overall verdict,
    and the verdict of every branch pair (i, k, verdict, reason)."""
    summ = sorted((_summarise(b, weight, members_of, costs) for b in branches),
                  key=lambda b: -b.dur_us)
    pairs = []
    for i in range(len(summ)):
        for k in range(i + 1, len(summ)):
            ops_i = [members_of[n] for n in summ[i].nodes]
            ops_k = [members_of[n] for n in summ[k].nodes]
            pairs.append((i, k, *_pair_verdict(summ[i], summ[k], ops_i, ops_k, facts, profile,
                                               join)))
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
    out = []
    for (a, b), e in best.items():
        pa, pb = mods[a].path, mods[b].path
        if e.dependency_type == "data" and pa and pb and pa != pb and (
                pb.startswith(pa + ".") or pa.startswith(pb + ".")):
            outer = mods[a] if len(pa) < len(pb) else mods[b]
            inner = mods[b] if outer is mods[a] else mods[a]
            reason = f"inner step of {outer.module_name} ({inner.module_name})"
        elif e.dependency_type == "data":
            reason = f"data dependency ({e.reason})"
        elif e.dependency_type == "state":
            reason = f"shared writable state ({e.reason})"
        elif e.dependency_type == "event":
            reason = f"explicit sync ({e.reason})"
        else:
            reason = f"collective order ({e.reason})"
        out.append(Verdict(a, b, SERIAL, reason))
    return out


__all__ = ["CANDIDATE", "PENDING", "SERIAL", "Branch", "Decomposition", "Module", "ModuleEdge",
           "OpDag", "ParallelPoint", "SharedInput", "Verdict", "decompose", "find_points",
           "is_view", "op_class", "post_dominators", "tiny_us"]
