"""Cross-rank answers (timeline.cluster): collectives matched across ranks, clocks aligned
by their ends, the rank that made the others wait found first, and the communication
matrix from each source; checked on hand-made tables with known answers and on clusters
generated with a planted straggler (benchmarks/gen_cluster.py), NCCL-style and HCCL-style.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from parastream.timeline.cluster import NO_STEP, RankSummary, cross_rank, rank_summary
from parastream.timeline.cluster_matrix import link_rows
from parastream.timeline.collectives import Collectives, make_collectives
from parastream.timeline.model import KIND_COMM, KIND_COMPUTE, make_timeline

ROOT = Path(__file__).resolve().parents[2]


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_cluster", ROOT / "benchmarks" / "gen_cluster.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_cluster"] = mod
    spec.loader.exec_module(mod)
    return mod


gc = _load_generator()


# ------------------------------------------------------------------------------ helpers
def timeline(ops: list[tuple[int, int, int, int]], coll: Collectives | None = None,
             meta: dict | None = None):
    """A timeline of (start, end, kind, step) ops on one stream per kind."""
    a = np.array(ops, np.int64).reshape(-1, 4)
    n = a.shape[0]
    cols = dict(stream=(a[:, 2] == KIND_COMM).astype(np.int32), name=np.zeros(n, np.int32),
                type=np.zeros(n, np.int32), start_ns=a[:, 0], end_ns=a[:, 1],
                kind=a[:, 2].astype(np.int8), core=np.zeros(n, np.int8),
                block_dim=np.full(n, -1), mix_block_dim=np.full(n, -1),
                step=a[:, 3].astype(np.int32))
    tl = make_timeline("test", "test", ["compute", "comm"], ["k"], ["t"], cols, meta=meta)
    tl.collectives = coll
    return tl


def summary(rank: int, coll: Collectives, meta: dict | None = None) -> RankSummary:
    """A rank whose only ops are its collective calls (and no steps)."""
    ops = [(int(s), int(e), KIND_COMM, -1) for s, e in zip(coll.start_ns, coll.end_ns)]
    return rank_summary(timeline(ops or [(0, 1, KIND_COMPUTE, -1)], coll, meta), rank)


def planned_timeline(p, rank: int, hccl: bool):
    """One generated rank as a reader should find it, without writing files: NCCL-style
    collectives (group "0", seq, peers) or HCCL-style (the op name as key, one batched
    send/receive per exchange)."""
    ro = gc.rank_ops(p, rank)
    off = int(p.offset_ns[rank])
    seg_c = np.searchsorted(p.ready[:, rank], ro.c_start, side="right") - 1
    if hccl:
        segs = np.arange(p.s.n_segments)
        start, end = p.arrival[:, rank], p.end[:, rank]
        coll = make_collectives([p.op[j] for j in segs], ["500"] * len(segs), start + off,
                                end + off, key=[gc.hccl_name(p, j) for j in segs])
    else:
        segs, start, end = ro.seg, ro.start, ro.end
        coll = make_collectives(**gc.collectives_args(p, rank))
    ops = [(int(s) + off, int(e) + off, KIND_COMPUTE, int(k) // p.s.per_step)
           for s, e, k in zip(ro.c_start, ro.c_end, seg_c)]
    ops += [(int(s) + off, int(e) + off, KIND_COMM, int(j) // p.s.per_step)
            for s, e, j in zip(start, end, segs)]
    return timeline(ops, coll)


def analyse_plan(p, hccl: bool = False) -> dict:
    return cross_rank([rank_summary(planned_timeline(p, r, hccl), r) for r in range(p.s.ranks)])


def offsets_error_ns(doc: dict, p) -> int:
    got = np.array([r["offset_ns"] for r in doc["ranks"]])
    return int(np.abs(got - p.offset_ns).max())


# ------------------------------------------------------------------- known small answers
def test_two_ranks_skew_wait_and_last_arrival():
    """Rank 1 arrives 100 ns after rank 0 at both calls; both end together: the skew is
    100, rank 0 waits 100 at each, and rank 1 is ranked first."""
    c0 = make_collectives(["allreduce", "allreduce"], ["g", "g"], [0, 1000], [300, 1300], seq=[0, 1])
    c1 = make_collectives(["allreduce", "allreduce"], ["g", "g"], [100, 1100], [300, 1300], seq=[0, 1])
    doc = cross_rank([summary(1, c1), summary(0, c0)])
    assert [c["skew_ns"] for c in doc["collectives"]] == [100, 100]
    assert [c["last_rank"] for c in doc["collectives"]] == [1, 1]
    assert [c["wait_ns"] for c in doc["collectives"]] == [100, 100]
    assert doc["ranking"][0]["rank"] == 1 and doc["ranking"][0]["caused_wait_ns"] == 200
    assert doc["ranking"][0]["reason"].startswith("arrived last at 100% of collectives")
    ranks = {r["rank"]: r for r in doc["ranks"]}
    assert ranks[0]["comm_wait_ns"] == 200 and ranks[1]["comm_wait_ns"] == 0
    assert ranks[0]["times_last"] == 0 and ranks[1]["times_last"] == 2
    assert doc["steps"][0]["step"] == NO_STEP and doc["steps"][0]["critical_rank"] == 1
    assert doc["steps"][0]["wait_ns_by_rank"] == [200, 0]


def test_clock_offset_from_the_ends():
    """Rank 1's clock runs 5 us ahead: its calls end 5 us later on its clock. The offset
    is found from the ends, and arrivals are compared after aligning."""
    c0 = make_collectives(["allreduce"] * 3, ["g"] * 3, [0, 1000, 2000], [500, 1500, 2500], seq=[0, 1, 2])
    c1 = make_collectives(["allreduce"] * 3, ["g"] * 3, [5100, 6050, 7000], [5500, 6500, 7500],
                          seq=[0, 1, 2])
    doc = cross_rank([summary(0, c0), summary(1, c1)])
    assert [r["offset_ns"] for r in doc["ranks"]] == [0, 5000]
    assert [c["skew_ns"] for c in doc["collectives"]] == [100, 50, 0]
    assert [c["last_rank"] for c in doc["collectives"]] == [1, 1, None]


def test_matching_by_seq_key_and_order():
    """(group, op, seq) where recorded, else the source's key, else the order within the
    group and op on each rank; calls of a rank outside a known group are dropped."""
    seq = [make_collectives(["allreduce", "allgather"], ["a", "a"], [0, 50], [10, 60], seq=[7, 8],
                            group_ranks={"a": (0, 1)}) for _ in range(3)]
    doc = cross_rank([summary(r, c) for r, c in enumerate(seq)])
    assert [c["members"] for c in doc["collectives"]] == [2, 2]
    assert {c["match"] for c in doc["collectives"]} == {"seq"}
    assert doc["summary"]["outside_group_calls"] == 2
    keyed = [make_collectives(["allreduce"] * 2, ["h"] * 2, [r, 100 + r], [50, 150],
                              key=["hcom_allReduce__1_1_1", "hcom_allReduce__1_0_1"][::1 - 2 * (r % 2)])
             for r in range(2)]
    doc = cross_rank([summary(r, c) for r, c in enumerate(keyed)])
    assert {c["match"] for c in doc["collectives"]} == {"key"}
    assert sorted(c["key"] for c in doc["collectives"]) == ["hcom_allReduce__1_0_1",
                                                          "hcom_allReduce__1_1_1"]
    sized = [make_collectives(["allreduce"], ["g"], [0], [9], seq=[0], nbytes=[n])
             for n in (64, 64, 128)]
    doc = cross_rank([summary(r, c) for r, c in enumerate(sized)])
    assert doc["summary"]["size_mismatched_collectives"] == 1
    assert any("different message sizes" in w for w in doc["warnings"])
    plain = [make_collectives(["broadcast", "allreduce", "broadcast"], ["", "", ""],
                              [0, 10, 20], [5, 15, 25]) for _ in range(2)]
    doc = cross_rank([summary(r, c) for r, c in enumerate(plain)])
    assert sorted((c["op"], c["match"], c["members"]) for c in doc["collectives"]) == [
        ("allreduce", "order", 2), ("broadcast", "order", 2), ("broadcast", "order", 2)]


def test_point_to_point_pairs_and_their_bandwidth():
    """A send from 0 to 1 meets the receive on 1 from 0; the matrix takes the pair's bytes
    over the time from the later arrival to the end."""
    send = make_collectives(["send"], ["0"], [0], [2_000], nbytes=[1_000_000], peer=[1])
    recv = make_collectives(["recv"], ["0"], [1_000], [2_000], nbytes=[1_000_000], peer=[0])
    doc = cross_rank([summary(0, send), summary(1, recv)])
    assert doc["collectives"][0]["match"] == "p2p" and doc["collectives"][0]["last_rank"] == 1
    assert doc["matrix"] == [{"src": 0, "dst": 1, "bytes": 1_000_000, "time_ns": 1_000,
                              "bandwidth_gbps": 1000.0, "source": "p2p", "transport": ""}]


def test_calls_matched_by_order_stay_within_their_step():
    """Rank 0 captured steps 1 and 2, rank 1 steps 2 and 3 (profilers started a step
    apart): each rank's first all-reduce (no sequence number) is not the same call. Only
    step 2's are paired: no clock offset of a whole step, rank 1 arrives 50 ns late."""
    def rank(steps: list[int], late: int):
        ops, start, end = [], [], []
        for k in steps:
            t = k * 1_000
            ops += [(t, t + 90, KIND_COMPUTE, k), (t + 100 + late, t + 500, KIND_COMM, k)]
            start.append(t + 100 + late)
            end.append(t + 500)
        coll = make_collectives(["allreduce"] * len(steps), ["g"] * len(steps), start, end)
        return timeline(ops, coll)

    doc = cross_rank([rank_summary(rank([1, 2], 0), 0), rank_summary(rank([2, 3], 50), 1)])
    assert [(c["step"], c["members"], c["skew_ns"], c["last_rank"]) for c in doc["collectives"]] \
        == [(2, 2, 50, 1)]
    assert [r["offset_ns"] for r in doc["ranks"]] == [0, 0]
    assert doc["summary"]["unmatched_calls"] == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=6),
       st.lists(st.integers(-5, 80), max_size=10))
