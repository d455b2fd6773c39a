"""A stand-in decoder for the scheduler-overhead benchmark of ``parastream decode``.

It follows the decoder protocol of :mod:`parastream.decode.model` (``config`` with
``vocab`` and ``context``, ``new_pool``, ``new_cache``, ``prefill``, ``decode``), and each
call takes :data:`STEP_S` of wall time without holding the interpreter (``time.sleep``),
whatever the batch: a device whose step time is fixed, so whatever else a decode step costs
is the host's (scheduling, hand-offs, sampling, bookkeeping). Its logits are deterministic:
the next token of a request is a function of its last token and its position, and the two
top logits are 0.5 apart (never a tie).

    parastream decode --model benchmarks/decode_standin.py:standin --modes batch
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

#: wall time of one call (prefill or batched decode step), in seconds
STEP_S = 0.010
#: positions per KV block (the scheduler's unit, as the built-in decoder's)
BLOCK_TOKENS = 16


@dataclass(frozen=True)
class StandinConfig:
    """The stand-in's shape: only what the protocol asks for, and its step time."""

    name: str = "standin-10ms"
    vocab: int = 512
    context: int = 4096
    step_s: float = STEP_S


class StandinPool:
    """The KV memory of a run: a block count (the stand-in stores nothing)."""

    def __init__(self, blocks: int) -> None:
        self.blocks = blocks


class StandinCache:
    """One request's cache: its block table (set by the decode modes) and ``length``."""

    def __init__(self, rid: int, pool: StandinPool) -> None:
        self.rid = rid
        self.pool = pool
        self.table: list[int] = []
        self.length = 0

    def check_room(self, positions: int) -> None:
        """IndexError when the block table does not cover ``positions`` positions."""
        need = math.ceil(positions / BLOCK_TOKENS)
        if need > len(self.table):
            raise IndexError(f"request {self.rid}: {positions} positions need {need} KV "
                             f"blocks, it holds {len(self.table)}")


class Standin:
    """The stand-in decoder: every call sleeps for ``config.step_s`` (from its start, so
    the call's own Python is inside the step), then returns logits whose top token is
    ``(31 * token + 7 * position + 3) % vocab``."""

    def __init__(self, config: StandinConfig | None = None) -> None:
        self.config = config or StandinConfig()

    def new_pool(self, blocks: int) -> StandinPool:
        return StandinPool(blocks)

    def new_cache(self, rid: int, pool: StandinPool) -> StandinCache:
        return StandinCache(rid, pool)

    def prefill(self, tokens: list[int], cache: StandinCache) -> torch.Tensor:
        """Logits ``(vocab,)`` after ``tokens``; the cache then holds ``len(tokens)``."""
        start = time.perf_counter()
        cache.check_room(len(tokens))
        logits = self._logits([tokens[-1]], [len(tokens) - 1])[0]
        self._sleep_rest(start)
        cache.length = len(tokens)
        return logits

    def decode(self, tokens: list[int], caches: list[StandinCache]) -> torch.Tensor:
        """Logits ``(B, vocab)``: one token per request; each cache one position more
        (only after the whole step: a call that raises leaves the lengths as they were)."""
        start = time.perf_counter()
        for c in caches:
            c.check_room(c.length + 1)
        logits = self._logits(tokens, [c.length for c in caches])
        self._sleep_rest(start)
        for c in caches:
            c.length += 1
        return logits

    def _logits(self, tokens: list[int], positions: list[int]) -> torch.Tensor:
        vocab = self.config.vocab
        top = torch.tensor([(31 * t + 7 * p + 3) % vocab for t, p in zip(tokens, positions)])
        logits = torch.zeros(len(tokens), vocab)
        rows = torch.arange(len(tokens))
        logits[rows, top] = 1.0
        logits[rows, (top + 1) % vocab] = 0.5
        return logits

    def _sleep_rest(self, start: float) -> None:
        rest = self.config.step_s - (time.perf_counter() - start)
        if rest > 0:
            time.sleep(rest)


def standin() -> Standin:
    """The factory ``parastream decode --model benchmarks/decode_standin.py:standin`` calls."""
    return Standin()
