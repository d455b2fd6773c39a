"""The cpu backend's cost model (parastream.cpu.cost): op rates of a calibrated cpu profile
in place of the roofline, DRAM floors, serial GEMVs and small ops, folded views, cold costs."""

from __future__ import annotations

import msgspec
from hypothesis import example, given
from hypothesis import strategies as st

from parastream.device import estimate, load_profile, with_cores
from parastream.graph.ir import Op, Tensor


def matmul(m, k, n, dtype="float16", **meta):
    return Op(f"mm{m}x{k}x{n}", "MatMul", resource="cube", flops=2.0 * m * k * n,
              bytes_read=2 * (m * k + k * n), bytes_written=2 * m * n,
              outputs=[Tensor([m, n], dtype)], meta=meta)


def pytest_approx(x):
    import pytest

    return pytest.approx(x, rel=1e-6)


# ---------------------------------------------------------------- CPU op rates (calibrated)

def cpu_profile(**rates):
    """The shipped cpu profile with op rates: name -> (metric, fixed_1, fixed_all, r1, rall)."""
    import msgspec

    from parastream.device.profile import OpRate

    base = load_profile("cpu")
    table = {k: OpRate(*v) for k, v in rates.items()}
    return msgspec.structs.replace(base, op_rates=table)


def test_op_rate_interpolates_between_one_thread_and_all():
    from parastream.device.profile import OpRate

    r = OpRate("flops", 2.0, 10.0, 100.0, 300.0)  # GFLOP/s
    assert r.duration_us(1e6, 1, 5) == pytest_approx(2.0 + 1e6 / 100e3)
    assert r.duration_us(1e6, 5, 5) == pytest_approx(10.0 + 1e6 / 300e3)
    mid = r.duration_us(1e6, 3, 5)  # half way in threads: rate 200, fixed 6
    assert mid == pytest_approx(6.0 + 1e6 / 200e3)
    assert r.duration_us(1e6, 99, 5) == r.duration_us(1e6, 5, 5)  # capped at all cores


def test_cpu_estimate_uses_the_op_rate_of_its_type_or_family():
    prof = cpu_profile(linear=("flops", 3.0, 5.0, 50.0, 90.0),
                       add=("bytes", 1.0, 1.0, 20.0, 30.0),
                       cat=("bytes", 2.0, 2.0, 10.0, 12.0))
    cores = prof.cores.cube
    lin = Op("l", "linear", resource="cube", flops=1e8, bytes_read=10, bytes_written=10,
             outputs=[Tensor([4096, 4096], "float32")])
    c = estimate(lin, prof)
    assert c.rate_key == "linear" and c.block_dim == cores
    assert c.dur_us == pytest_approx(5.0 + 1e8 / 90e3 + prof.launch_overhead_us)
    bmm = Op("b", "bmm", resource="cube", flops=1e8, outputs=[Tensor([4096, 4096], "float32")])
    assert estimate(bmm, prof).rate_key == "linear"          # matmul family
    neg = Op("n", "neg", resource="vector", bytes_read=4000, bytes_written=4000)
    assert estimate(neg, prof).rate_key == "add"              # other element-wise work
    cat = Op("c", "cat", resource="memory", bytes_read=8000, bytes_written=8000)
    cc = estimate(cat, prof)
    assert cc.rate_key == "cat" and cc.block_dim == 0 and cc.unit == "memory"
    conv = Op("v", "conv2d", resource="cube", flops=1e6)
    assert estimate(conv, prof).rate_key == ""                # family not measured: roofline
    ar = Op("a", "all_reduce", resource="comm", bytes_read=1000, bytes_written=1000)
    assert estimate(ar, prof).rate_key == ""                  # no family stands in for a link
    # a collective calibrate measured (the one-rank all_reduce this process runs): its
    # own rate, on no core of the pool
    rated = cpu_profile(add=("bytes", 1.0, 1.0, 20.0, 30.0),
                        all_reduce=("bytes", 16.0, 17.0, 50.0, 75.0))
    rc = estimate(ar, rated)
    assert rc.rate_key == "all_reduce" and rc.unit == "comm" and rc.block_dim == 0
    assert rc.dur_us == pytest_approx(17.0 + 2000 / 75e3 + rated.launch_overhead_us)
    other = Op("g", "all_gather", resource="comm", bytes_read=1000, bytes_written=1000)
    assert estimate(other, rated).rate_key == ""
    host = Op("h", "div", resource="host", bytes_read=4000, bytes_written=4000)
    hc = estimate(host, prof)                                  # the host is this CPU
    assert hc.rate_key == "add" and hc.unit == "host" and hc.dur_us > prof.launch_overhead_us


