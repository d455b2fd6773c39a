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

from ..timeline.model import KIND_COMM, KIND_MEMCPY, KIND_MEMSET, Timeline
from .atomic import write_atomic

_CAT = {KIND_MEMCPY: "gpu_memcpy", KIND_MEMSET: "gpu_memset"}


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def to_kineto(tl: Timeline, label: str = "") -> dict:
    """The Chrome-trace document of one timeline (stream labels must be integers or are
    numbered in order of appearance)."""
    t0 = tl.t0_ns
    ids: dict[str, int] = {}
    for s in tl.streams:
        try:
            ids[s] = int(s)
        except ValueError:
            ids[s] = 1000 + len(ids)
    events = []
    for i in range(len(tl)):
        s = ids[tl.streams[int(tl.stream[i])]]
        name = tl.names[int(tl.name[i])]
        kind = int(tl.kind[i])
        if kind == KIND_COMM and not name.lower().startswith(("nccl", "hccl")):
            name = f"hccl_{name}"  # so every reader classifies it as communication
        args = {"stream": s, "device": 0, "correlation": i + 1}
        if tl.block_dim[i] >= 0:
            args["grid"] = [int(tl.block_dim[i]), 1, 1]
        events.append({"ph": "X", "cat": _CAT.get(kind, "kernel"), "name": name, "pid": 0,
                       "tid": s, "ts": _us(int(tl.start_ns[i]) - t0),
                       "dur": _us(int(tl.end_ns[i] - tl.start_ns[i])), "args": args})
    for k in range(tl.n_waits):
        s = ids[tl.streams[int(tl.wait_stream[k])]]
        on = int(tl.wait_on[k])
        events.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0,
                       "tid": s, "ts": _us(int(tl.wait_start_ns[k]) - t0),
                       "dur": _us(int(tl.wait_end_ns[k] - tl.wait_start_ns[k])),
                       "args": {"stream": s, "wait_on_stream": ids[tl.streams[on]] if on >= 0 else -1,
                                "device": 0}})
    for s, i in ids.items():
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": i,
                       "args": {"name": f"stream {s}"}})
    props = [{"id": 0, "name": tl.device.name or "simulated device",
              "numSms": tl.device.sm_count or tl.device.ai_core_num or 0}]
    return {"schemaVersion": 1, "traceName": label or os.path.basename(tl.source),
            "deviceProperties": props, "traceEvents": events}


def write_kineto(path: str | os.PathLike[str], tl: Timeline, label: str = "") -> None:
    write_atomic(path, msgspec.json.encode(to_kineto(tl, label)))
