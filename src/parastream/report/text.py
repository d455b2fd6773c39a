"""Terminal report of an analysis document (rich tables, plain text when not a TTY).

Op and kernel names are shortened (:func:`parastream.timeline.names.short_name`) unless
``names="full"``; with short names no table row takes more than three lines. A document
with per-rank rows starts with the cross-rank summary: when the ranks' collectives were
matched, the ranking first (the straggler the others waited for and why, the slowest
link, the critical rank per step) and the ranks by the wait they caused (their own
communication wait, comm/comp overlap, share of wall waiting, times last, clock offset);
then the slowest and fastest rank, the wall spread and the ranks slowest first.
``summary_only`` stops there.
"""

from __future__ import annotations

import io
import os
import textwrap
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from ..timeline.names import display_name

_VERDICT_STYLE = {"true": "green", "partial": "yellow", "false": "red", "envelope-only": "magenta"}
#: width of a name column of a table: a short name fits in two of its lines
NAME_WIDTH = 44


def _f(x, nd: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return str(x)


def _win(w) -> str:
    return f"[{w[0]:.3f}, {w[1]:.3f}]"


def render_text(doc: dict, width: int = 120, color: bool = False, names: str = "short",
                summary_only: bool = False) -> str:
    """The analysis document as a readable report: the cross-rank summary first when the
    document has per-rank rows, then each capture, then the triage and (captures of one
    rank or run) the summary. ``names`` is "short" or "full"; ``summary_only`` prints the
    summary, the unreadable members and the triage without the per-capture detail."""
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=color, no_color=not color,
                  highlight=False, emoji=False)
    _broken(con, doc)
    if doc.get("ranks"):
        _summary(con, doc)
    if not summary_only:
        for cap in doc["captures"]:
            _capture(con, cap, names)
        for src in doc.get("sources", []):
            if src.get("hta_comm_comp_overlap_pct") is not None:
                con.print(f"HTA-compatible comm/comp overlap of {src['source']} (whole file, "
                          f"HTA 0.5.0 rules): {src['hta_comm_comp_overlap_pct']:.2f}%",
                          markup=False)
    if "triage" in doc:
        _triage(con, doc["triage"], names)
    if not doc.get("ranks") and (len(doc["captures"]) > 1 or summary_only):
        _summary(con, doc)
    return buf.getvalue()


def _broken(con: Console, doc: dict) -> None:
    """The members of a folder that could not be read, one line each."""
    broken = doc.get("broken") or []
    if not broken:
        return
    s = doc.get("summary", {})
    units = s.get("units", len(broken) + len(doc.get("sources", [])))
    analysed = s.get("units_analysed", units - len(broken))
    con.print(f"{analysed} of {units} analysed; not read:", markup=False)
    for b in broken:
        con.print(f"  {b.get('source')}: {b.get('error')}", markup=False)


def _name_lines(name: str, names: str, width: int, max_lines: int = 2) -> str:
    """A name as the lines of a table cell ``width`` wide: ``max_lines`` lines at most for
    short names (the last cut with an ellipsis), every line for full ones."""
    shown = display_name(name, names)
    lines = textwrap.wrap(shown, max(width, 4), break_on_hyphens=False,
                          max_lines=None if names == "full" else max_lines,
                          placeholder="…") or [shown]
    return "\n".join(lines)


def _name_column(t: Table, header: str, names: str, width: int) -> None:
    """A column for names ``width`` wide: short names come wrapped to it, so a line a
    narrower terminal cannot fit is cut with an ellipsis, not wrapped again; full names
    wrap wherever they must."""
    if names == "full":
        t.add_column(header, overflow="fold", width=width)
    else:
        t.add_column(header, no_wrap=True, overflow="ellipsis", width=width)


def _verdicts(vc: dict) -> str:
    """``true/partial/false`` counts, with the envelope-only ones among the false when any."""
    out = f"{vc.get('true', 0)}/{vc.get('partial', 0)}/{vc.get('false', 0)}"
    return out + (f" ({vc['envelope_only']} env-only)" if vc.get("envelope_only") else "")


