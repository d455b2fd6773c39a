"""The library API: each function on real inputs returns what the command's --json prints
for the same input, and importing the API imports no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from parastream import api as ps
from parastream.cli import main

DATA = Path(__file__).parent / "data"
TRACE = DATA / "kineto" / "cuda_event_sync_multi_stream.json.gz"


def cli_json(capsys, *argv: str) -> dict:
    """What ``parastream ARGV`` prints on stdout, decoded (it must exit 0)."""
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def as_json(doc: dict) -> dict:
    """``doc`` as the CLI encodes it, decoded again (tuples become lists)."""
    return json.loads(msgspec.json.encode(doc))


def test_import_parastream_imports_no_torch():
    code = ("import sys; from parastream import api as ps; "
            "assert 'torch' not in sys.modules, 'torch'; "
            "assert callable(ps.plan) and callable(ps.graph); print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_the_api_functions_and_the_subpackages_keep_their_own_names():
    """``parastream.api.plan`` is the function, ``parastream.plan`` the package: loading
    every command module changes neither."""
    import types

    import parastream
    import parastream.emit
    import parastream.graph
    import parastream.pipeline
    import parastream.plan.io
    from parastream.cli import _parser

    _parser()  # loads every command module
    names = ("analyze", "graph", "plan", "simulate", "run", "emit", "demo", "pipeline",
             "decode")
    for name in names:
        fn = getattr(ps, name)
        assert callable(fn) and not isinstance(fn, types.ModuleType), name
        assert name in ps.__all__
    for name in ("graph", "plan", "emit", "pipeline"):
        assert isinstance(getattr(parastream, name), types.ModuleType), name
    assert parastream.plan.io.loads is not None


def test_analyze_a_real_capture_is_the_cli_json(capsys):
    result = ps.analyze(str(TRACE), jobs=1)
    assert isinstance(result, ps.Analysis)
    doc = result.to_dict()
    assert doc == cli_json(capsys, "analyze", str(TRACE), "--format", "json", "-j", "1",
                           "--no-progress")
    assert doc["schema"] == "parastream.analysis/1"
    assert list(doc) == ["schema", "captures", "sources", "summary"]
    (cap,) = result.captures
    assert cap["source"] == str(TRACE) and len(cap["streams"]) == len(doc["captures"][0]["streams"])
    assert result.summary["units"] == result.summary["units_analysed"] == 1
    assert result.ranks is None and result.triage is None and result.timelines == ()


def test_analyze_options_and_a_baseline_reach_the_document(capsys):
    base = DATA / "kineto" / "simple_add.json.gz"
    result = ps.analyze([TRACE], baseline=str(base), cold=0, max_points=3, jobs=1,
                        timelines=True)
    doc = result.to_dict()
    assert doc == cli_json(capsys, "analyze", str(TRACE), "--baseline", str(base), "--cold",
                           "0", "--max-points", "3", "--format", "json", "-j", "1",
                           "--no-progress")
    assert list(doc)[-2:] == ["triage", "baseline"] and doc["baseline"]["source"] == str(base)
    assert result.summary["dropped_cold"] == 0 and len(result.timelines) == 1
    assert all(len(c["parallel_points"]) <= 3 for c in result.captures)


def test_analyze_bad_input_is_an_input_error_naming_the_file(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ps.InputError) as exc:
        ps.analyze(str(missing))
    assert str(missing) in str(exc.value)
    with pytest.raises(ps.InputError, match="--cold must not be negative"):
        ps.analyze(str(TRACE), cold=-1)
    with pytest.raises(TypeError):
        ps.analyze(str(TRACE), no_such_option=1)


@pytest.fixture(scope="module")
def zoo():
    pytest.importorskip("torch")


def test_graph_of_a_zoo_model_is_the_cli_json(zoo, capsys):
    result = ps.graph("llama_layer", scale="tiny", device="h100")
    assert isinstance(result, ps.GraphResult)
    doc = as_json(result.to_dict())
    assert doc == cli_json(capsys, "graph", "llama_layer", "--scale", "tiny", "--device", "h100",
                           "--format", "json")
    assert doc["device"]["name"] == "h100" == result.profile.name
    assert doc["scale"] == "tiny" and doc["graph"]["ops"] == len(result.graph.ops) > 0


def test_plan_of_a_zoo_model_is_the_cli_json(zoo, capsys, tmp_path):
    result = ps.plan("llama_layer", scale="tiny", device="ascend910b")
    assert isinstance(result, ps.PlanResult)
    doc = result.to_dict()
    assert doc == cli_json(capsys, "plan", "llama_layer", "--scale", "tiny", "--device",
                           "ascend910b", "--format", "json")
    assert doc["schema"] == "parastream.plan/1" and doc["device"] == "ascend910b"
    assert doc["source"] == {"model": "llama_layer", "scale": "tiny", "phase": None}
    assert result.recommended.name == doc["recommended"]
    assert [c.name for c in result.candidates] == [c["name"] for c in doc["candidates"]]
    assert any(c.stream_count() > 1 for c in result.candidates)
    out = tmp_path / "plan.json"
    assert main(["plan", "llama_layer", "--scale", "tiny", "-o", str(out)]) == 0
    assert out.read_bytes() == result.to_json()


def test_plan_takes_a_graph_and_a_mapping(zoo):
    g = ps.graph("moe_layer", scale="tiny").graph
    result = ps.plan(g, mapping={"shared": 1}, max_streams=2)
    manual = next(c for c in result.candidates if c.algorithm == "manual")
    assert manual.stream_count() == 2 and result.doc.source == {}
    assert all(c.stream_count() <= 2 for c in result.candidates)
    with pytest.raises(ps.InputError, match="--max-streams must be at least 1"):
        ps.plan(g, max_streams=0)


def test_simulate_a_zoo_model_is_the_cli_json(zoo, capsys):
    result = ps.simulate("llama_layer", scale="tiny", streams=[1, 2], mode="graph")
    assert isinstance(result, ps.Simulation)
    doc = result.to_dict()
    assert as_json(doc) == cli_json(capsys, "simulate", "llama_layer", "--scale", "tiny",
                                    "--streams", "1,2", "--mode", "graph", "--format", "json")
    assert doc["schema"] == "parastream.simulation/1" and doc["mode"] == "graph"
    assert doc["device"] == "ascend910b" and doc["label"] == "simulated on ascend910b"
    assert [r["streams"] for r in result.rows] == [1, 2] == sorted(result.runs)
    assert result.rows[0]["speedup"] == 1.0
    assert "runs" not in doc and "notes" not in doc
    assert result.trace_run() is result.runs[2]


def test_simulate_a_plan_file_is_the_cli_json(zoo, capsys, tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_bytes(ps.plan("llama_layer", scale="tiny", device="h100").to_json())
    result = ps.simulate(str(plan_file))
    doc = as_json(result.to_dict())
    assert doc == cli_json(capsys, "simulate", str(plan_file), "--format", "json")
    assert doc["device"] == "h100"  # the plan's own device
    assert len(result.candidates) == len(json.loads(plan_file.read_text())["candidates"])


def test_simulate_a_shape_sweep_is_the_cli_json(zoo, capsys):
    result = ps.simulate("llama_layer", scale="tiny", streams="1,2", seq=[16, 32])
    assert isinstance(result, ps.ShapeSweep)
    doc = as_json(result.to_dict())
    assert doc == cli_json(capsys, "simulate", "llama_layer", "--scale", "tiny", "--streams",
                           "1,2", "--seq", "16,32", "--format", "json")
    assert doc["schema"] == "parastream.simulation-sweep/1"
    assert [r["seq"] for r in result.sweep] == [16, 32]


def test_simulate_bad_options_are_input_errors(zoo):
    with pytest.raises(ps.InputError, match="--jitter must be from 0 to 1"):
        ps.simulate("llama_layer", jitter=2)
    with pytest.raises(ps.InputError, match="--ge emulates"):
        ps.simulate("llama_layer", ge=True, mode="eager")
    with pytest.raises(ps.InputError, match="--streams wants stream counts"):
        ps.simulate("llama_layer", streams=[0])


def test_emit_a_plan_is_what_the_cli_writes(zoo, tmp_path, capsys):
    plan_file = tmp_path / "plan.json"
    plan_file.write_bytes(ps.plan("llama_layer", scale="tiny").to_json())
    result = ps.emit(str(plan_file), target="cuda", level="op")
    assert isinstance(result, ps.EmitResult)
    out = tmp_path / "forward.py"
    assert main(["emit", str(plan_file), "--target", "cuda", "--level", "op",
                 "-o", str(out)]) == 0
    assert out.read_text() == result.source
    assert result.to_dict()["target"] == "cuda" and result.level == "op"
    assert result.candidate == json.loads(plan_file.read_text())["recommended"]


def test_decode_is_the_cli_json_but_for_the_timings(tmp_path, capsys):
    """``ps.decode`` and ``parastream decode --json`` serve the same requests: the same
    settings, workload, token agreement and per-mode counts (timings differ run to run)."""
    pytest.importorskip("torch")
    result = ps.decode("tiny", "sequential,batch", workload=ps.WorkloadOptions(requests=4),
                       settings=ps.DecodeSettings(concurrency=2))
    assert isinstance(result, ps.DecodeResult)
    doc = result.to_dict()
    out = tmp_path / "decode.json"
    assert main(["decode", "--model", "tiny", "--modes", "sequential,batch", "--requests", "4",
                 "--concurrency", "2", "--json", str(out)]) == 0
    capsys.readouterr()
    cli = json.loads(out.read_text())
    for key in ("schema", "model", "settings", "workload", "agreement", "ended_early"):
        assert doc[key] == cli[key], key
    counts = ("mode", "requests", "finished", "failed", "tokens", "preemptions")
    assert [{k: m[k] for k in counts} for m in doc["modes"]] == \
        [{k: m[k] for k in counts} for m in cli["modes"]]
    assert doc["agreement"][0]["identical"] == 4
    with pytest.raises(ps.InputError, match="--concurrency"):
        ps.decode("tiny", "batch", settings=ps.DecodeSettings(concurrency=0))


def test_predict_decode_is_the_cli_json(tmp_path, capsys):
    """``ps.predict_decode`` and ``parastream decode --simulate --json`` predict the same
    sweep on the same profile (simulated: no timings differ)."""
    result = ps.predict_decode("7b", "ascend910b", "batch,batch+overlap",
                               workload=ps.WorkloadOptions(requests=8),
                               settings=ps.SweepSettings(concurrency=(1, 4), rates=(float("inf"),)))
    assert isinstance(result, ps.PredictResult)
    out = tmp_path / "predict.json"
    assert main(["decode", "--simulate", "--device", "ascend910b", "--modes",
                 "batch,batch+overlap", "--requests", "8", "--sweep", "1,4", "--rates", "inf",
                 "--json", str(out)]) == 0
    capsys.readouterr()
    assert as_json(result.to_dict()) == json.loads(out.read_text())
