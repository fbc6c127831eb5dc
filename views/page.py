"""Page-level CSS and small JavaScript hooks of the app (presenter mode, click-to-select in the tree)."""
from .stats import CSS as _STATS_CSS
from .text import CSS as _TEXT_CSS

CSS = _TEXT_CSS + _STATS_CSS + """
.el-note {font-size: 15px; color: #7a4b00; margin-top: 6px;}
.el-table {border-collapse: collapse; font-size: 15px;} .el-table td, .el-table th {padding: 4px 10px; border-bottom: 1px solid #ddd;}
#el-title h1 {margin-bottom: 0;} #el-status {font-size: 16px;}
#el-click, #el-click-btn {display: none !important;}
#el-input-note {font-size: 15px; color: #7a4b00;}
#el-beat {font-size: 16px; min-height: 2.6em;}
/* presenter mode: larger type without CSS zoom (zoom shifts Plotly's hover cards away from the pointer);
   the figures' fonts are scaled by FIT_JS, the header collapses to its title */
body.el-presenter {font-size: 20px;}
body.el-presenter #el-title p {display: none;}
body.el-presenter .el-text {font-size: 26px; max-height: 320px;}
body.el-presenter .el-card b {font-size: 30px;} body.el-presenter .el-card span {font-size: 17px;}
body.el-presenter .prose, body.el-presenter .prose p, body.el-presenter label span {font-size: 20px !important;}
body.el-presenter #el-status, body.el-presenter #el-beat {font-size: 21px;}
/* lens: the cycle first (text left, Play and the tree right, both on the first screen) */
#el-banner, #el-banner p {font-size: 15px !important; line-height: 1.45;}
#el-left, #el-right {gap: 10px;}
#el-buttons {gap: 6px;} #el-buttons > button {padding-left: 4px; padding-right: 4px;}
#el-input-note:has(span.md:empty) {display: none;}
#el-status {min-height: 2.9em; line-height: 1.45;} #el-status p {margin: 0;}   /* two lines kept: no jump */
#el-beat {min-height: 2.4em;} #el-beat p {margin: 0;}
.el-text {max-height: max(190px, calc(100vh - 575px));}
#el-tree g.annotation.el-hl rect {stroke: #111 !important; stroke-width: 4px !important; stroke-dasharray: 7 3;
                                  fill: #ffd54a !important;}
body.el-presenter #el-presenter label span {font-size: 15px !important;}
body.el-presenter #el-title h1 {font-size: 30px; margin: 0;}
body.el-presenter #el-header {padding: 0; min-height: 0;}
body.el-presenter .el-text {font-size: 22px; line-height: 1.75; max-height: max(170px, calc(100vh - 525px));}
body.el-presenter .el-legend {font-size: 15px; line-height: 1.7;}
body.el-presenter #el-prompt textarea {font-size: 17px;}
@media (max-width: 640px) {
  #el-header {flex-wrap: wrap;} #el-header > * {min-width: 100% !important;}
  #el-play-row {flex-wrap: wrap;} #el-play-row > button {min-width: 45% !important;}
  .el-text {font-size: 16px; line-height: 1.8;}
  .el-card {flex: 1 1 42%;}
  #el-title h1 {font-size: 26px;}
  /* wide tables (the Paper lab's) scroll sideways instead of breaking every word into letters */
  .prose table {display: block; overflow-x: auto; max-width: 100%;}
  .prose th, .prose td {white-space: nowrap;}
}
"""
PRESENTER_JS = "(on) => { document.body.classList.toggle('el-presenter', on); window.__elFit && window.__elFit(); return on; }"
# clicking a tree node selects it for the q-vs-p view: Plotly's click events write "node:nonce" into a hidden
# box and press a hidden button
CLICK_JS = """() => {
  const send = (i) => {
    const box = document.querySelector('#el-click textarea, #el-click input');
    if (!box) return;
    box.value = String(i) + ':' + Date.now();
    box.dispatchEvent(new Event('input', {bubbles: true}));
    setTimeout(() => { const b = document.querySelector('#el-click-btn'); if (b) b.click(); }, 80);
  };
  const hook = () => document.querySelectorAll('#el-tree .js-plotly-plot').forEach((el) => {
    if (el.__elHooked || !el.on) return;
    el.__elHooked = true;
    el.on('plotly_clickannotation', (ev) => {
      const n = ev.annotation && ev.annotation.name;
      if (n && n.startsWith('node-')) send(n.slice(5));
    });
    el.on('plotly_click', (ev) => {
      const p = ev.points && ev.points[0];
      if (p && p.customdata !== undefined && p.customdata !== null) {
        sel = {cycle: shownCycle(), node: String(p.customdata)};
        send(p.customdata);
      }
    });
    // linked views, tree -> text: hovering a node lights the token(s) it committed (hover cards stay Plotly's)
    el.on('plotly_hover', (ev) => {
      const p = ev.points && ev.points[0];
      if (p && p.customdata !== undefined && p.customdata !== null) { hover = {cycle: shownCycle(), node: String(p.customdata)}; relight(); }
    });
    el.on('plotly_unhover', () => { hover = null; relight(); });
    el.addEventListener('mouseover', (ev) => {
      const node = annNode(el, ev.target);
      if (node !== null) { hover = {cycle: shownCycle(), node}; relight(); }
    });
    el.addEventListener('mouseout', (ev) => {
      if (annNode(el, ev.target) !== null && annNode(el, ev.relatedTarget) === null) { hover = null; relight(); }
    });
  });
  // ---- lens: linked views and a text panel that follows the run (views/text.py puts data-cycle, data-node
  // ('b' = the target's bonus / correction token) and data-kind on every token, data-shown on the panel)
  let sel = null, hover = null, pinned = true, lastTop = 0, promptOpen = false;
  const shownCycle = () => { const t = document.querySelector('.el-text[data-shown]'); return t ? t.dataset.shown : null; };
  const annIndex = (el, node) => (el.layout && el.layout.annotations || []).findIndex((a) => node === 'b'
    ? !a.name && /\\((bonus|correction|first token)\\)\\s*$/.test(a.text || '') : a.name === 'node-' + node);
  const annNode = (el, target) => {    // the tree node of an annotation box under the pointer, or null
    const g = target && target.closest && target.closest('g.annotation');
    if (!g || !el.layout) return null;
    const a = (el.layout.annotations || [])[Number(g.getAttribute('data-index'))];
    if (!a) return null;
    if (a.name && a.name.startsWith('node-')) return a.name.slice(5);
    return /\\((bonus|correction|first token)\\)\\s*$/.test(a.text || '') ? 'b' : null;
  };
  const tokensOf = (cyc, node) => {
    if (String(node) === '0') {   // the root is the last token the cycle before committed
      const prev = document.querySelectorAll(`.el-text .el-tok[data-cycle="${Number(cyc) - 1}"]`);
      return prev.length ? [prev[prev.length - 1]] : [];
    }
    return [...document.querySelectorAll(`.el-text .el-tok[data-cycle="${cyc}"][data-node="${node}"]`)];
  };
  const relight = () => {
    document.querySelectorAll('.el-hl, .el-hl-cyc').forEach((e) => e.classList.remove('el-hl', 'el-hl-cyc'));
    const on = hover || sel;
    if (!on || on.cycle === null) return;
    tokensOf(on.cycle, on.node).forEach((e) => {
      e.classList.add('el-hl');
      const c = e.closest('.el-cyc');
      if (c) c.classList.add('el-hl-cyc');
    });
    if (on.cycle !== shownCycle()) return;   // the tree shows another cycle: only the text lights up
    document.querySelectorAll('#el-tree .js-plotly-plot').forEach((el) => {
      const i = annIndex(el, on.node);
      if (i >= 0) el.querySelectorAll(`g.annotation[data-index="${i}"]`).forEach((g) => g.classList.add('el-hl'));
    });
  };
  document.addEventListener('mouseover', (ev) => {
    const t = ev.target.closest && ev.target.closest('.el-text .el-tok');
    if (t) { hover = {cycle: t.dataset.cycle, node: t.dataset.node}; relight(); }
  });
  document.addEventListener('mouseout', (ev) => {
    const t = ev.target.closest && ev.target.closest('.el-text .el-tok');
    if (t && !(ev.relatedTarget && ev.relatedTarget.closest && ev.relatedTarget.closest('.el-text .el-tok') === t)) {
      hover = null; relight();
    }
  });
  document.addEventListener('click', (ev) => {
    if (ev.target.closest && ev.target.closest('#el-run, #el-step, #el-reset')) { pinned = true; sel = null; }
    const t = ev.target.closest && ev.target.closest('.el-text .el-tok');
    if (!t) return;
    const {cycle, node} = t.dataset;
    sel = {cycle, node};
    relight();
    // an earlier cycle: the slider moves there (node@cycle); the shown one: its node is the one inspected
    if (cycle !== shownCycle()) send(`${node === 'b' ? '' : node}@${cycle}`);
    else if (node !== 'b') send(node);
  });
  document.addEventListener('scroll', (ev) => {
    const t = ev.target;
    if (t && t.classList && t.classList.contains('el-text')) {
      if (t.__elAuto !== undefined && Math.abs(t.scrollTop - t.__elAuto) < 2) return;   // our own scroll, not the reader's
      pinned = t.scrollTop + t.clientHeight >= t.scrollHeight - 24;
      lastTop = t.scrollTop;
    }
  }, true);
  document.addEventListener('toggle', (ev) => {
    if (ev.target.matches && ev.target.matches('details.el-prompt')) promptOpen = ev.target.open;
  }, true);
  const follow = () => document.querySelectorAll('.el-text').forEach((t) => {
    // new text (a new panel, or the same one refilled): the newest token in view, unless the reader scrolled up
    const key = `${t.dataset.shown}:${t.getElementsByClassName('el-tok').length}:${t.textContent.length}`;
    if (t.__elKey === key) return;
    t.__elKey = key;
    t.scrollTop = pinned ? t.scrollHeight : lastTop;
    t.__elAuto = t.scrollTop;
    const d = t.parentElement && t.parentElement.querySelector('details.el-prompt');
    if (d && promptOpen) d.open = true;
  });
  window.__elLens = () => ({pinned, lastTop, sel, hover});   // for the browser tests
  let lensDue = false;
  const lens = () => {
    if (lensDue) return;
    lensDue = true;
    requestAnimationFrame(() => { lensDue = false; follow(); relight(); });
  };
  // figure fonts follow the room: 1.35x in presenter mode, smaller on a phone-narrow plot (labels must not
  // overlap); re-applied whenever the server sends a new figure (a new layout object)
  const fit = (el) => {
    if (!el.layout || !window.Plotly) return;
    if (el.__elSeen !== el.layout) {
      el.__elSeen = el.layout;
      el.__elOrig = {font: (el.layout.font || {}).size || 15, title: ((el.layout.title || {}).font || {}).size || 18,
                     ann: (el.layout.annotations || []).map((a) => (a.font || {}).size || 15), scale: 1};
    }
    const presenter = document.body.classList.contains('el-presenter');
    const w = el.clientWidth || 1000;
    const scale = presenter ? 1.35 : (w < 560 ? 0.72 : (w < 760 ? 0.85 : 1));
    if (el.__elOrig.scale === scale) return;
    el.__elOrig.scale = scale;
    const upd = {'font.size': el.__elOrig.font * scale, 'title.font.size': el.__elOrig.title * scale,
                 'hoverlabel.font.size': 15 * scale};
    el.__elOrig.ann.forEach((s, i) => { upd[`annotations[${i}].font.size`] = s * scale; });
    const narrow = w < 560 && el.layout.xaxis2 && el.layout.xaxis && !el.closest('#el-stats');
    if (narrow) {   // a phone: the first panel of a side-by-side figure, full width; the others hidden
      el.__elOrig.domain = el.__elOrig.domain || el.layout.xaxis.domain;
      upd['xaxis.domain'] = [0, 1];
      for (const k of Object.keys(el.layout)) if (/^[xy]axis[2-9]$/.test(k)) upd[`${k}.visible`] = false;
      (el.layout.annotations || []).forEach((a, i) => {
        if (a.xref && a.xref !== 'paper' && a.xref !== 'x' && a.xref !== 'x domain') upd[`annotations[${i}].visible`] = false;
        else if ((a.x || 0) > 0.5 && a.xref === 'paper' && i > 0) upd[`annotations[${i}].visible`] = false;
        else if (i === 0 && a.xref === 'paper') upd['annotations[0].x'] = 0.5;
      });
      const hide = el.data.map((t) => (t.xaxis && t.xaxis !== 'x') ? false : true);
      window.Plotly.restyle(el, {visible: hide});
    }
    window.Plotly.relayout(el, upd).then(() => { el.__elSeen = el.layout; });
  };
  window.__elFit = () => document.querySelectorAll('.js-plotly-plot').forEach((el) => {
    if (el.__elOrig) el.__elOrig.scale = null;
    fit(el);
  });
  const fitAll = () => document.querySelectorAll('.js-plotly-plot').forEach(fit);
  new MutationObserver(() => { lens(); hook(); fitAll(); }).observe(document.body, {childList: true, subtree: true});
  window.addEventListener('resize', window.__elFit);
  hook();
  fitAll();
}"""
