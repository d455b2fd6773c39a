"""``parastream calibrate``: measure the local CPU and write a ``parastream.device/1`` profile.

What is measured, and how (each number's method is written into the profile's ``sources``):

* matrix ("cube") throughput: square ``torch.mm`` (numpy ``@`` without torch), best time of
  repeated runs, ``2 n^3 / t``; bf16 too
  (kept even where the CPU emulates bf16 slowly: that is the rate a bf16 graph gets);
* vector throughput: ``addcmul`` (2 FLOPs per element) on cache-resident arrays;
* memory bandwidth: copying a large array (bytes read + bytes written over the time);
* per-task overhead (``launch_overhead_us``): handing a no-op task to a persistent worker
  thread through a queue and waiting for its completion, the median round trip (without
  torch; with it, :mod:`parastream.runtime.overhead` replaces it by the executor's own
  cost per op, measured through the executor);
* scheduler sweep: one pass over ``hw_queues`` queues checking each for work;
* plain Python call overhead, recorded in the sources for reference;
* cores: the CPUs this process may run on.

Each quantity is measured in several interleaved rounds and its best round kept (other
processes on a small machine spoil single measurements), except the op rates, which keep
the median of their rounds (see :func:`measure_op_rates`). A full run takes about 10-15 s,
``quick`` about 3 s.
"""

from __future__ import annotations

import datetime as _dt
import os
import queue
import statistics
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

from ..device.profile import SCHEMA, dumps_profile, loads_profile


