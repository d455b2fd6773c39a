"""Built-in models: real ``torch.nn.Module`` s with the parallel structures multi-stream
inference exploits (independent branches, side paths, copies beside compute, collectives).

Each model has a factory ``factory(scale="small", phase=None) -> (module, example_inputs)``
and an entry in :data:`ZOO`. Scales:

* ``tiny``  - a few thousand parameters on the CPU, fp32: runs eagerly in milliseconds;
* ``small`` - a few million parameters on the CPU, fp32;
* ``7b``    - 7B-like shapes (hidden 4096, 32 heads, intermediate 11008, prefill batch 8 x
  seq 1024, decode batch 1 x seq 1 against a 1024-token cache) in bf16 on the ``meta``
  device: nothing real is allocated, the importer only needs shapes.

This module imports torch when it is imported; ``parastream`` itself never imports it.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

#: this file imports nothing from parastream, so a copy of it loads on its own (as a user's
#: model file does); ``graph.models.SCALES`` names the same scales (a test holds them equal)
SCALES = ("tiny", "small", "7b")
PHASES = ("prefill", "decode")


# ----------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class Shapes:
    """Transformer shapes of one scale."""

    hidden: int
    heads: int
    intermediate: int
    batch: int            # prefill batch
    seq: int              # prefill tokens per sequence
    decode_batch: int
    cache_len: int        # tokens already in the KV cache at decode
    dtype: torch.dtype
    device: str


_SHAPES = {
    "tiny": Shapes(64, 4, 172, 1, 16, 1, 32, torch.float32, "cpu"),
    "small": Shapes(512, 8, 1376, 2, 128, 2, 256, torch.float32, "cpu"),
    "7b": Shapes(4096, 32, 11008, 8, 1024, 1, 1024, torch.bfloat16, "meta"),
}


#: batch / sequence overrides in force (see :func:`overrides`), for sweeps over shapes
_OVERRIDE: dict = {}


def shapes(scale: str) -> Shapes:
    """The :class:`Shapes` of a scale (with any overrides); ValueError for an unknown one."""
    try:
        base = _SHAPES[scale]
    except KeyError:
        raise ValueError(f"unknown scale {scale!r} (expected one of {', '.join(SCALES)})") from None
    return replace(base, **_OVERRIDE) if _OVERRIDE else base


@contextmanager
def overrides(phase: str, batch: int | None = None, seq: int | None = None):
    """Build models with another batch size / sequence length: at prefill ``seq`` is the
    prompt length, at decode the number of tokens already in the KV cache."""
    changes = {}
    if batch is not None:
        changes["batch" if phase == "prefill" else "decode_batch"] = int(batch)
    if seq is not None:
        changes["seq" if phase == "prefill" else "cache_len"] = int(seq)
    old = dict(_OVERRIDE)
    _OVERRIDE.update(changes)
    try:
        yield
    finally:
        _OVERRIDE.clear()
        _OVERRIDE.update(old)


def _tokens(s: Shapes, phase: str) -> tuple[int, int]:
    """(batch, tokens per sequence) of a phase."""
    return (s.batch, s.seq) if phase == "prefill" else (s.decode_batch, 1)


def _build(s: Shapes, ctor: Callable[[], nn.Module]) -> nn.Module:
    """Construct on the scale's device and dtype (``meta`` at 7b: no weights allocated)."""
    with torch.device(s.device):
        m = ctor()
    return m.to(s.dtype).eval()


def _randn(s: Shapes, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, device=s.device, dtype=s.dtype)


# ----------------------------------------------------------------------------- building blocks
class RotaryEmbedding(nn.Module):
    """RoPE tables as buffers; ``forward(x, pos)`` rotates ``x`` (B, H, T, D) at positions
    ``pos`` (T,)."""

    def __init__(self, head_dim: int, max_pos: int) -> None:
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        t = torch.arange(max_pos).float()
        freqs = torch.outer(t, inv)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cos = self.cos.index_select(0, pos).to(x.dtype)
        sin = self.sin.index_select(0, pos).to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin


class GatedMLP(nn.Module):
    """Llama/DeepSeek SwiGLU MLP: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaAttention(nn.Module):
    """Multi-head attention with RoPE. Prefill attends causally over the prompt; decode
    writes the new token's K/V into the cache buffers (``index_copy_``, a state write) and
    attends over the whole cache."""

    def __init__(self, hidden: int, heads: int, cache_batch: int, cache_len: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.rotary = RotaryEmbedding(self.head_dim, max(cache_len, 1) + 1)
        cache = (cache_batch, heads, cache_len, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(cache), persistent=False)
        self.register_buffer("v_cache", torch.zeros(cache), persistent=False)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, decode: bool) -> torch.Tensor:
        b, t, h = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        q, k = self.rotary(q, pos), self.rotary(k, pos)
        if decode:
            self.k_cache.index_copy_(2, pos, k)
            self.v_cache.index_copy_(2, pos, v)
            o = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache)
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, h))


class LlamaDecoderLayer(nn.Module):
    """``x + attn(norm(x))`` then ``h + mlp(norm(h))``: a mostly serial chain."""

    def __init__(self, s: Shapes, decode: bool) -> None:
        super().__init__()
        self.decode = decode
        self.input_layernorm = nn.RMSNorm(s.hidden, eps=1e-6)
        self.self_attn = LlamaAttention(s.hidden, s.heads, s.decode_batch, s.cache_len)
        self.post_attention_layernorm = nn.RMSNorm(s.hidden, eps=1e-6)
        self.mlp = GatedMLP(s.hidden, s.intermediate)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), pos, self.decode)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaStack(nn.Module):
    """``n`` decoder layers and a final norm (the benchmark's 32-layer model)."""

    def __init__(self, s: Shapes, decode: bool, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(LlamaDecoderLayer(s, decode) for _ in range(layers))
        self.norm = nn.RMSNorm(s.hidden, eps=1e-6)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, pos)
        return self.norm(x)


def _llama_inputs(s: Shapes, phase: str) -> tuple[torch.Tensor, torch.Tensor]:
    b, t = _tokens(s, phase)
    x = _randn(s, b, t, s.hidden)
    # decode writes the token after the cached ones; the cache buffer holds cache_len slots,
    # so the new token lands in the last slot
    pos = (torch.arange(t, device=s.device) if phase == "prefill"
           else torch.tensor([s.cache_len - 1], device=s.device))
    return x, pos


def _phase(phase: str | None, allowed: tuple[str, ...]) -> str:
    phase = phase or allowed[0]
    if phase not in allowed:
        raise ValueError(f"unknown phase {phase!r} (this model has {', '.join(allowed)})")
    return phase


def llama_layer(scale: str = "small", phase: str | None = None) -> tuple[nn.Module, tuple]:
    """One Llama-style decoder layer (prefill: causal attention over the prompt; decode: one
    token against the KV cache)."""
    s, phase = shapes(scale), _phase(phase, PHASES)
    m = _build(s, lambda: LlamaDecoderLayer(s, phase == "decode"))
    return m, _llama_inputs(s, phase)


def llama_stack(scale: str = "small", phase: str | None = None,
                layers: int | None = None) -> tuple[nn.Module, tuple]:
    """``layers`` Llama-style decoder layers (default: 2 tiny, 4 small, 32 at 7b)."""
    s, phase = shapes(scale), _phase(phase, PHASES)
    n = layers if layers is not None else {"tiny": 2, "small": 4, "7b": 32}[scale]
    m = _build(s, lambda: LlamaStack(s, phase == "decode", n))
    return m, _llama_inputs(s, phase)


# ----------------------------------------------------------------------------- MoE
@dataclass(frozen=True)
class MoEShapes:
    hidden: int
    experts: int
    top_k: int
    shared: int
    expert_inter: int


_MOE = {
    "tiny": MoEShapes(64, 8, 2, 1, 32),
    "small": MoEShapes(512, 16, 4, 2, 256),
    # DeepSeek-V2-Lite-like: 64 routed experts, top-6, 2 shared experts
    "7b": MoEShapes(2048, 64, 6, 2, 1408),
}


class RoutedExperts(nn.Module):
    """Top-k routed experts with a static-shape, balanced dispatch.

    Tokens are sorted by their chosen expert and cut into ``experts`` equal groups of
    ``capacity = ceil(tokens * top_k / experts)`` rows, so the experts run as two batched
    matmuls (a grouped GEMM) with the FLOPs real routing has when the load is balanced.
    The shapes never depend on data, which keeps the graph exportable on meta tensors; an
    unbalanced batch is computed approximately (rows land in the neighbouring group), which
    does not matter for planning.
    """

    def __init__(self, m: MoEShapes) -> None:
        super().__init__()
        self.top_k, self.experts, self.inter = m.top_k, m.experts, m.expert_inter
        self.gate = nn.Linear(m.hidden, m.experts, bias=False)       # the router
        scale = 1 / math.sqrt(m.hidden)
        self.w_gate_up = nn.Parameter(torch.randn(m.experts, m.hidden, 2 * m.expert_inter) * scale)
        self.w_down = nn.Parameter(torch.randn(m.experts, m.expert_inter, m.hidden) * scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t, d = x.shape
        probs = torch.softmax(self.gate(x).float(), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        slots = t * self.top_k
        cap = -(-slots // self.experts)
        order = torch.argsort(chosen.reshape(-1))
        # pad the sorted slots to experts * capacity rows (static shapes)
        order = order.index_select(0, torch.arange(self.experts * cap, device=x.device) % slots)
        token = order // self.top_k
        xs = x.index_select(0, token).view(self.experts, cap, d)
        gate_up = torch.bmm(xs, self.w_gate_up)
        g, u = gate_up.split(self.inter, dim=-1)
        out = torch.bmm(F.silu(g) * u, self.w_down).view(self.experts * cap, d)[:slots]
        w = weights.reshape(-1).index_select(0, order[:slots]).to(x.dtype).unsqueeze(-1)
        return x.new_zeros(t, d).index_add(0, token[:slots], out * w)


class MoE(nn.Module):
    """DeepSeek-style MoE: shared experts || routed experts, joined by one add (the merge)."""

    def __init__(self, m: MoEShapes) -> None:
        super().__init__()
        self.shared_experts = GatedMLP(m.hidden, m.shared * m.expert_inter)
        self.routed = RoutedExperts(m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared_experts(x) + self.routed(x)


class MoELayer(nn.Module):
    """``x + moe(norm(x))`` on flattened tokens."""

    def __init__(self, m: MoEShapes) -> None:
        super().__init__()
        self.post_attention_layernorm = nn.RMSNorm(m.hidden, eps=1e-6)
        self.mlp = MoE(m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.post_attention_layernorm(x).view(b * t, d)
        return x + self.mlp(h).view(b, t, d)


def moe_layer(scale: str = "small", phase: str | None = None) -> tuple[nn.Module, tuple]:
    """A DeepSeek-style MoE layer: shared experts and routed experts meet at a merge add."""
    s, phase = shapes(scale), _phase(phase, PHASES)
    m = _MOE[scale]
    mod = _build(s, lambda: MoELayer(m))
    b, t = _tokens(s, phase)
    return mod, (_randn(s, b, t, m.hidden),)


# ----------------------------------------------------------------------------- attention prolog
@dataclass(frozen=True)
class MLAShapes:
    hidden: int
    heads: int
    q_lora: int
    kv_lora: int
    nope: int
    rope: int
    v_dim: int
    index_heads: int
    index_dim: int


_MLA = {
    "tiny": MLAShapes(64, 4, 32, 16, 16, 8, 16, 2, 16),
    "small": MLAShapes(512, 8, 192, 64, 32, 16, 32, 4, 32),
    "7b": MLAShapes(4096, 32, 1536, 512, 128, 64, 128, 16, 128),
}


class QPath(nn.Module):
    """Query chain: low-rank down-projection, norm, up-projection, RoPE on the rope part."""

    def __init__(self, c: MLAShapes, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.c = c
        self.q_a_proj = nn.Linear(c.hidden, c.q_lora, bias=False)
        self.q_a_layernorm = nn.RMSNorm(c.q_lora, eps=1e-6)
        self.q_b_proj = nn.Linear(c.q_lora, c.heads * (c.nope + c.rope), bias=False)
        self.rotary = rotary

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        c = self.c
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(b, t, c.heads, c.nope + c.rope).transpose(1, 2)
        q_nope, q_pe = q.split([c.nope, c.rope], dim=-1)
        return torch.cat([q_nope, self.rotary(q_pe, pos)], dim=-1)


class KVPath(nn.Module):
    """Compressed KV chain plus the sparse-attention indexer keys; both are written to
    caches (state), and the latent is up-projected to per-head K and V."""

    def __init__(self, c: MLAShapes, rotary: RotaryEmbedding, cache_tokens: int) -> None:
        super().__init__()
        self.c = c
        self.kv_a_proj_with_mqa = nn.Linear(c.hidden, c.kv_lora + c.rope, bias=False)
        self.kv_a_layernorm = nn.RMSNorm(c.kv_lora, eps=1e-6)
        self.kv_b_proj = nn.Linear(c.kv_lora, c.heads * (c.nope + c.v_dim), bias=False)
        self.indexer_wk = nn.Linear(c.hidden, c.index_dim, bias=False)
        self.indexer_k_norm = nn.LayerNorm(c.index_dim)
        self.rotary = rotary
        self.register_buffer("latent_cache", torch.zeros(cache_tokens, c.kv_lora + c.rope),
                             persistent=False)
        self.register_buffer("index_k_cache", torch.zeros(cache_tokens, c.index_dim),
                             persistent=False)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        c = self.c
        kv = self.kv_a_proj_with_mqa(x)
        latent, k_pe = kv.split([c.kv_lora, c.rope], dim=-1)
        latent = self.kv_a_layernorm(latent)
        k_pe = self.rotary(k_pe.unsqueeze(1), pos)                      # (b, 1, t, rope)
        n = b * t
        self.latent_cache[:n].copy_(torch.cat([latent, k_pe.squeeze(1)], dim=-1).view(n, -1))
        self.index_k_cache[:n].copy_(self.indexer_k_norm(self.indexer_wk(x)).view(n, -1))
        kv = self.kv_b_proj(latent).view(b, t, c.heads, c.nope + c.v_dim).transpose(1, 2)
        k_nope, v = kv.split([c.nope, c.v_dim], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(b, c.heads, t, c.rope)], dim=-1)
        return k, v, latent


class AttentionProlog(nn.Module):
    """MLA-style attention prolog: after a shared norm, the Q path and the KV/indexer path
    are independent chains; they meet at the attention."""

    def __init__(self, c: MLAShapes, cache_tokens: int, max_pos: int) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(c.hidden, eps=1e-6)
        rotary = RotaryEmbedding(c.rope, max_pos)
        self.q_path = QPath(c, rotary)
        self.kv_path = KVPath(c, rotary, cache_tokens)
        self.o_proj = nn.Linear(c.heads * c.v_dim, c.hidden, bias=False)
        self.gate_proj = nn.Linear(c.kv_lora, c.hidden, bias=False)
        self.heads, self.v_dim = c.heads, c.v_dim

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_path(h, pos)
        k, v, z = self.kv_path(h, pos)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        out = self.o_proj(o.transpose(1, 2).reshape(b, t, self.heads * self.v_dim))
        # a graph-compiler trap: silu(z) = Swish(Cast(z)) of a side-path output, consumed on
        # the main path; a compiler may hoist this cheap precompute ahead of the main dominator
        gate = F.silu(z.float()).to(out.dtype)
        return out * self.gate_proj(gate)


def attention_prolog(scale: str = "small", phase: str | None = None) -> tuple[nn.Module, tuple]:
    """MLA-style attention prolog: independent Q and KV/indexer projection chains."""
    s, phase, c = shapes(scale), _phase(phase, PHASES), _MLA[scale]
    b, t = _tokens(s, phase)
    mod = _build(s, lambda: AttentionProlog(c, max(b * t, 1), max(t, s.cache_len) + 1))
    pos = torch.arange(t, device=s.device) + (0 if phase == "prefill" else s.cache_len - 1)
    return mod, (_randn(s, b, t, c.hidden), pos)


# ----------------------------------------------------------------------------- Inception
@dataclass(frozen=True)
class InceptionShapes:
    batch: int
    size: int
    cin: int
    b1: int
    b2: tuple[int, int]
    b3: tuple[int, int]
    b4: int


_INCEPTION = {
    "tiny": InceptionShapes(1, 8, 16, 8, (8, 8), (4, 4), 4),
    "small": InceptionShapes(4, 28, 192, 64, (96, 128), (16, 32), 32),     # GoogLeNet 3a
    "7b": InceptionShapes(32, 28, 480, 192, (96, 208), (16, 48), 64),     # 4a, large batch
}


def _conv_relu(cin: int, cout: int, k: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2), nn.ReLU())


class InceptionBlock(nn.Module):
    """Four independent branches (1x1; 1x1-3x3; 1x1-5x5; pool-1x1) concatenated."""

    def __init__(self, c: InceptionShapes) -> None:
        super().__init__()
        self.branch1 = _conv_relu(c.cin, c.b1, 1)
        self.branch2 = nn.Sequential(_conv_relu(c.cin, c.b2[0], 1), _conv_relu(c.b2[0], c.b2[1], 3))
        self.branch3 = nn.Sequential(_conv_relu(c.cin, c.b3[0], 1), _conv_relu(c.b3[0], c.b3[1], 5))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1),
                                     _conv_relu(c.cin, c.b4, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


def inception_block(scale: str = "small", phase: str | None = None) -> tuple[nn.Module, tuple]:
    """An Inception-style block: four parallel conv branches meeting at a concat."""
    s, c = shapes(scale), _INCEPTION[scale]
    _phase(phase, ("infer",))
    mod = _build(s, lambda: InceptionBlock(c))
    return mod, (_randn(s, c.batch, c.cin, c.size, c.size),)


# ----------------------------------------------------------------------------- KV offload
class KVOffload(nn.Module):
    """Copies the oldest cache block into host buffers (a device-to-host style copy; on the
    CPU a ``copy_`` into a separate pinned-style buffer)."""

    parastream_copy = "d2h"

    def __init__(self, batch: int, heads: int, block: int, head_dim: int) -> None:
        super().__init__()
        self.block = block
        self.register_buffer("host_k", torch.zeros(batch, heads, block, head_dim), persistent=False)
        self.register_buffer("host_v", torch.zeros(batch, heads, block, head_dim), persistent=False)

    def forward(self, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        self.host_k.copy_(k_cache[:, :, : self.block])
        self.host_v.copy_(v_cache[:, :, : self.block])


class KVOffloadStep(nn.Module):
    """One decode attention step plus an asynchronous offload of the KV cache's oldest block.

    The offload only reads the cache; the step's own cache write (``index_copy_``) must come
    after that read (a write-after-read state edge), and nothing else orders the two, so
    the copy can overlap the projections.
    """

    def __init__(self, s: Shapes, batch: int) -> None:
        super().__init__()
        self.offload = KVOffload(batch, s.heads, max(s.cache_len // 4, 1), s.hidden // s.heads)
        self.attn = LlamaAttention(s.hidden, s.heads, batch, s.cache_len)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.offload(self.attn.k_cache, self.attn.v_cache)
        return x + self.attn(x, pos, True)


def kv_offload(scale: str = "small", phase: str | None = None) -> tuple[nn.Module, tuple]:
    """Decode attention with an asynchronous copy of the KV cache to host buffers."""
    s = shapes(scale)
    _phase(phase, ("decode",))
    batch = {"tiny": 1, "small": 2, "7b": 8}[scale]
    mod = _build(s, lambda: KVOffloadStep(s, batch))
    pos = torch.tensor([s.cache_len - 1], device=s.device)
    return mod, (_randn(s, batch, 1, s.hidden), pos)


# ----------------------------------------------------------------------------- collectives
_OPS_REGISTERED = False


def _register_collectives() -> None:
    """``parastream::all_reduce``: the sum over the tensor-parallel group.

    A custom op (with a fake implementation) instead of ``torch.distributed`` directly, so
    the model exports without an initialised process group and still runs eagerly: with
    one process the sum is the tensor itself; with an initialised group it is a real
    functional all_reduce. The importer classifies ``parastream::`` collectives as comm.
    """
    global _OPS_REGISTERED
    if _OPS_REGISTERED:
        return

    @torch.library.custom_op("parastream::all_reduce", mutates_args=())
    def all_reduce(x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            import torch.distributed._functional_collectives as fc

            return fc.all_reduce(x, "sum", dist.group.WORLD)
        return x.clone()

    @all_reduce.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    _OPS_REGISTERED = True


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum ``x`` over the tensor-parallel group (see :func:`_register_collectives`)."""
    _register_collectives()
    return torch.ops.parastream.all_reduce(x)


class TPAttention(nn.Module):
    """One tensor-parallel rank's attention: column-parallel QKV, row-parallel O, then the
    all_reduce and the residual add."""

    def __init__(self, s: Shapes, tp: int) -> None:
        super().__init__()
        self.heads, self.head_dim = s.heads // tp, s.hidden // s.heads
        local = self.heads * self.head_dim
        self.input_layernorm = nn.RMSNorm(s.hidden, eps=1e-6)
        self.qkv_proj = nn.Linear(s.hidden, 3 * local, bias=False)
        self.o_proj = nn.Linear(local, s.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        qkv = self.qkv_proj(self.input_layernorm(x)).view(b, t, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + all_reduce(self.o_proj(o.transpose(1, 2).reshape(b, t, -1)))


class TPFeedForward(nn.Module):
    """One rank's MLP: column-parallel gate/up, row-parallel down, all_reduce, residual."""

    def __init__(self, s: Shapes, tp: int) -> None:
        super().__init__()
        self.post_attention_layernorm = nn.RMSNorm(s.hidden, eps=1e-6)
        self.mlp = GatedMLP(s.hidden, s.intermediate // tp)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + all_reduce(self.mlp(self.post_attention_layernorm(h)))


class TPDecoderLayer(nn.Module):
    """A tensor-parallel decoder layer (attention, then feed-forward)."""

    def __init__(self, s: Shapes, tp: int) -> None:
        super().__init__()
        self.attn = TPAttention(s, tp)
        self.ffn = TPFeedForward(s, tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn(self.attn(x))


class TwoMicroBatchPrefill(nn.Module):
    """Prefill split into two micro-batches, issued interleaved (attn0, attn1, ffn0, ffn1)
    so one micro-batch's all_reduce can hide behind the other's compute.

    ``micro0`` and ``micro1`` share their weights (tied parameters) but are separate
    modules, so each micro-batch's ops carry their own module path."""

    def __init__(self, s: Shapes, tp: int) -> None:
        super().__init__()
        self.micro0 = TPDecoderLayer(s, tp)
        self.micro1 = TPDecoderLayer(s, tp)
        for name, p in list(self.micro0.named_parameters()):
            owner, _, leaf = name.rpartition(".")
            setattr(self.micro1.get_submodule(owner) if owner else self.micro1, leaf, p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x0, x1 = x.chunk(2, dim=0)
        h0 = self.micro0.attn(x0)
        h1 = self.micro1.attn(x1)
        return torch.cat([self.micro0.ffn(h0), self.micro1.ffn(h1)], dim=0)


def two_microbatch_prefill(scale: str = "small",
                           phase: str | None = None) -> tuple[nn.Module, tuple]:
    """Tensor-parallel prefill in two micro-batches with an all_reduce after attention and
    after the MLP of each."""
    s = shapes(scale)
    _phase(phase, ("prefill",))
    _register_collectives()
    mod = _build(s, lambda: TwoMicroBatchPrefill(s, tp=2))
    batch = max(s.batch, 2)
    return mod, (_randn(s, batch, s.seq, s.hidden),)


# ----------------------------------------------------------------------------- 5-stage pipeline
@dataclass(frozen=True)
class PipelineShapes:
    batch: int
    size: int
    width: int
    classes: int


_PIPELINE = {
    "tiny": PipelineShapes(2, 32, 8, 10),
    "small": PipelineShapes(8, 224, 32, 1000),
    "7b": PipelineShapes(64, 224, 128, 1000),
}


class Preprocess(nn.Module):
    """Host work: uint8 HWC images -> normalised float CHW."""

    parastream_resource = "host"

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = img.permute(0, 3, 1, 2).to(self.mean.dtype) / 255.0
        return (x - self.mean) / self.std


class HostToDevice(nn.Module):
    """The H2D copy (a same-device copy on a CPU-only or meta model; memory class)."""

    parastream_copy = "h2d"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(x.device, copy=True)


class DeviceToHost(nn.Module):
    """The D2H copy."""

    parastream_copy = "d2h"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(x.device, copy=True)


class ConvNet(nn.Module):
    """The inference stage: a small conv net with global pooling and a classifier."""

    def __init__(self, c: PipelineShapes) -> None:
        super().__init__()
        w = c.width
        self.features = nn.Sequential(
            nn.Conv2d(3, w, 7, stride=2, padding=3), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
            nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(),
            nn.Conv2d(2 * w, 4 * w, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(4 * w, c.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


class Postprocess(nn.Module):
    """Host work: softmax and top-5."""

    parastream_resource = "host"

    def forward(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.topk(torch.softmax(logits.float(), dim=-1), 5, dim=-1)


class InferencePipeline(nn.Module):
    """A five-stage image inference pipeline: preprocess -> H2D -> infer -> D2H ->
    postprocess."""

    def __init__(self, c: PipelineShapes) -> None:
        super().__init__()
        self.preprocess = Preprocess()
        self.h2d = HostToDevice()
        self.infer = ConvNet(c)
        self.d2h = DeviceToHost()
        self.postprocess = Postprocess()

    def forward(self, img: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.postprocess(self.d2h(self.infer(self.h2d(self.preprocess(img)))))


def inference_pipeline(scale: str = "small", phase: str | None = None) -> tuple[nn.Module, tuple]:
    """The five-stage inference pipeline on a batch of uint8 HWC images."""
    s, c = shapes(scale), _PIPELINE[scale]
    _phase(phase, ("infer",))
    mod = _build(s, lambda: InferencePipeline(c))
    img = torch.randint(0, 256, (c.batch, c.size, c.size, 3), dtype=torch.uint8, device=s.device)
    return mod, (img,)


# ----------------------------------------------------------------------------- two chains
class MatmulChain(nn.Module):
    """``depth`` steps of ``relu(x @ w)``."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.weights = nn.ParameterList([nn.Parameter(torch.randn(width, width) / width ** 0.5)
                                         for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for w in self.weights:
            x = torch.relu(x @ w)
        return x


class TwoChains(nn.Module):
    """Two independent chains of ``relu(x @ w)`` meeting at an add: the smallest model whose
    branches are long enough (a few hundred microseconds per op on a CPU core) for two
    streams to overlap on a 2-core machine — the demo's default."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.left = MatmulChain(width, depth)
        self.right = MatmulChain(width, depth)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.left(x) + self.right(x)


_TWO_CHAINS = {"tiny": (64, 16, 4), "small": (256, 64, 8), "7b": (4096, 4096, 8)}


def two_chains(scale: str = "small", phase: str | None = None) -> tuple[nn.Module, tuple]:
    """Two independent matmul chains joined by an add (width x batch, depth per chain)."""
    s = shapes(scale)
    _phase(phase, ("infer",))
    width, batch, depth = _TWO_CHAINS[scale]
    torch.manual_seed(0)
    mod = _build(s, lambda: TwoChains(width, depth))
    return mod, (_randn(s, batch, width),)


# ----------------------------------------------------------------------------- Medusa heads
@dataclass(frozen=True)
class MedusaShapes:
    hidden: int
    vocab: int
    heads: int
    top_k: int


_MEDUSA = {
    "tiny": MedusaShapes(64, 512, 2, 4),
    "small": MedusaShapes(1024, 16000, 4, 10),
    "7b": MedusaShapes(4096, 32000, 4, 10),
}


class MedusaResBlock(nn.Module):
    """Medusa's residual block: ``x + silu(linear(x))``."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class MedusaHead(nn.Module):
    """One extra decoding head: a residual block, its own vocabulary projection, top-k."""

    def __init__(self, c: MedusaShapes) -> None:
        super().__init__()
        self.block = MedusaResBlock(c.hidden)
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)
        self.top_k = c.top_k

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.topk(self.lm_head(self.block(h)), self.top_k, dim=-1).indices


class MedusaHeads(nn.Module):
    """The decode step's heads of a Medusa model: the base ``lm_head`` and ``heads`` extra
    heads all read the same last hidden state and are independent until the candidate
    tokens are stacked. At batch 1 every head is a matrix-vector product over the whole
    vocabulary; where torch runs those on one core whatever its thread count, only
    streams can put a second core to work on a CPU (the demo's default). Not every CPU
    is like that: where torch spreads the GEMV over its threads, one stream already uses
    both cores, and the demo recommends single stream (the device profile's
    ``parallel_gemv`` says which case a CPU is)."""

    def __init__(self, c: MedusaShapes) -> None:
        super().__init__()
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)
        self.medusa = nn.ModuleList([MedusaHead(c) for _ in range(c.heads)])
        self.top_k = c.top_k

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        base = torch.topk(self.lm_head(h), self.top_k, dim=-1).indices
        return torch.stack([base] + [head(h) for head in self.medusa], dim=1)


def medusa_heads(scale: str = "small", phase: str | None = None) -> tuple[nn.Module, tuple]:
    """Medusa decoding heads at batch 1: base lm_head || ``heads`` residual heads, stacked."""
    s, c = shapes(scale), _MEDUSA[scale]
    _phase(phase, ("decode",))
    torch.manual_seed(0)
    mod = _build(s, lambda: MedusaHeads(c))
    return mod, (_randn(s, 1, 1, c.hidden),)


# ----------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class ZooModel:
    """One built-in model: ``factory(scale, phase) -> (module, example_inputs)``."""

    name: str
    description: str
    factory: Callable[..., tuple[nn.Module, tuple]]
    phases: tuple[str, ...]

    @property
    def default_phase(self) -> str:
        return self.phases[0]


ZOO: dict[str, ZooModel] = {m.name: m for m in (
    ZooModel("llama_layer", "Llama-style decoder layer (RMSNorm, RoPE attention, SwiGLU MLP); "
             "prefill or decode with a KV-cache write", llama_layer, PHASES),
    ZooModel("llama_stack", "Llama-style decoder stack: 2/4/32 layers at tiny/small/7b "
             "(the import benchmark)", llama_stack, PHASES),
    ZooModel("moe_layer", "DeepSeek-style MoE: shared experts || top-k routed experts "
             "(64 experts, top-6 at 7b) meeting at a merge add", moe_layer, PHASES),
    ZooModel("attention_prolog", "MLA-style attention prolog: Q chain || KV+indexer chain "
             "(cache writes), joined at attention", attention_prolog, PHASES),
    ZooModel("inception_block", "Inception-style block: four conv branches meeting at a "
             "concat", inception_block, ("infer",)),
    ZooModel("kv_offload", "decode attention step plus an asynchronous copy of the KV "
             "cache's oldest block to host buffers", kv_offload, ("decode",)),
    ZooModel("two_microbatch_prefill", "tensor-parallel prefill in two micro-batches, an "
             "all_reduce after attention and MLP of each", two_microbatch_prefill, ("prefill",)),
    ZooModel("inference_pipeline", "five-stage image inference pipeline: preprocess (host) "
             "-> H2D -> conv net -> D2H -> postprocess (host)", inference_pipeline, ("infer",)),
    ZooModel("two_chains", "two independent chains of relu(x @ w) meeting at an add",
             two_chains, ("infer",)),
    ZooModel("medusa_heads", "Medusa decode heads at batch 1: base lm_head || residual heads "
             "over the vocabulary, stacked (the demo's default)", medusa_heads, ("decode",)),
)}
