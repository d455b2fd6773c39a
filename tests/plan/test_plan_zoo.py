"""Planner acceptance on the zoo models (needs torch for the import)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from parastream.device.profile import load_profile  # noqa: E402
from parastream.graph.ir import Edge, Graph, Op  # noqa: E402
from parastream.graph.models import resolve  # noqa: E402
from parastream.zoo import ZOO  # noqa: E402
from parastream.plan import check  # noqa: E402
from parastream.plan.assign import ALGORITHMS, assign  # noqa: E402
from parastream.workflow.plan import build  # noqa: E402

PROFILE = load_profile("ascend910b")


@pytest.fixture(scope="module")
def docs():
    out = {}
    for name in ("moe_layer", "attention_prolog", "inception_block", "llama_layer"):
        # the prolog at a scale where its matmuls dwarf the cheap precompute (as on hardware)
        g = resolve(name, scale="7b" if name == "attention_prolog" else "tiny")
        out[name] = (g, build(g, PROFILE, algorithm=None, mapping=None, max_streams=None))
    return out


def test_two_candidates_per_parallel_point_and_all_valid(docs):
    for name, (g, doc) in docs.items():
        assert doc.parallel_points, name
        for p in doc.parallel_points:
            cands = [c for c in doc.candidates if c.parallel_point == p["name"]]
            assert len(cands) >= 2, (name, p["name"])
        for c in doc.candidates:
            check(g, c)
            assert c.streams <= PROFILE.hw_queues


def test_no_candidate_has_an_event_it_can_do_without():
    """Minimal events: dropping any one event of any candidate leaves a dependency unordered
    (an early join used to keep the final join of the op it had just waited for)."""
    import msgspec

    from parastream.plan.model import PlanError

    for name in ZOO:
        g = resolve(name, scale="tiny")
        for c in build(g, load_profile("cpu"), algorithm=None, mapping=None,
                       max_streams=None).candidates:
            for i in range(len(c.events)):
                fewer = msgspec.structs.replace(c, events=c.events[:i] + c.events[i + 1:])
                with pytest.raises(PlanError):
                    check(g, fewer)


def test_moe_best_point_candidate_puts_the_shared_expert_on_a_side_stream(docs):
    g, doc = docs["moe_layer"]
    point = next(p for p in doc.parallel_points if "shared_experts" in p["name"] and "routed" in p["name"])
    best = next(c for c in doc.candidates if c.parallel_point == point["name"])
    ops = g.index()
    side = {n for n, s in best.assignment.items() if s != 0}
    shared = {n for n, o in ops.items() if "shared_experts" in o.module}
    assert shared and shared <= side
    assert not any("routed" in ops[n].module for n in side)
    assert any(e.wait_before == point["join"] for e in best.events)


def test_attention_prolog_reorder_lint_and_pinned_variant(docs):
    _, doc = docs["attention_prolog"]
    flagged = [c for c in doc.candidates if c.parallel_point
               and any(l.rule == "ge-reorder" for l in c.lints)]
    assert flagged
    point = flagged[0].parallel_point
    pinned = [c for c in doc.candidates if c.parallel_point == point and c.name.endswith("/pinned")]
    assert pinned and not any(l.rule == "ge-reorder" for l in pinned[0].lints)


def test_every_algorithm_on_every_zoo_model_validates():
    for name in ZOO:
        g = resolve(name, scale="tiny")
        for algo in ALGORITHMS:
            if algo == "manual":
                continue
            check(g, assign(g, algo, max_streams=4))


def test_sixty_layer_moe_stays_within_the_stream_cap():
    layer = resolve("moe_layer", scale="tiny")
    ops, edges, prev_out = [], [], None
    first = layer.ops[0].name
    sinks = {o.name for o in layer.ops} - {e.src for e in layer.edges}
    for k in range(60):
        ren = {o.name: f"L{k}.{o.name}" for o in layer.ops}
        for o in layer.ops:
            ops.append(Op(name=ren[o.name], type=o.type, module=f"layers.{k}.{o.module}",
                          resource=o.resource, flops=o.flops, bytes_read=o.bytes_read,
                          bytes_written=o.bytes_written, outputs=o.outputs))
        edges += [Edge(src=ren[e.src], dst=ren[e.dst], type=e.type) for e in layer.edges]
        if prev_out:
            edges += [Edge(src=s, dst=ren[first]) for s in prev_out]
        prev_out = [ren[s] for s in sorted(sinks)]
    deep = Graph(name="moe60", ops=ops, edges=edges)
    doc = build(deep, PROFILE, algorithm="matching", mapping=None, max_streams=3, simulate=False)
    for c in doc.candidates:
        assert c.streams <= 3, c.name
        check(deep, c)
    shared = [c for c in doc.candidates if c.parallel_point and "shared_experts" in c.parallel_point]
    assert shared and shared[0].meta["instances"] == 60


def test_a_whole_graph_algorithm_keeps_its_fastest_stream_count():
    # moe_layer 7b on ascend910b: matching on 4 streams simulated 1.17x, on 2 1.25x;
    # `simulate` offered the 2-stream plan, `plan` did not
    g = resolve("moe_layer", scale="7b")
    doc = build(g, PROFILE, algorithm=None, mapping=None, max_streams=None)
    matching = doc.candidate("matching")
    # --max-streams N caps the search at N streams (it fixed the count: --max-streams 3
    # offered matching on 3 streams at 4799 us over its 2-stream 4460)
    caps = {k: build(g, PROFILE, algorithm="matching", mapping=None, max_streams=k)
            .candidate("matching") for k in (2, 3, 4)}
    assert all(c.stream_count() <= k for k, c in caps.items())
    walls = [caps[k].estimate.wall_us for k in (2, 3, 4)]
    assert walls == sorted(walls, reverse=True)
    assert matching.estimate.wall_us == caps[4].estimate.wall_us  # 4 = the device's queues
    assert matching.stream_count() < PROFILE.hw_queues
