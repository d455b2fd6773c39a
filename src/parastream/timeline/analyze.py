"""The analysis of captures: from timelines to the ``parastream.analysis/1`` document.

``analyze(timelines, options)`` runs every metric on every capture (a file, or a step of
one), drops the first ``cold`` captures, and summarises the rest with medians. Times in
the document are microseconds relative to the capture's first event (``t0_ns``, kept
as an integer), rounded to the nanosecond, so epoch offsets cost no precision.
Timestamps are never compared across captures.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from . import intervals as iv
from .comm import comm_comp_overlap_pct, comm_exposed_ns
from .contention import core_contention, occupancy_known
from .model import Timeline
from .overlap import FALSE_AT, PointTable, empty_counts, point_table
from .procs import fork_pool, fork_workers
from .streams import StreamStats, stream_stats

SCHEMA = "parastream.analysis/1"
#: facts about a whole source file, reported once per source rather than per capture
FILE_LEVEL_META = ("hta_comm_comp_overlap_pct",)


@dataclass
class Options:
    """What the user can steer (all optional): the main stream by id (default: the
    compute stream with the most busy time), side ops and dominator candidates by name
    regex, the idle gap in microseconds that separates side windows, how many leading
    captures are cold, core counts overriding the source's, how many points to list,
    and whether a file with steps is split into one capture per step."""

    main_stream: str | None = None
    side_regex: str | None = None
    dominator_regex: str | None = None
    window_gap_us: float | None = None
    cold: int = 2
    cores: int | None = None  # AI cores / SMs, overriding what the source says
    vector_cores: int | None = None
    max_points: int = 50  # points listed per capture (all are counted); 0 = all
    split_steps: bool = True


def us(ns: int | float) -> float:
    """Nanoseconds -> microseconds, rounded to the nanosecond."""
    return round(float(ns) / 1000.0, 3)


def check_regex(pattern: str | None, what: str) -> None:
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InputError(None, f"{what}: invalid regular expression {pattern!r}: {exc}") from None


def analyze_capture(tl: Timeline, opts: Options | None = None, label: str | None = None) -> dict:
    """Every metric of one capture as a JSON-ready dict (see docs/analysis-schema.md)."""
    opts = opts or Options()
    warnings = list(tl.warnings)
    t0 = tl.t0_ns
    if opts.main_stream is not None and opts.main_stream not in tl.streams:
        raise InputError(tl.source, f"no stream {opts.main_stream!r} (streams: "
                         f"{', '.join(tl.streams)})")
    stats = stream_stats(tl, opts.main_stream)
    main = next((s for s in stats if s.role == "main"), None)
    warnings += _corrupt_warnings(stats)
    busy = _busy_figures(tl, stats, warnings)
    points = _points_part(tl, stats, main, opts, warnings)
    contention, cores_note = _contention(tl, stats, opts)
    if cores_note:
        warnings.append(cores_note)
    return {
        "source": tl.source,
        "format": tl.format,
        "label": label or capture_name(tl),
        "t0_ns": int(t0),
        "wall_us": busy["wall_us"],
        "busy_union_us": busy["busy_union_us"],
        "parallelism": busy["parallelism"],
        "ops": len(tl),
        "device": {"name": tl.device.name, "ai_core_num": opts.cores or tl.device.ai_core_num,
                   "vector_core_num": opts.vector_cores or tl.device.vector_core_num,
                   "sm_count": tl.device.sm_count},
        "meta": {k: v for k, v in tl.meta.items()
                 if isinstance(v, (str, int, float, bool)) and k not in FILE_LEVEL_META},
        "streams": [_stream_dict(s, t0) for s in stats],
        "overlaps": _overlaps(main, stats),
        **points,
        "comm_comp_overlap_pct": _round(comm_comp_overlap_pct(tl)),
        "comm_exposed_us": _exposed(comm_exposed_ns(tl)),
        "ascend_reference": ascend_reference(tl),
        "concurrency_us": busy["concurrency_us"],
        "contention": contention,
        "op_stats": op_stats(tl),
        "warnings": warnings,
    }


def _corrupt_warnings(stats: list[StreamStats]) -> list[str]:
    """One warning per stream whose ops overlap each other (corrupt data)."""
    return [f"corrupt data: {s.corrupt_overlaps} op(s) on stream {s.id} overlap "
            f"an earlier op on the same stream (not counted as parallelism)"
            for s in stats if s.corrupt_overlaps]


def _busy_figures(tl: Timeline, stats: list[StreamStats], warnings: list[str]) -> dict:
    """Wall time, busy union, parallelism (summed stream busy time over the union; 1.0
    when nothing is busy) and time at each concurrency level."""
    first = int(tl.start_ns.min()) if len(tl) else tl.t0_ns
    last = int(tl.end_ns.max()) if len(tl) else tl.t0_ns
    union_len = iv.length(iv.union(tl.start_ns, tl.end_ns))
    sum_busy = sum(s.busy_ns for s in stats)
    # no busy time at all (every op of zero duration): nothing ran side by side, so serial
    parallelism = sum_busy / union_len if union_len else 1.0
    if len(tl) and not union_len:
        warnings.append(f"all {len(tl)} ops have zero duration: no overlap can be measured "
                        "(a trace of launches only, or durations lost in export)")
    hist = iv.concurrency_histogram([s.busy for s in stats], first, last)
    return {"wall_us": us(last - first), "busy_union_us": us(union_len),
            "parallelism": round(parallelism, 6),
            "concurrency_us": {str(k): us(v) for k, v in hist.items()}}


def _overlaps(main: StreamStats | None, stats: list[StreamStats]) -> list[dict]:
    """How much of each side stream's busy time the main stream's busy time covers."""
    if main is None:
        return []
    out = []
    for s in stats:
        if s is main:
            continue
        inter = iv.intersection_length(main.busy, s.busy)
        out.append({"main": main.id, "side": s.id, "intersection_us": us(inter),
                    "hidden_frac": round(inter / s.busy_ns, 6) if s.busy_ns else 0.0})
    return out


def _points_part(tl: Timeline, stats: list[StreamStats], main: StreamStats | None,
                 opts: Options, warnings: list[str]) -> dict:
    """The parallel points of a capture: those listed (``opts.max_points``), their total,
    verdict counts, median overlap_pct and the most common barriers. No main stream, no
    points."""
    points = None
    if main is not None:
        gap = None if opts.window_gap_us is None else int(round(opts.window_gap_us * 1000))
        points = point_table(tl, main.code, [s.code for s in stats if s is not main],
                             side_regex=opts.side_regex, dominator_regex=opts.dominator_regex,
                             window_gap_ns=gap)
    n_points = len(points) if points is not None else 0
    if opts.side_regex and not n_points:
        warnings.append(f"no op matches --side {opts.side_regex!r}")
    verdicts = points.counts() if points is not None else empty_counts()
    if verdicts["envelope_only"]:
        warnings.append(f"{verdicts['envelope_only']} parallel point(s) envelope-only: the side "
                        f"window spans its dominator, but its ops overlapped main-stream work "
                        f"for at most {FALSE_AT:.0%} of their busy time (counted as false)")
    shown = _pick_points(points, opts.max_points) if points is not None else []
    t0 = tl.t0_ns
    return {
        "parallel_points": [_point_dict(tl, points.point(k), t0) for k in shown],
        "parallel_points_total": n_points,
        "verdict_counts": verdicts,
        "overlap_pct_median": round(float(np.median(points.pct)), 6) if n_points else None,
        "barriers": _barrier_counts(tl, points),
    }


def _barrier_counts(tl: Timeline, points: PointTable | None) -> dict[str, int]:
    """The ten most common barriers (op names joined by "+") among the first 5000 points
    that have one."""
    barriers: Counter = Counter()
    if points is not None:
        for k in np.flatnonzero(points.barrier >= 0)[:5000]:
            barriers["+".join(tl.op_name(i) for i in points.barrier_ops(int(k)))] += 1
    return dict(barriers.most_common(10))


#: op types whose growth is a known multi-stream long tail (the triage's 3c case)
TAIL_TYPES = ("TransData", "BroadcastTo", "MemSet", "Memset")


def op_stats(tl: Timeline, top: int = 200) -> dict:
    """Duration statistics per op type (Ascend) or per op name (CUDA kernels, whose type
    column only says "kernel"), for the baseline comparison. The ``top`` groups by total
    time are kept, plus every known long-tail type."""
    by = "type" if np.unique(tl.type).size > 3 else "name"
    codes = tl.type if by == "type" else tl.name
    labels = tl.types if by == "type" else tl.names
    if len(tl) == 0:
        return {"by": by, "groups": {}}
    dur = tl.dur_ns
    order = np.lexsort((dur, codes))
    c_sorted, d_sorted = codes[order], dur[order]
    uniq, first, count = np.unique(c_sorted, return_index=True, return_counts=True)
    total = np.add.reduceat(d_sorted, first)
    med = (d_sorted[first + (count - 1) // 2] + d_sorted[first + count // 2]) / 2
    mx = d_sorted[first + count - 1]
    keep = set(np.argsort(-total)[:top].tolist())
    for i, u in enumerate(uniq):
        if any(t.lower() in labels[u].lower() for t in TAIL_TYPES):
            keep.add(i)
    groups = {}
    for i in sorted(keep):
        groups[labels[int(uniq[i])]] = {"count": int(count[i]), "total_us": us(total[i]),
                                        "median_us": us(med[i]), "max_us": us(mx[i])}
    return {"by": by, "groups": groups}


def capture_name(tl: Timeline) -> str:
    """A capture's name in the analysis and in viewers: its label, else its source's file
    name (or its format) plus the step or rank."""
    import os

    if tl.meta.get("label"):
        return str(tl.meta["label"])
    base = os.path.basename(tl.source.rstrip("/")) or tl.source or tl.format or "capture"
    if "step" in tl.meta:
        return f"{base} step {tl.meta['step']}"
    if "rank" in tl.meta:
        return f"{base} rank {tl.meta['rank']}"
    return base


def ascend_reference(tl: Timeline) -> dict | None:
    """Ascend's own comm/comp overlap for this capture, from the capture folder's step
    trace (``step_trace_time.csv``, ``analysis.db`` or trace_view's Overlap Analysis, read
    into ``meta["ascend_step_trace"]``): ``{"overlapped_pct", "scope", "source"}`` with
    scope ``step N`` for a step's capture (None when the step trace lacks that step) or
    ``file``; None when the source has no step trace."""
    st = tl.meta.get("ascend_step_trace")
    if not isinstance(st, dict):
        return None
    if "step" in tl.meta:
        fig = (st.get("steps") or {}).get(str(tl.meta["step"]))
        if not fig or not fig.get("communication") or fig.get("overlapped") is None:
            return None
        pct, scope = 100.0 * fig["overlapped"] / fig["communication"], f"step {tl.meta['step']}"
    else:
        pct, scope = st.get("overlapped_pct"), "file"
    if pct is None:
        return None
    return {"overlapped_pct": round(float(pct), 4), "scope": scope, "source": st.get("source")}


def _exposed(ns: int | None) -> float | None:
    return None if ns is None else us(ns)


def _round(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def _stream_dict(s: StreamStats, t0: int) -> dict:
    return {"id": s.id, "role": s.role, "ops": s.ops, "busy_us": us(s.busy_ns),
            "span_us": [us(s.first_ns - t0), us(s.last_ns - t0)],
            "gaps": {"count": s.gap_count, "idle_us": us(s.gap_idle_ns),
                     "wait_us": us(s.gap_wait_ns), "host_bound_us": us(s.gap_host_ns)},
            "corrupt_overlaps": s.corrupt_overlaps,
            "max_block_dim": s.max_block_dim if s.max_block_dim >= 0 else None}


def _pick_points(points: PointTable, limit: int) -> list[int]:
    """All points when few; else the longest side windows (in time order)."""
    n = len(points)
    if limit <= 0 or n <= limit:
        return list(range(n))
    length = points.hi - points.lo
    keep = np.argsort(-length, kind="stable")[:limit]
    return sorted(keep.tolist(), key=lambda i: (int(points.lo[i]), int(points.label[i])))


def _point_dict(tl: Timeline, p, t0: int) -> dict:
    dom = None
    if p.dom is not None:
        dom = {"name": tl.op_name(p.dom), "stream": tl.streams[int(tl.stream[p.dom])],
               "window_us": [us(tl.start_ns[p.dom] - t0), us(tl.end_ns[p.dom] - t0)]}
    barrier = None
    if p.barrier:
        b = p.barrier[0]
        barrier = {"name": tl.op_name(b), "start_us": us(tl.start_ns[b] - t0),
                   "ops": [tl.op_name(i) for i in p.barrier]}
    return {"side_stream": p.side_stream,
            "side_window_us": [us(p.side_lo - t0), us(p.side_hi - t0)],
            "side_ops": p.side_ops, "dominator": dom, "overlap_us": us(p.overlap_ns),
            "overlap_pct": round(p.overlap_pct, 6), "verdict": p.verdict,
            "busy_overlap_pct": round(p.side_hidden_ns / p.side_busy_ns, 6) if p.side_busy_ns else 0.0,
            "barrier": barrier}


def _contention(tl: Timeline, stats: list[StreamStats], opts: Options) -> tuple[list[dict], str | None]:
    codes = [s.code for s in stats]
    if len(codes) < 2:
        return [], None
    n_cuda, n_occ = occupancy_known(tl)
    if n_cuda:
        return _sm_contention(tl, codes, opts, n_cuda, n_occ)
    if not bool((tl.block_dim > 0).any()):
        return [], None
    cube = opts.cores or tl.device.ai_core_num
    vec = opts.vector_cores or tl.device.vector_core_num
    if not cube:
        return [], ("core contention not checked: the device's core count is unknown "
                    "(pass --cores N, or point at the profiler directory with info.json)")
    pools = [("cube", cube)] + ([("vector", vec)] if vec else [])
    return _pool_rows(tl, codes, pools), None


def _sm_contention(tl: Timeline, codes: list[int], opts: Options, n_cuda: int,
                   n_occ: int) -> tuple[list[dict], str | None]:
    """CUDA: kernels' occupancy shares of the SMs (grid blocks are not SMs)."""
    sms = opts.cores or tl.device.sm_count
    if not n_occ:
        return [], ("SM contention not checked: the trace records no occupancy per kernel "
                    "('est. achieved occupancy %' or 'warps per SM'); grid blocks are not SMs")
    if not sms:
        return [], ("SM contention not checked: the device's SM count is unknown (no "
                    "deviceProperties numSms; pass --cores N)")
    note = None
    if n_occ < n_cuda:
        note = (f"SM contention checked on {n_occ} of {n_cuda} kernels: the others have no "
                "recorded occupancy")
    return _pool_rows(tl, codes, [("sm", sms)]), note


