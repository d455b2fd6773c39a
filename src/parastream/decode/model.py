"""The built-in decoder language model: Llama-style, with a per-request KV cache.

RMSNorm, rotary position embeddings (RoPE), grouped-query attention (GQA: fewer key/value
heads than query heads) and a SwiGLU feed-forward block; weights are random but
deterministic (a seeded generator), so every run of a size computes the same tokens.

The decoder protocol the decode modes drive (a ``file.py:factory`` decoder would follow it):

- ``new_pool(blocks)`` -> the :class:`KVPool` of a run (its KV memory, in blocks);
- ``new_cache(rid, pool)`` -> an empty :class:`KVCache` of request ``rid``: a block table
  the scheduler's allocator fills;
- ``prefill(tokens, cache)`` -> logits ``(vocab,)`` of the last position; the cache then holds
  ``len(tokens)`` positions;
- ``decode(tokens, caches)`` -> logits ``(B, vocab)``: one token per request, request ``i``'s
  token at position ``caches[i].length``; each cache then holds one position more.

Two optional methods the built-in decoder adds (a decoder without them still runs: its
prompts are prefilled whole, and two-micro-batch overlap stays off):

- ``extend(tokens, cache, start)`` -> logits ``(vocab,)`` of the last position: positions
  ``start .. start+len(tokens)-1`` computed over the cache's first ``start`` positions
  (a chunk of a prefill); the cache then holds ``start + len(tokens)`` positions;
- ``decode_phases(tokens, caches)``: :meth:`decode` as a generator that yields after each
  layer's attention and after each layer's MLP and returns the logits, leaving the
  caches' lengths to the caller (two micro-batches interleave their phases).

A call that raises leaves every cache's ``length`` as it was (positions are written in place
and the length is advanced only after the whole forward), so a step can be retried.
Positions past a cache's block table raise IndexError before anything is written.

``Decoder.to("cuda")`` places the weights there; its pools, caches and every tensor a
call makes are then on that device.
"""

from __future__ import annotations

import copy
import math
from typing import Generator

import torch
import torch.nn.functional as F

from .config import BLOCK_TOKENS, DEFAULT_SIZE, RUNNABLE, SIZES, ModelConfig, blocks_for

class KVPool:
    """The KV memory of one run: per layer, keys and values of ``blocks`` blocks of
    :data:`BLOCK_TOKENS` positions, ``(blocks, kv_heads, BLOCK_TOKENS, head_dim)``. Requests
    hold blocks by id (a block table); the memory never grows past the pool."""

    __slots__ = ("blocks", "device", "keys", "values")

    def __init__(self, config: ModelConfig, blocks: int, device: str = "cpu") -> None:
        shape = (max(1, blocks), config.kv_heads, BLOCK_TOKENS, config.head_dim)
        self.blocks = blocks
        self.device = device
        self.keys = [torch.zeros(shape, device=device) for _ in range(config.layers)]
        self.values = [torch.zeros(shape, device=device) for _ in range(config.layers)]


