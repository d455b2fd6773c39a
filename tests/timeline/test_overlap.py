"""Property tests: overlap_pct and verdicts, dominator search, side windows and the
busy-time overlap of parallel points, against brute force and a per-ns grid."""

from __future__ import annotations

import grid
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from parastream.timeline.model import TimelineBuilder
from parastream.timeline.overlap import (DOMINATOR_MIN_SHARE, FALSE_AT, TRUE_AT,
                                         find_dominators, overlap_pct, parallel_points,
                                         verdict, windows_of)

G = 600  # main ops of the parallel-point test reach 600 ns
STEP = 5
SETTINGS = settings(max_examples=150, deadline=None)
lat = st.integers(0, 200 // STEP)


def grid_of(ivs) -> np.ndarray:
    return grid.grid_of(ivs, G)


def disjoint(raw, origin=0):
    """(gap, dur) lattice draws -> sorted, pairwise non-overlapping [start, end] (touching
    and zero-length allowed)."""
    out, t = [], origin
    for gap, dur in raw:
        s = t + STEP * gap
        t = s + STEP * dur
        out.append((s, t))
    return out


# ------------------------------------------------------------------ overlap_pct, verdict
def test_verdict_thresholds():
    assert (TRUE_AT, FALSE_AT) == (0.5, 0.05)
    assert verdict(0.5) == "true"
    assert verdict(0.05) == "false"
    assert verdict(np.nextafter(0.5, 0.0)) == "partial"
    assert verdict(np.nextafter(0.05, 1.0)) == "partial"
    assert verdict(0.0) == "false" and verdict(1.0) == "true" and verdict(0.2) == "partial"


def test_overlap_pct_exact_thresholds():
    # 5 ns of a 10 ns side window: exactly 0.5 -> true
    assert overlap_pct((0, 10), (5, 20)) == (5, 0.5)
    assert verdict(overlap_pct((0, 10), (5, 20))[1]) == "true"
    # 5 ns of a 100 ns side window: exactly 0.05 -> false
    assert overlap_pct((0, 100), (95, 300)) == (5, 0.05)
    assert verdict(overlap_pct((0, 100), (95, 300))[1]) == "false"
    # 6 ns: partial
    assert verdict(overlap_pct((0, 100), (94, 300))[1]) == "partial"
    # zero-length windows have no overlap_pct
    assert overlap_pct((5, 5), (0, 10)) == (0, 0.0)
    assert overlap_pct((0, 10), (3, 3)) == (0, 0.0)


@SETTINGS
@given(lat, lat, lat, lat)
def test_overlap_pct_matches_grid(a, b, c, d):
    side = (STEP * min(a, b), STEP * max(a, b))
    main = (STEP * min(c, d), STEP * max(c, d))
    ov = int((grid_of([side]) & grid_of([main])).sum())
    denom = min(side[1] - side[0], main[1] - main[0])
    got_ov, got_pct = overlap_pct(side, main)
    assert got_ov == ov
    assert got_pct == (ov / denom if denom > 0 else 0.0)
    assert 0.0 <= got_pct <= 1.0


def _point_tl(side, main):
    b = TimelineBuilder("p", "test")
    b.add_op("main", "dom", *main)
    b.add_op("side", "s", *side)
    tl = b.build()
    return tl, tl.streams.index("main"), tl.streams.index("side")


@pytest.mark.parametrize("side,main,want", [
    ((0, 10), (5, 20), "true"),         # exactly 0.5
    ((0, 100), (95, 300), "false"),     # exactly 0.05
    ((0, 100), (94, 300), "partial"),
])
def test_parallel_point_verdict_at_thresholds(side, main, want):
    tl, m, s = _point_tl(side, main)
    (p,) = parallel_points(tl, m, [s])
    assert p.verdict == want
    assert (p.side_lo, p.side_hi) == side
    assert p.overlap_pct == overlap_pct(side, main)[1]


# ------------------------------------------------------------------ dominators
def dom_oracle(cands, lo, hi) -> set[int]:
    """Indices that satisfy find_dominators' documented rule, by brute force (-1: none).

    Overlapping candidates: the most overlap, ties to the earlier. Otherwise the first
    candidate after the window at least DOMINATOR_MIN_SHARE of it long, else the last such
    one before it, else the adjacent candidate of any size (the next one first); each only
    within dominator_horizon of the window.
    """
    if not cands:
        return {-1}

    def ov(j):
        s, e = cands[j]
        return min(e, hi) - max(s, lo)

    # a candidate overlaps the window when their interiors meet (a zero-length candidate
    # strictly inside the window, or a window point strictly inside a candidate, counts)
    over = [j for j, (s, e) in enumerate(cands) if s < hi and e > lo]
    if over:
        best = max(ov(j) for j in over)
        return {min(j for j in over if ov(j) == best)}
    horizon = max(2 * (hi - lo), 20_000)
    need = (hi - lo) * DOMINATOR_MIN_SHARE
    after = [j for j, (s, e) in enumerate(cands) if s >= hi]
    before = [j for j, (s, e) in enumerate(cands) if s < hi]
    assert all(cands[j][1] <= lo for j in before)

    def near(j):
        s, e = cands[j]
        return (s - hi if s >= hi else lo - e) <= horizon

    big_after = [j for j in after if cands[j][1] - cands[j][0] >= need]
    if big_after and near(big_after[0]):
        return {big_after[0]}
    big_before = [j for j in before if cands[j][1] - cands[j][0] >= need]
    if big_before and near(big_before[-1]):
        return {big_before[-1]}
    if after and near(after[0]):
        return {after[0]}
    if before and near(before[-1]):
        return {before[-1]}
    return {-1}


DSTEP = 2_000  # a coarser lattice so that the 20 us / 2x-window horizon matters
dom_lat = st.integers(0, 40)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 8)), max_size=20),
       st.lists(st.tuples(dom_lat, dom_lat), min_size=1, max_size=8))
