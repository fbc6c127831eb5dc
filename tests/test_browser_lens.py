"""The Lens puts the cycle first, in headless Chromium (tiny target): at 1440x900 and on a 1280x720 projector in
presenter mode the first screen holds the text, the draft tree and Step / Run / Play; the text panel follows a
Run to its newest token; text and tree are linked (hover or click a token: its node lights up, and back).
Screenshots go to test-artifacts/ (look at them).
"""
import os

import pytest
from test_browser import ARGS, ARTIFACTS, CHROMIUM, playwright_api, server  # noqa: F401  (fixture + skips)

pytestmark = pytest.mark.browser

SIZES = {"1440x900": (1440, 900, False), "1280x720-presenter": (1280, 720, True)}

BOXES_JS = """() => {
  const box = (e) => { if (!e) return null; const r = e.getBoundingClientRect();
                       return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
  const q = (s) => box(document.querySelector(s));
  const nodes = [...document.querySelectorAll('#el-tree g.annotation')].map(box).filter((r) => r.bottom > r.top);
  return {vh: window.innerHeight, vw: window.innerWidth, y: window.scrollY, text: q('.el-text'), title: q('#el-tree .gtitle'),
          tree: q('#el-tree .js-plotly-plot'), nodes, step: q('#el-step'), run: q('#el-run'), play: q('#el-play'),
          status: q('#el-status')};
}"""
# the newest token of the text panel, against what the panel shows (its scrolled box) and the viewport
NEWEST_JS = """() => {
  const t = document.querySelector('.el-text'), toks = t.querySelectorAll('.el-tok');
  const last = toks[toks.length - 1].getBoundingClientRect(), r = t.getBoundingClientRect();
  return {overflows: t.scrollHeight > t.clientHeight + 4, top: last.top, bottom: last.bottom, ptop: r.top,
          pbottom: r.bottom, vh: window.innerHeight, tokens: toks.length};
}"""
# the tree annotation lit by the linked views: its node name ('node-<i>', '' for the bonus box) or null
LIT_NODE_JS = """() => {
  const el = document.querySelector('#el-tree .js-plotly-plot');
  const g = el && el.querySelector('g.annotation.el-hl');
  if (!g) return null;
  const a = el.layout.annotations[Number(g.getAttribute('data-index'))];
  return a.name || '';
}"""


def inside(box, vh, vw, name):
    assert box is not None, f"{name}: not on the page"
    assert box["top"] >= 0 and box["bottom"] <= vh and box["left"] >= 0 and box["right"] <= vw, \
        f"{name} is not on the first screen: {box} in {vw}x{vh}"


def open_lens(p, url, size):
    w, h, presenter = SIZES[size]
    browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page(viewport={"width": w, "height": h})
    page.goto(url)
    page.wait_for_function("() => document.body.innerText.includes('Live: target')", timeout=90000)
    if presenter:
        page.get_by_label("Presenter mode (large type)").check()
    page.wait_for_selector("#el-tree g.annotation", timeout=30000)
    page.wait_for_timeout(600)
    return browser, page


def first_screen(page, tag):
    page.evaluate("() => window.scrollTo(0, 0)")     # the first screen: what shows without scrolling
    b = page.evaluate(BOXES_JS)
    vh, vw = b["vh"], b["vw"]
    assert b["y"] == 0
    for name in ("step", "run", "play", "status"):
        inside(b[name], vh, vw, name)
    inside(b["text"], vh, vw, "the text panel")
    inside(b["title"], vh, vw, "the tree's title")
    assert b["tree"]["top"] < vh - 250, f"the tree starts too low: {b['tree']} in a {vh} px screen"
    shown = [n for n in b["nodes"] if n["bottom"] <= vh]
    assert len(shown) >= 2, f"the tree's nodes are below the first screen: {b['nodes']}"
    # the status line sits next to the buttons (under them, in the same column)
    assert 0 <= b["status"]["top"] - b["run"]["bottom"] < 80 and abs(b["status"]["left"] - b["step"]["left"]) < 40
    page.screenshot(path=os.path.join(ARTIFACTS, f"lens_{tag}.png"))


