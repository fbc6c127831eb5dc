"""Integration on the embedded SmolLM2-135M-Instruct (GGUF, dequantised): real target, real tokenizer."""
from __future__ import annotations

import json
import os

import pytest
import torch

from conftest import tree_vs_steps
from eagle_core.decoding.engine import generate
from eagle_core.model.head import SHIPPED_HEADS, resolve_head
from eagle_core.model.target import load_target

pytestmark = [pytest.mark.model, pytest.mark.slow]   # SmolLM2-135M on a CPU: minutes

PROMPTS = ["How can I learn Python quickly?", "Write a haiku about the sea.", "What is 17 times 23?"]


@pytest.fixture(scope="module")
def smollm():
    torch.set_num_threads(2)
    yield load_target(kernels="auto")   # the plan users get (bf16-linear on an AMX CPU, fp32 elsewhere)
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def smollm_bf16():
    """The bf16-linear model forced (the auto plan picks it on an AMX CPU by timing, which a busy machine can
    tip): the tests of that model's exactness must not depend on a timing."""
    from conftest import skip_without_bf16
    skip_without_bf16()
    torch.set_num_threads(2)
    target = load_target(kernels="bf16")
    if target.kernel_plan.get("bf16_refused"):   # a Zen 4's AVX512-BF16: not exact here, so not built (cpu_kernels)
        torch.set_num_threads(1)
        pytest.skip(f"the plan refused bf16: {target.kernel_plan['bf16_refused']}")
    yield target
    torch.set_num_threads(1)


def _heads(target):
    specs = ["random"] + [s for s in ("shifted", "unshifted")
                          if os.path.exists(os.path.join(SHIPPED_HEADS[s], "config.json"))]
    return {s: resolve_head(s, target) for s in specs}


def test_embedded_target_feature_is_lm_head_input(smollm):
    ids = torch.tensor([smollm.render_prompt("How can I")])
    logits, feats = smollm.forward(ids)
    ref = smollm.model(ids, output_hidden_states=True)
    torch.testing.assert_close(feats, ref.hidden_states[-1])
    torch.testing.assert_close(logits, ref.logits)
    assert smollm.tokenizer.convert_tokens_to_ids("<|im_end|>") in smollm.stop_token_ids


def test_greedy_identity_on_embedded_target(smollm):
    """The real target, the shipped heads (random where absent), the CPU defaults and the wide shapes."""
    from dataclasses import replace

    from eagle_core.decoding.engine import default_config
    heads = _heads(smollm)
    shifted = heads.get("shifted", heads["random"])
    unshifted = heads.get("unshifted", heads["random"])
    cpu = replace(default_config("cpu", smollm.numerics), max_new_tokens=32, record_topk=0)
    # the plan's own default draft (q8 beside the block kernels, else mixed), the other one, and fp32 drafts
    other = "mixed" if cpu.draft_dtype == "q8" else "q8"
    runs = [(shifted, cpu), (shifted, replace(cpu, draft="dynamic", depth=4, top_k=4, total_tokens=12)),
            (shifted, replace(cpu, draft_dtype=other)),
            (unshifted, replace(cpu, draft="chain", depth=3, draft_vocab=0, draft_dtype=""))]
    for prompt in PROMPTS[:2]:
        ids = smollm.render_prompt(prompt)
        # the reference: plain decoding with the same kernels (what EAGLE is exact for, Target.numerics); where
        # those are fp32, it is also stock transformers' generate
        ref = generate(smollm, None, replace(cpu, draft="vanilla"), ids).token_ids
        if smollm.numerics == "float32":
            hf = smollm.model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False,
                                       eos_token_id=smollm.stop_token_ids)[0, len(ids):].tolist()
            assert ref == hf
        for head, cfg in runs:
            got = generate(smollm, head, cfg, ids)
            assert got.token_ids == ref, (prompt, head.path, cfg, smollm.numerics)