def test_a_channels_last_op_takes_its_layout_rate_where_one_was_measured():
    """CPU pooling on NHWC data is another kernel (10-20x faster here than NCHW): an op
    the importer marks channels_last is costed by the ``.channels_last`` rate, its family's
    included, and falls back to the plain rate where no such rate was measured."""
    prof = cpu_profile(max_pool2d=("flops", 0.0, 50.0, 0.3, 0.5),
                       **{"max_pool2d.channels_last": ("flops", 3.0, 50.0, 6.0, 9.0)})
    nchw = Op("p", "max_pool2d", resource="vector", flops=1e7)
    nhwc = Op("q", "max_pool2d", resource="vector", flops=1e7,
              meta={"memory_format": "channels_last"})
    avg = Op("a", "adaptive_avg_pool2d", resource="vector", flops=1e7,
             meta={"memory_format": "channels_last"})
    assert estimate(nchw, prof).rate_key == "max_pool2d"
    assert estimate(nhwc, prof).rate_key == "max_pool2d.channels_last"
    assert estimate(avg, prof).rate_key == "max_pool2d.channels_last"   # the pool family
    assert estimate(nhwc, prof).dur_us < estimate(nchw, prof).dur_us / 10
    plain = cpu_profile(max_pool2d=("flops", 0.0, 50.0, 0.3, 0.5))
    assert estimate(nhwc, plain).rate_key == "max_pool2d"


def test_a_matmul_of_a_few_rows_takes_the_few_rows_rate():
    """A decode linear of 2 to FEW_ROWS rows runs far below the FLOP line of bigger
    products: costed by ``linear.few_rows`` where it was measured; one row stays a GEMV,
    more rows the plain line."""
    from parastream.cpu.cost import FEW_ROWS, left_rows, rate_variant

    import msgspec

    prof = msgspec.structs.replace(   # in cache: no DRAM floor
        cpu_profile(linear=("flops", 3.0, 5.0, 90.0, 160.0),
                    **{"linear.few_rows": ("flops", 2.0, 4.0, 25.0, 40.0)}),
        cache_bytes=16 << 20)
    w = Tensor([512, 512], "float32")

    def lin(rows, typ="linear"):
        x = Tensor([rows, 512], "float32")
        nbytes = 4 * (rows * 512 + 512 * 512)
        return Op("l", typ, resource="cube", flops=2.0 * rows * 512 * 512,
                  bytes_read=nbytes, bytes_written=4 * rows * 512, inputs=[x, w],
                  outputs=[Tensor([rows, 512], "float32")])

    two = estimate(lin(2), prof)
    assert two.rate_key == "linear.few_rows"
    assert two.dur_us == pytest_approx(4.0 + 2.0 * 2 * 512 * 512 / 40e3 + prof.launch_overhead_us)
    assert estimate(lin(FEW_ROWS, "mm"), prof).rate_key == "linear.few_rows"
    assert estimate(lin(1), prof).rate_key == "linear"            # a GEMV: its own path
    assert estimate(lin(FEW_ROWS + 1), prof).rate_key == "linear"
    assert left_rows(lin(3)) == 3 and rate_variant(None, lin(3)) == "few_rows"
    # decode attention written as matmul, batched on both sides: eight 1-row products
    # against activations, not a few rows reading a weight (as bmm)
    scores = Op("s", "matmul", resource="cube", flops=2.0 * 8 * 64 * 128,
                inputs=[Tensor([1, 8, 1, 64], "float32"), Tensor([1, 8, 64, 128], "float32")])
    assert left_rows(scores) == 0 and estimate(scores, prof).rate_key == "linear"
    assert rate_variant({"memory_format": "channels_last"}, lin(3)) == "channels_last"
    plain = cpu_profile(linear=("flops", 3.0, 5.0, 90.0, 160.0))
    assert estimate(lin(2), plain).rate_key == "linear"           # not measured: the plain line


def test_an_op_rate_with_a_knee_takes_its_low_line_below_it():
    """A convolution's time is no straight line in its FLOPs: below ``knee_work`` the
    low line through the small and middle cases, from there on the main line; both meet
    at the middle case, so the duration does not jump there."""
    from parastream.device.profile import OpRate

    # one thread: small (0.074 MFLOP, 14.4 us), middle (1.2, 47.7), large (120, 1110)
    low_rate = (1.2e6 - 0.074e6) / (47.7 - 14.4) / 1e3
    rate = (120e6 - 1.2e6) / (1110 - 47.7) / 1e3
    r = OpRate("flops", 47.7 - 1.2e6 / (rate * 1e3), 47.7 - 1.2e6 / (rate * 1e3), rate, rate,
               knee_work=1.2e6, low_fixed_1_us=14.4 - 0.074e6 / (low_rate * 1e3),
               low_fixed_all_us=14.4 - 0.074e6 / (low_rate * 1e3), low_rate_1=low_rate,
               low_rate_all=low_rate)
    assert r.duration_us(0.074e6, 1, 2) == pytest_approx(14.4)
    assert r.duration_us(0.0, 1, 2) == pytest_approx(r.low_fixed_1_us)  # unknown work: low
    assert r.duration_us(1.2e6 - 1, 1, 2) == pytest_approx(47.7)
    assert r.duration_us(1.2e6, 1, 2) == pytest_approx(47.7)
    assert r.duration_us(120e6, 1, 2) == pytest_approx(1110)
    # the line through small and large alone puts the middle case at about half
    straight = OpRate("flops", 14.4 - 0.074e6 * (1110 - 14.4) / (120e6 - 0.074e6), 0.0,
                      (120e6 - 0.074e6) / (1110 - 14.4) / 1e3, 1.0)
    assert straight.duration_us(1.2e6, 1, 2) < 0.6 * r.duration_us(1.2e6, 1, 2)