def _capture(con: Console, cap: dict, names: str = "short") -> None:
    dev = cap["device"]
    facts = [f"{k}={v}" for k, v in dev.items() if v is not None]
    con.rule(f"{cap['label']}  ({cap['format']})")
    con.print(f"source: {cap['source']}", markup=False)
    if facts:
        con.print("device: " + ", ".join(facts), markup=False)
    con.print(f"wall {_f(cap['wall_us'])} us | busy union {_f(cap['busy_union_us'])} us | "
              f"parallelism {cap['parallelism']:.3f}x | {cap['ops']} ops", markup=False)

    t = Table(title="streams", title_justify="left")
    for c in ("stream", "role", "ops", "busy us", "idle gap us", "wait gap us", "host gap us", "corrupt"):
        t.add_column(c, justify="right" if c not in ("stream", "role") else "left")
    for s in cap["streams"]:
        g = s["gaps"]
        t.add_row(s["id"], s["role"], str(s["ops"]), _f(s["busy_us"]), _f(g["idle_us"]),
                  _f(g["wait_us"]), _f(g["host_bound_us"]), str(s["corrupt_overlaps"] or ""))
    con.print(t)

    if cap["overlaps"]:
        t = Table(title="busy-time overlap with the main stream", title_justify="left")
        for c in ("main", "side", "intersection us", "hidden_frac"):
            t.add_column(c, justify="right" if c in ("intersection us", "hidden_frac") else "left")
        for o in cap["overlaps"]:
            t.add_row(o["main"], o["side"], _f(o["intersection_us"]), f"{o['hidden_frac']:.3f}")
        con.print(t)

    pts = cap["parallel_points"]
    vc = cap["verdict_counts"]
    env = f" ({vc['envelope_only']} envelope-only)" if vc.get("envelope_only") else ""
    title = (f"parallel points ({cap['parallel_points_total']}: {vc['true']} true, "
             f"{vc['partial']} partial, {vc['false']} false{env}")
    title += f"; {len(pts)} longest shown)" if len(pts) < cap["parallel_points_total"] else ")"
    if pts:
        con.print(_points_table(pts, title, names, con.width))
    else:
        con.print("parallel points: none (a single compute stream)")

    conc = cap["concurrency_us"]
    wall = cap["wall_us"] or 1.0
    con.print("concurrency: " + ", ".join(
        f"{k} streams {100.0 * v / wall:.1f}%" for k, v in conc.items() if v > 0), markup=False)
    if cap["comm_comp_overlap_pct"] is not None:
        ref = cap.get("ascend_reference")
        beside = (f" (Ascend's own step trace, {ref['scope']}: {ref['overlapped_pct']:.2f}%)"
                  if ref else "")
        con.print(f"comm/comp overlap (all streams pooled, exact ns): "
                  f"{cap['comm_comp_overlap_pct']:.2f}%{beside}", markup=False)
    if cap.get("comm_exposed_us") is not None:
        con.print(f"communication not overlapped with compute: {_f(cap['comm_exposed_us'])} us",
                  markup=False)
    for c in cap["contention"]:
        con.print(f"core contention ({c['pool']}): streams {c['streams'][0]} + {c['streams'][1]} "
                  f"oversubscribed {_f(c['oversubscribed_us'])} us, demand up to {c['max_demand']} "
                  f"of {c['cores']} {'SMs (by occupancy)' if c['pool'] == 'sm' else 'cores'}, "
                  f"first at {_f(c['first_us'])} us", markup=False)
    if "plan_check" in cap:
        _plan_check(con, cap["plan_check"], names)
    for w in cap["warnings"]:
        con.print(f"warning: {w}", markup=False)


