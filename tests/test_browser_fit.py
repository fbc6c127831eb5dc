"""Issue 50, point 7, in headless Chromium (tiny target): a page that answers while the teacher switches. With every
tab's figures drawn (the Lens, "How can I", the Walkthrough and the Paper lab's), a resize from 1440x900 to a 390 px
phone, a presenter-mode toggle there, a resize to a 1280x720 projector and the toggle off and on there re-lay out the shown tab's figures one at a time, the page answering between
two (views/js/fit.js's queue); the hidden tabs' figures wait until their tab is shown. Before 4bae9a3 every shown
figure was re-laid out in one task (the page held 5-10 s, over 30 s with the Paper lab drawn on the loaded 2-core box).

What is measured, during each switch (from the switch until the fit queue is empty and the figures stop changing):
the long tasks (a PerformanceObserver of 'longtask' entries, set up after the drawing), and every Plotly.relayout the
page makes (wrapped: which figure, in which tab, when). Hosts here differ ~4x in speed, so the assertions are ratios
and counts, not seconds:

* no long task holds the re-layout of more than one figure (the old code: every shown figure in one task);
* the longest long task is at most MAX_SHARE of all the long tasks' time in the switch (the old code: ~all of it);
* no figure of a hidden tab is re-laid out during a switch, and the Walkthrough's is once its tab is shown
  afterwards (at its width on the phone, in presenter type). (The old code passes this one too: Gradio hides a tab
  with display: none, where fit.js never fitted a figure; it guards the queue against fitting them.)

Here (loaded 2-core box, ~60 s in all): new code, resize 4 long tasks, the longest 0.29-0.40 of their time, presenter
5 tasks, 0.34-0.38, one figure a task; 4bae9a3^, one long task each (2.6-3.8 s, 15.4-18.9 s) holding all 4 figures.

Prints each switch's numbers (pytest -s shows them). CHROMIUM / EAGLE_LENS_BROWSER_TARGET as in test_browser.py."""
import os
import time

import pytest
from servers import app_subprocess
from test_browser import ARGS, ARTIFACTS, CHROMIUM, playwright_api  # noqa: F401  (skips)

pytestmark = pytest.mark.browser

MAX_SHARE = 0.6   # the longest long task's share of a switch's long-task time: 0.31-0.40 here, the old code's 1.00
TABS = ["How can I", "Walkthrough", "Paper lab", "Lens"]   # each drawn once; the switches happen on the Lens
QUEUE_EMPTY = "() => !window.__elFitQueue || window.__elFitQueue() === 0"

# Set up after every tab is drawn: the long tasks from now on, and each Plotly.relayout (fit.js's re-layout of a
# figure: views/js/fit.js calls window.Plotly.relayout) with its figure, its tab and its time.
PROBE_JS = """() => {
  const s = window.__fitProbe = {tasks: [], calls: []};
  new PerformanceObserver((list) => list.getEntries().forEach((e) => s.tasks.push([e.startTime, e.duration])))
    .observe({type: 'longtask', buffered: false});
  const P = window.Plotly, relayout = P.relayout;
  const figs = [...document.querySelectorAll('.js-plotly-plot')];
  figs.forEach((el, i) => { el.__probeId = i; });
  P.relayout = function (gd) {
    const tab = gd && gd.closest && gd.closest('.tabitem');
    s.calls.push({t: performance.now(), fig: gd && gd.__probeId, tab: tab ? tab.id : '',
                  shown: !!(gd && gd.getClientRects && gd.getClientRects().length)});
    return relayout.apply(this, arguments);
  };
  return figs.length;
}"""
MARK_JS = "() => { const s = window.__fitProbe; s.from = performance.now(); s.tasks.length = 0; s.calls.length = 0; }"
# a switch's numbers: the long tasks since the mark, the figures re-laid out within each, hidden figures' re-layouts
READ_JS = """() => {
  const s = window.__fitProbe, tasks = s.tasks.filter(([t]) => t >= s.from - 1);
  const per = tasks.map(([t, d]) => new Set(s.calls.filter((c) => c.t >= t && c.t <= t + d).map((c) => c.fig)).size);
  const figs = new Set(s.calls.map((c) => c.fig));
  return {n: tasks.length, sum: tasks.reduce((a, [, d]) => a + d, 0), longest: Math.max(0, ...tasks.map(([, d]) => d)),
          most: Math.max(0, ...per), figures: figs.size, calls: s.calls.length,
          hidden: s.calls.filter((c) => !c.shown).map((c) => `${c.tab || 'no tab'} #${c.fig}`)};
}"""
# the figures of the tab shown now, and how often each was re-laid out since the mark
SHOWN_JS = """() => { const s = window.__fitProbe;
  return [...document.querySelectorAll('.js-plotly-plot')].filter((el) => el.getClientRects().length && el._fullLayout)
    .map((el) => ({fig: el.__probeId, calls: s.calls.filter((c) => c.fig === el.__probeId).length,
                   key: String(el.__elFitted), box: Math.round(el.clientWidth)})); }"""
# what changes while a figure is still being fitted (the old code has no fit queue to ask)
SIGNATURE_JS = """() => [window.__fitProbe ? window.__fitProbe.calls.length : 0, ...[...document.querySelectorAll(
  '.js-plotly-plot')].filter((el) => el._fullLayout).map((el) => [el.clientWidth, el._fullLayout.height,
  el._fullLayout.margin.t, el._fullLayout.margin.b, el._fullLayout.margin.l])]"""


