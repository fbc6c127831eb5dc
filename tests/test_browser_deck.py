"""The walkthrough as a deck in headless Chromium (tiny target; issue 38, point 1): on a 1280x720 projector in
presenter mode a teacher clicks through all seven steps, with Next and with the arrow keys, and never scrolls:
Prev, the step counter, Next, the text, the buttons and the figure are inside the window on every step. Step 3's
tree and mask are linked by hover. On a 390 px phone the deck stacks, Prev / Next stay on screen and a tree's
tokens are whole. Every step's text is at most three sentences of at most 55 words, at every size (issue 50.9).
Screenshots go to test-artifacts/."""
import os
import re

import pytest
from test_browser import ARGS, ARTIFACTS, CHROMIUM, playwright_api, server  # noqa: F401  (fixture + skips)

pytestmark = pytest.mark.browser

STEPS = 7
BOXES_JS = """() => Object.fromEntries(['#el-walk-prev', '#el-walk-next', '#el-walk-count', '#el-walk-text',
  '#el-walk-live', '#el-walk-apply', '#el-walk-fig .js-plotly-plot', '#el-walk-side .js-plotly-plot',
  '#el-walk-left'].map((s) => { const e = document.querySelector(s); if (!e) return [s, null];
  const r = e.getBoundingClientRect(); return [s, {t: r.top, b: r.bottom, l: r.left, r: r.right}]; }))"""


def counter(page) -> str:
    return page.locator("#el-walk-count").inner_text()


def wait_step(page, k: int):
    page.wait_for_function(f"() => document.querySelector('#el-walk-count').innerText.startsWith('Step {k} of')",
                           timeout=20000)
    page.wait_for_function("() => { const p = document.querySelector('#el-walk-fig .js-plotly-plot');"
                           " return p && p.__elFitted; }", timeout=20000)
    page.wait_for_timeout(700)


def open_deck(p, url, width, height, presenter):
    browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url)
    page.wait_for_function("() => document.body.innerText.includes('Live: target')", timeout=90000)
    if presenter:
        page.get_by_label("Presenter mode (large type)").check()
    page.get_by_role("tab", name="Walkthrough").click()
    wait_step(page, 1)
    return browser, page