def test_a_broadcast_over_few_channels_last_channels_takes_its_own_rate():
    """(x - mean) on NHWC data with 3 channels has no vector loop: costed by
    ``add.channels_last_broadcast`` where measured. A unary op on the same data, the same
    broadcast over 64 channels, or over NCHW data keep their plain rates."""
    from parastream.cpu.cost import SHORT_INNER, rate_variant, short_inner_broadcast

    prof = cpu_profile(add=("bytes", 1.0, 1.0, 100.0, 150.0),
                       **{"add.channels_last_broadcast": ("bytes", 2.0, 2.0, 8.0, 12.0)},
                       max_pool2d=("flops", 1.0, 1.0, 1.0, 1.0))
    cl = {"memory_format": "channels_last"}

    def op(channels, typ="sub", meta=cl, other=True):
        x = Tensor([2, channels, 32, 32], "float32")
        ins = [x, Tensor([1, channels, 1, 1], "float32")] if other else [x]
        nbytes = 4 * 2 * channels * 32 * 32
        return Op(typ, typ, resource="vector", bytes_read=nbytes, bytes_written=nbytes,
                  inputs=ins, outputs=[x], meta=meta)

    sub = op(3)
    assert short_inner_broadcast(sub) and rate_variant(cl, sub) == "channels_last_broadcast"
    assert estimate(sub, prof).rate_key == "add.channels_last_broadcast"
    assert estimate(op(3, "div"), prof).rate_key == "add.channels_last_broadcast"
    assert estimate(op(3, "relu", other=False), prof).rate_key == "add"
    assert estimate(op(SHORT_INNER), prof).rate_key == "add"
    assert estimate(op(3, meta={}), prof).rate_key == "add"
    # spread along the batch only: the data's inner loops stay (not this variant)
    x = Tensor([8, 3, 32, 32], "float32")
    batch = Op("b", "add", resource="vector", bytes_read=1, bytes_written=1, meta=cl,
               inputs=[x, Tensor([1, 3, 32, 32], "float32")], outputs=[x])
    mask = Op("m", "mul", resource="vector", bytes_read=1, bytes_written=1, meta=cl,
              inputs=[x, Tensor([8, 1, 32, 32], "float32")], outputs=[x])
    assert not short_inner_broadcast(batch) and short_inner_broadcast(mask)
    # a pool on such data keeps its channels_last variant (none measured here: plain)
    assert rate_variant(cl, op(3, "max_pool2d", other=False)) == "channels_last"
    assert estimate(op(3, "max_pool2d", other=False), prof).rate_key == "max_pool2d"
    # a variant without its own rate falls back on the plain layout's where measured
    conv = op(3, "conv2d")
    nhwc = cpu_profile(conv2d=("flops", 1.0, 1.0, 1.0, 1.0),
                       **{"conv2d.channels_last": ("flops", 2.0, 2.0, 2.0, 2.0)})
    assert rate_variant(conv.meta, conv) == "channels_last_broadcast"
    assert estimate(conv, nhwc).rate_key == "conv2d.channels_last"
    slow, fast = estimate(sub, prof), estimate(op(3, meta={}), prof)
    assert slow.dur_us > fast.dur_us


def test_fewer_threads_rescale_rated_and_measured_cpu_costs():
    prof = cpu_profile(linear=("flops", 3.0, 5.0, 50.0, 90.0))
    lin = Op("l", "linear", resource="cube", flops=1e8, outputs=[Tensor([4096, 4096], "float32")])
    full = estimate(lin, prof)
    one = with_cores(full, prof, 1)
    assert one.dur_us == pytest_approx(3.0 + 1e8 / 50e3 + prof.launch_overhead_us)
    assert with_cores(lin, prof, 1).dur_us == pytest_approx(one.dur_us)
    import msgspec

    # a measured op (from a captured run on all cores) keeps its own time, scaled by the
    # rate model's ratio between the two thread counts
    measured = msgspec.structs.replace(full, dur_us=4000.0 + prof.launch_overhead_us, measured=True)
    ratio = (3.0 + 1e8 / 50e3) / (5.0 + 1e8 / 90e3)
    assert with_cores(measured, prof, 1).dur_us == pytest_approx(4000.0 * ratio + prof.launch_overhead_us)


def test_profile_rejects_bad_op_rates():
    import json

    import pytest

    from parastream.device.profile import dumps_profile, loads_profile
    from parastream.errors import InputError

    doc = json.loads(dumps_profile(load_profile("cpu")))
    doc["op_rates"] = {"linear": {"metric": "ops", "fixed_1_us": 1, "fixed_all_us": 1,
                                  "rate_1": 1, "rate_all": 1}}
    with pytest.raises(InputError, match="metric"):
        loads_profile(json.dumps(doc), "p.json")
    doc["op_rates"]["linear"].update(metric="flops", rate_1=0)
    with pytest.raises(InputError, match="rates must be positive"):
        loads_profile(json.dumps(doc), "p.json")


