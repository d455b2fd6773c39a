"""Where decode steps run: persistent FIFO worker threads, one per stream, and the step
itself (prefills and one batched decode call, with faults isolated to their request).

The runtime's op-level executor is not used: a request's step here is a whole model call,
not a graph op, and the modes need only ordered queues of such calls. Each worker is a
thread that runs what it is handed in order (a stream); torch releases the interpreter
lock inside its kernels, so steps on different workers run at the same time. Every span a
worker records is written by that worker's thread only.

On cuda (a :class:`~parastream.decode.streams.Placement` with streams) each worker owns a
device stream and runs every call with it current; its spans are timing events on that
stream, turned into the run's clock after the run (:meth:`Worker.timed_spans`).

Ownership: a :class:`Live` request's ``history``, ``cache`` and ``dead`` flag are touched
only by the worker that runs its steps (the host reads them only after the run); the host
hands each step a snapshot of the block tables the scheduler granted.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..errors import one_line
from .streams import Placement
from .tbo import MIN_ROWS, split_decode
from .workload import Request

now_ns = time.perf_counter_ns


@dataclass(eq=False)
class Live:
    """One request in a run: its request, the worker-side state (token history fed to
    the model, KV cache, ``dead`` once a step failed it) and the host-side record
    (tokens, top-2 logit gaps, token times, outcome)."""

    request: Request
    cache: Any
    lane: str = "device"
    history: list[int] = field(default_factory=list)
    dead: bool = False
    tokens: list[int] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    times_ns: list[int] = field(default_factory=list)
    outcome: str = ""
    reason: str = ""


@dataclass(frozen=True)
class Row:
    """One request's part of a step: prefill (over its history) or decode one token, with
    the block table the scheduler granted for it. A prefill row with a ``chunk``
    ``(start, stop)`` computes only those positions of its history; its last chunk
    (``stop`` at the history's end) gives the request's first token."""

    live: Live
    prefill: bool
    table: tuple[int, ...]
    chunk: tuple[int, int] | None = None


@dataclass
class Outcome:
    """A step's results: per live request, ``(token, gap, time_ns)`` or an error line."""

    tokens: list[tuple[Live, int, float, int]] = field(default_factory=list)
    errors: list[tuple[Live, str]] = field(default_factory=list)

    def extend(self, other: "Outcome") -> None:
        self.tokens += other.tokens
        self.errors += other.errors


class Worker:
    """A persistent FIFO worker thread (a stream): :meth:`submit` hands it a call, which
    it runs after every call handed before (on ``placement``'s device, with its own
    stream current there); spans it records stay in :attr:`spans` (as marks of the
    placement's clock: :meth:`timed_spans` gives them in ns)."""

    def __init__(self, name: str, placement: Placement | None = None) -> None:
        self.name = name
        self.placement = placement or Placement()
        self.stream = self.placement.new_stream()
        self.spans: list[tuple[str, str, Any, Any]] = []
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(self, *args)`` on this worker after what it holds; its Future."""
        fut: Future = Future()
        self._q.put((fut, fn, args))
        return fut

    def record(self, lane: str, name: str, start: Any, end: Any) -> None:
        """A span on ``lane`` between two marks (called on this worker's thread only)."""
        self.spans.append((lane, name, start, end))

    def timed_spans(self) -> list[tuple[str, str, int, int]]:
        """The spans in the run's clock (ns); on cuda once the device is synchronized."""
        to_ns = self.placement.to_ns
        return [(lane, name, to_ns(s), to_ns(e)) for lane, name, s, e in self.spans]

    def close(self) -> None:
        """Finish what it holds and end the thread."""
        self._q.put(None)
        self._thread.join()

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                with self.placement.enter(self.stream):
                    fut.set_result(fn(self, *args))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiter
                fut.set_exception(exc)


@dataclass(frozen=True)
class Split:
    """Two-micro-batch overlap of a step's decode rows: at ``at`` rows or more, the second
    half on ``helper`` (:func:`parastream.decode.tbo.split_decode`)."""

    at: int
    helper: Worker

    def applies(self, rows: int) -> bool:
        return rows >= max(self.at, MIN_ROWS)


def run_step(worker: Worker, model: Any, rows: list[Row], lane: str | None = None,
             split: Split | None = None) -> Outcome:
    """One step on ``worker``: each prefill row (or chunk) on its own, then the decode rows
    in one batched call (two micro-batches when ``split`` applies). A call that raises is
    retried row by row, so a fault ends only the request it belongs to (marked ``dead``;
    later steps skip it). ``lane``: where the spans go (default: each request's own
    lane)."""
    out = Outcome()
    rows = [r for r in rows if not r.live.dead]
    for r in (r for r in rows if r.prefill):
        name = f"prefill r{r.live.request.rid}"
        if r.chunk is not None:
            name = f"chunk r{r.live.request.rid} {r.chunk[0]}:{r.chunk[1]}"
        out.extend(_timed(worker, lane or r.live.lane, name, lambda r=r: _prefill(model, r)))
    decode = [r for r in rows if not r.prefill]
    if decode:
        split = split if split is not None and split.applies(len(decode)) else None
        name = f"decode B={len(decode)}" + (" 2mb" if split else "")
        out.extend(_timed(worker, lane or decode[0].live.lane, name,
                          lambda: _decode(model, decode, split)))
    return out


def _timed(worker: Worker, lane: str, name: str, call: Callable[[], Outcome]) -> Outcome:
    start = worker.placement.mark()
    out = call()
    worker.record(lane, name, start, worker.placement.mark())
    return out


def _prefill(model: Any, r: Row) -> Outcome:
    """The row's prefill, whole or one chunk (a chunk from position 0 to the end of the
    history is the whole prefill); a token when it reaches the end of the history."""
    live = r.live
    live.cache.table = list(r.table)
    start, stop = r.chunk or (0, len(live.history))
    try:
        if start == 0 and stop == len(live.history):
            logits = model.prefill(live.history, live.cache)
        else:
            logits = model.extend(live.history[start:stop], live.cache, start)
    except Exception as exc:  # noqa: BLE001 - isolated to this request
        return _failed(r, exc)
    if stop < len(live.history):
        return Outcome()
    return _sampled([r], logits[None, :])


def _decode(model: Any, rows: list[Row], split: Split | None = None) -> Outcome:
    for r in rows:
        r.live.cache.table = list(r.table)
    tokens, caches = [r.live.history[-1] for r in rows], [r.live.cache for r in rows]
    try:
        if split is not None:
            logits = split_decode(model, tokens, caches, split.helper)
        else:
            logits = model.decode(tokens, caches)
    except Exception as exc:  # noqa: BLE001 - isolated below
        if len(rows) == 1:
            return _failed(rows[0], exc)
        out = Outcome()
        for r in rows:  # which request's fault: each on its own
            out.extend(_decode(model, [r]))
        return out
    return _sampled(rows, logits)


def _sampled(rows: list[Row], logits: torch.Tensor) -> Outcome:
    """Greedy tokens of ``logits (B, vocab)`` and the gap of the two top logits."""
    top = torch.topk(logits, 2, dim=-1)
    t = now_ns()
    out = Outcome()
    for r, ids, vals in zip(rows, top.indices.tolist(), top.values.tolist()):
        r.live.history.append(ids[0])
        out.tokens.append((r.live, ids[0], vals[0] - vals[1], t))
    return out


def _failed(r: Row, exc: BaseException) -> Outcome:
    r.live.dead = True
    out = Outcome()
    out.errors.append((r.live, f"the model raised: {one_line(exc)}"))
    return out


__all__ = ["Live", "Outcome", "Row", "Split", "Worker", "run_step"]
