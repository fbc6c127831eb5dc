"""Lossless at every setting: the decoder's output law equals the exact *warped* target law.

A small-vocabulary target whose distributions can be enumerated, an oracle-like head (it drafts the target's
ranking, with a differently scaled q, so paths are accepted deep and rejected often), and the whole grid of
draft kinds x temperatures x top-p x top-k-sampling. For each setting the joint law of the first three
generated tokens (the prefill's token, then the first cycle's accepted path and bonus/correction) is compared
with the exact one by a chi-square test, and every emitted sequence must lie inside the warped target support.
The first three tokens cover the root's sibling tests and the depth-2 tests after an acceptance.

The exact law is built with transformers' own warpers (TemperatureLogitsWarper, TopKLogitsWarper,
TopPLogitsWarper, in generate's order), not with the project's warp_logits, so a warper bug cannot sit on both
sides of the comparison; warp_logits is checked against the same warpers directly on random logits.

A guard runs the same check on a deliberately biased verifier (keep the first drafted child whatever its
probability: what the old code did for children with q = 0) and requires it to fail.

The grid sees gross bias only (360 samples a setting); the power test gives one setting 60k first cycles, so a
q in tree.dists a few percent off the q the children were drawn from fails it (and its guard requires that).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

import eagle_core.decoding.draft as draft_mod
import eagle_core.decoding.verify as verify_mod
from conftest import TinyTokenizer, hf_warped_logprobs, oracle_pair
from eagle_core.decoding.draft import DraftSpec, Drafter
from eagle_core.decoding.engine import DecodeConfig, EagleDecoder
from eagle_core.decoding.sampling import warp_logits
from eagle_core.decoding.verify import accept_tree

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


@pytest.fixture(scope="module")
def pair_bf16():
    """The same pair with the target on the bf16 kernels: the exact law is that numerical model's own."""
    from conftest import skip_without_bf16
    skip_without_bf16()
    target, head = oracle_pair(TinyTokenizer(V), seed=1, vocab_size=V, embed_scale=1.0, head_gain=50.0,
                               kernels="bf16")
    assert target.numerics == "bf16-linear"
    return target, head


@pytest.fixture(scope="module")
def pair_q4(tmp_path_factory):
    """The same pair quantized to a Q4_1 GGUF, the target on its blocks (the "q4" numerical model)."""
    from eagle_core.model import gguf_blocks
    if gguf_blocks.kernel() is None:
        pytest.skip(gguf_blocks.why_unavailable())
    target, head = oracle_pair(TinyTokenizer(V), seed=1, vocab_size=V, embed_scale=1.0, head_gain=50.0,
                               kernels="q4", gguf_dir=str(tmp_path_factory.mktemp("q4law")))
    assert target.numerics == "gguf-blocks"
    return target, head


def exact_law(target, temperature, top_p, top_k) -> dict[tuple, float]:
    """P(x1, x2, x3) of plain sampling from the warped target, by enumeration (V^2 prefixes in one batch), with
    transformers' warpers (independent of the decoder's own warp_logits)."""
    def warped(prefixes):
        ids = torch.tensor([PROMPT + list(p) for p in prefixes])
        with torch.no_grad():
            logits = target.model(ids).logits[:, -1]
        return hf_warped_logprobs(logits, temperature, top_k, top_p).exp()

    p1 = warped([()])[0]
    p2 = warped([(a,) for a in range(V)])
    p3 = warped([(a, b) for a in range(V) for b in range(V)]).view(V, V, V)
    law = p1[:, None, None] * p2[:, :, None] * p3
    return {s: float(law[s]) for s in itertools.product(range(V), repeat=3)}


def sample_outputs(target, head, kind, temperature, top_p, top_k, n=N_SAMPLES, draft_dtype=""):
    counts, accepted, skipped = {}, 0, 0
    for seed in range(n):
        cfg = DecodeConfig(temperature=temperature, top_p=top_p, top_k_sampling=top_k, seed=seed, max_new_tokens=3,
                           record_topk=0, draft_dtype=draft_dtype, **KINDS[kind])
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


@pytest.mark.slow
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


BF16_GRID = [(k, t, p, 0) for k in KINDS for t, p in ((0.3, 1.0), (1.0, 0.9), (1.5, 0.5))]


