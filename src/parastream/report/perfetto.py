"""Export timelines as Chrome-trace JSON, which the Perfetto UI and chrome://tracing open.

Layout: one process (pid) per capture, named after its label or source; one thread (tid)
per stream, named ``stream <id>`` and ordered with ``thread_sort_index`` (numeric ids in
numeric order). Ops are complete events (``ph: "X"``); waits are complete events in
category ``wait`` on the waiting stream's track, and when the waited-on stream has an op
to start from, a flow arrow (``ph: "s"`` in that op, ``ph: "f"``/``bp: "e"`` in the wait)
shows the event edge.

Viewers need the slices of one thread to nest properly (a slice that starts inside another
ends inside it) and drop or mis-nest the others. Ops and waits that overlap earlier ones of
their stream (corrupt data, or a lane that merges several queues) therefore go to the
stream's overlap tracks, ``stream <id> (overlap k)``, sorted right after its own: every
slice is kept, and each track holds slices one after another.

With the analysis of each capture, tracks ``analysis: side <id>`` (sorted above the
streams) show its side windows as slices named ``side window <id>: <verdict>`` with the
point's figures as args, a ``dominator`` arrow to each dominator op, and each barrier as an
instant; the process labels carry the verdict counts.

Times are microseconds relative to the capture's first op or wait (``Timeline.t0_ns``),
rounded to 3 decimals: relative values stay small, so a float64 keeps every nanosecond
(absolute epoch microseconds would not).

The event list is built column-wise: numpy arrays become Python lists once and events
are zipped from them, so a million ops take about a second, not a per-op attribute walk;
only ops that overlap on their stream are assigned their track one by one.
"""

from __future__ import annotations

import heapq
import itertools
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from ..timeline.analyze import capture_name
from ..timeline.model import CORES, KINDS, Timeline
from ..timeline.readers.kineto import PERFETTO_VIEW_MARK
from ..timeline.nogc import gc_paused
from ..atomic import gzipped_if_named, write_atomic

WAIT_CAT = "wait"
FLOW_NAME = "event wait"
ANALYSIS_CAT = "analysis"
DOMINATOR_FLOW = "dominator"


def _natural_key(value: str) -> tuple:
    """Sort key that puts ``"2"`` before ``"10"`` and numbers before names."""
    parts = re.split(r"(\d+)", value)
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p != "")


def stream_order(streams: list[str]) -> list[int]:
    """Stream codes in display order (natural sort of the ids)."""
    return sorted(range(len(streams)), key=lambda c: _natural_key(streams[c]))


def us_floats(rel_ns: np.ndarray) -> list[float]:
    """Relative nanoseconds to microsecond floats with 3 decimals (ns kept exactly)."""
    return np.round(rel_ns.astype(np.float64) / 1000.0, 3).tolist()


def _op_args(tl: Timeline) -> list[dict]:
    """Per-op ``args`` dicts; ops with identical args share one dict object."""
    n = len(tl)
    if n == 0:
        return []
    # factorise the five columns into one dense key, column by column (fast int64 uniques)
    cols = (tl.type, tl.kind, tl.core, tl.block_dim, tl.mix_block_dim)
    key = np.zeros(n, np.int64)
    for col in cols:
        vals, inv = np.unique(col, return_inverse=True)
        key = key * len(vals) + inv.ravel()
        _, key = np.unique(key, return_inverse=True)
        key = key.ravel().astype(np.int64)
    first = np.unique(key, return_index=True)[1]
    inverse = key
    uniq = list(zip(*(np.asarray(c)[first].tolist() for c in cols)))
    dicts = []
    for t, k, c, b, m in uniq:
        a: dict[str, Any] = {}
        if 0 <= t < len(tl.types) and tl.types[t]:
            a["type"] = tl.types[t]
        a["kind"] = KINDS[k] if 0 <= k < len(KINDS) else str(k)
        if 0 < c < len(CORES):
            a["core"] = CORES[c]
        if b >= 0:
            a["block_dim"] = b
        if m >= 0:
            a["mix_block_dim"] = m
        dicts.append(a)
    return [dicts[i] for i in inverse.tolist()]


