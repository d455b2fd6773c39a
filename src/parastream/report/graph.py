"""Render a graph analysis: JSON document, terminal text, Markdown, Mermaid.

The Markdown is the *direction-level analysis document*: scope, module table,
dependency table, verdicts, the module DAG, the operator DAG of every candidate module, the
parallel points and the headroom. Diagrams are Mermaid ``flowchart LR``: ``-->`` is a data
or state edge, ``-.->`` an event edge; a shared input is a rounded node upstream of its
readers. The JSON document (``parastream.graph-analysis/1``) carries the same content and
is what the planner reads; the plain graph stays ``parastream.graph/1``.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ..device.profile import DeviceProfile
from ..mdtext import cell, code, mermaid_label, text
from ..graph.decompose import CANDIDATE, PENDING, Decomposition, OpDag
from ..graph.headroom import Analysis, Headroom
from ..graph.ir import Graph

ANALYSIS_SCHEMA = "parastream.graph-analysis/1"
MAX_DIAGRAM_NODES = 300  #: Mermaid becomes unreadable (and slow) beyond this
MAX_OP_DAGS = 50         #: operator DAGs drawn in the Markdown document


# ----------------------------------------------------------------------------- JSON

def analysis_document(a: Analysis, g: Graph, profile: DeviceProfile, *, source: str | None = None,
                      scale: str | None = None, phase: str | None = None) -> dict[str, Any]:
    """The ``parastream.graph-analysis/1`` document (plain builtins, ready to encode)."""
    d = a.decomposition
    ops = []
    for o in g.ops:
        c = d.costs[o.name]
        ops.append({"name": o.name, "type": o.type, "module": o.module,
                    "module_id": d.op_module[o.name], "resource": o.resource, "flops": o.flops,
                    "bytes_read": o.bytes_read, "bytes_written": o.bytes_written,
                    "side_effects": list(o.side_effects), "dur_us": c.dur_us,
                    "block_dim": c.block_dim, "bound": c.bound})
    points = []
    for p in d.parallel_points:
        body = msgspec.to_builtins(p)
        body["headroom"] = _headroom_dict(a.point_headroom[p.id])
        points.append(body)
    return {
        "schema": ANALYSIS_SCHEMA,
        "graph": {"name": g.name, "source": source, "ops": len(g.ops), "edges": len(g.edges),
                  "meta": g.meta},
        "device": {"name": profile.name, "kind": profile.kind,
                   "description": profile.description,
                   "cores": msgspec.to_builtins(profile.cores),
                   "memory_bandwidth_gbps": profile.memory_bandwidth_gbps,
                   "launch_overhead_us": profile.launch_overhead_us,
                   "hw_queues": profile.hw_queues, "max_streams": profile.max_streams},
        "scale": scale,
        "phase": phase,
        "ops": ops,
        "edges": msgspec.to_builtins(g.edges),
        "modules": msgspec.to_builtins(d.modules),
        "module_edges": msgspec.to_builtins(d.module_edges),
        "shared_inputs": msgspec.to_builtins(d.shared_inputs),
        "verdicts": msgspec.to_builtins(d.verdicts),
        "op_dags": msgspec.to_builtins(d.op_dags),
        "parallel_points": points,
        "headroom": _headroom_dict(a.headroom),
    }


def _headroom_dict(h: Headroom) -> dict[str, Any]:
    return msgspec.to_builtins(h)


def render_json(doc: Any, indent: int = 1) -> str:
    """``doc`` as indented JSON text with a final newline (what the CLIs print)."""
    return msgspec.json.format(msgspec.json.encode(doc), indent=indent).decode() + "\n"


# ----------------------------------------------------------------------------- text

def _table(headers: list[str], rows: list[list[str]], max_width: int = 60) -> list[str]:
    cells = [[_clip(c, max_width) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line.rstrip(), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return out


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _names(items: list[str], limit: int = 4) -> str:
    if not items:
        return "-"
    shown = ", ".join(items[:limit])
    return shown + (f" (+{len(items) - limit})" if len(items) > limit else "")


def render_text(a: Analysis, g: Graph, profile: DeviceProfile, source: str | None = None) -> str:
    """A terminal summary: headroom first, then modules, points and verdicts."""
    d = a.decomposition
    h = a.headroom
    out = [f"graph {g.name}: {len(g.ops)} ops, {len(g.edges)} edges, {len(d.modules)} modules"
           + (f" ({source})" if source else ""),
           f"device {profile.name} ({profile.kind}): cube {profile.cores.cube} / vector "
           f"{profile.cores.vector} cores, {profile.memory_bandwidth_gbps:g} GB/s, "
           f"{profile.hw_queues} hw queues",
           f"headroom: work {h.work_us:.1f} us, critical path {h.critical_path_us:.1f} us, "
           f"bound {h.bound_speedup:.2f}x (logical {h.logical_speedup:.2f}x)",
           f"  {h.summary}", "", "modules"]
    out += _table(["id", "name", "type", "side_effect", "resource_hint"],
                  [[m.module_id, m.module_name, m.module_type, m.side_effect, m.resource_hint]
                   for m in d.modules])
    out += ["", f"parallel points ({len(d.parallel_points)})"]
    if d.parallel_points:
        out += _table(["id", "level", "fork", "branches (dominating first)", "join", "bound",
                       "verdict", "reason"],
                      [[p.id, p.level + (f" in {p.scope}" if p.scope else ""), p.fork,
                        " || ".join(_names(b.nodes, 3) for b in p.branches), p.join,
                        f"{a.point_headroom[p.id].bound_speedup:.2f}x", p.verdict, p.reason]
                       for p in d.parallel_points], max_width=70)
    serial = sum(1 for v in d.verdicts if v.verdict == "serial")
    out += ["", f"verdicts: {serial} serial module pairs, "
                f"{sum(1 for v in d.verdicts if v.verdict == CANDIDATE)} parallel_candidate, "
                f"{sum(1 for v in d.verdicts if v.verdict == PENDING)} "
                f"parallel_pending_validation"]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- Mermaid

def _node_id(name: str) -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", name)


_ARROW = {"event": "-.->"}


def module_dag(d: Decomposition) -> dict[str, list[dict]]:
    """The module DAG as plain data, what :func:`module_mermaid` draws: ``nodes`` (``id``,
    ``lines`` of text, ``kind``: ``input``, ``candidate`` (in a parallel point),
    ``pending`` or ``module``) and ``edges`` (``src``, ``dst``, ``type``)."""
    mods = d.modules[:MAX_DIAGRAM_NODES]
    shown = {m.module_id for m in mods}
    cand = {n for p in d.parallel_points if p.level == "module" and p.verdict == CANDIDATE
            for n in p.members}
    pend = {n for p in d.parallel_points if p.level == "module" and p.verdict == PENDING
            for n in p.members} - cand
    nodes: list[dict] = []
    inputs: dict[str, list[str]] = {}  # one node per input, however many entries name it
    for s in d.shared_inputs:
        readers = [c for c in s.consumers if c in shown]
        if readers:
            nid = _node_id(s.node)
            if nid not in inputs:
                nodes.append({"id": nid, "lines": [s.tensor], "kind": "input"})
            inputs[nid] = list(dict.fromkeys(inputs.get(nid, []) + readers))
    edges = [{"src": nid, "dst": c, "type": "data"} for nid, cs in inputs.items() for c in cs]
    for m in mods:
        kind = ("candidate" if m.module_id in cand else "pending" if m.module_id in pend
                else "module")
        nodes.append({"id": m.module_id, "lines": [f"{m.module_id} {m.module_name}",
                                                   f"{m.module_type} · {m.resource_hint}"],
                      "kind": kind})
    edges += [{"src": e.src, "dst": e.dst, "type": e.dependency_type}
              for e in d.module_edges if e.src in shown and e.dst in shown]
    return {"nodes": nodes, "edges": edges, "total_modules": len(d.modules)}


def module_mermaid(d: Decomposition) -> str:
    """The module DAG as a Mermaid ``flowchart LR`` (shared inputs as rounded nodes)."""
    mods = d.modules[:MAX_DIAGRAM_NODES]
    shown = {m.module_id for m in mods}
    lines = ["flowchart LR"]
    for s in d.shared_inputs:
        if any(c in shown for c in s.consumers):
            lines.append(f'  {_node_id(s.node)}(["{mermaid_label(s.tensor)}"])')
    for m in mods:
        lines.append(f'  {m.module_id}["{m.module_id} {mermaid_label(m.module_name)}<br/>'
                     f'{mermaid_label(m.module_type)} · {mermaid_label(m.resource_hint)}"]')
    for s in d.shared_inputs:
        for c in s.consumers:
            if c in shown:
                lines.append(f"  {_node_id(s.node)} --> {c}")
    for e in d.module_edges:
        if e.src in shown and e.dst in shown:
            arrow = _ARROW.get(e.dependency_type, "-->")
            tag = f"|{e.dependency_type}|" if e.dependency_type != "data" else ""
            lines.append(f"  {e.src} {arrow}{tag} {e.dst}")
    cand = sorted({n for p in d.parallel_points if p.level == "module" and p.verdict == CANDIDATE
                   for n in p.members if n in shown})
    pend = sorted({n for p in d.parallel_points if p.level == "module" and p.verdict == PENDING
                   for n in p.members if n in shown} - set(cand))
    if cand:
        lines += ["  classDef candidate fill:#d9f2d9,stroke:#2e7d32",
                  f"  class {','.join(cand)} candidate"]
    if pend:
        lines += ["  classDef pending fill:#fff3cd,stroke:#b7791f",
                  f"  class {','.join(pend)} pending"]
    if len(d.modules) > len(mods):
        lines.append(f"  %% first {len(mods)} of {len(d.modules)} modules drawn")
    return "\n".join(lines) + "\n"


def op_dag_mermaid(d: Decomposition, dag: OpDag, g: Graph) -> str:
    """The operator DAG inside one module, with the outside nodes it reads and feeds."""
    ops = g.index()
    inner = set(dag.ops)
    lines = ["flowchart LR"]
    for n in dag.inputs_from + dag.outputs_to:
        where = d.op_module.get(n, "input")
        lines.append(f'  {_node_id(n)}(["{mermaid_label(n)} ({where})"])')
    for n in dag.ops:
        c = d.costs[n]
        lines.append(f'  {_node_id(n)}["{mermaid_label(n)}<br/>{mermaid_label(ops[n].type)} · '
                     f'{c.unit} blk={c.block_dim} · {c.dur_us:.1f}us"]')
    seen = set()
    for e in g.edges:
        inside_dst = e.dst in inner
        inside_src = e.src in inner
        if not (inside_dst or inside_src):
            continue
        if (inside_src or e.src in dag.inputs_from) and (inside_dst or e.dst in dag.outputs_to):
            key = (e.src, e.dst)
            if key in seen:
                continue
            seen.add(key)
            arrow = _ARROW.get(e.type, "-->")
            tag = f"|{e.type}|" if e.type != "data" else ""
            lines.append(f"  {_node_id(e.src)} {arrow}{tag} {_node_id(e.dst)}")
    for n in dag.inputs_from:  # shared external inputs (in:<tensor>)
        if n.startswith("in:"):
            tensor = n[3:]
            for o in dag.ops:
                if any(t.name == tensor for t in ops[o].inputs):
                    lines.append(f"  {_node_id(n)} --> {_node_id(o)}")
    return "\n".join(lines) + "\n"


def render_mermaid(a: Analysis) -> str:
    """Only the module DAG, for pasting into a document."""
    return module_mermaid(a.decomposition)


# ----------------------------------------------------------------------------- Markdown

def _md_table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    """A table of cells already in Markdown: names through :func:`~parastream.mdtext.cell`
    or :func:`~parastream.mdtext.code` (model names are the user's), numbers as they are."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def render_md(a: Analysis, g: Graph, profile: DeviceProfile, *, source: str | None = None,
              scale: str | None = None, phase: str | None = None) -> str:
    """The direction-level analysis document: scope, module table, dependency table,
    verdicts, parallel points, headroom; its title names the device."""
    d = a.decomposition
    out = _md_scope(a, g, profile, source, scale, phase)
    out += _md_modules(d)
    out += _md_op_dags(d, g)
    out += _md_points(a)
    out += _md_headroom(a.headroom)
    return "\n".join(out)


