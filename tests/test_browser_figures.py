"""Every figure fits every screen (issue 23, point 4), measured from the rendered figures' text boxes in headless
Chromium (tiny target): on the Lens (after a Step, and at one beat of Play), on every walkthrough step, on the
"How can I" tab and on the Paper lab, at 1440x900, at 1280x720 with Presenter mode on, and on a 390x844 phone (one
page, resized, so the run stays short).

In each figure no two text labels overlap (the title, subplot titles and other annotations, the tree's and the
beats' node boxes measured with their padding and border, axis titles, legend entries, tick labels against
everything but other tick labels), none runs
past the figure's edge, the gradio label of the gr.Plot block covers none of them, and every panel that holds data
is shown; on a phone-narrow plot the panels are stacked (no two side by side). A failure lists every offending pair
by its texts. test_tree_boxes_never_overlap steps through several cycles' trees at each size (issue 38.5).
"""
import time

import pytest
from test_browser import ARGS, CHROMIUM, playwright_api, server  # noqa: F401  (fixture + skips)

pytestmark = pytest.mark.browser

SIZES = {"1440x900": (1440, 900, False), "1280x720 presenter": (1280, 720, True), "390x844 phone": (390, 844, False)}

# every problem of the figures on screen, as sentences naming the texts
MEASURE_JS = """() => {
  const bad = [];
  const vis = (r) => r.width > 0.5 && r.height > 0.5;
  const txt = (e) => (e.textContent || '').replace(/\\s+/g, ' ').trim();
  const cut = (s) => s.length > 50 ? s.slice(0, 48) + '…' : s;
  const clear = (c) => !c || c === 'transparent' || /rgba\\([^)]*,\\s*0\\)$/.test(c);
  const plots = [...document.querySelectorAll('.js-plotly-plot')].filter((el) => el._fullLayout && vis(el.getBoundingClientRect()));
  plots.forEach((el) => {
    const fr = el.getBoundingClientRect();
    const block = el.closest('.block');
    const lab = block && block.querySelector(':scope > label[data-testid="block-label"]');
    const head = el.querySelector('.g-gtitle text.gtitle') || el.querySelector('.infolayer g.annotation .annotation-text');
    const name = `[${lab ? txt(lab) : 'plot'}] ${cut(head ? txt(head) : '')}`;
    const anns = el._fullLayout.annotations || [];
    const items = [];
    const add = (kind, e, te) => { const r = e.getBoundingClientRect(), t = txt(te || e); if (vis(r) && t) items.push({kind, r, t}); };
    el.querySelectorAll('.g-gtitle text.gtitle, .g-gtitle text.gtitle-subtitle').forEach((e) => add('title', e));
    el.querySelectorAll('.infolayer g.annotation').forEach((g) => {
      const a = anns[+g.getAttribute('data-index')] || {}, t = g.querySelector('.annotation-text');
      // a node box is measured by its whole box, padding and border included (issue 38.6): two boxes that touch
      // their texts apart still overlap on screen
      const box = g.querySelector('.annotation-text-g') || t;
      if (t) (a.name || '').startsWith('node-') || !clear(a.bgcolor) ? add('node box', box, t) : add('annotation', t);
    });
    el.querySelectorAll('.infolayer text').forEach((e) => {
      if (/^[xy]\\d*title$/.test(e.getAttribute('class') || '')) add('axis title', e); });
    el.querySelectorAll('.legend .legendtext').forEach((e) => add('legend entry', e));
    el.querySelectorAll('.cbtitle text').forEach((e) => add('colour-bar title', e));
    el.querySelectorAll('.xaxislayer-above text, .yaxislayer-above text').forEach((e) => add('tick label', e));
    if (lab && getComputedStyle(lab).display !== 'none' && vis(lab.getBoundingClientRect()))
      items.push({kind: 'gradio label', r: lab.getBoundingClientRect(), t: txt(lab)});
    const same = (a, b, k) => a.kind === k && b.kind === k;
    for (let i = 0; i < items.length; i++) {
      const a = items[i];
      // (a phone's tree may be drawn wider than its box, which then scrolls sideways: its edges are the figure's)
      if (a.kind !== 'gradio label' && (a.r.left < fr.left - el.scrollLeft - 1 ||
                                        a.r.right > fr.left - el.scrollLeft + Math.max(fr.width, el.scrollWidth) + 1 ||
                                        a.r.top < fr.top - 1 || a.r.bottom > fr.bottom + 1))
        bad.push(`${name}: ${a.kind} “${cut(a.t)}” runs past the figure's edge`);
      for (let j = i + 1; j < items.length; j++) {
        const b = items[j];
        if (same(a, b, 'tick label')) continue;
        const ox = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
        const oy = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
        // two node boxes keep a gap: their borders (up to 3 px, half of it outside the box) must not touch
        const gap = same(a, b, 'node box') ? -3 : 2;
        if (ox > gap && oy > gap) bad.push(`${name}: ${a.kind} “${cut(a.t)}” overlaps ${b.kind} “${cut(b.t)}”`);
      }
    }
    // every panel that holds data is shown; on a phone-narrow plot they are stacked, one per row
    const fl = el._fullLayout, panels = [];
    ((fl._subplots && fl._subplots.cartesian) || []).forEach((id) => {
      const p = fl._plots[id];
      const traces = (el._fullData || []).filter((t) => (t.xaxis || 'x') + (t.yaxis || 'y') === id);
      if (!p || !traces.length) return;
      const shown = traces.some((t) => (el.data[t.index] || {}).visible !== false) && p.xaxis.visible !== false;
      if (!shown || p.xaxis._length < 40 || p.yaxis._length < 40) bad.push(`${name}: panel ${id} is not shown`);
      else panels.push({id, y0: p.yaxis._offset, y1: p.yaxis._offset + p.yaxis._length});
    });
    if (fr.width < 560) panels.forEach((a, i) => panels.slice(i + 1).forEach((b) => {
      if (Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0) > 2)
        bad.push(`${name}: panels ${a.id} and ${b.id} side by side on a ${Math.round(fr.width)} px plot`);
    }));
  });
  return {bad, figures: plots.length};
}"""