def _pool_rows(tl: Timeline, codes: list[int], pools: list[tuple[str, int]]) -> list[dict]:
    out = []
    for pool, n in pools:
        for c in core_contention(tl, codes, pool, n):
            out.append({"pool": c.pool, "streams": list(c.streams),
                        "oversubscribed_us": us(c.oversubscribed_ns), "max_demand": c.max_demand,
                        "cores": c.cores, "first_us": us(c.first_ns - tl.t0_ns)})
    return out


def captures_of(timelines: list[Timeline], split_steps: bool = True) -> list[Timeline]:
    """Every capture: each file, and each step inside a file that has several."""
    out: list[Timeline] = []
    for tl in timelines:
        out.extend(tl.split_steps() if split_steps else [tl])
    return out


#: ops across a unit's captures from which their analyses are spread over forked
#: processes (below it, starting the processes costs more than it saves)
PARALLEL_OPS = 200_000
#: the captures being analysed by a pool (inherited by its forked processes)
_SHARED: tuple[list[Timeline], Options] | None = None


def _analyze_nth(i: int) -> dict:
    caps, opts = _SHARED  # type: ignore[misc]
    return analyze_capture(caps[i], opts)


def analyze_captures(caps: list[Timeline], opts: Options) -> list[dict]:
    """:func:`analyze_capture` of each capture, in order. Many big captures are analysed
    by forked processes (see :func:`~.procs.fork_workers`), which inherit the timelines
    instead of being sent them; the results are the same."""
    global _SHARED
    n = min(fork_workers(), len(caps)) if sum(map(len, caps)) >= PARALLEL_OPS else 1
    if n <= 1:
        return [analyze_capture(tl, opts) for tl in caps]
    _SHARED = (caps, opts)
    try:
        with fork_pool(n) as pool:
            return pool.map(_analyze_nth, range(len(caps)), chunksize=1)
    finally:
        _SHARED = None


