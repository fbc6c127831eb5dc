"""decoding/law.py: the first token of an EAGLE cycle at T > 0 follows the target's law, shown by drawing it many
times beside plain sampling; the test statistic can tell a wrong rule apart; p and q are the engine's own."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from conftest import oracle_pair
from eagle_core.decoding.engine import DecodeConfig, EagleDecoder
from eagle_core.decoding.law import draw_first_tokens, homogeneity, root_dists, same_law
from eagle_core.decoding import law as law_mod


def _laws(seed=0, V=40):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(V, generator=g) * 2, 0)
    q = torch.softmax(torch.randn(V, generator=g) * 2, 0)        # a poor draft: many rejections
    return p, q


@pytest.mark.parametrize("rule", ["ratio", "target"])
def test_eagle_first_tokens_and_plain_draws_agree(rule):
    p, q = _laws()
    rec = same_law(p, q, 3, 4000, seed=1, text=str, rule=rule)
    assert rec.p_value > 1e-3 and rec.dof >= 5
    assert 0 < rec.accepted < rec.n                              # both kept children and residual draws
    assert sum(b.eagle for b in rec.bars) + rec.other_eagle == rec.n
    # the residual's most frequent tokens are always bars (the page names them): the same draws again
    eagle, kept = draw_first_tokens(p.float(), q.float(), 3, 4000, torch.Generator().manual_seed(1), rule)
    res = Counter(t for t, k in zip(eagle, kept) if not k)
    assert {t for t, _ in res.most_common(4)} <= {b.token_id for b in rec.bars}
    assert sum(b.eagle_residual for b in rec.bars) > 0
    # and both match p itself (goodness of fit, by the same test against a large plain sample)
    big = torch.multinomial(p, 40000, replacement=True, generator=torch.Generator().manual_seed(9)).tolist()
    eagle, _ = draw_first_tokens(p.double(), q.double(), 3, 4000, torch.Generator().manual_seed(2), rule)
    assert homogeneity(eagle, big)[2] > 1e-3


def test_the_test_tells_a_wrong_rule_apart(monkeypatch):
    """Keep every first child (no ratio test): its law is q's, and the panel's p-value says so."""
    p, q = _laws()

    def keep_first(p_, q_, kids, sampled, generator):
        return 0, [], p_
    monkeypatch.setattr(law_mod, "verify_children", keep_first)
    rec = same_law(p, q, 3, 4000, seed=1, text=str)
    assert rec.p_value < 1e-6


@pytest.mark.parametrize("vocab,dtype", [(0, None), (8192, "mixed"), (8192, "q8")])
def test_root_dists_are_the_engines_own(real_tokenizer, vocab, dtype):
    """p and q at the root equal what a real cycle of the engine drafts from and verifies against, with the
    session's own drafter: the CPU default drafts over 8192 tokens with a bf16 LM head (q = 0 outside them)."""
    target, head = oracle_pair(real_tokenizer, kernels="exact")
    cfg = DecodeConfig(draft="static", tree="cpu-6", temperature=0.8, top_p=0.9, seed=3, max_new_tokens=8,
                       draft_vocab=vocab, draft_dtype=dtype)
    dec = EagleDecoder(target, head, cfg, [1, 100, 7, 300, 42])
    dec.step()                                       # the prefill: its token is the next cycle's root
    ids = dec.prompt_ids + list(dec.new_ids)
    p, q = root_dists(target, head, ids, cfg)
    with torch.inference_mode():
        res = dec._cycle()                           # one real cycle (step() without the record)
    assert torch.allclose(p, res.probs[0].float(), atol=1e-5)
    assert torch.allclose(q, res.tree.dists[0].float().exp(), atol=1e-5)
    if vocab:
        assert int((q > 0).sum()) <= vocab          # nothing drawn outside the draft vocabulary


def test_the_figure_and_sentence_follow_the_record(monkeypatch):
    import dataclasses
    import json

    import plotly.graph_objects as go

    from views.law import law_figure, law_sentence, law_title, residual_note
    p, q = _laws()
    good = dataclasses.asdict(same_law(p, q, 3, 2000, seed=1, text=lambda t: f"tok{t}", temperature=0.8))
    fig = law_figure(good)
    sent = json.loads(fig.to_json())
    assert json.loads(go.Figure(fig.to_dict()).to_json())["data"] == sent["data"]      # plotly's validator
    assert [round(sum(t["y"]), 6) for t in sent["data"][:2]] == [1.0, 1.0]
    assert "agree" in law_sentence(good) and f"p-value {good['p_value']:.3g}" in law_sentence(good)
    top = max(good["bars"], key=lambda b: b["eagle_residual"])
    assert f"tok{top['token_id']}" in residual_note(good)
    monkeypatch.setattr(law_mod, "verify_children", lambda p_, q_, kids, sampled, generator: (0, [], p_))
    bad = dataclasses.asdict(same_law(p, q, 3, 2000, seed=1, text=str, temperature=0.8))
    assert "differ" in law_sentence(bad) and "different laws" in law_title(bad) and "the same law" in law_title(good)


def test_a_law_too_flat_to_test_says_so():
    import dataclasses

    from views.law import law_sentence, law_title
    from eagle_core.decoding.law import MIN_EXPECTED
    from views import law as vlaw
    assert vlaw.MIN_EXPECTED == MIN_EXPECTED
    flat = torch.full((5000,), 1 / 5000)
    rec = dataclasses.asdict(same_law(flat, flat, 2, 200, seed=0, text=str))
    assert rec["dof"] == 0 and "too flat to test" in law_sentence(rec) and "too flat" in law_title(rec)


def test_the_p_value_is_read_on_the_scale_of_two_plain_samples():
    """Beside the test, the same test of a second plain sample against the first (one law by construction): over
    seeds its p-values spread evenly over 0..1, as the panel's sentence says chance alone makes them (a control of
    a sample against itself would sit at 1, one against q near 0); the sentence names it and reads the p-value."""
    import dataclasses

    from views.law import law_sentence
    p, q = _laws()
    controls = [same_law(p, q, 3, 300, seed=s, text=str).control_p_value for s in range(60)]
    assert 0.35 < sum(controls) / len(controls) < 0.65
    assert 2 <= sum(c < 0.25 for c in controls) <= 28 and 2 <= sum(c > 0.75 for c in controls) <= 28
    rec = dataclasses.asdict(same_law(p, q, 3, 1000, seed=1, text=str, temperature=0.8))
    s = law_sentence(rec)
    assert f"gave p-value {rec['control_p_value']:.3g}" in s and "by chance alone" in s
