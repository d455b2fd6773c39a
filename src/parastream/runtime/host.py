"""The host process every backend issues from: the cores it may use, its CPU's name, the
page faults it has taken, and torch's intra-op thread team.

Torch's intra-op threads are set once, globally, from the main thread
(:func:`set_intra_op_threads`): setting them inside stream workers, or per call, costs more
than it saves. After a parallel op the team's OpenMP threads spin before they sleep
(:func:`team_spin_s`), which a measurement has to wait out before timing the other side.
Nothing here imports torch at import time.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from typing import Iterable

try:
    import resource
except ImportError:  # not on Windows
    resource = None  # type: ignore[assignment]

_threads_set: int | None = None
_threads_lock = threading.Lock()


def set_intra_op_threads(n: int) -> int:
    """Set torch's intra-op thread count once, from the calling (main) thread.

    Calling it again with the same ``n`` is a no-op; with another ``n`` it changes the
    global setting (between runs, never inside a worker). Returns ``n``.
    """
    global _threads_set
    if n < 1:
        raise ValueError("intra-op threads must be >= 1")
    with _threads_lock:
        if _threads_set != n:
            import torch

            torch.set_num_threads(n)
            _threads_set = n
    return n


#: when a thread's CPU time cannot be read (not Linux): libgomp's default spin (~300k
#: pause loops) on a small machine, with headroom
TEAM_SPIN_FALLBACK_S = 0.015
#: the longest spin :func:`team_spin_s` reports: libiomp's default spin (KMP_BLOCKTIME)
#: is 200 ms; a team told never to sleep (OMP_WAIT_POLICY=active) is cut here
TEAM_SPIN_MAX_S = 0.25
#: a pool thread counts as asleep once its CPU time has not moved for this long (the
#: kernel updates a running thread's CPU time every scheduler tick, 4 ms at 250 Hz)
_QUIET_S = 0.02
_team_spin: dict[int, float] = {}
_team_spin_lock = threading.Lock()


def _task_cpu_ns(tids: Iterable[int] | None = None) -> dict[int, int]:
    """CPU time (ns) of this process's threads ``tids`` (native ids; the ones that could
    be read), or of every thread of it that Python did not start: torch's intra-op
    (OpenMP) pool threads among them. OSError where there is no ``/proc/self/task``."""
    if tids is None:
        ours = {t.native_id for t in threading.enumerate()}
        tids = [int(t) for t in os.listdir("/proc/self/task") if int(t) not in ours]
    out = {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            continue
    return out


def _busy_threads(window_s: float = _QUIET_S) -> set[int]:
    """Threads (of :func:`_task_cpu_ns`) that ran over half of ``window_s`` while the
    caller slept: busy with work of their own, so no sign of a spinning team."""
    before = _task_cpu_ns()
    time.sleep(window_s)
    after = _task_cpu_ns()
    return {t for t in after if t in before and after[t] - before[t] > window_s * 5e8}


def team_spin_s(threads: int, trials: int = 3) -> float:
    """How long torch's intra-op thread team keeps a core busy after a parallel op on
    ``threads`` threads ends: OpenMP pool threads spin-wait for the next parallel region
    before they sleep (libgomp's default spin count). Measured once per thread count: the
    CPU time the busiest pool thread burns after a parallel matmul and element-wise op
    while the caller sleeps, threads already busy before the op left out, the median of
    ``trials``, at most :data:`TEAM_SPIN_MAX_S`; :data:`TEAM_SPIN_FALLBACK_S` where thread
    CPU times cannot be read. 0 for one thread (no team)."""
    if threads < 2:
        return 0.0
    with _team_spin_lock:
        if threads not in _team_spin:
            _team_spin[threads] = min(TEAM_SPIN_MAX_S, _measure_team_spin(threads, trials))
        return _team_spin[threads]


def _measure_team_spin(threads: int, trials: int) -> float:
    import statistics

    import torch

    spins = []
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        a, e = torch.randn(256, 256), torch.ones(1 << 20)
        for _ in range(trials):
            busy = _busy_threads()
            for _ in range(5):
                a @ a       # the BLAS team
                e.sqrt_()   # torch's own parallel_for team (the same pool with libgomp)
            base = _task_cpu_ns()
            if not base:  # per-thread CPU times are not readable here
                raise OSError("no thread CPU times")
            last, seen, t0 = base, time.perf_counter(), time.perf_counter()
            while (time.perf_counter() - seen < _QUIET_S
                   and time.perf_counter() - t0 < TEAM_SPIN_MAX_S + _QUIET_S):
                time.sleep(0.002)
                now = _task_cpu_ns()
                if now != last:
                    last, seen = now, time.perf_counter()
            spins.append(max((last[t] - base[t] for t in base if t in last and t not in busy),
                             default=0) / 1e9)
    except OSError:  # no /proc/self/task here
        return TEAM_SPIN_FALLBACK_S
    finally:
        torch.set_num_threads(before)
    return statistics.median(spins)


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, not the whole machine)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def cpu_name() -> str:
    """How a timeline captured on the cpu backend names its device: the CPU's model (from
    /proc/cpuinfo where there is one) and the cores this process may use."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"CPU{f' {model}' if model else ''}, {cpu_count()} cores (parastream cpu backend)"


def page_faults() -> int | None:
    """Minor page faults this process has taken so far (all its threads); None where the
    OS does not count them for us."""
    if resource is None:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
