"""Attention for a few query tokens over a long KV cache under an additive mask: the shape of every tree
verification pass (the drafted nodes over the committed prefix) and of every draft-head step.

PyTorch's SDPA has no good CPU kernel for this case: with an explicit mask it runs the flash kernel, whose tiling
is built for long queries, and the caller first copies K and V once per query-head group (`repeat_kv`). For 6
queries over 300 keys that cost 2-3x the plain matmul-softmax-matmul below, which reads K and V once per KV
head, without copies. Single-token decoding (no mask), prefills and boolean masks keep transformers' SDPA path
untouched, so plain decoding and `generate` run exactly the kernels they ran before.

Row-consistent attention (the bf16-linear numerical model, cpu_kernels.py). When the engine's KV cache holds
float64 keys and values (engine.new_kv_cache(dtype=torch.float64)), one-token steps and tree passes alike run the
small-query path in float64 and round the result to float32 once. A tree node's ancestors sit at scattered
places among the tree's entries, a committed token's predecessors in a row, so the two sums over keys run in
different orders; in float64 those orders differ by ~1e-16, far below float32's rounding, so a node's attention
output equals the one-token step's bit for bit (but once in ~1e9 values). With the row-independent bf16 linear
layers this makes a tree pass compute every node's logits exactly as plain decoding does.
"""
from __future__ import annotations

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

IMPLEMENTATION = "eagle_lens_sdpa"
# The most tokens one verification pass may hold: the root and 80 drafted nodes. decoding/limits.py sizes the
# page's trees from it, the engine refuses a bigger tree, and the kernel plan's row-independence probe runs every
# call size up to it (planned_linear.py): so every tree the engine runs takes the one-token step's numerical path.
MAX_VERIFY_ROWS = 81
MAX_QUERIES = MAX_VERIFY_ROWS   # masked passes up to this take the small-query path; above it (a prefill) SDPA
# Attention implementations known to apply a custom 4D additive mask as given (tree verification's mask: each
# drafted node sees only its ancestors). Others (flash_attention_2/3/4 keep only causal + padding, flex and
# paged attention, hub kernels) would attend across siblings and silently stop being lossless.
HONOURS_4D_MASK = frozenset({"eager", "sdpa", IMPLEMENTATION, IMPLEMENTATION + "_batched"})


def honours_4d_mask(model) -> bool:
    """Whether `model` runs an attention implementation that applies a custom 4D attention mask."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) in HONOURS_4D_MASK


def small_query_attention(query, key, value, mask, scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v with grouped-query heads.

    query [B, H, n, d]; key, value [B, G, L, d] with H a multiple of G; mask additive, broadcastable to
    [B, 1, n, L]. Returns [B, H, n, d] (the layout of scaled_dot_product_attention).
    """
    B, H, n, d = query.shape
    G = key.shape[1]
    r = H // G
    scale = d ** -0.5 if scale is None else scale
    # the r query heads of one KV group share K: fold them into the query axis, one matmul per group
    scores = torch.matmul(query.reshape(B, G, r * n, d), key.transpose(-1, -2)).mul_(scale)
    if mask is not None:
        scores = scores.view(B, G, r, n, -1).add_(mask.unsqueeze(2)).view(B, G, r * n, -1)
    # at least float32 (a bf16 head), float64 when the cache is (its sums must not be rounded to float32 here)
    probs = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(value.dtype)
    return torch.matmul(probs, value).view(B, H, n, d)


def tree_attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0,
                           scaling: float | None = None, **kwargs):
    """A transformers attention function: the small-query path for masked passes of a few tokens, else SDPA;
    with a float64 cache (row-consistent attention, see the docstring) every step and tree pass in float64."""
    n = query.shape[2]
    if key.dtype == torch.float64 and query.dtype != torch.float64:
        mask = attention_mask
        if (n <= MAX_QUERIES and dropout == 0 and kwargs.get("position_bias") is None
                and ((n == 1 and mask is None) or (mask is not None and mask.dtype != torch.bool))):
            if mask is not None:
                mask = mask[:, :, :, :key.shape[2]].to(torch.float64)
            out = small_query_attention(query.to(torch.float64), key, value, mask, scaling)
            return out.to(query.dtype).transpose(1, 2).contiguous(), None
        key, value = key.to(query.dtype), value.to(query.dtype)   # a prefill: SDPA, as without the cache
    if (attention_mask is None or attention_mask.dtype == torch.bool or n == 1 or n > MAX_QUERIES
            or dropout > 0 or query.device.type != "cpu" or kwargs.get("position_bias") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    out = small_query_attention(query, key, value, attention_mask[:, :, :, :key.shape[2]], scaling)
    return out.transpose(1, 2).contiguous(), None


def batched_decode_attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0,
                                    scaling: float | None = None, **kwargs):
    """For batched generation (regenerate.py): the small-query path for every 1-token step, with or without a
    (boolean padding) mask. SDPA's flash kernel spends ~3 ms per layer on a 1-token step of a 32-row batch on
    the 2-core dev machine, 60% of the step. Prefills (where a left-padded row's padding queries see no key at
    all) stay on SDPA."""
    n = query.shape[2]
    if n != 1 or dropout > 0 or query.device.type != "cpu" or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    mask = attention_mask
    if mask is not None:
        mask = mask[:, :, :, :key.shape[2]]
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill_(
                ~mask, torch.finfo(query.dtype).min)
    out = small_query_attention(query, key, value, mask, scaling)
    return out.transpose(1, 2).contiguous(), None


def use_tree_attention(model, batched_decode: bool = False) -> bool:
    """Route a CPU model's SDPA attention through tree_attention_forward (masks are still built by SDPA's rules),
    or with batched_decode through batched_decode_attention_forward (regenerate.py's batched generation).

    Only models that run SDPA switch; eager or flash models are left as they are (load_target refuses the ones
    that would ignore the tree mask, see HONOURS_4D_MASK). Returns whether it switched.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    cfg = model.config
    if (getattr(cfg, "_attn_implementation", None) not in ("sdpa", IMPLEMENTATION)
            or next(model.parameters()).device.type != "cpu"):
        return False
    name, fn = ((IMPLEMENTATION + "_batched", batched_decode_attention_forward) if batched_decode
                else (IMPLEMENTATION, tree_attention_forward))
    AttentionInterface.register(name, fn)
    AttentionMaskInterface.register(name, sdpa_mask)
    cfg._attn_implementation = name
    return True
