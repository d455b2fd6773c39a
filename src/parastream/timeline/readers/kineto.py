"""PyTorch profiler (Kineto) Chrome traces, ``.json`` or ``.json.gz``.

Device work is ``ph: "X"`` with ``cat`` in kernel / gpu_memcpy / gpu_memset (older
traces: Kernel / Memcpy / Memset). ``cuda_sync`` events named ``Stream Wait Event`` are
the GPU side of ``cudaStreamWaitEvent`` and become waits on ``args.stream`` with
``args.wait_on_stream`` as the stream waited on. Launch times come from the
``cuda_runtime`` event with the same ``correlation`` (or the ``ac2g`` /
``async_cpu_to_gpu`` flow start), and ``ProfilerStep#N`` annotations give steps.

MTIA traces (``mtia_ccp_events``, one per command on ``args.stream``) are read the same
way: ``dma*`` commands are copies, ``event_wait`` is a stream wait, ``event_record`` is a
marker and skipped, and ``mtia_runtime`` events give launch times. A CUPTI range-profiler
trace (``cuda_profiler_range`` counters, no streams) is refused as such.

Decoding uses msgspec with typed structs so unknown fields are skipped without building
dicts, and timestamps are kept as raw JSON text and parsed exactly to nanoseconds. A
field that holds a value of an unexpected type (a number for a name, an object for a
grid) sends its piece of the trace through a slower decoder that takes any value, drops
the odd ones, and gives one warning per field; a field parastream does not read is never
looked at, and never refuses a file.
"""

from __future__ import annotations

import gc
import itertools
import math
import os
import re
from collections import Counter
from typing import Any, Iterator

import msgspec
import numpy as np

from ...errors import InputError
from . import GZIP_MAGIC, read_all, read_chunks, read_head, text_encoding
from .. import comm as comm_mod
from ..collectives import Collectives, dtype_bytes, make_collectives, normalize_op
from ..intervals import window_ids
from ..model import (KIND_COMM, KIND_COMPUTE, KIND_MEMCPY, KIND_MEMSET, DeviceInfo,
                     Interner, Timeline, core_code, make_timeline, value_flags)
from ..nogc import gc_paused
from ..procs import fork_pool, fork_workers
from ..timeparse import tokens_to_ns, us_text_to_ns
from .spans import SpanReader, TooLong, cut_spans, join_failed, read_range

FORMAT = "kineto"

#: communication kernels, the same classes HTA uses (NCCL on CUDA, HCCL on Ascend/torch_npu)
COMM_NAME = re.compile(r"^nccl|^hccl|ncclKernel|ncclDevKernel", re.IGNORECASE)
#: MTIA device work (Meta's accelerator): one event per command on a stream (args.stream)
MTIA_CAT = "mtia_ccp_events"
#: MTIA commands that are stream synchronisation, not work: a wait (args.wait_on_stream,
#: read as a Stream Wait Event) and an event record (a marker of no duration to speak of)
MTIA_WAIT, MTIA_RECORD = "event_wait", "event_record"
#: MTIA copies (HTA's MTIA memory kernels)
MTIA_DMA = re.compile(r"^dma")
#: CUPTI range-profiler counters: per-kernel metric ranges with no stream, no device timing
PROFILER_RANGE_CAT = "cuda_profiler_range"
_DEVICE_CATS = {"kernel": KIND_COMPUTE, "gpu_memcpy": KIND_MEMCPY, "gpu_memset": KIND_MEMSET,
                "memcpy": KIND_MEMCPY, "memset": KIND_MEMSET, MTIA_CAT: KIND_COMPUTE}
_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", MTIA_CAT)
_MTIA_INDEX = _CATS.index(MTIA_CAT)
_CAT_KIND = np.array([_DEVICE_CATS[c] for c in _CATS], np.int8)
#: category spellings seen in traces -> index into _CATS
_CAT_INDEX = {v: i for i, c in enumerate(_CATS[:_MTIA_INDEX])
              for v in (c, c.capitalize(), c.upper())}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: the most multiprocessors a trace's device may claim (an H200 has 132)
MAX_SMS = 100_000
_STREAM_TXT = re.compile(r"^\s*(?:stream\s*)?(-?\d+)\s*$", re.IGNORECASE)


# gc=False: a trace has millions of events and none of these structs can form a cycle;
# untracked objects also spare the collector from rescanning them during decoding.
# Only the fields parastream reads are declared: msgspec skips the others unread.
class _Args(msgspec.Struct, gc=False):
    stream: int | str | None = None
    device: int | str | None = None
    correlation: int | str | None = None
    wait_on_stream: int | str | None = None
    # a kernel's launch grid; torch.compile's cpu_op events carry Triton's text "grid(100,)"
    grid: list[int] | str | None = None
    # a kernel's share of the SMs' warp slots (percent), and its warps per SM: the
    # evidence for SM contention (grid blocks are not SMs)
    occupancy: float | None = msgspec.field(default=None, name="est. achieved occupancy %")
    warps_per_sm: float | None = msgspec.field(default=None, name="warps per SM")
    # a collective's call (on an NCCL kernel, or on the record_param_comms cpu_op whose
    # External id the kernel carries): see :func:`_collectives`
    ext_id: int | str | None = msgspec.field(default=None, name="External id")
    collective: str | None = msgspec.field(default=None, name="Collective name")
    group: int | str | None = msgspec.field(default=None, name="Process Group Name")
    group_ranks: list[int] | str | None = msgspec.field(default=None, name="Process Group Ranks")
    in_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    dtype: str | None = None
    seq: int | str | None = msgspec.field(default=None, name="Seq")
    seq_lower: int | str | None = msgspec.field(default=None, name="seq")
    src_rank: int | None = msgspec.field(default=None, name="Src Rank")
    dst_rank: int | None = msgspec.field(default=None, name="Dst Rank")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    id: int | str | None = None
    ts: msgspec.Raw = msgspec.Raw()  # exact text: epoch us with ns decimals
    # durations are small: a double holds their 3 decimals exactly enough to round to ns
    dur: float | str | None = None
    args: _Args | None = None


class _LooseArgs(msgspec.Struct, gc=False):
    """:class:`_Args` whose fields take any JSON value (checked by :func:`_tolerant`)."""

    stream: Any = None
    device: Any = None
    correlation: Any = None
    wait_on_stream: Any = None
    grid: Any = None
    occupancy: Any = msgspec.field(default=None, name="est. achieved occupancy %")
    warps_per_sm: Any = msgspec.field(default=None, name="warps per SM")
    ext_id: Any = msgspec.field(default=None, name="External id")
    collective: Any = msgspec.field(default=None, name="Collective name")
    group: Any = msgspec.field(default=None, name="Process Group Name")
    group_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    seq: Any = msgspec.field(default=None, name="Seq")
    seq_lower: Any = msgspec.field(default=None, name="seq")
    src_rank: Any = msgspec.field(default=None, name="Src Rank")
    dst_rank: Any = msgspec.field(default=None, name="Dst Rank")


class _LooseEvent(msgspec.Struct, gc=False):
    """:class:`_Event` whose fields take any JSON value (checked by :func:`_tolerant`)."""

    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    id: Any = None
    ts: msgspec.Raw = msgspec.Raw()
    dur: Any = None
    args: _LooseArgs | list | str | float | bool | None = None


class _DevProp(msgspec.Struct):
    id: int | str | None = None
    name: str | None = None
    numSms: int | None = None
    maxThreadsPerMultiprocessor: int | None = None
    warpSize: int | None = None


