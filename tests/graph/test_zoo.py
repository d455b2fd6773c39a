"""The built-in models: every model imports at every scale and phase, the graphs validate,
and each shows the structure it is there for (parallel branches, state, copies, comm)."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from parastream.graph.ir import validate  # noqa: E402
from parastream.graph.torch_import import import_module  # noqa: E402
from parastream.zoo import SCALES, ZOO  # noqa: E402

CASES = [(name, scale, phase) for name, m in ZOO.items() for scale in SCALES
         for phase in m.phases]


def _mark(name: str, scale: str):
    # the 32-layer 7B-like stack is the import benchmark: seconds, not a fraction of one
    return pytest.mark.slow if (name, scale) == ("llama_stack", "7b") else ()


_GRAPHS: dict = {}


def graph(name: str, scale: str = "tiny", phase: str | None = None):
    key = (name, scale, phase)
    if key not in _GRAPHS:
        module, inputs = ZOO[name].factory(scale, phase)
        _GRAPHS[key] = import_module(module, inputs, name=name)
    return _GRAPHS[key]


def reachable(g, src: str) -> set[str]:
    succ = g.successors()
    seen, stack = set(), [src]
    while stack:
        n = stack.pop()
        for e in succ.get(n, []):
            if e.dst not in seen:
                seen.add(e.dst)
                stack.append(e.dst)
    return seen


def independent(g, a: list[str], b: list[str]) -> bool:
    """No path from any op of ``a`` to any op of ``b`` or back."""
    ra = set().union(*(reachable(g, x) for x in a))
    rb = set().union(*(reachable(g, x) for x in b))
    return not (ra & set(b)) and not (rb & set(a))


def ops_under(g, prefix: str) -> list[str]:
    return [o.name for o in g.ops if o.module == prefix or o.module.startswith(prefix + ".")]


@pytest.mark.parametrize("name,scale,phase", [
    pytest.param(*c, marks=_mark(c[0], c[1])) for c in CASES])
def test_every_model_imports_at_every_scale(name, scale, phase):
    g = graph(name, scale, phase)
    order = validate(g)
    assert len(order) == len(g.ops) >= 10
    assert sum(o.flops for o in g.ops) > 0
    assert all(o.bytes_read >= 0 and o.bytes_written >= 0 for o in g.ops)
    assert any(o.resource == "cube" for o in g.ops)
    assert any(o.module for o in g.ops)


@pytest.mark.parametrize("name", list(ZOO))
def test_tiny_models_run_eagerly(name):
    # the zoo models are real modules: the tiny scale runs on the CPU in milliseconds
    module, inputs = ZOO[name].factory("tiny", None)
    with torch.no_grad():
        out = module(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    assert all(torch.isfinite(o.float()).all() for o in outs)


def test_7b_scale_allocates_nothing():
    for name, m in ZOO.items():
        if name == "llama_stack":
            continue
        module, inputs = m.factory("7b", None)
        assert all(p.is_meta for p in module.parameters()), name
        assert all(t.is_meta for t in inputs), name


def test_llama_layer_7b_prefill_flops():
    g = graph("llama_layer", "7b", "prefill")
    tokens, h, inter = 8 * 1024, 4096, 11008
    q = next(o for o in g.ops if o.module == "self_attn.q_proj")
    assert q.flops == 2 * tokens * h * h and q.outputs[0].dtype == "bfloat16"
    down = next(o for o in g.ops if o.module == "mlp.down_proj")
    assert down.flops == 2 * tokens * inter * h
    sdpa = next(o for o in g.ops if o.type == "scaled_dot_product_attention")
    assert sdpa.flops == 4 * 8 * 32 * 1024 * 1024 * 128 and sdpa.meta["causal"] is True


def test_llama_decode_writes_the_kv_cache():
    g = graph("llama_layer", "tiny", "decode")
    writes = [o for o in g.ops if o.type == "index_copy_"]
    assert {s for o in writes for s in o.side_effects} == {
        "writes:self_attn.k_cache", "writes:self_attn.v_cache"}
    sdpa = next(o for o in g.ops if o.type == "scaled_dot_product_attention")
    preds = {e.src for e in g.predecessors()[sdpa.name]}
    assert {o.name for o in writes} <= preds
    assert sdpa.inputs[1].shape[2] == 32           # attends over the whole cache


@pytest.mark.parametrize("scale", ["tiny", "7b"])
def test_moe_shared_and_routed_meet_only_at_the_merge(scale):
    g = graph("moe_layer", scale, "prefill")
    shared = ops_under(g, "mlp.shared_experts")
    routed = ops_under(g, "mlp.routed")
    assert len(shared) == 5 and len(routed) >= 10
    assert independent(g, shared, routed)
    merge = next(o for o in g.ops if o.module == "mlp" and o.type == "add")
    assert all(merge.name in reachable(g, x) for x in shared + routed)
    assert {e.src for e in g.predecessors()[merge.name]} == {shared[-1], routed[-1]}
    if scale == "7b":  # 64 experts, top-6: the grouped GEMMs do tokens*6 rows of work
        bmm = [o for o in g.ops if o.type == "bmm"]
        assert sum(o.flops for o in bmm) == 2 * 8192 * 6 * 2048 * 1408 * 3


def test_attention_prolog_q_and_kv_paths_are_independent():
    g = graph("attention_prolog", "small", "prefill")
    q, kv = ops_under(g, "q_path"), ops_under(g, "kv_path")
    assert len(q) >= 4 and len(kv) >= 6
    assert independent(g, q, kv)
    attn = next(o for o in g.ops if o.type == "scaled_dot_product_attention")
    assert all(attn.name in reachable(g, x) for x in (q[-1], kv[-1]))
    caches = {s for o in g.ops for s in o.side_effects}
    assert caches == {"writes:kv_path.latent_cache", "writes:kv_path.index_k_cache"}


def test_inception_branches_are_independent():
    g = graph("inception_block", "small")
    branches = [ops_under(g, f"branch{i}") for i in range(1, 5)]
    assert [len(b) for b in branches] == [2, 4, 4, 3]
    for a, b in itertools.combinations(branches, 2):
        assert independent(g, a, b)
    cat = next(o for o in g.ops if o.type == "cat")
    assert {e.src for e in g.predecessors()[cat.name]} == {b[-1] for b in branches}


def test_kv_offload_has_state_edge_and_memory_copy():
    g = graph("kv_offload", "small", "decode")
    copies = [o for o in g.ops if o.module == "offload"]
    assert [o.type for o in copies] == ["copy_", "copy_"]
    assert all(o.resource == "memory" and o.meta["copy"] == "d2h" for o in copies)
    assert {s for o in copies for s in o.side_effects} == {"writes:offload.host_k",
                                                           "writes:offload.host_v"}
    state = [e for e in g.edges if e.type == "state"]
    assert state and all(e.src in {c.name for c in copies} for e in state)
    assert all("write-after-read" in e.reason for e in state)
    # the copy is independent of the projections: it can overlap them
    proj = [o.name for o in g.ops if o.module in ("attn.q_proj", "attn.k_proj", "attn.v_proj")]
    assert independent(g, [c.name for c in copies], proj)


def test_two_microbatch_prefill_has_ordered_collectives():
    g = graph("two_microbatch_prefill", "small")
    comm = [o for o in g.ops if o.resource == "comm"]
    assert len(comm) == 4 and all(o.side_effects == ["collective:all_reduce"] for o in comm)
    chain = [(e.src, e.dst) for e in g.edges if e.type == "collective_order"]
    assert chain == [(a.name, b.name) for a, b in zip(comm, comm[1:])]
    # micro-batch 1's attention compute does not wait for micro-batch 0
    assert independent(g, ops_under(g, "micro0.attn")[:-2],
                       [o for o in ops_under(g, "micro1.attn") if o not in
                        {c.name for c in comm}][:-1])
    assert [o.module for o in comm] == ["micro0.attn", "micro1.attn", "micro0.ffn", "micro1.ffn"]


def test_inference_pipeline_stages():
    g = graph("inference_pipeline", "small")
    stage = {o.name: o.module.split(".")[0] for o in g.ops}
    seen = list(dict.fromkeys(stage[n] for n in validate(g)))
    assert seen == ["preprocess", "h2d", "infer", "d2h", "postprocess"]
    for o in g.ops:
        if stage[o.name] in ("preprocess", "postprocess"):
            assert o.resource == "host", o.name
        elif stage[o.name] in ("h2d", "d2h"):
            assert o.resource == "memory" and o.meta["copy"] == stage[o.name]
    assert {"softmax", "topk"} <= {o.type for o in g.ops if stage[o.name] == "postprocess"}
    convs = [o for o in g.ops if stage[o.name] == "infer" and o.type == "conv2d"]
    assert [o.resource for o in convs] == ["cube"] * 3


def test_decode_layer_at_batch_one_has_little_headroom():
    # the published claim that batch 1 gains nothing: at 7B-like shapes a decode step is a chain of
    # memory-bound ops; the bound on any stream assignment stays below 1.1x
    from parastream.device.profile import load_profile
    from parastream.graph.headroom import analyze_graph
    from parastream.graph.models import resolve

    g = resolve("llama_layer", scale="7b", phase="decode", batch=1)
    for device in ("ascend910b", "ascend910"):
        h = analyze_graph(g, load_profile(device)).headroom
        assert h.bound_speedup < 1.1, (device, h.bound_speedup)
        assert h.verdict == "little"


def test_medusa_heads_are_independent_until_the_stack():
    g = graph("medusa_heads", "tiny", "decode")
    heads = [ops_under(g, f"medusa.{i}") for i in range(2)]
    base = ops_under(g, "lm_head")
    assert all(len(h) >= 4 for h in heads) and len(base) == 1
    assert independent(g, heads[0], heads[1]) and independent(g, heads[0], base)
    stack = next(o for o in g.ops if o.type == "stack")
    assert all(stack.name in reachable(g, h[-1]) for h in heads)
    # at small scale each head reads a vocabulary-sized weight with a batch-1 GEMV: far
    # more bytes than FLOPs (what makes it memory-bound and single-threaded on a CPU)
    lm = [o for o in graph("medusa_heads", "small", "decode").ops if o.module.endswith("lm_head")]
    assert len(lm) == 5 and all(o.bytes_read > 60e6 > o.flops for o in lm)


@pytest.mark.parametrize("name,scale,phase", [
    pytest.param(*c, marks=_mark(c[0], c[1])) for c in CASES])
def test_every_models_points_and_modules_keep_their_contracts(name, scale, phase):
    """Branches of every parallel point are independent and meet first at the join; the
    modules are connected, convex and in topological id order (brute-force oracle)."""
    from points_oracle import descendants, module_errors, point_errors

    from parastream.device.profile import load_profile
    from parastream.graph.decompose import decompose

    g = graph(name, scale, phase)
    d = decompose(g, load_profile("ascend910b"))
    desc = descendants(g)
    assert module_errors(g, d, desc) == []
    assert point_errors(g, d, desc) == []
    assert d.parallel_points or name == "inference_pipeline"


def test_llama_decode_gate_and_up_meet_at_their_product():
    """Issue: ``M15, M18, M19 || M17, join end`` for gate || up; they meet at silu(g) * u."""
    from parastream.device.profile import load_profile
    from parastream.graph.decompose import decompose

    g = graph("llama_layer", "7b", "decode")
    d = decompose(g, load_profile("ascend910b"))
    name = {m.module_id: m.module_name for m in d.modules}
    [p] = [p for p in d.parallel_points if {name[n] for b in p.branches for n in b.nodes}
           >= {"mlp.gate_proj", "mlp.up_proj"}]
    assert sorted(name[n] for b in p.branches for n in b.nodes) == ["mlp.gate_proj",
                                                                   "mlp.up_proj"]
    assert name[p.join] == "mlp" and name[p.fork] == "post_attention_layernorm"


@pytest.mark.parametrize("scale", SCALES)
def test_inception_branches_are_modules(scale):
    """Each Inception branch (conv+relu chains, the pool branch) is one module, typed by
    its work; the four are one point joining at the concat."""
    from parastream.device.profile import load_profile
    from parastream.graph.decompose import decompose

    d = decompose(graph("inception_block", scale, "infer"), load_profile("ascend910b"))
    assert [m.module_name for m in d.modules] == ["branch1", "branch2", "branch3", "branch4",
                                                  "cat[memory]"]
    types = [m.module_type for m in d.modules]
    # the pool branch is a pool or a conv by which op has more FLOPs (the pool at tiny)
    assert types[:3] == ["conv"] * 3 and types[3] in ("conv", "pool") and types[4] == "copy"
    [p] = d.parallel_points
    assert sorted(n for b in p.branches for n in b.nodes) == ["M1", "M2", "M3", "M4"]
    assert p.join == "M5"


def test_the_zoo_and_the_model_resolver_name_the_same_scales():
    from parastream.graph import models

    assert SCALES == models.SCALES and models.DEFAULT_SCALE in SCALES
