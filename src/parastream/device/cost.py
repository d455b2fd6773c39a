"""Roofline cost model: an op's duration and core use (block dim) on a device profile.

For a compute op (resource ``cube`` or ``vector``) running on ``b`` of the unit's ``C`` cores::

    compute_us = flops / (peak_tflops[unit][dtype] * 1e6 * b / C)
    memory_us  = bytes / (bandwidth_GBps * 1e3 * min(1, SATURATION * b / C))
    dur_us     = max(compute_us, memory_us, MIN_KERNEL_US)

``b`` (the block dim) is what the op would ask for: enough blocks to cover its output in
``CUBE_TILE`` / ``VECTOR_TILE`` element tiles, or its memory traffic in ``BYTES_PER_BLOCK``
chunks (a GEMV at decode reads a big weight with a tiny output), capped at the unit's cores.
Half the cores (``SATURATION`` = 2) are taken to saturate memory bandwidth. Memory copies
(``memory``) run on DMA engines at full bandwidth and use no cores; communication
(``comm``) is costed at memory bandwidth too (the profile format has no link bandwidth, so
this is a lower bound); ``host`` ops cost the launch overhead. An op may carry measured
values in ``meta``: ``dur_us`` and ``block_dim`` override the estimate.

On a CPU profile calibrated with op rates (``op_rates``, measured by ``parastream
calibrate``) an op whose type or family was measured costs ``fixed_us + work / rate`` at the
op's intra-op thread count (one thread for what torch runs serially, :func:`runs_serial`)
instead: a CPU reaches its peak matmul rate only on large
matmuls, and norms, pools and attention run far below it (see :func:`op_rate_key`). The
rates are measured in cache, so such an op whose data exceeds the profile's ``cache_bytes``
takes at least its bytes over one core's DRAM bandwidth (the rate's ``dram_gbps``), which is
what a decode GEMV over a large weight takes; its ``memory_full_us`` is that floor. (Per op:
ops that each fit in cache but together do not are still costed as cached.)

``bound`` is ``compute`` or ``memory`` by the roofline, and ``launch`` when the host's
launch overhead per task exceeds the device time: such an op is host-bound in eager mode
and no stream assignment helps it (graph mode / capture does).

Ops are read duck-typed (``flops``, ``bytes_read``, ``bytes_written``, ``resource``,
``inputs``/``outputs`` with ``shape``/``dtype``, ``meta``): this module imports no graph code.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import msgspec

from .profile import DeviceProfile

CUBE_TILE = 128 * 128        #: output elements one cube block covers
VECTOR_TILE = 4096           #: elements one vector block covers
BYTES_PER_BLOCK = 256 * 1024  #: memory traffic one block streams
SATURATION = 2.0             #: 1/SATURATION of the cores saturate memory bandwidth
MIN_KERNEL_US = 1.0          #: shortest device task on an accelerator

_DTYPES = {"float16": "fp16", "half": "fp16", "fp16": "fp16", "f16": "fp16",
           "bfloat16": "bf16", "bf16": "bf16",
           "float32": "fp32", "float": "fp32", "fp32": "fp32", "f32": "fp32", "tf32": "fp32",
           "hf32": "fp32",
           "int8": "int8", "uint8": "int8", "qint8": "int8", "quint8": "int8", "int4": "int8",
           "float64": "fp64", "double": "fp64", "fp64": "fp64"}


def normalize_dtype(dtype: str | None) -> str:
    """``torch.float16`` / ``half`` / ``DT_FLOAT16`` -> ``fp16``; float8 kinds -> ``fp8``;
    integer, bool and unknown types -> ``fp32`` (they run on the vector unit at fp32 rate)."""
    if not dtype:
        return "fp32"
    d = dtype.lower().rsplit(".", 1)[-1].removeprefix("dt_")
    if d.startswith(("float8", "fp8")):
        return "fp8"
    return _DTYPES.get(d, "fp32")


#: op families and the measured type that stands for them when the type itself was not
#: measured (checked in this order; the first whose test matches wins)
_MATMUL = frozenset({"linear", "mm", "bmm", "matmul", "addmm", "baddbmm", "addbmm", "einsum",
                     "mv", "dot", "addmv"})
_FAMILIES: tuple[tuple[str, Any], ...] = (
    ("linear", lambda t: t in _MATMUL),
    ("conv2d", lambda t: t.startswith("conv") or t in ("convolution", "_convolution")),
    ("scaled_dot_product_attention", lambda t: "attention" in t),
    ("max_pool2d", lambda t: "pool" in t),
    ("softmax", lambda t: "softmax" in t),
    ("layer_norm", lambda t: t.endswith("norm")),
)


#: a matmul-like op with this many rows on its left or fewer (two at least: one is a GEMV)
#: takes the ``few_rows`` rate: decode with a small batch. Above it the time stops
#: growing with the rows (a 512x512 weight, one thread: 40, 58, 69 us at 2, 3, 4 rows, then
#: 89, 95, 133 at 6, 8, 16) and the plain line comes closer
FEW_ROWS = 4


def rate_variant(meta: dict | None, op: Any = None) -> str | None:
    """The op-rate variant an op asks for: its input layout (``channels_last``; for a
    broadcast over few channels ``channels_last_broadcast``, :func:`short_inner_broadcast`),
    ``mixed_head_dims`` for attention whose v head dim differs from q's (CPU torch then
    runs the unfused math kernel), or ``few_rows`` for a matmul-like ``op`` with 2 to
    :data:`FEW_ROWS` rows on its left (:func:`left_rows`); None for the plain rate.

    Why ``few_rows``: on CPU such a product runs far below the FLOP rate of bigger ones
    (about one pass over the weight per row), so a line through bigger cases would put a
    batch-2 decode linear well under its time."""
    meta = meta or {}
    if meta.get("memory_format"):
        if meta["memory_format"] == "channels_last" and op is not None \
                and short_inner_broadcast(op):
            return "channels_last_broadcast"
        return str(meta["memory_format"])
    if meta.get("head_dims") == "mixed":
        return "mixed_head_dims"
    if op is not None and 2 <= left_rows(op) <= FEW_ROWS:
        return "few_rows"
    return None


#: channels-last data with fewer channels than this (the stride-1 dim) has no vector loop
#: for a broadcast along them: an AVX2 register holds 8 floats
SHORT_INNER = 8


#: a variant whose own rate was not measured for an op type takes this one's where it was
#: (a pool or a convolution reading a 3-channel NHWC image next to its small weight)
VARIANT_FALLBACK = {"channels_last_broadcast": "channels_last"}


def short_inner_broadcast(op: Any) -> bool:
    """Whether ``op`` (on channels-last data) combines a 4-d input with a smaller one
    broadcast along its channels, height or width (a per-channel mean or scale, a mask),
    over fewer than :data:`SHORT_INNER` channels: an image normalisation. On NHWC data
    the channels are the innermost dim, so the broadcast leaves TensorIterator only a
    3-element inner loop, many times the time of the same op on NCHW data."""
    ins = [t for t in (op.inputs or ()) if t.shape]
    if len(ins) < 2 or len(ins[0].shape) != 4 or not 0 < ins[0].shape[1] < SHORT_INNER:
        return False
    full = math.prod(ins[0].shape)

    def spreads_inside(t: Any) -> bool:
        # broadcast along C, H or W (a size-1 dim where the data has more); one that
        # spreads along the batch only keeps the data's inner loops (8x3x224x224 plus
        # 1x3x224x224 on NHWC data: 160 us, against 1,002 us for a 1x3x1x1 mean)
        shape = [1] * (4 - len(t.shape)) + list(t.shape[-4:])
        return any(shape[d] == 1 < ins[0].shape[d] for d in (1, 2, 3))

    return any(1 < math.prod(t.shape) < full and spreads_inside(t) for t in ins[1:])


def op_rate_key(op_type: str, resource: str, rates: dict,
                variant: str | None = None) -> str | None:
    """The measured op rate that costs an op of ``op_type`` on ``resource``: its own type
    when measured, else its family's (matmul-like ops -> ``linear``, convolutions ->
    ``conv2d``, pools -> ``max_pool2d``, norms -> ``layer_norm``, ...), copies and moves
    -> ``cat``, other element-wise work -> ``add``; a collective only its own type's
    (calibrate measures the one-rank ``all_reduce`` a CPU process runs); None when nothing
    fits.
    Host ops are rated too: on a CPU profile the host is the device, and host work such
    as preprocessing is real work on its cores (costing it as the launch alone would make
    a uint8 normalisation of a batch of images free).

    An op of a ``variant`` (:func:`rate_variant`: ``channels_last``, ``mixed_head_dims``,
    ``few_rows``) takes the rate ``<key>.<variant>`` where one was measured, else the
    plain one: CPU pooling runs 10-20x faster on NHWC than on NCHW data, attention with
    mixed head dims about half as fast as the fused kernel, and a matmul of a few rows at
    a third of the FLOP rate of a big one, so one rate cannot serve both."""
    if not rates:
        return None
    t = op_type.lower()
    if resource == "comm":
        # only a collective's own measured rate (calibrate times the one-rank collective
        # this process runs); no family stands in for a link
        return t if t in rates else None
    key: str | None = None
    if t in rates:
        key = t
    else:
        for fam, test in _FAMILIES:
            if test(t):
                key = fam if fam in rates else None
                break
        else:
            key = "cat" if resource == "memory" else "add"
            key = key if key in rates else None
    if key is not None:
        for v in (variant, VARIANT_FALLBACK.get(variant)):
            if v and f"{key}.{v}" in rates:
                return f"{key}.{v}"
    return key


class OpCost(msgspec.Struct, frozen=True, gc=False):
    """An op's estimated cost on one device.

    ``unit`` is the pool it occupies (``cube``/``vector`` cores, ``memory`` DMA, ``comm``
    links, ``host``); ``block_dim`` the cores it takes of that pool (0 for non-core units);
    ``compute_full_us`` / ``memory_full_us`` its compute and memory times at full
    occupancy and full bandwidth (what :func:`with_cores` and the headroom bounds use).
    For a CPU op costed by an op rate, ``compute_full_us`` is its rated time on all
    cores (on one thread for an op torch runs serially) and ``memory_full_us`` its DRAM
    floor (its bytes over one core's DRAM rate when they exceed the profile's
    ``cache_bytes``, else 0): the time no thread count
    goes below.
    """

    dur_us: float
    block_dim: int
    bound: str
    unit: str
    compute_full_us: float = 0.0
    memory_full_us: float = 0.0
    measured: bool = False
    #: CPU op-rate costs: the ``op_rates`` entry used, the op's work (FLOPs or bytes) and
    #: the intra-op threads the time is for (copies and host work hold no cores of the
    #: pool, ``block_dim`` 0, but their time still depends on the threads)
    rate_key: str = ""
    work: float = 0.0
    threads: int = 0
    #: bytes the op reads (what can have gone cold: :func:`cold_us`)
    read_bytes: float = 0.0
    #: CPU: the executor's time for the folded views the op computes (:func:`views_us`),
    #: in ``dur_us`` like the launch, and like it not stretched by fewer threads
    views_us: float = 0.0
    #: CPU: a GEMV torch spreads over its threads (``DeviceProfile.parallel_gemv``): each
    #: thread streams its share of the weight, so its DRAM floor (``memory_full_us``, one
    #: thread's) falls with the threads, up to the profile's ``memory_streams``
    spreads_traffic: bool = False


def runs_on_host(profile: DeviceProfile) -> bool:
    """Whether ``profile``'s ops run as host kernels (a CPU profile): then no minimum
    kernel time, the executor's folded views and per-op cost inside each op, measured op
    rates and cold costs apply (:attr:`DeviceProfile.on_host`)."""
    return profile.on_host


def _elements(tensors: Any) -> int:
    n = 0
    for t in tensors or ():
        if t.shape:
            n += math.prod(max(0, int(s)) for s in t.shape)
    return n


def _op_dtype(op: Any) -> str:
    meta = op.meta or {}
    if meta.get("dtype"):
        return normalize_dtype(meta["dtype"])
    for t in (*(op.outputs or ()), *(op.inputs or ())):
        if t.dtype:
            return normalize_dtype(t.dtype)
    return "fp32"


def _wanted_blocks(op: Any, unit: str, cores: int) -> int:
    out = _elements(op.outputs)
    traffic = (op.bytes_read or 0) + (op.bytes_written or 0)
    if out == 0 and traffic == 0:
        return cores  # nothing known about its size: assume it fills the device
    tile = CUBE_TILE if unit == "cube" else VECTOR_TILE
    want = max(math.ceil(out / tile), math.ceil(traffic / BYTES_PER_BLOCK), 1)
    return min(cores, want)


def _core_time(profile: DeviceProfile, compute_full: float, memory_full: float, blocks: int,
               cores: int) -> tuple[float, str]:
    """(device time, bound) of work that takes ``compute_full`` / ``memory_full`` on all
    ``cores`` when it may use ``blocks`` of them: compute scales by how ops speed up with
    cores (linear on devices, the calibrated intra-op efficiency on a CPU), memory by the
    bandwidth share those cores can pull. One formula for :func:`estimate` and
    :func:`with_cores`."""
    frac = blocks / cores
    compute_t = compute_full * profile.speedup_on(cores) / profile.speedup_on(blocks)
    memory_t = memory_full / min(1.0, SATURATION * frac)
    dur = max(compute_t, memory_t, 0.0 if runs_on_host(profile) else MIN_KERNEL_US)
    bound = "memory" if memory_t >= compute_t and memory_t > 0 else "compute"
    return dur, bound


def _with_launch(profile: DeviceProfile, dur: float, bound: str,
                 extra_us: float = 0.0) -> tuple[float, str]:
    """On a CPU the host's hand-off is part of every op, and so are the folded views it
    computes (``extra_us``: :func:`views_us`); anywhere, an op shorter than its launch is
    launch-bound."""
    launch = profile.launch_overhead_us
    return dur + profile.op_host_us + extra_us, ("launch" if launch > dur else bound)


def views_us(op: Any, profile: DeviceProfile) -> float:
    """The executor's time for the folded views ``op`` reads first (``meta["views"]``, set
    by the importer), at the profile's ``view_us``: it computes them inside the op's
    interval. CPU profiles only (a device runs views on the host while kernels queue).

    Why: a small model's folded views can add up to a large share of its ops' time,
    which no op rate holds."""
    if not runs_on_host(profile) or not profile.view_us:
        return 0.0
    return profile.view_us * int((op.meta or {}).get("views", 0) or 0)


def left_rows(op: Any) -> int:
    """Rows of the left operand of a ``linear``/``mm``/``matmul``/``addmm`` (all its dims
    but the last: tokens times batch); 1 for ``mv``/``addmv``; 0 for other ops, for a
    ``matmul`` batched on both sides (like ``bmm``), or when the shape is not known."""
    t = (op.type or "").lower()
    if t in ("mv", "addmv"):
        return 1
    pos = 1 if t == "addmm" else 0 if t in ("linear", "mm", "matmul") else None
    ins = op.inputs or ()
    if pos is None or len(ins) <= pos or not ins[pos].shape:
        return 0
    if t == "matmul" and len(ins) > 1 and len(ins[1].shape or ()) > 2:
        return 0  # batched on both sides (attention scores): many products, no weight
    return math.prod(max(0, int(d)) for d in ins[pos].shape[:-1])


def is_matrix_vector(op: Any) -> bool:
    """A matmul-like op with one row on its left (``mv``, or ``linear``/``mm``/``matmul``/
    ``addmm`` on a single token): CPU torch runs it as a GEMV, on the calling thread
    whatever its intra-op thread count on some machines, over all of them on others
    (``DeviceProfile.parallel_gemv``)."""
    return left_rows(op) == 1


#: torch's intra-op grain (``at::internal::GRAIN_SIZE``): an element-wise op, a copy or a
#: concatenation with fewer output elements runs on the calling thread alone
GRAIN_ELEMENTS = 32768
#: op-rate keys whose ops follow that grain (TensorIterator loops, cat's serial kernel,
#: softmax's rows split by grain / row length)
_GRAIN_KEYS = frozenset({"add", "silu", "cat", "softmax"})


def runs_serial(op: Any, key: str, profile: DeviceProfile | None = None) -> bool:
    """True when CPU torch runs this op on the calling thread whatever its intra-op thread
    count: a matrix-vector product (:func:`is_matrix_vector`), or an element-wise op, copy
    or concatenation under the grain size. Such an op neither pays the thread team's fixed
    cost (it dominates small ops on a stream worker) nor holds the other cores. A GEMV runs serially unless
    ``profile`` says this machine's torch spreads it (``parallel_gemv``)."""
    if is_matrix_vector(op):
        return not (profile is not None and profile.parallel_gemv)
    return key.split(".", 1)[0] in _GRAIN_KEYS and 0 < _elements(op.outputs) < GRAIN_ELEMENTS


