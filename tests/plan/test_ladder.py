"""The strength ladder: C3 where a candidate's events sit right after producers that are not
their stream's tail, C2 core limits only on devices that document them, plan.md fields 2
and 4 per candidate."""

from __future__ import annotations

import random

import msgspec
import pytest

from parastream.graph.ir import Edge, Graph, Op, validate
from parastream.plan import PlanError, check
from parastream.plan.candidates import DeviceFacts, Point, candidates
from parastream.plan.hb import clocks, happens_before
from parastream.plan.io import PlanDoc
from parastream.plan.ladder import (core_limit_support, placed_sync_points, stream_sync_events,
                                    supports_core_limits)
from parastream.plan.lints import reach_sets
from parastream.report.plan import fragment, render_markdown
from parastream.plan.stages import cross_stage_points

try:
    from .test_candidates import LIMITS, moe
except ImportError:
    from test_candidates import LIMITS, moe


def shared_first() -> tuple[Graph, dict[str, float], Point]:
    """The MoE shape with the shared expert issued before the routed experts."""
    g, dur, point = moe()
    first = ["x", "shared_up", "shared_act", "shared_down"]
    ops = {o.name: o for o in g.ops}
    g = Graph(name="moe-shared-first", ops=[ops[n] for n in first]
              + [o for o in g.ops if o.name not in first], edges=g.edges)
    return g, dur, point


def by_kind(plans, kind):
    return next(p for p in plans if p.name.endswith("/" + kind))


def test_an_event_placed_after_a_producer_that_is_not_the_tail_makes_it_c3():
    # program order x, gate, topk, experts, combine, shared_*: when the shared expert starts,
    # main has been handed the routed experts too; waiting for main's whole stream (C1)
    # would serialise the shared expert behind them
    g, dur, point = moe()
    plan = by_kind(candidates(g, [point], dur, device=DeviceFacts(hw_queues=4)), "side-serial")
    assert plan.strength == "C3"
    placed = placed_sync_points(g, plan)
    assert [(e.record_after, e.wait_before, tail) for e, tail in placed] == \
        [("x", "shared_up", "combine")]
    assert plan.meta["ladder"]["placed"] == [{"record_after": "x", "wait_before": "shared_up",
                                              "c1_record_after": "combine"}]
    # the C1 rung is valid too, and slower: its estimate is given beside C3's
    c1 = msgspec.structs.replace(plan, events=stream_sync_events(g, plan))
    check(g, c1)
    assert plan.meta["ladder"]["c1_wall_us"] > plan.estimate.wall_us
    assert "C1 would wait for combine" in plan.meta["ladder"]["C3"]


def test_stream_wide_waits_suffice_when_every_producer_is_its_streams_tail():
    g, dur, point = shared_first()
    plan = by_kind(candidates(g, [point], dur, device=DeviceFacts(hw_queues=4)), "side-serial")
    assert placed_sync_points(g, plan) == []
    assert plan.strength == "C1" and "not needed" in plan.meta["ladder"]["C3"]


def test_c2_only_where_the_device_documents_core_limits():
    g, dur, point = moe()
    bd = {n: 24 for n in dur}
    for kind, words in (("gpu", "CUDA has no per-stream core limit API"),
                        ("cpu", "no core limit API on the CPU"),
                        ("npu", "does not list limit_core_num")):
        plans = candidates(g, [point], dur, block_dims=bd,
                           device=DeviceFacts(name=kind, cores=32, hw_queues=4, kind=kind))
        assert all(not p.core_limits for p in plans), kind
        multi = [p for p in plans if p.stream_count() > 1]
        assert multi and all(words in p.meta["ladder"]["C2"] for p in multi), kind
        assert all(p.strength != "C2" for p in plans)
    plans = candidates(g, [point], dur, block_dims=bd,
                       device=DeviceFacts(cores=32, hw_queues=4, kind="npu", core_limit=LIMITS))
    limited = [p for p in plans if p.core_limits]
    assert limited and all("limit_core_num" in p.meta["ladder"]["C2"] for p in limited)


def test_the_core_limit_accessor_takes_a_missing_field_as_unsupported():
    class Bare:
        name = "x"

    class WithField:
        core_limit = {"torchair": True, "npugraph_ex": False, "min_torch_npu": "", "source": "s"}

    class Struct(msgspec.Struct):
        torchair: bool = False
        npugraph_ex: bool = True

    class WithStruct:
        core_limit = Struct()

    assert not supports_core_limits(core_limit_support(Bare()))
    assert core_limit_support(WithField())["torchair"] is True
    assert supports_core_limits(core_limit_support(WithStruct()))
    assert not supports_core_limits(core_limit_support(type("N", (), {"core_limit": None})()))