def test_fewer_threads_never_stretch_the_launch_and_survive_zero_work():
    import msgspec

    prof = load_profile("cpu")  # no op rates: a measured op scales by cores
    launch, cores = prof.launch_overhead_us, prof.cores.cube
    lin = Op("l", "linear", resource="cube", flops=1e8, outputs=[Tensor([4096, 4096], "float32")])
    measured = msgspec.structs.replace(estimate(lin, prof), dur_us=5.0 + launch, measured=True,
                                       block_dim=cores)
    assert with_cores(measured, prof, 1).dur_us == pytest_approx(5.0 * cores + launch)
    # a rate with no fixed cost and an op with no counted work: no division by zero
    rated = cpu_profile(linear=("flops", 0.0, 0.0, 50.0, 90.0))
    zero = Op("z", "linear", resource="cube", flops=0.0, outputs=[Tensor([4096, 4096], "float32")])
    c = msgspec.structs.replace(estimate(zero, rated), dur_us=7.0 + rated.launch_overhead_us,
                                measured=True)
    assert with_cores(c, rated, 1).dur_us >= rated.launch_overhead_us


def test_scaling_a_cpu_cost_agrees_with_re_costing_the_op_for_every_unit():
    """A plan's per-stream thread share rescales a stored cost exactly as costing the op on
    that share would: compute ops, copies and host work alike."""
    import msgspec

    base = cpu_profile(linear=("flops", 3.0, 5.0, 50.0, 90.0), cat=("bytes", 2.0, 9.0, 10.0, 12.0),
                       add=("bytes", 1.0, 4.0, 20.0, 30.0))
    prof = msgspec.structs.replace(base, cores=msgspec.structs.replace(base.cores, cube=8, vector=8))
    ops = [Op("l", "linear", resource="cube", flops=1e8, outputs=[Tensor([4096, 4096], "float32")]),
           Op("c", "cat", resource="memory", bytes_read=4e6, bytes_written=4e6),
           Op("h", "div", resource="host", bytes_read=4e6, bytes_written=4e6)]
    for op in ops:
        for k in (1, 2, 5):
            assert with_cores(estimate(op, prof), prof, k).dur_us == pytest_approx(
                estimate(op, prof, max_cores=k).dur_us), (op.name, k)


def test_an_unrated_copy_on_a_cpu_pays_the_executor_per_op_cost():
    prof = load_profile("cpu")  # no op rates
    cat = Op("c", "cat", resource="memory", bytes_read=1000, bytes_written=1000)
    c = estimate(cat, prof)
    assert c.dur_us == pytest_approx(2000 / (prof.memory_bandwidth_gbps * 1e3) + prof.launch_overhead_us)


def test_a_rated_op_over_the_cache_takes_at_least_its_dram_floor():
    import msgspec

    from parastream.device.profile import OpRate

    prof = msgspec.structs.replace(
        cpu_profile(), cache_bytes=8 << 20,
        op_rates={"linear": OpRate("flops", 3.0, 5.0, 50.0, 90.0, dram_gbps=16.0)})
    # a batch-1 GEMV over a 64 MiB weight: 33 MFLOP is 0.4 ms at the in-cache rate, but
    # streaming the weight at 16 GB/s takes 4.2 ms
    w = 64 << 20
    gemv = Op("g", "linear", resource="cube", flops=2.0 * 16384 * 1024, bytes_read=w,
              bytes_written=4 * 16384, outputs=[Tensor([1, 16384], "float32")])
    c = estimate(gemv, prof)
    floor = (w + 4 * 16384) / 16e3
    assert c.bound == "memory" and c.memory_full_us == pytest_approx(floor)
    assert c.dur_us == pytest_approx(floor + prof.launch_overhead_us)
    # fewer threads do not lift the floor (torch runs a GEMV on one thread anyway), for a
    # measured time too (op times replayed from a capture on all cores)
    assert with_cores(c, prof, 1).dur_us == pytest_approx(c.dur_us)
    seen = msgspec.structs.replace(c, dur_us=5000.0 + prof.launch_overhead_us, measured=True)
    assert with_cores(seen, prof, 1).dur_us == pytest_approx(seen.dur_us)
    # the same op over a weight that stays in cache keeps its rated, compute-bound cost
    small = Op("s", "linear", resource="cube", flops=2.0 * 1024 * 1024, bytes_read=4 << 20,
               bytes_written=4096, outputs=[Tensor([1, 1024], "float32")])
    cs = estimate(small, prof)
    assert cs.bound == "compute" and cs.memory_full_us == 0.0
    assert cs.dur_us == pytest_approx(5.0 + 2.0 * 1024 * 1024 / 90e3 + prof.launch_overhead_us)
    # where this machine's torch spreads a GEMV over its threads (parallel_gemv), each
    # thread streams its share: the floor falls with the threads, up to memory_streams
    # (a 16000x2048 GEMV: 11.9 ms on 1 thread, 6.8 on 2, on such a VM), and the op holds
    # every core; on one thread (a stream's share) it is back at one thread's floor
    cores = prof.cores.cube
    gemv = msgspec.structs.replace(gemv, inputs=[Tensor([1, 1024], "float32"),
                                                 Tensor([16384, 1024], "float32")])
    c = estimate(gemv, prof)  # one row on the left: a GEMV, on one thread here
    assert c.threads == 1 and not c.spreads_traffic
    for streams in (1.0, 1.5, float(cores)):
        par = msgspec.structs.replace(prof, parallel_gemv=True, memory_streams=streams)
        cp = estimate(gemv, par)
        assert cp.threads == cores and cp.block_dim == cores and cp.spreads_traffic
        assert cp.memory_full_us == pytest_approx(floor)           # one thread's, kept
        assert cp.dur_us == pytest_approx(floor / min(cores, streams)
                                          + prof.launch_overhead_us)
        assert with_cores(cp, par, 1).dur_us == pytest_approx(c.dur_us)