def test_call_steps_is_the_latest_step_holding_the_start(spans, starts):
    """A call's step is the latest-starting step (the later one of equal starts) that
    starts at or before it, if the call starts before that step ends; else -1."""
    from parastream.timeline.cluster_match import call_steps

    ids = np.arange(10, 10 + len(spans), dtype=np.int64)
    lo = np.array([a for a, _ in spans], np.int64)
    hi = lo + np.array([d for _, d in spans], np.int64)
    got = call_steps(np.array(starts, np.int64), ids, lo, hi)
    for t, g in zip(starts, got.tolist()):
        before = [i for i in range(len(spans)) if lo[i] <= t]
        k = max(before, key=lambda i: (lo[i], i)) if before else None
        assert g == (int(ids[k]) if k is not None and t <= hi[k] else -1)


def test_point_to_point_calls_without_a_peer_are_not_matched():
    """A send, receive or SendRecv that names no peer pairs with one unknown rank: the
    n-th such call of each rank is not its other end, sequence number or not. With the
    source's key (an HCCL op name) it is matched by the key."""
    for op, seq in (("sendrecv", None), ("send", None), ("recv", [3, 4])):
        calls = [make_collectives([op] * 2, ["0"] * 2, [r, 100 + r], [50, 150], seq=seq)
                 for r in range(2)]
        doc = cross_rank([summary(r, c) for r, c in enumerate(calls)])
        assert doc["summary"]["n_matched"] == 0, op
        assert doc["summary"]["peerless_p2p_calls"] == 4
        assert doc["ranking"][0]["caused_wait_ns"] == 0
    keyed = [make_collectives(["sendrecv"], ["h"], [r], [50], key=["hcom_batchSendRecv__1_0_1"])
             for r in range(2)]
    doc = cross_rank([summary(r, c) for r, c in enumerate(keyed)])
    assert [c["match"] for c in doc["collectives"]] == ["key"]
    assert doc["summary"]["peerless_p2p_calls"] == 0


