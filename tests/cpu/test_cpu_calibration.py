"""``parastream calibrate --quick``: measures this CPU and writes a loadable profile."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parastream.calibrate import profile
from parastream.cpu import busy as host
from parastream.cpu import calibrate as cal
from parastream.cpu import op_rates, timing
from parastream.cpu.cost import op_rate_key, rate_variant


def test_measurements_are_positive():
    assert cal.measure_matmul("fp32", 128, 0.02) > 0
    assert cal.measure_vector(1 << 12, 0.02) > 0
    assert cal.measure_bandwidth(8, 0.02) > 0
    assert 0 < cal.measure_task_overhead(50) < 100_000
    assert 0 < cal.measure_call_overhead(1000) < 100
    assert cal.measure_sweep(2, 100) > 0
    assert host.cpu_count() >= 1
    rates, streams, cache = cal.measure_dram(4, 0.02)
    assert rates["linear"] > 0 and rates["add"] > 0
    assert 1.0 <= streams <= host.cpu_count() and cache >= 0


def test_cli_quick_writes_a_loadable_profile(tmp_path):
    out = tmp_path / "cpu.json"
    # two calibrations, merged into one profile of their medians
    r = subprocess.run([sys.executable, "-m", "parastream", "calibrate", "--quick", "-o", str(out),
                        "--name", "ci-cpu", "--repeat", "2"], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stderr
    assert "2 calibrations" in r.stderr and "executor per op" in r.stderr
    doc = json.loads(out.read_text())
    assert json.loads(r.stdout) == doc                # printed and written
    assert doc["schema"] == "parastream.device/1" and doc["kind"] == "cpu"
    assert doc["name"] == "ci-cpu"
    assert doc["cores"]["cube"] == host.cpu_count()
    assert doc["peak_tflops"]["cube"]["fp32"] > 0 and doc["memory_bandwidth_gbps"] > 0
    assert doc["launch_overhead_us"] > 0
    # with torch: measured op rates and the cpu backend's own costs (what run/demo predict with)
    assert set(doc["op_rates"]) == set(op_rates._op_cases())
    assert doc["run_overhead_us"] >= 0 and "executor" in doc["sources"]["launch_overhead_us"]
    assert "intercept" in doc["sources"]["run_overhead_us"]
    # the streams' own costs, and the memory system's, for the simulator
    assert doc["event_wake_us"] >= 0 and doc["stream_overhead_us"] >= 0
    assert doc["view_us"] >= 0 and "folded views" in doc["sources"]["view_us"]
    assert 1.0 <= doc["memory_streams"] <= doc["cores"]["cube"] and doc["cache_bytes"] >= 0
    assert isinstance(doc["parallel_gemv"], bool)
    if doc["cores"]["cube"] > 1:
        assert "intra-op thread" in doc["sources"]["parallel_gemv"]
    assert doc["op_rates"]["linear"]["dram_gbps"] > 0 and doc["op_rates"]["add"]["dram_gbps"] > 0
    assert doc["cold_after_us"] >= 0 and "rms_norm" in doc["sources"]["cold_after_us"]
    assert all(r["cold_1_us"] >= 0 and r["cold_all_us"] >= 0 for r in doc["op_rates"].values())
    # (a busy machine adds sources["warning"], which is no figure's source)
    assert all(v.startswith("measured by parastream calibrate on ")
               for k, v in doc["sources"].items() if k != "warning")
    assert "median of 2 calibrations" in doc["description"]
    assert "executor per op" in doc["sources"]["repeat"]
    from parastream.device.profile import load_profile

    p = load_profile(str(out))
    assert p.name == "ci-cpu" and p.peak("cube", "fp32") == doc["peak_tflops"]["cube"]["fp32"]


def test_cli_output_that_is_a_directory_fails_before_measuring(tmp_path):
    for target, why in ((tmp_path, "it is a directory"), (f"{tmp_path}/", "it is a directory"),
                        (tmp_path / "x" / "y.json", "no directory")):
        r = subprocess.run([sys.executable, "-m", "parastream", "calibrate", "-o", str(target)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and why in r.stderr, r.stderr
        assert "malloc" not in r.stderr  # refused before the calibration began
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("count", ["0", "11"])
def test_cli_repeat_out_of_range_is_an_input_error(tmp_path, count):
    out = tmp_path / "cpu.json"
    r = subprocess.run([sys.executable, "-m", "parastream", "calibrate", "--repeat", count, "-o",
                        str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and not out.exists()
    assert r.stderr.strip() == f"parastream: --repeat must be between 1 and 10, got {count}"


@pytest.mark.parametrize("name", ["cpu", "Host", "H100", "ascend-910b"])
def test_cli_name_of_a_shipped_profile_is_refused(tmp_path, name):
    # a plan records its device by name: the calibration was later taken for the shipped one
    out = tmp_path / "cpu.json"
    r = subprocess.run([sys.executable, "-m", "parastream", "calibrate", "--name", name, "-o",
                        str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and not out.exists() and r.stderr.count("\n") == 1
    assert "is a shipped profile's name" in r.stderr and "malloc" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "parastream", "calibrate", "-o", ""],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "-o/--output must name a file" in r.stderr


def _shipped_cpu() -> dict:
    from importlib import resources

    return json.loads((resources.files("parastream.device") / "profiles" / "cpu.json").read_text())


def _scaled(profile: dict, factor: float) -> dict:
    """``profile`` with every float leaf times ``factor`` (texts and ints kept)."""
    if isinstance(profile, dict):
        return {k: _scaled(v, factor) for k, v in profile.items()}
    if isinstance(profile, list):
        return [_scaled(v, factor) for v in profile]
    if isinstance(profile, float):
        return profile * factor
    return profile


def _leaves(profile, path=()):
    if isinstance(profile, dict):
        for k, v in profile.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(profile, list):
        for i, v in enumerate(profile):
            yield from _leaves(v, path + (i,))
    else:
        yield path, profile


def _measured(base: dict, per_op: float, wake: float, curve: list) -> dict:
    p = json.loads(json.dumps(base))
    p.update(launch_overhead_us=per_op, event_wake_us=wake, run_overhead_us=10.0 + per_op,
             cold_curve=curve, cold_after_us=5000.0 if curve else 0.0,
             cache_bytes=int(per_op * 1000))
    p["op_rates"] = {"add": {"metric": "bytes", "fixed_1_us": per_op / 2,
                             "fixed_all_us": per_op, "rate_1": 50.0, "rate_all": 90.0}}
    p["sources"] = dict(p["sources"], launch_overhead_us=f"measured by parastream calibrate on "
                        f"2026-01-01: per op {per_op}")
    return p


def test_median_profile_keeps_each_figure_median_and_states_the_spread():
    base = _shipped_cpu()
    runs = [_measured(base, 6.5, 66.0, [[80.0, 0.1], [120.0, 0.1]]),
            _measured(base, 2.6, 52.0, [[79.0, 0.07], [110.0, 0.09]]),
            _measured(base, 2.9, 45.0, [[75.0, 0.075], [120.0, 0.091]])]
    merged = profile.median_profile(runs)
    assert merged["launch_overhead_us"] == 2.9 and merged["event_wake_us"] == 52.0
    assert merged["run_overhead_us"] == 12.9
    assert merged["cache_bytes"] == 2900 and isinstance(merged["cache_bytes"], int)
    assert merged["cold_curve"] == [[79.0, 0.075], [120.0, 0.091]]  # point by point
    assert merged["op_rates"]["add"]["fixed_all_us"] == 2.9
    # one slow calibration (6.5 us per op) does not pull the profile
    assert "executor per op 2.9 us (2.6-6.5)" in merged["sources"]["repeat"]
    assert "event wake-up 52 us (45-66)" in merged["sources"]["repeat"]
    assert "median spread" in merged["sources"]["repeat"] and "add" in merged["sources"]["repeat"]
    # the texts are the calibration nearest the median's, which quote its own figures
    assert merged["sources"]["launch_overhead_us"].endswith("per op 2.9")
    assert "calibration 3's" in merged["sources"]["repeat"]
    assert "median of 3 calibrations" in merged["description"] and "2.9 us per op" in merged[
        "description"]
    profile.dumps(merged)  # a valid profile
    assert profile.median_profile(runs[:1]) is runs[0]
    with pytest.raises(ValueError):
        profile.median_profile([])


def test_median_profile_takes_the_common_length_of_cold_curves():
    base = _shipped_cpu()
    runs = [_measured(base, 3.0, 50.0, []),  # idles came out of order: no curve
            _measured(base, 3.1, 50.0, [[80.0, 0.1], [120.0, 0.2]]),
            _measured(base, 3.2, 50.0, [[90.0, 0.3], [130.0, 0.4]])]
    assert profile.median_profile(runs)["cold_curve"] == [[85.0, 0.2], [125.0, 0.3]]
    # most calibrations found idling costs nothing: the curve of the one that did goes too
    runs[2] = _measured(base, 3.2, 50.0, [])
    merged = profile.median_profile(runs)
    assert merged["cold_after_us"] == 0 and merged["cold_curve"] == []


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.25, 4.0), min_size=1, max_size=6))
def test_median_profile_figures_lie_between_the_calibrations(factors):
    base = _measured(_shipped_cpu(), 3.0, 50.0, [[80.0, 0.1], [120.0, 0.2]])
    runs = [_scaled(base, f) for f in factors]
    merged = profile.median_profile(runs)
    leaves = [dict(_leaves(r)) for r in runs]
    for path, value in _leaves(merged):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        got = [lv[path] for lv in leaves if path in lv]
        # 4 significant figures, as every profile stores its numbers
        assert min(got) * (1 - 1e-3) - 1e-9 <= value <= max(got) * (1 + 1e-3) + 1e-9, path
    if len(set(factors)) == 1:  # the same calibration N times: the same numbers
        first = dict(_leaves(runs[0]))
        assert all(v == pytest.approx(first[p], rel=1e-3) for p, v in _leaves(merged)
                   if isinstance(v, float))
    profile.dumps(merged)


def test_cli_unwritable_output_is_an_input_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "parastream", "calibrate", "--quick", "-o",
                        str(tmp_path / "missing" / "cpu.json")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2
    assert r.stderr.startswith("parastream: ") and "cannot write" in r.stderr
    assert "Traceback" not in r.stderr


def test_fit_recovers_a_line_and_clamps_its_fixed_part():
    fixed, rate = op_rates._fit((1e6, 12.0), (1e8, 1002.0))  # t = 2 + work / 100e3
    assert abs(fixed - 2.0) < 1e-6 and abs(rate - 100.0) < 1e-6
    fixed, rate = op_rates._fit((1e6, 5.0), (1e8, 4.0))       # noise: the big one ran faster
    assert fixed == 0.0 and rate > 0
    fixed, _ = op_rates._fit((1e6, 1.0), (1e8, 1000.0))       # the line crosses below zero
    assert fixed == 0.0
    # a knee's low line when its lower case timed slower than its middle one: flat at
    # about the middle case's time, not through the origin (a tiny op would cost ~0)
    from parastream.device.profile import OpRate

    fixed, rate = op_rates._fit((8e3, 2.5), (5e5, 2.0), flat=True)
    low = OpRate("bytes", fixed, fixed, rate, rate)
    assert 1.9 < low.duration_us(8e3, 1, 2) < low.duration_us(5e5, 1, 2) + 1e-9 <= 2.0 + 1e-9
    assert op_rates._fit((1e6, 12.0), (1e8, 1002.0), flat=True) == op_rates._fit((1e6, 12.0), (1e8, 1002.0))


def _imported(fn, name: str, op_type: str):
    """The op of ``op_type`` that a module calling ``fn()`` imports to."""
    import torch

    from parastream.graph.torch_import import import_runnable

    class One(torch.nn.Module):
        def forward(self, dummy):
            return fn() + 0 * dummy.sum()

    g = import_runnable(One().eval(), (torch.zeros(1),), name=name).graph
    return next(o for o in g.ops if o.type == op_type)


def _counted(op, metric: str) -> float:
    """An imported op's work as a rate of ``metric`` counts it."""
    return op.flops if metric == "flops" else op.bytes_read + op.bytes_written