class _TraceHead(msgspec.Struct):
    """The document without decoding its parts: each stays one raw span, decoded on its
    own so that an odd one costs a warning, not the file."""

    traceEvents: msgspec.Raw = msgspec.Raw()
    deviceProperties: msgspec.Raw = msgspec.Raw()
    distributedInfo: msgspec.Raw = msgspec.Raw()
    traceName: msgspec.Raw = msgspec.Raw()  # parastream's writer names the candidate run


class _Head(msgspec.Struct):
    """What the reader uses of the document besides its events."""

    deviceProperties: list[_DevProp] = []
    distributedInfo: dict | None = None
    traceName: str | None = None


#: a field of a trace event (or ``event`` for an event that is no JSON object) -> what
#: parastream expects there, for the one warning given per field holding something else
_EXPECTED = {"event": "an object", "ph": "text", "cat": "text", "name": "text",
             "pid": "an integer or text", "tid": "an integer or text",
             "id": "an integer or text", "dur": "a number", "args": "an object",
             "args.stream": "an integer or text", "args.device": "an integer or text",
             "args.correlation": "an integer or text",
             "args.wait_on_stream": "an integer or text", "args.grid": "a list of integers",
             "args.est. achieved occupancy %": "a number", "args.warps per SM": "a number",
             "args.External id": "an integer or text", "args.Collective name": "text",
             "args.Process Group Name": "an integer or text",
             "args.Process Group Ranks": "a list of integers or text",
             "args.In msg nelems": "an integer", "args.Out msg nelems": "an integer",
             "args.dtype": "text", "args.Seq": "an integer or text",
             "args.seq": "an integer or text", "args.Src Rank": "an integer",
             "args.Dst Rank": "an integer"}
_ODD = object()  # a value of an unexpected type, noted and dropped


def _json_type(v: object) -> str:
    """A Python value's JSON type, as a warning names it."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true/false"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "text"
    return "a list" if isinstance(v, list) else "an object"


def _note(odd: dict, field: str, value: object) -> None:
    """Count one odd ``value`` of ``field``: ``odd[field]`` is [count, set of JSON types]."""
    seen = odd.setdefault(field, [0, set()])
    seen[0] += 1
    seen[1].add(_json_type(value))


def _ident(v: object) -> object:
    """An id field (stream, correlation, pid, ...): an integer or text; a whole float is
    the integer it spells; anything else is :data:`_ODD`."""
    t = type(v)
    if t is int or t is str or v is None:
        return v
    if t is float and v.is_integer():  # type: ignore[union-attr]
        return int(v)  # type: ignore[arg-type]
    return _ODD


def _duration(v: object) -> object:
    t = type(v)
    return v if t is float or t is int or t is str or v is None else _ODD


def _number(v: object) -> object:
    t = type(v)
    return v if t is float or t is int or v is None else _ODD


def _grid(v: object) -> object:
    if v is None or type(v) is str:
        return v
    if type(v) is list and all(type(x) is int for x in v):
        return v
    return _ODD


def _text(v: object) -> object:
    return v if v is None or type(v) is str else _ODD


def _integer(v: object) -> object:
    out = _ident(v)
    return out if out is None or type(out) is int else _ODD


def _checked(odd: dict, field: str, v: object, check) -> Any:
    """``check(v)``, or None (noted in ``odd``) when ``v`` has an unexpected type."""
    out = check(v)
    if out is _ODD:
        _note(odd, field, v)
        return None
    return out


#: categories whose events parastream reads; odd fields elsewhere are dropped unremarked
_READ_CATS = frozenset(["cuda_runtime", "cuda_driver", "mtia_runtime", "cuda_sync", "ac2g",
                        "async_cpu_to_gpu", "mtia_ccp_events"])
#: the host op that holds a collective's arguments in traces whose kernels lack them
PARAM_COMMS = "record_param_comms"
#: the fields of :class:`_Args` (attribute, name in the trace) and the check of their values
_ARG_NAMES = dict(zip(_Args.__struct_fields__, _Args.__struct_encode_fields__))
_ARG_CHECKS = tuple((f, _ARG_NAMES[f], check) for f, check in (
    ("stream", _ident), ("device", _ident), ("correlation", _ident), ("wait_on_stream", _ident),
    ("grid", _grid), ("occupancy", _number), ("warps_per_sm", _number), ("ext_id", _ident),
    ("collective", _text), ("group", _ident), ("group_ranks", _grid), ("in_nelems", _integer),
    ("out_nelems", _integer), ("dtype", _text), ("seq", _ident), ("seq_lower", _ident),
    ("src_rank", _integer), ("dst_rank", _integer)))


def _loose_args(odd: dict, a: object) -> _Args | None:
    """:class:`_LooseArgs` as :class:`_Args`, values of an unexpected type dropped (and
    noted in ``odd``)."""
    if not isinstance(a, _LooseArgs):
        if a is not None:
            _note(odd, "args", a)
        return None
    return _Args(**{f: _checked(odd, "args." + name, getattr(a, f), check)
                    for f, name, check in _ARG_CHECKS})


def _tolerant(items: list) -> tuple[list[_Event], dict]:
    """Events decoded with :class:`_LooseEvent`, as :class:`_Event` with every value of
    an unexpected type dropped; the second result counts them per field (only in events
    parastream reads: device work, launches, syncs, flows, ProfilerStep spans)."""
    odd: dict = {}
    out = []
    for e in items:
        if not isinstance(e, _LooseEvent):
            _note(odd, "event", e)
            continue
        ph, cat, name = e.ph, e.cat, e.name
        if type(ph) is not str:
            if ph is not None:
                _note(odd, "ph", ph)
            ph = ""
        if type(cat) is not str:
            if cat is not None:
                _note(odd, "cat", cat)
            cat = ""
        read = (cat in _CAT_INDEX or cat in _READ_CATS
                or (type(name) is str and (name.startswith("ProfilerStep#")
                                           or name == PARAM_COMMS)))
        if type(name) is not str:
            if read:
                _note(odd, "name", name)
            name = ""
        if not read:  # the scan looks at its phase, category and name only
            out.append(_Event(ph=ph, cat=cat, name=name))
            continue
        args = _loose_args(odd, e.args)
        out.append(_Event(ph=ph, cat=cat, name=name,
                          pid=_checked(odd, "pid", e.pid, _ident),
                          tid=_checked(odd, "tid", e.tid, _ident),
                          id=_checked(odd, "id", e.id, _ident), ts=e.ts,
                          dur=_checked(odd, "dur", e.dur, _duration), args=args))
    return out, odd


def odd_field_warnings(odd: dict) -> list[str]:
    """One warning per field that held values of an unexpected type (see :func:`_tolerant`)."""
    out = []
    for field, (n, kinds) in sorted(odd.items()):
        kind = " or ".join(sorted(kinds))
        if field == "event":
            out.append(f"skipped {n} trace event(s) that are not JSON objects ({kind})")
        else:
            out.append(f"ignored {field} of {n} trace event(s) ({kind} where "
                       f"{_EXPECTED[field]} was expected)")
    return out


_EVENTS = msgspec.json.Decoder(list[_Event])
_LOOSE = msgspec.json.Decoder(list[_LooseEvent | list | str | float | bool | None])


def _decode_events(buf) -> tuple[list[_Event], dict]:
    """The events of a JSON array: typed and fast, or when some field holds a value of
    an unexpected type, through :func:`_tolerant`. Raises DecodeError for invalid JSON."""
    try:
        return _EVENTS.decode(buf), {}
    except msgspec.ValidationError:
        return _tolerant(_LOOSE.decode(buf))


#: a boundary between two events of the array (validated: a split inside a string or a
#: nested object makes the chunk invalid JSON, and the reader then decodes in one piece)
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
CHUNK_BYTES = 8 << 20


#: ``otherData.generator`` of the Perfetto views ``analyze --perfetto`` writes
#: (:mod:`parastream.report.perfetto`): a view of an analysis, which is no trace to read
PERFETTO_VIEW_MARK = "parastream perfetto view"


def is_perfetto_view(head: bytes) -> bool:
    """Whether a file's first bytes are those of a :data:`PERFETTO_VIEW_MARK` view (the
    writer puts the mark first)."""
    return f'"{PERFETTO_VIEW_MARK}"'.encode() in head[:512]


def sniff(head: bytes) -> bool:
    """A JSON object whose start mentions ``traceEvents`` (Chrome trace)."""
    h = head.lstrip()
    return h[:1] == b"{" and b'"traceEvents"' in h


def stream_label(v: object) -> str | None:
    """A stream's id as the timeline names it: the number of a ``"stream 7"`` label or
    of an integer id, else the stripped text; None for no id."""
    if v is None:
        return None
    if isinstance(v, str):
        m = _STREAM_TXT.match(v)
        return m.group(1) if m else v.strip() or None
    return str(int(v))


def _dur_ns(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Durations (JSON numbers, or text) in us -> (int64 ns, ok mask)."""
    try:
        us = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):  # text or nulls among them: one by one
        us = np.full(len(values), np.nan)
        for i, v in enumerate(values):
            try:
                us[i] = float(v) if not isinstance(v, str) else us_text_to_ns(v) / 1000.0
            except (TypeError, ValueError, OverflowError):
                pass
    # a duration past int64 nanoseconds (292 years) is as unusable as NaN: not cast
    ok = np.isfinite(us) & (np.abs(us) < 9.2e15)
    return np.where(ok, np.rint(np.where(ok, us, 0.0) * 1000.0), 0).astype(np.int64), ok


