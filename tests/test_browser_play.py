"""Play animates (issue 38, point 3), in headless Chromium on the tiny target: on a 1280x720 projector in presenter
mode, Play brings its one-line caption and the whole tree (time bar included) onto the screen, and each beat's
figure changes by a plotly transition (views/js/beats.js: Plotly.animate through the beat's states), seen as
colours and positions in between the beat's start and end while it plays. Screenshots go to test-artifacts/."""
import os

import pytest
from test_browser import ARGS, ARTIFACTS, CHROMIUM, playwright_api, server  # noqa: F401  (fixture + skips)
from test_browser_lesson import ready, step_twice

pytestmark = pytest.mark.browser

# the node markers' fills and places, sampled every animation frame for `ms` (the tree's 4th trace: "nodes")
SAMPLE_JS = """(ms) => new Promise((done) => {
  const out = [], t0 = performance.now();
  const tick = () => {
    const el = document.querySelector('#el-tree .js-plotly-plot');
    const pts = el ? [...el.querySelectorAll('.scatterlayer .trace:nth-child(4) .point')] : [];
    out.push({t: performance.now() - t0, fills: pts.map((p) => p.style.fill),
              places: pts.map((p) => p.getAttribute('transform')), anim: el && el.__elBeatAnim});
    if (performance.now() - t0 < ms) requestAnimationFrame(tick); else done(out);
  };
  tick();
})"""
# node labels (scatter text) that run into another label or a marker, or past the figure's edge
LABELS_JS = """() => { const el = document.querySelector('#el-tree .js-plotly-plot'), fr = el.getBoundingClientRect();
  const texts = [...el.querySelectorAll('.scatterlayer .textpoint text')].map((t) => ({t: t.textContent,
    r: t.getBoundingClientRect()})).filter((x) => x.t && x.r.width > 0);
  const pts = [...el.querySelectorAll('.scatterlayer .point')].map((q) => q.getBoundingClientRect()).filter((r) => r.width > 0);
  const ov = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 2 &&
                       Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 2;
  const bad = [];
  texts.forEach((a, i) => {
    texts.slice(i + 1).forEach((b) => { if (ov(a.r, b.r)) bad.push(`${a.t} / ${b.t}`); });
    pts.forEach((q) => { if (ov(a.r, q)) bad.push(`${a.t} / a node's marker`); });
    if (a.r.right > fr.right + 1 || a.r.left < fr.left - 1) bad.push(`${a.t} runs past the figure's edge`);
  });
  return bad; }"""
BOX_JS = """() => { const r = (s) => { const e = document.querySelector(s); if (!e) return null;
  const b = e.getBoundingClientRect(); return {top: b.top, bottom: b.bottom, height: b.height}; };
  return {tree: r('#el-tree .js-plotly-plot'), caption: r('#el-beat'), H: window.innerHeight}; }"""


def rgb(hex_colour: str) -> str:
    h = hex_colour.lstrip("#")
    return "rgb({}, {}, {})".format(*(int(h[k:k + 2], 16) for k in (0, 2, 4)))


def caption_has(page, text: str, timeout=30000):
    page.wait_for_function(f"() => document.querySelector('#el-beat').innerText.includes({text!r})", timeout=timeout)


def test_play_animates_and_fits_a_projector(server):  # noqa: F811
    from views.common import DRAFT_Q, TARGET_P
    os.makedirs(ARTIFACTS, exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        ready(page, server)
        page.get_by_label("Presenter mode (large type)").check()
        step_twice(page)
        page.evaluate("() => window.scrollTo(0, 0)")
        page.locator("#el-play").click()
        caption_has(page, "Draft, level 1")
        # the draft beat: the level grows out of the root (its nodes move from the root's place to their own)
        grow = page.evaluate(SAMPLE_JS, 1200)
        places = [s["places"][1] for s in grow if len(s["places"]) > 1]
        assert len(set(places)) >= 3, f"level 1 did not move: {sorted(set(places))}"
        # the verify beat: every drafted node turns from the head's purple to the target's blue, through colours
        # in between (a tween, not a swap), all at once
        caption_has(page, "Verify")
        lit = page.evaluate(SAMPLE_JS, 1300)
        box = page.evaluate(BOX_JS)
        page.screenshot(path=os.path.join(ARTIFACTS, "play_1280x720_verify.png"))
        fills = [s["fills"] for s in lit if len(s["fills"]) > 1]
        ends = {rgb(DRAFT_Q), rgb(TARGET_P)}
        between = [f for f in fills if f[1] not in ends]
        assert between, f"no colour between q's and p's: {sorted({f[1] for f in fills})}"
        assert any(len(set(f[1:])) == 1 and f[1] not in ends for f in between), "the nodes light together"
        assert fills[-1][1] == rgb(TARGET_P)
        # the caption (one line at most two) and the whole figure, time bar included, are on the screen
        assert box["caption"]["top"] >= 0 and box["caption"]["height"] <= 2.6 * 21 * 1.6, box
        assert box["tree"]["top"] >= 0 and box["tree"]["bottom"] <= box["H"] + 1, box
        caption_has(page, "Accept")
        # the last beat animated and its labels drawn (a fixed 2.5 s raced them on a slow host)
        page.wait_for_function("() => (window.__elBeats || {}).animated >= 4 && [...document.querySelectorAll("
                               "'#el-tree .textpoint text')].some((t) => /^[✓✗]/.test(t.textContent))", timeout=30000)
        stats = page.evaluate("() => window.__elBeats")
        assert stats["started"] >= 4 and stats["animated"] >= 4, stats      # Plotly.animate ran, beat after beat
        texts = page.evaluate("() => [...document.querySelectorAll('#el-tree .textpoint text')].map((t) => t.textContent)")
        assert any(t.startswith(("✓", "✗")) for t in texts), texts
        assert page.locator("#el-beat").inner_text().startswith("Beat "), "one counter: Beat k of n"
        assert page.evaluate(LABELS_JS) == []
        # stepping back still works, and animates too; on a phone the labels still keep clear of each other
        page.set_viewport_size({"width": 390, "height": 844})
        page.get_by_label("Presenter mode (large type)").uncheck()      # a phone, not a projector
        for button, beat in (("#el-beat-prev", "Verify"), ("#el-beat-next", "Accept")):
            n = page.evaluate("() => window.__elBeats.animated")
            page.locator(button).click()
            caption_has(page, beat, timeout=10000)
            page.wait_for_function("(n) => window.__elBeats.animated > n", arg=n, timeout=10000)
            assert page.evaluate(LABELS_JS) == [], f"390 px, {beat}"
        page.screenshot(path=os.path.join(ARTIFACTS, "play_390_accept.png"))
        browser.close()
