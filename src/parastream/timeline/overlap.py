"""Parallel points: side windows, their dominators, overlap_pct, verdicts and barriers.

Definitions (a side window against the one main-stream op it should hide behind)::

    side_window = [min(side_op.start), max(side_op.end)]
    main_window = [dominator.start, dominator.end]
    overlap     = max(0, min(side.end, main.end) - max(side.start, main.start))
    overlap_pct = overlap / min(side_len, main_len)

true parallel >= 0.5, false <= 0.05, partial in between. Because the side window is an
envelope and the dominator one op, every point also carries ``busy_overlap_pct``: the
share of the side ops' busy time that some main-stream op covers. ``overlap_pct`` stays
exactly the figure defined above, but a point whose envelope says true or partial while its side
ops never ran beside main work (busy overlap at or below the false threshold) gets the
verdict ``envelope-only``, counted with the false ones: an idle-gapped side window that
merely spans the dominator proves nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from . import intervals as iv
from .model import Timeline, value_flags

TRUE_AT = 0.5
FALSE_AT = 0.05
#: the verdict of a point whose envelope overlaps its dominator but whose side ops never
#: ran concurrently with main-stream work
ENVELOPE_ONLY = "envelope-only"
#: a dominator found by distance must be at least this share of the side window's length
DOMINATOR_MIN_SHARE = 0.5
#: slack for "started when the side window ended": wake-up latency of a waiting stream
BARRIER_SLACK_NS = 5_000


def verdict(overlap_pct: float, busy_overlap_pct: float | None = None) -> str:
    """The verdict for an overlap_pct; ``envelope-only`` when the envelope says true
    or partial but the side ops' busy time overlapped main work at most
    :data:`FALSE_AT` (``busy_overlap_pct`` None: not checked)."""
    if overlap_pct <= FALSE_AT:
        return "false"
    if busy_overlap_pct is not None and busy_overlap_pct <= FALSE_AT:
        return ENVELOPE_ONLY
    return "true" if overlap_pct >= TRUE_AT else "partial"


def overlap_pct(side: tuple[int, int], main: tuple[int, int]) -> tuple[int, float]:
    """(overlap ns, overlap_pct) of two windows; 0 when either window has no length."""
    ov = max(0, min(side[1], main[1]) - max(side[0], main[0]))
    denom = min(side[1] - side[0], main[1] - main[0])
    return ov, (ov / denom if denom > 0 else 0.0)


@dataclass
class ParallelPoint:
    side_stream: str
    side_lo: int
    side_hi: int
    side_ops: int
    side_busy_ns: int
    side_hidden_ns: int
    dom: int | None  # op index of the dominator
    overlap_ns: int
    overlap_pct: float
    verdict: str
    barrier: list[int]  # op indices: the barrier op first, then main ops up to the dominator


def windows_of(busy: iv.Union_, gap_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group a stream's busy blocks into windows separated by idle gaps longer than ``gap_ns``.

    Returns window starts, ends and the index of each window's first block.
    """
    s, e = busy
    if s.size == 0:
        z = np.zeros(0, np.int64)
        return z, z, z
    brk = np.flatnonzero(s[1:] - e[:-1] > gap_ns) + 1
    first = np.concatenate([[0], brk])
    last = np.append(brk, s.size) - 1
    return s[first], e[last], first


def default_window_gap(durations: np.ndarray) -> int:
    """Idle time that separates two side windows unless the user says otherwise:
    three times the stream's median op duration, at least 1 us."""
    if durations.size == 0:
        return 1_000
    return max(1_000, int(3 * np.median(durations)))


