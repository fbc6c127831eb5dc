"""The widest tree the page allows (EAGLE-2, depth 12, top-k 16, 80 drafted tokens: an 81-row verification pass)
takes the one-token step's numerical path: where the kernel plan says the model is row-independent, every node's
logits in the tree pass equal, bit for bit, the logits of one-token steps along its path. Before the limits sized
the exact path, passes over 64 rows summed attention in fp32 through SDPA while steps summed it in float64."""
from __future__ import annotations

import pytest
import torch

from conftest import tiny_llama
from eagle_core.decoding.engine import DecodeConfig, EagleDecoder, generate, kv_cache_dtype, new_kv_cache
from eagle_core.decoding.limits import LIMITS, MAX_VERIFY_ROWS
from eagle_core.model.head import random_head, resolve_head
from eagle_core.model.target import load_target

WIDEST = dict(draft="dynamic", depth=int(LIMITS["depth"].hi), top_k=int(LIMITS["top_k"].hi),
              total_tokens=int(LIMITS["total_tokens"].hi))


def widest_tree_vs_steps(target, head, prompt_ids: list[int]) -> tuple[int, list[int]]:
    """(rows of the widest tree's verification pass, the nodes whose tree-pass logits differ from one-token steps
    along their paths in any bit). The tree is drafted by the engine itself after its prefill. The steps walk the
    tree depth first over one cache (cut back to a node's parent before its step: the cache then holds exactly
    the prompt and the node's ancestors, as a walk from the root along its path would), one step per node."""
    from eagle_core.decoding.engine import cache_lengths, truncate_cache
    dec = EagleDecoder(target, head, DecodeConfig(max_new_tokens=64, **WIDEST), prompt_ids)
    with torch.inference_mode():
        dec.step()                                   # the prefill: the root is committed, the head has its feature
        n = len(dec.tokens) - 1
        tree = dec._draft()
        logits, _ = dec._verify(tree)
        children: dict[int, list[int]] = {}
        for i, nd in enumerate(tree.nodes):
            if i:
                children.setdefault(nd.parent, []).append(i)
        cache = new_kv_cache(n + MAX_VERIFY_ROWS + 1, kv_cache_dtype(target))
        target.forward(torch.tensor([prompt_ids]), past_key_values=cache, logits="last")
        differ, stack = [], [(0, 0, cache_lengths(cache))]        # (node, depth, the cache before its step)
        while stack:
            node, d, before = stack.pop()
            truncate_cache(cache, before)
            step, _ = target.forward(torch.tensor([[tree.nodes[node].token]]), position_ids=torch.tensor([[n + d]]),
                                     past_key_values=cache)
            if not torch.equal(step[0, -1], logits[0, node]):
                differ.append(node)
            after = cache_lengths(cache)
            stack.extend((c, d + 1, after) for c in reversed(children.get(node, [])))
    return len(tree), sorted(differ)


def test_the_limits_fit_the_exact_path():
    from eagle_core.decoding.presets import tree_presets
    from eagle_core.model.attention import MAX_QUERIES
    assert LIMITS["total_tokens"].hi + 1 == MAX_VERIFY_ROWS <= MAX_QUERIES
    assert LIMITS["depth"].hi + 1 <= MAX_VERIFY_ROWS                       # the longest chain
    assert all(len(c) + 1 <= MAX_VERIFY_ROWS for c in tree_presets().values())


def test_a_tree_wider_than_the_exact_path_is_refused(tiny_target, monkeypatch):
    """A fitted tree file (assets/trees) can hold any shape: one wider than a pass may hold is refused."""
    from eagle_core.decoding import engine, presets
    wide = {**presets.tree_presets(), "wide": [[i] for i in range(MAX_VERIFY_ROWS)]}   # 81 drafted + the root
    monkeypatch.setattr(engine, "tree_presets", lambda: wide)
    cfg = DecodeConfig(draft="static", tree="wide", max_new_tokens=4)
    with pytest.raises(ValueError, match="81 drafted tokens is too wide.*at most 80 drafted tokens"):
        EagleDecoder(tiny_target, random_head(tiny_target), cfg, [1, 2, 3])
    ok = DecodeConfig(draft="static", tree="wide", max_new_tokens=4)
    wide["wide"] = wide["wide"][:-1]
    EagleDecoder(tiny_target, random_head(tiny_target), ok, [1, 2, 3])


def test_widest_tree_logits_equal_one_token_steps_tiny(real_tokenizer):
    target = load_target(model=tiny_llama(seed=11), tokenizer=real_tokenizer, device="cpu", kernels="exact")
    assert target.row_independent, target.kernel_plan
    rows, differ = widest_tree_vs_steps(target, random_head(target, seed=3), [1, 400, 17, 2300, 9, 55])
    assert rows == MAX_VERIFY_ROWS and differ == []


def test_the_probe_runs_again_at_a_new_thread_count(real_tokenizer, monkeypatch):
    """oneDNN splits a product by the thread count: a plan probed at one count is re-probed at the next call with
    another, and says what it found there (here a probe made to fail at 2 threads)."""
    from eagle_core.model import planned_linear
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        target = load_target(model=tiny_llama(seed=12), tokenizer=real_tokenizer, device="cpu", kernels="exact")
        assert target.row_independent and set(target.kernel_plan["row_probe"]) == {1}
        real = planned_linear.rows_dependence
        monkeypatch.setattr(planned_linear, "rows_dependence", lambda *a, **k: (
            "row 3 of a 4-row call differs" if torch.get_num_threads() == 2 else real(*a, **k)))
        torch.set_num_threads(2)
        with pytest.warns(UserWarning, match="row-dependent"):
            target.forward(torch.tensor([[1, 2, 3]]))
        assert set(target.kernel_plan["row_probe"]) == {1, 2} and not target.row_independent
        assert kv_cache_dtype(target) is None
        torch.set_num_threads(1)
        assert target.row_independent and kv_cache_dtype(target) == torch.float64
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def smollm_exact():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield load_target(kernels="exact")
    torch.set_num_threads(before)


@pytest.mark.model
@pytest.mark.slow
def test_widest_tree_on_the_embedded_target(smollm_exact):
    """The embedded SmolLM2 under the row-independent "exact" plan (on this Zen 4 no fast kernel is: its
    576x1536 product runs every row as its own product): the widest tree's 81 rows equal one-token steps bit for bit, and
    EAGLE at the widest settings is token-identical to plain decoding of the same model."""
    target = smollm_exact
    assert target.row_independent, target.kernel_plan
    head = resolve_head("shifted", target)
    ids = target.render_prompt("How can I learn Python quickly?")
    rows, differ = widest_tree_vs_steps(target, head, ids)
    assert rows == MAX_VERIFY_ROWS and differ == []
    for prompt in ("How can I learn Python quickly?", "Write a haiku about the sea."):
        ids = target.render_prompt(prompt)
        ref = generate(target, None, DecodeConfig(draft="vanilla", max_new_tokens=40), ids)
        got = generate(target, head, DecodeConfig(max_new_tokens=40, **WIDEST), ids)
        assert got.token_ids == ref.token_ids, prompt
        assert max(len(c.nodes) for c in got.cycles) == MAX_VERIFY_ROWS
