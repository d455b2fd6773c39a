"""Simulating plans: GE's reorder makes the seed's case false, pinning makes it true; a
simulated trace reads back through `parastream analyze` with the same overlap."""

from __future__ import annotations

import pytest

import json
import subprocess
import sys

from parastream.device.profile import load_profile
from parastream.graph.ir import Edge, Graph, Op, dumps
from parastream.plan import assign
from parastream.sim.run import simulate_plan
from parastream.timeline.analyze import Options, analyze_capture


def prolog() -> Graph:
    """The seed's attention prolog: main q_a -> q_b (the dominator); side kv_a -> z, whose
    silu precompute (cast, silu) feeds the merge. Durations and block dims as measured."""
    spec = [("x", "rms_norm", "vector", 5, 8), ("q_a", "mm", "cube", 5, 8), ("q_b", "mm", "cube", 60, 8),
            ("kv_a", "mm", "cube", 50, 8), ("z_cast", "cast", "vector", 1, 8),
            ("z_silu", "silu", "vector", 1.5, 8), ("merge", "add", "vector", 2, 8)]
    ops = [Op(name=n, type=t, resource=r, meta={"dur_us": d, "block_dim": b}) for n, t, r, d, b in spec]
    # program order as the model is written: main chain first, then the side chain
    ops = [ops[i] for i in (0, 3, 1, 2, 4, 5, 6)]
    edges = [("x", "q_a"), ("q_a", "q_b"), ("x", "kv_a"), ("kv_a", "z_cast"), ("z_cast", "z_silu"),
             ("q_b", "merge"), ("z_silu", "merge")]
    return Graph(name="prolog", ops=ops, edges=[Edge(src=a, dst=b) for a, b in edges])


def side_point(tl):
    cap = analyze_capture(tl, Options(side_regex="kv_a|z_", dominator_regex="q_b"))
    (p,) = [x for x in cap["parallel_points"] if x["side_stream"] == "1"]
    return p


def test_ge_reorder_is_false_in_simulation_and_true_when_pinned():
    g, prof = prolog(), load_profile("ascend910b")
    plain = assign(g, "manual", mapping={"kv_a": 1})
    assert side_point(simulate_plan(g, plain, prof).result.timeline)["verdict"] == "true"
    reordered = simulate_plan(g, plain, prof, ge=True).result.timeline
    assert side_point(reordered)["verdict"] == "false"
    pinned = assign(g, "manual", mapping={"kv_a": 1, "z_": 1})
    assert side_point(simulate_plan(g, pinned, prof, ge=True).result.timeline)["verdict"] == "true"


def test_simulate_trace_reads_back_through_analyze(tmp_path):
    src = tmp_path / "prolog.json"
    src.write_bytes(dumps(prolog()))
    trace = tmp_path / "sim.json"
    r = subprocess.run([sys.executable, "-m", "parastream", "simulate", str(src), "--device",
                        "ascend910b", "--streams", "1,2", "--trace", str(trace), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["label"] == "simulated on ascend910b"
    two = next(x for x in out["rows"] if x["streams"] == 2)
    assert two["speedup"] > 1.0
    a = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(trace), "--format", "json"],
                       capture_output=True, text=True, timeout=120, check=True)
    cap = json.loads(a.stdout)["captures"][0]
    assert cap["verdict_counts"] == two["verdict_counts"]
    assert cap["overlap_pct_median"] == two["overlap_pct_median"]
    text = subprocess.run([sys.executable, "-m", "parastream", "simulate", str(src), "--device",
                           "ascend910b", "--streams", "1,2"], capture_output=True, text=True,
                          check=True).stdout
    assert "simulated on ascend910b" in text and "recommended" in text


