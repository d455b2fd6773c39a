"""The decode modes' names and the shapes of the built-in decoder (no torch): its sizes,
the KV-cache block and how many blocks a request's positions take. The scheduler, the
prediction and the KV budget read these without building a model."""

from __future__ import annotations

import math
from dataclasses import dataclass

#: the four decode modes, in their canonical order
MODES = ("sequential", "streams", "batch", "batch+overlap")
#: the modes whose prefills may be chunked
CHUNKED = ("batch", "batch+overlap")
#: tokens per KV-cache block: the unit of the scheduler's KV budget and of cache growth
BLOCK_TOKENS = 16


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a decoder: vocabulary, width, layers, query and key/value heads,
    feed-forward width and the context (the most positions one request may hold)."""

    name: str
    vocab: int
    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    context: int
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def kv_bytes_per_token(self, dtype_bytes: int = 4) -> int:
        """Bytes of keys and values one position holds over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


#: the built-in sizes; ``7b`` is built on the meta device (shapes for prediction only)
SIZES: dict[str, ModelConfig] = {
    "tiny": ModelConfig("tiny", vocab=512, dim=64, layers=2, heads=4, kv_heads=2, ffn=172,
                        context=256),
    "small": ModelConfig("small", vocab=2048, dim=256, layers=4, heads=8, kv_heads=2,
                         ffn=688, context=512),
    "7b": ModelConfig("7b", vocab=32000, dim=4096, layers=32, heads=32, kv_heads=8,
                      ffn=11008, context=4096),
}
DEFAULT_SIZE = "small"
#: sizes whose weights are real tensors (the others are shapes on the meta device)
RUNNABLE = ("tiny", "small")


def blocks_for(positions: int) -> int:
    """KV blocks ``positions`` positions take."""
    return math.ceil(positions / BLOCK_TOKENS)
