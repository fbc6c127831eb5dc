"""Released EAGLE-1 heads, checked against transformers' own Llama modules wired by hand.

The expectation below never touches `EagleHead`: it is the EAGLE-1 draft layer written out with
`LlamaAttention`, `LlamaMLP`, `LlamaRMSNorm` and `LlamaRotaryEmbedding`, fed the same tensors that go into a
`pytorch_model.bin` + `config.json` folder laid out like yuhuili/EAGLE-* releases:

    x   = fc(cat(e(token), feature))                       # fc with bias, embedding first
    h   = x + o_proj(causal_attention(x))                  # no input_layernorm on the first layer
    out = h + mlp(post_attention_layernorm(h))
"""
from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from eagle_core.model.head import load_head

H, HEADS, KV_HEADS, FFN, VOCAB = 64, 4, 2, 128, 96
B, N = 2, 7


def _llama_config(qkv_bias: bool) -> LlamaConfig:
    return LlamaConfig(vocab_size=VOCAB, hidden_size=H, intermediate_size=FFN, num_hidden_layers=1,
                       num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=64,
                       rms_norm_eps=1e-6, attention_bias=qkv_bias)


def _released_state(qkv_bias: bool, seed: int = 0) -> dict:
    """Random weights under the released key names (sizes as in a Llama layer; scales keep outputs O(1))."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.1):
        return torch.randn(*shape, generator=g) * scale

    head_dim = H // HEADS
    state = {
        "fc.weight": rand(H, 2 * H), "fc.bias": rand(H),
        "layers.0.self_attn.q_proj.weight": rand(HEADS * head_dim, H, scale=0.3),
        "layers.0.self_attn.k_proj.weight": rand(KV_HEADS * head_dim, H, scale=0.3),
        "layers.0.self_attn.v_proj.weight": rand(KV_HEADS * head_dim, H),
        "layers.0.self_attn.o_proj.weight": rand(H, HEADS * head_dim),
        "layers.0.mlp.gate_proj.weight": rand(FFN, H), "layers.0.mlp.up_proj.weight": rand(FFN, H),
        "layers.0.mlp.down_proj.weight": rand(H, FFN),
        "layers.0.post_attention_layernorm.weight": 1 + rand(H),   # not ones: a skipped norm would show
        "embed_tokens.weight": rand(VOCAB, H),                      # the target's: a head must ignore it
    }
    if qkv_bias:
        for p, rows in (("q", HEADS), ("k", KV_HEADS), ("v", KV_HEADS)):
            state[f"layers.0.self_attn.{p}_proj.bias"] = rand(rows * head_dim, scale=0.3)
    return state


def _write_release(folder, state: dict, qkv_bias: bool):
    """config.json as the releases ship it: a LlamaConfig dict, `bias`, `qkv_bias` only when set, no eagle_shift."""
    os.makedirs(folder, exist_ok=True)
    d = _llama_config(False).to_dict()  # released configs say qkv_bias, not attention_bias
    d.update(architectures=["LlamaForCausalLM"], model_type="llama", bias=True)
    if qkv_bias:
        d["qkv_bias"] = True
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(d, f)
    torch.save(state, os.path.join(folder, "pytorch_model.bin"))


def _sub(state: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


@torch.no_grad()
def _expected(state: dict, qkv_bias: bool, features, token_embeds, position_ids, embed_first: bool = True):
    """The EAGLE-1 layer from transformers' modules. qkv_bias: transformers' `attention_bias` gives o_proj a
    bias as well, which EAGLE's layer lacks, so that one is loaded as zeros (the same map as no bias)."""
    cfg = _llama_config(qkv_bias)
    cfg._attn_implementation = "eager"  # plain matmul/softmax with our additive mask
    fc = nn.Linear(2 * H, H, bias=True)
    attn, mlp = LlamaAttention(cfg, layer_idx=0), LlamaMLP(cfg)
    norm, rotary = LlamaRMSNorm(H, eps=cfg.rms_norm_eps), LlamaRotaryEmbedding(cfg)
    attn_state = _sub(state, "layers.0.self_attn.")
    if qkv_bias:
        attn_state["o_proj.bias"] = torch.zeros(H)
    fc.load_state_dict(_sub(state, "fc."))
    attn.load_state_dict(attn_state)
    mlp.load_state_dict(_sub(state, "layers.0.mlp."))
    norm.load_state_dict(_sub(state, "layers.0.post_attention_layernorm."))
    for m in (fc, attn, mlp, norm):
        m.eval()

    pair = (token_embeds, features) if embed_first else (features, token_embeds)
    x = fc(torch.cat(pair, dim=-1))
    cos, sin = rotary(x, position_ids)
    n = x.shape[1]
    causal = torch.full((n, n), torch.finfo(x.dtype).min).triu(1)[None, None]
    h = x + attn(x, position_embeddings=(cos, sin), attention_mask=causal)[0]
    return h + mlp(norm(h))


def _inputs(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, N, H, generator=g), torch.randn(B, N, H, generator=g), torch.arange(N).expand(B, N)


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_released_head_matches_transformers_modules(tmp_path, qkv_bias):
    state = _released_state(qkv_bias)
    _write_release(str(tmp_path / "e1"), state, qkv_bias)
    head = load_head(str(tmp_path / "e1"))
    assert head.shift == "shifted" and head.fc.bias is not None
    assert (head.layers[0].self_attn.q_proj.bias is not None) == qkv_bias
    assert head.layers[0].self_attn.o_proj.bias is None

    features, token_embeds, pos = _inputs()
    with torch.no_grad():
        got = head(features, token_embeds, pos)
    want = _expected(state, qkv_bias, features, token_embeds, pos)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)

    # The check can fail: the feature-first concat (the wrong fc order) gives something else entirely.
    swapped = _expected(state, qkv_bias, features, token_embeds, pos, embed_first=False)
    assert (got - swapped).abs().max() > 1e-2
    if qkv_bias:  # ... and so does dropping the q/k/v biases that `qkv_bias` announces
        no_bias = {k: v for k, v in state.items() if not k.endswith("_proj.bias")}
        assert (got - _expected(no_bias, False, features, token_embeds, pos)).abs().max() > 1e-2


def _input_norm_warnings(folder) -> list:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_head(str(folder))
    return [w for w in caught if "input_layernorm" in str(w.message)]


def test_trained_input_norm_warns_ones_stay_quiet(tmp_path):
    state = _released_state(False)
    state["layers.0.input_layernorm.weight"] = torch.ones(H)  # untouched init: dropping it changes nothing
    _write_release(str(tmp_path / "ones"), state, False)
    assert _input_norm_warnings(tmp_path / "ones") == []

    state["layers.0.input_layernorm.weight"] = torch.ones(H) + 0.01 * torch.arange(H)
    _write_release(str(tmp_path / "trained"), state, False)
    with pytest.warns(UserWarning, match="input_layernorm.*dropped"):
        head = load_head(str(tmp_path / "trained"))
    # Still loads, and the output is the no-input-norm layer's (the weight really is dropped).
    features, token_embeds, pos = _inputs()
    with torch.no_grad():
        got = head(features, token_embeds, pos)
    torch.testing.assert_close(got, _expected(state, False, features, token_embeds, pos), atol=1e-5, rtol=1e-5)
