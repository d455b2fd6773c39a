"""Graph mode in the simulator: no host launch per op, the profile's per-task dispatch
instead; GE's reorder (``--ge``) issues a ge-reorder lint's precompute ahead of its
dominator, so the main stream's FIFO blocks on the side output and the wall shows it."""

from __future__ import annotations

import json

import msgspec
import pytest

from parastream.cli import main
from parastream.device.profile import load_profile
from parastream.graph.ir import Edge, Graph, Op, dumps
from parastream.plan import assign
from parastream.plan.io import PlanDoc
from parastream.plan.io import dumps as dump_plan
from parastream.sim.run import simulate_plan

ASCEND = load_profile("ascend910b")


def chain(n: int, dur_us: float) -> Graph:
    """``n`` small vector ops in a chain (a single-stream model of many tiny ops)."""
    ops = [Op(name=f"op{i}", type="add", resource="vector",
              meta={"dur_us": dur_us, "block_dim": 8}) for i in range(n)]
    return Graph(name="chain", ops=ops,
                 edges=[Edge(src=f"op{i}", dst=f"op{i + 1}") for i in range(n - 1)])


def test_graph_mode_charges_a_dispatch_per_task_and_no_host_launch():
    """195 tiny ops on one stream: eager, the host's 5 us launch per op sets the wall
    (195 x 5 us, launch-bound); graph mode pays the profile's dispatch per task only."""
    g = chain(195, 2.0)
    single = assign(g, "single")
    eager = simulate_plan(g, single, ASCEND).result.wall_us
    graph = simulate_plan(g, single, ASCEND, mode="graph").result.wall_us
    assert eager >= 194 * ASCEND.launch_overhead_us
    assert graph == pytest.approx(195 * (2.0 + ASCEND.graph_dispatch_us))
    # the dispatch figure comes from the profile, not a constant
    slow = msgspec.structs.replace(ASCEND, graph_dispatch_us=4.0)
    assert simulate_plan(g, single, slow, mode="graph").result.wall_us == pytest.approx(195 * 6.0)


def _plan_file(tmp_path, graph: Graph, *cands) -> str:
    src = tmp_path / f"{graph.name}.json"
    src.write_bytes(dumps(graph))
    doc = PlanDoc(model=graph.name, device="ascend910b", recommended=cands[0].name,
                  candidates=list(cands), source={"model": str(src)})
    plan = tmp_path / "plan.json"
    plan.write_bytes(dump_plan(doc))
    return str(plan)


