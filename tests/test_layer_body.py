"""The C++ layer body (model/layer_body.cpp) computes what the Python body computes, bit for bit, on every kernel plan
(fp32, plain, exact, q4 on a GGUF's blocks): prefills, one-token steps and tree passes over the engine's KV cache
(float64 where the plan is row-independent), packed passes of several sessions, and the caches they leave. Both
equal transformers' own forward. A build of the body with one operation reordered fails the comparison."""
from __future__ import annotations

import collections
import logging

import pytest
import torch

from conftest import quantize_to_gguf, tiny_llama
from eagle_core.decoding.engine import keep_cache_entries, new_kv_cache, tree_attention_mask
from eagle_core.model import layer_body
from eagle_core.model.layer_body import F64, F64_MASK, SDPA, SMALL
from eagle_core.model.packed_forward import Part
from eagle_core.model.target import load_target

ANC = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)


class Counting:
    """The extension, counting its calls and the attention cases it ran."""

    def __init__(self, mod):
        self.mod, self.calls = mod, collections.Counter()

    def __getattr__(self, name):
        fn = getattr(self.mod, name)

        def call(*args):
            self.calls[name] += 1
            if name in ("attend", "q4_layer", "q4_layers"):   # (the products, then attend's arguments)
                at = {"attend": 11, "q4_layer": 26, "q4_layers": 13}[name]
                times = len(args[4]) // 2 if name == "q4_layers" else 1    # q4_layers: every layer's attend
                for _ in range(times):
                    self.calls.update(f"case {c}" for c in args[at])
                    self.calls["gqa" if args[at + 2] else "no gqa"] += 1
            return fn(*args)
        return call


@pytest.fixture(scope="module")
def native():
    body = layer_body.native()
    if body is None:
        pytest.skip(layer_body.why_unavailable())
    return body


@pytest.fixture
def counted(native, monkeypatch):
    body = layer_body.NativeBody(Counting(native.mod))
    monkeypatch.setattr(layer_body, "native", lambda: body)
    return body.mod.calls


def _target(real_tokenizer, kernels, tmp_path):
    model = tiny_llama(vocab_size=1000, hidden=128, layers=3, seed=5)
    with torch.no_grad():   # norm weights other than 1 (their initial value), so that the norm's last product counts
        g = torch.Generator().manual_seed(6)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
    gguf = quantize_to_gguf(model, str(tmp_path / "t.gguf")) if kernels == "q4" else None
    target = load_target(model=model, tokenizer=real_tokenizer, device="cpu", kernels=kernels, gguf_file=gguf)
    assert target.lean
    if kernels == "q4":
        assert target.numerics == "gguf-blocks"
    return target


def _passes(target, how: str, monkeypatch):
    """Logits, features and the cache's entries of a prefill, two one-token steps, two tree passes (the first's
    entries dropped) and a pass without a cache; how: 'python' / 'native' body, or 'transformers'."""
    from eagle_core.decoding.engine import kv_cache_dtype
    monkeypatch.setenv("EAGLE_LENS_NATIVE_LAYER", "1" if how == "native" else "0")
    target.lean = how != "transformers"
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(3, 900, (1, 40), generator=g)
    out = []
    with torch.inference_mode():
        cache = new_kv_cache(64, kv_cache_dtype(target))
        out += target.forward(prompt, past_key_values=cache, logits=True)
        for i, tok in enumerate((17, 230)):
            out += target.forward(torch.tensor([[tok]]), position_ids=torch.tensor([[40 + i]]), past_key_values=cache)
        n = 42
        for toks in ([5, 6, 7, 8], [9, 10, 11, 12]):
            mask = tree_attention_mask(ANC, n, target.dtype, target.device)
            out += target.forward(torch.tensor([toks]), position_ids=torch.tensor([[n, n + 1, n + 1, n + 2]]),
                                  past_key_values=cache, attention_mask=mask)
            keep_cache_entries(cache, n, torch.tensor([n, n + 1]))    # keep the path 0 -> 1
            n += 2
        out += target.forward(torch.tensor([[99]]), position_ids=torch.tensor([[n]]), past_key_values=cache)
        out += [torch.cat([layer.keys for layer in cache.layers]), torch.cat([layer.values for layer in cache.layers])]
        out += target.forward(prompt, logits=True)   # no cache at all
    target.lean = True
    return out


def _equal(ours, theirs):
    assert len(ours) == len(theirs)
    for j, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape and a.dtype == b.dtype, j
        assert torch.equal(a, b), (j, float((a - b).abs().max()))


