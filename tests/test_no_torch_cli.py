"""The trace analyzer, planning from a graph JSON and the simulator work without torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).parents[1]

SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None  # any 'import torch' now fails
    sys.path.insert(0, {plan_tests!r})
    from test_candidates import moe
    from parastream.graph.ir import dumps
    from parastream.cli import main
    g, dur, _ = moe()
    for o in g.ops:
        o.flops = dur[o.name] * 1e9 if o.resource == "cube" else 0.0
        o.bytes_read = int(dur[o.name] * 1e6)
    open({graph!r}, "wb").write(dumps(g))
    rc = [main(["analyze", {trace!r}, "--format", "json", "-o", {out!r} + "/a.json"]),
          main(["plan", {graph!r}, "--device", "ascend910b", "--out", {out!r} + "/p.json"]),
          main(["simulate", {graph!r}, "--device", "ascend910b", "--format", "json"]),
          main(["graph", {graph!r}, "--format", "json", "-o", {out!r} + "/g.json"])]
    assert rc == [0, 0, 0, 0], rc
    assert "torch" not in {{k for k, v in sys.modules.items() if v is not None}}
    print("NO-TORCH-OK")
""")


def test_cli_without_torch(tmp_path):
    code = SCRIPT.format(plan_tests=str(ROOT / "tests" / "plan"), graph=str(tmp_path / "moe.json"),
                         trace=str(ROOT / "tests" / "data" / "kineto" / "simple_add.json.gz"),
                         out=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "NO-TORCH-OK" in r.stdout
    for f in ("a.json", "p.json", "g.json"):
        assert (tmp_path / f).stat().st_size > 0
