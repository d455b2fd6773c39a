"""`parastream plan` end to end on a graph JSON (no torch needed)."""

from __future__ import annotations

import json
import subprocess
import sys

from parastream.graph.ir import dumps
from parastream.plan.io import loads

try:
    from .test_candidates import moe
except ImportError:
    from test_candidates import moe


def moe_json(tmp_path):
    g, dur, _ = moe()
    for o in g.ops:  # give the cost model something to estimate
        o.flops = dur[o.name] * 1e9 if o.resource == "cube" else 0.0
        o.bytes_read = int(dur[o.name] * 1e6)
    path = tmp_path / "moe.json"
    path.write_bytes(dumps(g))
    return path


def run(*args):
    return subprocess.run([sys.executable, "-m", "parastream", "plan", *args],
                          capture_output=True, text=True, timeout=120)


def test_plan_writes_json_and_markdown(tmp_path):
    src = moe_json(tmp_path)
    out, rep = tmp_path / "plan.json", tmp_path / "plan.md"
    r = run(str(src), "--device", "ascend910b", "--out", str(out), "--report", str(rep))
    assert r.returncode == 0, r.stderr
    assert "recommended" in r.stdout
    doc = loads(out.read_bytes())
    raw = json.loads(out.read_text())
    assert raw["schema"] == "parastream.plan/1"
    for c in raw["candidates"]:
        assert {"name", "algorithm", "streams", "assignment", "events", "strength", "switch",
                "estimate", "lints"} <= set(c)
    assert doc.parallel_points
    assert sum(1 for c in doc.candidates if c.parallel_point) >= 2
    md = rep.read_text()
    assert "```mermaid" in md and "not measured yet" in md and "6. **Measured overlap.**" in md


