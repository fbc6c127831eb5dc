"""The Race's verdict on two generations: where they part, the target's logit margin there, and the sentence."""
from __future__ import annotations

import pytest
import torch

from eagle_core.decoding import divergence


def test_divergence_index_tokens_and_margin(tiny_target):
    ids = tiny_target.render_prompt("How can I")
    assert divergence.divergence(tiny_target, ids, [10, 20, 30], [10, 20, 30]) is None
    assert divergence.divergence(tiny_target, ids, [10, 20], [10, 20, 30]) is None   # a prefix: no token to compare
    assert divergence.divergence(tiny_target, ids, [], []) is None

    div = divergence.divergence(tiny_target, ids, [10, 20, 30, 40], [10, 20, 31, 7])
    assert (div["index"], div["plain_token"], div["eagle_token"]) == (2, 30, 31)
    assert div["plain_text"] == tiny_target.token_text(30) and div["eagle_text"] == tiny_target.token_text(31)
    with torch.no_grad():   # the logits after prompt + common prefix, computed directly
        logits = tiny_target.model(torch.tensor([ids + [10, 20]])).logits[0, -1].float()
    assert div["margin"] == pytest.approx(abs(float(logits[30] - logits[31])), abs=1e-5)
    top = torch.topk(logits, 2).values
    assert div["top2_margin"] == pytest.approx(float(top[0] - top[1]), abs=1e-5)
    assert div["top_token"] == int(logits.argmax())
    # near_tie reads the same top-2 margin
    assert divergence.near_tie(tiny_target, ids, [10, 20], eps=div["top2_margin"] + 1e-6)
    assert not divergence.near_tie(tiny_target, ids, [10, 20], eps=div["top2_margin"] / 2)

    # the greedy case: plain took the argmax, EAGLE the runner-up -> margin == top-2 margin
    first, second = torch.topk(logits, 2).indices.tolist()
    div = divergence.divergence(tiny_target, ids, [10, 20, first], [10, 20, second])
    assert div["margin"] == pytest.approx(div["top2_margin"], abs=1e-6)
    # a divergence at the very first token uses the prompt alone
    div = divergence.divergence(tiny_target, ids, [5], [6])
    assert div["index"] == 0


def test_tie_eps_for_dtype():
    assert divergence.tie_eps_for(torch.float32) == divergence.TIE_EPS
    assert divergence.tie_eps_for(torch.bfloat16) > divergence.tie_eps_for(torch.float16) > divergence.TIE_EPS


def test_race_sentence():
    app = pytest.importorskip("app")
    div = {"index": 3, "plain_token": 1, "eagle_token": 2, "plain_text": " the", "eagle_text": "\n",
           "margin": 3e-5, "top_token": 1, "top2_margin": 3e-5}
    assert app.race_sameness(True, [1, 2], [1, 2], None, 1e-4) == "identical text (greedy: token for token)"
    tie = app.race_sameness(True, [0, 0, 0, 1], [0, 0, 0, 2], div, 1e-4)
    assert tie.startswith("texts part at token 3: plain “ the” vs EAGLE “\\n”")
    assert "near-tie (logit margin 3e-05" in tie and "not a sampling difference" in tie
    assert "different samples" not in tie and "bug" not in tie
    bug = app.race_sameness(True, [0, 0, 0, 1], [0, 0, 0, 2], dict(div, margin=2.5), 1e-4)
    assert "not a near-tie (logit margin 2.5 > 0.0001)" in bug and "real mismatch" in bug and "bug" in bug
    assert "different samples" not in bug
    sampled = app.race_sameness(False, [1, 2], [1, 3], None, 0.0)
    assert sampled.startswith("different samples (T > 0") and "exact samples of the target" in sampled
    assert app.race_sameness(False, [1, 2], [1, 2], None, 0.0) == "identical text"
    assert "one stopped earlier" in app.race_sameness(True, [1, 2], [1, 2, 3], None, 1e-4)
