"""Module tables, verdicts and parallel points on graphs that mimic real structures: what
an engineer would draw by hand."""

from __future__ import annotations

import pytest

import shapes
from parastream.device import load_profile
from parastream.graph.decompose import CANDIDATE, PENDING, SERIAL, decompose, find_points
from parastream.graph.ir import Edge, Graph, Op, Tensor

A2 = load_profile("ascend910b")


def by_name(d):
    return {m.module_name: m for m in d.modules}


def module_points(d):
    return [p for p in d.parallel_points if p.level == "module"]


def test_moe_layer_shared_expert_parallel_to_routed_experts():
    d = decompose(shapes.moe_layer(), A2)
    mods = by_name(d)
    # the four experts share a scope but no edge: each is a module of its own
    experts = ["layers.0.mlp.experts"] + [f"layers.0.mlp.experts#{i}" for i in (2, 3, 4)]
    assert set(mods) == {"layers.0.post_attention_layernorm", "layers.0.mlp.gate",
                         "layers.0.mlp.dispatch", "layers.0.mlp.combine",
                         "layers.0.mlp.shared_expert", "layers.0.mlp.merge", *experts}
    assert {mods[e].module_type for e in experts} == {"moe.experts"}
    assert mods["layers.0.mlp.shared_expert"].module_type == "moe.shared_expert"
    p, inner = module_points(d)
    ids = {m.module_id: name for name, m in mods.items()}
    assert ids[p.fork] == "layers.0.post_attention_layernorm"
    assert ids[p.join] == "layers.0.mlp.merge"
    branches = [{ids[n] for n in b.nodes} for b in p.branches]
    assert branches == [{"layers.0.mlp.gate", "layers.0.mlp.dispatch", "layers.0.mlp.combine",
                         *experts}, {"layers.0.mlp.shared_expert"}]
    assert p.dominating_branch == 0 and p.branches[0].dominator.startswith("expert")
    # prefill: both branches fill the 24 cube cores
    assert p.verdict == PENDING and "resource conflict (both cube-bound, block dims 24+24 > 24" \
        in p.reason
    # inside the routed experts: the four experts fork at dispatch and meet at combine
    assert (ids[inner.fork], ids[inner.join]) == ("layers.0.mlp.dispatch", "layers.0.mlp.combine")
    assert sorted(ids[n] for b in inner.branches for n in b.nodes) == experts


def test_decoder_layer_is_several_modules_with_state_and_residuals():
    d = decompose(shapes.decoder_layer(), A2)
    mods = by_name(d)
    assert len(d.modules) >= 10  # never a whole layer as one module
    assert mods["layers.0.self_attn[state]"].module_type == "state"
    assert mods["layers.0.self_attn[state]"].side_effect == "writes:kv_cache"
    assert {"layers.0", "layers.0#2"} <= set(mods)  # two residual adds, two modules
    state = [e for e in d.module_edges if e.dependency_type == "state"]
    assert [(d.module(e.src).module_name, d.module(e.dst).module_name) for e in state] == \
        [("layers.0.self_attn[state]", "layers.0.self_attn.attn")]
    assert any(v.verdict == SERIAL and "shared writable state" in v.reason for v in d.verdicts)
    # the shared input feeds the norm and the residual: a common upstream node, no edge
    [shared] = d.shared_inputs
    assert shared.tensor == "hidden_states" and len(shared.consumers) == 2
    a, b = shared.consumers
    assert not any({e.src, e.dst} == {a, b} for e in d.module_edges)
    # q (+ its rope) || k (+ its rope) || v, meeting at the attention; and gate || up. The
    # rotary scope holds two unrelated pieces, Q's rope and K's: two modules
    names = [sorted(d.module(n).module_name.rsplit(".", 1)[-1] for b in p.branches
                    for n in b.nodes) for p in module_points(d)]
    assert names == [["k_proj", "q_proj", "rotary_emb", "rotary_emb#2", "v_proj"],
                     ["gate_proj", "up_proj"]]
    qkv = module_points(d)[0]
    assert d.module(qkv.join).module_name == "layers.0.self_attn.attn"


