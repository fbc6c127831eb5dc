"""The output law across cycles: the token a cycle produces after a cycle that accepted drafts follows the
target's exact law given everything committed before it.

test_exactness covers the first cycle (three tokens: the prefill's and the first cycle's). Here the second
cycle is the one under test: it runs on what the first cycle left behind (the KV entries of the accepted path
moved into place, the head's caught-up entries, the new root and its position), so a slip there changes which
context the target verifies against. The target is a tiny random Llama whose next-token law depends strongly
on the whole context (scaled-up weights: changing the first generated token moves the law by ~0.2 in total
variation), over V = 4 tokens, so that a draft of three children per node is accepted most of the time even
from a random head (the first cycle accepts >= 1 draft in most runs).

Statistic: for each run, the second cycle's first token y given the committed prefix s (prompt, the
prefill's token, the first cycle's accepted tokens and bonus) has the exact law p(. | s), computed by a plain
target pass over s with transformers' warpers. A randomised probability integral transform (tokens ordered by
p(. | s), u = P(Y before y) + U * p(y | s) with U uniform) maps each run to a number that is exactly Uniform(0, 1)
under the null, independently across runs, whatever s is; a 10-bin chi-square on the u's must give
p > P_MIN (the seeds are fixed, so the outcome is deterministic). Only runs whose first cycle accepted a draft
are used; a guard runs the same check with the accepted path's KV entries kept in the wrong places and
requires it to fail.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

import eagle_core.decoding.engine as engine_mod
from conftest import TinyTokenizer, hf_warped_logprobs, tiny_llama
from eagle_core.decoding.engine import DecodeConfig, EagleDecoder
from eagle_core.model.head import random_head
from eagle_core.model.target import load_target

V = 4
PROMPT = [1, 3, 0, 2]
N_RUNS = 500
P_MIN = 1e-4
SETTINGS = {   # kind, temperature, top_p, tree: the ratio rule (sampled children) and the target rule (top-k)
    "static-T1": dict(draft="static", tree="cpu-6", temperature=1.0),
    "static-T0.7-p0.9": dict(draft="static", tree="cpu-12", temperature=0.7, top_p=0.9),
    "dynamic-T1": dict(draft="dynamic", depth=3, top_k=4, total_tokens=8, temperature=1.0),
}


@pytest.fixture(scope="module")
def pair():
    model = tiny_llama(vocab_size=V, hidden=32, layers=2, seed=3, eos_token_id=None)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.mul_(20.0)       # peaked, strongly context-dependent laws (random init is near uniform)
    target = load_target(model=model, tokenizer=TinyTokenizer(V), device="cpu")
    return target, random_head(target, "shifted", seed=0)


def second_cycles(target, head, setting, n=N_RUNS):
    """[(committed prefix before cycle 2, cycle 2's first token)] over runs whose cycle 1 accepted a draft."""
    out, accepted = [], 0
    for seed in range(n):
        dec = EagleDecoder(target, head, DecodeConfig(seed=seed, max_new_tokens=12, record_topk=0, **setting),
                           PROMPT)
        dec.step()                       # the prefill: its token is cycle 1's root
        first = dec.step()
        if first.accept_length == 0 or dec.done:
            continue
        accepted += 1
        prefix = list(dec.new_ids)
        second = dec.step()
        out.append((prefix, second.new_tokens[0]))
    return out, accepted


def exact_conditionals(target, prefixes, setting) -> dict[tuple, torch.Tensor]:
    """p(. | prompt + prefix) of plain sampling (transformers' warpers) for every distinct prefix."""
    t, top_p = setting.get("temperature", 1.0), setting.get("top_p", 1.0)
    out = {}
    for length in sorted({len(p) for p in prefixes}):
        batch = sorted({tuple(p) for p in prefixes if len(p) == length})
        with torch.no_grad():
            logits = target.model(torch.tensor([PROMPT + list(p) for p in batch])).logits[:, -1]
        for p, lp in zip(batch, hf_warped_logprobs(logits, t, 0, top_p).exp()):
            out[p] = lp.double()
    return out


def pit_pvalue(samples, laws, seed=0, bins=10) -> float:
    """Randomised PIT of each (prefix, token) under its own law, then a `bins`-bin chi-square for uniformity."""
    rng = np.random.default_rng(seed)
    us = []
    for prefix, y in samples:
        p = laws[tuple(prefix)].numpy()
        order = np.argsort(-p, kind="stable")
        rank = int(np.nonzero(order == y)[0][0])
        us.append(p[order[:rank]].sum() + rng.random() * p[y])
    counts = np.histogram(np.clip(us, 0, 1 - 1e-12), bins=bins, range=(0, 1))[0]
    return float(chisquare(counts).pvalue)


def law_pvalue(target, head, setting):
    samples, accepted = second_cycles(target, head, setting)
    laws = exact_conditionals(target, [p for p, _ in samples], setting)
    assert all(laws[tuple(p)][y] > 0 for p, y in samples), "a token outside the warped target's support"
    return pit_pvalue(samples, laws), accepted, len({tuple(p) for p, _ in samples})


@pytest.mark.parametrize("name", [n if n == "static-T1" else pytest.param(n, marks=pytest.mark.slow)
                                  for n in SETTINGS])      # ~9 s each: one in the fast loop
def test_a_cycle_after_an_accepting_cycle_follows_the_target_law(pair, name):
    target, head = pair
    pvalue, accepted, prefixes = law_pvalue(target, head, SETTINGS[name])
    print(f"\n{name}: PIT chi-square p = {pvalue:.3g} over {accepted} runs whose cycle 1 accepted a draft "
          f"({prefixes} distinct prefixes)")
    assert accepted >= 0.5 * N_RUNS, "cycle 1 must accept drafts in most runs for this test to mean anything"
    assert prefixes >= 10, "the conditioning prefixes must vary"
    assert pvalue > P_MIN


@pytest.mark.slow
def test_kv_entries_kept_in_the_wrong_place_fail_the_same_check(pair, monkeypatch):
    """Guard: keep the first len(path) + 1 tree entries instead of the accepted path's (what a decoder that
    forgot the path's indices would do): cycle 2 then verifies against a context with a sibling in it."""
    target, head = pair
    real = engine_mod.keep_cache_entries

    def keep_leading(cache, start, keep):
        real(cache, start, torch.arange(start, start + keep.numel(), device=keep.device))

    monkeypatch.setattr(engine_mod, "keep_cache_entries", keep_leading)
    pvalue, _, _ = law_pvalue(target, head, SETTINGS["static-T1"])
    assert pvalue < 1e-6, pvalue
