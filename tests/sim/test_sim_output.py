"""`simulate plan.json`: every candidate's predicted wall in the text table and in
``--json FILE``, ``--candidate NAME``, and what is never recommended: a speedup above the
plan's stream count or its headroom bound, more streams than the hardware queues."""

from __future__ import annotations

import json

import msgspec

from parastream.cli import main
from parastream.graph.ir import Edge, Graph, Op, dumps
from parastream.plan import assign
from parastream.plan.io import PlanDoc
from parastream.plan.io import dumps as dump_plan


def fan(branches: int) -> Graph:
    """A fork, ``branches`` independent 100 us vector ops (8 of the 48 vector cores
    each), a join."""
    ops = [Op(name="fork", type="add", resource="vector", meta={"dur_us": 1, "block_dim": 8})]
    ops += [Op(name=f"b{i}", type="mul", resource="vector", meta={"dur_us": 100, "block_dim": 8})
            for i in range(branches)]
    ops.append(Op(name="join", type="add", resource="vector", meta={"dur_us": 1, "block_dim": 8}))
    edges = [Edge(src="fork", dst=f"b{i}") for i in range(branches)]
    edges += [Edge(src=f"b{i}", dst="join") for i in range(branches)]
    return Graph(name="fan", ops=ops, edges=edges)


def plan_file(tmp_path, graph: Graph, cands: dict[str, dict], meta: dict | None = None) -> str:
    """A plan document of ``cands`` (name -> manual mapping) for ``graph`` on ascend910b."""
    plans = [msgspec.structs.replace(assign(graph, "manual", mapping=m), name=n,
                                     meta=(meta or {}).get(n, {}))
             for n, m in cands.items()]
    src = tmp_path / "fan.json"
    src.write_bytes(dumps(graph))
    doc = PlanDoc(model=graph.name, device="ascend910b", recommended=plans[0].name,
                  candidates=plans, source={"model": str(src)})
    path = tmp_path / "plan.json"
    path.write_bytes(dump_plan(doc))
    return str(path)


FIVE = {"a/two": {"b3": 1, "b4": 1}, "b/five": {f"b{i}": i for i in range(1, 5)},
        "a/five": {f"b{i}": i for i in range(1, 5)}}


def test_every_candidate_has_its_wall_in_the_table_and_the_json_file(tmp_path, capsys):
    plan = plan_file(tmp_path, fan(5), FIVE)
    out_file = tmp_path / "sim.json"
    assert main(["simulate", plan, "--mode", "graph", "--json", str(out_file)]) == 0
    text = capsys.readouterr().out
    doc = json.loads(out_file.read_text())
    names = [c["name"] for c in doc["candidates"]]
    assert sorted(names) == ["a/five", "a/two", "b/five", "single"]
    walls = [c["wall_us"] for c in doc["candidates"]]
    assert walls == sorted(walls)  # fastest first
    for c in doc["candidates"]:
        assert c["name"] in text and f"{c['wall_us']:.1f}" in text
    assert "candidates (4, fastest first)" in text
    # the file holds what --format json prints
    assert main(["simulate", plan, "--mode", "graph", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc


def test_more_streams_than_hardware_queues_are_flagged_and_never_recommended(tmp_path, capsys):
    """5 streams on ascend910b's 4 queues: the 5-stream mappings simulate fastest (four
    queues still run four branches at once) but carry the planner's own warning; the
    recommendation is the fastest plan within the queues."""
    plan = plan_file(tmp_path, fan(5), FIVE)
    assert main(["simulate", plan, "--mode", "graph", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by = {c["name"]: c for c in doc["candidates"]}
    assert by["a/five"]["wall_us"] < by["a/two"]["wall_us"]
    assert by["a/five"]["flags"] == ["5 streams on 4 hardware queues"]
    assert by["a/two"]["flags"] == [] and by["a/two"]["recommended"]
    assert doc["recommended_candidate"] == "a/two" and doc["recommended_streams"] == 2
    assert not by["a/five"]["recommended"] and not by["b/five"]["recommended"]
    five = next(r for r in doc["rows"] if r["streams"] == 5)
    assert five["flags"] == ["5 streams on 4 hardware queues"]


def test_a_speedup_above_the_plans_headroom_bound_is_flagged_and_not_recommended(tmp_path, capsys):
    plan = plan_file(tmp_path, fan(2), {"fast": {"b1": 1}},
                     meta={"fast": {"bound_speedup": 1.2}})
    assert main(["simulate", plan, "--mode", "graph"]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.endswith("]") and "fast" in x)
    assert "implausible: above the headroom bound 1.20x" in line
    assert "recommended (*): single stream" in text


def test_a_speedup_above_the_stream_count_is_implausible():
    from parastream.workflow.simulate import flags

    assert flags(2, 53.0, 4) == ["implausible: above 2 streams"]
    assert flags(4, 430.0, 4, bound=3.0) == ["implausible: above 4 streams"]
    assert flags(2, 1.9, 4) == []
    assert flags(5, 1.9, 4) == ["5 streams on 4 hardware queues"]


def test_candidate_by_full_name_or_unique_suffix(tmp_path, capsys):
    plan = plan_file(tmp_path, fan(5), FIVE)
    for pick, want in (("a/two", "a/two"), ("two", "a/two"), ("b/five", "b/five")):
        assert main(["simulate", plan, "--candidate", pick, "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        # the chosen one beside the single-stream baseline its speedup is over
        assert sorted(c["name"] for c in doc["candidates"]) == sorted([want, "single"])


def test_candidate_errors_are_one_line_naming_the_plan(tmp_path, capsys):
    plan = plan_file(tmp_path, fan(5), FIVE)
    assert main(["simulate", plan, "--candidate", "five"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and plan in err
    assert "ambiguous" in err and "a/five" in err and "b/five" in err
    assert main(["simulate", plan, "--candidate", "nine"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no candidate named 'nine'" in err and "a/two" in err
    assert main(["simulate", "two_chains", "--candidate", "matching"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plan file" in err


def test_json_file_is_not_written_over_an_input(tmp_path, capsys):
    plan = plan_file(tmp_path, fan(2), {"x": {"b1": 1}})
    before = open(plan, "rb").read()
    assert main(["simulate", plan, "--json", plan]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert open(plan, "rb").read() == before