@pytest.mark.parametrize("kernels", ["fp32", "plain", "exact", "q4", "q4-layer-by-layer"])
def test_native_body_equals_python_and_transformers_bit_for_bit(real_tokenizer, kernels, tmp_path, counted,
                                                                monkeypatch):
    by_layer = kernels == "q4-layer-by-layer"    # q4_layer a call per layer (q4_layers declines: EAGLE-3's aux
    kernels = "q4" if by_layer else kernels      # layers, unstacked products), not every layer in one call
    if by_layer:
        monkeypatch.setattr(layer_body.NativeBody, "q4_layers", lambda self, *a: None)
    target = _target(real_tokenizer, kernels, tmp_path)
    python = _passes(target, "python", monkeypatch)
    assert not counted
    ours = _passes(target, "native", monkeypatch)
    theirs = _passes(target, "transformers", monkeypatch)
    _equal(ours, python)
    _equal(ours, theirs)
    layers = 3
    # every layer's norms and SwiGLU in C++; attention in C++ for the steps and the trees (not the prefills); on the
    # q4 plan those five passes run each layer as one call (q4_layer: products, attention, norms, SwiGLU), and all
    # of a pass's layers as one call (q4_layers: q4_layer after q4_layer)
    whole = 5 if kernels == "q4" else 0
    assert counted["q4_layer"] == (layers * whole if by_layer else 0)
    assert counted["q4_layers"] == (0 if by_layer else whole)
    assert counted["residual_norm"] == 2 * layers * (7 - whole) and counted["swiglu"] == layers * (7 - whole)
    assert counted["attend"] == layers * (5 - whole)
    if target.row_independent:      # a float64 cache
        assert counted[f"case {F64}"] == 3 * layers and counted[f"case {F64_MASK}"] == 2 * layers
    else:
        assert counted[f"case {SDPA}"] == 3 * layers and counted[f"case {SMALL}"] == 2 * layers


@pytest.mark.parametrize("kernels", ["fp32", "exact", "q4"])
def test_a_packed_pass_is_the_same_bits_in_either_body(real_tokenizer, kernels, tmp_path, counted, monkeypatch):
    """Three sessions in one pass (two trees, one one-token step), each over its own cache: the outputs and every
    cache equal between the bodies."""
    from eagle_core.decoding.engine import kv_cache_dtype
    target = _target(real_tokenizer, kernels, tmp_path)
    g = torch.Generator().manual_seed(8)
    prompts = [torch.randint(3, 900, (1, m), generator=g) for m in (12, 30, 7)]

    def run(flag):
        monkeypatch.setenv("EAGLE_LENS_NATIVE_LAYER", flag)
        with torch.inference_mode():
            caches = [new_kv_cache(64, kv_cache_dtype(target)) for _ in prompts]
            for p, c in zip(prompts, caches):
                target.forward(p, past_key_values=c, logits="last")
            parts = []
            for p, c, toks in zip(prompts, caches, ([5, 6, 7, 8], [40], [9, 10, 11, 12])):
                n = p.shape[1]
                if len(toks) == 1:
                    parts.append(Part(torch.tensor([toks]), torch.tensor([[n]]), c))
                else:
                    parts.append(Part(torch.tensor([toks]), torch.tensor([[n, n + 1, n + 1, n + 2]]), c,
                                      tree_attention_mask(ANC, n, target.dtype, target.device)))
            outs = target.forward_packed(parts)
        return [t for lg, f in outs for t in (lg, f)] + [torch.cat([la.keys for la in c.layers]) for c in caches] \
            + [torch.cat([la.values for la in c.layers]) for c in caches]

    python = run("0")
    assert not counted["attend"]
    _equal(run("1"), python)
    # one call per layer for the three sessions: their attention; on the q4 plan one call for the whole pass
    assert counted["q4_layers" if kernels == "q4" else "attend"] == (1 if kernels == "q4" else 3)


@pytest.mark.parametrize("kernels,temperature", [("fp32", 0.0), ("exact", 0.8)])
def test_drafting_and_verification_are_the_same_bits_in_either_body(real_tokenizer, tmp_path, counted, monkeypatch,
                                                                    kernels, temperature):
    """A whole generation (EAGLE-2 dynamic trees drafted by a random head, verified by the target): every cycle's
    tree, each node's q and p, and the text, with the head's layer and the target's in C++ or in Python."""
    from eagle_core.decoding.engine import DecodeConfig, EagleDecoder
    from eagle_core.model.head import random_head
    target = _target(real_tokenizer, kernels, tmp_path)
    head = random_head(target, "shifted", seed=4)

    def run(flag):
        monkeypatch.setenv("EAGLE_LENS_NATIVE_LAYER", flag)
        dec = EagleDecoder(target, head, DecodeConfig(max_new_tokens=20, draft="dynamic", depth=3, top_k=4,
                                                      total_tokens=8, temperature=temperature, seed=5), [1, 400, 17])
        while not dec.done:
            dec.step()
        return dec.new_ids, [([n.token_id for n in r.nodes], [n.q for n in r.nodes], [n.p for n in r.nodes],
                              r.accepted_path) for r in dec.cycles]

    python = run("0")
    assert not counted
    assert run("1") == python
    assert counted["no gqa"] > 0 and counted["gqa"] > 0     # the head's layer and the target's ran in C++


