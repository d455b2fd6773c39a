"""Vectorised interval arithmetic on integer nanoseconds.

A *union* is a pair of sorted int64 arrays ``(starts, ends)`` of disjoint, non-touching
intervals. Everything here is numpy: sorting plus cumulative sums, no Python loop per
interval: a union of n intervals costs one O(n log n) sort.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

Union_ = tuple[np.ndarray, np.ndarray]


def union(starts: np.ndarray, ends: np.ndarray, keep_empty: bool = False) -> Union_:
    """Merge intervals into a union; zero-length intervals are dropped (they cover no time).

    ``keep_empty`` keeps them (and inverted ones) as blocks of their own when nothing
    covers them, which is how HTA's ``merge_kernel_intervals`` behaves.
    """
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    if not keep_empty:
        keep = e > s
        s, e = s[keep], e[keep]
    if s.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # a new block starts where the start is past every end seen so far
    new = np.empty(s.size, bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], s.size) - 1
    return s[first], run_end[last]


def window_ids(lo: np.ndarray, hi: np.ndarray, ids: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time in ``t``, the id of the latest window ``[lo, hi]`` starting at or
    before it if that window holds it, else -1: how ops are put into profiler steps, which
    follow one another (nested windows are not looked through). Ids must fit in int32."""
    out = np.full(len(t), -1, np.int32)
    if not len(lo) or not len(t):
        return out
    order = np.argsort(lo, kind="stable")
    lo, hi, ids = np.asarray(lo)[order], np.asarray(hi)[order], np.asarray(ids)[order]
    k = np.searchsorted(lo, t, side="right") - 1
    inside = (k >= 0) & (t <= hi[np.maximum(k, 0)])
    out[inside] = ids[k[inside]]
    return out


def length(u: Union_) -> int:
    """Total covered time of a union."""
    return int((u[1] - u[0]).sum())


def intersection_length(a: Union_, b: Union_) -> int:
    """|A ∩ B| for two unions, from |A| + |B| - |A ∪ B|."""
    if a[0].size == 0 or b[0].size == 0:
        return 0
    both = union(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))
    return length(a) + length(b) - length(both)


def intersect(a: Union_, b: Union_) -> Union_:
    """A ∩ B as a union (by a coverage sweep)."""
    return covered_at_least([a, b], 2)


def covered_at_least(unions: Sequence[Union_], k: int) -> Union_:
    """Where at least ``k`` of the given unions cover time, as a union."""
    if not unions:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    t, d = _edges(unions)
    if t.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    level = np.cumsum(d)
    seg_s, seg_e = t[:-1], t[1:]
    on = (level[:-1] >= k) & (seg_e > seg_s)
    return union(seg_s[on], seg_e[on])


def subtract(a: Union_, b: Union_) -> Union_:
    """A minus B as a union."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    t = np.concatenate([a[0], a[1], b[0], b[1]])
    da = np.concatenate([np.ones(a[0].size, np.int64), -np.ones(a[1].size, np.int64),
                         np.zeros(2 * b[0].size, np.int64)])
    db = np.concatenate([np.zeros(2 * a[0].size, np.int64), np.ones(b[0].size, np.int64),
                         -np.ones(b[1].size, np.int64)])
    order = np.argsort(t, kind="stable")
    t, la, lb = t[order], np.cumsum(da[order]), np.cumsum(db[order])
    on = (la[:-1] > 0) & (lb[:-1] == 0) & (t[1:] > t[:-1])
    return union(t[:-1][on], t[1:][on])


def overlap_with_window(u: Union_, lo: int, hi: int) -> int:
    """Time the union covers inside the window [lo, hi]."""
    if hi <= lo or u[0].size == 0:
        return 0
    s = np.clip(u[0], lo, hi)
    e = np.clip(u[1], lo, hi)
    return int((e - s).sum())


def concurrency_histogram(unions: Sequence[Union_], lo: int | None = None,
                          hi: int | None = None) -> dict[int, int]:
    """Time (ns) during which exactly k of the unions are active, for k = 0..len(unions).

    The span is [lo, hi] (default: the first start to the last end), so k = 0 is idle
    time inside the span.
    """
    hist = {k: 0 for k in range(len(unions) + 1)}
    t, d = _edges(unions)
    if t.size == 0:
        if lo is not None and hi is not None and hi > lo:
            hist[0] = hi - lo
        return hist
    lo = int(t[0]) if lo is None else lo
    hi = int(t[-1]) if hi is None else hi
    level = np.cumsum(d)[:-1]
    seg_s = np.clip(t[:-1], lo, hi)
    seg_e = np.clip(t[1:], lo, hi)
    w = seg_e - seg_s
    counts = np.bincount(level, weights=w, minlength=len(unions) + 1)
    for k in range(len(unions) + 1):
        hist[k] = int(round(counts[k]))
    # time in the span outside every edge is idle
    hist[0] += max(0, min(int(t[0]), hi) - lo) + max(0, hi - max(int(t[-1]), lo))
    return hist


def weighted_level(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Piecewise-constant sum of ``weights`` of the active intervals.

    Returns segment starts, segment ends and the summed weight on each segment (only
    segments of positive length).
    """
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    w = np.asarray(weights, np.int64)
    if s.size == 0:
        z = np.zeros(0, np.int64)
        return z, z, z
    t = np.concatenate([s, e])
    d = np.concatenate([w, -w])
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    level = np.cumsum(d)[:-1]
    seg_s, seg_e = t[:-1], t[1:]
    on = seg_e > seg_s
    return seg_s[on], seg_e[on], level[on]


def _edges(unions: Sequence[Union_]) -> tuple[np.ndarray, np.ndarray]:
    starts = [u[0] for u in unions]
    ends = [u[1] for u in unions]
    if not starts or sum(x.size for x in starts) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    s = np.concatenate(starts)
    e = np.concatenate(ends)
    t = np.concatenate([s, e])
    d = np.concatenate([np.ones(s.size, np.int64), -np.ones(e.size, np.int64)])
    # ends before starts at the same instant, so touching intervals do not count as overlap
    order = np.lexsort((d, t))
    return t[order], d[order]
