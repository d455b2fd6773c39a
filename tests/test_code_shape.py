"""The source's shape limits: functions a reader can hold in mind, and torch kept to the
layers that execute or import models.

Every function and method under ``src/parastream``: at most 80 lines (``def`` to its last
line, decorators excluded, docstring included), block nesting at most 4 deep (``if``,
``for``, ``while``, ``with``, ``try``, ``match`` inside its body; a nested ``def`` or
``class`` is measured on its own), at most 8 parameters (``self``/``cls`` not counted,
``*args`` and ``**kwargs`` one each).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "parastream"
MAX_LINES, MAX_DEPTH, MAX_PARAMS = 80, 4, 8
BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
          ast.Match)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
try:  # Python 3.11+
    BLOCKS += (ast.TryStar,)
except AttributeError:  # pragma: no cover - 3.10
    pass

#: packages that never import torch at module level (the analyzer, planner and simulator
#: work on a machine without torch)
TORCH_FREE = ("timeline", "device", "graph", "plan", "sim", "report")


def depth(node: ast.AST, level: int = 0) -> int:
    """The deepest block nesting below ``node``, not entering nested scopes."""
    deepest = level
    for child in ast.iter_child_nodes(node):
        if isinstance(child, SCOPES):
            continue
        deeper = level + 1 if isinstance(child, BLOCKS) else level
        deepest = max(deepest, depth(child, deeper))
    return deepest


def params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Parameters a caller passes: ``self``/``cls`` not counted, ``*a``/``**k`` one each."""
    a = fn.args
    named = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    n = len(named) + (a.vararg is not None) + (a.kwarg is not None)
    return n - (bool(named) and named[0].arg in ("self", "cls"))


def shape_errors(path: Path, base: Path = SRC.parent) -> list[str]:
    """Each function in ``path`` past a limit, as ``file:line name: what``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        where = f"{path.relative_to(base)}:{fn.lineno} {fn.name}"
        lines = fn.end_lineno - fn.lineno + 1
        if lines > MAX_LINES:
            out.append(f"{where}: {lines} lines > {MAX_LINES}")
        if (d := depth(fn)) > MAX_DEPTH:
            out.append(f"{where}: nesting {d} > {MAX_DEPTH}")
        if (p := params(fn)) > MAX_PARAMS:
            out.append(f"{where}: {p} parameters > {MAX_PARAMS}")
    return out


def module_level_torch(path: Path, base: Path = SRC.parent) -> list[str]:
    """``import torch`` statements run when ``path`` is imported (function bodies and
    ``if TYPE_CHECKING:`` blocks aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Import):
                names = [a.name for a in stmt.names]
            elif isinstance(stmt, ast.ImportFrom):
                names = [stmt.module or ""] if stmt.level == 0 else []
            elif isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
                continue
            elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
                for block in ("body", "orelse", "finalbody", "handlers"):
                    for part in getattr(stmt, block, []):
                        visit(part.body if isinstance(part, ast.ExceptHandler) else [part])
                continue
            else:
                continue
            if any(n == "torch" or n.startswith("torch.") for n in names):
                found.append(f"{path.relative_to(base)}:{stmt.lineno}")

    visit(tree.body)
    return found


SOURCES = sorted(SRC.rglob("*.py"))


def test_the_source_tree_is_found():
    assert len(SOURCES) > 50


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_functions_stay_within_the_limits(path: Path):
    assert shape_errors(path) == []


@pytest.mark.parametrize("package", TORCH_FREE)
def test_analysis_layers_import_torch_only_inside_functions(package: str):
    files = sorted((SRC / package).rglob("*.py"))
    assert files
    assert [hit for f in files for hit in module_level_torch(f)] == []


def test_the_checks_catch_what_they_name(tmp_path: Path):
    """The checkers see a long, deep, wide function and a module-level torch import."""
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    deep = "    if a:\n        for b in a:\n            while b:\n                with b:\n" \
           "                    try:\n                        pass\n" \
           "                    finally:\n                        pass\n"
    src = (f"import os\ntry:\n    import torch\nexcept ImportError:\n    torch = None\n"
           f"def long(a):\n{body}\n"
           f"def deep(a):\n{deep}"
           f"def wide(self, a, b, c, d, e, f, g, h, *i):\n    pass\n"
           f"def fine(self, a, b, c, d, e, f, g, h):\n    import torch\n")
    f = tmp_path / "probe.py"
    f.write_text(src)
    errors = shape_errors(f, tmp_path)
    torch_lines = module_level_torch(f, tmp_path)
    assert [e.split(": ", 1)[1] for e in errors] == [
        "81 lines > 80", "nesting 5 > 4", "9 parameters > 8"]
    assert torch_lines == ["probe.py:3"]
