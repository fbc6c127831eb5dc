"""The "How can I" tab's one measure and its payoff in tokens, on tiny targets.

A successor oracle: a one-layer target whose greedy next token is always the current token + 1 (its LM head is
its embedding shifted by one row), and conftest's oracle head, which computes the target's feature of the token it
is given, so the shifted head drafts the greedy continuation exactly. The same weights read with the unshifted
pairing see the token before the root instead of the root, so they draft the root again, never its successor:
there knowing the sampled token is everything, and both the measure and the payoff must say so.
"""
from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from eagle_core.decoding.ambiguity import compute_ambiguity
from eagle_core.decoding.branch_payoff import PayoffRun, measure_payoff
from eagle_core.decoding.engine import DecodeConfig, generate
from eagle_core.model.head import EagleHead, head_config_from_target, random_head
from eagle_core.model.target import load_target
from views.ambiguity import (ambiguity_headline, ambiguity_html, ambiguity_moves, ambiguity_payoff_figure,
                             measure_sentence, payoff_sentence, payoff_totals)
from views.common import esc
from views.walkthrough import ambiguity_note

PREFIX = "How can I"
TREE = DecodeConfig(draft="static", tree="smollm2-cpu-tree")


def successor_oracle(tokenizer):
    """(target, shifted oracle head): the target's greedy next token after t is t + 1 (no fixed point, unlike the
    tied-embedding oracle of conftest, whose greedy text repeats one token and so lets a blind head guess it)."""
    from conftest import oracle_head, tiny_llama
    model = tiny_llama(layers=1, seed=1)
    with torch.no_grad():
        layer = model.model.layers[0]
        layer.self_attn.o_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)
        model.model.embed_tokens.weight.mul_(20.0)
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(torch.roll(model.model.embed_tokens.weight, 1, 0).clone())
    target = load_target(model=model, tokenizer=tokenizer, device="cpu")
    head = oracle_head(target, layer)
    head.path = "oracle"
    return target, head


def unshifted_twin(target, head) -> EagleHead:
    """The oracle head's weights with the unshifted pairing: (f_{j-1}, e(t_{j-1})) predicts f_j."""
    twin = EagleHead(head_config_from_target(target.config, "unshifted", bias=True))
    twin.load_state_dict(head.state_dict())
    twin.path = "oracle-unshifted"
    return twin.eval()


@pytest.fixture(scope="module")
def oracle_record(real_tokenizer):
    target, head = successor_oracle(real_tokenizer)
    un = unshifted_twin(target, head)
    # the heads predict through the payoff's drafter (its full vocabulary: the oracle drafts rare tokens)
    rec = compute_ambiguity(target, head, un, PREFIX, n_branches=3, cfg=TREE)
    pay = measure_payoff(target, {"shifted": head, "unshifted": un}, TREE, rec.token_ids,
                         [(b.token_id, b.text) for b in rec.branches], new_tokens=8)
    rec.payoff = pay.to_dict()
    return target, head, un, rec


def test_payoff_accepts_what_the_engine_accepts_with_that_head(oracle_record):
    """Each run's accepted lengths are those of the engine's own EagleDecoder with that head, alone, on "prefix t"
    (the runs were stepped together in packed rounds), and every run writes the target's greedy text."""
    target, head, un, rec = oracle_record
    pay = rec.payoff
    cfg = DecodeConfig(draft="static", tree="smollm2-cpu-tree", temperature=0.0, max_new_tokens=1 + 8,
                       record_topk=0)
    assert [b["token_id"] for b in pay["branches"]] == [b.token_id for b in rec.branches]
    for b in pay["branches"]:
        ids = rec.token_ids + [b["token_id"]]
        greedy = generate(target, None, DecodeConfig(draft="vanilla", max_new_tokens=1 + 8), ids).token_ids
        for run in b["runs"]:
            alone = generate(target, {"shifted": head, "unshifted": un}[run["head"]], cfg, ids)
            assert run["accepted"] == [c.accept_length for c in alone.cycles[1:]], (b["text"], run["head"])
            assert run["tokens"] == greedy[1:] == alone.token_ids[1:]
    # the oracle drafts the whole tree (depth 3: 4 tokens a cycle); its unshifted twin guesses the root again
    t = payoff_totals(rec.to_dict())
    assert t["shifted"]["tau"] > 3 and t["unshifted"]["tau"] < 2, t


def test_the_measure_reads_each_heads_draft_of_the_targets_next_token(oracle_record):
    """Per branch: the target's next token is its argmax after "prefix t", and each head's number is the probability
    its draft (the LM head over its predicted feature) gives that token."""
    target, head, un, rec = oracle_record
    m = ambiguity_moves(rec)
    assert m["n"] == 3 and set(m["mean"]) == {"shifted", "unshifted"}
    with torch.inference_mode():
        for b, mb in zip(rec.branches, m["branches"]):
            logits, _ = target.forward(torch.tensor([rec.token_ids + [b.token_id]]))
            nxt = int(logits[0, -1].argmax())
            assert mb["next_text"] == target.token_text(nxt)
            i = [v.token_id for v in b.vocab].index(nxt)
            assert mb["q"]["shifted"] == b.vocab_shifted[i] and mb["q"]["unshifted"] == b.vocab_unshifted[i]
            assert mb["higher"] == (b.vocab_shifted[i] > b.vocab_unshifted[i])
    # the oracle knows the branch: its draft of the target's next token beats the one shared guess on every branch
    assert m["higher"] == 3 and m["mean"]["shifted"] > m["mean"]["unshifted"]


