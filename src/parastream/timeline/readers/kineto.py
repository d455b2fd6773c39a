"""PyTorch profiler (Kineto) Chrome traces, ``.json`` or ``.json.gz``.

Device work is ``ph: "X"`` with ``cat`` in kernel / gpu_memcpy / gpu_memset (older
traces: Kernel / Memcpy / Memset). ``cuda_sync`` events named ``Stream Wait Event`` are
the GPU side of ``cudaStreamWaitEvent`` and become waits on ``args.stream`` with
``args.wait_on_stream`` as the stream waited on. Launch times come from the
``cuda_runtime`` event with the same ``correlation`` (or the ``ac2g`` /
``async_cpu_to_gpu`` flow start), and ``ProfilerStep#N`` annotations give steps.

Decoding uses msgspec with typed structs so unknown fields are skipped without building
dicts, and timestamps are kept as raw JSON text and parsed exactly to nanoseconds.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections import Counter

import msgspec
import numpy as np
import pyarrow as pa

from ...errors import InputError
from ..model import (KIND_COMM, KIND_COMPUTE, KIND_MEMCPY, KIND_MEMSET, DeviceInfo, Interner,
                     core_code, make_timeline, Timeline)
from ..timeparse import us_text_column_to_ns, us_to_ns

FORMAT = "kineto"

#: communication kernels, the same classes HTA uses (NCCL on CUDA, HCCL on Ascend/torch_npu)
COMM_NAME = re.compile(r"^nccl|^hccl|ncclKernel|ncclDevKernel", re.IGNORECASE)
_DEVICE_CATS = {"kernel": KIND_COMPUTE, "gpu_memcpy": KIND_MEMCPY, "gpu_memset": KIND_MEMSET,
                "memcpy": KIND_MEMCPY, "memset": KIND_MEMSET}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_STREAM_TXT = re.compile(r"^\s*(?:stream\s*)?(-?\d+)\s*$", re.IGNORECASE)


class _Args(msgspec.Struct):
    stream: int | str | None = None
    device: int | str | None = None
    correlation: int | str | None = None
    wait_on_stream: int | str | None = None
    grid: list[int] | None = None


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    id: int | str | None = None
    ts: msgspec.Raw = msgspec.Raw()
    dur: msgspec.Raw = msgspec.Raw()
    args: _Args | None = None


class _DevProp(msgspec.Struct):
    id: int | str | None = None
    name: str | None = None
    numSms: int | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] = []
    deviceProperties: list[_DevProp] | None = None
    distributedInfo: dict | None = None


def sniff(head: bytes) -> bool:
    """A JSON object whose start mentions ``traceEvents`` (Chrome trace)."""
    h = head.lstrip()
    return h[:1] == b"{" and b'"traceEvents"' in h


def load_bytes(path: str) -> bytes:
    """The file's bytes, decompressed when it is gzip; InputError when unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(path, f"cannot read: {exc}") from None
    return data