@pytest.mark.slow
@pytest.mark.parametrize("kind,temperature,top_p,top_k", BF16_GRID,
                         ids=[f"{k}-T{t}-p{p}" for k, t, p, _ in BF16_GRID])
def test_output_law_with_bf16_kernels(pair_bf16, kind, temperature, top_p, top_k):
    """Every kernel choice keeps the contract: with bf16 linear layers the output follows exactly the law of the
    target those kernels compute (its logits from the same planned model, enumerated)."""
    target, head = pair_bf16
    counts, accepted, _ = sample_outputs(target, head, kind, temperature, top_p, top_k)
    pvalue, outside = law_check(counts, exact_law(target, temperature, top_p, top_k))
    assert not outside, f"emitted sequences the warped target gives probability 0: {outside}"
    assert pvalue > P_MIN
    assert accepted > N_SAMPLES // 3


@pytest.mark.slow
@pytest.mark.parametrize("draft_dtype", ["", "q8"])
@pytest.mark.parametrize("kind,temperature,top_p,top_k", BF16_GRID,
                         ids=[f"{k}-T{t}-p{p}" for k, t, p, _ in BF16_GRID])
def test_output_law_with_q4_kernels(pair_q4, kind, temperature, top_p, top_k, draft_dtype):
    """The q4 model (linear layers on the GGUF's blocks) keeps the contract too, drafting in fp32 or as its default
    draft does ("q8": the head's weights as Q8_0 blocks, another q). Its exact law is enumerated in
    passes of 64 prompts (320 rows: above MAX_VERIFY_ROWS the plan runs packed fp32 on the same dequantized
    weights, which differs from the block kernel by fp32 rounding only, far below what the test can see)."""
    target, head = pair_q4
    counts, accepted, _ = sample_outputs(target, head, kind, temperature, top_p, top_k, draft_dtype=draft_dtype)
    pvalue, outside = law_check(counts, exact_law(target, temperature, top_p, top_k))
    assert not outside, f"emitted sequences the warped target gives probability 0: {outside}"
    assert pvalue > P_MIN
    assert accepted > N_SAMPLES // 3


@pytest.mark.slow
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


# ----------------------------------------------------------------------------- power: q a few percent off
# The grid above has breadth (every draft kind and warper), not power: 360 samples per setting see only gross
# bias. Here one setting gets 60k first cycles. An error e in the q that drafting hands the verifier
# (tree.dists) moves the output law at a token a by about e * p(a) * (1 - q(a)) where q(a) > p(a): largest for
# a draft close to the target with a top token near 1/3 to 1/2 (the oracle head: total variation 0.02 here);
# a very different q (a random head) halves the non-centrality. Computed from the exact law of the rule (all
# ordered child draws), at 60k cycles and p < 1e-3: the top draft token's mass off by 5% is caught with power
# 0.93 by the output law and 0.94 by the children's law, off by 10% with power 1.00; 10% on any token: >= 0.86
# and 0.95; q at a temperature 5% off: 1.00.
POWER_PREFIX = PROMPT + [3]     # the committed prefix: the cycle's root is token 3
POWER_T, POWER_N = 0.7, 60_000
P_LAW = 1e-3                    # per check (two checks: a false alarm rate <= 2e-3; the seeds are fixed)


def first_cycle_pvalues(target, head, n=POWER_N, seed=0) -> tuple[float, float]:
    """n independent first cycles after POWER_PREFIX, each drafting 3 children of the root from q (sampled, the
    ratio rule) and verifying them: (chi-square p-value of the emitted first token against the exact warped
    target law, chi-square p-value of the first drafted child against the q in tree.dists).

    The first child is a draw from the q drafting really used, so the second check sees a tree.dists that is
    not that q at first order; the first check is the end-to-end promise. One cycle costs one draft and one
    accept_tree: the target's distribution at the root is computed once (it is the same for every cycle)."""
    drafter = Drafter(head, target, DraftSpec(kind="static", choices=[[0], [1], [2]]), max_len=32)
    ids = torch.tensor([POWER_PREFIX])
    with torch.inference_mode():
        logits, feats = target.forward(ids)
        root_feat = drafter.catch_up(feats[:, :-1], POWER_PREFIX)
        p_engine = warp_logits(logits[0, -1], POWER_T).exp()            # what the engine verifies against
        exact = hf_warped_logprobs(target.model(ids).logits[:, -1], POWER_T)[0].exp().double().numpy()
    g = torch.Generator().manual_seed(seed)
    out, first_child, q_used = np.zeros(V), np.zeros(V), None
    for _ in range(n):
        tree = drafter.draft(root_feat, POWER_PREFIX[-1], POWER_PREFIX[-2], POWER_T, 0, 1.0, g)
        if q_used is None:
            q_used = tree.dists[0]
        assert torch.equal(tree.dists[0], q_used) and all(node.sampled for node in tree.nodes[1:])
        # the children's rows only give the bonus after a kept child, which is not counted
        acc = accept_tree(tree, p_engine.expand(len(tree), V), POWER_T, g)
        out[tree.tokens[acc.path[0]] if acc.path else acc.token] += 1
        first_child[tree.tokens[tree.nodes[0].children[0]]] += 1
    as_law = lambda c, law: ({(t,): int(c[t]) for t in range(V)}, {(t,): float(law[t]) for t in range(V)})  # noqa: E731
    p_out, outside = law_check(*as_law(out, exact))
    assert not outside, f"emitted tokens the warped target gives probability 0: {outside}"
    p_child, _ = law_check(*as_law(first_child, q_used.exp().double().numpy()))
    return p_out, p_child


