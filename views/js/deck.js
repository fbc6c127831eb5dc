// The walkthrough as a deck (tabs/walkthrough.py). The Left / Right arrow keys press Prev / Next, unless the focus is
// in an input (a text box, a number, the step buttons, which move on their own). A figure in an `.el-fill` block
// takes the window's height below its top (fit.js asks fillHeight; 0 = keep the figure's own height, as on a
// phone, where the deck stacks). Step 3's tree and mask are linked: hovering a tree node outlines its row of the
// mask (what it may see), hovering a mask row lights the nodes that row sees in the tree.
/* exported fillHeight, deckHook */
const fillHeight = (el) => {
  const box = el && el.closest && el.closest('.el-fill');
  if (!box || window.innerWidth <= 640 || window.innerHeight < 420) return 0;
  const top = el.getBoundingClientRect().top + window.scrollY;
  return Math.max(300, Math.floor(window.innerHeight - top - 14));
};
// the text column may not make the page scroll either: it scrolls itself past the screen's height (CSS var)
const deckSize = () => {
  const d = document.querySelector('#el-walk-deck');
  if (!d || !d.offsetParent) return;
  const top = d.getBoundingClientRect().top + window.scrollY;
  const h = window.innerWidth > 640 ? `${Math.max(300, Math.floor(window.innerHeight - top - 14))}px` : 'none';
  if (d.style.getPropertyValue('--el-deck-h') !== h) d.style.setProperty('--el-deck-h', h);
};
window.addEventListener('resize', deckSize);
document.addEventListener('keydown', (ev) => {
  if (ev.defaultPrevented || ev.altKey || ev.ctrlKey || ev.metaKey || ev.shiftKey) return;
  if (ev.key !== 'ArrowLeft' && ev.key !== 'ArrowRight') return;
  const t = ev.target;
  if (t && t.closest && t.closest('input, textarea, select, [contenteditable="true"], [contenteditable=""]')) return;
  const btn = document.querySelector(ev.key === 'ArrowRight' ? '#el-walk-next' : '#el-walk-prev');
  if (!btn || !btn.offsetParent || btn.disabled) return;   // another tab is shown, or the deck's first/last step
  ev.preventDefault();
  btn.click();
});
// ---- step 3: the tree (#el-walk-side) and its mask (#el-walk-fig)
const deckPlot = (id) => document.querySelector(`${id} .js-plotly-plot`);
const maskTrace = (el) => (el && el.data || []).find((t) => t.type === 'heatmap');
const rowOf = (el, node) => { const t = maskTrace(el);
  return t ? t.y.findIndex((l) => String(l).split(':')[0] === String(node)) : -1; };
const outlineRow = (node) => {   // the mask's row of a tree node, outlined (none: node null)
  const el = deckPlot('#el-walk-fig'), t = maskTrace(el);
  if (!t || !window.Plotly) return;
  const k = node === null ? -1 : rowOf(el, node);
  const shapes = k < 0 ? [] : [{type: 'rect', xref: 'x', yref: 'y', x0: -0.5, x1: t.x.length - 0.5, y0: k - 0.5,
    y1: k + 0.5, line: {color: '#111', width: 3, dash: 'dash'}, fillcolor: 'rgba(255, 213, 74, 0.25)'}];
  window.Plotly.relayout(el, {shapes});
};
const lightNodes = (nodes) => {  // tree nodes lit (a class of its own: lens.js clears el-hl on every change)
  const el = deckPlot('#el-walk-side');
  if (!el || !el.layout) return;
  const names = new Set(nodes.map((n) => `node-${n}`));
  el.querySelectorAll('g.annotation').forEach((g) => {
    const a = (el.layout.annotations || [])[Number(g.getAttribute('data-index'))];
    g.classList.toggle('el-deck-hl', !!(a && names.has(a.name)));
  });
};
const seenBy = (el, k) => { const t = maskTrace(el);   // the nodes row k sees (its ancestors and itself)
  return t ? t.x.filter((_, c) => t.z[k][c] > 0).map((l) => String(l).split(':')[0]) : []; };
const treeNodeOf = (el, ev) => {
  const p = ev && ev.points && ev.points[0];
  if (p && p.customdata !== undefined && p.customdata !== null) return String(p.customdata);
  const g = ev && ev.target && ev.target.closest && ev.target.closest('g.annotation');
  const a = g && el.layout && (el.layout.annotations || [])[Number(g.getAttribute('data-index'))];
  return a && a.name && a.name.startsWith('node-') ? a.name.slice(5) : null;
};
const deckHook = () => {
  deckSize();
  const tree = deckPlot('#el-walk-side'), mask = deckPlot('#el-walk-fig');
  if (!mask || !tree || !maskTrace(mask) || !tree.on || !mask.on) return;
  if (!tree.__elDeck) {
    tree.__elDeck = true;
    const on = (n) => { outlineRow(n); lightNodes(n === null ? [] : [n]); };
    tree.on('plotly_hover', (ev) => on(treeNodeOf(tree, ev)));
    tree.on('plotly_unhover', () => on(null));
    tree.addEventListener('mouseover', (ev) => { const n = treeNodeOf(tree, ev); if (n !== null) on(n); });
    tree.addEventListener('mouseout', (ev) => { if (treeNodeOf(tree, ev) !== null) on(null); });
  }
  if (!mask.__elDeck) {
    mask.__elDeck = true;
    mask.on('plotly_hover', (ev) => { const p = ev.points && ev.points[0];
      if (!p) return;
      const k = Array.isArray(p.pointIndex) ? p.pointIndex[0] : rowOf(mask, String(p.y).split(':')[0]);
      lightNodes(seenBy(mask, k)); });
    mask.on('plotly_unhover', () => lightNodes([]));
  }
};
window.__elDeck = {fillHeight, outlineRow, lightNodes};   // for the browser tests