def _rated(op: Any, profile: DeviceProfile, key: str, max_cores: int | None,
           traffic: float, extra: float) -> OpCost:
    """The cost from a measured CPU op rate, on the op's share of the cores: a CPU stream's
    worker runs an op with its whole intra-op thread count (small ones too: they pay the
    thread team's fixed cost even when they cannot use it), so that count is the op's
    block dim, unless torch runs it on the calling thread (:func:`runs_serial`); copies
    and host work hold no core of the pool but run on those threads."""
    rate = profile.op_rates[key]
    work = float(op.flops or 0.0) if rate.metric == "flops" else traffic
    resource = op.resource
    cores = profile.unit_cores("cube")
    threads = max(1, min(cores, max_cores or cores))
    serial = runs_serial(op, key, profile)
    if serial:
        threads = 1
    blocks = threads if resource in ("cube", "vector") else 0
    # the rates are measured in cache; an op streaming more than that from DRAM takes at
    # least its traffic over one core's memory bandwidth (and is then memory-bound: two of
    # them at once share the bandwidth in the simulator)
    floor = rate.floor_us(traffic, profile.memory_bandwidth_gbps) \
        if traffic > profile.cache_bytes else 0.0
    # (runs_serial already says a GEMV is serial unless the profile's torch spreads it)
    spreads = not serial and is_matrix_vector(op)
    pull = _pulling(profile, spreads)
    dur, bound = _rated_time(rate, work, threads, cores, floor, pull)
    full = _rated_time(rate, work, 1 if serial else cores, cores, floor, pull)[0]
    dur, bound = _with_launch(profile, dur, bound, extra)
    return OpCost(dur, blocks, bound, resource, full, floor, False, key, work, threads,
                  float(op.bytes_read or 0), extra, spreads_traffic=spreads)