@pytest.mark.slow
def test_first_token_law_sees_a_few_percent_error_in_q(pair):
    """The power test: the emitted token of 60k first cycles follows the exact warped target law, and the drafted
    children follow the q the verifier is given. A q in tree.dists a few percent off fails it (next test)."""
    p_out, p_child = first_cycle_pvalues(*pair)
    print(f"\nfirst token: p = {p_out:.3g}; first child against tree.dists: p = {p_child:.3g}")
    assert p_out > P_LAW, f"the emitted token does not follow the warped target law (p = {p_out:.3g})"
    assert p_child > P_LAW, f"the drafted children do not follow tree.dists (p = {p_child:.3g})"


def q_off_by(factor):
    """Drafter.draft wrapped so that every row of tree.dists has its top token's mass times `factor`,
    renormalised: the children are still drawn from the real q, the verifier is handed a q a few percent off."""
    real = draft_mod.Drafter.draft

    def draft(self, *args, **kw):
        tree = real(self, *args, **kw)
        with torch.inference_mode():
            for v, logq in list(tree.dists.items()):
                q = logq.exp()
                q[q.argmax()] *= factor
                tree.dists[v] = (q / q.sum()).log()
        return tree
    return draft


@pytest.mark.slow
def test_q_five_percent_off_fails_the_power_test(pair, monkeypatch):
    """Guard for POWER_N: tree.dists with the top token's mass 5% high fails both checks of the power test."""
    monkeypatch.setattr(draft_mod.Drafter, "draft", q_off_by(1.05))
    p_out, p_child = first_cycle_pvalues(*pair)
    assert p_out < P_LAW and p_child < P_LAW, (p_out, p_child)


WARP_GRID = list(itertools.product((0.3, 1.0, 1.5), (1.0, 0.95, 0.9, 0.5, 0.2, 0.07, 0.05, 0.03), (0, 1, 2, 5, 20)))


def random_logits(vocab, rows=16, seed=0, ties=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, vocab, generator=g) * 3
    if ties:   # a coarse grid: many exact ties, also at the top (two argmaxes) and at the k-th value
        x = (x * 2).round() / 2
        x[:, 1] = x[:, 0] = x.max(-1).values
    return x


def nucleus_edge(x, temperature, top_k, top_p, tol):
    """Rows where a cumulative probability of the sorted (tempered, top-k) distribution lies within tol of
    top_p (in float64): a cut that float32 rounding may put on either side of a token, whichever the code
    (with ties, where which tied token is 'before' the other is a matter of sort order)."""
    if top_p >= 1.0:
        return torch.zeros(x.shape[0], dtype=torch.bool)
    z = x.double() / temperature
    if top_k and top_k < z.shape[-1]:
        z = z.masked_fill(z < torch.topk(z, top_k, dim=-1).values[..., -1:], float("-inf"))
    cum = torch.softmax(z, -1).sort(-1, descending=True).values.cumsum(-1)
    return ((cum - top_p).abs() < tol).any(-1)


def warp_both(x, t, p, k, tol=1e-6):
    """(ours, transformers', rows off the nucleus edge) as probabilities."""
    keep = ~nucleus_edge(x, t, k, p, tol)
    return warp_logits(x, t, k, p).exp(), hf_warped_logprobs(x, t, k, p).exp(), keep