# what changes while a figure is still being drawn or fitted: its size, margins, title and text boxes
SIGNATURE_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].filter((el) => el._fullLayout).map((el) => {
  const r = el.getBoundingClientRect(), l = el._fullLayout, t = el.querySelector('.gtitle');
  return [Math.round(r.width), Math.round(r.height), l.height, l.margin.t, l.margin.b, l.margin.l, t && t.textContent,
          el.querySelectorAll('text').length];
})"""


# a figure fitted before it was drawn (views/js/fit.js's Plotly.react wrapper: a Run's streamed trees) against the same
# figure as sent, drawn beside it and fitted after drawing: the same fonts, wrapped texts, margins and size
PREFIT_JS = """async () => {
  const out = {checked: 0, bad: []};
  const plots = [...document.querySelectorAll('.js-plotly-plot')].filter((el) => el.__elPrefit && el.__elSeen === el.layout
    && el.getBoundingClientRect().width > 0);
  for (const el of plots) {
    const [data, layout] = JSON.parse(el.__elPrefit);
    const scratch = document.createElement('div');
    scratch.style.width = el.clientWidth + 'px';
    el.parentElement.appendChild(scratch);
    await window.Plotly.newPlot(scratch, data, layout);
    const t0 = Date.now();
    while ((scratch.__elFitted === undefined || scratch.__elBusy) && Date.now() - t0 < 8000)
      await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 300));
    const view = (g) => { const l = g._fullLayout;
      return {width: Math.round(l.width), height: Math.round(l.height), title: l.title.text, font: l.font.size,
              titleFont: l.title.font.size, margin: ['t', 'b', 'l', 'r'].map((k) => Math.round(l.margin[k])),
              ann: (l.annotations || []).map((a) => [a.text, (a.font || {}).size, +a.x.toFixed(3), +a.y.toFixed(3)]),
              axes: Object.keys(l).filter((k) => /^[xy]axis\\d*$/.test(k)).map((k) => [k, l[k].domain.map((d) => +d.toFixed(3)),
                    (l[k].tickfont || {}).size, (l[k].title || {}).text || '']),
              names: g.data.map((t) => t.name)}; };
    const a = JSON.stringify(view(el)), b = JSON.stringify(view(scratch));
    if (a !== b) out.bad.push(`fitted before drawing: ${a.slice(0, 600)}\\n   fitted after drawing: ${b.slice(0, 600)}`);
    out.checked++;
    window.Plotly.purge(scratch);
    scratch.remove();
  }
  return out;
}"""


def settle(page, quiet_s=1.0, limit_s=120.0):
    """Wait until the figures stop changing (drawn, and fitted to their box): the fit queue empty and nothing changed
    for `quiet_s`. The page fits one figure at a time and answers between two (views/js/fit.js): a figure waiting its
    turn looks settled, so the queue must be empty at every look, not only the first (a tab just opened may queue its
    figures after that first look; under a loaded CI the Paper lab's 20 figures on a phone took longer than the
    8 s this once allowed, and were measured half fitted). `limit_s` bounds only a hang."""
    queue_empty = "() => !window.__elFitQueue || window.__elFitQueue() === 0"
    t0, last, since = time.time(), None, time.time()
    while time.time() - t0 < limit_s:
        page.wait_for_function(queue_empty, timeout=600000)
        sig = page.evaluate(SIGNATURE_JS)
        if sig != last:
            last, since = sig, time.time()
        elif time.time() - since >= quiet_s and page.evaluate(queue_empty):
            return
        page.wait_for_timeout(250)
    # still moving after `limit_s`: measure what is there


def measure(page, where, problems, prefit=None):
    page.wait_for_timeout(200)
    out = page.evaluate(MEASURE_JS)
    if prefit is not None:
        pre = page.evaluate(PREFIT_JS)
        prefit[0] += pre["checked"]
        problems += [f"{where}: {b}" for b in pre["bad"]]
    assert out["figures"] >= 1, f"{where}: no figure on screen"
    problems += [f"{where}: {b}" for b in out["bad"]]
    return out["figures"]


def mark_figures(page):
    page.evaluate("() => { window.__figPrev = [...document.querySelectorAll('.js-plotly-plot')].map((e) => e.layout); }")


def figure_changed(page, timeout=20000):
    page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')].some((e) => e.layout && "
                           "!(window.__figPrev || []).includes(e.layout) && e.getBoundingClientRect().width > 0)",
                           timeout=timeout)


def walk(page, where, problems, forward: bool):
    """Every walkthrough step's figure, from the first step to the last (or back)."""
    n = page.evaluate("() => [...document.querySelectorAll('input[type=radio]')]"
                      ".filter((e) => /^\\d+\\. /.test(e.value)).length")
    assert n >= 7, f"{n} walkthrough steps"
    order = list(range(n)) if forward else list(range(n - 1, -1, -1))
    for k, i in enumerate(order):
        if k:
            mark_figures(page)
            page.locator("#el-walk-next" if forward else "#el-walk-prev").click()
            page.wait_for_function("() => [...document.querySelectorAll('input[type=radio]')].some("
                                   f"(e) => e.checked && e.value.startsWith('{i + 1}. '))", timeout=10000)
            figure_changed(page)
        settle(page)
        measure(page, f"{where} walkthrough step {i + 1}", problems)


