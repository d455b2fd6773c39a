"""Candidates per parallel point on hand-built shapes of the seed's cases."""

from __future__ import annotations

from parastream.graph.ir import Edge, Graph, Op
from parastream.plan import check
from parastream.plan.candidates import DeviceFacts, Point, candidates

try:
    from .test_lints import prolog
except ImportError:
    from test_lints import prolog


def moe() -> tuple[Graph, dict[str, float], Point]:
    """x -> gate -> topk -> experts -> combine ; x -> shared_up -> shared_act -> shared_down ;
    combine + shared_down -> merge (DeepSeek-style routed + shared experts)."""
    names = ["x", "gate", "topk", "experts", "combine", "shared_up", "shared_act", "shared_down",
             "merge", "out_norm"]
    types = ["rms_norm", "mm", "topk", "grouped_mm", "index_add", "mm", "silu", "mm", "add", "rms_norm"]
    res = ["vector", "cube", "vector", "cube", "vector", "cube", "vector", "cube", "vector", "vector"]
    ops = [Op(name=n, type=t, resource=r) for n, t, r in zip(names, types, res)]
    e = [("x", "gate"), ("gate", "topk"), ("topk", "experts"), ("x", "experts"), ("experts", "combine"),
         ("x", "shared_up"), ("shared_up", "shared_act"), ("shared_act", "shared_down"),
         ("combine", "merge"), ("shared_down", "merge"), ("merge", "out_norm")]
    dur = dict(zip(names, [4.0, 6.0, 3.0, 120.0, 8.0, 20.0, 2.0, 20.0, 2.0, 4.0]))
    g = Graph(name="moe", ops=ops, edges=[Edge(src=a, dst=b) for a, b in e])
    point = Point(name="moe.shared||routed", fork="x", join="merge",
                  branches=[["gate", "topk", "experts", "combine"],
                            ["shared_up", "shared_act", "shared_down"]], dominant=0)
    return g, dur, point


def test_moe_best_candidate_puts_the_shared_expert_on_a_side_stream():
    g, dur, point = moe()
    plans = candidates(g, [point], dur, device=DeviceFacts(name="test", hw_queues=4))
    assert len([p for p in plans if p.parallel_point == point.name]) >= 2
    for p in plans:
        check(g, p)
        assert p.description and p.mermaid.startswith("flowchart LR")
        assert p.switch
    best = plans[0]
    assert {n for n, s in best.assignment.items() if s != 0} == {"shared_up", "shared_act", "shared_down"}
    assert any(e.wait_before == "merge" for e in best.events)
    assert best.estimate.speedup > 1.1
    assert "-.->" in best.mermaid


def test_prolog_gets_a_pinned_variant_and_the_reorder_lint():
    g, dur = prolog()
    point = Point(name="prolog.q||kv", fork="x", join="merge",
                  branches=[["q_a", "q_b"], ["kv_a"]], dominant=0)
    plans = candidates(g, [point], dur)
    names = {p.name.split("/")[1]: p for p in plans}
    assert "pinned" in names and "side-serial" in names
    assert any(l.rule == "ge-reorder" for l in names["side-serial"].lints)
    assert not any(l.rule == "ge-reorder" for l in names["pinned"].lints)
    assert names["pinned"].assignment["z_cast"] == 1 and names["pinned"].assignment["z_silu"] == 1


#: a device whose documentation lists limit_core_num (the Atlas A2 facts)
LIMITS = {"torchair": True, "npugraph_ex": True, "min_torch_npu": "26.0.0", "source": "test"}


def test_core_limits_make_it_c2_when_block_dims_exceed_the_cores():
    g, dur, point = moe()
    bd = {n: 24 for n in dur}
    plans = candidates(g, [point], dur, block_dims=bd,
                       device=DeviceFacts(cores=32, hw_queues=4, kind="npu", core_limit=LIMITS))
    best = plans[0]
    assert best.core_limits["1"]["aicore_num"] == 8
    # the shared expert starts after x while main has been handed the routed experts: its
    # start needs an event placed right after x, so the candidate climbs on to C3
    assert best.strength == "C3" and "core limits" in best.meta["ladder"]["C2"]


def test_three_branches_side_each_uses_three_streams_within_the_cap():
    ops = [Op(name=n, type="conv", resource="cube") for n in ["in", "b1", "b2", "b3", "b4", "cat"]]
    edges = [Edge(src="in", dst=b) for b in ("b1", "b2", "b3", "b4")] + \
        [Edge(src=b, dst="cat") for b in ("b1", "b2", "b3", "b4")]
    g = Graph(name="inception", ops=ops, edges=edges)
    dur = {"in": 1.0, "b1": 30.0, "b2": 20.0, "b3": 25.0, "b4": 10.0, "cat": 1.0}
    point = Point(name="inception", fork="in", join="cat", branches=[["b1"], ["b2"], ["b3"], ["b4"]])
    plans = candidates(g, [point], dur, device=DeviceFacts(hw_queues=3))
    each = next(p for p in plans if p.name.endswith("side-each"))
    assert each.streams == 3
    for p in plans:
        check(g, p)


def test_c2_limits_main_too_when_it_would_take_every_core():
    # main's ops want all 32 cores: the side's 8 only fit if main is held to 24 (it was
    # left unlimited, 32 + 8 > 32, and the simulator then rejected every C2 proposal)
    g, dur, point = moe()
    bd = {n: 32 for n in dur}
    plans = candidates(g, [point], dur, block_dims=bd,
                       device=DeviceFacts(cores=32, hw_queues=4, core_limit=LIMITS))
    assert any(p.core_limits for p in plans)
    for p in plans:
        if p.core_limits:
            sides = sum(v["aicore_num"] for k, v in p.core_limits.items() if k != "0")
            assert p.core_limits["0"]["aicore_num"] + sides <= 32


from hypothesis import given, settings, strategies as st  # noqa: E402

from parastream.plan.candidates import core_limits  # noqa: E402
from parastream.plan.model import Plan  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(cores=st.integers(2, 64), dims=st.lists(st.integers(0, 80), min_size=2, max_size=6))
def test_c2_limits_keep_main_plus_sides_within_the_cores(cores, dims):
    assignment = {f"op{i}": i for i in range(len(dims))}  # one op per stream, 0 is main
    plan = Plan(name="p", algorithm="test", assignment=assignment)
    limits, strength = core_limits(plan, {f"op{i}": d for i, d in enumerate(dims)}, cores)
    sides = len(dims) - 1
    if strength == "C1":
        assert sum(dims) <= cores
        return
    if sides >= cores:  # more side streams than cores: one core each is all there is
        return
    main = limits["0"]["aicore_num"] if "0" in limits else min(dims[0], cores)
    assert all(v["aicore_num"] >= 1 for v in limits.values())
    assert main + sum(v["aicore_num"] for k, v in limits.items() if k != "0") <= cores