class KVCache:
    """One request's view of the pool: its block table (``table``, block ids in position
    order, set by the scheduler's allocator) and ``length`` valid positions."""

    __slots__ = ("rid", "pool", "table", "length")

    def __init__(self, rid: int, pool: KVPool) -> None:
        self.rid = rid
        self.pool = pool
        self.table: list[int] = []
        self.length = 0

    def slots(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Block ids and offsets of positions ``start..stop-1``; IndexError when the table
        does not cover them."""
        need = blocks_for(stop)
        if need > len(self.table):
            raise IndexError(f"request {self.rid}: {stop} positions need {need} KV blocks, "
                             f"it holds {len(self.table)}")
        dev = self.pool.device
        pos = torch.arange(start, stop, device=dev)
        table = torch.tensor(self.table, dtype=torch.long, device=dev)
        return table[pos // BLOCK_TOKENS], pos % BLOCK_TOKENS


class Decoder:
    """A Llama-style decoder with deterministic random weights (see the module docstring
    for the protocol). ``device="meta"`` builds shapes only."""

    def __init__(self, config: ModelConfig, seed: int = 0, device: str = "cpu") -> None:
        self.config = config
        self.device = device
        gen = torch.Generator().manual_seed(seed)
        self.weights = _weights(config, gen, device)
        self._inv_freq = 1.0 / (config.rope_theta ** (
            torch.arange(0, config.head_dim, 2, dtype=torch.float32) / config.head_dim))

    def new_pool(self, blocks: int) -> KVPool:
        """The KV memory of a run: ``blocks`` blocks."""
        return KVPool(self.config, blocks, self.device)

    def new_cache(self, rid: int, pool: KVPool) -> KVCache:
        """An empty cache of request ``rid`` in ``pool``."""
        return KVCache(rid, pool)

    def to(self, device: str) -> "Decoder":
        """This decoder with its weights on ``device`` (``"cuda"``); itself when there."""
        if device == self.device:
            return self
        moved = copy.copy(self)
        moved.device = device
        moved.weights = {k: w.to(device) for k, w in self.weights.items()}
        moved._inv_freq = self._inv_freq.to(device)
        return moved

    def _ids(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)

    @torch.inference_mode()
    def prefill(self, tokens: list[int], cache: KVCache) -> torch.Tensor:
        """Logits ``(vocab,)`` after ``tokens``; ``cache`` is filled from position 0."""
        n = len(tokens)
        where = cache.slots(0, n)
        x = self.weights["embed"][self._ids(tokens)]
        pos = torch.arange(n, device=self.device)
        for layer in range(self.config.layers):
            q, k, v = self._qkv(layer, x, pos)
            _store(cache.pool, layer, where, k, v)
            att = _attend(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1))
            x = self._finish_layer(layer, x, att.transpose(0, 1).reshape(n, -1))
        cache.length = n
        return self._head(x[-1:])[0]

    @torch.inference_mode()
    def extend(self, tokens: list[int], cache: KVCache, start: int) -> torch.Tensor:
        """Logits ``(vocab,)`` after a chunk: ``tokens`` at positions ``start ..``, each
        attending to the cache's earlier positions and to the chunk's own up to itself;
        ``cache`` then holds ``start + len(tokens)`` positions."""
        n, stop = len(tokens), start + len(tokens)
        where = cache.slots(start, stop)
        width = blocks_for(stop)
        table = self._ids(cache.table[:width])[None, :]
        pos = torch.arange(start, stop, device=self.device)
        keys = torch.arange(width * BLOCK_TOKENS, device=self.device)
        mask = torch.zeros(n, width * BLOCK_TOKENS, device=self.device).masked_fill_(
            keys[None, :] > pos[:, None], float("-inf"))
        x = self.weights["embed"][self._ids(tokens)]
        for layer in range(self.config.layers):
            q, k, v = self._qkv(layer, x, pos)
            _store(cache.pool, layer, where, k, v)
            att = self._paged_attention(cache.pool, layer, q[None], table, mask[None, None])
            x = self._finish_layer(layer, x, att[0])
        cache.length = stop
        return self._head(x[-1:])[0]

    def decode(self, tokens: list[int], caches: list[KVCache]) -> torch.Tensor:
        """Logits ``(B, vocab)``: one step of ``B`` requests, batched in every matrix
        product and in attention (block tables gathered, padding masked)."""
        phases = self.decode_phases(tokens, caches)
        while True:
            try:
                next(phases)
            except StopIteration as done:
                logits = done.value
                break
        for c in caches:
            c.length += 1
        return logits

    @torch.inference_mode()
    def decode_phases(self, tokens: list[int],
                      caches: list[KVCache]) -> Generator[str, None, torch.Tensor]:
        """:meth:`decode` in phases: yields ``"attention"`` after a layer's attention and
        ``"mlp"`` after its feed-forward block, returns the logits ``(B, vocab)``; the
        caches' lengths are not advanced (the caller does it once every row is done)."""
        pool = caches[0].pool
        lengths = [c.length for c in caches]
        where = [c.slots(p, p + 1) for c, p in zip(caches, lengths)]
        where = (torch.cat([w[0] for w in where]), torch.cat([w[1] for w in where]))
        width = max(blocks_for(p + 1) for p in lengths)
        table = self._ids([c.table[:width] + [0] * (width - len(c.table[:width]))
                           for c in caches])
        pos = self._ids(lengths)
        valid = torch.arange(width * BLOCK_TOKENS, device=self.device)[None, :] <= pos[:, None]
        mask = torch.zeros(valid.shape, device=self.device).masked_fill_(
            ~valid, float("-inf"))[:, None, None, None, :]
        x = self.weights["embed"][self._ids(tokens)]
        for layer in range(self.config.layers):
            q, k, v = self._qkv(layer, x, pos)
            _store(pool, layer, where, k, v)
            att = self._paged_attention(pool, layer, q[:, None], table, mask)
            x = x + att[:, 0] @ self.weights[f"l{layer}.wo"]
            yield "attention"
            x = self._mlp(layer, x)
            yield "mlp"
        return self._head(x)

    # ------------------------------------------------------------------ layers
    def _qkv(self, layer: int, x: torch.Tensor, pos: torch.Tensor):
        cfg, w = self.config, self.weights
        h = _rms(x, w[f"l{layer}.attn_norm"])
        q = (h @ w[f"l{layer}.wq"]).view(-1, cfg.heads, cfg.head_dim)
        k = (h @ w[f"l{layer}.wk"]).view(-1, cfg.kv_heads, cfg.head_dim)
        v = (h @ w[f"l{layer}.wv"]).view(-1, cfg.kv_heads, cfg.head_dim)
        cos, sin = self._rope(pos)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def _paged_attention(self, pool: KVPool, layer: int, q: torch.Tensor,
                         table: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``n`` queries per row over the row's own blocks: ``q (B, n, heads, d)`` ->
        ``(B, n, dim)``; ``mask`` adds to the scores ``(B, kv_heads, heads/kv, n, L)``."""
        cfg = self.config
        b, width = table.shape
        n = q.shape[1]

        def gather(store: list[torch.Tensor]) -> torch.Tensor:
            # (B, width, kv, T, d) -> (B, kv, 1, width*T, d)
            return store[layer][table].permute(0, 2, 1, 3, 4).reshape(
                b, cfg.kv_heads, 1, width * BLOCK_TOKENS, cfg.head_dim)

        keys, values = gather(pool.keys), gather(pool.values)
        # (B, n, kv, rep, d) -> (B, kv, rep, n, d): query head h reads key/value head h // rep
        qg = q.view(b, n, cfg.kv_heads, cfg.heads // cfg.kv_heads, cfg.head_dim)
        qg = qg.permute(0, 2, 3, 1, 4)
        scores = qg @ keys.transpose(-1, -2) / math.sqrt(cfg.head_dim) + mask
        return (scores.softmax(-1) @ values).permute(0, 3, 1, 2, 4).reshape(b, n, cfg.dim)

    def _finish_layer(self, layer: int, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        return self._mlp(layer, x + att @ self.weights[f"l{layer}.wo"])

    def _mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The SwiGLU feed-forward block of ``layer``, with its residual."""
        w = self.weights
        h = _rms(x, w[f"l{layer}.ffn_norm"])
        return x + (F.silu(h @ w[f"l{layer}.w1"]) * (h @ w[f"l{layer}.w3"])) @ w[f"l{layer}.w2"]

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return _rms(x, self.weights["norm"]) @ self.weights["out"]

    def _rope(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ang = pos.to(torch.float32)[:, None] * self._inv_freq[None, :]
        return ang.cos()[:, None, :], ang.sin()[:, None, :]


def _store(pool: KVPool, layer: int, where: tuple[torch.Tensor, torch.Tensor],
           k: torch.Tensor, v: torch.Tensor) -> None:
    """Write keys and values ``(n, kv_heads, d)`` at the positions ``where`` names."""
    blocks, offsets = where
    pool.keys[layer][blocks, :, offsets] = k
    pool.values[layer][blocks, :, offsets] = v


def _weights(cfg: ModelConfig, gen: torch.Generator, device: str) -> dict[str, torch.Tensor]:
    """Every weight of ``cfg``, drawn in a fixed order from ``gen`` (normal, scaled by
    1/sqrt(fan-in)); on the meta device only the shapes."""
    shapes: dict[str, tuple[int, ...]] = {"embed": (cfg.vocab, cfg.dim)}
    kv = cfg.kv_heads * cfg.head_dim
    for i in range(cfg.layers):
        shapes |= {f"l{i}.attn_norm": (cfg.dim,), f"l{i}.wq": (cfg.dim, cfg.dim),
                   f"l{i}.wk": (cfg.dim, kv), f"l{i}.wv": (cfg.dim, kv),
                   f"l{i}.wo": (cfg.dim, cfg.dim), f"l{i}.ffn_norm": (cfg.dim,),
                   f"l{i}.w1": (cfg.dim, cfg.ffn), f"l{i}.w3": (cfg.dim, cfg.ffn),
                   f"l{i}.w2": (cfg.ffn, cfg.dim)}
    shapes |= {"norm": (cfg.dim,), "out": (cfg.dim, cfg.vocab)}
    if device == "meta":
        return {k: torch.empty(s, device="meta") for k, s in shapes.items()}
    out = {}
    for k, s in shapes.items():
        if len(s) == 1:
            out[k] = torch.ones(s)
        else:
            out[k] = torch.randn(s, generator=gen) / math.sqrt(s[0] if k != "embed" else 1)
    return out


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on ``(n, heads, head_dim)``: pairs (even, odd) rotated by the position's angle."""
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention of ``q (heads, n, d)`` over ``k, v (kv_heads, n, d)``, each
    key/value head shared by ``heads // kv_heads`` query heads (GQA)."""
    rep = q.shape[0] // k.shape[0]
    if rep > 1:
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def build_model(size: str = DEFAULT_SIZE, seed: int = 0) -> Decoder:
    """The built-in decoder of ``size`` (:data:`SIZES`); ``7b`` on the meta device."""
    cfg = SIZES[size]
    return Decoder(cfg, seed=seed, device="cpu" if size in RUNNABLE else "meta")


__all__ = ["Decoder", "KVCache", "KVPool", "build_model"]
