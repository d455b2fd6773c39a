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
from .devices import core_limit, has_core_limit_api, required_apis

MAX_LINES = 60  # a module-level patch an engineer reviews: the acceptance budget
_ROOT = ("<root>", "")  # the root call's entry in a module-call stack
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
    line: int = 0                # the statement's first line in the host's file


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
@dataclass
class _Forward:
    """The host's forward as written: its class, function, file, first line, source lines,
    syntax tree and top-level statements (docstring left out)."""

    owner: type
    fn: Any
    file: str
    first: int
    src_lines: list[str]
    fdef: ast.FunctionDef
    body: list[ast.stmt]

    @property
    def off(self) -> int:
        """Line offset from the parsed forward's lines to the file's."""
        return self.first - 1

    def stmt_of(self, n: Any) -> int:
        """The top-level statement of the forward that issued traced node ``n`` (from the
        node's stack trace)."""
        last = self.first + len(self.src_lines) - 1
        spans = [(s.lineno + self.off, s.end_lineno + self.off) for s in self.body]
        for f, line in _frames(n):
            if f != self.file or not self.first <= line <= last:
                continue
            for i, (lo, hi) in enumerate(spans):
                if lo <= line <= hi:
                    return i
        raise NotModuleLevel(f"op {n.name} cannot be placed in {self.owner.__qualname__}"
                             ".forward (no line of it in the trace)")


@dataclass
class _Cut:
    """What cutting the host's statements into units of issue reads and updates."""

    fwd: _Forward
    host: Any
    rel: int                     # length of the host's path prefix in a submodule path
    calls: dict[str, dict]       # call-instance key -> {path, stmt, ops, streams}
    direct: dict[int, dict[int, str]]   # statement -> {stream: first op issued in it}
    names: set[str]              # names the forward uses (fresh names avoid them)
    tensors: set[str]
    tuples: set[str]
    tensor_calls: dict[str, bool]   # call-instance key -> returns a tuple of tensors
    op_stmt: dict[str, int]      # op -> the unit that issues it
    assignment: dict[str, int]   # the plan's op -> stream


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
    prefix = _host_prefix(nodes, stacks, stream_of, plan, graph)
    path = prefix[-1][1]
    host = root.get_submodule(path) if path else root
    fwd = _host_forward(host, path)
    calls, direct = _units(nodes, stacks, prefix, stream_of, real, fwd)
    op_stmt = {n.name: fwd.stmt_of(n) for n in nodes if _under(stacks[n.name], prefix)}
    tensors, tuples, args, tensor_calls = _capture(root, inputs, host, fwd.fn, calls, path)
    cut = _Cut(fwd, host, len(path) + 1 if path else 0, calls, direct,
               _all_names(fwd.fdef) | set(args), tensors, tuples, tensor_calls, op_stmt,
               plan.assignment)
    stmts = _statements(cut)
    if not stmts or not stmts[-1].is_return:
        raise NotModuleLevel(f"{fwd.owner.__qualname__}.forward does not end in a return")
    _deps(stmts, graph, traced, op_stmt_map(stmts))
    order = schedule(stmts)
    side_streams = tuple(sorted({s.stream for s in stmts if s.stream not in (None, 0)}))
    if not side_streams:  # the side ops were found in no statement: nothing would move
        raise NotModuleLevel(f"no statement of {fwd.owner.__qualname__}.forward runs on a "
                             "side stream")
    limits = _limits(plan, vector_per_cube)
    return Site(path, host, fwd.owner, fwd.file, fwd.first, fwd.src_lines, fwd.fdef, stmts,
                order, tensors, tuples, args, side_streams, limits,
                {k: v for k, v in plan.assignment.items()})


def _host_prefix(nodes: list[Any], stacks: dict[str, list[tuple[str, str]]],
                 stream_of: dict[str, int | None], plan: Any, graph: Any
                 ) -> list[tuple[str, str]]:
    """The module-call stack every side-stream op and every op reading one share: its last
    entry is the host, the innermost call whose forward forks and joins the streams."""
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
    return _common([stacks.get(x, [_ROOT]) for x in inside])  # the output: the root call


