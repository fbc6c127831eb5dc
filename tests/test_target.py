"""The target wrapper: CPU weight pre-packing changes speed, not results; attentions that would ignore the
tree mask are refused."""
import re

import pytest
import torch

from conftest import tiny_llama
from eagle_core.decoding.draft import frozen_linear
from eagle_core.model.attention import IMPLEMENTATION
from eagle_core.model.cpu_kernels import pack_cpu_linears
from eagle_core.model.target import Target, TargetLoadError, load_target


def test_packed_target_matches_plain_kernels(real_tokenizer):
    plain = load_target(model=tiny_llama(seed=3), tokenizer=real_tokenizer, device="cpu", pack=False)
    packed = load_target(model=tiny_llama(seed=3), tokenizer=real_tokenizer, device="cpu", pack=True)
    assert plain.packed_linears == 0
    assert packed.packed_linears == 2 * 7 + 1          # q k v o gate up down per layer, and the LM head
    assert packed.lm_head.packed_weight is not None and getattr(plain.lm_head, "packed_weight", None) is None
    ids = torch.randint(0, 49152, (1, 37))
    for n in (1, 4, 37):                               # one token, a small tree, a prefill
        (a, fa), (b, fb) = plain.forward(ids[:, :n]), packed.forward(ids[:, :n])
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), (n, (a - b).abs().max())
        assert torch.allclose(fa, fb, atol=1e-4, rtol=1e-4)


def test_pack_skips_what_it_cannot_pack():
    m = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 4).to(torch.float16))
    assert pack_cpu_linears(m) == 1                    # fp16 has no oneDNN path here: left as is
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert torch.allclose(m[0](x), x @ m[0].weight.T + m[0].bias, atol=1e-5)


def test_frozen_linear_shares_and_matches():
    w, b = torch.randn(32, 16), torch.randn(32)
    for dt in (torch.float32, torch.bfloat16):
        lin = frozen_linear(w.to(dt), b.to(dt))
        x = torch.randn(5, 16, dtype=dt)
        ref = torch.nn.functional.linear(x, w.to(dt), b.to(dt))
        with torch.no_grad():
            assert torch.allclose(lin(x).float(), ref.float(), atol=2e-2 if dt == torch.bfloat16 else 1e-5)
    same = w.clone()
    assert frozen_linear(same, None).weight.data_ptr() == same.data_ptr()   # no copy of the weight


def test_packing_leaves_the_global_rng_alone(real_tokenizer):
    model = tiny_llama(seed=4)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    target = load_target(model=model, tokenizer=real_tokenizer, device="cpu", pack=True)
    assert target.packed_linears > 0
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("impl", ["flash_attention_2", "flash_attention_3", "flex_attention", "paged|eager",
                                  "kernels-community/flash-attn"])
def test_an_attention_that_ignores_the_tree_mask_is_refused(impl):
    """Tree verification needs its custom 4D mask applied; flash attention keeps only causal + padding, so a
    target running it would silently stop being lossless. Set on the config after building: flash-attn itself
    need not be installed for the refusal."""
    model = tiny_llama(layers=1, seed=5)
    model.config._attn_implementation = impl
    with pytest.raises(TargetLoadError, match=r"(?s)" + re.escape(repr(impl)) + r".*\"sdpa\" or \"eager\""):
        load_target(model=model, device="cpu", pack=False)
    with pytest.raises(TargetLoadError, match=re.escape(repr(impl))):     # a Target built by hand, too
        Target(model=model, tokenizer=None, name="hand-built", device=torch.device("cpu"), dtype=torch.float32)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_attentions_that_apply_the_mask_are_accepted(impl):
    model = tiny_llama(layers=1, seed=5)
    model.config._attn_implementation = impl
    t = load_target(model=model, device="cpu", pack=False)
    assert t.model.config._attn_implementation in (impl, IMPLEMENTATION)


def test_draft_lm_head_is_cached_per_exact_vocabulary(tiny_target):
    """Two draft vocabularies of one size whose first 64 ids sum alike (here: the same first 64 ids, or the
    same ids in another order) are different heads; the same ids again are the cached one."""
    from eagle_core.decoding.draft import draft_lm_head
    base = torch.arange(0, 100)
    tail = torch.cat([base[:64], torch.arange(1000, 1036)])             # same first 64, another tail
    order = torch.cat([base[:64].flip(0), base[64:]])                    # the same ids, another order
    assert base.numel() == tail.numel() == order.numel() and int(base[:64].sum()) == int(tail[:64].sum()) \
        == int(order[:64].sum())
    heads = {}
    for name, vocab in (("base", base), ("tail", tail), ("order", order)):
        ids, lm = draft_lm_head(tiny_target, vocab, torch.float32)
        assert torch.equal(ids, vocab), name
        assert torch.equal(lm.weight, tiny_target.lm_head.weight[vocab]), f"{name}: another vocabulary's rows"
        heads[name] = lm
    assert len({id(h) for h in heads.values()}) == 3
    assert draft_lm_head(tiny_target, base.clone().to(torch.int32), torch.float32)[1] is heads["base"]
