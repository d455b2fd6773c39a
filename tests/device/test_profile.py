"""Device profiles: every shipped file loads, states its sources, and bad files are refused."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from parastream.device import (SCHEMA, dumps_profile, list_profiles, load_profile,
                               loads_profile)
from parastream.device.profile import SOURCED_KEYS
from parastream.errors import InputError


def test_shipped_profiles():
    assert {"ascend910", "ascend910b", "h100", "h200", "cpu"} <= set(list_profiles())
    for name in list_profiles():
        p = load_profile(name)
        assert p.schema == SCHEMA and p.name == name
        for key in SOURCED_KEYS:
            assert p.sources[key].strip(), (name, key)


def test_the_facts_users_rely_on():
    a910, a2 = load_profile("ascend910"), load_profile("ascend910b")
    assert a910.hw_queues == 4 and a910.cores.cube == 32
    assert (a2.cores.cube, a2.cores.vector, a2.max_streams) == (24, 48, 1984)
    assert not a2.shared_cores and a910.shared_cores
    h100, h200 = load_profile("h100"), load_profile("h200")
    assert h100.cores.cube == h200.cores.cube == 132
    assert h100.memory_bandwidth_gbps == 3350 and h200.memory_bandwidth_gbps == 4800
    assert h100.peak("cube", "fp16") == pytest.approx(989.4)
    assert "calibrate" in load_profile("cpu").description


def test_aliases_and_fallback_dtypes():
    assert load_profile("910B").name == load_profile("A2").name == "ascend910b"
    a910 = load_profile("ascend910")
    assert a910.peak("cube", "bf16") == a910.peak("cube", "fp16")  # no bf16 cube: fp16 rate
    assert a910.peak("cube", "fp32") <= a910.peak("cube", "fp16")


def test_file_round_trip(tmp_path):
    p = load_profile("h200")
    f = tmp_path / "mine.json"
    f.write_bytes(dumps_profile(p))
    assert json.loads(f.read_text())["schema"] == SCHEMA
    assert load_profile(str(f)) == p


def _raw(name="ascend910b") -> dict:
    return json.loads((resources.files("parastream.device") / "profiles" / f"{name}.json")
                      .read_text())


@pytest.mark.parametrize("change, words", [
    (lambda d: d.update(kind="tpu"), "kind"),
    (lambda d: d["cores"].update(cube=0), "positive"),
    (lambda d: d["sources"].pop("hw_queues"), "no source given for hw_queues"),
    (lambda d: d["peak_tflops"]["cube"].update(fp4=1.0), "unknown dtype"),
    (lambda d: d.update(schema="parastream.device/9"), "unsupported"),
    (lambda d: d.update(extra=1), "not a parastream device profile"),
    (lambda d: d.pop("memory_bandwidth_gbps"), "memory_bandwidth_gbps"),
    (lambda d: d.update(op_rates={"conv2d": {
        "metric": "flops", "fixed_1_us": 8.0, "fixed_all_us": 9.0, "rate_1": 100.0,
        "rate_all": 190.0, "knee_work": 1.2e6}}), "knee_work"),
    (lambda d: d.update(name=" "), "name must not be empty"),
    (lambda d: d.update(kind="cpu", memory_streams=50.0), "must not exceed the cores"),
    # absurd counts: a MemoryError sizing the simulator's queues, an endless cap search
    (lambda d: d.update(hw_queues=1_000_000_000), "hw_queues is 1000000000, past the 1024"),
    (lambda d: d["cores"].update(cube=10**12), "cores.cube is"),
    (lambda d: d.update(max_streams=10**9), "max_streams is"),
    (lambda d: d["cores"].update(cube=2**63), "cores.cube is 9223372036854775808"),
    # finite but huge: a wall of 1.7e301 us and numpy cast warnings
    (lambda d: d.update(launch_overhead_us=1e300), "launch_overhead_us is 1e\\+300, past the 1e\\+09 us"),
    (lambda d: d.update(memory_bandwidth_gbps=1e300), "memory_bandwidth_gbps is 1e\\+300"),
])
def test_bad_profiles_are_refused(change, words):
    d = _raw()
    change(d)
    with pytest.raises(InputError, match=words):
        loads_profile(json.dumps(d), "bad.json")


def test_unknown_name():
    with pytest.raises(InputError, match="unknown device 'tpu9'.*ascend910b"):
        load_profile("tpu9")
