"""Module-level emission: the plan as a patch on the user's own module.

When every branch of a plan is a whole submodule call (the shared expert against the routed
experts, q/k/v projections, Medusa heads, Inception branches), the change an engineer makes
is a few lines around those calls, not a new forward. :func:`analyse` finds the *host*: the
innermost module call whose forward holds every side-stream op and every op reading one, so
its own forward is where the streams fork and join. Its forward's top-level statements
become units of issue:

* a statement whose ops all run on one stream stays as written (its lines, its comments);
* a statement that mixes streams (``return self.shared_experts(x) + self.routed(x)``) gets
  its submodule calls hoisted into variables, each on its own stream, in evaluation order
  (a list comprehension over a ``ModuleList`` is unrolled first); what is left must be on
  one stream;
* which op belongs to which statement and call comes from the trace's own metadata
  (``nn_module_stack``: the call instance; ``stack_trace``: the line in the host's forward).

A plan that cuts inside a submodule call or inside what is left of a statement is refused
with the reason (:class:`NotModuleLevel`); ``parastream emit`` then writes the op-level
forward and says why in the file's header.

:func:`render` writes the patch for a target: a subclass of the host's class whose
``forward`` issues each stream's statements as early as their inputs allow (side work
first), with the target's waits where a statement reads what another stream made, and (for
npugraph_ex / cuda) a fork from the caller's stream, ``record_stream`` where a tensor is
read on a stream other than its maker's, and a join before the return. :func:`render_diff`
writes the same change as a unified diff of the host's source file.
"""

from __future__ import annotations

import ast
import copy
import difflib
import inspect
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any

from ..errors import one_line
from .devices import core_limit, required_apis

MAX_LINES = 60  # a module-level patch an engineer reviews: the acceptance budget
_FRAME = re.compile(r'File "(.+)", line (\d+), in (\S+)')


class NotModuleLevel(ValueError):
    """The plan cannot be written as a patch on one module's forward (the reason)."""


@dataclass
class Stmt:
    """One unit of issue in the host's forward."""

    idx: int
    lines: list[str]             # source text, indented for the forward's body
    stream: int | None           # None: host-only (no device work)
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    ops: list[str] = field(default_factory=list)    # plan ops it issues
    calls: list[str] = field(default_factory=list)  # submodule paths it calls
    barrier: bool = False
    is_return: bool = False
    deps: set[int] = field(default_factory=set)


@dataclass
class Site:
    """Where and how the plan applies at module level."""

    path: str                    # the host module's path in the model ('' = the model)
    module: Any
    cls: type                    # the class whose forward is patched
    file: str
    first_line: int              # the forward's first line in ``file``
    src_lines: list[str]         # the forward's source, as in the file
    fdef: ast.FunctionDef
    stmts: list[Stmt]
    order: list[int]             # issue order of ``stmts``
    tensors: set[str]            # names that hold tensors (or tuples of them) at run time
    tuples: set[str]             # those of them that hold tuples (or lists)
    args: list[str]
    side: tuple[int, ...]
    limits: dict[int, tuple[int, int]]
    op_stream: dict[str, int]

    @property
    def label(self) -> str:
        return f"{self.cls.__qualname__}.forward"


