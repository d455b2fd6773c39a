"""The cost model of the cpu backend: ops run as torch's CPU kernels on the streams' worker
threads (the ``host_kernels`` cost model of :mod:`parastream.device.cost`, chosen for a
profile whose ops run on the host, :attr:`~parastream.device.profile.DeviceProfile.on_host`).

On a profile calibrated with op rates (``op_rates``, measured by ``parastream
calibrate``) an op whose type or family was measured costs ``fixed_us + work / rate`` at the
op's intra-op thread count (one thread for what torch runs serially, :func:`runs_serial`)
instead of the roofline: a CPU reaches its peak matmul rate only on large matmuls, and
norms, pools and attention run far below it (see :func:`op_rate_key`). The rates are
measured in cache, so such an op whose data exceeds the profile's ``cache_bytes`` takes at
least its bytes over one core's DRAM bandwidth (the rate's ``dram_gbps``), which is what a
decode GEMV over a large weight takes; its ``memory_full_us`` is that floor. (Per op: ops
that each fit in cache but together do not are still costed as cached.)

Besides the op rates: no minimum kernel time, the executor's folded views inside each op
(:func:`views_us`), and the cold cost of an op whose code and data other ops pushed out of
the cache since it last ran (:func:`cold_us`, laid out on one stream by
:func:`cold_idles`). :class:`HostKernels` is the model the device cost model loads; the
functions are its terms.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import msgspec

from ..device.cost import CostModel, OpCost, tensor_elements, with_launch
from ..device.profile import DeviceProfile


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
#: takes the ``few_rows`` rate: decode with a small batch. Up to it the time grows almost
#: by a pass over the weight per row; above it the growth flattens and the plain line
#: comes closer
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
        # spreads along the batch only keeps the data's inner loops (a 1x3x224x224 mean
        # over 8x3x224x224 NHWC data runs many times faster than a 1x3x1x1 one)
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


def views_us(op: Any, profile: DeviceProfile) -> float:
    """The executor's time for the folded views ``op`` reads first (``meta["views"]``, set
    by the importer), at the profile's ``view_us``: it computes them inside the op's
    interval. CPU profiles only (a device runs views on the host while kernels queue).

    Why: a small model's folded views can add up to a large share of its ops' time,
    which no op rate holds."""
    if not profile.on_host or not profile.view_us:
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
    return key.split(".", 1)[0] in _GRAIN_KEYS and 0 < tensor_elements(op.outputs) < GRAIN_ELEMENTS


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
    dur, bound = with_launch(profile, dur, bound, extra)
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
    if rate is None or cost.measured or not profile.on_host:
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
    return profile.on_host and any(
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


def cold_idles(ops: Mapping[str, Any], costs: Mapping[str, OpCost], order: list[str],
               profile: DeviceProfile) -> tuple[dict[str, float], dict[str, float]]:
    """(:func:`idle_by_type`, :func:`cold_data_shares`) on the one-stream timeline of
    ``costs``. Laid out without the cold costs, so the gaps come out shorter than the
    calibration's (the time other ops really took, cold included); laying it out again
    with them moves the predictions only slightly."""
    timeline = _one_stream(costs, order, profile.run_overhead_us)  # laid out once for both
    return (idle_by_type(ops, costs, order, timeline=timeline),
            cold_data_shares(ops, costs, order, profile, timeline=timeline))


def rated_with_cores(c: OpCost, profile: DeviceProfile, cores: int) -> OpCost | None:
    """``c`` (an op-rate cost) on at most ``cores`` intra-op threads; None when ``c`` was
    not costed by an op rate (the roofline's scaling applies). The executor's per-op cost
    and the folded views are not stretched by fewer threads; a measured op's own time
    scales as its op rate, floored at DRAM speed (a decode GEMV at its floor on one thread
    does not stretch)."""
    rate = profile.op_rates.get(c.rate_key) if c.rate_key else None
    if rate is None:
        return None
    was = c.threads or c.block_dim
    if was <= cores:
        return c
    on_cores = c.unit in ("cube", "vector")
    total = profile.unit_cores(c.unit if on_cores else "cube")
    pull = _pulling(profile, c.spreads_traffic)
    if c.measured:
        own = max(0.0, c.dur_us - profile.op_host_us - c.views_us)
        floor = c.memory_full_us  # one thread's DRAM floor (only a spread GEMV's falls)
        before = _rated_time(rate, c.work, was, total, floor, pull)[0]
        now = _rated_time(rate, c.work, cores, total, floor, pull)[0]
        scale = now / before if before > 0 else was / cores
        dur, bound = with_launch(profile, own * scale, c.bound, c.views_us)
    else:
        dur, bound = with_launch(profile, *_rated_time(
            rate, c.work, cores, total, c.memory_full_us, pull), c.views_us)
    return msgspec.structs.replace(c, dur_us=dur, block_dim=cores if on_cores else 0,
                                   threads=cores, bound=bound)


class HostKernels(CostModel):
    """Ops as torch CPU kernels on the streams' worker threads: op rates in place of the
    roofline where measured, the folded views and the executor's per-op cost inside each
    op, no minimum kernel time, and cold costs."""

    min_kernel_us = 0.0

    def views_us(self, op: Any, profile: DeviceProfile) -> float:
        return views_us(op, profile)

    def rated(self, op: Any, profile: DeviceProfile, max_cores: int | None, traffic: float,
              extra_us: float) -> OpCost | None:
        if not profile.op_rates:
            return None
        key = op_rate_key(op.type, op.resource, profile.op_rates, rate_variant(op.meta or {}, op))
        return None if key is None else _rated(op, profile, key, max_cores, traffic, extra_us)

    def rated_with_cores(self, cost: OpCost, profile: DeviceProfile,
                         cores: int) -> OpCost | None:
        return rated_with_cores(cost, profile, cores)

    @staticmethod
    def runs_serial(op: Any, key: str, profile: DeviceProfile | None = None) -> bool:
        return runs_serial(op, key, profile)

    def has_cold(self, profile: DeviceProfile) -> bool:
        return has_cold(profile)

    def cold_us(self, cost: OpCost, profile: DeviceProfile, idle_us: float,
                data_share: float | None = None) -> float:
        return cold_us(cost, profile, idle_us, data_share)

    def cold_idles(self, ops: Mapping[str, Any], costs: Mapping[str, OpCost], order: list[str],
                   profile: DeviceProfile) -> tuple[dict[str, float], dict[str, float]]:
        return cold_idles(ops, costs, order, profile)
