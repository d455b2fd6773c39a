"""One warm call under the torch profiler, saved as a PyTorch (Kineto) trace.

On cuda, ``parastream run --trace`` writes two kinds of timeline per candidate: the
backend's own (device events around each op, op names as planned), and this one, the
kernels as the driver ran them on its streams, in the format ``parastream analyze`` reads
from ``torch.profiler`` (DOMAIN.md §6). The second is the independent check: the first is
bracketed by the same events the plan issued, the second is not.

npu is not captured here: torch_npu has its own profiler and output folder
(``torch_npu.profiler``; ``parastream analyze`` reads its ASCEND_PROFILER_OUTPUT).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable

#: the devices whose kernels the torch profiler records (cpu: host ops only)
PROFILED = ("cpu", "cuda")


def capture_torch_trace(call: Callable[[], Any], path: str, device: str = "cuda") -> int:
    """Run ``call`` once untimed, then once under ``torch.profiler`` (host activity, and the
    device's kernels on cuda), and write the trace to ``path`` atomically. Returns the
    number of trace events."""
    import json

    import torch
    from torch.profiler import ProfilerActivity, profile

    from ..report.atomic import write_atomic

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
        with profile(activities=activities) as prof:
            call()
            sync()
    # export_chrome_trace writes to a path of its own choosing: a scratch folder, then one
    # atomic write to the real place
    with tempfile.TemporaryDirectory(prefix="parastream-trace-") as scratch:
        tmp = os.path.join(scratch, "trace.json")
        prof.export_chrome_trace(tmp)
        with open(tmp, "rb") as f:
            data = f.read()
    events = len(json.loads(data).get("traceEvents", []))
    write_atomic(path, data)
    return events


__all__ = ["PROFILED", "capture_torch_trace"]