def test_find_dominators_matches_brute_force(raw, raw_windows):
    cands, t = [], 0
    for gap, dur in raw:  # sorted, non-overlapping; touching and zero-length allowed
        s = t + DSTEP * gap
        t = s + DSTEP * dur
        cands.append((s, t))
    cs = np.array([c[0] for c in cands], np.int64)
    ce = np.array([c[1] for c in cands], np.int64)
    wins = [(DSTEP * min(a, b), DSTEP * max(a, b)) for a, b in raw_windows]
    lo = np.array([w[0] for w in wins], np.int64)
    hi = np.array([w[1] for w in wins], np.int64)
    got = find_dominators(cs, ce, lo, hi)
    assert got.shape == lo.shape
    for k, (l, h) in enumerate(wins):
        assert int(got[k]) in dom_oracle(cands, l, h), (k, (l, h), int(got[k]))


def test_find_dominators_examples():
    def dom(cs, ce, lo, hi):
        return int(find_dominators(np.array(cs, np.int64), np.array(ce, np.int64),
                                   np.array([lo]), np.array([hi]))[0])

    cs, ce = [0, 100, 200], [10, 180, 205]
    assert dom(cs, ce, 5, 150) == 1      # most overlap
    assert dom(cs, ce, 170, 203) == 1    # 10 ns of #1 beats 3 ns of #2
    assert dom(cs, ce, 20, 40) == 1      # first big-enough op after the window, not #0
    assert dom(cs, ce, 210, 260) == 1    # nothing after: last big-enough op before
    assert dom(cs, ce, 210, 400) == 2    # nothing big enough: the adjacent op
    assert dom([0, 20], [10, 30], 5, 25) == 0   # equal overlap: the earlier
    # horizon: max(2 x window, 20 us)
    assert dom([0, 100_000], [50_000, 150_000], 60_000, 65_000) == 0
    assert dom([0, 100_000], [50_000, 150_000], 75_000, 76_000) == -1
    assert dom([], [], 0, 5) == -1