def _pulling(profile: DeviceProfile, spreads: bool) -> float:
    """How many of an op's threads can stream its traffic at once: 1 (its DRAM floor is
    one thread's), or for an op that ``spreads`` it over them (a parallel GEMV) as many
    as the profile's ``memory_streams``."""
    return max(1.0, profile.memory_streams) if spreads else 1.0


def _rated_time(rate: Any, work: float, threads: int, cores: int,
                floor_us: float, pulling: float = 1.0) -> tuple[float, str]:
    """A rated op's own time on ``threads`` of ``cores`` (launch not included), no lower
    than its DRAM floor (one thread's ``floor_us`` over the threads, up to ``pulling``,
    that stream at once), and its bound ("memory" when the floor wins)."""
    own = rate.duration_us(work, threads, cores)
    floor = floor_us / min(float(max(1, threads)), pulling)
    return (floor, "memory") if floor > own else (own, rate.bound)


def estimate(op: Any, profile: DeviceProfile, max_cores: int | None = None) -> OpCost:
    """Roofline duration, block dim and bound of ``op`` on ``profile``; with ``max_cores``
    the op may use at most that many cores of its unit (core limiting)."""
    meta = op.meta or {}
    traffic = float((op.bytes_read or 0) + (op.bytes_written or 0))
    on_host = runs_on_host(profile)
    resource = op.resource
    measured = meta.get("dur_us") is not None
    # the views it computes first: a measured duration holds them already
    extra = 0.0 if measured else views_us(op, profile)
    if on_host and profile.op_rates and not measured:
        key = op_rate_key(op.type, resource, profile.op_rates, rate_variant(meta, op))
        if key is not None:
            return _rated(op, profile, key, max_cores, traffic, extra)
    memory_full = traffic / (profile.memory_bandwidth_gbps * 1e3)
    launch = profile.launch_overhead_us

    if resource in ("cube", "vector"):
        cores = profile.unit_cores(resource)
        peak = profile.peak(resource, _op_dtype(op))
        compute_full = (op.flops or 0.0) / (peak * 1e6)
        wanted = int(meta["block_dim"]) if meta.get("block_dim") else _wanted_blocks(op, resource, cores)
        wanted = max(1, min(wanted, cores))
        blocks = min(wanted, max_cores or cores)
        if measured:
            # measured with ``wanted`` cores; fewer cores stretch it as if compute-bound
            dur = float(meta["dur_us"]) * wanted / blocks
            bound = "memory" if memory_full > compute_full else "compute"
        else:
            dur, bound = _core_time(profile, compute_full, memory_full, blocks, cores)
        dur, bound = _with_launch(profile, dur, bound, extra)
        return OpCost(dur, blocks, bound, resource, compute_full, memory_full, measured,
                      views_us=extra)

    # memory copies, communication and host work use no compute cores
    if measured:
        dur = float(meta["dur_us"])
    elif resource == "host":
        dur = launch
    else:
        dur = max(memory_full, 0.0 if on_host else MIN_KERNEL_US)
    if resource == "host":
        bound, extra = "launch", 0.0
    else:  # on a CPU a copy is an op like any other: the executor's per-op cost applies
        dur, bound = _with_launch(profile, dur, "memory", extra)
    return OpCost(dur, 0, bound, resource, 0.0, memory_full, measured, views_us=extra)


