"""One self-contained HTML report for ``parastream analyze``.

The file works offline and alone: the CSS and the vanilla JS (package data in
``parastream/report/assets``) are inlined, no fonts, images or scripts from anywhere else. Every string that comes from a trace is escaped
(:func:`html.escape` in markup; JSON with ``<``, ``>`` and ``&`` as ``\\u003c``... for the
data the chart script reads, so an op named ``</script>`` cannot end the script block).

Per capture the page shows facts, a zoomable canvas Gantt chart (one lane per stream, waits
hatched, each parallel point's side window and dominator window outlined in its verdict's
colour, the barrier marked), the verdict table of parallel points and the streams,
overlaps, concurrency, contention and warnings tables. A capture with more than
:data:`DETAIL_LIMIT` ops is drawn as a binned overview (per stream, busy fraction in
:data:`N_BINS` time bins, computed here with numpy) plus the detailed bars around its
parallel points only, so the page stays small and fast for a million ops.

The script marks ``<html data-parastream="ok">`` after drawing (``"error: ..."`` from
``window.onerror``, also shown in a banner), which headless browser tests read with
``--dump-dom``. URL fragments: ``#view=a,b`` (us) or ``#point=N`` zoom every chart on
load; ``#selftest`` drives zoom, pan, hover and the colour modes once and checks that bars
were painted.
"""

from __future__ import annotations

import html
import math
import os
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import msgspec
import numpy as np

from ..timeline.intervals import union
from ..timeline.model import CORES, KINDS, Timeline
from ..timeline.names import display_name
from ..timeline.overlap import VERDICTS
from ..atomic import write_atomic
from .perfetto import stream_order, us_floats

#: captures with more ops than this are drawn as a binned overview plus neighbourhoods
DETAIL_LIMIT = 20_000
#: time bins of the overview heat strips (and of the minimap)
N_BINS = 2000
#: most detailed ops embedded around parallel points in overview mode
NEIGHBOURHOOD_LIMIT = 20_000


@cache
def asset(name: str) -> str:
    """A file of the page's assets (``report.css``, ``report.js``), read from the package."""
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")



# ------------------------------------------------------------------ small helpers
def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def script_json(obj: Any) -> str:
    """JSON text that is safe inside ``<script type="application/json">``.

    ``<``, ``>`` and ``&`` become ``\\u003c``, ``\\u003e``, ``\\u0026`` (and the JS line
    separators U+2028/9 are escaped too), so no string can close the script element or
    open a comment; ``JSON.parse`` restores them.
    """
    text = msgspec.json.encode(obj).decode("utf-8")
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _fmt_us(x: Any, digits: int = 3) -> str:
    v = _num(x)
    return "–" if v is None else f"{v:,.{digits}f}"


def _fmt_frac(x: Any) -> str:
    v = _num(x)
    return "–" if v is None else f"{v:.3f}"


def _fmt_pct(x: Any) -> str:
    v = _num(x)
    return "–" if v is None else f"{100 * v:.1f}%"


def _window(w: Any) -> str:
    if isinstance(w, (list, tuple)) and len(w) == 2:
        return f"[{_fmt_us(w[0])}, {_fmt_us(w[1])}]"
    return "–"


def _bar(frac: Any, cls: str = "") -> str:
    """A small inline bar for a fraction in [0, 1]."""
    v = _num(frac)
    width = 0.0 if v is None else max(0.0, min(1.0, v)) * 100
    return f'<span class="minibar {cls}"><span style="width:{width:.1f}%"></span></span>'


def _verdict_badge(v: Any) -> str:
    v = str(v)
    cls = v if v in VERDICTS else "unknown"
    return f'<span class="badge v-{cls}">{_esc(v)}</span>'


def _role_badge(role: Any) -> str:
    role = str(role or "?")
    cls = role if role in ("main", "side", "comm") else "other"
    return f'<span class="role r-{cls}">{_esc(role)}</span>'


def _opname(name: Any, names: str = "short") -> str:
    """An op name in a table: short unless ``names`` is "full", the whole name on hover."""
    full = "" if name is None else str(name)
    shown = display_name(full, names)
    title = f' title="{_esc(full)}"' if shown != full else ""
    return f'<span class="opname"{title}>{_esc(shown)}</span>'