def _boundaries(span: memoryview, size: int | None = None) -> list[tuple[int, int]]:
    """Cut the text of the events array (without its brackets) into (start, end) pieces of
    about ``size`` bytes (:data:`CHUNK_BYTES`) at event boundaries."""
    size = size or CHUNK_BYTES
    n = len(span)
    out, a = [], 0
    while a < n:
        b = a + size
        m = _BOUNDARY.search(span, b) if b < n else None
        if m is None:
            out.append((a, n))
            break
        out.append((a, m.start() + 1))
        a = m.end() - 1
    return out


def _as_int(v) -> int:
    if isinstance(v, int):
        return v
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return -1


_I64 = np.iinfo(np.int64)


def _int64(values: list) -> np.ndarray:
    """Whole numbers as int64; one outside int64 (a correlation id of 10**30) is -1, the
    value for none, as an unreadable one is."""
    try:
        return np.array(values, np.int64)
    except OverflowError:
        return np.array([v if _I64.min <= v <= _I64.max else -1 for v in values], np.int64)


def _wait(e: _Event) -> tuple:
    """A stream wait (CUDA's Stream Wait Event, MTIA's event_wait) as the scan keeps it:
    (stream, stream waited on, name, raw ts, dur, correlation)."""
    a = e.args
    return (a.stream if a is not None and a.stream is not None else e.tid,
            a.wait_on_stream if a is not None else None, e.name, bytes(e.ts), e.dur,
            _as_int(a.correlation) if a is not None else -1)


#: the :class:`_Args` fields of a collective call, in the order :func:`_call` gives them
_CALL_FIELDS = ("ext_id", "collective", "group", "group_ranks", "in_nelems", "out_nelems",
                "dtype", "seq", "seq_lower", "src_rank", "dst_rank")


def _call(a: _Args | None) -> tuple | None:
    """A collective call's arguments as a plain tuple of :data:`_CALL_FIELDS` (None for no
    args): what a worker process sends back of an NCCL kernel or a record_param_comms op."""
    return None if a is None else tuple([getattr(a, f) for f in _CALL_FIELDS])


def _scan(events: list[_Event], odd: dict | None = None) -> dict:
    """The columns the timeline needs from decoded events, nothing else: one pass routes
    the events (:func:`_route`), then each kind read is gone over once. ``odd`` counts
    fields with values of an unexpected type (:func:`_tolerant`); the scan adds kernels
    whose grid is not a list.

    Runs in worker processes for big traces, so it returns plain lists and arrays."""
    odd = {} if odd is None else odd
    routed = _route(events)
    dev = _device_columns(routed.device, odd)
    l_corr, l_ts, mtia_host = _launches(routed.launch)
    f_id, f_ts = [], []
    for e in routed.flows:
        if (e.cat == "ac2g" or e.cat == "async_cpu_to_gpu") and e.id is not None:
            f_id.append(_as_int(e.id))
            f_ts.append(e.ts)
    steps = [(int(m.group(1)), bytes(e.ts), e.dur) for e in routed.steps
             if (m := _STEP.match(e.name))]
    d_ts = dev.pop("ts")
    # HTA rounds timestamps only when pandas holds them as floats
    float_ts = any(b"." in bytes(t) or b"e" in bytes(t) for t in d_ts[:1000])
    ts, ok1 = tokens_to_ns(d_ts)
    dur, ok2 = _dur_ns(dev.pop("dur"))
    lts, lok = tokens_to_ns(l_ts)
    fts, fok = tokens_to_ns(f_ts)
    return {
        "count": len(events), **dev, "ts": ts, "dur": dur, "ok": ok1 & ok2,
        "l_corr": _int64(l_corr)[lok], "l_ts": lts[lok],
        "f_id": _int64(f_id)[fok], "f_ts": fts[fok], "steps": steps, "float_ts": float_ts,
        "odd": odd, "no_ph": routed.no_ph, "ranges": len(routed.ranges),
        "mtia_host": mtia_host,
        "param_comms": [(_as_int(e.args.ext_id), _call(e.args)) for e in routed.comms
                        if e.args is not None and e.args.ext_id is not None],
    }


class _Routed:
    """The events the scan reads, by what it makes of them, each list in file order:
    device work and stream syncs (their order decides the interning of names, streams and
    waits), host launch calls, flow starts, range-profiler counters and ProfilerStep
    spans, the record_param_comms host ops; ``no_ph`` counts events without a phase."""

    def __init__(self) -> None:
        self.device: list[_Event] = []
        self.launch: list[_Event] = []
        self.flows: list[_Event] = []
        self.ranges: list[_Event] = []
        self.steps: list[_Event] = []
        self.comms: list[_Event] = []  # record_param_comms host ops
        self.no_ph = 0


def _route(events: list[_Event]) -> _Routed:
    """Sort the events into :class:`_Routed`'s lists: one dict lookup per event."""
    r = _Routed()
    routes = {cat: r.device for cat in (*_CAT_INDEX, MTIA_CAT, "cuda_sync")}
    routes.update({cat: r.launch for cat in ("cuda_runtime", "cuda_driver", "mtia_runtime")})
    routes[PROFILER_RANGE_CAT] = r.ranges
    steps, flows, comms = r.steps, r.flows, r.comms
    no_ph = 0
    for e in events:
        ph = e.ph
        if ph == "X":
            bucket = routes.get(e.cat)
            if bucket is None:  # host ops: only ProfilerStep spans and collectives' args
                nm = e.name
                bucket = (steps if nm.startswith("ProfilerStep#")
                          else comms if nm == PARAM_COMMS else None)
            if bucket is not None:
                bucket.append(e)
        elif ph == "s":
            flows.append(e)
        elif not ph:
            no_ph += 1
    r.no_ph = no_ph
    return r


#: category -> index into _CATS for the device loop; stream syncs (cuda_sync) are -1
_DEVICE_INDEX = {**_CAT_INDEX, MTIA_CAT: _MTIA_INDEX, "cuda_sync": -1}


