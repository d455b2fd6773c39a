"""The graph IR and its JSON format: round trips and the errors users see."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shapes
from parastream.graph.ir import SCHEMA, Edge, Graph, GraphError, Op, Tensor, dumps, loads, validate


@pytest.mark.parametrize("build", [shapes.moe_layer, shapes.decoder_layer,
                                   shapes.inception_block, shapes.attention_prolog])
def test_round_trip(build):
    g = build()
    data = dumps(g)
    assert json.loads(data)["schema"] == SCHEMA
    assert next(iter(json.loads(data))) == "schema"
    assert loads(data) == g
    assert dumps(loads(data)) == data


def test_edge_keys_are_from_and_to():
    g = Graph(ops=[Op("a", "Add"), Op("b", "Add")], edges=[Edge("a", "b", "state", "kv")])
    e = json.loads(dumps(g))["edges"][0]
    assert (e["from"], e["to"], e["type"]) == ("a", "b", "state")


def _doc(ops, edges) -> str:
    return json.dumps({"schema": SCHEMA, "ops": [{"name": n, "type": "Add"} for n in ops],
                       "edges": [{"from": a, "to": b, "type": t} for a, b, t in edges]})


@pytest.mark.parametrize("ops, edges, words", [
    (["a", "b", "c"], [("a", "b", "data"), ("b", "c", "data"), ("c", "a", "data")], "cycle"),
    (["a"], [("a", "ghost", "data")], "dangling, no op named 'ghost'"),
    (["a", "b"], [("a", "b", "control")], "unknown dependency type 'control'"),
    (["a", "a"], [], "duplicate op name 'a'"),
    (["a"], [("a", "a", "data")], "cannot depend on itself"),
])
def test_bad_graphs_are_rejected(ops, edges, words):
    with pytest.raises(GraphError, match=words):
        loads(_doc(ops, edges))


@pytest.mark.parametrize("meta, words", [
    ({"dur_us": "x"}, "meta.dur_us must be a number"),
    ({"dur_us": True}, "meta.dur_us must be a number"),
    ({"block_dim": "x"}, "meta.block_dim must be a whole number"),
    ({"block_dim": 2.5}, "meta.block_dim must be a whole number"),
    ({"block_dim": -4}, "meta.block_dim must be a whole number"),
    ({"views": -1}, "meta.views must be a count"),
    ({"dtype": 3}, "meta.dtype must be a text"),
    ({"memory_format": ["channels_last"]}, "meta.memory_format must be a text"),
])
def test_op_meta_the_cost_model_reads_is_type_checked(meta, words):
    # a hand-edited graph with "dur_us": "x" got a ValueError from inside the cost model
    doc = json.loads(_doc(["a", "b"], [("a", "b", "data")]))
    doc["ops"][1]["meta"] = meta
    with pytest.raises(GraphError, match=f"op 'b': {words}"):
        loads(json.dumps(doc))


def test_op_meta_of_the_right_types_loads():
    doc = json.loads(_doc(["a"], []))
    doc["ops"][0]["meta"] = {"dur_us": 14.2, "block_dim": 24, "views": 2, "dtype": "fp16",
                             "note": {"free": "form"}}
    assert loads(json.dumps(doc)).ops[0].meta["block_dim"] == 24


def test_wrong_schema_and_junk():
    with pytest.raises(GraphError, match="unsupported schema"):
        loads(json.dumps({"schema": "parastream.graph/2", "ops": []}))
    with pytest.raises(GraphError, match="invalid JSON"):
        loads("{nope")
    with pytest.raises(GraphError, match="not a parastream graph"):
        loads(json.dumps({"schema": SCHEMA, "ops": [{"name": 3}]}))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30))))
def test_random_dags_round_trip_in_topological_order(case):
    n, pairs = case
    ops = [Op(f"op{i}", "MatMul", resource="cube", flops=float(i),
              outputs=[Tensor([i, 2], "float16", 4 * i, f"t{i}")]) for i in range(n)]
    edges = [Edge(f"op{a}", f"op{b}") for a, b in {(min(a, b), max(a, b)) for a, b in pairs}
             if a != b]
    g = Graph(name="rand", ops=ops, edges=edges)
    order = validate(g)
    pos = {o: i for i, o in enumerate(order)}
    assert all(pos[e.src] < pos[e.dst] for e in edges)
    assert loads(dumps(g)) == g


def test_costs_that_would_overflow_the_sums_are_refused():
    # three ops of 1e308 us: finite each, inf summed (walls of inf, speedups of nan)
    ops = [Op(name=n, type="mm", resource="cube", meta={"dur_us": 1e308}) for n in "abc"]
    g = Graph(name="g", ops=ops, edges=[Edge(src="a", dst="c"), Edge(src="b", dst="c")])
    with pytest.raises(GraphError, match="meta.dur_us at most 1e\\+12 us"):
        validate(g)
    g.ops = [Op(name="a", type="mm", resource="cube", flops=float("inf"))]
    g.edges = []
    with pytest.raises(GraphError, match="flops and bytes must be at most"):
        validate(g)