def _points_table(pts: list[dict], title: str, names: str, width: int) -> Table:
    """The parallel points, one row each: the dominator's name and window, the barrier's
    ops and start. The name columns share what the other columns leave of ``width``, and
    each name is wrapped to two lines of its column beforehand: with short names a cell is
    at most three lines (a line a narrower terminal cannot fit is cut, not wrapped)."""
    rows = []
    for p in pts:
        v = p["verdict"]
        rows.append([p["side_stream"], _win(p["side_window_us"]), str(p["side_ops"]),
                     _f(p["overlap_us"]), f"{p['overlap_pct']:.3f}",
                     f"{p['busy_overlap_pct']:.3f}", v])
    heads = ["side", "side window us", "ops", "overlap us", "overlap_pct", "busy ovl", "verdict"]
    fixed = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(heads)]
    has_barrier = any(p["barrier"] for p in pts)
    room = width - sum(fixed) - 3 * (len(heads) + 2) - 1
    win_w = max((len(_win(p["dominator"]["window_us"])) for p in pts if p["dominator"]),
                default=1)
    dom_w = max(win_w, min(NAME_WIDTH, room * 3 // 5 if has_barrier else room))
    bar_w = max(12, min(NAME_WIDTH, room - dom_w)) if has_barrier else len("barrier")
    t = Table(title=title, title_justify="left")
    for h, w in zip(heads[:3], fixed):
        t.add_column(h, no_wrap=True, overflow="ellipsis", min_width=w)
    _name_column(t, "dominator / window us", names, dom_w)
    for h, w in zip(heads[3:], fixed[3:]):
        t.add_column(h, no_wrap=True, overflow="ellipsis", min_width=w)
    _name_column(t, "barrier", names, bar_w)
    for p, r in zip(pts, rows):
        d, b = p["dominator"], p["barrier"]
        t.add_row(*r[:3],
                  f"{_name_lines(d['name'], names, dom_w)}\n{_win(d['window_us'])}" if d else "-",
                  *r[3:6], f"[{_VERDICT_STYLE.get(r[6], 'white')}]{r[6]}[/]",
                  f"{_name_lines('+'.join(b['ops']), names, bar_w)}\n@ {b['start_us']:.3f}"
                  if b else "")
    return t


def _plan_check(con: Console, pc: dict, names: str = "short") -> None:
    con.print(f"plan check ({pc['candidate']}): {pc['ops_found']}/{pc['ops_planned']} planned ops "
              f"found; streams {pc['stream_mapping']}; {pc['misplaced_count']} misplaced",
              markup=False)
    from ..plan.verify import plan_check_notes

    for note in plan_check_notes(pc):
        con.print(f"  {note}", markup=False)
    for m in pc["misplaced"][:5]:
        con.print(f"  misplaced: {display_name(str(m['op']), names)} planned on stream {m['planned_stream']} "
                  f"(trace {m['expected_trace_stream']}) ran on {m['trace_stream']}", markup=False)
    for p in pc["parallel_points"]:
        if p["found"]:
            con.print(f"  {p['parallel_point']}: side {_win(p['side_window_us'])} vs "
                      f"{display_name(p['dominator']['name'], names)} "
                      f"{_win(p['dominator']['window_us'])}: overlap_pct "
                      f"{p['overlap_pct']:.3f}, busy overlap {p['busy_overlap_pct']:.3f} -> "
                      f"{p['verdict']}", markup=False)
        else:
            con.print(f"  {p['parallel_point']}: {p['reason']}", markup=False)


def _summary(con: Console, doc: dict) -> None:
    s = doc["summary"]
    if doc.get("ranks"):
        _rank_summary(con, doc["ranks"], s, doc.get("cluster"))
    else:
        con.rule("summary")
    con.print(f"captures {s['captures']}, dropped as cold {s['dropped_cold']}; medians: wall "
              f"{_f(s['median_wall_us'])} us, parallelism {_f(s['median_parallelism'])}x, "
              f"overlap_pct {_f(s['median_overlap_pct'])}", markup=False)
    for k, v in s.get("median_hidden_frac", {}).items():
        con.print(f"  side {k}: median hidden_frac {_f(v)}", markup=False)
    for n in s.get("notes", []):
        con.print(f"note: {n}", markup=False)


def _rank_summary(con: Console, ranks: list[dict], s: dict, cluster: dict | None) -> None:
    """The cross-rank answers when there are any (:func:`_cluster`), then the slowest and
    fastest rank, the wall spread, and the ranks slowest first."""
    con.rule(f"summary across {len(ranks)} ranks")
    if cluster:
        _cluster(con, cluster)
    walls = {r["rank"]: r.get("median_wall_us") for r in ranks}
    slow, fast = s.get("slowest_rank"), s.get("fastest_rank")
    if slow is not None and fast is not None:
        spread = s.get("wall_spread_pct")
        con.print(f"slowest rank {slow} (median wall {_f(walls.get(slow))} us), fastest rank "
                  f"{fast} ({_f(walls.get(fast))} us): wall spread "
                  f"{'-' if spread is None else f'{spread:.1f}%'}", markup=False)
    t = Table(title="per rank, slowest first", title_justify="left")
    for c in ("rank", "source", "captures", "median wall us", "parallelism", "comm/comp %",
              "comm exposed us", "true/partial/false"):
        t.add_column(c, no_wrap=True, overflow="ellipsis",
                     max_width=32 if c == "source" else None,
                     justify="left" if c in ("source", "true/partial/false") else "right")
    for r in rank_order(ranks):
        t.add_row(str(r["rank"]), os.path.basename(str(r["source"]).rstrip("/")),
                  str(r["captures"]), _f(r.get("median_wall_us")),
                  _f(r.get("median_parallelism")), _f(r.get("median_comm_comp_overlap_pct"), 2),
                  _f(r.get("median_comm_exposed_us")), _verdicts(r.get("verdict_counts") or {}))
    con.print(t)


def _ms(ns: Any) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def cluster_findings(cluster: dict) -> list[tuple[str, str]]:
    """The cross-rank answers in words, as (label, text), most telling first: the
    straggler (the rank the others waited for most) and why, the ranks after it, the
    slowest link, the critical rank of the steps, the collectives matched and their
    arrival skew, then each warning."""
    ranking = cluster.get("ranking") or []
    top = ranking[0] if ranking and ranking[0].get("caused_wait_ns") else None
    matched = (cluster.get("summary") or {}).get("n_matched")
    out = [("straggler", f"rank {top['rank']}: {top['reason']}" if top
            else "unknown: no collective was matched across ranks" if matched == 0
            else "none: no rank made the others wait")]
    after = [r for r in ranking[1:4] if r.get("caused_wait_ns")]
    if top and after:
        out.append(("then", ", ".join(f"rank {r['rank']} ({_ms(r['caused_wait_ns'])} ms caused)"
                                      for r in after)))
    link = cluster.get("slowest_link")
    if link:
        out.append(("slowest link", f"rank {link['src']} to rank {link['dst']}: "
                    f"{link['bandwidth_gbps']:,.2f} GB/s, {link.get('ratio_to_median', 0):.2f}x "
                    f"the median link ({link.get('source')})"))
    steps = [st for st in cluster.get("steps") or [] if st.get("critical_rank") is not None]
    if steps:
        counts: dict = {}
        for st in steps:
            counts[st["critical_rank"]] = counts.get(st["critical_rank"], 0) + 1
        rank, n = max(counts.items(), key=lambda kv: (kv[1], -kv[0]))
        out.append(("critical rank", f"rank {rank} in {n} of {len(cluster['steps'])} steps"))
    s = cluster.get("summary") or {}
    if s.get("n_matched"):
        out.append(("collectives", f"{s['n_matched']} matched across {s['n_ranks']} ranks "
                    f"({s['n_calls']} calls); arrival skew median {_ms(s.get('median_skew_ns'))}"
                    f" ms, max {_ms(s.get('max_skew_ns'))} ms"))
    return out + [("note", w) for w in cluster.get("warnings") or []]


#: the columns of :func:`cluster_rank_cells`
CLUSTER_COLUMNS = ("rank", "caused wait ms", "times last", "comm wait ms", "waiting % of wall",
                   "comm/comp %", "comm exposed ms", "clock offset us")


def cluster_rank_cells(cluster: dict) -> list[list[str]]:
    """One row of :data:`CLUSTER_COLUMNS` per rank, in the ranking's order (the rank that
    made the others wait most first). What the collectives could not measure is "-": the
    waits of a rank none of whose calls was matched, an offset not found."""
    by_rank = {r["rank"]: r for r in cluster.get("ranks") or []}
    rows = []
    for item in cluster.get("ranking") or []:
        r = by_rank.get(item["rank"], {})
        offset = r.get("offset_ns") if r.get("offset_measured") else None
        waits = [_ms(item.get("caused_wait_ns")), str(item.get("times_last", "-")),
                 _ms(r.get("comm_wait_ns")), _f(r.get("wait_share_pct"), 1)]
        if not r.get("matched", 1):
            waits = ["-"] * len(waits)
        rows.append([str(item["rank"]), *waits, _f(r.get("overlap_pct"), 1),
                     _ms(r.get("comm_exposed_ns")),
                     "-" if offset is None else f"{offset / 1e3:,.3f}"])
    return rows


def _cluster(con: Console, cluster: dict) -> None:
    """The ranking in words, then the ranks by the wait they caused."""
    for label, text in cluster_findings(cluster):
        con.print(f"{label}: {text}", markup=False)
    t = Table(title="per rank, by the wait they caused the others", title_justify="left",
              box=box.SIMPLE_HEAD, show_edge=False)
    for c in CLUSTER_COLUMNS:
        t.add_column(c, no_wrap=True, justify="right")
    for row in cluster_rank_cells(cluster):
        t.add_row(*row)
    con.print(t)


def rank_order(ranks: list[dict]) -> list[dict]:
    """The per-rank rows slowest first (largest median wall; ranks without one last)."""
    return sorted(ranks, key=lambda r: (r.get("median_wall_us") is None,
                                        -(r.get("median_wall_us") or 0.0), str(r["rank"])))


def _triage(con: Console, tri: dict, names: str = "short") -> None:
    con.rule("baseline triage")
    b, m = tri["baseline"], tri["multi"]
    con.print(f"wall {_f(b['wall_us'])} -> {_f(m['wall_us'])} us ({tri['wall_change_pct']:+.1f}%), "
              f"parallelism {b['parallelism']:.3f} -> {m['parallelism']:.3f}", markup=False)
    con.print(f"verdict: [bold]{tri['verdict']}[/] - {tri['summary']}")
    for e in tri["evidence"]:
        con.print(f"  - {e}", markup=False)
    if tri["op_type_changes"]:
        t = Table(title="op types whose time changed most", title_justify="left")
        for c in ("type", "baseline us", "multi us", "change", "max dur ratio", "flag"):
            if c == "type":
                t.add_column(c, no_wrap=True, overflow="ellipsis", max_width=60)
            else:
                t.add_column(c, no_wrap=True)
        for r in tri["op_type_changes"][:15]:
            t.add_row(display_name(str(r["type"]), names), _f(r["baseline_us"]), _f(r["multi_us"]),
                      f"{r['change_pct']:+.1f}%" if r["change_pct"] is not None else "new",
                      _f(r["max_dur_ratio"], 2), r["flag"] or "")
        con.print(t)
