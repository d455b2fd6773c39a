"""Core-limit facts live in the device profiles: the planner's C2 rung and emit's
limit_core_num read the same field."""

from __future__ import annotations

import pytest

from parastream.device.profile import load_profile
from parastream.emit.devices import core_limit
from parastream.plan.ladder import core_limit_support, supports_core_limits


@pytest.mark.parametrize("name, allowed", [("ascend910b", True), ("ascend910", False),
                                           ("h100", False), ("h200", False), ("cpu", False)])
def test_shipped_profiles_state_core_limits_with_a_source(name, allowed):
    facts = load_profile(name).core_limit
    assert facts is not None and facts.source  # stated, with where it is documented
    assert (facts.torchair or facts.npugraph_ex) is allowed
    assert supports_core_limits(core_limit_support(load_profile(name))) is allowed
    assert core_limit(name).allows("torchair") is facts.torchair
    assert core_limit(name).allows("npugraph_ex") is facts.npugraph_ex
    if allowed:
        assert facts.min_torch_npu  # npugraph_ex's per-stream limit needs a recent torch_npu


def test_a_profile_without_the_field_allows_none(tmp_path):
    import json
    from importlib import resources

    raw = json.loads((resources.files("parastream") / "device" / "profiles" /
                      "ascend910b.json").read_text(encoding="utf-8"))
    del raw["core_limit"]
    p = tmp_path / "npu.json"
    p.write_text(json.dumps(raw))
    assert load_profile(str(p)).core_limit is None
    assert not core_limit(str(p)).allows("torchair")
    assert not supports_core_limits(core_limit_support(load_profile(str(p))))
