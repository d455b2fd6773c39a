"""Hand-built operator graphs that mimic real structures, for the graph tests and benchmark.

Each builder returns a :class:`parastream.graph.Graph` with realistic FLOPs and bytes
(fp16 unless said), module paths as a torch import would give them, and named tensors:

- :func:`moe_layer`: post-attention norm -> (router gate/top-k -> dispatch -> routed experts)
  || shared expert -> merge.
- :func:`decoder_layer`: a LLaMA-7B-like layer at decode (batch 1) or prefill, with KV-cache
  write (state) feeding the attention core.
- :func:`inception_block`: four parallel conv branches joined by a concat.
- :func:`attention_prolog`: an MLA-style prolog, Q path || KV path, meeting at attention.
- :func:`stack`: many layers chained, for the 10k-op benchmark.
"""

from __future__ import annotations

from parastream.graph.ir import Edge, Graph, Op, Tensor

F16 = 2  # bytes


class Builder:
    """Append ops in program order; ``deps`` become data edges carrying the dep's output."""

    def __init__(self, name: str, prefix: str = "") -> None:
        self.g = Graph(name=name, ops=[], edges=[])
        self.prefix = prefix

    def _name(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def op(self, name: str, type: str, module: str, resource: str, out_shape: list[int],
           flops: float = 0.0, read: int = 0, written: int | None = None,
           deps: tuple[str, ...] = (), inputs: tuple[str, ...] = (),
           side_effects: tuple[str, ...] = (), state_from: tuple[str, ...] = (),
           dtype: str = "float16") -> str:
        name = self._name(name)
        out_bytes = F16 * _prod(out_shape)
        self.g.ops.append(Op(
            name=name, type=type, module=module,
            inputs=[Tensor([], dtype, 0, t) for t in inputs] +
                   [Tensor([], dtype, 0, f"{d}.out") for d in deps],
            outputs=[Tensor(out_shape, dtype, out_bytes, f"{name}.out")],
            flops=float(flops), bytes_read=int(read), bytes_written=out_bytes if written is None else written,
            resource=resource, side_effects=list(side_effects)))
        for d in deps:
            self.g.edges.append(Edge(d, name, "data", tensor=f"{d}.out"))
        for d in state_from:
            self.g.edges.append(Edge(d, name, "state", reason="read-after-write on kv_cache"))
        return name

    def matmul(self, name: str, module: str, m: int, k: int, n: int, deps=(), inputs=(),
               type: str = "MatMul") -> str:
        return self.op(name, type, module, "cube", [m, n], flops=2.0 * m * k * n,
                       read=F16 * (m * k + k * n), deps=deps, inputs=inputs)

    def vec(self, name: str, module: str, shape: list[int], deps=(), inputs=(),
            type: str = "Add", flops_per: float = 1.0, side_effects=(), state_from=()) -> str:
        n = _prod(shape)
        nin = max(1, len(deps) + len(inputs))
        return self.op(name, type, module, "vector", shape, flops=flops_per * n,
                       read=F16 * n * nin, deps=deps, inputs=inputs,
                       side_effects=side_effects, state_from=state_from)


def _prod(shape: list[int]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def moe_layer(tokens: int = 2048, hidden: int = 2048, experts: int = 4, inter: int = 1408,
              top_k: int = 2, b: Builder | None = None, inp: str | None = None,
              layer: int = 0) -> Graph:
    """Router + routed experts || shared expert, joining at the merge (DeepSeek-MoE-like)."""
    b = b or Builder("moe_layer")
    L = f"layers.{layer}"
    kw = {"deps": (inp,)} if inp else {"inputs": ("hidden_states",)}
    norm = b.vec("post_norm", f"{L}.post_attention_layernorm", [tokens, hidden], type="RmsNorm",
                 flops_per=4, **kw)
    gate = b.matmul("router", f"{L}.mlp.gate", tokens, hidden, experts, deps=(norm,))
    topk = b.vec("topk", f"{L}.mlp.gate", [tokens, top_k], deps=(gate,), type="TopK")
    disp = b.vec("dispatch", f"{L}.mlp.dispatch", [tokens * top_k, hidden], deps=(norm, topk),
                 type="MoeInitRouting")
    per = max(1, tokens * top_k // experts)
    outs = []
    for e in range(experts):
        up = b.matmul(f"expert{e}_gate_up", f"{L}.mlp.experts", per, hidden, 2 * inter,
                      deps=(disp,))
        act = b.vec(f"expert{e}_act", f"{L}.mlp.experts", [per, inter], deps=(up,),
                    type="SwiGlu", flops_per=4)
        outs.append(b.matmul(f"expert{e}_down", f"{L}.mlp.experts", per, inter, hidden,
                             deps=(act,)))
    comb = b.vec("combine", f"{L}.mlp.combine", [tokens, hidden], deps=tuple(outs) + (topk,),
                 type="MoeFinalizeRouting")
    s_up = b.matmul("shared_gate_up", f"{L}.mlp.shared_expert", tokens, hidden, 2 * inter,
                    deps=(norm,))
    s_act = b.vec("shared_act", f"{L}.mlp.shared_expert", [tokens, inter], deps=(s_up,),
                  type="SwiGlu", flops_per=4)
    s_down = b.matmul("shared_down", f"{L}.mlp.shared_expert", tokens, inter, hidden,
                      deps=(s_act,))
    b.vec("merge", f"{L}.mlp.merge", [tokens, hidden], deps=(comb, s_down), type="Add")
    return b.g


def decoder_layer(batch: int = 1, seq: int = 1, kv_len: int = 1024, hidden: int = 4096,
                  inter: int = 11008, b: Builder | None = None, inp: str | None = None,
                  layer: int = 0) -> Graph:
    """A LLaMA-7B-like layer; ``seq=1`` is decode. The KV-cache write is a state op and the
    attention core reads the cache after it (a state edge)."""
    b = b or Builder("decoder_layer_decode" if seq == 1 else "decoder_layer_prefill")
    L = f"layers.{layer}"
    T = batch * seq
    kw = {"deps": (inp,)} if inp else {"inputs": ("hidden_states",)}
    n1 = b.vec("input_norm", f"{L}.input_layernorm", [T, hidden], type="RmsNorm", flops_per=4,
               **kw)
    q = b.matmul("q_proj", f"{L}.self_attn.q_proj", T, hidden, hidden, deps=(n1,))
    k = b.matmul("k_proj", f"{L}.self_attn.k_proj", T, hidden, hidden, deps=(n1,))
    v = b.matmul("v_proj", f"{L}.self_attn.v_proj", T, hidden, hidden, deps=(n1,))
    rq = b.vec("rope_q", f"{L}.self_attn.rotary_emb", [T, hidden], deps=(q,), type="RotaryMul",
               flops_per=3)
    rk = b.vec("rope_k", f"{L}.self_attn.rotary_emb", [T, hidden], deps=(k,), type="RotaryMul",
               flops_per=3)
    cache = b.vec("kv_cache_update", f"{L}.self_attn", [2, T, hidden], deps=(rk, v),
                  type="ScatterUpdate", flops_per=0, side_effects=("writes:kv_cache",))
    kv_bytes = F16 * 2 * batch * (kv_len + seq) * hidden
    attn = b.op("attention", "FusedInferAttentionScore", f"{L}.self_attn.attn", "cube",
                [T, hidden], flops=4.0 * batch * seq * (kv_len + seq) * hidden,
                read=kv_bytes + F16 * T * hidden, deps=(rq,), state_from=(cache,),
                side_effects=("reads:kv_cache",))
    o = b.matmul("o_proj", f"{L}.self_attn.o_proj", T, hidden, hidden, deps=(attn,))
    res1 = b.vec("residual_1", L, [T, hidden], deps=(o, inp) if inp else (o,),
                 inputs=() if inp else ("hidden_states",))
    n2 = b.vec("post_norm", f"{L}.post_attention_layernorm", [T, hidden], deps=(res1,),
               type="RmsNorm", flops_per=4)
    gp = b.matmul("gate_proj", f"{L}.mlp.gate_proj", T, hidden, inter, deps=(n2,))
    up = b.matmul("up_proj", f"{L}.mlp.up_proj", T, hidden, inter, deps=(n2,))
    act = b.vec("act_mul", f"{L}.mlp.act_fn", [T, inter], deps=(gp, up), type="SwiGlu",
                flops_per=4)
    dn = b.matmul("down_proj", f"{L}.mlp.down_proj", T, inter, hidden, deps=(act,))
    b.vec("residual_2", L, [T, hidden], deps=(dn, res1))
    return b.g


def inception_block(batch: int = 8, hw: int = 28, cin: int = 192) -> Graph:
    """GoogLeNet inception (3a): 1x1 || 1x1->3x3 || 1x1->5x5 || pool->1x1, then concat."""
    b = Builder("inception_3a")
    P = batch * hw * hw

    def conv(name, module, cin_, cout, k, deps):
        return b.op(name, "Conv2D", module, "cube", [batch, cout, hw, hw],
                    flops=2.0 * P * cin_ * cout * k * k,
                    read=F16 * (P * cin_ + cin_ * cout * k * k), deps=deps)

    x = b.vec("stem_relu", "stem", [batch, cin, hw, hw], type="Relu", inputs=("images",))
    b1 = conv("b1_1x1", "inception.branch1", cin, 64, 1, (x,))
    b2a = conv("b2_1x1", "inception.branch2.reduce", cin, 96, 1, (x,))
    b2 = conv("b2_3x3", "inception.branch2.conv", 96, 128, 3, (b2a,))
    b3a = conv("b3_1x1", "inception.branch3.reduce", cin, 16, 1, (x,))
    b3 = conv("b3_5x5", "inception.branch3.conv", 16, 32, 5, (b3a,))
    b4a = b.vec("b4_pool", "inception.branch4.pool", [batch, cin, hw, hw], deps=(x,),
                type="MaxPool", flops_per=9)
    b4 = conv("b4_1x1", "inception.branch4.proj", cin, 32, 1, (b4a,))
    b.vec("concat", "inception.concat", [batch, 256, hw, hw], deps=(b1, b2, b3, b4),
          type="ConcatD", flops_per=0)
    return b.g


def attention_prolog(tokens: int = 1024, hidden: int = 7168, q_lora: int = 1536,
                     kv_lora: int = 512, heads: int = 128, head_dim: int = 192) -> Graph:
    """MLA prolog (DeepSeek-V3-like): Q path (q_a_proj -> q_norm -> q_b_proj -> rope) ||
    KV path (kv_a_proj -> kv_norm -> rope_k -> cache write), meeting at attention."""
    b = Builder("attention_prolog")
    A = "layers.0.self_attn"
    x = b.vec("input_norm", "layers.0.input_layernorm", [tokens, hidden], type="RmsNorm",
              flops_per=4, inputs=("hidden_states",))
    qa = b.matmul("q_a_proj", f"{A}.q_a_proj", tokens, hidden, q_lora, deps=(x,))
    qn = b.vec("q_norm", f"{A}.q_a_layernorm", [tokens, q_lora], deps=(qa,), type="RmsNorm",
               flops_per=4)
    qb = b.matmul("q_b_proj", f"{A}.q_b_proj", tokens, q_lora, heads * head_dim, deps=(qn,))
    qr = b.vec("rope_q", f"{A}.q_rope", [tokens, heads * 64], deps=(qb,), type="RotaryMul",
               flops_per=3)
    kva = b.matmul("kv_a_proj", f"{A}.kv_a_proj_with_mqa", tokens, hidden, kv_lora + 64,
                   deps=(x,))
    kvn = b.vec("kv_norm", f"{A}.kv_a_layernorm", [tokens, kv_lora], deps=(kva,),
                type="RmsNorm", flops_per=4)
    kr = b.vec("rope_k", f"{A}.k_rope", [tokens, 64], deps=(kva,), type="RotaryMul",
               flops_per=3)
    cache = b.vec("kv_cache_update", A, [tokens, kv_lora + 64], deps=(kvn, kr),
                  type="ScatterUpdate", flops_per=0, side_effects=("writes:kv_cache",))
    b.op("attention", "MultiLatentAttention", f"{A}.attn", "cube", [tokens, heads * 128],
         flops=4.0 * tokens * tokens * heads * head_dim,
         read=F16 * tokens * (heads * head_dim + kv_lora + 64), deps=(qr,),
         state_from=(cache,), side_effects=("reads:kv_cache",))
    return b.g


def stack(layers: int, kind: str = "moe", **kw) -> Graph:
    """``layers`` layers chained through their last op (decoder + MoE alternating when
    ``kind='mixed'``), with op names and module paths unique per layer."""
    g = Graph(name=f"stack_{kind}_{layers}", ops=[], edges=[])
    prev: str | None = None
    for i in range(layers):
        b = Builder("part", prefix=f"l{i}.")
        b.g = g
        which = kind if kind != "mixed" else ("decoder" if i % 2 == 0 else "moe")
        if which == "moe":
            moe_layer(b=b, inp=prev, layer=i, **kw)
        else:
            decoder_layer(b=b, inp=prev, layer=i, **kw)
        prev = g.ops[-1].name
    return g