def _device_columns(events: list[_Event], odd: dict) -> dict:
    """The columns of device work (name, category, stream and device codes into the
    tables of distinct values, raw ts, dur, grid blocks, correlation, occupancy, warps per
    SM), the stream waits and host-sync counts met among ``events`` (see
    :func:`_sync_event`), and the communication kernels' rows with their collective
    arguments (:func:`_call`). Streams and devices fall back to the tid and pid."""
    names: dict = {}
    stream_labels: dict = {}
    device_labels: dict = {}
    d_name, d_cat, d_stream, d_dev, d_ts, d_dur, d_block, d_corr = ([] for _ in range(8))
    d_occ, d_warps = [], []  # NaN where the kernel records none
    nan = float("nan")
    waits: list[tuple] = []
    syncs: Counter = Counter()
    comm_name: list[bool] = []  # per name code: a communication kernel's name
    comms: list[tuple] = []  # (row, _call of its args) per communication kernel
    index, mtia, prod = _DEVICE_INDEX, _MTIA_INDEX, math.prod
    for e in events:
        k = index[e.cat]
        nm = e.name
        if k < 0 or (k == mtia and (nm == MTIA_WAIT or nm == MTIA_RECORD)):
            _sync_event(e, waits, syncs)
            continue
        nc = names.get(nm)
        if nc is None:
            nc = names[nm] = len(names)
            comm_name.append(COMM_NAME.search(nm) is not None)
        if k == 0 and comm_name[nc]:  # an NCCL/HCCL kernel: a collective call
            comms.append((len(d_name), _call(e.args)))
        d_name.append(nc)
        d_cat.append(k)
        a = e.args
        if a is not None:
            st = a.stream if a.stream is not None else ("tid", e.tid)
            dv = a.device if a.device is not None else ("pid", e.pid)
            g = a.grid
            if g and g.__class__ is list:
                d_block.append(prod(g))
            else:
                if g:  # text (as a Triton launch's): no block count
                    _note(odd, "args.grid", g)
                d_block.append(-1)
            c = a.correlation
            d_corr.append(c if isinstance(c, int) else _as_int(c))
            o, w = a.occupancy, a.warps_per_sm
            d_occ.append(nan if o is None else o)
            d_warps.append(nan if w is None else w)
        else:
            st, dv = ("tid", e.tid), ("pid", e.pid)
            d_block.append(-1)
            d_corr.append(-1)
            d_occ.append(nan)
            d_warps.append(nan)
        sc = stream_labels.get(st)
        if sc is None:
            sc = stream_labels[st] = len(stream_labels)
        d_stream.append(sc)
        dc = device_labels.get(dv)
        if dc is None:
            dc = device_labels[dv] = len(device_labels)
        d_dev.append(dc)
        d_ts.append(e.ts)
        d_dur.append(e.dur)
    return {"names": list(names), "stream_labels": list(stream_labels),
            "device_labels": list(device_labels),
            "name": np.array(d_name, np.int32), "cat": np.array(d_cat, np.int8),
            "stream": np.array(d_stream, np.int32), "dev": np.array(d_dev, np.int32),
            "ts": d_ts, "dur": d_dur, "block": _int64(d_block), "corr": _int64(d_corr),
            "occ": np.array(d_occ, np.float64), "warps": np.array(d_warps, np.float64),
            "waits": waits, "syncs": dict(syncs), "comms": comms}


def _sync_event(e: _Event, waits: list[tuple], syncs: Counter) -> None:
    """A stream sync among the device events: CUDA's Stream Wait Event and MTIA's
    event_wait are waits; other cuda_sync events are host syncs, counted by name; MTIA's
    event_record is a marker and skipped."""
    if e.cat == "cuda_sync":
        if e.name == "Stream Wait Event":
            waits.append(_wait(e))
        else:
            syncs[e.name] += 1
    elif e.name == MTIA_WAIT:
        waits.append(_wait(e))


def _launches(events: list[_Event]) -> tuple[list[int], list, int]:
    """(correlation ids, raw ts) of the host launch calls that have a correlation, and
    how many MTIA runtime calls there are."""
    l_corr, l_ts = [], []
    mtia_host = 0
    for e in events:
        if e.cat == "mtia_runtime":
            mtia_host += 1
        a = e.args
        if a is not None and a.correlation is not None:
            l_corr.append(_as_int(a.correlation))
            l_ts.append(e.ts)
    return l_corr, l_ts, mtia_host


# Big traces are scanned by forked worker processes: the reader sends each piece's bytes
# and gets its columns back, with a few pieces in flight, so no process holds the file.
PARALLEL_BYTES = 64 << 20
#: decompressed bytes read from the file at a time
READ_BYTES = 32 << 20
#: the most bytes of consecutive pieces joined after cuts that fell inside a value, before
#: the reader gives up cutting and decodes the document whole
MAX_JOIN_BYTES = 64 << 20


class _Fallback(Exception):
    """The document cannot be read piece by piece (malformed, or laid out unlike a
    Chrome trace): it is read whole, which also says what is wrong with it."""


def _scan_piece(framed: bytes) -> dict | str:
    """The scanned columns of the events of one piece of the array, ``[`` and ``]``
    around them (see :func:`_pieces`), or "decode" when that is no list of values (a cut
    fell inside a value)."""
    gc.disable()
    try:
        return _scan(*_decode_events(framed))
    except msgspec.DecodeError:
        return "decode"


def _span_offset(data: bytes, raw: msgspec.Raw) -> int | None:
    """Where the raw events array lies inside ``data`` (msgspec's Raw is a view into it)."""
    mv = memoryview(raw)
    if len(mv) == 0:
        return None
    base = np.frombuffer(data, np.uint8).ctypes.data
    addr = np.frombuffer(mv, np.uint8).ctypes.data
    off = addr - base
    if 0 <= off and off + len(mv) <= len(data) and data[off:off + 1] == bytes(mv[:1]):
        return off
    return None


def _workers(nbytes: int) -> int:
    """Processes that decode one big trace (:func:`~..procs.fork_workers`); a trace
    under :data:`PARALLEL_BYTES` decodes in-process."""
    return 1 if nbytes < PARALLEL_BYTES else fork_workers(4)


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


def _locate(chunks: Iterator[bytes]) -> tuple[bytes, bytes] | None:
    """The document's bytes before its ``traceEvents`` array's "[" and the bytes read
    after it; None when no chunk names the array."""
    buf = bytearray()
    for chunk in chunks:
        seen = max(0, len(buf) - 64)
        buf += chunk
        m = _EVENTS_KEY.search(buf, seen)
        if m is not None:
            return bytes(buf[:m.end() - 1]), bytes(buf[m.end():])
    return None


def _pieces(rest: bytes, chunks: Iterator[bytes], size: int
            ) -> Iterator[tuple[bytes, bytes | None]]:
    """The events array's text from ``rest`` on, then ``chunks``, as pieces of about
    ``size`` bytes cut at event boundaries: (the events with ``[`` and ``]`` around them,
    the separator after them), so that the pieces' texts joined are the file's exact
    bytes. The last piece (separator None) runs to the end of the file: the last events,
    the array's "]" and the rest of the document, without brackets added."""
    buf = rest
    for chunk in itertools.chain([b""], chunks):
        buf += chunk
        view = memoryview(buf)
        cuts = _boundaries(view, size)
        for (a, b), (c, _) in zip(cuts, cuts[1:]):
            yield b"".join((b"[", view[a:b], b"]")), buf[b:c]
        del view
        buf = buf[cuts[-1][0]:] if cuts else b""
    yield buf, None


