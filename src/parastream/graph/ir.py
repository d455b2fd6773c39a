"""The operator graph IR: ops, typed dependency edges, and its versioned JSON form.

No torch is needed to build, load, save or analyse a graph: a graph exported by another
compiler, or written by hand, plans the same way as one imported from a torch model.

JSON (``parastream.graph/1``, documented in docs/graph-format.md)::

    {"schema": "parastream.graph/1", "name": str, "meta": {...},
     "ops": [{"name", "type", "module", "inputs": [Tensor], "outputs": [Tensor], "flops",
              "bytes_read", "bytes_written", "resource", "side_effects": [str], "meta": {}}],
     "edges": [{"from": op, "to": op, "type": "data"|"state"|"event"|"collective_order",
                "reason": str, "tensor": str | null}]}
"""

from __future__ import annotations

from typing import Any, Iterator

import msgspec

SCHEMA = "parastream.graph/1"

#: dependency types
EDGE_TYPES = ("data", "state", "event", "collective_order")
#: what an op mostly uses: the cube/matrix unit, the vector unit, memory copies (DMA),
#: communication links, or the host CPU
RESOURCES = ("cube", "vector", "memory", "comm", "host")


class Tensor(msgspec.Struct, omit_defaults=True):
    """A tensor an op reads or writes; ``name`` identifies it across ops when known."""

    shape: list[int] = []
    dtype: str = "float32"
    bytes: int = 0
    name: str | None = None


class Op(msgspec.Struct, omit_defaults=True):
    """One operator. ``module`` is the dotted path of the nn.Module it came from
    (``layers.0.attn.q_proj``); ``side_effects`` names buffers it writes
    (``writes:kv_cache``) and collectives it joins (``collective:all_reduce``)."""

    name: str
    type: str
    module: str = ""
    inputs: list[Tensor] = []
    outputs: list[Tensor] = []
    flops: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    resource: str = "vector"
    side_effects: list[str] = []
    meta: dict = {}


class Edge(msgspec.Struct, omit_defaults=True, rename={"src": "from", "dst": "to"}):
    """``dst`` may start only after ``src`` (for the reason ``type`` says)."""

    src: str
    dst: str
    type: str = "data"
    reason: str = ""
    tensor: str | None = None


class Graph(msgspec.Struct, omit_defaults=True):
    """An operator DAG. Op order in ``ops`` is a valid program order (topological)."""

    name: str = "graph"
    ops: list[Op] = []
    edges: list[Edge] = []
    meta: dict = {}
    schema: str = SCHEMA

    # ----------------------------------------------------------------- access
    def op(self, name: str) -> Op:
        return self.index()[name]

    def index(self) -> dict[str, Op]:
        """Ops by name (rebuilt on each call: the struct stays a plain value)."""
        return {o.name: o for o in self.ops}

    def successors(self) -> dict[str, list[Edge]]:
        out: dict[str, list[Edge]] = {o.name: [] for o in self.ops}
        for e in self.edges:
            out.setdefault(e.src, []).append(e)
        return out

    def predecessors(self) -> dict[str, list[Edge]]:
        out: dict[str, list[Edge]] = {o.name: [] for o in self.ops}
        for e in self.edges:
            out.setdefault(e.dst, []).append(e)
        return out

    def predecessor_names(self) -> dict[str, list[str]]:
        """Each op's predecessors' names, one entry per edge (what path searches take)."""
        return {n: [e.src for e in es] for n, es in self.predecessors().items()}

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)


class GraphError(ValueError):
    """A graph that breaks the format's rules (the CLI turns it into exit code 2)."""


#: bounds far past any real op (1e20 FLOPs is minutes on the largest accelerator; 1e12 us
#: is eleven days) that keep a graph's sums finite
MAX_COUNT = 1e20
MAX_DUR_US = 1e12


