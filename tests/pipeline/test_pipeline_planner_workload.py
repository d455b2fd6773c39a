"""The planner's rules, the accounting formula, the image workload and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from parastream.pipeline import StageStats, efficiency, plan
from parastream.pipeline.planner import predict_period


def test_planner_replicates_the_bottleneck_until_the_gain_is_small():
    p = plan({"pre": 0.004, "infer": 0.010, "post": 0.002})
    # infer 10 -> 5 (pre at 4 now), infer 3 -> 3.33, pre 2 ...: each step must gain >= 2%
    assert p.replicas["infer"] >= 3
    assert p.period_s == pytest.approx(max(t / p.replicas[s] for s, t in
                                           {"pre": 0.004, "infer": 0.010, "post": 0.002}.items()))
    assert p.steps[-1].startswith("stop:")
    assert p.depth >= max(p.replicas.values())
    assert p.replicas_arg().startswith("pre=")


def test_planner_stops_at_the_core_limit_and_the_worker_budget():
    times = {"pre": 0.004, "infer": 0.010, "post": 0.002}
    p = plan(times, cores=2)
    # 16 ms of cpu per item on 2 cores: nothing beats 8 ms/item
    assert p.period_s == pytest.approx(0.008)
    assert p.replicas["infer"] == 2 and p.replicas["pre"] == 1
    assert "gains" in p.steps[-1]
    q = plan(times, max_workers=4)
    assert sum(q.replicas.values()) == 4
    assert "budget" in q.steps[-1]
    for bad in ({"cores": 0}, {"cores": -1}, {"max_workers": 0}):  # not "unbounded"
        with pytest.raises(ValueError, match="at least"):
            plan(times, **bad)
    # a budget below one worker per stage was "reached" with more workers than it allowed
    with pytest.raises(ValueError, match="at least the 3 stages, got 2"):
        plan(times, max_workers=2)
    with pytest.raises(ValueError, match="no stage named 'zz'"):
        plan(times, cpu_stages=["zz"], cores=1)
    with pytest.raises(ValueError, match="max_replicas must be at least 1"):
        plan(times, max_replicas=0)


def test_planner_gil_bound_stages_do_not_scale():
    p = plan({"py": 0.005, "dev": 0.001}, gil_bound=["py"])
    assert p.replicas["py"] == 1 and p.period_s == pytest.approx(0.005)


def test_planner_two_percent_rule_and_tied_bottlenecks():
    # two equal stages grow together (one alone would gain nothing)
    assert plan({"a": 0.010, "b": 0.010}, max_workers=4).replicas == {"a": 2, "b": 2}
    # on one core nothing gains: the core limit binds from the start
    assert plan({"a": 0.010, "b": 0.010}, cores=1).replicas == {"a": 1, "b": 1}
    # a replica that gains 1.5% (< 2%) is not added; one that gains 3% is
    assert plan({"a": 0.01015, "b": 0.010}).replicas == {"a": 1, "b": 1}
    assert plan({"a": 0.0103, "b": 0.010}, max_workers=3).replicas == {"a": 2, "b": 1}


def test_planner_depth_absorbs_jitter_and_rejects_bad_times():
    samples = [0.001] * 90 + [0.006] * 10
    p = plan({"a": samples, "b": 0.0005})
    assert p.depth >= 4
    with pytest.raises(ValueError):
        plan({})
    with pytest.raises(ValueError):
        plan({"a": [-1.0]})
    assert predict_period({"a": 2.0, "b": 1.0}, {"a": 2, "b": 1}, cores=1) == 3.0


def test_efficiency_formula_and_stage_properties():
    s = StageStats("infer", "device", 2, items=100, busy_ns=2_000_000_000, wall_ns=1_000_000_000)
    assert s.mean_ns == 20_000_000 and s.limit_ns == 10_000_000
    assert s.utilization == 1.0
    # 100 items/s with a 10 ms bottleneck is exactly at the limit
    assert efficiency(100.0, [s.limit_ns, 1e6]) == pytest.approx(1.0)
    assert efficiency(0.0, [1e6]) == 0.0


def test_workload_is_deterministic_and_serial_equals_pipelined():
    pytest.importorskip("torch")
    pytest.importorskip("PIL")
    from parastream.pipeline import Pipeline, run_serial
    from parastream.pipeline.workload import (WorkloadConfig, decode_resize, make_items,
                                              make_jpeg, make_stages, same_outputs)
    from parastream.runtime.host import set_intra_op_threads

    set_intra_op_threads(1)
    assert make_jpeg(3, 64, 48) == make_jpeg(3, 64, 48) != make_jpeg(4, 64, 48)
    cfg = WorkloadConfig(batch=2, width=96, height=72, side=32, pool=5)
    items = make_items(6, cfg)
    assert decode_resize(items[0], 32).shape == (2, 32, 32, 3)
    stages = make_stages(cfg, {"decode": 2})
    serial, st, _ = run_serial(stages, items)
    assert len(serial) == 6 and serial[0][0].shape == (2, cfg.topk)
    probs = serial[0][1]
    assert np.all(np.diff(probs, axis=1) <= 0) and np.all((probs > 0) & (probs <= 1))
    with Pipeline(stages, ordered=False) as p:
        got = sorted(p.run(items), key=lambda r: r.id)
    assert same_outputs(serial, [r.value for r in got])
    with pytest.raises(ValueError, match="unknown stage"):
        make_stages(cfg, {"decoder": 2})


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parastream", "pipeline", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_runs_the_demo_and_writes_html_and_an_analysable_trace(tmp_path):
    pytest.importorskip("torch")
    html, trace = tmp_path / "p.html", tmp_path / "p.json"
    r = run_cli("--items", "6", "--batch", "1", "--replicas", "decode=2", "--depth", "3",
                "--format", "json", "--html", str(html), "--trace", str(trace), "--no-progress")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["outputs_identical"] is True and doc["in_order"] is True
    assert doc["replicas"]["decode"] == 2 and doc["depth"] == 3
    assert doc["pipelined"]["counts"] == {"completed": 6, "failed": 0, "cancelled": 0}
    for key in ("speedup", "efficiency", "bottleneck", "bottleneck_utilization", "plan"):
        assert key in doc
    assert {s["name"] for s in doc["pipelined"]["stages"]} == {
        "decode", "normalize", "h2d", "infer", "d2h", "postprocess"}
    assert "<canvas" in html.read_text() or "Gantt" in html.read_text()
    a = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(trace), "--format",
                        "json"], capture_output=True, text=True, timeout=120)
    assert a.returncode == 0, a.stderr
    cap = json.loads(a.stdout)["captures"][0]
    streams = {s["id"] for s in cap["streams"]}
    assert {"decode#0", "decode#1", "infer", "h2d"} <= streams
    # a measured run: the trace names this CPU, not the simulator's device
    assert "CPU" in json.dumps(cap) and "simulated device" not in json.dumps(cap)

    text = run_cli("--items", "3", "--batch", "1", "--unordered", "--no-progress")
    assert text.returncode == 0, text.stderr
    assert "efficiency E" in text.stdout
    assert "outputs identical to the serial loop: yes" in text.stdout


@pytest.mark.parametrize("args,needle", [
    (("--replicas", "decoder=2"), "--replicas"),
    (("--replicas", "decode=0"), "N must be"),
    (("--items", "0"), "--items"),
    # past these, a MemoryError (items made up front) or libgomp's allocation failure
    (("--items", "100000000000"), "--items must be from 1 to 100000"),
    (("--batch", "300000000"), "--batch must be from 1 to 4096"),
    (("--threads", "1000000000"), "--threads must be from 1 to 1024"),
    (("--depth", "0"), "--depth"),
    (("--html", "/nonexistent-dir/x.html"), "directory"),
    (("--replicas", "decode=2,decode=3"), "given twice"),
    (("--replicas", "decode=100000"), "from 1 to 256"),
    (("--html", "{tmp}/same.html", "--trace", "{tmp}/same.html"), "name the same file"),
    (("--trace", "{tmp}", "--html", "{tmp}/new.html"), "is a directory"),
    (("--html", "{tmp}"), "is a directory"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, needle, tmp_path):
    args = [a.format(tmp=tmp_path) for a in args]
    r = run_cli("--items", "2", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parastream: ") and needle in lines[0]
    assert "Traceback" not in r.stderr
    assert r.stdout == "" and list(tmp_path.iterdir()) == []  # refused before the run
