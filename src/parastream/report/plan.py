"""Plan reports: the terminal summary and the Markdown document with one plan detail
fragment per candidate in the 8-field structure of a plan detail."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..mdtext import cell, code, text

if TYPE_CHECKING:
    from ..plan.io import PlanDoc
    from ..plan.model import Plan

NOT_MEASURED = "not measured yet (run the plan, then `parastream analyze TRACE --plan plan.json`)"

# how each execution path joins and syncs; never mix the two Ascend styles.
# Per rung: C1 waits for the producer's whole stream, C3 for an event placed after the op.
SYNC_API = {
    "ge": {"C1": "torchair.scope.npu_stream_switch(tag) around the side ops, "
                 "torchair.scope.npu_wait_tensor(consumer_input, side_output) at each wait",
           "C3": "torchair.scope.npu_stream_switch(tag) around the side ops, "
                 "torchair.ops.npu_tagged_event_record right after each producer and "
                 "npu_tagged_event_wait before its consumer"},
    "aclgraph": {"C1": "torch.npu.Stream() + with torch.npu.stream(s); "
                       "wait_stream(other) before each waiting op; record_stream for "
                       "short-lived tensors",
                 "C3": "torch.npu.Stream() + with torch.npu.stream(s); a torch.npu.Event() "
                       "recorded right after each producer, event.wait(stream) before its "
                       "consumer; record_stream for short-lived tensors"},
    "cuda": {"C1": "torch.cuda.Stream() + with torch.cuda.stream(s); wait_stream(other) "
                   "before each waiting op",
             "C3": "torch.cuda.Stream() + with torch.cuda.stream(s); a torch.cuda.Event() "
                   "recorded right after each producer, event.wait(stream) before its consumer"},
    "cpu": {"C1": "parastream's cpu executor (one worker thread per stream; torch.cpu.Stream "
                  "is a no-op), each wait before its op",
            "C3": "parastream's cpu executor (one worker thread per stream; torch.cpu.Stream "
                  "is a no-op), each event set right after its producer"},
}
#: which execution paths field 2 names for a device kind (all of them when unknown)
PATHS = {"npu": (("GE graph mode", "ge"), ("npugraph_ex/aclgraph", "aclgraph")),
         "gpu": (("CUDA", "cuda"),), "cpu": (("CPU", "cpu"),)}


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


def _waits(plan: Plan, k: int = 4) -> str:
    """The candidate's own waits: who waits for what, before which op."""
    where = plan.assignment
    parts = [f"stream {where.get(e.wait_before, 0) if e.wait_before else 0} waits for "
             f"{code(e.record_after)} (stream {where.get(e.record_after, 0)}) "
             + (f"before {code(e.wait_before)}" if e.wait_before else "at its end")
             for e in plan.events[:k]]
    more = f" and {len(plan.events) - k} more" if len(plan.events) > k else ""
    return "; ".join(parts) + more


def sync_text(plan: Plan) -> str:
    """Field 2: the join point and the sync API this candidate needs on its device."""
    if plan.stream_count() < 2:
        return "none: one stream, no event."
    joins = sorted({e.wait_before or "end of stream 0" for e in plan.events})
    ladder = plan.meta.get("ladder") or {}
    rung = "C3" if plan.strength == "C3" else "C1"
    paths = PATHS.get(ladder.get("device_kind", ""),
                      (("GE graph mode", "ge"), ("npugraph_ex/aclgraph", "aclgraph"),
                       ("CUDA", "cuda")))
    api = " ".join(f"{label}: {SYNC_API[key][rung]}." for label, key in paths)
    return (f"joins at {_short(joins, 4)}: {_waits(plan)}. "
            + ("Events placed by hand (C3). " if rung == "C3" else "Stream-wide waits (C1). ")
            + api)


def strength_text(plan: Plan) -> str:
    """Field 4: the candidate's rung, each rung in words, and the next step."""
    ladder = plan.meta.get("ladder")
    if not ladder:  # a plan file without the planner's ladder notes
        nxt = {"C1": "C2 where the device documents core limits, else C3 where events must "
                     "sit right after their producers",
               "C2": "C3 where events must sit right after their producers",
               "C3": "top of the ladder"}.get(plan.strength, "-")
        return f"{plan.strength}; next: {nxt}."
    return (f"{plan.strength}. C1: {text(ladder.get('C1', '-'))}. C2: {text(ladder.get('C2', '-'))}."
            f" C3: {text(ladder.get('C3', '-'))}. Next: {text(ladder.get('next', '-'))}.")


def fragment(plan: Plan, rank: int, measured: dict | None = None) -> str:
    """The 8-field plan detail fragment of one candidate (``measured``: its run's
    plan_check and walls, which fill field 6)."""
    streams = _streams(plan)
    side = {s: ops for s, ops in streams.items() if s != 0}
    est = plan.estimate
    ge = [l for l in plan.lints if l.rule == "ge-reorder"]
    risks = [l for l in plan.lints if l.rule != "ge-reorder" and l.severity != "info"]
    contention = (f"C2 core limits {plan.core_limits} keep concurrent block dims within the cores"
                  if plan.core_limits else "concurrent block dims fit the device's cores "
                  "(by the cost model's estimate) or are unknown")
    lines = [
        f"### {rank}. {code(plan.name)} ({text(plan.algorithm)})",
        "",
        text(plan.description),
        "",
        "1. **Parallel objects and stream grouping.** " + ("; ".join(
            f"stream {s}: {_short(ops)}" for s, ops in sorted(side.items())) or "single stream")
        + f"; stream 0 keeps the rest ({len(streams.get(0, []))} ops). Tag granularity: "
        + ("one serial side stream." if len(side) == 1 else f"{len(side)} side streams."),
        f"2. **Join point and sync API.** {sync_text(plan)}",
        "3. **DAG** (stream ownership; `-.->` are events):",
        "",
        "```mermaid",
        plan.mermaid,
        "```",
        "",
        f"4. **Strength.** {strength_text(plan)}",
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
