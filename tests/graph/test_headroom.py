"""Headroom: critical path against brute force, and the bounds a user reads first."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shapes
from parastream.device import load_profile
from parastream.graph.headroom import LITTLE, analyze_graph, critical_path

A2 = load_profile("ascend910b")


@st.composite
def dags(draw):
    n = draw(st.integers(1, 9))
    edges = {(a, b) for a, b in draw(st.lists(st.tuples(st.integers(0, n - 1),
                                                        st.integers(0, n - 1)), max_size=20))
             if a < b}
    dur = draw(st.lists(st.floats(0, 100, allow_nan=False), min_size=n, max_size=n))
    return n, sorted(edges), dur


def brute_force_longest(n, edges, dur):
    succ = {i: [b for a, b in edges if a == i] for i in range(n)}
    best = 0.0

    def walk(v, acc):
        nonlocal best
        acc += dur[v]
        best = max(best, acc)
        for w in succ[v]:
            walk(w, acc)

    for v in range(n):
        walk(v, 0.0)
    return best


@settings(max_examples=200, deadline=None)
@given(dags())
def test_critical_path_matches_brute_force(case):
    n, edges, dur = case
    order = [str(i) for i in range(n)]
    preds = {str(b): [] for b in range(n)}
    for a, b in edges:
        preds[str(b)].append(str(a))
    length, path = critical_path(order, preds, {str(i): dur[i] for i in range(n)})
    assert length == pytest.approx(brute_force_longest(n, edges, dur))
    assert sum(dur[int(v)] for v in path) == pytest.approx(length)
    for a, b in itertools.pairwise(path):
        assert a in preds[b]


def test_critical_path_keeps_zero_length_heads():
    # a(0) -> b(5): the planner's critical path starts at a, as it did before headroom's
    # critical_path was shared
    length, path = critical_path(["a", "b"], {"b": ["a"]}, {"a": 0.0, "b": 5.0})
    assert length == 5.0 and path == ["a", "b"]


def test_decode_layer_at_batch_1_has_little_headroom():
    a = analyze_graph(shapes.decoder_layer(batch=1, seq=1), A2)
    h = a.headroom
    assert h.bound_speedup < LITTLE and h.verdict == "little"
    assert h.logical_speedup > 1.3  # q||k||v, gate||up exist logically ...
    assert h.limited_by in ("memory bandwidth", "cube cores")  # ... but share the device
    for p in a.decomposition.parallel_points:
        assert a.point_headroom[p.id].bound_speedup < LITTLE


def test_point_headroom_is_sum_over_max():
    a = analyze_graph(shapes.moe_layer(), A2)
    p = next(q for q in a.decomposition.parallel_points if q.level == "module")
    h = a.point_headroom[p.id]
    assert h.work_us == pytest.approx(sum(b.dur_us for b in p.branches))
    assert h.critical_path_us == pytest.approx(max(b.dur_us for b in p.branches))
    assert h.logical_speedup == pytest.approx(h.work_us / h.critical_path_us)
    assert 1.0 <= h.bound_speedup <= h.logical_speedup
    assert h.limited_by == "cube cores"  # both branches want all 24 cube cores


def test_bound_never_exceeds_queues_or_logical():
    for build in (shapes.inception_block, shapes.attention_prolog, shapes.moe_layer):
        for dev in ("ascend910", "ascend910b", "h100", "cpu"):
            p = load_profile(dev)
            h = analyze_graph(build(), p).headroom
            assert 1.0 <= h.bound_speedup <= min(h.logical_speedup, p.hw_queues) + 1e-9
            assert h.work_us >= h.critical_path_us > 0


def test_headroom_counts_the_profiles_cold_costs():
    """A calibrated CPU profile's cold costs are part of the work the bound is taken over
    (the simulator charges them too), here the whole 50 us per op (cold_after_us 0)."""
    import msgspec

    from parastream.device.profile import OpRate
    from parastream.graph.ir import Edge, Graph, Op

    g = Graph(name="two", ops=[Op(name=n, type="linear", resource="cube", flops=1e7)
                               for n in "abc"],
              edges=[Edge(src="a", dst="c"), Edge(src="b", dst="c")])
    rate = OpRate("flops", 2.0, 10.0, 100.0, 300.0)
    warm = msgspec.structs.replace(load_profile("cpu"), op_rates={"linear": rate})
    cold = msgspec.structs.replace(warm, cold_after_us=0.0, op_rates={
        "linear": msgspec.structs.replace(rate, cold_all_us=50.0)})
    w, c = analyze_graph(g, warm).headroom, analyze_graph(g, cold).headroom
    assert c.work_us == pytest.approx(w.work_us + 3 * 50.0)
    assert c.critical_path_us == pytest.approx(w.critical_path_us + 2 * 50.0)
