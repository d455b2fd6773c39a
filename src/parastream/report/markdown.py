"""The measured fields of a plan detail fragment (seed 002) as Markdown.

A plan fragment has 8 fields; the timeline can fill the measured ones: (1) the observed
stream grouping, (6) overlap_pct with both windows and the verdict, (8) the measured
risks (core contention, long tails) — plus the triage when a baseline was given.
"""

from __future__ import annotations

from ..mdtext import cell as _cell
from ..mdtext import code


def _w(w) -> str:
    return f"[{w[0]:.3f}, {w[1]:.3f}] us"


def _plan_check(pc: dict) -> list[str]:
    """``--plan``'s placement check, as the text report gives it."""
    out = [f"**Plan check ({code(pc['candidate'])}).** {pc['ops_found']}/{pc['ops_planned']} "
           f"planned ops found; streams {_cell(pc['stream_mapping'])}; "
           f"{pc['misplaced_count']} misplaced."]
    from ..plan.verify import plan_check_notes

    out += [f"{_cell(note)}." for note in plan_check_notes(pc)]
    out += [f"- misplaced: {code(m['op'])} planned on stream {m['planned_stream']} (trace "
            f"{_cell(m['expected_trace_stream'])}) ran on {_cell(m['trace_stream'])}"
            for m in pc["misplaced"][:5]]
    return ["", *out, ""]


def render_markdown(doc: dict) -> str:
    lines: list[str] = []
    for cap in doc["captures"]:
        lines.append(f"### {_cell(cap['label'])}")
        lines.append("")
        lines.append(f"Source {code(cap['source'])} ({cap['format']}); wall {cap['wall_us']:.3f} us, "
                     f"parallelism {cap['parallelism']:.3f}x.")
        lines.append("")
        lines.append("**(1) Stream grouping (observed).** " + "; ".join(
            f"stream {s['id']} ({s['role']}): {s['ops']} ops, busy {s['busy_us']:.3f} us"
            for s in cap["streams"]))
        lines.append("")
        if "plan_check" in cap:
            lines += _plan_check(cap["plan_check"])
        lines.append("**(6) Measured overlap.**")
        lines.append("")
        if cap["parallel_points"]:
            lines.append("| side stream | side window | dominator | dominator window | overlap | "
                         "overlap_pct | verdict | barrier |")
            lines.append("|---|---|---|---|---|---|---|---|")
            for p in cap["parallel_points"]:
                d, b = p["dominator"], p["barrier"]
                lines.append("| " + " | ".join([
                    _cell(p["side_stream"]), _w(p["side_window_us"]),
                    _cell(d["name"]) if d else "-", _w(d["window_us"]) if d else "-",
                    f"{p['overlap_us']:.3f} us", f"{p['overlap_pct']:.3f}", p["verdict"],
                    _cell("+".join(b["ops"]) + f" @ {b['start_us']:.3f} us") if b else "-"]) + " |")
            vc = cap["verdict_counts"]
            lines.append("")
            lines.append(f"{cap['parallel_points_total']} point(s): {vc['true']} true, "
                         f"{vc['partial']} partial, {vc['false']} false.")
        else:
            lines.append("No parallel point: a single compute stream.")
        lines.append("")
        risks = []
        for c in cap["contention"]:
            risks.append(f"core contention ({c['pool']}) streams {c['streams'][0]}+{c['streams'][1]}: "
                         f"demand up to {c['max_demand']} of {c['cores']} cores for "
                         f"{c['oversubscribed_us']:.3f} us")
        for w in cap["warnings"]:
            risks.append(_cell(w))
        lines.append("**(8) Measured risks.** " + ("; ".join(risks) if risks else "none seen."))
        lines.append("")
    tri = doc.get("triage")
    if tri:
        lines.append(f"**Triage against the baseline: {tri['verdict']}** — {tri['summary']} "
                     f"(wall {tri['baseline']['wall_us']:.3f} -> {tri['multi']['wall_us']:.3f} us, "
                     f"{tri['wall_change_pct']:+.1f}%).")
        lines.append("")
        for e in tri["evidence"]:
            lines.append(f"- {_cell(e)}")
        lines.append("")
    return "\n".join(lines)
