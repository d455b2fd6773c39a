"""`parastream analyze TRACE --plan plan.json`: placement check and per-point overlap."""

from __future__ import annotations

import json
import subprocess
import sys

from parastream.plan.io import PlanDoc, dumps, loads
from parastream.plan.model import Event, Plan
from parastream.plan.verify import verify
from parastream.timeline.model import TimelineBuilder


def doc() -> PlanDoc:
    plan = Plan(name="moe/side-serial", algorithm="parallel-point", parallel_point="moe",
                assignment={"gate": 0, "experts": 0, "shared_up": 1, "shared_down": 1, "merge": 0},
                events=[Event(record_after="shared_down", wait_before="merge")], streams=2)
    return PlanDoc(model="moe", device="test", recommended=plan.name, candidates=[plan],
                   parallel_points=[{"name": "moe", "fork": None, "join": "merge",
                                     "branches": [["gate", "experts"], ["shared_up", "shared_down"]]}])


def trace(side_stream: str = "9"):
    b = TimelineBuilder("t", "test")
    b.add_op("7", "gate", 0, 10_000)
    b.add_op("7", "experts", 10_000, 110_000)
    b.add_op(side_stream, "shared_up", 12_000, 40_000)
    b.add_op(side_stream, "shared_down", 40_000, 70_000)
    b.add_op("7", "merge", 110_000, 112_000)
    return b.build()


def test_true_overlap_and_placement():
    r = verify(trace(), doc())
    assert r["stream_mapping"] == {"0": "7", "1": "9"}
    assert r["misplaced_count"] == 0 and not r["side_stream_never_ran"]
    (p,) = r["parallel_points"]
    assert p["dominator"]["name"] == "experts" and p["verdict"] == "true"


def test_side_ops_on_the_main_stream_are_3a():
    r = verify(trace(side_stream="7"), doc())
    assert r["side_stream_never_ran"]


def test_cli(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_bytes(dumps(doc()))
    assert loads(plan.read_bytes()) == doc()
    src = tmp_path / "trace.json"
    events = [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": s, "ts": a, "dur": d,
               "args": {"stream": s, "device": 0}}
              for n, s, a, d in [("gate", 7, 0, 10), ("experts", 7, 10, 100), ("shared_up", 9, 12, 28),
                                 ("shared_down", 9, 40, 30), ("merge", 7, 110, 2)]]
    src.write_text(json.dumps({"traceEvents": events}))
    out = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(src), "--plan", str(plan),
                          "--format", "json"], capture_output=True, text=True, check=True).stdout
    pc = json.loads(out)["captures"][0]["plan_check"]
    assert pc["parallel_points"][0]["verdict"] == "true"
    bad = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(src), "--plan", str(plan),
                          "--candidate", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "nope" in bad.stderr and "Traceback" not in bad.stderr


def _side_doc(assignment: dict[str, int]) -> PlanDoc:
    plan = Plan(name="p", algorithm="matching", assignment=assignment,
                streams=len(set(assignment.values())))
    return PlanDoc(model="m", device="test", recommended="p", candidates=[plan])


def _run(placed: dict[str, str]):
    b = TimelineBuilder("t", "test")
    for i, (name, stream) in enumerate(placed.items()):
        b.add_op(stream, name, i * 1000, i * 1000 + 500)
    return b.build()


def test_half_a_side_stream_moved_names_the_ops_that_moved():
    # 4 of stream 1's 8 ops ran elsewhere: the check took the stream they moved to as
    # stream 1's and named the 4 that ran where planned
    side = [f"s{i}" for i in range(8)]
    doc_ = _side_doc({"m0": 0, "m1": 0, **{n: 1 for n in side}})
    for moved_to in ("9", "0"):
        placed = {"m0": "0", "m1": "0", **{n: (moved_to if i < 4 else "1")
                                         for i, n in enumerate(side)}}
        r = verify(_run(placed), doc_)
        assert r["stream_mapping"] == {"0": "0", "1": "1"}, moved_to
        assert sorted(m["op"] for m in r["misplaced"]) == side[:4]
        assert not r["side_stream_never_ran"]


