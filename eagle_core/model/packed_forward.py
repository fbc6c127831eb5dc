"""The one Llama forward: one or many sessions' passes as ONE target pass, their tokens packed as rows of one sequence
through every linear layer (the weights read once for all), attention per session over its own KV cache under its
own mask. `lean_forward.lean_llama_forward` is this forward with one part.

Why: on a CPU a decoding pass streams the whole model's weights; a pass over many rows costs far less than as many
one-row passes (SmolLM2-135M on the 2-core Zen 4: 64 rows cost ~3.7 one-row passes). A classroom's thirty trees
verified in one pass cost a few passes where, one after another, they cost thirty.

Each part's attention is exactly what this forward computes for that part alone: the same mask (built by the same
`create_causal_mask` for that part's length, cache and positions), the same attention function, its own cache. The
linear layers see other sessions' rows beside a part's own: where the kernel plan is row-independent
(Target.row_independent) a part's outputs equal its pass alone bit for bit; elsewhere they differ by the kernels'
rounding (fp32: ~1e-6 of a logit), which can only matter at a near-tie (docs/algorithm.md).

The layer body between the linear products (norms, rotary, cache append, attention, residuals, SwiGLU) is
`layer_body.py`'s: the Python reference, operation for operation transformers' (tests/test_lean_forward.py), or
the same operations in C++ where that is built (layer_body.body_for; the same bits, tests/test_layer_body.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import layer_body
from .planned_linear import shared_input_linears


@dataclass
class Part:
    """One session's share of a packed pass: its tokens [1, n], their positions [1, n], its KV cache, its mask and
    which rows need logits (what it would hand `Target.forward` alone: True every row, "last" a prefill's). A pass
    of one part may be a batch [B, n], with positions None (after the cache's entries) and no cache."""
    input_ids: torch.Tensor
    position_ids: torch.Tensor | None
    cache: object
    attention_mask: torch.Tensor | None = None
    logits: bool | str = True

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[1])


def packed_llama_forward(model, parts: list[Part], aux_layers=()) -> list:
    """For each part, the last hidden state of `model.model` after the final norm [B, n, H] for its tokens,
    appending to its cache (a transformers Cache) when it has one: what `model.model(...).last_hidden_state`
    returns for that part alone. With `aux_layers`, (that, [transformers' `hidden_states[i]` for i in aux_layers]):
    the residual stream entering layer i, or for i = L (the number of layers) the final normed state itself.
    Computed in one pass over all parts' rows (several parts: each [1, n])."""
    from transformers.masking_utils import create_causal_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward
    inner = model.model
    cfg = inner.config
    positions = []
    for p in parts:
        pos = p.position_ids
        if pos is None:
            past = p.cache.get_seq_length() if p.cache is not None else 0
            pos = (torch.arange(p.rows, device=p.input_ids.device) + past).unsqueeze(0)
        positions.append(pos)
    if len(parts) == 1:
        ids, pos = parts[0].input_ids, positions[0]
    else:
        ids, pos = torch.cat([p.input_ids for p in parts], dim=1), torch.cat(positions, dim=1)
    h = inner.embed_tokens(ids)
    bounds, start = [], 0
    for p in parts:
        bounds.append((start, start + p.rows))
        start += p.rows
    masks = [create_causal_mask(config=cfg, inputs_embeds=h[:, a:b], attention_mask=p.attention_mask,
                                cache=p.cache, position_ids=q) for p, q, (a, b) in zip(parts, positions, bounds)]
    cos, sin = inner.rotary_emb(h, position_ids=pos)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(cfg._attn_implementation, eager_attention_forward)
    layers = inner.layers[:cfg.num_hidden_layers]
    body = layer_body.body_for(h)
    caches = [p.cache for p in parts]
    aux = {}
    x = body.rms_norm(h, layers[0].input_layernorm) if len(layers) else None
    whole = None if aux_layers else body.q4_layers(layers, h, x, inner.norm, cos, sin, caches, masks, bounds,
                                                   attention)
    if whole is not None:         # every layer as below with one C++ call each, all of them in one call
        h, x = whole
        layers = layers[:0]
    for i, layer in enumerate(layers):
        if i in aux_layers:
            aux[i] = h
        after = layers[i + 1].input_layernorm if i + 1 < len(layers) else inner.norm
        whole = body.q4_layer(layer, i, h, x, after, cos, sin, caches, masks, bounds, attention)
        if whole is not None:     # every product on the GGUF block kernel: the lines below as one C++ call
            h, x = whole
            continue
        attn = layer.self_attn
        q, k, v = shared_input_linears((attn.q_proj, attn.k_proj, attn.v_proj), x)
        out = body.attend(attn, i, q, k, v, cos, sin, caches, masks, bounds, attention)
        h, x = body.residual_norm(h, attn.o_proj.forward(out), layer.post_attention_layernorm)
        mlp = layer.mlp
        gate, up = shared_input_linears((mlp.gate_proj, mlp.up_proj), x)
        h, x = body.residual_norm(h, mlp.down_proj.forward(body.swiglu(mlp.act_fn, gate, up)), after)
    out = x if (len(layers) or whole is not None) else body.rms_norm(h, inner.norm)
    aux[cfg.num_hidden_layers] = out              # hidden_states[L] is the final, normed state
    if len(parts) == 1:
        return [(out, [aux[j] for j in aux_layers]) if aux_layers else out]
    if aux_layers:
        return [(out[:, a:b], [aux[j][:, a:b] for j in aux_layers]) for a, b in bounds]
    return [out[:, a:b] for a, b in bounds]