def with_cores(op_or_cost: Any, profile: DeviceProfile, cores: int) -> OpCost:
    """The cost when the op may use at most ``cores`` cores of its unit (what
    ``limit_core_num`` does). Takes an op (re-estimated) or an :class:`OpCost` (scaled)."""
    if cores <= 0:
        raise ValueError("cores must be positive")
    if not isinstance(op_or_cost, OpCost):
        return estimate(op_or_cost, profile, max_cores=cores)
    c = op_or_cost
    rate = profile.op_rates.get(c.rate_key) if c.rate_key else None
    on_cores = c.unit in ("cube", "vector")
    was = c.threads or c.block_dim
    if (not on_cores and rate is None) or was <= cores:
        return c
    total = profile.unit_cores(c.unit if on_cores else "cube")
    # on a CPU a cost includes the launch (the executor's per-op cost), which fewer
    # threads do not stretch: scale the op's own time only
    own = max(0.0, c.dur_us - profile.op_host_us - c.views_us)
    extra = c.views_us  # like the launch, not stretched
    if rate is not None and c.measured:
        # a measured CPU op: its own time scaled as its op rate, floored at DRAM speed,
        # scales with threads (a decode GEMV at its floor on one thread does not stretch)
        floor = c.memory_full_us  # one thread's DRAM floor (only a spread GEMV's falls)
        pull = _pulling(profile, c.spreads_traffic)
        before = _rated_time(rate, c.work, was, total, floor, pull)[0]
        now = _rated_time(rate, c.work, cores, total, floor, pull)[0]
        scale = now / before if before > 0 else was / cores
        dur, bound = _with_launch(profile, own * scale, c.bound, extra)
    elif rate is not None:
        dur, bound = _with_launch(profile, *_rated_time(
            rate, c.work, cores, total, c.memory_full_us,
            _pulling(profile, c.spreads_traffic)), extra)
    elif c.measured:
        dur, bound = _with_launch(profile, own * c.block_dim / cores, c.bound, extra)
    else:
        dur, bound = _with_launch(profile, *_core_time(profile, c.compute_full_us,
                                                        c.memory_full_us, cores, total), extra)
    return msgspec.structs.replace(c, dur_us=dur, block_dim=cores if on_cores else 0,
                                   threads=cores if rate is not None else c.threads, bound=bound)