# ----------------------------------------------------------------------------- analysis
def analyse(traced: Any, plan: Any, root: Any, inputs: tuple, graph: Any,
            stream_of: dict[str, int | None], real: set[str],
            vector_per_cube: float = 2.0) -> Site:
    """The host of ``plan`` in ``root`` and its forward cut into statements; raises
    :class:`NotModuleLevel` with the reason when the plan cannot apply there.

    ``stream_of``: each traced node's stream (a view's is its base producer's, None for
    host-only nodes); ``real``: the nodes that launch work (the plan's ops and any real op
    the plan does not name)."""
    nodes = [n for n in traced.graph.nodes if n.op == "call_function"
             and not str(getattr(n.target, "__name__", "")).startswith("_assert")]
    stacks = {n.name: _stack(n) for n in nodes}
    side = [n for n in nodes if stream_of.get(n.name) not in (None, 0)]
    if not side:
        raise NotModuleLevel("the plan runs everything on one stream")
    inside = {n.name for n in side}
    for n in side:
        for u in n.users:
            if u.op == "output":
                inside.add("<output>")
            elif stream_of.get(u.name) not in (None, stream_of[n.name]):
                inside.add(u.name)
    a = plan.assignment
    for e in graph.edges:
        if a.get(e.src, 0) != 0 and a.get(e.dst, 0) != a.get(e.src, 0):
            inside.add(e.dst)
    prefix = _common([stacks.get(x, [("", "")]) for x in inside])
    depth = len(prefix) - 1
    path = prefix[-1][1]
    host = root.get_submodule(path) if path else root
    owner = next((k for k in type(host).__mro__ if "forward" in vars(k)), None)
    if owner is None or owner.__module__.split(".")[0] == "torch":
        raise NotModuleLevel(f"the branches meet in {type(host).__name__} "
                             f"({path or 'the model'}), torch's own module, whose forward "
                             "cannot be patched as written")
    fn = vars(owner)["forward"]
    try:
        src_lines, first = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or ""
    except (OSError, TypeError) as exc:
        raise NotModuleLevel(f"the source of {owner.__qualname__}.forward cannot be read: "
                             f"{one_line(exc)}") from None
    fdef = ast.parse(textwrap.dedent("".join(src_lines))).body[0]
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise NotModuleLevel(f"{owner.__qualname__}.forward is not a plain function")
    for sub in ast.walk(fdef):
        if isinstance(sub, (ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)):
            raise NotModuleLevel(f"{owner.__qualname__}.forward uses {type(sub).__name__}")
    body = [s for s in fdef.body if not _is_docstring(s)]
    for s in body:
        if not isinstance(s, ast.Return) and any(isinstance(x, ast.Return)
                                                 for x in ast.walk(s)):
            raise NotModuleLevel(f"{owner.__qualname__}.forward returns from inside a block "
                                 f"(line {s.lineno + first - 1}): the join needs one return")
    off = first - 1
    spans = [(s.lineno + off, s.end_lineno + off) for s in body]
    last = first + len(src_lines) - 1

    def stmt_of(n: Any) -> int:
        for f, line in _frames(n):
            if f == file and first <= line <= last:
                for i, (lo, hi) in enumerate(spans):
                    if lo <= line <= hi:
                        return i
        raise NotModuleLevel(f"op {n.name} cannot be placed in {owner.__qualname__}.forward "
                             "(no line of it in the trace)")

    # units: each op of the host's forward is in a submodule call or directly in a statement
    calls: dict[str, dict] = {}       # call-instance key -> {path, stmt, ops, streams}
    direct: dict[int, dict[int, str]] = {}   # statement -> {stream: first op}
    for n in nodes:
        st = stacks[n.name]
        if [k for k, _ in st[:depth + 1]] != [k for k, _ in prefix]:
            continue
        s = stream_of.get(n.name) if n.name in real else None
        i = stmt_of(n)
        if len(st) > depth + 1:
            key, p = st[depth + 1]
            c = calls.setdefault(key, {"path": p, "stmt": i, "ops": [], "streams": {}})
            c["ops"].append(n.name)
            if s is not None:
                c["streams"].setdefault(s, n.name)
        elif s is not None:
            direct.setdefault(i, {}).setdefault(s, n.name)
    for key, c in calls.items():
        if len(c["streams"]) > 1:
            where = ", ".join(f"{op} on stream {s}" for s, op in sorted(c["streams"].items()))
            raise NotModuleLevel(f"the plan cuts inside the call of {c['path']} ({where})")
    op_stmt = {}
    for n in nodes:
        st = stacks[n.name]
        if [k for k, _ in st[:depth + 1]] == [k for k, _ in prefix]:
            op_stmt[n.name] = stmt_of(n)
    tensors, tuples, args, tensor_calls = _capture(root, inputs, host, fn, calls, path)
    rel = len(path) + 1 if path else 0
    stmts: list[Stmt] = []
    names = _all_names(fdef) | set(args)
    for i, s in enumerate(body):
        my_calls = {k: c for k, c in calls.items() if c["stmt"] == i}
        dstreams = direct.get(i, {})
        streams = set(dstreams) | {next(iter(c["streams"])) for c in my_calls.values()
                                   if c["streams"]}
        ops = [x for x, j in op_stmt.items() if j == i and x in a]
        if len(streams) <= 1:
            st = Stmt(len(stmts), _text(src_lines, s, body, i, first), next(iter(streams), None))
            _names(s, st)
            st.ops = ops
            st.calls = [c["path"][rel:] for c in my_calls.values()]
            st.barrier = not isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign,
                                            ast.Expr, ast.Return)) or (
                isinstance(s, ast.Expr) and not ops)
            st.is_return = isinstance(s, ast.Return)
            stmts.append(st)
            continue
        if len(dstreams) > 1:
            where = ", ".join(f"{op} on stream {k}" for k, op in sorted(dstreams.items()))
            raise NotModuleLevel(f"the plan cuts inside the statement on line "
                                 f"{s.lineno + off} of {file} ({where})")
        stmts += _split(s, my_calls, rel, host, dstreams, names, len(stmts), tensors,
                        tuples, tensor_calls, i, op_stmt, a, off, file)
    if not stmts or not stmts[-1].is_return:
        raise NotModuleLevel(f"{owner.__qualname__}.forward does not end in a return")
    _deps(stmts, graph, traced, op_stmt_map(stmts))
    order = schedule(stmts)
    side_streams = tuple(sorted({s.stream for s in stmts if s.stream not in (None, 0)}))
    limits = _limits(plan, vector_per_cube)
    return Site(path, host, owner, file, first, src_lines, fdef, stmts, order, tensors, tuples,
                args,
                side_streams, limits, {k: v for k, v in a.items()})


def op_stmt_map(stmts: list[Stmt]) -> dict[str, int]:
    return {op: s.idx for s in stmts for op in s.ops}


def _limits(plan: Any, vpc: float) -> dict[int, tuple[int, int]]:
    out = {}
    for key, spec in (plan.core_limits or {}).items():
        a = int(spec["aicore_num"])
        v = spec.get("vectorcore_num")
        out[int(key)] = (a, int(v) if v is not None else int(round(a * vpc)))
    return out