def test_a_single_token_matmul_is_costed_on_one_thread():
    """CPU torch runs a one-row matmul (GEMV) on the calling thread whatever the intra-op
    count: it pays neither the thread team's fixed cost nor holds the other cores, and a
    replayed capture of it does not rescale with the stream's threads."""
    from parastream.cpu.cost import is_matrix_vector

    import msgspec

    prof = msgspec.structs.replace(cpu_profile(linear=("flops", 4.0, 80.0, 90.0, 160.0)),
                                   cache_bytes=64 << 20)   # in cache: no DRAM floor
    cores = prof.cores.cube
    assert cores > 1

    def lin(rows):
        return Op("l", "linear", resource="cube", flops=2.0 * rows * 64 * 512,
                  bytes_read=4 * (rows * 64 + 64 * 512), bytes_written=4 * rows * 512,
                  inputs=[Tensor([1, rows, 64], "float32"), Tensor([512, 64], "float32")],
                  outputs=[Tensor([1, rows, 512], "float32")])

    gemv, gemm = estimate(lin(1), prof), estimate(lin(16), prof)
    assert is_matrix_vector(lin(1)) and not is_matrix_vector(lin(16))
    assert gemv.threads == 1 and gemv.block_dim == 1
    assert gemv.dur_us == pytest_approx(4.0 + 2.0 * 64 * 512 / 90e3 + prof.launch_overhead_us)
    assert gemm.threads == cores and gemm.block_dim == cores
    assert gemm.dur_us > 80.0                                   # the team's fixed cost
    assert with_cores(gemv, prof, 1).dur_us == gemv.dur_us
    mv = Op("m", "mv", resource="cube", flops=1e5, inputs=[Tensor([64, 64], "float32")])
    addmm = Op("a", "addmm", resource="cube", flops=1e5,
               inputs=[Tensor([64], "float32"), Tensor([1, 64], "float32"),
                       Tensor([64, 64], "float32")])
    assert is_matrix_vector(mv) and is_matrix_vector(addmm)
    assert not is_matrix_vector(Op("b", "bmm", resource="cube", flops=1e5,
                                   inputs=[Tensor([8, 1, 64], "float32")]))


def test_element_wise_ops_under_torchs_grain_are_costed_on_one_thread():
    """Under 32Ki output elements CPU torch runs an element-wise op, a copy, a cat or a
    softmax on the calling thread (no thread team); at and above it, on the team with its
    fixed cost. Norms and matmuls do not follow that grain."""
    import msgspec

    from parastream.cpu.cost import GRAIN_ELEMENTS, runs_serial

    prof = msgspec.structs.replace(
        cpu_profile(add=("bytes", 1.0, 40.0, 20.0, 30.0), cat=("bytes", 2.0, 60.0, 10.0, 15.0),
                    layer_norm=("bytes", 1.0, 40.0, 20.0, 30.0)),
        cache_bytes=64 << 20)
    cores = prof.cores.cube
    launch = prof.op_host_us
    assert cores > 1

    def op(kind, elements, resource="vector"):
        return Op(kind, kind, resource=resource, bytes_read=8 * elements,
                  bytes_written=4 * elements, outputs=[Tensor([elements], "float32")])

    for kind, resource, key in (("mul", "vector", "add"), ("neg", "vector", "add"),
                                ("cat", "vector", "cat"), ("copy_", "memory", "cat")):
        below, at = op(kind, GRAIN_ELEMENTS - 1, resource), op(kind, GRAIN_ELEMENTS, resource)
        assert runs_serial(below, key) and not runs_serial(at, key)
        cb, ca = estimate(below, prof), estimate(at, prof)
        assert cb.rate_key == ca.rate_key == key, kind
        r = prof.op_rates[key]
        assert cb.threads == 1 and cb.block_dim == (1 if resource == "vector" else 0), kind
        assert cb.dur_us == pytest_approx(
            r.fixed_1_us + 12.0 * (GRAIN_ELEMENTS - 1) / (r.rate_1 * 1e3) + launch)
        assert ca.threads == cores                     # on the team, with its fixed cost
        assert ca.dur_us == pytest_approx(
            r.fixed_all_us + 12.0 * GRAIN_ELEMENTS / (r.rate_all * 1e3) + launch)
    # a norm parallelises over rows, not by this grain
    norm = op("layer_norm", 1024)
    assert not runs_serial(norm, "layer_norm") and estimate(norm, prof).threads == cores
    # an op with no known output shape is not assumed serial
    assert not runs_serial(Op("x", "mul", resource="vector", bytes_read=64), "add")


