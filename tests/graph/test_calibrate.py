"""``parastream calibrate --quick``: measures this CPU and writes a loadable profile."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from parastream.graph import calibrate as cal


def test_measurements_are_positive():
    assert cal.measure_matmul("fp32", 128, 0.02) > 0
    assert cal.measure_vector(1 << 12, 0.02) > 0
    assert cal.measure_bandwidth(8, 0.02) > 0
    assert 0 < cal.measure_task_overhead(50) < 100_000
    assert 0 < cal.measure_call_overhead(1000) < 100
    assert cal.measure_sweep(2, 100) > 0
    assert cal.cpu_count() >= 1


def test_cli_quick_writes_a_loadable_profile(tmp_path):
    out = tmp_path / "cpu.json"
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "parastream", "calibrate", "--quick", "-o", str(out),
                        "--name", "ci-cpu"], capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    assert elapsed < 30          # ~3-5 s alone; generous for a busy 2-core CI machine
    doc = json.loads(out.read_text())
    assert json.loads(r.stdout) == doc                # printed and written
    assert doc["schema"] == "parastream.device/1" and doc["kind"] == "cpu"
    assert doc["name"] == "ci-cpu"
    assert doc["cores"]["cube"] == cal.cpu_count()
    assert doc["peak_tflops"]["cube"]["fp32"] > 0 and doc["memory_bandwidth_gbps"] > 0
    assert doc["launch_overhead_us"] > 0
    assert all(v.startswith("measured by parastream calibrate on ") for v in doc["sources"].values())
    from parastream.device.profile import load_profile

    p = load_profile(str(out))
    assert p.name == "ci-cpu" and p.peak("cube", "fp32") == doc["peak_tflops"]["cube"]["fp32"]


def test_cli_unwritable_output_is_an_input_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "parastream", "calibrate", "--quick", "-o",
                        str(tmp_path / "missing" / "cpu.json")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2
    assert r.stderr.startswith("parastream: ") and "cannot write" in r.stderr
    assert "Traceback" not in r.stderr