def _stack(n: Any) -> list[tuple[str, str]]:
    from ..graph.torch_import import _clean_path

    st = [(k, _clean_path(v[0])) for k, v in (n.meta.get("nn_module_stack") or {}).items()]
    if not st or st[0][1] != "":
        st.insert(0, ("<root>", ""))
    return st


def _common(stacks: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    out = []
    for items in zip(*stacks):
        if any(x[0] != items[0][0] for x in items):
            break
        out.append(items[0])
    return out or [("<root>", "")]


def _frames(n: Any) -> list[tuple[str, int]]:
    return [(m.group(1), int(m.group(2)))
            for m in _FRAME.finditer(n.meta.get("stack_trace") or "")]


def _is_real(n: Any, stream_of: dict) -> bool:
    return stream_of.get(n.name) is not None


def _is_docstring(s: ast.stmt) -> bool:
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and \
        isinstance(s.value.value, str)


def _text(src: list[str], s: ast.stmt, body: list[ast.stmt], i: int, first: int) -> list[str]:
    """The statement's lines as written, with the comment lines right above it."""
    lo, hi = s.lineno - 1, s.end_lineno
    start = lo
    prev_end = body[i - 1].end_lineno if i else 0
    while start - 1 >= prev_end and src[start - 1].strip().startswith("#"):
        start -= 1
    lines = [ln.rstrip("\n") for ln in src[start:hi]]
    return _reindent(lines)


def _reindent(lines: list[str]) -> list[str]:
    """Lines indented for a method body (8 spaces), relative indents kept."""
    text = textwrap.dedent("\n".join(lines))
    return [("        " + ln) if ln.strip() else "" for ln in text.split("\n")]


def _names(node: ast.AST, st: Stmt) -> None:
    for x in ast.walk(node):
        if isinstance(x, ast.Name):
            (st.writes if isinstance(x.ctx, (ast.Store, ast.Del)) else st.reads).add(x.id)
        elif isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and \
                x.value.id == "self":
            (st.writes if isinstance(x.ctx, (ast.Store, ast.Del)) else st.reads).add(
                "self." + x.attr)
        if isinstance(x, ast.AugAssign) and isinstance(x.target, ast.Name):
            st.reads.add(x.target.id)


def _all_names(fdef: ast.AST) -> set[str]:
    return {x.id for x in ast.walk(fdef) if isinstance(x, ast.Name)} | \
        {a.arg for a in ast.walk(fdef) if isinstance(a, ast.arg)}


# ----------------------------------------------------------------------------- splitting
def _self_path(func: ast.AST, loop: dict[str, str]) -> str | None:
    """``self.a.b`` -> ``a.b``; ``self.a[0]`` -> ``a.0``; a loop name bound by an unrolled
    comprehension -> its path; else None."""
    parts: list[str] = []
    while True:
        if isinstance(func, ast.Attribute):
            parts.append(func.attr)
            func = func.value
        elif isinstance(func, ast.Subscript) and isinstance(func.slice, ast.Constant) and \
                isinstance(func.slice.value, int):
            parts.append(str(func.slice.value))
            func = func.value
        elif isinstance(func, ast.Name):
            if func.id == "self":
                return ".".join(reversed(parts)) if parts else None
            if func.id in loop:
                return ".".join([loop[func.id]] + list(reversed(parts)))
            return None
        else:
            return None


class _Unroll(ast.NodeTransformer):
    """``[f(m) for m in self.mods]`` -> ``[f(self.mods[0]), f(self.mods[1]), ...]`` when
    ``self.mods`` is a module container of the host."""

    def __init__(self, host: Any) -> None:
        self.host = host

    def visit_ListComp(self, node: ast.ListComp) -> ast.AST:
        import torch

        self.generic_visit(node)
        if len(node.generators) != 1:
            return node
        g = node.generators[0]
        path = _self_path(g.iter, {})
        if g.ifs or g.is_async or not isinstance(g.target, ast.Name) or path is None:
            return node
        try:
            mods = self.host.get_submodule(path)
        except AttributeError:
            return node
        if not isinstance(mods, (torch.nn.ModuleList, torch.nn.Sequential)):
            return node
        elts = []
        for i in range(len(mods)):
            item = ast.Subscript(value=copy.deepcopy(g.iter), slice=ast.Constant(i),
                                 ctx=ast.Load())
            elts.append(_Subst(g.target.id, item).visit(copy.deepcopy(node.elt)))
        return ast.copy_location(ast.List(elts=elts, ctx=ast.Load()), node)


class _Subst(ast.NodeTransformer):
    def __init__(self, name: str, expr: ast.expr) -> None:
        self.name, self.expr = name, expr

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return copy.deepcopy(self.expr) if node.id == self.name else node


_UNSAFE = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.IfExp,
           ast.BoolOp, ast.Await, ast.NamedExpr)