def test_two_side_streams_that_ran_as_one_are_reported():
    doc_ = _side_doc({"m": 0, "a": 1, "b": 1, "c": 2, "d": 2})
    r = verify(_run({"m": "0", "a": "1", "b": "1", "c": "1", "d": "1"}), doc_)
    assert r["shared_trace_streams"] == [{"trace_stream": "1", "plan_streams": [1, 2]}]
    assert not r["side_stream_never_ran"]
    from parastream.report.markdown import render_markdown

    md = render_markdown({"captures": [{
        "label": "x", "source": "t", "format": "test", "wall_us": 1.0, "parallelism": 1.0,
        "streams": [], "parallel_points": [], "contention": [], "warnings": [],
        "verdict_counts": {}, "parallel_points_total": 0, "plan_check": r}]})
    assert "side streams 1, 2 all ran on trace stream 1: planned apart" in md
    assert "Plan check" in md


def test_cli_checks_the_candidate_a_run_trace_names_not_the_recommended_single(tmp_path):
    # 'parastream run --trace' writes plan.json recommending what the measurement chose (often
    # single stream) beside each candidate's timeline, whose traceName is the candidate
    from parastream.report.kineto import write_kineto

    side = doc().candidates[0]
    single = Plan.single(side.assignment)
    d = PlanDoc(model="moe", device="test", recommended="single", candidates=[single, side],
                parallel_points=doc().parallel_points)
    plan = tmp_path / "plan.json"
    plan.write_bytes(dumps(d))
    src = tmp_path / "side-serial.json"
    write_kineto(src, trace(), side.name)

    def check(*extra):
        out = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(src), "--plan",
                              str(plan), "--format", "json", *extra], capture_output=True,
                             text=True, check=True).stdout
        return json.loads(out)["captures"][0]["plan_check"]

    pc = check()
    assert pc["candidate"] == side.name and pc["misplaced_count"] == 0
    assert pc["parallel_points"][0]["verdict"] == "true"
    # --candidate still wins: the single plan puts shared_up/down on stream 0
    pc = check("--candidate", "single")
    assert pc["candidate"] == "single" and pc["misplaced_count"] == 2


def test_side_ops_between_main_ops_are_not_overlap_whatever_the_envelope():
    # a host-bound device run: the side stream's ops ran one by one between main's, so the
    # side envelope covers the dominator (overlap_pct 1.0) while no two ops ran at once
    b = TimelineBuilder("t", "test")
    for k, (name, stream) in enumerate([("gate", "7"), ("shared_up", "9"), ("experts", "7"),
                                        ("shared_down", "9"), ("merge", "7")]):
        b.add_op(stream, name, k * 10_000, k * 10_000 + 8_000)
    (p,) = verify(b.build(), doc())["parallel_points"]
    assert p["overlap_pct"] == 1.0 and p["busy_overlap_pct"] == 0.0
    assert p["verdict"] == "false"
    # the same side ops beside the main ones: both measures agree
    (q,) = verify(trace(), doc())["parallel_points"]
    assert q["busy_overlap_pct"] == 1.0 and q["verdict"] == "true"


def test_side_ops_on_the_main_stream_do_not_hide_behind_themselves():
    # shared_up ran on main's stream between gate and experts, shared_down after merge on
    # the side stream: nothing ran at once, so nothing was hidden
    b = TimelineBuilder("t", "test")
    for name, stream, lo, hi in [("gate", "7", 0, 10), ("shared_up", "7", 10, 20),
                                 ("experts", "7", 20, 110), ("merge", "7", 110, 112),
                                 ("shared_down", "9", 112, 140)]:
        b.add_op(stream, name, lo * 1000, hi * 1000)
    (p,) = verify(b.build(), doc())["parallel_points"]
    assert p["busy_overlap_pct"] == 0.0 and p["verdict"] == "false"