def _stream_label(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        m = _STREAM_TXT.match(v)
        return m.group(1) if m else v.strip() or None
    return str(int(v))


def _raw_text(r) -> str:
    if isinstance(r, msgspec.Raw):
        return bytes(r).decode("utf-8", "replace")
    return "" if r is None else str(r)


def _lenient_events(path: str, data: bytes, warnings: list[str]) -> _Trace:
    """Slow path for traces whose fields have unexpected types: decode generically, keep
    every event that converts, and say how many did not."""
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:  # pragma: no cover - typed decode saw the same bytes
        raise InputError(path, f"invalid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(path, "not a Chrome trace: no traceEvents list")
    events, bad = [], 0
    for e in doc["traceEvents"]:
        try:
            events.append(msgspec.convert(_normalise(e), _Event, strict=False))
        except (msgspec.ValidationError, TypeError, ValueError):
            bad += 1
    if bad:
        warnings.append(f"skipped {bad} malformed trace event(s)")
    props = []
    for p in doc.get("deviceProperties") or []:
        try:
            props.append(msgspec.convert(p, _DevProp, strict=False))
        except (msgspec.ValidationError, TypeError):
            pass
    dist = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else None
    return _Trace(traceEvents=events, deviceProperties=props, distributedInfo=dist)


def _normalise(e):
    """Make a generic event dict convertible: ts/dur become Raw text, odd args dropped."""
    if not isinstance(e, dict):
        raise TypeError("event is not an object")
    e = dict(e)
    for k in ("ts", "dur"):
        if k in e:
            v = e[k]
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise TypeError(k)
            e[k] = msgspec.Raw(msgspec.json.encode(v))
    a = e.get("args")
    if a is not None and not isinstance(a, dict):
        e.pop("args")
    elif isinstance(a, dict):
        e["args"] = {k: a[k] for k in ("stream", "device", "correlation", "wait_on_stream", "grid")
                     if k in a and isinstance(a[k], (int, str, list))}
    return e


def _times_ns(raws: list, path: str, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Exact ns for a list of raw JSON numbers/strings; second array flags unusable ones."""
    texts = [_raw_text(r) for r in raws]
    ok = np.fromiter((bool(t) and t not in ("null", '""') for t in texts), bool, len(texts))
    try:
        vals = us_text_column_to_ns(pa.array([t if good else "0" for t, good in zip(texts, ok)],
                                             pa.string()))
        return vals, ok
    except ValueError:
        pass
    out = np.zeros(len(texts), np.int64)
    for i, t in enumerate(texts):
        if not ok[i]:
            continue
        try:
            out[i] = us_to_ns(msgspec.json.decode(t.encode()) if t[:1] != '"' else t)
        except (ValueError, msgspec.DecodeError, TypeError, OverflowError):
            ok[i] = False
    return out, ok


def read(path: str) -> Timeline:
    """Read a Kineto trace into a :class:`Timeline` (one device: the busiest one)."""
    data = load_bytes(path)
    warnings: list[str] = []
    try:
        trace = msgspec.json.decode(data, type=_Trace)
    except msgspec.ValidationError:
        trace = _lenient_events(path, data, warnings)
    except msgspec.DecodeError as exc:
        reason = str(exc)
        if "truncated" in reason.lower():
            reason = "truncated JSON (" + reason + ")"
        raise InputError(path, f"invalid JSON: {reason}") from None
    del data
    return _build(path, trace, warnings)


def _build(path: str, trace: _Trace, warnings: list[str]) -> Timeline:
    events = trace.traceEvents
    dev_events: list[_Event] = []
    waits: list[_Event] = []
    launch_by_corr: dict = {}
    flow_start: dict = {}
    steps: list[tuple[int, _Event]] = []
    host_syncs = Counter()
    for e in events:
        cat = e.cat
        if e.ph == "X":
            lc = cat.lower()
            if lc in _DEVICE_CATS:
                dev_events.append(e)
            elif lc == "cuda_runtime" or lc == "cuda_driver":
                if e.args is not None and e.args.correlation is not None:
                    launch_by_corr[e.args.correlation] = e.ts
            elif lc == "cuda_sync":
                if e.name == "Stream Wait Event":
                    waits.append(e)
                else:
                    host_syncs[e.name] += 1
            elif e.name.startswith("ProfilerStep#"):
                m = _STEP.match(e.name)
                if m:
                    steps.append((int(m.group(1)), e))
        elif e.ph == "s" and cat in ("ac2g", "async_cpu_to_gpu") and e.id is not None:
            flow_start[e.id] = e.ts
    if not dev_events:
        if not events:
            raise InputError(path, "empty trace: traceEvents has no events")
        raise InputError(path, "no device activity (kernel, gpu_memcpy or gpu_memset events) "
                               "in the trace; was it captured with ProfilerActivity.CUDA?")

    # One capture is one device: keep the device with the most device events.
    devs = [(_stream_label(e.args.device) if e.args is not None and e.args.device is not None
             else _stream_label(e.pid)) for e in dev_events]
    dev_count = Counter(devs)
    device_id, _ = dev_count.most_common(1)[0]
    if len(dev_count) > 1:
        others = sorted(d for d in dev_count if d != device_id)
        warnings.append(f"trace holds {len(dev_count)} devices; analysed device {device_id}, "
                        f"skipped device(s) {', '.join(map(str, others))} "
                        f"({sum(dev_count[d] for d in others)} ops)")
        dev_events = [e for e, d in zip(dev_events, devs) if d == device_id]

    starts, ok_s = _times_ns([e.ts for e in dev_events], path, "ts")
    durs, ok_d = _times_ns([e.dur for e in dev_events], path, "dur")
    ok = ok_s & ok_d
    if (~ok).any():
        warnings.append(f"skipped {int((~ok).sum())} device op(s) without a usable ts/dur")
    streams, names, types = Interner(), Interner(), Interner()
    n = len(dev_events)
    stream = np.empty(n, np.int32)
    name = np.empty(n, np.int32)
    typ = np.empty(n, np.int32)
    kind = np.empty(n, np.int8)
    block = np.full(n, -1, np.int32)
    corr = []
    cuda = core_code("CUDA")
    for i, e in enumerate(dev_events):
        a = e.args
        s = _stream_label(a.stream) if a is not None and a.stream is not None else None
        if s is None:
            s = _stream_label(e.tid) or "?"
        stream[i] = streams.code(s)
        name[i] = names.code(e.name)
        lc = e.cat.lower()
        k = _DEVICE_CATS[lc]
        if k == KIND_COMPUTE and COMM_NAME.search(e.name):
            k = KIND_COMM
        kind[i] = k
        typ[i] = types.code(lc)
        if a is not None and a.grid:
            block[i] = int(np.prod(a.grid))
        corr.append(a.correlation if a is not None else None)

    launch = np.full(n, -1, np.int64)
    if launch_by_corr or flow_start:
        raws = [launch_by_corr.get(c, flow_start.get(c)) if c is not None else None for c in corr]
        have = np.fromiter((r is not None for r in raws), bool, n)
        if have.any():
            vals, good = _times_ns([r for r in raws if r is not None], path, "launch ts")
            idx = np.flatnonzero(have)[good]
            launch[idx] = vals[good]

    step = np.full(n, -1, np.int32)
    if steps:
        st_start, st_ok = _times_ns([e.ts for _, e in steps], path, "step ts")
        st_dur, st_ok2 = _times_ns([e.dur for _, e in steps], path, "step dur")
        ids = np.array([s for s, _ in steps], np.int32)
        keep = st_ok & st_ok2
        order = np.argsort(st_start[keep])
        lo, hi, ids = st_start[keep][order], (st_start + st_dur)[keep][order], ids[keep][order]
        # a kernel belongs to the step in which it was launched (GPU work lags the CPU)
        key = np.where(launch >= 0, launch, starts)
        pos = np.searchsorted(lo, key, side="right") - 1
        inside = (pos >= 0) & (key <= hi[np.clip(pos, 0, None)]) if len(lo) else np.zeros(n, bool)
        step[inside] = ids[pos[inside]]

    ops = dict(stream=stream[ok], name=name[ok], type=typ[ok], start_ns=starts[ok],
               end_ns=(starts + durs)[ok], kind=kind[ok], core=np.full(int(ok.sum()), cuda, np.int8),
               block_dim=block[ok], mix_block_dim=np.full(int(ok.sum()), -1, np.int32),
               step=step[ok], launch_ns=launch[ok])

    w_stream, w_on, w_name = [], [], []
    w_raw_ts, w_raw_dur = [], []
    for e in waits:
        a = e.args
        s = _stream_label(a.stream) if a is not None and a.stream is not None else _stream_label(e.tid)
        if s is None or s == "-1":
            continue
        w_stream.append(streams.code(s))
        on = _stream_label(a.wait_on_stream) if a is not None else None
        w_on.append(streams.code(on) if on is not None and on != "-1" else -1)
        w_name.append(names.code(e.name))
        w_raw_ts.append(e.ts)
        w_raw_dur.append(e.dur)
    wait_cols = None
    if w_stream:
        ws, wok = _times_ns(w_raw_ts, path, "wait ts")
        wd, wok2 = _times_ns(w_raw_dur, path, "wait dur")
        wk = wok & wok2
        wait_cols = dict(wait_stream=np.array(w_stream, np.int32)[wk],
                         wait_on=np.array(w_on, np.int32)[wk], wait_start_ns=ws[wk],
                         wait_end_ns=(ws + wd)[wk], wait_name=np.array(w_name, np.int32)[wk])

    device = DeviceInfo()
    for p in trace.deviceProperties or []:
        if _stream_label(p.id) == device_id or len(trace.deviceProperties or []) == 1:
            device = DeviceInfo(name=p.name, sm_count=p.numSms)
            break
    meta: dict = {"device_id": device_id}
    if trace.distributedInfo:
        for k in ("rank", "world_size", "backend"):
            if k in trace.distributedInfo:
                meta[k] = trace.distributedInfo[k]
    if host_syncs:
        meta["host_syncs"] = dict(host_syncs)
    return make_timeline(path, FORMAT, streams.values, names.values, types.values, ops, wait_cols,
                         device=device, warnings=warnings, meta=meta)
