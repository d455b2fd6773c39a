"""One warm call under the torch profiler: the PyTorch (Kineto) trace, and on cuda the
plan's ops as the GPU ran them.

On cuda the backend's own timeline brackets each op with two events on its stream. When
the host issues more slowly than the GPU runs (the zoo models at small scale on an H200:
kernels 0.4 ms of a 0.5-1.1 ms call), the start event fires as soon as it is recorded
and the interval holds the op's launch too: two streams' intervals then overlap while no
two kernels did (the backend timeline said parallelism 1.15-1.31x and "partial overlap";
the torch profiler's kernels, 1.00x). So ``parastream run --device cuda`` analyses a run
taken under the torch profiler instead: the executor wraps each op in
``record_function(op name)`` (:attr:`MultiStreamExecutor.annotate`), and the profiler
puts a ``gpu_user_annotation`` span around that op's kernels on the stream they ran on;
:func:`kernel_timeline` reads those spans as the plan's ops.

npu is not captured here: torch_npu has its own profiler and output folder
(``torch_npu.profiler``; ``parastream analyze`` reads its ASCEND_PROFILER_OUTPUT).
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections import Counter
from typing import Any, Callable

from ..timeline.model import Timeline

#: the devices whose kernels the torch profiler records (cpu: host ops only)
PROFILED = ("cpu", "cuda")


def profile_call(call: Callable[[], Any], device: str = "cuda") -> bytes:
    """Run ``call`` once untimed, then once under ``torch.profiler`` (host activity, and the
    device's kernels on cuda), both without autograd; the exported trace's bytes."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if device not in PROFILED:
        raise ValueError(f"the torch profiler trace is taken on {' or '.join(PROFILED)}, "
                         f"not {device!r}")
    activities = [ProfilerActivity.CPU]
    sync: Callable[[], None] = lambda: None  # noqa: E731
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
        sync = torch.cuda.synchronize
    with torch.no_grad():
        call()  # warm: allocator growth and lazy kernel loading stay out of the trace
        sync()
        with warnings.catch_warnings():
            # torch warns that a profiler without a schedule keeps one cycle: one is all
            warnings.filterwarnings("ignore", message=".*clears events at the end of each cycle")
            with profile(activities=activities) as prof:
                call()
                sync()
    # export_chrome_trace writes to a path of its own choosing: a scratch folder
    with tempfile.TemporaryDirectory(prefix="parastream-trace-") as scratch:
        tmp = os.path.join(scratch, "trace.json")
        prof.export_chrome_trace(tmp)
        with open(tmp, "rb") as f:
            return f.read()


def capture_torch_trace(call: Callable[[], Any], path: str, device: str = "cuda") -> None:
    """:func:`profile_call`, written to ``path`` atomically."""
    from ..atomic import write_atomic

    write_atomic(path, profile_call(call, device))


def _stream_of(event: dict) -> str | None:
    """The stream a GPU event ran on, as the Kineto reader reads it (``args.stream``, else
    the track id)."""
    from ..timeline.readers.kineto import stream_label

    args = event.get("args") or {}
    for v in (args.get("stream"), event.get("tid")):
        if v is not None and not isinstance(v, bool):
            return stream_label(v)
    return None


def kernel_timeline(doc: dict, assignment: dict[str, int], source: str,
                    device: str | None = None) -> Timeline | None:
    """The plan's ops from a trace's ``gpu_user_annotation`` spans (an annotated executor
    run, :func:`profile_call`): each op from its first kernel's start to its last kernel's
    end on the stream they ran on. Each CUDA stream is labelled with the plan stream most of
    its ops were planned on, one to one (an op that ran elsewhere stays misplaced for the
    placement check); ops that launched no kernel are not in it. None without any span."""
    from .lanes import LaneRecorder, build_timeline

    rows = []
    for e in doc.get("traceEvents") or []:
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("cat") != "gpu_user_annotation":
            continue
        name, stream = e.get("name"), _stream_of(e)
        if name not in assignment or stream is None:
            continue
        try:
            start = round(float(e["ts"]) * 1e3)
            end = start + max(0, round(float(e.get("dur", 0)) * 1e3))
        except (KeyError, TypeError, ValueError):
            continue
        rows.append((stream, name, start, end))
    if not rows:
        return None
    # the plan check's own one-to-one mapping (pairs holding the most ops first): each
    # trace stream a plan stream maps to takes that plan stream's label
    from ..plan.verify import trace_stream_mapping

    seen: dict[int, Counter] = {}
    for stream, name, _, _ in rows:
        seen.setdefault(assignment[name], Counter())[stream] += 1
    mapping, _ = trace_stream_mapping(seen)
    label: dict[str, str] = {}
    for planned, stream in sorted(mapping.items()):
        label.setdefault(stream, str(planned))
    for stream, _, _, _ in rows:  # a trace stream no plan stream took keeps its own id
        label.setdefault(stream, f"cuda{stream}")
    t0 = min(r[2] for r in rows)
    lanes: dict[str, LaneRecorder] = {}
    for stream, name, start, end in sorted(rows, key=lambda r: r[2]):
        lane = label[stream]
        lanes.setdefault(lane, LaneRecorder(lane)).op(name, start - t0, end - t0)
    ordered = sorted(lanes.values(), key=lambda ln: (not ln.lane.isdigit(),
                                                     int(ln.lane) if ln.lane.isdigit() else 0))
    return build_timeline(ordered, source, "torch-profiler", device=device,
                          meta={"cuda_streams": {v: k for k, v in label.items()}})


__all__ = ["PROFILED", "capture_torch_trace", "kernel_timeline", "profile_call"]
