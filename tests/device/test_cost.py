"""The roofline cost model: bounds, block dims, core limiting, measured overrides."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from parastream.device import estimate, load_profile, normalize_dtype, with_cores
from parastream.graph.ir import Op, Tensor

A2 = load_profile("ascend910b")


def matmul(m, k, n, dtype="float16", **meta):
    return Op(f"mm{m}x{k}x{n}", "MatMul", resource="cube", flops=2.0 * m * k * n,
              bytes_read=2 * (m * k + k * n), bytes_written=2 * m * n,
              outputs=[Tensor([m, n], dtype)], meta=meta)


def test_dtype_names():
    assert normalize_dtype("torch.bfloat16") == "bf16"
    assert normalize_dtype("DT_FLOAT16") == "fp16"
    assert normalize_dtype("float8_e4m3fn") == "fp8"
    assert normalize_dtype("int64") == "fp32" and normalize_dtype(None) == "fp32"


def test_big_gemm_is_compute_bound_on_all_cores():
    c = estimate(matmul(4096, 4096, 4096), A2)
    assert c.bound == "compute" and c.block_dim == 24 and c.unit == "cube"
    assert c.dur_us == pytest_approx(2 * 4096 ** 3 / (280e6))


def pytest_approx(x):
    import pytest

    return pytest.approx(x, rel=1e-6)


def test_decode_gemv_is_memory_bound():
    c = estimate(matmul(1, 4096, 4096), A2)
    assert c.bound == "memory"
    assert c.dur_us == pytest_approx((2 * (4096 + 4096 * 4096) + 2 * 4096) / 1.6e6)


def test_tiny_op_is_launch_bound():
    op = Op("add", "Add", resource="vector", flops=16, bytes_read=64, bytes_written=32,
            outputs=[Tensor([16], "float16")])
    c = estimate(op, A2)
    assert c.bound == "launch" and c.block_dim == 1 and c.dur_us >= 1.0


def test_fewer_cores_take_longer():
    op = matmul(4096, 4096, 4096)
    full = estimate(op, A2)
    half = with_cores(op, A2, 12)
    assert half.block_dim == 12 and half.dur_us == pytest_approx(2 * full.dur_us)
    assert with_cores(full, A2, 12) == half  # scaling a cost equals re-estimating
    assert with_cores(full, A2, 48) == full  # more cores than it uses: no change


def test_measured_values_override():
    op = matmul(64, 64, 64, dur_us=30.0, block_dim=8)
    c = estimate(op, A2)
    assert (c.dur_us, c.block_dim, c.measured) == (30.0, 8, True)
    assert with_cores(op, A2, 4).dur_us == 60.0


def test_non_core_units():
    copy = Op("h2d", "MemCopy", resource="memory", bytes_read=16e6, bytes_written=16e6)
    c = estimate(copy, A2)
    assert c.block_dim == 0 and c.unit == "memory" and c.dur_us == pytest_approx(32e6 / 1.6e6)
    host = estimate(Op("py", "Python", resource="host"), A2)
    assert host.bound == "launch" and host.dur_us == A2.launch_overhead_us


def test_cpu_pays_the_hand_off_per_task():
    cpu = load_profile("cpu")
    c = estimate(matmul(8, 8, 8), cpu)
    assert c.dur_us >= cpu.launch_overhead_us and c.bound == "launch"


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 8192), k=st.integers(1, 8192), n=st.integers(1, 8192),
       cores=st.integers(1, 24), dev=st.sampled_from(["ascend910", "ascend910b", "h100", "cpu"]))
def test_roofline_properties(m, k, n, cores, dev):
    p = load_profile(dev)
    op = matmul(m, k, n)
    full = estimate(op, p)
    limited = with_cores(op, p, cores)
    assert 1 <= full.block_dim <= p.cores.cube
    assert limited.block_dim == min(full.block_dim, cores)
    assert limited.dur_us >= full.dur_us - 1e-9  # fewer cores never help
    # never faster than the compute or the memory roof at full occupancy
    assert full.dur_us >= max(full.compute_full_us, full.memory_full_us) - 1e-9


def test_cpu_intra_op_efficiency_scales_core_limited_ops():
    import msgspec

    from parastream.device.cost import estimate
    from parastream.device.profile import load_profile, loads_profile
    from parastream.graph.ir import Op

    base = msgspec.to_builtins(load_profile("cpu"))
    base["intra_op_efficiency"] = 0.5
    base["sources"]["intra_op_efficiency"] = "test"
    cpu = loads_profile(msgspec.json.encode(base))
    op = Op(name="mm", type="mm", resource="cube", flops=2e9)
    full = estimate(op, cpu)
    one = estimate(op, cpu, max_cores=1)
    launch = cpu.launch_overhead_us
    # one of two cores: 1.5x the all-core time (s(2) = 1.5), not 2x as with perfect scaling
    assert (one.dur_us - launch) == __import__("pytest").approx((full.dur_us - launch) * 1.5, rel=1e-6)
    base["intra_op_efficiency"] = 1.5
    with __import__("pytest").raises(Exception):
        loads_profile(msgspec.json.encode(base))


def test_scaling_a_cpu_cost_equals_re_estimating():
    import msgspec

    from parastream.device.cost import estimate, with_cores
    from parastream.device.profile import load_profile, loads_profile
    from parastream.graph.ir import Op

    base = msgspec.to_builtins(load_profile("cpu"))
    base["cores"] = {"cube": 8, "vector": 8}
    base["intra_op_efficiency"] = 0.5
    base["sources"]["intra_op_efficiency"] = "test"
    cpu = loads_profile(msgspec.json.encode(base))
    for op in (Op(name="mm", type="mm", resource="cube", flops=2e10, bytes_read=1 << 20),
               Op(name="add", type="add", resource="vector", flops=1e3, bytes_read=4096)):
        assert with_cores(estimate(op, cpu), cpu, 2) == with_cores(op, cpu, 2)