def cold_share(idle_us: float, profile: DeviceProfile) -> float:
    """How much of a cold cost is due after ``idle_us`` of other ops: from the profile's
    measured ``cold_curve`` where it has one (interpolated, from 0 at no idle; past its
    last point the share ramps on in proportion to reach 1 at ``cold_after_us``), else
    ``min(1, idle / cold_after_us)``; 1 when ``cold_after_us`` is 0 and there is no curve."""
    after = profile.cold_after_us
    idle = max(0.0, idle_us)
    curve = profile.cold_curve
    if not curve:
        return min(1.0, idle / after) if after > 0 else 1.0
    x0, y0 = 0.0, 0.0
    for x1, y1 in curve:
        if idle <= x1:
            # the fraction first: (y1 - y0) * (idle - x0) underflows on subnormal idles
            # (0.75 * 5e-324 rounds to 5e-324, a share of 1 where the curve says 0.75)
            return y0 + (y1 - y0) * ((idle - x0) / (x1 - x0)) if x1 > x0 else y1
        x0, y0 = x1, y1
    if after > x0:  # past the last point: on to the whole cost at cold_after_us
        return min(1.0, y0 + (1.0 - y0) * (idle - x0) / (after - x0))
    return y0 if after > 0 else 1.0


def cold_us(cost: OpCost, profile: DeviceProfile, idle_us: float,
            data_share: float | None = None) -> float:
    """Extra microseconds a CPU op costed by an op rate takes because other ops ran since
    it last could use its cache: its rate's cold extra on the op's thread count
    (:meth:`parastream.device.profile.OpRate.cold_parts_us`). The code part is due in
    proportion to ``idle_us`` since the last op of its type (:func:`cold_share`); the data
    part is its read bytes times ``data_share``, the share of its input bytes gone cold
    (:func:`cold_data_shares`; the code part's share when not known), read at the rate's
    cold GB/s. An op at its DRAM floor pays the code part only: it is costed as reading
    from DRAM already.

    Why: a small op run in turn with other ops can take many times its back-to-back
    time, and a linear whose weight was last read a call before runs slower than its
    calibrated time. A measured cost already holds all this: 0 then."""
    rate = profile.op_rates.get(cost.rate_key) if cost.rate_key else None
    if rate is None or cost.measured or not runs_on_host(profile):
        return 0.0
    cores = profile.unit_cores("cube")
    threads = max(1, cost.threads)
    at_floor = cost.memory_full_us > rate.duration_us(cost.work, threads, cores)
    share = cold_share(idle_us, profile)
    cold_bytes = 0.0 if at_floor else cost.read_bytes * (share if data_share is None else data_share)
    code, data = rate.cold_parts_us(cold_bytes, threads, cores)
    return code * share + data