def _host_forward(host: Any, path: str) -> _Forward:
    """The forward ``host``'s class defines, read and parsed; refused when it is torch's
    own, has no readable source, or is not a plain function with one return at its end."""
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
    return _Forward(owner, fn, file, first, src_lines, fdef, body)


def _under(stack: list[tuple[str, str]], prefix: list[tuple[str, str]]) -> bool:
    """Whether a node's module-call stack runs through the host's call."""
    return [k for k, _ in stack[:len(prefix)]] == [k for k, _ in prefix]


def _units(nodes: list[Any], stacks: dict[str, list[tuple[str, str]]],
           prefix: list[tuple[str, str]], stream_of: dict[str, int | None], real: set[str],
           fwd: _Forward) -> tuple[dict[str, dict], dict[int, dict[int, str]]]:
    """Each op of the host's forward is in a submodule call or directly in a statement:
    the calls (``{key: {path, stmt, ops, streams}}``) and the streams each statement's
    direct ops run on; refused when the plan puts one call's ops on two streams."""
    depth = len(prefix) - 1
    calls: dict[str, dict] = {}
    direct: dict[int, dict[int, str]] = {}
    for n in nodes:
        st = stacks[n.name]
        if not _under(st, prefix):
            continue
        s = stream_of.get(n.name) if n.name in real else None
        i = fwd.stmt_of(n)
        if len(st) > depth + 1:
            key, p = st[depth + 1]
            c = calls.setdefault(key, {"path": p, "stmt": i, "ops": [], "streams": {}})
            c["ops"].append(n.name)
            if s is not None:
                c["streams"].setdefault(s, n.name)
        elif s is not None:
            direct.setdefault(i, {}).setdefault(s, n.name)
    for c in calls.values():
        if len(c["streams"]) > 1:
            where = ", ".join(f"{op} on stream {s}" for s, op in sorted(c["streams"].items()))
            raise NotModuleLevel(f"the plan cuts inside the call of {c['path']} ({where})")
    return calls, direct


def _statements(cut: _Cut) -> list[Stmt]:
    """The forward's statements as units of issue: one on a single stream as written, one
    that mixes streams split into its hoisted submodule calls and the rest."""
    fwd = cut.fwd
    stmts: list[Stmt] = []
    for i, s in enumerate(fwd.body):
        my_calls = {k: c for k, c in cut.calls.items() if c["stmt"] == i}
        dstreams = cut.direct.get(i, {})
        streams = set(dstreams) | {next(iter(c["streams"])) for c in my_calls.values()
                                   if c["streams"]}
        if len(streams) <= 1:
            stmts.append(_whole(cut, i, my_calls, next(iter(streams), None), len(stmts)))
            continue
        if len(dstreams) > 1:
            where = ", ".join(f"{op} on stream {k}" for k, op in sorted(dstreams.items()))
            raise NotModuleLevel(f"the plan cuts inside the statement on line "
                                 f"{s.lineno + fwd.off} of {fwd.file} ({where})")
        stmts += _split(cut, i, my_calls, dstreams, len(stmts))
    return stmts


def _whole(cut: _Cut, i: int, my_calls: dict, stream: int | None, idx: int) -> Stmt:
    """Statement ``i`` of the forward, on one stream, as written."""
    fwd = cut.fwd
    s = fwd.body[i]
    st = Stmt(idx, _text(fwd.src_lines, s, fwd.body, i, fwd.first), stream,
              line=s.lineno + fwd.off)
    _names(s, st)
    st.ops = [x for x, j in cut.op_stmt.items() if j == i and x in cut.assignment]
    st.calls = [c["path"][cut.rel:] for c in my_calls.values()]
    st.barrier = not isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign,
                                    ast.Expr, ast.Return)) or (
        isinstance(s, ast.Expr) and not st.ops)
    st.is_return = isinstance(s, ast.Return)
    return st


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
    """A node's module-call stack, outermost first, under one root entry (:data:`_ROOT`,
    whatever key the tracer gave the root call, so every node's stack starts alike)."""
    from ..graph.records import clean_path

    st = [(k, clean_path(v[0])) for k, v in (n.meta.get("nn_module_stack") or {}).items()]
    if st and st[0][1] == "":
        st = st[1:]
    return [_ROOT, *st]


