"""The small-query attention kernel, its routing inside transformers, and the preallocated target KV cache."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

from conftest import tiny_llama
from eagle_core.model.attention import (IMPLEMENTATION, batched_decode_attention_forward, small_query_attention,
                                  tree_attention_forward)
from eagle_core.decoding.engine import PreallocatedLayer, keep_cache_entries, new_kv_cache, tree_attention_mask
from eagle_core.model.target import load_target
from eagle_core.decoding.tree import DraftTree


def tree_mask(n, prefix, dtype=torch.float32, seed=0):
    """An additive mask of a random tree of n nodes over a prefix (every row sees the prefix and its ancestors)."""
    g = torch.Generator().manual_seed(seed)
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)]
    tree = DraftTree.root_only(0)
    for i in range(1, n):
        tree.add(i, parents[i], q=1.0, score=0.0, sampled=False)
    return tree_attention_mask(tree.ancestry(), prefix, dtype, "cpu")


@pytest.mark.parametrize("heads,kv", [(4, 2), (9, 3), (4, 4)])
@pytest.mark.parametrize("n", [1, 6, 25])
def test_small_query_attention_matches_sdpa(heads, kv, n):
    torch.manual_seed(heads * 100 + n)
    L = 40 + n
    q, k, v = torch.randn(1, heads, n, 16), torch.randn(1, kv, L, 16), torch.randn(1, kv, L, 16)
    mask = tree_mask(n, L - n)
    ref = F.scaled_dot_product_attention(q, repeat_kv(k, heads // kv), repeat_kv(v, heads // kv), attn_mask=mask)
    got = small_query_attention(q, k, v, mask)
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    # the mask matters: masking a different tree changes the rows that differ in ancestry
    if n > 2:
        other = small_query_attention(q, k, v, tree_mask(n, L - n, seed=5))
        assert not torch.allclose(other, got)


def test_small_query_attention_bf16_close_to_fp32():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 9, 4, 64), torch.randn(1, 3, 100, 64), torch.randn(1, 3, 100, 64)
    mask = tree_mask(4, 96)
    ref = small_query_attention(q, k, v, mask)
    got = small_query_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask.bfloat16())
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), ref, atol=3e-2, rtol=3e-2)


class _Module:
    num_key_value_groups = 2
    is_causal = True


def test_tree_attention_forward_routes():
    torch.manual_seed(0)
    q1, k, v = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 30, 16), torch.randn(1, 2, 30, 16)
    # one query, no mask: exactly SDPA's path (plain decoding keeps its kernel)
    a, _ = tree_attention_forward(_Module(), q1, k, v, None, scaling=0.25)
    b, _ = sdpa_attention_forward(_Module(), q1, k, v, None, scaling=0.25)
    assert torch.equal(a, b)
    # a masked few-token pass: the small-query kernel, same numbers to float tolerance, SDPA's output layout
    q6 = torch.randn(1, 4, 6, 16)
    mask = tree_mask(6, 24)
    a, _ = tree_attention_forward(_Module(), q6, k, v, mask, scaling=0.25)
    b, _ = sdpa_attention_forward(_Module(), q6, k, v, mask, scaling=0.25)
    assert a.shape == b.shape == (1, 6, 4, 16)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_batched_decode_attention_matches_sdpa_with_left_padding():
    """regenerate.py's 1-token steps of a left-padded batch: same numbers as SDPA, and the padding is masked."""
    torch.manual_seed(1)
    q, k, v = torch.randn(3, 4, 1, 16), torch.randn(3, 2, 30, 16), torch.randn(3, 2, 30, 16)
    pad = torch.ones(3, 1, 1, 30, dtype=torch.bool)
    pad[0, ..., :7] = False
    pad[2, ..., :2] = False
    for mask in (pad, None):
        a, _ = batched_decode_attention_forward(_Module(), q, k, v, mask, scaling=0.25)
        b, _ = sdpa_attention_forward(_Module(), q, k, v, mask, scaling=0.25)
        assert a.shape == b.shape == (3, 1, 4, 16)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    padded, _ = batched_decode_attention_forward(_Module(), q, k, v, pad, scaling=0.25)
    unpadded, _ = batched_decode_attention_forward(_Module(), q, k, v, None, scaling=0.25)
    assert not torch.allclose(padded[0], unpadded[0]) and torch.allclose(padded[1], unpadded[1])
    # a prefill (several queries, where padding rows see no key) stays exactly on SDPA
    q5 = torch.randn(3, 4, 5, 16)
    causal = torch.ones(3, 1, 5, 30, dtype=torch.bool).tril(25)
    a, _ = batched_decode_attention_forward(_Module(), q5, k, v, causal, scaling=0.25)
    b, _ = sdpa_attention_forward(_Module(), q5, k, v, causal, scaling=0.25)
    assert torch.equal(a, b)


def test_cpu_target_uses_tree_attention_and_matches_sdpa(monkeypatch):
    t = load_target(model=tiny_llama(layers=2, seed=3), device="cpu")
    assert t.model.config._attn_implementation == IMPLEMENTATION
    cache_ids = torch.randint(3, 1000, (1, 20))
    x = torch.randint(3, 1000, (1, 5))
    mask = tree_mask(5, 20)
    pos = torch.tensor([[20, 21, 21, 22, 22]])
    out = {}
    for impl in (IMPLEMENTATION, "sdpa"):
        t.model.config._attn_implementation = impl
        cache = new_kv_cache(64)
        t.forward(cache_ids, past_key_values=cache, logits="last")
        out[impl] = t.forward(x, position_ids=pos, past_key_values=cache, attention_mask=mask)[0]
    torch.testing.assert_close(out[IMPLEMENTATION], out["sdpa"], atol=1e-5, rtol=1e-5)
    monkeypatch.setenv("EAGLE_LENS_NO_TREE_ATTN", "1")
    assert load_target(model=tiny_llama(layers=1), device="cpu").model.config._attn_implementation == "sdpa"


def test_preallocated_layer_appends_in_place_and_keeps_entries():
    layer = PreallocatedLayer(capacity=10)
    k0, v0 = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    keys, values = layer.update(k0, v0)
    buf = layer._k.data_ptr()
    k1, v1 = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    keys, values = layer.update(k1, v1)
    assert layer.get_seq_length() == 7 and keys.data_ptr() == buf          # no reallocation
    torch.testing.assert_close(keys, torch.cat([k0, k1], dim=2))
    torch.testing.assert_close(values, torch.cat([v0, v1], dim=2))

    class C:  # keep_cache_entries only needs .layers
        layers = [layer]
    keep_cache_entries(C, 4, torch.tensor([4, 6]))                         # keep tree entries 0 and 2
    assert layer.get_seq_length() == 6
    torch.testing.assert_close(layer.keys, torch.cat([k0, k1[:, :, [0, 2]]], dim=2))
    torch.testing.assert_close(layer.values, torch.cat([v0, v1[:, :, [0, 2]]], dim=2))
    layer.update(torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8))
    assert layer.get_seq_length() == 10 and layer.keys.data_ptr() == buf
    with pytest.raises(RuntimeError, match="full"):
        layer.update(torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8))