def has_cold(profile: DeviceProfile) -> bool:
    """True for a CPU profile whose op rates carry cold costs (:func:`cold_us`)."""
    return runs_on_host(profile) and any(
        r.cold_1_us or r.cold_all_us or r.cold_gbps_1 or r.cold_gbps_all
        for r in profile.op_rates.values())


def _one_stream(costs: Mapping[str, OpCost], order: list[str],
                run_overhead_us: float) -> tuple[dict[str, float], float]:
    """Each op's start on one stream, ops back to back in ``order``, and a call's period
    (its ops and ``run_overhead_us``): the timeline the cold costs are reckoned on."""
    start: dict[str, float] = {}
    t = 0.0
    for n in order:
        start[n] = t
        t += costs[n].dur_us
    return start, t + run_overhead_us


def idle_by_type(ops: Mapping[str, Any], costs: Mapping[str, OpCost], order: list[str],
                 run_overhead_us: float = 0.0,
                 timeline: tuple[dict[str, float], float] | None = None) -> dict[str, float]:
    """Per op, how long other ops ran since the previous op of its type ended, on the
    one-stream timeline of ``costs`` in ``order``, forward calls back to back (the first op
    of a type counts from its type's last op in the call before, ``run_overhead_us``
    between calls): how long its code and data have had to go cold (:func:`cold_us`; the
    calibration's idle is the same, other ops running in between). Taken from the issue
    order whatever the plan, so every plan of a graph is charged alike. ``timeline``: that
    one-stream timeline (:func:`_one_stream`) when the caller has it already."""
    start, period = timeline or _one_stream(costs, order, run_overhead_us)
    last: dict[str, str] = {}
    for n in order:  # each type's last op in a call: the first op's predecessor
        last[ops[n].type] = n
    idle: dict[str, float] = {}
    prev_end: dict[str, float] = {}
    for n in order:
        ty = ops[n].type
        if ty in prev_end:
            idle[n] = start[n] - prev_end[ty]
        else:
            p = last[ty]
            idle[n] = period - (start[p] + costs[p].dur_us) + start[n]
        prev_end[ty] = start[n] + costs[n].dur_us
    return idle