def test_without_a_build_the_python_body_runs_and_says_why(real_tokenizer, monkeypatch, caplog):
    def fail(extra_cflags=()):
        raise RuntimeError("no C++ compiler")
    monkeypatch.setattr(layer_body, "build", fail)
    monkeypatch.setattr(layer_body, "_built", {})
    with caplog.at_level(logging.WARNING, logger=layer_body.__name__):
        assert layer_body.body_for(torch.zeros(1)) is layer_body.PYTHON
    assert "no C++ compiler" in caplog.text and "Python body" in layer_body.why_unavailable()
    model = tiny_llama(vocab_size=1000, hidden=64, layers=2, seed=5)
    target = load_target(model=model, tokenizer=real_tokenizer, device="cpu", kernels="fp32")
    with torch.inference_mode():
        logits, _ = target.forward(torch.tensor([[5, 6, 7]]))
    assert logits.shape == (1, 3, 1000)


@pytest.mark.slow
def test_a_reordered_operation_in_the_cpp_body_fails_the_comparison(real_tokenizer, tmp_path, native, monkeypatch):
    """The comparison can fail: the body built with its norm dividing by the root instead of multiplying by its
    reciprocal (equal in exact arithmetic) parts from the Python body in the last bits."""
    broken = layer_body.NativeBody(layer_body.build(["-DEAGLE_LENS_BROKEN_NORM"]))
    target = _target(real_tokenizer, "exact", tmp_path)
    python = _passes(target, "python", monkeypatch)
    monkeypatch.setattr(layer_body, "native", lambda: broken)
    other = _passes(target, "native", monkeypatch)
    assert any(not torch.equal(a, b) for a, b in zip(other, python))
    assert all(torch.allclose(a, b, atol=1e-3) for a, b in zip(other[:2], python[:2]))


def _attend_f64(mod, q, k, v, kbuf, vbuf, start, mask, scale):
    """layer_body.cpp's float64 attention for one part (rotary made the identity: cos 1, sin 0)."""
    n, d = q.shape[1], kbuf.shape[-1]
    cos, sin = torch.ones(1, 1, n, d), torch.zeros(1, 1, n, d)
    case = F64 if mask is None else F64_MASK
    return mod.attend(q, k, v, cos, sin, d, [0, n], [kbuf], [vbuf], [start],
                      [torch.empty(0) if mask is None else mask], [case], scale, True)[0]


@pytest.mark.parametrize("d", [64, 36, 38])
def test_the_float64_attention_loop_equals_the_reference_and_a_tree_row_its_step(native, d):
    """The float64 cases (a row-independent plan's steps and trees) run layer_body.cpp's own loop, not ATen's GEMMs:
    its output equals attention.small_query_attention in float64 rounded to float32, bit for bit (the two sums differ
    by ~1e-16, below float32's rounding), with grouped heads, head sizes with and without a tail, an ancestry mask;
    and a tree node's row equals a one-token step over the cache that holds just its ancestors."""
    from eagle_core.model.attention import small_query_attention
    H, G, L0, n = 9, 3, 203, 4
    g = torch.Generator().manual_seed(d)
    kbuf = torch.zeros(1, G, L0 + n + 2, d, dtype=torch.float64)
    vbuf = torch.zeros_like(kbuf)
    kbuf[:, :, :L0] = torch.randn(1, G, L0, d, generator=g).double()   # float32 values, as the cache holds
    vbuf[:, :, :L0] = torch.randn(1, G, L0, d, generator=g).double()
    q, k, v = (torch.randn(1, n, w * d, generator=g) for w in (H, G, G))
    scale = d ** -0.5
    # a tree: 0 the root, 1 and 2 its children, 3 a child of 1; the mask as tree_attention_mask builds it
    mask = torch.zeros(1, 1, n, L0 + n + 2)
    mask[..., L0:] = torch.finfo(torch.float32).min
    for i, anc in enumerate(ANC.tolist()):
        for j, a in enumerate(anc):
            if a:
                mask[0, 0, i, L0 + j] = 0.0
    kb, vb = kbuf.clone(), vbuf.clone()
    got = _attend_f64(native.mod, q, k, v, kb, vb, L0, mask, scale)
    keys, values = kb[:, :, :L0 + n], vb[:, :, :L0 + n]
    qh = q.view(1, n, H, d).transpose(1, 2).double()
    ref = small_query_attention(qh, keys, values, mask[..., :L0 + n].double(), scale).float()
    assert torch.equal(got, ref.transpose(1, 2).reshape(1, n, H * d))
    # node 3 (ancestors 0, 1, 3) as a one-token step: the cache holds the prefix and nodes 0 and 1 in a row
    kb2, vb2 = kbuf.clone(), vbuf.clone()
    kb2[:, :, L0:L0 + 2], vb2[:, :, L0:L0 + 2] = kb[:, :, L0:L0 + 2], vb[:, :, L0:L0 + 2]
    step = _attend_f64(native.mod, q[:, 3:], k[:, 3:], v[:, 3:], kb2, vb2, L0 + 2, None, scale)
    assert torch.equal(step[0, 0], got[0, 3])
    # and a value changed anywhere it reads changes it (the comparison can fail)
    kb3, vb3 = kbuf.clone(), vbuf.clone()
    vb3[0, 1, 7, 0] += 1.0
    other = _attend_f64(native.mod, q, k, v, kb3, vb3, L0, mask, scale)
    assert not torch.equal(other, got)
