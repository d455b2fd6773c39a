"""Behaviour is chosen by what a backend or a device profile declares, not by its name.

A backend declares :class:`~parastream.runtime.backend.Capabilities` (``host_threads``,
``timing_events``, ``torch_device`` ...); a device profile says ``on_host``. Code that asks
``device == "cpu"`` instead breaks for a backend registered under another name and hides
what the branch is about. This test reads every source line under ``src/parastream`` and
fails on a comparison with a device name (``cpu``, ``cuda``, ``npu``, ``gpu``) outside the
places where the name IS the thing compared: a torch device type (the profiler's
activities, the device module, a tensor's device), an emit target, a shipped profile's
file name, and the one property that derives ``on_host`` from a profile's kind.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "parastream"

_NAME = r"""["'](?:cpu|cuda|npu|gpu)["']"""
#: a comparison with a device name: ``x == "cpu"``, ``"cuda" != x``, ``x in ("cuda", "npu")``
COMPARISON = re.compile(rf"""(?:==|!=)\s*{_NAME}|{_NAME}\s*(?:==|!=)"""
                        rf"""|\bin\s+[(\[{{]\s*{_NAME}""")

#: package folders where comparisons of one variable are about something other than a
#: backend: emit's ``target`` is the generated code's platform (its torch API), not a device
#: run on; any other comparison there (a profile's kind) is scanned like the rest
ALLOWED_FOLDERS = {"emit/": ("target", "emit targets: the platform the generated code is "
                                       "written for")}

#: (path under src/parastream, text on the line) -> why the name is the thing compared
ALLOWED_LINES = {
    ("runtime/profiler.py", 'if device == "cuda":'):
        "the torch profiler's activities and synchronise are per torch device type",
    ("runtime/cuda.py", 'if device_type == "cuda":'):
        "the device module of a torch device type (torch.cuda)",
    ("runtime/cuda.py", 'if device_type == "npu":'):
        "the device module of a torch device type (torch.npu, after torch_npu)",
    ("graph/torch_import.py", 'main_device != "cpu" and devices == {"cpu"}'):
        "the torch device types of the traced program's tensors",
    ("graph/torch_import.py", 'if src == "cpu":'):
        "a copy's source tensor's torch device type",
    ("graph/torch_import.py", 'if dst == "cpu":'):
        "a copy's destination tensor's torch device type",
    ("calibrate/device.py", 'shipped_key(cand) != "cpu"'):
        "a shipped profile's file name: a GPU calibration never builds on the cpu profile",
    ("device/profile.py", 'return self.kind == "cpu"'):
        "DeviceProfile.on_host: the one place a profile's kind says it runs on the host",
    ("device/profile.py", 'return self.kind != "npu" or self.cores.cube == self.cores.vector'):
        "DeviceProfile.shared_cores: only Ascend parts have vector cores apart from cube cores",
}


def device_name_comparisons(rel: str, text: str) -> list[str]:
    """``rel:line: text`` of each line of source ``text`` (at ``rel`` under
    src/parastream) that compares with a device name and is not allowed."""
    exempt = [re.compile(rf"\b{var}\s*(?:==|!=|in\b)")
              for folder, (var, _) in ALLOWED_FOLDERS.items() if rel.startswith(folder)]
    allowed = [snippet for (path, snippet) in ALLOWED_LINES if path == rel]
    found = []
    for i, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if COMPARISON.search(code) and not any(snippet in line for snippet in allowed) \
                and not any(x.search(code) for x in exempt):
            found.append(f"{rel}:{i}: {line.strip()}")
    return found


@pytest.mark.parametrize("line", [
    'if device == "cpu":',
    '    lag = late_starts(m, plan) if self.s.device == "cpu" else {}',
    'timelines=device != "cuda")',
    'if device in ("cuda", "npu"):',
    "if kind == 'gpu':",
    'host_lock=profile.kind == "cpu",',
])
def test_the_scan_finds_a_comparison_with_a_device_name(line: str) -> None:
    assert device_name_comparisons("workflow/run.py", line + "\n")


@pytest.mark.parametrize("line", [
    'caps = backend_capabilities(device)',
    'if lane.kind == "copy":',
    'choices=("cpu", "cuda")',
    '# as on device == "cpu"',
    'if target == "cuda":',
])
def test_the_scan_passes_what_is_no_device_choice(line: str) -> None:
    rel = "emit/codegen.py" if "target" in line else "workflow/run.py"
    assert not device_name_comparisons(rel, line + "\n")


def test_emit_compares_its_target_and_nothing_else_by_name() -> None:
    assert not device_name_comparisons("emit/codegen.py", 'if target == "cuda":\n')
    assert device_name_comparisons("emit/devices.py", 'if prof.kind != "npu":\n')
    assert device_name_comparisons("emit/codegen.py", 'if device == "cpu":\n')


def test_behaviour_is_chosen_by_capabilities_not_device_names() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        found += device_name_comparisons(rel, path.read_text(encoding="utf-8"))
    assert not found, ("behaviour chosen by a device name; ask the backend's Capabilities "
                       "(backend_capabilities(name).host_threads, .torch_device, "
                       ".timing_events) or the profile's on_host, or add the line to "
                       "ALLOWED_LINES with why the name is the thing compared:\n  "
                       + "\n  ".join(found))
