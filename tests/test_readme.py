"""The README's Python API example runs as written: its code block, against the README's
own two-branch model file, in a fresh interpreter, returns the types and values it names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"


def _python_block(holding: str) -> str:
    """The first ```python code block of README.md whose text contains ``holding``."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    found = [b for b in blocks if holding in b]
    assert found, f"README.md: no ```python block holding {holding!r}"
    return found[0]


#: What the example's results must be, checked after it ran (names from the example).
CHECKS = """
import json
assert isinstance(a, ps.Analysis), type(a)
assert abs(a.summary["median_parallelism"] - 1.044) < 0.01, a.summary
assert isinstance(g, ps.GraphResult), type(g)
assert len(g.to_dict()["parallel_points"]) == 1, g.to_dict()["parallel_points"]
assert isinstance(p, ps.PlanResult), type(p)
names = [c.name for c in p.candidates]
assert p.recommended.name in names and any(n.endswith("/side-serial") for n in names), names
assert json.loads(open("plan.json", "rb").read())["schema"] == "parastream.plan/1"
assert isinstance(s, ps.Simulation), type(s)
assert s.rows and s.rows[0]["wall_us"] > 0, s.rows
assert isinstance(e, ps.EmitResult), type(e)
assert e.side_streams and "class MultiStream" in e.source, e.source[:400]
compile(e.source, "emitted.py", "exec")
assert isinstance(r, ps.RunResult), type(r)
doc = r.to_dict()
assert doc["schema"] == "parastream.run/1" and doc["candidates"], doc
assert all(c["outputs_ok"] for c in doc["candidates"]), doc["candidates"]
assert r.recommendation, r.recommendation
print("README example OK")
"""


def test_readme_api_example_runs(tmp_path: Path) -> None:
    """The API block runs from a folder holding the README's model file, the trace path
    pointed at this checkout's tests/data; every result is the type its comment names."""
    model = _python_block("# my_model.py")
    assert "def make(" in model, "README.md: the model example has no make() factory"
    (tmp_path / "my_model.py").write_text(model, encoding="utf-8")
    example = _python_block("from parastream import api as ps")
    for call in ("ps.analyze(", "ps.graph(", "ps.plan(", "ps.simulate(", "ps.emit(", "ps.run("):
        assert call in example, f"README.md: the API example no longer calls {call}...)"
    example = example.replace('"tests/data/', f'"{ROOT.as_posix()}/tests/data/')
    script = tmp_path / "example.py"
    script.write_text(example + CHECKS, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, f"README API example failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    assert "README example OK" in out.stdout