def mass_before(x, temperature, top_k):
    """Per token, in float64: the tempered, top-k-cut probability of the tokens ranked above it (no ties)."""
    z = x.double() / temperature
    if top_k and top_k < z.shape[-1]:
        z = z.masked_fill(z < torch.topk(z, top_k, dim=-1).values[..., -1:], float("-inf"))
    probs = torch.softmax(z, -1)
    sorted_p, order = probs.sort(-1, descending=True)
    return torch.zeros_like(probs).scatter(-1, order, sorted_p.cumsum(-1) - sorted_p)


@pytest.mark.parametrize("vocab", [8, 50, 1000, 49152])
def test_warp_logits_equals_transformers_warpers(vocab):
    """Temperature, top-k and top-p as transformers applies them, on random logits without ties: the same
    support and the same probabilities (also top_p near 0.05, where the nucleus is one or two tokens). Both sum
    the same float32 probabilities in opposite orders, so the one token whose mass-before sits within rounding
    of top_p (1e-6, or 2e-5 over a full 49,152-token vocabulary) may fall on either side of the cut: that token
    is the only difference allowed, and only in a few rows."""
    tol, seeds, rows, grid = (2e-5, range(1), 4, WARP_GRID[::2]) if vocab > 10_000 else (1e-6, range(3), 16,
                                                                                           WARP_GRID)
    differing = total = 0
    for seed in seeds:
        x = random_logits(vocab, rows=rows, seed=seed)
        for t, p, k in grid:
            ours, ref = warp_logits(x, t, k, p).exp(), hf_warped_logprobs(x, t, k, p).exp()
            diff = (ours > 0) != (ref > 0)
            at_cut = (mass_before(x, t, k) - p).abs() < tol
            assert not (diff & ~at_cut).any(), (vocab, seed, t, p, k, "a token away from the nucleus cut")
            same = ~diff.any(-1)
            torch.testing.assert_close(ours[same], ref[same], atol=1e-6, rtol=1e-5)
            differing, total = differing + int((~same).sum()), total + rows
    assert differing <= 0.02 * total, f"{differing} of {total} rows cut differently"


def test_warp_logits_with_ties_keeps_as_many_tokens_as_transformers():
    """Exact ties (among the top tokens, at the top-k cut, elsewhere): the same number of tokens kept, with the
    same probabilities. Which of several tied tokens at the nucleus edge is kept is the next test's concern."""
    compared = 0
    for vocab, seed in itertools.product((8, 50, 1000), range(3)):
        x = random_logits(vocab, seed=seed, ties=True)
        for t, p, k in WARP_GRID:
            ours, ref, keep = warp_both(x, t, p, k)
            assert torch.equal((ours[keep] > 0).sum(-1), (ref[keep] > 0).sum(-1)), (vocab, seed, t, p, k)
            torch.testing.assert_close(ours[keep].sort(-1).values, ref[keep].sort(-1).values,
                                       atol=1e-6, rtol=1e-5)
            if p == 1.0:        # no nucleus cut: temperature and top-k keep every tie, so the very same tokens
                assert torch.equal(ours > 0, ref > 0), (vocab, seed, t, k)
            compared += int(keep.sum())
    assert compared >= 0.9 * 9 * 16 * len(WARP_GRID)


@pytest.mark.xfail(strict=True, reason="warp_logits breaks a tie at the nucleus edge towards the lower token id "
                   "(a descending sort), transformers' TopPLogitsWarper towards the higher one (an ascending sort); "
                   "tied logits [0, 0, -5] at top_p=0.3 keep token 0 here and token 1 there")
def test_warp_logits_breaks_nucleus_ties_like_transformers():
    x = torch.tensor([[0.0, 0.0, -5.0]])
    assert torch.equal(warp_logits(x, 1.0, 0, 0.3) > -1e30, hf_warped_logprobs(x, 1.0, 0, 0.3) > -1e30)
    for vocab, seed in itertools.product((8, 50), range(3)):
        x = random_logits(vocab, seed=seed, ties=True)
        for t, p, k in WARP_GRID:
            ours, ref, keep = warp_both(x, t, p, k)
            assert torch.equal(ours[keep] > 0, ref[keep] > 0), (vocab, seed, t, p, k)
