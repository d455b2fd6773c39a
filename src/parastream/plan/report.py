"""Plan reports: the terminal summary and the Markdown document with one plan detail
fragment per candidate in the 8-field structure of DOMAIN.md §3."""

from __future__ import annotations

from ..mdtext import cell, code, text
from .io import PlanDoc
from .model import Plan

NOT_MEASURED = "not measured yet (run the plan, then `parastream analyze TRACE --plan plan.json`)"

# how each execution path joins and syncs (DOMAIN.md §5); never mix the two Ascend styles
SYNC_API = {
    "ge": "torchair.scope.npu_stream_switch(tag) for the side block, "
          "torchair.scope.npu_wait_tensor(consumer_input, side_output) at the join",
    "aclgraph": "torch.npu.Stream() + with torch.npu.stream(s); torch.npu.Event().record() on the "
                "side stream, event.wait(main) at the join; record_stream for short-lived tensors",
    "cuda": "torch.cuda.Stream() + with torch.cuda.stream(s); torch.cuda.Event().record(), "
            "event.wait(torch.cuda.current_stream()) at the join",
}


def _streams(plan: Plan) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for n, s in plan.assignment.items():
        out.setdefault(s, []).append(n)
    return out


def _short(ops: list[str], k: int = 6) -> str:
    return ", ".join(code(o) for o in ops[:k]) + (f" and {len(ops) - k} more" if len(ops) > k else "")


def measured_text(measured: dict | None) -> str:
    """Field (6) from a run: the measured overlap per planned parallel point and the walls."""
    if not measured:
        return NOT_MEASURED
    parts = []
    for p in measured.get("parallel_points", []):
        if p.get("found"):
            d = p["dominator"]
            parts.append(f"side_window [{p['side_window_us'][0]:.2f}, {p['side_window_us'][1]:.2f}] us, "
                         f"dominator {code(d['name'])} [{d['window_us'][0]:.2f}, {d['window_us'][1]:.2f}] us, "
                         f"overlap {p['overlap_us']:.2f} us, overlap_pct {p['overlap_pct']:.3f} -> "
                         f"{p['verdict']}")
        else:
            parts.append(text(f"{p.get('parallel_point')}: {p.get('reason')}"))
    w = measured.get("walls")
    if w:
        parts.append(f"measured wall {w['single_median_us']:.1f} us single vs {w['multi_median_us']:.1f} us "
                     f"multi-stream ({w['speedup']:.2f}x, {w['label']})")
    return "; ".join(parts) or NOT_MEASURED


