"""A Llama decoder layer's body between its linear products: the RMS norms, rotary embedding, the KV cache append,
attention over the cache, the residual adds and SwiGLU's product. packed_forward.py's one layer loop calls it:

  x = norm_0(h)
  per layer:  q, k, v = products(x)                    (planned_linear: the kernel plan's products)
              out = attend(q, k, v)                     rotary, cache append, attention per part
              h, x = residual_norm(h, o_proj(out))      h + o, post-attention norm of it
              g, u = products(x)
              h, x = residual_norm(h, down(swiglu(g, u)), next layer's input norm, or the final norm)

`PYTHON` is the reference: transformers' LlamaDecoderLayer operation for operation (equal bit for bit,
tests/test_lean_forward.py).
"""
from __future__ import annotations

import torch


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


class PythonBody:
    """The reference body: eager torch operations, in transformers' order."""
    name = "python"

    @staticmethod
    def rms_norm(x, norm):
        return _rms_norm(norm, x)

    @staticmethod
    def residual_norm(h, y, norm):
        """(h + y, norm(h + y))."""
        h = h + y
        return h, _rms_norm(norm, h)

    @staticmethod
    def swiglu(act_fn, gate, up):
        return act_fn(gate) * up

    @staticmethod
    def attend(attn, i, q, k, v, cos, sin, caches, masks, bounds, attention):
        """Layer i's attention output [B, n, heads * head_dim] (o_proj's input) from its q, k, v products [B, n, *]:
        rotary, then each part (rows [a, b) of the pass) over its own cache (appended) under its own mask."""
        B, n = q.shape[:2]
        shape = (B, n, -1, attn.head_dim)
        q, k, v = q.view(shape).transpose(1, 2), k.view(shape).transpose(1, 2), v.view(shape).transpose(1, 2)
        q = (q * cos) + (_rotate_half(q) * sin)
        k = (k * cos) + (_rotate_half(k) * sin)
        outs = []
        for cache, mask, (a, b) in zip(caches, masks, bounds):   # each session over its own cache, own mask
            qp, kp, vp = (q, k, v) if len(bounds) == 1 else (q[:, :, a:b], k[:, :, a:b], v[:, :, a:b])
            if cache is not None:
                kp, vp = cache.update(kp, vp, i)
            o, _ = attention(attn, qp, kp, vp, mask, dropout=0.0, scaling=attn.scaling)
            outs.append(o.reshape(B, b - a, -1))
        return outs[0].contiguous() if len(outs) == 1 else torch.cat(outs, dim=1).contiguous()


PYTHON = PythonBody()
