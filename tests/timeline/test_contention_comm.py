"""Property tests: core contention per stream pair and the HTA-style comm/comp overlap,
against per-nanosecond grid oracles on small integer timelines."""

from __future__ import annotations

from itertools import combinations

import numpy as np
from hypothesis import given, settings, strategies as st

from parastream.timeline.comm import comm_comp_overlap_pct
from parastream.timeline.contention import core_contention
from parastream.timeline.model import (CORES, KIND_COMM, KIND_COMPUTE, KIND_MEMCPY,
                                       KIND_MEMSET, TimelineBuilder)

G = 200
STEP = 5
SETTINGS = settings(max_examples=150, deadline=None)
N_STREAMS = 8
lat = st.integers(0, G // STEP)


def grid_of(ivs) -> np.ndarray:
    g = np.zeros(G, bool)
    for s, e in ivs:
        g[s:e] = True
    return g


# ------------------------------------------------------------------ core contention
CUBE = {"AI_CORE", "MIX_AIC", ""}  # CUDA kernels: the "sm" pool (occupancy), below
VECTOR = {"AI_VECTOR_CORE", "MIX_AIV"}


def op_demand(core: str, bd: int, mix: int, pool: str, cores: int) -> int:
    """Cores an op asks of a pool: its block dim on its own pool, the mix block dim of a
    mixed op on the other one, capped at the pool size; unknown (-1) is 0."""
    if pool == "cube":
        d = mix if core == "MIX_AIV" else (bd if core in CUBE else -1)
    else:
        d = mix if core == "MIX_AIC" else (bd if core in VECTOR else -1)
    return min(max(d, 0), cores)


# (stream, a, b, core name, block dim, mix block dim)
cop_ = st.tuples(st.integers(0, N_STREAMS - 1), lat, lat, st.sampled_from(CORES),
                 st.integers(-1, 10), st.integers(-1, 10))


def contention_oracle(ops, labels, pool, cores):
    level = np.zeros(G, np.int64)
    active = {lab: np.zeros(G, bool) for lab in labels}
    for lab, s, e, core, bd, mix in ops:
        d = op_demand(core, bd, mix, pool, cores)
        if d > 0:
            level[s:e] += d
            active[lab][s:e] = True
    over = level > cores
    want = {}
    for a, b in combinations(labels, 2):
        hit = over & active[a] & active[b]
        if hit.any():
            want[(a, b)] = (int(hit.sum()), int(level[hit].max()), int(np.flatnonzero(hit)[0]))
    return want


@SETTINGS
@given(st.lists(cop_, max_size=14), st.sampled_from(["cube", "vector"]), st.integers(1, 8))
def test_core_contention_matches_grid(raw, pool, cores):
    ops = [(f"s{k}", STEP * min(a, b), STEP * max(a, b), core, bd, mix)
           for k, a, b, core, bd, mix in raw]
    bld = TimelineBuilder("c", "test")
    for i, (lab, s, e, core, bd, mix) in enumerate(ops):
        bld.add_op(lab, f"op{i}", s, e, core=CORES.index(core), block_dim=bd, mix_block_dim=mix)
    tl = bld.build()
    codes = list(range(len(tl.streams)))
    got = core_contention(tl, codes, pool, cores)
    want = contention_oracle(ops, tl.streams, pool, cores)
    assert {c.streams: (c.oversubscribed_ns, c.max_demand, c.first_ns) for c in got} == want
    assert len(got) == len(want)
    assert all(c.pool == pool and c.cores == cores for c in got)
    ns = [c.oversubscribed_ns for c in got]
    assert ns == sorted(ns, reverse=True)


def test_cuda_grid_blocks_are_not_sms():
    """The users' case: two 64-block x 128-thread kernels on an A100 (108 SMs) were "128
    of 108 cores". Their occupancy (4 warps per block, 64 blocks over 108 SMs: about 3.7% of
    the warp slots) leaves the SMs nearly free; two full-occupancy kernels do contend."""
    cuda = CORES.index("CUDA")
    b = TimelineBuilder("a100", "test")
    b.add_op("7", "k1", 0, 100, core=cuda, block_dim=64, sm_share=0.037)
    b.add_op("8", "k2", 0, 100, core=cuda, block_dim=64, sm_share=0.037)
    b.add_op("7", "gemm", 200, 300, core=cuda, block_dim=864, sm_share=0.63)
    b.add_op("8", "gemm2", 250, 350, core=cuda, block_dim=864, sm_share=0.63)
    tl = b.build()
    assert core_contention(tl, [0, 1], "cube", 108) == []  # block dims are not the evidence
    (c,) = core_contention(tl, [0, 1], "sm", 108)
    # ceil(0.63 x 108) = 69 SMs' worth each, 138 > 108 while both run (250..300)
    assert (c.pool, c.oversubscribed_ns, c.max_demand, c.cores) == ("sm", 50, 138, 108)


def test_cuda_without_occupancy_is_not_checked():
    from parastream.timeline.analyze import analyze_capture

    cuda = CORES.index("CUDA")
    b = TimelineBuilder("t", "test")
    b.add_op("7", "k1", 0, 100, core=cuda, block_dim=4096)
    b.add_op("8", "k2", 0, 100, core=cuda, block_dim=4096)
    tl = b.build()
    tl.device.sm_count = 108
    cap = analyze_capture(tl)
    assert cap["contention"] == []
    assert any("SM contention not checked" in w for w in cap["warnings"])


def test_core_contention_examples():
    ai, aiv, mix_aic = CORES.index("AI_CORE"), CORES.index("AI_VECTOR_CORE"), CORES.index("MIX_AIC")
    b = TimelineBuilder("c", "test")
    b.add_op("main", "mm", 0, 100, core=ai, block_dim=20)
    b.add_op("side", "cast", 50, 150, core=ai, block_dim=8)    # 28 > 24 on [50, 100)
    b.add_op("side", "vec", 0, 200, core=aiv, block_dim=48)    # vector pool only (capped)
    b.add_op("other", "mix", 90, 95, core=mix_aic, block_dim=-1, mix_block_dim=40)  # no cube demand
    tl = b.build()
    codes = list(range(len(tl.streams)))
    (c,) = core_contention(tl, codes, "cube", 24)
    assert (c.streams, c.oversubscribed_ns, c.max_demand, c.first_ns) == (("main", "side"), 50, 28, 50)
    # touching ops are never concurrent
    b = TimelineBuilder("t", "test")
    b.add_op("a", "x", 0, 10, core=ai, block_dim=24)
    b.add_op("b", "y", 10, 20, core=ai, block_dim=24)
    assert core_contention(b.build(), [0, 1], "cube", 24) == []
    # vector pool: the MIX_AIC op's mix block dim counts, capped at the pool size
    (v,) = core_contention(tl, codes, "vector", 40)
    assert v.streams == ("side", "other") and v.oversubscribed_ns == 5 and v.max_demand == 80


# ------------------------------------------------------------------ comm / comp overlap
KINDS = [KIND_COMPUTE, KIND_MEMCPY, KIND_MEMSET, KIND_COMM]
kop_ = st.tuples(st.integers(0, N_STREAMS - 1), lat, lat, st.sampled_from(KINDS))


@SETTINGS
@given(st.lists(kop_, max_size=16))
def test_comm_comp_overlap_matches_grid(raw):
    ops = [(f"s{k}", STEP * min(a, b), STEP * max(a, b), kind) for k, a, b, kind in raw]
    bld = TimelineBuilder("m", "test")
    for i, (lab, s, e, kind) in enumerate(ops):
        bld.add_op(lab, f"op{i}", s, e, kind=kind)
    got = comm_comp_overlap_pct(bld.build())
    comm = grid_of([(s, e) for _, s, e, k in ops if k == KIND_COMM])
    comp = grid_of([(s, e) for _, s, e, k in ops if k == KIND_COMPUTE])
    if not comm.any():  # no comm op, or only zero-length ones
        assert got is None
    else:
        assert got == 100.0 * int((comm & comp).sum()) / int(comm.sum())
        assert 0.0 <= got <= 100.0


def test_comm_comp_overlap_examples():
    b = TimelineBuilder("e", "test")
    assert comm_comp_overlap_pct(b.build()) is None
    b.add_op("HCCL", "allreduce", 0, 100, kind=KIND_COMM)
    b.add_op("s1", "memcpy", 0, 100, kind=KIND_MEMCPY)       # memory ops are not computation
    b.add_op("s2", "memset", 0, 100, kind=KIND_MEMSET)
    assert comm_comp_overlap_pct(b.build()) == 0.0
    b.add_op("s0", "gemm", 25, 50)
    b.add_op("s3", "gemm2", 40, 60)                            # pooled over streams
    b.add_op("s0", "tail", 100, 120)                           # touching: no overlap
    assert comm_comp_overlap_pct(b.build()) == 35.0
    z = TimelineBuilder("z", "test")
    z.add_op("HCCL", "barrier", 10, 10, kind=KIND_COMM)       # zero-length comm only
    z.add_op("s0", "gemm", 0, 20)
    assert comm_comp_overlap_pct(z.build()) is None


def test_real_a100_trace_contention_by_occupancy():
    """HTA's AlexNet trace (A100, 108 SMs): twice, an fft2d_r2c kernel of 512 blocks on
    stream 20 overlaps one of 768 blocks on stream 7 (62 us in all). By grid blocks that
    read "216 of 108 cores"; their recorded occupancy is 50% each, so together they fill
    the SMs' warp slots exactly and nothing is oversubscribed."""
    from pathlib import Path

    from parastream.timeline.analyze import analyze_capture
    from parastream.timeline.readers import read_path

    (tl,) = read_path(str(Path(__file__).parent.parent / "data" / "kineto" / "alexnet.json.gz"))
    fft = [i for i in range(len(tl)) if tl.op_name(i).startswith("void fft2d_r2c_32x32")]
    assert sorted(int(tl.block_dim[i]) for i in fft) == [512, 512, 768, 768]
    assert [float(tl.sm_share[i]) for i in fft] == [0.5] * 4
    assert core_contention(tl, list(range(len(tl.streams))), "sm", 108) == []
    cap = analyze_capture(tl)
    assert cap["contention"] == []
    assert not any("contention" in w for w in cap["warnings"])
    # a little more occupancy and they would contend: the check is live on this trace
    tl.sm_share[fft] = 0.51
    (c,) = core_contention(tl, list(range(len(tl.streams))), "sm", 108)
    # ceil(0.51 x 108) = 56 SMs' worth each
    assert (c.streams, c.max_demand, c.oversubscribed_ns) == (("7", "20"), 112, 62_000)