def test_plan_md_fields_2_and_4_are_the_candidates_own():
    g, dur, point = moe()
    plans = candidates(g, [point], dur, device=DeviceFacts(name="npu", hw_queues=4, kind="npu"),
                       global_plans=[])
    from parastream.plan.assign import assign

    single = assign(g, "single")
    plans += candidates(g, [], dur, global_plans=[single], device=DeviceFacts(kind="npu"))
    frags = {p.name: fragment(p, 1) for p in plans}
    field2 = {n: next(l for l in f.splitlines() if l.startswith("2. ")) for n, f in frags.items()}
    multi = [n for n in frags if n != "single"]
    assert len({field2[n] for n in multi}) == len(multi)  # no shared boilerplate paragraph
    for n in multi:
        assert "CUDA" not in field2[n]  # an npu plan names the two Ascend paths only
        for e in next(p for p in plans if p.name == n).events[:4]:
            assert f"`{e.record_after}`" in field2[n]
    c3 = next(p for p in plans if p.strength == "C3")
    assert "npu_tagged_event_record" in fragment(c3, 1)
    single_p = next(p for p in plans if p.name == "single")
    assert "Why it may gain" not in single_p.description
    assert "none: one stream" in field2["single"]
    f4 = next(l for l in frags[c3.name].splitlines() if l.startswith("4. "))
    assert "C3" in f4 and "Next:" in f4 and "x" in f4
    doc = PlanDoc(model="m", device="npu", recommended="single", candidates=plans)
    assert "CUDA" not in render_markdown(doc)


# ------------------------------------------------------------------ random DAGs
def stacked_dag(rng: random.Random, layers: int, width: int) -> Graph:
    """``layers`` copies of one random layer, each fed by the previous layer's last op, and
    a few ops per layer that read only a shared input (a next layer's independent prologue)."""
    ops, edges = [Op(name="pos", type="arange", resource="vector", meta={"dur_us": 1.0})], []
    shape = [(j, sorted(rng.sample(range(j), rng.randint(1, min(2, j))))) for j in range(1, width)]
    free = set(rng.sample(range(1, width), rng.randint(0, max(0, width // 4))))
    prev = None
    for k in range(layers):
        name = [f"L{k}.op{j}" for j in range(width)]
        for j in range(width):
            ops.append(Op(name=name[j], type=rng.choice(["mm", "add", "index_select", "cast"]),
                          module=f"layers.{k}.m{j % 3}",
                          resource=rng.choice(["cube", "vector", "memory"]),
                          meta={"dur_us": float(rng.randint(1, 40))}))
        edges.append(Edge(src=prev or "pos", dst=name[0]))
        for j, deps in shape:
            if j in free:  # reads the shared input only (and other such ops)
                edges.append(Edge(src="pos", dst=name[j]))
                deps = [i for i in deps if i in free]
            elif 0 not in deps:
                deps = deps + [0]  # follows the previous layer
            edges += [Edge(src=name[i], dst=name[j], type=rng.choice(["data", "data", "state"]))
                      for i in deps]
        prev = name[width - 1]
    return Graph(name="stack", ops=ops, edges=edges)


@pytest.mark.parametrize("batch", range(4))
def test_every_candidate_and_its_c1_rung_validate_on_random_stacked_dags(batch):
    rng = random.Random(1000 + batch)
    for _ in range(250):  # 4 x 250 = 1,000 stacked DAGs
        g = stacked_dag(rng, rng.randint(2, 4), rng.randint(4, 14))
        order = validate(g)
        dur = {o.name: o.meta["dur_us"] for o in g.ops}
        reach = reach_sets(g, order)
        points = cross_stage_points(g, order, reach, dur)
        idx = {n: i for i, n in enumerate(order)}
        for p in points:
            assert "cross-stage" in p.name
            main, pro = p.branches
            for a in main:  # the branches are independent: no path either way
                assert not any((reach[a] >> idx[b]) & 1 or (reach[b] >> idx[a]) & 1 for b in pro)
        for plan in candidates(g, points, dur, device=DeviceFacts(hw_queues=4), order=order):
            lay = check(g, plan, order)
            c1 = msgspec.structs.replace(plan, events=stream_sync_events(g, plan, order))
            check(g, c1, order)
            # the C1 rung orders everything the plan orders
            op_clock, _ = clocks(lay, c1.events)
            for e in plan.events:
                if e.wait_before is not None:
                    assert happens_before(lay, op_clock, e.record_after, e.wait_before)
            placed = placed_sync_points(g, plan, order)
            assert (plan.strength == "C3") == bool(placed)
            assert plan.strength != "C2"  # no core-limit API on this device
            for i in range(len(plan.events)):  # every event is needed
                fewer = msgspec.structs.replace(plan, events=plan.events[:i] + plan.events[i + 1:])
                with pytest.raises(PlanError):
                    check(g, fewer, order)


def test_zoo_plans_get_core_limits_only_from_a_device_that_lists_them(monkeypatch):
    pytest.importorskip("torch")
    from parastream.device.profile import load_profile
    from parastream.graph.models import resolve
    from parastream.plan import ladder
    from parastream.workflow.plan import build

    g = resolve("moe_layer", scale="7b")  # block dims above the cores: C2 would be sized
    for dev in ("cpu", "h100", "ascend910"):  # none documents a per-stream core limit
        doc = build(g, load_profile(dev), algorithm=None, mapping=None, max_streams=None,
                    simulate=False)
        assert not any(c.core_limits for c in doc.candidates), dev
        assert all("not available on" in c.meta["ladder"]["C2"]
                   for c in doc.candidates if c.stream_count() > 1), dev
    monkeypatch.setattr(ladder, "core_limit_support", lambda profile: dict(LIMITS))
    doc = build(g, load_profile("ascend910b"), algorithm=None, mapping=None, max_streams=None,
                simulate=False)
    assert any(c.core_limits for c in doc.candidates)
