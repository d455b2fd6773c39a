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

Where the roofline does not describe a device's kernels, a registered cost model
prices them instead: a profile names its model (:attr:`DeviceProfile.cost_model
<parastream.device.profile.DeviceProfile.cost_model>`), :data:`COST_MODELS` maps the name
to the ``"module:attribute"`` of a :class:`CostModel` subclass, loaded on first use. The
cpu backend's model of torch's CPU kernels (op rates, cold costs, folded views) is
:mod:`parastream.cpu.cost`; :func:`estimate`, :func:`with_cores`, :func:`with_cold` and
the cold-cost functions here are the entry points for every model.

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

from ..plugin import load
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


class OpCost(msgspec.Struct, frozen=True, gc=False):
    """An op's estimated cost on one device.

    ``unit`` is the pool it occupies (``cube``/``vector`` cores, ``memory`` DMA, ``comm``
    links, ``host``); ``block_dim`` the cores it takes of that pool (0 for non-core units);
    ``compute_full_us`` / ``memory_full_us`` its compute and memory times at full
    occupancy and full bandwidth (what :func:`with_cores` and the headroom bounds use).
    The fields after ``measured`` are filled by a cost model that rates ops by measured
    rates (:mod:`parastream.cpu.cost`: there ``compute_full_us`` is the rated time on all
    cores, or on one thread for an op torch runs serially, and ``memory_full_us`` the
    op's DRAM floor, the time no thread count goes below); the roofline leaves them at
    their defaults.
    """

    dur_us: float
    block_dim: int
    bound: str
    unit: str
    compute_full_us: float = 0.0
    memory_full_us: float = 0.0
    measured: bool = False
    #: op-rate costs: the ``op_rates`` entry used, the op's work (FLOPs or bytes) and
    #: the intra-op threads the time is for (copies and host work hold no cores of the
    #: pool, ``block_dim`` 0, but their time still depends on the threads)
    rate_key: str = ""
    work: float = 0.0
    threads: int = 0
    #: bytes the op reads (what can have gone cold: :func:`cold_us`)
    read_bytes: float = 0.0
    #: the executor's time for the folded views the op computes (a host-kernel model's
    #: :meth:`CostModel.views_us`), in ``dur_us`` like the launch, and like it not
    #: stretched by fewer threads
    views_us: float = 0.0
    #: a GEMV torch spreads over its threads (``DeviceProfile.parallel_gemv``): each
    #: thread streams its share of the weight, so its DRAM floor (``memory_full_us``, one
    #: thread's) falls with the threads, up to the profile's ``memory_streams``
    spreads_traffic: bool = False


class CostModel:
    """What a cost model adds to or puts in place of the roofline, as hooks
    :func:`estimate`, :func:`with_cores` and the cold-cost entry points call. This base
    is the roofline itself: every hook says there is nothing to add. A model registered
    in :data:`COST_MODELS` overrides the hooks its device needs."""

    #: the shortest op (us): a device kernel's minimum; 0 where ops are host kernels
    min_kernel_us: float = MIN_KERNEL_US

    def views_us(self, op: Any, profile: DeviceProfile) -> float:
        """Time for the folded views ``op`` computes inside its own interval."""
        return 0.0

    def rated(self, op: Any, profile: DeviceProfile, max_cores: int | None, traffic: float,
              extra_us: float) -> OpCost | None:
        """``op``'s cost from a measured rate (``extra_us``: its views), or None for the
        roofline's."""
        return None

    def rated_with_cores(self, cost: OpCost, profile: DeviceProfile,
                         cores: int) -> OpCost | None:
        """A :meth:`rated` cost on at most ``cores`` cores, or None for the roofline's
        scaling."""
        return None

    def has_cold(self, profile: DeviceProfile) -> bool:
        """Whether ops on ``profile`` pay a cold cost (:meth:`cold_us`)."""
        return False

    def cold_us(self, cost: OpCost, profile: DeviceProfile, idle_us: float,
                data_share: float | None = None) -> float:
        """Extra time an op takes after ``idle_us`` of other ops since its type last ran."""
        return 0.0

    def cold_idles(self, ops: Mapping[str, Any], costs: Mapping[str, OpCost], order: list[str],
                   profile: DeviceProfile) -> tuple[dict[str, float], dict[str, float]]:
        """(idle per op since its type last ran, share of its input bytes gone cold) on
        the one-stream timeline of ``costs``."""
        return {}, {}