# ------------------------------------------------------------------ windows
def windows_oracle(blocks_s, blocks_e, gap_ns):
    lo, hi, first = [], [], []
    for i, (s, e) in enumerate(zip(blocks_s, blocks_e)):
        if i == 0 or s - blocks_e[i - 1] > gap_ns:
            lo.append(s)
            hi.append(e)
            first.append(i)
        else:
            hi[-1] = e
    return lo, hi, first


@SETTINGS
@given(st.lists(st.tuples(lat, lat), max_size=12), st.integers(0, 40))
def test_windows_of_splits_exactly_at_gaps(raw, gap_ns):
    g = grid_of([(STEP * min(a, b), STEP * max(a, b)) for a, b in raw])
    bs, be = grid.runs(g)
    busy = (np.array(bs, np.int64), np.array(be, np.int64))
    lo, hi, first = windows_of(busy, gap_ns)
    assert (lo.tolist(), hi.tolist(), first.tolist()) == windows_oracle(bs, be, gap_ns)
    # every idle stretch inside a window is <= gap_ns, every one between windows is > gap_ns
    for k in range(len(lo)):
        inner = ~g[lo[k]:hi[k]]
        if inner.any():
            assert max(e - s for s, e in zip(*grid.runs(inner))) <= gap_ns
        if k:
            assert lo[k] - hi[k - 1] > gap_ns


def test_windows_of_boundary():
    busy = (np.array([0, 20, 41]), np.array([10, 30, 50]))
    # gaps are 10 and 11 ns
    assert [x.tolist() for x in windows_of(busy, 10)] == [[0, 41], [30, 50], [0, 2]]
    assert [x.tolist() for x in windows_of(busy, 11)] == [[0], [50], [0]]
    assert [x.tolist() for x in windows_of(busy, 9)] == [[0, 20, 41], [10, 30, 50], [0, 1, 2]]
    empty = windows_of((np.zeros(0, np.int64), np.zeros(0, np.int64)), 5)
    assert all(x.size == 0 for x in empty)


# ------------------------------------------------------------------ parallel points
side_op_ = st.tuples(st.integers(0, 2), lat, lat)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 6)), min_size=1, max_size=12),
       st.lists(side_op_, min_size=1, max_size=12), st.integers(0, 40))
def test_parallel_points_busy_overlap_matches_grid(raw_main, raw_side, gap_ns):
    main_ops = disjoint(raw_main)
    side_ops = [(f"side{k}", STEP * min(a, b), STEP * max(a, b)) for k, a, b in raw_side]
    b = TimelineBuilder("pp", "test")
    for i, (s, e) in enumerate(main_ops):
        b.add_op("main", f"m{i}", s, e)
    for i, (lab, s, e) in enumerate(side_ops):
        b.add_op(lab, f"s{i}", s, e)
    tl = b.build()
    m = tl.streams.index("main")
    side_codes = [c for c in range(len(tl.streams)) if c != m]
    points = parallel_points(tl, m, side_codes, window_gap_ns=gap_ns)

    mg = grid_of(main_ops)
    main_idx = tl.stream_ops(m)
    cands = [(int(tl.start_ns[i]), int(tl.end_ns[i])) for i in main_idx]
    for c in side_codes:
        lab = tl.streams[c]
        sg = grid_of([(s, e) for l, s, e in side_ops if l == lab])
        mine = [p for p in points if p.side_stream == lab]
        if not sg.any():
            # only zero-length ops: see test_zero_length_side_ops_have_no_busy_time
            continue
        bs, be = grid.runs(sg)
        lo, hi, _ = windows_oracle(bs, be, gap_ns)
        assert [(p.side_lo, p.side_hi) for p in mine] == list(zip(lo, hi))
        for p in mine:
            busy = int(sg[p.side_lo:p.side_hi].sum())
            hidden = int((sg & mg)[p.side_lo:p.side_hi].sum())
            assert p.side_busy_ns == busy
            assert p.side_hidden_ns == hidden
            # busy-time overlap |U_main ∩ U_side| / |U_side| over the window
            assert 0 <= p.side_hidden_ns <= p.side_busy_ns
            # the dominator and its overlap_pct
            want = {None if j < 0 else int(main_idx[j])
                    for j in dom_oracle(cands, p.side_lo, p.side_hi)}
            assert p.dom in want
            if p.dom is None:
                ov, pct = 0, 0.0
            else:
                ov, pct = overlap_pct((p.side_lo, p.side_hi),
                                      (int(tl.start_ns[p.dom]), int(tl.end_ns[p.dom])))
            assert (p.overlap_ns, p.overlap_pct) == (ov, pct)
            assert p.verdict == verdict(pct, hidden / busy if busy else 0.0)
            # the envelope alone never makes a point (partly) parallel
            if p.verdict in ("true", "partial"):
                assert hidden > 0 and hidden / busy > 0.05
        assert sum(p.side_busy_ns for p in mine) == int(sg.sum())