def test_ring_model_and_recorded_links_take_precedence():
    """Without records, an allreduce of B bytes on n ranks sends 2(n-1)/n x B to each
    ring successor; a rank's recorded link replaces the model for its pair."""
    n, nbytes = 4, 1_000_000
    tables = [make_collectives(["allreduce"], ["w"], [0], [1_000], seq=[0], nbytes=[nbytes],
                               group_ranks={"w": tuple(range(n))}) for _ in range(n)]
    doc = cross_rank([summary(r, c) for r, c in enumerate(tables)])
    assert [(m["src"], m["dst"], m["bytes"], m["source"]) for m in doc["matrix"]] == [
        (r, (r + 1) % n, 1_500_000, "ring") for r in range(n)]
    recorded = {"src_rank": [0], "dst_rank": [1], "nbytes": [3_000_000], "time_ns": [1_000_000],
                "transport": ["HCCS"]}
    sums = [summary(r, c, {"comm_matrix": recorded} if r == 0 else None) for r, c in enumerate(tables)]
    doc = cross_rank(sums)
    first = doc["matrix"][0]
    assert (first["source"], first["bytes"], first["bandwidth_gbps"], first["transport"]) == (
        "comm_matrix", 3_000_000, 3.0, "HCCS")
    assert doc["slowest_link"]["src"] == 0 and doc["slowest_link"]["dst"] == 1