def test_decode_verdicts_say_memory_conflict():
    d = decompose(shapes.decoder_layer(), A2)
    assert all(p.verdict == PENDING and "memory-bound" in p.reason for p in module_points(d))


def test_inception_four_branches():
    d = decompose(shapes.inception_block(), A2)
    [p] = module_points(d)
    assert d.module(p.fork).module_name == "stem"
    assert d.module(p.join).module_name == "inception.concat"
    tops = sorted({d.module(n).module_name.split(".")[1] for b in p.branches for n in b.nodes})
    assert tops == ["branch1", "branch2", "branch3", "branch4"]
    assert len(p.branches) == 4
    assert len([v for v in d.verdicts if v.point == p.id]) == 6  # every pair of branches


def test_attention_prolog_q_path_parallel_to_kv_path():
    d = decompose(shapes.attention_prolog(), A2)
    p = module_points(d)[0]
    name = lambda n: d.module(n).module_name.rsplit(".", 1)[-1]  # noqa: E731
    assert name(p.fork) == "input_layernorm" and name(p.join) == "attn"
    q, kv = ({name(n) for n in b.nodes} for b in p.branches)
    assert q == {"q_a_proj", "q_a_layernorm", "q_b_proj", "q_rope"}
    assert kv == {"kv_a_proj_with_mqa", "kv_a_layernorm", "k_rope", "self_attn[state]"}
    assert p.verdict in (CANDIDATE, PENDING)


def _op(name, module, resource="vector", effects=(), n=1 << 20):
    return Op(name, "Op", module, outputs=[Tensor([n], "float16", 2 * n)], flops=50.0 * n,
              bytes_read=2 * n, bytes_written=2 * n, resource=resource,
              side_effects=list(effects))


def test_cuts_communication_sync_and_copies():
    ops = [_op("x", "blk"), _op("a", "blk"), _op("ar", "blk", "comm", ["collective:all_reduce"]),
           _op("b", "blk"), _op("rec", "blk"), _op("cp", "blk", "memory"), _op("c", "blk")]
    ops[4] = Op("rec", "event_record", "blk")
    edges = [Edge(a, b) for a, b in [("x", "a"), ("a", "ar"), ("ar", "b"), ("b", "rec"),
                                      ("rec", "cp"), ("cp", "c")]]
    d = decompose(Graph(ops=ops, edges=edges), A2)
    kinds = [m.module_type for m in d.modules]
    assert kinds.count("comm") == 1 and kinds.count("sync") == 1 and kinds.count("copy") == 1
    assert len(d.modules) == 6  # x+a | all_reduce | b | record | copy | c


def test_collectives_on_both_branches_are_serial_and_cube_vs_vector_is_candidate():
    ops = [_op("f", "f"), _op("a1", "a", "comm", ["collective:all_gather"]),
           _op("b1", "b", "comm", ["collective:reduce_scatter"]), _op("j", "j")]
    edges = [Edge("f", "a1"), Edge("f", "b1"), Edge("a1", "j"), Edge("b1", "j")]
    [p] = module_points(decompose(Graph(ops=ops, edges=edges), A2))
    assert p.verdict == SERIAL and "collective order" in p.reason

    big = 1 << 24
    ops = [_op("f", "f"), Op("mm", "MatMul", "a", outputs=[Tensor([4096, 4096], "float16")],
                               flops=2.0 * 4096 ** 3, bytes_read=big, resource="cube"),
           _op("v", "b", n=big), _op("j", "j")]
    edges = [Edge("f", "mm"), Edge("f", "v"), Edge("mm", "j"), Edge("v", "j")]
    [p] = module_points(decompose(Graph(ops=ops, edges=edges), A2))
    assert p.verdict == CANDIDATE, p.reason  # cube cores vs vector cores on A2