def test_a_cold_op_pays_its_rates_cold_cost_in_proportion_to_its_idle_time():
    import msgspec
    import pytest

    from parastream.cpu.cost import cold_us
    from parastream.device.profile import OpRate

    rate = OpRate("flops", 2.0, 10.0, 100.0, 300.0, cold_1_us=40.0, cold_all_us=80.0)
    prof = msgspec.structs.replace(cpu_profile(), op_rates={"linear": rate}, cold_after_us=1000.0)
    op = Op("l", "linear", resource="cube", flops=1e6, outputs=[Tensor([64, 64], "float32")])
    c = estimate(op, prof)
    assert c.threads == prof.cores.cube > 1
    assert cold_us(c, prof, 0.0) == 0.0
    assert cold_us(c, prof, 250.0) == pytest.approx(20.0)        # a quarter of all cores' cost
    assert cold_us(c, prof, 5000.0) == cold_us(c, prof, 1000.0) == 80.0  # whole past cold_after
    assert cold_us(with_cores(c, prof, 1), prof, 500.0) == pytest.approx(20.0)  # one thread's
    # a measured op already holds its cold cost; a profile without cold costs adds none
    assert cold_us(msgspec.structs.replace(c, measured=True), prof, 5000.0) == 0.0
    plain = msgspec.structs.replace(prof, op_rates={"linear": OpRate("flops", 2.0, 10.0, 100.0, 300.0)})
    assert cold_us(estimate(op, plain), plain, 5000.0) == 0.0
    # cold_after 0: the whole cost whatever the idle time; never on an accelerator profile
    assert cold_us(c, msgspec.structs.replace(prof, cold_after_us=0.0), 1.0) == 80.0
    assert cold_us(c, msgspec.structs.replace(prof, kind="npu"), 5000.0) == 0.0


def test_profile_rejects_negative_cold_costs():
    import json

    import pytest

    from parastream.device.profile import dumps_profile, loads_profile
    from parastream.errors import InputError

    doc = json.loads(dumps_profile(load_profile("cpu")))
    doc["op_rates"] = {"linear": {"metric": "flops", "fixed_1_us": 1, "fixed_all_us": 1,
                                  "rate_1": 1, "rate_all": 1, "cold_1_us": -1}}
    with pytest.raises(InputError, match="cold times"):
        loads_profile(json.dumps(doc), "p.json")
    doc["op_rates"]["linear"]["cold_1_us"] = 5
    doc["cold_after_us"] = -2
    with pytest.raises(InputError, match="cold_after_us"):
        loads_profile(json.dumps(doc), "p.json")


def test_cold_share_follows_the_measured_curve_then_ramps_to_the_whole_cost():
    import pytest

    from parastream.cpu.cost import cold_share

    prof = msgspec.structs.replace(cpu_profile(), cold_after_us=4000.0,
                                   cold_curve=[[50.0, 0.1], [250.0, 0.15], [500.0, 0.2]])
    assert cold_share(0.0, prof) == 0.0
    assert cold_share(25.0, prof) == pytest.approx(0.05)     # from 0 at no idle
    assert cold_share(150.0, prof) == pytest.approx(0.125)   # between two points
    assert cold_share(500.0, prof) == pytest.approx(0.2)
    assert cold_share(2250.0, prof) == pytest.approx(0.6)    # half way on to cold_after
    assert cold_share(4000.0, prof) == cold_share(1e6, prof) == 1.0
    # without a curve, in proportion to the idle; the curve charges more at short idles
    plain = msgspec.structs.replace(prof, cold_curve=[])
    assert cold_share(250.0, plain) == pytest.approx(250.0 / 4000.0)
    assert cold_share(250.0, plain) < cold_share(250.0, prof)
    # a curve past cold_after keeps its last share; cold_after 0 past the curve: all of it
    assert cold_share(1e6, msgspec.structs.replace(prof, cold_after_us=300.0)) == 0.2
    assert cold_share(1e6, msgspec.structs.replace(prof, cold_after_us=0.0)) == 1.0


@given(st.lists(st.tuples(st.floats(0, 1e5), st.floats(0, 1)), min_size=1, max_size=6),
       st.floats(0, 2e5), st.floats(0, 2e5), st.floats(0, 2e5))
