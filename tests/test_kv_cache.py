"""The target's KV cache after tree cycles holds exactly what a fresh prefill over the committed tokens holds.

Each cycle verifies a whole tree in one pass (every node appends its K/V at position root + depth), then
`keep_cache_entries` moves the accepted path's entries into place and drops the rest. After any number of
cycles, entry j of every layer must be the K/V a plain causal pass over the committed tokens gives at j: the
right token, at the right position, computed under the right context (the tree mask hid the siblings). The
features handed to the head (`pending_feats`) must likewise be the accepted path's true features.

The target: two Llama layers whose second layer's K/V depend on the context through the first layer's
attention (a layer-0 attention that ignores the mask or sees a sibling changes them by ~1e-2), while the first
layer's MLP is an oracle's, so a head built from it drafts the target's ranking and the dynamic trees are
accepted deep and through later siblings (accepted paths like nodes 1, 4, 8: entries moved, not a prefix kept).
"""
from __future__ import annotations

import pytest
import torch

from conftest import TinyTokenizer, oracle_head, tiny_llama
from eagle_core.decoding.engine import DecodeConfig, EagleDecoder, new_kv_cache
from eagle_core.model.target import load_target

V = 16
PROMPT = [1, 4, 2, 7]
ATOL = 1e-5       # the tree pass (small-query kernel, a different reduction order) vs a plain SDPA prefill
SETTINGS = {
    "dynamic-greedy": dict(draft="dynamic", depth=4, top_k=3, total_tokens=8, temperature=0.0),
    "dynamic-T1": dict(draft="dynamic", depth=4, top_k=3, total_tokens=8, temperature=1.0),
    "static-T1": dict(draft="static", tree="cpu-12", temperature=1.0),
}


@pytest.fixture(scope="module")
def pair():
    """Layer 0: real attention (context enters the residual stream) + an MLP the head copies; layer 1: its K/V
    read that context, its own outputs are zeroed so the feature stays the oracle's up to the small attention."""
    model = tiny_llama(vocab_size=V, layers=2, seed=1, eos_token_id=None)
    with torch.no_grad():
        l0, l1 = model.model.layers
        l1.self_attn.o_proj.weight.zero_()
        l1.mlp.down_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)
        model.model.embed_tokens.weight.mul_(3.0)
    target = load_target(model=model, tokenizer=TinyTokenizer(V), device="cpu")
    return target, oracle_head(target, l0, head_gain=3.0)


def fresh_prefill(target, tokens):
    cache = new_kv_cache(len(tokens) + 1)
    with torch.inference_mode():
        _, feats = target.forward(torch.tensor([tokens]), past_key_values=cache, logits=False)
    return cache, feats


def assert_cache_is_a_fresh_prefill(target, dec, last):
    committed = dec.tokens[:-1]                  # the root (last element) has no entry yet
    cache, feats = fresh_prefill(target, committed)
    assert len(dec.cache.layers) == len(cache.layers) == target.config.num_hidden_layers
    for i, (mine, ref) in enumerate(zip(dec.cache.layers, cache.layers)):
        assert mine.keys.shape == ref.keys.shape and mine.values.shape == ref.values.shape, (i, mine.keys.shape)
        torch.testing.assert_close(mine.keys, ref.keys, atol=ATOL, rtol=0, msg=f"layer {i} keys")
        torch.testing.assert_close(mine.values, ref.values, atol=ATOL, rtol=0, msg=f"layer {i} values")
    if last.cycle > 0:                           # the root and the accepted path: their true features
        k = last.accept_length + 1
        torch.testing.assert_close(dec.pending_feats, feats[:, -k:], atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_kv_cache_equals_a_fresh_prefill_after_every_cycle(pair, name):
    target, head = pair
    paths = []
    for seed in range(3):
        dec = EagleDecoder(target, head, DecodeConfig(seed=seed, max_new_tokens=60, record_topk=0,
                                                      **SETTINGS[name]), PROMPT)
        for _ in range(10):
            if dec.done:
                break
            rec = dec.step()
            assert_cache_is_a_fresh_prefill(target, dec, rec)
            if rec.cycle:
                paths.append(rec.accepted_path)
    # the cycles must have moved entries: deep paths, and paths that are not the tree's first nodes
    assert max(map(len, paths)) >= 2, paths
    assert any(p != list(range(1, len(p) + 1)) for p in paths), paths


def test_the_context_reaches_the_second_layer_cache(pair):
    """Guard: the check above could not see a mask or context slip if layer 1's K/V ignored the context."""
    target, _ = pair
    a, _ = fresh_prefill(target, [1, 4, 2, 7])
    b, _ = fresh_prefill(target, [1, 9, 3, 7])
    assert torch.equal(a.layers[0].keys[:, :, -1], b.layers[0].keys[:, :, -1])     # token + position only
    assert (a.layers[1].keys[:, :, -1] - b.layers[1].keys[:, :, -1]).abs().max() > 100 * ATOL