def test_headline_text_and_step_five_state_the_same_measure_and_payoff(oracle_record):
    """One measure: the headline and step 5's note carry the same sentence, computed from the record, and the tab's
    text under the figures says what it is without printing it a second time (the page showed it twice); the
    payoff's numbers are the runs' own accepted lengths."""
    *_, rec = oracle_record
    d = rec.to_dict()
    m = ambiguity_moves(d, eagle3=False)
    s = measure_sentence(m)
    assert s.startswith(f"after {m['higher']} of 3 branches")
    head, text, note = ambiguity_headline(d), ambiguity_html(d), ambiguity_note(d)
    for where in (head, note):
        assert esc(s) in where
    assert esc(s) not in text and "the headline's first line" in text
    t = payoff_totals(d)
    runs = [r for b in d["payoff"]["branches"] for r in b["runs"] if r["head"] == "shifted"]
    assert t["shifted"]["tau"] == pytest.approx(sum(a + 1 for r in runs for a in r["accepted"]) /
                                                sum(len(r["accepted"]) for r in runs))
    p = payoff_sentence(t)
    assert f"{t['shifted']['tau']:.2f} tokens with the shifted head" in p
    for where in (head, note):
        assert esc(p) in where
    assert esc(p) not in text and "the headline's second line" in text
    assert "helps the draft" in head                       # 3 of 3, on average too
    fig = ambiguity_payoff_figure(d)
    assert {tr.name for tr in fig.data} == {"shifted head", "unshifted head"}
    shifted = next(tr for tr in fig.data if tr.name == "shifted head")
    assert shifted.y[0] == "all branches" and shifted.x[0] == pytest.approx(t["shifted"]["tau"])


def test_the_headline_promises_no_more_than_the_numbers():
    """Where the shifted head's draft of the target's next token is not higher on most branches, the headline says
    so; the numbers in it are the record's."""
    def br(text, qs, qu):
        return dict(text=text, p=0.2, vocab=[dict(token_id=1, text=" a", prob=0.6), dict(token_id=2, text=" b",
                                                                                        prob=0.1)],
                    vocab_shifted=[qs, 0.2], vocab_unshifted=[qu, 0.2])
    rec = dict(branches=[br(" x", 0.1, 0.3), br(" y", 0.2, 0.25), br(" z", 0.5, 0.1)], prefix="How can I")
    h = ambiguity_headline(rec)       # higher on one branch only, though higher on average
    assert "some branches only" in h and "after 1 of 3 branches" in h and "mean 26.7% vs 21.7%" in h
    rec["branches"][2] = br(" z", 0.05, 0.1)
    assert "does not help" in ambiguity_headline(rec) and "after 0 of 3" in ambiguity_headline(rec)
    rec["branches"] = [br(" x", 0.4, 0.3), br(" y", 0.3, 0.25), br(" z", 0.05, 0.1)]
    assert "helps the draft:" in ambiguity_headline(rec)
    assert "In tokens" not in ambiguity_headline(rec)          # no payoff recorded: none claimed


def test_eagle3_series_only_when_asked(oracle_record):
    """The EAGLE-3 head's series are behind the toggle: without it no EAGLE-3 bar, column or sentence."""
    from views.ambiguity import ambiguity_dist_figure
    *_, rec = oracle_record
    d = rec.to_dict()
    assert "EAGLE-3" not in ambiguity_html(d) and not any("EAGLE-3" in (t.name or "")
                                                         for t in ambiguity_dist_figure(d).data)
    # a record with EAGLE-3 drafts: shown only with eagle3=True
    d3 = dict(d, eagle3_head="e3", branches=[dict(b, vocab_eagle3=[0.5] * len(b["vocab"])) for b in d["branches"]])
    assert "EAGLE-3" not in ambiguity_html(d3)
    assert "EAGLE-3 head" in ambiguity_html(d3, eagle3=True)
    assert any("EAGLE-3" in (t.name or "") for t in ambiguity_dist_figure(d3, eagle3=True).data)


def test_payoff_runs_step_in_rounds_and_refuse_what_they_cannot_run(tiny_target):
    """PayoffRun.step advances every run by one cycle per call (the app's jobs); a plain-decoding shape or a record
    without token ids is refused with a message."""
    sh, un = random_head(tiny_target, "shifted"), random_head(tiny_target, "unshifted", seed=1)
    rec = compute_ambiguity(tiny_target, sh, un, PREFIX, n_branches=2).to_dict()
    run = PayoffRun.for_record(tiny_target, {"shifted": sh, "unshifted": un}, DecodeConfig(draft="chain", depth=3),
                               rec, new_tokens=4)
    assert run.step() == 4 and all(len(d.cycles) == 1 for *_, d in run.runs)     # the four prefills, one round
    n = 1
    while not run.done:
        run.step()
        n += 1
    assert n <= 5 and all(len(r.tokens) == 4 for b in run.result().branches for r in b.runs)
    assert re.search(r"a chain of 3 drafted tokens", run.result().shape)
    with pytest.raises(ValueError, match="chain or a tree"):
        PayoffRun.for_record(tiny_target, {"shifted": sh}, DecodeConfig(draft="vanilla"), rec)
    with pytest.raises(ValueError, match="token ids"):
        PayoffRun.for_record(tiny_target, {"shifted": sh}, TREE, dict(rec, token_ids=[]))
    assert dataclasses.is_dataclass(run.result())
