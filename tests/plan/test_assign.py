"""Planner properties on random DAGs: every plan validates, matching is a minimum chain
cover of the transitive reduction and never co-locates unreachable ops, no wait is
redundant, results are deterministic; unsafe plans are rejected with the ops named."""

from __future__ import annotations

import random

import pytest

from parastream.graph.ir import Edge, Graph, Op, validate
from parastream.plan import Event, Plan, PlanError, assign, check
from parastream.plan.assign import successors, transitive_reduction
from parastream.plan.hb import clocks, layout
from parastream.plan.sync import stream_clock_before


def random_dag(rng: random.Random, n: int) -> Graph:
    """Layered random DAG with some long skip edges (a model-like shape)."""
    names = [f"op{i}" for i in range(n)]
    ops = [Op(name=x, type=rng.choice(["mm", "add", "copy", "allreduce"]),
              resource=rng.choice(["cube", "vector", "memory", "comm"]),
              meta={"dur_us": float(rng.randint(1, 50))}) for x in names]
    edges = set()
    for j in range(1, n):
        for _ in range(rng.randint(1, 3)):
            i = rng.randint(max(0, j - rng.choice([2, 5, 20])), j - 1)
            edges.add((i, j))
    return Graph(name="rand", ops=ops,
                 edges=[Edge(src=names[i], dst=names[j], type=rng.choice(
                     ["data", "data", "data", "state", "event", "collective_order"]))
                        for i, j in sorted(edges)])


def reachable(graph: Graph) -> dict[str, set[str]]:
    succ = successors(graph)
    out: dict[str, set[str]] = {}
    for n in reversed(validate(graph)):
        r = set()
        for v in succ[n]:
            r |= {v} | out[v]
        out[n] = r
    return out


def brute_max_matching(order, adj) -> int:
    """Kuhn's simple augmenting paths: an independent oracle for the matching size."""
    match_r: dict[str, str] = {}

    def try_(u, seen):
        for v in adj.get(u, ()):
            if v in seen:
                continue
            seen.add(v)
            if v not in match_r or try_(match_r[v], seen):
                match_r[v] = u
                return True
        return False

    return sum(try_(u, set()) for u in order)


def no_redundant_waits(graph: Graph, plan: Plan) -> None:
    lay = layout(graph, plan.assignment)
    op_clock, _ = clocks(lay, plan.events)
    before = stream_clock_before(lay, op_clock)
    by_target: dict = {}
    for e in plan.events:
        by_target.setdefault(e.wait_before, []).append(e.record_after)
    import numpy as np
    for n, ps in by_target.items():
        for p in ps:
            c = before[n].copy()
            for q in ps:
                if q != p:
                    np.maximum(c, op_clock[q], out=c)
            assert c[lay.slot[lay.stream_of[p]]] < lay.pos[p], f"wait {p}->{n} is implied"


SIZES = [10, 12, 15, 20, 25, 30, 40, 60, 90, 150, 250, 500]


@pytest.mark.parametrize("batch", range(10))
def test_one_thousand_random_dags(batch):
    rng = random.Random(batch)
    for k in range(100):  # 10 batches x 100 = 1,000 DAGs of 10..500 ops
        n = SIZES[(k * 7 + batch) % len(SIZES)] if k % 10 else rng.randint(10, 500)
        g = random_dag(rng, n)
        reach = reachable(g)
        for algo in ("single", "matching", "critical-path", "resource-split"):
            for cap in ((None, 3) if algo == "matching" else (4,)):
                p = assign(g, algo, max_streams=cap)
                check(g, p)
                no_redundant_waits(g, p)
                if algo == "matching" and cap is None:
                    streams: dict[int, list[str]] = {}
                    for op, s in p.assignment.items():
                        streams.setdefault(s, []).append(op)
                    for ops in streams.values():
                        for a in ops:
                            for b in ops:
                                assert a == b or b in reach[a] or a in reach[b]
                    order = validate(g)
                    red = transitive_reduction(order, successors(g))
                    assert p.streams == n - brute_max_matching(order, red)
                if cap is not None and algo != "single":
                    assert p.streams <= cap


def test_deterministic():
    g = random_dag(random.Random(7), 300)
    for algo in ("matching", "critical-path", "resource-split"):
        assert assign(g, algo, max_streams=3) == assign(g, algo, max_streams=3)


def diamond() -> Graph:
    ops = [Op(name=n, type="t") for n in ("a", "b", "c", "d")]
    edges = [Edge(src="a", dst="b"), Edge(src="a", dst="c"), Edge(src="b", dst="d"),
             Edge(src="c", dst="d")]
    return Graph(name="diamond", ops=ops, edges=edges)


def test_matching_on_a_diamond_needs_two_streams_and_two_waits():
    p = assign(diamond(), "matching")
    assert p.streams == 2 and len(p.events) == 2
    check(diamond(), p)


