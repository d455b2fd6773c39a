"""Calibrate a cuda device's profile: what the simulator needs to predict ``parastream run
--device cuda``.

A shipped GPU profile holds datasheet peaks and a guessed launch cost of a few
microseconds. For small models the host issuing the ops, not the GPU, sets the wall, and
such a profile under-predicts it many times. So the figures that matter are measured
here, on the device, through the executor that runs the plans:

* ``launch_overhead_us``: the executor's host time per op (a chain of varied tiny ops, on
  one stream, without the backend's per-op timing events, as ``run`` times plans): the
  slope of the chain's wall between two lengths. Its kernels are shorter than their
  launch, so the wall is the host's;
* ``run_overhead_us``: the same chains' wall less that per-op cost (binding, the run's
  begin and end events, outputs);
* ``stream_overhead_us``: per forward call, a second stream (the chain with its first op
  there, less the chain on one stream);
* ``peak_tflops.cube``: square ``torch.mm`` in fp32 (torch's default precision), bf16 and
  fp16, ``2 n^3 / t``;
* ``memory_bandwidth_gbps``: a device-to-device copy, bytes read plus bytes written;
* ``cores``: the multiprocessors torch reports.

Everything else (vector peaks, hardware queues, the scheduler sweep) is kept from the
shipped profile of that GPU (``h100`` when its name is not one), and each figure's
``sources`` entry says which is which. Each timing is the median of several rounds;
slopes are taken within a round (:func:`parastream.calibrate.chains.per_round`).
"""

from __future__ import annotations

import datetime as _dt
import re
import statistics
from typing import Any, Callable

#: the shipped profile a GPU falls back to when its name is not one
FALLBACK = "h100"


def shipped_base(device_name: str) -> str | None:
    """The shipped profile for a device name torch reports (``NVIDIA H200`` -> ``h200``),
    None when there is none (calibrations then build on :data:`FALLBACK`)."""
    from ..device.profile import is_shipped, shipped_key

    key = device_name.lower().replace("nvidia", "").strip()
    for cand in (key, key.split()[0] if key.split() else key):
        if cand and is_shipped(cand) and shipped_key(cand) != "cpu":
            return shipped_key(cand)
    return None


def profile_stem(device_name: str) -> str:
    """What a calibration of this device is called before ``-calibrated``: the shipped
    profile's name where there is one (``h200``), else the device's own name in lower case
    (``a100-sxm4-80gb``): a profile built on the fallback is not named after it."""
    base = shipped_base(device_name)
    if base:
        return base
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower().replace("nvidia", "")).strip("-")
    return slug or "gpu"


def calibrated_name(device_name: str) -> str:
    """The name a calibration of the device torch calls ``device_name`` gets by default."""
    return f"{profile_stem(device_name)}-calibrated"


def _timer(device: str) -> Callable[[Callable[[], Any], int], float]:
    """``time(fn, runs)``: :func:`~parastream.runtime.measure.median_wall_us` of ``fn``
    followed by a device synchronize (device work is asynchronous; none on the host)."""
    from ..runtime.backend import backend_capabilities
    from ..runtime.cuda import device_module
    from ..runtime.measure import median_wall_us

    on = backend_capabilities(device).torch_device
    sync = device_module(on).synchronize if on else (lambda: None)
    return lambda fn, runs: median_wall_us(lambda: (fn(), sync()), runs)


def measure_rates(device: str = "cuda", quick: bool = True, matmul_n: int | None = None,
                  copy_mib: int | None = None) -> dict[str, Any]:
    """Matmul TFLOP/s by dtype (square ``matmul_n``) and copy bandwidth (GB/s, a copy of
    ``copy_mib`` MiB) on ``device``."""
    import torch

    timed = _timer(device)
    n = matmul_n or (4096 if quick else 8192)
    runs = 5 if quick else 10
    tflops: dict[str, float] = {}
    for label, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16),
                         ("fp16", torch.float16)):
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        us = timed(lambda: torch.mm(a, b), runs)
        tflops[label] = 2.0 * n ** 3 / (us * 1e-6) / 1e12
    mib = copy_mib or (256 if quick else 1024)
    src = torch.empty(mib << 18, device=device, dtype=torch.float32)  # mib MiB of floats
    src.normal_()
    dst = torch.empty_like(src)
    us = timed(lambda: dst.copy_(src), runs)
    gbps = 2.0 * src.numel() * 4 / (us * 1e-6) / 1e9
    return {"matmul_n": n, "tflops": tflops, "copy_mib": mib, "bandwidth_gbps": gbps}