def test_recorded_links_numbered_within_a_group_are_mapped_to_global_ranks():
    """Ascend numbers a link's ends within the op's group: with the group's ranks known
    (4, 5, 6, 7), its "0-1" link is the pair 4 -> 5."""
    tables = [make_collectives(["allreduce"], ["tp"], [0], [1_000], seq=[0],
                               group_ranks={"tp": (4, 5, 6, 7)}) for _ in range(4)]
    links = {"comm_matrix": [{"op": "allreduce-total", "src": 0, "dst": 1, "bytes": 2_000,
                              "time_ns": 1_000, "transport": "HCCS", "group": "tp"}]}
    doc = cross_rank([summary(4 + r, c, links if r == 0 else None) for r, c in enumerate(tables)])
    assert [(m["src"], m["dst"], m["source"]) for m in doc["matrix"]] == [(4, 5, "comm_matrix")]


def test_link_rows_sum_the_totals_not_the_samples():
    """communication_matrix.json repeats single ops as top1/middle/bottom samples beside
    the per-kind total: only the totals are summed."""
    p = gc.plan(gc.Settings(ranks=4, events=800, steps=2, collectives=3, fmt="ascend"))
    _, doc = gc.comm_documents(p, 1)
    rows = link_rows(doc)
    want = sum(gc._link(p, 1, j)[1] * 1e6 for j in range(p.s.n_segments))
    assert rows.nbytes.sum() == pytest.approx(want, rel=1e-6)
    assert set(rows.src.tolist()) == {1} and set(rows.dst.tolist()) == {2}
    as_dicts = link_rows([{"op": "allreduce-top1", "src_rank": 0, "dst_rank": 1, "bytes": 5},
                          {"op": "hcom_allReduce__1_0_1", "src_rank": 0, "dst_rank": 1, "bytes": 7}])
    assert as_dicts.nbytes.tolist() == [7.0]


