"""True characters in any script: tokens as bytes, text decoded from their join, byte pieces for partial tokens."""
from __future__ import annotations

import dataclasses

import pytest

from conftest import tiny_llama
from eagle_core.decoding.records import CycleRecord, TreeNode
from eagle_core.model.target import load_target
from eagle_core.model.token_bytes import display_text, join_pieces
from views import node_choices, probs_figure, text_html, tree_figure

TEXTS = ["你好，世界！我们今天学习推测解码。", "مرحبا بالعالم، كيف حالك؟", "Eagles 🦅 fly high 🚀✨ — naïve café"]


@pytest.fixture(scope="module")
def target(real_tokenizer):
    return load_target(model=tiny_llama(), tokenizer=real_tokenizer, device="cpu")


def records_of(target, ids, per_cycle=3):
    """Cycle records as the engine writes them for the committed tokens `ids` (each cycle: drafted + bonus)."""
    recs = []
    for c, start in enumerate(range(0, len(ids), per_cycle)):
        chunk = ids[start:start + per_cycle]
        nodes = [TreeNode(0, 1, target.token_text(1), -1, 0, 1.0, 1.0, 0.0, "root")]
        for k, t in enumerate(chunk[:-1]):
            nodes.append(TreeNode(k + 1, t, target.token_text(t), k, k + 1, 0.5, 0.5, -0.7, "accepted"))
        recs.append(CycleRecord(
            cycle=c + 1, prefix_len=5 + start, nodes=nodes, accepted_path=list(range(1, len(chunk))),
            accepted_tokens=chunk[:-1], bonus_token=chunk[-1], bonus_text=target.token_text(chunk[-1]),
            bonus_kind="bonus", residual_topk=[], new_tokens=chunk, accept_length=len(chunk) - 1,
            draft_seconds=0.01, verify_seconds=0.01, other_seconds=0.0, total_new_tokens=start + len(chunk),
            target_forwards=c + 2, tau=1.0, new_token_bytes=[target.token_bytes(t).hex() for t in chunk]))
    return [dataclasses.asdict(r) for r in recs]


@pytest.mark.parametrize("text", TEXTS, ids=["chinese", "arabic", "emoji"])
def test_text_tree_and_lists_show_true_characters(target, text):
    ids = target.tokenizer(text, add_special_tokens=False)["input_ids"]
    if text != TEXTS[1]:   # Chinese and emoji characters are split over tokens: decoding tokens alone gives "�"
        assert "�" in "".join(target.tokenizer.decode([i]) for i in ids)
    recs = records_of(target, ids)
    html = text_html(recs)
    assert "�" not in html
    for ch in text.replace(" ", ""):
        assert ch in html, ch                                  # every character appears whole in the text panel
    for rec in recs:
        assert "�" not in tree_figure(rec).to_json()
        assert "�" not in probs_figure(rec, None).to_json()
        assert all("�" not in label for label, _ in node_choices(rec))
    partial = [target.token_text(i) for i in ids if display_text(target.token_bytes(i)).startswith("<")]
    if any(ord(c) > 0x7FF for c in text):                      # 3- and 4-byte characters split over tokens
        assert partial and all(p.endswith(">") for p in partial)


def test_join_pieces_groups_split_characters():
    parts = join_pieces([b"\xe4\xbd", b"\xa0", b"ok", b"\xf0\x9f", b"\xa6", b"\x85", b"\xe4"])
    assert parts == [([0, 1], "你"), ([2], "ok"), ([3, 4, 5], "🦅"), ([6], "<E4>")]
    assert display_text(b" \xf0\x9f") == " <F0 9F>" and display_text("é".encode()) == "é"


def test_engine_records_carry_bytes(target):
    from eagle_core.decoding.engine import DecodeConfig, generate
    from eagle_core.model.head import random_head
    got = generate(target, random_head(target), DecodeConfig(draft="static", tree="cpu-4", max_new_tokens=12),
                   target.render_prompt("你好"))
    joined = b"".join(bytes.fromhex(h) for c in got.cycles for h in c.new_token_bytes)
    assert joined.decode("utf-8", errors="replace") == got.text
    assert all(c.nodes[0].text == target.token_text(c.nodes[0].token_id) for c in got.cycles)
    assert len(joined) == len(got.text.encode("utf-8"))
