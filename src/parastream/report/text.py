"""Terminal report of an analysis document (rich tables, plain text when not a TTY)."""

from __future__ import annotations

import io
import sys
from contextlib import contextmanager
from typing import Any, Iterator

from rich.console import Console
from rich.table import Table

_VERDICT_STYLE = {"true": "green", "partial": "yellow", "false": "red"}


def _f(x, nd: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return str(x)


def _win(w) -> str:
    return f"[{w[0]:.3f}, {w[1]:.3f}]"


def render_text(doc: dict, width: int = 120, color: bool = False) -> str:
    """The analysis document as a readable report."""
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=color, no_color=not color,
                  highlight=False, emoji=False)
    for cap in doc["captures"]:
        _capture(con, cap)
    for src in doc.get("sources", []):
        if src.get("hta_comm_comp_overlap_pct") is not None:
            con.print(f"HTA-compatible comm/comp overlap of {src['source']} (whole file, HTA 0.5.0 "
                      f"rules): {src['hta_comm_comp_overlap_pct']:.2f}%", markup=False)
    if "triage" in doc:
        _triage(con, doc["triage"])
    if len(doc["captures"]) > 1 or doc.get("ranks"):
        _summary(con, doc)
    return buf.getvalue()


def _capture(con: Console, cap: dict) -> None:
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
    title = (f"parallel points ({cap['parallel_points_total']}: {vc['true']} true, "
             f"{vc['partial']} partial, {vc['false']} false")
    title += f"; {len(pts)} longest shown)" if len(pts) < cap["parallel_points_total"] else ")"
    if pts:
        t = Table(title=title, title_justify="left")
        for c in ("side", "side window us", "ops", "dominator / window us", "overlap us",
                  "overlap_pct", "busy ovl", "verdict", "barrier"):
            if c.startswith("dominator") or c == "barrier":
                t.add_column(c, overflow="ellipsis", max_width=40)
            else:
                t.add_column(c, no_wrap=True)
        for p in pts:
            d = p["dominator"]
            b = p["barrier"]
            t.add_row(p["side_stream"], _win(p["side_window_us"]), str(p["side_ops"]),
                      f"{d['name']}\n{_win(d['window_us'])}" if d else "-",
                      _f(p["overlap_us"]), f"{p['overlap_pct']:.3f}", f"{p['busy_overlap_pct']:.3f}",
                      f"[{_VERDICT_STYLE[p['verdict']]}]{p['verdict']}[/]",
                      ("+".join(b["ops"]) + f"\n@ {b['start_us']:.3f}") if b else "")
        con.print(t)
    else:
        con.print("parallel points: none (a single compute stream)")

    conc = cap["concurrency_us"]
    wall = cap["wall_us"] or 1.0
    con.print("concurrency: " + ", ".join(
        f"{k} streams {100.0 * v / wall:.1f}%" for k, v in conc.items() if v > 0), markup=False)
    if cap["comm_comp_overlap_pct"] is not None:
        con.print(f"comm/comp overlap (all streams pooled, exact ns): {cap['comm_comp_overlap_pct']:.2f}%")
    for c in cap["contention"]:
        con.print(f"core contention ({c['pool']}): streams {c['streams'][0]} + {c['streams'][1]} "
                  f"oversubscribed {_f(c['oversubscribed_us'])} us, demand up to {c['max_demand']} "
                  f"of {c['cores']} cores, first at {_f(c['first_us'])} us", markup=False)
    if "plan_check" in cap:
        _plan_check(con, cap["plan_check"])
    for w in cap["warnings"]:
        con.print(f"warning: {w}", markup=False)


def _plan_check(con: Console, pc: dict) -> None:
    con.print(f"plan check ({pc['candidate']}): {pc['ops_found']}/{pc['ops_planned']} planned ops "
              f"found; streams {pc['stream_mapping']}; {pc['misplaced_count']} misplaced",
              markup=False)
    from ..plan.verify import plan_check_notes

    for note in plan_check_notes(pc):
        con.print(f"  {note}", markup=False)
    for m in pc["misplaced"][:5]:
        con.print(f"  misplaced: {m['op']} planned on stream {m['planned_stream']} "
                  f"(trace {m['expected_trace_stream']}) ran on {m['trace_stream']}", markup=False)
    for p in pc["parallel_points"]:
        if p["found"]:
            con.print(f"  {p['parallel_point']}: side {_win(p['side_window_us'])} vs "
                      f"{p['dominator']['name']} {_win(p['dominator']['window_us'])}: overlap_pct "
                      f"{p['overlap_pct']:.3f}, busy overlap {p['busy_overlap_pct']:.3f} -> "
                      f"{p['verdict']}", markup=False)
        else:
            con.print(f"  {p['parallel_point']}: {p['reason']}", markup=False)


def _summary(con: Console, doc: dict) -> None:
    s = doc["summary"]
    con.rule("summary")
    if doc.get("ranks"):
        t = Table(title="per rank", title_justify="left")
        for c in ("rank", "source", "captures", "median wall us", "median parallelism",
                  "comm/comp %", "true/partial/false"):
            t.add_column(c)
        for r in doc["ranks"]:
            v = r["verdict_counts"]
            t.add_row(str(r["rank"]), r["source"], str(r["captures"]), _f(r["median_wall_us"]),
                      _f(r["median_parallelism"]), _f(r["median_comm_comp_overlap_pct"], 2),
                      f"{v['true']}/{v['partial']}/{v['false']}")
        con.print(t)
    con.print(f"captures {s['captures']}, dropped as cold {s['dropped_cold']}; medians: wall "
              f"{_f(s['median_wall_us'])} us, parallelism {_f(s['median_parallelism'])}x, "
              f"overlap_pct {_f(s['median_overlap_pct'])}", markup=False)
    for k, v in s.get("median_hidden_frac", {}).items():
        con.print(f"  side {k}: median hidden_frac {_f(v)}", markup=False)
    for n in s.get("notes", []):
        con.print(f"note: {n}", markup=False)


def _triage(con: Console, tri: dict) -> None:
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
            t.add_row(r["type"], _f(r["baseline_us"]), _f(r["multi_us"]),
                      f"{r['change_pct']:+.1f}%" if r["change_pct"] is not None else "new",
                      _f(r["max_dur_ratio"], 2), r["flag"] or "")
        con.print(t)


@contextmanager
def progress(enabled: bool) -> Iterator[Any]:
    """A transient rich progress display on stderr, only when stderr is a terminal (yields
    None otherwise, so callers can skip updates)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as prog:
        yield prog
