"""The cuda calibration's code path, run on the host (no GPU here): the profile it writes
loads, carries the measured executor costs and rates, and names what was measured."""

from __future__ import annotations

import subprocess
import sys

import msgspec
import pytest

from parastream.device.profile import load_profile, loads_profile
from parastream.calibrate.device import calibrate_device, shipped_base


def test_shipped_base_from_the_name_torch_reports():
    assert shipped_base("NVIDIA H200") == "h200"
    assert shipped_base("NVIDIA H100 80GB HBM3") == "h100"
    assert shipped_base("NVIDIA GeForce RTX 4090") is None  # none shipped: FALLBACK's used
    assert shipped_base("cpu") is None  # never the host's profile for a GPU


def test_a_calibration_is_named_after_the_device_not_the_fallback():
    from parastream.device.profile import is_shipped
    from parastream.calibrate.device import profile_stem

    assert profile_stem("NVIDIA H200") == "h200"
    assert profile_stem("NVIDIA H100 80GB HBM3") == "h100"
    assert profile_stem("NVIDIA A100-SXM4-80GB") == "a100-sxm4-80gb"
    assert not is_shipped(profile_stem("NVIDIA A100-SXM4-80GB") + "-calibrated")


def test_calibrated_profile_keeps_the_base_and_puts_the_measured_figures_in():
    prof = calibrate_device("cpu", quick=True, name="test-calibrated", base="h200",
                            matmul_n=128, copy_mib=4)
    p = loads_profile(msgspec.json.encode(prof))  # a valid parastream.device/1 profile
    base = load_profile("h200")
    assert p.name == "test-calibrated" and p.kind == "gpu"
    assert p.hw_queues == base.hw_queues and p.cores == base.cores  # not measured on a host
    # the executor's host cost replaces the shipped guess; one op costs more than nothing
    assert p.launch_overhead_us > 0 and p.launch_overhead_us != base.launch_overhead_us
    assert p.run_overhead_us >= 0  # an intercept: 0 when the slope takes it all (noise)
    for dtype in ("fp32", "bf16", "fp16"):
        assert 0 < p.peak_tflops["cube"][dtype] != base.peak_tflops["cube"][dtype]
    assert p.peak_tflops["vector"] == base.peak_tflops["vector"]  # kept, and said so
    assert p.memory_bandwidth_gbps > 0
    for key in ("launch_overhead_us", "run_overhead_us", "memory_bandwidth_gbps"):
        assert p.sources[key].startswith("measured")
    assert "shipped profile 'h200'" in p.sources["calibration"]


def test_calibrate_device_cuda_without_a_gpu_is_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a cuda device is here")
    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, "-m", "parastream", "calibrate", "--device", "cuda",
                        "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and "no cuda device" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()
