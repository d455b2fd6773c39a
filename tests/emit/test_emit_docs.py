"""docs/emit.md shows one module-level patch in full: the file ``parastream emit`` writes
for the commands at the top of the page, as a user reads it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

from parastream.cli import main  # noqa: E402

DOC = Path(__file__).resolve().parents[2] / "docs" / "emit.md"


def _line_free(text: str) -> str:
    """The text with the host's line number left out (``zoo.py:297`` -> ``zoo.py:N``)."""
    return re.sub(r"\.py:\d+\)", ".py:N)", text)


def test_the_documented_patch_is_what_emit_writes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "moe_layer", "--scale", "tiny", "--device", "ascend910b",
                 "-o", "plan.json"]) == 0
    assert main(["emit", "plan.json", "--target", "npugraph_ex", "-o", "moe_patch.py",
                 "--candidate", "side-serial"]) == 0
    capsys.readouterr()
    written = (tmp_path / "moe_patch.py").read_text()
    shown = DOC.read_text().split("## A module-level patch", 1)[1]
    shown = shown.split("```python\n", 1)[1].split("```", 1)[0]
    assert _line_free(shown) == _line_free(written)
    assert len(written.splitlines()) < 60