def _md_scope(a: Analysis, g: Graph, profile: DeviceProfile, source: str | None,
              scale: str | None, phase: str | None) -> list[str]:
    """Title and scope: the graph, the device, the shapes and the headline bound."""
    d = a.decomposition
    h = a.headroom
    out = [f"# Multi-stream analysis: {text(g.name)} on {text(profile.name)}", "", "## Scope",
           ""]
    out += [f"- graph: {code(g.name)}" + (f" from {code(source)}" if source else "")
            + f", {len(g.ops)} ops, {len(g.edges)} edges -> {len(d.modules)} modules",
            f"- device: {code(profile.name)} ({profile.kind}; cube {profile.cores.cube}, vector "
            f"{profile.cores.vector} cores; {profile.memory_bandwidth_gbps:g} GB/s; "
            f"{profile.hw_queues} hardware queues)"]
    if scale or phase:
        out.append(f"- scale: {text(scale or '-')}, phase: {text(phase or '-')}")
    out += [f"- headroom: work {h.work_us:.1f} us, critical path {h.critical_path_us:.1f} us, "
            f"bound **{h.bound_speedup:.2f}x** — {h.summary}",
            "- costs are roofline estimates from the device profile, not measurements; "
            "verify every candidate with `parastream analyze` (overlap_pct).", ""]
    return out