def _table(headers: list[str], rows: list[str], cls: str = "", empty: str = "none") -> str:
    """A table; ``headers`` are HTML already, ``rows`` whole ``<tr>`` strings."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    if not rows:
        rows = [f'<tr><td colspan="{len(headers)}" class="empty">{_esc(empty)}</td></tr>']
    return (f'<div class="table-wrap"><table class="{cls}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


# ------------------------------------------------------------------ binning
def busy_bins(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Fraction of each bin ``[edges[i], edges[i+1])`` covered by the union of intervals;
    ``starts``/``ends`` are integers (the timeline's nanoseconds), ``edges`` in the same
    unit."""
    ms, me = union(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
    if len(ms) == 0:
        return np.zeros(len(edges) - 1)
    cum = np.concatenate(([0.0], np.cumsum(me - ms)))
    k = np.searchsorted(ms, edges, side="right")  # intervals starting at or before t
    tail = np.where(k > 0, np.maximum(0.0, me[np.maximum(k - 1, 0)] - edges), 0.0)
    covered = cum[k] - tail
    width = np.diff(edges)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(width > 0, np.diff(covered) / width, 0.0)
    return np.clip(frac, 0.0, 1.0)


# ------------------------------------------------------------------ chart data
def _lanes(tl: Timeline, analysis: dict) -> tuple[list[dict], dict[str, int]]:
    """Lane list in display order (analysis order, then the rest naturally sorted)."""
    lanes: list[dict] = []
    index: dict[str, int] = {}
    for s in analysis.get("streams") or []:
        sid = str(s.get("id"))
        if sid not in index:
            index[sid] = len(lanes)
            lanes.append({"id": sid, "role": str(s.get("role") or "?")})
    for code in stream_order(tl.streams):
        sid = tl.streams[code]
        if sid not in index:
            index[sid] = len(lanes)
            lanes.append({"id": sid, "role": "?"})
    return lanes, index


def _point_range(p: dict) -> tuple[float, float] | None:
    vals: list[float] = []
    for w in (p.get("side_window_us"), (p.get("dominator") or {}).get("window_us")):
        if isinstance(w, (list, tuple)) and len(w) == 2:
            vals += [v for v in (_num(w[0]), _num(w[1])) if v is not None]
    b = _num((p.get("barrier") or {}).get("start_us"))
    if b is not None:
        vals.append(b)
    return (min(vals), max(vals)) if vals else None


def _win(w: Any) -> list[float] | None:
    """A ``[start, end]`` window as two plain floats (None when malformed)."""
    if isinstance(w, (list, tuple)) and len(w) == 2:
        a, b = _num(w[0]), _num(w[1])
        if a is not None and b is not None:
            return [a, b]
    return None


def gantt_data(tl: Timeline, analysis: dict, names: str = "short") -> dict:
    """Everything the chart script needs for one capture, in compact columns: ``names``
    holds the full op names (tooltips) and, where ``names`` mode shortens any, ``short``
    the names the bars are labelled with (a dominator or barrier likewise)."""
    t0 = int(analysis.get("t0_ns", tl.t0_ns))
    lanes, index = _lanes(tl, analysis)
    extent = _extent(tl, analysis, t0)
    points = [_chart_point(i, p, lanes, index, names)
              for i, p in enumerate(analysis.get("parallel_points") or [])]
    shown = _shown_ops(tl, analysis, t0)
    idx = np.flatnonzero(shown.op_mask)
    widx = np.flatnonzero(shown.wait_mask)
    used_names = np.unique(np.concatenate([tl.name[idx], tl.wait_name[widx]]).astype(np.int64))
    used_types = np.unique(tl.type[idx].astype(np.int64))
    ops, waits = _bar_columns(tl, (idx, widx), (used_names, used_types), index, t0)
    bins, wbins = _lane_bins(tl, len(lanes), index, t0, extent)
    full_names = [tl.names[i] for i in used_names.tolist()]
    short_names = [display_name(nm, names) for nm in full_names]
    return {
        **({"short": short_names} if short_names != full_names else {}),
        "mode": shown.mode, "extent": round(extent, 3), "nOps": len(tl), "nWaits": tl.n_waits,
        "shownOps": int(len(idx)), "truncated": shown.truncated,
        "detailWindows": shown.windows,
        "lanes": lanes, "names": full_names,
        "types": [tl.types[i] for i in used_types.tolist()], "kinds": list(KINDS),
        "cores": list(CORES), "ops": ops, "waits": waits, "points": points,
        "bins": {"n": N_BINS, "busy": bins, "wait": wbins},
    }


def _extent(tl: Timeline, analysis: dict, t0: int) -> float:
    """The chart's time extent (us from ``t0``): the wall, the last op or wait end; 1 when
    there is nothing."""
    rel_end = (int(tl.end_ns.max()) - t0) / 1000 if len(tl) else 0.0
    rel_wend = (int(tl.wait_end_ns.max()) - t0) / 1000 if tl.n_waits else 0.0
    extent = max(_num(analysis.get("wall_us")) or 0.0, rel_end, rel_wend)
    return extent if extent > 0 else 1.0


def _chart_point(i: int, p: dict, lanes: list[dict], index: dict[str, int],
                 names: str) -> dict:
    """Parallel point ``i`` as the chart draws it: its side window on the side stream's
    lane, its dominator's window, its verdict, and its barrier on the main lane."""
    dom = p.get("dominator") or None
    bar = p.get("barrier") or None
    side_lane = index.get(str(p.get("side_stream")), -1)
    dom_lane = index.get(str(dom.get("stream")), -1) if dom else -1
    main_lane = dom_lane if dom_lane >= 0 else next(
        (k for k, ln in enumerate(lanes) if ln["role"] == "main"), -1)
    return {
        "i": i + 1, "lane": side_lane, "side": _win(p.get("side_window_us")),
        "dom": ({"lane": dom_lane, "name": str(dom.get("name", "")),
                 "w": _win(dom.get("window_us"))} | _short(dom, names) if dom else None),
        "verdict": str(p.get("verdict")), "pct": _num(p.get("overlap_pct")),
        "ov": _num(p.get("overlap_us")),
        "barrier": ({"name": str(bar.get("name", "")), "t": _num(bar.get("start_us")),
                     "lane": main_lane} | _short(bar, names) if bar else None),
    }


@dataclass
class _Shown:
    """Which ops and waits get detailed bars: all of them (``detail``), or, in
    ``overview`` mode, those in the ``windows`` around the parallel points."""

    mode: str
    op_mask: np.ndarray
    wait_mask: np.ndarray
    windows: list[list[float]]
    #: the neighbourhoods held more than :data:`NEIGHBOURHOOD_LIMIT` ops: the first kept
    truncated: bool = False


def _shown_ops(tl: Timeline, analysis: dict, t0: int) -> _Shown:
    """All ops up to :data:`DETAIL_LIMIT`; beyond it the widest context around the
    parallel points that stays within :data:`NEIGHBOURHOOD_LIMIT` ops."""
    n = len(tl)
    if n <= DETAIL_LIMIT:
        return _Shown("detail", np.ones(n, bool), np.ones(tl.n_waits, bool), [])
    ranges = [r for r in (_point_range(p) for p in analysis.get("parallel_points") or []) if r]
    for pad_frac in (4.0, 2.0, 1.0, 0.5, 0.0):
        shown = _neighbourhoods(tl, t0, ranges, pad_frac)
        if shown.op_mask.sum() <= NEIGHBOURHOOD_LIMIT:
            break
    if shown.op_mask.sum() > NEIGHBOURHOOD_LIMIT:
        keep = np.flatnonzero(shown.op_mask)[:NEIGHBOURHOOD_LIMIT]
        shown.op_mask = np.zeros(n, bool)
        shown.op_mask[keep] = True
        shown.truncated = True
    shown.windows = _merged(shown.windows)
    return shown


def _neighbourhoods(tl: Timeline, t0: int, ranges: list[tuple[float, float]],
                    pad_frac: float) -> _Shown:
    """The ops and waits within each range (us from ``t0``) widened by ``pad_frac`` of its
    length (at least 0.5 us when padded), and those windows."""
    rs = (tl.start_ns - t0).astype(np.float64) / 1000.0
    re_ = (tl.end_ns - t0).astype(np.float64) / 1000.0
    wrs = (tl.wait_start_ns - t0).astype(np.float64) / 1000.0
    wre = (tl.wait_end_ns - t0).astype(np.float64) / 1000.0
    om, wm, wins = np.zeros(len(tl), bool), np.zeros(tl.n_waits, bool), []
    for lo, hi in ranges:
        pad = max(pad_frac * (hi - lo), 0.5 if pad_frac else 0.0)
        a, b = lo - pad, hi + pad
        wins.append([round(a, 3), round(b, 3)])
        om |= (re_ >= a) & (rs <= b)
        wm |= (wre >= a) & (wrs <= b)
    return _Shown("overview", om, wm, wins)


def _merged(windows: list[list[float]]) -> list[list[float]]:
    """Overlapping windows merged, so the chart clears each region once."""
    merged: list[list[float]] = []
    for a, b in sorted(windows):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged


def _bar_columns(tl: Timeline, shown: tuple[np.ndarray, np.ndarray],
                 used: tuple[np.ndarray, np.ndarray], index: dict[str, int],
                 t0: int) -> tuple[dict, dict]:
    """The shown ops' and waits' columns (lane, start, duration, name and type codes into
    the ``used`` names and types, ...)."""
    idx, widx = shown
    used_names, used_types = used
    lane_of = np.array([index[s] for s in tl.streams] or [0], np.int32)
    name_map = np.zeros(len(tl.names) + 1, np.int64)
    name_map[used_names] = np.arange(len(used_names))
    type_map = np.zeros(len(tl.types) + 1, np.int64)
    type_map[used_types] = np.arange(len(used_types))
    ops = {
        "lane": lane_of[tl.stream[idx]].tolist() if len(idx) else [],
        "s": us_floats(tl.start_ns[idx] - t0),
        "d": us_floats(tl.end_ns[idx] - tl.start_ns[idx]),
        "n": name_map[tl.name[idx]].tolist(),
        "k": tl.kind[idx].tolist(),
        "t": type_map[tl.type[idx]].tolist(),
        "b": tl.block_dim[idx].tolist(),
        "c": tl.core[idx].tolist(),
    }
    waits = {
        "lane": lane_of[tl.wait_stream[widx]].tolist() if len(widx) else [],
        "s": us_floats(tl.wait_start_ns[widx] - t0),
        "d": us_floats(tl.wait_end_ns[widx] - tl.wait_start_ns[widx]),
        "n": name_map[tl.wait_name[widx]].tolist(),
        "on": [int(lane_of[o]) if o >= 0 else -1 for o in tl.wait_on[widx].tolist()],
    }
    return ops, waits


def _lane_bins(tl: Timeline, n_lanes: int, index: dict[str, int], t0: int,
               extent: float) -> tuple[list[list[int]], list[list[int] | None]]:
    """Per lane, the busy percentage in each of :data:`N_BINS` time bins (heat strips,
    minimap), and the waits' likewise (None for a lane without waits)."""
    edges_ns = np.linspace(0.0, extent, N_BINS + 1) * 1000.0  # in the timeline's ns
    bins, wbins = [], []
    for k in range(n_lanes):
        codes = [c for c, s in enumerate(tl.streams) if index[s] == k]
        m = np.isin(tl.stream, codes) if codes else np.zeros(len(tl), bool)
        bins.append(np.rint(100 * busy_bins(tl.start_ns[m] - t0, tl.end_ns[m] - t0,
                                            edges_ns)).astype(int).tolist())
        wm = np.isin(tl.wait_stream, codes) if codes else np.zeros(tl.n_waits, bool)
        wb = busy_bins(tl.wait_start_ns[wm] - t0, tl.wait_end_ns[wm] - t0,
                       edges_ns) if wm.any() else None
        wbins.append(np.rint(100 * wb).astype(int).tolist() if wb is not None else None)
    return bins, wbins


# ------------------------------------------------------------------ sections
def _facts(tl: Timeline, a: dict) -> str:
    dev = a.get("device") or {}
    items: list[tuple[str, str]] = [
        ("source", _esc(a.get("source", tl.source))),
        ("format", _esc(a.get("format", tl.format))),
    ]
    if a.get("label"):
        items.append(("label", _esc(a["label"])))
    if dev.get("name"):
        items.append(("device", _esc(dev["name"])))
    for key, label in (("ai_core_num", "AI cores"), ("vector_core_num", "vector cores"),
                       ("sm_count", "SMs")):
        if dev.get(key) is not None:
            items.append((label, _esc(dev[key])))
    items.append(("wall", f"{_fmt_us(a.get('wall_us'))} us"))
    par = _num(a.get("parallelism"))
    items.append(("parallelism", "–" if par is None else f"{par:.3f}x"))
    items.append(("ops", f"{len(tl):,}"))
    if tl.n_waits:
        items.append(("waits", f"{tl.n_waits:,}"))
    items.append(("streams", str(len(a.get("streams") or tl.streams))))
    comm = _num(a.get("comm_comp_overlap_pct"))
    if comm is not None:  # already a percentage (timeline.comm), unlike the 0-1 fractions
        ref = a.get("ascend_reference")
        beside = (f' <span class="sub">(Ascend\'s step trace, {_esc(ref["scope"])}: '
                  f'{_num(ref["overlapped_pct"]):.1f}%)</span>' if ref else "")
        items.append(("comm/comp overlap", f"{comm:.1f}%{beside}"))
    pts = a.get("parallel_points") or []
    counts = a.get("verdict_counts")
    if not isinstance(counts, dict):
        counts = {v: sum(1 for p in pts if p.get("verdict") == v) for v in VERDICTS}
    if any(counts.values()):
        items.append(("verdicts", " ".join(  # envelope_only: the envelope-only verdict's count
            f'{_verdict_badge(str(v).replace("_", "-"))}&nbsp;{_esc(c)}'
            for v, c in counts.items() if c)))
    return '<dl class="facts">' + "".join(
        f'<div><dt>{k}</dt><dd>{v}</dd></div>' for k, v in items) + "</dl>"


def _gantt_block(ci: int, data: dict) -> str:
    note = ""
    if data["mode"] == "overview":
        note = (f'<div class="mode-note">Overview mode: {data["nOps"]:,} ops are drawn as '
                f'per-stream busy fraction in {N_BINS:,} time bins; detailed bars '
                f'({data["shownOps"]:,} ops) only around the parallel points'
                f'{" (truncated)" if data["truncated"] else ""}.</div>')
    return f"""
<div class="gantt" data-capture="{ci}">
  <div class="toolbar">
    <div class="btns">
      <button type="button" data-act="in" title="Zoom in (W)">+</button>
      <button type="button" data-act="out" title="Zoom out (S)">&minus;</button>
      <button type="button" data-act="left" title="Pan left (A)">&#9664;</button>
      <button type="button" data-act="right" title="Pan right (D)">&#9654;</button>
      <button type="button" data-act="reset" title="Show everything (0, double click)">Reset</button>
    </div>
    <label>colour <select data-ctl="color">
      <option value="kind">by kind</option><option value="role">by stream role</option>
      <option value="name">by op name</option></select></label>
    <label><input type="checkbox" data-ctl="waits" checked> waits</label>
    <label><input type="checkbox" data-ctl="windows" checked> parallel windows</label>
    <span class="range" data-out="range"></span>
  </div>
  <div class="legend" data-out="legend"></div>
  <div class="chart-wrap">
    <canvas class="chart" tabindex="0" aria-label="Gantt chart of device streams"></canvas>
    <div class="tip" hidden></div>
  </div>
  <canvas class="minimap" aria-label="overview: drag to choose the range"></canvas>
  <div class="hint">Wheel: zoom · drag: pan · shift+drag: zoom to range · double click: reset ·
   W/S/A/D keys · drag on the strip below the chart to pick a range · click a row of the
   parallel points table to zoom to it.</div>
  {note}
  <script type="application/json" class="gantt-data">{script_json(data)}</script>
</div>"""


def _short(op: dict, names: str) -> dict:
    """``{"short": ...}`` when the op's shown name differs from its name, else nothing."""
    full = str(op.get("name", ""))
    shown = display_name(full, names)
    return {"short": shown} if shown != full else {}


def _points_table(a: dict, names: str = "short") -> str:
    rows = []
    for i, p in enumerate(a.get("parallel_points") or []):
        dom = p.get("dominator") or None
        bar = p.get("barrier") or None
        dom_cell = (f'{_opname(dom.get("name"), names)}'
                    f'<div class="sub">stream {_esc(dom.get("stream"))}</div>' if dom else "–")
        if bar:
            full = ", ".join(str(o) for o in (bar.get("ops") or []))
            ops = ", ".join(display_name(str(o), names) for o in (bar.get("ops") or []))
            title = f' title="ops {_esc(full)}"' if ops != full else ""
            bar_cell = (f'{_opname(bar.get("name"), names)}'
                        f'<div class="sub"{title}>at {_fmt_us(bar.get("start_us"))} us'
                        f'{"; ops " + _esc(ops) if ops else ""}</div>')
        else:
            bar_cell = "–"
        verdict = str(p.get("verdict"))
        rows.append(
            f'<tr class="point v-row-{_esc(verdict)}" data-point="{i}" title="click to zoom the chart">'
            f'<td class="num">P{i + 1}</td>'
            f'<td>{_esc(p.get("side_stream"))}</td>'
            f'<td class="num">{_window(p.get("side_window_us"))}</td>'
            f'<td class="num">{_esc(p.get("side_ops", "–"))}</td>'
            f'<td>{dom_cell}</td>'
            f'<td class="num">{_window(dom.get("window_us")) if dom else "–"}</td>'
            f'<td class="num">{_fmt_us(p.get("overlap_us"))}</td>'
            f'<td class="num">{_fmt_frac(p.get("overlap_pct"))} {_bar(p.get("overlap_pct"), "v-" + _esc(verdict))}</td>'
            f'<td class="num">{_fmt_frac(p.get("busy_overlap_pct"))}</td>'
            f'<td>{_verdict_badge(verdict)}</td>'
            f'<td>{bar_cell}</td></tr>')
    return _table(["#", "side stream", "side window (us)", "side ops", "dominator",
                   "dominator window (us)", "overlap (us)", "overlap_pct", "busy overlap",
                   "verdict", "barrier"], rows, "points", "no parallel points found")


def _points_note(a: dict) -> str:
    """Say so when the analysis listed only some of the points it found."""
    listed = len(a.get("parallel_points") or [])
    total = a.get("parallel_points_total")
    if not isinstance(total, int) or total <= listed:
        return ""
    counts = a.get("verdict_counts") or {}
    by = ", ".join(f"{_esc(k)} {_esc(v)}" for k, v in counts.items())
    return (f'<p class="explain">Showing {listed} of {total} parallel points'
            f'{" (all points: " + by + ")" if by else ""}.</p>')


def _streams_table(a: dict) -> str:
    wall = _num(a.get("wall_us")) or 0.0
    streams = a.get("streams") or []
    host = any("host_bound_us" in (s.get("gaps") or {}) for s in streams)
    rows = []
    for s in streams:
        gaps = s.get("gaps") or {}
        busy = _num(s.get("busy_us"))
        frac = busy / wall if busy is not None and wall > 0 else None
        corrupt = int(s.get("corrupt_overlaps") or 0)
        rows.append(
            f'<tr><td>{_esc(s.get("id"))}</td><td>{_role_badge(s.get("role"))}</td>'
            f'<td class="num">{_esc(s.get("ops"))}</td>'
            f'<td class="num">{_fmt_us(busy)}</td>'
            f'<td class="num">{_fmt_pct(frac)} {_bar(frac)}</td>'
            f'<td class="num">{_esc(gaps.get("count", "–"))}</td>'
            f'<td class="num">{_fmt_us(gaps.get("idle_us"))}</td>'
            f'<td class="num">{_fmt_us(gaps.get("wait_us"))}</td>'
            + (f'<td class="num">{_fmt_us(gaps.get("host_bound_us"))}</td>' if host else "")
            + f'<td class="num{" bad" if corrupt else ""}">{corrupt}</td></tr>')
    return _table(["stream", "role", "ops", "busy (us)", "busy / wall", "gaps",
                   "idle gaps (us)", "wait-covered (us)"] + (["host-bound (us)"] if host else [])
                  + ["corrupt overlaps"], rows, "streams")


def _overlaps_table(a: dict) -> str:
    rows = [
        f'<tr><td>{_esc(o.get("main"))}</td><td>{_esc(o.get("side"))}</td>'
        f'<td class="num">{_fmt_us(o.get("intersection_us"))}</td>'
        f'<td class="num">{_fmt_frac(o.get("hidden_frac"))} {_bar(o.get("hidden_frac"))}</td></tr>'
        for o in a.get("overlaps") or []]
    return _table(["main", "side", "intersection (us)", "hidden_frac"], rows, "overlaps",
                  "no main/side pairs")


def _concurrency(a: dict) -> str:
    conc = a.get("concurrency_us") or {}
    items = []
    for k, v in conc.items():
        try:
            items.append((int(k), _num(v) or 0.0))
        except (TypeError, ValueError):
            continue
    if not items:
        return '<p class="empty">no concurrency data</p>'
    items.sort()
    total = sum(v for _, v in items) or 1.0
    top = max(v for _, v in items) or 1.0
    rows = "".join(
        f'<div class="hrow"><span class="hk">{k} active</span>'
        f'<span class="hbar"><span class="k{min(k, 4)}" style="width:{100 * v / top:.2f}%"></span></span>'
        f'<span class="hv">{_fmt_us(v)} us</span><span class="hp">{100 * v / total:.1f}%</span></div>'
        for k, v in items)
    return f'<div class="histogram">{rows}</div>'


def _contention_table(a: dict) -> str:
    rows = []
    for c in a.get("contention") or []:
        streams = " + ".join(str(s) for s in c.get("streams") or [])
        rows.append(
            f'<tr><td>{_esc(streams)}</td><td class="num">{_fmt_us(c.get("oversubscribed_us"))}</td>'
            f'<td class="num">{_esc(c.get("max_demand"))}</td><td class="num">{_esc(c.get("cores"))}</td>'
            f'<td class="num">{_fmt_us(c.get("first_us"))}</td></tr>')
    return _table(["streams", "oversubscribed (us)", "max block dim demand", "cores",
                   "first at (us)"], rows, "contention",
                  "no core oversubscription found (or block dims / core count unknown)")


def _plan_check(a: dict, names: str = "short") -> str:
    """``analyze --plan``'s placement check, as the text and Markdown reports give it."""
    pc = a.get("plan_check")
    if not pc:
        return ""
    notes = [f"{_esc(pc.get('ops_found'))}/{_esc(pc.get('ops_planned'))} planned ops found; "
             f"plan stream &rarr; trace stream: "
             + ", ".join(f"{_esc(k)} &rarr; {_esc(v)}"
                         for k, v in (pc.get("stream_mapping") or {}).items())
             + f"; {_esc(pc.get('misplaced_count'))} misplaced"]
    from ..plan.verify import plan_check_notes

    notes += [_esc(note) for note in plan_check_notes(pc)]
    rows = [f"<tr><td>{_opname(m.get('op'), names)}</td><td class=\"num\">{_esc(m.get('planned_stream'))}</td>"
            f"<td>{_esc(m.get('expected_trace_stream'))}</td><td>{_esc(m.get('trace_stream'))}</td></tr>"
            for m in (pc.get("misplaced") or [])[:20]]
    return (f"<h3>Plan check: <span class=\"label\">{_esc(pc.get('candidate'))}</span></h3>"
            + "".join(f'<p class="explain">{n}</p>' for n in notes)
            + _table(["op", "planned stream", "expected trace stream", "ran on"], rows,
                     "plan-check", "every planned op ran where the plan put it"))


def _warnings(tl: Timeline, a: dict) -> str:
    seen: list[str] = []
    for w in list(a.get("warnings") or []) + list(tl.warnings):
        if str(w) not in seen:
            seen.append(str(w))
    if not seen:
        return '<p class="empty">no warnings</p>'
    return '<ul class="warnings">' + "".join(f"<li>{_esc(w)}</li>" for w in seen) + "</ul>"


def _capture_section(ci: int, tl: Timeline, a: dict, n_captures: int,
                     names: str = "short") -> str:
    label = a.get("label") or a.get("source") or tl.source
    heading = f"Capture {ci + 1}" if n_captures > 1 else "Capture"
    return f"""
<section class="capture card" id="capture-{ci + 1}">
  <h2>{heading}: <span class="label">{_esc(label)}</span></h2>
  {_facts(tl, a)}
  <h3>Timeline</h3>
  {_gantt_block(ci, gantt_data(tl, a, names))}
  <h3>Parallel points</h3>
  <p class="explain">overlap_pct = overlap / min(side window, dominator window); true &ge; 0.5,
   partial between 0.05 and 0.5, false &le; 0.05. Busy overlap = |U<sub>main</sub> &cap;
   U<sub>side</sub>| / |U<sub>side</sub>| inside the side window.</p>
  {_points_note(a)}{_points_table(a, names)}
  <div class="grid2">
    <div><h3>Streams</h3>{_streams_table(a)}</div>
    <div><h3>Main / side overlap</h3>{_overlaps_table(a)}
      <h3>Concurrency</h3><p class="explain">Time with k streams busy at once.</p>{_concurrency(a)}</div>
  </div>
  {_plan_check(a, names)}
  <h3>Core contention</h3>
  {_contention_table(a)}
  <h3>Warnings</h3>
  {_warnings(tl, a)}
</section>"""


# ------------------------------------------------------------------ summary (generic)
def _scalar(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return _esc("–" if v is None else str(v).lower())
    if isinstance(v, float):
        return _esc(f"{v:,.3f}" if math.isfinite(v) else str(v))
    if isinstance(v, int):
        return _esc(f"{v:,}" if abs(v) >= 10_000 else str(v))
    if str(v) in VERDICTS:
        return _verdict_badge(v)
    if isinstance(v, str) and "\n" in v:  # multi-line text (a Mermaid DAG, code): keep lines
        return f'<pre class="text">{_esc(v)}</pre>'
    return _esc(v)


def render_value(v: Any, depth: int = 0) -> str:
    """Any JSON-like value as HTML: dicts as definition lists, lists of dicts as tables."""
    if depth > 6:
        return _esc(msgspec.json.encode(v).decode("utf-8", "replace"))
    if isinstance(v, dict):
        if not v:
            return '<span class="empty">–</span>'
        return '<dl class="kv">' + "".join(
            f"<dt>{_esc(k)}</dt><dd>{render_value(x, depth + 1)}</dd>" for k, x in v.items()
        ) + "</dl>"
    if isinstance(v, (list, tuple)):
        if not v:
            return '<span class="empty">–</span>'
        if all(isinstance(x, dict) for x in v):
            keys: list[str] = []
            for x in v:
                keys += [k for k in x if k not in keys]
            rows = ["<tr>" + "".join(f"<td>{render_value(x.get(k), depth + 1)}</td>" for k in keys)
                    + "</tr>" for x in v]
            return _table([_esc(k) for k in keys], rows, "generic")
        if all(not isinstance(x, (dict, list, tuple)) for x in v):
            if len(v) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                   for x in v):
                return _window(v)
            if sum(len(str(x)) for x in v) < 120:
                return ", ".join(_scalar(x) for x in v)
        return "<ul>" + "".join(f"<li>{render_value(x, depth + 1)}</li>" for x in v) + "</ul>"
    return _scalar(v)


#: rows of the per-collective skew table and of the communication matrix in the page (the
#: JSON document has them all)
TOP_COLLECTIVES = 20
TOP_LINKS = 30


def _cluster_html(cluster: dict) -> str:
    """The cross-rank answers: the ranking in words, the ranks by the wait they caused,
    a rank x step heat map of wait time, the collectives of largest arrival skew and the
    communication matrix's links, slowest first."""
    from .text import CLUSTER_COLUMNS, cluster_findings, cluster_rank_cells

    facts = "".join(f"<div><dt>{_esc(label)}</dt><dd>{_esc(text)}</dd></div>"
                    for label, text in cluster_findings(cluster))
    rows = ["<tr>" + "".join(f'<td class="num">{_esc(c)}</td>' for c in row) + "</tr>"
            for row in cluster_rank_cells(cluster)]
    return (f'<dl class="facts">{facts}</dl>'
            "<h3>Per rank, by the wait they caused the others</h3>"
            + _table([_esc(c) for c in CLUSTER_COLUMNS], rows, "ranks")
            + "<h3>Wait per rank and step</h3>" + _wait_heatmap(cluster)
            + _skew_table(cluster.get("collectives") or [])
            + _matrix_table(cluster.get("matrix") or []))


def _heat_fill(frac: float) -> str:
    """White (no wait) to deep red (the longest wait of the map)."""
    g = int(round(245 - 190 * frac))
    return f"rgb(245,{g},{g})" if frac > 0 else "rgb(250,250,250)"


def _wait_heatmap(cluster: dict) -> str:
    """An inline SVG: one row per rank, one column per step, each cell's colour the time
    that rank waited for others in that step's collectives (its value on hover)."""
    ranks = [r["rank"] for r in cluster.get("ranks") or []]
    steps = cluster.get("steps") or []
    if not ranks or not steps:
        return '<p class="note">no step of matched collectives</p>'
    waits = np.array([st.get("wait_ns_by_rank") or [0] * len(ranks) for st in steps],
                     dtype=float).T  # rank x step
    top = waits.max() if waits.size else 0.0
    cw, ch, left, head = max(6, min(48, 960 // len(steps))), max(6, min(18, 720 // len(ranks))), 64, 18
    cells = []
    for i, rank in enumerate(ranks):
        cells.append(f'<text x="{left - 6}" y="{head + i * ch + ch - 4}" text-anchor="end" '
                     f'font-size="{min(11, ch)}">rank {_esc(rank)}</text>')
        for j, st in enumerate(steps):
            w = waits[i, j]
            cells.append(f'<rect x="{left + j * cw}" y="{head + i * ch}" width="{cw - 1}" '
                         f'height="{ch - 1}" fill="{_heat_fill(w / top if top else 0.0)}">'
                         f'<title>rank {_esc(rank)}, step {_esc(st.get("step"))}: waited '
                         f'{w / 1e6:,.3f} ms</title></rect>')
    labels = "".join(f'<text x="{left + j * cw + cw / 2}" y="12" text-anchor="middle" '
                     f'font-size="10">{_esc(st.get("step"))}</text>'
                     for j, st in enumerate(steps) if len(steps) <= 40 or j % 10 == 0)
    width, height = left + cw * len(steps) + 4, head + ch * len(ranks) + 4
    return (f'<div class="table-wrap"><svg class="heatmap" role="img" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" '
            f'aria-label="wait per rank and step">{labels}{"".join(cells)}</svg></div>'
            f'<p class="note">rows: ranks; columns: steps; darker: longer wait for the '
            f'others (longest {top / 1e6:,.3f} ms)</p>')


def _skew_table(collectives: list[dict]) -> str:
    """The collectives of largest arrival skew: who arrived last, the others' wait."""
    top = sorted(collectives, key=lambda c: -(c.get("skew_ns") or 0))[:TOP_COLLECTIVES]
    rows = [f'<tr><td>{_esc(c.get("op"))}</td><td>{_esc(c.get("group"))}</td>'
            f'<td class="num">{_esc(c.get("seq"))}</td><td class="num">{_esc(c.get("step"))}</td>'
            f'<td class="num">{_esc(c.get("members"))}</td>'
            f'<td class="num">{_fmt_us((c.get("skew_ns") or 0) / 1e3)}</td>'
            f'<td class="num">{_esc(c.get("last_rank"))}</td>'
            f'<td class="num">{_fmt_us((c.get("wait_ns") or 0) / 1e3)}</td>'
            f'<td class="num">{_esc(c.get("nbytes"))}</td></tr>' for c in top]
    return (f"<h3>Collectives of largest arrival skew (top {len(top)} of "
            f"{len(collectives)})</h3>"
            + _table(["op", "group", "seq", "step", "ranks", "skew (us)", "last rank",
                      "others' wait (us)", "bytes"], rows, "skew"))


def _matrix_table(matrix: list[dict]) -> str:
    """The communication matrix's links, lowest achieved bandwidth first."""
    top = sorted(matrix, key=lambda m: (m.get("bandwidth_gbps") is None,
                                        m.get("bandwidth_gbps") or 0.0))[:TOP_LINKS]
    rows = [f'<tr><td class="num">{_esc(m.get("src"))}</td><td class="num">{_esc(m.get("dst"))}</td>'
            f'<td class="num">{_esc(m.get("bytes"))}</td>'
            f'<td class="num">{_fmt_us((m.get("time_ns") or 0) / 1e3)}</td>'
            f'<td class="num">{_fmt_frac(m.get("bandwidth_gbps"))}</td>'
            f'<td>{_esc(m.get("source"))}</td><td>{_esc(m.get("transport"))}</td></tr>'
            for m in top]
    return (f"<h3>Communication matrix, slowest links first ({len(top)} of {len(matrix)})</h3>"
            + _table(["from rank", "to rank", "bytes", "time (us)", "GB/s", "from", "transport"],
                     rows, "matrix"))


def _rank_section(summary: dict) -> str:
    """Across ranks, before anything else: the members that could not be read, the
    cross-rank answers when the ranks' collectives were matched (``cluster``:
    :func:`_cluster_html`), the slowest and fastest rank with the wall spread, and the
    ranks slowest first."""
    broken = summary.get("broken") or []
    ranks = summary.get("per_rank") or []
    if not broken and not ranks:
        return ""
    parts = []
    if broken:
        units = summary.get("units", len(broken))
        analysed = summary.get("units_analysed", units - len(broken))
        parts.append(f'<p class="explain"><b>{_esc(analysed)} of {_esc(units)} analysed.</b> '
                     "Not read:</p><ul class=\"warnings\">" + "".join(
                         f"<li>{_esc(b.get('source'))}: {_esc(b.get('error'))}</li>"
                         for b in broken) + "</ul>")
    if summary.get("cluster"):
        parts.append(_cluster_html(summary["cluster"]))
    if ranks:
        from .text import rank_order

        walls = {r.get("rank"): r.get("median_wall_us") for r in ranks}
        slow, fast = summary.get("slowest_rank"), summary.get("fastest_rank")
        spread = _num(summary.get("wall_spread_pct"))
        if slow is not None and fast is not None:
            parts.append(
                '<dl class="facts">'
                f'<div><dt>slowest rank</dt><dd>{_esc(slow)} ({_fmt_us(walls.get(slow))} us)</dd></div>'
                f'<div><dt>fastest rank</dt><dd>{_esc(fast)} ({_fmt_us(walls.get(fast))} us)</dd></div>'
                f'<div><dt>wall spread</dt><dd>{"–" if spread is None else f"{spread:.1f}%"}</dd></div>'
                "</dl>")
        rows = []
        for r in rank_order(ranks):
            v = r.get("verdict_counts") or {}
            pct = _num(r.get("median_comm_comp_overlap_pct"))
            rows.append(
                f'<tr><td class="num">{_esc(r.get("rank"))}</td>'
                f'<td><span class="opname" title="{_esc(r.get("source"))}">'
                f'{_esc(os.path.basename(str(r.get("source")).rstrip("/")))}</span></td>'
                f'<td class="num">{_esc(r.get("captures"))}</td>'
                f'<td class="num">{_fmt_us(r.get("median_wall_us"))}</td>'
                f'<td class="num">{_fmt_frac(r.get("median_parallelism"))}</td>'
                f'<td class="num">{"–" if pct is None else f"{pct:.1f}%"}</td>'
                f'<td class="num">{_fmt_us(r.get("median_comm_exposed_us"))}</td>'
                f'<td>{_verdict_counts(v)}</td></tr>')
        parts.append(_table(["rank", "source", "captures", "median wall (us)", "parallelism",
                             "comm/comp overlap", "comm not overlapped (us)", "verdicts"],
                            rows, "ranks"))
    title = f"Across {len(ranks)} ranks, slowest first" if ranks else "Inputs"
    if summary.get("cluster") and ranks:
        title = f"Across {len(ranks)} ranks: who made the others wait"
    return f"""
<section class="ranks card" id="ranks">
  <h2>{title}</h2>
  {"".join(parts)}
</section>"""


def _verdict_counts(counts: dict) -> str:
    """Badges with counts; ``envelope_only`` (among the false ones) as its verdict's badge."""
    return " ".join(f'{_verdict_badge(str(k).replace("_", "-"))}&nbsp;{_esc(c)}'
                    for k, c in counts.items() if c)


def _summary_section(summary: dict, n_captures: int) -> str:
    if not summary:
        return ""
    triage = summary.get("triage")
    drawn = ("triage", "module_dag", "module_dag_mermaid", "cluster")
    rest = {k: v for k, v in summary.items() if k not in drawn}
    triage_html = ""
    if triage not in (None, "", [], {}):
        triage_html = (f'<div class="triage"><div class="triage-title">Triage</div>'
                       f'{render_value(triage)}</div>')
    return f"""
<section class="summary card" id="summary">
  <h2>Summary{f" across {n_captures} captures" if n_captures > 1 else ""}</h2>
  {triage_html}
  {render_value(rest) if rest else ""}
  {_dag_block(summary.get("module_dag"), summary.get("module_dag_mermaid"))}
</section>"""


def _dag_block(dag: Any, mermaid: Any) -> str:
    """The module DAG drawn inline (:mod:`parastream.report.dag`), with its Mermaid source
    folded away for pasting elsewhere."""
    if not dag and not mermaid:
        return ""
    from .dag import dag_svg, legend_html

    html = '<h3>Module DAG</h3>'
    if dag and dag.get("nodes"):
        total, shown = dag.get("total_modules"), sum(n.get("kind") != "input" for n in dag["nodes"])
        more = (f'<div class="note">first {shown} of {total} modules drawn</div>'
                if total and total > shown else "")
        html += (f'<div class="dag-wrap">{dag_svg(dag["nodes"], dag["edges"], "module DAG")}'
                 f"</div>{legend_html()}{more}")
    if mermaid:
        html += (f'<details class="mermaid-src"><summary>Mermaid source</summary>'
                 f'<pre class="text">{_esc(mermaid)}</pre></details>')
    return html


# ------------------------------------------------------------------ page
def render_html(captures: list[tuple[Timeline, dict]], summary: dict, title: str,
                names: str = "short") -> str:
    """The whole report page as one self-contained HTML string.

    ``captures`` pairs each timeline with its analysis dict (times in us relative to the
    analysis' ``t0_ns``); ``summary`` is rendered generically (triage first when present),
    after the cross-rank summary when it has per-rank rows (``per_rank``) or unreadable
    members (``broken``). Op names in tables and chart labels are short unless ``names``
    is "full"; the whole name shows on hover.
    """
    n = len(captures)
    nav = ""
    if n > 1:
        links = "".join(
            f'<a href="#capture-{i + 1}">{i + 1}. {_esc(a.get("label") or a.get("source") or tl.source)}</a>'
            for i, (tl, a) in enumerate(captures))
        nav = f'<nav class="toc"><a href="#summary">Summary</a>{links}</nav>'
    sections = "".join(_capture_section(i, tl, a, n, names)
                       for i, (tl, a) in enumerate(captures))
    return (
        '<!DOCTYPE html>\n<html lang="en" data-parastream="loading">\n<head>\n'
        '<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="generator" content="parastream">\n'
        f"<title>{_esc(title)}</title>\n<style>{asset('report.css')}</style>\n</head>\n<body>\n"
        f'<header class="top"><div class="brand">parastream</div><h1>{_esc(title)}</h1>'
        f'<div class="subtitle">{n} capture{"s" if n != 1 else ""}</div></header>\n'
        f"{nav}\n"
        '<div id="ps-error" class="error" hidden></div>\n'
        '<noscript><div class="error">The timeline charts need JavaScript; the tables below '
        "do not.</div></noscript>\n"
        f"<main>{_rank_section(summary or {})}{_summary_section(summary or {}, n)}{sections}"
        "</main>\n"
        '<footer>Generated by parastream. Times are microseconds from the first op or wait '
        "of each capture.</footer>\n"
        f"<script>{asset('report.js')}</script>\n</body>\n</html>\n"
    )


def write_html(path: str | os.PathLike[str], captures: list[tuple[Timeline, dict]],
               summary: dict, title: str, names: str = "short") -> None:
    """Render the report and write it to ``path`` atomically."""
    write_atomic(path, render_html(captures, summary, title, names))