def test_rank_summary_step_figures():
    """Per step: communication busy time, the part with no compute beside it, and the
    overlap; the whole rank's figures match timeline.comm's."""
    ops = [(0, 100, KIND_COMPUTE, 1), (50, 150, KIND_COMM, 1),      # step 1: 50 of 100 hidden
           (200, 260, KIND_COMM, 2), (300, 400, KIND_COMPUTE, 2)]   # step 2: nothing hidden
    s = rank_summary(timeline(ops, Collectives()), 3)
    assert s.step_id.tolist() == [1, 2]
    assert s.step_start_ns.tolist() == [0, 200] and s.step_end_ns.tolist() == [150, 400]
    assert s.step_comm_busy_ns.tolist() == [100, 60]
    assert s.step_comm_exposed_ns.tolist() == [50, 60]
    assert s.step_overlap_pct.tolist() == [50.0, 0.0]
    assert (s.comm_busy_ns, s.comm_exposed_ns, s.overlap_pct) == (160, 110, 100 * 50 / 160)
    assert (s.wall_start_ns, s.wall_end_ns) == (0, 400)
    assert s.warnings == ("rank 3: no collective calls recorded",)


# ---------------------------------------------------------------- generated clusters
def test_generated_nccl_cluster_straggler_offsets_and_slow_link():
    p = gc.plan(gc.Settings(ranks=8, events=6_000, steps=3, seed=4, slow_rank=5, slow_factor=1.5,
                            clock_skew_us=800, slow_link=(2, 3)))
    doc = analyse_plan(p)
    assert doc["ranking"][0]["rank"] == 5
    assert offsets_error_ns(doc, p) < 2_000
    assert [s["critical_rank"] for s in doc["steps"]] == [5, 5, 5]
    waits = {r["rank"]: r["comm_wait_ns"] for r in doc["ranks"]}
    assert min(waits, key=waits.get) == 5
    link = doc["slowest_link"]
    assert (link["src"], link["dst"], link["source"]) == (2, 3, "p2p")
    assert link["ratio_to_median"] == pytest.approx(1 / 4, rel=0.05)
    text = json.dumps(doc, allow_nan=False)
    assert json.dumps(analyse_plan(p), allow_nan=False) == text  # deterministic


@settings(max_examples=12)
@given(ranks=st.integers(3, 8), slow=st.integers(0, 7), factor=st.floats(1.5, 3.0),
       skew_us=st.floats(0, 3_000), seed=st.integers(0, 10_000), hccl=st.booleans())
def test_planted_straggler_is_ranked_first(ranks, slow, factor, skew_us, seed, hccl):
    """Whatever the size, offsets and seed: the planted rank is ranked first and every
    rank's clock offset is recovered within 2 us."""
    slow %= ranks
    p = gc.plan(gc.Settings(ranks=ranks, events=1_200, steps=2, collectives=4, seed=seed,
                            slow_rank=slow, slow_factor=factor, clock_skew_us=skew_us,
                            fmt="ascend" if hccl else "kineto"))
    doc = analyse_plan(p, hccl)
    assert doc["ranking"][0]["rank"] == slow
    assert offsets_error_ns(doc, p) < 2_000
    assert {c["match"] for c in doc["collectives"]} <= ({"key"} if hccl else {"seq", "p2p"})


def test_cross_rank_is_fast_enough_shape():
    """64 ranks of 1,000 collectives each are matched in one vectorised pass: every call
    is matched and each collective has all 64 members."""
    p = gc.plan(gc.Settings(ranks=64, events=10_000, steps=2, collectives=500, p2p=False,
                            fmt="ascend", seed=2, slow_rank=9, slow_factor=2.0))
    tables = [make_collectives(**gc.collectives_args(p, r)) for r in range(64)]
    doc = cross_rank([summary(r, c) for r, c in enumerate(tables)], max_collectives=10)
    assert doc["summary"]["n_matched"] == 1_000 and doc["summary"]["unmatched_calls"] == 0
    assert len(doc["collectives"]) == 10
    assert {c["members"] for c in doc["collectives"]} == {64}
    assert doc["ranking"][0]["rank"] == 9


def test_duplicate_rank_is_an_error():
    c = make_collectives(["allreduce"], ["g"], [0], [1])
    with pytest.raises(ValueError, match="rank 0"):
        cross_rank([summary(0, c), summary(0, c)])