def test_op_case_work_is_counted_like_the_importer_counts_it():
    """A rate measured on a case applies to imported ops only if both count work alike."""
    import pytest

    pytest.importorskip("torch")
    cases = op_rates._op_cases()
    for name, (metric, case) in cases.items():
        for large in (False, True):
            fn, work, read = case(large)
            op_type, _, layout = name.partition(".")
            op = _imported(fn, name, op_type)
            assert _counted(op, metric) == pytest.approx(work, rel=1e-6), (name, large)
            assert op.bytes_read == pytest.approx(read, rel=1e-6), (name, large)
            # and the cost model picks this case's rate for the op it imports to
            assert op_rate_key(op.type, op.resource, cases, rate_variant(op.meta, op)) \
                == name, (name, layout, op.meta)


def test_third_cases_are_counted_like_the_importer_counts_them():
    import pytest

    pytest.importorskip("torch")
    cases = op_rates._op_cases()
    for name, (fn, work, read) in op_rates._third_cases().items():
        metric, case = cases[name]
        op = _imported(fn, name, name.partition(".")[0])
        assert _counted(op, metric) == pytest.approx(work, rel=1e-6)
        assert op.bytes_read == pytest.approx(read)
        # a layout variant's third case is on that layout (the rate it extends)
        assert op_rate_key(op.type, op.resource, cases, rate_variant(op.meta, op)) == name
        small, large = (case(big)[1] for big in (False, True))
        assert work not in (small, large)
        # the element-wise ones below torch's grain (run serially), as tiny zoo ops are
        if not name.startswith("conv2d"):
            assert work < small and op.outputs[0].shape and \
                math.prod(op.outputs[0].shape) <= 1024


