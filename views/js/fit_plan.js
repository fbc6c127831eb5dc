// Figure fitting, plan: the first update of a fit, computed from a figure's description without drawing it.
/* exported memos, memoKey, plan */
/* global axisKeys, axKey, wrapHtml, fillHeight */
// the panels that hold data, as {id, x: xaxis key, y: yaxis key}, and whether they sit side by side
const panelsOf = (o) => o.subs.map((id) => { const m = id.match(/^(x\d*)(y\d*)$/);
    return m && {id, x: axKey(m[1]), y: axKey(m[2])}; })
  .filter((p) => p && o.axes[p.x] && o.axes[p.y] && o.traces.includes(p.id));
const sideBySide = (ps, o) => ps.some((a) => ps.some((b) => a !== b &&
  Math.min(o.axes[a.y].domain[1], o.axes[b.y].domain[1]) - Math.max(o.axes[a.y].domain[0], o.axes[b.y].domain[0]) > 0.01));
const memos = {};   // by the figure's block: Gradio may draw each new figure into a new element
const memoKey = (el) => { const b = el.closest('[id]'); return b ? b.id : ''; };
// a phone: side-by-side panels `ps` stacked, each the full width, in reading order (their axes' domains in `dom`,
// their titles and the legend moved in `upd`); the figure's new height
const stackPanels = (o, ps, W, s, m, dom, upd) => {
  ps.sort((a, b) => (o.axes[b.y].domain[1] - o.axes[a.y].domain[1]) || (o.axes[a.x].domain[0] - o.axes[b.x].domain[0]));
  const plotH0 = o.height - o.margin.t - o.margin.b;
  const heights = ps.map((p) => Math.max(150, (o.axes[p.y].domain[1] - o.axes[p.y].domain[0]) * plotH0));
  const lineH = o.font * s * 1.35;
  const above = ps.map((p, i) => { const a = o.ann.find((x) => x.sub === p.id);
    if (!a || !i) return 0;
    const lines = wrapHtml(a.text, W - m.l - m.r, a.font * s).split(/<br\s*\/?>/i).length;
    return lines * a.font * s * 1.3 + 10; });
  const rotated = (p) => { const ax = o.axes[p.x]; return ax.tickangle && ax.tickangle !== 'auto' && ax.tickangle % 180; };
  const below = ps.map((p) => (o.axes[p.x].showticklabels === false ? 10 : (rotated(p) ? 7 : 2.2) * lineH)
                              + (o.axes[p.x].title ? 1.6 * lineH : 0) + 14);
  const plotH = heights.reduce((x, y) => x + y, 0) + above.reduce((x, y) => x + y, 0)
                + below.slice(0, -1).reduce((x, y) => x + y, 0);
  let y = 0;
  ps.forEach((p, i) => {
    y += above[i];
    dom[p.x] = [0, 1];
    dom[p.y] = [Math.max(0, 1 - (y + heights[i]) / plotH), Math.min(1, 1 - y / plotH)];
    y += heights[i] + below[i];
  });
  const H = o.height - plotH0 + plotH;
  if (o.legend && o.legend.y < 0) upd['legend.y'] = o.legend.y * plotH0 / plotH;
  o.ann.forEach((a, i) => {
    const p = a.sub && ps.find((q) => q.id === a.sub);
    if (p) { upd[`annotations[${i}].x`] = 0.5; upd[`annotations[${i}].y`] = dom[p.y][1]; }
    else if (a.yref === 'paper' && !a.node) upd[`annotations[${i}].y`] = a.y >= 0 && a.y <= 1 ? a.y : a.y * plotH0 / plotH;
  });
  return H;
};
// titles, axis titles and plain annotations wrapped to the room they have in a figure W x H px (in `upd`)
const wrapToRoom = (o, W, s, m, H, dom, stack, upd) => {
  const plotW = W - m.l - m.r, plotH = H - m.t - m.b;
  const tx = o.titleAnchor === 'center' ? 2 * Math.min(o.titleX, 1 - o.titleX) * W : (1 - o.titleX) * W;
  upd['title.text'] = wrapHtml(o.title, tx - 16, o.titleFont * s);
  axisKeys(o.axes).forEach((k) => { const a = o.axes[k];
    if (a.tick) upd[`${k}.tickfont.size`] = a.tick * s;
    if (a.titleFont) upd[`${k}.title.font.size`] = a.titleFont * s;
    const len = (dom[k][1] - dom[k][0]) * (k[0] === 'x' ? plotW : plotH);
    if (a.title) upd[`${k}.title.text`] = wrapHtml(a.title, len - 8, (a.titleFont || o.font) * s); });
  o.ann.forEach((a, i) => {
    upd[`annotations[${i}].font.size`] = a.font * s;
    if (!a.wrap) return;
    let room;
    if (a.sub) { const xk = axKey(a.sub.match(/^x\d*/)[0]); room = (dom[xk][1] - dom[xk][0]) * plotW;
                 const c = m.l + (stack ? 0.5 : a.x) * plotW; room = Math.min(room + 8, 2 * Math.min(c, W - c)); }
    else { const d = a.xref === 'paper' ? [0, 1] : dom[axKey(a.xref.split(' ')[0])] || [0, 1];
           const c = m.l + (d[0] + a.x * (a.xref === 'paper' ? 1 : d[1] - d[0])) * plotW;
           room = a.xanchor === 'left' ? W - c : a.xanchor === 'right' ? c : 2 * Math.min(c, W - c);
           if (a.xref !== 'paper') room = Math.min(room, (d[1] - d[0]) * plotW + 10); }
    upd[`annotations[${i}].text`] = wrapHtml(a.text, room - 10, a.font * s);
  });
};
// The first update of a fit, from the server's figure `o`: fonts for the room, text
// wrapped to the width it has, a phone's side-by-side panels stacked, and the margins a figure of the same kind
// needed last time at this size (`memo`; settle, fit_settle.js, grows them where this one needs more). Pure:
// text widths come from a canvas.
const plan = (el, o, W, s, key) => {
  const m = {...o.margin};
  let H = fillHeight(el) || o.height;   // a deck's figure: the screen's height below it (deck.js)
  const upd = {'font.size': o.font * s, 'title.font.size': o.titleFont * s, 'hoverlabel.font.size': 15 * s,
               'title.yref': 'container', 'title.yanchor': 'top'};
  ['t', 'b', 'l', 'r'].forEach((k) => { upd[`margin.${k}`] = o.margin[k]; });   // from the server's, each time
  if (o.legend) Object.assign(upd, {'legend.font.size': o.legend.font * s, 'legend.x': o.legend.x, 'legend.y': o.legend.y,
    'legend.orientation': o.legend.orientation, 'legend.xanchor': o.legend.xanchor, 'legend.yanchor': o.legend.yanchor});
  // a narrow plot: a legend drawn inside the plot area moves below it (the pass below clears the axes)
  if (o.legend && W < 560 && o.legend.y > 0 && o.legend.y <= 1 && o.legend.x >= 0 && o.legend.x < 1)
    Object.assign(upd, {'legend.orientation': 'h', 'legend.x': 0, 'legend.xanchor': 'left', 'legend.y': -0.12,
                        'legend.yanchor': 'top'});
  // a phone: side-by-side panels stacked, each the full width, in reading order
  const ps = panelsOf(o), stack = W < 560 && ps.length > 1 && sideBySide(ps, o);
  const dom = {};
  axisKeys(o.axes).forEach((k) => { dom[k] = o.axes[k].domain; });
  o.ann.forEach((a, i) => { if (a.sub || (a.yref === 'paper' && !a.node)) {
    upd[`annotations[${i}].x`] = a.x; upd[`annotations[${i}].y`] = a.y; } });
  if (stack) H = stackPanels(o, ps, W, s, m, dom, upd);
  Object.keys(dom).forEach((k) => { upd[`${k}.domain`] = dom[k]; });
  upd.width = W;   // the box's width (a plot hidden when the window was resized keeps its old one otherwise)
  wrapToRoom(o, W, s, m, H, dom, stack, upd);
  // legend entries wrapped; trace text (bar labels, heatmap numbers) scaled
  const names = o.names.map((n) => (n == null ? n : wrapHtml(n, W - 70, (o.legend ? o.legend.font : o.font) * s)));
  const tf = o.textfont.map((z) => (z ? z * s : null));
  // the margins the same kind of figure needed at this size last time (a Run streams one figure after another:
  // measured once, not grown again on every cycle)
  const sig = [key, JSON.stringify(o.margin), o.height, H, stack, ps.length, !!o.legend, o.ann.filter((a) => !a.node).length,
               ...['title.text', ...axisKeys(o.axes).map((k) => `${k}.title.text`)].map((k) => (String(upd[k] || '').match(/<br/gi) || []).length)].join('|');
  const memo = memos[memoKey(el)] && memos[memoKey(el)].sig === sig ? memos[memoKey(el)] : null;
  let top = 8;   // the title's top, px below the figure's top (the margin below it is measured)
  const H0 = H;  // what the memo's growth is counted from
  if (memo) {
    ['t', 'b', 'l', 'r'].forEach((k) => { upd[`margin.${k}`] = memo.margin[k]; });
    H += memo.grow;
    top = memo.top;
    if (memo.legendY != null) upd['legend.y'] = memo.legendY;
  }
  upd.height = H;
  upd['title.y'] = 1 - top / H;
  return {upd, names, tf, sig, H0};
};
