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
/* figures: a plot's component label sits above the figure, in the flow, never over the figure's title */
.block:has(> .js-plotly-plot) > label[data-testid='block-label'].float {position: static; margin: 0 0 2px 0;}
@media (max-width: 640px) {   /* a phone: a figure beside text or another figure takes the whole width */
  .row:has(> .block > .js-plotly-plot) {flex-wrap: wrap;}
  .row:has(> .block > .js-plotly-plot) > * {min-width: 100% !important;}
}
"""
PRESENTER_JS = "(on) => { document.body.classList.toggle('el-presenter', on); window.__elFit && window.__elFit(); return on; }"
# clicking a tree node selects it for the q-vs-p view: Plotly's click events write "node:nonce" into a hidden
# box and press a hidden button
CLICK_JS = r"""() => {
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
  // figures: every figure fits its box, measured in the page (tests/test_browser_figures.py checks the result).
  // Fonts follow the room (1.35x in presenter mode, smaller on a narrow plot); titles, subplot titles, axis titles,
  // plain annotations and legend entries are wrapped to the width they have; a multi-panel figure on a phone-narrow
  // plot is stacked, one panel per row; then the drawn text boxes are measured and the margins grown until no title
  // is clipped or covered and the legend clears the axes. Re-applied whenever the server sends a new figure (a new
  // layout object), on resize and when presenter mode changes.
  const FAMILY = 'Inter, Segoe UI, Helvetica, Arial, sans-serif';
  const ctx2d = document.createElement('canvas').getContext('2d');
  const textPx = (s, px) => { ctx2d.font = `${px}px ${FAMILY}`; return ctx2d.measureText(s).width; };
  const closeTag = (t) => '</' + (t.match(/^<\s*([a-z0-9]+)/i) || [0, 'span'])[1] + '>';
  const wrapHtml = (html, maxPx, px) => {   // greedy word wrap of Plotly's pseudo-HTML; open tags are re-opened
    html = String(html == null ? '' : html);
    if (!html.trim() || !(maxPx > 20)) return html;
    const stack = [];
    let out = '', lineW = 0, space = '';
    const k = () => (stack.some((t) => /^<su[pb]/i.test(t)) ? 0.72 : 1) * (stack.some((t) => /^<b[\s>]/i.test(t)) ? 1.08 : 1);
    for (const part of html.match(/<[^>]*>|[^<]+/g) || []) {
      if (part[0] === '<') {
        if (/^<br/i.test(part)) { out += part; lineW = 0; space = ''; continue; }
        if (/^<\//.test(part)) stack.pop(); else if (!/\/>$/.test(part)) stack.push(part);
        out += part;
        continue;
      }
      for (const wd of part.split(/( +)/)) {
        if (!wd) continue;
        if (/^ +$/.test(wd)) { space = wd; continue; }
        const w = textPx(wd.replace(/&[#\w]+;/g, 'x'), px * k()), sw = space ? textPx(space, px * k()) : 0;
        if (lineW > 0 && lineW + sw + w > maxPx) {
          out += stack.slice().reverse().map(closeTag).join('') + '<br>' + stack.join('');
          lineW = 0;
        } else if (lineW > 0 || out) { out += space; lineW += sw; }
        space = '';
        out += wd;
        lineW += w;
      }
    }
    return out;
  };
  const shorten = (html, n) => String(html).split(/<br\s*\/?>/i).map((line) => {   // plain lines only
    if (/</.test(line) || line.replace(/&[#\w]+;/g, 'x').length <= n) return line;
    let k = n - 1;
    const amp = line.lastIndexOf('&', k);
    if (amp >= 0 && line.indexOf(';', amp) >= k) k = amp;   // never inside an entity
    return line.slice(0, k) + '…';
  }).join('<br>');
  const axisKeys = (lay) => Object.keys(lay).filter((k) => /^[xy]axis\d*$/.test(k));
  const axId = (key) => key[0] + key.slice(5);                // 'xaxis2' -> 'x2'
  const axKey = (id) => id[0] + 'axis' + id.slice(1);         // 'x2' -> 'xaxis2'
  const clearBg = (c) => !c || c === 'transparent' || /rgba\([^)]*,\s*0\)$/.test(c);
  const textOf = (x) => (x && typeof x === 'object' ? x.text : x) || '';
  const num = (v, d) => (typeof v === 'number' ? v : d);
  const subsOf = (o) => o.ann.forEach((a) => {   // a make_subplots title: centred over its panel, on its top edge
    a.sub = a.xref === 'paper' && a.yref === 'paper' && a.xanchor === 'center' && a.yanchor === 'bottom' && !a.showarrow
      ? o.subs.find((id) => { const m = id.match(/^(x\d*)(y\d*)$/); if (!m) return false;
          const xa = o.axes[axKey(m[1])], ya = o.axes[axKey(m[2])];
          return xa && ya && Math.abs((xa.domain[0] + xa.domain[1]) / 2 - a.x) < 1e-3 && Math.abs(ya.domain[1] - a.y) < 1e-3; }) || null
      : null;
    a.wrap = !a.node && !a.showarrow && (a.xref === 'paper' || /domain$/.test(a.xref));
  });
  const snapshot = (el) => {   // what the server sent, before any fitting (every fit starts again from this)
    const fl = el._fullLayout, lay = el.layout;   // texts from the layout (the full layout holds placeholders)
    const o = {font: fl.font.size, title: textOf(lay.title), titleFont: fl.title?.font?.size || 18, titleX: fl.title?.x ?? 0.01,
               titleAnchor: fl.title?.xanchor, margin: {...fl.margin}, height: fl.height,
               legend: fl.legend ? {font: fl.legend.font?.size || fl.font.size, x: fl.legend.x, y: fl.legend.y,
                                    orientation: fl.legend.orientation, xanchor: fl.legend.xanchor,
                                    yanchor: fl.legend.yanchor} : null,
               showlegend: fl.showlegend, axes: {}, ann: [], names: el.data.map((t) => t.name),
               traces: el.data.map((t) => (t.xaxis || 'x') + (t.yaxis || 'y')),
               textfont: (el._fullData || []).map((t) => (t.textfont && t.textfont.size) || null),
               subs: [...((fl._subplots && fl._subplots.cartesian) || [])]};
    axisKeys(fl).forEach((k) => { const a = fl[k];
      o.axes[k] = {domain: [...a.domain], title: textOf((lay[k] || {}).title), titleFont: a.title?.font?.size,
                   tick: a.tickfont?.size, anchor: a.anchor, visible: a.visible, tickangle: a.tickangle,
                   showticklabels: a.showticklabels}; });
    (fl.annotations || []).forEach((a, i) => {
      o.ann.push({text: textOf(((lay.annotations || [])[i] || {}).text), font: a.font?.size || fl.font.size, x: a.x, y: a.y,
                  xref: a.xref, yref: a.yref, xanchor: a.xanchor, yanchor: a.yanchor, showarrow: !!a.showarrow,
                  node: (a.name || '').startsWith('node-') || !clearBg(a.bgcolor)});
    });
    subsOf(o);
    return o;
  };
  // The same description read off the figure as the server sent it (no full layout yet: nothing drawn), taking
  // what the figure leaves to Plotly's defaults from the last figure of its kind, `p`. Trusted for a kind only
  // once it reproduced a measured snapshot exactly (fit below), and only while the kind's shape stays the same.
  const kindOf = (lay, data) => JSON.stringify([axisKeys(lay), lay.margin, lay.height, lay.font, lay.legend && lay.legend.font,
    (lay.annotations || []).filter((a) => !(a.name || '').startsWith('node-')).length,
    data.map((t) => [t.type, t.xaxis, t.yaxis, t.textfont && t.textfont.size])]);
  const fromRaw = (lay, data, p) => {
    const t = lay.title && typeof lay.title === 'object' ? lay.title : {}, lg = lay.legend || {};
    const o = {font: num((lay.font || {}).size, p.font), title: textOf(lay.title), titleFont: num((t.font || {}).size, p.titleFont),
               titleX: num(t.x, p.titleX), titleAnchor: t.xanchor ?? p.titleAnchor, margin: {...p.margin, ...(lay.margin || {})},
               height: num(lay.height, p.height),
               legend: p.legend ? {font: num((lg.font || {}).size, p.legend.font), x: num(lg.x, p.legend.x), y: num(lg.y, p.legend.y),
                                   orientation: lg.orientation ?? p.legend.orientation, xanchor: lg.xanchor ?? p.legend.xanchor,
                                   yanchor: lg.yanchor ?? p.legend.yanchor} : null,
               showlegend: p.showlegend, axes: {}, ann: [], names: data.map((x) => x.name),
               traces: data.map((x) => (x.xaxis || 'x') + (x.yaxis || 'y')),
               textfont: data.map((x, i) => num((x.textfont || {}).size, p.textfont[i] ?? null)),
               subs: [...p.subs]};
    Object.keys(p.axes).forEach((k) => { const a = lay[k] || {}, q = p.axes[k];
      o.axes[k] = {domain: Array.isArray(a.domain) ? [...a.domain] : [...q.domain], title: textOf(a.title),
                   titleFont: num((a.title && typeof a.title === 'object' && a.title.font || {}).size, q.titleFont),
                   tick: num((a.tickfont || {}).size, q.tick), anchor: a.anchor ?? q.anchor, visible: a.visible ?? q.visible,
                   tickangle: a.tickangle ?? q.tickangle, showticklabels: a.showticklabels ?? q.showticklabels}; });
    (lay.annotations || []).forEach((a) => {
      o.ann.push({text: textOf(a.text), font: num((a.font || {}).size, o.font), x: num(a.x, 0.5), y: num(a.y, 0.5),
                  xref: a.xref ?? 'x', yref: a.yref ?? 'y', xanchor: a.xanchor ?? 'auto', yanchor: a.yanchor ?? 'auto',
                  showarrow: a.showarrow ?? true, node: (a.name || '').startsWith('node-') || !clearBg(a.bgcolor)});
    });
    subsOf(o);
    return o;
  };
  const canon = (x) => JSON.stringify(x, (k, v) => (v && typeof v === 'object' && !Array.isArray(v)
    ? Object.keys(v).sort().reduce((r, q) => { r[q] = v[q]; return r; }, {}) : v));
  // the panels that hold data, as {id, x: xaxis key, y: yaxis key}, and whether they sit side by side
  const panelsOf = (o) => o.subs.map((id) => { const m = id.match(/^(x\d*)(y\d*)$/);
      return m && {id, x: axKey(m[1]), y: axKey(m[2])}; })
    .filter((p) => p && o.axes[p.x] && o.axes[p.y] && o.traces.includes(p.id));
  const sideBySide = (ps, o) => ps.some((a) => ps.some((b) => a !== b &&
    Math.min(o.axes[a.y].domain[1], o.axes[b.y].domain[1]) - Math.max(o.axes[a.y].domain[0], o.axes[b.y].domain[0]) > 0.01));
  const boxes = (el) => {   // drawn text boxes relative to the figure's top-left corner
    const fr = el.getBoundingClientRect(), out = [];
    const rel = (e, kind, idx) => { const r = e.getBoundingClientRect();
      if (r.width > 0.5 && r.height > 0.5 && (e.textContent || '').trim())
        out.push({kind, idx, l: r.left - fr.left, r: r.right - fr.left, t: r.top - fr.top, b: r.bottom - fr.top}); };
    const anns = el._fullLayout.annotations || [];
    el.querySelectorAll('.g-gtitle text.gtitle').forEach((e) => rel(e, 'title'));
    el.querySelectorAll('.infolayer g.annotation').forEach((g) => { const a = anns[+g.getAttribute('data-index')] || {};
      const t = g.querySelector('.annotation-text');
      if (t) rel(t, (a.name || '').startsWith('node-') || !clearBg(a.bgcolor) ? 'node' : 'annotation', +g.getAttribute('data-index')); });
    el.querySelectorAll('.infolayer text').forEach((e) => { if (/^[xy]\d*title$/.test(e.getAttribute('class') || '')) rel(e, 'axis'); });
    el.querySelectorAll('.legend .legendtext').forEach((e) => rel(e, 'legend'));
    el.querySelectorAll('.xaxislayer-above text, .yaxislayer-above text').forEach((e) => rel(e, 'tick'));
    return {w: fr.width, h: fr.height, items: out};
  };
  const hit = (a, b) => Math.min(a.r, b.r) - Math.max(a.l, b.l) > 2 && Math.min(a.b, b.b) - Math.max(a.t, b.t) > 2;
  // The first update of a fit, from the server's figure `o`: fonts for the room, text
  // wrapped to the width it has, a phone's side-by-side panels stacked, and the margins a figure of the same kind
  // needed last time at this size (`memo`; the measured pass below grows them where this one needs more). Pure:
  // text widths come from a canvas.
  const memos = {};   // by the figure's block: Gradio may draw each new figure into a new element
  const memoKey = (el) => { const b = el.closest('[id]'); return b ? b.id : ''; };
  const plan = (el, o, W, s, key) => {
    const m = {...o.margin};
    let H = o.height;
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
    if (stack) {
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
      H = o.height - plotH0 + plotH;
      if (o.legend && o.legend.y < 0) upd['legend.y'] = o.legend.y * plotH0 / plotH;
      o.ann.forEach((a, i) => {
        const p = a.sub && ps.find((q) => q.id === a.sub);
        if (p) { upd[`annotations[${i}].x`] = 0.5; upd[`annotations[${i}].y`] = dom[p.y][1]; }
        else if (a.yref === 'paper' && !a.node) upd[`annotations[${i}].y`] = a.y >= 0 && a.y <= 1 ? a.y : a.y * plotH0 / plotH;
      });
    }
    Object.keys(dom).forEach((k) => { upd[`${k}.domain`] = dom[k]; });
    upd.width = W;   // the box's width (a plot hidden when the window was resized keeps its old one otherwise)
    // text wrapped to the room it has
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
  // measured: grow the margins until nothing is clipped, the title covers nothing and the legend clears the axes;
  // what it grew is kept for the next figure of the same kind (plan's memo)
  const settle = async (el, o, H0, sig) => {
    const P = window.Plotly;
    for (let pass = 0; pass < 6; pass++) {
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
      // node labels (the tree's boxes) that run into each other on a narrow plot: their token texts cut shorter
      const nodes = bx.items.filter((b) => b.kind === 'node');
      let cut = 0;
      if (nodes.some((a, i) => nodes.slice(i + 1).some((b) => hit(a, b))) && (o.nodeLimit || 14) > 5) {
        o.nodeLimit = (o.nodeLimit || 14) - 2;
        cut = o.nodeLimit;
      }
      if (dt <= 0 && db <= 0 && dl <= 0 && dr <= 0 && legendDown <= 0 && down <= 0 && grow <= 0 && !cut) break;
      const u = {};
      if (down > 0) dt = Math.max(dt, down);   // room for it below, too
      if (dt > 0) { u['margin.t'] = mm.t + dt; }
      if (legendDown > 0) { u['legend.y'] = fz.legend.y - legendDown / plotHn; db = Math.max(db, 0) + legendDown; }
      if (db > 0) u['margin.b'] = mm.b + db;
      if (dl > 0) u['margin.l'] = mm.l + dl;
      if (dr > 0) u['margin.r'] = mm.r + dr;
      u.height = fz.height + Math.max(0, dt) + Math.max(0, db) + Math.min(grow, 1500);
      u['title.y'] = 1 - ((1 - fz.title.y) * fz.height + Math.max(0, down)) / u.height;   // same px from the top
      if (cut) { o.shortened = true; o.ann.forEach((a, i) => { if (a.node) u[`annotations[${i}].text`] = shorten(a.text, cut); }); }
      await P.relayout(el, u);
    }
    const fz = el._fullLayout;
    memos[memoKey(el)] = {sig, margin: {t: fz.margin.t, b: fz.margin.b, l: fz.margin.l, r: fz.margin.r}, grow: fz.height - H0,
                   top: (1 - fz.title.y) * fz.height, legendY: o.legend && fz.legend ? fz.legend.y : null};
  };
  const scaleOf = (W) => (document.body.classList.contains('el-presenter') ? 1.35 : (W < 560 ? 0.72 : (W < 760 ? 0.85 : 1)));
  const fit = async (el) => {
    if (!el.layout || !el._fullLayout || !window.Plotly || el.__elBusy || window.__elFitOff) return;
    if (el.__elSeen !== el.layout) {
      try { el.__elOrig = snapshot(el); learn(el, el.__elOrig); } catch (e) { console.warn('fit', e); return; }
      el.__elSeen = el.layout;
    }
    const o = el.__elOrig;
    const W = el.clientWidth;
    if (!(W >= 50)) return;                       // a hidden tab: fitted when it is shown (its ResizeObserver)
    const s = scaleOf(W);
    const key = `${s}:${Math.round(W)}`;
    if (o.key === key) return;
    const now = Date.now();   // a width that keeps changing (a scrollbar that comes and goes): a pause, not a loop
    o.fits = (o.fits || []).filter((t) => now - t < 4000);
    if (o.fits.length >= 6) {   // try again once the burst is over
      if (!o.retry) o.retry = setTimeout(() => { o.retry = null; fit(el); }, 4000 - (now - o.fits[0]) + 50);
      return;
    }
    o.fits.push(now);
    el.__elBusy = true;
    try {
      o.key = key;
      o.nodeLimit = null;
      const P = window.Plotly;
      const {upd, names, tf, sig, H0} = plan(el, o, W, s, key);
      if (o.shortened) { o.shortened = false; o.ann.forEach((a, i) => { if (a.node && upd[`annotations[${i}].text`] === undefined) upd[`annotations[${i}].text`] = a.text; }); }
      await P.relayout(el, upd);
      const idx = [], nm = [], tsz = [];
      o.names.forEach((n, i) => { if (names[i] !== el.data[i].name || (tf[i] && el.data[i].textfont && el.data[i].textfont.size !== tf[i])) {
        idx.push(i); nm.push(names[i]); tsz.push(tf[i]); } });
      if (idx.length) {
        const st = {name: nm};
        if (tsz.some((z) => z)) st['textfont.size'] = tsz.map((z, j) => z || o.textfont[idx[j]] || undefined);
        await P.restyle(el, st, idx);
      }
      await settle(el, o, H0, sig);
    } catch (e) {
      console.warn('fit', e);
    } finally {
      el.__elSeen = el.layout;
      el.__elBusy = false;
      el.__elFitted = key;
      setTimeout(() => fit(el), 0);   // a figure that arrived meanwhile
    }
  };
  // a figure measured after it was drawn teaches its block's kind: the description read off the figure as sent
  // (fromRaw) must reproduce the measured one, or figures of this kind are never fitted before they are drawn
  const kinds = {};
  window.__elKinds = kinds;   // for the browser tests
  const learn = (el, o) => {
    if (!el.__elRaw || el.__elRaw.layout !== el.layout) return;
    const [data, lay] = JSON.parse(el.__elRaw.json);
    kinds[memoKey(el)] = {kind: kindOf(lay, data), p: o, ok: canon(fromRaw(lay, data, o)) === canon(o)};
  };
  // set a relayout-style key ('annotations[3].font.size', 'title.text') in a plain layout object
  const setPath = (obj, path, v) => {
    const ks = path.split(/\.|\[(\d+)\]\.?/).filter((k) => k !== undefined && k !== '');
    let x = obj;
    ks.slice(0, -1).forEach((k, i) => {
      if (typeof x[k] === 'string') x[k] = {text: x[k]};   // 'title': 'x' -> {text: 'x'}
      if (x[k] == null || typeof x[k] !== 'object') x[k] = /^\d+$/.test(ks[i + 1]) ? [] : {};
      x = x[k];
    });
    x[ks[ks.length - 1]] = v;
  };
  // Gradio re-creates its plot component for every new figure (a {#key} block), and the old component first hands
  // the new figure to Plotly.react, ~0.1 s of drawing into an element removed right after; then Plotly.Plots.resize
  // draws the new one again to give it the box's width; then the fit drew it a third and fourth time. A Run streams
  // a tree every 1.5 s, and those draws kept the browser busy most of the Run. Now an update of a drawn element waits
  // a tick and is dropped if the element is gone by then, and a figure of a kind already measured is fitted before
  // Plotly sees it (its plan written into the figure as sent, with the margins its kind needed last time), so it is
  // drawn once and then only measured; any other figure is given the box's width and fitted after it is drawn.
  const wrapReact = () => {
    const P = window.Plotly;
    if (!P || P.__elWrapped || !P.react) return;
    const react = P.react;
    P.__elWrapped = true;
    P.__elDropped = P.__elPrefitted = 0;   // for the browser tests
    P.react = function (gd, data, layout, config) {
      const self = this, args = arguments;
      let pre = null;
      try {
        const W = gd && gd.clientWidth;
        if (gd && layout && typeof layout === 'object' && Array.isArray(data)) {
          const json = JSON.stringify([data, layout]);
          gd.__elRaw = {layout, json};
          const kd = kinds[memoKey(gd)];
          if (kd && kd.ok && W >= 50 && kd.kind === kindOf(layout, data)) {
            const o = fromRaw(layout, data, kd.p);
            const sc = scaleOf(W), key = `${sc}:${Math.round(W)}`;
            const {upd, names, tf, sig, H0} = plan(gd, o, W, sc, key);
            Object.keys(upd).forEach((k) => setPath(layout, k, upd[k]));
            data.forEach((t, i) => { if (names[i] != null) t.name = names[i];
              if (tf[i]) t.textfont = {...(t.textfont || {}), size: tf[i]}; });
            o.key = key;
            o.fits = [Date.now()];
            kd.p = o;
            pre = {o, sig, H: H0, key, json};
          }
          if (!pre && layout.height && !layout.width && W >= 50) layout.width = W;
        }
      } catch (e) { console.warn('fit', e); pre = null; }
      const draw = () => {
        if (pre) { gd.__elOrig = pre.o; gd.__elSeen = layout; gd.__elBusy = true; }
        let r;
        try { r = react.apply(self, args); } catch (e) { if (pre) gd.__elBusy = false; throw e; }
        if (pre) Promise.resolve(r).then(() => settle(gd, pre.o, pre.H, pre.sig)).catch((e) => console.warn('fit', e))
          .finally(() => { gd.__elSeen = gd.layout; gd.__elBusy = false; gd.__elFitted = pre.key; P.__elPrefitted++;
                           gd.__elPrefit = pre.json;   // the figure as sent (tests/test_browser_figures.py fits it the other way)
                           setTimeout(() => fit(gd), 0); });
        return r;
      };
      if (!(gd && gd._fullLayout && gd.isConnected)) return draw();
      return new Promise((resolve, reject) => setTimeout(() => {
        if (!gd.isConnected) { P.__elDropped++; resolve(gd); return; }
        try { Promise.resolve(draw()).then(resolve, reject); } catch (e) { reject(e); }
      }, 0));
    };
  };
  window.__elFit = () => document.querySelectorAll('.js-plotly-plot').forEach((el) => {
    if (el.__elOrig) el.__elOrig.key = null;
    fit(el);
  });
  const fitAll = () => { wrapReact(); document.querySelectorAll('.js-plotly-plot').forEach((el) => {
    if (!el.__elRO && window.ResizeObserver) {   // a tab shown, a column resized: the plot's own size changes
      el.__elRO = new ResizeObserver(() => fit(el));
      el.__elRO.observe(el);
    }
    fit(el);
  }); };
  new MutationObserver(() => { lens(); hook(); fitAll(); }).observe(document.body, {childList: true, subtree: true});
  window.addEventListener('resize', window.__elFit);
  hook();
  fitAll();
}"""