#: the model of ops run as host kernels: the one whose costs carry op-rate keys
HOST_KERNELS = "host_kernels"
#: cost model name (``DeviceProfile.cost_model``) -> ``"module:attribute"`` of its
#: :class:`CostModel` subclass, imported when a profile first asks for it
COST_MODELS: dict[str, str] = {HOST_KERNELS: "parastream.cpu.cost:HostKernels"}
_LOADED: dict[str, CostModel] = {"roofline": CostModel()}


def register_cost_model(name: str, target: str) -> None:
    """Add (or replace) cost model ``name``: ``target`` is the ``"module:attribute"`` of a
    :class:`CostModel` subclass."""
    COST_MODELS[name] = target
    _LOADED.pop(name, None)


def cost_model(profile: DeviceProfile) -> CostModel:
    """The cost model that prices ``profile``'s ops (its ``cost_model``), loaded once."""
    return _load(profile.cost_model)


def _load(name: str) -> CostModel:
    """Cost model ``name`` from :data:`COST_MODELS`, imported once and kept."""
    if name in _LOADED:
        return _LOADED[name]
    if name not in COST_MODELS:
        raise ValueError(f"unknown cost model {name!r} (known: roofline, "
                         f"{', '.join(sorted(COST_MODELS))})")
    model = _LOADED[name] = load(COST_MODELS[name])()
    return model


def tensor_elements(tensors: Any) -> int:
    """Elements of ``tensors`` (those with a known shape), summed."""
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
    out = tensor_elements(op.outputs)
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
    dur = max(compute_t, memory_t, cost_model(profile).min_kernel_us)
    bound = "memory" if memory_t >= compute_t and memory_t > 0 else "compute"
    return dur, bound


def with_launch(profile: DeviceProfile, dur: float, bound: str,
                extra_us: float = 0.0) -> tuple[float, str]:
    """(duration, bound) of an op whose own time is ``dur``: where the host is the device
    its per-op cost (``op_host_us``) is part of every op, and so are the folded views it
    computes (``extra_us``); anywhere, an op shorter than its launch is launch-bound."""
    launch = profile.launch_overhead_us
    return dur + profile.op_host_us + extra_us, ("launch" if launch > dur else bound)


def estimate(op: Any, profile: DeviceProfile, max_cores: int | None = None) -> OpCost:
    """Duration, block dim and bound of ``op`` on ``profile`` (the roofline, or the
    profile's cost model where it rates the op); with ``max_cores`` the op may use at most
    that many cores of its unit (core limiting)."""
    model = cost_model(profile)
    meta = op.meta or {}
    traffic = float((op.bytes_read or 0) + (op.bytes_written or 0))
    resource = op.resource
    measured = meta.get("dur_us") is not None
    # the views it computes first: a measured duration holds them already
    extra = 0.0 if measured else model.views_us(op, profile)
    if not measured:
        rated = model.rated(op, profile, max_cores, traffic, extra)
        if rated is not None:
            return rated
    memory_full = traffic / (profile.memory_bandwidth_gbps * 1e3)
    if resource in ("cube", "vector"):
        return _on_cores(op, profile, max_cores, memory_full, extra)
    # memory copies, communication and host work use no compute cores
    if measured:
        dur = float(meta["dur_us"])
    elif resource == "host":
        dur = profile.launch_overhead_us
    else:
        dur = max(memory_full, model.min_kernel_us)
    if resource == "host":
        bound, extra = "launch", 0.0
    else:  # where the host is the device a copy is an op like any other: per-op cost applies
        dur, bound = with_launch(profile, dur, "memory", extra)
    return OpCost(dur, 0, bound, resource, 0.0, memory_full, measured, views_us=extra)


