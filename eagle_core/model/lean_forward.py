"""A Llama target's forward pass without the framework around it: the same operations, in the same order, on
the same modules, so its features equal transformers' `LlamaModel.forward` bit for bit (tests/test_lean_forward.py).

Why: a decoding step of SmolLM2-135M on the 2-core CPU spends ~14 ms in its 210 linear products and ~13 ms around
them. Part of that is the model's own arithmetic (norms, RoPE, attention), part is machinery a decoding loop does not
use: per-module `__call__` hooks, keyword-argument decorators (`deprecate_kwarg`, `capture_outputs`,
`merge_with_config_defaults`), the output-recording wrappers, the attention-interface lookup and the cache's
dispatch, all once per layer per pass. Here the loop over layers is plain Python over the modules' weights, and the
layers that read one input (q/k/v; gate/up) round it to bf16 once between them (cpu_kernels.shared_input_linears)
instead of once each. Measured on the AMX Xeon (best of 10, 256-token prefix, features only): 1 token 26.7 -> 24.7
ms, 26 tokens 42.4 -> 39.9 ms before the shared rounding.

Only for the exact transformers classes it mirrors (`supports`): a subclass, another architecture, or a model with
hooks attached takes transformers' forward, as does anything when EAGLE_LENS_NO_LEAN=1.
"""
from __future__ import annotations

import os

import torch

from .planned_linear import shared_input_linears


def supports(model) -> bool:
    """Whether `model` (a *ForCausalLM) is exactly the Llama stack this forward reproduces."""
    if os.environ.get("EAGLE_LENS_NO_LEAN", "") not in ("", "0"):
        return False
    try:
        from transformers.models.llama import modeling_llama as ml
    except ImportError:
        return False
    inner = getattr(model, "model", None)
    if type(inner) is not ml.LlamaModel or inner.config.model_type != "llama":
        return False
    if getattr(inner, "gradient_checkpointing", False) or _has_hooks(inner):
        return False
    return all(type(layer) is ml.LlamaDecoderLayer and type(layer.self_attn) is ml.LlamaAttention
               and type(layer.mlp) is ml.LlamaMLP and type(layer.input_layernorm) is ml.LlamaRMSNorm
               and type(layer.post_attention_layernorm) is ml.LlamaRMSNorm
               for layer in inner.layers[:inner.config.num_hidden_layers]) and type(inner.norm) is ml.LlamaRMSNorm


def _has_hooks(module) -> bool:
    return any(m._forward_hooks or m._forward_pre_hooks for m in module.modules())


def _rms_norm(norm, x):
    """LlamaRMSNorm.forward, operation for operation."""
    dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + norm.variance_epsilon)
    return norm.weight * h.to(dtype)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def lean_llama_forward(model, input_ids, position_ids=None, cache=None, attention_mask=None, aux_layers=()):
    """The last hidden state (after the final norm) of `model.model` for `input_ids` [B, n], appending to `cache`
    (a transformers Cache) when given: what `model.model(...).last_hidden_state` returns. With `aux_layers`,
    (that, [transformers' `hidden_states[i]` for i in aux_layers]): the residual stream entering layer i, or for
    i = L (the number of layers) the final normed state itself."""
    from transformers.masking_utils import create_causal_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward
    inner = model.model
    cfg = inner.config
    h = inner.embed_tokens(input_ids)
    if position_ids is None:
        past = cache.get_seq_length() if cache is not None else 0
        position_ids = (torch.arange(h.shape[1], device=h.device) + past).unsqueeze(0)
    mask = create_causal_mask(config=cfg, inputs_embeds=h, attention_mask=attention_mask, cache=cache,
                              position_ids=position_ids)
    cos, sin = inner.rotary_emb(h, position_ids=position_ids)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(cfg._attn_implementation, eager_attention_forward)
    B, n = h.shape[:2]
    aux = {}
    for i, layer in enumerate(inner.layers[:cfg.num_hidden_layers]):
        if i in aux_layers:
            aux[i] = h
        attn = layer.self_attn
        shape = (B, n, -1, attn.head_dim)
        q, k, v = shared_input_linears((attn.q_proj, attn.k_proj, attn.v_proj),
                                       _rms_norm(layer.input_layernorm, h))
        q, k, v = q.view(shape).transpose(1, 2), k.view(shape).transpose(1, 2), v.view(shape).transpose(1, 2)
        q = (q * cos) + (_rotate_half(q) * sin)
        k = (k * cos) + (_rotate_half(k) * sin)
        if cache is not None:
            k, v = cache.update(k, v, i)
        out, _ = attention(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling)
        h = h + attn.o_proj.forward(out.reshape(B, n, -1).contiguous())
        mlp = layer.mlp
        gate, up = shared_input_linears((mlp.gate_proj, mlp.up_proj), _rms_norm(layer.post_attention_layernorm, h))
        h = h + mlp.down_proj.forward(mlp.act_fn(gate) * up)
    out = _rms_norm(inner.norm, h)
    aux[cfg.num_hidden_layers] = out              # hidden_states[L] is the final, normed state
    return (out, [aux[i] for i in aux_layers]) if aux_layers else out