def _md_modules(d: Decomposition) -> list[str]:
    """Module table, dependency table (with the shared inputs), verdicts, module DAG."""
    out = ["## Module table", ""]
    out += _md_table(["module_id", "module_name", "module_type", "inputs", "outputs",
                      "side_effect", "resource_hint"],
                     [[cell(m.module_id), code(m.module_name, table=True), cell(m.module_type),
                       cell(_names(m.inputs, 3)), cell(_names(m.outputs, 3)), cell(m.side_effect),
                       cell(m.resource_hint)] for m in d.modules])
    out += ["", "## Dependency table", ""]
    out += _md_table(["from", "to", "dependency_type", "reason"],
                     [[cell(e.src), cell(e.dst), cell(e.dependency_type), cell(e.reason)]
                      for e in d.module_edges])
    if d.shared_inputs:
        out += ["", "Shared inputs (a common upstream node, not a dependency between readers):", ""]
        out += [f"- {code(s.tensor)} read by {text(', '.join(s.consumers))}"
                for s in d.shared_inputs]
    out += ["", "## Verdicts", ""]
    out += _md_table(["a", "b", "verdict", "reason", "point"],
                     [[cell(v.a), cell(v.b), cell(v.verdict), cell(v.reason), cell(v.point or "-")]
                      for v in d.verdicts])
    out += ["", "## Module DAG", "", "```mermaid", module_mermaid(d).rstrip(), "```", ""]
    return out


