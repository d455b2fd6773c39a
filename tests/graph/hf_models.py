"""Real Hugging Face ``transformers`` blocks at tiny configurations, as user factories.

Each factory follows the ``path/to/file.py:factory`` contract (docs/models.md): no argument
needed, returns ``(module, example_inputs)``. Weights are random (seeded), built from a
Config object in code: nothing is downloaded. The classes are transformers' own; the only
code here is a thin wrapper that computes the rotary embeddings a decoder layer takes as a
keyword, so the layer can be called with positional inputs.
"""

from __future__ import annotations

import os

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # built from configs: nothing to fetch, ever

TOKENS = 8   # sequence length of every example input
HIDDEN = 32


def _seed() -> None:
    torch.manual_seed(0)


def _llama_config():
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                       max_position_embeddings=64, attn_implementation="sdpa")


class WithRope(torch.nn.Module):
    """A decoder layer called the way its model calls it: the rotary (cos, sin) computed
    from the positions by the model's rotary embedding, no mask (causal sdpa)."""

    def __init__(self, layer: torch.nn.Module, rope: torch.nn.Module) -> None:
        super().__init__()
        self.layer = layer
        self.rope = rope

    def forward(self, hidden_states: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        cos_sin = self.rope(hidden_states, position_ids)
        return self.layer(hidden_states, position_embeddings=cos_sin)


def _positions() -> torch.Tensor:
    return torch.arange(TOKENS).unsqueeze(0)


def llama_layer():
    """One ``LlamaDecoderLayer`` (GQA attention + gated MLP)."""
    from transformers.models.llama.modeling_llama import (LlamaDecoderLayer,
                                                          LlamaRotaryEmbedding)

    _seed()
    cfg = _llama_config()
    module = WithRope(LlamaDecoderLayer(cfg, layer_idx=0), LlamaRotaryEmbedding(cfg)).eval()
    return module, (torch.randn(1, TOKENS, HIDDEN), _positions())


class LogitsOnly(torch.nn.Module):
    """A causal LM returning its logits tensor (not the ModelOutput dataclass), no cache."""

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def llama_causal_lm():
    """A whole two-layer ``LlamaForCausalLM``: token ids in, logits out."""
    from transformers import LlamaForCausalLM

    _seed()
    module = LogitsOnly(LlamaForCausalLM(_llama_config())).eval()
    return module, (torch.randint(0, 128, (1, TOKENS)),)


def qwen2_moe_block():
    """``Qwen2MoeSparseMoeBlock``: router, 8 routed experts (top-2), a gated shared expert."""
    from transformers import Qwen2MoeConfig
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

    _seed()
    cfg = Qwen2MoeConfig(hidden_size=HIDDEN, moe_intermediate_size=16,
                         shared_expert_intermediate_size=64, num_experts=8,
                         num_experts_per_tok=2, norm_topk_prob=True)
    block = Qwen2MoeSparseMoeBlock(cfg)
    _init(block)
    return block.eval(), (torch.randn(1, TOKENS, HIDDEN),)


def mixtral_block():
    """``MixtralSparseMoeBlock``: router and 4 routed experts (top-2), no shared expert."""
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    _seed()
    cfg = MixtralConfig(hidden_size=HIDDEN, intermediate_size=32, num_local_experts=4,
                        num_experts_per_tok=2)
    block = MixtralSparseMoeBlock(cfg)
    _init(block)
    return block.eval(), (torch.randn(1, TOKENS, HIDDEN),)


def deepseek_v3_layer():
    """A ``DeepseekV3DecoderLayer`` with MLA attention and the MoE MLP (grouped top-k
    routing over 8 experts, top-2, one shared expert)."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3DecoderLayer, DeepseekV3RotaryEmbedding)

    _seed()
    cfg = DeepseekV3Config(hidden_size=HIDDEN, intermediate_size=64, moe_intermediate_size=16,
                           num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8,
                           n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
                           first_k_dense_replace=0, q_lora_rank=16, kv_lora_rank=16,
                           qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
                           vocab_size=128, max_position_embeddings=64,
                           attn_implementation="sdpa")
    layer = DeepseekV3DecoderLayer(cfg, layer_idx=0)
    _init(layer)
    module = WithRope(layer, DeepseekV3RotaryEmbedding(cfg)).eval()
    return module, (torch.randn(1, TOKENS, HIDDEN), _positions())


def _init(module: torch.nn.Module) -> None:
    """Random values for the parameters transformers leaves uninitialised (``torch.empty``
    expert weights, zero routers) when a block is built outside a PreTrainedModel: the
    routing must pick different experts for different tokens."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.2)


def mixtral_layer():
    """A ``MixtralDecoderLayer``: GQA attention, then the sparse MoE block (4 experts, top-2)."""
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import (MixtralDecoderLayer,
                                                              MixtralRotaryEmbedding)

    _seed()
    cfg = MixtralConfig(hidden_size=HIDDEN, intermediate_size=32, num_local_experts=4,
                        num_experts_per_tok=2, num_attention_heads=4, num_key_value_heads=2,
                        vocab_size=128, max_position_embeddings=64, attn_implementation="sdpa")
    layer = MixtralDecoderLayer(cfg, layer_idx=0)
    _init(layer)
    module = WithRope(layer, MixtralRotaryEmbedding(cfg)).eval()
    return module, (torch.randn(1, TOKENS, HIDDEN), _positions())


def qwen2_moe_causal_lm():
    """A whole two-layer ``Qwen2MoeForCausalLM`` as transformers builds it (its own experts
    implementation choice, not the standalone block's eager loop)."""
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    _seed()
    cfg = Qwen2MoeConfig(hidden_size=HIDDEN, intermediate_size=64, moe_intermediate_size=16,
                         shared_expert_intermediate_size=64, num_experts=8,
                         num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128, max_position_embeddings=64,
                         attn_implementation="sdpa")
    module = LogitsOnly(Qwen2MoeForCausalLM(cfg)).eval()
    return module, (torch.randint(0, 128, (1, TOKENS)),)
