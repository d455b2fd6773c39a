"""Requests and a fault-injecting decoder for the decode tests."""

from __future__ import annotations

from typing import Any

from parastream.decode.workload import Request


def requests(n: int, prompt: int = 12, output: int = 6, vocab: int = 512) -> list[Request]:
    """``n`` requests arriving at once, prompts of ``prompt + i % 5`` tokens and outputs
    of ``output + i % 3`` tokens."""
    return [Request(i, 0.0, tuple((7 * i + 3 * k + 1) % vocab for k in range(prompt + i % 5)),
                    output + i % 3) for i in range(n)]


class Faulty:
    """A decoder that raises whenever request ``rid`` computes position ``at`` or later
    (prefill or decode); everything else is the wrapped decoder's."""

    def __init__(self, model: Any, rid: int, at: int) -> None:
        self.model, self.rid, self.at = model, rid, at
        self.config = model.config

    def new_pool(self, blocks: int) -> Any:
        return self.model.new_pool(blocks)

    def new_cache(self, rid: int, pool: Any) -> Any:
        return self.model.new_cache(rid, pool)

    def prefill(self, tokens: list[int], cache: Any) -> Any:
        if cache.rid == self.rid and len(tokens) > self.at:
            raise RuntimeError("injected fault")
        return self.model.prefill(tokens, cache)

    def decode(self, tokens: list[int], caches: list) -> Any:
        if any(c.rid == self.rid and c.length >= self.at for c in caches):
            raise RuntimeError("injected fault\nsecond line")
        return self.model.decode(tokens, caches)