def test_measured_costs_replay_captured_op_times_and_scale_them_per_stream():
    """Op times from a captured single-stream run drive the simulation; a two-stream plan
    on a CPU gives each stream half the cores, and a measured op slows down as its op rate
    says it would on fewer threads."""
    import msgspec
    import numpy as np

    from parastream.device.profile import OpRate
    from parastream.sim.run import measured_costs
    from parastream.timeline.model import make_timeline

    names = ["a", "b", "c", "d"]
    g = Graph(name="two", ops=[Op(name=n, type="linear", resource="cube", flops=1e8,
                                  meta={"block_dim": 2}) for n in names],
              edges=[Edge(src="a", dst="b"), Edge(src="c", dst="d")])
    prof = msgspec.structs.replace(load_profile("cpu"),
                                   op_rates={"linear": OpRate("flops", 0.0, 0.0, 50.0, 100.0)})
    cores = prof.cores.cube

    def captured(durs_us):
        start = np.cumsum([0] + durs_us[:-1]) * 1000
        ops = dict(stream=np.zeros(4, np.int32), name=np.arange(4, dtype=np.int32),
                   type=np.zeros(4, np.int32), start_ns=start.astype(np.int64),
                   end_ns=(start + np.array(durs_us) * 1000).astype(np.int64),
                   kind=np.zeros(4, np.int8), core=np.zeros(4, np.int8),
                   block_dim=np.full(4, -1, np.int32), mix_block_dim=np.full(4, -1, np.int32),
                   step=np.full(4, -1, np.int32))
        return make_timeline("cap", "parastream-cpu", ["0"], names, ["linear"], ops)

    costs = measured_costs(g, prof, [captured([100, 200, 300, 400]), captured([300, 200, 100, 400])])
    launch = prof.launch_overhead_us
    assert costs["a"].measured and costs["a"].dur_us == 200 + launch       # median of 100, 300
    assert costs["d"].dur_us == 400 + launch and costs["a"].block_dim == cores
    # the part of the per-op cost inside a recorded interval is not added twice
    inside = msgspec.structs.replace(prof, op_inside_us=launch * 0.75)
    assert measured_costs(g, inside, [captured([100, 200, 300, 400])])["d"].dur_us \
        == pytest.approx(400 + launch * 0.25)
    from parastream.plan.model import Plan

    single = simulate_plan(g, Plan.single(names), prof, costs=costs).result
    assert single.wall_us >= sum(c.dur_us for c in costs.values()) + prof.run_overhead_us - 1e-6
    # every stream beyond the first adds the executor's per-stream cost to the wall
    import msgspec

    dear = msgspec.structs.replace(prof, stream_overhead_us=1000.0)
    two = assign(g, "manual", mapping={"c": 1, "d": 1})
    assert (simulate_plan(g, two, dear, costs=costs).result.wall_us
            == pytest.approx(simulate_plan(g, two, prof, costs=costs).result.wall_us + 1000.0))
    assert (simulate_plan(g, Plan.single(names), dear, costs=costs).result.wall_us
            == pytest.approx(single.wall_us))
    split = simulate_plan(g, assign(g, "manual", mapping={"c": 1, "d": 1}), prof, costs=costs)
    assert cores == 2  # the shipped cpu profile: each of two streams gets one thread
    per = {split.result.timeline.op_name(i): (int(split.result.timeline.end_ns[i])
                                              - int(split.result.timeline.start_ns[i])) / 1e3
           for i in range(len(split.result.timeline))}
    # c ran 200 us on all cores; on one thread its rate halves: 400 us, plus the launch
    assert abs(per["c"] - (400 + launch)) < 0.01, per["c"]
    # on a GPU a replayed kernel keeps the blocks it asks for (here 2 of 132 SMs), so the
    # two chains still overlap in the simulation
    gpu = load_profile("h200")
    gcosts = measured_costs(g, gpu, [captured([100, 200, 300, 400])])
    assert gcosts["a"].measured and gcosts["a"].dur_us == 100 and gcosts["a"].block_dim == 2
    both = simulate_plan(g, two, gpu, costs=gcosts).result.wall_us
    assert both < simulate_plan(g, Plan.single(names), gpu, costs=gcosts).result.wall_us


