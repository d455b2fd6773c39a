"""``parastream calibrate``: measure the local CPU and write a ``parastream.device/1`` profile.

What is measured, and how (each number's method is written into the profile's ``sources``):

* matrix ("cube") throughput: square ``torch.mm`` (numpy ``@`` without torch), best time of
  repeated runs, ``2 n^3 / t``; bf16 too
  (kept even where the CPU emulates bf16 slowly: that is the rate a bf16 graph gets);
* vector throughput: ``addcmul`` (2 FLOPs per element) on cache-resident arrays;
* memory bandwidth: copying a large array (bytes read + bytes written over the time);
* per-task overhead (``launch_overhead_us``): handing a no-op task to a persistent worker
  thread through a queue and waiting for its completion, the median round trip (without
  torch; with it, :mod:`parastream.cpu.overhead` replaces it by the executor's own
  cost per op, measured through the executor);
* scheduler sweep: one pass over ``hw_queues`` queues checking each for work;
* plain Python call overhead, recorded in the sources for reference;
* cores: the CPUs this process may run on.

Each quantity is measured in several interleaved rounds and its best round kept (other
processes on a small machine spoil single measurements), except the op rates, which keep
the median of their rounds (see :func:`measure_op_rates`). ``quick`` mode runs fewer and
shorter rounds.
"""

from __future__ import annotations

import datetime as _dt
import queue
import statistics
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..device.profile import SCHEMA
from .busy import cpu_count
from .op_rates import (COLD_TARGETS, IDLE_MS, SHORT_IDLE_MS, _third_cases, measure_cold,
                       measure_op_rates, rotation_passes)
from ..calibrate.profile import sig
from .timing import _best_time, _median_time, _nbytes, _on_executor_thread


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
#: (about 1.0 where it runs on the calling thread)
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
            "slope (parastream.cpu.op_rates.cold_line)"),
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
            "non-decreasing (parastream.cpu.op_rates.measure_cold)"),
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