def _run_times(fn: Callable[[], Any], budget_s: float, min_runs: int,
               max_runs: int = 10000) -> list[float]:
    """Seconds of repeated runs of ``fn``: at least ``min_runs``, more until about
    ``budget_s`` has passed (at most ``max_runs``), after one untimed warm-up."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - start < budget_s
                                    and len(times) < max_runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _best_time(fn: Callable[[], Any], budget_s: float, min_runs: int = 3) -> float:
    """The fastest of repeated runs of ``fn`` within about ``budget_s``."""
    return min(_run_times(fn, budget_s, min_runs))


def _median_time(fn: Callable[[], Any], budget_s: float, min_runs: int = 5,
                 max_runs: int = 10000) -> float:
    """The median of repeated runs of ``fn`` within about ``budget_s``."""
    return statistics.median(_run_times(fn, budget_s, min_runs, max_runs))


def _on_executor_thread(fn: Callable[[], Any], threads: int = 1,
                        name: str = "parastream-calibrate") -> Any:
    """``fn()`` where the cpu backend's executor runs an op on ``threads`` intra-op
    threads, with autograd off: on all cores, on the calling thread with its own thread
    team (a single-stream plan and stream 0 run on the thread that calls the executor);
    on fewer, on a fresh thread that set its own count, as a stream worker does (a
    multi-threaded op called off the main thread pays for waking a second thread team;
    on one thread, which uses no team, an op costs the same on either thread, so stream
    0's one-thread ops on the calling thread are costed right too).
    Returns its result, or re-raises its exception."""
    import torch

    if threads >= cpu_count():
        before = torch.get_num_threads()
        torch.set_num_threads(threads)  # this thread's count, restored below
        try:
            with torch.no_grad():
                return fn()
        finally:
            torch.set_num_threads(before)
    out: list = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            torch.set_num_threads(threads)  # per thread, as the cpu backend's workers do
            with torch.no_grad():
                out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            failed.append(exc)

    th = threading.Thread(target=run, name=name)
    th.start()
    th.join()
    if failed:
        raise failed[0]
    return out[0]


def measure_matmul(dtype: str = "fp32", n: int = 1024, budget_s: float = 1.0) -> float:
    """TFLOPS of an ``n x n`` matmul in ``dtype`` (fp32 or bf16)."""
    try:
        import torch
    except ImportError:
        if dtype != "fp32":
            return 0.0
        import numpy as np

        a = np.random.rand(n, n).astype(np.float32)
        b = np.random.rand(n, n).astype(np.float32)
        t = _best_time(lambda: a @ b, budget_s)
        return 2 * n ** 3 / t / 1e12
    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(n, n, dtype=tdt)
    b = torch.randn(n, n, dtype=tdt)
    out = torch.empty(n, n, dtype=tdt)
    with torch.no_grad():
        t = _best_time(lambda: torch.mm(a, b, out=out), budget_s)
    return 2 * n ** 3 / t / 1e12


def measure_intra_op_efficiency(rows: int = 64, width: int = 256, budget_s: float = 0.3) -> float:
    """How much a second (third, ...) intra-op thread speeds up a small matmul, the op size
    where CPU streams pay: e in s(k) = 1 + (k - 1) * e, from the best times on one thread
    and on all cores. Sets torch's thread count from this (main) thread and restores it."""
    cores = cpu_count()
    try:
        import torch
    except ImportError:
        return 1.0
    if cores < 2:
        return 1.0
    a = torch.randn(rows, width)
    b = torch.randn(width, width)
    out = torch.empty(rows, width)
    before = torch.get_num_threads()
    try:
        with torch.no_grad():
            torch.set_num_threads(1)
            t1 = _best_time(lambda: torch.mm(a, b, out=out), budget_s)
            torch.set_num_threads(cores)
            tk = _best_time(lambda: torch.mm(a, b, out=out), budget_s)
    finally:
        torch.set_num_threads(before)
    return min(1.0, max(0.0, (t1 / tk - 1.0) / (cores - 1)))


def sig(x: float, digits: int = 4) -> float:
    """``x`` to ``digits`` significant figures: how a profile stores its measured numbers."""
    return float(f"{x:.{digits}g}")


def _nbytes(*ts: Any) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


#: an op case built: (the call, its work, the bytes it reads)
_Case = tuple[Callable[[], Any], float, float]


def _torch_fns() -> tuple[Any, Any, Callable[..., Any]]:
    """(torch, torch.nn.functional, torch.randn), imported when a case is built."""
    import torch
    import torch.nn.functional as F

    return torch, F, torch.randn


def _case_linear(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    m, k, n = (256, 512, 512) if large else (16, 64, 64)
    x, w = r(m, k), r(n, k)
    return (lambda: F.linear(x, w)), 2.0 * m * k * n, float(_nbytes(x, w))


def _case_few_rows(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    # a batch-2 decode linear (up to FEW_ROWS rows): about one pass over the weight
    # per row, at a fraction of the FLOP rate of bigger products
    k = n = 512 if large else 64
    x, w = r(2, k), r(n, k)
    return (lambda: F.linear(x, w)), 2.0 * 2 * k * n, float(_nbytes(x, w))


def _case_conv2d(large: bool, channels_last: bool = False) -> _Case:
    torch, F, r = _torch_fns()
    # channels_last: the same convolution on NHWC data (an image permuted from HWC,
    # and everything convolved from it), which oneDNN runs faster
    nb, c, hw, o, ks = (2, 64, 28, 64, 3) if large else (1, 8, 8, 8, 3)
    x, w, b = r(nb, c, hw, hw), r(o, c, ks, ks), r(o)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    out = nb * o * hw * hw
    return ((lambda: F.conv2d(x, w, b, padding=1)), 2.0 * out * c * ks * ks + out,
            float(_nbytes(x, w, b)))


def _case_sdpa(large: bool, mixed: bool = False) -> _Case:
    torch, F, r = _torch_fns()
    # mixed: v's head dim below q's (MLA's decoupled rope): the unfused math kernel
    b, h, L, e, ev = ((2, 8, 128, 48, 32) if large else (1, 4, 16, 16, 8)) if mixed \
        else ((2, 8, 128, 64, 64) if large else (1, 4, 16, 16, 16))
    q, k, v = r(b, h, L, e), r(b, h, L, e), r(b, h, L, ev)
    return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)), \
        2.0 * b * h * L * L * (e + ev), float(_nbytes(q, k, v))


def _case_max_pool2d(large: bool, channels_last: bool = False) -> _Case:
    torch, F, r = _torch_fns()
    # channels_last: the same pool on NHWC data (an image permuted from HWC), another
    # kernel, much faster, for ops the importer marks memory_format=channels_last
    x = r(4, 64, 56, 56) if large else r(1, 8, 14, 14)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    out = F.max_pool2d(x, 3, 2, 1)
    # a 3x3 window each
    return (lambda: F.max_pool2d(x, 3, 2, 1)), 9.0 * out.numel(), float(_nbytes(x))


def _case_rms_norm(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    d = 512 if large else 64
    x, w = r(2 if large else 1, 128 if large else 16, d), r(d)
    return (lambda: F.rms_norm(x, (d,), w)), float(2 * _nbytes(x) + _nbytes(w)), \
        float(_nbytes(x, w))


def _case_layer_norm(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    d = 512 if large else 64
    x, w, b = r(2 if large else 1, 128 if large else 16, d), r(d), r(d)
    return (lambda: F.layer_norm(x, (d,), w, b)), float(2 * _nbytes(x) + _nbytes(w, b)), \
        float(_nbytes(x, w, b))


def _case_softmax(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    x = r(16, 128, 128) if large else r(4, 128, 128)
    return (lambda: torch.softmax(x, -1)), float(2 * _nbytes(x)), float(_nbytes(x))


def _case_add(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    a, b = (r(2, 128, 1376), r(2, 128, 1376)) if large else (r(1, 128, 512), r(1, 128, 512))
    return (lambda: torch.add(a, b)), float(3 * _nbytes(a)), float(_nbytes(a, b))


def _case_silu(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    x = r(2, 128, 1376) if large else r(1, 128, 512)
    return (lambda: F.silu(x)), float(2 * _nbytes(x)), float(_nbytes(x))


def _case_add_channels_last_broadcast(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    # an image normalisation, (x - mean) on NHWC data with 3 channels: the broadcast
    # along a 3-element innermost dim leaves TensorIterator no vector loop, many times
    # slower than the same sub on NCHW data
    x = r(4, 3, 112, 112) if large else r(1, 3, 64, 64)
    x = x.contiguous(memory_format=torch.channels_last)
    m = r(1, 3, 1, 1)
    return (lambda: torch.add(x, m)), float(2 * _nbytes(x) + _nbytes(m)), \
        float(_nbytes(x, m))


def _case_topk(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    # top-k over the last dim (a vocabulary or experts' scores): several times an
    # element-wise op over the same bytes, so the add line would make it near free
    x = r(16, 8000) if large else r(2, 1000)
    out = torch.topk(x, 8, dim=-1)
    return (lambda: torch.topk(x, 8, dim=-1)[0]), float(_nbytes(x, *out)), float(_nbytes(x))


def _case_index_select(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    # rows gathered from a table (rotary cos/sin by position, experts' tokens)
    table, idx = (r(2048, 128), torch.randint(0, 2048, (256,))) if large \
        else (r(128, 16), torch.randint(0, 128, (16,)))
    out = torch.index_select(table, 0, idx)
    # as the importer counts a gather: the rows it returns, not the whole table
    return (lambda: torch.index_select(table, 0, idx)), float(_nbytes(idx, out, out)), \
        float(_nbytes(idx, out))


def _case_cat(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    a, b = (r(4, 64, 28, 28), r(4, 128, 28, 28)) if large else (r(1, 32, 32, 32), r(1, 32, 32, 32))
    return (lambda: torch.cat([a, b], 1)), float(2 * _nbytes(a, b)), float(_nbytes(a, b))


def _case_all_reduce(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    # the collective as this process runs it: the zoo's parastream::all_reduce with
    # one rank (a Python custom op that clones, far above what the bandwidth alone
    # gives). A group of several ranks costs
    # its link on top, which one process cannot measure
    from .zoo import all_reduce as reduce

    x = r(2, 128, 512) if large else r(1, 16, 64)
    return (lambda: reduce(x)), float(2 * _nbytes(x)), float(_nbytes(x))


def _op_cases() -> dict[str, tuple[str, Callable[[bool], _Case]]]:
    """The op types whose CPU cost is measured: name -> (metric, case), where
    ``case(large)`` builds inputs and returns (the call, its work, the bytes it reads). Work
    and bytes read are counted the way
    the graph importer counts it (FLOPs of matmuls, convolutions and attention; bytes read
    plus written for the rest), so a rate applies to imported ops unchanged. The two sizes
    bracket the zoo's tiny and small scales, except that the element-wise, copy and softmax
    cases start above torch's intra-op grain (32Ki output elements): below it
    torch runs them on the calling thread, which the cost model costs on the one-thread
    line (:func:`parastream.device.cost.runs_serial`); a line through one serial and one
    multi-threaded point put the thread team's fixed cost (30-60 us on a stream worker
    with the main thread's team alive) into the rate, and made a 64Ki-element op 5x too
    cheap."""
    return {"linear": ("flops", _case_linear), "linear.few_rows": ("flops", _case_few_rows),
            "conv2d": ("flops", _case_conv2d),
            "conv2d.channels_last": ("flops", partial(_case_conv2d, channels_last=True)),
            "scaled_dot_product_attention": ("flops", _case_sdpa),
            "scaled_dot_product_attention.mixed_head_dims": ("flops",
                                                             partial(_case_sdpa, mixed=True)),
            "max_pool2d": ("flops", _case_max_pool2d),
            "max_pool2d.channels_last": ("flops",
                                         partial(_case_max_pool2d, channels_last=True)),
            "rms_norm": ("bytes", _case_rms_norm), "layer_norm": ("bytes", _case_layer_norm),
            "softmax": ("bytes", _case_softmax), "add": ("bytes", _case_add),
            "add.channels_last_broadcast": ("bytes", _case_add_channels_last_broadcast),
            "silu": ("bytes", _case_silu), "topk": ("bytes", _case_topk),
            "index_select": ("bytes", _case_index_select), "cat": ("bytes", _case_cat),
            "all_reduce": ("bytes", _case_all_reduce)}


def _third_cases() -> dict[str, _Case]:
    """A third size for the op types whose time is no straight line through their two
    cases (``OpRate.knee_work``): name -> (the call, its work, the bytes it reads).

    - ``conv2d`` in the middle: a convolution of 1.2 MFLOP (the zoo's tiny ones are
      0.3-1.2) ran at 25 GFLOP/s on one thread here, a fifth of the large case's rate,
      and the line through the small and large cases put it at half its time. The
      same convolution on channels-last data for ``conv2d.channels_last``.
    - the element-wise, copy and softmax types below their small case, at 1Ki elements:
      their two cases are above torch's intra-op grain, and the line through them crosses
      zero anywhere from 1.5 to 4 us (one calibration to the next), while a relu of 1Ki
      floats took 0.5-1 us of its own inside a model."""
    import torch
    import torch.nn.functional as F

    r = torch.randn
    x, w, b = r(1, 16, 16, 16), r(16, 16, 3, 3), r(16)
    x_nhwc = x.contiguous(memory_format=torch.channels_last)
    out = 16 * 16 * 16
    a1, b1, c1, s1 = r(1, 1024), r(1, 1024), r(1, 1024), r(8, 128)
    p1, q1 = r(1, 8, 8, 8), r(1, 8, 8, 8)
    return {"conv2d": ((lambda: F.conv2d(x, w, b, padding=1)), 2.0 * out * 16 * 9 + out,
                       float(_nbytes(x, w, b))),
            "conv2d.channels_last": ((lambda: F.conv2d(x_nhwc, w, b, padding=1)),
                                     2.0 * out * 16 * 9 + out, float(_nbytes(x_nhwc, w, b))),
            "add": ((lambda: torch.add(a1, b1)), float(3 * _nbytes(a1)), float(_nbytes(a1, b1))),
            "silu": ((lambda: F.silu(c1)), float(2 * _nbytes(c1)), float(_nbytes(c1))),
            "softmax": ((lambda: torch.softmax(s1, -1)), float(2 * _nbytes(s1)),
                        float(_nbytes(s1))),
            "cat": ((lambda: torch.cat([p1, q1], 1)), float(2 * _nbytes(p1, q1)),
                    float(_nbytes(p1, q1)))}


#: a flat line's fixed part, as a share of its upper point's time (:func:`_fit`)
FLAT_SHARE = 0.99


def _fit(small: tuple[float, float], large: tuple[float, float],
         flat: bool = False) -> tuple[float, float]:
    """(fixed us, rate in G/s) of ``t = fixed + work / rate`` through two (work, us) points;
    the fixed part is clamped to [0, small time] and the rate then fits the large point.
    When the small point is no faster than the large one (noise), the line goes through
    the origin, or with ``flat`` stays at the large point's time (almost all fixed cost:
    a knee's low line, whose two cases both take about the per-call cost)."""
    (ws, ts), (wl, tl) = small, large
    if flat and not tl > ts:
        return FLAT_SHARE * tl, wl / (max((1 - FLAT_SHARE) * tl, 1e-3) * 1e3)
    fixed = ts - ws * (tl - ts) / (wl - ws) if tl > ts and wl > ws else 0.0
    fixed = min(max(fixed, 0.0), ts)
    return fixed, wl / (max(tl - fixed, 1e-3) * 1e3)


def rotation_times(calls: Sequence[tuple[Any, Callable[[], Any]]], passes: int) -> dict[Any, float]:
    """Median microseconds of each ``(key, call)`` timed once per pass over all of them,
    ``passes`` passes after an untimed one: as in a model, other ops run between two calls
    of one (:func:`measure_op_rates`' cold line; ``benchmarks/bench_cold_ops.py``)."""
    times: dict[Any, list[float]] = {key: [] for key, _ in calls}
    for _, fn in calls:
        fn()
    for _ in range(passes):
        for key, fn in calls:
            t0 = time.perf_counter()
            fn()
            times[key].append((time.perf_counter() - t0) * 1e6)
    return {key: statistics.median(ts) for key, ts in times.items()}


def measure_op_rates(quick: bool = False, rounds: int = 1) -> dict[str, dict]:
    """Measured cost of each op type in :func:`_op_cases`, on one intra-op thread and on
    all cores, as ``parastream.device/1`` ``op_rates`` entries (empty without torch).

    The ops run where the CPU stream backend runs them (:func:`_on_executor_thread`): on all
    cores on the calling thread, on one thread on a worker thread that set its own
    intra-op thread count. That matters: a multi-threaded op called from a thread other
    than the main one pays for waking its thread team each time (tens of us here, 5-6x an
    element-wise op's own time). Every case is timed at two sizes and both thread counts,
    the median of a short burst, the median of ``rounds`` rounds; the line through the two
    sizes gives the fixed per-call cost and the rate. An op type with a third case
    (:func:`_third_cases`) gets two lines, through its lower two cases and through its
    upper two, meeting at the middle one (``knee_work``).

    The state is the executor's: the main thread's own thread team is alive first (it is
    in every ``parastream run``, whose single-stream reference runs there). Bursts catch
    a thread team spinning now and then (a 64Ki-element add's fixed cost on a worker came
    out 0 us in one full calibration and 46 us in the next), which the lowest round would
    then keep; the median of the rounds does not."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return {}
    import torch

    cores = cpu_count()
    budget = 0.015 if quick else 0.05
    cases = {name: (metric, case(False), case(True)) for name, (metric, case) in _op_cases().items()}
    seen: dict[tuple[str, int, Any], list[float]] = {}
    torch.add(torch.ones(1 << 16), 1)  # the main thread's team, as in the executor's process

    calls = [((name, is_large), fn) for name, (_, small, large) in cases.items()
             for is_large, (fn, *_) in ((False, small), (True, large))]
    thirds = {name: third for name, third in _third_cases().items() if name in cases}

    def burst() -> dict[tuple[str, Any], float]:
        timed = calls + [((name, "third"), fn) for name, (fn, *_) in thirds.items()]
        return {key: _median_time(fn, budget, 5, 2000) * 1e6 for key, fn in timed}

    rotation = partial(rotation_times, calls, rotation_passes(quick))

    cold: dict[tuple[str, int, bool], list[float]] = {}
    for _ in range(rounds):
        for threads in sorted({1, cores}):
            for (name, is_large), t in _on_executor_thread(burst, threads,
                                                            "parastream-calibrate-ops").items():
                seen.setdefault((name, threads, is_large), []).append(t)
            for (name, is_large), t in _on_executor_thread(rotation, threads,
                                                            "parastream-calibrate-ops").items():
                cold.setdefault((name, threads, is_large), []).append(t)
    med = {key: statistics.median(ts) for key, ts in seen.items()}

    def line(name: str, lo: tuple[float, Any], hi: tuple[float, Any], prefix: str = "",
             flat: bool = False) -> dict[str, float]:
        """The fitted line through two (work, case key) points on one thread and on all
        cores, as ``<prefix>fixed_1_us`` ... ``<prefix>rate_all`` entries."""
        fits = {t: _fit((lo[0], med[name, t, lo[1]]), (hi[0], med[name, t, hi[1]]), flat)
                for t in (1, cores)}
        return {f"{prefix}fixed_1_us": sig(fits[1][0]),
                f"{prefix}fixed_all_us": sig(fits[cores][0]),
                f"{prefix}rate_1": sig(fits[1][1]), f"{prefix}rate_all": sig(fits[cores][1])}

    out = {}
    for name, (metric, small, large) in cases.items():
        # with a third case: the two lower points give the low line, the upper two the
        # main one (the same line as without it when the third is the lowest)
        third = thirds.get(name)
        sizes = sorted([(small[1], False), (large[1], True)]
                       + ([(third[1], "third")] if third else []), key=lambda p: p[0])
        out[name] = {"metric": metric, **line(name, sizes[-2], sizes[-1])}
        if third:
            out[name].update(knee_work=sig(sizes[1][0]),
                             **line(name, sizes[0], sizes[1], prefix="low_", flat=True))
        for suffix, t in (("1", 1), ("all", cores)):
            extra = [max(0.0, statistics.median(cold[name, t, big]) - med[name, t, big])
                     for big in (False, True)]
            fixed, gbps = cold_line(small[2], large[2], extra[0], extra[1])
            out[name][f"cold_{suffix}_us"] = sig(fixed)
            out[name][f"cold_gbps_{suffix}"] = sig(gbps)
    return out


def cold_line(read_small: float, read_large: float, extra_small: float,
              extra_large: float) -> tuple[float, float]:
    """(``cold_*_us``, ``cold_gbps_*``) of an op whose cold runs took ``extra_small`` /
    ``extra_large`` us more than its warm ones, reading ``read_small`` / ``read_large``
    bytes: the extra as a line in the bytes read, its value at none (the code gone cold)
    and the GB/s its slope stands for (the data gone cold too). An extra that does not grow
    with the bytes is all code: the small size's, and no cold GB/s (0)."""
    if read_large <= read_small or extra_large <= extra_small:
        return extra_small, 0.0
    us_per_byte = (extra_large - extra_small) / (read_large - read_small)
    return max(0.0, extra_small - us_per_byte * read_small), 1.0 / (us_per_byte * 1e3)


#: passes over all op cases when timing them in rotation (each pass runs every case once)
ROTATION_PASSES = 30


def rotation_passes(quick: bool) -> int:
    """Rotation passes a round of :func:`measure_op_rates` makes (a third in quick mode)."""
    return ROTATION_PASSES // (3 if quick else 1)


#: idle times (ms) after which :func:`measure_cold` times an op, other op cases (tiny and
#: small) running in between
IDLE_MS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
#: shorter idle times (ms), only tiny op cases running in between, as inside a small model:
#: the points of the profile's ``cold_curve``
SHORT_IDLE_MS = (0.05, 0.1, 0.25, 0.5)
#: the op cases whose cold ramp :func:`measure_cold` measures (a composite of several
#: kernels, a matmul, an element-wise op and a copy)
COLD_TARGETS = ("rms_norm", "linear", "add", "cat")


def measure_cold(reps: int = 9,
                 targets: Sequence[str] = COLD_TARGETS) -> tuple[float, list[list[float]]]:
    """How an op whose code has not run for a while pays its cold cost: (the profile's
    ``cold_after_us``, its ``cold_curve``); (0, []) without torch or when idling costs
    nothing.

    For each of ``targets`` (small cases of :func:`_op_cases`), where the executor runs
    an op on one intra-op thread and on all cores (:func:`_on_executor_thread`): the op
    back to back, then right after the other op cases, run in turn for at least each of
    :data:`IDLE_MS` (as in a model, other ops run between two of one type), the median of
    ``reps`` each, with the median idle really spent. Each curve gives the idle at which
    the op pays half its extra after the longest idle (:func:`cold_ramp_us`);
    ``cold_after_us`` is the median over targets and thread counts. (A Python spin that
    runs no other op gives a ramp 2-5x longer on the development VM: other ops evict
    more.)

    The filler's small cases take a millisecond each, so those idles really last 0.5 ms
    and more. The curve's points come from the same op after :data:`SHORT_IDLE_MS` of the
    other families' tiny cases only: its extra there over its extra after the longest
    idle, the median over targets and thread counts at each idle, made non-decreasing
    (on the development VM 5-20% at 0.05-0.5 ms, where the proportional ramp gave 1-8%)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return 0.0, []
    cases = {name: (case(False)[0], case(True)[0]) for name, (_, case) in _op_cases().items()}

    def probe(name: str) -> tuple[float, list[tuple[float, float]], list[tuple[float, float]]]:
        target = cases[name][0]
        family = name.split(".", 1)[0]
        others = [fn for other, pair in cases.items() if other.split(".", 1)[0] != family
                  for fn in pair]
        tiny = [pair[0] for other, pair in cases.items() if other.split(".", 1)[0] != family]

        turn = [0]  # the filler goes on where it stopped: each idle starts with other ops

        def after(filler: list, ms: float) -> tuple[float, float]:
            """(median idle really spent, ms; median time of the op after it, us): the
            filler's ops only stop once the nominal idle has passed, so the real one is
            longer, by up to a case's time."""
            times, idles = [], []
            for _ in range(reps):
                t0 = time.perf_counter()
                end = t0 + ms / 1e3
                while time.perf_counter() < end:
                    filler[turn[0] % len(filler)]()
                    turn[0] += 1
                t1 = time.perf_counter()
                target()
                times.append(time.perf_counter() - t1)
                idles.append(t1 - t0)
            return statistics.median(idles) * 1e3, statistics.median(times) * 1e6

        return (_median_time(target, 0.05, 5, 2000) * 1e6, [after(others, ms) for ms in IDLE_MS],
                [after(tiny, ms) for ms in SHORT_IDLE_MS])

    ramps = []
    points: list[list[tuple[float, float]]] = [[] for _ in SHORT_IDLE_MS]
    for threads in sorted({1, cpu_count()}):
        for name in targets:
            hot, cold, short = _on_executor_thread(partial(probe, name), threads,
                                                   "parastream-calibrate-cold")
            longest = cold[-1][1] - hot  # the extra after the longest nominal idle
            cold.sort()
            ramps.append(cold_ramp_us([ms for ms, _ in cold], [t - hot for _, t in cold]))
            if longest >= 1.0:
                for k, (ms, t) in enumerate(short):
                    points[k].append((ms * 1e3, min(1.0, max(0.0, (t - hot) / longest))))
    ramps = [r for r in ramps if r > 0]
    if not ramps:
        return 0.0, []
    curve, share = [], 0.0
    for pts in points:
        if pts:
            share = max(share, statistics.median(s for _, s in pts))
            curve.append([sig(statistics.median(i for i, _ in pts)), sig(share, 3)])
    idles = [c[0] for c in curve]
    if idles != sorted(idles):  # a slow case stretched a short idle past a longer one
        curve = []
    return statistics.median(ramps), curve


def cold_ramp_us(idle_ms: Sequence[float], extra_us: Sequence[float]) -> float:
    """The ``cold_after_us`` of extra times ``extra_us`` measured after idle times
    ``idle_ms`` (ascending; equal ones allowed): twice the idle time, interpolated from
    0 us at 0 ms, at which the extra first reaches half the last one; 0 when the last extra
    is under 1 us (idling costs nothing measurable)."""
    extra = [max(0.0, e) for e in extra_us]
    if not extra or extra[-1] < 1.0:
        return 0.0
    half = extra[-1] / 2
    k = next(i for i, e in enumerate(extra) if e >= half)  # the last one at the latest
    prev_ms, prev = (idle_ms[k - 1], extra[k - 1]) if k else (0.0, 0.0)
    return 2e3 * (prev_ms + (idle_ms[k] - prev_ms) * (half - prev) / (extra[k] - prev))


#: cores the at-once DRAM run uses at most (one weight each; more would allocate gigabytes)
DRAM_CORES = 8


def measure_dram(megabytes: int = 64,
                 budget_s: float = 0.3) -> tuple[dict[str, float], float, int]:
    """One core's DRAM rates, how many cores' worth of them memory sustains at once, and
    how much data stays in cache between calls.

    Returns (``{"linear": GB/s, "add": GB/s}``, memory streams, cache bytes): a batch-1
    matrix-vector product over a ``megabytes`` weight and an add of two ``megabytes / 2``
    MiB arrays into a kept third, each on one intra-op thread of a worker thread (read +
    written bytes over the median time); then the same GEMV on every core (up to 8) at
    once, each over its own weight, whose total rate over one core's is the profile's
    ``memory_streams`` (1.0 on one core); then the GEMV over weights of 1, 2, 4, ... MiB:
    the largest still read at over twice the DRAM rate is the cache that keeps an op's
    data between calls (the L3 a virtual machine reports can be far larger than what it
    gets). Empty, 1.0 and 0 without torch."""
    try:
        import torch
    except ImportError:
        return {}, 1.0, 0
    # the at-once run uses up to 8 cores (one weight each): beyond that it would allocate
    # gigabytes, and memory_streams is then a lower bound
    cores = min(cpu_count(), DRAM_CORES)
    rows = max(1, megabytes * (1 << 20) // (4 * _DRAM_K))
    weight, x = torch.randn(rows, _DRAM_K), torch.randn(1, _DRAM_K)
    rates = _on_executor_thread(partial(_dram_alone, weight, x, megabytes, budget_s), 1,
                                "parastream-calibrate-dram")
    cached = _on_executor_thread(partial(_dram_cache, weight, x, megabytes, budget_s,
                                         rates["linear"]), 1, "parastream-calibrate-dram")
    if cores < 2:
        return rates, 1.0, cached
    weights = [weight] + [torch.randn(rows, _DRAM_K) for _ in range(cores - 1)]
    together = _dram_at_once(weights, x, budget_s)
    streams = sum(together) / rates["linear"] if len(together) == cores else 1.0
    return rates, min(float(cores), max(1.0, streams)), cached


#: the GEMV's inner dimension in :func:`measure_dram`
_DRAM_K = 1024


def _gemv_bytes(weight: Any, x: Any) -> float:
    return float(_nbytes(weight, x) + 4 * weight.shape[0])


def _dram_alone(weight: Any, x: Any, megabytes: int, budget_s: float) -> dict[str, float]:
    """GB/s of the GEMV over ``weight`` and of an add of two ``megabytes / 2`` MiB arrays
    into a kept output, on the calling thread. The add writes into a kept output: a fresh
    one that size comes straight from mmap, so each call would fault in and zero its
    pages; a model's smaller outputs are served again by the heap without faults after
    the first call."""
    import torch
    import torch.nn.functional as F

    half = megabytes * (1 << 20) // 8
    a, b, into = torch.randn(half), torch.randn(half), torch.empty(half)
    return {"linear": _gemv_bytes(weight, x) / _median_time(lambda: F.linear(x, weight),
                                                             budget_s) / 1e9,
            "add": float(3 * _nbytes(a)) / _median_time(lambda: torch.add(a, b, out=into),
                                                        budget_s) / 1e9}


def _dram_cache(weight: Any, x: Any, megabytes: int, budget_s: float, dram_gbps: float) -> int:
    """The largest power-of-two MiB slice of ``weight`` the GEMV still reads at over
    twice ``dram_gbps``, in bytes (0: none)."""
    import torch.nn.functional as F

    cached, mb = 0, 1
    while mb < megabytes:
        w = weight[: max(1, mb * (1 << 20) // (4 * _DRAM_K))]
        t = _median_time(lambda: F.linear(x, w), budget_s / 8)
        if _nbytes(w) / t / 1e9 < 2 * dram_gbps:
            break
        cached = mb << 20
        mb *= 2
    return cached


def _dram_at_once(weights: list[Any], x: Any, budget_s: float) -> list[float]:
    """GB/s of each of ``len(weights)`` threads running the GEMV over its own weight at
    once, on one intra-op thread each (started together at a barrier)."""
    together: list[float] = []
    failed: list[BaseException] = []
    start = threading.Barrier(len(weights))

    def at_once(w: Any) -> None:
        try:
            together.append(_gemv_rate_on_this_thread(w, x, budget_s, start))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            failed.append(exc)
            start.abort()

    threads = [threading.Thread(target=at_once, args=(w,), name="parastream-calibrate-dram")
               for w in weights]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed and not isinstance(failed[0], threading.BrokenBarrierError):
        raise failed[0]
    return together


def _gemv_rate_on_this_thread(w: Any, x: Any, budget_s: float, start: Any) -> float:
    """GB/s of repeated GEMVs over ``w`` on one intra-op thread of this thread, timed
    from when every thread passed ``start``."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    with torch.no_grad():
        F.linear(x, w)
        start.wait()
        t0, n = time.perf_counter(), 0
        while n < 5 or time.perf_counter() - t0 < budget_s:
            F.linear(x, w)
            n += 1
        return n * _gemv_bytes(w, x) / (time.perf_counter() - t0) / 1e9


#: a GEMV this much faster on all cores than on one is spread over the threads by torch
#: (1.25-1.93x on a VM where it was; 1.0 where it ran on the calling thread)
PARALLEL_GEMV_AT = 1.15


def measure_gemv_threads(megabytes: int = 32, budget_s: float = 0.2) -> tuple[float, float]:
    """Median ms (the faster of two rounds) of a batch-1 ``F.linear`` over a ``megabytes``
    weight on one intra-op thread and on all cores (as the executor runs an op on each): their ratio says
    whether this machine's torch spreads a GEMV over its threads
    (``DeviceProfile.parallel_gemv``). (0, 0) without torch or on one core."""
    try:
        import torch
    except ImportError:
        return 0.0, 0.0
    import torch.nn.functional as F

    cores = cpu_count()
    if cores < 2:
        return 0.0, 0.0
    k = 2048
    w = torch.randn(max(1, megabytes * (1 << 20) // (4 * k)), k)
    x = torch.randn(1, k)

    def timed() -> float:
        return _median_time(lambda: F.linear(x, w), budget_s) * 1e3

    # the faster of two alternating rounds each: a busy neighbour only slows one
    one = every = float("inf")
    for _ in range(2):
        one = min(one, _on_executor_thread(timed, 1, "parastream-calibrate-gemv"))
        every = min(every, _on_executor_thread(timed, cores, "parastream-calibrate-gemv"))
    return one, every


def measure_vector(elements: int = 1 << 16, budget_s: float = 0.5) -> float:
    """fp32 TFLOPS of an element-wise multiply-add on arrays that fit in cache."""
    try:
        import torch

        a, b, c = (torch.rand(elements) for _ in range(3))
        out = torch.empty(elements)
        fn = lambda: torch.addcmul(c, a, b, out=out)  # noqa: E731
    except ImportError:
        import numpy as np

        a, b, c = (np.random.rand(elements).astype(np.float32) for _ in range(3))
        out = np.empty(elements, dtype=np.float32)

        def fn() -> None:
            np.multiply(a, b, out=out)
            np.add(out, c, out=out)
    reps = 20

    def many() -> None:
        for _ in range(reps):
            fn()

    t = _best_time(many, budget_s)
    return 2 * elements * reps / t / 1e12


def measure_bandwidth(megabytes: int = 256, budget_s: float = 1.5) -> float:
    """GB/s of copying a ``megabytes`` array (read + write bytes over the time)."""
    import numpy as np

    n = megabytes * (1 << 20) // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    t = _best_time(lambda: np.copyto(dst, src), budget_s)
    return 2 * src.nbytes / t / 1e9


def measure_task_overhead(tasks: int = 2000) -> float:
    """Median microseconds to hand a no-op task to a persistent worker thread via a queue
    and wait for its completion (the CPU stream backend's per-op cost)."""
    q: queue.Queue = queue.Queue()

    def worker() -> None:
        while True:
            item = q.get()
            if item is None:
                return
            fn, done = item
            fn()
            done.set()

    th = threading.Thread(target=worker, name="parastream-calibrate", daemon=True)
    th.start()
    times = []
    noop = lambda: None  # noqa: E731
    try:
        for _ in range(tasks):
            done = threading.Event()
            t0 = time.perf_counter()
            q.put((noop, done))
            done.wait()
            times.append(time.perf_counter() - t0)
    finally:
        q.put(None)
        th.join(timeout=5)
    return statistics.median(times[len(times) // 10:]) * 1e6


def measure_call_overhead(calls: int = 200_000) -> float:
    """Microseconds per plain Python function call."""
    def f() -> None:
        return None

    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, time.perf_counter() - t0)
    return best / calls * 1e6


def measure_sweep(queues: int, sweeps: int = 20000) -> float:
    """Microseconds for one pass over ``queues`` empty queues checking each for work."""
    qs = [queue.Queue() for _ in range(max(queues, 1))]
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(sweeps):
            for q in qs:
                if not q.empty():
                    break
        best = min(best, time.perf_counter() - t0)
    return best / sweeps * 1e6


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, not the whole machine)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _others_running() -> int | None:
    """Runnable tasks on this machine now that are not threads of this process
    (``/proc/loadavg``'s count less this process's threads in state R); None where it
    cannot be read."""
    try:
        with open("/proc/loadavg") as f:
            total = int(f.read().split()[3].split("/")[0])
        own = 0
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    own += f.read().rsplit(")", 1)[1].split()[0] == "R"
            except (OSError, IndexError):  # the thread ended meanwhile
                continue
    except (OSError, IndexError, ValueError):
        return None
    return max(0, total - own)


def _busy_limit(cores: int) -> float:
    """Other runnable tasks that make a machine of ``cores`` cores too busy to calibrate
    on: half its cores, at least one."""
    return max(1.0, 0.5 * cores)


def busy_note(cores: int, samples: int = 5) -> str | None:
    """A warning when other work is running now: the median count of runnable tasks that
    are not this process's threads (:func:`_others_running`, sampled ``samples`` times
    20 ms apart) at least half the cores. A calibration then fits lines through
    descheduled runs (a busy 2-core VM gave ``linear`` a 16 ms fixed cost on all cores,
    against 3-7 us when quiet). None when quiet, or where there is no ``/proc/loadavg``.
    (Not the load average: it lags a minute behind, and would name a build that just
    ended.)"""
    counts = []
    for k in range(samples):
        n = _others_running()
        if n is None:
            return None
        counts.append(n)
        if k + 1 < samples:
            time.sleep(0.02)
    others = statistics.median(counts)
    if others < _busy_limit(cores):
        return None
    return (f"{others:g} other task(s) are running on {cores} core(s), so the figures will "
            "be noisy; calibrate on a quiet machine")


class BusyWatch:
    """Samples, while a measurement runs, how many other tasks are runnable
    (:func:`_others_running`, every ``every_s`` on a daemon thread): :meth:`note` then
    warns when they took at least half the cores for over a quarter of the samples.
    :func:`busy_note` looks once, before; work that starts during a calibration spoils it
    as much (a calibration while a test suite ran gave linear the same rate on all cores
    as on one, 104 against 101 GFLOP/s, 172-194 when quiet, and over-predicted
    llama_layer small by 44%)."""

    def __init__(self, cores: int, every_s: float = 0.2) -> None:
        self.cores, self.every_s = cores, every_s
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="parastream-busy-watch",
                                        daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            n = _others_running()
            if n is None:
                return
            self.samples.append(n)

    def __enter__(self) -> "BusyWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def busy_share(self) -> float:
        """The share of samples in which others took at least half the cores."""
        limit = _busy_limit(self.cores)
        return sum(n >= limit for n in self.samples) / len(self.samples) if self.samples else 0.0

    def note(self, what: str = "the calibration",
             advice: str = "its rates may be off; calibrate again on a quiet machine"
             ) -> str | None:
        """A warning when the machine was busy for over a quarter of the samples."""
        share = self.busy_share()
        if share <= 0.25:
            return None
        return (f"other tasks took at least half the {self.cores} core(s) during {share:.0%} "
                f"of {what}, so {advice}")


@dataclass
class _Headline:
    """The headline figures of one calibration, each the best of ``rounds`` rounds."""

    rounds: int
    n: int  # the square matmul's side
    fp32: float = 0.0
    bf16: float = 0.0
    vec: float = 0.0
    bw: float = 0.0
    task_us: float = float("inf")
    call_us: float = float("inf")
    sweep_us: float = float("inf")
    eff: float = 0.0


def _measure_headline(quick: bool, cores: int) -> _Headline:
    """Several short rounds, interleaved, keeping each quantity's best round: a neighbour
    process that grabs a core for a second spoils one round, not the whole measurement
    (OpenMP matmuls slow down many times when one of their threads is descheduled)."""
    h = _Headline(rounds=3 if quick else 5, n=512 if quick else 1024)
    for _ in range(h.rounds):
        h.fp32 = max(h.fp32, measure_matmul("fp32", h.n, 0.08 if quick else 0.3))
        h.bf16 = max(h.bf16, measure_matmul("bf16", h.n, 0.05 if quick else 0.3))
        h.vec = max(h.vec, measure_vector(1 << 16, 0.05 if quick else 0.2))
        h.bw = max(h.bw, measure_bandwidth(64 if quick else 256, 0.1 if quick else 0.4))
        h.task_us = min(h.task_us, measure_task_overhead(200 if quick else 1000))
        h.call_us = min(h.call_us, measure_call_overhead(30_000 if quick else 100_000))
        h.sweep_us = min(h.sweep_us, measure_sweep(cores, 3000 if quick else 10000))
        h.eff = max(h.eff, measure_intra_op_efficiency(budget_s=0.05 if quick else 0.2))
    return h


def _measure_memory(quick: bool, op_rates: dict[str, dict]) -> tuple[dict[str, float], float, int]:
    """:func:`measure_dram`, the best of two rounds (a busy neighbour only lowers a rate);
    each DRAM rate is written into its op type's entry of ``op_rates``."""
    dram: dict[str, float] = {}
    streams, cache = 1.0, 0
    for _ in range(2):
        got, st, cb = measure_dram(32 if quick else 64, 0.1 if quick else 0.3)
        for key, gbps in got.items():
            dram[key] = max(dram.get(key, 0.0), gbps)
        streams, cache = max(streams, st), max(cache, cb)
    for key, gbps in dram.items():
        if key in op_rates:
            op_rates[key]["dram_gbps"] = sig(gbps)
    return dram, streams, cache


def calibrate(quick: bool = False, name: str = "cpu-calibrated") -> dict:
    """Measure this CPU and return a ``parastream.device/1`` profile as a dict."""
    cores = cpu_count()
    date = _dt.date.today().isoformat()
    h = _measure_headline(quick, cores)
    op_rates = measure_op_rates(quick, rounds=2 if quick else 3)
    cold_after, cold_curve = measure_cold(3 if quick else 9) if op_rates else (0.0, [])
    dram, streams, cache = _measure_memory(quick, op_rates)
    gemv_one, gemv_all = measure_gemv_threads(32 if quick else 64, 0.1 if quick else 0.3)
    # bf16 is kept even where the CPU emulates it slowly: the measured rate is what a bf16
    # graph will see here (leaving it out would make the cost model fall back to fp32's)
    cube = {"fp32": sig(h.fp32), "bf16": sig(h.bf16)}
    if not h.bf16:
        # no torch: numpy has no bf16 matmul to time, and a profile may hold no zero rate
        # (a bf16 op then takes fp32's)
        del cube["bf16"]
    by = f"measured by parastream calibrate on {date}"
    profile = {
        "schema": SCHEMA,
        "name": name,
        "kind": "cpu",
        "description": (f"This machine's CPU, measured by 'parastream calibrate"
                        f"{' --quick' if quick else ''}' on {date}: {cores} cores, "
                        f"{sig(h.fp32, 3)} TFLOPS fp32 matmul, {sig(h.bw, 3)} GB/s copy, "
                        f"{sig(h.task_us, 3)} us per task hand-off."),
        "cores": {"cube": cores, "vector": cores},
        "peak_tflops": {"cube": cube, "vector": {"fp32": sig(h.vec)}},
        "memory_bandwidth_gbps": sig(h.bw),
        "launch_overhead_us": sig(h.task_us),
        "hw_queues": cores,
        "max_streams": cores,
        "scheduler_sweep_us": sig(h.sweep_us),
        "intra_op_efficiency": sig(h.eff, 3),
        "op_rates": op_rates,
        "memory_streams": sig(streams, 3),
        "cache_bytes": cache,
        "cold_after_us": sig(cold_after),
        "cold_curve": cold_curve,
        "parallel_gemv": bool(gemv_all and gemv_one / gemv_all >= PARALLEL_GEMV_AT),
        "sources": _headline_sources(by, quick, cores, h),
    }
    sources = profile["sources"]
    if op_rates:
        sources.update(_op_rate_sources(by, quick))
    if dram:
        sources.update(_dram_sources(by, quick, cores, sources["op_rates"]))
    if gemv_all:
        sources["parallel_gemv"] = (
            f"{by}: a batch-1 F.linear over a {32 if quick else 64} MiB weight took "
            f"{gemv_one:.3g} ms on 1 intra-op thread and {gemv_all:.3g} ms on {cores} "
            f"({gemv_one / gemv_all:.2f}x; spread over the threads at >= {PARALLEL_GEMV_AT}x)")
    return profile


def _headline_sources(by: str, quick: bool, cores: int, h: _Headline) -> dict[str, str]:
    """How each headline figure was measured (the profile's ``sources``)."""
    mode = "quick mode, " if quick else ""
    n = h.n
    return {
        "cores": f"{by}: os.sched_getaffinity (CPUs this process may use)",
        "peak_tflops": (f"{by}: {mode}best of {h.rounds} rounds; cube = best time of "
                        + (f"torch.mm {n}x{n} in fp32 and bf16" if h.bf16 else
                           f"numpy matmul {n}x{n} in fp32 (no torch: bf16 not measured)")
                        + ", 2n^3/t, all intra-op "
                        "threads; vector = torch.addcmul on 64Ki-element cache-resident "
                        "fp32 arrays, 2 FLOPs/element"),
        "memory_bandwidth_gbps": (f"{by}: {mode}best time of numpy.copyto of a "
                                  f"{64 if quick else 256} MiB array, (read + written "
                                  "bytes) / t"),
        "launch_overhead_us": (f"{by}: lowest of {h.rounds} rounds' median round trip of "
                               "a no-op task handed to a persistent worker thread via "
                               "queue.Queue and awaited with threading.Event; plain "
                               "Python call "
                               f"{sig(h.call_us, 3)} us"),
        "hw_queues": f"{by}: one worker thread per core can run at once",
        "max_streams": f"{by}: more CPU streams than cores only add hand-off cost",
        "scheduler_sweep_us": (f"{by}: one pass over {cores} queues checking each for "
                               "work (queue.Queue.empty)"),
        "intra_op_efficiency": (f"{by}: best of {h.rounds} rounds; torch.mm of 64x256 by "
                                "256x256 on 1 thread and on all cores, "
                                "e = (t1 / tk - 1) / (k - 1)"),
    }


def _op_rate_sources(by: str, quick: bool) -> dict[str, str]:
    """How the op rates and the cold costs were measured."""
    mode = "quick mode, " if quick else ""
    return {
        "op_rates": (
            f"{by}: {mode}each op type (and conv2d and max_pool2d on channels-last data, "
            "attention with v's head dim below q's, linear on 2 rows, a broadcast add "
            "over 3 channels-last channels) timed at two sizes (tiny and small zoo scale; "
            "element-wise, copy and softmax cases both above torch's 32Ki-element intra-op "
            "grain) on 1 intra-op thread (on a worker thread) and on all cores (on the main "
            "thread, as the executor runs them), median of a short burst, median of several "
            "rounds; the line through the two sizes gives the fixed cost "
            f"and the rate ({', '.join(sorted(_third_cases()))} also at a third size, a "
            "middle one for conv2d in either layout, 1Ki elements for the rest: knee_work at the middle of "
            "the three, a low_* line below it, the main line above) (GFLOP/s for linear, "
            "conv2d and attention, window elements per ns for max_pool2d, GB/s read + "
            "written for the rest); cold_*: each case timed "
            f"once per pass over all cases ({rotation_passes(quick)} passes a round, median), "
            "less the burst, as a line in the bytes read: its value at none and the GB/s of its "
            "slope (parastream.graph.calibrate.cold_line)"),
        "cold_after_us": (
            f"{by}: the small {', '.join(COLD_TARGETS)} cases, on 1 thread and on all cores, "
            "each right after the other op cases ran in turn for "
            f"{', '.join(f'{ms:g}' for ms in IDLE_MS)} ms: twice the idle time at which one "
            "takes half its extra time after the longest idle, the median over cases and "
            "thread counts (0 = idling cost nothing measurable)"),
        "cold_curve": (
            f"{by}: the same cases right after "
            f"{', '.join(f'{ms:g}' for ms in SHORT_IDLE_MS)} ms of the other op types' tiny "
            "cases only: [median idle really spent in us, median over cases and thread "
            "counts of the extra over the extra after the longest idle], made "
            "non-decreasing (parastream.graph.calibrate.measure_cold)"),
    }


def _dram_sources(by: str, quick: bool, cores: int, op_rates_source: str) -> dict[str, str]:
    """How the DRAM rates, memory streams and cache size were measured (the op rates'
    source gets the DRAM rates' method appended)."""
    return {
        "op_rates": op_rates_source + (
            f"; dram_gbps: best of 2 rounds, median time of a batch-1 F.linear over a "
            f"{32 if quick else 64} MiB weight (linear) and an add of two arrays of half "
            "that into a kept output (add; a fresh output that size is mmapped and faulted "
            "in on every call) on one thread, bytes read + written / t"),
        "memory_streams": (
            f"{by}: the same GEMV on {min(cores, DRAM_CORES)} cores at once (all, up to "
            f"{DRAM_CORES}), each over its own weight, total GB/s over one core's (best of 2 "
            "rounds)"),
        "cache_bytes": (
            f"{by}: the largest power-of-two MiB weight a batch-1 F.linear still reads at "
            "over twice its DRAM rate, repeated calls on one thread (best of 2 rounds)"),
    }


def _median_of(values: list[Any]) -> Any:
    """One value from the same field of several calibrations: numbers their median (an
    int stays an int), dicts key by key over the calibrations that have the key, lists of
    one length element by element (a median of ascending sequences stays ascending, so a
    cold curve stays valid), anything else (text, lists of other lengths) the first's."""
    first = values[0]
    if all(isinstance(v, bool) for v in values):  # a yes/no the majority of them saw
        return 2 * sum(values) > len(values)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        if all(isinstance(v, int) for v in values):
            return statistics.median_low(values)
        return sig(statistics.median(values))
    if all(isinstance(v, dict) for v in values):
        keys = list(dict.fromkeys(k for v in values for k in v))
        return {k: _median_of([v[k] for v in values if k in v]) for k in keys}
    if all(isinstance(v, list) for v in values) and len({len(v) for v in values}) == 1:
        return [_median_of(list(col)) for col in zip(*values)]
    if all(isinstance(v, list) for v in values):
        # cold curves of different lengths (one calibration found its idles out of order
        # and left it empty): the median of those of the most common non-zero length
        lengths = [len(v) for v in values if v]
        if lengths:
            common = max(set(lengths), key=lengths.count)
            return _median_of([v for v in values if len(v) == common])
    return first


#: figures :func:`repeat_spread` reports: (what, path in the profile, unit)
SPREAD_FIGURES = (
    ("executor per op", ("launch_overhead_us",), "us"),
    ("executor per call", ("run_overhead_us",), "us"),
    ("event wake-up", ("event_wake_us",), "us"),
    ("folded view", ("view_us",), "us"),
    ("fp32 matmul", ("peak_tflops", "cube", "fp32"), "TFLOPS"),
    ("copy bandwidth", ("memory_bandwidth_gbps",), "GB/s"),
)


def _at(profile: dict, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(profile, dict) or key not in profile:
            return None
        profile = profile[key]
    return profile


def repeat_spread(profiles: Sequence[dict], merged: dict) -> list[str]:
    """What moved between several calibrations of one machine, one line each: the headline
    figures as ``median (min-max)``, and the op rates' fixed costs on all cores as the
    median over op types of their spread (max - min over the median), with the widest.
    On a shared VM these move by 2x between calibrations minutes apart, which bounds
    how close any prediction from one calibration can come (docs/benchmarks-run.md)."""
    lines = []
    for what, path, unit in SPREAD_FIGURES:
        got = [v for v in (_at(p, path) for p in profiles) if isinstance(v, (int, float))]
        mid = _at(merged, path)
        if got and isinstance(mid, (int, float)):
            lines.append(f"{what} {mid:.3g} {unit} ({min(got):.3g}-{max(got):.3g})")
    spreads = []
    for op, rate in (merged.get("op_rates") or {}).items():
        got = [p["op_rates"][op]["fixed_all_us"] for p in profiles
               if op in (p.get("op_rates") or {})]
        if len(got) > 1 and rate.get("fixed_all_us", 0) > 0:
            spreads.append(((max(got) - min(got)) / rate["fixed_all_us"], op, min(got), max(got)))
    if spreads:
        wide = max(spreads)
        lines.append(f"op rates' fixed cost on all cores: median spread "
                     f"{statistics.median(s[0] for s in spreads):.0%} over "
                     f"{len(spreads)} op types (widest {wide[1]}: "
                     f"{wide[2]:.3g}-{wide[3]:.3g} us)")
    return lines


def median_profile(profiles: Sequence[dict]) -> dict:
    """One profile from several calibrations of the same machine (``parastream calibrate
    --repeat N``): every measured number the median over them (:func:`_median_of`). The
    texts (sources, and the side figures they quote) are those of the calibration whose
    per-op figure is nearest the median; a ``repeat`` source names the count and the spread
    (:func:`repeat_spread`), and the description gives the medians. One calibration can
    land in a slow spell of a shared VM (its executor figure 2.5x the others' minutes
    later); the median of three does not follow one such spell."""
    if not profiles:
        raise ValueError("median_profile needs at least one profile")
    if len(profiles) == 1:
        return profiles[0]
    n = len(profiles)
    merged = _median_of(list(profiles))
    if not merged.get("cold_after_us"):  # most found idling costs nothing: no curve either
        merged["cold_curve"] = []
    mid = merged.get("launch_overhead_us", 0.0)
    donor = min(range(n), key=lambda i: abs(profiles[i].get("launch_overhead_us", 0.0) - mid))
    merged["sources"] = dict(profiles[donor]["sources"])
    spread = repeat_spread(profiles, merged)
    by = merged["sources"]["peak_tflops"].split(":")[0]
    merged["sources"]["repeat"] = (
        f"{by}: {n} calibrations one after another, each measured number the median over "
        f"them (the other sources' texts, and the side figures they quote, are calibration "
        f"{donor + 1}'s, whose per-op figure is nearest the median, the first on a tie); "
        f"spread, as median (min-max): {'; '.join(spread)}")
    executor = (f", executor {merged['launch_overhead_us']:.3g} us per op and "
                f"{merged['run_overhead_us']:.3g} us per call" if "run_overhead_us" in merged
                else f", {merged['launch_overhead_us']:.3g} us per task hand-off")
    merged["description"] = (
        f"This machine's CPU, the median of {n} calibrations by 'parastream calibrate' ("
        f"{by.rsplit(' ', 1)[-1]}): {merged['cores']['cube']} cores, "
        f"{merged['peak_tflops']['cube']['fp32']:.3g} TFLOPS fp32 matmul, "
        f"{merged['memory_bandwidth_gbps']:.3g} GB/s copy{executor}.")
    return merged


def dumps(profile: dict) -> bytes:
    """Profile JSON, checked by the device layer's own loader first."""
    import msgspec

    return dumps_profile(loads_profile(msgspec.json.encode(profile), profile["name"]))