SLOW_LAYOUT_MS = 180000   # a resize or presenter toggle re-lays out every drawn figure (see below)


def test_every_figure_fits_every_screen(server):  # noqa: F811
    """One page, resized: 1440x900, then 1280x720 in presenter mode, then a 390x844 phone."""
    problems, prefit = [], [0]
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(SLOW_LAYOUT_MS)   # clicks and checks wait out a re-layout (below)
        page.goto(server)
        page.wait_for_function("() => document.body.innerText.includes('Live: target')", timeout=90000)
        page.locator("#el-step").click()
        page.wait_for_function("() => (document.querySelector('#el-tree .gtitle') || {}).textContent?.includes('prefill')",
                               timeout=30000)
        page.get_by_text("Tree attention mask", exact=True).first.click()   # its accordion open
        for k, size in enumerate(SIZES):
            w, h, presenter = SIZES[size]
            # back on the Lens before the page changes size: every drawn figure is laid out again at the new size
            # (the Paper lab alone has 20), and on a slow 2-core machine the page answered nothing for over 30 s
            # after a resize or a presenter toggle; the fit is checked here, the time it takes is not
            page.get_by_role("tab", name="Lens").click()
            page.set_viewport_size({"width": w, "height": h})
            # by its id: a label lookup computes accessible names over the whole page, thousands of SVG texts once
            # the Paper lab is drawn (it timed out at 30 s on a loaded CI machine)
            box = page.locator("#el-presenter input[type=checkbox]")
            if box.is_checked() != presenter:
                box.set_checked(presenter)
            # the Lens after a Step (a new cycle each time), then one beat of Play (it replaces the tree)
            mark_figures(page)
            page.locator("#el-step").click()
            page.wait_for_function("() => (document.querySelector('#el-tree .gtitle') || {}).textContent?"
                                   f".startsWith('Cycle {k + 1}')", timeout=30000)
            settle(page)
            assert measure(page, f"{size} Lens", problems, prefit) >= 5, "tree, probabilities, mask, statistics, race"
            mark_figures(page)
            page.locator("#el-beat-prev").click()
            figure_changed(page)
            settle(page)
            measure(page, f"{size} Lens, a beat of Play", problems)
            page.get_by_role("tab", name="Walkthrough").click()
            walk(page, size, problems, forward=k % 2 == 0)
            page.get_by_role("tab", name="How can I").click()
            settle(page)
            measure(page, f"{size} How can I", problems)
            page.get_by_role("tab", name="Paper lab").click()
            settle(page)
            assert measure(page, f"{size} Paper lab", problems) >= 5
        browser.close()
    assert not problems, f"{len(problems)} figure problems:\n" + "\n".join(problems)
    assert prefit[0] >= 3, f"only {prefit[0]} figures were fitted before drawing: the check above compared nothing"


