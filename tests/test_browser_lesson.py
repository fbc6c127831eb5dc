"""The lesson as students see it, in headless Chromium (tiny target): presenter mode on a 1280x720 projector, a
390 px phone, non-Latin text, and the animated cycle. Screenshots go to test-artifacts/ (look at them).
"""
import os

import pytest
from test_browser import ARGS, ARTIFACTS, CHROMIUM, playwright_api, server  # noqa: F401  (fixture + skips)

pytestmark = pytest.mark.browser

OVERFLOW_JS = "() => document.documentElement.scrollWidth - window.innerWidth"
OVERLAPS_JS = """() => {
  const boxes = [...document.querySelectorAll('#el-tree g.annotation')].map((g) => g.getBoundingClientRect())
    .filter((r) => r.width > 0);
  let n = 0;
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    const ox = Math.min(a.right, b.right) - Math.max(a.left, b.left);
    const oy = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (ox > 2 && oy > 2) n++;
  }
  return n;
}"""


def ready(page, url):
    page.goto(url)
    page.wait_for_function("() => document.body.innerText.includes('Live: target')", timeout=90000)


def projector_page(browser, url):
    """A 1280x720 projector's page in presenter mode, two Steps in (the prefill, then the first cycle)."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    ready(page, url)
    page.get_by_label("Presenter mode (large type)").check()
    step_twice(page)
    return page


def step_twice(page):
    page.locator("#el-step").click()
    page.wait_for_function("() => (document.querySelector('#el-tree .gtitle') || {}).textContent?.includes('prefill')",
                           timeout=30000)
    page.locator("#el-step").click()
    page.wait_for_function("() => (document.querySelector('#el-tree .gtitle') || {}).textContent?.startsWith('Cycle 1')",
                           timeout=30000)


def test_presenter_mode_on_a_projector(server):
    os.makedirs(ARTIFACTS, exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = projector_page(browser, server)
        page.wait_for_timeout(800)
        assert not page.locator("#el-title p").first.is_visible(), "the header collapses to its title"
        assert page.evaluate(OVERFLOW_JS) <= 1, "nothing wider than the projector"
        tree = page.locator("#el-tree .js-plotly-plot").first.bounding_box()
        assert tree["x"] + tree["width"] <= 1280
        font = page.evaluate("() => document.querySelector('#el-tree .js-plotly-plot').layout.font.size")
        assert font >= 19, f"presenter figures use large type (font {font})"
        # a hover card stays under the pointer (CSS zoom used to push it away)
        node = page.locator("#el-tree g.annotation[data-index='1'] rect").first
        box = node.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.wait_for_timeout(600)
        card = page.locator("#el-tree .hoverlayer .hovertext, #el-tree .hoverlayer g").first
        if card.count():
            cb = card.bounding_box()
            if cb:
                assert abs(cb["y"] - box["y"]) < 400 and abs(cb["x"] - box["x"]) < 700
        page.screenshot(path=os.path.join(ARTIFACTS, "presenter_1280x720.png"))
        browser.close()


def test_phone_layout_and_true_characters(server):
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2)
        ready(page, server)
        page.fill("textarea", "用中文介绍一下推测解码。مرحبا 🦅")
        step_twice(page)
        page.wait_for_timeout(800)
        assert page.evaluate(OVERFLOW_JS) <= 1, "no sideways scrolling on a phone"
        assert page.evaluate(OVERLAPS_JS) == 0, "tree labels must not overlap"
        assert "�" not in page.locator("body").inner_text()
        page.screenshot(path=os.path.join(ARTIFACTS, "phone_390.png"), full_page=True)
        browser.close()


def test_play_the_cycle(server):
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        ready(page, server)
        step_twice(page)
        page.locator("#el-play").click()
        page.wait_for_function("() => document.querySelector('#el-beat').innerText.includes('Draft, level 1')",
                               timeout=20000)
        page.screenshot(path=os.path.join(ARTIFACTS, "beat_draft.png"))
        page.wait_for_function("() => document.querySelector('#el-beat').innerText.includes('Verify')", timeout=30000)
        page.locator("#el-pause").click()
        page.wait_for_timeout(2500)
        assert "Verify" in page.locator("#el-beat").inner_text(), "Pause holds the beat"
        page.locator("#el-beat-next").click()
        page.wait_for_function("() => document.querySelector('#el-beat').innerText.includes('Accept')", timeout=10000)
        page.screenshot(path=os.path.join(ARTIFACTS, "beat_accept.png"))
        browser.close()
