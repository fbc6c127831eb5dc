"""Text in any script, as Chromium draws it (issue 38.5): the Lens text panel of an Arabic answer (its records
rendered by views.text, the page's CSS) reads from the right with its letters joined; a tree whose tokens are byte
pieces of an emoji (views.tree's figure drawn by plotly.js) names the emoji in its boxes."""
import os

import pytest
from test_browser import ARGS, CHROMIUM, playwright_api  # noqa: F401  (skips without playwright / Chromium)
from test_text_scripts import ARABIC, EAGLE, records

from eagle_core.model.token_bytes import display_text
from views.page import CSS
from views.text import text_html
from views.tree import tree_figure

pytestmark = pytest.mark.browser

# the tokens' boxes in reading order: their left edges, and the run's width against the same text drawn plainly
PANEL_JS = """() => {
  const run = document.querySelector('.el-text .el-rtl') || document.querySelector('.el-text');
  const toks = [...document.querySelectorAll('.el-text .el-tok')];
  const plain = document.createElement('span');
  plain.textContent = toks.map((t) => t.textContent).join('');
  plain.dir = 'rtl';
  run.parentElement.appendChild(plain);
  const out = {lefts: toks.map((t) => t.getBoundingClientRect().left), right: run.getBoundingClientRect().right,
               boxRight: document.querySelector('.el-text').getBoundingClientRect().right,
               width: toks.reduce((w, t) => w + t.getBoundingClientRect().width, 0),
               plain: plain.getBoundingClientRect().width};
  plain.remove();
  return out;
}"""


def test_arabic_answer_reads_right_to_left_joined():
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 900, "height": 400})
        page.set_content(f"<meta charset='utf-8'><style>{CSS}</style><body style='width:800px'>"
                         f"{text_html(records(ARABIC))}</body>")
        m = page.evaluate(PANEL_JS)
        # reading order: the first word's tokens on the right, each next token further left (one line)
        lefts = m["lefts"]
        assert all(a >= b - 0.5 for a, b in zip(lefts, lefts[1:])), f"tokens laid out left to right: {lefts}"
        assert m["boxRight"] - m["right"] < 30, "the answer starts at the panel's right edge"
        # joined letters: the tokens together are as wide as the same text shaped in one piece (a letter cut off
        # from its neighbours takes its wider isolated form; a glyph between letters adds its own width)
        assert abs(m["width"] - m["plain"]) <= 2, m
        browser.close()


def test_emoji_pieces_in_the_tree_name_their_character():
    def node(i, parent, b, status, depth):
        return dict(index=i, parent=parent, text=display_text(b), token_id=i, status=status, depth=depth, q=0.5,
                    p=0.5, score=-1.0)
    rec = dict(cycle=3, nodes=[node(0, -1, b" an", "root", 0), node(1, 0, b" " + EAGLE[:2], "accepted", 1),
                               node(2, 1, EAGLE[2:3], "accepted", 2), node(3, 0, b" the", "rejected", 1)],
               accepted_path=[1, 2], bonus_text=display_text(EAGLE[3:]), bonus_kind="bonus", bonus_token=9,
               accept_length=2, new_tokens=[1, 2, 3], temperature=0)
    plotly_js = os.path.join(os.path.dirname(__import__("plotly").__file__), "package_data", "plotly.min.js")
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 900, "height": 500})
        page.set_content("<meta charset='utf-8'><div id='t' style='width:860px'></div>")
        page.add_script_tag(path=plotly_js)
        page.evaluate("(f) => Plotly.newPlot('t', f.data, f.layout)", tree_figure(rec).to_dict())
        boxes = page.evaluate("() => [...document.querySelectorAll('g.annotation')].map((g) => g.textContent)")
        assert "✓ ␣🦅 (bytes 1–2 of 4)" in boxes and "✓ 🦅 (byte 3 of 4)" in boxes, boxes
        assert any("🦅 (byte 4 of 4)" in b for b in boxes), boxes
        assert not any("<F0" in b or "<A6" in b or "<85" in b for b in boxes), "no bare byte piece on a box"
        browser.close()


# every token's span against the browser's own letters (Intl.Segmenter's grapheme clusters of the panel's text)
CLUSTER_JS = """() => {
  const toks = [...document.querySelectorAll('.el-text .el-tok')].map((t) => t.textContent);
  const text = toks.join('');
  const starts = new Set([...new Intl.Segmenter('und', {granularity: 'grapheme'}).segment(text)].map((s) => s.index));
  let at = 0;
  const inside = [];
  for (const t of toks) { if (!starts.has(at)) inside.push(t); at += t.length; }
  return {inside, count: toks.length};
}"""


def test_no_letter_is_split_by_a_token_in_any_script(real_tokenizer):
    """Devanagari, Bengali, Tamil, Thai, emoji with joiners, Arabic, Hebrew, combining accents as the embedded
    target's tokenizer splits them, one committed token a cycle (each a span, most with a ★ / ◆ after it): Chromium's
    own grapheme clusters (Intl.Segmenter) never begin inside a span, so no mark or span edge falls inside a letter
    (a vowel sign drawn alone on a dotted circle, as the panel drew Hindi)."""
    from test_text_scripts import SCRIPTS

    from eagle_core.model.token_bytes import TokenBytes
    tb = TokenBytes(real_tokenizer)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 900, "height": 400})
        for name, text in SCRIPTS.items():
            ids = real_tokenizer(text, add_special_tokens=False)["input_ids"]
            page.set_content(f"<meta charset='utf-8'><style>{CSS}</style><body style='width:800px'>"
                             f"{text_html(records([tb(i).hex() for i in ids], per=1))}</body>")
            m = page.evaluate(CLUSTER_JS)
            assert m["inside"] == [] and m["count"] > 1, (name, m)
        browser.close()