class _RangeArgmax:
    """Sparse table: argmax of ``values`` over index ranges [lo, hi) in O(1) per query."""

    def __init__(self, values: np.ndarray) -> None:
        self.v = values
        n = values.size
        self.table = [np.arange(n)]
        k = 1
        while (1 << k) <= n:
            prev = self.table[-1]
            half = 1 << (k - 1)
            a, b = prev[:n - (1 << k) + 1], prev[half:half + n - (1 << k) + 1]
            self.table.append(np.where(values[a] >= values[b], a, b))
            k += 1

    def query(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Vectorised; requires hi > lo."""
        length = hi - lo
        k = np.floor(np.log2(np.maximum(length, 1))).astype(np.int64)
        out = np.empty(lo.size, np.int64)
        for level in np.unique(k):
            m = k == level
            t = self.table[level]
            a = t[lo[m]]
            b = t[hi[m] - (1 << level)]
            out[m] = np.where(self.v[a] >= self.v[b], a, b)
        return out


def find_dominators(cand_start: np.ndarray, cand_end: np.ndarray, lo: np.ndarray,
                    hi: np.ndarray, rmq: "_RangeArgmax | None" = None) -> np.ndarray:
    """For each window [lo, hi], the candidate (index into the sorted candidates) that
    overlaps it most (ties to the earlier one); when none overlaps, the first candidate
    after the window that is at least :data:`DOMINATOR_MIN_SHARE` of the window long (else
    the last such one before it; else the adjacent candidate of any size, the next one
    first), within :func:`dominator_horizon` of the window. -1 when there is none.

    Candidates are one stream's ops in start order, so they do not overlap each other and
    only the first and last overlapping candidates can be clipped by the window.
    ``rmq`` is the range-argmax table of the candidates' durations, when the caller
    already built it (it depends on the candidates only).
    """
    n = cand_start.size
    out = np.full(lo.size, -1, np.int64)
    if n == 0 or lo.size == 0:
        return out
    dur = cand_end - cand_start
    first = np.searchsorted(cand_end, lo, side="right")  # first candidate ending after lo
    stop = np.searchsorted(cand_start, hi, side="left")  # candidates starting before hi
    has = stop > first
    if has.any():
        f, s = first[has], stop[has]
        wl, wh = lo[has], hi[has]

        def ov(j):
            return np.minimum(cand_end[j], wh) - np.maximum(cand_start[j], wl)

        best, best_ov = f.copy(), ov(f)
        # candidates in time order: first (maybe clipped), interior (whole), last (maybe
        # clipped); a later one wins only when strictly better, so ties go to the earlier
        inner = s - f > 2
        if inner.any():
            rmq = rmq or _RangeArgmax(dur)
            mid = rmq.query(f[inner] + 1, s[inner] - 1)
            mid_ov = dur[mid]
            take = mid_ov > best_ov[inner]
            sel = np.flatnonzero(inner)[take]
            best[sel], best_ov[sel] = mid[take], mid_ov[take]
        last = s - 1
        last_ov = ov(last)
        better = (last != best) & (last_ov > best_ov)
        best = np.where(better, last, best)
        out[has] = best
    none = ~has
    if none.any():
        out[none] = _nearest(cand_start, cand_end, dur, lo[none], hi[none], rmq)
    return out


def _nearest(cs: np.ndarray, ce: np.ndarray, dur: np.ndarray, lo: np.ndarray,
             hi: np.ndarray, rmq: "_RangeArgmax | None" = None) -> np.ndarray:
    """Dominator of windows that no candidate overlaps: the next candidate after the window
    (main was idle, so the op that follows is the work the side stream should have hidden
    behind), else the previous one; big-enough candidates first; none (-1) when every
    candidate is farther than :func:`dominator_horizon`. Vectorised over windows."""
    horizon = dominator_horizon(hi - lo)
    need = (hi - lo) * DOMINATOR_MIN_SHARE
    nxt = np.searchsorted(cs, hi, side="left")  # first candidate starting at/after hi
    stop = np.searchsorted(cs, hi + horizon, side="right")  # ... and within the horizon
    # candidates are disjoint: those before nxt end at or before lo
    back = np.minimum(np.searchsorted(ce, lo - horizon, side="left"), nxt)
    rmq = rmq or _RangeArgmax(dur)
    big_after = _first_at_least(rmq, nxt, stop, need)
    big_before = _last_at_least(rmq, back, nxt, need)
    adjacent = np.where(stop > nxt, nxt, np.where(nxt > back, nxt - 1, -1))
    return np.where(big_after >= 0, big_after, np.where(big_before >= 0, big_before, adjacent))


def _first_at_least(rmq: "_RangeArgmax", a: np.ndarray, b: np.ndarray, need: np.ndarray
                    ) -> np.ndarray:
    """Per query, the smallest j in [a, b) with value >= need, else -1 (binary search on
    range maxima, all queries at once)."""
    return _search(rmq, a, b, need, first=True)


def _last_at_least(rmq: "_RangeArgmax", a: np.ndarray, b: np.ndarray, need: np.ndarray
                   ) -> np.ndarray:
    """Per query, the largest j in [a, b) with value >= need, else -1."""
    return _search(rmq, a, b, need, first=False)


def _search(rmq: "_RangeArgmax", a: np.ndarray, b: np.ndarray, need: np.ndarray,
            first: bool) -> np.ndarray:
    v = rmq.v
    out = np.full(a.size, -1, np.int64)
    has = b > a
    idx = np.flatnonzero(has)
    if idx.size == 0:
        return out
    found = v[rmq.query(a[idx], b[idx])] >= need[idx]
    idx = idx[found]
    lo, hi = a[idx].astype(np.int64), b[idx].astype(np.int64)  # the answer lies in [lo, hi)
    nd = need[idx]
    while True:
        open_ = np.flatnonzero(hi - lo > 1)
        if open_.size == 0:
            break
        l, h = lo[open_], hi[open_]
        mid = (l + h) // 2
        if first:
            left = v[rmq.query(l, mid)] >= nd[open_]
            hi[open_] = np.where(left, mid, h)
            lo[open_] = np.where(left, l, mid)
        else:
            right = v[rmq.query(mid, h)] >= nd[open_]
            lo[open_] = np.where(right, mid, l)
            hi[open_] = np.where(right, h, mid)
    out[idx] = lo
    return out


def dominator_horizon(window_len: np.ndarray) -> np.ndarray:
    """How far from a side window a non-overlapping dominator may be: twice the window's
    length, at least 20 us. Farther main ops are other work, not what the side stream
    was meant to hide behind."""
    return np.maximum(2 * window_len, 20_000)


VERDICTS = ("true", "partial", "false", ENVELOPE_ONLY)


@dataclass
class PointTable:
    """All parallel points of a capture, column-wise (a trace can have 10^5 of them).

    ``verdict`` holds codes into :data:`VERDICTS`; ``dom`` and ``barrier`` are op indices
    (-1 for none); ``label`` codes into ``labels`` (the side stream of each point).
    ``busy`` is each side window's busy time and ``hidden`` the part of it that main-stream
    ops covered.
    """

    labels: list[str]
    label: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    ops: np.ndarray
    busy: np.ndarray
    hidden: np.ndarray
    dom: np.ndarray
    overlap: np.ndarray
    pct: np.ndarray
    verdict: np.ndarray
    barrier: np.ndarray
    main_idx: np.ndarray

    def __len__(self) -> int:
        return int(self.lo.size)

    def counts(self) -> dict[str, int]:
        """Points per verdict; ``false`` includes the envelope-only ones, which are also
        counted on their own under ``envelope_only``."""
        return verdict_counts(self.verdict)

    def barrier_ops(self, k: int) -> list[int]:
        """The barrier op of point k and the main ops after it up to the dominator (<= 8)."""
        b = int(self.barrier[k])
        if b < 0:
            return []
        j = int(np.searchsorted(self.main_idx, b))
        d = int(self.dom[k])
        ops = [b]
        if d > b:
            dpos = int(np.searchsorted(self.main_idx, d))
            ops.extend(int(x) for x in self.main_idx[j + 1:min(dpos, j + 8)])
        return ops

    def point(self, k: int) -> ParallelPoint:
        d = int(self.dom[k])
        return ParallelPoint(
            side_stream=self.labels[int(self.label[k])], side_lo=int(self.lo[k]),
            side_hi=int(self.hi[k]), side_ops=int(self.ops[k]), side_busy_ns=int(self.busy[k]),
            side_hidden_ns=int(self.hidden[k]), dom=d if d >= 0 else None,
            overlap_ns=int(self.overlap[k]), overlap_pct=float(self.pct[k]),
            verdict=VERDICTS[int(self.verdict[k])], barrier=self.barrier_ops(k))


def verdict_counts(codes: np.ndarray) -> dict[str, int]:
    """Counts of verdict codes: true, partial, false (envelope-only included) and
    envelope_only."""
    c = np.bincount(codes, minlength=len(VERDICTS))
    return {"true": int(c[0]), "partial": int(c[1]), "false": int(c[2] + c[3]),
            "envelope_only": int(c[3])}


def empty_counts() -> dict[str, int]:
    """Verdict counts of a capture without parallel points."""
    return {"true": 0, "partial": 0, "false": 0, "envelope_only": 0}


def parallel_points(tl: Timeline, main_code: int, side_codes: list[int], **kw) -> list[ParallelPoint]:
    """Every parallel point of a capture as objects (see :func:`point_table`)."""
    t = point_table(tl, main_code, side_codes, **kw)
    return [t.point(k) for k in range(len(t))]


def _name_mask(tl: Timeline, pattern: str) -> np.ndarray:
    """Per op, whether its name matches ``pattern`` (each distinct name tested once)."""
    return value_flags(tl.names, re.compile(pattern).search)[tl.name]


@dataclass
class _Main:
    """The main stream as the points see it: its ops (side ops picked by name left out),
    their busy union and running max end, and the dominator candidates among them."""

    idx: np.ndarray
    start: np.ndarray
    union: iv.Union_
    runmax: np.ndarray
    cand: np.ndarray
    cand_start: np.ndarray
    cand_end: np.ndarray
    rmq: "_RangeArgmax | None"


def point_table(tl: Timeline, main_code: int, side_codes: list[int], *,
                side_regex: str | None = None, dominator_regex: str | None = None,
                window_gap_ns: int | None = None) -> PointTable:
    """Every parallel point of a capture, vectorised.

    Without regexes, each side stream's busy blocks are grouped into windows and each
    window's dominator is searched among all main-stream ops. ``side_regex`` picks the side
    ops by name instead (on any stream, so side work that never left the main stream
    shows up as a false point); ``dominator_regex`` restricts the dominator candidates.
    """
    side_sel = _name_mask(tl, side_regex) if side_regex else None
    main = _main_stream(tl, main_code, side_sel, dominator_regex)
    labels, c = _side_windows(tl, _side_groups(tl, side_codes, side_sel), main, window_gap_ns)
    lo, hi, dom = c["lo"], c["hi"], c["dom"].astype(np.int64)
    ov, pct = _dominator_overlap(tl, lo, hi, dom)
    hidden = c["hidden"]
    busy_pct = np.where(c["busy"] > 0, hidden / np.where(c["busy"] > 0, c["busy"], 1), 0.0)
    code = np.where(pct >= TRUE_AT, 0, np.where(pct <= FALSE_AT, 2, 1)).astype(np.int8)
    # the envelope is not evidence alone: no concurrent busy time, no (partial) overlap
    code[(code != 2) & (busy_pct <= FALSE_AT)] = 3
    return PointTable(labels=labels, label=c["label"].astype(np.int32), lo=lo, hi=hi,
                      ops=c["ops"], busy=c["busy"], hidden=hidden, dom=dom, overlap=ov,
                      pct=pct, verdict=code, barrier=_barriers(main, hi, code),
                      main_idx=main.idx)


def _main_stream(tl: Timeline, main_code: int, side_sel: np.ndarray | None,
                 dominator_regex: str | None) -> _Main:
    """The main stream's ops and dominator candidates. Side work left on the main stream
    (``side_sel``) is what is measured, never what hides it: it is no dominator candidate,
    no part of main's busy time and no barrier."""
    idx = tl.stream_ops(main_code)
    if side_sel is not None:
        idx = idx[~side_sel[idx]]
    start, end = tl.start_ns[idx], tl.end_ns[idx]
    cand = idx
    if dominator_regex:
        cand = idx[_name_mask(tl, dominator_regex)[idx]]
    cs, ce = tl.start_ns[cand], tl.end_ns[cand]
    return _Main(idx=idx, start=start, union=iv.union(start, end),
                 runmax=np.maximum.accumulate(end) if end.size else end, cand=cand,
                 cand_start=cs, cand_end=ce, rmq=_RangeArgmax(ce - cs) if cs.size else None)


def _side_groups(tl: Timeline, side_codes: list[int], side_sel: np.ndarray | None
                 ) -> list[tuple[str, np.ndarray]]:
    """(side stream label, its side op indices): every op of each side stream, or the ops
    picked by name, grouped by their stream."""
    if side_sel is None:
        return [(tl.streams[s], tl.stream_ops(s)) for s in side_codes]
    return [(tl.streams[int(s)], np.flatnonzero(side_sel & (tl.stream == s)))
            for s in np.unique(tl.stream[side_sel])]


def _side_windows(tl: Timeline, groups: list[tuple[str, np.ndarray]], main: _Main,
                  window_gap_ns: int | None) -> tuple[list[str], dict[str, np.ndarray]]:
    """Each side stream's windows, concatenated over streams: label code, bounds, op
    count, busy time, the part of it main covered, and the dominator (op index or -1)."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in
                                         ("label", "lo", "hi", "ops", "busy", "hidden", "dom")}
    labels: list[str] = []
    cand = main.cand
    for label, idx in groups:
        if idx.size == 0:
            continue
        busy = iv.union(tl.start_ns[idx], tl.end_ns[idx])
        if busy[0].size == 0:  # only zero-length ops: windows of their instants, no busy time
            t = np.unique(tl.start_ns[idx])
            busy = (t, t)
        gap = window_gap_ns if window_gap_ns is not None else default_window_gap(tl.dur_ns[idx])
        lo, hi, first_block = windows_of(busy, gap)
        doms = find_dominators(main.cand_start, main.cand_end, lo, hi, main.rmq)
        # busy time per window and the part of it main covers (prefix sums over main's union)
        cover = _covered_before(main.union, busy[1]) - _covered_before(main.union, busy[0])
        ends = np.append(lo, np.iinfo(np.int64).max)
        cols["ops"].append(np.diff(np.searchsorted(tl.start_ns[idx], ends, side="left")))
        cols["label"].append(np.full(lo.size, len(labels), np.int32))
        labels.append(label)
        cols["lo"].append(lo)
        cols["hi"].append(hi)
        cols["busy"].append(np.add.reduceat(busy[1] - busy[0], first_block))
        cols["hidden"].append(np.add.reduceat(cover, first_block))
        cols["dom"].append(np.where(doms >= 0, cand[np.clip(doms, 0, None)] if cand.size else -1, -1))
    return labels, {k: (np.concatenate(v) if v else np.zeros(0, np.int64))
                    for k, v in cols.items()}


def _dominator_overlap(tl: Timeline, lo: np.ndarray, hi: np.ndarray, dom: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(overlap ns, overlap_pct) of each side window [lo, hi] with its dominator op (0
    where it has none or either has no length)."""
    has = dom >= 0
    d = np.clip(dom, 0, None)
    ds = np.where(has, tl.start_ns[d] if len(tl) else 0, 0)
    de = np.where(has, tl.end_ns[d] if len(tl) else 0, 0)
    ov = np.where(has, np.maximum(0, np.minimum(hi, de) - np.maximum(lo, ds)), 0)
    denom = np.minimum(hi - lo, de - ds)
    pct = np.where(has & (denom > 0), ov / np.where(denom > 0, denom, 1), 0.0)
    return ov, pct


def _barriers(main: _Main, hi: np.ndarray, code: np.ndarray) -> np.ndarray:
    """The barrier of each false point (op index, -1 for none): the first main op starting
    at (or within :data:`BARRIER_SLACK_NS` after) the side window's end while main was
    idle then."""
    barrier = np.full(hi.size, -1, np.int64)
    main_s = main.start
    if main.idx.size and hi.size:
        j = np.searchsorted(main_s, hi, side="left")
        jj = np.clip(j, 0, main_s.size - 1)
        idle = (j == 0) | (main.runmax[np.clip(j - 1, 0, None)] <= hi)
        ok = (code >= 2) & (j < main_s.size) & (main_s[jj] - hi <= BARRIER_SLACK_NS) & idle
        barrier[ok] = main.idx[jj[ok]]
    return barrier


def _covered_before(u: iv.Union_, t: np.ndarray) -> np.ndarray:
    """For each time in ``t``: how much of the union lies before it."""
    s, e = u
    if s.size == 0:
        return np.zeros(t.size, np.int64)
    cum = np.concatenate([[0], np.cumsum(e - s)])
    k = np.searchsorted(s, t, side="right")  # blocks starting at or before t
    prev_full = cum[np.maximum(k - 1, 0)]
    part = np.where(k > 0, np.minimum(t, e[np.maximum(k - 1, 0)]) - s[np.maximum(k - 1, 0)], 0)
    return np.where(k > 0, prev_full + part, 0)
