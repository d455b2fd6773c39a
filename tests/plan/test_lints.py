"""Lints on small hand-built graphs shaped like the seed's cases."""

from __future__ import annotations

from parastream.graph.ir import Edge, Graph, Op, Tensor
from parastream.plan import assign, check
from parastream.plan.estimate import estimate
from parastream.plan.lints import lint


def prolog(silu_on_main: bool = True) -> tuple[Graph, dict[str, float]]:
    """Attention prolog: x -> (q_a -> q_b) on main; x -> kv_a -> z on the side;
    silu(z) = Swish(Cast(z)) is consumed by the merge; q_b is the dominator."""
    ops = [
        Op(name="x", type="rms_norm", resource="vector", outputs=[Tensor(shape=[8, 4096], bytes=65536)]),
        Op(name="q_a", type="mm", resource="cube"),
        Op(name="q_b", type="mm", resource="cube"),
        Op(name="kv_a", type="mm", resource="cube", outputs=[Tensor(shape=[8, 512], bytes=8192)]),
        Op(name="z_cast", type="cast", resource="vector"),
        Op(name="z_silu", type="silu", resource="vector"),
        Op(name="merge", type="add", resource="vector"),
    ]
    edges = [Edge(src="x", dst="q_a"), Edge(src="q_a", dst="q_b"), Edge(src="x", dst="kv_a"),
             Edge(src="kv_a", dst="z_cast"), Edge(src="z_cast", dst="z_silu"),
             Edge(src="q_b", dst="merge"), Edge(src="z_silu", dst="merge")]
    dur = {"x": 5, "q_a": 40, "q_b": 60, "kv_a": 30, "z_cast": 1, "z_silu": 1.5, "merge": 2}
    return Graph(name="prolog", ops=ops, edges=edges), {k: float(v) for k, v in dur.items()}


def test_ge_reorder_lint_names_the_precompute_and_the_dominator():
    g, dur = prolog()
    p = assign(g, "manual", mapping={"kv_a": 1})
    check(g, p)
    ge = [x for x in lint(g, p, dur) if x.rule == "ge-reorder"]
    assert ge and ge[0].ops == ["kv_a", "z_cast", "q_b"]
    # the pinned variant (precompute on the side stream) has no such lint
    pinned = assign(g, "manual", mapping={"kv_a": 1, "z_": 1})
    check(g, pinned)
    assert not [x for x in lint(g, pinned, dur) if x.rule == "ge-reorder"]


def test_streams_over_queues_and_limit():
    g, dur = prolog()
    p = assign(g, "matching")
    rules = {x.rule: x.severity for x in lint(g, p, dur, hw_queues=1, max_streams=1)}
    assert rules["streams-exceed-queues"] == "warning"
    assert rules["streams-exceed-limit"] == "error"


def test_big_cross_stream_tensor_and_lifetime():
    g, dur = prolog()
    p = assign(g, "manual", mapping={"kv_a": 1})
    found = lint(g, p, dur, big_tensor_bytes=10_000)
    big = [x for x in found if x.rule == "big-cross-stream-tensor"]
    assert big and big[0].ops == ["x", "kv_a"]
    assert any(x.rule == "cross-stream-lifetime" for x in found)


def test_too_small_recommends_single_stream():
    g, _ = prolog()
    tiny = {n.name: 0.5 for n in g.ops}
    p = assign(g, "manual", mapping={"kv_a": 1})
    est = estimate(g, p, tiny, launch_us=5.0)
    assert est.speedup < 1.05
    found = lint(g, p, tiny, launch_us=5.0, speedup=est.speedup)
    assert any(x.rule == "too-small" and x.severity == "warning" for x in found)


def test_estimate_shows_gain_for_a_real_branch():
    g, dur = prolog()
    p = assign(g, "manual", mapping={"kv_a": 1, "z_": 1})
    est = estimate(g, p, dur)
    assert est.single_stream_wall_us == sum(dur.values())
    assert est.speedup > 1.2
    # folding both streams onto one hardware queue removes the gain
    assert estimate(g, p, dur, hw_queues=1).speedup == 1.0
