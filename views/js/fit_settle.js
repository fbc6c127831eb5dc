// Figure fitting, measured: the drawn text boxes, and the margins grown until nothing is clipped or covered.
/* exported settle */
/* global axisKeys, axKey, clearBg, memos, memoKey, shorten, fillHeight, scaleOf */
const scaleNow = (el) => scaleOf(el.clientWidth);   // the type scale this fit applies (fit.js)
const boxes = (el) => {   // drawn text boxes relative to the figure's top-left corner
  // (a phone's tree may be wider than its box, which scrolls sideways: measured from the figure's own left edge)
  const fr = el.getBoundingClientRect(), out = [], x0 = fr.left - el.scrollLeft;
  const rel = (e, kind, idx, te) => { const r = e.getBoundingClientRect();
    if (r.width > 0.5 && r.height > 0.5 && ((te || e).textContent || '').trim())
      out.push({kind, idx, l: r.left - x0, r: r.right - x0, t: r.top - fr.top, b: r.bottom - fr.top}); };
  const anns = el._fullLayout.annotations || [];
  el.querySelectorAll('.g-gtitle text.gtitle').forEach((e) => rel(e, 'title'));
  el.querySelectorAll('.infolayer g.annotation').forEach((g) => { const a = anns[+g.getAttribute('data-index')] || {};
    const t = g.querySelector('.annotation-text');
    if (!t) return;
    // a node label is its whole box (padding and border included): boxes touch long before their texts do
    if ((a.name || '').startsWith('node-') || !clearBg(a.bgcolor)) rel(g.querySelector('.annotation-text-g') || t, 'node', +g.getAttribute('data-index'), t);
    else rel(t, 'annotation', +g.getAttribute('data-index')); });
  el.querySelectorAll('.infolayer text').forEach((e) => { if (/^[xy]\d*title$/.test(e.getAttribute('class') || '')) rel(e, 'axis'); });
  el.querySelectorAll('.legend .legendtext').forEach((e) => rel(e, 'legend'));
  el.querySelectorAll('.xaxislayer-above text, .yaxislayer-above text').forEach((e) => rel(e, 'tick'));
  return {w: Math.max(fr.width, (el._fullLayout || {}).width || 0), h: fr.height, items: out};
};
const hit = (a, b) => Math.min(a.r, b.r) - Math.max(a.l, b.l) > 2 && Math.min(a.b, b.b) - Math.max(a.t, b.t) > 2;
// two node boxes keep a gap of NODE_GAP px (their borders, half outside the box, must not touch)
const NODE_GAP = 4;
const near = (a, b) => Math.min(a.r, b.r) - Math.max(a.l, b.l) > -NODE_GAP && Math.min(a.b, b.b) - Math.max(a.t, b.t) > -NODE_GAP;
const NODE_MIN_CHARS = 4, NODE_MIN_FONT = 0.6;   // how far node labels are cut and their type shrunk
const NODE_READ_PX = 15;   // a deck's node labels shrink to this size (px) before their tokens are cut
const nodeFontFloor = (el, o) => {   // the node type's factor at which the smallest node label is NODE_READ_PX
  const px = Math.min(...o.ann.filter((a) => a.node).map((a) => a.font * scaleNow(el)));
  return px > 0 && px < Infinity ? Math.min(1, NODE_READ_PX / px) : 1;
};
// node boxes (the tree's labels) that collide: boxes in different rows call for taller rows (the plot's growth,
// px); boxes side by side in one row, or a box cut at the figure's edge, for narrower boxes (crowded) or a wider
// plot (spread: the factor its width needs for the boxes of one row to clear each other)
const nodeRoom = (nodes, w, plotH) => {
  let grow = 0, crowded = false, spread = 1;
  nodes.forEach((a, i) => {
    if (a.l < 1 || a.r > w - 1) { crowded = true; spread = Math.max(spread, 1.1); }
    nodes.slice(i + 1).forEach((b) => {
      if (!near(a, b)) return;
      const dy = Math.abs(a.t + a.b - b.t - b.b) / 2;   // between their rows' centres
      const oy = Math.min(a.b, b.b) - Math.max(a.t, b.t) + NODE_GAP + 1;
      if (dy > 4) { grow = Math.max(grow, plotH * oy / dy); return; }   // rows dy apart need dy + oy: the plot grows by oy / dy
      crowded = true;
      const dx = Math.abs(a.l + a.r - b.l - b.r) / 2;   // between their columns' centres, which a wider plot moves apart
      spread = Math.max(spread, dx > 4 ? ((a.r - a.l + b.r - b.l) / 2 + NODE_GAP + 1) / dx : 2);
    });
  });
  return {grow, crowded, spread};
};
// a phone's tree (a plot narrower than this, not a deck's screen-high figure) widens, its box scrolling sideways, up
// to WIDE_MAX times the box's width before its tokens are cut: "✓ ␣p…" said nothing (step 6's runner-up at 390 px)
const NARROW_PX = 560, WIDE_MAX = 2.5;
// what a tree's crowded node boxes take next, one step a pass: a wider plot (a phone), smaller type (a deck), shorter
// tokens, then smaller type
const nodeStep = (el, o, fz, mm, room, tight) => {
  let cut = 0, shrink = 0, widen = 0;
  // a deck's tree (a projector's type) first takes smaller type, down to what a class still reads, and only then
  // cuts its tokens: a whole token in smaller type reads, "␣…" does not (issue 50.5)
  const deckFont = fillHeight(el) && room.crowded && (o.nodeLimit || 14) >= 14 ? nodeFontFloor(el, o) : 0;
  const box = el.clientWidth, wideMax = Math.floor(WIDE_MAX * box);
  if (room.crowded && !fillHeight(el) && box < NARROW_PX && (o.nodeLimit || 14) >= 14 && fz.width < wideMax) {
    const plotW = fz.width - mm.l - mm.r;   // the plot's width grows: its columns move apart, the type stays
    widen = Math.min(wideMax, Math.ceil(fz.width + plotW * (room.spread - 1) + 4));
  } else if (deckFont && (o.nodeFont || 1) > deckFont + 1e-6) {
    o.nodeFont = Math.max(deckFont, (o.nodeFont || 1) - 0.1);
    shrink = o.nodeFont;
  } else if (room.crowded && (o.nodeLimit || 14) > NODE_MIN_CHARS) {
    o.nodeLimit = Math.max(NODE_MIN_CHARS, (o.nodeLimit || 14) - 3);
    cut = o.nodeLimit;
  } else if ((room.crowded || tight) && (o.nodeFont || 1) > NODE_MIN_FONT + 1e-6) {
    o.nodeFont = Math.max(NODE_MIN_FONT, (o.nodeFont || 1) - 0.1);
    shrink = o.nodeFont;
  }
  return {cut, shrink, widen};
};
// a figure wider than its box (a phone's tree) scrolls sideways in it; one that fits does not
const scrollWide = (el) => {
  const wide = el._fullLayout.width > el.clientWidth + 1;
  if ((el.style.overflowX === 'auto') !== wide) el.style.overflowX = wide ? 'auto' : '';
  el.classList.toggle('el-wide', wide);
};
// measured: grow the margins until nothing is clipped, the title covers nothing and the legend clears the axes;
// what it grew is kept for the next figure of the same kind (plan's memo)
const settle = async (el, o, H0, sig) => {
  const P = window.Plotly;
  for (let pass = 0; pass < 10; pass++) {
    const bx = boxes(el), fz = el._fullLayout, mm = {...fz.margin};
    const plotHn = fz.height - mm.t - mm.b;
    let dt = 0, db = 0, dl = 0, dr = 0, legendDown = 0;
    const titles = bx.items.filter((b) => b.kind === 'title');
    let down = 0;   // the title's own top (Plotly anchors a multi-line title's first line, not its box)
    titles.forEach((t) => { down = Math.max(down, 6 - t.t); });
    bx.items.forEach((b) => {
      if (b.kind !== 'node' && b.kind !== 'title') dt = Math.max(dt, 2 - b.t);
      db = Math.max(db, b.b - bx.h + 2);
      if (b.kind === 'tick' || b.kind === 'axis') { dl = Math.max(dl, 2 - b.l); dr = Math.max(dr, b.r - bx.w + 2); }
      titles.forEach((t) => { if (b !== t && hit(t, b) && b.t > t.t - 2) dt = Math.max(dt, t.b - b.t + 4); });
    });
    const leg = bx.items.filter((b) => b.kind === 'legend');
    if (leg.length && fz.legend && fz.legend.y < 0.5) {
      // anything the legend covers moves it below that thing: an axis title that starts lower than the legend's top
      // (a two-line title under two-line tick labels) counts too
      const top = Math.min(...leg.map((b) => b.t)), bottom = Math.max(...leg.map((b) => b.b));
      bx.items.forEach((b) => { if (b.kind !== 'legend' && b.kind !== 'node' && leg.some((g) => hit(g, b)) && b.t < bottom - 2)
        legendDown = Math.max(legendDown, b.b - top + 6); });
    }
    // a subplot title that runs into the row above it: the plot grows until the gap between the rows holds both
    let grow = 0;
    bx.items.forEach((b) => {
      const a = b.kind === 'annotation' && o.ann[b.idx];
      if (!a || !a.sub) return;
      const d = Math.max(0, ...bx.items.filter((x) => x !== b && x.kind !== 'node' && x.kind !== 'title' &&
                                              x.t + x.b < b.t + b.b && hit(x, b)).map((x) => x.b - b.t + 4));
      if (!d) return;
      const top = fz[axKey(a.sub.match(/y\d*$/)[0])].domain[1];
      const gaps = axisKeys(fz).filter((k) => k[0] === 'y' && fz[k].domain[0] >= top - 1e-6).map((k) => fz[k].domain[0] - top);
      const gap = Math.min(...gaps.filter((g) => g > 0.005), 1);
      if (gaps.length) grow = Math.max(grow, d / gap);
    });
    // node boxes (the tree's labels) that run into each other: rows too close grow the plot (a legend that
    // wraps on a narrow plot takes its room from the rows); boxes too wide for their columns get their token texts
    // cut shorter, then smaller type
    // (boxes placed in data coordinates only: the plot's growth moves those apart, not a box placed in pixels)
    const room = nodeRoom(bx.items.filter((b) => b.kind === 'node' && /^y\d*$/.test((fz.annotations[b.idx] || {}).yref || '')),
                          bx.w, plotHn);
    // a deck's figure keeps the screen's height: rows too close there take smaller type (a shorter text would
    // not make a box lower)
    const tight = room.grow > 0 && fillHeight(el);
    if (!tight) grow = Math.max(grow, room.grow);
    const {cut, shrink, widen} = nodeStep(el, o, fz, mm, room, tight);
    if (dt <= 0 && db <= 0 && dl <= 0 && dr <= 0 && legendDown <= 0 && down <= 0 && grow <= 0 && !cut && !shrink && !widen) break;
    const u = {};
    if (down > 0) dt = Math.max(dt, down);   // room for it below, too
    if (dt > 0) { u['margin.t'] = mm.t + dt; }
    if (legendDown > 0) { u['legend.y'] = fz.legend.y - legendDown / plotHn; db = Math.max(db, 0) + legendDown; }
    if (db > 0) u['margin.b'] = mm.b + db;
    if (dl > 0) u['margin.l'] = mm.l + dl;
    if (dr > 0) u['margin.r'] = mm.r + dr;
    // a deck's figure keeps the screen's height (deck.js): its margins grow into its plot instead
    u.height = fillHeight(el) ? fz.height : fz.height + Math.max(0, dt) + Math.max(0, db) + Math.min(grow, 1500);
    u['title.y'] = 1 - ((1 - fz.title.y) * fz.height + Math.max(0, down)) / u.height;   // same px from the top
    if (cut) { o.shortened = true; o.ann.forEach((a, i) => { if (a.node) u[`annotations[${i}].text`] = shorten(a.text, cut); }); }
    if (shrink) (fz.annotations || []).forEach((a, i) => { if (o.ann[i] && o.ann[i].node)
      u[`annotations[${i}].font.size`] = o.ann[i].font * scaleNow(el) * shrink; });
    if (widen) {
      u.width = widen;
      // its legend keeps the one column it had in the box (across the wider figure, its rows rose into the plot)
      if (fz.showlegend && fz.legend && fz.legend.orientation === 'h') u['legend.orientation'] = 'v';
    }
    await P.relayout(el, u);
  }
  scrollWide(el);
  const fz = el._fullLayout;
  memos[memoKey(el)] = {sig, margin: {t: fz.margin.t, b: fz.margin.b, l: fz.margin.l, r: fz.margin.r}, grow: fz.height - H0,
                 top: (1 - fz.title.y) * fz.height, legendY: o.legend && fz.legend ? fz.legend.y : null};
};