def fragment(plan: Plan, rank: int, measured: dict | None = None) -> str:
    """The 8-field plan detail fragment of one candidate (``measured``: its run's
    plan_check and walls, which fill field 6)."""
    streams = _streams(plan)
    side = {s: ops for s, ops in streams.items() if s != 0}
    est = plan.estimate
    joins = sorted({e.wait_before or "end of stream 0" for e in plan.events})
    ge = [l for l in plan.lints if l.rule == "ge-reorder"]
    risks = [l for l in plan.lints if l.rule != "ge-reorder" and l.severity != "info"]
    contention = (f"C2 core limits {plan.core_limits} keep concurrent block dims within the cores"
                  if plan.core_limits else "concurrent block dims fit the device's cores "
                  "(by the cost model's estimate) or are unknown")
    next_step = {"C1": "C2: add core limits (limit_core_num) if the timeline shows contention",
                 "C2": "C3: add manual sync points if the join shows EVENT_WAIT holes",
                 "C3": "top of the ladder"}[plan.strength]
    lines = [
        f"### {rank}. {code(plan.name)} ({text(plan.algorithm)})",
        "",
        text(plan.description),
        "",
        "1. **Parallel objects and stream grouping.** " + ("; ".join(
            f"stream {s}: {_short(ops)}" for s, ops in sorted(side.items())) or "single stream")
        + f"; stream 0 keeps the rest ({len(streams.get(0, []))} ops). Tag granularity: "
        + ("one serial side stream." if len(side) == 1 else f"{len(side)} side streams."),
        f"2. **Join point and sync API.** {len(plan.events)} wait(s) at {_short(joins, 4)}. "
        f"GE graph mode: {SYNC_API['ge']}. npugraph_ex/aclgraph: {SYNC_API['aclgraph']}. "
        f"CUDA: {SYNC_API['cuda']}.",
        "3. **DAG** (stream ownership; `-.->` are events):",
        "",
        "```mermaid",
        plan.mermaid,
        "```",
        "",
        f"4. **Strength.** {plan.strength}; next: {next_step}.",
        "5. **GE auto-reorder risk.** " + ("; ".join(text(l.message + f" Fix: {l.fix}.") for l in ge)
                                          if ge else "none found (no cheap main-stream consumer of a "
                                          "side output that could be hoisted ahead of the dominator)."),
        f"6. **Measured overlap.** {measured_text(measured)}. Estimated: "
        + (f"{est.wall_us:.1f} us vs {est.single_stream_wall_us:.1f} us single stream, "
           f"{est.speedup:.2f}x ({est.source})." if est else "no estimate."),
        f"7. **Enable switch.** {code(plan.switch)} (off = the original single-stream path, kept "
        f"unchanged).",
        "8. **Risks.** " + "; ".join([contention] + [text(f"{l.rule}: {l.message}") for l in risks]
                                     + ["watch TransData/BroadcastTo/MemSet long tails and shape "
                                        "degradation in the measured timeline"]) + ".",
        "",
    ]
    return "\n".join(lines)


def render_markdown(doc: PlanDoc, measured: dict[str, dict] | None = None) -> str:
    """The plan report; ``measured`` maps candidate names to their runs' results."""
    how = (" from the measured runs (their fields below)" if measured
           else " from the estimates")
    out = [f"# Multi-stream plan for {code(doc.model)} on {text(doc.device)}", "",
           f"Recommended: **{text(doc.recommended)}**{how}. Candidates are ranked by estimated wall "
           f"time (estimates, not measurements).", ""]
    if doc.parallel_points:
        out += ["## Parallel points", "", "| point | fork | join | branches |", "|---|---|---|---|"]
        for p in doc.parallel_points:
            out.append(f"| {cell(p.get('name'))} | {cell(p.get('fork') or '-')} | "
                       f"{cell(p.get('join') or '-')} | {len(p.get('branches', []))} |")
        out.append("")
    out += ["## Candidates", ""]
    for i, c in enumerate(doc.candidates, 1):
        out.append(fragment(c, i, (measured or {}).get(c.name)))
    return "\n".join(out)


def render_text(doc: PlanDoc) -> str:
    """A terminal summary: one line per candidate, then the lints of the best."""
    lines = [f"plan for {doc.model} on {doc.device}: recommended {doc.recommended}", "",
             f"{'#':>2s} {'orchestration':16s} {'streams':>7s} {'waits':>5s} {'est. wall us':>12s} "
             f"{'speedup':>8s} {'strength':>8s} {'lints':>5s}  parallel point"]
    for k, c in enumerate(doc.candidates, 1):
        est = c.estimate
        worst = sum(1 for l in c.lints if l.severity in ("error", "warning"))
        kind = c.name.rsplit("/", 1)[-1] if c.parallel_point else c.algorithm
        lines.append(f"{k:2d} {kind[:16]:16s} {c.streams:7d} {len(c.events):5d} "
                     f"{est.wall_us if est else 0:12.1f} {est.speedup if est else 1:7.2f}x "
                     f"{c.strength:>8s} {worst:5d}  {c.parallel_point or '(whole graph)'}")
    best = next((c for c in doc.candidates if c.name == doc.recommended), None)
    if best is not None:
        lines += ["", f"lints of {best.name}:"] + [f"  [{l.severity}] {l.rule}: {l.message}"
                                                  for l in best.lints[:12]]
        if best.estimate:
            lines.append(f"  (estimates: {best.estimate.source})")
    return "\n".join(lines) + "\n"
