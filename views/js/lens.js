// The Lens tab's linked views. Clicking a tree node selects it for the q-vs-p view: Plotly's click events write
// "node:nonce" into a hidden box (#el-click) and press a hidden button (#el-click-btn). Hovering or clicking a node
// lights the token(s) it committed in the text, and a token the node; the text panel follows the run.
/* exported hook, lens */
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
  ? !a.name && /\((bonus|correction|first token)\)\s*$/.test(a.text || '') : a.name === 'node-' + node);
const annNode = (el, target) => {    // the tree node of an annotation box under the pointer, or null
  const g = target && target.closest && target.closest('g.annotation');
  if (!g || !el.layout) return null;
  const a = (el.layout.annotations || [])[Number(g.getAttribute('data-index'))];
  if (!a) return null;
  if (a.name && a.name.startsWith('node-')) return a.name.slice(5);
  return /\((bonus|correction|first token)\)\s*$/.test(a.text || '') ? 'b' : null;
};
const tokensOf = (cyc, node) => {
  if (String(node) === '0') {   // the root is the last token the cycle before committed
    const prev = document.querySelectorAll(`.el-text .el-tok[data-cycle="${Number(cyc) - 1}"]`);
    return prev.length ? [prev[prev.length - 1]] : [];
  }
  return [...document.querySelectorAll(`.el-text .el-tok[data-cycle="${cyc}"][data-node="${node}"]`)];
};
// a Play beat's figure (views/beats.py) has no node boxes: its nodes are the markers and labels of its "nodes"
// trace (customdata: the node), the target's token those of "target's token"; the node's marker and label, or []
const beatPoint = (el, node) => {
  const data = el.data || [];
  const t = data.findIndex((d) => (node === 'b' ? d.name === "target's token"
    : d.name === 'nodes' && Array.isArray(d.customdata)));
  if (t < 0 || !(el.layout && el.layout.meta && el.layout.meta.el_steps)) return [];
  const k = node === 'b' ? 0 : data[t].customdata.findIndex((c) => String(c) === String(node));
  const scatter = data.slice(0, t).filter((d) => (d.type || 'scatter') === 'scatter').length;
  const g = el.querySelectorAll('.scatterlayer g.trace')[scatter];
  if (!g || k < 0) return [];
  const at = (sel) => [...g.querySelectorAll(sel)].filter((e, j) => (e.__data__ && e.__data__.i !== undefined
    ? e.__data__.i : j) === k);
  return [...at('path.point'), ...at('g.textpoint')];
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
    else beatPoint(el, on.node).forEach((g) => g.classList.add('el-hl'));
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