def measure_host_costs(device: str = "cuda", quick: bool = True) -> dict[str, float]:
    """The executor's per-op, per-call and per-extra-stream host costs on ``device``."""
    import torch

    from ..graph.torch_import import import_runnable
    from ..plan.assign import plan_from_assignment
    from ..plan.model import Plan
    from ..runtime.backend import untimed
    from ..runtime.executor import MultiStreamExecutor
    from .chains import VARIED_LONG, VARIED_SHORT, per_round, varied_chain

    timed = _timer(device)
    calls = 15 if quick else 40
    rounds = 3 if quick else 7
    x = torch.randn(1, 16, device=device)
    timers: dict[tuple[str, int], Callable[[], float]] = {}
    ops: dict[int, int] = {}
    executors: list[Any] = []
    try:
        with torch.no_grad():
            for n in (VARIED_SHORT, VARIED_LONG):
                module = varied_chain(n).to(device)
                rn = import_runnable(module, (x,), name=f"varied{n}")
                ops[n] = len(rn.graph.ops)
                names = [o.name for o in rn.graph.ops]
                for label, plan in (
                        ("one stream", Plan.single(names)),
                        ("second stream", plan_from_assignment(
                            rn.graph, {o: int(i == 0) for i, o in enumerate(names)},
                            name="second stream"))):
                    ex = MultiStreamExecutor(module, (x,), plan, runnable=rn,
                                             backend=untimed(device))
                    executors.append(ex)
                    timers[label, n] = (lambda e=ex: timed(lambda: e(x), calls))
                timers["eager", n] = (lambda m=module: timed(lambda: m(x), calls))
            rows = per_round(timers, rounds)
    finally:
        for ex in executors:
            ex.close()
    per = ops[VARIED_LONG] - ops[VARIED_SHORT]

    def med(f: Callable[[dict], float]) -> float:
        return statistics.median(f(r) for r in rows)

    per_op = max(0.0, med(lambda r: (r["one stream", VARIED_LONG]
                                     - r["one stream", VARIED_SHORT]) / per))
    eager_op = max(0.0, med(lambda r: (r["eager", VARIED_LONG] - r["eager", VARIED_SHORT]) / per))
    per_run = max(0.0, med(lambda r: r["one stream", VARIED_SHORT]) - ops[VARIED_SHORT] * per_op)
    stream = max(0.0, med(lambda r: statistics.fmean(
        r["second stream", n] - r["one stream", n] for n in (VARIED_SHORT, VARIED_LONG))))
    return {"per_op_us": per_op, "eager_op_us": eager_op, "per_run_us": per_run,
            "stream_us": min(stream, 2.0 * per_run) if per_run else stream}


def calibrate_device(device: str = "cuda", quick: bool = True, name: str | None = None,
                     base: str | None = None, matmul_n: int | None = None,
                     copy_mib: int | None = None) -> dict:
    """A ``parastream.device/1`` profile of ``device`` as a dict: the shipped profile of its
    GPU (``base``, default from the name torch reports) with the measured figures in
    (sizes: :func:`measure_rates`)."""
    import msgspec

    from ..device.profile import load_profile
    from ..runtime.backend import backend_capabilities
    from ..runtime.cuda import device_module
    from .profile import sig

    on = backend_capabilities(device).torch_device
    if on:
        mod = device_module(on)
        props = mod.get_device_properties(mod.current_device())
        device_name, sms = props.name, int(props.multi_processor_count)
    else:  # the code path on the host (tests): the base profile's core counts stay
        device_name, sms = f"{device} (host)", 0
    base = base or shipped_base(device_name) or FALLBACK
    prof = msgspec.to_builtins(load_profile(base))
    rates = measure_rates(device, quick, matmul_n, copy_mib)
    host = measure_host_costs(device, quick)
    how = "quick" if quick else "full"
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    src = prof["sources"]
    prof["name"] = name or calibrated_name(device_name)
    prof["description"] = f"{device_name}, calibrated by parastream ({how}, {stamp})"
    if sms:
        prof["cores"] = {"cube": sms, "vector": sms}
        src["cores"] = f"measured: {sms} multiprocessors (torch.cuda.get_device_properties)"
    for dtype, v in rates["tflops"].items():
        prof["peak_tflops"]["cube"][dtype] = sig(v)
    src["peak_tflops"] = (f"cube fp32/bf16/fp16 measured: square torch.mm of "
                          f"{rates['matmul_n']}, 2 n^3 / median time (fp32 at torch's default "
                          f"precision); the rest from the shipped {base!r} profile: "
                          + src.get("peak_tflops", ""))
    prof["memory_bandwidth_gbps"] = sig(rates["bandwidth_gbps"])
    src["memory_bandwidth_gbps"] = (f"measured: device-to-device copy of {rates['copy_mib']} "
                                    "MiB, bytes read + written over the median time")
    prof["launch_overhead_us"] = sig(host["per_op_us"])
    src["launch_overhead_us"] = (
        "measured: the executor's host time per op on this device (chains of varied tiny "
        "ops on one stream, no per-op timing events, as run times plans; slope of the "
        "median wall per op, "
        f"{sig(host['per_op_us'])} us; eager torch's own slope {sig(host['eager_op_us'])} "
        "us per op)")
    prof["run_overhead_us"] = sig(host["per_run_us"])
    src["run_overhead_us"] = "measured: the same chains' wall less their ops' per-op cost"
    prof["stream_overhead_us"] = sig(host["stream_us"])
    src["stream_overhead_us"] = ("measured: the chain with its first op on a second stream, "
                                 "less the chain on one stream")
    src["calibration"] = (f"parastream calibrate --device {device} ({how}) on {device_name}, "
                          f"{stamp}; other figures: shipped profile {base!r}")
    return prof


def calibrate_repeated(device: str = "cuda", quick: bool = True, name: str | None = None,
                       repeat: int = 1) -> dict:
    """:func:`calibrate_device` ``repeat`` times, one after another, every measured number
    the median over them (:func:`parastream.calibrate.profile.median_profile`)."""
    from .profile import median_profile

    runs = [calibrate_device(device, quick, name) for _ in range(max(1, repeat))]
    merged = median_profile(runs)
    if len(runs) > 1:  # median_profile words its description for a CPU
        merged["description"] = f"{runs[0]['description']}, the median of {len(runs)} calibrations"
    return merged


def calibrated_device_profile(device: str = "cuda", quick: bool = True,
                              name: str | None = None) -> Any:
    """:func:`calibrate_device` as a checked :class:`~parastream.device.profile.DeviceProfile`."""
    import msgspec

    from ..device.profile import loads_profile

    return loads_profile(msgspec.json.encode(calibrate_device(device, quick, name)))


__all__ = ["FALLBACK", "calibrate_device", "calibrate_repeated", "calibrated_device_profile",
           "calibrated_name", "measure_host_costs", "measure_rates", "profile_stem",
           "shipped_base"]
