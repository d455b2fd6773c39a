"""An op-level file for a graph with an opaque experts op (a Hugging Face MoE block) calls
the model's own submodule by its path, so it runs in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[test]')")

from parastream.cli import main  # noqa: E402

HF = Path(__file__).parent.parent / "graph" / "hf_models.py"


def test_op_level_file_with_an_opaque_experts_op_runs_elsewhere(tmp_path):
    plan = tmp_path / "plan.json"
    assert main(["plan", f"{HF}:qwen2_moe_block", "-o", str(plan)]) == 0
    multi = [c["name"] for c in json.loads(plan.read_text())["candidates"] if c["streams"] >= 2]
    out = tmp_path / "op.py"
    assert main(["emit", str(plan), "--target", "cuda", "--level", "op", "--candidate",
                 multi[0], "-o", str(out)]) == 0
    src = out.read_text()
    assert "m.get_submodule('experts')(" in src and "parastream.module_call" not in src
    # its own self-check, in a fresh interpreter: the stand-ins, bitwise against the module
    r = subprocess.run([sys.executable, str(out)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "outputs: bitwise equal to the original forward" in r.stdout