def test_zero_length_side_ops_have_no_busy_time():
    b = TimelineBuilder("z", "test")
    b.add_op("main", "mm", 0, 100)
    b.add_op("side", "z1", 10, 10)
    b.add_op("side", "z2", 60, 60)
    tl = b.build()
    (p,) = parallel_points(tl, tl.streams.index("main"), [tl.streams.index("side")])
    assert p.side_busy_ns == 0
    assert p.side_hidden_ns == 0


def test_domain_example_false_point_and_barrier():
    """The worked example (examples/make_seed_example.py): side window [1615.25, 1634.75]
    us, dominator in_proj_qkv [1638.00, 1660.75] us, overlap 0 -> false; barrier =
    Cast+Swish."""
    b = TimelineBuilder("d", "test")
    b.add_op("main", "prev", 1_600_000, 1_610_000)
    b.add_op("side", "side_pre", 1_615_250, 1_634_750)
    b.add_op("main", "Cast", 1_635_000, 1_636_000)
    b.add_op("main", "Swish", 1_636_000, 1_637_500)
    b.add_op("main", "in_proj_qkv", 1_638_000, 1_660_750)
    tl = b.build()
    (p,) = parallel_points(tl, tl.streams.index("main"), [tl.streams.index("side")])
    assert (p.side_lo, p.side_hi) == (1_615_250, 1_634_750)
    assert tl.op_name(p.dom) == "in_proj_qkv"
    assert (p.overlap_ns, p.overlap_pct, p.verdict) == (0, 0.0, "false")
    assert [tl.op_name(i) for i in p.barrier] == ["Cast", "Swish"]


# ------------------------------------------------------------------ capture-level busy overlap
@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 3), lat, lat), min_size=1, max_size=14))
def test_analyze_busy_overlap_parallelism_and_concurrency_match_grid(raw):
    from parastream.timeline.analyze import Options, analyze_capture

    ops = [(f"s{k}", STEP * min(a, b), STEP * max(a, b)) for k, a, b in raw]
    bld = TimelineBuilder("cap", "test")
    for i, (lab, s, e) in enumerate(ops):
        bld.add_op(lab, f"o{i}", s, e)
    r = analyze_capture(bld.build(), Options(cold=0))
    grids = {}
    for lab, s, e in ops:
        grids.setdefault(lab, np.zeros(G, bool))[s:e] = True
    (main,) = [x["id"] for x in r["streams"] if x["role"] == "main"]
    # busy-time overlap |U_main ∩ U_side| / |U_side| per side stream
    assert sorted(o["side"] for o in r["overlaps"]) == sorted(set(grids) - {main})
    for o in r["overlaps"]:
        inter = int((grids[main] & grids[o["side"]]).sum())
        busy = int(grids[o["side"]].sum())
        assert o["intersection_us"] == round(inter / 1000, 3)
        assert o["hidden_frac"] == (round(inter / busy, 6) if busy else 0.0)
    # parallelism: sum of per-stream busy time / busy time of the union
    union = np.zeros(G, bool)
    level = np.zeros(G, np.int64)
    for g in grids.values():
        union |= g
        level += g
    total = sum(int(g.sum()) for g in grids.values())
    assert r["parallelism"] == (round(total / int(union.sum()), 6) if union.any() else 1.0)
    assert any("zero duration" in w for w in r["warnings"]) == (not union.any())
    # concurrency over [first start, last end]: time with exactly k streams busy
    first, last = min(s for _, s, _ in ops), max(e for _, _, e in ops)
    want = {str(k): round(int((level[first:last] == k).sum()) / 1000, 3)
            for k in range(len(grids) + 1)}
    assert r["concurrency_us"] == want
    assert r["wall_us"] == round((last - first) / 1000, 3)


