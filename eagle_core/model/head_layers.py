"""What both kinds of draft head share: the checkpoint file name, the load error, the head's KV cache, its attention
(head.py: EAGLE-1's; head3.py widens q/k/v to EAGLE-3's 2H input) and the shape check that runs before a head is
built (a config that does not fit its weights is refused before anything large is allocated)."""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import rotate_half

from .attention import MAX_QUERIES, small_query_attention

HEAD_WEIGHTS = "model.safetensors"


class HeadLoadError(ValueError):
    """A head that cannot be loaded or does not fit the target; the message is meant for the user."""


def stored_shapes(folder: str) -> dict[str, tuple[int, ...]] | None:
    """{name: shape} of a head's safetensors file, read from its header (no tensor is loaded); None without one."""
    path = os.path.join(folder, HEAD_WEIGHTS)
    if not os.path.exists(path):
        return None
    with safe_open(path, framework="pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}


def check_shapes(build, found: dict[str, tuple[int, ...]], folder: str, rename=lambda k: k) -> None:
    """Raise HeadLoadError when a weight in `found` (the file's names, mapped by `rename`) has another shape than
    the head `build()` makes from its config: built on the meta device, so a config of the wrong size allocates
    nothing. Names the head does not have are left to the loader's own check."""
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in build().state_dict().items()}
    for name, shape in found.items():
        want = expected.get(rename(name))
        if want is not None and tuple(shape) != want:
            raise HeadLoadError(f"head weights in {folder} do not fit its config.json: {name} is "
                                f"{'x'.join(map(str, shape))}, the config makes it {'x'.join(map(str, want))}")


class HeadCache:
    """Preallocated KV cache of the head's single layer: committed entries, then (while drafting) tree entries."""

    def __init__(self, n_kv: int, head_dim: int, max_len: int, device, dtype):
        self.k = torch.zeros(1, n_kv, max_len, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor):
        n = k.shape[2]
        if self.length + n > self.k.shape[2]:
            raise RuntimeError("head KV cache is full")
        self.k[:, :, self.length:self.length + n] = k
        self.v[:, :, self.length:self.length + n] = v
        self.length += n
        return self.k[:, :, :self.length], self.v[:, :, :self.length]


def _qkv_bias(cfg) -> bool:
    """Whether q, k and v carry a bias (o_proj never does, in EAGLE's code as in Qwen2).

    Released EAGLE configs say so with `qkv_bias` (set for Qwen-type targets, and it wins when present, as in
    EAGLE's own code); the heads this app saves say it with `attention_bias`.
    """
    qkv_bias = getattr(cfg, "qkv_bias", None)
    return bool(getattr(cfg, "attention_bias", False) if qkv_bias is None else qkv_bias)


class HeadParts:
    """Many drafting sessions' rows in one head forward (decoding/draft.py, `run_together`): in place of one cache
    and one mask, each session's cache, its additive mask [1, 1, n, L + n] and its rows [a, b) of the packed input.
    The linear layers read the weights once for every row; attention stays each session's own."""

    def __init__(self, parts: list[tuple[HeadCache, torch.Tensor, int, int]]):
        self.parts = parts


class HeadAttention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        b = _qkv_bias(cfg)
        self.q_proj = nn.Linear(cfg.hidden_size, self.n_heads * self.head_dim, bias=b)
        self.k_proj = nn.Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=b)
        self.v_proj = nn.Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=b)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x, cos, sin, cache: HeadCache | None, attn_mask):
        B, n, _ = x.shape
        q = self.q_proj(x).view(B, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, n, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, n, self.n_kv, self.head_dim).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if isinstance(cache, HeadParts):     # each session over its own cache, under its own mask
            o = torch.cat([self._attend(q[:, :, a:b], *c.append(k[:, :, a:b], v[:, :, a:b]), mask)
                           for c, mask, a, b in cache.parts], dim=2)
            return self.o_proj(o.transpose(1, 2).reshape(B, n, -1))
        if cache is not None:
            k, v = cache.append(k, v)
        return self.o_proj(self._attend(q, k, v, attn_mask).transpose(1, 2).reshape(B, n, -1))

    def _attend(self, q, k, v, attn_mask):
        """Attention of queries [B, heads, n, d] over keys/values [B, kv heads, L, d]: [B, heads, n, d]."""
        n = q.shape[2]
        if attn_mask is not None and n <= MAX_QUERIES:  # drafting: a few queries over the cache, no K/V copies
            return small_query_attention(q, k, v, attn_mask)
        rep = self.n_heads // self.n_kv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if attn_mask is None:  # plain causal over a fresh sequence (training)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)