def lanes(stream: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The lane of each interval within its stream: intervals of one (stream, lane) never overlap.

    Lane 0 is the stream's own track. An interval that starts before an earlier one of its
    stream has ended takes the lowest lane free at its start (greedy in (start, end) order,
    which uses as many lanes as the deepest overlap). On every lane each interval starts at
    or after the previous one's end, so viewers that need the slices of one thread to nest
    properly keep them all. Only clusters of mutually overlapping intervals are walked in
    Python; a stream without overlaps costs array work only.
    """
    n = start.shape[0]
    out = np.zeros(n, np.int64)
    if n < 2:
        return out
    order = np.lexsort((end, start, stream))
    s, st, en = stream[order], start[order], end[order]
    # the latest end among the earlier intervals of the same stream (a stream's first: its start)
    prev_end = st.copy()
    bounds = np.flatnonzero(np.r_[True, s[1:] != s[:-1], True]).tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b - a > 1:
            prev_end[a + 1:b] = np.maximum.accumulate(en[a:b - 1])
    overlap = st < prev_end
    if not overlap.any():
        return out
    # a cluster starts where nothing earlier of its stream still runs, so all its lanes are
    # free there: the greedy walk may skip the clusters without overlaps and run through the
    # others of a stream in one go
    cluster = np.cumsum(~overlap) - 1
    walked = np.zeros(int(cluster[-1]) + 1, bool)
    walked[cluster[overlap]] = True
    sel = np.flatnonzero(walked[cluster])
    cuts = np.flatnonzero(np.r_[True, s[sel][1:] != s[sel][:-1], True]).tolist()
    sorted_lanes = np.zeros(n, np.int64)
    for a, b in zip(cuts[:-1], cuts[1:]):
        part = sel[a:b]
        sorted_lanes[part] = _greedy_lanes(st[part].tolist(), en[part].tolist())
    out[order] = sorted_lanes
    return out


def _greedy_lanes(starts: list[int], ends: list[int]) -> list[int]:
    """Lowest free lane for each interval, in the given (start-sorted) order."""
    push, pop = heapq.heappush, heapq.heappop
    free: list[int] = []  # lanes whose last interval has ended
    busy: list[tuple[int, int]] = []  # (end, lane) of the running intervals
    out = []
    for s, e in zip(starts, ends):
        while busy and busy[0][0] <= s:
            push(free, pop(busy)[1])
        lane = pop(free) if free else len(busy)
        push(busy, (e, lane))
        out.append(lane)
    return out


@dataclass
class _Tracks:
    """Where one capture's ops and waits go: a tid each, on its stream's track or on one of
    the stream's overlap tracks."""

    op_tid: np.ndarray
    wait_tid: np.ndarray
    lanes: np.ndarray  # per stream code: its track plus its overlap tracks
    extra_base: np.ndarray  # per stream code: overlap track k has tid extra_base + k

    @property
    def next_tid(self) -> int:
        """The first tid no stream track takes."""
        return len(self.lanes) + 1 + int((self.lanes - 1).sum())


def _stream_tracks(tl: Timeline) -> _Tracks:
    """Stream code + 1 is the tid of a stream's track; ops and waits that overlap earlier
    ones of their stream go to its overlap tracks, whose tids follow all the streams'."""
    n, ns = len(tl), len(tl.streams)
    stream = np.concatenate([tl.stream, tl.wait_stream]).astype(np.int64)
    lane = lanes(stream, np.concatenate([tl.start_ns, tl.wait_start_ns]),
                 np.concatenate([tl.end_ns, tl.wait_end_ns]))
    count = np.ones(ns, np.int64)
    extra = lane > 0
    np.maximum.at(count, stream[extra], lane[extra] + 1)
    extra_base = ns + np.cumsum(count - 1) - (count - 1)  # overlap tracks before this stream's
    tid = np.where(lane == 0, stream + 1, extra_base[stream] + lane)
    return _Tracks(tid[:n], tid[n:], count, extra_base)


def _stream_meta(tl: Timeline, pid: int, tracks: _Tracks, first_sort: int) -> list[dict]:
    """Thread names and sort indices: streams in natural order of their ids, each stream's
    overlap tracks (``stream <id> (overlap k)``) right after its own."""
    meta: list[dict] = []
    sort = first_sort
    for code in stream_order(tl.streams):
        for k in range(int(tracks.lanes[code])):
            tid = code + 1 if k == 0 else int(tracks.extra_base[code]) + k
            meta += _thread_meta(pid, tid, f"stream {tl.streams[code]}" +
                                 (f" (overlap {k})" if k else ""), sort)
            sort += 1
    return meta


def _thread_meta(pid: int, tid: int, name: str, sort_index: int) -> list[dict]:
    return [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}},
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
             "args": {"sort_index": sort_index}}]


