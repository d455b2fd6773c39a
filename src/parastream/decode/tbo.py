"""Two-micro-batch overlap (TBO) of one decode step: the step's rows split in two halves,
each a micro-batch run phase by phase (:meth:`Decoder.decode_phases`: a layer's attention,
then its MLP), the second micro-batch one phase behind the first on a helper worker, so
that one micro-batch's attention runs while the other's MLP does (on the cpu backend
torch releases the interpreter inside its kernels, so the two threads' kernels overlap;
on cuda each worker issues on its own stream, ordered by events where the halves meet).

The helper records a span per phase of the second micro-batch on its own lane (``device
micro-batch``: ``mb2 attention``, ``mb2 mlp``), beside the whole step's span on the
device lane, so the timeline shows the two halves overlapping.

Tokens are those of the unsplit step up to batched rounding: each micro-batch is the same
computation over fewer rows. The caches' lengths are advanced only after both halves are
done, so a step that raises leaves every cache as it was (and can be retried row by row).
"""

from __future__ import annotations

from typing import Any, Generator

from ..errors import InputError

#: the fewest rows a split step has (one per micro-batch)
MIN_ROWS = 2


def check_tbo(tbo: object) -> None:
    """InputError unless ``tbo`` is "off", "auto" or a row count of at least
    :data:`MIN_ROWS`."""
    if tbo not in ("off", "auto") and not (isinstance(tbo, int) and tbo >= MIN_ROWS):
        raise InputError(None, f"--tbo must be off, auto or a number of rows from "
                               f"{MIN_ROWS}, got {tbo!r}")


def can_split(model: Any) -> bool:
    """Whether ``model`` runs a step in phases (:meth:`Decoder.decode_phases`)."""
    return callable(getattr(model, "decode_phases", None))


def split_decode(model: Any, tokens: list[int], caches: list[Any], helper: Any) -> Any:
    """Logits ``(B, vocab)`` of one decode step in two micro-batches: the first on the
    calling thread, the second on ``helper`` (a
    :class:`~parastream.decode.device.Worker`) one phase behind; each cache's length then
    advanced by one."""
    import torch

    where = helper.placement
    half = len(tokens) // 2
    first = model.decode_phases(tokens[:half], caches[:half])
    second = model.decode_phases(tokens[half:], caches[half:])
    ready = where.signal()  # the helper's stream waits for what ours made before
    out = [None, None]
    done = [False, False]
    started = False
    while not all(done):
        lag = helper.submit(_phase, second, ready) if started and not done[1] else None
        try:
            if not done[0]:
                done[0], out[0] = _advance(first)
        finally:
            if lag is not None:
                done[1], out[1], ready = lag.result()
        started = True
    where.follow(ready)  # our stream waits for the helper's last phase
    where.keep(out[1])
    for c in caches:
        c.length += 1
    return torch.cat(out)


def _phase(worker: Any, phases: Generator, ready: Any) -> tuple[bool, Any, Any]:
    """One phase of the helper's micro-batch, after ``ready`` (a span on the helper's
    lane); with the event that marks its end on the helper's stream."""
    where = worker.placement
    where.follow(ready)
    start = where.mark()
    done, out = _advance(phases)
    if not done:
        worker.record(worker.name, f"mb2 {out}", start, where.mark())
    return done, out, where.signal()


def _advance(phases: Generator) -> tuple[bool, Any]:
    """Run one phase: ``(False, its name)``, or ``(True, logits)`` once the forward is
    done."""
    try:
        name = next(phases)
    except StopIteration as stop:
        return True, stop.value
    return False, name


__all__ = ["MIN_ROWS", "can_split", "split_decode"]
