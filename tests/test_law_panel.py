"""The Lens's "same law" panel through the API (tiny target): EAGLE's first tokens beside plain sampling at the
session's position, the test's sentence, clear messages at T = 0 and for plain decoding."""
from __future__ import annotations

import pytest

pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

from servers import app_in_process, cfg, plot  # noqa: E402

PROMPT = "How can I learn Python?"


@pytest.fixture(scope="module")
def url():
    with app_in_process("tiny") as u:
        yield u


def draw(c, n=400, **kw):
    return c.predict(n, PROMPT, True, *cfg(**kw), api_name="/same_law")


def test_the_panel_draws_both_laws_at_the_sessions_position(url):
    c = Client(url, verbose=False)
    c.predict(PROMPT, True, *cfg(temperature=0.9, seed=4), api_name="/step")        # the prefill: a position
    fig, note = draw(c, temperature=0.9, seed=4)
    names = [t["name"] for t in plot(fig)["data"]]
    assert names[0].startswith("EAGLE") and names[1].startswith("plain") and names[2].startswith("p:")
    eagle, plain = plot(fig)["data"][0]["y"], plot(fig)["data"][1]["y"]
    assert abs(sum(eagle) - 1) < 1e-6 and abs(sum(plain) - 1) < 1e-6        # every draw is a bar or "other"
    # the tiny random target's law is nearly flat (no token expected 5 times in 400 draws over 49,152): the panel
    # must say it cannot test it, not a verdict (a peaked law's verdicts, "agree" and, with a wrong rule injected,
    # "differ", are tests/test_law.py's)
    assert max(plot(fig)["data"][2]["y"][:-1]) < 0.01, "not the flat law this test expects"   # (the last: "other")
    assert "400 draws each at T = 0.9" in note and "too flat to test" in note and "p-value" not in note, note
    assert "Position: after" in note


def test_clear_messages(url):
    c = Client(url, verbose=False)
    _, note = draw(c, temperature=0)
    assert note.startswith("ℹ️") and "At T = 0 both are the argmax" in note
    fig, note = draw(c, n=10**6, temperature=0.7)              # clamped, and said so
    assert "5,000 draws each" in note and "asked for 1,000,000: 5,000 is the range's end" in note
    _, note = draw(c, temperature=0.7, top_p=7)                # refused by the settings' own limits
    assert note.startswith("❌") and "top" in note.lower()


def test_byte_pieces_are_named_by_their_bytes(url, monkeypatch):
    """A token that holds part of a character is named by its bytes ("<E0 A4>"), as the tree names it, in the bars
    and the note: never U+FFFD (a lone tokenizer.decode of such a token, which step 4 showed)."""
    import torch

    import tabs.law as tab
    from eagle_core.serving.loading import MODEL
    target, _ = MODEL.require()
    pieces = [t for t in range(target.vocab_size)
              if len(target.token_bytes(t)) == 1 and target.token_bytes(t)[0] >= 0x80]
    assert len(pieces) >= 3
    p = torch.full((target.vocab_size,), 0.1 / target.vocab_size)
    p[pieces[:3]] += 0.3
    monkeypatch.setattr(tab, "root_dists", lambda *a, **k: (p, p.clone()))
    c = Client(url, verbose=False)
    fig, note = draw(c, n=300, temperature=0.9)
    labels = plot(fig)["data"][0]["x"]
    assert "\ufffd" not in note and not any("\ufffd" in x for x in labels), (labels, note)
    assert sum(x.startswith("<") and x.endswith(">") for x in labels) >= 3, labels
    assert "p-value" in note and "For scale" in note
