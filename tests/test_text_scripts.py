"""Text in any script (issue 38.5): a right-to-left answer reads from the right with its letters joined (the text
panel's runs), and a token that holds only part of a character says which character it builds (the tree)."""
from views.text import first_strong, rtl_runs, text_html
from views.tree import piece_labels, tree_figure

from eagle_core.model.token_bytes import display_text, piece_bytes, piece_label

EAGLE = "🦅".encode()   # f0 9f a6 85: byte-level BPE draws it as two or more tokens
# "مرحبا بك في عالم البرمجة" as the embedded target's tokenizer (SmolLM2) splits it: mostly a letter a token
ARABIC = ["d985", "d8b1", "d8ad", "d8a8", "d8a7", "20d8a8", "d983", "20d9", "81", "d98a", "20d8b9", "d8a7d984",
          "d985", "20d8a7d984", "d8a8", "d8b1", "d985", "d8", "ac", "d8a9"]


def records(hexes, per=3):
    """Cycles of `per` committed tokens (per-1 accepted drafts, then the target's token), from token bytes."""
    recs = []
    bs = [bytes.fromhex(h) for h in hexes]
    for c, k in enumerate(range(0, len(bs), per)):
        chunk = bs[k:k + per]
        nodes = [dict(index=0, text="", token_id=0, parent=-1, depth=0, status="root", q=1.0, p=1.0, score=0.0)]
        for j, b in enumerate(chunk[:-1]):
            nodes.append(dict(index=j + 1, text=display_text(b), token_id=100 + k + j, parent=j, depth=j + 1,
                              status="accepted", q=0.9, p=0.9, score=-0.1))
        recs.append(dict(cycle=c + 1, accepted_path=list(range(1, len(chunk))), nodes=nodes,
                         bonus_text=display_text(chunk[-1]), bonus_kind="correction" if c % 2 else "bonus",
                         bonus_token=100 + k + len(chunk) - 1, new_tokens=list(range(len(chunk))),
                         new_token_bytes=[b.hex() for b in chunk], accept_length=len(chunk) - 1, temperature=0))
    return recs


def test_rtl_runs_hold_the_right_to_left_pieces_and_the_neutrals_between():
    texts = ["Hello", " ", "مر", "حبا", " ", "بك", ", ", "ok", " ", "في", "\n", "عالم", " "]
    assert rtl_runs(texts) == [False, False, True, True, True, True, False, False, False, True, False, True, False]
    assert first_strong(" 12 مرحبا hi") == "rtl" and first_strong("hi مرحبا") == "ltr" and first_strong("1 ") is None


def test_an_arabic_answer_is_one_right_to_left_run_without_glyphs_between_letters():
    html = text_html(records(ARABIC))
    panel = html.split("class='el-text'")[0].rsplit("<div", 1)[1] + html.split("class='el-text'")[1]
    assert "dir='rtl'" in panel.split(">")[0], "the panel reads from the right"
    body = panel.split("class='el-legend'")[0]
    assert body.count("class='el-rtl' dir='rtl'") == 1, "one isolated run: the cycles' bands inside it"
    inside = body.split("class='el-rtl' dir='rtl'>")[1]
    assert inside.count("el-tok") == len(ARABIC) - 2   # ف and ج are split over two tokens each: one span each
    assert inside.count("data-cycle='1'") >= 1 and inside.count("class='el-cyc") == len(records(ARABIC))
    # the ★ / ◆ glyph (an inline-block after a token) and bold type break joining: neither inside a run
    from views.text import CSS
    assert ".el-rtl .el-bonus::after, .el-rtl .el-correction::after {content: none;}" in CSS
    assert ".el-rtl .el-bonus, .el-rtl .el-correction {font-weight: inherit;}" in CSS


def test_left_to_right_text_is_unchanged():
    html = text_html(records(["48656c6c6f", "2c", "20776f726c64"]))
    assert "el-rtl" not in html.split("class='el-legend'")[0] and "<div dir='ltr' class='el-text'" in html


def test_piece_bytes_reads_display_text_back():
    for b in (b" \xf0\x9f", b"\xa6\x85 ok", "学".encode(), b"plain"):
        assert piece_bytes(display_text(b)) == b


def test_a_piece_says_which_character_it_builds():
    assert piece_label(b"", EAGLE[:2], EAGLE[2:]) == "🦅 (bytes 1–2 of 4)"
    assert piece_label(EAGLE[:2], EAGLE[2:3], EAGLE[3:]) == "🦅 (byte 3 of 4)"
    assert piece_label(EAGLE[:3], EAGLE[3:] + b" hi") == "🦅 (byte 4 of 4) hi"
    zh = "学习".encode()
    assert piece_label(zh[:1], zh[1:4], zh[4:]) == "学 (bytes 2–3 of 3) + 习 (byte 1 of 3)"
    assert piece_label(b"x", EAGLE[:2]) == "<F0 9F> (bytes 1–2 of 4, character unknown)"
    assert piece_label(b"", b" ab") is None and piece_label(EAGLE[:2], EAGLE[2:]) is not None


