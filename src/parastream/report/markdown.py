"""The measured fields of a plan detail fragment as Markdown.

A plan fragment has 8 fields; the timeline can fill the measured ones: (1) the observed
stream grouping, (6) overlap_pct with both windows and the verdict, (8) the measured
risks (core contention, long tails) — plus the triage when a baseline was given.

A document with per-rank rows starts with the cross-rank summary (when the ranks'
collectives were matched, the ranking first: the straggler and why, the slowest link;
then the slowest and fastest rank, wall spread, the ranks slowest first with their
communication wait, share of wall waiting, times last and clock offset);
``summary_only`` stops there. Op names are
shortened (:mod:`parastream.timeline.names`) unless ``names="full"``, and shown as code
spans: no HTML entity, no Markdown of the name's own.
"""

from __future__ import annotations

import os

from ..mdtext import cell as _cell
from ..mdtext import code
from ..timeline.contention import contention_text
from ..timeline.names import display_name


def _w(w) -> str:
    return f"[{w[0]:.3f}, {w[1]:.3f}] us"


def _name(name: str, names: str) -> str:
    """An op name in a table cell: a code span, short unless ``names`` is "full"."""
    return code(display_name(str(name), names), table=True)


def _num(x, nd: int = 3) -> str:
    return "-" if x is None else f"{x:,.{nd}f}" if isinstance(x, float) else str(x)


def _broken(doc: dict) -> list[str]:
    broken = doc.get("broken") or []
    if not broken:
        return []
    s = doc.get("summary", {})
    units = s.get("units", len(broken) + len(doc.get("sources", [])))
    out = [f"**{s.get('units_analysed', units - len(broken))} of {units} analysed.** "
           "Not read:", ""]
    out += [f"- {code(b.get('source'))}: {_cell(b.get('error'))}" for b in broken]
    return [*out, ""]


def _cluster_findings(cluster: dict | None) -> list[str]:
    """The ranking in words, one paragraph: the straggler and why, the slowest link, ..."""
    from .text import cluster_findings

    if not cluster:
        return []
    return ["; ".join(f"**{_cell(label.capitalize())}:** {_cell(text)}"
                      for label, text in cluster_findings(cluster)) + ".", ""]


#: the cross-rank columns the per-rank table gets when the ranks' collectives were matched
_CLUSTER_CELLS = ("comm wait ms", "waiting % of wall", "times last", "clock offset us")


def _cluster_cells(cluster: dict | None) -> dict:
    """Per rank, its cells of :data:`_CLUSTER_CELLS` (empty without a cluster)."""
    from .text import CLUSTER_COLUMNS, cluster_rank_cells

    if not cluster:
        return {}
    at = [CLUSTER_COLUMNS.index(c) for c in _CLUSTER_CELLS]
    return {row[0]: [row[i] for i in at] for row in cluster_rank_cells(cluster)}


