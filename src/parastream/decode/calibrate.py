"""Measurements a decode run takes of its own model before it starts:

- :func:`calibrate_split`: the threshold of two-micro-batch overlap (TBO). A step of ``b``
  decode rows is timed whole and split in two micro-batches
  (:func:`parastream.decode.tbo.split_decode`) at a few batch sizes, alternating the two
  forms, on the run's model and device; the threshold is the smallest batch size from
  which on the split is faster by at least ``margin`` at every measured size, or None
  ("never": TBO stays off). The run then splits only steps of at least that many rows, so
  TBO does not make ``batch+overlap`` slower than ``batch``.
- :func:`probe_interpreter`: the share of a step during which the model's kernels leave
  the Python interpreter free (the condition under which the host's work of step t+1 can
  overlap device step t on CPU threads). Timing the interpreter lock directly is not
  possible from Python, so it is measured by its effect: a host thread counts loop
  iterations, once while the stepping thread sleeps (the idle rate) and once while it runs
  decode steps back to back (the busy rate): busy rate / idle rate is the share of the
  probed step during which the counter ran (``raw_share``). While the probe runs the
  interpreter's switch interval is shortened, so that the counting thread gives the lock
  back promptly when a kernel returns; still the stepping thread waits for the lock each
  time a kernel returns while the counter holds it, so the probed step (``probed_ms``) is
  longer than the step alone (``step_ms``, timed without the counter) and the counter ran
  during that wait too. The free share counts only the time the step's own work left the
  interpreter free: ``(raw_share * probed - (probed - alone)) / alone``, within 0..1.
  On a machine with no core to spare for the counter the figures are low: the load is
  printed beside them. On cuda the steps only launch kernels; the share then says how much
  of the launch time the interpreter is free.

Both leave the model as they found it: they use their own KV pool and caches.
"""

from __future__ import annotations

import statistics
import sys
import threading
from dataclasses import asdict, dataclass
from typing import Any

from .device import Worker
from .config import blocks_for
from .streams import Placement, now_ns
from .tbo import MIN_ROWS, can_split, split_decode

#: the split must be this much faster (a share of the whole step) to count as a win
MARGIN = 0.05
#: the interpreter's switch interval while the probe runs (seconds)
PROBE_SWITCH_S = 1e-4


@dataclass(frozen=True)
class Calibration:
    """TBO's calibration: the batch sizes timed, the median step time of each whole and
    split (ms), the margin a win needs, the threshold (None: never split) and, when
    nothing was timed, why."""

    sizes: tuple[int, ...]
    whole_ms: tuple[float, ...]
    split_ms: tuple[float, ...]
    margin: float
    threshold: int | None
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class InterpreterProbe:
    """The probe's figures: the batch size stepped, the step time alone and beside the
    counting thread (ms), the counter's idle and busy rates (iterations per ms), its raw
    share of the probed step and the free share of the step's own work (0..1)."""

    batch: int
    step_ms: float
    probed_ms: float
    idle_rate: float
    busy_rate: float
    raw_share: float
    free_share: float

    def to_dict(self) -> dict:
        return asdict(self)


class _Bench:
    """``rows`` caches of ``prompt`` positions each in a pool of their own; a step over the
    first ``b`` of them is timed and undone (their lengths put back)."""

    def __init__(self, model: Any, rows: int, prompt: int, where: Placement) -> None:
        self.model, self.where = model, where
        vocab = model.config.vocab
        per = blocks_for(prompt + 1)
        pool = model.new_pool(rows * per)
        self.caches = []
        for i in range(rows):
            c = model.new_cache(i, pool)
            c.table = list(range(i * per, (i + 1) * per))
            model.prefill([(7 * i + k + 1) % vocab for k in range(prompt)], c)
            self.caches.append(c)

    def step_ms(self, b: int, helper: Worker | None) -> float:
        """One step of ``b`` rows (split on ``helper`` when given), in ms."""
        caches = self.caches[:b]
        tokens = [(3 * i + 1) % self.model.config.vocab for i in range(b)]
        self.where.synchronize()
        t0 = now_ns()
        if helper is not None:
            split_decode(self.model, tokens, caches, helper)
        else:
            self.model.decode(tokens, caches)
        self.where.synchronize()
        elapsed = (now_ns() - t0) / 1e6
        for c in caches:
            c.length -= 1
        return elapsed