def test_a_replayed_gemv_keeps_one_thread():
    """A captured single-token matmul ran on one thread however many the stream had, so
    the replay keeps block dim 1 and a plan with fewer threads per stream leaves it as
    measured, while a matmul over many rows rescales."""
    import msgspec

    from parastream.device.profile import OpRate, load_profile
    from parastream.graph.ir import Tensor
    from parastream.plan.model import Plan
    from parastream.sim.run import measured_costs, tasks_for
    from parastream.timeline.model import TimelineBuilder

    prof = msgspec.structs.replace(load_profile("cpu"),
                                   op_rates={"linear": OpRate("flops", 4.0, 80.0, 90.0, 160.0)})

    def lin(name, rows):
        return Op(name, "linear", resource="cube", flops=2.0 * rows * 64 * 512,
                  inputs=[Tensor([rows, 64], "float32"), Tensor([512, 64], "float32")],
                  outputs=[Tensor([rows, 512], "float32")])

    g = Graph(name="g", ops=[lin("gemv", 1), lin("gemm", 256)], edges=[])
    b = TimelineBuilder("capture", "parastream-cpu")
    b.add_op("0", "gemv", 0, 100_000)
    b.add_op("0", "gemm", 100_000, 400_000)
    costs = measured_costs(g, prof, [b.build()])
    assert costs["gemv"].block_dim == 1 and costs["gemm"].block_dim == prof.cores.cube
    plan = Plan(name="two", algorithm="manual", assignment={"gemv": 0, "gemm": 1},
                events=[], streams=2)
    tasks = {t.name: t for t in tasks_for(g, plan, prof, costs=costs, order=["gemv", "gemm"])}
    assert tasks["gemv"].dur_us == pytest.approx(costs["gemv"].dur_us)
    # rescaled to the stream's fewer threads: slower than as measured, not merely other
    assert tasks["gemm"].dur_us > costs["gemm"].dur_us
    assert tasks["gemm"].dur_us != pytest.approx(costs["gemm"].dur_us)


def _cold_graph(pairs):
    """Chains of (linear, add) pairs from their own inputs: 1 MFLOP linears, 8 KiB adds."""
    ops, edges = [], []
    for lin, add in pairs:
        ops += [Op(name=lin, type="linear", resource="cube", flops=1e6),
                Op(name=add, type="add", resource="vector", bytes_read=4096, bytes_written=4096)]
        edges.append(Edge(src=lin, dst=add))
    return Graph(name="cold", ops=ops, edges=edges)


def _cold_profiles(after_us=1000.0):
    import msgspec

    from parastream.device.profile import OpRate

    rates = {"linear": OpRate("flops", 1.0, 5.0, 50.0, 100.0),
             "add": OpRate("bytes", 1.0, 5.0, 10.0, 20.0)}
    hot = msgspec.structs.replace(load_profile("cpu"), op_rates=rates)
    cold = msgspec.structs.replace(hot, cold_after_us=after_us, op_rates={
        k: msgspec.structs.replace(r, cold_1_us=c1, cold_all_us=call)
        for (k, r), (c1, call) in zip(rates.items(), ((30.0, 60.0), (10.0, 20.0)))})
    return hot, cold


def test_profile_estimates_pay_the_cold_cost_and_replayed_op_times_do_not():
    """One stream: a linear and an add, then another pair; each op pays its type's
    all-cores cold cost times (time other ops ran since its type's last op) / 1000 us."""
    import msgspec

    from parastream.device.cost import estimate
    from parastream.plan.model import Plan
    from parastream.sim.run import measured_costs

    g = _cold_graph([("a", "b"), ("c", "d")])
    hot, cold = _cold_profiles()
    assert hot.cores.cube == 2
    d = {o.name: estimate(o, hot).dur_us for o in g.ops}
    assert estimate(g.ops[0], hot).threads == 2  # all cores: the cold_all costs apply
    r = hot.run_overhead_us
    idle = {"a": d["d"] + r,            # from c's end, through d and the call boundary
            "b": r + d["a"],            # from d's end in the call before
            "c": d["b"], "d": d["c"]}
    expected = (60.0 * (idle["a"] + idle["c"]) + 20.0 * (idle["b"] + idle["d"])) / 1000.0
    assert all(v < 1000.0 for v in idle.values())  # on the ramp, not at its top
    single = Plan.single(["a", "b", "c", "d"])
    base = simulate_plan(g, single, hot).result.wall_us
    assert simulate_plan(g, single, cold).result.wall_us == pytest.approx(base + expected)
    # op times from a capture already hold their cold cost
    measured = {n: msgspec.structs.replace(c, measured=True)
                for n, c in measured_costs(g, cold, []).items()}
    assert simulate_plan(g, single, cold, costs=measured).result.wall_us == pytest.approx(base)


