"""The planner's ge-reorder lint checked in the simulator (``workflow.plan.confirm_ge_reorder``):
a candidate keeps the warning only where GE's reorder, simulated in graph mode, costs at
least the cheapest precompute it hoists; elsewhere the lint is ``info`` and says so."""

from __future__ import annotations

import msgspec
import pytest

from parastream.device.cost import estimate
from parastream.device.profile import load_profile
from parastream.graph.ir import Graph, validate
from parastream.graph.models import resolve
from parastream.plan import assign
from parastream.sim.run import simulate_plan
from parastream.workflow.plan import build

ASCEND = load_profile("ascend910b")


def _ge_lints(plan) -> list:
    return [x for x in plan.lints if x.rule == "ge-reorder"]


def _check(graph: Graph) -> int:
    """Assert the contract on every candidate of ``graph``'s plan; the warnings checked."""
    order = validate(graph)
    costs = {o.name: estimate(o, ASCEND) for o in graph.ops}
    doc = build(graph, ASCEND, algorithm=None, mapping=None, max_streams=None)
    warned = 0
    for c in doc.candidates:
        lints = _ge_lints(c)
        if not lints:
            continue
        kw = {"costs": costs, "order": order}
        base = simulate_plan(graph, c, ASCEND, mode="graph", **kw).result.wall_us
        ge = simulate_plan(graph, c, ASCEND, ge=True, **kw)
        pre = min((costs[v].dur_us for v, _ in ge.reorder.hoisted), default=None)
        for x in lints:
            assert "simulated in graph mode" in x.message, (graph.name, c.name)
            if x.severity == "warning":
                warned += 1
                assert pre is not None and ge.result.wall_us >= base + pre - 1e-6, \
                    (graph.name, c.name, base, ge.result.wall_us)
            else:
                assert x.severity == "info" and "harmless here" in x.message
                assert pre is None or ge.result.wall_us < base + pre
        if all(x.severity == "info" for x in lints):
            assert "GE may issue" not in c.description, (graph.name, c.name)
    return warned


ZOO_CASES = [("llama_layer", "small", None), ("llama_layer", "7b", None),
             ("attention_prolog", "7b", "prefill"), ("attention_prolog", "7b", "decode"),
             ("kv_offload", "7b", None), ("moe_layer", "small", None),
             ("moe_layer", "7b", None), ("two_microbatch_prefill", "7b", None)]


@pytest.mark.parametrize("name,scale,phase", ZOO_CASES)
def test_a_ge_reorder_warning_is_one_the_simulator_shows(name, scale, phase):
    """At 7B shapes the matching plans of llama_layer, attention_prolog and kv_offload carry
    a ge-reorder lint whose reorder simulates faster, not slower: those are info now."""
    pytest.importorskip("torch")
    _check(resolve(name, scale=scale, phase=phase))


def test_llama_layer_small_keeps_its_warning_and_7b_matching_is_harmless():
    pytest.importorskip("torch")
    assert _check(resolve("llama_layer", scale="small")) >= 1
    doc = build(resolve("llama_layer", scale="7b"), ASCEND, algorithm=None, mapping=None,
                max_streams=None)
    matching = next(c for c in doc.candidates if c.name == "matching")
    assert [x.severity for x in _ge_lints(matching)] == ["info"] * len(_ge_lints(matching))
    assert "GE may issue" not in matching.description


def test_the_seed_prolog_trap_stays_a_warning_with_its_simulated_cost(seed_prolog):
    from parastream.workflow.plan import _op_costs, confirm_ge_reorder

    g = seed_prolog
    order = validate(g)
    plan = msgspec.structs.replace(assign(g, "manual", mapping={"kv_a": 1}), name="plain")
    plan.lints = [msgspec.structs.replace(x) for x in _lint(g, plan, order)]
    assert "ge-reorder" in [x.rule for x in plan.lints if x.severity == "warning"]
    confirm_ge_reorder(g, plan, profile=ASCEND, c=_op_costs(g, ASCEND, order), order=order)
    warn = [x for x in plan.lints if x.rule == "ge-reorder"]
    assert warn[0].severity == "warning" and "GE's reorder costs" in warn[0].message
    cost = float(warn[0].message.split("costs ")[1].split(" us")[0].replace(",", ""))
    assert cost >= 45.0  # main idles until kv_a is done: q_b no longer hides it


def _lint(g, plan, order):
    from parastream.plan.lints import lint

    return lint(g, plan, {o.name: o.meta["dur_us"] for o in g.ops}, order=order)
