"""The target wrapper: CPU weight pre-packing changes speed, not results."""
import torch

from conftest import tiny_llama
from eagle_core.decoding.draft import frozen_linear
from eagle_core.model.cpu_kernels import pack_cpu_linears
from eagle_core.model.target import load_target


def test_packed_target_matches_plain_kernels(real_tokenizer):
    plain = load_target(model=tiny_llama(seed=3), tokenizer=real_tokenizer, device="cpu", pack=False)
    packed = load_target(model=tiny_llama(seed=3), tokenizer=real_tokenizer, device="cpu", pack=True)
    assert plain.packed_linears == 0
    assert packed.packed_linears == 2 * 7 + 1          # q k v o gate up down per layer, and the LM head
    assert hasattr(packed.lm_head, "_packed_weight") and not hasattr(plain.lm_head, "_packed_weight")
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