def test_a_stream_with_one_thread_pays_the_one_thread_cold_cost():
    """Two streams on two cores: each op runs on one thread and pays cold_1 (30 us for a
    linear), with its idle still taken from the issue order."""
    from parastream.device.cost import estimate, with_cores

    g = _cold_graph([("a", "b"), ("c", "d")])
    hot, cold = _cold_profiles()
    d = {o.name: estimate(o, hot).dur_us for o in g.ops}
    two = assign(g, "manual", mapping={"c": 1, "d": 1})
    tl = simulate_plan(g, two, cold).result.timeline
    took = {tl.op_name(i): (int(tl.end_ns[i]) - int(tl.start_ns[i])) / 1e3 for i in range(len(tl))}
    one = with_cores(estimate(g.ops[0], hot), hot, 1).dur_us
    r = hot.run_overhead_us
    assert took["a"] == pytest.approx(one + 30.0 * (d["d"] + r) / 1000.0, abs=0.01)
    assert took["c"] == pytest.approx(one + 30.0 * d["b"] / 1000.0, abs=0.01)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parastream", *args], capture_output=True,
                          text=True, timeout=120)


def _prolog_plan(tmp_path):
    """The prolog graph as a JSON file and its plan for h100 beside it."""
    src = tmp_path / "prolog.json"
    src.write_bytes(dumps(prolog()))
    plan = tmp_path / "plan.json"
    assert cli("plan", str(src), "--device", "h100", "-o", str(plan)).returncode == 0
    return src, plan


def test_simulating_a_plan_uses_the_plans_own_device(tmp_path):
    """A plan's core limits were chosen for its device: `simulate PLAN` predicts on that
    one unless --device says otherwise, and a plan whose device is only a name (a
    calibrated profile's) is refused with the fix, not simulated on another device."""
    src, plan = _prolog_plan(tmp_path)
    assert "simulated on h100" in cli("simulate", str(plan)).stdout
    assert "simulated on cpu" in cli("simulate", str(plan), "--device", "cpu").stdout
    assert "simulated on ascend910b" in cli("simulate", str(src)).stdout  # as `graph`
    # a docs audit: --batch/--seq/--streams on a plan were dropped without a word
    for flags in (["--batch", "2"], ["--seq", "64", "--streams", "2"], ["--scale", "tiny"]):
        r = cli("simulate", str(plan), *flags)
        assert r.returncode == 2 and r.stdout == "", r.stderr
        assert r.stderr.count("\n") == 1 and "cannot apply to a plan" in r.stderr
        assert flags[0] in r.stderr and str(plan) in r.stderr
    r = cli("simulate", str(src), "--batch", "1,2", "--trace", str(tmp_path / "t.json"))
    assert r.returncode == 2 and "--trace writes one simulated run" in r.stderr
    assert not (tmp_path / "t.json").exists()

    import msgspec

    from parastream.device.profile import dumps_profile

    (tmp_path / "profiles").mkdir()
    prof = tmp_path / "profiles" / "mine.json"
    prof.write_bytes(dumps_profile(msgspec.structs.replace(load_profile("h100"), name="my-h100")))
    mine = tmp_path / "mine-plan.json"
    assert cli("plan", str(src), "--device", str(prof), "-o", str(mine)).returncode == 0
    r = cli("simulate", str(mine))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"parastream: {mine}: made for device 'my-h100', which is neither a shipped profile "
        "nor a profile file beside the plan: name its profile file with --device"]
    assert "simulated on my-h100" in cli("simulate", str(mine), "--device", str(prof)).stdout
    # a profile of that name beside the plan (the demo's folder, `calibrate -o` next to it)
    (tmp_path / "beside.json").write_bytes(prof.read_bytes())
    r = cli("simulate", str(mine))
    assert r.returncode == 0 and "simulated on my-h100" in r.stdout
    assert f"simulated on {tmp_path / 'beside.json'}, the profile 'my-h100' beside" in r.stderr
    # the same profile saved with sorted keys ("schema" past the first 4 kB) is found too,
    # and a copy of it is no doubt; a different profile of that name is
    import json

    raw = json.loads(prof.read_text())
    raw["description"] = "a long note on where this calibration was made. " * 100
    (tmp_path / "beside.json").write_text(json.dumps(raw, sort_keys=True, indent=1))
    assert raw["schema"] not in (tmp_path / "beside.json").read_text()[:4096]
    (tmp_path / "copy.json").write_text(json.dumps(raw))
    assert cli("simulate", str(mine)).returncode == 0
    raw["launch_overhead_us"] = raw["launch_overhead_us"] * 2
    (tmp_path / "other.json").write_text(json.dumps(raw))
    r = cli("simulate", str(mine))
    assert r.returncode == 2 and "3 profiles named 'my-h100' beside the plan" in r.stderr