class _Hoist(ast.NodeTransformer):
    """Replace calls of the given submodule paths by fresh names, innermost first (Python's
    evaluation order); the hoisted assignments are in :attr:`out`."""

    def __init__(self, want: dict[str, list[str]], names: set[str]) -> None:
        self.want = {p: list(keys) for p, keys in want.items()}
        self.names = names
        self.out: list[tuple[str, str, ast.Call]] = []   # (var, key, call)
        self.unsafe = 0

    def visit(self, node: ast.AST) -> Any:
        bad = isinstance(node, _UNSAFE)
        self.unsafe += bad
        try:
            return super().visit(node)
        finally:
            self.unsafe -= bad

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        path = _self_path(node.func, {})
        if path in self.want and self.want[path]:
            if self.unsafe:
                raise NotModuleLevel(f"the call of {path} sits inside a lambda, comprehension "
                                     "or conditional expression: it cannot be moved")
            key = self.want[path].pop(0)
            var = _fresh(path.replace(".", "_"), self.names)
            self.out.append((var, key, node))
            return ast.copy_location(ast.Name(id=var, ctx=ast.Load()), node)
        return node


def _fresh(base: str, taken: set[str]) -> str:
    base = base if base.isidentifier() else "out_" + re.sub(r"\W", "_", base)
    name, i = base, 1
    while name in taken or name == "self":
        name = f"{base}_{i}"
        i += 1
    taken.add(name)
    return name


def _split(s: ast.stmt, my_calls: dict, rel: int, host: Any, dstreams: dict, names: set,
           base: int, tensors: set[str], tuples: set[str], tensor_calls: dict[str, bool],
           i: int, op_stmt: dict,
           a: dict, off: int, file: str) -> list[Stmt]:
    """A statement that mixes streams, as its hoisted submodule calls and the rest."""
    node = _Unroll(host).visit(copy.deepcopy(s))
    ast.fix_missing_locations(node)
    want: dict[str, list[str]] = {}
    for key, c in sorted(my_calls.items(), key=lambda kv: _instance(kv[0])):
        want.setdefault(c["path"][rel:], []).append(key)
    h = _Hoist(want, names)
    node = h.visit(node)
    left = [p for p, keys in h.want.items() if keys]
    if left:
        raise NotModuleLevel(f"the call of {left[0]} on line {s.lineno + off} of {file} "
                             "cannot be found in its statement to move it to its stream")
    out = []
    for var, key, call in h.out:
        c = my_calls[key]
        st = Stmt(base + len(out), [f"        {var} = {ast.unparse(call)}"],
                  next(iter(c["streams"]), None))
        _names(call, st)
        st.writes.add(var)
        st.ops = [x for x in c["ops"] if x in a]
        st.calls = [c["path"][rel:]]
        for op in c["ops"]:
            op_stmt[op] = st.idx
        out.append(st)
        if key in tensor_calls:
            tensors.add(var)
            if tensor_calls[key]:
                tuples.add(var)
    rest = Stmt(base + len(out), _reindent(ast.unparse(node).split("\n")),
                next(iter(dstreams), None))
    _names(node, rest)
    rest.ops = [x for x, j in op_stmt.items() if j == i and x in a
                and not any(x in c["ops"] for c in my_calls.values())]
    rest.is_return = isinstance(s, ast.Return)
    for op in rest.ops:
        op_stmt[op] = rest.idx
    out.append(rest)
    return out


def _instance(key: str) -> int:
    m = re.search(r"@(\d+)$", key)
    return int(m.group(1)) if m else 0


# ----------------------------------------------------------------------------- run-time facts
def _capture(root: Any, inputs: tuple, host: Any, fn: Any, calls: dict, path: str
             ) -> tuple[set[str], set[str], list[str], dict[str, bool]]:
    """Run the model once: which of the host forward's local names hold tensors (or tuples
    of tensors) and which submodule calls return them; the forward's parameter names."""
    import torch

    code = fn.__code__
    found: dict[str, Any] = {}
    tensor_calls: dict[str, bool] = {}   # call-instance key -> returns a tuple

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "return" and frame.f_code is code and frame.f_locals.get("self") is host:
            found.update(frame.f_locals)

    rel = len(path) + 1 if path else 0
    hooks = []
    for key, c in calls.items():
        try:
            sub = host.get_submodule(c["path"][rel:])
        except AttributeError:
            continue

        def hook(_m: Any, _i: Any, out: Any, key: str = key) -> None:
            if _is_tensorish(out):
                tensor_calls[key] = not isinstance(out, torch.Tensor)
        hooks.append(sub.register_forward_hook(hook))
    old = sys.getprofile()
    sys.setprofile(prof)
    try:
        with torch.no_grad():
            import copy as _copy

            saved = {k: v.clone() for k, v in root.state_dict(keep_vars=True).items()
                     if isinstance(v, torch.Tensor)}
            root(*_copy.deepcopy(inputs))
            with torch.no_grad():  # the run may have written buffers: put them back
                for k, v in root.state_dict(keep_vars=True).items():
                    if k in saved:
                        v.copy_(saved[k])
    finally:
        sys.setprofile(old)
        for hk in hooks:
            hk.remove()
    args = [p for p in inspect.signature(fn).parameters if p != "self"]
    held = {k: v for k, v in found.items() if k != "self" and _is_tensorish(v)}
    return (set(held), {k for k, v in held.items() if not isinstance(v, torch.Tensor)}, args,
            tensor_calls)


