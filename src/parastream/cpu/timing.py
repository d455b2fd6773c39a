"""Timing primitives the CPU calibration shares: repeated runs of a call (best or
median), and running a call where the cpu backend's executor runs an op."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any, Callable

from .busy import cpu_count


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


def _nbytes(*ts: Any) -> int:
    return sum(t.numel() * t.element_size() for t in ts)