def test_missing_wait_is_rejected_with_the_ops_named():
    g = diamond()
    p = assign(g, "matching")
    bad = Plan(name="bad", algorithm="manual", assignment=p.assignment, events=p.events[:1])
    with pytest.raises(PlanError, match="'[abcd]'.*->.*'[abcd]'"):
        check(g, bad)


def test_waiting_cycle_is_rejected():
    g = diamond()
    a = {"a": 0, "b": 0, "c": 1, "d": 0}
    bad = Plan(name="cycle", algorithm="manual", assignment=a,
               events=[Event(record_after="d", wait_before="c"), Event(record_after="c", wait_before="d")])
    with pytest.raises(PlanError, match="waiting cycle"):
        check(g, bad)


def test_unjoined_side_stream_is_rejected():
    g = Graph(name="fork", ops=[Op(name="a", type="t"), Op(name="b", type="t")],
              edges=[Edge(src="a", dst="b")])
    bad = Plan(name="unjoined", algorithm="manual", assignment={"a": 0, "b": 1},
               events=[Event(record_after="a", wait_before="b")])
    with pytest.raises(PlanError, match="never rejoins.*'b'"):
        check(g, bad)
    good = assign(g, "manual", mapping={"b": 1})
    check(g, good)
    assert any(e.wait_before is None for e in good.events)


def test_manual_mapping_with_unknown_names_lists_them():
    with pytest.raises(PlanError, match="'FlashAttention'.*'nope'|'nope'.*'FlashAttention'"):
        assign(diamond(), "manual", mapping={"FlashAttention": 0, "nope": 1, "b": 1})


def test_matching_cap_keeps_stream_count_for_deep_models():
    # 60 "layers", each a fork of 3 parallel branches joining again
    ops, edges = [Op(name="in", type="t")], []
    prev = "in"
    for layer in range(60):
        branches = [f"l{layer}_b{i}" for i in range(3)]
        join = f"l{layer}_join"
        ops += [Op(name=b, type="t", meta={"dur_us": 5.0 + i}) for i, b in enumerate(branches)]
        ops.append(Op(name=join, type="t"))
        edges += [Edge(src=prev, dst=b) for b in branches] + [Edge(src=b, dst=join) for b in branches]
        prev = join
    g = Graph(name="deep", ops=ops, edges=edges)
    p = assign(g, "matching", max_streams=3)
    assert p.streams == 3
    check(g, p)
    q = assign(g, "matching")
    assert q.streams == 2 * 60 + 1  # min path cover of the reduction: streams grow without a cap


def test_resource_split_of_a_single_class_stays_on_stream_zero():
    """Every op memory-bound: nothing to split, so no plan that runs the whole model on
    a side stream behind an extra hand-off and a join."""
    g = Graph(name="mem", ops=[Op(name=f"c{i}", type="copy", resource="memory",
                                  meta={"dur_us": 5.0}) for i in range(4)],
              edges=[Edge(src="c0", dst="c1"), Edge(src="c0", dst="c2"), Edge(src="c2", dst="c3")])
    plan = assign(g, "resource-split", bound={f"c{i}": "memory" for i in range(4)})
    assert set(plan.assignment.values()) == {0} and plan.events == []
    mixed = assign(g, "resource-split", bound={"c0": "compute", "c1": "memory",
                                               "c2": "memory", "c3": "compute"})
    assert set(mixed.assignment.values()) == {0, 1}


def test_critical_path_keeps_side_chains_that_run_together_apart():
    """Side chains x and y run at the same time beside the path, z only later: with two
    side streams x and y get one each and z shares one (a round robin in the ops' order
    put x and y together and z alone)."""
    durs = {"root": 1, "p1": 50, "x": 20, "z": 20, "y": 20, "p2": 100, "sink": 1}
    ops = [Op(name=n, type="t", meta={"dur_us": float(d)}) for n, d in durs.items()]
    pairs = [("root", "p1"), ("root", "x"), ("root", "y"), ("p1", "z"), ("p1", "p2"),
             ("x", "sink"), ("y", "sink"), ("z", "sink"), ("p2", "sink")]
    g = Graph(name="sides", ops=ops, edges=[Edge(src=a, dst=b) for a, b in pairs])
    p = assign(g, "critical-path", max_streams=3)
    check(g, p)
    a = p.assignment
    assert {a["root"], a["p1"], a["p2"], a["sink"]} == {0}
    assert {a["x"], a["y"]} == {1, 2} and a["z"] in (1, 2)
    # no cap: one side stream per chain; a cap of one: everything on stream 0
    assert assign(g, "critical-path").streams == 4
    assert set(assign(g, "critical-path", max_streams=1).assignment.values()) == {0}