def test_tree_boxes_never_overlap(server):  # noqa: F811
    """The Lens's draft tree at each size, its node boxes measured whole (padding and border): none overlaps or
    touches another box, a tick label, the title or the legend, and none is cut at the figure's edge (issue 38.5:
    boxes overlapped at 1280x720 in presenter mode and on a 390 px phone). The trees: the recorded run's (the real
    model's tokens; the cycle slider, before any Step), then live cycles of this server's target."""
    problems = []
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for size, (w, h, presenter) in SIZES.items():
            page = browser.new_page(viewport={"width": w, "height": h})
            page.goto(server)
            page.wait_for_function("() => document.body.innerText.includes('Live: target')", timeout=90000)
            if presenter:
                page.locator("#el-presenter input[type=checkbox]").set_checked(True)
            cycle_box = page.locator("#el-cycle input[type=number]")
            for cycle in range(1, 13):
                cycle_box.fill(str(cycle))
                cycle_box.press("Enter")
                page.wait_for_function("() => (document.querySelector('#el-tree .gtitle') || {}).textContent?"
                                       f".startsWith('Cycle {cycle}:')", timeout=30000)
                settle(page)
                out = page.evaluate(MEASURE_JS)
                problems += [f"{size}, recorded cycle {cycle}: {b}" for b in out["bad"] if b.startswith("[Draft tree]")]
            for cycle in range(5):
                page.locator("#el-step").click()
                page.wait_for_function("() => (document.querySelector('#el-tree .gtitle') || {}).textContent?"
                                       f".startsWith('Cycle {cycle}:')", timeout=30000)
                settle(page)
                out = page.evaluate(MEASURE_JS)
                problems += [f"{size}, live cycle {cycle}: {b}" for b in out["bad"] if b.startswith("[Draft tree]")]
            page.close()
        browser.close()
    assert not problems, f"{len(problems)} tree problems:\n" + "\n".join(problems)


# the bar labels of the plots on screen that run into each other (trace text: Plotly's .bartext)
BAR_TEXT_JS = """() => {
  const bad = [];
  document.querySelectorAll('.js-plotly-plot').forEach((el) => {
    if (el.getBoundingClientRect().width < 1) return;
    const block = el.closest('.block'), lab = block && block.querySelector(':scope > label[data-testid="block-label"]');
    const ts = [...el.querySelectorAll('.bartext')].map((t) => ({r: t.getBoundingClientRect(), t: t.textContent}))
      .filter((x) => x.r.width > 0.5 && x.t.trim());
    ts.forEach((a, i) => ts.slice(i + 1).forEach((b) => {
      const ox = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
      const oy = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
      if (ox > 1 && oy > 1) bad.push(`[${lab ? lab.textContent.trim() : 'plot'}] bar label “${a.t}” overlaps “${b.t}”`);
    }));
  });
  return bad;
}"""


def test_paper_lab_on_a_phone(server):  # noqa: F811
    """The Paper lab at 390 px (issue 38.5): no two bar labels overlap (the acceptance-per-depth bars lie down on a
    phone, their labels level), the heatmap's rows are named by their prompts, not by bare ids, and the figures fit."""
    problems = []
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 390, "height": 844})
        page.goto(server)
        page.wait_for_function("() => document.body.innerText.includes('Live: target')", timeout=90000)
        page.get_by_role("tab", name="Paper lab").click()
        settle(page)
        problems += page.evaluate(BAR_TEXT_JS)
        measure(page, "390x844 Paper lab", problems)
        rows = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot')].filter((el) => "
                             "(el.layout.yaxis || {}).title && /prompt/.test(JSON.stringify(el.layout.yaxis.title)))"
                             ".flatMap((el) => [...el.querySelectorAll('.yaxislayer-above text')].map((t) => t.textContent))")
        assert len(rows) >= 3, rows
        assert not any(r.strip().isdigit() for r in rows), f"rows named by bare ids: {rows}"
        browser.close()
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)
