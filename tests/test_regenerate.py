"""Self-distillation data (regenerate.py): what batched generation stores is the target's own greedy answer, and
the features stored with it are the target's features of exactly those tokens."""
from __future__ import annotations

import pytest
import torch

from conftest import tiny_llama
from eagle_core.training import regenerate as R
from eagle_core.model.attention import IMPLEMENTATION, use_tree_attention
from eagle_core.model.target import load_target


@pytest.fixture(scope="module")
def gen_target(real_tokenizer):
    t = load_target(model=tiny_llama(seed=4), tokenizer=real_tokenizer, device="cpu")
    assert use_tree_attention(t.model, batched_decode=True)
    assert t.model.config._attn_implementation == IMPLEMENTATION + "_batched"
    return t


def test_generated_answers_and_features_are_the_targets_own(gen_target):
    t = gen_target
    prompts = [t.render_prompt("Hi"), t.render_prompt("Tell me a long story about a cat and a dog, please.")]
    assert len(prompts[0]) != len(prompts[1])          # the batch is left-padded
    out = R.generate_batch(t, prompts, 10, 0.0, bf16=False)
    assert len(out) == 2
    for p, seq in zip(prompts, out):
        assert seq is not None
        ids, feats, mask = seq
        assert ids[:len(p)].tolist() == p
        assert not mask[:len(p)].any() and mask[len(p):].all() and len(ids) > len(p)
        logits, ref = t.forward(ids[None])
        # features: those of a fresh, unpadded forward over the same tokens (fp16 storage)
        torch.testing.assert_close(feats.float(), ref[0].float(), atol=2e-3, rtol=1e-2)
        # answers: greedy under the target
        assert torch.equal(logits[0, len(p) - 1:-1].argmax(-1), ids[len(p):])
