"""Many sessions' passes as ONE target pass: their tokens packed as rows of one sequence through every linear layer
(the weights read once for all), attention per session over its own KV cache under its own mask.

Why: on a CPU a decoding pass streams the whole model's weights; a pass over many rows costs far less than as many
one-row passes (SmolLM2-135M on the 2-core Zen 4: 64 rows cost ~3.7 one-row passes). A classroom's thirty trees
verified in one pass cost a few passes where, one after another, they cost thirty.

Each part's attention is exactly what `lean_forward.lean_llama_forward` computes for that part alone: the same
mask (built by the same `create_causal_mask` for that part's length, cache and positions), the same attention
function, its own cache. The linear layers see other sessions' rows beside a part's own: where the kernel plan is
row-independent (Target.row_independent) a part's outputs equal its pass alone bit for bit; elsewhere they differ
by the kernels' rounding (fp32: ~1e-6 of a logit), which can only matter at a near-tie (docs/algorithm.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .lean_forward import _rms_norm, _rotate_half
from .planned_linear import shared_input_linears


@dataclass
class Part:
    """One session's share of a packed pass: its tokens [1, n], their positions [1, n], its KV cache, its mask and
    which rows need logits (what it would hand `Target.forward` alone: True every row, "last" a prefill's)."""
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    cache: object
    attention_mask: torch.Tensor | None = None
    logits: bool | str = True

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[1])


def packed_llama_forward(model, parts: list[Part], aux_layers=()) -> list:
    """For each part, what `lean_llama_forward(model, part...)` returns (the final normed state [1, n, H], or with
    `aux_layers` (that, [states entering those layers])), computed in one pass over all parts' rows."""
    from transformers.masking_utils import create_causal_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward
    inner = model.model
    cfg = inner.config
    ids = torch.cat([p.input_ids for p in parts], dim=1)
    pos = torch.cat([p.position_ids for p in parts], dim=1)
    h = inner.embed_tokens(ids)
    bounds, start = [], 0
    for p in parts:
        bounds.append((start, start + p.rows))
        start += p.rows
    masks = [create_causal_mask(config=cfg, inputs_embeds=h[:, a:b], attention_mask=p.attention_mask,
                                cache=p.cache, position_ids=p.position_ids) for p, (a, b) in zip(parts, bounds)]
    cos, sin = inner.rotary_emb(h, position_ids=pos)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(cfg._attn_implementation, eager_attention_forward)
    n = h.shape[1]
    aux = {}
    for i, layer in enumerate(inner.layers[:cfg.num_hidden_layers]):
        if i in aux_layers:
            aux[i] = h
        attn = layer.self_attn
        shape = (1, n, -1, attn.head_dim)
        q, k, v = shared_input_linears((attn.q_proj, attn.k_proj, attn.v_proj), _rms_norm(layer.input_layernorm, h))
        q, k, v = q.view(shape).transpose(1, 2), k.view(shape).transpose(1, 2), v.view(shape).transpose(1, 2)
        q = (q * cos) + (_rotate_half(q) * sin)
        k = (k * cos) + (_rotate_half(k) * sin)
        outs = []
        for p, (a, b), mask in zip(parts, bounds, masks):   # each session over its own cache, under its own mask
            kp, vp = p.cache.update(k[:, :, a:b], v[:, :, a:b], i)
            o, _ = attention(attn, q[:, :, a:b], kp, vp, mask, dropout=0.0, scaling=attn.scaling)
            outs.append(o.reshape(1, b - a, -1))
        h = h + attn.o_proj.forward(torch.cat(outs, dim=1).contiguous())
        mlp = layer.mlp
        gate, up = shared_input_linears((mlp.gate_proj, mlp.up_proj), _rms_norm(layer.post_attention_layernorm, h))
        h = h + mlp.down_proj.forward(mlp.act_fn(gate) * up)
    out = _rms_norm(inner.norm, h)
    aux[cfg.num_hidden_layers] = out
    if aux_layers:
        return [(out[:, a:b], [aux[j][:, a:b] for j in aux_layers]) for a, b in bounds]
    return [out[:, a:b] for a, b in bounds]
