"""One self-contained HTML report for ``parastream analyze``.

The file works offline and alone: inline CSS, inline vanilla JS, no fonts, images or
scripts from anywhere else. Every string that comes from a trace is escaped
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
from typing import Any

import msgspec
import numpy as np

from ..timeline.intervals import union
from ..timeline.model import CORES, KINDS, Timeline
from ..timeline.names import display_name
from ..timeline.overlap import VERDICTS
from .atomic import write_atomic
from .perfetto import stream_order, us_floats

#: captures with more ops than this are drawn as a binned overview plus neighbourhoods
DETAIL_LIMIT = 20_000
#: time bins of the overview heat strips (and of the minimap)
N_BINS = 2000
#: most detailed ops embedded around parallel points in overview mode
NEIGHBOURHOOD_LIMIT = 20_000



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
    lane_of = np.array([index[s] for s in tl.streams] or [0], np.int32)

    rel_end = (int(tl.end_ns.max()) - t0) / 1000 if len(tl) else 0.0
    rel_wend = (int(tl.wait_end_ns.max()) - t0) / 1000 if tl.n_waits else 0.0
    extent = max(_num(analysis.get("wall_us")) or 0.0, rel_end, rel_wend)
    if extent <= 0:
        extent = 1.0

    points = []
    for i, p in enumerate(analysis.get("parallel_points") or []):
        dom = p.get("dominator") or None
        bar = p.get("barrier") or None
        side_lane = index.get(str(p.get("side_stream")), -1)
        dom_lane = index.get(str(dom.get("stream")), -1) if dom else -1
        main_lane = dom_lane if dom_lane >= 0 else next(
            (k for k, ln in enumerate(lanes) if ln["role"] == "main"), -1)
        points.append({
            "i": i + 1, "lane": side_lane, "side": _win(p.get("side_window_us")),
            "dom": ({"lane": dom_lane, "name": str(dom.get("name", "")),
                     "w": _win(dom.get("window_us"))} | _short(dom, names) if dom else None),
            "verdict": str(p.get("verdict")), "pct": _num(p.get("overlap_pct")),
            "ov": _num(p.get("overlap_us")),
            "barrier": ({"name": str(bar.get("name", "")), "t": _num(bar.get("start_us")),
                         "lane": main_lane} | _short(bar, names) if bar else None),
        })

    # which ops get detailed bars
    n = len(tl)
    rs = (tl.start_ns - t0).astype(np.float64) / 1000.0
    re_ = (tl.end_ns - t0).astype(np.float64) / 1000.0
    wrs = (tl.wait_start_ns - t0).astype(np.float64) / 1000.0
    wre = (tl.wait_end_ns - t0).astype(np.float64) / 1000.0
    detail_windows: list[list[float]] = []
    truncated = False
    if n <= DETAIL_LIMIT:
        mode = "detail"
        op_mask = np.ones(n, bool)
        wait_mask = np.ones(tl.n_waits, bool)
    else:
        mode = "overview"
        ranges = [r for r in (_point_range(p) for p in analysis.get("parallel_points") or []) if r]

        def masks(pad_frac: float) -> tuple[np.ndarray, np.ndarray, list[list[float]]]:
            om, wm, wins = np.zeros(n, bool), np.zeros(tl.n_waits, bool), []
            for lo, hi in ranges:
                pad = max(pad_frac * (hi - lo), 0.5 if pad_frac else 0.0)
                a, b = lo - pad, hi + pad
                wins.append([round(a, 3), round(b, 3)])
                om |= (re_ >= a) & (rs <= b)
                wm |= (wre >= a) & (wrs <= b)
            return om, wm, wins

        # the widest context around the points that stays within the op budget
        for pad_frac in (4.0, 2.0, 1.0, 0.5, 0.0):
            op_mask, wait_mask, detail_windows = masks(pad_frac)
            if op_mask.sum() <= NEIGHBOURHOOD_LIMIT:
                break
        if op_mask.sum() > NEIGHBOURHOOD_LIMIT:
            keep = np.flatnonzero(op_mask)[:NEIGHBOURHOOD_LIMIT]
            op_mask = np.zeros(n, bool)
            op_mask[keep] = True
            truncated = True
        # merge overlapping windows so the chart clears each region once
        detail_windows.sort()
        merged: list[list[float]] = []
        for a, b in detail_windows:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        detail_windows = merged

    idx = np.flatnonzero(op_mask)
    widx = np.flatnonzero(wait_mask)
    used_names = np.unique(np.concatenate([tl.name[idx], tl.wait_name[widx]]).astype(np.int64))
    name_map = np.zeros(len(tl.names) + 1, np.int64)
    name_map[used_names] = np.arange(len(used_names))
    used_types = np.unique(tl.type[idx].astype(np.int64))
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

    # binned busy fraction per lane (heat strips, minimap), waits likewise
    edges_ns = np.linspace(0.0, extent, N_BINS + 1) * 1000.0  # in the timeline's ns
    bins, wbins = [], []
    for k in range(len(lanes)):
        codes = [c for c, s in enumerate(tl.streams) if index[s] == k]
        m = np.isin(tl.stream, codes) if codes else np.zeros(n, bool)
        bins.append(np.rint(100 * busy_bins(tl.start_ns[m] - t0, tl.end_ns[m] - t0,
                                            edges_ns)).astype(int).tolist())
        wm = np.isin(tl.wait_stream, codes) if codes else np.zeros(tl.n_waits, bool)
        wb = busy_bins(tl.wait_start_ns[wm] - t0, tl.wait_end_ns[wm] - t0,
                       edges_ns) if wm.any() else None
        wbins.append(np.rint(100 * wb).astype(int).tolist() if wb is not None else None)

    full_names = [tl.names[i] for i in used_names.tolist()]
    short_names = [display_name(nm, names) for nm in full_names]
    return {
        **({"short": short_names} if short_names != full_names else {}),
        "mode": mode, "extent": round(extent, 3), "nOps": n, "nWaits": tl.n_waits,
        "shownOps": int(len(idx)), "truncated": truncated, "detailWindows": detail_windows,
        "lanes": lanes, "names": full_names,
        "types": [tl.types[i] for i in used_types.tolist()], "kinds": list(KINDS),
        "cores": list(CORES), "ops": ops, "waits": waits, "points": points,
        "bins": {"n": N_BINS, "busy": bins, "wait": wbins},
    }


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


def _rank_section(summary: dict) -> str:
    """Across ranks, before anything else: the members that could not be read, the
    slowest and fastest rank with the wall spread, and the ranks slowest first."""
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
    drawn = ("triage", "module_dag", "module_dag_mermaid")
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
        f"<title>{_esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
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
        f"<script>{JS}</script>\n</body>\n</html>\n"
    )


def write_html(path: str | os.PathLike[str], captures: list[tuple[Timeline, dict]],
               summary: dict, title: str, names: str = "short") -> None:
    """Render the report and write it to ``path`` atomically."""
    write_atomic(path, render_html(captures, summary, title, names))



# ------------------------------------------------------------------ inline assets
CSS = r"""
:root{--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--soft:#f6f8fa;--card:#fff;--bg:#eef1f4;
--accent:#0969da;--true:#2e9d4f;--partial:#c98a00;--false:#d64545;--envelope:#a0459b;--main:#4e79a7;--side:#59a14f;
--comm:#b07aa1}
*{box-sizing:border-box}
html{font:14px/1.45 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,"Helvetica Neue",Arial,
"Noto Sans",sans-serif;color:var(--fg);background:var(--bg)}
body{margin:0}
header.top{background:#24292f;color:#fff;padding:14px 28px 12px}
header.top .brand{font-size:12px;letter-spacing:.12em;text-transform:uppercase;color:#8fb8ff}
header.top h1{margin:2px 0 0;font-size:21px;font-weight:600}
header.top .subtitle{color:#c9d1d9;font-size:13px}
nav.toc{display:flex;flex-wrap:wrap;gap:4px 14px;padding:8px 28px;background:#fff;
border-bottom:1px solid var(--line);position:sticky;top:0;z-index:5}
nav.toc a{color:var(--accent);text-decoration:none;font-size:13px}
nav.toc a:hover{text-decoration:underline}
main{padding:16px 28px;max-width:1680px;margin:0 auto}
.dag-wrap{overflow:auto;max-height:720px;border:1px solid var(--line);border-radius:6px;
background:#fff}
.dag-wrap svg{display:block}.dag-wrap text{fill:var(--fg);font-family:inherit}
.dag-legend{color:var(--muted);font-size:12px;margin:6px 0}
.dag-key{display:inline-block;width:12px;height:12px;border:1px solid;border-radius:2px;
vertical-align:middle;margin:0 4px 0 10px}
.dag-line{display:inline-block;width:22px;vertical-align:middle;margin:0 4px 0 10px}
details.mermaid-src{margin-top:6px;color:var(--muted)}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 18px 18px;
margin:0 0 18px;box-shadow:0 1px 2px rgba(31,35,40,.06)}
h2{font-size:17px;margin:0 0 10px;font-weight:600}
h2 .label{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:15px;
word-break:break-all}
h3{font-size:14px;margin:18px 0 6px;font-weight:600}
.explain{color:var(--muted);font-size:12.5px;margin:0 0 6px}
dl.facts{display:flex;flex-wrap:wrap;gap:6px;margin:0}
dl.facts>div{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:4px 10px}
dl.facts dt{font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
dl.facts dd{margin:0;font-weight:600;font-variant-numeric:tabular-nums;word-break:break-all}
.table-wrap{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:5px 8px;border-bottom:1px solid #eaeef2;text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600;font-size:12px;color:#424a53;white-space:nowrap;
border-bottom:1px solid var(--line)}
tbody tr:nth-child(even){background:#fbfcfd}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.bad{color:var(--false);font-weight:600}
td.empty,.empty{color:var(--muted);font-style:italic}
tr.point{cursor:pointer}
tr.point:hover{background:#eaf2ff}
tr.v-row-true td:first-child{box-shadow:inset 3px 0 var(--true)}
tr.v-row-partial td:first-child{box-shadow:inset 3px 0 var(--partial)}
tr.v-row-false td:first-child{box-shadow:inset 3px 0 var(--false)}
tr.v-row-envelope-only td:first-child{box-shadow:inset 3px 0 var(--envelope)}
.opname{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;
word-break:break-all}
.sub{color:var(--muted);font-size:11.5px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;
color:#fff;background:#8c959f}
.badge.v-true{background:var(--true)}.badge.v-partial{background:var(--partial)}
.badge.v-false{background:var(--false)}.badge.v-envelope-only{background:var(--envelope)}
.role{display:inline-block;padding:0 7px;border-radius:4px;font-size:12px;border:1px solid;
background:#fff}
.role.r-main{color:var(--main)}.role.r-side{color:var(--side)}.role.r-comm{color:var(--comm)}
.role.r-other{color:var(--muted)}
.minibar{display:inline-block;width:56px;height:7px;background:#e7ebef;border-radius:4px;
vertical-align:middle;margin-left:4px;overflow:hidden}
.minibar>span{display:block;height:100%;background:#6e8fb5}
.minibar.v-true>span{background:var(--true)}.minibar.v-partial>span{background:var(--partial)}
.minibar.v-false>span{background:var(--false)}
.minibar.v-envelope-only>span{background:var(--envelope)}
.grid2{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:0 24px}
@media (max-width:1100px){.grid2{grid-template-columns:minmax(0,1fr)}}
.histogram{font-size:12.5px}
.hrow{display:grid;grid-template-columns:70px 1fr 110px 50px;gap:8px;align-items:center;
padding:2px 0}
.hk{color:var(--muted)}.hv,.hp{text-align:right;font-variant-numeric:tabular-nums}
.hbar{height:12px;background:#f0f2f4;border-radius:3px;overflow:hidden}
.hbar>span{display:block;height:100%;background:#9aa7b4}
.hbar>.k1{background:#7f9cc0}.hbar>.k2{background:#59a14f}.hbar>.k3{background:#3d8a37}
.hbar>.k4{background:#2a6b25}
ul.warnings{margin:0;padding-left:20px;color:#7d4e00}
ul.warnings li{margin:2px 0}
.triage{border:1px solid #f0c36d;background:#fff8e6;border-radius:6px;padding:8px 12px;margin:0 0 12px}
.triage-title{font-weight:700;color:#7d4e00;margin-bottom:4px}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:3px 16px;margin:0}
dl.kv dt{color:var(--muted)}
dl.kv dd{margin:0;font-variant-numeric:tabular-nums;word-break:break-word}
dl.kv dl.kv{border-left:2px solid #eaeef2;padding-left:10px}
.error{background:#ffebe9;border:1px solid #ff8182;color:#82071e;padding:8px 12px;
margin:12px 28px;border-radius:6px}
.gantt{border:1px solid var(--line);border-radius:6px;background:#fff;padding:6px 8px 8px}
.toolbar{display:flex;flex-wrap:wrap;align-items:center;gap:6px 14px;font-size:12.5px;
padding:2px 0 6px}
.toolbar .btns{display:flex;gap:2px}
.toolbar button{font:inherit;min-width:30px;height:26px;padding:0 8px;border:1px solid var(--line);
background:var(--soft);border-radius:5px;cursor:pointer;color:var(--fg)}
.toolbar button:hover{background:#eaeef2}
.toolbar select{font:inherit;height:26px}
.toolbar .range{margin-left:auto;color:var(--muted);font-variant-numeric:tabular-nums}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;color:#424a53;padding:0 0 6px}
.legend .sw{display:inline-block;width:14px;height:10px;border-radius:2px;margin-right:5px;
vertical-align:-1px}
.chart-wrap{position:relative}
canvas.chart{display:block;width:100%;cursor:grab;outline:none;border-top:1px solid #eaeef2}
canvas.chart.dragging{cursor:grabbing}
canvas.minimap{display:block;width:100%;height:46px;margin-top:6px;cursor:crosshair;
border:1px solid #eaeef2;border-radius:4px}
.tip{position:absolute;pointer-events:none;background:rgba(28,33,40,.94);color:#fff;
font-size:12px;line-height:1.4;padding:6px 9px;border-radius:6px;max-width:460px;z-index:3;
box-shadow:0 4px 14px rgba(0,0,0,.25);white-space:nowrap}
.tip .t-name{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-weight:600;
white-space:normal;word-break:break-all;margin-bottom:2px}
.tip .t-full{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:11px;
color:#c9d1d9;white-space:normal;word-break:break-all;max-height:8.5em;overflow:hidden;
margin-bottom:3px}
.tip .t-row{color:#c9d1d9;font-variant-numeric:tabular-nums}
.tip .t-row b{color:#fff;font-weight:600}
.hint{color:var(--muted);font-size:11.5px;margin-top:5px}
.mode-note{margin-top:6px;font-size:12px;color:#7d4e00;background:#fff8e6;border:1px solid #f0c36d;
border-radius:4px;padding:4px 8px}
footer{color:var(--muted);font-size:12px;padding:8px 28px 24px;text-align:center}
"""

JS = r"""
(function () {
"use strict";
var root = document.documentElement;
var failed = false;
function fail(msg) {
  failed = true;
  root.setAttribute("data-parastream", "error: " + msg);
  var box = document.getElementById("ps-error");
  if (box) { box.hidden = false; box.textContent = "Chart script error: " + msg; }
}
window.addEventListener("error", function (ev) {
  fail((ev && (ev.message || (ev.error && ev.error.message))) || "unknown error");
});
window.addEventListener("unhandledrejection", function (ev) {
  fail("unhandled rejection: " + (ev && ev.reason && ev.reason.message || ev.reason));
});

var KIND_COLORS = ["#4e79a7", "#f28e2b", "#e3b23c", "#b07aa1"];
var ROLE_COLORS = {main: "#4e79a7", side: "#59a14f", comm: "#b07aa1"};
var OTHER_COLOR = "#8c959f";
var VERDICT_COLORS = {"true": "#2e9d4f", "partial": "#c98a00", "false": "#d64545",
                      "envelope-only": "#a0459b"};
var BARRIER_COLOR = "#cf222e";
var DARK_TEXT = {"#e3b23c": 1, "#f28e2b": 1};
var FONT = '11px -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,Arial,sans-serif';
var FONT_B = '600 12px -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,Arial,sans-serif';

function fmtUs(x) {
  if (x === null || x === undefined || !isFinite(x)) return "\u2013";
  var a = Math.abs(x);
  if (a >= 1e6) return (x / 1e6).toFixed(6).replace(/0{1,3}$/, "") + " s";
  if (a >= 1e3) return (x / 1e3).toFixed(6).replace(/0{1,3}$/, "") + " ms";
  return x.toFixed(3) + " us";
}
function fmtTick(x, step) {
  var unit = 1, suf = " us";
  if (step >= 1e5) { unit = 1e6; suf = " s"; } else if (step >= 100) { unit = 1e3; suf = " ms"; }
  var s = step / unit;
  var dec = Math.max(0, Math.min(6, Math.ceil(-Math.log10(s) - 1e-9)));
  return (x / unit).toFixed(dec) + suf;
}
function niceStep(span, n) {
  var raw = span / Math.max(1, n);
  var mag = Math.pow(10, Math.floor(Math.log10(raw)));
  var r = raw / mag;
  return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}
function hashHue(str) {
  var h = 2166136261;
  for (var i = 0; i < str.length; i++) { h ^= str.charCodeAt(i); h = Math.imul(h, 16777619); }
  return (h >>> 0) % 360;
}
function lowerBound(idx, key, value) {
  // first position p in idx with key[idx[p]] >= value (idx sorted by key)
  var lo = 0, hi = idx.length;
  while (lo < hi) { var mid = (lo + hi) >> 1; if (key[idx[mid]] < value) lo = mid + 1; else hi = mid; }
  return lo;
}
function el(tag, cls, text) {
  var e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function clamp(x, a, b) { return x < a ? a : x > b ? b : x; }

function Gantt(box, data) {
  this.box = box; this.d = data;
  this.canvas = box.querySelector("canvas.chart");
  this.ctx = this.canvas.getContext("2d");
  this.mini = box.querySelector("canvas.minimap");
  this.mctx = this.mini.getContext("2d");
  this.tip = box.querySelector(".tip");
  this.rangeOut = box.querySelector('[data-out="range"]');
  this.legendOut = box.querySelector('[data-out="legend"]');
  this.labelW = 150; this.axisH = 22; this.markH = 18; this.laneH = 24; this.padB = 4;
  this.lanesTop = this.axisH + this.markH;
  this.extent = data.extent > 0 ? data.extent : 1;
  this.minSpan = Math.min(this.extent, 0.01);
  this.view = [0, this.extent];
  this.colorBy = "kind"; this.showWaits = true; this.showWindows = true;
  this.hover = null; this.drag = null; this.sel = null; this.pending = false;
  this.focus = -1; this.miniImg = null;
  var L = data.lanes.length, k, i;
  this.laneOps = []; this.laneMax = []; this.laneWaits = []; this.laneWaitMax = [];
  for (k = 0; k < L; k++) { this.laneOps.push([]); this.laneMax.push(0); this.laneWaits.push([]); this.laneWaitMax.push(0); }
  var ops = data.ops, w = data.waits;
  for (i = 0; i < ops.s.length; i++) {
    k = ops.lane[i];
    if (k >= 0 && k < L) { this.laneOps[k].push(i); if (ops.d[i] > this.laneMax[k]) this.laneMax[k] = ops.d[i]; }
  }
  for (i = 0; i < w.s.length; i++) {
    k = w.lane[i];
    if (k >= 0 && k < L) { this.laneWaits[k].push(i); if (w.d[i] > this.laneWaitMax[k]) this.laneWaitMax[k] = w.d[i]; }
  }
  this.nameColors = [];
  this.kindsPresent = {};
  for (i = 0; i < ops.k.length; i++) this.kindsPresent[ops.k[i]] = 1;
  this.bind();
  this.buildLegend();
  this.resize();
}

Gantt.prototype.X = function (t) { return this.labelW + (t - this.view[0]) * this.plotW / (this.view[1] - this.view[0]); };
Gantt.prototype.T = function (x) { return this.view[0] + (x - this.labelW) * (this.view[1] - this.view[0]) / this.plotW; };
Gantt.prototype.laneY = function (k) { return this.lanesTop + k * this.laneH; };

Gantt.prototype.resize = function () {
  var dpr = window.devicePixelRatio || 1;
  var W = Math.max(360, this.canvas.parentNode.clientWidth || 800);
  var H = this.lanesTop + Math.max(1, this.d.lanes.length) * this.laneH + this.padB;
  this.dpr = dpr; this.W = W; this.H = H; this.plotW = Math.max(50, W - this.labelW - 10);
  this.canvas.style.height = H + "px";
  this.canvas.width = Math.round(W * dpr); this.canvas.height = Math.round(H * dpr);
  var MW = Math.max(360, this.mini.clientWidth || W), MH = 46;
  this.MW = MW; this.MH = MH;
  this.mini.width = Math.round(MW * dpr); this.mini.height = Math.round(MH * dpr);
  this.miniImg = null;
  this.draw();
};

Gantt.prototype.request = function () {
  var self = this;
  if (this.pending) return;
  this.pending = true;
  var raf = window.requestAnimationFrame || function (f) { return setTimeout(f, 16); };
  raf(function () { self.pending = false; try { self.draw(); } catch (e) { fail(e.message || String(e)); } });
};

Gantt.prototype.setView = function (a, b) {
  var span = clamp(b - a, this.minSpan, this.extent);
  var mid = (a + b) / 2;
  a = mid - span / 2;
  if (a < 0) a = 0;
  if (a + span > this.extent) a = this.extent - span;
  this.view = [a, a + span];
  this.request();
};
Gantt.prototype.zoom = function (factor, anchor) {
  var v = this.view, span = v[1] - v[0];
  if (anchor === undefined) anchor = (v[0] + v[1]) / 2;
  var ns = clamp(span * factor, this.minSpan, this.extent);
  var a = anchor - (anchor - v[0]) * ns / span;
  this.setView(a, a + ns);
};
Gantt.prototype.pan = function (frac) {
  var v = this.view, dt = (v[1] - v[0]) * frac;
  this.setView(v[0] + dt, v[1] + dt);
};
Gantt.prototype.reset = function () { this.focus = -1; this.setView(0, this.extent); };
Gantt.prototype.pointRange = function (p) {
  var vals = [];
  if (p.side) vals.push(p.side[0], p.side[1]);
  if (p.dom && p.dom.w) vals.push(p.dom.w[0], p.dom.w[1]);
  if (p.barrier && p.barrier.t !== null) vals.push(p.barrier.t);
  if (!vals.length) return null;
  return [Math.min.apply(null, vals), Math.max.apply(null, vals)];
};
Gantt.prototype.zoomToPoint = function (i) {
  var p = this.d.points[i];
  if (!p) return;
  var r = this.pointRange(p);
  if (!r) return;
  var pad = Math.max(0.3 * (r[1] - r[0]), 0.5);
  this.focus = i;
  this.setView(r[0] - pad, r[1] + pad);
};

Gantt.prototype.opColor = function (i, lane) {
  var ops = this.d.ops;
  if (this.colorBy === "role") return ROLE_COLORS[this.d.lanes[lane].role] || OTHER_COLOR;
  if (this.colorBy === "name") {
    var n = ops.n[i], c = this.nameColors[n];
    if (!c) { c = "hsl(" + hashHue(this.d.names[n] || "") + ",52%,47%)"; this.nameColors[n] = c; }
    return c;
  }
  return KIND_COLORS[ops.k[i]] || OTHER_COLOR;
};
Gantt.prototype.waitPattern = function (c) {
  if (!this.pattern) {
    var off = document.createElement("canvas");
    off.width = 8; off.height = 8;
    var o = off.getContext("2d");
    o.fillStyle = "#eef0f2"; o.fillRect(0, 0, 8, 8);
    o.strokeStyle = "#8c959f"; o.lineWidth = 1.2;
    o.beginPath(); o.moveTo(-2, 10); o.lineTo(10, -2); o.moveTo(-2, 2); o.lineTo(2, -2);
    o.moveTo(6, 10); o.lineTo(10, 6); o.stroke();
    this.pattern = c.createPattern(off, "repeat");
  }
  return this.pattern;
};

// ---------------------------------------------------------------- drawing
Gantt.prototype.draw = function () {
  var c = this.ctx, d = this.d, L = d.lanes.length, W = this.W, H = this.H;
  c.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
  c.clearRect(0, 0, W, H);
  c.font = FONT; c.textBaseline = "middle";
  for (var k = 0; k < L; k++) {
    c.fillStyle = k % 2 ? "#f7f8fa" : "#ffffff";
    c.fillRect(this.labelW, this.laneY(k), W - this.labelW, this.laneH);
  }
  this.drawAxis(c);
  c.save();
  c.beginPath(); c.rect(this.labelW, this.axisH, this.plotW, H - this.axisH); c.clip();
  if (d.mode === "overview") this.drawHeat(c);
  if (this.showWindows) this.drawWindows(c, false);
  this.drawOps(c);
  if (this.showWaits) this.drawWaits(c);
  if (this.showWindows) this.drawWindows(c, true);
  this.drawHover(c);
  if (this.sel) {
    var a = Math.min(this.sel[0], this.sel[1]), b = Math.max(this.sel[0], this.sel[1]);
    c.fillStyle = "rgba(9,105,218,0.12)"; c.fillRect(a, this.axisH, b - a, H - this.axisH);
    c.strokeStyle = "rgba(9,105,218,0.8)"; c.lineWidth = 1;
    c.strokeRect(a + 0.5, this.axisH + 0.5, b - a, H - this.axisH - 1);
  }
  c.restore();
  this.drawLabels(c);
  this.drawMini();
  var v = this.view;
  this.rangeOut.textContent = "view " + fmtUs(v[0]) + " \u2013 " + fmtUs(v[1]) +
    "  (span " + fmtUs(v[1] - v[0]) + " of " + fmtUs(this.extent) + ")";
};

Gantt.prototype.drawAxis = function (c) {
  var W = this.W, H = this.H, v = this.view;
  c.fillStyle = "#f6f8fa"; c.fillRect(0, 0, W, this.axisH);
  c.fillStyle = "#fbfcfd"; c.fillRect(0, this.axisH, W, this.markH);
  c.strokeStyle = "#d0d7de"; c.lineWidth = 1;
  c.beginPath(); c.moveTo(0, this.axisH + 0.5); c.lineTo(W, this.axisH + 0.5);
  c.moveTo(0, this.lanesTop + 0.5); c.lineTo(W, this.lanesTop + 0.5); c.stroke();
  var step = niceStep(v[1] - v[0], this.plotW / 110);
  var t = Math.ceil(v[0] / step) * step;
  c.font = FONT; c.textBaseline = "middle";
  for (var n = 0; t <= v[1] + 1e-9 && n < 200; t += step, n++) {
    var x = Math.round(this.X(t)) + 0.5;
    c.strokeStyle = "#e6e9ed"; c.beginPath(); c.moveTo(x, this.lanesTop); c.lineTo(x, H); c.stroke();
    c.strokeStyle = "#8c959f"; c.beginPath(); c.moveTo(x, this.axisH - 5); c.lineTo(x, this.axisH); c.stroke();
    var lab = fmtTick(t, step);
    if (x + 4 + c.measureText(lab).width < W) { c.fillStyle = "#424a53"; c.fillText(lab, x + 3, this.axisH / 2); }
  }
};

Gantt.prototype.drawHeat = function (c) {
  var d = this.d, bins = d.bins, nb = bins.n, bw = this.extent / nb, v = this.view;
  var sc = this.plotW / (v[1] - v[0]);
  var i0 = Math.max(0, Math.floor(v[0] / bw)), i1 = Math.min(nb - 1, Math.floor(v[1] / bw));
  for (var k = 0; k < d.lanes.length; k++) {
    var y = this.laneY(k) + 4, h = this.laneH - 8;
    var wb = bins.wait[k], bb = bins.busy[k], i, x, w;
    if (wb) {
      c.fillStyle = "#8c959f";
      for (i = i0; i <= i1; i++) if (wb[i] > 0) {
        x = this.labelW + (i * bw - v[0]) * sc; w = Math.max(1, bw * sc);
        c.globalAlpha = 0.12 + 0.5 * wb[i] / 100; c.fillRect(x, y + h - 4, w, 4);
      }
    }
    c.fillStyle = ROLE_COLORS[d.lanes[k].role] || OTHER_COLOR;
    for (i = i0; i <= i1; i++) if (bb[i] > 0) {
      x = this.labelW + (i * bw - v[0]) * sc; w = Math.max(1, bw * sc);
      c.globalAlpha = 0.15 + 0.85 * bb[i] / 100; c.fillRect(x, y, w, h - 5);
    }
    c.globalAlpha = 1;
  }
  // regions with detailed bars: clear the heat there and frame them
  for (var j = 0; j < d.detailWindows.length; j++) {
    var a = this.X(d.detailWindows[j][0]), b = this.X(d.detailWindows[j][1]);
    if (b < this.labelW || a > this.W) continue;
    for (k = 0; k < d.lanes.length; k++) {
      c.fillStyle = k % 2 ? "#f7f8fa" : "#ffffff";
      c.fillRect(a, this.laneY(k), b - a, this.laneH);
    }
    c.strokeStyle = "#afb8c1"; c.setLineDash([2, 3]); c.lineWidth = 1;
    c.strokeRect(Math.round(a) + 0.5, this.lanesTop + 0.5, Math.round(b - a), this.H - this.lanesTop - 1);
    c.setLineDash([]);
  }
};

Gantt.prototype.drawOps = function (c) {
  var d = this.d, ops = d.ops, S = ops.s, D = ops.d, v = this.view;
  var sc = this.plotW / (v[1] - v[0]), x0 = this.labelW;
  var labels = [];
  for (var k = 0; k < d.lanes.length; k++) {
    var idx = this.laneOps[k];
    if (!idx.length) continue;
    var y = this.laneY(k) + 4, h = this.laneH - 8, cur = null;
    var lastPx = -1;
    for (var p = lowerBound(idx, S, v[0] - this.laneMax[k]); p < idx.length; p++) {
      var i = idx[p], st = S[i];
      if (st > v[1]) break;
      var en = st + D[i];
      if (en < v[0]) continue;
      var xa = x0 + (st - v[0]) * sc, w = D[i] * sc;
      if (w < 1) {               // sub-pixel op: one 1px column per pixel is enough
        var px = Math.floor(xa);
        if (px === lastPx) continue;
        lastPx = px; xa = px; w = 1;
      } else if (w > 3) { w -= 0.5; }
      var col = this.opColor(i, k);
      if (col !== cur) { c.fillStyle = col; cur = col; }
      c.fillRect(xa, y, w, h);
      if (w > 34) labels.push(i, xa, w, y + h / 2, col);
    }
  }
  c.font = FONT; c.textBaseline = "middle";
  var cw = c.measureText("abcdefghij").width / 10;
  for (var q = 0; q < labels.length; q += 5) {
    var name = (d.short || d.names)[ops.n[labels[q]]] || "";
    var left = Math.max(labels[q + 1], x0) + 4, room = labels[q + 1] + labels[q + 2] - left - 4;
    var chars = Math.floor(room / cw);
    if (chars < 3) continue;
    var txt = name.length > chars ? name.slice(0, chars - 1) + "\u2026" : name;
    c.fillStyle = DARK_TEXT[labels[q + 4]] ? "#1f2328" : "#ffffff";
    c.fillText(txt, left, labels[q + 3]);
  }
};

Gantt.prototype.drawWaits = function (c) {
  var d = this.d, w = d.waits, S = w.s, D = w.d, v = this.view;
  var sc = this.plotW / (v[1] - v[0]), x0 = this.labelW;
  var pat = this.waitPattern(c);
  var arrows = [];
  for (var k = 0; k < d.lanes.length; k++) {
    var idx = this.laneWaits[k];
    if (!idx.length) continue;
    var y = this.laneY(k) + 4, h = this.laneH - 8;
    for (var p = lowerBound(idx, S, v[0] - this.laneWaitMax[k]); p < idx.length; p++) {
      var i = idx[p], st = S[i];
      if (st > v[1]) break;
      if (st + D[i] < v[0]) continue;
      var xa = x0 + (st - v[0]) * sc, ww = Math.max(1, D[i] * sc);
      c.fillStyle = pat; c.fillRect(xa, y, ww, h);
      if (ww > 3) { c.strokeStyle = "#6e7781"; c.lineWidth = 1; c.strokeRect(xa + 0.5, y + 0.5, ww - 1, h - 1); }
      if (w.on[i] >= 0 && w.on[i] !== k && ww > 2) arrows.push(xa + ww, w.on[i], k);
    }
  }
  c.strokeStyle = "rgba(87,96,106,0.75)"; c.fillStyle = "rgba(87,96,106,0.9)"; c.lineWidth = 1;
  for (var q = 0; q < arrows.length; q += 3) {
    var x = Math.round(arrows[q]) + 0.5, from = arrows[q + 1], to = arrows[q + 2];
    var y0 = this.laneY(from) + this.laneH / 2, y1 = to > from ? this.laneY(to) + 4 : this.laneY(to) + this.laneH - 4;
    c.setLineDash([3, 2]); c.beginPath(); c.moveTo(x, y0); c.lineTo(x, y1); c.stroke(); c.setLineDash([]);
    var dir = y1 > y0 ? 1 : -1;
    c.beginPath(); c.moveTo(x, y1); c.lineTo(x - 3, y1 - 5 * dir); c.lineTo(x + 3, y1 - 5 * dir); c.closePath(); c.fill();
  }
};

Gantt.prototype.drawWindows = function (c, front) {
  var d = this.d, L = d.lanes.length, self = this;
  function rect(lane, win) {
    if (lane < 0 || lane >= L || !win) return null;
    var a = self.X(win[0]), b = self.X(win[1]);
    return [a, self.laneY(lane) + 1, Math.max(2, b - a), self.laneH - 2];
  }
  var lastLabel = -1e9;
  for (var i = 0; i < d.points.length; i++) {
    var p = d.points[i], col = VERDICT_COLORS[p.verdict] || OTHER_COLOR;
    var focus = i === this.focus;
    var sr = rect(p.lane, p.side), dr = p.dom ? rect(p.dom.lane, p.dom.w) : null;
    if (!front) {
      c.fillStyle = col;
      c.globalAlpha = 0.14;
      if (sr) c.fillRect(sr[0], sr[1], sr[2], sr[3]);
      if (dr) c.fillRect(dr[0], dr[1], dr[2], dr[3]);
      if (sr && dr) {           // the overlap of the two windows, across the lanes between them
        var a = Math.max(sr[0], dr[0]), b = Math.min(sr[0] + sr[2], dr[0] + dr[2]);
        if (b > a) {
          var top = Math.min(sr[1], dr[1]), bot = Math.max(sr[1] + sr[3], dr[1] + dr[3]);
          c.globalAlpha = 0.10; c.fillRect(a, top, b - a, bot - top);
        }
      }
      c.globalAlpha = 1;
      continue;
    }
    c.strokeStyle = col;
    c.lineWidth = focus ? 2.5 : 1.5;
    if (sr) { c.setLineDash([5, 3]); c.strokeRect(sr[0] + 0.5, sr[1] + 0.5, sr[2] - 1, sr[3] - 1); c.setLineDash([]); }
    c.lineWidth = focus ? 3 : 2;
    if (dr) c.strokeRect(dr[0] + 1, dr[1] + 1, dr[2] - 2, dr[3] - 2);
    // marker strip: a bracket over the side window and the point's tag
    var my = this.axisH + 3, mh = this.markH - 6;
    if (sr && sr[0] + sr[2] >= this.labelW && sr[0] <= this.W) {
      c.fillStyle = col; c.globalAlpha = 0.25; c.fillRect(sr[0], my, sr[2], mh); c.globalAlpha = 1;
      c.fillRect(sr[0], my, Math.min(sr[2], 2), mh);
      var tag = "P" + p.i + " " + p.verdict + (p.pct !== null ? " " + p.pct.toFixed(2) : "");
      c.font = FONT;
      var tw = c.measureText(tag).width;
      var tx = Math.min(Math.max(sr[0] + 4, this.labelW + 2), this.W - tw - 4);
      if (tx > lastLabel + 6) {
        c.fillStyle = "#1f2328"; c.fillText(tag, tx, my + mh / 2 + 0.5); lastLabel = tx + tw;
      }
    }
    if (p.barrier && p.barrier.t !== null) {
      var bx = Math.round(this.X(p.barrier.t)) + 0.5, bl = p.barrier.lane;
      var ybot = bl >= 0 && bl < L ? this.laneY(bl) + this.laneH : this.H;
      c.strokeStyle = BARRIER_COLOR; c.lineWidth = 1.5;
      c.beginPath(); c.moveTo(bx, this.axisH + 2); c.lineTo(bx, ybot); c.stroke();
      c.fillStyle = BARRIER_COLOR;
      c.beginPath(); c.moveTo(bx - 5, this.axisH + 2); c.lineTo(bx + 5, this.axisH + 2);
      c.lineTo(bx, this.axisH + 10); c.closePath(); c.fill();
    }
  }
};

Gantt.prototype.drawHover = function (c) {
  var h = this.hover;
  if (!h || (h.type !== "op" && h.type !== "wait")) return;
  var col = h.type === "op" ? this.d.ops : this.d.waits;
  var a = this.X(col.s[h.i]), w = Math.max(1, col.d[h.i] * this.plotW / (this.view[1] - this.view[0]));
  c.strokeStyle = "#111"; c.lineWidth = 1.5;
  c.strokeRect(a - 1, this.laneY(h.lane) + 3, w + 2, this.laneH - 6);
};

Gantt.prototype.drawLabels = function (c) {
  var d = this.d, lw = this.labelW;
  c.fillStyle = "#ffffff"; c.fillRect(0, this.axisH, lw, this.H - this.axisH);
  c.fillStyle = "#f6f8fa"; c.fillRect(0, 0, lw, this.axisH);
  c.fillStyle = "#fbfcfd"; c.fillRect(0, this.axisH, lw, this.markH);
  c.font = FONT; c.textBaseline = "middle"; c.fillStyle = "#656d76";
  c.fillText("time from start", 8, this.axisH / 2);
  c.fillText("parallel points", 8, this.axisH + this.markH / 2);
  for (var k = 0; k < d.lanes.length; k++) {
    var ln = d.lanes[k], y = this.laneY(k), col = ROLE_COLORS[ln.role] || OTHER_COLOR;
    c.fillStyle = k % 2 ? "#f7f8fa" : "#ffffff"; c.fillRect(0, y, lw, this.laneH);
    c.fillStyle = col; c.fillRect(0, y + 3, 3, this.laneH - 6);
    c.font = FONT;
    var role = ln.role, rw = c.measureText(role).width + 10;
    c.strokeStyle = col; c.lineWidth = 1;
    c.strokeRect(lw - rw - 7.5, y + 5.5, rw, this.laneH - 11);
    c.fillStyle = col; c.fillText(role, lw - rw - 2.5, y + this.laneH / 2);
    c.font = FONT_B; c.fillStyle = "#1f2328";
    var label = "stream " + ln.id, room = lw - rw - 22;
    while (label.length > 4 && c.measureText(label).width > room) label = label.slice(0, -2) + "\u2026";
    c.fillText(label, 10, y + this.laneH / 2);
  }
  c.strokeStyle = "#d0d7de"; c.lineWidth = 1;
  c.beginPath(); c.moveTo(lw - 0.5, 0); c.lineTo(lw - 0.5, this.H); c.stroke();
  c.beginPath(); c.moveTo(0, this.axisH + 0.5); c.lineTo(lw, this.axisH + 0.5);
  c.moveTo(0, this.lanesTop + 0.5); c.lineTo(lw, this.lanesTop + 0.5); c.stroke();
  if (!d.ops.s.length && !d.waits.s.length && d.mode === "detail") {
    c.fillStyle = "#656d76"; c.font = FONT_B;
    c.fillText("no ops in this capture", lw + 12, this.lanesTop + this.laneH / 2);
  }
};

Gantt.prototype.drawMini = function () {
  var c = this.mctx, d = this.d, W = this.MW, H = this.MH, L = Math.max(1, d.lanes.length);
  c.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
  if (!this.miniImg) {
    c.clearRect(0, 0, W, H);
    c.fillStyle = "#fbfcfd"; c.fillRect(0, 0, W, H);
    var nb = d.bins.n, bw = W / nb, lh = (H - 8) / L;
    for (var k = 0; k < d.lanes.length; k++) {
      var bb = d.bins.busy[k], y = 2 + k * lh, h = Math.max(1, lh - (lh > 3 ? 1 : 0));
      c.fillStyle = ROLE_COLORS[d.lanes[k].role] || OTHER_COLOR;
      for (var i = 0; i < nb; i++) if (bb[i] > 0) {
        c.globalAlpha = 0.2 + 0.8 * bb[i] / 100; c.fillRect(i * bw, y, Math.max(bw, 0.6), h);
      }
    }
    c.globalAlpha = 1;
    for (var j = 0; j < d.points.length; j++) {
      var p = d.points[j];
      if (!p.side) continue;
      c.fillStyle = VERDICT_COLORS[p.verdict] || OTHER_COLOR;
      var a = p.side[0] / this.extent * W, b = p.side[1] / this.extent * W;
      c.fillRect(a, H - 5, Math.max(2, b - a), 4);
    }
    this.miniImg = c.getImageData(0, 0, this.mini.width, this.mini.height);
  } else {
    c.putImageData(this.miniImg, 0, 0);
  }
  var v = this.view, x0 = v[0] / this.extent * W, x1 = v[1] / this.extent * W;
  c.fillStyle = "rgba(31,35,40,0.16)";
  c.fillRect(0, 0, x0, H); c.fillRect(x1, 0, W - x1, H);
  c.strokeStyle = "#0969da"; c.lineWidth = 1.5;
  c.strokeRect(x0 + 0.75, 0.75, Math.max(2, x1 - x0 - 1.5), H - 1.5);
  if (this.miniSel) {
    var sa = Math.min(this.miniSel[0], this.miniSel[1]), sb = Math.max(this.miniSel[0], this.miniSel[1]);
    c.fillStyle = "rgba(9,105,218,0.18)"; c.fillRect(sa, 0, sb - sa, H);
  }
};

// ---------------------------------------------------------------- hit testing and tooltip
Gantt.prototype.hit = function (mx, my) {
  var d = this.d;
  if (mx < this.labelW || my < this.axisH || my > this.H) return null;
  var span = this.view[1] - this.view[0], t = this.T(mx), tol = 2 * span / this.plotW;
  var i, best, bestScore, p, s, e;
  if (my < this.lanesTop) {
    for (i = 0; i < d.points.length; i++) {
      p = d.points[i];
      if (p.barrier && p.barrier.t !== null && Math.abs(p.barrier.t - t) <= 3 * tol) return {type: "barrier", p: i};
    }
    for (i = 0; i < d.points.length; i++) {
      p = d.points[i];
      if (p.side && t >= p.side[0] - tol && t <= p.side[1] + tol) return {type: "point", p: i};
    }
    return null;
  }
  var k = Math.floor((my - this.lanesTop) / this.laneH);
  if (k < 0 || k >= d.lanes.length) return null;
  var groups = [["op", d.ops, this.laneOps[k], this.laneMax[k]]];
  if (this.showWaits) groups.push(["wait", d.waits, this.laneWaits[k], this.laneWaitMax[k]]);
  for (var g = 0; g < groups.length; g++) {
    var col = groups[g][1], idx = groups[g][2];
    best = -1; bestScore = Infinity;
    for (var q = lowerBound(idx, col.s, t - groups[g][3] - tol); q < idx.length; q++) {
      i = idx[q]; s = col.s[i];
      if (s > t + tol) break;
      e = s + col.d[i];
      if (e < t - tol) continue;
      var dist = t < s ? s - t : t > e ? t - e : 0;
      var score = dist * 1e6 + col.d[i];
      if (score < bestScore) { bestScore = score; best = i; }
    }
    if (best >= 0) return {type: groups[g][0], i: best, lane: k};
  }
  if (this.showWindows) {
    for (i = 0; i < d.points.length; i++) {
      p = d.points[i];
      if (p.lane === k && p.side && t >= p.side[0] && t <= p.side[1]) return {type: "point", p: i};
      if (p.dom && p.dom.lane === k && p.dom.w && t >= p.dom.w[0] && t <= p.dom.w[1]) return {type: "point", p: i};
    }
  }
  if (d.mode === "overview") {
    var bw = this.extent / d.bins.n, b = Math.floor(t / bw);
    if (b >= 0 && b < d.bins.n) return {type: "bin", lane: k, b: b};
  }
  return null;
};

Gantt.prototype.tipLines = function (h) {
  var d = this.d, lines = [], lane, p;
  function row(label, value) { lines.push([label, value]); }
  if (h.type === "op") {
    var o = d.ops, i = h.i;
    lane = d.lanes[h.lane];
    lines.title = (d.short || d.names)[o.n[i]] || "(unnamed)";
    if (d.short && d.short[o.n[i]] !== d.names[o.n[i]]) lines.full = d.names[o.n[i]];
    row("stream", lane.id + " (" + lane.role + ")");
    var what = [];
    if (d.types[o.t[i]]) what.push(d.types[o.t[i]]);
    what.push(d.kinds[o.k[i]] || "?");
    if (o.c[i] > 0 && d.cores[o.c[i]]) what.push(d.cores[o.c[i]]);
    row("type", what.join(" \u00b7 "));
    if (o.b[i] >= 0) row("block dim", String(o.b[i]));
    row("start", fmtUs(o.s[i])); row("duration", fmtUs(o.d[i])); row("end", fmtUs(o.s[i] + o.d[i]));
  } else if (h.type === "wait") {
    var w = d.waits;
    lane = d.lanes[h.lane];
    lines.title = (d.names[w.n[h.i]] || "wait") + "  [wait]";
    row("stream", lane.id + " (" + lane.role + ") waits");
    if (w.on[h.i] >= 0) row("on stream", d.lanes[w.on[h.i]].id);
    row("start", fmtUs(w.s[h.i])); row("duration", fmtUs(w.d[h.i]));
  } else if (h.type === "point" || h.type === "barrier") {
    p = d.points[h.p];
    if (h.type === "barrier") {
      lines.title = "barrier of P" + p.i + ": " + (p.barrier.short || p.barrier.name);
      if (p.barrier.short && p.barrier.short !== p.barrier.name) lines.full = p.barrier.name;
      row("starts", fmtUs(p.barrier.t));
    } else {
      lines.title = "parallel point P" + p.i + ": " + p.verdict;
    }
    var sl = d.lanes[p.lane];
    if (p.side) row("side window", (sl ? "stream " + sl.id + " " : "") + "[" + fmtUs(p.side[0]) + ", " + fmtUs(p.side[1]) + "]");
    if (p.dom) {
      row("dominator", p.dom.short || p.dom.name);
      if (p.dom.w) row("dominator window", "[" + fmtUs(p.dom.w[0]) + ", " + fmtUs(p.dom.w[1]) + "]");
    }
    row("overlap", fmtUs(p.ov));
    if (p.pct !== null) row("overlap_pct", p.pct.toFixed(3));
  } else if (h.type === "bin") {
    var bw = this.extent / d.bins.n;
    lane = d.lanes[h.lane];
    lines.title = "stream " + lane.id + " (binned overview)";
    row("bin", "[" + fmtUs(h.b * bw) + ", " + fmtUs((h.b + 1) * bw) + "]");
    row("busy", d.bins.busy[h.lane][h.b] + "%");
    var wb = d.bins.wait[h.lane];
    if (wb) row("waiting", wb[h.b] + "%");
  }
  return lines;
};

Gantt.prototype.showTip = function (h, mx, my) {
  var tip = this.tip;
  if (!h) { tip.hidden = true; return; }
  var lines = this.tipLines(h);
  while (tip.firstChild) tip.removeChild(tip.firstChild);
  tip.appendChild(el("div", "t-name", lines.title || ""));
  if (lines.full) tip.appendChild(el("div", "t-full", lines.full));
  for (var i = 0; i < lines.length; i++) {
    var r = el("div", "t-row", lines[i][0] + " ");
    r.appendChild(el("b", "", lines[i][1]));
    tip.appendChild(r);
  }
  tip.hidden = false;
  var wrap = this.canvas.parentNode, tw = tip.offsetWidth, th = tip.offsetHeight;
  var x = mx + 14, y = my + 16;
  if (x + tw > wrap.clientWidth) x = Math.max(0, mx - tw - 14);
  if (y + th > this.H + 60) y = Math.max(0, my - th - 10);
  tip.style.left = x + "px"; tip.style.top = y + "px";
};

// ---------------------------------------------------------------- input
Gantt.prototype.pos = function (ev, target) {
  var r = (target || this.canvas).getBoundingClientRect();
  return {x: ev.clientX - r.left, y: ev.clientY - r.top};
};

Gantt.prototype.bind = function () {
  var self = this, cv = this.canvas, mini = this.mini;
  function guard(f) {
    return function (ev) { try { f(ev); } catch (e) { fail(e && e.message ? e.message : String(e)); } };
  }
  cv.addEventListener("wheel", guard(function (ev) {
    ev.preventDefault();
    var p = self.pos(ev), scale = ev.deltaMode === 1 ? 40 : ev.deltaMode === 2 ? 400 : 1;
    var dx = ev.deltaX * scale, dy = ev.deltaY * scale;
    if (ev.shiftKey || Math.abs(dx) > Math.abs(dy)) {
      self.pan((Math.abs(dx) > Math.abs(dy) ? dx : dy) / self.plotW);
    } else {
      var anchor = p.x >= self.labelW ? self.T(p.x) : undefined;
      self.zoom(Math.exp(clamp(dy, -400, 400) * 0.0018), anchor);
    }
  }), {passive: false});
  cv.addEventListener("mousedown", guard(function (ev) {
    if (ev.button !== 0) return;
    var p = self.pos(ev);
    if (p.x < self.labelW) return;
    ev.preventDefault();
    if (cv.focus) cv.focus({preventScroll: true});
    self.drag = {x: p.x, v: self.view.slice(), mode: ev.shiftKey ? "select" : "pan", moved: false};
    self.showTip(null);
    if (self.drag.mode === "pan") cv.classList.add("dragging");
  }));
  window.addEventListener("mousemove", guard(function (ev) {
    var g = self.drag;
    if (!g) return;
    var p = self.pos(ev);
    if (Math.abs(p.x - g.x) > 2) g.moved = true;
    if (g.mode === "pan") {
      var dt = (p.x - g.x) * (g.v[1] - g.v[0]) / self.plotW;
      self.setView(g.v[0] - dt, g.v[1] - dt);
    } else {
      self.sel = [g.x, clamp(p.x, self.labelW, self.labelW + self.plotW)];
      self.request();
    }
  }));
  window.addEventListener("mouseup", guard(function () {
    var g = self.drag;
    if (!g) return;
    self.drag = null;
    cv.classList.remove("dragging");
    if (g.mode === "select" && g.moved && self.sel) {
      var a = self.T(Math.min(self.sel[0], self.sel[1])), b = self.T(Math.max(self.sel[0], self.sel[1]));
      self.sel = null;
      self.setView(a, b);
    } else {
      self.sel = null;
      self.request();
    }
  }));
  cv.addEventListener("mousemove", guard(function (ev) {
    if (self.drag) return;
    var p = self.pos(ev), h = self.hit(p.x, p.y);
    var prev = self.hover;
    self.hover = h;
    self.showTip(h, p.x, p.y);
    if ((prev && prev.i) !== (h && h.i) || (prev && prev.type) !== (h && h.type)) self.request();
  }));
  cv.addEventListener("mouseleave", guard(function () {
    self.hover = null; self.showTip(null); self.request();
  }));
  cv.addEventListener("dblclick", guard(function () { self.reset(); }));
  cv.addEventListener("keydown", guard(function (ev) {
    var key = ev.key, used = true;
    if (key === "w" || key === "W" || key === "+" || key === "=") self.zoom(0.7);
    else if (key === "s" || key === "S" || key === "-") self.zoom(1 / 0.7);
    else if (key === "a" || key === "A" || key === "ArrowLeft") self.pan(-0.15);
    else if (key === "d" || key === "D" || key === "ArrowRight") self.pan(0.15);
    else if (key === "0" || key === "Home" || key === "Escape") self.reset();
    else used = false;
    if (used) ev.preventDefault();
  }));
  // minimap: drag to choose a range, click to centre the view there
  mini.addEventListener("mousedown", guard(function (ev) {
    if (ev.button !== 0) return;
    ev.preventDefault();
    var p = self.pos(ev, mini);
    self.miniDrag = {x: p.x, moved: false};
  }));
  window.addEventListener("mousemove", guard(function (ev) {
    var g = self.miniDrag;
    if (!g) return;
    var p = self.pos(ev, mini);
    if (Math.abs(p.x - g.x) > 2) g.moved = true;
    if (g.moved) { self.miniSel = [g.x, clamp(p.x, 0, self.MW)]; self.request(); }
  }));
  window.addEventListener("mouseup", guard(function (ev) {
    var g = self.miniDrag;
    if (!g) return;
    self.miniDrag = null;
    var toT = function (x) { return clamp(x, 0, self.MW) / self.MW * self.extent; };
    if (g.moved && self.miniSel) {
      var a = toT(Math.min(self.miniSel[0], self.miniSel[1])), b = toT(Math.max(self.miniSel[0], self.miniSel[1]));
      self.miniSel = null;
      self.setView(a, b);
    } else {
      var t = toT(self.pos(ev, mini).x), half = (self.view[1] - self.view[0]) / 2;
      self.miniSel = null;
      self.setView(t - half, t + half);
    }
  }));
  // toolbar
  var acts = this.box.querySelectorAll("[data-act]");
  for (var i = 0; i < acts.length; i++) {
    acts[i].addEventListener("click", guard(function (ev) {
      var a = ev.currentTarget.getAttribute("data-act");
      if (a === "in") self.zoom(0.6); else if (a === "out") self.zoom(1 / 0.6);
      else if (a === "left") self.pan(-0.25); else if (a === "right") self.pan(0.25);
      else self.reset();
    }));
  }
  var color = this.box.querySelector('[data-ctl="color"]');
  color.addEventListener("change", guard(function () { self.colorBy = color.value; self.buildLegend(); self.request(); }));
  var waits = this.box.querySelector('[data-ctl="waits"]');
  waits.addEventListener("change", guard(function () { self.showWaits = waits.checked; self.request(); }));
  var wins = this.box.querySelector('[data-ctl="windows"]');
  wins.addEventListener("change", guard(function () { self.showWindows = wins.checked; self.request(); }));
  // rows of the parallel points table zoom the chart
  var section = this.box.closest ? this.box.closest("section") : null;
  if (section) {
    var rows = section.querySelectorAll("tr[data-point]");
    for (var r = 0; r < rows.length; r++) {
      rows[r].addEventListener("click", guard(function (ev) {
        self.zoomToPoint(parseInt(ev.currentTarget.getAttribute("data-point"), 10));
        if (self.box.scrollIntoView) self.box.scrollIntoView({block: "nearest", behavior: "smooth"});
      }));
    }
  }
};

Gantt.prototype.buildLegend = function () {
  var out = this.legendOut, d = this.d;
  while (out.firstChild) out.removeChild(out.firstChild);
  function item(style, text) {
    var s = el("span"), sw = el("span", "sw");
    for (var key in style) sw.style[key] = style[key];
    s.appendChild(sw); s.appendChild(document.createTextNode(text)); out.appendChild(s);
  }
  if (this.colorBy === "kind") {
    for (var k = 0; k < d.kinds.length; k++) if (this.kindsPresent[k]) item({background: KIND_COLORS[k]}, d.kinds[k]);
  } else if (this.colorBy === "role") {
    for (var r in ROLE_COLORS) item({background: ROLE_COLORS[r]}, r + " stream");
  } else {
    item({background: "linear-gradient(90deg,#4e79a7,#59a14f,#e15759,#b07aa1)"}, "one colour per op name");
  }
  item({background: "repeating-linear-gradient(135deg,#8c959f 0 1.5px,#eef0f2 1.5px 4px)", border: "1px solid #6e7781"}, "wait");
  item({border: "1.5px dashed #57606a", background: "transparent"}, "side window");
  item({border: "2px solid #57606a", background: "transparent"}, "dominator window");
  for (var v in VERDICT_COLORS) item({background: VERDICT_COLORS[v]}, v);
  item({background: BARRIER_COLOR, width: "3px"}, "barrier");
  if (d.mode === "overview") item({background: "linear-gradient(90deg,rgba(78,121,167,.15),#4e79a7)"}, "busy fraction (binned)");
};

// ---------------------------------------------------------------- self test (#selftest)
function selftest(charts) {
  function check(ok, what) { if (!ok) throw new Error("selftest: " + what); }
  function mouse(target, type, x, y, extra) {
    var init = {clientX: x, clientY: y, bubbles: true, cancelable: true, button: 0};
    for (var k in extra || {}) init[k] = extra[k];
    target.dispatchEvent(type === "wheel" ? new WheelEvent(type, init) : new MouseEvent(type, init));
  }
  for (var c = 0; c < charts.length; c++) {
    var g = charts[c], r = g.canvas.getBoundingClientRect(), cx = r.left + g.labelW + g.plotW / 2;
    var cy = r.top + g.lanesTop + g.laneH / 2;
    mouse(g.canvas, "wheel", cx, cy, {deltaY: -240});
    g.draw();
    check(g.extent <= g.minSpan || g.view[1] - g.view[0] < g.extent, "wheel did not zoom");
    var before = g.view[0];
    mouse(g.canvas, "mousedown", cx, cy);
    mouse(window, "mousemove", cx + 80, cy);
    mouse(window, "mouseup", cx + 80, cy);
    g.draw();
    check(g.view[0] <= before, "drag did not pan");
    mouse(g.canvas, "dblclick", cx, cy);
    check(g.view[0] === 0 && g.view[1] === g.extent, "double click did not reset");
    g.draw();
    if (g.d.ops.s.length) {
      var o = g.d.ops, best = 0;
      for (var i = 1; i < o.d.length; i++) if (o.d[i] > o.d[best]) best = i;
      g.zoomToPoint(-1);
      g.setView(o.s[best] - o.d[best], o.s[best] + 2 * o.d[best] + g.minSpan);
      g.draw();
      r = g.canvas.getBoundingClientRect();
      var x = r.left + g.X(o.s[best] + o.d[best] / 2), y = r.top + g.laneY(o.lane[best]) + g.laneH / 2;
      mouse(g.canvas, "mousemove", x, y);
      check(!g.tip.hidden && g.hover && g.hover.type === "op", "hover shows no tooltip");
      mouse(g.canvas, "mouseleave", x, y);
    }
    ["role", "name", "kind"].forEach(function (m) { g.colorBy = m; g.buildLegend(); g.draw(); });
    for (var p = 0; p < g.d.points.length; p++) {
      g.zoomToPoint(p); g.draw();
      var pr = g.pointRange(g.d.points[p]);
      r = g.canvas.getBoundingClientRect();
      if (pr && g.d.points[p].side) {
        var px = r.left + g.X((g.d.points[p].side[0] + g.d.points[p].side[1]) / 2);
        mouse(g.canvas, "mousemove", px, r.top + g.axisH + g.markH / 2);
        g.tipLines({type: "point", p: p});
      }
    }
    var m = g.mini.getBoundingClientRect();
    mouse(g.mini, "mousedown", m.left + 10, m.top + 10);
    mouse(window, "mousemove", m.left + 60, m.top + 10);
    mouse(window, "mouseup", m.left + 60, m.top + 10);
    g.canvas.dispatchEvent(new KeyboardEvent("keydown", {key: "w", bubbles: true}));
    g.canvas.dispatchEvent(new KeyboardEvent("keydown", {key: "d", bubbles: true}));
    g.draw();
    g.reset(); g.draw();
    if (g.d.ops.s.length || g.d.mode === "overview") {
      // something was painted in the lanes: count saturated (bar-coloured) pixels
      var ctx = g.ctx, dpr = g.dpr;
      var img = ctx.getImageData(Math.round(g.labelW * dpr), Math.round(g.lanesTop * dpr),
        Math.round(g.plotW * dpr), Math.round((g.H - g.lanesTop) * dpr)).data;
      var painted = 0;
      for (var q = 0; q < img.length; q += 4) {
        if (Math.abs(img[q] - img[q + 1]) + Math.abs(img[q + 1] - img[q + 2]) > 40) painted++;
      }
      check(painted > 50, "no bars painted");
      g.painted = painted;
    }
  }
}

function init() {
  var blocks = document.querySelectorAll(".gantt"), charts = [];
  for (var i = 0; i < blocks.length; i++) {
    try {
      var data = JSON.parse(blocks[i].querySelector("script.gantt-data").textContent);
      charts.push(new Gantt(blocks[i], data));
    } catch (e) {
      fail("capture " + (i + 1) + ": " + (e && e.message ? e.message : String(e)));
    }
  }
  var timer = null;
  window.addEventListener("resize", function () {
    clearTimeout(timer);
    timer = setTimeout(function () {
      for (var j = 0; j < charts.length; j++) {
        try { charts[j].resize(); } catch (e) { fail(e.message || String(e)); }
      }
    }, 80);
  });
  window.parastreamCharts = charts;
  // deep links: #view=a,b (microseconds) or #point=N zoom every chart on load
  var hv = /view=([-0-9.e]+),([-0-9.e]+)/.exec(location.hash), hp = /point=(\d+)/.exec(location.hash);
  for (var c = 0; c < charts.length; c++) {
    if (hv) { charts[c].setView(parseFloat(hv[1]), parseFloat(hv[2])); charts[c].draw(); }
    else if (hp) { charts[c].zoomToPoint(parseInt(hp[1], 10) - 1); charts[c].draw(); }
  }
  if (/selftest/.test(location.hash)) {
    try { selftest(charts); } catch (e) { fail(e && e.message ? e.message : String(e)); }
  }
  if (!failed) root.setAttribute("data-parastream", "ok");
}
try { init(); } catch (e) { fail(e && e.message ? e.message : String(e)); }
})();
"""
