"""Device profiles: the ``parastream.device/1`` JSON data files and their loader.

A profile says what one accelerator (or the host CPU) can do: core counts, peak matrix
("cube") and vector throughput by dtype, memory bandwidth, the host's launch cost per task,
how many hardware queues and streams it has, and the scheduler's sweep time. Every number
names its source in ``sources``. The shipped profiles live in ``device/profiles/*.json``;
``parastream calibrate`` writes new ones in the same format (docs/device-profiles.md).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import msgspec

from ..errors import InputError

SCHEMA = "parastream.device/1"
KINDS = ("npu", "gpu", "cpu")
#: the numeric keys whose source must be stated in ``sources``
SOURCED_KEYS = ("cores", "peak_tflops", "memory_bandwidth_gbps", "launch_overhead_us",
                "hw_queues", "max_streams", "scheduler_sweep_us")
#: dtypes a peak may be given for (after :func:`parastream.device.cost.normalize_dtype`)
DTYPES = ("fp16", "bf16", "fp32", "int8", "fp8", "fp64")


class Cores(msgspec.Struct, forbid_unknown_fields=True):
    """Compute cores: AI cube and vector cores on Ascend; SMs (both fields) on GPUs;
    physical cores (both fields) on a CPU."""

    cube: int
    vector: int


class OpRate(msgspec.Struct, forbid_unknown_fields=True):
    """A CPU op type's measured cost: ``fixed + work / rate``, where work is the op's FLOPs
    (``metric`` "flops", rates in GFLOP/s) or bytes moved ("bytes", GB/s); ``*_1`` on one
    intra-op thread, ``*_all`` on all cores (in between, linearly by thread count: the
    fixed part grows with threads too, since waking a thread team costs)."""

    metric: str
    fixed_1_us: float
    fixed_all_us: float
    rate_1: float
    rate_all: float
    #: GB/s (read + written) the op reaches on one thread when its data does not fit in
    #: the caches (a decode GEMV over a large weight); 0 = not measured, the profile's
    #: ``memory_bandwidth_gbps`` stands in. The rate above is measured in cache, so without
    #: this floor a matrix-vector product over a 64 MB weight would look 20x too cheap.
    dram_gbps: float = 0.0
    #: the op once other ops ran since it last could use its cache ("cold"): its code
    #: costs ``cold_*_us`` more, and each input byte gone cold is read at ``cold_gbps_*``
    #: GB/s on top (0 = no such part), on one thread / on all cores; measured as each op
    #: type timed once per pass over all calibrated op types. 0 = not measured. See the
    #: profile's ``cold_after_us`` and :func:`parastream.cpu.cost.cold_us`.
    cold_1_us: float = 0.0
    cold_all_us: float = 0.0
    cold_gbps_1: float = 0.0
    cold_gbps_all: float = 0.0
    #: below this much work (0 = no knee) the op follows a second line, ``low_*``, through
    #: a third, middle case: a convolution's time is no straight line in its FLOPs (small
    #: ones pay far more per FLOP than large ones), so one line through the small and large
    #: cases misprices the middle ones
    knee_work: float = 0.0
    low_fixed_1_us: float = 0.0
    low_fixed_all_us: float = 0.0
    low_rate_1: float = 0.0
    low_rate_all: float = 0.0

    @staticmethod
    def _frac(cores: int, all_cores: int) -> float:
        """Where ``cores`` intra-op threads sit between one (0) and all cores (1)."""
        k = min(max(1, cores), max(1, all_cores))
        return (k - 1) / (all_cores - 1) if all_cores > 1 else 1.0

    def duration_us(self, work: float, cores: int, all_cores: int) -> float:
        """Microseconds for ``work`` (FLOPs or bytes) on ``cores`` intra-op threads (on the
        low line below :attr:`knee_work`)."""
        frac = self._frac(cores, all_cores)
        if work < self.knee_work:
            r1, rall, f1, fall = (self.low_rate_1, self.low_rate_all, self.low_fixed_1_us,
                                  self.low_fixed_all_us)
        else:
            r1, rall, f1, fall = self.rate_1, self.rate_all, self.fixed_1_us, self.fixed_all_us
        rate = r1 + (rall - r1) * frac
        fixed = f1 + (fall - f1) * frac
        return fixed + work / (rate * 1e3)

    def cold_parts_us(self, cold_bytes: float, cores: int, all_cores: int) -> tuple[float, float]:
        """(code, data): microseconds the op takes on top of :meth:`duration_us` when its
        code has gone cold (the fixed part) and for ``cold_bytes`` of its inputs gone cold
        (read at the cold GB/s; where calibrate found none for one thread count, the other
        count's stands in; 0 without either)."""
        frac = self._frac(cores, all_cores)
        code = self.cold_1_us + (self.cold_all_us - self.cold_1_us) * frac
        g1, gall = self.cold_gbps_1 or self.cold_gbps_all, self.cold_gbps_all or self.cold_gbps_1
        gbps = g1 + (gall - g1) * frac
        return code, (cold_bytes / (gbps * 1e3) if gbps > 0 and cold_bytes > 0 else 0.0)

    @property
    def bound(self) -> str:
        """What an op limited by this rate is bound by."""
        return "memory" if self.metric == "bytes" else "compute"

    def floor_us(self, traffic: float, bandwidth_gbps: float) -> float:
        """Microseconds to stream ``traffic`` bytes from memory on one thread: the op's
        duration can be no lower (where torch runs a matrix-vector product on one thread
        whatever its thread count, more threads do not lift the floor; a profile whose
        ``parallel_gemv`` says otherwise lowers it with the threads, up to its
        ``memory_streams``: :attr:`parastream.device.cost.OpCost.spreads_traffic`)."""
        gbps = self.dram_gbps or bandwidth_gbps
        return traffic / (gbps * 1e3) if gbps > 0 else 0.0


class CoreLimitFacts(msgspec.Struct, forbid_unknown_fields=True):
    """Whether the device's documentation lists ``limit_core_num`` for each Ascend path:
    TorchAir's per-op ``torchair.scope.limit_core_num`` (GE graph mode) and npugraph_ex's
    per-stream ``torch.npu.npugraph_ex.scope.limit_core_num`` (which needs torch_npu >=
    ``min_torch_npu``), with the documents that say so. The C2 rung of a plan and the
    core limits of generated code exist only where one of the two is true."""

    torchair: bool
    npugraph_ex: bool
    source: str
    min_torch_npu: str = ""


class DeviceProfile(msgspec.Struct, forbid_unknown_fields=True):
    """One device, as the cost model and the headroom bound see it."""

    name: str
    kind: str
    cores: Cores
    peak_tflops: dict[str, dict[str, float]]
    memory_bandwidth_gbps: float
    launch_overhead_us: float
    hw_queues: int
    max_streams: int
    scheduler_sweep_us: float
    sources: dict[str, str]
    description: str = ""
    #: CPU only: how much each extra core speeds one op up, s(k) = 1 + (k - 1) * e; 1.0 is
    #: perfect intra-op scaling. Small matmuls scale poorly, which is exactly when two CPU
    #: streams with one thread each beat one stream with all threads.
    intra_op_efficiency: float = 1.0
    #: where ``limit_core_num`` exists on this device (None: nowhere; see CoreLimitFacts)
    core_limit: CoreLimitFacts | None = None
    #: CPU only: measured costs of op types (``linear``, ``conv2d``, ``rms_norm``, ...) that
    #: replace the roofline for them and their families (see cpu.cost.op_rate_key)
    op_rates: dict[str, OpRate] = {}
    #: CPU only: the executor's fixed cost per forward call (setup, rejoin, outputs)
    run_overhead_us: float = 0.0
    #: CPU only: the part of ``launch_overhead_us`` inside each op's recorded interval
    #: (reading its inputs, storing its value, freeing what it read last); an op time taken
    #: from a captured timeline already holds it (:func:`parastream.sim.run.measured_costs`
    #: adds the rest). 0 = none known: the whole per-op cost is added
    op_inside_us: float = 0.0
    #: CPU only: per cross-stream wait that blocks, from the event's record to the waiting
    #: worker thread running again (an OS wake-up)
    event_wake_us: float = 0.0
    #: CPU only: the executor's cost per stream beyond the first, per forward call
    stream_overhead_us: float = 0.0
    #: CPU only: the executor's cost of one folded view (a ``view``, ``transpose``,
    #: ``slice``, ... that is no op of the plan): it runs inside the interval of the first
    #: op that reads it, which the importer counts in that op's meta (``views``)
    view_us: float = 0.0
    #: how many memory-bound tasks can run at once at their full speed: one core of a CPU
    #: cannot pull the whole DRAM bandwidth (two cores pull more than one, less than
    #: twice as much), so ``n`` concurrent memory-bound tasks each run at ``min(1, this / n)`` of
    #: their own speed. 1.0 (the default, and right for accelerators, whose memory times
    #: are already at full bandwidth) shares the bandwidth equally.
    memory_streams: float = 1.0
    #: CPU only: bytes of an op's data that stay in cache from one call to the next; a
    #: rated op whose traffic exceeds it is costed at no less than its DRAM floor (see
    #: ``OpRate.floor_us``). 0 = not measured: every rated op gets the floor.
    cache_bytes: int = 0
    #: CPU only: after how long without running an op type its ops pay their whole cold
    #: cost (``OpRate.cold_1_us`` / ``cold_all_us``); sooner, a share in proportion. 0 =
    #: always the whole cost (when the op rates carry one).
    cold_after_us: float = 0.0
    #: CPU only: the measured share of the whole cold cost due after an idle, as
    #: ``[idle_us, share]`` points, idle ascending, share from 0 to 1: interpolated between
    #: them (from 0 at no idle; the last share beyond the last point, ramping on to 1 at
    #: ``cold_after_us``). Empty: the share rises in proportion to the idle up to
    #: ``cold_after_us``. (Inside a model the idles between ops of one type are short,
    #: where a measured share is usually well above the proportional ramp's.)
    cold_curve: list[list[float]] = []
    #: CPU only: whether torch spreads a matrix-vector product (a batch-1 ``linear``) over
    #: its intra-op threads on this CPU. Where it does not, a GEMV runs on the calling
    #: thread whatever the thread count, and only a second stream puts another core to
    #: work; where it does, one stream already uses every core and more streams gain
    #: nothing. ``calibrate`` measures it.
    parallel_gemv: bool = False
    #: graph mode (a captured graph: GE / aclgraph on Ascend, CUDA graphs): the device-side
    #: cost of dispatching one task of the graph, paid on the task's queue before it starts,
    #: in place of the eager host's per-op launch. None: the profile has no figure, and
    #: graph mode cannot be simulated on it (the cpu backend runs no captured graphs)
    graph_dispatch_us: float | None = None
    schema: str = SCHEMA

    @property
    def on_host(self) -> bool:
        """Whether the ops run as host kernels on CPU threads (``kind`` cpu): the streams
        are threads that split the cores and share the interpreter lock, and each op's
        dispatch is host time inside it rather than a launch that overlaps a device. The
        one place a profile's kind decides that."""
        return self.kind == "cpu"

    @property
    def cost_model(self) -> str:
        """The cost model that prices this profile's ops, by its name in
        :data:`parastream.device.cost.COST_MODELS`: ``host_kernels`` where the ops run as
        host kernels (:attr:`on_host`; the cpu backend's model,
        :mod:`parastream.cpu.cost`), else ``roofline``."""
        return "host_kernels" if self.on_host else "roofline"

    @property
    def op_host_us(self) -> float:
        """Host time inside every op's own duration: on a CPU the executor's per-op cost
        (the host is the device, and that dispatch also holds Python's interpreter lock),
        elsewhere 0 (a device kernel's launch overlaps the device's work)."""
        return self.launch_overhead_us if self.on_host else 0.0

    def speedup_on(self, cores: int) -> float:
        """How much faster one op runs on ``cores`` cores than on one (CPU profiles)."""
        if not self.on_host:
            return float(cores)
        return 1.0 + (max(1, cores) - 1) * self.intra_op_efficiency

    @property
    def shared_cores(self) -> bool:
        """Whether matrix and vector work compete for the same cores: true on GPUs and CPUs
        (SMs / cores do both) and on coupled Ascend parts (cube and vector units inside one
        AI core, e.g. the 910); false where Ascend has separate vector cores (910B/A2)."""
        return self.kind != "npu" or self.cores.cube == self.cores.vector

    def unit_cores(self, unit: str) -> int:
        """Cores available to ``unit`` ("cube" or "vector")."""
        return self.cores.vector if unit == "vector" else self.cores.cube

    def peak(self, unit: str, dtype: str) -> float:
        """Peak TFLOPS of ``unit`` ("cube"/"vector") for a normalised ``dtype``.

        A dtype the profile does not list falls back to the nearest one it does
        (bf16 <-> fp16, int8/fp8 -> fp16, anything else -> fp32), then to the unit's
        slowest listed rate, so an estimate is never faster than the data allows.
        """
        table = self.peak_tflops.get(unit) or self.peak_tflops["vector"]
        for d in (dtype, *_FALLBACK.get(dtype, ()), "fp32"):
            if d in table:
                return table[d]
        return min(table.values())


_FALLBACK = {"bf16": ("fp16",), "fp16": ("bf16",), "int8": ("fp16", "bf16"),
             "fp8": ("int8", "fp16", "bf16"), "fp64": ("fp32",)}


#: upper bounds on a profile's counts (see :func:`_check`)
MAX_CORES = 100_000
MAX_QUEUES = 1024
MAX_STREAMS = 1_000_000
#: and on its times (us; 1e9 us is a quarter of an hour per op or launch) and other
#: magnitudes (rates, bandwidths, byte counts): finite but huge values overflowed the
#: simulator's integer nanoseconds (a launch of 1e300 us gave a wall of 1.7e301)
MAX_TIME_US = 1e9
MAX_MAGNITUDE = 1e18


def _too_big(p: DeviceProfile) -> str | None:
    """The first of a profile's numbers past :data:`MAX_TIME_US` (``*_us`` fields and
    ``cold_curve`` idles) or :data:`MAX_MAGNITUDE` (the rest), named by its path; or None."""
    def walk(obj: object, path: str):
        if isinstance(obj, msgspec.Struct):
            for f in obj.__struct_fields__:
                yield from walk(getattr(obj, f), f"{path}.{f}" if path else f)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                yield from walk(v, f"{path}.{k}")
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                yield from walk(v, f"{path}[{i}]")
        elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
            yield path, obj

    for path, v in walk(p, ""):
        us = path.endswith("_us") or path.startswith("cold_curve") and path.endswith("[0]")
        most = MAX_TIME_US if us else MAX_MAGNITUDE
        if abs(v) > most:
            return f"{path} is {v:g}, past the {most:g}{' us' if us else ''} this parastream models"
    return None


def _check(p: DeviceProfile, where: str | None) -> DeviceProfile:
    """``p`` when every figure is in range and sourced; else :class:`InputError` naming
    ``where`` and the first problem found."""
    if p.schema != SCHEMA:
        raise InputError(where, f"unsupported device profile schema {p.schema!r} "
                                f"(this parastream reads {SCHEMA})")
    for check in _PROFILE_CHECKS:
        problem = check(p)
        if problem:
            raise InputError(where, f"device profile {p.name!r}: {problem}")
    return p


def _identity_problem(p: DeviceProfile) -> str | None:
    """A name, a known kind, and cores of both units."""
    if not p.name.strip():
        return "name must not be empty (plans and simulated figures are labelled by it)"
    if p.kind not in KINDS:
        return f"kind {p.kind!r} is not one of {', '.join(KINDS)}"
    if p.cores.cube <= 0 or p.cores.vector <= 0:
        return "cores.cube and cores.vector must be positive"
    return None


def _peak_problem(p: DeviceProfile) -> str | None:
    """A positive peak for each unit, by known dtypes."""
    for unit in ("cube", "vector"):
        table = p.peak_tflops.get(unit)
        if not table:
            return f"peak_tflops.{unit} is missing"
        for dtype, v in table.items():
            if dtype not in DTYPES:
                return (f"peak_tflops.{unit}: unknown dtype {dtype!r} "
                        f"(expected one of {', '.join(DTYPES)})")
            if not v > 0:
                return f"peak_tflops.{unit}.{dtype} must be positive"
    return None


def _size_problem(p: DeviceProfile) -> str | None:
    """Bandwidth, queues and streams positive; core, queue and stream counts and every
    time within what parastream models."""
    for key in ("memory_bandwidth_gbps", "hw_queues", "max_streams"):
        if not getattr(p, key) > 0:
            return f"{key} must be positive"
    # past any real part (an H200 has 132 SMs and 128 hardware queues; a 910B 24 AI cores);
    # the simulator sizes tables by these and the planner tries every stream count up to
    # hw_queues, so an absurd one is a MemoryError or an endless plan, not a result
    for key, value, most in (("cores.cube", p.cores.cube, MAX_CORES),
                             ("cores.vector", p.cores.vector, MAX_CORES),
                             ("hw_queues", p.hw_queues, MAX_QUEUES),
                             ("max_streams", p.max_streams, MAX_STREAMS)):
        if value > most:
            return f"{key} is {value}, past the {most} this parastream models"
    return _too_big(p)


def _efficiency_problem(p: DeviceProfile) -> str | None:
    """An intra-op efficiency that is a share."""
    if not 0.0 <= p.intra_op_efficiency <= 1.0:
        return "intra_op_efficiency must be between 0 and 1"
    return None


def _op_rates_problem(p: DeviceProfile) -> str | None:
    """Every op rate: a known metric, positive rates, fixed and cold times not negative."""
    for key, r in p.op_rates.items():
        if r.metric not in ("flops", "bytes"):
            return f"op_rates.{key}.metric must be 'flops' or 'bytes'"
        if not (r.rate_1 > 0 and r.rate_all > 0 and r.fixed_1_us >= 0 and r.fixed_all_us >= 0):
            return f"op_rates.{key}: rates must be positive and fixed times not negative"
        if not r.knee_work >= 0 or (r.knee_work > 0 and not (
                r.low_rate_1 > 0 and r.low_rate_all > 0 and r.low_fixed_1_us >= 0
                and r.low_fixed_all_us >= 0)):
            return (f"op_rates.{key}: with a knee_work, the low_* rates must be positive "
                    "and their fixed times not negative")
        if not (r.dram_gbps >= 0 and r.cold_1_us >= 0 and r.cold_all_us >= 0
                and r.cold_gbps_1 >= 0 and r.cold_gbps_all >= 0):
            return (f"op_rates.{key}: dram_gbps and cold times and rates must be zero or "
                    "positive")
    return None


def _memory_problem(p: DeviceProfile) -> str | None:
    """At least one memory stream (on a CPU, no more than its cores); a cache size not
    negative."""
    if not p.memory_streams >= 1.0:
        return "memory_streams must be at least 1"
    if p.on_host and p.memory_streams > max(1, p.cores.cube):
        # each memory stream is a core pulling from DRAM: no more of them than cores
        return (f"memory_streams ({p.memory_streams:g}) must not exceed the cores "
                f"({p.cores.cube})")
    if p.cache_bytes < 0:
        return "cache_bytes must be zero or positive"
    return None


def _overhead_problem(p: DeviceProfile) -> str | None:
    """Overheads and times not negative; cold-curve points in range, idles ascending."""
    for key in ("launch_overhead_us", "scheduler_sweep_us", "run_overhead_us", "event_wake_us",
                "stream_overhead_us", "cold_after_us", "view_us", "op_inside_us"):
        if not getattr(p, key) >= 0:
            return f"{key} must be zero or positive"
    idles = []
    for point in p.cold_curve:
        if len(point) != 2 or not (point[0] >= 0 and 0 <= point[1] <= 1):
            return "cold_curve: each point must be [idle_us >= 0, share from 0 to 1]"
        idles.append(point[0])
    if idles != sorted(idles):
        return "cold_curve: idles must be in ascending order"
    if p.graph_dispatch_us is not None and not p.graph_dispatch_us >= 0:
        return "graph_dispatch_us must be zero or positive"
    return None


def _sources_problem(p: DeviceProfile) -> str | None:
    """A source for every required figure, and for an optional one once given."""
    sourced = SOURCED_KEYS + (("graph_dispatch_us",) if p.graph_dispatch_us is not None else ())
    missing = [k for k in sourced if not p.sources.get(k, "").strip()]
    if missing:
        return (f"no source given for {', '.join(missing)} (every number needs one in "
                f"'sources')")
    return None


#: the checks of a profile, in order; each returns its first problem, or None
_PROFILE_CHECKS = (_identity_problem, _peak_problem, _size_problem, _efficiency_problem,
                   _op_rates_problem, _memory_problem, _overhead_problem, _sources_problem)


def loads_profile(data: bytes | str, where: str | None = None) -> DeviceProfile:
    """Parse and check profile JSON; :class:`InputError` naming ``where`` when it is bad."""
    try:
        p = msgspec.json.decode(data, type=DeviceProfile)
    except msgspec.ValidationError as exc:
        raise InputError(where, f"not a parastream device profile: {exc}") from None
    except msgspec.DecodeError as exc:
        raise InputError(where, f"invalid JSON: {exc}") from None
    return _check(p, where)


def dumps_profile(p: DeviceProfile) -> bytes:
    """The profile as indented ``parastream.device/1`` JSON, schema key first."""
    _check(p, None)
    body = msgspec.to_builtins(p)
    body.pop("schema", None)
    return msgspec.json.format(msgspec.json.encode({"schema": SCHEMA, **body}), indent=2) + b"\n"


def _builtin_dir():
    return resources.files("parastream.device") / "profiles"


def profile_warning(p: "DeviceProfile") -> str | None:
    """The warning a calibration left in the profile (``sources["warning"]``: it ran on a
    busy machine), for the commands that predict from it to repeat; None when there is none."""
    note = (p.sources or {}).get("warning", "").strip()
    return f"warning: device profile {p.name!r}: {note}" if note else None


def warn_if_noted(p: "DeviceProfile") -> None:
    """Print :func:`profile_warning` on stderr, as the commands that predict from ``p`` do."""
    import sys

    note = profile_warning(p)
    if note:
        print(f"parastream: {note}", file=sys.stderr)


#: the profile ``graph`` and ``simulate`` use when none is named (``plan`` defaults to
#: ``cpu``, the device ``run`` executes on here)
DEFAULT_DEVICE = "ascend910b"

#: other spellings users type for the shipped profiles
ALIASES = {"910": "ascend910", "910a": "ascend910", "ascend910a": "ascend910",
           "910b": "ascend910b", "a2": "ascend910b", "ascenda2": "ascend910b",
           "h100sxm": "h100", "h200sxm": "h200", "host": "cpu", "local": "cpu"}


def shipped_key(name: str) -> str:
    """The shipped profile a name stands for (case, ``-``, ``_`` and spaces ignored,
    aliases resolved); whether one exists is for :func:`is_shipped`."""
    key = name.lower().replace("-", "").replace("_", "").replace(" ", "")
    return ALIASES.get(key, key)


def is_shipped(name: str) -> bool:
    """Whether ``name`` would load a shipped profile (``h100``, ``host``, ``ASCEND-910B``)."""
    return shipped_key(name) in list_profiles()


def list_profiles() -> list[str]:
    """Names of the shipped profiles (``load_profile`` accepts each)."""
    return sorted(f.name[:-5] for f in _builtin_dir().iterdir() if f.name.endswith(".json"))


def read_profile_file(path: str | os.PathLike[str]) -> bytes:
    """A profile file's bytes (InputError naming it when it cannot be read)."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InputError(os.fspath(path),
                         f"cannot read device profile: {exc.strerror or exc}") from None


def load_profile(name_or_path: str | os.PathLike[str]) -> DeviceProfile:
    """A shipped profile by name (``ascend910b``, ``h100``, ...; case and ``-``/``_``
    ignored) or a profile JSON file by path. Unknown names and bad files raise
    :class:`InputError`."""
    text = os.fspath(name_or_path)
    path = Path(text)
    if path.suffix == ".json" or os.sep in text or path.is_file():
        return loads_profile(read_profile_file(text), text)
    key = shipped_key(text)
    f = _builtin_dir() / f"{key}.json"
    if not f.is_file():
        raise InputError(None, f"unknown device {text!r} (shipped profiles: "
                               f"{', '.join(list_profiles())}; or give a profile .json path)")
    return loads_profile(f.read_bytes(), f"{key}.json")