def test_a_projector_clicks_through_the_deck_without_scrolling(server):  # noqa: F811
    os.makedirs(ARTIFACTS, exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser, page = open_deck(p, server, 1280, 720, presenter=True)
        for k in range(1, STEPS + 1):
            if k > 1:
                if k % 2:                                   # Next, and the arrow key, each for half the steps
                    page.locator("#el-walk-next").click()
                else:
                    page.locator("body").click(position={"x": 5, "y": 700})   # the focus on no input
                    page.keyboard.press("ArrowRight")
                wait_step(page, k)
            assert page.evaluate("() => window.scrollY") == 0, k
            boxes = page.evaluate(BOXES_JS)
            for sel, b in boxes.items():
                if b is None:
                    assert sel == "#el-walk-side .js-plotly-plot", (k, sel)   # only some steps have two figures
                    continue
                assert b["t"] >= 0 and b["b"] <= 720 + 1 and b["l"] >= 0 and b["r"] <= 1280 + 1, (k, sel, b)
            fig = boxes["#el-walk-fig .js-plotly-plot"]
            assert fig["b"] - fig["t"] >= 400, (k, "the figure takes the screen's height", fig)
            assert (fig["r"] - fig["l"]) * (fig["b"] - fig["t"]) >= 0.35 * 1280 * 720 * (0.5 if k in (3, 6) else 1), k
            assert page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth") <= 1, k
            page.screenshot(path=os.path.join(ARTIFACTS, f"deck_1280_step{k}.png"))
        assert page.locator("#el-walk-next").is_disabled()           # the last step: Next is off
        page.keyboard.press("ArrowLeft")
        wait_step(page, STEPS - 1)
        # a key typed into a box is the box's: the law panel's number on step 4 keeps its arrow keys
        for k in range(STEPS - 2, 3, -1):
            page.keyboard.press("ArrowLeft")
            wait_step(page, k)
        box = page.locator("#el-walk-law-n input").first
        box.click()
        box.press("ArrowLeft")
        page.wait_for_timeout(800)
        assert counter(page).startswith("Step 4 of"), "an arrow key in a number box does not move the deck"
        browser.close()


def test_step_three_links_the_tree_and_its_mask(server):  # noqa: F811
    with playwright_api.sync_playwright() as p:
        browser, page = open_deck(p, server, 1440, 900, presenter=False)
        for k in (2, 3):
            page.locator("#el-walk-next").click()
            wait_step(page, k)
        page.wait_for_selector("#el-walk-side .js-plotly-plot g.annotation", timeout=20000)
        i = page.evaluate("() => (document.querySelector('#el-walk-side .js-plotly-plot').layout.annotations || [])"
                          ".findIndex((a) => a.name === 'node-1')")
        node = page.locator(f"#el-walk-side g.annotation[data-index='{i}'] rect").first
        b = node.bounding_box()
        page.mouse.move(b["x"] + b["width"] / 2, b["y"] + b["height"] / 2)
        page.wait_for_function("() => (document.querySelector('#el-walk-fig .js-plotly-plot').layout.shapes || [])"
                               ".length === 1", timeout=5000)
        page.mouse.move(5, 5)
        page.wait_for_function("() => (document.querySelector('#el-walk-fig .js-plotly-plot').layout.shapes || [])"
                               ".length === 0", timeout=5000)
        # a mask cell: the nodes its row sees light up in the tree
        cell = page.locator("#el-walk-fig .nsewdrag").first.bounding_box()
        page.mouse.move(cell["x"] + 10, cell["y"] + 10, steps=3)
        page.mouse.move(cell["x"] + cell["width"] * 0.95, cell["y"] + cell["height"] * 0.95, steps=5)
        page.wait_for_function("() => document.querySelectorAll('#el-walk-side g.annotation.el-deck-hl').length >= 2",
                               timeout=5000)
        page.screenshot(path=os.path.join(ARTIFACTS, "deck_step3_linked.png"))
        browser.close()


def test_a_phone_stacks_the_deck_and_keeps_prev_next_on_screen(server):  # noqa: F811
    with playwright_api.sync_playwright() as p:
        browser, page = open_deck(p, server, 390, 844, presenter=False)
        for k in range(1, STEPS + 1):
            if k > 1:
                page.locator("#el-walk-next").click()
                wait_step(page, k)
            assert page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth") <= 1, k
            page.evaluate("() => window.scrollTo(0, document.scrollingElement.scrollHeight)")
            page.wait_for_timeout(300)
            for sel in ("#el-walk-prev", "#el-walk-next"):   # the bar stays at the top as the page scrolls
                b = page.locator(sel).bounding_box()
                assert b and 0 <= b["y"] and b["y"] + b["height"] <= 844, (k, sel, b)
            page.evaluate("() => window.scrollTo(0, 0)")
        page.screenshot(path=os.path.join(ARTIFACTS, "deck_390_step7.png"), full_page=True)
        browser.close()


# Issue 50, points 1 and 5: with presenter mode off the text column wrapped past the window's height into a second
# column under the figure (the note and the "More" fold hidden behind it), the page's header left the figure ~320 px
# at 1280x720 (step 4's and 7's bars ~60 px tall), presenter type cut the trees' tokens to "␣…", and on a phone the
# plot's toolbar covered the figure's title.
SEEN_JS = """() => {   // the note and the More fold: inside the window, and what is drawn at their centre is theirs
  const out = {};
  for (const s of ['#el-walk-note', '#el-walk-more']) {
    const e = document.querySelector(s), r = e.getBoundingClientRect();
    const top = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
    out[s] = {t: r.top, b: r.bottom, l: r.left, r: r.right, h: r.height,
              mine: !!top && e.contains(top), at: top ? (top.id || String(top.className.baseVal ?? top.className)) : null};
  }
  return out;
}"""
# the figure's plot areas (a subplot's drag rectangle is its plotting area): the tallest one, px
PLOT_AREA_JS = """() => Math.max(0, ...[...document.querySelectorAll('#el-walk-fig .nsewdrag')]
  .map((e) => e.getBoundingClientRect().height))"""
NODES_JS = """() => [...document.querySelectorAll('#el-walk-deck .js-plotly-plot')].flatMap((el) =>
  [...el.querySelectorAll('g.annotation')].filter((g) =>
    ((el.layout.annotations || [])[+g.getAttribute('data-index')] || {}).name?.startsWith('node-'))
  .map((g) => { const t = g.querySelector('text');
    return {text: t.textContent, px: parseFloat(t.style.fontSize || getComputedStyle(t).fontSize)}; }))"""
SCREENS = [(1280, 720, False), (1280, 720, True), (1440, 900, False), (1440, 900, True)]


def each_step(page):
    for k in range(1, STEPS + 1):
        if k > 1:
            page.locator("#el-walk-next").click()
            wait_step(page, k)
        short_text(page, k)
        yield k


MAX_WORDS = 55   # a step's three sentences (issue 50.9: the texts ran to 56-65 words on steps 2, 4, 5 and 6)


def short_text(page, k: int):
    """Issue 50.9: each step says its point in at most three short sentences (the detail folds under "More")."""
    text = page.locator("#el-walk-text").inner_text().strip()
    words, sentences = len(text.split()), len(re.findall(r"[.!?](?:\s|$)", text))
    assert words <= MAX_WORDS and sentences <= 3, (k, f"{words} words, {sentences} sentences", text)


@pytest.mark.parametrize("width,height,presenter", SCREENS,
                         ids=[f"{w}x{h}-{'presenter' if p else 'plain'}" for w, h, p in SCREENS])
def test_every_step_shows_its_note_its_more_fold_a_full_figure_and_whole_tokens(server, width, height,  # noqa: F811
                                                                                 presenter):
    os.makedirs(ARTIFACTS, exist_ok=True)
    mode = "presenter" if presenter else "plain"
    with playwright_api.sync_playwright() as p:
        browser, page = open_deck(p, server, width, height, presenter=presenter)
        for k in each_step(page):
            if k in (3, 4, 6, 7):
                page.screenshot(path=os.path.join(ARTIFACTS, f"deck_{width}x{height}_{mode}_step{k}.png"))
            assert page.evaluate("() => window.scrollY") == 0, k
            for sel, b in page.evaluate(SEEN_JS).items():
                assert b["t"] >= 0 and b["b"] <= height + 1 and b["l"] >= 0 and b["r"] <= width + 1, (k, sel, b)
                assert b["mine"], (k, sel, "covered by", b["at"], b)
                if sel == "#el-walk-note":
                    assert b["h"] >= 40, (k, "the note shows at least two lines", b)
            fig = page.locator("#el-walk-fig .js-plotly-plot").bounding_box()
            assert fig["height"] >= 0.55 * height, (k, "the figure takes the screen's height", fig)
            # the plot itself not squashed to a strip (steps 4 and 7 had bars ~60 px tall); beside a second figure
            # (steps 3 and 6) a heatmap's square cells are bounded by the half width it has
            two = page.locator("#el-walk-side .js-plotly-plot").is_visible()
            assert page.evaluate(PLOT_AREA_JS) >= (0.15 if two else 0.2) * height, (k, "the plot squashed to a strip")
            for node in page.evaluate(NODES_JS):   # a tree's tokens whole, in type a class can read
                assert "…" not in node["text"], (k, "a token cut short", node)
                assert node["px"] >= (13.5 if presenter else 12), (k, "a token in type too small to read", node)
        browser.close()


MODEBAR_JS = """() => [...document.querySelectorAll('#el-walk-deck .js-plotly-plot')].filter((el) => el.offsetParent)
  .map((el) => { const bar = el.querySelector('.modebar'), title = el.querySelector('.g-gtitle text.gtitle');
    const box = (e) => { if (!e) return null; const r = e.getBoundingClientRect();
      return r.width > 0 ? {t: r.top, b: r.bottom, l: r.left, r: r.right} : null; };
    return {id: el.closest('[id]').id, bar: box(bar), title: box(title)}; })"""


# a phone's deck: the trees' node boxes shown (their token, their box, the figure's box and how far it scrolls sideways)
PHONE_NODES_JS = """() => [...document.querySelectorAll('#el-walk-deck .js-plotly-plot')].filter((el) => el.offsetParent)
  .flatMap((el) => { const anns = el.layout.annotations || [], f = el.getBoundingClientRect();
    return [...el.querySelectorAll('g.annotation')]
      .filter((g) => ((anns[+g.getAttribute('data-index')] || {}).name || '').startsWith('node-'))
      .map((g) => { const b = (g.querySelector('.annotation-text-g') || g).getBoundingClientRect();
        const t = g.querySelector('text');
        return {text: t.textContent, px: parseFloat(t.style.fontSize || getComputedStyle(t).fontSize),
                l: b.left - f.left + el.scrollLeft, r: b.right - f.left + el.scrollLeft, t: b.top, b: b.bottom,
                box: f.width, scroll: el.scrollWidth, fig: el.closest('[id]').id}; }); })"""


def test_a_phone_keeps_the_toolbar_off_the_titles_and_the_trees_tokens_whole(server):  # noqa: F811
    """On a 390 px phone the plot's toolbar covers no figure's title (issue 50.5), and a tree's tokens are whole, in
    boxes that do not touch (issue 50: step 6's runner-up read "✓ ␣p…"): a tree too wide for the phone is drawn wider
    and its box scrolls sideways, the page itself does not."""
    with playwright_api.sync_playwright() as p:
        browser, page = open_deck(p, server, 390, 844, presenter=False)
        titled = trees = 0
        for k in each_step(page):
            page.wait_for_function("() => window.__elFitQueue() === 0", timeout=20000)   # the tree beside it too
            nodes = page.evaluate(PHONE_NODES_JS)
            trees += bool(nodes)
            for a in nodes:
                assert "…" not in a["text"], (k, "a token cut short", a)
                assert a["px"] >= 11, (k, "a token in type too small to read", a)
                assert a["l"] >= -1 and a["r"] <= a["scroll"] + 1, (k, "a box past the figure's edge", a)
            for i, a in enumerate(nodes):
                for b in nodes[i + 1:]:
                    ox, oy = min(a["r"], b["r"]) - max(a["l"], b["l"]), min(a["b"], b["b"]) - max(a["t"], b["t"])
                    assert a["fig"] != b["fig"] or ox <= -3 or oy <= -3, (k, "two boxes touch", a, b)
            assert page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth") <= 1, k
            for f in page.evaluate(MODEBAR_JS):
                if not (f["bar"] and f["title"]):
                    continue
                titled += 1
                a, b = f["bar"], f["title"]
                ox = min(a["r"], b["r"]) - max(a["l"], b["l"])
                oy = min(a["b"], b["b"]) - max(a["t"], b["t"])
                assert ox <= 0 or oy <= 0, (k, f["id"], "the toolbar covers the title", f)
            if k in (3, 4, 6, 7):
                page.locator("#el-walk-fig").scroll_into_view_if_needed()
                page.screenshot(path=os.path.join(ARTIFACTS, f"deck_390_step{k}_figure.png"))
            if k in (2, 3, 6):
                page.locator("#el-walk-side" if k != 2 else "#el-walk-fig").scroll_into_view_if_needed()
                page.screenshot(path=os.path.join(ARTIFACTS, f"deck_390_step{k}_tree.png"))
        assert titled >= 5, "the deck's figures have titles and toolbars to compare"
        assert trees >= 3, "steps 2, 3 and 6 draw a tree"
        browser.close()