def _is_tensorish(v: Any) -> bool:
    import torch

    if isinstance(v, torch.Tensor):
        return True
    return isinstance(v, (tuple, list)) and bool(v) and all(_is_tensorish(x) for x in v)


# ----------------------------------------------------------------------------- order
def _deps(stmts: list[Stmt], graph: Any, traced: Any, op_stmt: dict[str, int]) -> None:
    """Statement dependencies: names (read after write, write after read or write), the
    graph's edges (data and state), program order on each stream, barriers, the return."""
    last_write: dict[str, int] = {}
    reads_since: dict[str, list[int]] = {}
    last_on: dict[Any, int] = {}
    barrier = -1
    for st in stmts:
        d = st.deps
        for n in st.reads:
            if n in last_write:
                d.add(last_write[n])
        for n in st.writes:
            if n in last_write:
                d.add(last_write[n])
            d.update(reads_since.get(n, []))
        if st.stream is not None and st.stream in last_on:
            d.add(last_on[st.stream])
        if barrier >= 0:
            d.add(barrier)
        if st.barrier or st.is_return:
            d.update(range(st.idx))
            barrier = st.idx
        for n in st.reads:
            reads_since.setdefault(n, []).append(st.idx)
        for n in st.writes:
            last_write[n] = st.idx
            reads_since[n] = []
        if st.stream is not None:
            last_on[st.stream] = st.idx
    by_node = {n.name: n for n in traced.graph.nodes}
    for e in getattr(graph, "edges", []):
        u, v = op_stmt.get(e.src), op_stmt.get(e.dst)
        if u is not None and v is not None and u != v:
            stmts[v].deps.add(u)
    for name, j in op_stmt.items():
        n = by_node.get(name)
        for x in (n.all_input_nodes if n is not None else []):
            i = op_stmt.get(x.name)
            if i is not None and i != j:
                stmts[j].deps.add(i)
    for st in stmts:
        st.deps.discard(st.idx)
        if any(d > st.idx for d in st.deps):  # a hoisted call read later: keep program order
            st.deps = {d for d in st.deps if d < st.idx}


def schedule(stmts: list[Stmt]) -> list[int]:
    """Issue order: a statement as soon as everything it depends on is issued, side-stream
    statements first among those ready (so side work starts before the main path's)."""
    done: set[int] = set()
    order: list[int] = []
    while len(order) < len(stmts):
        ready = [s for s in stmts if s.idx not in done and s.deps <= done]
        if not ready:  # cannot happen: deps point backwards
            ready = [s for s in stmts if s.idx not in done][:1]
        pick = min(ready, key=lambda s: (0 if s.stream not in (None, 0) else 1, s.idx))
        order.append(pick.idx)
        done.add(pick.idx)
    return order


# ----------------------------------------------------------------------------- rendering
@dataclass
class Patch:
    """A rendered module-level patch."""

    source: str
    class_name: str
    waits: int
    records: int
    record_streams: int
    warnings: list[str]
    body: list[str]               # the multi-stream forward's body (for the diff)


def render(site: Site, target: str, *, plan: Any, source: dict, model_name: str,
           device_name: str | None, switch: str, vector_per_cube: float = 2.0) -> Patch:
    """The module-level patch file for ``target``: core limits of ``plan`` (C2) only where
    ``device_name``'s documentation lists them (:mod:`parastream.emit.devices`), with
    ``vector_per_cube`` vector cores per AI core when the plan names only ``aicore_num``."""
    site.limits = _limits(plan, vector_per_cube)
    body, counts, warnings, limits = _body(site, target, device_name)
    cls = site.cls.__qualname__
    name = f"MultiStream{cls.split('.')[-1]}"
    where = os.path.relpath(site.file) if not os.path.relpath(site.file).startswith("..") \
        else site.file
    moved = sorted({c for s in site.stmts if s.stream not in (None, 0) for c in s.calls})
    scale = ", ".join(f"{k} {source[k]}" for k in ("scale", "phase") if source.get(k))
    imp = _import_line(site.cls, [n for n in _module_names(site)
                                  if n != site.cls.__qualname__.split(".")[0]])
    need = required_apis(target, bool(limits))
    per = {k: sorted({c for st in site.stmts if st.stream == k for c in st.calls})
           for k in site.side}
    streams = "; ".join(f"{', '.join(v) or '-'} on stream {k}" for k, v in per.items())
    head = (f"{cls}.forward ({os.path.basename(where)}:{site.first_line}) with plan "
            f"{plan.name!r} of {model_name}" + (f" ({scale})" if scale else "") + f" for "
            f"{target}: {streams}; the rest as written. Off unless {switch}=1.")
    lines = [
        '"""' + _wrap(_doc_safe(head)),
        '"""',
        *(["import functools"] if need else []),
        "import os",
        "",
        "import torch",
        "",
        *imp,
        "",
        f"SWITCH, TARGET, LEVEL, SIDE_STREAMS = {switch!r}, {target!r}, 'module', "
        f"{site.side!r}",
        "ENABLED = os.environ.get(SWITCH, '').strip().lower() in ('1', 'true', 'yes', 'on')",
        *([f"NEEDS = {need!r}"] if need else []),
        *(["_STREAMS = {}  # (api, device) -> side streams, made on first use there"]
          if target != "torchair" else []),
        *_api_block(target, bool(limits)),
        "",
        "",
        f"class {name}({cls.split('.')[-1]}):",
        f'    """{cls} with the plan applied while ENABLED; `patch(model)` converts instances."""',
        "    api = None  # None: the real stream API; parastream.emit.standins for a CPU run",
        "",
        _def_line(site, "forward"),
        "        if not ENABLED and self.api is None:",
        f"            return super().forward({_call_args(site.fdef)})",
        *body,
        "",
        "",
        "def patch(model, api=None):",
        f'    """Every {cls} in model (or model itself) runs as {name}."""',
        f"    for m in [m for m in model.modules() if type(m) is {cls.split('.')[-1]}]:",
        f"        m.__class__, m.api = {name}, api",
        "    return model",
    ]
    src = "\n".join(lines) + "\n"
    return Patch(src, name, counts["waits"], counts["records"], counts["rs"], warnings, body)