def _simulate(capsys, *args) -> dict:
    assert main(["simulate", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_ge_on_the_seed_prolog_is_slower_than_graph_mode_by_the_blocked_side_work(tmp_path, capsys,
                                                                                  seed_prolog):
    """`simulate plan.json --ge` against `--mode graph`: the unpinned candidate's cast runs
    ahead of q_b, so main waits for kv_a and q_b no longer hides it; the pinned one (the
    lint's fix) is unchanged."""
    g = seed_prolog
    plain = msgspec.structs.replace(assign(g, "manual", mapping={"kv_a": 1}), name="plain")
    pinned = msgspec.structs.replace(assign(g, "manual", mapping={"kv_a": 1, "z_": 1}),
                                     name="pinned")
    plan = _plan_file(tmp_path, g, plain, pinned)
    graph = {c["name"]: c for c in _simulate(capsys, plan, "--mode", "graph")["candidates"]}
    out = _simulate(capsys, plan, "--ge")
    assert out["mode"] == "graph" and out["ge_reorder"] is True
    ge = {c["name"]: c for c in out["candidates"]}
    assert ge["plain"]["ge_hoisted"] == [["z_cast", "q_b"]]
    # main idles until kv_a (50 us) is done before q_b (60 us) starts: the overlap is gone
    assert ge["plain"]["wall_us"] >= graph["plain"]["wall_us"] + 45.0
    assert ge["pinned"]["wall_us"] == graph["pinned"]["wall_us"]
    assert ge["pinned"]["ge_hoisted"] == []
    assert out["recommended_candidate"] == "pinned"
    # --mode graph --ge is the same thing; --mode eager --ge is refused
    assert _simulate(capsys, plan, "--ge", "--mode", "graph")["candidates"] == out["candidates"]
    assert main(["simulate", plan, "--ge", "--mode", "eager"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ge implies --mode graph" in err
    assert main(["simulate", plan, "--ge"]) == 0
    assert "GE issues z_cast ahead of q_b" in capsys.readouterr().out


def test_graph_mode_needs_the_profiles_dispatch_figure(capsys, tmp_path):
    g = chain(3, 1.0)
    src = tmp_path / "chain.json"
    src.write_bytes(dumps(g))
    assert main(["simulate", str(src), "--device", "cpu", "--mode", "graph"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "graph_dispatch_us" in err


def _times(run) -> tuple[dict[str, float], dict[str, float]]:
    tl = run.result.timeline
    names = [tl.names[i] for i in tl.name]
    return (dict(zip(names, (tl.start_ns / 1e3).tolist())),
            dict(zip(names, (tl.end_ns / 1e3).tolist())))


def _blocks(run, plan, v: str, dispatch: float) -> bool:
    """Whether ``v`` waited on its queue in ``run`` (it started later than its stream's
    previous op's end plus one dispatch)."""
    start, end = _times(run)
    order = run.reorder.order
    prev = [n for n in order[:order.index(v)] if plan.assignment[n] == plan.assignment[v]]
    return start[v] - dispatch > (end[prev[-1]] if prev else 0.0) + 1e-3


def _overlapped(run, plan, d: str, producers: list[str]) -> float:
    """How long the dominator ``d`` overlapped, in ``run``, the side work done by the time
    the side outputs ``producers`` were ready."""
    start, end = _times(run)
    total = 0.0
    for p in producers:
        for n, s in plan.assignment.items():
            if s == plan.assignment[p] and end[n] <= end[p] + 1e-9:
                total += max(0.0, min(end[n], end[d]) - max(start[n], start[d]))
    return total


def _main_ends_last(run, plan) -> bool:
    _, end = _times(run)
    last: dict[int, float] = {}
    for n, s in plan.assignment.items():
        last[s] = max(last.get(s, 0.0), end[n])
    return last.get(0, 0.0) >= max(last.values()) - 1e-6


@pytest.fixture(scope="module")
def zoo_ge_runs():
    """(model, candidate, graph-mode run, GE run, op costs) for every zoo candidate with a
    ge-reorder lint (small scale, ascend910b, as `parastream plan` builds them)."""
    pytest.importorskip("torch")
    from parastream.device.cost import estimate
    from parastream.graph.ir import validate
    from parastream.graph.models import resolve
    from parastream.zoo import ZOO
    from parastream.workflow.plan import build

    out = []
    for name in ZOO:
        g = resolve(name, scale="small")
        order = validate(g)
        costs = {o.name: estimate(o, ASCEND) for o in g.ops}
        doc = build(g, ASCEND, algorithm=None, mapping=None, max_streams=None)
        for c in doc.candidates:
            if any(l.rule == "ge-reorder" for l in c.lints):
                kw = {"costs": costs, "order": order}
                out.append((name, c, simulate_plan(g, c, ASCEND, mode="graph", **kw),
                            simulate_plan(g, c, ASCEND, ge=True, **kw), costs))
    return out


def test_every_zoo_plan_with_a_ge_reorder_lint_is_never_faster_with_ge(zoo_ge_runs):
    """Each lint's precompute is issued ahead of its dominator (or the reason it is not is
    recorded), and no such plan simulates faster with --ge than in graph mode without."""
    assert zoo_ge_runs
    for name, c, graph, ge, _ in zoo_ge_runs:
        lints = [tuple(l.ops[1:]) for l in c.lints if l.rule == "ge-reorder"]
        done = {(v, d) for v, d in ge.reorder.hoisted} | {(v, d) for v, d, _ in ge.reorder.kept}
        assert set(lints) <= done, (name, c.name)
        for v, d in ge.reorder.hoisted:
            assert ge.reorder.order.index(v) < ge.reorder.order.index(d)
        assert ge.result.wall_us >= graph.result.wall_us - 1e-6, (name, c.name)


def test_a_ge_block_that_costs_overlap_costs_at_least_the_precompute(zoo_ge_runs):
    """Where the hoisted precompute blocks the main stream, the dominator overlapped the
    side work in graph mode, and the main stream sets the wall, --ge is slower by at least
    the precompute's cost. (A block costs nothing where the plan was serial there already,
    or where main's delay fits in its slack before a side stream's end.)"""
    checked = 0
    for name, c, graph, ge, costs in zoo_ge_runs:
        harmful = [v for v, d in ge.reorder.hoisted
                   if _blocks(ge, c, v, ASCEND.graph_dispatch_us)
                   and _overlapped(graph, c, d, ge.reorder.waits.get(v, [])) > 0]
        if harmful and _main_ends_last(graph, c) and _main_ends_last(ge, c):
            checked += 1
            pre = sum(costs[v].dur_us for v in harmful)
            assert ge.result.wall_us >= graph.result.wall_us + pre, (name, c.name)
    assert checked  # llama_layer's matching plan at least