def _scan_tail(text: bytes) -> tuple[dict, bytes]:
    """The scanned columns of the last events of the array, whose text (``text``) runs to
    the end of the file, and the document's bytes after the array. _Fallback when that
    is not how the text reads."""
    buf = b'{"traceEvents":[' + text
    try:
        raw = msgspec.json.decode(buf, type=_TraceHead).traceEvents
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise _Fallback from None
    off = _span_offset(buf, raw)
    if off != len(b'{"traceEvents":'):  # another traceEvents key after the array
        raise _Fallback
    return _scan(*_decode_events(raw)), buf[off + len(memoryview(raw)):]


class _PieceScanner:
    """Scans pieces in order (in a pool of worker processes, at most a few in flight)
    into the parts the timeline is built from. A piece that does not decode alone (a cut
    inside a string or a nested list) is joined with the pieces after it."""

    def __init__(self, pool, window: int) -> None:
        self.pool, self.window = pool, window
        self.parts: list[dict] = []
        self.flight: list[tuple[bytes, bytes, Any]] = []
        self.carry = b""  # the pieces that did not decode alone, joined

    def add(self, framed: bytes, sep: bytes) -> None:
        """Scan one piece (see :func:`_pieces`), now or in the pool."""
        if self.pool is None:
            self._settle(framed, sep, _scan_piece(framed))
            return
        self.flight.append((framed, sep, self.pool.apply_async(_scan_piece, (framed,))))
        if len(self.flight) > self.window:
            framed, sep, result = self.flight.pop(0)
            self._settle(framed, sep, result.get())

    def finish(self, tail: bytes) -> tuple[list[dict], bytes]:
        """The parts of all pieces, the last (``tail``) included, and the document's
        bytes after the events array."""
        for framed, sep, result in self.flight:
            self._settle(framed, sep, result.get())
        self.flight = []
        part, suffix = _scan_tail(self.carry + tail)
        self.carry = b""
        self.parts.append(part)
        return self.parts, suffix

    def _settle(self, framed: bytes, sep: bytes, result: dict | str) -> None:
        if self.carry:
            framed = b"".join((b"[", self.carry, memoryview(framed)[1:]))
            result = _scan_piece(framed)
        if result == "decode":
            if len(framed) > MAX_JOIN_BYTES:
                raise _Fallback
            self.carry = framed[1:-1] + sep
            return
        self.carry = b""
        self.parts.append(result)  # type: ignore[arg-type]


def _scan_events(rest: bytes, chunks: Iterator[bytes], pool, window: int
                 ) -> tuple[list[dict], bytes]:
    """The parts of the events array whose text starts at ``rest`` and goes on in
    ``chunks``, and the document's bytes after the array."""
    scanner = _PieceScanner(pool, window)
    for framed, sep in _pieces(rest, chunks, CHUNK_BYTES):
        if sep is None:
            return scanner.finish(framed)
        scanner.add(framed, sep)
    raise AssertionError("_pieces ends with the tail")  # pragma: no cover


#: the span reader of each file being read, per process (see :func:`_scan_span`)
_READERS: dict[str, SpanReader] = {}


def _scan_span(job: tuple[str, int, int]) -> dict | str:
    """The scanned columns of the events in the bytes ``[a, b)`` of the file (``job``:
    path, a, b; see :func:`~.spans.cut_spans`), read into this process's buffer; or
    "decode" when they are no list of values (a cut fell inside a value)."""
    path, a, b = job
    reader = _READERS.get(path) or _READERS.setdefault(path, SpanReader(path))
    gc.disable()
    try:
        return _scan(*_decode_events(reader.framed(a, b)))
    except msgspec.DecodeError:
        return "decode"