def _common(stacks: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    out = []
    for items in zip(*stacks):
        if any(x[0] != items[0][0] for x in items):
            break
        out.append(items[0])
    return out or [_ROOT]


def _frames(n: Any) -> list[tuple[str, int]]:
    return [(m.group(1), int(m.group(2)))
            for m in _FRAME.finditer(n.meta.get("stack_trace") or "")]


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
    while isinstance(func, (ast.Attribute, ast.Subscript)):
        step = _path_step(func)
        if step is None:
            return None
        parts.append(step)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    if func.id == "self":
        return ".".join(reversed(parts)) if parts else None
    if func.id in loop:
        return ".".join([loop[func.id]] + list(reversed(parts)))
    return None


def _path_step(node: ast.Attribute | ast.Subscript) -> str | None:
    """One step of a submodule path: an attribute's name, or an integer index."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
        return str(node.slice.value)
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


def _split(cut: _Cut, i: int, my_calls: dict, dstreams: dict, base: int) -> list[Stmt]:
    """Statement ``i``, which mixes streams, as its hoisted submodule calls (each its own
    unit, numbered from ``base``) and the rest."""
    s = cut.fwd.body[i]
    node = _Unroll(cut.host).visit(copy.deepcopy(s))
    ast.fix_missing_locations(node)
    want: dict[str, list[str]] = {}
    for key, c in sorted(my_calls.items(), key=lambda kv: _instance(kv[0])):
        want.setdefault(c["path"][cut.rel:], []).append(key)
    h = _Hoist(want, cut.names)
    node = h.visit(node)
    left = [p for p, keys in h.want.items() if keys]
    if left:
        raise NotModuleLevel(f"the call of {left[0]} on line {s.lineno + cut.fwd.off} of "
                             f"{cut.fwd.file} cannot be found in its statement to move it to "
                             "its stream")
    out = [_hoisted(cut, my_calls[key], key, var, call, base + k)
           for k, (var, key, call) in enumerate(h.out)]
    rest = Stmt(base + len(out), _reindent(ast.unparse(node).split("\n")),
                next(iter(dstreams), None), line=s.lineno + cut.fwd.off)
    _names(node, rest)
    rest.ops = [x for x, j in cut.op_stmt.items() if j == i and x in cut.assignment
                and not any(x in c["ops"] for c in my_calls.values())]
    rest.is_return = isinstance(s, ast.Return)
    for op in rest.ops:
        cut.op_stmt[op] = rest.idx
    out.append(rest)
    return out


def _hoisted(cut: _Cut, c: dict, key: str, var: str, call: ast.Call, idx: int) -> Stmt:
    """A submodule call hoisted out of its statement into ``var``: a unit of its own on the
    call's stream."""
    st = Stmt(idx, [f"        {var} = {ast.unparse(call)}"], next(iter(c["streams"]), None))
    _names(call, st)
    st.writes.add(var)
    st.ops = [x for x in c["ops"] if x in cut.assignment]
    st.calls = [c["path"][cut.rel:]]
    for op in c["ops"]:
        cut.op_stmt[op] = st.idx
    if key in cut.tensor_calls:
        cut.tensors.add(var)
        if cut.tensor_calls[key]:
            cut.tuples.add(var)
    return st


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

    hooks = _call_hooks(host, calls, len(path) + 1 if path else 0, tensor_calls)
    old = sys.getprofile()
    sys.setprofile(prof)
    try:
        _run_once(root, inputs)
    finally:
        sys.setprofile(old)
        for hk in hooks:
            hk.remove()
    args = [p for p in inspect.signature(fn).parameters if p != "self"]
    held = {k: v for k, v in found.items() if k != "self" and _is_tensorish(v)}
    return (set(held), {k for k, v in held.items() if not isinstance(v, torch.Tensor)}, args,
            tensor_calls)


def _call_hooks(host: Any, calls: dict, rel: int, tensor_calls: dict[str, bool]) -> list[Any]:
    """Forward hooks on the host's called submodules noting, per call instance, whether it
    returns a tensor (False) or a tuple of them (True) in ``tensor_calls``."""
    import torch

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
    return hooks


def _run_once(root: Any, inputs: tuple) -> None:
    """One forward of ``root`` on a copy of ``inputs`` without autograd, its buffers put
    back afterwards (the run may write them)."""
    import torch

    with torch.no_grad():
        saved = {k: v.clone() for k, v in root.state_dict(keep_vars=True).items()
                 if isinstance(v, torch.Tensor)}
        root(*copy.deepcopy(inputs))
        for k, v in root.state_dict(keep_vars=True).items():
            if k in saved:
                v.copy_(saved[k])


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


#: issue preference of a ready statement by its stream (a side stream: 0)
_ISSUE_RANK = {None: 1, 0: 2}


def schedule(stmts: list[Stmt]) -> list[int]:
    """Issue order: a statement as soon as everything it depends on is issued; among those
    ready, side-stream statements first, then host-only ones (shapes, names: they may be
    what side work waits for), the origin stream's last (so side work starts before the
    main path's dominator)."""
    done: set[int] = set()
    order: list[int] = []
    while len(order) < len(stmts):
        ready = [s for s in stmts if s.idx not in done and s.deps <= done]
        if not ready:  # cannot happen: deps point backwards
            ready = [s for s in stmts if s.idx not in done][:1]
        pick = min(ready, key=lambda s: (_ISSUE_RANK.get(s.stream, 0), s.idx))
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
    scale = ", ".join(f"{k} {source[k]}" for k in ("scale", "phase") if source.get(k))
    imp = _import_line(site.cls, [n for n in _module_names(site)
                                  if n != site.cls.__qualname__.split(".")[0]])
    need = required_apis(target, bool(limits))
    streams = "; ".join(f"{_on_stream(site, k)} on stream {k}" for k in site.side)
    head = (f"{cls}.forward ({os.path.basename(where)}:{site.first_line}) with plan "
            f"{plan.name!r} of {model_name}" + (f" ({scale})" if scale else "") + f" for "
            f"{target}: {streams}; the rest as written. Off unless {switch}=1.")
    lines = [
        '"""' + _wrap(_doc_safe(head) + '"""'),
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


def _on_stream(site: Site, k: int) -> str:
    """What runs on side stream ``k``, as the patch's docstring names it: its submodule
    calls, else the lines of its statements in the host's file."""
    calls = sorted({c for st in site.stmts if st.stream == k for c in st.calls})
    if calls:
        return ", ".join(calls)
    lines = sorted({st.line for st in site.stmts if st.stream == k})
    return ("lines " if len(lines) > 1 else "line ") + ", ".join(map(str, lines))


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
        # a model file: the module already imported from it (whatever its name: patch()
        # converts instances of that module's class), else the file loaded here
        path = os.path.abspath(inspect.getsourcefile(cls) or "")
        return ["import importlib.util",
                "import sys",
                f"_path = {path!r}  # your model's file (import it before this one)",
                "_mod = next((m for m in list(sys.modules.values())",
                "             if os.path.abspath(getattr(m, '__file__', None) or '') == _path), None)",
                "if _mod is None:",
                "    _spec = importlib.util.spec_from_file_location('user_model', _path)",
                "    _mod = importlib.util.module_from_spec(_spec)",
                "    _spec.loader.exec_module(_mod)",
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
    """The multi-stream forward's body after the switch test (8-space indent), its counts
    of waits, records and record_stream calls, warnings, and the core limits emitted."""
    warnings: list[str] = []
    facts = core_limit(device_name)
    limits = dict(site.limits)
    if limits and not facts.allows(target):
        warnings.append(f"core limits {limits} not emitted: {facts.source}")
        limits = {}
    w = _BodyWriter(site, target, limits)
    w.prelude()
    sync = _sync(site, w.stmts, w.pos, w.ta)
    for i in site.order:
        w.statement(i, sync)
    out = w.out
    if not w.ta and w.counts["rs"] == 0:
        out = [ln for ln in out if not ln.startswith("        rs = getattr(")]
    if site.limits and not has_core_limit_api(target):
        out.insert(1, f"        # plan core limits {site.limits} have no torch.cuda equivalent")
    return out, w.counts, warnings, limits


@dataclass
class _Sync:
    """Where the patch synchronises its streams: the statements each statement waits for,
    the event recorded after a statement, the side streams joined before the return and
    each one's last statement."""

    waits_before: dict[int, list[int]]
    ev_name: dict[int, str]
    joins: list[int]
    last_of: dict[int, int]


def _sync(site: Site, stmts: dict[int, Stmt], pos: dict[int, int], ta: bool) -> _Sync:
    """The waits and events the issue order needs: vector clocks over it (``known[t][u]``:
    stream t knows u's work up to there); a statement waits for a dependency on another
    stream its stream does not know of yet."""
    order = site.order
    need_event: set[int] = set()
    plan_waits: list[tuple[int, int]] = []   # (from stmt, to stmt)
    snap: dict[int, dict[int, int]] = {}
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
            if u.stream in (None, t) or known[t][u.stream] >= pos[d] + 1:
                continue
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
        need_event.update(last_of[s] for s in joins)
    ev_name = {i: f"e{n}" for n, i in enumerate(sorted(need_event, key=lambda i: pos[i]))}
    waits_before: dict[int, list[int]] = {}
    for d, i in plan_waits:
        waits_before.setdefault(i, []).append(d)
    return _Sync(waits_before, ev_name, joins, last_of)


class _BodyWriter:
    """The multi-stream forward's body being written: its lines, the open stream block and
    its indent, the counts of waits, records and record_stream calls."""

    def __init__(self, site: Site, target: str, limits: dict[int, tuple[int, int]]) -> None:
        self.site, self.target, self.limits = site, target, limits
        self.ta = target == "torchair"
        self.out: list[str] = []
        self.counts = {"waits": 0, "records": 0, "rs": 0}
        self.recorded: set[tuple[str, int]] = set()
        self.cur: int | None = 0
        self.ind = "        "
        self.stmts = {s.idx: s for s in site.stmts}
        self.pos = {i: k for k, i in enumerate(site.order)}

    def prelude(self) -> None:
        """The stream API; for npugraph_ex / cuda the side streams of the first input's
        device (one set per device) and the fork from the caller's stream."""
        site = self.site
        api = "tng" if self.ta else "api"
        self.out.append(f"        {api} = self.api or API")
        if self.ta:
            return
        first_arg = next((x for x in site.args if x in site.tensors), None)
        dev = f"{first_arg}.device" if first_arg else "None"
        self.out += [
            "        rs = getattr(api, 'record_stream', torch.Tensor.record_stream)",
            f"        if (key := (id(api), {dev})) not in _STREAMS:  # one set per device",
            f"            with api.device({dev}):",
            "                _STREAMS[key] = {s: api.Stream() for s in SIDE_STREAMS}",
            "        S = {0: api.current_stream(), **_STREAMS[key]}",
            "        fork = S[0].record_event()  # side streams start after the caller's work",
            "        " + "; ".join(f"fork.wait(S[{s}])" for s in site.side)]
        self.counts["records"] += 1

    def open_block(self, s: int) -> None:
        """Open stream ``s``'s block (with its core limit) unless it is the open one."""
        if s == self.cur:
            return
        self.cur = s
        parts = []
        if s != 0:
            parts.append(f'tng.scope.npu_stream_switch("s{s}", 0)' if self.ta
                         else f"api.stream(S[{s}])")
        if s in self.limits:  # only limits the device documents for the target
            parts.append(f"tng.scope.limit_core_num{self.limits[s]}" if self.ta
                         else f"api.npugraph_ex.scope.limit_core_num{self.limits[s]}")
        if parts:
            self.out.append(f"        with {', '.join(parts)}:")
            self.ind = "            "
        else:
            self.ind = "        "

    def statement(self, i: int, sync: _Sync) -> None:
        """Statement ``i`` in its stream's block: its waits, the joins before the return,
        record_stream of what it reads from another stream, its lines, its event."""
        st = self.stmts[i]
        # host-only statements (shapes, names) read no stream: at the top level
        s = 0 if st.stream is None or st.is_return else st.stream
        self.open_block(s)
        for d in sync.waits_before.get(i, []):
            self.wait(st, d, s, sync)
        if st.is_return and not self.ta:
            for j in sync.joins:
                self.out.append(f"{self.ind}{sync.ev_name[sync.last_of[j]]}.wait(S[0])  "
                                f"# join stream {j}")
                self.counts["waits"] += 1
        if not self.ta and st.stream is not None:
            self.record_reads(st, i, s)
        if st.is_return and not self.ta:
            self.record_returned(st, i)
        self.out += [self.ind + ln[8:] if ln else "" for ln in st.lines]
        if i in sync.ev_name and not self.ta:
            self.out.append(f"{self.ind}{sync.ev_name[i]} = S[{s}].record_event()")
            self.counts["records"] += 1

    def wait(self, st: Stmt, d: int, s: int, sync: _Sync) -> None:
        """Statement ``st`` on stream ``s`` waits for statement ``d``."""
        u = self.stmts[d]
        if self.ta:
            line = _wait_tensor(st, u, self.site, self.ind)
            self.out.append(line)
            self.counts["waits"] += line.lstrip().startswith(("#",)) is False
        else:
            self.out.append(f"{self.ind}{sync.ev_name[d]}.wait(S[{s}])  # after {_what(u)}")
            self.counts["waits"] += 1

    def record_reads(self, st: Stmt, i: int, s: int) -> None:
        """record_stream to ``s`` of each tensor ``st`` reads that another stream made
        (not an argument the forward keeps: that is freed after the join)."""
        site = self.site
        for n in sorted(st.reads & site.tensors):
            h = _maker(n, i, self.stmts, site.order, self.pos, site)
            if h is None or h == s or (n, s) in self.recorded or (
                    n in site.args and not _rebound(n, site)):
                continue
            self.recorded.add((n, s))
            self.out.append(_rs_line(self.ind, n, s, f"made on stream {h}", site))
            self.counts["rs"] += 1

    def record_returned(self, st: Stmt, i: int) -> None:
        """record_stream to the origin stream of each returned tensor a side stream made."""
        site = self.site
        for n in sorted(st.reads & site.tensors):
            h = _maker(n, i, self.stmts, site.order, self.pos, site)
            if h not in (None, 0) and (n, 0) not in self.recorded:
                self.recorded.add((n, 0))
                self.out.append(_rs_line(self.ind, n, 0, f"returned; made on stream {h}",
                                         site))
                self.counts["rs"] += 1


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
    if dep in site.tuples:  # a tuple of tensors: its first tensor stands for the call
        dep += "[0]"
    if x in site.tuples:    # every tensor of the tuple read is waited (a tuple rebound)
        return (f"{ind}{x} = type({x})(tng.scope.npu_wait_tensor(t, {dep}) for t in {x})  "
                f"# after {_what(u)}")
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
    for ln in "\n".join(patch.body).split("\n"):  # an entry may hold two lines (a loop)
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