def _doc_safe(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', "'''")


def _wrap(text: str) -> str:
    return "\n".join(textwrap.wrap(text, 99, break_on_hyphens=False))


def _module_names(site: Site) -> list[str]:
    """Names the forward reads from its own module's globals (``F``, ``math``, helpers)."""
    import builtins

    g = vars(sys.modules.get(site.cls.__module__, object()))
    local = {x.id for x in ast.walk(site.fdef) if isinstance(x, ast.Name)
             and isinstance(x.ctx, ast.Store)} | set(site.args) | {"self"}
    used = {x.id for x in ast.walk(site.fdef) if isinstance(x, ast.Name)
            and isinstance(x.ctx, ast.Load)}
    return sorted(n for n in used - local if n in g and n not in ("torch",)
                  and not hasattr(builtins, n))


def _import_line(cls: type, extra: list[str] = ()) -> list[str]:
    mod = cls.__module__
    short = cls.__qualname__.split(".")[0]
    if mod.startswith("_parastream_user_") or mod == "__main__":
        path = os.path.abspath(inspect.getsourcefile(cls) or "")
        return ["import importlib.util",
                f"_spec = importlib.util.spec_from_file_location('user_model', {path!r})",
                "_mod = importlib.util.module_from_spec(_spec)",
                "_spec.loader.exec_module(_mod)",
                *[f"{n} = _mod.{n}" for n in [short, *extra]]]
    return [f"from {mod} import {', '.join([short, *extra])}"]


def _api_block(target: str, limits: bool) -> list[str]:
    """``API``: the real stream API when the switch is on at import, checked for every name
    the file calls (one line naming the release that documents a missing one)."""
    if target == "cuda":
        return ["API = torch.cuda if ENABLED else None  # the real stream api, switch on"]
    mod = "torchair" if target == "torchair" else "torch.npu"
    lines = ["if ENABLED:  # the real stream api, checked at import",
             "    import torch_npu  # noqa: F401",
             *(["    import torchair"] if target == "torchair" else [])]
    tail = [f"API = {mod} if ENABLED else None"]
    if required_apis(target, limits):
        lines += ["    for name, release in NEEDS.items():",
                  "        if functools.reduce(lambda o, p: getattr(o, p, None), "
                  "name.split('.'), API) is None:",
                  f"            raise ImportError(f'{mod}.{{name}} is missing: needs {{release}} "
                  "(or unset {SWITCH})')"]
        lines[3:3] = ["    API = " + mod] if False else []
        lines = lines[:3 if target == "torchair" else 2] + lines[3 if target == "torchair"
                                                                   else 2:]
        lines = [ln.replace("name.split('.'), API)", f"name.split('.'), {mod})")
                 for ln in lines]
    return lines + tail


def _def_line(site: Site, name: str) -> str:
    args = ast.unparse(site.fdef.args)
    ret = f" -> {ast.unparse(site.fdef.returns)}" if site.fdef.returns is not None else ""
    return f"    def {name}({args}){ret}:"


def _call_args(fdef: ast.FunctionDef) -> str:
    a = fdef.args
    out = [x.arg for x in (a.posonlyargs + a.args)[1:]]
    if a.vararg:
        out.append("*" + a.vararg.arg)
    out += [f"{x.arg}={x.arg}" for x in a.kwonlyargs]
    if a.kwarg:
        out.append("**" + a.kwarg.arg)
    return ", ".join(out)


def _body(site: Site, target: str, device_name: str | None
          ) -> tuple[list[str], dict[str, int], list[str], dict[int, tuple[int, int]]]:
    """The multi-stream forward's body after the switch test (8-space indent)."""
    out: list[str] = []
    warnings: list[str] = []
    counts = {"waits": 0, "records": 0, "rs": 0}
    facts = core_limit(device_name)
    limits = dict(site.limits)
    if limits and not facts.allows(target):
        warnings.append(f"core limits {limits} not emitted: {facts.source}")
        limits = {}
    stmts = {s.idx: s for s in site.stmts}
    order = site.order
    pos = {i: k for k, i in enumerate(order)}
    first_arg = next((x for x in site.args if x in site.tensors), None)
    ta = target == "torchair"
    api = "tng" if ta else "api"
    out.append(f"        {api} = self.api or API")
    if not ta:
        dev = f"{first_arg}.device" if first_arg else "None"
        out += ["        rs = getattr(api, 'record_stream', torch.Tensor.record_stream)",
                f"        if (key := (id(api), {dev})) not in _STREAMS:  # one set per device",
                f"            with api.device({dev}):",
                "                _STREAMS[key] = {s: api.Stream() for s in SIDE_STREAMS}",
                "        S = {0: api.current_stream(), **_STREAMS[key]}",
                "        fork = S[0].record_event()  # side streams start after the caller's work",
                "        " + "; ".join(f"fork.wait(S[{s}])" for s in site.side)]
        counts["records"] += 1
    # which waits each statement needs, and which statements need an event after them:
    # vector clocks over the issue order (known[t][u]: stream t knows u's work up to there)
    need_event: set[int] = set()
    plan_waits: list[tuple[int, int]] = []   # (from stmt, to stmt)
    snap: dict[int, dict[int, int]] = {}
    # pass 1: find the waits each statement needs
    known = {s: {t: -1 for t in (0,) + site.side} for s in (0,) + site.side}
    if not ta:
        for s in site.side:
            known[s][0] = 0  # the fork (position 0 = before every statement)
    for k, i in enumerate(order):
        st = stmts[i]
        t = 0 if st.is_return else st.stream
        if t is None:
            continue
        for d in sorted(st.deps, key=lambda d: -pos[d]):
            u = stmts[d]
            if u.stream in (None, t):
                continue
            if known[t][u.stream] < pos[d] + 1:
                plan_waits.append((d, i))
                need_event.add(d)
                for x, v in snap[d].items():
                    known[t][x] = max(known[t][x], v)
        known[t][t] = k + 1
        snap[i] = dict(known[t])
    joins = [s for s in site.side if known[0][s] < max((pos[i] + 1 for i in order
                                                          if stmts[i].stream == s), default=0)]
    last_of = {s: max((i for i in order if stmts[i].stream == s), key=lambda i: pos[i])
               for s in site.side}
    if not ta:
        for s in joins:
            need_event.add(last_of[s])
    ev_name = {i: f"e{n}" for n, i in enumerate(sorted(need_event, key=lambda i: pos[i]))}
    waits_before: dict[int, list[int]] = {}
    for d, i in plan_waits:
        waits_before.setdefault(i, []).append(d)
    recorded: set[tuple[str, int]] = set()
    cur: int | None = 0
    ind = "        "

    def open_block(s: int) -> None:
        nonlocal cur, ind
        if s == cur:
            return
        cur = s
        parts = []
        if s != 0:
            parts.append(f'tng.scope.npu_stream_switch("s{s}", 0)' if ta
                         else f"api.stream(S[{s}])")
        if s in limits and target != "cuda":
            parts.append(f"tng.scope.limit_core_num{limits[s]}" if ta
                         else f"api.npugraph_ex.scope.limit_core_num{limits[s]}")
        if parts:
            out.append(f"        with {', '.join(parts)}:")
            ind = "            "
        else:
            ind = "        "

    for i in order:
        st = stmts[i]
        # host-only statements (shapes, names) read no stream: at the top level
        s = 0 if st.stream is None or st.is_return else st.stream
        open_block(s)
        for d in waits_before.get(i, []):
            u = stmts[d]
            if ta:
                line = _wait_tensor(st, u, site, ind)
                out.append(line)
                counts["waits"] += line.lstrip().startswith(("#",)) is False
            else:
                out.append(f"{ind}{ev_name[d]}.wait(S[{s}])  # after {_what(u)}")
                counts["waits"] += 1
        if st.is_return and not ta:
            for j in joins:
                out.append(f"{ind}{ev_name[last_of[j]]}.wait(S[0])  # join stream {j}")
                counts["waits"] += 1
        if not ta and st.stream is not None:
            for n in sorted(st.reads & site.tensors):
                h = _maker(n, i, stmts, order, pos, site)
                if h is None or h == s or (n, s) in recorded or (
                        n in site.args and not _rebound(n, site)):
                    continue  # an argument the forward keeps: freed after the join
                recorded.add((n, s))
                out.append(_rs_line(ind, n, s, f"made on stream {h}", site))
                counts["rs"] += 1
        if st.is_return and not ta:
            for n in sorted(st.reads & site.tensors):
                h = _maker(n, i, stmts, order, pos, site)
                if h not in (None, 0) and (n, 0) not in recorded:
                    recorded.add((n, 0))
                    out.append(_rs_line(ind, n, 0, f"returned; made on stream {h}", site))
                    counts["rs"] += 1
        out += [ind + ln[8:] if ln else "" for ln in st.lines]
        if i in ev_name and not ta:
            out.append(f"{ind}{ev_name[i]} = S[{s}].record_event()")
            counts["records"] += 1
    if not ta and counts["rs"] == 0:
        out = [ln for ln in out if not ln.startswith("        rs = getattr(")]
    if target == "cuda" and site.limits:
        out.insert(1, f"        # plan core limits {site.limits} have no torch.cuda equivalent")
    return out, counts, warnings, limits


def _rebound(name: str, site: Site) -> bool:
    return any(name in st.writes for st in site.stmts)


def _rs_line(ind: str, name: str, s: int, why: str, site: Site) -> str:
    if name in site.tuples:
        return f"{ind}for t in {name}:  # {why}\n{ind}    rs(t, S[{s}])"
    return f"{ind}rs({name}, S[{s}])  # {why}"


def _what(st: Stmt) -> str:
    return ", ".join(st.calls) or (st.ops[0] if st.ops else "statement")


def _maker(name: str, at: int, stmts: dict, order: list[int], pos: dict, site: Site
           ) -> int | None:
    """The stream of the statement that last wrote ``name`` before ``at`` in issue order
    (0 for the forward's arguments, the caller's tensors); None for a host-only value."""
    best = None
    for i in order[:pos[at]]:
        if name in stmts[i].writes:
            best = i
    if best is None:
        return 0 if name in site.args else None
    return stmts[best].stream


def _wait_tensor(st: Stmt, u: Stmt, site: Site, ind: str) -> str:
    made = sorted(u.writes & site.tensors)
    reads = sorted(st.reads & site.tensors)
    pick = [x for x in reads if x in made] or reads
    if not made or not pick:
        return f"{ind}# {_what(u)} -> {_what(st)}: no tensor to npu_wait_tensor on"
    x, dep = pick[0], made[0]
    if any(isinstance(v, tuple) for v in ()):  # pragma: no cover
        pass
    return f"{ind}{x} = tng.scope.npu_wait_tensor({x}, {dep})  # after {_what(u)}"


# ----------------------------------------------------------------------------- diff
def render_diff(site: Site, patch: Patch, target: str, switch: str) -> str:
    """The patch as a unified diff of the host's source file, for ``patch -p1`` run from the
    directory ``emit`` ran in (from the file's own directory when it lies outside it): two
    lines at the top of the forward hand over to a new method right after it, and the
    module-level helpers (their names prefixed ``_PS_``) go at the end of the file."""
    with open(site.file, encoding="utf-8") as fh:
        old = fh.read().splitlines(keepends=True)
    new = list(old)
    first = site.first_line
    body0 = next(s for s in site.fdef.body if not _is_docstring(s))
    at = body0.lineno + first - 2          # index of the first body statement's line
    indent = re.match(r"\s*", old[at]).group(0)
    outer = indent[:-4] if len(indent) >= 4 else ""
    end = site.fdef.end_lineno + first - 1  # last line of the forward (1-based)
    method = ["\n", outer + _def_line(site, "_forward_multi_stream").strip() + "\n",
              f'{indent}"""{site.label} with the plan applied ({target}); generated by '
              'parastream emit."""\n']
    for ln in patch.body:
        ln = _prefixed(ln.replace("self.api or API", "API"))
        method.append((indent + ln[8:] if ln.startswith("        ") else ln) + "\n"
                      if ln else "\n")
    new[end:end] = method
    new[at:at] = [f"{indent}if _PS_ENABLED:\n",
                  f"{indent}    return self._forward_multi_stream({_call_args(site.fdef)})\n"]
    if new and not new[-1].endswith("\n"):
        new[-1] += "\n"
    new += _diff_helpers(patch)
    rel = os.path.relpath(site.file)
    if rel.startswith(".."):
        rel = os.path.basename(site.file)
    return "".join(difflib.unified_diff(old, new, f"a/{rel}", f"b/{rel}"))


_HELPER_NAMES = ("SIDE_STREAMS", "ENABLED", "_STREAMS", "API", "NEEDS", "SWITCH")


def _prefixed(line: str) -> str:
    """The helpers' module-level names prefixed ``_PS_``, so they do not meet the file's."""
    for n in _HELPER_NAMES:
        line = re.sub(rf"(?<![\w.]){n}\b", "_PS_" + n.lstrip("_"), line)
    return line


def _diff_helpers(patch: Patch) -> list[str]:
    src = patch.source.splitlines()
    start = next(i for i, ln in enumerate(src) if ln.startswith("SWITCH, TARGET"))
    stop = next(i for i, ln in enumerate(src) if ln.startswith("class "))
    out = ["\n", "\n", "# ---- multi-stream helpers (parastream emit)\n",
           *(["import functools  # noqa: E402\n"] if "functools." in patch.source else []),
           "import os as _ps_os  # noqa: E402\n", "\n"]
    for ln in src[start:stop]:
        if ln.startswith("SWITCH, TARGET"):
            ln = f"SWITCH, SIDE_STREAMS = {ln.split(' = ', 1)[1].split(', ')[0]}, " + \
                 ln.split(" = ", 1)[1].split(", 'module', ", 1)[1]
        ln = _prefixed(ln.replace("os.environ", "_ps_os.environ"))
        out.append(ln + "\n" if ln else "\n")
    while out and out[-1] == "\n":
        out.pop()
    return out


__all__ = ["MAX_LINES", "NotModuleLevel", "Patch", "Site", "Stmt", "analyse", "render",
           "render_diff", "schedule"]