def analyze(timelines: list[Timeline], opts: Options | None = None) -> dict:
    """Analyse several captures; summary medians skip the first ``opts.cold`` captures."""
    opts = opts or Options()
    check_regex(opts.side_regex, "--side")
    check_regex(opts.dominator_regex, "--dominator")
    caps = captures_of(timelines, opts.split_steps)
    results = analyze_captures(caps, opts)
    return {"schema": SCHEMA, "captures": results, "summary": summarize(results, opts.cold)}


def summarize(results: list[dict], cold: int) -> dict:
    """Medians over the warm captures (the first ``cold`` dropped when more remain)."""
    n = len(results)
    dropped = cold if n > cold else 0
    warm = results[dropped:]
    notes = []
    if n > 1 and dropped == 0 and cold > 0:
        notes.append(f"only {n} captures: none dropped as cold (asked to drop {cold}); "
                     f"profile at least {cold + 3} runs")

    def med(vals):
        vals = [v for v in vals if v is not None]
        return round(statistics.median(vals), 6) if vals else None

    hidden: dict[str, list[float]] = {}
    for r in warm:
        for o in r["overlaps"]:
            hidden.setdefault(o["side"], []).append(o["hidden_frac"])
    verdicts = empty_counts()
    for r in warm:
        for k, v in r["verdict_counts"].items():
            verdicts[k] = verdicts.get(k, 0) + v
    pcts = [r["overlap_pct_median"] for r in warm]
    return {
        "captures": n,
        "dropped_cold": dropped,
        "analysed": [r["label"] for r in warm],
        "median_wall_us": med([r["wall_us"] for r in warm]),
        "median_parallelism": med([r["parallelism"] for r in warm]),
        "median_comm_comp_overlap_pct": med([r["comm_comp_overlap_pct"] for r in warm]),
        "median_comm_exposed_us": med([r.get("comm_exposed_us") for r in warm]),
        "median_hidden_frac": {k: med(v) for k, v in hidden.items()},
        "median_overlap_pct": med(pcts),  # median over captures of each one's median
        "verdict_counts": verdicts,
        "notes": notes,
    }
