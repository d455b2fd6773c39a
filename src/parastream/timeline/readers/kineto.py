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

import gc
import multiprocessing as mp
import re
from collections import Counter
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from ...errors import InputError
from . import read_all
from .. import comm as comm_mod
from ..intervals import window_ids
from ..model import (KIND_COMM, KIND_COMPUTE, KIND_MEMCPY, KIND_MEMSET, DeviceInfo,
                     Interner, Timeline, core_code, make_timeline, value_flags)
from ..nogc import gc_paused
from ..timeparse import us_column_to_ns, us_text_to_ns

FORMAT = "kineto"

#: communication kernels, the same classes HTA uses (NCCL on CUDA, HCCL on Ascend/torch_npu)
COMM_NAME = re.compile(r"^nccl|^hccl|ncclKernel|ncclDevKernel", re.IGNORECASE)
_DEVICE_CATS = {"kernel": KIND_COMPUTE, "gpu_memcpy": KIND_MEMCPY, "gpu_memset": KIND_MEMSET,
                "memcpy": KIND_MEMCPY, "memset": KIND_MEMSET}
_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
_CAT_KIND = np.array([_DEVICE_CATS[c] for c in _CATS], np.int8)
#: category spellings seen in traces -> index into _CATS
_CAT_INDEX = {v: i for i, c in enumerate(_CATS) for v in (c, c.capitalize(), c.upper())}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: the most multiprocessors a trace's device may claim (an H200 has 132)
MAX_SMS = 100_000
_STREAM_TXT = re.compile(r"^\s*(?:stream\s*)?(-?\d+)\s*$", re.IGNORECASE)


# gc=False: a trace has millions of events and none of these structs can form a cycle;
# untracked objects also spare the collector from rescanning them during decoding.
class _Args(msgspec.Struct, gc=False):
    stream: int | str | None = None
    device: int | str | None = None
    correlation: int | str | None = None
    wait_on_stream: int | str | None = None
    grid: list[int] | None = None


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


class _DevProp(msgspec.Struct):
    id: int | str | None = None
    name: str | None = None
    numSms: int | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] = []
    deviceProperties: list[_DevProp] | None = None
    distributedInfo: dict | None = None
    traceName: Any = None  # parastream's writer names the plan candidate that ran


class _TraceHead(msgspec.Struct):
    """The document without decoding its events: they stay one raw span."""

    traceEvents: msgspec.Raw = msgspec.Raw()
    deviceProperties: list[_DevProp] | None = None
    distributedInfo: dict | None = None
    traceName: Any = None


_EVENTS = msgspec.json.Decoder(list[_Event])
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
    return _Trace(traceEvents=events, deviceProperties=props, distributedInfo=dist,
                  traceName=doc.get("traceName"))


def _normalise(e):
    """Make a generic event dict convertible: ts becomes Raw text, odd args dropped."""
    if not isinstance(e, dict):
        raise TypeError("event is not an object")
    e = dict(e)
    for k in ("ts", "dur"):
        if k in e:
            v = e[k]
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise TypeError(k)
            if k == "ts":
                e[k] = msgspec.Raw(msgspec.json.encode(v))
    a = e.get("args")
    if a is not None and not isinstance(a, dict):
        e.pop("args")
    elif isinstance(a, dict):
        e["args"] = {k: a[k] for k in ("stream", "device", "correlation", "wait_on_stream", "grid")
                     if k in a and isinstance(a[k], (int, str, list))}
    return e


