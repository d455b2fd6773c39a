"""Property tests: vectorised interval arithmetic vs a per-nanosecond boolean grid.

Coordinates are small integers (0..200 ns), so a grid with one cell per nanosecond
(cell t stands for [t, t+1)) is an exact oracle for every union / intersection /
histogram. Strategies favour ties, zero-length and touching intervals.
"""

from __future__ import annotations

import grid
import numpy as np
from hypothesis import given, settings, strategies as st

from parastream.timeline import intervals as iv

G = 200  # the grid covers [0, G)
SETTINGS = settings(max_examples=150, deadline=None)

# Coordinates live on a 5 ns lattice (0, 5, ..., 200): with a dozen intervals, identical
# starts/ends, touching and zero-length intervals are common. Interval arithmetic only
# compares and subtracts coordinates, so the lattice loses no generality.
STEP = 5
coord = st.integers(0, G // STEP).map(lambda x: STEP * x)


def interval():
    """(start, end) with start <= end (zero-length when they coincide)."""
    return st.tuples(st.integers(0, G // STEP), st.integers(0, G // STEP)).map(
        lambda p: (STEP * min(p), STEP * max(p)))


intervals_ = st.lists(interval(), max_size=12)


# ------------------------------------------------------------------ oracles
def grid_of(ivs) -> np.ndarray:
    return grid.grid_of(ivs, G)


def oracle_union(ivs):
    s, e = grid.runs(grid_of(ivs))
    return np.array(s, np.int64), np.array(e, np.int64)


def as_lists(u):
    return [int(x) for x in u[0]], [int(x) for x in u[1]]


def arrays(ivs):
    s = np.array([a for a, _ in ivs], np.int64)
    e = np.array([b for _, b in ivs], np.int64)
    return s, e


def assert_canonical(u):
    s, e = u
    assert s.dtype == np.int64 and e.dtype == np.int64
    assert s.shape == e.shape
    assert (e > s).all(), "every block has positive length"
    assert (s[1:] > e[:-1]).all(), "blocks sorted, disjoint and not touching"


# ------------------------------------------------------------------ union / length
@SETTINGS
@given(intervals_)
def test_union_matches_grid(ivs):
    u = iv.union(*arrays(ivs))
    assert_canonical(u)
    assert as_lists(u) == grid.runs(grid_of(ivs))


@SETTINGS
@given(intervals_)
def test_union_is_order_independent_and_idempotent(ivs):
    s, e = arrays(ivs)
    u = iv.union(s, e)
    rev = iv.union(s[::-1].copy(), e[::-1].copy())
    assert as_lists(rev) == as_lists(u)
    assert as_lists(iv.union(*u)) == as_lists(u)


def test_union_edge_cases():
    empty = iv.union(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert empty[0].size == 0 and empty[1].size == 0
    # only zero-length intervals: nothing is covered
    z = iv.union(np.array([5, 5, 7]), np.array([5, 5, 7]))
    assert z[0].size == 0
    # touching intervals merge; identical ones collapse
    t = iv.union(np.array([0, 10, 10, 30]), np.array([10, 20, 20, 40]))
    assert as_lists(t) == ([0, 30], [20, 40])
    assert iv.length(t) == 30
    assert iv.length(empty) == 0


@SETTINGS
@given(intervals_)
def test_length_matches_grid(ivs):
    assert iv.length(iv.union(*arrays(ivs))) == int(grid_of(ivs).sum())


# ------------------------------------------------------------------ binary operations
@SETTINGS
@given(intervals_, intervals_)
def test_intersection_length_matches_grid(a, b):
    ua, ub = oracle_union(a), oracle_union(b)
    want = int((grid_of(a) & grid_of(b)).sum())
    assert iv.intersection_length(ua, ub) == want
    assert iv.intersection_length(ub, ua) == want


@SETTINGS
@given(intervals_, intervals_)
def test_intersect_matches_grid(a, b):
    ua, ub = oracle_union(a), oracle_union(b)
    got = iv.intersect(ua, ub)
    assert_canonical(got)
    assert as_lists(got) == grid.runs(grid_of(a) & grid_of(b))


@SETTINGS
@given(intervals_, intervals_)
def test_subtract_matches_grid(a, b):
    ua, ub = oracle_union(a), oracle_union(b)
    got = iv.subtract(ua, ub)
    assert_canonical(got)
    assert as_lists(got) == grid.runs(grid_of(a) & ~grid_of(b))


@SETTINGS
@given(st.lists(st.lists(interval(), max_size=6), max_size=8), st.integers(1, 9))
def test_covered_at_least_matches_grid(groups, k):
    unions = [oracle_union(g) for g in groups]
    level = np.zeros(G, np.int64)
    for g in groups:
        level += grid_of(g)
    got = iv.covered_at_least(unions, k)
    assert_canonical(got)
    assert as_lists(got) == grid.runs(level >= k)


@SETTINGS
@given(intervals_, coord, coord)
def test_overlap_with_window_matches_grid(ivs, lo, hi):
    u = oracle_union(ivs)
    g = grid_of(ivs)
    want = int(g[lo:hi].sum()) if hi > lo else 0
    assert iv.overlap_with_window(u, lo, hi) == want


# ------------------------------------------------------------------ concurrency histogram
def hist_oracle(groups, lo, hi):
    active = np.zeros(G, np.int64)
    for g in groups:
        active += grid_of(g)
    want = {k: 0 for k in range(len(groups) + 1)}
    for t in range(lo, hi):
        want[int(active[t])] += 1
    return want


@SETTINGS
@given(st.lists(st.lists(interval(), max_size=6), max_size=8), coord, coord)
def test_concurrency_histogram_explicit_span(groups, a, b):
    lo, hi = min(a, b), max(a, b)
    unions = [oracle_union(g) for g in groups]
    got = iv.concurrency_histogram(unions, lo, hi)
    assert set(got) == set(range(len(groups) + 1))
    assert sum(got.values()) == hi - lo
    assert got == hist_oracle(groups, lo, hi)


@SETTINGS
@given(st.lists(st.lists(interval(), max_size=6), max_size=8))
def test_concurrency_histogram_default_span(groups):
    unions = [oracle_union(g) for g in groups]
    got = iv.concurrency_histogram(unions)
    blocks = [(int(s), int(e)) for u in unions for s, e in zip(*u)]
    if blocks:
        lo, hi = min(s for s, _ in blocks), max(e for _, e in blocks)
    else:
        lo = hi = 0
    assert sum(got.values()) == hi - lo
    assert got == hist_oracle(groups, lo, hi)


def test_concurrency_histogram_edge_cases():
    assert iv.concurrency_histogram([]) == {0: 0}
    assert iv.concurrency_histogram([], 10, 30) == {0: 20}
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert iv.concurrency_histogram([empty, empty], 5, 8) == {0: 3, 1: 0, 2: 0}
    # touching blocks of two streams never count as concurrency
    a = (np.array([0]), np.array([10]))
    b = (np.array([10]), np.array([20]))
    assert iv.concurrency_histogram([a, b]) == {0: 0, 1: 20, 2: 0}
    # the span may extend past every block on both sides
    assert iv.concurrency_histogram([a, b], 0, 50) == {0: 30, 1: 20, 2: 0}


# ------------------------------------------------------------------ weighted level
@SETTINGS
@given(st.lists(st.tuples(interval(), st.integers(0, 12)), max_size=12))
def test_weighted_level_matches_grid(items):
    ivs = [x for x, _ in items]
    w = np.array([x for _, x in items], np.int64)
    s, e = arrays(ivs)
    level = np.zeros(G, np.int64)
    for (a, b), x in items:
        level[a:b] += x
    seg_s, seg_e, lev = iv.weighted_level(s, e, w)
    assert seg_s.shape == seg_e.shape == lev.shape
    assert (seg_e > seg_s).all()
    assert (seg_s[1:] >= seg_e[:-1]).all(), "segments sorted and disjoint"
    covered = np.zeros(G, bool)
    for a, b, x in zip(seg_s.tolist(), seg_e.tolist(), lev.tolist()):
        assert (level[a:b] == x).all(), (a, b, x, level[a:b])
        covered[a:b] = True
    # outside the returned segments nothing is active (or only zero weights)
    assert (level[~covered] == 0).all()
    if ivs:
        lo, hi = min(a for a, _ in ivs), max(b for _, b in ivs)
        if hi > lo:  # segments tile the whole edge span
            assert covered[lo:hi].all() and not covered[:lo].any() and not covered[hi:].any()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=8, unique_by=lambda w: w[0]),
       st.lists(st.integers(-5, 90), max_size=30))
def test_window_ids_match_a_scan(windows, times):
    lo = np.array([a for a, _ in windows], np.int64)
    hi = lo + np.array([d for _, d in windows], np.int64)
    ids = np.arange(len(windows), dtype=np.int64) + 100
    t = np.array(times, np.int64)
    got = iv.window_ids(lo, hi, ids, t)
    for k, x in enumerate(times):
        # the latest window starting at or before x, if x is inside it
        starts = [(a, i) for i, (a, _) in enumerate(windows) if a <= x]
        want = -1
        if starts:
            a, i = max(starts)
            if x <= hi[i]:
                want = 100 + i
        assert got[k] == want