def test_tree_labels_a_piece_with_its_character_from_the_path():
    """The tree's boxes: a piece of 🦅 drafted over two nodes and finished by the target's token says 🦅 with its
    bytes; its rejected sibling, whose character the tree never completes, says so; whole tokens are unchanged."""
    def node(i, parent, b, status, depth):
        return dict(index=i, parent=parent, text=display_text(b), token_id=i, status=status, depth=depth, q=0.5,
                    p=0.5, score=-1.0)
    rec = dict(cycle=3, nodes=[node(0, -1, b" an", "root", 0), node(1, 0, b" " + EAGLE[:2], "accepted", 1),
                               node(2, 1, EAGLE[2:3], "accepted", 2), node(3, 1, b"\xa7", "rejected", 2),
                               node(4, 0, b" the", "rejected", 1)],
               accepted_path=[1, 2], bonus_text=display_text(EAGLE[3:]), bonus_kind="bonus", bonus_token=9,
               accept_length=2, new_tokens=[1, 2, 3], temperature=0)
    pieces, bonus = piece_labels(rec)
    assert pieces == {1: " 🦅 (bytes 1–2 of 4)", 2: "🦅 (byte 3 of 4)", 3: "<A7> (byte 3 of 4, character unknown)"}
    assert bonus == "🦅 (byte 4 of 4)"
    fig = tree_figure(rec)
    texts = [a["text"] for a in fig.to_dict()["layout"]["annotations"]]
    assert "✓ ␣🦅 (bytes 1–2 of 4)" in texts and "✓ 🦅 (byte 3 of 4)" in texts and "✗ ␣the" in texts
    assert any("🦅 (byte 4 of 4)" in t for t in texts), texts


SCRIPTS = {"Devanagari": "नमस्ते, आप कैसे हैं? क्षत्रिय विद्यार्थी", "Bengali": "আমি বাংলায় গান গাই",
           "Tamil": "வணக்கம் நண்பர்களே", "Thai": "สวัสดีครับ ที่นี่", "emoji": "family 👨‍👩‍👧 and 👍🏽 ok",
           "Arabic": "مرحبا بك في عالم البرمجة", "Hebrew": "שָׁלוֹם עוֹלָם", "accents": "e\u0301te\u0301 cafe\u0301"}


def test_a_token_boundary_never_splits_a_letter(real_tokenizer):
    """Each script as the embedded target's tokenizer splits it, committed one cycle per token (every boundary a
    span's edge, every other token the target's, with its ★ / ◆ after it): every span of the text panel begins
    where a grapheme cluster begins (nothing drawn inside a letter, a mark only after a whole one), and the spans
    put together are the text itself."""
    import html as htmllib
    import re

    import regex
    from eagle_core.model.token_bytes import TokenBytes, join_clusters, join_pieces
    tb = TokenBytes(real_tokenizer)
    for name, text in SCRIPTS.items():
        ids = real_tokenizer(text, add_special_tokens=False)["input_ids"]
        body = text_html(records([tb(i).hex() for i in ids], per=1)).split("class='el-legend'")[0]
        spans = [htmllib.unescape(s) for s in re.findall(r"<span class='el-tok[^>]*>([^<]*)</span>", body)]
        assert "".join(spans).replace("↵", "") == text, name
        starts = {m.start() for m in regex.finditer(r"\X", text)}
        at = 0
        for s in spans:
            assert at in starts, (name, s, spans)
            at += len(s)
        # the check checks something: in the scripts that combine, the tokenizer cuts inside some letter (after
        # the pieces of split characters are joined), and the panel joins those tokens
        if name not in ("Arabic",):
            pieces = join_pieces([tb(i) for i in ids])
            assert len(join_clusters(pieces)) < len(pieces) and len(spans) == len(join_clusters(pieces)), name


def test_the_chat_templates_end_token_is_named_not_shown_as_markup():
    """The answer's last token, <|im_end|>, is drawn as a named end mark (its markup only in the hover title); the
    same-law panel's position leaves the template out ("<|im_start|>assistant")."""
    import re

    from views.common import answer_tail
    html = text_html(records(["48656c6c6f", "2e", "3c7c696d5f656e647c3e"])).split("class='el-legend'")[0]
    shown = re.sub(r"<[^>]+>", "", re.sub(r"title='[^']*'", "", html))
    assert "⏹ end of answer" in shown and "im_end" not in shown and "&lt;|" not in shown, shown
    assert "el-end" in html and "ends its answer here" in html
    assert answer_tail("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nSure, the") == "Sure, the"
    assert answer_tail("<|im_start|>assistant\n") == "" and answer_tail("How can I") == "How can I"