def settle(page, quiet_s=1.5, limit_s=300):
    """Until the fit queue is empty and nothing changed for `quiet_s` (the limit bounds only a hang: the Paper lab's
    figures take ~10 s here on a phone). A busy page answers an evaluate only between two tasks."""
    t0, last, since = time.time(), None, time.time()
    while time.time() - t0 < limit_s:
        page.wait_for_function(QUEUE_EMPTY, timeout=limit_s * 1000)
        sig = page.evaluate(SIGNATURE_JS)
        if sig != last:
            last, since = sig, time.time()
        elif time.time() - since >= quiet_s:
            return
        page.wait_for_timeout(250)
    raise AssertionError(f"the figures still changed after {limit_s} s")


def switch(page, name, act) -> dict:
    page.evaluate(MARK_JS)
    t0 = time.time()
    act()
    settle(page)
    out = page.evaluate(READ_JS)
    out["wall"] = time.time() - t0
    print(f"\n{name}: {out['n']} long tasks, {out['sum']:.0f} ms in all, the longest {out['longest']:.0f} ms "
          f"({out['longest'] / max(out['sum'], 1):.2f}), at most {out['most']} figure(s) re-laid out in one task, "
          f"{out['figures']} figures re-laid out ({out['calls']} calls), {len(out['hidden'])} hidden; "
          f"{out['wall']:.1f} s wall")
    return out


@pytest.fixture(scope="module")
def app_fit():
    with app_subprocess(["--target", os.environ.get("EAGLE_LENS_BROWSER_TARGET", "tiny")]) as (url, _):
        yield url


def test_a_switch_lays_out_the_shown_tab_one_figure_at_a_time(app_fit):
    os.makedirs(ARTIFACTS, exist_ok=True)
    bad: list[str] = []
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(300000)   # a click waits out a re-layout on the old code (bounds a hang only)
        T0 = time.time()
        page.goto(app_fit)
        page.wait_for_function("() => document.querySelector('#el-banner')?.textContent.includes('Live: target')",
                               timeout=300000)
        for tab in TABS:   # every tab's figures drawn and fitted at 1440x900; the Lens shown for the switches
            page.get_by_role("tab", name=tab).click()
            page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')].some("
                                   "(el) => el._fullLayout && el.getClientRects().length)", timeout=60000)
            settle(page, quiet_s=1.0)
        drawn = page.evaluate(PROBE_JS)
        shown = page.evaluate(SHOWN_JS)
        assert drawn >= 20 and len(shown) >= 4, f"{drawn} figures drawn, {len(shown)} on the Lens"
        box = page.locator("#el-presenter input[type=checkbox]")   # by its id (a label lookup reads every SVG text)
        runs = {}
        # the phone, then the projector: a resize each way and the teacher's toggle both ways at 1280x720
        for name, act in (("resize 1440x900 -> 390x844", lambda: page.set_viewport_size({"width": 390, "height": 844})),
                          ("presenter mode on at 390x844", lambda: box.set_checked(True)),
                          ("resize 390x844 -> 1280x720 (presenter on)",
                           lambda: page.set_viewport_size({"width": 1280, "height": 720})),
                          ("presenter mode off at 1280x720", lambda: box.set_checked(False)),
                          ("presenter mode on at 1280x720", lambda: box.set_checked(True))):
            runs[name] = switch(page, name, act)
            if name == "presenter mode on at 390x844":
                page.screenshot(path=os.path.join(ARTIFACTS, "fit_switch_390_presenter.png"))
        page.screenshot(path=os.path.join(ARTIFACTS, "fit_switch_1280x720_presenter.png"))
        for name, r in runs.items():
            if r["figures"] < 2:
                bad.append(f"{name}: only {r['figures']} figure(s) re-laid out: the switch measured nothing")
            if r["most"] > 1:
                bad.append(f"{name}: one long task re-laid out {r['most']} figures (of {r['figures']}); one a task "
                           f"expected")
            if r["longest"] > MAX_SHARE * r["sum"]:
                bad.append(f"{name}: the longest long task took {r['longest']:.0f} ms of {r['sum']:.0f} ms of long "
                           f"tasks in the switch ({r['longest'] / r['sum']:.2f} > {MAX_SHARE})")
            if r["hidden"]:
                bad.append(f"{name}: {len(r['hidden'])} re-layouts of hidden tabs' figures: {r['hidden'][:8]}")
        # the Walkthrough shown afterwards (at 1280x720): its figure is re-laid out now, at its width, in presenter
        # type (the Paper lab's 15 figures took ~2 minutes here at 390 px in presenter type, "How can I"'s 3 ~23 s:
        # too long for CI)
        page.evaluate(MARK_JS)
        page.get_by_role("tab", name="Walkthrough").click()
        settle(page)
        walk = page.evaluate(SHOWN_JS)
        # (a fit's key: its type scale, 1.35 in presenter mode, and the plot's width; views/js/fit.js)
        stale = [f for f in walk if f["calls"] < 1 or not f["key"].startswith(f"1.35:{f['box']}:")]
        if not walk or stale:
            bad.append(f"the Walkthrough shown after the switches: {len(stale)} of its {len(walk)} figures not re-laid "
                       f"out in presenter type at their width: {stale}")
        print(f"\nthe Walkthrough shown: {len(walk)} figure(s), {sum(f['calls'] for f in walk)} re-layouts; "
              f"{time.time() - T0:.1f} s since the page opened")
        browser.close()
    assert not bad, f"{len(bad)} checks failed:\n" + "\n".join(bad)
