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

The layer loop is packed_forward.py's (this is its one-part case); the layer body between the linear products is
layer_body.py's.
"""
from __future__ import annotations

import os

from .packed_forward import Part, packed_llama_forward


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


def lean_llama_forward(model, input_ids, position_ids=None, cache=None, attention_mask=None, aux_layers=()):
    """The last hidden state (after the final norm) of `model.model` for `input_ids` [B, n], appending to `cache`
    (a transformers Cache) when given: what `model.model(...).last_hidden_state` returns. With `aux_layers`,
    (that, [transformers' `hidden_states[i]` for i in aux_layers]): the residual stream entering layer i, or for
    i = L (the number of layers) the final normed state itself. The packed forward with one part."""
    part = Part(input_ids=input_ids, position_ids=position_ids, cache=cache, attention_mask=attention_mask)
    return packed_llama_forward(model, [part], tuple(aux_layers))[0]