def calibrate_split(model: Any, sizes: list[int], reps: int = 5, prompt: int = 32,
                    where: Placement | None = None) -> Calibration:
    """TBO's threshold on ``model`` (see the module docstring): ``sizes`` batch sizes (those
    under two rows are dropped), ``reps`` alternating timings each after one untimed
    round, caches of ``prompt`` positions."""
    sizes = sorted({b for b in sizes if b >= MIN_ROWS})
    if not can_split(model):
        return Calibration((), (), (), MARGIN, None, "the decoder has no decode_phases")
    if not sizes:
        return Calibration((), (), (), MARGIN, None, f"fewer than {MIN_ROWS} rows per step")
    where = where or Placement()
    bench = _Bench(model, max(sizes), prompt, where)
    helper = Worker("calibrate micro-batch", where)
    whole, split = [], []
    try:
        for b in sizes:
            bench.step_ms(b, None), bench.step_ms(b, helper)
            pairs = [(bench.step_ms(b, None), bench.step_ms(b, helper)) for _ in range(reps)]
            whole.append(statistics.median(p[0] for p in pairs))
            split.append(statistics.median(p[1] for p in pairs))
    finally:
        helper.close()
    return Calibration(tuple(sizes), tuple(whole), tuple(split), MARGIN,
                       smallest_win(sizes, whole, split, MARGIN))


def smallest_win(sizes: list[int], whole: list[float], split: list[float],
                 margin: float) -> int | None:
    """The smallest size from which on the split beats the whole step by ``margin`` at
    every size measured (None when it does not at the largest)."""
    best = None
    for b, w, s in reversed(list(zip(sizes, whole, split))):
        if s > w * (1 - margin):
            break
        best = b
    return best


def probe_interpreter(model: Any, batch: int, seconds: float = 0.2, rounds: int = 3,
                      where: Placement | None = None) -> InterpreterProbe:
    """The interpreter-free share of a step of ``batch`` rows (see the module docstring):
    ``rounds`` pairs of an idle and a busy window of ``seconds`` each, medians."""
    where = where or Placement()
    bench = _Bench(model, max(1, batch), 32, where)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(PROBE_SWITCH_S)
    idle, busy, probed, alone = [], [], [], []
    try:
        for _ in range(rounds):
            alone.append(statistics.median(_step_for(bench, batch, seconds / 2)))
            idle.append(_count_during(lambda: _sleep_for(seconds))[0])
            rate, times = _count_during(lambda: _step_for(bench, batch, seconds))
            busy.append(rate)
            probed.append(statistics.median(times))
    finally:
        sys.setswitchinterval(switch)
    idle_rate, busy_rate = statistics.median(idle), statistics.median(busy)
    step, probed_ms = statistics.median(alone), statistics.median(probed)
    raw = min(1.0, busy_rate / idle_rate) if idle_rate else 0.0
    free = (raw * probed_ms - max(0.0, probed_ms - step)) / step if step > 0 else 0.0
    return InterpreterProbe(batch, step, probed_ms, idle_rate, busy_rate, raw,
                            min(1.0, max(0.0, free)))


def _count_during(work: Any) -> tuple[float, int]:
    """A counting thread's iterations per ms while ``work()`` runs on this thread, and
    what ``work`` returned."""
    stop = threading.Event()
    count = [0]

    def counter() -> None:
        n = 0
        while not stop.is_set():
            n += 1
        count[0] = n

    t = threading.Thread(target=counter, name="interpreter probe", daemon=True)
    t0 = now_ns()
    t.start()
    result = work()
    stop.set()
    t.join()
    return count[0] / max((now_ns() - t0) / 1e6, 1e-9), result


def _sleep_for(seconds: float) -> None:
    threading.Event().wait(seconds)


def _step_for(bench: _Bench, batch: int, seconds: float) -> list[float]:
    """Decode steps of ``batch`` rows back to back for ``seconds`` (one at least); the
    time of each (ms)."""
    end = now_ns() + int(seconds * 1e9)
    times = [bench.step_ms(batch, None)]
    while now_ns() < end:
        times.append(bench.step_ms(batch, None))
    return times


def batch_sizes(concurrency: int) -> list[int]:
    """The sizes TBO's calibration times: powers of two from 2, and ``concurrency``."""
    sizes, b = [], MIN_ROWS
    while b < concurrency:
        sizes.append(b)
        b *= 2
    return sizes + [max(concurrency, MIN_ROWS)]


__all__ = ["Calibration", "InterpreterProbe", "MARGIN", "batch_sizes", "calibrate_split",
           "probe_interpreter", "smallest_win"]