# a subnormal idle on the curve's first point read a share of 1 (the product underflowed)
@example(points=[(5e-324, 0.75)], after=2.0, a=1.0, b=5e-324)
def test_cold_share_stays_within_0_and_1_and_grows_with_a_growing_curve(points, after, a, b):
    from parastream.cpu.cost import cold_share

    idles = sorted(i for i, _ in points)
    shares = sorted(s for _, s in points)  # a non-decreasing curve, as calibrate writes
    prof = msgspec.structs.replace(cpu_profile(), cold_after_us=after,
                                   cold_curve=[[i, s] for i, s in zip(idles, shares)])
    lo, hi = sorted((a, b))
    assert 0.0 <= cold_share(lo, prof) <= 1.0
    if after == 0 or after > idles[-1]:  # past the curve it ramps up (or is all of it)
        assert cold_share(lo, prof) <= cold_share(hi, prof) + 1e-9


def test_profile_rejects_a_bad_cold_curve():
    import json

    import pytest

    from parastream.device.profile import dumps_profile, loads_profile
    from parastream.errors import InputError

    doc = json.loads(dumps_profile(load_profile("cpu")))
    for bad in ([[100.0, 1.5]], [[-1.0, 0.1]], [[100.0]], [[200.0, 0.1], [100.0, 0.2]]):
        doc["cold_curve"] = bad
        with pytest.raises(InputError, match="cold_curve"):
            loads_profile(json.dumps(doc), "p.json")
    doc["cold_curve"] = [[100.0, 0.1], [300.0, 0.2]]
    assert loads_profile(json.dumps(doc), "p.json").cold_curve == [[100.0, 0.1], [300.0, 0.2]]


def test_an_op_pays_for_the_folded_views_it_computes_on_a_cpu_only():
    """The executor computes an op's folded views inside its interval (meta ``views``):
    ``view_us`` each on a CPU profile, like the launch not stretched by fewer threads, and
    not again for a measured op (its captured interval holds them); a device profile's
    host computes views while kernels queue, so they cost nothing there."""
    import json

    import msgspec
    import pytest

    from parastream.device.profile import dumps_profile, loads_profile
    from parastream.errors import InputError

    prof = msgspec.structs.replace(cpu_profile(add=("bytes", 1.0, 1.0, 20.0, 30.0)), view_us=3.0)
    plain = Op("a", "mul", resource="vector", bytes_read=4000, bytes_written=2000)
    viewed = Op("b", "mul", resource="vector", bytes_read=4000, bytes_written=2000,
                meta={"views": 2})
    base, with_views = estimate(plain, prof), estimate(viewed, prof)
    assert with_views.views_us == 6.0
    assert with_views.dur_us == pytest_approx(base.dur_us + 6.0)
    one = with_cores(with_views, prof, 1)
    assert one.dur_us == pytest_approx(with_cores(base, prof, 1).dur_us + 6.0)
    measured = Op("c", "mul", resource="vector", meta={"views": 2, "dur_us": 10.0})
    assert estimate(measured, prof).views_us == 0.0
    copy = Op("d", "copy_", resource="memory", bytes_read=8, bytes_written=8, meta={"views": 1})
    assert estimate(copy, msgspec.structs.replace(prof, op_rates={})).views_us == 3.0
    assert estimate(viewed, load_profile("ascend910b")).views_us == 0.0
    doc = json.loads(dumps_profile(load_profile("cpu")))
    doc["view_us"] = -1
    with pytest.raises(InputError, match="view_us"):
        loads_profile(json.dumps(doc), "p.json")


def test_idle_by_type_counts_from_the_end_of_the_previous_op_of_the_type_across_calls():
    from parastream.cpu.cost import idle_by_type
    from parastream.device.cost import OpCost

    types = {"a": "linear", "b": "add", "c": "linear", "d": "add", "e": "cat"}
    ops = {n: Op(name=n, type=t) for n, t in types.items()}
    costs = {n: OpCost(10.0 * (i + 1), 0, "compute", "host") for i, n in enumerate(types)}
    # a 0-10, b 10-30, c 30-60, d 60-100, e 100-150; 50 us between calls: 200 us a call
    idle = idle_by_type(ops, costs, list(types), run_overhead_us=50.0)
    assert idle == {"a": 200.0 - 60.0, "b": 200.0 - 100.0 + 10.0, "c": 30.0 - 10.0,
                    "d": 60.0 - 30.0, "e": 200.0 - 150.0 + 100.0}


def test_with_cold_adds_the_cold_cost_for_ranking_and_nothing_without_one():
    import msgspec

    from parastream.cpu.cost import has_cold
    from parastream.device.cost import with_cold
    from parastream.device.profile import OpRate

    rate = OpRate("flops", 2.0, 10.0, 100.0, 300.0)
    plain = msgspec.structs.replace(cpu_profile(), op_rates={"linear": rate})
    cold = msgspec.structs.replace(plain, cold_after_us=0.0, op_rates={
        "linear": msgspec.structs.replace(rate, cold_all_us=50.0)})
    assert has_cold(cold) and not has_cold(plain)
    assert not has_cold(msgspec.structs.replace(cold, kind="npu"))
    ops = {n: Op(n, "linear", resource="cube", flops=1e6) for n in "xy"}
    costs = {n: estimate(o, plain) for n, o in ops.items()}
    assert with_cold(ops, costs, ["x", "y"], plain) == costs
    out = with_cold(ops, costs, ["x", "y"], cold)  # cold_after 0: the whole cost always
    assert all(out[n].dur_us == pytest_approx(costs[n].dur_us + 50.0) for n in ops)


