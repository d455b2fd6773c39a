"""The profiles' graph-mode figure: ``graph_dispatch_us`` with its source."""

from __future__ import annotations

import json

import pytest

from parastream.device.profile import _builtin_dir, list_profiles, load_profile, loads_profile
from parastream.errors import InputError


def test_accelerator_profiles_carry_a_sourced_graph_dispatch_cost():
    for name in list_profiles():
        p = load_profile(name)
        if p.kind == "cpu":
            # the cpu backend runs no captured graphs: no figure, and graph mode is refused
            assert p.graph_dispatch_us is None
            continue
        assert p.graph_dispatch_us is not None and 0 < p.graph_dispatch_us < p.launch_overhead_us
        assert p.sources["graph_dispatch_us"].strip()
    # Ascend: one scheduler sweep per task; CUDA graphs: a public measurement
    assert "sweep" in load_profile("ascend910b").sources["graph_dispatch_us"]
    assert "ocannl" in load_profile("h100").sources["graph_dispatch_us"]


def _raw(**change) -> bytes:
    raw = json.loads((_builtin_dir() / "h100.json").read_bytes())
    raw.update(change)
    return json.dumps(raw).encode()


def test_graph_dispatch_needs_a_source_and_may_not_be_negative():
    raw = json.loads(_raw())
    del raw["sources"]["graph_dispatch_us"]
    with pytest.raises(InputError, match="no source given for graph_dispatch_us"):
        loads_profile(json.dumps(raw).encode(), "p.json")
    with pytest.raises(InputError, match="graph_dispatch_us must be zero or positive"):
        loads_profile(_raw(graph_dispatch_us=-1.0), "p.json")
    raw = json.loads(_raw())
    del raw["graph_dispatch_us"], raw["sources"]["graph_dispatch_us"]
    assert loads_profile(json.dumps(raw).encode(), "p.json").graph_dispatch_us is None
