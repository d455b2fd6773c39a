"""The host a calibration runs on: the cores this process may use, and whether other
work is taking them (before a calibration, and while it runs)."""

from __future__ import annotations

import os
import statistics
import threading
import time

from ..runtime.host import cpu_count

__all__ = ["BusyWatch", "busy_note", "cpu_count"]


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
    descheduled runs (a fixed cost many times the quiet one). None when quiet, or where there is no ``/proc/loadavg``.
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
    as much (a matmul rate on all cores no better than on one, and predictions off
    accordingly)."""

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
