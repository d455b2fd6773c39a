"""Cross-stage parallel points: work of the next layer that does not depend on the
current one (its independent prologue: rotary-table gathers, a KV-cache copy, a
projection of a side input) can run on a side stream while the current layer runs.

Stages are the numbered children of a module list (``layers.0``, ``layers.1``, ...: the
first numbered segment of an op's module path). For each stage ``k`` that the next one
depends on, the ops of stage ``k+1`` that no op of stage ``k`` reaches are its
independent prologue; the ops of stage ``k`` that neither reach nor are reached by that
prologue are the other branch (the current layer, dominating); the join is the first op
both reach. The point is named ``cross-stage ...`` and is the same point in every layer
pair, so one side stream serves them all.
"""

from __future__ import annotations

import re

from ..graph.ir import Graph
from .candidates import Point

_STAGE = re.compile(r"^(.*?)(\d+)(?=\.|$)")
CROSS_STAGE = "cross-stage"


def stages(graph: Graph, order: list[str]) -> dict[str, list[tuple[int, list[str]]]]:
    """Numbered stages per module-list prefix: ``{"layers.": [(0, ops), (1, ops), ...]}``,
    ops in issue order, stages by number."""
    index = graph.index()
    found: dict[str, dict[int, list[str]]] = {}
    for n in order:
        m = _STAGE.match(index[n].module or "")
        if m:
            found.setdefault(m.group(1), {}).setdefault(int(m.group(2)), []).append(n)
    return {p: sorted(by.items()) for p, by in found.items() if len(by) > 1}


def cross_stage_points(graph: Graph, order: list[str], reach: dict[str, int],
                       dur: dict[str, float]) -> list[Point]:
    """One :class:`Point` per consecutive stage pair with an independent prologue
    (``reach``: descendants of every op as a bitset over ``order``, lints.reach_sets)."""
    idx = {n: i for i, n in enumerate(order)}
    index = graph.index()
    out: list[Point] = []
    for prefix, numbered in stages(graph, order).items():
        for (k, cur), (k1, nxt) in zip(numbered, numbered[1:]):
            if k1 != k + 1:
                continue
            from_cur = 0
            for n in cur:
                from_cur |= reach[n]
            prologue = [n for n in nxt if not (from_cur >> idx[n]) & 1]
            if not prologue or len(prologue) == len(nxt):
                continue  # nothing to prefetch, or stage k+1 does not follow stage k
            from_pro = 0
            for n in prologue:
                from_pro |= reach[n] | (1 << idx[n])
            # no op of stage k reaches the prologue (it would be in from_cur's reach)
            main = [n for n in cur if not (from_pro >> idx[n]) & 1]
            if not main:
                continue
            from_main = 0
            for n in main:
                from_main |= reach[n]
            both = from_main & from_pro
            join = order[(both & -both).bit_length() - 1] if both else None
            # the op the prologue hides behind: the longest, a matrix op on a tie
            dominant = max(main, key=lambda n: (dur.get(n, 0.0), index[n].resource == "cube",
                                                -idx[n]))
            name = (f"{CROSS_STAGE} {pattern(graph, main)} -> next: {pattern(graph, prologue)} "
                    f"@ {pattern(graph, [join]) if join else 'end'} "
                    f"[{len(main)}+{len(prologue)} ops]")
            out.append(Point(name=name, fork=None, join=join, branches=[main, prologue],
                             dominant=0, meta={"kind": CROSS_STAGE, "stage": f"{prefix}{k}",
                                               "next_stage": f"{prefix}{k1}",
                                               "dominator": dominant}))
    return out


def is_cross_stage(point: Point | None) -> bool:
    return point is not None and point.meta.get("kind") == CROSS_STAGE


def pattern(graph: Graph, ops: list[str]) -> str:
    """The module path shared by a branch's ops, layer numbers wildcarded (``layers.*.mlp``)."""
    index = graph.index()
    paths = [index[n].module for n in ops if n in index and index[n].module]
    if not paths:
        return ops[0] if ops else "?"
    common = _common_prefix(paths) or min(paths, key=len)
    return re.sub(r"\.\d+(?=\.|$)", ".*", common)


def _common_prefix(paths: list[str]) -> str:
    if not paths:
        return ""
    parts = [p.split(".") for p in paths]
    out = []
    for seg in zip(*parts):
        if all(x == seg[0] for x in seg):
            out.append(seg[0])
        else:
            break
    return ".".join(out)
