"""Export timelines as Chrome-trace JSON, which the Perfetto UI and chrome://tracing open.

Layout: one process (pid) per capture, named after its label or source; one thread (tid)
per stream, named ``stream <id>`` and ordered with ``thread_sort_index`` (numeric ids in
numeric order). Ops are complete events (``ph: "X"``); waits are complete events in
category ``wait`` on the waiting stream's track, and when the waited-on stream is known a
flow arrow (``ph: "s"`` on the waited-on stream, ``ph: "f"``/``bp: "e"`` on the wait) shows
the event edge.

Times are microseconds relative to the capture's first op or wait (``Timeline.t0_ns``),
rounded to 3 decimals: relative values stay small, so a float64 keeps every nanosecond
(absolute epoch microseconds would not).

The event list is built column-wise: numpy arrays become Python lists once and events
are zipped from them, so a million ops take about a second, not a per-op attribute walk.
"""

from __future__ import annotations

import os
import re
from typing import Any

import msgspec
import numpy as np

from ..timeline.analyze import capture_name
from ..timeline.model import CORES, KINDS, Timeline
from ..timeline.readers.kineto import PERFETTO_VIEW_MARK
from ..timeline.nogc import gc_paused
from .atomic import gzipped_if_named, write_atomic

WAIT_CAT = "wait"
FLOW_NAME = "event wait"


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


def _flow_sources(tl: Timeline, t0: int) -> np.ndarray:
    """Where each wait's flow arrow starts on the waited-on stream (absolute ns).

    The wait start when an op of the waited-on stream is running then (the op whose end
    the event marks); else the middle of that stream's last op starting before the wait
    ends; else the wait start. Inside a slice, so viewers bind the arrow to it.
    """
    ws, we, on = tl.wait_start_ns, tl.wait_end_ns, tl.wait_on
    src = ws.copy()
    for s in np.unique(on[on >= 0]).tolist():
        w = np.flatnonzero(on == s)
        ops = tl.stream_ops(s)
        if len(ops) == 0:
            continue
        st, en = tl.start_ns[ops], tl.end_ns[ops]
        i = np.searchsorted(st, ws[w], side="right") - 1
        inside = (i >= 0) & (en[np.maximum(i, 0)] > ws[w])
        j = np.searchsorted(st, we[w], side="left") - 1
        mid = (st[np.maximum(j, 0)] + en[np.maximum(j, 0)]) // 2
        src[w] = np.where(inside, ws[w], np.where(j >= 0, mid, ws[w]))
    return src


@gc_paused()  # a dict per op
def to_perfetto(timelines: list[Timeline], labels: list[str] | None = None) -> dict:
    """A Chrome-trace JSON object (``{"traceEvents": [...], "displayTimeUnit": "ns"}``).

    One pid per capture (1, 2, ...), named ``labels[i]`` when given, else
    :func:`parastream.timeline.analyze.capture_name`; one tid per stream (stream code + 1). Flow ids are unique
    across captures.
    """
    events: list[dict] = []
    flow_id = 0
    for ci, tl in enumerate(timelines):
        pid = ci + 1
        t0 = tl.t0_ns
        label = labels[ci] if labels and ci < len(labels) and labels[ci] else capture_name(tl)
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": label}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                       "args": {"sort_index": ci}})
        facts = [f for f in (tl.format, tl.device.name, tl.source) if f]
        if facts:
            events.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                           "args": {"labels": ", ".join(facts)}})
        for rank, code in enumerate(stream_order(tl.streams)):
            tid = code + 1
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": f"stream {tl.streams[code]}"}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                           "args": {"sort_index": rank}})

        # ops, column-wise
        if len(tl):
            op_names = np.asarray(tl.names, dtype=object)[tl.name].tolist()
            cats = np.asarray(KINDS, dtype=object)[np.clip(tl.kind, 0, len(KINDS) - 1)].tolist()
            tids = (tl.stream.astype(np.int64) + 1).tolist()
            ts = us_floats(tl.start_ns - t0)
            dur = us_floats(tl.end_ns - tl.start_ns)
            args = _op_args(tl)
            events.extend(
                {"ph": "X", "name": n, "cat": c, "pid": pid, "tid": t, "ts": s, "dur": d,
                 "args": a}
                for n, c, t, s, d, a in zip(op_names, cats, tids, ts, dur, args)
            )

        # waits, and flow arrows for the ones whose waited-on stream is known
        if tl.n_waits:
            wnames = np.asarray(tl.names, dtype=object)[tl.wait_name].tolist()
            wtids = (tl.wait_stream.astype(np.int64) + 1).tolist()
            wts = us_floats(tl.wait_start_ns - t0)
            wdur = us_floats(tl.wait_end_ns - tl.wait_start_ns)
            on = tl.wait_on.tolist()
            for n, t, s, d, o in zip(wnames, wtids, wts, wdur, on):
                a = {"wait_on": tl.streams[o]} if o >= 0 else {}
                events.append({"ph": "X", "name": n, "cat": WAIT_CAT, "pid": pid, "tid": t,
                               "ts": s, "dur": d, "args": a})
            known = np.flatnonzero(tl.wait_on >= 0)
            if len(known):
                src = us_floats(_flow_sources(tl, t0)[known] - t0)
                mid = ((tl.wait_start_ns[known] + tl.wait_end_ns[known]) // 2) - t0
                dst = us_floats(mid)
                for k, i in enumerate(known.tolist()):
                    flow_id += 1
                    events.append({"ph": "s", "name": FLOW_NAME, "cat": WAIT_CAT, "id": flow_id,
                                   "pid": pid, "tid": on[i] + 1, "ts": src[k]})
                    events.append({"ph": "f", "bp": "e", "name": FLOW_NAME, "cat": WAIT_CAT,
                                   "id": flow_id, "pid": pid, "tid": wtids[i], "ts": dst[k]})
    # first in the object: what `parastream analyze` looks for to refuse reading a view
    # of an analysis back as if it were a profiler trace (it keeps only some event kinds)
    return {"otherData": {"generator": PERFETTO_VIEW_MARK}, "traceEvents": events,
            "displayTimeUnit": "ns"}


def write_perfetto(path: str | os.PathLike[str], timelines: list[Timeline],
                   labels: list[str] | None = None) -> None:
    """Write :func:`to_perfetto` of ``timelines`` to ``path`` (atomically)."""
    write_atomic(path, gzipped_if_named(path, msgspec.json.encode(to_perfetto(timelines,
                                                                              labels))))