def test_manual_mapping_and_errors(tmp_path):
    src = moe_json(tmp_path)
    r = run(str(src), "--mapping", '{"shared": 1}', "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    manual = next(c for c in doc["candidates"] if c["algorithm"] == "manual")
    assert manual["assignment"]["shared_up"] == 1
    r = run(str(src), "--mapping", '{"nope": 1, "neither": 2}')
    assert r.returncode == 2 and "'nope'" in r.stderr and "'neither'" in r.stderr
    assert "Traceback" not in r.stderr
    bad = tmp_path / "cycle.json"
    g = json.loads(src.read_text())
    g["edges"].append({"from": "merge", "to": "x"})
    bad.write_text(json.dumps(g))
    r = run(str(bad))
    assert r.returncode == 2 and "cycle" in r.stderr and "Traceback" not in r.stderr
    for n in ("0", "-1"):
        r = run(str(src), "--max-streams", n)
        assert r.returncode == 2 and "--max-streams must be at least 1" in r.stderr, r.stderr


def test_a_file_that_is_neither_graph_json_nor_a_model_is_named_as_such(tmp_path):
    bad = tmp_path / "trace.json"
    bad.write_text("not json {")
    r = run(str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0
    assert str(bad) in r.stderr and "not a graph JSON file" in r.stderr


def test_outputs_are_checked_first_and_the_model_is_recorded_from_anywhere(tmp_path):
    """Both outputs are checked before either is written; the plan names its graph file by
    its absolute path, so ``simulate PLAN`` rebuilds it from another folder."""
    src = moe_json(tmp_path)
    good = tmp_path / "good.json"
    r = subprocess.run([sys.executable, "-m", "parastream", "plan", "moe.json", "--device",
                        "ascend910b", "--out", str(good), "--report",
                        str(tmp_path / "missing" / "r.md")], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and not good.exists()
    assert r.stderr.count("\n") == 1 and "missing/r.md: cannot write: no directory" in r.stderr
    r = subprocess.run([sys.executable, "-m", "parastream", "plan", "moe.json", "--device",
                        "ascend910b", "--out", str(good)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(good.read_text())
    assert doc["source"]["model"] == str(src)  # as typed: moe.json, in tmp_path
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sim = [sys.executable, "-m", "parastream", "simulate", str(good), "--device", "ascend910b"]
    r = subprocess.run(sim, capture_output=True, text=True, timeout=120, cwd=elsewhere)
    assert r.returncode == 0, r.stderr

    # simulate checks a plan as run and emit do: no prediction from an unsafe plan
    broken = json.loads(good.read_text())
    multi = next(c for c in broken["candidates"] if c["events"])
    multi["events"] = []
    bad = tmp_path / "broken.json"
    bad.write_text(json.dumps(broken))
    r = subprocess.run(sim[:4] + [str(bad)] + sim[5:], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "does not fit" in r.stderr and "broken.json" in r.stderr
    twice = json.loads(good.read_text())
    twice["candidates"][1]["name"] = twice["candidates"][0]["name"]
    bad.write_text(json.dumps(twice))
    r = subprocess.run(sim[:4] + [str(bad)] + sim[5:], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "candidate name(s) used twice" in r.stderr, r.stderr
    broken["candidates"] = []
    bad.write_text(json.dumps(broken))
    r = subprocess.run(sim[:4] + [str(bad)] + sim[5:], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "the plan has no candidates" in r.stderr
    for jitter in ("-5", "nan", "3"):
        r = subprocess.run(sim + [f"--jitter={jitter}"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 2 and "--jitter must be from 0 to 1" in r.stderr
    r = subprocess.run(sim + ["--trace", str(tmp_path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "is a directory" in r.stderr
    gz = tmp_path / "sim.json.gz"  # a .gz name is written gzipped, and analyze reads it
    r = subprocess.run(sim + ["--trace", str(gz)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and gz.read_bytes()[:2] == b"\x1f\x8b", r.stderr
    r = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(gz), "--format",
                        "json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["captures"], r.stderr


def test_an_empty_graph_or_negative_costs_are_one_line_errors(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"schema": "parastream.graph/1", "name": "e", "ops": [],
                                 "edges": []}))
    for cmd in ("plan", "simulate"):
        r = subprocess.run([sys.executable, "-m", "parastream", cmd, str(empty)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "the graph has no ops" in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1
    g = json.loads(moe_json(tmp_path).read_text())
    for field, value in (("flops", -1.0), ("bytes_read", -5), ("meta", {"dur_us": -3})):
        bad = json.loads(json.dumps(g))
        bad["ops"][0][field] = value
        path = tmp_path / "neg.json"
        path.write_text(json.dumps(bad))
        for cmd in ("graph", "plan"):
            r = subprocess.run([sys.executable, "-m", "parastream", cmd, str(path)],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 2 and "must not be negative" in r.stderr, (field, r.stderr)


def test_hand_edited_core_limits_are_refused_by_simulate_and_emit(tmp_path):
    # a docs audit: aicore_num -4 was a ValueError in simulate and limit_core_num(-4, -8)
    # in emitted code
    import pytest

    src = moe_json(tmp_path)
    good = tmp_path / "plan.json"
    assert run(str(src), "--device", "ascend910b", "--out", str(good)).returncode == 0
    doc = json.loads(good.read_text())
    multi = next(c for c in doc["candidates"] if len(set(c["assignment"].values())) > 1)
    doc["recommended"] = multi["name"]
    for limits, words in (({"1": {"aicore_num": -4}}, "aicore_num must be a whole number"),
                          ({"1": {"aicore_num": 4, "vectorcore_num": -1}}, "vectorcore_num"),
                          ({"²": {"aicore_num": 4}}, "no stream number"),
                          ({"1": {"aicore_num": 2.5}}, "aicore_num must be a whole number"),
                          ({"x": {"aicore_num": 4}}, "no stream number")):
        multi["core_limits"] = limits
        with pytest.raises(ValueError, match=words):
            loads(json.dumps(doc))
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(doc))
        for cmd in (["simulate", str(bad), "--device", "ascend910b"],
                    ["emit", str(bad), "--target", "torchair", "-o", str(tmp_path / "x.py")]):
            r = subprocess.run([sys.executable, "-m", "parastream", *cmd], capture_output=True,
                               text=True, timeout=120)
            assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
            assert words in r.stderr and "bad.json" in r.stderr
        assert not (tmp_path / "x.py").exists()
    multi["core_limits"] = {"1": {"aicore_num": 8, "reason": "kept"}}
    assert loads(json.dumps(doc)).candidate(multi["name"]).core_limits["1"]["aicore_num"] == 8
    # vectorcore_num 0: what torchair takes on the 910 (no separate vector cores)
    multi["core_limits"] = {"1": {"aicore_num": 8, "vectorcore_num": 0}}
    assert loads(json.dumps(doc)).candidate(multi["name"]).core_limits["1"]["vectorcore_num"] == 0


def test_max_streams_one_gives_only_single_stream_candidates(tmp_path):
    # the point candidates and critical-path always opened stream 1, and one was recommended
    src = moe_json(tmp_path)
    r = run(str(src), "--device", "ascend910b", "--max-streams", "1", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["recommended"] == "single"
    assert all(set(c["assignment"].values()) == {0} for c in doc["candidates"])
    two = json.loads(run(str(src), "--device", "ascend910b", "--max-streams", "2",
                         "--format", "json").stdout)
    assert max(len(set(c["assignment"].values())) for c in two["candidates"]) == 2
    r = run(str(src), "--max-streams", "2", "--mapping", '{"shared_up": 1, "gate": 2}')
    assert r.returncode == 2 and "3 streams, above --max-streams 2" in r.stderr


def test_an_output_over_an_input_or_another_output_is_refused(tmp_path):
    src = moe_json(tmp_path)
    before = src.read_bytes()
    plan = tmp_path / "plan.json"
    assert run(str(src), "--device", "ascend910b", "-o", str(plan)).returncode == 0
    plan_bytes = plan.read_bytes()
    cases = [
        ["plan", str(src), "-o", str(src)],
        ["plan", str(src), "-o", str(tmp_path / "x"), "--report", str(tmp_path / "x")],
        ["graph", str(src), "-o", str(src)],
        ["simulate", str(plan), "--trace", str(plan)],
        ["emit", str(plan), "--target", "cuda", "-o", str(plan)],
    ]
    for argv in cases:
        r = subprocess.run([sys.executable, "-m", "parastream", *argv], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (argv, r.stderr)
        assert r.stderr.count("\n") == 1, r.stderr
        assert "it is an input of this command" in r.stderr or "name the same file" in r.stderr
    assert src.read_bytes() == before and plan.read_bytes() == plan_bytes
    assert not (tmp_path / "x").exists()


def test_op_names_cannot_break_out_of_the_reports_mermaid_blocks(tmp_path):
    # a newline and a fence in an op name closed the ```mermaid block: the rest was raw HTML
    from markdown_it import MarkdownIt

    src = moe_json(tmp_path)
    g = json.loads(src.read_text())
    evil = "s\n```\n<img src=x onerror=a()>"  # within the 40 characters a label keeps
    for op in g["ops"]:
        if op["name"] == "shared_up":
            op["name"] = evil
    for e in g["edges"]:
        e["from"] = evil if e["from"] == "shared_up" else e["from"]
        e["to"] = evil if e["to"] == "shared_up" else e["to"]
    src.write_text(json.dumps(g))
    rep = tmp_path / "plan.md"
    r = run(str(src), "--device", "ascend910b", "--report", str(rep))
    assert r.returncode == 0, r.stderr
    page = MarkdownIt("commonmark").enable("table").render(rep.read_text())
    assert "<img" not in page
    graph_md = subprocess.run([sys.executable, "-m", "parastream", "graph", str(src), "--format",
                               "md"], capture_output=True, text=True, timeout=120).stdout
    assert "<img" not in MarkdownIt("commonmark").enable("table").render(graph_md)


def test_max_streams_is_a_cap_not_a_count():
    # --max-streams 3 offered matching on 3 streams (4799 us) over its 2-stream 4460 us
    import pytest

    pytest.importorskip("torch")
    best = {}
    for cap in ("2", "3", "4"):
        r = run("moe_layer", "--scale", "7b", "--device", "ascend910b", "--max-streams", cap,
                "--format", "json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        best[cap] = min(c["estimate"]["wall_us"] for c in doc["candidates"])
    assert best["2"] >= best["3"] >= best["4"]
    # a cap far past what the graph can use ends the search where it stops binding
    r = run("moe_layer", "--scale", "7b", "--device", "ascend910b", "--max-streams", "512",
            "--format", "json")
    assert min(c["estimate"]["wall_us"] for c in json.loads(r.stdout)["candidates"]) == best["4"]


def test_a_mapping_stream_must_be_a_stream_id(tmp_path):
    src = moe_json(tmp_path)
    for bad in ('{"shared": 99999999999999999999}', '{"shared": true}', '{"shared": -1}',
                '{"shared": 3000000000}'):
        r = run(str(src), "--mapping", bad)
        assert r.returncode == 2 and "--mapping" in r.stderr and "Traceback" not in r.stderr


def test_a_missing_graph_file_or_a_folder_is_named_as_such(tmp_path):
    r = run(str(tmp_path / "nope.json"))
    assert r.returncode == 2 and "nope.json: no such file" in r.stderr
    r = run(str(tmp_path))
    assert r.returncode == 2 and "a folder, not a model" in r.stderr
    src = moe_json(tmp_path)
    r = subprocess.run([sys.executable, "-m", "parastream", "simulate", str(src), "--batch",
                        "1,2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "a graph file's shapes are fixed" in r.stderr
