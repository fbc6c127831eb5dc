"""The Race as a class watches it, in headless Chromium (tiny target): both panels grow while it runs (their text
read twice), side by side at 1440x900 and stacked on a 390 px phone, then the measured ratio. Screenshots go to
test-artifacts/race_*.png (look at them).
"""
import os
import re

import pytest
from test_browser import ARGS, ARTIFACTS, CHROMIUM, playwright_api, server  # noqa: F401  (fixture + skips)

pytestmark = pytest.mark.browser

TEXTS_JS = """() => Object.fromEntries(['plain', 'EAGLE'].map((n) => {
  const t = document.querySelector(`#el-race-board [data-lane='${n}'] .el-race-text`);
  return [n, t ? t.innerText : null];
}))"""
BOTH_STARTED_JS = """() => ['plain', 'EAGLE'].every((n) => {
  const s = document.querySelector(`#el-race-board [data-lane='${n}']`);
  return s && Number(s.dataset.tokens) > 0;
})"""
BOXES_JS = """() => Object.fromEntries(['plain', 'EAGLE'].map((n) => {
  const r = document.querySelector(`#el-race-board [data-lane='${n}']`).getBoundingClientRect();
  return [n, {left: r.left, right: r.right, top: r.top, bottom: r.bottom}];
}))"""
OVERFLOW_JS = "() => document.documentElement.scrollWidth - window.innerWidth"
FINISHED_JS = "() => !!document.querySelector('#el-race-board .el-race-ratio')"


def start_race(page, url, max_new: int, presenter: bool = False):
    page.goto(url)
    if presenter:
        page.get_by_label("Presenter mode (large type)").check()
    page.wait_for_function("() => document.body.innerText.includes('Live: target')", timeout=90000)
    box = page.locator("input[type=number][aria-label*='Max new tokens']").first
    if not box.is_visible():         # the settings may be folded away: open their accordion
        page.locator("button, .label-wrap", has_text=re.compile("^Settings")).first.click()
    for _ in range(3):   # a settings update the page sent while loading can answer after the fill: fill again
        box.fill(str(max_new))
        box.press("Enter")
        page.wait_for_timeout(500)
        if box.input_value() == str(max_new):
            break
    assert box.input_value() == str(max_new), box.input_value()
    page.locator("#el-race").scroll_into_view_if_needed()
    page.locator("#el-race").click()
    page.wait_for_function(BOTH_STARTED_JS, timeout=60000)


def shot(page, name):
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.locator("#el-race-board").scroll_into_view_if_needed()
    page.screenshot(path=os.path.join(ARTIFACTS, f"race_{name}.png"))


def test_race_is_watched_side_by_side(server):
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        start_race(page, server, 200)
        rules = page.locator("#el-race-rules")
        assert "less model time" in rules.inner_text()       # the page says how the model is shared
        rules.locator("summary").click()                     # its "why" stays open while the board streams
        first = page.evaluate(TEXTS_JS)
        assert not page.evaluate(FINISHED_JS), "the ratio is shown only at the end"
        shot(page, "during_1440")
        # wait until both lanes grew, or a lane finished (then the check below fails): a fixed 1.5 s raced the
        # server on a slow host
        page.wait_for_function(f"""(first) => {{ const now = ({TEXTS_JS})();
            const grew = ['plain', 'EAGLE'].every((n) => now[n] && first[n] && now[n].length > first[n].length);
            return grew || document.querySelector('#el-race-board').innerText.includes('✓ finished'); }}""",
                               arg=first, timeout=120000)
        second = page.evaluate(TEXTS_JS)
        assert "✓ finished" not in page.locator("#el-race-board").inner_text(), "a lane finished before both grew"
        assert page.evaluate("() => document.querySelector('#el-race-rules details').open")
        for lane in ("plain", "EAGLE"):      # both grew while it ran: neither waits for the other to finish
            assert first[lane] and len(second[lane]) > len(first[lane]), (lane, first[lane], second[lane])
            assert second[lane].startswith(first[lane][:-2]), lane
        boxes = page.evaluate(BOXES_JS)
        assert abs(boxes["plain"]["top"] - boxes["EAGLE"]["top"]) < 2 and boxes["plain"]["right"] <= \
            boxes["EAGLE"]["left"], f"side by side at 1440 px: {boxes}"
        page.wait_for_function(FINISHED_JS, timeout=120000)
        board = page.locator("#el-race-board").inner_text()
        assert re.search(r"Measured: \d+\.\d\d× \(EAGLE (faster|slower here): EAGLE [\d.]+ ÷ plain [\d.]+ "
                         r"tokens/s\)", board), board
        assert "Race: identical text" in board and board.count("✓ finished") == 2
        assert page.locator("#el-race-board .el-race-ratio").is_visible()
        assert page.evaluate(OVERFLOW_JS) <= 1
        shot(page, "after_1440")
        browser.close()


def test_race_on_a_phone_stacks_the_panels(server):
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True,
                                has_touch=True)
        start_race(page, server, 300)
        boxes = page.evaluate(BOXES_JS)
        assert boxes["EAGLE"]["top"] >= boxes["plain"]["bottom"] - 1, f"stacked on a phone: {boxes}"
        assert boxes["EAGLE"]["right"] <= 390 and boxes["plain"]["left"] >= 0
        shot(page, "during_phone")
        page.wait_for_function(FINISHED_JS, timeout=120000)
        assert page.evaluate(OVERFLOW_JS) <= 1, "nothing wider than the phone"
        page.locator("#el-race-board .el-race-result").scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(ARTIFACTS, "race_after_phone.png"))
        browser.close()


def test_race_in_presenter_mode_and_its_stop(server):
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        start_race(page, server, 400, presenter=True)
        size = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('.el-race-text')).fontSize)")
        assert size >= 20, f"presenter mode: large race text ({size} px)"
        page.wait_for_timeout(1200)
        shot(page, "presenter_1280")
        page.locator("#el-race-stop").click()
        page.wait_for_function(FINISHED_JS, timeout=30000)
        board = page.locator("#el-race-board").inner_text()
        assert "■ stopped" in board and "Measured so far (stopped before both finished)" in board, board
        assert page.evaluate(OVERFLOW_JS) <= 1
        shot(page, "stopped_presenter_1280")
        browser.close()