def cold_data_shares(ops: Mapping[str, Any], costs: Mapping[str, OpCost], order: list[str],
                     profile: DeviceProfile,
                     timeline: tuple[dict[str, float], float] | None = None
                     ) -> dict[str, float]:
    """Per op with named inputs, the share of its input bytes gone cold (each input's
    :func:`cold_share` of how long other ops ran since it was last touched, weighted by its
    bytes), on the same one-stream timeline as :func:`idle_by_type`, calls back to back.
    An op touches its inputs and outputs when it ends; a tensor no op writes (a weight, a
    buffer, an input passed again) was last touched by its last reader in the call before
    until its first reader in this one. So a 512x512 linear right after another still
    reads a weight last read a whole call ago. ``timeline`` as for :func:`idle_by_type`."""
    start, period = timeline or _one_stream(costs, order, profile.run_overhead_us)
    touched: dict[str, float] = {}
    for n in order:  # the call before: where each tensor was last touched, less a period
        for ten in (*ops[n].inputs, *ops[n].outputs):
            if ten.name:
                touched[ten.name] = start[n] + costs[n].dur_us - period
    out: dict[str, float] = {}
    for n in order:
        op = ops[n]
        cold = total = 0.0
        for ten in op.inputs:
            size = float(ten.bytes or 0)
            if not ten.name or size <= 0:
                continue
            # a tensor this call writes was written before this op (topological order);
            # one it does not (a weight, an input the caller passes again), last touched
            # in this call or, before its first reader, in the call before
            cold += size * cold_share(start[n] - touched[ten.name], profile)
            total += size
        if total > 0:
            out[n] = cold / total
        end = start[n] + costs[n].dur_us
        for ten in (*op.inputs, *op.outputs):
            if ten.name:
                touched[ten.name] = end
    return out