def _on_cores(op: Any, profile: DeviceProfile, max_cores: int | None, memory_full: float,
              extra: float) -> OpCost:
    """:func:`estimate` of an op on the cube or vector cores by the roofline (or its
    measured ``meta["dur_us"]``)."""
    meta = op.meta or {}
    resource = op.resource
    cores = profile.unit_cores(resource)
    peak = profile.peak(resource, _op_dtype(op))
    compute_full = (op.flops or 0.0) / (peak * 1e6)
    wanted = int(meta["block_dim"]) if meta.get("block_dim") else _wanted_blocks(op, resource, cores)
    wanted = max(1, min(wanted, cores))
    blocks = min(wanted, max_cores or cores)
    measured = meta.get("dur_us") is not None
    if measured:
        # measured with ``wanted`` cores; fewer cores stretch it as if compute-bound
        dur = float(meta["dur_us"]) * wanted / blocks
        bound = "memory" if memory_full > compute_full else "compute"
    else:
        dur, bound = _core_time(profile, compute_full, memory_full, blocks, cores)
    dur, bound = with_launch(profile, dur, bound, extra)
    return OpCost(dur, blocks, bound, resource, compute_full, memory_full, measured,
                  views_us=extra)


def with_cores(op_or_cost: Any, profile: DeviceProfile, cores: int) -> OpCost:
    """The cost when the op may use at most ``cores`` cores of its unit (what
    ``limit_core_num`` does). Takes an op (re-estimated) or an :class:`OpCost` (scaled)."""
    if cores <= 0:
        raise ValueError("cores must be positive")
    if not isinstance(op_or_cost, OpCost):
        return estimate(op_or_cost, profile, max_cores=cores)
    c = op_or_cost
    rated = cost_model(profile).rated_with_cores(c, profile, cores)
    if rated is not None:
        return rated
    if c.unit not in ("cube", "vector") or (c.threads or c.block_dim) <= cores:
        return c
    total = profile.unit_cores(c.unit)
    # where the host is the device a cost includes the launch (the executor's per-op
    # cost) and the folded views, which fewer threads do not stretch: scale the rest
    if c.measured:
        own = max(0.0, c.dur_us - profile.op_host_us - c.views_us)
        dur, bound = with_launch(profile, own * c.block_dim / cores, c.bound, c.views_us)
    else:
        dur, bound = with_launch(profile, *_core_time(profile, c.compute_full_us,
                                                       c.memory_full_us, cores, total),
                                 c.views_us)
    return msgspec.structs.replace(c, dur_us=dur, block_dim=cores, bound=bound)


def runs_serial(op: Any, key: str, profile: DeviceProfile | None = None) -> bool:
    """Whether ``op``, rated by op-rate ``key``, runs on the calling thread whatever its
    intra-op thread count (it then holds no other core). Op-rate keys are the host-kernel
    model's, so that model answers (:func:`parastream.cpu.cost.runs_serial`), with
    ``profile``'s ``parallel_gemv`` where one is given."""
    host = _load(HOST_KERNELS)
    return host.runs_serial(op, key, profile)  # type: ignore[attr-defined]


def has_cold(profile: DeviceProfile) -> bool:
    """Whether ops on ``profile`` pay a cold cost (:func:`cold_us`): a CPU profile whose op
    rates carry cold costs."""
    return cost_model(profile).has_cold(profile)


def cold_us(cost: OpCost, profile: DeviceProfile, idle_us: float,
            data_share: float | None = None) -> float:
    """Extra microseconds an op takes because other ops ran for ``idle_us`` since its type
    last ran, ``data_share`` of its input bytes gone cold meanwhile (the profile's cost
    model: :func:`parastream.cpu.cost.cold_us`; 0 on the roofline)."""
    return cost_model(profile).cold_us(cost, profile, idle_us, data_share)


def cold_idles(ops: Mapping[str, Any], costs: Mapping[str, OpCost], order: list[str],
               profile: DeviceProfile) -> tuple[dict[str, float], dict[str, float]]:
    """(idle per op since its type last ran, share of its input bytes gone cold), each op
    laid out on one stream in ``order`` (:func:`parastream.cpu.cost.cold_idles`); both
    empty on a profile without cold costs."""
    return cost_model(profile).cold_idles(ops, costs, order, profile)


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
