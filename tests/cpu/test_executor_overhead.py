"""The executor's own costs for the cpu profile (parastream.cpu.overhead)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parastream.device.profile import load_profile
from parastream.cpu.overhead import measure_executor_overhead, per_op_cost

us = st.floats(min_value=0.0, max_value=1e4, allow_nan=False)


@given(us, us, us)
def test_per_op_cost_is_the_larger_remainder_and_never_negative(chain, own, eager):
    got = per_op_cost(chain, own, eager)
    assert got >= 0.0
    assert got >= chain - own and got >= chain - eager
    assert got in (0.0, chain - own, chain - eager)


def test_per_op_cost_falls_back_on_the_executors_extra_over_eager():
    # op rates timed apart came out above the whole slope (a busy CI calibration)
    assert per_op_cost(8.0, 9.5, 5.0) == pytest.approx(3.0)
    # the usual case: in-model ops cost more than eager's difference says
    assert per_op_cost(8.0, 2.0, 5.0) == pytest.approx(6.0)


def test_measured_per_op_cost_stays_positive_when_op_rates_overshoot():
    pytest.importorskip("torch")
    # a profile whose rates are 1000x too slow: every op's own estimate exceeds the
    # chain's slope, so only the executor's measured extra over eager mode is left
    cpu = load_profile("cpu")
    slow = msgspec.structs.replace(
        cpu, op_rates={}, memory_bandwidth_gbps=cpu.memory_bandwidth_gbps / 1000,
        peak_tflops={u: {d: v / 1000 for d, v in r.items()} for u, r in cpu.peak_tflops.items()})
    ov = measure_executor_overhead(quick=True, rounds=1, profile=slow)
    assert ov["per_op_us"] > 0
    assert ov["per_op_us"] == pytest.approx(ov["chain_op_us"] - ov["eager_op_us"])
    assert ov["eager_op_us"] > 0
    assert 0.0 <= ov["op_inside_us"] <= ov["per_op_us"]


def test_calibrate_cpu_warns_before_and_during_a_busy_calibration(monkeypatch):
    import time

    from parastream.cpu import busy as cal
    from parastream.cpu import overhead

    monkeypatch.setattr(overhead, "_calibrate_cpu",
                        lambda quick, name: time.sleep(0.5) or {"sources": {}})
    monkeypatch.setattr(cal, "_others_running", lambda: 64)  # every core taken, throughout
    notes: list[str] = []
    profile = overhead.calibrate_cpu(quick=True, warn=notes.append)
    assert len(notes) == 2
    assert "other task(s) are running" in notes[0]                # before it starts
    assert "during 100% of the calibration" in notes[1]           # and while it ran
    # and the profile keeps what it was told, for the commands that predict from it
    assert profile == {"sources": {"warning": "calibrated on a busy machine: "
                                              + "; ".join(notes)}}
    monkeypatch.setattr(cal, "_others_running", lambda: 0)
    notes.clear()
    assert overhead.calibrate_cpu(quick=True, warn=notes.append) == {"sources": {}}
    assert notes == []                                            # quiet: nothing to say