def _md_op_dags(d: Decomposition, g: Graph) -> list[str]:
    """The operator DAG of every candidate module: single-op ones listed, the first
    :data:`MAX_OP_DAGS` others drawn."""
    out = ["## Operator DAGs of candidate modules", ""]
    if not d.op_dags:
        out += ["No module is part of a parallel point: nothing to decompose further.", ""]
    single = [dag for dag in d.op_dags if len(dag.ops) == 1]
    if single:
        out += ["Single-op modules (their DAG is the op itself): "
                + ", ".join(f"{text(dag.module_id)} {code(dag.ops[0])}" for dag in single[:40])
                + (f" (+{len(single) - 40})" if len(single) > 40 else ""), ""]
    multi = [dag for dag in d.op_dags if len(dag.ops) > 1]
    for dag in multi[:MAX_OP_DAGS]:
        m = d.module(dag.module_id)
        pts = f" — parallel points {text(', '.join(dag.points))}" if dag.points else ""
        out += [f"### {text(m.module_id)} {code(m.module_name)} ({len(dag.ops)} ops){pts}", "",
                "```mermaid", op_dag_mermaid(d, dag, g).rstrip(), "```", ""]
    if len(multi) > MAX_OP_DAGS:
        out += [f"({len(multi) - MAX_OP_DAGS} more candidate modules: see "
                f"`--format json`, key `op_dags`.)", ""]
    return out


def _md_points(a: Analysis) -> list[str]:
    """The parallel points table: branches (dominating first), join, per-point bound."""
    d = a.decomposition
    out = ["## Parallel points", ""]
    if not d.parallel_points:
        return out + ["None: every op depends on the one before it (a chain). Keep one stream.",
                      ""]
    rows = []
    for p in d.parallel_points:
        ph = a.point_headroom[p.id]
        dom = p.branches[p.dominating_branch]
        rows.append([cell(p.id), cell(p.level + (f" in {p.scope}" if p.scope else "")), cell(p.fork),
                     "<br/>".join(cell(f"{i + 1}. {_names(b.nodes, 4)} ({b.dur_us:.1f} us, "
                                    f"{b.resource}, blk={b.block_dim})")
                                  for i, b in enumerate(p.branches)),
                     cell(p.join), f"{cell(_names(dom.nodes, 2))}; dominator {code(dom.dominator, table=True)}",
                     f"{ph.work_us:.1f}", f"{ph.critical_path_us:.1f}",
                     f"{ph.bound_speedup:.2f}x", cell(p.verdict), cell(p.reason)])
    out += _md_table(["point", "level", "fork", "branches (dominating first)", "join",
                      "dominating branch", "serial us", "ideal us", "bound", "verdict",
                      "reason"], rows)
    out.append("")
    return out


def _md_headroom(h: Headroom) -> list[str]:
    """The whole graph's headroom row and its one-line summary."""
    out = ["## Headroom", ""]
    out += _md_table(["work us", "critical path us", "logical bound", "resource floor us",
                      "limited by", "bound", "launch floor us (eager)"],
                     [[f"{h.work_us:.1f}", f"{h.critical_path_us:.1f}",
                       f"{h.logical_speedup:.2f}x", f"{h.resource_floor_us:.1f}", cell(h.limited_by),
                       f"{h.bound_speedup:.2f}x", f"{h.launch_floor_us:.1f}"]])
    out += ["", text(h.summary) + ".", ""]
    return out


__all__ = ["ANALYSIS_SCHEMA", "analysis_document", "module_mermaid", "op_dag_mermaid",
           "render_json", "render_md", "render_mermaid", "render_text"]
