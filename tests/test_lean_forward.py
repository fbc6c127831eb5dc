"""The lean Llama forward (model/lean_forward.py) computes transformers' LlamaModel.forward bit for bit: prefill,
one-token steps, tree passes under an ancestry mask, on the fp32 and bf16 kernels; other models keep HF's forward."""
import pytest
import torch

from eagle_core.decoding.engine import new_kv_cache, tree_attention_mask
from eagle_core.model.lean_forward import lean_llama_forward, supports
from eagle_core.model.target import load_target
from tests.conftest import tiny_llama


def _passes(target, lean: bool, cache_dtype=None):
    """Logits and features of a prefill, two one-token steps and a 4-node tree pass, with `lean` on or off."""
    target.lean = lean
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(3, 900, (1, 40), generator=g)
    anc = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    out = []
    with torch.inference_mode():
        cache = new_kv_cache(64, cache_dtype)
        out += target.forward(prompt, past_key_values=cache, logits=True)
        for i, tok in enumerate((17, 230)):
            out += target.forward(torch.tensor([[tok]]), position_ids=torch.tensor([[40 + i]]), past_key_values=cache)
        n = 42
        out += target.forward(torch.tensor([[5, 6, 7, 8]]), position_ids=torch.tensor([[n, n + 1, n + 1, n + 2]]),
                              past_key_values=cache, attention_mask=tree_attention_mask(anc, n, target.dtype,
                                                                                       target.device))
        out += target.forward(prompt, logits=True)   # no cache at all
    return out


@pytest.mark.parametrize("kernels,cache_dtype", [("fp32", None), ("plain", None), ("bf16", torch.float64)])
def test_lean_forward_equals_transformers_bit_for_bit(real_tokenizer, kernels, cache_dtype):
    model = tiny_llama(vocab_size=1000, hidden=64, layers=3, seed=5)
    target = load_target(model=model, tokenizer=real_tokenizer, device="cpu", kernels=kernels)
    assert target.lean, "a plain Llama takes the lean forward"
    ours, theirs = _passes(target, True, cache_dtype), _passes(target, False, cache_dtype)
    assert len(ours) == len(theirs) == 10
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        assert torch.equal(a, b), float((a - b).abs().max())


def test_bit_for_bit_comparison_sees_a_reordered_operation(real_tokenizer, monkeypatch):
    """The comparison above can fail: the same norm written another way (divide by the root instead of multiplying
    by its reciprocal, equal in exact arithmetic) already parts from transformers in the last bits. (The Python
    body's norm; test_layer_body breaks the C++ body's the same way.)"""
    monkeypatch.setenv("EAGLE_LENS_NATIVE_LAYER", "0")
    import eagle_core.model.layer_body as lb
    import eagle_core.model.lean_forward as lf
    model = tiny_llama(vocab_size=1000, hidden=64, layers=2, seed=5)
    ids = torch.randint(3, 900, (1, 12), generator=torch.Generator().manual_seed(0))

    def other_norm(norm, x):
        h = x.to(torch.float32)
        return norm.weight * (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)).to(x.dtype)
    with torch.inference_mode():
        ref = model.model(input_ids=ids).last_hidden_state
        assert torch.equal(lf.lean_llama_forward(model, ids), ref)
        monkeypatch.setattr(lb, "_rms_norm", other_norm)
        other = lf.lean_llama_forward(model, ids)
    assert not torch.equal(other, ref)
    assert torch.allclose(other, ref, atol=1e-4)


def test_other_models_keep_the_transformers_forward(real_tokenizer, monkeypatch):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg = Qwen2Config(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2)
    qwen = Qwen2ForCausalLM(cfg).eval()
    assert not supports(qwen)
    hooked = tiny_llama(vocab_size=1000, layers=1)
    handle = hooked.model.layers[0].register_forward_hook(lambda *a: None)
    assert not supports(hooked), "a hook on a layer would be skipped by the lean loop"
    handle.remove()
    assert supports(hooked)
    monkeypatch.setenv("EAGLE_LENS_NO_LEAN", "1")
    assert not supports(hooked)
    target = load_target(model=qwen, tokenizer=real_tokenizer, device="cpu", kernels="fp32")
    assert target.lean is False
    with torch.inference_mode():
        logits, feats = target.forward(torch.tensor([[5, 6, 7]]))
    assert logits.shape == (1, 3, 1000) and feats.shape == (1, 3, 64)