def _array_start(path: str) -> tuple[bytes, int] | None:
    """The document's bytes before its traceEvents array and the offset of the array's
    first element, for a plain UTF-8 file whose array starts in its first
    :data:`MAX_JOIN_BYTES`; None otherwise."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:2] == GZIP_MAGIC or text_encoding(head) is not None:
        return None
    chunks = read_chunks(path, 1 << 20)
    try:
        located = _locate(itertools.islice(chunks, MAX_JOIN_BYTES >> 20))
    finally:
        chunks.close()  # type: ignore[attr-defined]
    return None if located is None else (located[0], len(located[0]) + 1)


def _ends_as_object(path: str, size: int) -> bool:
    """Whether the file's last byte other than white space is the "}" that ends a JSON
    object (a document cut short ends elsewhere)."""
    with open(path, "rb") as f:
        f.seek(max(0, size - 4096))
        end = f.read().rstrip(b" \t\r\n")
    if not end and size > 4096:
        return True  # white space only, this far from the end: the decoding will tell
    return end.endswith(b"}")


def _early_tail(path: str, a: int, size: int) -> tuple[dict, bytes] | None:
    """:func:`_scan_tail` of the bytes from ``a`` to the end, read while the workers scan
    the spans before; None when they do not read alone (``a`` fell inside a value: the
    spans before are joined with it later)."""
    try:
        return _scan_tail(read_range(path, a, size))
    except _Fallback:
        return None


def _decode_spans(path: str, warnings: list[str]) -> tuple[list[dict], _Head] | None:
    """Decode a plain trace where it lies: the events array is cut into spans (see
    :mod:`.spans`) that worker processes (or this one) read and scan into columns, each
    into its own reused buffer, while this process scans the last span and the bytes
    after the array. Memory holds the kept columns and a span per process. None when the
    file must be read otherwise (gzip, another encoding, cuts that do not decode)."""
    found = _array_start(path)
    if found is None:
        return None
    prefix, start = found
    size = os.path.getsize(path)
    if not _ends_as_object(path, size):  # cut short: say so before reading the rest
        raise InputError(path, "invalid JSON: truncated JSON (the file ends before the '}' "
                               "that closes the document)")
    spans = cut_spans(path, start, size, CHUNK_BYTES)
    jobs = [(path, a, b) for a, b in spans[:-1]]
    n_workers = _workers(size) if len(jobs) > 1 else 1
    pool = fork_pool(n_workers) if n_workers > 1 else None
    try:
        results = pool.imap(_scan_span, jobs) if pool is not None else map(_scan_span, jobs)
        last = _early_tail(path, spans[-1][0], size) if pool is not None else None
        parts, carry = join_failed(spans[:-1], results, lambda a, b: _scan_span((path, a, b)),
                                   MAX_JOIN_BYTES)
        if last is None or carry is not None:
            tail_start = spans[-1][0] if carry is None else carry
            last = _scan_tail(read_range(path, tail_start, size))
    except (_Fallback, TooLong):
        return None
    finally:
        _READERS.pop(path, None)
        if pool is not None:
            pool.terminate()
            pool.join()
    parts.append(last[0])
    head = _head_around(prefix + b"[]" + last[1], len(prefix), warnings)
    return None if head is None else (parts, head)


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def _decode_stream(path: str, warnings: list[str]) -> tuple[list[dict], _Head] | None:
    """Decode the trace as it is read, a chunk of the file at a time: each piece of the
    events array is scanned into columns and dropped, so memory holds the kept columns
    and a few pieces, not the file. The bytes around the array (deviceProperties,
    distributedInfo, ... before or after it) are kept and decoded as one small document.
    None when the file must be read whole (see :class:`_Fallback`)."""
    chunks = read_chunks(path, READ_BYTES)
    try:
        located = _locate(chunks)
        if located is None:
            return None
        prefix, rest = located
        n_workers = _workers(os.path.getsize(path) * (8 if _is_gzip(path) else 1))
        pool = fork_pool(n_workers) if n_workers > 1 else None
        try:
            parts, suffix = _scan_events(rest, chunks, pool, 2 * n_workers)
        except _Fallback:
            return None
        finally:
            if pool is not None:
                pool.terminate()
                pool.join()
    finally:
        chunks.close()  # type: ignore[attr-defined]
    head = _head_around(prefix + b"[]" + suffix, len(prefix), warnings)
    return None if head is None else (parts, head)


def _head_around(doc_bytes: bytes, at: int, warnings: list[str]) -> _Head | None:
    """The document's parts besides its events, from its bytes with the events array
    emptied (``[]`` at ``at``); None when that is no JSON object whose traceEvents is
    there (the array found was not the document's own)."""
    try:
        doc = msgspec.json.decode(doc_bytes, type=_TraceHead)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if _span_offset(doc_bytes, doc.traceEvents) != at:
        return None
    found: list[str] = []
    head = _head(doc, found)
    warnings.extend(found)
    return head


@gc_paused()  # millions of new objects: generational GC passes would dominate
def _head(doc: _TraceHead, warnings: list[str]) -> _Head:
    """The document's parts besides its events, each decoded on its own: one that is not
    of the expected form is left out with a warning."""
    head = _Head()
    if len(memoryview(doc.deviceProperties)):
        props = msgspec.json.decode(doc.deviceProperties)
        if isinstance(props, list):
            head.deviceProperties = [_dev_prop(p, warnings) for p in props if isinstance(p, dict)]
            if len(head.deviceProperties) < len(props):
                warnings.append("ignored deviceProperties entries that are not JSON objects")
        elif props is not None:
            warnings.append(f"ignored deviceProperties: {_json_type(props)} where a list "
                            "was expected")
    if len(memoryview(doc.distributedInfo)):
        dist = msgspec.json.decode(doc.distributedInfo)
        if isinstance(dist, dict):
            head.distributedInfo = dist
        elif dist is not None:
            warnings.append(f"ignored distributedInfo: {_json_type(dist)} where an object "
                            "was expected")
    if len(memoryview(doc.traceName)):
        name = msgspec.json.decode(doc.traceName)
        head.traceName = name if isinstance(name, str) else None
    return head


def _dev_prop(p: dict, warnings: list[str]) -> _DevProp:
    """One deviceProperties entry; an id, name or numSms of an unexpected type is left out
    with a warning (a count given as text, "108", is read)."""
    ident, name, sms = _ident(p.get("id")), p.get("name"), p.get("numSms")
    if isinstance(sms, str) and sms.strip().isdigit():
        sms = int(sms)
    for field, bad in (("id", ident is _ODD), ("name", name is not None and type(name) is not str),
                       ("numSms", sms is not None and type(sms) is not int)):
        if bad:
            warnings.append(f"ignored deviceProperties {field} {p.get(field)!r:.40}: not "
                            f"{'text' if field == 'name' else 'an integer'}")
    return _DevProp(id=None if ident is _ODD else ident,  # type: ignore[arg-type]
                    name=name if type(name) is str else None,
                    numSms=sms if type(sms) is int else None)


def _decode_whole(path: str, warnings: list[str]) -> tuple[list[dict], _Head]:
    """Decode the document read whole (validated at once: an error names what is wrong
    with it), then its events array piece by piece."""
    data = read_all(path)
    try:
        doc = msgspec.json.decode(data, type=_TraceHead)
    except msgspec.ValidationError:
        raise InputError(path, "not a Chrome trace: the document is not a JSON object") \
            from None
    head = _head(doc, warnings)
    raw = memoryview(doc.traceEvents)
    if len(raw) == 0:
        return [], head
    if bytes(raw[:1]) != b"[":
        raise InputError(path, "traceEvents is not a list")
    array = bytes(raw)
    del doc, data, raw
    try:
        parts, _ = _scan_events(array[1:] + b"}", iter(()), None, 0)
    except _Fallback:  # cuts inside long values throughout: the array in one piece
        parts = [_scan(*_decode_events(array))]
    return parts, head


def read(path: str) -> Timeline:
    """Read a Kineto trace into a :class:`Timeline` (one device: the busiest one)."""
    if is_perfetto_view(read_head(path, 4096)):
        raise InputError(path, "a Perfetto view that parastream analyze wrote, not a profiler "
                               "trace: analyze the trace it was made from")
    warnings: list[str] = []
    try:
        with gc_paused():  # millions of new objects: generational GC passes would dominate
            decoded = (_decode_spans(path, warnings) or _decode_stream(path, warnings)
                       or _decode_whole(path, warnings))
    except msgspec.DecodeError as exc:
        reason = str(exc)
        if "truncated" in reason.lower():
            reason = "truncated JSON (" + reason + ")"
        raise InputError(path, f"invalid JSON: {reason}") from None
    except RecursionError:
        # msgspec recurses once per nesting level, skipped values included, and stops at
        # the interpreter's recursion limit (about a thousand levels)
        raise InputError(path, "invalid JSON: nested too deeply to decode (arrays or "
                               "objects inside one another past the decoder's limit)") from None
    return _build(path, decoded[0], decoded[1], warnings)


def _merge_codes(parts: list[dict], key: str, table: str, interner: Interner, convert) -> np.ndarray:
    out = []
    for p in parts:
        mapping = np.array([interner.code(convert(v)) for v in p[table]], np.int32)
        out.append(mapping[p[key]] if p[key].size else np.zeros(0, np.int32))
    return np.concatenate(out) if out else np.zeros(0, np.int32)


def _label_text(v) -> str:
    if isinstance(v, tuple):  # ("tid", x) / ("pid", x): no stream/device arg, fall back
        v = v[1]
    return stream_label(v) or "?"


def _no_device_activity(parts: list[dict]) -> str:
    """Why a trace without device work cannot be analysed, naming the kind of trace."""
    ranges = sum(p["ranges"] for p in parts)
    if ranges:
        return (f"a CUPTI range-profiler trace ({ranges} {PROFILER_RANGE_CAT} events: "
                "per-kernel hardware counters, without streams or kernel timing); capture "
                "with ProfilerActivity.CUDA and no profiler_metrics to analyse overlap")
    if sum(p["mtia_host"] for p in parts):
        return (f"an MTIA trace with host events (mtia_runtime) only, no device events "
                f"({MTIA_CAT}); capture it with the device activity on")
    no_ph = sum(p["no_ph"] for p in parts)
    return ("no device activity (kernel, gpu_memcpy, gpu_memset or mtia_ccp_events events) "
            "in the trace; was it captured with ProfilerActivity.CUDA?"
            + (f" ({no_ph} event(s) have no ph, the Chrome trace phase)" if no_ph else ""))


def _decode_warnings(parts: list[dict]) -> list[str]:
    """What the decoding skipped, one line per kind: odd fields, events without a phase,
    range-profiler events beside the kernels."""
    odd: dict = {}
    for p in parts:
        for field, (n, kinds) in p["odd"].items():
            seen = odd.setdefault(field, [0, set()])
            seen[0] += n
            seen[1] |= kinds
    out = odd_field_warnings(odd)
    no_ph = sum(p["no_ph"] for p in parts)
    if no_ph:
        out.append(f"skipped {no_ph} trace event(s) without a ph (the Chrome trace phase)")
    ranges = sum(p["ranges"] for p in parts)
    if ranges:
        out.append(f"ignored {ranges} {PROFILER_RANGE_CAT} event(s) (CUPTI range-profiler "
                   "counters, without streams)")
    return out


def sm_share(occupancy_pct: np.ndarray, warps_per_sm: np.ndarray, max_threads_per_sm: int | None,
             warp_size: int | None) -> np.ndarray:
    """Each kernel's share (0..1) of the device's SM warp slots: the profiler's estimated
    achieved occupancy, else its warps per SM over the SM's warp slots (when the device
    properties give them); NaN when neither is known."""
    share = np.clip(occupancy_pct / 100.0, 0.0, 1.0)
    if max_threads_per_sm and warp_size and max_threads_per_sm > 0 and warp_size > 0:
        by_warps = np.clip(warps_per_sm / (max_threads_per_sm / warp_size), 0.0, 1.0)
        share = np.where(np.isfinite(share), share, by_warps)
    return share


def _build(path: str, parts: list[dict], trace: _Head, warnings: list[str]) -> Timeline:
    """The timeline of the scanned pieces: one device (the busiest), kinds and cores,
    launch times, steps, waits, device facts, and HTA's overlap figure of the file."""
    count = sum(p["count"] for p in parts)
    n_dev = sum(p["name"].size for p in parts)
    if n_dev == 0:
        if not count:
            raise InputError(path, "empty trace: traceEvents has no events")
        raise InputError(path, _no_device_activity(parts))
    warnings.extend(_decode_warnings(parts))
    streams, names = Interner(), Interner()
    name = _merge_codes(parts, "name", "names", names, str)
    stream = _merge_codes(parts, "stream", "stream_labels", streams, _label_text)
    col = {k: np.concatenate([p[k] for p in parts])
           for k in ("cat", "ts", "dur", "ok", "block", "corr", "occ", "warps", "l_corr", "l_ts")}
    usable = col["ok"]  # every device: HTA pools them
    device_id, ok = _one_device(path, parts, usable, warnings)
    kind, core = _kinds_and_cores(col["cat"], name, names)
    starts, durs = col["ts"], col["dur"]
    launch, runtime_launch = _launch_times(parts, col)
    steps = _Steps(parts)
    # a kernel belongs to the step in which it was launched (GPU work lags the CPU)
    step = steps.of(np.where(launch >= 0, launch, starts))
    waits = _Waits(parts, names, col)
    hta = _hta_figure(parts, names, np.concatenate([name[usable], waits.name[waits.good]]),
                      np.concatenate([starts[usable], waits.ts[waits.good]]),
                      np.concatenate([durs[usable], waits.dur[waits.good]]),
                      np.concatenate([runtime_launch[usable], waits.launch[waits.good]]),
                      steps.ids, steps.start[steps.start_ok])
    ops = dict(stream=stream[ok], name=name[ok], type=col["cat"][ok].astype(np.int32),
               start_ns=starts[ok], end_ns=(starts + durs)[ok], kind=kind[ok],
               core=core[ok],
               block_dim=np.clip(col["block"][ok], -1, np.iinfo(np.int32).max).astype(np.int32),
               mix_block_dim=np.full(int(ok.sum()), -1, np.int32), step=step[ok],
               launch_ns=launch[ok])
    wait_cols = waits.columns(streams)
    device, share = _device_info(trace, device_id, col["occ"], col["warps"], warnings)
    ops["sm_share"] = share[ok]
    meta = _meta(path, trace, device_id, parts)
    meta["hta_comm_comp_overlap_pct"] = hta
    tl = make_timeline(path, FORMAT, streams.values, names.values, Interner(_CATS).values,
                       ops, wait_cols, device=device, warnings=warnings, meta=meta)
    tl.collectives = _collectives(parts, (names.values, name), starts, starts + durs, ok)
    return tl


_RANK = re.compile(r"-?\d+")


def _collectives(parts: list[dict], names: tuple[list[str], np.ndarray], start: np.ndarray,
                 end: np.ndarray, ok: np.ndarray) -> Collectives:
    """The collective calls on the analysed device (``ok`` rows): one per NCCL/HCCL
    kernel, with the collective's arguments the kernel carries (newer PyTorch) or else
    those of the record_param_comms host op with the kernel's External id. ``names``:
    the name table and each device row's code."""
    by_ext: dict = {}
    for p in parts:
        for ext, call in p["param_comms"]:
            by_ext.setdefault(ext, call)
    calls = _CallRows()
    base = 0
    for p in parts:
        for r, call in p["comms"]:
            row = base + r
            if not ok[row]:
                continue
            if call is not None and call[1] is None and call[0] is not None:
                call = by_ext.get(_as_int(call[0]), call)
            calls.add(names[0][names[1][row]], call, int(start[row]), int(end[row]))
        base += p["name"].size
    return calls.table()


def _group_ranks(v: object) -> list[int] | None:
    """A Process Group Ranks value (``"[0, 1, 2, 3]"`` or a list) as ranks; None when it
    names none or is cut short (PyTorch writes ``[0, 1, ..., 63]`` for big groups)."""
    if isinstance(v, list):
        return v or None
    if not isinstance(v, str) or "..." in v:
        return None
    return [int(x) for x in _RANK.findall(v)] or None


class _CallRows:
    """The columns of :class:`~parastream.timeline.collectives.Collectives`, a call at
    a time (see :data:`_CALL_FIELDS` for a call's arguments)."""

    def __init__(self) -> None:
        self.op: list[str] = []
        self.group: list[str] = []
        self.seq: list[int] = []
        self.nbytes: list[int] = []
        self.peer: list[int] = []
        self.start: list[int] = []
        self.end: list[int] = []
        self.group_ranks: dict = {}

    def add(self, kernel: str, call: tuple | None, start: int, end: int) -> None:
        """One call: its kernel's name, the arguments found for it, its device span."""
        _, coll, group, ranks, n_in, n_out, dtype, seq, seq_lower, src, dst = \
            call or (None,) * len(_CALL_FIELDS)
        op = coll if coll and normalize_op(coll) else kernel
        kind = normalize_op(op)
        self.op.append(op)
        g = "" if group is None else str(group)
        self.group.append(g)
        self.seq.append(_as_int(seq if seq is not None else seq_lower))
        elems = max([n for n in (n_in, n_out) if isinstance(n, int)], default=-1)
        size = dtype_bytes(dtype) if isinstance(dtype, str) else -1
        self.nbytes.append(elems * size if elems >= 0 and size > 0 else -1)
        peer = dst if kind == "send" else src if kind == "recv" else None
        self.peer.append(peer if isinstance(peer, int) else -1)
        self.start.append(start)
        self.end.append(end)
        members = _group_ranks(ranks)
        if g and members:
            self.group_ranks[g] = members

    def table(self) -> Collectives:
        return make_collectives(self.op, self.group, np.array(self.start, np.int64),
                                np.array(self.end, np.int64), seq=self.seq, nbytes=self.nbytes,
                                peer=self.peer, group_ranks=self.group_ranks)


def _one_device(path: str, parts: list[dict], usable: np.ndarray, warnings: list[str]
                ) -> tuple[str, np.ndarray]:
    """One capture is one device: the device with the most usable ops (one whose ops all
    lack a time is no capture), and per op whether it is usable and on that device.
    InputError when no op is usable."""
    devices = Interner()
    dev = _merge_codes(parts, "dev", "device_labels", devices, _label_text)
    ok = usable.copy()
    dev_count = np.bincount(dev, minlength=len(devices.values))
    best = int(np.argmax(np.bincount(dev[usable], minlength=len(devices.values))))
    device_id = devices.values[best]
    if (dev_count > 0).sum() > 1:
        others = [devices.values[i] for i in np.flatnonzero(dev_count) if i != best]
        warnings.append(f"trace holds {len(others) + 1} devices; analysed device {device_id}, "
                        f"skipped device(s) {', '.join(sorted(others))} "
                        f"({int(dev_count.sum() - dev_count[best])} ops)")
        ok &= dev == best
    if not (ok & usable).any():
        raise InputError(path, f"none of the trace's {dev.size} device op(s) has a usable ts "
                               "and dur (numbers, dur not negative)")
    if not usable.all():
        warnings.append(f"skipped {int((~usable).sum())} device op(s) without a usable ts/dur")
    return device_id, ok


def _kinds_and_cores(cat: np.ndarray, name: np.ndarray, names: Interner
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Per op: kind by category, communication kernels by name (the regex runs once per
    distinct name); core CUDA, MTIA copies DMA and other MTIA commands unknown."""
    kind = _CAT_KIND[cat].copy()
    mtia = cat == _MTIA_INDEX
    kind[(kind == KIND_COMPUTE) & ~mtia & value_flags(names.values, COMM_NAME.search)[name]] = \
        KIND_COMM
    core = np.full(cat.size, core_code("CUDA"), np.int8)
    if mtia.any():
        dma = mtia & value_flags(names.values, MTIA_DMA.search)[name]
        kind[dma] = KIND_MEMCPY
        core[mtia] = core_code("")
        core[dma] = core_code("DMA")
    return kind, core


def _launch_times(parts: list[dict], col: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per op, its host launch time (-1 unknown): the runtime call with its correlation
    id, else the start of its ac2g flow; and the runtime call's alone (HTA's)."""
    corr = col["corr"]
    runtime_launch = _join(corr, col["l_corr"], col["l_ts"])
    launch = runtime_launch.copy()
    missing = launch < 0
    if missing.any():
        launch[missing] = _join(corr[missing], np.concatenate([p["f_id"] for p in parts]),
                                np.concatenate([p["f_ts"] for p in parts]))
    return launch, runtime_launch


class _Steps:
    """The ProfilerStep#N spans: ids, starts (``start_ok``: parsed) and ends."""

    def __init__(self, parts: list[dict]) -> None:
        steps = [s for p in parts for s in p["steps"]]
        self.ids = np.array([s for s, _, _ in steps], np.int32)
        self.start, self.start_ok = tokens_to_ns([t for _, t, _ in steps])
        self.dur, dur_ok = _dur_ns([d for _, _, d in steps])
        self.keep = self.start_ok & dur_ok

    def of(self, t: np.ndarray) -> np.ndarray:
        """The step whose span holds each time, -1 for none."""
        k = self.keep
        return window_ids(self.start[k], (self.start + self.dur)[k], self.ids[k], t)


class _Waits:
    """The stream waits of the trace, parsed once for HTA's figure (all of them) and the
    timeline's waits: name codes, start, duration (``good``: both parsed) and launch."""

    def __init__(self, parts: list[dict], names: Interner, col: dict) -> None:
        self.rows = [w for p in parts for w in p["waits"]]
        rows = self.rows
        self.name = np.array([names.code(w[2]) for w in rows], np.int32)
        self.ts, ts_ok = tokens_to_ns([w[3] for w in rows])
        self.dur, dur_ok = _dur_ns([w[4] for w in rows])
        self.good = ts_ok & dur_ok
        self.launch = _join(_int64([w[5] for w in rows]), col["l_corr"], col["l_ts"])

    def columns(self, streams: Interner) -> dict | None:
        """The wait columns of the waits placed on a stream (stream codes interned in file
        order, after the op lanes); None when no wait names a stream."""
        n = len(self.rows)
        w_stream = np.full(n, -1, np.int32)
        w_on = np.full(n, -1, np.int32)
        for i, w in enumerate(self.rows):
            s = stream_label(w[0])
            if s is None or s == "-1":
                continue  # a wait on no stream cannot be placed on a lane
            w_stream[i] = streams.code(s)
            o = stream_label(w[1])
            if o is not None and o != "-1":
                w_on[i] = streams.code(o)
        placed = w_stream >= 0
        if not placed.any():
            return None
        wk = placed & self.good
        return dict(wait_stream=w_stream[wk], wait_on=w_on[wk], wait_start_ns=self.ts[wk],
                    wait_end_ns=(self.ts + self.dur)[wk], wait_name=self.name[wk])


def _device_info(trace: _Head, device_id: str, occ: np.ndarray, warps: np.ndarray,
                 warnings: list[str]) -> tuple[DeviceInfo, np.ndarray]:
    """The analysed device's name and SM count from deviceProperties (the entry with its
    id, or the only one), and each kernel's SM share (see :func:`sm_share`)."""
    props = trace.deviceProperties or []
    for p in props:
        if stream_label(p.id) == device_id or len(props) == 1:
            sms = p.numSms
            if sms is not None and not 0 < sms <= MAX_SMS:  # a GPU has some, and not 1e30
                warnings.append(f"deviceProperties numSms {sms} ignored (not a plausible "
                                "multiprocessor count)")
                sms = None
            return (DeviceInfo(name=p.name, sm_count=sms),
                    sm_share(occ, warps, p.maxThreadsPerMultiprocessor, p.warpSize))
    return DeviceInfo(), sm_share(occ, warps, None, None)


def _meta(path: str, trace: _Head, device_id: str, parts: list[dict]) -> dict:
    """The capture's facts: device id, trace name, rank, world size and backend from
    distributedInfo (ranks must be whole numbers: InputError otherwise), host syncs."""
    meta: dict = {"device_id": device_id}
    if isinstance(trace.traceName, str) and trace.traceName:
        meta["trace_name"] = trace.traceName
    dist = trace.distributedInfo or {}
    for k in ("rank", "world_size", "backend"):
        if k in dist:
            meta[k] = dist[k] if k == "backend" else _whole(path, k, dist[k])
    syncs: Counter = Counter()
    for p in parts:
        syncs.update(p["syncs"])
    if syncs:
        meta["host_syncs"] = dict(syncs)
    return meta


def _whole(path: str, key: str, v: object) -> int | None:
    """A distributedInfo rank or world size: ranks are sorted and compared across files,
    so a whole number (text of digits is read) or nothing."""
    if v is None or (isinstance(v, int) and not isinstance(v, bool)):
        return v  # type: ignore[return-value]
    s = v.strip() if isinstance(v, str) else ""
    if not (s.isascii() and s.isdigit()):
        raise InputError(path, f"distributedInfo.{key} is {v!r}, not a whole number")
    return int(s)


def _join(keys: np.ndarray, table_keys: np.ndarray, table_vals: np.ndarray) -> np.ndarray:
    """``table_vals`` looked up by ``keys`` (-1 where absent); vectorised with a sort."""
    out = np.full(keys.size, -1, np.int64)
    if table_keys.size == 0 or keys.size == 0:
        return out
    order = np.argsort(table_keys, kind="stable")
    tk, tv = table_keys[order], table_vals[order]
    pos = np.clip(np.searchsorted(tk, keys), 0, tk.size - 1)
    hit = (tk[pos] == keys) & (keys >= 0)
    out[hit] = tv[pos[hit]]
    return out


def _hta_figure(parts: list[dict], names: Interner, sel_name: np.ndarray,
                sel_start: np.ndarray, sel_dur: np.ndarray, sel_launch: np.ndarray,
                step_ids: np.ndarray, step_starts: np.ndarray) -> float | None:
    """HTA's per-rank comm/comp overlap of this file, with HTA's loading rules: every
    device of the file pooled, Stream Wait Events included (the ``sel_*`` rows), timestamps
    rounded for float traces and, when there are two or more ProfilerStep annotations, only
    device work launched before the last step begins."""
    rounding = any(p["float_ts"] for p in parts)
    if len(set(step_ids.tolist())) >= 2:
        last = step_starts.max()
        if rounding:
            last_us = comm_mod.hta_round(np.array([last]), np.zeros(1, np.int64))[0][0]
            la = comm_mod.hta_round(sel_launch, np.zeros(sel_launch.size, np.int64))[0]
            keep = (sel_launch >= 0) & (la < last_us)
        else:
            keep = (sel_launch >= 0) & (sel_launch < last)
        sel_name, sel_start, sel_dur = sel_name[keep], sel_start[keep], sel_dur[keep]
    return comm_mod.hta_comm_comp_overlap_pct(names.values, sel_name, sel_start, sel_dur, rounding)
