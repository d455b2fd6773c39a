"""The layers of the package, enforced with import-linter: no module imports a layer above
its own.

From the top: the command line (``cli``, ``__main__``), the library API (``api``), the
orchestration behind each command (``workflow``), the cpu backend's own package (``cpu``:
the layers below reach it only through registries that load it by name), calibration (it
drives the runtime and the planner), the emitter and the pipeline, the runtime (streams on
real devices), the renderers and the simulator, the planner, the model graph with the
built-in models, and at the bottom the device profiles and the profiler timelines beside
the shared helpers (atomic output, errors, Markdown text). Torch is imported only where a
model is built, imported or run (``tests/test_code_shape.py`` checks the analysis layers).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: top to bottom; "|" separates siblings that must not import each other, ":" siblings
#: that may
LAYERS = (
    "parastream.__main__",
    "parastream.cli",
    "parastream.api",
    "parastream.workflow",
    "parastream.cpu",
    "parastream.calibrate",
    "parastream.emit | parastream.pipeline | parastream.decode",
    "parastream.runtime",
    "parastream.report | parastream.sim",
    "parastream.plan",
    "parastream.zoo : parastream.graph",
    "parastream.device | parastream.timeline",
    "parastream.atomic | parastream.mdtext | parastream.plugin",
    "parastream.errors",
)

CONTRACT = "\n".join([
    "[importlinter]",
    "root_package = parastream",
    "include_external_packages = False",
    "",
    "[importlinter:contract:layers]",
    "name = parastream layers: nothing imports a layer above its own",
    "type = layers",
    "layers =",
    *(f"    {layer}" for layer in LAYERS),
    "",
])


def lint(config: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe, "import-linter is a test dependency (pip install -e '.[test]')"
    return subprocess.run([exe, "--config", str(config), "--no-cache"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def test_no_module_imports_a_layer_above_its_own(tmp_path: Path):
    config = tmp_path / "importlinter.ini"
    config.write_text(CONTRACT)
    r = lint(config)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 kept, 0 broken" in r.stdout


def test_every_top_level_module_has_a_layer():
    listed = {m.strip() for layer in LAYERS for m in layer.replace(":", "|").split("|")}
    found = {f"parastream.{p.stem if p.is_file() else p.name}"
             for p in (ROOT / "src" / "parastream").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__")
             or (p.is_dir() and (p / "__init__.py").exists())}
    assert found == listed


@pytest.mark.parametrize("upward", ["from parastream.workflow import plan as _p",
                                    "from parastream import cli as _c"])
def test_the_contract_catches_an_upward_import(tmp_path: Path, upward: str):
    """A probe module in the timeline layer that imports a higher layer breaks the
    contract (the probe lives in a copy of the package, never in the source tree)."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "parastream", copy / "parastream",
                    ignore=shutil.ignore_patterns("__pycache__", "data"))
    (copy / "parastream" / "timeline" / "probe.py").write_text(upward + "\n")
    config = tmp_path / "importlinter.ini"
    config.write_text(CONTRACT)
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    r = subprocess.run([exe, "--config", str(config), "--no-cache"], capture_output=True,
                       text=True, cwd=tmp_path, timeout=300,
                       env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "parastream.timeline.probe" in r.stdout
