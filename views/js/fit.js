// Figure fitting: every figure fits its box, measured in the page (tests/test_browser_figures.py checks the result).
// Fonts follow the room (1.35x in presenter mode, smaller on a narrow plot); titles, subplot titles, axis titles,
// plain annotations and legend entries are wrapped to the width they have; a multi-panel figure on a phone-narrow
// plot is stacked, one panel per row; then the drawn text boxes are measured and the margins grown until no title
// is clipped or covered and the legend clears the axes. Re-applied whenever the server sends a new figure (a new
// layout object), on resize and when presenter mode changes.
// The parts: fit_text.js, fit_describe.js, fit_plan.js, fit_settle.js; this file fits a figure (after it is drawn,
// or before, in the Plotly.react wrapper) and finds the figures to fit.
/* exported fitAll, scaleOf */
/* global snapshot, kindOf, fromRaw, canon, plan, settle, memoKey, fillHeight */
const scaleOf = (W) => (document.body.classList.contains('el-presenter') ? 1.35 : (W < 560 ? 0.72 : (W < 760 ? 0.85 : 1)));
const fitNow = async (el) => {
  if (!el.layout || !el._fullLayout || !window.Plotly || el.__elBusy || window.__elFitOff) return;
  if (el.__elSeen !== el.layout) {
    try { el.__elOrig = snapshot(el); learn(el, el.__elOrig); } catch (e) { console.warn('fit', e); return; }
    el.__elSeen = el.layout;
  }
  const o = el.__elOrig;
  const W = el.clientWidth;
  if (!(W >= 50)) return;                       // a hidden tab: fitted when it is shown (its ResizeObserver)
  const s = scaleOf(W);
  const key = `${s}:${Math.round(W)}:${fillHeight(el)}`;
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
    o.nodeLimit = o.nodeFont = null;
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
  P.react = function (gd, data, layout) {   // (config): passed on in `arguments`
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
          const sc = scaleOf(W), key = `${sc}:${Math.round(W)}:${fillHeight(gd)}`;
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
// One figure at a time, the ones on screen first: a resize or a presenter toggle re-fits every figure of the shown
// tab (the Paper lab's 20 on a phone took ~10 s of drawing), and fitted all at once they kept the page from
// answering a click until the last was done; now the page answers between two figures, what the eye is on is
// fitted first, and a figure in a hidden tab waits to be shown (its ResizeObserver asks again then).
const queue = new Set();
let draining = false;
const onScreen = (el) => { const r = el.getBoundingClientRect();
  return r.width > 0 && r.bottom > 0 && r.top < window.innerHeight; };
const drain = async () => {
  while (queue.size) {
    const els = [...queue];
    const next = els.find(onScreen) || els[0];
    queue.delete(next);
    // the queue goes on after an error, and after 10 s even if a fit's promise never settles (a figure removed
    // while Plotly drew it): one stuck figure must not leave the others unfitted
    const stall = new Promise((r) => setTimeout(r, 10000));
    try { if (next.isConnected) await Promise.race([fitNow(next), stall]); } catch (e) { console.warn('fit', e); }
    await new Promise((r) => setTimeout(r, 0));   // a click, a key, a streamed figure: answered here
  }
  draining = false;
};
const fit = (el) => {
  queue.add(el);
  if (!draining) { draining = true; setTimeout(drain, 0); }
};
window.__elFitQueue = () => queue.size + (draining ? 1 : 0);   // for the browser tests: 0 once every fit is done
// a resize or presenter mode: every figure's fit is stale, the shown ones are fitted again now, a hidden one when
// its tab is shown (its size changes from 0, its ResizeObserver fits it)
window.__elFit = () => document.querySelectorAll('.js-plotly-plot').forEach((el) => {
  if (el.__elOrig) el.__elOrig.key = null;
  if (el.getClientRects().length) fit(el);
});
// on every change to the page: a new figure (or one not seen yet) and a deck's figure (its height follows its
// place on the screen) are fitted; any other figure's fit changes only with its size (its ResizeObserver) or
// presenter mode (__elFit), and asking it again on every change read the page's layout each time
const fitAll = () => { wrapReact(); document.querySelectorAll('.js-plotly-plot').forEach((el) => {
  if (!el.__elRO && window.ResizeObserver) {   // a tab shown, a column resized: the plot's own size changes
    el.__elRO = new ResizeObserver(() => fit(el));
    el.__elRO.observe(el);
  }
  if (el.__elSeen !== el.layout || el.closest('.el-fill')) fit(el);
}); };
