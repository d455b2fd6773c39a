"""A timeline as a PyTorch-profiler (Kineto) style Chrome trace.

``parastream simulate --trace`` and the cpu stream backend write their timelines this way,
so ``parastream analyze`` (and Perfetto, and HTA) read a predicted or executed run exactly
like a captured one: ops are ``kernel`` / ``gpu_memcpy`` events with ``args.stream``, waits
are ``cuda_sync`` ``Stream Wait Event`` events with ``args.wait_on_stream``. Timestamps are
microseconds relative to the capture's first event, written with 3 decimals (exact ns).
"""

from __future__ import annotations

import os

import msgspec
import numpy as np

from ..timeline.model import KIND_COMM, KIND_MEMCPY, KIND_MEMSET, Timeline
from ..timeline.nogc import gc_paused
from ..atomic import gzipped_if_named, write_atomic
from .perfetto import us_floats

_CAT = {KIND_MEMCPY: "gpu_memcpy", KIND_MEMSET: "gpu_memset"}


@gc_paused()  # one dict per op: a million of them for a large capture
def to_kineto(tl: Timeline, label: str = "") -> dict:
    """The Chrome-trace document of one timeline. Integer stream labels stay the stream ids;
    other labels (pipeline lanes such as ``decode#0``) get a numeric track id and keep their
    text in ``args.stream``, which the Kineto reader accepts."""
    t0 = tl.t0_ns
    tids = []
    for k, s in enumerate(tl.streams):
        try:
            tids.append(int(s))
        except ValueError:
            tids.append(1000 + k)
    arg_ids = [t if str(t) == s else s for t, s in zip(tids, tl.streams)]
    tid_arr = np.asarray(tids, dtype=np.int64)
    arg_arr = np.asarray(arg_ids, dtype=object)
    # communication ops get an hccl_ prefix once per distinct name, so every reader
    # classifies them as communication
    comm_codes = set(np.unique(tl.name[tl.kind == KIND_COMM]).tolist())
    names = np.asarray([f"hccl_{n}" if c in comm_codes and not n.lower().startswith(("nccl", "hccl"))
                        else n for c, n in enumerate(tl.names)], dtype=object)
    cats = np.asarray(["kernel"] * 4, dtype=object)
    for kind, cat in _CAT.items():
        cats[kind] = cat
    start = us_floats(tl.start_ns - t0)
    dur = us_floats(tl.end_ns - tl.start_ns)
    grid = tl.block_dim.tolist()
    events = []
    for i, (tid, sid, name, cat, ts, d, g) in enumerate(zip(
            tid_arr[tl.stream].tolist(), arg_arr[tl.stream].tolist(), names[tl.name].tolist(),
            cats[tl.kind].tolist(), start, dur, grid)):
        args = {"stream": sid, "device": 0, "correlation": i + 1}
        if g >= 0:
            args["grid"] = [g, 1, 1]
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": tid, "ts": ts,
                       "dur": d, "args": args})
    wait_on = np.where(tl.wait_on >= 0, tl.wait_on, 0)
    for tid, sid, on, known, ts, d in zip(
            tid_arr[tl.wait_stream].tolist(), arg_arr[tl.wait_stream].tolist(),
            arg_arr[wait_on].tolist(), (tl.wait_on >= 0).tolist(),
            us_floats(tl.wait_start_ns - t0),
            us_floats(tl.wait_end_ns - tl.wait_start_ns)):
        events.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0,
                       "tid": tid, "ts": ts, "dur": d,
                       "args": {"stream": sid, "wait_on_stream": on if known else -1,
                                "device": 0}})
    for s, t in zip(tl.streams, tids):
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": t,
                       "args": {"name": f"stream {s}"}})
    props = [{"id": 0, "name": tl.device.name or "simulated device",
              "numSms": tl.device.sm_count or tl.device.ai_core_num or 0}]
    return {"schemaVersion": 1, "traceName": label or os.path.basename(tl.source),
            "deviceProperties": props, "traceEvents": events}


def write_kineto(path: str | os.PathLike[str], tl: Timeline, label: str = "") -> None:
    write_atomic(path, gzipped_if_named(path, msgspec.json.encode(to_kineto(tl, label))))