def _plan_beside_profile(tmp_path, name: str):
    """(model file, profile file, plan file, the plan command's run): prolog planned on
    h100's profile renamed ``name``, the plan saved beside the profile."""
    import msgspec

    from parastream.device.profile import dumps_profile

    src = tmp_path / "prolog.json"
    src.write_bytes(dumps(prolog()))
    prof = tmp_path / "calibrated.json"
    prof.write_bytes(dumps_profile(msgspec.structs.replace(load_profile("h100"), name=name)))
    plan = tmp_path / "plan.json"
    r = cli("plan", str(src), "--device", str(prof), "--format", "json", "-o", str(plan))
    assert r.returncode == 0, r.stderr
    return src, prof, plan, r


def test_a_profile_beside_the_plan_goes_before_a_shipped_one_of_its_name(tmp_path):
    # a calibration renamed "cpu" by hand was simulated on the shipped cpu profile
    _, _, plan, r = _plan_beside_profile(tmp_path, "cpu")
    planned = json.loads(r.stdout)["candidates"][0]["estimate"]["wall_us"]
    r = cli("simulate", str(plan), "--format", "json")
    assert r.returncode == 0 and "calibrated.json, the profile 'cpu' beside" in r.stderr
    rows = {row["plan"]: row["wall_us"] for row in json.loads(r.stdout)["rows"]}
    assert round(planned, 3) in {round(w, 3) for w in rows.values()}


def test_a_broken_profile_beside_the_plan_is_named_and_a_failure_prints_one_line(tmp_path):
    import msgspec

    from parastream.device.profile import dumps_profile

    src, prof, plan, _ = _plan_beside_profile(tmp_path, "mine")
    # the profile beside the plan breaks: the error says why it was passed over
    raw = json.loads(prof.read_text())
    raw["memory_bandwidth_gbps"] = -1
    prof.write_text(json.dumps(raw))
    r = cli("simulate", str(plan))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "passed over" in r.stderr and "calibrated.json" in r.stderr
    assert "memory_bandwidth_gbps" in r.stderr
    # a plan for a shipped profile's name runs on that one, and says what it passed over
    shipped = tmp_path / "shipped-plan.json"
    assert cli("plan", str(src), "--device", "h100", "-o", str(shipped)).returncode == 0
    r = cli("simulate", str(shipped))
    assert r.returncode == 0 and "simulated on the shipped profile 'h100'" in r.stderr
    assert "passed over beside the plan" in r.stderr and "calibrated.json" in r.stderr
    # a good profile beside it, but the plan's model is gone: the error alone, no
    # "simulated on" line before it
    prof.write_bytes(dumps_profile(msgspec.structs.replace(load_profile("h100"), name="mine")))
    src.unlink()
    r = cli("simulate", str(plan))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "beside the plan" not in r.stderr