def test_ops_are_timed_where_the_executor_runs_them():
    """All cores: on the calling thread with that many threads (stream 0 and single-stream
    plans run there), its own count given back; fewer: on a thread of their own."""
    import threading

    import pytest

    torch = pytest.importorskip("torch")
    cores = host.cpu_count()
    before = torch.get_num_threads()
    here = timing._on_executor_thread(
        lambda: (threading.get_ident(), torch.get_num_threads(), torch.is_grad_enabled()),
        cores)
    assert here == (threading.get_ident(), cores, False)
    assert torch.get_num_threads() == before
    if cores > 1:
        ident, n, _ = timing._on_executor_thread(
            lambda: (threading.get_ident(), torch.get_num_threads(), 0), 1)
        assert ident != threading.get_ident() and n == 1


def test_op_rates_are_measured_for_every_case():
    import pytest

    pytest.importorskip("torch")
    rates = op_rates.measure_op_rates(quick=True)
    assert set(rates) == set(op_rates._op_cases())
    for name, r in rates.items():
        assert r["rate_1"] > 0 and r["rate_all"] > 0
        assert r["fixed_1_us"] >= 0 and r["fixed_all_us"] >= 0
        # a third case gives a knee at the middle of the three sizes, a low line below it
        third = op_rates._third_cases().get(name)
        if third:
            works = sorted([third[1]] + [op_rates._op_cases()[name][1](big)[1]
                                         for big in (False, True)])
            assert r["knee_work"] == pytest.approx(works[1], rel=1e-3)
            assert r["low_rate_1"] > 0 and r["low_rate_all"] > 0
        else:
            assert "knee_work" not in r