def with_cold(ops: Mapping[str, Any], costs: Mapping[str, OpCost], order: list[str],
              profile: DeviceProfile) -> dict[str, OpCost]:
    """``costs`` (one stream, as estimated) with each op's cold cost added: for what ranks
    or bounds a graph by op durations without simulating it (the critical path, headroom,
    lints). Not for the simulator, which adds it itself once a stream's share of the cores
    is known; returns ``costs`` unchanged when the profile has no cold costs."""
    if not has_cold(profile):
        return dict(costs)
    idle, data = cold_idles(ops, costs, order, profile)
    out = {}
    for n, c in costs.items():
        extra = cold_us(c, profile, idle[n], data.get(n)) if n in idle else 0.0
        out[n] = msgspec.structs.replace(c, dur_us=c.dur_us + extra) if extra else c
    return out


def cold_idles(ops: Mapping[str, Any], costs: Mapping[str, OpCost], order: list[str],
               profile: DeviceProfile) -> tuple[dict[str, float], dict[str, float]]:
    """(:func:`idle_by_type`, :func:`cold_data_shares`) on the one-stream timeline of
    ``costs``. Laid out without the cold costs, so the gaps come out shorter than the
    calibration's (the time other ops really took, cold included); laying it out again
    with them moves the predictions only slightly."""
    timeline = _one_stream(costs, order, profile.run_overhead_us)  # laid out once for both
    return (idle_by_type(ops, costs, order, timeline=timeline),
            cold_data_shares(ops, costs, order, profile, timeline=timeline))