def is_number(v: Any) -> bool:
    """An int or float read from JSON, not a bool (which Python counts as an int)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_whole(v: Any) -> bool:
    """An int read from JSON, not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def _bad_meta(meta: dict) -> str | None:
    """What is wrong with the op ``meta`` values the cost model reads, or None: a
    measured ``dur_us`` is a number, ``block_dim`` a whole number of cores >= 1,
    ``views`` a count, the texts texts (a hand-edited graph with ``"dur_us": "x"`` got
    a ValueError from deep inside the cost model)."""
    if "dur_us" in meta and meta["dur_us"] is not None and not is_number(meta["dur_us"]):
        return f"dur_us must be a number of microseconds, not {meta['dur_us']!r}"
    if meta.get("block_dim") not in (None, 0) and not (
            is_number(meta["block_dim"]) and meta["block_dim"] == int(meta["block_dim"])
            and meta["block_dim"] >= 1):
        return f"block_dim must be a whole number of cores, not {meta['block_dim']!r}"
    if "views" in meta and not (is_whole(meta["views"]) and meta["views"] >= 0):
        return f"views must be a count, not {meta['views']!r}"
    for key in ("dtype", "memory_format", "head_dims"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            return f"{key} must be a text, not {meta[key]!r}"
    return None


def validate(g: Graph) -> list[str]:
    """Check a graph; return its ops in a topological order.

    Raises :class:`GraphError` for a duplicate op name, a negative (or NaN) FLOP count,
    byte count or ``meta.dur_us``, an edge to an unknown op (dangling), an unknown edge
    type or resource class, a self-loop, or a cycle (naming ops on it).
    """
    names: dict[str, int] = {}
    for i, o in enumerate(g.ops):
        if o.name in names:
            raise GraphError(f"duplicate op name {o.name!r}")
        names[o.name] = i
        dur = o.meta.get("dur_us", 0.0) if isinstance(o.meta, dict) else 0.0
        if not (o.flops >= 0 and o.bytes_read >= 0 and o.bytes_written >= 0
                and all(t.bytes >= 0 for t in (*o.inputs, *o.outputs))
                and (not isinstance(dur, (int, float)) or dur >= 0)):
            # a negative cost makes a critical path longer than the work (nonsense bounds)
            raise GraphError(f"op {o.name!r}: flops, bytes and meta.dur_us must not be "
                             "negative")
        if not (o.flops <= MAX_COUNT and o.bytes_read <= MAX_COUNT
                and o.bytes_written <= MAX_COUNT
                and all(t.bytes <= MAX_COUNT for t in (*o.inputs, *o.outputs))
                and (not isinstance(dur, (int, float)) or dur <= MAX_DUR_US)):
            # finite but huge values overflow the sums to inf: walls of inf, speedups of nan
            raise GraphError(f"op {o.name!r}: flops and bytes must be at most {MAX_COUNT:.0e}, "
                             f"meta.dur_us at most {MAX_DUR_US:.0e} us")
        if o.resource not in RESOURCES:
            raise GraphError(f"op {o.name!r}: unknown resource {o.resource!r} "
                             f"(expected one of {', '.join(RESOURCES)})")
        bad = _bad_meta(o.meta)
        if bad:
            raise GraphError(f"op {o.name!r}: meta.{bad}")
    indeg = [0] * len(g.ops)
    succ: list[list[int]] = [[] for _ in g.ops]
    for e in g.edges:
        if e.type not in EDGE_TYPES:
            raise GraphError(f"edge {e.src!r} -> {e.dst!r}: unknown dependency type {e.type!r} "
                             f"(expected one of {', '.join(EDGE_TYPES)})")
        for end in (e.src, e.dst):
            if end not in names:
                raise GraphError(f"edge {e.src!r} -> {e.dst!r}: dangling, no op named {end!r}")
        if e.src == e.dst:
            raise GraphError(f"edge {e.src!r} -> {e.dst!r}: an op cannot depend on itself")
        succ[names[e.src]].append(names[e.dst])
        indeg[names[e.dst]] += 1
    # Kahn's algorithm, keeping program order among ready ops
    import heapq

    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != len(g.ops):
        stuck = [g.ops[i].name for i, d in enumerate(indeg) if d > 0]
        raise GraphError(f"the graph has a cycle through {', '.join(stuck[:6])}"
                         + (" ..." if len(stuck) > 6 else ""))
    return [g.ops[i].name for i in order]


def dumps(g: Graph) -> bytes:
    """The graph as ``parastream.graph/1`` JSON (indented; the schema key always first)."""
    body = msgspec.to_builtins(g)
    body.pop("schema", None)
    return msgspec.json.format(msgspec.json.encode({"schema": SCHEMA, **body}), indent=1)


def loads(data: bytes | str) -> Graph:
    """Parse and validate graph JSON; GraphError with the reason when it is not one."""
    try:
        g = msgspec.json.decode(data, type=Graph)
    except msgspec.ValidationError as exc:
        raise GraphError(f"not a parastream graph: {exc}") from None
    except msgspec.DecodeError as exc:
        raise GraphError(f"invalid JSON: {exc}") from None
    if g.schema != SCHEMA:
        raise GraphError(f"unsupported schema {g.schema!r} (this parastream reads {SCHEMA})")
    validate(g)
    return g
