"""A DAG drawn as inline SVG, for the self-contained HTML report (no script, no CDN).

Layered left to right: a node's layer is its longest path from a source, nodes in a layer
are ordered by the mean position of their neighbours (a few sweeps each way, the usual
crossing reduction), and edges are curves from a node's right side to the next one's
left. Node colours say what a node is (a module in a parallel point, a shared input);
edge colours and dashes say the dependency type (data, state, event, collective order).
"""

from __future__ import annotations

from html import escape

NODE_W, NODE_H = 210, 40     #: box size in px
GAP_X, GAP_Y = 56, 14        #: between layers, between boxes of a layer
MAX_CHARS = 32               #: a text line longer than this is cut with an ellipsis
SWEEPS = 4                   #: barycentre sweeps (down and up) to reduce crossings

#: fill, stroke per node kind
NODE_STYLE = {"candidate": ("#d9f2d9", "#2e7d32"), "pending": ("#fff3cd", "#b7791f"),
              "input": ("#e8eefc", "#3b5bdb"), "module": ("#f6f7f9", "#8a94a6")}
#: stroke, dash per edge type
EDGE_STYLE = {"data": ("#8a94a6", ""), "state": ("#d9480f", "6 3"),
              "event": ("#1c7ed6", "2 3"), "collective_order": ("#7048e8", "8 3 2 3")}


def layers(ids: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Each node's layer: the longest path to it from a node without predecessors.
    ``ids`` in any order; edges between unknown nodes and cycles are ignored."""
    known = set(ids)
    succ: dict[str, list[str]] = {n: [] for n in ids}
    indeg = {n: 0 for n in ids}
    for a, b in edges:
        if a in known and b in known and a != b:
            succ[a].append(b)
            indeg[b] += 1
    layer = {n: 0 for n in ids}
    ready = [n for n in ids if indeg[n] == 0]
    while ready:
        n = ready.pop()
        for m in succ[n]:
            layer[m] = max(layer[m], layer[n] + 1)
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    return layer  # nodes on a cycle (never ready) stay where the sweep left them


def order(layer: dict[str, int], edges: list[tuple[str, str]]) -> list[list[str]]:
    """Nodes per layer, ordered to reduce edge crossings (barycentre heuristic)."""
    n_layers = max(layer.values(), default=-1) + 1
    rows: list[list[str]] = [[] for _ in range(n_layers)]
    for n, k in layer.items():  # dict order = the caller's order: the first guess
        rows[k].append(n)
    preds: dict[str, list[str]] = {n: [] for n in layer}
    succs: dict[str, list[str]] = {n: [] for n in layer}
    for a, b in edges:
        if a in layer and b in layer:
            preds[b].append(a)
            succs[a].append(b)
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        span = range(1, n_layers) if down else range(n_layers - 2, -1, -1)
        for k in span:
            ref = {n: i for i, n in enumerate(rows[k - 1 if down else k + 1])}
            keyed = []
            for i, n in enumerate(rows[k]):
                near = [ref[m] for m in (preds[n] if down else succs[n]) if m in ref]
                keyed.append((sum(near) / len(near) if near else i, i, n))
            rows[k] = [n for _, _, n in sorted(keyed)]
    return rows


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 1] + "…"


def dag_svg(nodes: list[dict], edges: list[dict], title: str = "DAG") -> str:
    """The DAG as one ``<svg>`` element: ``nodes`` have ``id``, ``lines`` (one or two lines
    of text) and ``kind`` (a key of :data:`NODE_STYLE`); ``edges`` have ``src``, ``dst``
    and ``type`` (a key of :data:`EDGE_STYLE`)."""
    ids = [n["id"] for n in nodes]
    pairs = [(e["src"], e["dst"]) for e in edges]
    rows = order(layers(ids, pairs), pairs)
    tallest = max((len(r) for r in rows), default=0)
    width = max(1, len(rows)) * (NODE_W + GAP_X) - GAP_X + 2 * GAP_Y
    height = max(1, tallest) * (NODE_H + GAP_Y) - GAP_Y + 2 * GAP_Y
    pos: dict[str, tuple[float, float]] = {}
    for k, row in enumerate(rows):
        top = GAP_Y + (tallest - len(row)) * (NODE_H + GAP_Y) / 2  # centre each layer
        for i, n in enumerate(row):
            pos[n] = (GAP_Y + k * (NODE_W + GAP_X), top + i * (NODE_H + GAP_Y))
    out = [f'<svg class="dag" width="{width:.0f}" '
           f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
           f'aria-label="{escape(title)}"><title>{escape(title)}</title><defs>']
    for t, (stroke, _) in EDGE_STYLE.items():
        out.append(f'<marker id="arr-{t}" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" '
                   f'markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="{stroke}"/>'
                   "</marker>")
    out.append("</defs>")
    for e in edges:
        if e["src"] not in pos or e["dst"] not in pos:
            continue
        t = e.get("type") if e.get("type") in EDGE_STYLE else "data"
        stroke, dash = EDGE_STYLE[t]
        (x0, y0), (x1, y1) = pos[e["src"]], pos[e["dst"]]
        x0, y0, y1 = x0 + NODE_W, y0 + NODE_H / 2, y1 + NODE_H / 2
        mid = (x0 + x1) / 2
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<path d="M{x0:.1f},{y0:.1f} C{mid:.1f},{y0:.1f} {mid:.1f},{y1:.1f} '
                   f'{x1:.1f},{y1:.1f}" fill="none" stroke="{stroke}" stroke-width="1.3"'
                   f'{dash_attr} marker-end="url(#arr-{t})"><title>{escape(e["src"])} → '
                   f'{escape(e["dst"])} ({escape(t)})</title></path>')
    for n in nodes:
        x, y = pos[n["id"]]
        fill, stroke = NODE_STYLE.get(n.get("kind", "module"), NODE_STYLE["module"])
        lines = [str(x) for x in n.get("lines") or [n["id"]]][:2]
        rx = NODE_H / 2 if n.get("kind") == "input" else 5
        out.append(f'<g><title>{escape(" | ".join(lines))}</title><rect x="{x:.1f}" '
                   f'y="{y:.1f}" width="{NODE_W}" height="{NODE_H}" rx="{rx:.0f}" '
                   f'fill="{fill}" stroke="{stroke}"/>')
        first = y + (NODE_H / 2 + 4 if len(lines) == 1 else 16)
        for i, text in enumerate(lines):
            weight = ' font-weight="600"' if i == 0 else ""
            out.append(f'<text x="{x + 8:.1f}" y="{first + 15 * i:.1f}" font-size="11"'
                       f'{weight}>{escape(_cut(text))}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def legend_html() -> str:
    """What the colours mean, as a line of HTML under the drawing."""
    kinds = {"candidate": "in a parallel point", "pending": "pending verdict",
             "input": "shared input", "module": "module"}
    parts = [f'<span class="dag-key" style="background:{NODE_STYLE[k][0]};border-color:'
             f'{NODE_STYLE[k][1]}"></span>{escape(v)}' for k, v in kinds.items()]
    parts += [f'<span class="dag-line" style="border-top:2px {"dashed" if d else "solid"} '
              f'{s}"></span>{escape(t.replace("_", " "))} edge' for t, (s, d) in EDGE_STYLE.items()]
    return '<div class="dag-legend">' + " ".join(parts) + "</div>"


__all__ = ["dag_svg", "layers", "legend_html", "order"]