def test_bf16_tree_pass_equals_one_token_steps_bit_for_bit(smollm_bf16):
    smollm = smollm_bf16
    """On the embedded target with the bf16-linear model: a tree node's logits are the one-token step's, bit for
    bit, with attention summed in float64 (the engine's cache); with a float32 cache the orders of the sums over
    keys differ and bf16 rounding of the next layer's input amplifies that to visible logit differences."""
    from eagle_core.decoding.engine import kv_cache_dtype
    assert smollm.numerics == "bf16-linear"
    assert kv_cache_dtype(smollm) == torch.float64
    assert tree_vs_steps(smollm, torch.float64)[0] == [0.0] * 4
    assert max(tree_vs_steps(smollm, None)[0]) > 1e-3


def test_bf16_numerics_keep_greedy_identity_on_mt_bench(smollm_bf16):
    smollm = smollm_bf16
    """The numerical model the CPU plan picks here, on real prompts: EAGLE (the speed default and EAGLE-1's
    25-node tree) equals plain decoding with the same kernels on 6 MT-bench-like prompts x 48 tokens. Before
    attention was summed in float64 (model/attention.py) this parted on 6 of 10 MT-bench prompts in 64 tokens."""
    from dataclasses import replace

    from eagle_core.decoding.engine import default_config
    assert smollm.numerics == "bf16-linear"
    head = _heads(smollm).get("shifted") or _heads(smollm)["random"]
    cpu = replace(default_config("cpu"), max_new_tokens=48, record_topk=0)
    prompts = ["Compose an engaging travel blog post about a recent trip to Hawaii.",
               "Draft a professional email seeking your supervisor's feedback on a report.",
               "Describe a vivid and unique character, using strong imagery.",
               "Help me construct a catchy, yet scientifically accurate, headline for an article.",
               "Write a persuasive essay to convince your introverted friend to volunteer.",
               "Imagine you are writing a blog post comparing two popular smartphone models."]
    for prompt in prompts:
        ids = smollm.render_prompt(prompt)
        ref = generate(smollm, None, replace(cpu, draft="vanilla"), ids).token_ids
        for cfg in (cpu, replace(cpu, tree="mc_sim_7b_63")):
            assert generate(smollm, head, cfg, ids).token_ids == ref, (prompt, cfg.tree)


def test_cli_on_embedded_target(capsys):
    from eagle_core.generate import main
    rc = main(["--prompt", "How can I", "--max-new-tokens", "8", "--json", "--head", "random"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["new_tokens"] == 8 and d["config"]["draft"] == "static"


def test_nucleus_sampling_stays_in_the_nucleus(smollm):
    """T = 0.5, top-p = 0.5 with the shipped head, the CPU defaults and the app's tree (siblings, so a narrow nucleus
    leaves some out): no emitted token lies outside the target's nucleus (the old verifier kept drafted children
    with q = 0, e.g. <|im_end|> after a few tokens)."""
    from dataclasses import replace

    from eagle_core.decoding.engine import EagleDecoder, default_config
    from eagle_core.decoding.sampling import warp_logits
    head = _heads(smollm).get("shifted")
    if head is None:
        pytest.skip("no shipped head")
    ids = smollm.render_prompt("How can I improve my sleep?")
    cfg = replace(default_config("cpu"), tree="smollm2-cpu-tree", temperature=0.5, top_p=0.5, max_new_tokens=4,
                  record_topk=0)
    support: dict[tuple, set] = {}    # prefix -> the target's nucleus (top-p 0.52: slack for kernel rounding)
    # seeds x 4 tokens (80 took 199 s on the slowest host, an AVX2 Zen 3 sharing its 2 cores: the parallel phase's
    # tail; the nucleus on every warper setting is test_exactness.py's law grid on small models)
    outside, skipped, n = [], 0, 40
    for seed in range(n):
        dec = EagleDecoder(smollm, head, replace(cfg, seed=seed), ids)
        while not dec.done:
            skipped += dec.step().drafts_skipped
        for j, tok in enumerate(dec.new_ids):
            prefix = tuple(dec.new_ids[:j])
            if prefix not in support:
                logits, _ = smollm.forward(torch.tensor([ids + list(prefix)]), logits="last")
                p = warp_logits(logits[0, -1], 0.5, 0, 0.52).exp()
                support[prefix] = set(torch.nonzero(p > 0).flatten().tolist())
            if tok not in support[prefix]:
                outside.append((seed, j, smollm.token_text(tok)))
    assert not outside, outside
    assert skipped > 0, "a narrow nucleus must leave some drafts out of the tree"