def test_a_plan_without_its_schema_key_is_simulated_as_a_plan(tmp_path):
    # analyze --plan and emit read it as a plan; simulate took it for a graph
    src = tmp_path / "prolog.json"
    src.write_bytes(dumps(prolog()))
    plan = tmp_path / "plan.json"
    assert cli("plan", str(src), "--device", "h100", "--format", "json",
               "-o", str(plan)).returncode == 0
    doc = json.loads(plan.read_text())
    del doc["schema"]
    plan.write_text(json.dumps(doc))
    r = cli("simulate", str(plan), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rows"]
    # one bare candidate is a plan too (plan.io.loads): it names no model, and says so
    plan.write_text(json.dumps(doc["candidates"][0]))
    r = cli("simulate", str(plan), "--device", "h100")
    assert r.returncode == 2 and "does not say which model" in r.stderr, r.stderr
    r = cli("simulate", str(src), "--streams", "")
    assert r.returncode == 2 and "--streams" in r.stderr and "empty" in r.stderr


def test_a_profile_calibrated_on_a_busy_machine_is_warned_of_where_it_is_used(tmp_path):
    """calibrate keeps its busy-machine warning in the profile's sources; graph, plan and
    simulate repeat it on stderr whenever they predict from that profile."""
    import msgspec

    from parastream.device.profile import dumps_profile

    base = load_profile("cpu")
    busy = msgspec.structs.replace(base, name="busy-cpu", sources={
        **base.sources, "warning": "calibrated on a busy machine: other tasks took half the "
                                   "cores during 80% of the calibration"})
    prof = tmp_path / "busy.json"
    prof.write_bytes(dumps_profile(busy))
    src = tmp_path / "prolog.json"
    src.write_bytes(dumps(prolog()))
    for cmd in (["simulate", str(src), "--streams", "1,2"], ["plan", str(src)], ["graph", str(src)]):
        r = subprocess.run([sys.executable, "-m", "parastream", *cmd, "--device", str(prof)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stderr.startswith("parastream: warning: device profile 'busy-cpu': calibrated "
                                   "on a busy machine"), (cmd, r.stderr)


def test_a_shape_sweep_says_when_the_model_ignores_a_flag():
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-m", "parastream", "simulate", "two_chains", "--batch",
                        "1,2", "--streams", "1,2", "--format", "json"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ignored"] == ["two_chains ignores --batch: the same graph for every value"]
    r = subprocess.run([sys.executable, "-m", "parastream", "simulate", "llama_layer", "--scale",
                        "tiny", "--seq", "16,32", "--streams", "1,2", "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    assert json.loads(r.stdout)["ignored"] == []  # llama_layer takes --seq


def test_simulate_plan_keeps_its_baseline_and_reads_the_assignment(tmp_path):
    """An emit audit: a plan cut to one multi-stream candidate was its own 1.00x baseline;
    a candidate whose `streams` field was edited to 1 became the baseline; a plan saved
    with sorted keys was taken for a graph; stream 2**63 crashed the simulator."""
    src, plan = _prolog_plan(tmp_path)
    full = json.loads(plan.read_text())
    multi = next(c for c in full["candidates"] if len(set(c["assignment"].values())) > 1)

    def rows(doc: dict, name: str) -> list[dict]:
        path = tmp_path / name
        path.write_text(json.dumps(doc, sort_keys=name.startswith("sorted")))
        r = cli("simulate", str(path), "--format", "json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["rows"]

    whole = {r["streams"]: r for r in rows(full, "sorted.json")}
    one = dict(full, candidates=[multi], recommended=multi["name"])
    got = rows(one, "one.json")
    assert [r["plan"] for r in got] == ["single", multi["name"]]
    assert got[0]["wall_us"] == whole[1]["wall_us"]
    assert got[1]["speedup"] == pytest.approx(got[0]["wall_us"] / got[1]["wall_us"], rel=1e-3)
    edited = json.loads(json.dumps(full))
    next(c for c in edited["candidates"] if c["name"] == multi["name"])["streams"] = 1
    assert [r["plan"] for r in rows(edited, "edited.json") if r["streams"] == 1] == [
        whole[1]["plan"]]
    huge = json.loads(json.dumps(one))
    op = next(iter(huge["candidates"][0]["assignment"]))
    huge["candidates"][0]["assignment"][op] = 2 ** 63
    (tmp_path / "huge.json").write_text(json.dumps(huge))
    r = cli("simulate", str(tmp_path / "huge.json"))
    assert r.returncode == 2 and "stream ids run from 0 to" in r.stderr and "Traceback" not in r.stderr


def test_a_sweep_row_is_the_best_within_that_many_streams():
    # a budget of k streams allows every plan of fewer: the 3- and 4-stream rows were the
    # planner's best at exactly that cap (4799 and 4772 us), slower than its 2-stream plan
    # (4460 us) -- the README's own example
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-m", "parastream", "simulate", "moe_layer", "--scale",
                        "7b", "--device", "ascend910b", "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    walls = [row["wall_us"] for row in rows]
    assert [row["streams"] for row in rows] == [1, 2, 3, 4]
    assert walls == sorted(walls, reverse=True)
    assert all(row["plan_streams"] <= row["streams"] for row in rows)
    # asked for 1 and 3 only: the 3-stream budget's best uses 2, and 2 is recommended
    r = subprocess.run([sys.executable, "-m", "parastream", "simulate", "moe_layer", "--scale",
                        "7b", "--device", "ascend910b", "--streams", "1,3", "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    doc = json.loads(r.stdout)
    assert doc["rows"][1]["plan_streams"] == 2 and doc["recommended_streams"] == 2


def test_a_zoo_model_too_large_to_build_is_one_line():
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-m", "parastream", "simulate", "two_microbatch_prefill",
                        "--scale", "tiny", "--batch", "100000000", "--seq", "100000000"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    assert "cannot build 'two_microbatch_prefill' at these shapes" in r.stderr