def test_cold_ramp_passes_through_half_the_longest_idles_extra():
    import pytest

    ms = op_rates.IDLE_MS
    # extra growing linearly with idle time: half of the last is at half the longest idle
    assert op_rates.cold_ramp_us(ms, [10.0 * t for t in ms]) == pytest.approx(2e3 * ms[-1] / 2)
    # a step from 0 to 100 us between 0.5 and 1 ms: half way at 0.75 ms
    step = [0.0 if t < 1.0 else 100.0 for t in ms]
    assert op_rates.cold_ramp_us(ms, step) == pytest.approx(1500.0)
    # no measurable cost of idling (or a faster op after idling): no ramp
    assert op_rates.cold_ramp_us(ms, [0.5] * len(ms)) == 0.0
    assert op_rates.cold_ramp_us(ms, [-3.0] * len(ms)) == 0.0


def test_cold_after_is_measured_and_op_rates_carry_cold_costs():
    import pytest

    pytest.importorskip("torch")
    after, curve = op_rates.measure_cold(reps=3)
    assert 0.0 <= after <= 2e3 * op_rates.IDLE_MS[-1]
    # the curve: one point per short idle (or none when idling cost nothing), idles
    # ascending from about the nominal ones, shares non-decreasing within 0..1
    assert len(curve) in (0, len(op_rates.SHORT_IDLE_MS))
    idles, shares = [i for i, _ in curve], [s for _, s in curve]
    assert idles == sorted(idles) and shares == sorted(shares)
    assert all(0.0 <= s <= 1.0 for s in shares)
    assert all(i >= 1e3 * ms for i, ms in zip(idles, op_rates.SHORT_IDLE_MS))
    for r in op_rates.measure_op_rates(quick=True).values():
        assert r["cold_1_us"] >= 0 and r["cold_all_us"] >= 0


