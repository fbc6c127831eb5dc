"""Lossless at every setting: the decoder's output law equals the exact *warped* target law.

A small-vocabulary target whose distributions can be enumerated, an oracle-like head (it drafts the target's
ranking, with a differently scaled q, so paths are accepted deep and rejected often), and the whole grid of
draft kinds x temperatures x top-p x top-k-sampling. For each setting the joint law of the first three
generated tokens (the prefill's token, then the first cycle's accepted path and bonus/correction) is compared
with the exact one by a chi-square test, and every emitted sequence must lie inside the warped target support.
The first three tokens cover the root's sibling tests and the depth-2 tests after an acceptance.

A guard runs the same check on a deliberately biased verifier (keep the first drafted child whatever its
probability: what the old code did for children with q = 0) and requires it to fail.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

import eagle_core.decoding.verify as verify_mod
from conftest import TinyTokenizer, oracle_pair
from eagle_core.decoding.engine import DecodeConfig, EagleDecoder
from eagle_core.decoding.sampling import warp_logits

V = 8
PROMPT = [1, 4, 2]
N_SAMPLES = 360           # per setting; 54 settings at ~4 ms a run
KINDS = {"chain": dict(draft="chain", depth=3),
         "static": dict(draft="static", tree="cpu-12"),
         "dynamic": dict(draft="dynamic", depth=3, top_k=3, total_tokens=6)}
GRID = list(itertools.product(KINDS, (0.3, 1.0, 1.5), (1.0, 0.9, 0.5), (0, 5)))
P_MIN = 1e-4              # per setting; the seeds are fixed, so the outcome is deterministic


@pytest.fixture(scope="module")
def pair():
    return oracle_pair(TinyTokenizer(V), seed=1, vocab_size=V, embed_scale=1.0, head_gain=50.0)


def exact_law(target, temperature, top_p, top_k) -> dict[tuple, float]:
    """P(x1, x2, x3) of plain sampling from the warped target, by enumeration (V^2 prefixes in one batch)."""
    def warped(prefixes):
        ids = torch.tensor([PROMPT + list(p) for p in prefixes])
        with torch.no_grad():
            logits = target.model(ids).logits[:, -1]
        return warp_logits(logits, temperature, top_k, top_p).exp()

    p1 = warped([()])[0]
    p2 = warped([(a,) for a in range(V)])
    p3 = warped([(a, b) for a in range(V) for b in range(V)]).view(V, V, V)
    law = p1[:, None, None] * p2[:, :, None] * p3
    return {s: float(law[s]) for s in itertools.product(range(V), repeat=3)}


def sample_outputs(target, head, kind, temperature, top_p, top_k, n=N_SAMPLES):
    counts, accepted, skipped = {}, 0, 0
    for seed in range(n):
        cfg = DecodeConfig(temperature=temperature, top_p=top_p, top_k_sampling=top_k, seed=seed, max_new_tokens=3,
                           record_topk=0, **KINDS[kind])
        dec = EagleDecoder(target, head, cfg, PROMPT)
        while not dec.done:
            dec.step()
        s = tuple(dec.new_ids)
        counts[s] = counts.get(s, 0) + 1
        accepted += sum(c.accept_length for c in dec.cycles)
        skipped += sum(c.drafts_skipped for c in dec.cycles)
    return counts, accepted, skipped


def law_check(counts: dict, exact: dict) -> tuple[float, list]:
    """(chi-square p-value with bins merged to >= 5 expected, emitted sequences outside the support)."""
    n = sum(counts.values())
    outside = [s for s in counts if exact[s] <= 0]
    obs, exp, rest_o, rest_e = [], [], 0, 0.0
    for s, e in exact.items():
        if e * n >= 5:
            obs.append(counts.get(s, 0))
            exp.append(e * n)
        else:
            rest_o += counts.get(s, 0)
            rest_e += e * n
    if rest_e > 0:
        obs.append(rest_o)
        exp.append(rest_e)
    if len(obs) < 2:
        return 1.0, outside
    exp = np.array(exp) * sum(obs) / sum(exp)
    return float(chisquare(obs, exp).pvalue), outside


@pytest.mark.parametrize("kind,temperature,top_p,top_k", GRID,
                         ids=[f"{k}-T{t}-p{p}-k{kk}" for k, t, p, kk in GRID])
def test_output_law_is_the_warped_target_law(pair, kind, temperature, top_p, top_k):
    target, head = pair
    counts, accepted, _ = sample_outputs(target, head, kind, temperature, top_p, top_k)
    pvalue, outside = law_check(counts, exact_law(target, temperature, top_p, top_k))
    print(f"\n{kind:8s} T={temperature} top_p={top_p} top_k={top_k}: chi-square p = {pvalue:.3g}, "
          f"accepted drafts {accepted / N_SAMPLES:.2f}/run")
    assert not outside, f"emitted sequences the warped target gives probability 0: {outside}"
    assert pvalue > P_MIN
    assert accepted > N_SAMPLES // 3, "drafts must be accepted often enough to exercise the tree rules"


def test_narrow_nucleus_drafts_fewer_children(pair):
    """top-p = 0.5 leaves q a one-token support at most nodes: the trees get fewer children, never q = 0 ones."""
    target, head = pair
    dec = EagleDecoder(target, head, DecodeConfig(draft="static", tree="cpu-12", temperature=0.5, top_p=0.5,
                                                  max_new_tokens=12, seed=0), PROMPT)
    skipped = 0
    while not dec.done:
        rec = dec.step()
        skipped += rec.drafts_skipped
        for node in rec.nodes[1:]:
            assert node.q > 0
            if node.rule is not None:
                assert node.rule == "ratio" and node.test_q > 0
            if node.status == "accepted":
                assert node.p > 0
    assert skipped > 0


def test_biased_verifier_fails_the_same_check(pair, monkeypatch):
    """Guard: a verifier that keeps the first drafted child of every node, whatever p says, is caught."""
    target, head = pair
    real = verify_mod.verify_children

    def keep_first(p, q, children, sampled, generator):
        pos, tests, residual = real(p, q, children, sampled, generator)
        return 0, tests[:1] or tests, residual

    monkeypatch.setattr(verify_mod, "verify_children", keep_first)
    for kind, top_p in (("chain", 0.9), ("dynamic", 0.5)):
        counts, _, _ = sample_outputs(target, head, kind, 1.0, top_p, 0)
        pvalue, outside = law_check(counts, exact_law(target, 1.0, top_p, 0))
        assert outside or pvalue < 1e-6, (kind, pvalue)
