"""Property tests: per-stream facts (busy time, roles, corrupt overlaps, gap split) vs
brute-force and per-nanosecond-grid oracles on small integer timelines."""

from __future__ import annotations

import grid
import numpy as np
from hypothesis import given, settings, strategies as st

from parastream.timeline.model import (COMM_LANE, KIND_COMM, KIND_COMPUTE, KIND_MEMCPY,
                                       KIND_MEMSET, TimelineBuilder)
from parastream.timeline.streams import corrupt_overlap_count, stream_stats

G = 200
STEP = 5  # 5 ns lattice: ties, touching and zero-length ops are common
SETTINGS = settings(max_examples=150, deadline=None)
N_STREAMS = 8
KINDS = [KIND_COMPUTE, KIND_MEMCPY, KIND_MEMSET, KIND_COMM]

lat = st.integers(0, G // STEP)
# one op: (stream index, a, b, kind, launch); a/b are lattice points, launch -1 = unknown
op_ = st.tuples(st.integers(0, N_STREAMS - 1), lat, lat, st.sampled_from(KINDS),
                st.integers(-1, G // STEP))
ops_ = st.lists(op_, max_size=16)
# for the gap split: ops laid out per stream one after another, with gaps (or overlaps)
# between them, on few streams so that gaps and waits meet often:
# (stream, gap before the op, duration, kind, launch lead before its start; -1 unknown)
seq_op_ = st.tuples(st.integers(0, 2), st.integers(-2, 5), st.integers(0, 5),
                    st.sampled_from(KINDS), st.integers(-1, 6))
waits_ = st.lists(st.tuples(st.integers(0, 2), lat, lat), max_size=6)


def seq_ops(raw):
    cursor = [0, 0, 0]
    out = []
    for si, gap, dur, kind, lead in raw:
        s = max(0, cursor[si] + STEP * gap)
        e = s + STEP * dur
        if e > G:
            continue
        cursor[si] = max(cursor[si], e)
        out.append((f"s{si}", s, e, kind, -1 if lead < 0 else max(0, s - STEP * lead)))
    return out


def label(i: int, hccl: bool) -> str:
    return COMM_LANE if hccl and i == N_STREAMS - 1 else f"s{i}"


def norm_ops(raw, hccl=False):
    """Raw draws -> [(label, start, end, kind, launch)] in ns."""
    out = []
    for si, a, b, kind, la in raw:
        out.append((label(si, hccl), STEP * min(a, b), STEP * max(a, b), kind,
                    -1 if la < 0 else STEP * la))
    return out


def norm_waits(raw, hccl=False):
    return [(label(si, hccl), STEP * min(a, b), STEP * max(a, b)) for si, a, b in raw]


def build(ops, waits=(), with_launch=False):
    b = TimelineBuilder("prop", "test")
    for i, (lab, s, e, kind, _) in enumerate(ops):
        b.add_op(lab, f"op{i}", s, e, kind=kind, block_dim=i % 5 - 1)
    for lab, s, e in waits:
        b.add_wait(lab, s, e)
    tl = b.build()
    if with_launch:
        # names are unique ("op<i>"), so they map each sorted row back to its input op
        tl.launch_ns = np.array([ops[int(tl.names[c][2:])][4] for c in tl.name], np.int64)
    return tl


def grid_of(ivs) -> np.ndarray:
    return grid.grid_of(ivs, G)


def corrupt_bf(pairs) -> int:
    """Ops (in (start, end) order) of positive length that start before some earlier op
    has ended: plain O(n^2)."""
    srt = sorted(pairs)
    n = 0
    for i, (s, e) in enumerate(srt):
        if e > s and any(srt[j][1] > s for j in range(i)):
            n += 1
    return n


def by_stream(ops):
    d: dict[str, list] = {}
    for op in ops:
        d.setdefault(op[0], []).append(op)
    return d


# ------------------------------------------------------------------ busy, span, counts
@SETTINGS
@given(ops_, st.booleans())
def test_stream_stats_busy_span_and_corrupt(raw, hccl):
    ops = norm_ops(raw, hccl)
    tl = build(ops)
    stats = stream_stats(tl)
    per = by_stream(ops)
    assert sorted(x.id for x in stats) == sorted(per)
    for x in stats:
        mine = per[x.id]
        assert tl.streams[x.code] == x.id
        assert x.ops == len(mine)
        g = grid_of([(s, e) for _, s, e, _, _ in mine])
        assert x.busy_ns == int(g.sum())
        assert ([int(v) for v in x.busy[0]], [int(v) for v in x.busy[1]]) == grid.runs(g)
        assert x.first_ns == min(s for _, s, _, _, _ in mine)
        assert x.last_ns == max(e for _, _, e, _, _ in mine)
        assert x.max_block_dim == max(i % 5 - 1 for i, op in enumerate(ops) if op[0] == x.id)
        want_corrupt = 0 if x.id == COMM_LANE else corrupt_bf([(s, e) for _, s, e, _, _ in mine])
        assert x.corrupt_overlaps == want_corrupt


def test_stream_stats_empty():
    assert stream_stats(TimelineBuilder("e", "test").build()) == []
    # a stream that only waits has no ops and no stats
    b = TimelineBuilder("w", "test")
    b.add_op("a", "x", 0, 10)
    b.add_wait("b", 0, 5)
    stats = stream_stats(b.build())
    assert [(x.id, x.role) for x in stats] == [("a", "main")]


@SETTINGS
@given(st.lists(st.tuples(lat, lat), max_size=14))
def test_corrupt_overlap_count_matches_pairwise(raw):
    pairs = sorted((STEP * min(a, b), STEP * max(a, b)) for a, b in raw)
    s = np.array([p[0] for p in pairs], np.int64)
    e = np.array([p[1] for p in pairs], np.int64)
    assert corrupt_overlap_count(s, e) == corrupt_bf(pairs)


def test_corrupt_overlap_examples():
    def c(pairs):
        s = np.array([p[0] for p in pairs], np.int64)
        e = np.array([p[1] for p in pairs], np.int64)
        return corrupt_overlap_count(s, e)

    assert c([]) == 0 and c([(0, 10)]) == 0
    assert c([(0, 10), (10, 20)]) == 0          # touching is fine
    assert c([(0, 10), (5, 5)]) == 0            # zero-length op inside: not counted
    assert c([(0, 10), (5, 8)]) == 1
    assert c([(0, 10), (0, 10)]) == 1           # identical ops: the second is corrupt
    assert c([(0, 100), (10, 20), (30, 40)]) == 2  # both nested ops (running max of ends)


# ------------------------------------------------------------------ roles
def expected_comm(lab, mine) -> bool:
    return lab == COMM_LANE or 2 * sum(1 for op in mine if op[3] == KIND_COMM) >= len(mine)


@SETTINGS
@given(ops_, st.booleans(), st.one_of(st.none(), st.integers(0, N_STREAMS)))
def test_roles(raw, hccl, main_pick):
    ops = norm_ops(raw, hccl)
    tl = build(ops)
    per = by_stream(ops)
    # main override: an existing label, or one that names no stream with ops
    main = None if main_pick is None else (label(main_pick, hccl) if main_pick < N_STREAMS
                                           else "nope")
    stats = stream_stats(tl, main)
    mains = [x for x in stats if x.role == "main"]
    for x in stats:
        if x.role != "main":
            assert x.role == ("comm" if expected_comm(x.id, per[x.id]) else "side"), x.id
    if not stats:
        assert not mains
        return
    if main is not None:
        if main in per:
            assert [x.id for x in mains] == [main]
        else:
            assert mains == []
        return
    assert len(mains) == 1
    chosen = mains[0]
    compute = [x for x in stats if not expected_comm(x.id, per[x.id])]
    if compute:
        assert not expected_comm(chosen.id, per[chosen.id])
        assert (chosen.busy_ns, chosen.ops) == max((x.busy_ns, x.ops) for x in compute)
    else:  # only communication streams: the busiest one
        assert chosen.busy_ns == max(x.busy_ns for x in stats)


def test_roles_examples():
    b = TimelineBuilder("r", "test")
    b.add_op("big_comm", "ar", 0, 100, kind=KIND_COMM)
    b.add_op("big_comm", "x", 0, 10)                  # 1 of 2 ops is comm: still comm
    b.add_op(COMM_LANE, "hccl", 0, 5, kind=KIND_COMPUTE)  # the lane is comm whatever its kinds
    b.add_op("side", "s", 0, 20)
    b.add_op("main", "m", 0, 30)
    tl = b.build()
    roles = {x.id: x.role for x in stream_stats(tl)}
    assert roles == {"big_comm": "comm", COMM_LANE: "comm", "side": "side", "main": "main"}
    roles = {x.id: x.role for x in stream_stats(tl, "side")}
    assert roles == {"big_comm": "comm", COMM_LANE: "comm", "side": "main", "main": "side"}


# ------------------------------------------------------------------ gap split
def gap_oracle(mine, waits, with_launch):
    """(gap_count, gap_wait, gap_host, gap_idle, gap_total) on a per-ns grid."""
    first = min(s for _, s, _, _, _ in mine)
    last = max(e for _, _, e, _, _ in mine)
    span = np.zeros(G, bool)
    span[first:last] = True
    gap = span & ~grid_of([(s, e) for _, s, e, _, _ in mine])
    wait = grid_of([(s, e) for _, s, e in waits])
    host = np.zeros(G, bool)
    if with_launch:
        # the op that ends a gap: the first op in (start, end, input) order starting at or
        # after the gap's end; the gap is host-bound until that op was launched
        order = sorted(range(len(mine)), key=lambda i: (mine[i][1], mine[i][2], i))
        for g0, g1 in zip(*grid.runs(gap)):
            nxt = next(mine[i] for i in order if mine[i][1] >= g1)
            la = nxt[4]
            if la >= 0:
                host[g0:min(max(la, g0), g1)] = True
    host &= gap & ~wait
    gw = gap & wait
    idle = gap & ~wait & ~host
    return len(grid.runs(gap)[0]), int(gw.sum()), int(host.sum()), int(idle.sum()), int(gap.sum())


@SETTINGS
@given(st.lists(seq_op_, max_size=14), waits_, st.booleans())
def test_gap_split_matches_grid(raw, raw_waits, with_launch):
    ops = seq_ops(raw)
    waits = norm_waits(raw_waits)
    tl = build(ops, waits, with_launch)
    per = by_stream(ops)
    for x in stream_stats(tl):
        mine = per[x.id]
        count, gw, gh, gi, total = gap_oracle(mine, [w for w in waits if w[0] == x.id],
                                              with_launch)
        if x.first_ns < x.last_ns:  # first == last: see test_no_gap_in_a_single_instant
            assert x.gap_count == count
        assert x.gap_wait_ns == gw
        assert x.gap_host_ns == gh
        assert x.gap_idle_ns == gi
        assert x.gap_idle_ns >= 0
        assert x.gap_idle_ns + x.gap_wait_ns + x.gap_host_ns == total
        assert total == (x.last_ns - x.first_ns) - x.busy_ns


def test_gap_split_example():
    b = TimelineBuilder("g", "test")
    b.add_op("a", "o0", 0, 10)
    b.add_op("a", "o1", 50, 60)
    b.add_op("a", "o2", 100, 110)
    b.add_wait("a", 20, 30)     # inside the first gap
    b.add_wait("a", 55, 70)     # half over an op: only the gap part counts
    b.add_wait("b", 10, 50)     # another stream's wait does not count
    tl = b.build()
    (a,) = [x for x in stream_stats(tl) if x.id == "a"]
    assert (a.gap_count, a.gap_wait_ns, a.gap_host_ns, a.gap_idle_ns) == (2, 20, 0, 60)
    # o1 launched at 45 (gap [10, 50): 35 ns before launch, 10 of them a wait),
    # o2 launched early (not host-bound)
    tl.launch_ns = np.array([0, 45, 0], np.int64)
    (a,) = [x for x in stream_stats(tl) if x.id == "a"]
    assert (a.gap_wait_ns, a.gap_host_ns, a.gap_idle_ns) == (20, 25, 35)


def test_no_gap_in_a_single_instant():
    b = TimelineBuilder("z", "test")
    b.add_op("a", "tiny", 7, 7)
    (a,) = stream_stats(b.build())
    assert a.gap_idle_ns + a.gap_wait_ns + a.gap_host_ns == 0
    assert a.gap_count == 0