def _times_ns(raws: list, path: str = "", what: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Exact ns for a list of raw JSON numbers/strings; second array flags unusable ones."""
    try:  # the common case: all raw JSON (bytes() of a Raw is its text)
        blobs = list(map(bytes, raws))
    except TypeError:
        blobs = [r if isinstance(r, bytes) else bytes(r) if isinstance(r, msgspec.Raw)
                 else (b"" if r is None else str(r).encode()) for r in raws]
    if not blobs:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    arr = pa.array(blobs, pa.binary()).cast(pa.string())
    return us_column_to_ns(arr)


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


def _boundaries(span: memoryview, size: int = CHUNK_BYTES) -> list[tuple[int, int]]:
    """Cut the text of the events array (without its brackets) into (start, end) pieces of
    about ``size`` bytes at event boundaries."""
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
    except (TypeError, ValueError):
        return -1


def _scan(events: list[_Event]) -> dict:
    """One pass over decoded events: the columns the timeline needs, nothing else.

    Runs in worker processes for big traces, so it returns plain lists and arrays."""
    names: dict = {}
    stream_labels: dict = {}
    device_labels: dict = {}
    d_name, d_cat, d_stream, d_dev, d_ts, d_dur, d_block, d_corr = ([] for _ in range(8))
    l_corr, l_ts, f_id, f_ts = [], [], [], []
    waits, steps = [], []
    syncs: Counter = Counter()
    cat_index = _CAT_INDEX
    for e in events:
        ph = e.ph
        if ph == "X":
            cat = e.cat
            k = cat_index.get(cat)
            if k is not None:
                a = e.args
                nm = e.name
                nc = names.get(nm)
                if nc is None:
                    nc = names[nm] = len(names)
                d_name.append(nc)
                d_cat.append(k)
                if a is not None:
                    st = a.stream if a.stream is not None else ("tid", e.tid)
                    dv = a.device if a.device is not None else ("pid", e.pid)
                    g = a.grid
                    if g:
                        prod = 1
                        for x in g:
                            prod *= x
                        d_block.append(prod)
                    else:
                        d_block.append(-1)
                    c = a.correlation
                    d_corr.append(c if isinstance(c, int) else _as_int(c))
                else:
                    st, dv = ("tid", e.tid), ("pid", e.pid)
                    d_block.append(-1)
                    d_corr.append(-1)
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
            elif cat == "cuda_runtime" or cat == "cuda_driver":
                a = e.args
                if a is not None and a.correlation is not None:
                    l_corr.append(_as_int(a.correlation))
                    l_ts.append(e.ts)
            elif cat == "cuda_sync":
                if e.name == "Stream Wait Event":
                    a = e.args
                    waits.append((a.stream if a is not None and a.stream is not None else e.tid,
                                  a.wait_on_stream if a is not None else None, e.name,
                                  bytes(e.ts), e.dur,
                                  _as_int(a.correlation) if a is not None else -1))
                else:
                    syncs[e.name] += 1
            elif e.name.startswith("ProfilerStep#"):
                m = _STEP.match(e.name)
                if m:
                    steps.append((int(m.group(1)), bytes(e.ts), e.dur))
        elif ph == "s" and (e.cat == "ac2g" or e.cat == "async_cpu_to_gpu") and e.id is not None:
            f_id.append(_as_int(e.id))
            f_ts.append(e.ts)
    # HTA rounds timestamps only when pandas holds them as floats
    float_ts = any(b"." in bytes(t) or b"e" in bytes(t) for t in d_ts[:1000])
    ts, ok1 = _times_ns(d_ts)
    dur, ok2 = _dur_ns(d_dur)
    lts, lok = _times_ns(l_ts)
    fts, fok = _times_ns(f_ts)
    return {
        "count": len(events), "names": list(names), "stream_labels": list(stream_labels),
        "device_labels": list(device_labels),
        "name": np.array(d_name, np.int32), "cat": np.array(d_cat, np.int8),
        "stream": np.array(d_stream, np.int32), "dev": np.array(d_dev, np.int32),
        "ts": ts, "dur": dur, "ok": ok1 & ok2, "block": np.array(d_block, np.int64),
        "corr": np.array(d_corr, np.int64),
        "l_corr": np.array(l_corr, np.int64)[lok], "l_ts": lts[lok],
        "f_id": np.array(f_id, np.int64)[fok], "f_ts": fts[fok],
        "waits": waits, "steps": steps, "syncs": dict(syncs), "float_ts": float_ts,
    }


# Big traces are scanned by forked workers that read the document from this module-level
# buffer (shared copy-on-write, never pickled); it is cleared when the pool closes.
_SHARED: bytes | None = None
PARALLEL_BYTES = 64 << 20


def _scan_piece(bounds: tuple[int, int]) -> dict | str:
    a, b = bounds
    mv = memoryview(_SHARED)  # type: ignore[arg-type]
    gc.disable()
    try:
        return _scan(_EVENTS.decode(b"[" + mv[a:b] + b"]"))
    except msgspec.DecodeError:
        return "decode"
    except msgspec.ValidationError:
        return "validation"


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
    """Processes that decode one big trace: one per core (at most 4), or
    ``PARASTREAM_WORKERS``; small traces and systems without fork decode in-process."""
    import os

    if nbytes < PARALLEL_BYTES or "fork" not in mp.get_all_start_methods():
        return 1
    env = os.environ.get("PARASTREAM_WORKERS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, min(4, os.cpu_count() or 1))


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


@gc_paused()  # millions of new objects: generational GC passes would dominate
def _decode(path: str, data: bytes, warnings: list[str]) -> tuple[list[dict], object]:
    """Decode the document; the events array in pieces (in parallel for big traces) so
    only the kept columns of each piece outlive it.

    For a big trace the workers start on pieces cut from where the ``traceEvents`` array
    appears to start while this process decodes the rest of the document (which also
    validates the whole file and gives the array's exact span); pieces past the array's
    end are then dropped and the one that straddles it is redone.
    """
    global _SHARED
    pool = None
    _SHARED = data
    try:
        guess = _EVENTS_KEY.search(data)
        n_workers = _workers(len(data))
        early = None
        if guess is not None and n_workers > 1:
            g_lo = guess.end()  # just after '['
            early_pieces = [(g_lo + x, g_lo + y) for x, y in _boundaries(memoryview(data)[g_lo:])]
            if len(early_pieces) > 1:
                pool = mp.get_context("fork").Pool(n_workers)
                early = (g_lo, early_pieces, pool.map_async(_scan_piece, early_pieces, chunksize=1))
        try:
            head = msgspec.json.decode(data, type=_TraceHead)
        except msgspec.ValidationError:
            trace = _lenient_events(path, data, warnings)
            return [_scan(trace.traceEvents)], trace
        raw = head.traceEvents
        if len(memoryview(raw)) == 0:
            return [], head
        if bytes(memoryview(raw)[:1]) != b"[":
            raise InputError(path, "traceEvents is not a list")
        off = _span_offset(data, raw)
        if off is None:  # not a view: work on a copy of the span
            data, off = bytes(memoryview(raw)), 0
            _SHARED = data
        inner_lo, inner_hi = off + 1, off + len(memoryview(raw)) - 1
        if early is not None and early[0] == inner_lo:
            parts = []
            for (x, y), r in zip(early[1], early[2].get()):
                if y <= inner_hi:
                    parts.append(r)
                elif x < inner_hi:  # the piece that runs past the array's end
                    parts.append(_scan_piece((x, inner_hi)))
        else:
            pieces = [(inner_lo + x, inner_lo + y) for x, y in
                      _boundaries(memoryview(data)[inner_lo:inner_hi])]
            if pool is not None and len(pieces) > 1:
                parts = pool.map(_scan_piece, pieces, chunksize=1)
            else:
                parts = [_scan_piece(x) for x in pieces]
        if "validation" in parts:
            trace = _lenient_events(path, data, warnings)
            return [_scan(trace.traceEvents)], trace
        if "decode" in parts:
            # a boundary fell inside a string or a nested object: decode the array whole
            parts = [_scan(_EVENTS.decode(memoryview(data)[off:inner_hi + 1]))]
        return parts, head
    finally:
        _SHARED = None
        if pool is not None:
            pool.terminate()
            pool.join()


def read(path: str) -> Timeline:
    """Read a Kineto trace into a :class:`Timeline` (one device: the busiest one)."""
    data = read_all(path)
    if is_perfetto_view(data):
        raise InputError(path, "a Perfetto view that parastream analyze wrote, not a profiler "
                               "trace: analyze the trace it was made from")
    warnings: list[str] = []
    try:
        parts, head = _decode(path, data, warnings)
    except msgspec.DecodeError as exc:
        reason = str(exc)
        if "truncated" in reason.lower():
            reason = "truncated JSON (" + reason + ")"
        raise InputError(path, f"invalid JSON: {reason}") from None
    del data
    return _build(path, parts, head, warnings)


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


def _build(path: str, parts: list[dict], trace, warnings: list[str]) -> Timeline:
    count = sum(p["count"] for p in parts)
    n_dev = sum(p["name"].size for p in parts)
    if n_dev == 0:
        if not count:
            raise InputError(path, "empty trace: traceEvents has no events")
        raise InputError(path, "no device activity (kernel, gpu_memcpy or gpu_memset events) "
                               "in the trace; was it captured with ProfilerActivity.CUDA?")
    streams, names, devices = Interner(), Interner(), Interner()
    name = _merge_codes(parts, "name", "names", names, str)
    stream = _merge_codes(parts, "stream", "stream_labels", streams, _label_text)
    dev = _merge_codes(parts, "dev", "device_labels", devices, _label_text)
    cat = np.concatenate([p["cat"] for p in parts])
    starts = np.concatenate([p["ts"] for p in parts])
    durs = np.concatenate([p["dur"] for p in parts])
    usable = np.concatenate([p["ok"] for p in parts])  # every device: HTA pools them
    ok = usable.copy()  # the analysed device only
    block = np.concatenate([p["block"] for p in parts])
    corr = np.concatenate([p["corr"] for p in parts])

    # One capture is one device: keep the device with the most device events.
    dev_count = np.bincount(dev, minlength=len(devices.values))
    # the device with the most usable ops (one whose ops all lack a time is no capture)
    best = int(np.argmax(np.bincount(dev[usable], minlength=len(devices.values))))
    device_id = devices.values[best]
    if (dev_count > 0).sum() > 1:
        others = [devices.values[i] for i in np.flatnonzero(dev_count) if i != best]
        warnings.append(f"trace holds {len(others) + 1} devices; analysed device {device_id}, "
                        f"skipped device(s) {', '.join(sorted(others))} "
                        f"({int(dev_count.sum() - dev_count[best])} ops)")
        ok &= dev == best
    bad_time = ~usable
    if not (ok & usable).any():
        raise InputError(path, f"none of the trace's {n_dev} device op(s) has a usable ts and "
                               "dur (numbers, dur not negative)")
    if bad_time.any():
        warnings.append(f"skipped {int(bad_time.sum())} device op(s) without a usable ts/dur")

    # kind per (category, name): the comm regex runs once per distinct kernel name
    kind = _CAT_KIND[cat].copy()
    kind[(kind == KIND_COMPUTE) & value_flags(names.values, COMM_NAME.search)[name]] = KIND_COMM

    l_corr = np.concatenate([p["l_corr"] for p in parts])
    l_ts = np.concatenate([p["l_ts"] for p in parts])
    launch = _join(corr, l_corr, l_ts)
    runtime_launch = launch.copy()
    missing = launch < 0
    if missing.any():
        flow = _join(corr[missing], np.concatenate([p["f_id"] for p in parts]),
                     np.concatenate([p["f_ts"] for p in parts]))
        launch[missing] = flow

    steps = [s for p in parts for s in p["steps"]]
    st_ids = np.array([s for s, _, _ in steps], np.int32)
    st_start, st_ok = _times_ns([t for _, t, _ in steps])
    st_dur, st_ok2 = _dur_ns([d for _, _, d in steps])
    keep = st_ok & st_ok2
    # a kernel belongs to the step in which it was launched (GPU work lags the CPU)
    step = window_ids(st_start[keep], (st_start + st_dur)[keep], st_ids[keep],
                      np.where(launch >= 0, launch, starts))

    # Stream Wait Events: parsed once, for HTA's figure (all of them) and the timeline's waits
    waits = [w for p in parts for w in p["waits"]]
    w_name = np.array([names.code(w[2]) for w in waits], np.int32)
    w_ts, w_ok = _times_ns([w[3] for w in waits])
    w_dur, w_ok2 = _dur_ns([w[4] for w in waits])
    w_good = w_ok & w_ok2
    w_launch = _join(np.array([w[5] for w in waits], np.int64), l_corr, l_ts)
    hta = _hta_figure(parts, names, np.concatenate([name[usable], w_name[w_good]]),
                      np.concatenate([starts[usable], w_ts[w_good]]),
                      np.concatenate([durs[usable], w_dur[w_good]]),
                      np.concatenate([runtime_launch[usable], w_launch[w_good]]),
                      st_ids, st_start[st_ok])
    types = Interner(_CATS)
    n_ok = int(ok.sum())
    ops = dict(stream=stream[ok], name=name[ok], type=cat[ok].astype(np.int32),
               start_ns=starts[ok], end_ns=(starts + durs)[ok], kind=kind[ok],
               core=np.full(n_ok, core_code("CUDA"), np.int8),
               block_dim=np.clip(block[ok], -1, np.iinfo(np.int32).max).astype(np.int32),
               mix_block_dim=np.full(n_ok, -1, np.int32), step=step[ok], launch_ns=launch[ok])

    w_stream = np.full(len(waits), -1, np.int32)
    w_on = np.full(len(waits), -1, np.int32)
    for i, w in enumerate(waits):  # interned in file order, as the op lanes were
        s = stream_label(w[0])
        if s is None or s == "-1":
            continue  # a wait on no stream cannot be placed on a lane
        w_stream[i] = streams.code(s)
        o = stream_label(w[1])
        if o is not None and o != "-1":
            w_on[i] = streams.code(o)
    wait_cols = None
    placed = w_stream >= 0
    if placed.any():
        wk = placed & w_good
        wait_cols = dict(wait_stream=w_stream[wk], wait_on=w_on[wk], wait_start_ns=w_ts[wk],
                         wait_end_ns=(w_ts + w_dur)[wk], wait_name=w_name[wk])

    device = DeviceInfo()
    props = trace.deviceProperties or []
    for p in props:
        if stream_label(p.id) == device_id or len(props) == 1:
            sms = p.numSms
            if sms is not None and not 0 < sms <= MAX_SMS:  # a GPU has some, and not 1e30
                warnings.append(f"deviceProperties numSms {sms} ignored (not a plausible "
                                "multiprocessor count)")
                sms = None
            device = DeviceInfo(name=p.name, sm_count=sms)
            break
    meta: dict = {"device_id": device_id}
    if isinstance(trace.traceName, str) and trace.traceName:
        meta["trace_name"] = trace.traceName
    if trace.distributedInfo:
        for k in ("rank", "world_size", "backend"):
            if k not in trace.distributedInfo:
                continue
            v = trace.distributedInfo[k]
            if k != "backend" and v is not None and not (isinstance(v, int)
                                                         and not isinstance(v, bool)):
                # ranks are sorted and compared across files: a whole number or nothing
                s = v.strip() if isinstance(v, str) else ""
                if not (s.isascii() and s.isdigit()):
                    raise InputError(path, f"distributedInfo.{k} is {v!r}, not a whole number")
                v = int(s)
            meta[k] = v
    syncs: Counter = Counter()
    for p in parts:
        syncs.update(p["syncs"])
    if syncs:
        meta["host_syncs"] = dict(syncs)
    meta["hta_comm_comp_overlap_pct"] = hta
    return make_timeline(path, FORMAT, streams.values, names.values, types.values, ops,
                         wait_cols, device=device, warnings=warnings, meta=meta)


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