def test_shared_writable_state_is_serial():
    ops = [_op("f", "f"), _op("w1", "a", effects=["writes:kv_cache"]),
           _op("w2", "b", effects=["writes:kv_cache"]), _op("j", "j")]
    edges = [Edge("f", "w1"), Edge("f", "w2"), Edge("w1", "j"), Edge("w2", "j")]
    [p] = module_points(decompose(Graph(ops=ops, edges=edges), A2))
    assert p.verdict == SERIAL and "shared writable state kv_cache" in p.reason


def test_lone_reshape_is_folded():
    ops = [_op("a", "m1"), Op("r", "Reshape", "m2"), _op("b", "m3")]
    d = decompose(Graph(ops=ops, edges=[Edge("a", "r"), Edge("r", "b")]), A2)
    assert len(d.modules) == 2 and d.op_module["r"] == d.op_module["a"]


def test_a_chain_has_no_points():
    ops = [_op(f"o{i}", f"m{i}") for i in range(5)]
    d = decompose(Graph(ops=ops, edges=[Edge(f"o{i}", f"o{i + 1}") for i in range(4)]), A2)
    assert d.parallel_points == [] and all(v.verdict == SERIAL for v in d.verdicts)


def test_module_graph_is_acyclic_on_interleaved_paths():
    # same module path before and after another module: two modules, not one cycle
    ops = [_op("a", "attn"), _op("b", "attn.rope"), _op("c", "attn")]
    d = decompose(Graph(ops=ops, edges=[Edge("a", "b"), Edge("b", "c")]), A2)
    assert [m.module_name for m in d.modules] == ["attn", "attn.rope", "attn#2"]


def test_partial_joins():
    succ = {"f": ["q", "k", "v"], "q": ["rope"], "k": ["rope"], "rope": ["attn"],
            "v": ["attn"], "attn": []}
    nodes = ["f", "q", "k", "v", "rope", "attn"]
    # q and k meet at rope, v only at attn: the join is where all three meet
    [(fork, join, branches)] = [p for p in find_points(nodes, succ) if p[0] == "f"]
    assert join == "attn" and sorted(map(tuple, branches)) == [("k",), ("q",), ("v",)]
    # fork -> a -> b and fork -> b: b is after a, not a branch of its own
    succ = {"f": ["a", "b", "c"], "a": ["b"], "b": ["j"], "c": ["j"], "j": []}
    [(_, join, branches)] = list(find_points(["f", "a", "b", "c", "j"], succ))
    assert join == "j" and branches == [["a", "b"], ["c"]]


@pytest.mark.parametrize("layers", [3])
def test_stacked_layers_repeat_the_same_points(layers):
    d = decompose(shapes.stack(layers, "mixed"), A2)
    # decoder: qkv, gate/up; moe: shared || routed, and the experts between dispatch and
    # combine (each expert its own module)
    assert len(module_points(d)) == 2 * 2 + 2


def _reads(name, module, tensor):
    op = _op(name, module)
    op.inputs = [Tensor([1 << 20], "float16", 2 << 20, tensor)]
    return op


def test_branches_from_different_call_inputs_fork_at_the_call():
    """a(x) + b(y) + c(z): no tensor is shared, yet the three branches are independent; the
    call's start (``in:input``) forks them. A source that reads only weights does not."""
    ops = [_reads("a", "a", "x"), _reads("b", "b", "y"), _reads("c", "c", "z"),
           _reads("w", "consts", "table"), _op("s1", "sum"), _op("s2", "sum")]
    edges = [Edge("a", "s1"), Edge("b", "s1"), Edge("c", "s2"), Edge("s1", "s2"),
             Edge("w", "s2")]
    g = Graph(ops=ops, edges=edges, meta={"inputs": {"x": "input", "y": "input",
                                                     "z": "input", "table": "buffer"}})
    d = decompose(g, A2)
    [p] = module_points(d)
    names = {m.module_id: m.module_name for m in d.modules}
    assert p.fork == "in:input"
    assert sorted(names[n] for b in p.branches for n in b.nodes) == ["a", "b", "c"]
    # one call input read by one module, the rest weights: nothing to fork
    g.meta = {"inputs": {"x": "input"}}
    assert module_points(decompose(g, A2)) == []