def _rank_summary(doc: dict) -> list[str]:
    """The cross-rank summary: the ranking in words when the ranks' collectives were
    matched, the slowest and fastest rank, wall spread, the ranks slowest first (with
    their communication wait, share of wall waiting, times last and clock offset)."""
    from .text import rank_order

    ranks, s = doc["ranks"], doc["summary"]
    walls = {r["rank"]: r.get("median_wall_us") for r in ranks}
    out = [f"### Summary across {len(ranks)} ranks", "", *_cluster_findings(doc.get("cluster"))]
    slow, fast, spread = s.get("slowest_rank"), s.get("fastest_rank"), s.get("wall_spread_pct")
    if slow is not None and fast is not None:
        out += [f"Slowest rank **{_cell(slow)}** (median wall {_num(walls.get(slow))} us), "
                f"fastest rank **{_cell(fast)}** ({_num(walls.get(fast))} us): wall spread "
                f"**{'-' if spread is None else f'{spread:.1f}%'}**.", ""]
    extra = _cluster_cells(doc.get("cluster"))
    heads = list(_CLUSTER_CELLS) if extra else []
    out += ["| rank | source | captures | median wall us | parallelism | comm/comp % | "
            "comm exposed us | true | partial | false | envelope-only |"
            + "".join(f" {h} |" for h in heads),
            "|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(heads)]
    for r in rank_order(ranks):
        v = r.get("verdict_counts") or {}
        out.append("| " + " | ".join([
            _cell(r["rank"]), code(os.path.basename(str(r["source"]).rstrip("/")), table=True),
            str(r["captures"]), _num(r.get("median_wall_us")), _num(r.get("median_parallelism")),
            _num(r.get("median_comm_comp_overlap_pct"), 2), _num(r.get("median_comm_exposed_us")),
            *(str(v.get(k, "-")) for k in ("true", "partial", "false", "envelope_only")),
            *(extra.get(str(r["rank"]), ["-"] * len(heads)) if heads else [])]) + " |")
    out.append("")
    return out + _medians(s)


def _medians(s: dict) -> list[str]:
    return [f"Captures {s.get('captures')}, dropped as cold {s.get('dropped_cold')}; medians: "
            f"wall {_num(s.get('median_wall_us'))} us, parallelism "
            f"{_num(s.get('median_parallelism'))}x, overlap_pct "
            f"{_num(s.get('median_overlap_pct'))}.", ""]


def _plan_check(pc: dict, names: str = "short") -> list[str]:
    """``--plan``'s placement check, as the text report gives it."""
    out = [f"**Plan check ({code(pc['candidate'])}).** {pc['ops_found']}/{pc['ops_planned']} "
           f"planned ops found; streams {_cell(pc['stream_mapping'])}; "
           f"{pc['misplaced_count']} misplaced."]
    from ..plan.verify import plan_check_notes

    out += [f"{_cell(note)}." for note in plan_check_notes(pc)]
    out += [f"- misplaced: {code(display_name(str(m['op']), names))} planned on stream {m['planned_stream']} (trace "
            f"{_cell(m['expected_trace_stream'])}) ran on {_cell(m['trace_stream'])}"
            for m in pc["misplaced"][:5]]
    return ["", *out, ""]


def render_markdown(doc: dict, names: str = "short", summary_only: bool = False) -> str:
    """The analysis document as Markdown: unreadable folder members and the cross-rank
    summary first, then each capture's measured fields (not with ``summary_only``), then
    the triage and, for several captures of one run, their medians."""
    lines: list[str] = _broken(doc)
    if doc.get("ranks"):
        lines += _rank_summary(doc)
    for cap in [] if summary_only else doc["captures"]:
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
            lines += _plan_check(cap["plan_check"], names)
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
                    _name(d["name"], names) if d else "-", _w(d["window_us"]) if d else "-",
                    f"{p['overlap_us']:.3f} us", f"{p['overlap_pct']:.3f}", _cell(p["verdict"]),
                    code("+".join(display_name(str(o), names) for o in b["ops"]), table=True)
                    + f" @ {b['start_us']:.3f} us"
                    if b else "-"]) + " |")
            vc = cap["verdict_counts"]
            env = f" ({vc['envelope_only']} envelope-only)" if vc.get("envelope_only") else ""
            lines.append("")
            lines.append(f"{cap['parallel_points_total']} point(s): {vc['true']} true, "
                         f"{vc['partial']} partial, {vc['false']} false{env}.")
        else:
            lines.append("No parallel point: a single compute stream.")
        lines.append("")
        risks = []
        risks += [contention_text(c) for c in cap["contention"]]
        for w in cap["warnings"]:
            risks.append(_cell(w))
        if cap.get("comm_comp_overlap_pct") is not None:
            ref = cap.get("ascend_reference")
            beside = (f" (Ascend's own step trace, {ref['scope']}: "
                      f"{ref['overlapped_pct']:.2f}%)" if ref else "")
            lines.append(f"Comm/comp overlap: {cap['comm_comp_overlap_pct']:.2f}%{beside}.")
        if cap.get("comm_exposed_us") is not None:
            lines.append(f"Communication not overlapped with compute: "
                         f"{_num(cap['comm_exposed_us'])} us.")
            lines.append("")
        lines.append("**(8) Measured risks.** " + ("; ".join(risks) if risks else "none seen."))
        lines.append("")
    tri = doc.get("triage")
    if tri:
        lines.append(f"**Triage against the baseline: {_cell(tri['verdict'])}** — {_cell(tri['summary'])} "
                     f"(wall {tri['baseline']['wall_us']:.3f} -> {tri['multi']['wall_us']:.3f} us, "
                     f"{tri['wall_change_pct']:+.1f}%).")
        lines.append("")
        for e in tri["evidence"]:
            lines.append(f"- {_cell(e)}")
        lines.append("")
    if not doc.get("ranks") and (len(doc["captures"]) > 1 or summary_only) and "summary" in doc:
        lines += [f"### Summary of {len(doc['captures'])} captures", "", *_medians(doc["summary"])]
    return "\n".join(lines)