@pytest.mark.parametrize("size", list(SIZES))
def test_the_cycle_comes_first_and_the_text_follows_a_run(server, size):
    os.makedirs(ARTIFACTS, exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser, page = open_lens(p, server, size)
        first_screen(page, f"{size}_first")
        # a Run of 40 tokens (the tiny target writes many newlines: more lines than the panel holds)
        page.locator("#el-settings > button").first.click()   # the folded settings
        box = page.locator("input[type=number][aria-label*='Max new tokens']").first
        box.fill("40")
        box.press("Enter")
        page.locator("#el-settings > button").first.click()
        page.evaluate("() => window.scrollTo(0, 0)")
        page.locator("#el-run").click()
        page.wait_for_function("() => document.querySelector('#el-status').innerText.includes('Generation finished')",
                               timeout=60000)
        page.wait_for_timeout(500)
        n = page.evaluate(NEWEST_JS)
        assert n["overflows"], f"a Run this long must overflow the panel (else this test shows nothing): {n}"
        assert n["top"] >= n["ptop"] - 2 and n["bottom"] <= n["pbottom"] + 2, f"the newest token is scrolled away: {n}"
        assert n["bottom"] <= n["vh"], f"the newest token is below the first screen: {n}"
        first_screen(page, f"{size}_run")
        browser.close()


def test_a_long_prompt_is_shortened_on_screen(server):
    with playwright_api.sync_playwright() as p:
        browser, page = open_lens(p, server, "1440x900")
        page.fill("textarea", "Tell me about EAGLE. " * 190)    # 3,990 characters
        page.locator("#el-step").click()
        page.wait_for_function("() => (document.querySelector('#el-tree .gtitle') || {}).textContent?.includes('prefill')",
                               timeout=30000)
        summary = page.locator(".el-prompt summary").first
        assert "shortened on screen" in summary.inner_text()
        full = page.locator(".el-prompt-full").first
        assert not full.is_visible()
        page.evaluate("() => window.scrollTo(0, 0)")
        inside(page.evaluate(BOXES_JS)["text"], 900, 1440, "the text panel under a long prompt")
        summary.click()
        assert full.is_visible() and full.bounding_box()["height"] < 260, "the whole prompt, in a box of its own"
        browser.close()


def test_text_and_tree_are_linked(server):
    """On the recorded run of the first paint (no model work): hover a drafted token of the cycle shown, its node
    lights up in the tree; hover a node on the accepted path, its token lights up; click a token of an earlier
    cycle, the slider and the tree go to that cycle and its node stays lit."""
    with playwright_api.sync_playwright() as p:
        browser, page = open_lens(p, server, "1440x900")
        shown = page.locator(".el-text").first.get_attribute("data-shown")
        tok = page.locator(f".el-text .el-tok[data-cycle='{shown}'][data-kind='draft']").first
        node = tok.get_attribute("data-node")
        tok.hover()
        page.wait_for_function(f"() => ({LIT_NODE_JS})() === 'node-{node}'", timeout=5000)
        assert "el-hl" in tok.get_attribute("class")
        assert page.locator(f".el-text .el-cyc.el-hl-cyc[data-cycle='{shown}']").count() == 1, "its cycle lights up"
        page.screenshot(path=os.path.join(ARTIFACTS, "lens_linked_token.png"))
        page.mouse.move(5, 5)
        page.wait_for_function(f"() => ({LIT_NODE_JS})() === null", timeout=5000)
        assert page.locator(".el-text .el-tok.el-hl").count() == 0

        # the reverse: the tree node's box -> its token in the text
        idx = page.evaluate(f"() => document.querySelector('#el-tree .js-plotly-plot').layout.annotations"
                            f".findIndex((a) => a.name === 'node-{node}')")
        page.locator(f"#el-tree g.annotation[data-index='{idx}'] rect").first.hover(force=True)
        page.wait_for_function(f"() => !!document.querySelector(\".el-text .el-tok.el-hl[data-cycle='{shown}']"
                               f"[data-node='{node}']\")", timeout=5000)
        page.screenshot(path=os.path.join(ARTIFACTS, "lens_linked_node.png"))
        page.mouse.move(5, 5)

        # a token of an earlier cycle: the cycle slider moves there, the tree shows it, its node stays lit
        earlier = page.locator(".el-text .el-tok[data-kind='draft']").first
        cyc, enode = earlier.get_attribute("data-cycle"), earlier.get_attribute("data-node")
        assert int(cyc) < int(shown)
        earlier.click()
        page.wait_for_function(f"() => (document.querySelector('#el-tree .gtitle') || {{}}).textContent"
                               f"?.startsWith('Cycle {cyc}:')", timeout=20000)
        page.mouse.move(5, 5)
        assert page.locator(".el-text").first.get_attribute("data-shown") == cyc
        assert page.locator("#el-cycle input[type=number]").first.input_value() == cyc
        page.wait_for_function(f"() => ({LIT_NODE_JS})() === 'node-{enode}'", timeout=5000)
        assert page.locator(f".el-text .el-tok.el-hl[data-cycle='{cyc}'][data-node='{enode}']").count() == 1
        browser.close()
