"""The built-in decoder: prefill and step-by-step decode agree, a batched step computes
what single steps do, weights are deterministic, 7b is shapes only, and a failed call
leaves the caches as they were."""

from __future__ import annotations

import pytest
import torch

from parastream.decode.config import BLOCK_TOKENS, SIZES, blocks_for
from parastream.decode.model import build_model


def _cache(model, pool, rid, first_block, blocks=8):
    c = model.new_cache(rid, pool)
    c.table = list(range(first_block, first_block + blocks))
    return c


def test_prefill_equals_step_by_step_decode(tiny):
    pool = tiny.new_pool(32)
    tokens = list(range(1, 41))
    whole = tiny.prefill(tokens, _cache(tiny, pool, 0, 0))
    c = _cache(tiny, pool, 1, 8)
    tiny.prefill(tokens[:17], c)
    for t in tokens[17:]:
        last = tiny.decode([t], [c])[0]
    assert c.length == len(tokens)
    torch.testing.assert_close(last, whole, atol=1e-4, rtol=1e-4)


def test_a_prefill_in_chunks_extends_the_cache_as_the_whole_prefill(tiny):
    pool = tiny.new_pool(32)
    tokens = list(range(3, 60))
    whole_cache = _cache(tiny, pool, 0, 0)
    whole = tiny.prefill(tokens, whole_cache)
    c = _cache(tiny, pool, 1, 8)
    for start in range(0, len(tokens), 13):  # chunks that cross block boundaries
        last = tiny.extend(tokens[start:start + 13], c, start)
    assert c.length == len(tokens)
    torch.testing.assert_close(last, whole, atol=1e-4, rtol=1e-4)
    assert last.argmax() == whole.argmax()
    for layer in range(tiny.config.layers):  # the cache holds the same keys and values
        for store in (pool.keys, pool.values):
            torch.testing.assert_close(store[layer][8:12], store[layer][0:4])
    torch.testing.assert_close(tiny.decode([5], [c]), tiny.decode([5], [whole_cache]),
                               atol=1e-4, rtol=1e-4)


def test_decode_phases_alternate_attention_and_mlp_and_leave_lengths(tiny):
    pool = tiny.new_pool(16)
    c = _cache(tiny, pool, 0, 0)
    tiny.prefill([1, 2, 3], c)
    phases = tiny.decode_phases([4], [c])
    seen = []
    with pytest.raises(StopIteration) as done:
        while True:
            seen.append(next(phases))
    assert seen == ["attention", "mlp"] * tiny.config.layers and c.length == 3
    torch.testing.assert_close(done.value.value, tiny.decode([4], [c]))


def test_batched_step_equals_single_steps(tiny):
    pool = tiny.new_pool(64)
    caches = [_cache(tiny, pool, i, 8 * i) for i in range(5)]
    for i, c in enumerate(caches):  # different lengths: padding is masked
        tiny.prefill(list(range(1, 10 + 7 * i)), c)
    lengths = [c.length for c in caches]
    batched = tiny.decode([3, 4, 5, 6, 7], caches)
    for c, n in zip(caches, lengths):
        c.length = n
    single = torch.cat([tiny.decode([t], [c]) for t, c in zip([3, 4, 5, 6, 7], caches)])
    torch.testing.assert_close(batched, single, atol=1e-4, rtol=1e-4)
    assert (batched.argmax(-1) == single.argmax(-1)).all()


def test_weights_are_deterministic():
    a, b = build_model("tiny", seed=3), build_model("tiny", seed=3)
    assert all(torch.equal(a.weights[k], b.weights[k]) for k in a.weights)
    assert not torch.equal(a.weights["l0.wq"], build_model("tiny", seed=4).weights["l0.wq"])


def test_7b_is_shapes_on_the_meta_device():
    m = build_model("7b")
    cfg = SIZES["7b"]
    assert m.weights["l0.wq"].device.type == "meta"
    assert tuple(m.weights["l0.wk"].shape) == (cfg.dim, cfg.kv_heads * cfg.head_dim)
    assert cfg.heads > cfg.kv_heads  # grouped-query attention


def test_a_position_past_the_block_table_raises_and_changes_nothing(tiny):
    pool = tiny.new_pool(4)
    c = _cache(tiny, pool, 0, 0, blocks=1)
    tiny.prefill(list(range(1, BLOCK_TOKENS + 1)), c)
    with pytest.raises(IndexError, match="KV blocks"):
        tiny.decode([1], [c])
    assert c.length == BLOCK_TOKENS
    c.table.append(1)
    assert tiny.decode([1], [c]).shape == (1, tiny.config.vocab)
    assert c.length == BLOCK_TOKENS + 1


def test_blocks_for():
    assert [blocks_for(n) for n in (1, BLOCK_TOKENS, BLOCK_TOKENS + 1)] == [1, 1, 2]


def test_to_moves_the_weights_and_leaves_the_original(tiny):
    assert tiny.to("cpu") is tiny
    moved = tiny.to("meta")
    assert moved.device == "meta" and moved.weights["l0.wq"].device.type == "meta"
    assert moved.new_pool(2).keys[0].device.type == "meta"
    assert tiny.weights["l0.wq"].device.type == "cpu" and tiny.device == "cpu"
