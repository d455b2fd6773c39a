"""``parastream graph MODEL`` as a user types it: every format and every kind of bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import shapes
from parastream.graph.ir import SCHEMA, dumps


def run(*args: str, pre: str = "") -> subprocess.CompletedProcess:
    code = f"{pre}import sys; from parastream.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def moe_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("g") / "moe.json"
    f.write_bytes(dumps(shapes.moe_layer()))
    return f


def test_json_document(moe_file):
    r = run("graph", str(moe_file), "--format", "json", "--device", "ascend910b")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "parastream.graph-analysis/1"
    for key in ("ops", "edges", "modules", "module_edges", "parallel_points", "headroom",
                "verdicts", "shared_inputs", "op_dags"):
        assert key in doc
    assert {"work_us", "critical_path_us", "bound_speedup"} <= set(doc["headroom"])
    m = doc["modules"][0]
    assert {"module_id", "module_name", "module_type", "inputs", "outputs", "side_effect",
            "resource_hint"} <= set(m)
    e = doc["module_edges"][0]
    assert {"from", "to", "dependency_type", "reason"} <= set(e)
    p = doc["parallel_points"][0]
    assert isinstance(p["members"], list) and isinstance(p["join"], str)
    assert "bound_speedup" in p["headroom"] and p["branches"][p["dominating_branch"]]["dominator"]
    assert len(doc["ops"]) == 21 and doc["device"]["name"] == "ascend910b"


def test_md_text_mermaid_and_output_file(moe_file, tmp_path):
    r = run("graph", str(moe_file), "--format", "md")
    assert r.returncode == 0, r.stderr
    for heading in ("## Scope", "## Module table", "## Dependency table", "## Verdicts",
                    "## Module DAG", "## Operator DAGs of candidate modules",
                    "## Parallel points", "## Headroom"):
        assert heading in r.stdout
    assert "```mermaid\nflowchart LR" in r.stdout
    assert "| module_id | module_name | module_type | inputs | outputs | side_effect | " \
           "resource_hint |" in r.stdout
    r = run("graph", str(moe_file))
    assert r.returncode == 0 and "parallel points (2)" in r.stdout and "headroom" in r.stdout
    r = run("graph", str(moe_file), "--format", "mermaid", "--device", "h100")
    assert r.returncode == 0 and r.stdout.startswith("flowchart LR\n")
    out = tmp_path / "a.md"
    r = run("graph", str(moe_file), "--format", "md", "-o", str(out))
    assert r.returncode == 0 and r.stdout == "" and out.read_text().startswith("# Multi-stream")


def bad(*args, pre: str = "") -> str:
    r = run("graph", *args, pre=pre)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parastream: "), r.stderr
    return lines[0]


def _graph(tmp_path, ops, edges, name="g.json") -> str:
    f = tmp_path / name
    f.write_text(json.dumps({"schema": SCHEMA, "ops": [{"name": n, "type": "Add"} for n in ops],
                             "edges": [{"from": a, "to": b, "type": t} for a, b, t in edges]}))
    return str(f)


def test_cycle_dangling_and_unknown_type(tmp_path):
    f = _graph(tmp_path, ["a", "b"], [("a", "b", "data"), ("b", "a", "data")], "cyc.json")
    assert "cycle" in bad(f) and "cyc.json" in bad(f)
    assert "dangling, no op named 'zz'" in bad(_graph(tmp_path, ["a"], [("a", "zz", "data")]))
    assert "unknown dependency type 'after'" in bad(
        _graph(tmp_path, ["a", "b"], [("a", "b", "after")]))


def test_not_a_graph(tmp_path):
    f = tmp_path / "x.json"
    f.write_text('{"schema": "something/1"}')
    assert "expected 'parastream.graph/1'" in bad(str(f))
    f.write_text('{"schema": "parastream.graph-analysis/1"}')
    assert "analysis document" in bad(str(f))
    f.write_text("{broken")
    assert "invalid JSON" in bad(str(f))


def test_unknown_device(moe_file):
    assert "unknown device 'tpu'" in bad(str(moe_file), "--device", "tpu")


def test_model_import_without_torch_is_one_line():
    # graph JSON works without torch (test_no_torch); a zoo model says what it needs
    line = bad("moe_layer", pre="import sys; sys.modules['torch'] = None; ")
    assert "moe_layer" in line and "torch" in line


def test_untraceable_model_is_one_line(tmp_path):
    # data-dependent control flow: torch.export prints its partial graph to stderr and fx
    # refuses the branch; the user gets both reasons on one line and nothing else
    f = tmp_path / "branchy.py"
    f.write_text("import torch\n"
                 "class M(torch.nn.Module):\n"
                 "    def forward(self, x):\n"
                 "        if x.sum() > 0:\n"
                 "            return x.item()\n"
                 "        return x\n"
                 "def build():\n"
                 "    return M(), (torch.randn(3),)\n")
    line = bad(f"{f}:build")
    assert "cannot be traced (torch.export: " in line and "torch.fx: " in line


def test_a_graph_file_reports_its_own_scale_and_phase(tmp_path):
    # a docs audit: a decode fragment's md scope said "scale: small, phase: -"
    g = shapes.moe_layer()
    g.meta = {**g.meta, "phase": "decode"}
    f = tmp_path / "frag.json"
    f.write_bytes(dumps(g))
    r = run("graph", str(f), "--format", "md", "--device", "ascend910b")
    assert r.returncode == 0, r.stderr
    assert "- scale: -, phase: decode" in r.stdout
    doc = json.loads(run("graph", str(f), "--format", "json", "--device", "ascend910b").stdout)
    assert (doc.get("scale"), doc.get("phase")) == (None, "decode")
    r = run("graph", str(f), "--scale", "tiny")
    assert r.returncode == 2 and "a graph file has its own" in r.stderr


def test_a_graph_of_no_ops_says_so(tmp_path):
    from parastream.graph.ir import Graph, dumps

    src = tmp_path / "empty.json"
    src.write_bytes(dumps(Graph(name="empty", ops=[], edges=[])))
    r = subprocess.run([sys.executable, "-m", "parastream", "graph", str(src)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "the graph has no ops" in r.stderr