def _wait_flows(tl: Timeline) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The event-wait arrows that viewers can draw: (wait index, source op, source ns, target ns).

    The source lies in an op of the waited-on stream: the one running at the wait start (the
    op whose end the event marks), at the wait start; else the last op starting before the
    wait ends, at its middle (its start when the middle is after the wait's end). The target
    lies in the wait, at its middle or, when the source is later, half-way from the source
    to the wait's end, so the arrow never points back in time (an importer pairing the two
    ends in time order would drop it). A wait whose waited-on stream has no such op gets no
    arrow: nothing would hold its source.
    """
    ws, we, on = tl.wait_start_ns, tl.wait_end_ns, tl.wait_on
    src = ws.copy()
    src_op = np.full(ws.shape[0], -1, np.int64)
    for s in np.unique(on[on >= 0]).tolist():
        w = np.flatnonzero(on == s)
        ops = tl.stream_ops(s)
        if len(ops) == 0:
            continue
        st, en = tl.start_ns[ops], tl.end_ns[ops]
        i = np.maximum(np.searchsorted(st, ws[w], side="right") - 1, -1)
        inside = (i >= 0) & (en[np.maximum(i, 0)] > ws[w])
        j = np.searchsorted(st, we[w], side="left") - 1
        jj = np.maximum(j, 0)
        mid = (st[jj] + en[jj]) // 2
        late = np.where(mid < we[w], mid, st[jj])
        src[w] = np.where(inside, ws[w], late)
        src_op[w] = np.where(inside, ops[np.maximum(i, 0)], np.where(j >= 0, ops[jj], -1))
    keep = np.flatnonzero(src_op >= 0)
    dst = np.maximum((ws[keep] + we[keep]) // 2, (src[keep] + we[keep]) // 2)
    return keep, src_op[keep], src[keep], dst


def _flow(flow_id: int, name: str, cat: str, pid: int, src: tuple[int, float],
          dst: tuple[int, float]) -> list[dict]:
    """A flow arrow from ``src`` to ``dst`` ((tid, ts) each), bound to the slices enclosing them."""
    return [{"ph": "s", "name": name, "cat": cat, "id": flow_id, "pid": pid, "tid": src[0],
             "ts": src[1]},
            {"ph": "f", "bp": "e", "name": name, "cat": cat, "id": flow_id, "pid": pid,
             "tid": dst[0], "ts": dst[1]}]


def _op_events(tl: Timeline, pid: int, tids: np.ndarray) -> list[dict]:
    """Every op as a complete event, built column-wise."""
    if not len(tl):
        return []
    t0 = tl.t0_ns
    op_names = np.asarray(tl.names, dtype=object)[tl.name].tolist()
    cats = np.asarray(KINDS, dtype=object)[np.clip(tl.kind, 0, len(KINDS) - 1)].tolist()
    ts = us_floats(tl.start_ns - t0)
    dur = us_floats(tl.end_ns - tl.start_ns)
    return [{"ph": "X", "name": n, "cat": c, "pid": pid, "tid": t, "ts": s, "dur": d, "args": a}
            for n, c, t, s, d, a in zip(op_names, cats, tids.tolist(), ts, dur, _op_args(tl))]


def _wait_events(tl: Timeline, pid: int, tracks: _Tracks, flow_ids: Iterator[int]) -> list[dict]:
    """Every wait as a complete event in category ``wait``, and its flow arrow when it has one."""
    if not tl.n_waits:
        return []
    t0 = tl.t0_ns
    wnames = np.asarray(tl.names, dtype=object)[tl.wait_name].tolist()
    wtids = tracks.wait_tid.tolist()
    wts = us_floats(tl.wait_start_ns - t0)
    wdur = us_floats(tl.wait_end_ns - tl.wait_start_ns)
    out = []
    for n, t, s, d, o in zip(wnames, wtids, wts, wdur, tl.wait_on.tolist()):
        out.append({"ph": "X", "name": n, "cat": WAIT_CAT, "pid": pid, "tid": t, "ts": s,
                    "dur": d, "args": {"wait_on": tl.streams[o]} if o >= 0 else {}})
    waits, src_op, src, dst = _wait_flows(tl)
    for w, o, s, d in zip(waits.tolist(), tracks.op_tid[src_op].tolist(), us_floats(src - t0),
                          us_floats(dst - t0)):
        out += _flow(next(flow_ids), FLOW_NAME, WAIT_CAT, pid, (o, s), (wtids[w], d))
    return out


def _find_op(tl: Timeline, stream: str, lo_ns: int, hi_ns: int, name: str,
             cache: dict[int, tuple[np.ndarray, np.ndarray]]) -> int | None:
    """The op of ``stream`` named ``name`` spanning exactly [lo_ns, hi_ns] (absolute), if any."""
    if stream not in tl.streams:
        return None
    code = tl.streams.index(stream)
    if code not in cache:
        ops = tl.stream_ops(code)
        cache[code] = (ops, tl.start_ns[ops])
    ops, starts = cache[code]
    for k in range(int(np.searchsorted(starts, lo_ns)), len(ops)):
        i = int(ops[k])
        if starts[k] != lo_ns:
            break
        if int(tl.end_ns[i]) == hi_ns and tl.op_name(i) == name:
            return i
    return None


def _analysis_events(tl: Timeline, cap: dict, pid: int, tracks: _Tracks, first_tid: int,
                     flow_ids: Iterator[int]) -> tuple[list[dict], list[dict]]:
    """The analysis of one capture on its own tracks: (thread metadata, events).

    One track ``analysis: side <id>`` per side stream (sorted naturally; ``(overlap k)``
    tracks when its listed side windows overlap). Each listed parallel point is a slice
    ``side window <id>: <verdict>`` over its side window, with the point's figures as args;
    a flow ``dominator`` links it to its dominator op on the main stream's track (from the
    earlier of the two to the later, at their middles); its barrier is an instant
    ``barrier <op>`` at the barrier op's start. Times in ``cap`` are relative to its own
    ``t0_ns``, shifted here to the timeline's.
    """
    points = cap.get("parallel_points") or []
    shift = int(cap.get("t0_ns", tl.t0_ns)) - tl.t0_ns
    meta: list[dict] = []
    events: list[dict] = []
    tid = first_tid
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def rel_ns(t_us: float) -> int:
        return int(round(t_us * 1000)) + shift

    for side in sorted({str(p["side_stream"]) for p in points}, key=_natural_key):
        pts = [p for p in points if str(p["side_stream"]) == side]
        lo = np.array([rel_ns(p["side_window_us"][0]) for p in pts], np.int64)
        hi = np.maximum(np.array([rel_ns(p["side_window_us"][1]) for p in pts], np.int64), lo)
        lane = lanes(np.zeros(len(pts), np.int64), lo, hi)
        base = tid
        for k in range(int(lane.max()) + 1):
            meta += _thread_meta(pid, base + k, f"analysis: side {side}" +
                                 (f" (overlap {k})" if k else ""), len(meta) // 2)
            tid += 1
        barriers: set[tuple[float, str]] = set()  # one instant per barrier op and track
        for p, a, b, k in zip(pts, lo.tolist(), hi.tolist(), lane.tolist()):
            events.append({"ph": "X", "name": f"side window {side}: {p['verdict']}",
                           "cat": ANALYSIS_CAT, "pid": pid, "tid": base + k, "ts": _us(a),
                           "dur": _us(b - a), "args": _point_args(p)})
            events += _dominator_flow(tl, p, pid, (base + k, a, b), tracks, rel_ns, cache,
                                      flow_ids)
            bar = p.get("barrier")
            at = (_us(rel_ns(bar["start_us"])), str(bar["name"])) if bar else None
            if at and at not in barriers:
                barriers.add(at)
                events.append({"ph": "i", "s": "t", "name": f"barrier {at[1]}",
                               "cat": ANALYSIS_CAT, "pid": pid, "tid": base, "ts": at[0],
                               "args": {"ops": list(bar.get("ops") or [])}})
    return meta, events


def _us(ns: int) -> float:
    """Relative nanoseconds to microseconds with 3 decimals."""
    return round(ns / 1000.0, 3)


def _point_args(p: dict) -> dict:
    """The figures of a parallel point shown with its side window slice."""
    keys = ("side_stream", "side_ops", "verdict", "overlap_pct", "busy_overlap_pct",
            "overlap_us", "dominator", "barrier")
    return {k: p[k] for k in keys if p.get(k) is not None}


def _dominator_flow(tl: Timeline, p: dict, pid: int, window: tuple[int, int, int],
                    tracks: _Tracks, rel_ns: Callable[[float], int],
                    cache: dict[int, tuple[np.ndarray, np.ndarray]],
                    flow_ids: Iterator[int]) -> list[dict]:
    """A ``dominator`` arrow between a side window ((tid, lo, hi), relative ns) and its
    dominator op, from the one whose middle comes first; none when the op is not found."""
    dom = p.get("dominator")
    if not dom:
        return []
    lo, hi = rel_ns(dom["window_us"][0]), rel_ns(dom["window_us"][1])
    op = _find_op(tl, str(dom["stream"]), lo + tl.t0_ns, hi + tl.t0_ns, str(dom["name"]), cache)
    if op is None:
        return []
    tid, a, b = window
    ends = sorted([(tid, (a + b) // 2), (int(tracks.op_tid[op]), (lo + hi) // 2)],
                  key=lambda e: e[1])
    return _flow(next(flow_ids), DOMINATOR_FLOW, ANALYSIS_CAT, pid,
                 (ends[0][0], _us(ends[0][1])), (ends[1][0], _us(ends[1][1])))


def _process_meta(pid: int, sort_index: int, label: str, facts: list[str]) -> list[dict]:
    out = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}},
           {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
            "args": {"sort_index": sort_index}}]
    if facts:
        out.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                    "args": {"labels": ", ".join(facts)}})
    return out


def _analysis_facts(cap: dict) -> list[str]:
    """The analysis's verdict counts, and how many side windows it lists, for the process labels."""
    counts = cap.get("verdict_counts") or {}
    facts = []
    if counts:
        facts.append("verdicts " + " ".join(f"{k} {v}" for k, v in counts.items()))
    shown, total = len(cap.get("parallel_points") or []), cap.get("parallel_points_total")
    if total is not None and total > shown:
        facts.append(f"{shown} of {total} side windows shown")
    return facts