def test_cold_line_splits_the_extra_into_code_and_data():
    import pytest

    # extra 20 us reading 1 MB and 120 us reading 11 MB: 10 us per MB (100 GB/s) on top
    # of 10 us at no bytes
    fixed, gbps = op_rates.cold_line(1e6, 11e6, 20.0, 120.0)
    assert fixed == pytest.approx(10.0) and gbps == pytest.approx(100.0)
    # an extra that does not grow with the bytes is all code: the small size's
    assert op_rates.cold_line(1e6, 11e6, 30.0, 25.0) == (30.0, 0.0)


def test_a_busy_machine_is_named_before_calibrating(monkeypatch):
    def others(*counts):
        it = iter(counts)
        return lambda: next(it)

    monkeypatch.setattr(host, "_others_running", others(2, 3, 2))
    note = host.busy_note(2, samples=3)
    assert note is not None and "2 other task(s) are running on 2 core(s)" in note
    monkeypatch.setattr(host, "_others_running", others(0, 2, 0))  # the median: quiet
    assert host.busy_note(2, samples=3) is None
    monkeypatch.setattr(host, "_others_running", others(None))     # no /proc here
    assert host.busy_note(2, samples=3) is None


def test_others_running_leaves_out_this_process_own_threads(monkeypatch):
    import builtins
    import io
    import os
    import threading

    import pytest

    from parastream.cpu.busy import _others_running

    if not os.path.isdir("/proc/self/task"):
        pytest.skip("no /proc here")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: io.StringIO(
        "9.5 9.5 9.5 3/412 999\n") if path == "/proc/loadavg" else real_open(path, *a, **k))
    stop = threading.Event()

    def spin():  # a busy thread of this process is not "other work"
        while not stop.is_set():
            pass

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    try:
        # 3 runnable now (whatever the load average), two of them ours (this thread
        # reading, the spinning one)
        counts = [_others_running() for _ in range(5)]
    finally:
        stop.set()
        t.join()
    assert max(counts) <= 1


def test_busy_watch_names_work_that_runs_during_the_calibration():
    import subprocess
    import sys
    import time

    from parastream.cpu.busy import BusyWatch, _others_running

    if _others_running() is None:
        import pytest

        pytest.skip("no /proc/loadavg here")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.3)  # the interpreters start
        with BusyWatch(2, every_s=0.02) as watch:
            time.sleep(0.4)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert len(watch.samples) >= 5
    assert watch.busy_share() > 0.25
    note = watch.note()
    assert note is not None and "calibrate again on a quiet machine" in note
    quiet = BusyWatch(64)  # on 64 cores two tasks are not half of them
    quiet.samples = list(watch.samples)
    assert quiet.note() is None
    assert BusyWatch(2).note() is None  # no samples: nothing to say


def test_cli_keeps_a_busy_warning_in_the_profile(tmp_path, monkeypatch, capsys):
    """What the calibration warned of travels with the profile it wrote."""
    import argparse

    from parastream.cli import zoo as cli_zoo
    from parastream.cpu import overhead

    def fake(quick, name, warn):  # one calibration that found the machine busy
        warn("other tasks took at least half the 2 core(s) during 60% of the calibration")
        return json.loads((Path(cal.__file__).parent.parent / "device" / "profiles"
                           / "cpu.json").read_text())

    monkeypatch.setattr(overhead, "_watched_calibration", fake)
    out = tmp_path / "p.json"
    args = argparse.Namespace(device="cpu", name="cpu-calibrated", repeat=1, output=str(out), quick=True,
                              malloc="system")
    assert cli_zoo.cmd_calibrate(args) == 0
    doc = json.loads(out.read_text())
    assert doc["sources"]["warning"].startswith("calibrated on a busy machine: other tasks")
    assert "parastream calibrate: other tasks took at least half" in capsys.readouterr().err


def test_median_profile_takes_the_majoritys_yes_or_no():
    base = _shipped_cpu()
    runs = [dict(base, parallel_gemv=v) for v in (True, False, True)]
    assert profile.median_profile(runs)["parallel_gemv"] is True
    runs = [dict(base, parallel_gemv=v) for v in (False, True, False)]
    assert profile.median_profile(runs)["parallel_gemv"] is False
