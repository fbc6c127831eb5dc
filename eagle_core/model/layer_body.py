"""A Llama decoder layer's body between its linear products: the RMS norms, rotary embedding, the KV cache append,
attention over the cache, the residual adds and SwiGLU's product. packed_forward.py's one layer loop calls it:

  x = norm_0(h)
  per layer:  q, k, v = products(x)                    (planned_linear: the kernel plan's products)
              out = attend(q, k, v)                     rotary, cache append, attention per part
              h, x = residual_norm(h, o_proj(out))      h + o, post-attention norm of it
              g, u = products(x)
              h, x = residual_norm(h, down(swiglu(g, u)), next layer's input norm, or the final norm)

`PYTHON` is the reference: transformers' LlamaDecoderLayer operation for operation (equal bit for bit,
tests/test_lean_forward.py). `NativeBody` runs the same segments as ATen calls from C++ (layer_body.cpp): the same
operators in the same order with the same arguments, so the same kernels compute the same bits, without the
interpreter between them (~60 eager operations a layer, one Python call each, against 4 calls); the purely
elementwise steps (rotary; the residual add and the norm's square, and its last three steps) are loops that round
exactly as the eager operations do (the reductions stay ATen's). One step is not ATen's: attention over a float64
cache (a row-independent plan's steps and trees) is our own loop, float64 sums in a fixed order rounded to float32
once, equal to the float64 GEMMs' result but once in ~1e9 values (layer_body.cpp, f64_attention). `head_layer` runs the draft head's layer
(head.HeadDecoderLayer) the same way while drafting. Its attention runs
for parts whose cache layer is the engine's PreallocatedLayer (appended in place) and whose attention is one of
tree_attention_forward's / sdpa_attention_forward's cases it mirrors (a float64 cache's small-query path; the small
path under a float mask; SDPA for one unmasked token); any other pass (a prefill, another cache, eager attention)
takes the Python body's attention for that layer. tests/test_layer_body.py compares the two bit for bit.
On the q4 plan a layer whose seven products all run the GGUF block kernel is one call (`q4_layer`: the segments
above in C++, the kernel compiled in), and a pass whose every layer is, with its products stacked and every cache
the engine's, is one call for all its layers (`q4_layers`): the same calls in the same order, so the same bits.

The extension is built with torch.utils.cpp_extension by setup.sh (`python -m eagle_core.model.layer_body`), else at
first use, and cached beside the GGUF block kernel (gguf_blocks.build_directory). Where it cannot be built, the
Python body runs and the log says why once. EAGLE_LENS_NATIVE_LAYER=0 keeps the Python body.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from .attention import MAX_QUERIES, tree_attention_forward
from .gguf_blocks import cpu_flags, load_extension, stacked
from .planned_linear import GGUF, PlannedLinear, stock_on

_SOURCE = os.path.join(os.path.dirname(__file__), "layer_body.cpp")
_GGUF_SOURCE = os.path.join(os.path.dirname(__file__), "gguf_blocks.cpp")
# -march=native: the float64 attention loop's four partial sums in vector registers (the build is cached per CPU);
# -ffp-contract=off: no fused multiply-adds the eager operations do not make; -fopenmp: at::parallel_for's threads
_CFLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fopenmp"]
_lock = threading.Lock()
_built: dict = {}
log = logging.getLogger(__name__)


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
    def q4_layer(layer, i, h, x, after, cos, sin, caches, masks, bounds, attention):
        return None   # the segments, one by one (NativeBody runs a whole q4 layer as one call)

    @staticmethod
    def q4_layers(layers, h, x, final_norm, cos, sin, caches, masks, bounds, attention):
        return None   # layer by layer (NativeBody runs every q4 layer of a pass as one call)

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

F64, F64_MASK, SMALL, SDPA = 0, 1, 2, 3     # layer_body.cpp's attention cases
_NO_MASK = torch.empty(0)


def _preallocated(cache, i: int):
    """Layer i of `cache` where it is an initialized engine.PreallocatedLayer (its buffers `_k`, `_v` and its
    `keys`/`values` views of them), else None."""
    layers = getattr(cache, "layers", None)
    if layers is None or i >= len(layers) or getattr(cache, "offloading", False):
        return None
    layer = layers[i]
    if type(layer).__name__ != "PreallocatedLayer" or not layer.is_initialized:
        return None
    return layer


def attention_case(attention, attn, n: int, key_dtype, query, mask) -> int | None:
    """Which of layer_body.cpp's cases computes `attention(attn, query, keys, values, mask, dropout=0.0,
    scaling=attn.scaling)` for n query tokens over keys of `key_dtype`, or None (the Python body's attention)."""
    if query.device.type != "cpu":
        return None
    tree = attention is tree_attention_forward
    if tree and key_dtype == torch.float64 and query.dtype != torch.float64:
        if n <= MAX_QUERIES and n == 1 and mask is None:
            return F64
        if n <= MAX_QUERIES and mask is not None and mask.dtype != torch.bool:
            return F64_MASK
        return None
    if key_dtype != query.dtype:
        return None
    if tree and mask is not None and mask.dtype != torch.bool and 1 < n <= MAX_QUERIES:
        return SMALL
    if (tree or attention is sdpa_attention_forward) and n == 1 and mask is None:
        if getattr(attn, "num_key_value_groups", 1) > 1 and attn.head_dim > 256:
            return None                        # sdpa_attention_forward's pack_gqa path: not mirrored
        return SDPA
    return None


class NativeBody(PythonBody):
    """The same body as ATen calls from C++ (layer_body.cpp)."""
    name = "native"

    def __init__(self, mod):
        self.mod = mod

    def rms_norm(self, x, norm):
        return self.mod.rms_norm(x, norm.weight, norm.variance_epsilon)

    def residual_norm(self, h, y, norm):
        return self.mod.residual_norm(h, y, norm.weight, norm.variance_epsilon)

    def swiglu(self, act_fn, gate, up):
        if type(act_fn).__name__ != "SiLUActivation":
            return act_fn(gate) * up
        return self.mod.swiglu(gate, up)

    @staticmethod
    def _attend_args(attn, i, q, caches, masks, bounds, attention):
        """(cache layers, the C++ attend's arguments after cos and sin) for layer i, or None where a part takes the
        Python body's attention (not the engine's cache, no C++ case, a full cache)."""
        layers, kbufs, vbufs, starts, flat, ms, cases = [], [], [], [], [], [], []
        for cache, mask, (a, b) in zip(caches, masks, bounds):
            layer = _preallocated(cache, i)
            if layer is None:
                return None
            start = layer.keys.shape[-2]
            case = attention_case(attention, attn, b - a, layer._k.dtype, q, mask)
            if case is None or start + b - a > layer.capacity:   # (a full cache: the Python body raises)
                return None
            layers.append(layer)
            kbufs.append(layer._k)
            vbufs.append(layer._v)
            starts.append(start)
            flat += (a, b)
            ms.append(_NO_MASK if mask is None else mask)
            cases.append(case)
        return layers, (attn.head_dim, flat, kbufs, vbufs, starts, ms, cases, attn.scaling,
                        getattr(attn, "num_key_value_groups", 1) > 1)

    @staticmethod
    def _keep_views(layers, got, first: int):
        for j, layer in enumerate(layers):
            layer.keys, layer.values = got[first + 2 * j], got[first + 1 + 2 * j]

    def attend(self, attn, i, q, k, v, cos, sin, caches, masks, bounds, attention):
        args = self._attend_args(attn, i, q, caches, masks, bounds, attention)
        if args is None:
            return PythonBody.attend(attn, i, q, k, v, cos, sin, caches, masks, bounds, attention)
        got = self.mod.attend(q, k, v, cos, sin, *args[1])
        self._keep_views(args[0], got, 1)
        return got[0]

    def q4_layer(self, layer, i, h, x, after, cos, sin, caches, masks, bounds, attention):
        """Layer i as ONE call (layer_body.cpp's q4_layer) where every product of it runs the GGUF block kernel at
        this pass's rows: (h, x) as packed_forward's loop computes them with this body, the same calls in C++; else
        None (the loop runs the layer's segments)."""
        if not q4_layer_enabled():
            return None
        products = q4_products(layer, x.numel() // x.shape[-1])
        if products is None:
            return None
        attn = layer.self_attn
        args = self._attend_args(attn, i, x, caches, masks, bounds, attention)
        if args is None:
            return None
        post = layer.post_attention_layernorm
        got = self.mod.q4_layer(h, x, *products, post.weight, post.variance_epsilon, after.weight,
                                after.variance_epsilon, cos, sin, *args[1])
        self._keep_views(args[0], got, 2)
        return got[0], got[1]

    def q4_layers(self, layers, h, x, final_norm, cos, sin, caches, masks, bounds, attention):
        """Every layer of the pass as ONE call (layer_body.cpp's q4_layers: q4_layer after q4_layer) where each
        would run q4_layer with stacked products and every part's cache is the engine's in every layer; else None
        (the loop goes layer by layer). Returns (h, x) after the last layer, its caches' views updated."""
        if not q4_layer_enabled() or stock_on() or not len(layers):
            return None
        rows = x.numel() // x.shape[-1]
        model = getattr(layers[0], "_eagle_q4_model", None)   # kept on layer 0 (a pass slices the ModuleList anew)
        if model is None or model.final_norm is not final_norm or model.n != len(layers) or not model.valid(rows):
            model = _Q4Model(layers, final_norm)
            model.final_norm, model.n = final_norm, len(layers)
            layers[0]._eagle_q4_model = model
            if not model.valid(rows):
                return None
        if model.guard is not None:
            model.guard.check()     # the plan's row probe at this thread count (as each product's call checks)
        attn = layers[0].self_attn
        kbufs, vbufs, starts, views = [], [], [], []
        flat, ms, cases, dtypes = [], [], [], []
        for cache, mask, (a, b) in zip(caches, masks, bounds):
            first = _preallocated(cache, 0)
            if first is None:
                return None
            case = attention_case(attention, attn, b - a, first._k.dtype, x, mask)
            if case is None:
                return None
            dtypes.append(first._k.dtype)   # every layer's cache in it (one case per part for all layers)
            flat += (a, b)
            ms.append(_NO_MASK if mask is None else mask)
            cases.append(case)
        for i in range(len(layers)):
            for cache, (a, b), dtype in zip(caches, bounds, dtypes):
                layer = _preallocated(cache, i)
                if layer is None or layer._k.dtype != dtype:
                    return None
                start = layer.keys.shape[-2]
                if start + b - a > layer.capacity:   # (a full cache: the Python body raises)
                    return None
                kbufs.append(layer._k)
                vbufs.append(layer._v)
                starts.append(start)
                views.append((layer, start + b - a))
        got = self.mod.q4_layers(h, x, model.weights, model.shapes, model.eps, cos, sin, attn.head_dim, flat, kbufs,
                                 vbufs, starts, ms, cases, attn.scaling, getattr(attn, "num_key_value_groups", 1) > 1)
        for layer, end in views:   # what attend returns as a cache's new views: its buffers' first `end` entries
            layer.keys, layer.values = layer._k[:, :, :end], layer._v[:, :, :end]
        return got[0], got[1]


class _Q4Model:
    """q4_layers' per-layer arguments for a stack of layers, made once: every layer's seven products on GGUF blocks
    with q/k/v and gate/up stacked (q4_products), SwiGLU. `valid(rows)` says, in one loop over plain attributes,
    whether they still hold for a pass of `rows` rows (the plan's tables and the blocks are the ones they were
    made from: a replan, a set_kernel or a dtype change between passes makes them stale)."""

    def __init__(self, layers, final_norm):
        self.weights, self.shapes, self.eps, self.mods, self.blocks = [], [], [], [], []
        self.ok = True
        for i, layer in enumerate(layers):
            products = q4_products(layer, 1)
            if products is None or len(products[0]) != 1 or len(products[6]) != 1:
                self.ok = False      # a layer off the blocks at one row, or products not stacked: layer by layer
                return
            qkv, qkv_kind, qkv_out, o, o_kind, o_out, gu, gu_kind, gu_out, d, d_kind, d_out = products
            post = layer.post_attention_layernorm
            after = layers[i + 1].input_layernorm if i + 1 < len(layers) else final_norm
            self.weights += [qkv[0], o, gu[0], d, post.weight, after.weight]
            self.shapes += [qkv_kind, *qkv_out, o_kind, o_out, gu_kind, *gu_out, d_kind, d_out]
            self.eps += [post.variance_epsilon, after.variance_epsilon]
            attn, mlp = layer.self_attn, layer.mlp
            mods = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
            self.mods += mods
            self.blocks += [m.gguf_blocks for m in mods]
        self.guard = self.mods[0].guard if self.mods else None

    def valid(self, rows: int) -> bool:
        for m, b in zip(self.mods, self.blocks):
            t = m.table
            if m.gguf_blocks is not b or t[rows if rows < len(t) else -1] != GGUF:
                return False
        return self.ok and bool(self.mods)


def q4_products(layer, rows: int):
    """q4_layer's product arguments for a decoder layer whose seven products all run the GGUF block kernel at
    `rows` rows (the kernel plan's tables), without biases, with SwiGLU: (q/k/v packs, kind, splits, o pack, kind,
    out, gate/up packs, kind, splits, down pack, kind, out); else None. The packs are made once per layer."""
    attn, mlp = layer.self_attn, layer.mlp
    mods = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    if stock_on() or not all(isinstance(m, PlannedLinear) and m.gguf_blocks is not None and m.bias is None
                             and m.kernel_for(rows) == GGUF for m in mods):
        return None
    if type(mlp.act_fn).__name__ != "SiLUActivation":
        return None
    if mods[0].guard is not None:
        mods[0].guard.check()     # the plan's row probe at this thread count (as each product's call checks)
    cached = getattr(layer, "_eagle_q4_products", None)
    if cached is not None and cached[0] == [id(m.gguf_blocks) for m in mods]:
        return cached[1]

    def group(ms):
        blocks = [m.gguf_blocks for m in ms]
        if any(b.kind != blocks[0].kind for b in blocks):
            return None
        stack = stacked(blocks)
        packs = [stack[1]] if stack is not None else [b.packed for b in blocks]
        return packs, blocks[0].kind, [b.out_features for b in blocks]
    qkv, gu = group(mods[:3]), group(mods[4:6])
    if qkv is None or gu is None:
        return None
    o, d = attn.o_proj.gguf_blocks, mlp.down_proj.gguf_blocks
    products = (*qkv, o.packed, o.kind, o.out_features, *gu, d.packed, d.kind, d.out_features)
    layer._eagle_q4_products = ([id(m.gguf_blocks) for m in mods], products)
    return products


def head_layer(layer, x, cos, sin, cache, attn_mask):
    """head.HeadDecoderLayer.forward (attention, residual, post-attention norm, SwiGLU MLP, residual) with the C++
    body, where it applies: drafting (no autograd, a CPU head) over its HeadCache or HeadParts under additive masks,
    the small-query path of HeadAttention._attend. None elsewhere (training, a prefill without a mask, no build):
    the caller runs its Python layer. The same operations in the same order as the Python layer, so the same bits."""
    if torch.is_grad_enabled() or x.device.type != "cpu" or not enabled():
        return None
    mlp, attn = layer.mlp, layer.self_attn
    if type(mlp.act_fn).__name__ != "SiLUActivation":
        return None
    B, n, _ = x.shape
    parts = getattr(cache, "parts", None)
    if parts is None:
        if cache is None or attn_mask is None:
            return None
        parts = [(cache, attn_mask, 0, n)]
    flat, kbufs, vbufs, starts, masks = [], [], [], [], []
    for c, mask, a, b in parts:
        if (mask is None or mask.dtype == torch.bool or b - a > MAX_QUERIES or not hasattr(c, "length")
                or c.length + b - a > c.k.shape[2]):
            return None
        flat += (a, b)
        kbufs.append(c.k)
        vbufs.append(c.v)
        starts.append(c.length)
        masks.append(mask)
    body = native()
    if body is None:
        return None
    q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    got = body.mod.attend(q, k, v, cos.unsqueeze(1), sin.unsqueeze(1), attn.head_dim, flat, kbufs, vbufs, starts,
                          masks, [SMALL] * len(parts), attn.head_dim ** -0.5, False)
    for c, _, a, b in parts:
        c.length += b - a
    norm = layer.post_attention_layernorm
    x, xn = body.mod.residual_norm(x, attn.o_proj(got[0]), norm.weight, norm.variance_epsilon)
    return x + mlp.down_proj(body.mod.swiglu(mlp.gate_proj(xn), mlp.up_proj(xn)))


def _build_name(extra_cflags=()) -> str:
    h = hashlib.sha1(open(_SOURCE, "rb").read() + " ".join(_CFLAGS + list(extra_cflags)).encode())
    h.update(open(_GGUF_SOURCE, "rb").read())   # included by layer_body.cpp
    h.update(cpu_flags().encode())   # -march=native: one build per CPU
    h.update(torch.__version__.encode())
    return "eagle_layer_body_" + h.hexdigest()[:12]


def build(extra_cflags=()):
    """Compile layer_body.cpp (or load its cached build); one builder at a time per build folder (an flock, as
    gguf_blocks.build). extra_cflags: the tests' variants (-DEAGLE_LENS_BROKEN_NORM: a norm equal in exact
    arithmetic and not in bits, which the bit-for-bit tests must see)."""
    return load_extension(_build_name(extra_cflags), _SOURCE, _CFLAGS + list(extra_cflags), ["-fopenmp"])


def native() -> NativeBody | None:
    """The C++ body, or None where it cannot be built (`why_unavailable`; logged once)."""
    with _lock:
        if "body" not in _built:
            try:
                _built["body"] = NativeBody(build())
            except Exception as exc:   # no compiler, no ninja, a build error: the Python body
                _built["body"] = None
                _built["why"] = f"the C++ layer body could not be built ({str(exc)[:200]}); the Python body runs"
                log.warning(_built["why"])
        return _built["body"]


def why_unavailable() -> str | None:
    return None if native() is not None else _built.get("why")


def q4_layer_enabled() -> bool:
    """EAGLE_LENS_Q4_LAYER=0 runs a q4 layer's segments one call each (for comparing; the same bits)."""
    return os.environ.get("EAGLE_LENS_Q4_LAYER", "1") not in ("", "0")


def enabled() -> bool:
    return os.environ.get("EAGLE_LENS_NATIVE_LAYER", "1") not in ("", "0")


def body_for(h: torch.Tensor) -> PythonBody:
    """The body a pass over `h` runs: the C++ one on a CPU where it is built and not switched off, else Python."""
    if h.device.type == "cpu" and enabled():
        body = native()
        if body is not None:
            return body
    return PYTHON


if __name__ == "__main__":   # setup.sh: build it now, not in the first process that needs it
    body = native()
    print("C++ layer body: built" if body is not None else f"C++ layer body: none ({why_unavailable()})")