def test_cold_bytes_are_read_at_the_cold_rate_but_not_by_an_op_at_its_dram_floor():
    import msgspec
    import pytest

    from parastream.cpu.cost import cold_us
    from parastream.device.profile import OpRate

    r = OpRate("bytes", 1.0, 5.0, 100.0, 200.0, cold_1_us=10.0, cold_all_us=20.0,
               cold_gbps_1=50.0, cold_gbps_all=100.0)
    # 1 MB cold: 20 us at 50 GB/s on one thread, 10 us at 100 on two (of two)
    assert sum(r.cold_parts_us(1e6, 1, 2)) == pytest.approx(10.0 + 20.0)
    assert sum(r.cold_parts_us(1e6, 2, 2)) == pytest.approx(20.0 + 10.0)
    assert sum(r.cold_parts_us(0.0, 2, 2)) == pytest.approx(20.0)
    assert OpRate("bytes", 1, 1, 10, 10, cold_all_us=3.0).cold_parts_us(1e9, 2, 2) == (3.0, 0.0)
    prof = msgspec.structs.replace(cpu_profile(), op_rates={"add": r}, cold_after_us=0.0,
                                   cache_bytes=1 << 20)
    big = Op("x", "add", resource="vector", bytes_read=1 << 26, bytes_written=1 << 25,
             outputs=[Tensor([1 << 23], "float32")])
    c = estimate(big, prof)
    assert c.memory_full_us > 0 and c.bound == "memory"  # at its DRAM floor: read from DRAM
    assert c.read_bytes == 1 << 26
    assert cold_us(c, prof, 1e9) == pytest.approx(20.0)

def test_cold_data_shares_weigh_each_input_by_how_long_since_it_was_touched():
    """A weight read once a call is cold for its first reader, an activation just written
    is warm; each input counts by its bytes."""
    import msgspec
    import pytest

    from parastream.cpu.cost import cold_data_shares
    from parastream.device.cost import OpCost

    def t(name, size):
        return Tensor([size // 4], "float32", bytes=size, name=name)

    ops = {"a": Op("a", "linear", inputs=[t("x", 1000), t("w1", 3000)], outputs=[t("a", 1000)]),
           "b": Op("b", "add", inputs=[t("a", 1000), t("x", 1000)], outputs=[t("b", 1000)]),
           "c": Op("c", "linear", inputs=[t("b", 1000), t("w1", 3000)], outputs=[t("c", 1000)])}
    costs = {n: OpCost(d, 0, "compute", "cube") for n, d in zip("abc", (10.0, 20.0, 30.0))}
    prof = msgspec.structs.replace(cpu_profile(), run_overhead_us=50.0, cold_after_us=100.0)
    # a 0-10, b 10-30, c 30-60, 110 us a call. a: x last read by b a call ago (80 us),
    # w1 by c (50 us); b: a and x touched by a as it ended (0 us); c: w1 read by a 20 us ago
    shares = cold_data_shares(ops, costs, list("abc"), prof)
    assert shares == pytest.approx({"a": (1000 * 0.8 + 3000 * 0.5) / 4000, "b": 0.0,
                                    "c": 3000 * 0.2 / 4000})
    # unnamed inputs (a graph from a trace without tensor names): no share, the code
    # part's ramp stands in
    bare = {"a": Op("a", "linear", inputs=[Tensor([4], bytes=16)])}
    assert cold_data_shares(bare, {"a": costs["a"]}, ["a"], prof) == {}


def test_the_data_part_of_the_cold_cost_follows_the_data_share():
    import msgspec
    import pytest

    from parastream.cpu.cost import cold_us
    from parastream.device.profile import OpRate

    # code 20 us on all cores; data: 500 kB read, at 100 GB/s cold = 5 us when all cold
    r = OpRate("bytes", 1.0, 5.0, 100.0, 200.0, cold_1_us=10.0, cold_all_us=20.0,
               cold_gbps_1=50.0, cold_gbps_all=100.0)
    prof = msgspec.structs.replace(cpu_profile(), op_rates={"add": r}, cold_after_us=100.0,
                                   cache_bytes=1 << 30)  # in cache: no DRAM floor
    op = Op("x", "add", resource="vector", bytes_read=500_000, bytes_written=500_000,
            outputs=[Tensor([1 << 17], "float32")])
    c = estimate(op, prof)
    assert c.threads == 2 and c.read_bytes == 500_000
    assert cold_us(c, prof, 50.0) == pytest.approx((20.0 + 5.0) * 0.5)   # both on the ramp
    assert cold_us(c, prof, 50.0, data_share=1.0) == pytest.approx(20.0 * 0.5 + 5.0)
    assert cold_us(c, prof, 200.0, data_share=0.0) == pytest.approx(20.0)