def test_find_dominators_big_enough_rule_for_every_window():
    n = 2500
    base = np.arange(n, dtype=np.int64) * 1000
    # per window [5, 65): a 2 ns op right after it, then a 60 ns op 135 ns after it
    cs = np.stack([base + 70, base + 200]).T.ravel()
    ce = np.stack([base + 72, base + 260]).T.ravel()
    got = find_dominators(cs, ce, base + 5, base + 65)
    assert got.tolist() == (2 * np.arange(n) + 1).tolist()


def test_envelope_spanning_the_dominator_is_not_true():
    """The users' case: a long side window whose ops ran only while main was idle (before
    and after a 20 us kernel) "contains" the kernel: overlap_pct 1.0, yet nothing ran side by
    side. The envelope's overlap_pct stays; the verdict says envelope-only (counted as false)."""
    b = TimelineBuilder("env", "test")
    b.add_op("side", "hcom_a", 0, 100_000)
    b.add_op("main", "k", 100_000, 120_000)
    b.add_op("side", "hcom_b", 120_000, 320_000)
    tl = b.build()
    (p,) = parallel_points(tl, tl.streams.index("main"), [tl.streams.index("side")],
                           window_gap_ns=50_000)
    assert (p.overlap_pct, p.side_hidden_ns) == (1.0, 0)
    assert p.verdict == "envelope-only"
    from parastream.timeline.overlap import point_table

    t = point_table(tl, tl.streams.index("main"), [tl.streams.index("side")],
                    window_gap_ns=50_000)
    assert t.counts() == {"true": 0, "partial": 0, "false": 1, "envelope_only": 1}


def test_verdict_envelope_only_thresholds():
    assert verdict(1.0, 0.0) == "envelope-only"
    assert verdict(0.3, 0.05) == "envelope-only"
    assert verdict(0.3, 0.0501) == "partial"
    assert verdict(0.6, 0.2) == "true"
    assert verdict(0.04, 0.0) == "false"
    assert verdict(1.0) == "true"  # busy overlap not given: the envelope's verdict


def _test_traces() -> list[str]:
    """Every trace and profiler folder under tests/data (real and generated)."""
    import glob
    import os

    root = os.path.join(os.path.dirname(__file__), "..", "data")
    out = sorted(glob.glob(os.path.join(root, "kineto", "*.json*")))
    for p in sorted(glob.glob(os.path.join(root, "ascend", "*"))):
        out.append(p)
    return out


@pytest.mark.parametrize("path", _test_traces(), ids=lambda p: p.split("data/")[-1])
def test_no_true_verdict_without_concurrent_busy_time_on_every_test_trace(path):
    """On every trace in the tests: a (partly) parallel point has side busy time that main
    work covered, above the false threshold."""
    from parastream.errors import InputError
    from parastream.timeline.analyze import Options, analyze
    from parastream.timeline.readers import read_path

    try:
        timelines = read_path(path)
    except InputError as exc:  # bad-input samples live there too
        pytest.skip(f"not a readable capture: {exc}")
    doc = analyze(timelines, Options(max_points=0, cold=0))
    for p in (p for c in doc["captures"] for p in c["parallel_points"]):
        if p["verdict"] in ("true", "partial"):
            assert p["busy_overlap_pct"] > FALSE_AT