@gc_paused()  # a dict per op
def to_perfetto(timelines: list[Timeline], analyses: list[dict] | None = None,
                labels: list[str] | None = None) -> dict:
    """A Chrome-trace JSON object (``{"traceEvents": [...], "displayTimeUnit": "ns"}``).

    One pid per capture (1, 2, ...), named ``labels[i]`` when given, else the analysis's
    label, else :func:`parastream.timeline.analyze.capture_name`; one tid per stream (stream
    code + 1), plus overlap tracks (see :func:`lanes`), so the slices of every track nest
    properly. ``analyses``, when given, holds one capture dict of the analysis document per
    timeline, in the same order; each adds the analysis tracks (see
    :func:`_analysis_events`), sorted above the streams. Flow ids are unique across
    captures. Raises ValueError when ``analyses`` and ``timelines`` differ in length.
    """
    if analyses is not None and len(analyses) != len(timelines):
        raise ValueError(f"{len(analyses)} analyses for {len(timelines)} timelines")
    events: list[dict] = []
    flow_ids = itertools.count(1)
    for ci, tl in enumerate(timelines):
        pid = ci + 1
        cap = (analyses[ci] if analyses is not None else None) or {}
        label = (labels[ci] if labels and ci < len(labels) and labels[ci] else
                 cap.get("label") or capture_name(tl))
        facts = [f for f in (tl.format, tl.device.name, tl.source) if f] + _analysis_facts(cap)
        events += _process_meta(pid, ci, label, facts)
        tracks = _stream_tracks(tl)
        meta, analysis = _analysis_events(tl, cap, pid, tracks, tracks.next_tid, flow_ids)
        events += meta
        events += _stream_meta(tl, pid, tracks, len(meta) // 2)
        events += _op_events(tl, pid, tracks.op_tid)
        events += _wait_events(tl, pid, tracks, flow_ids)
        events += analysis
    # first in the object: what `parastream analyze` looks for to refuse reading a view
    # of an analysis back as if it were a profiler trace (it keeps only some event kinds)
    return {"otherData": {"generator": PERFETTO_VIEW_MARK}, "traceEvents": events,
            "displayTimeUnit": "ns"}


def write_perfetto(path: str | os.PathLike[str], timelines: list[Timeline],
                   analyses: list[dict] | None = None, labels: list[str] | None = None) -> None:
    """Write :func:`to_perfetto` of ``timelines`` (and their ``analyses``) to ``path``
    (atomically; gzipped when the name ends in ``.gz``)."""
    doc = to_perfetto(timelines, analyses, labels)
    write_atomic(path, gzipped_if_named(path, msgspec.json.encode(doc)))
