// Play's beats animate (views/beats.py). Gradio draws every new figure into a new element (Plotly.react on an empty
// div: a newPlot), so plotly cannot tween from one server update to the next. A beat figure carries its own transition
// instead: layout.meta.el_steps, the states its traces go through, each a list of per-trace changes (positions,
// marker colours, sizes and opacities, texts, the time bar's lengths) with the milliseconds into it. This wrapper of
// Plotly.react draws the first state (where the beat starts: the previous beat's end) and, once the figure is fitted
// (fit.js), animates through the others with Plotly.animate; without this script the figure as sent is the beat's end.
// Pressing Play or a beat button also brings the caption and the whole tree onto the screen (a 1280x720 projector).
/* exported beatsWrapped */
/* global scaleOf */
const beatStats = {drawn: 0, started: 0, animated: 0, scrolled: 0};
window.__elBeats = beatStats;   // for the browser tests
let beatFocus = 0;              // when a Play or beat button was pressed: the next beat figure is brought into view
const mergeInto = (dst, src) => {
  Object.keys(src).forEach((k) => {
    const v = src[k];
    if (v && typeof v === 'object' && !Array.isArray(v) && dst[k] && typeof dst[k] === 'object') mergeInto(dst[k], v);
    else dst[k] = Array.isArray(v) ? v.slice() : v;
  });
};
const beatSteps = (data, layout) => {
  const steps = layout && layout.meta && layout.meta.el_steps;
  return Array.isArray(data) && Array.isArray(steps) && steps.length > 1 &&
    steps.every((st) => Array.isArray(st.data) && st.data.length === data.length) ? steps : null;
};
// narrow columns (a phone, a deep tree): the labels go above their markers (a column's whole width) and keep the
// token only (the hover card has q and p), shortened to the column's room, so no label runs into another node
const compactLabels = (gd, data, layout, steps) => {
  const xr = layout.xaxis && layout.xaxis.range, W = gd && gd.clientWidth;
  const unit = Array.isArray(xr) ? (W - 40) / (xr[1] - xr[0]) : 1e9;
  if (!(W >= 50) || unit >= 85) return;
  const chars = Math.max(3, Math.floor((unit - 8) / (14 * scaleOf(W) * 0.62)));
  const cut = (t) => {
    if (typeof t !== 'string') return t;
    const line = t.split('<br>')[0].replace(/ \((bonus|correction)\)$/, '');   // a glyph ("✓ ", "★ ") counts
    const bare = line.replace(/<\/?b>/g, '');
    if ([...bare].length <= chars) return line;
    let s = [...bare].slice(0, chars - 1).join('');
    if (s.lastIndexOf('&') > s.lastIndexOf(';')) s = s.slice(0, s.lastIndexOf('&'));   // not half an entity
    return s + '…';
  };
  data.forEach((t, i) => {
    if (t.name !== 'nodes' && t.name !== "target's token") return;
    t.textposition = 'top center';
    if (Array.isArray(t.text)) t.text = t.text.map(cut);
    steps.forEach((st) => { const d = st.data[i]; if (d && Array.isArray(d.text)) d.text = d.text.map(cut); });
  });
};
// plotly drops a scatter point's <text> when its label is empty, and an animation frame (redraw: false) then drops
// the point's text group and never makes a new one: a label that appears within a beat (hidden or just placed, then
// its token) showed only when the next beat's figure was drawn (issue 50.4). An empty label is a zero-width space
// instead: the same blank on the screen, its <text> kept, so each frame's labels are drawn in that frame.
const BLANK = '\u200b';
const keepLabels = (data, steps) => data.forEach((t, i) => {
  if (typeof t.mode !== 'string' || !t.mode.includes('text')) return;
  const fill = (d) => { if (d && Array.isArray(d.text)) d.text = d.text.map((x) => (x === '' ? BLANK : x)); };
  fill(t);
  steps.forEach((st) => fill(st.data[i]));
});
const intoView = () => {   // the caption and the tree on the screen, if they fit: scroll as little as that takes
  const tree = document.querySelector('#el-tree'), cap = document.querySelector('#el-beat');
  if (!tree || !cap) return;
  const t = tree.getBoundingClientRect(), c = cap.getBoundingClientRect(), H = window.innerHeight;
  let dy = 0;
  if (t.bottom > H) dy = Math.min(t.bottom - H + 6, c.top - 4);
  else if (c.top < 0) dy = c.top - 4;
  if (Math.abs(dy) > 2) { window.scrollBy({top: dy, behavior: 'auto'}); beatStats.scrolled++; }
};
const whenFitted = (gd, then) => {   // after fit.js has fitted the drawn figure and Gradio's resize has run
  const t0 = Date.now();
  const poll = () => {
    if (!gd.isConnected || !gd._fullLayout) return;
    if ((gd.__elBusy || Date.now() - t0 < 180) && Date.now() - t0 < 3000) { setTimeout(poll, 40); return; }
    then();
  };
  setTimeout(poll, 40);
};
const animateBeat = (gd, steps) => {
  const P = window.Plotly, rest = steps.slice(1);
  const traces = rest[0].data.map((_, i) => i);
  beatStats.started++;
  gd.__elBeatAnim = 'running';
  P.animate(gd, rest.map((st) => ({data: st.data, traces})), {
    mode: 'immediate',
    transition: rest.map((st) => ({duration: st.ms, easing: 'cubic-in-out'})),
    frame: rest.map((st) => ({duration: st.ms, redraw: false})),
  }).then(() => { beatStats.animated++; gd.__elBeatAnim = 'done'; }, (e) => console.warn('beats', e));
};
const beatsWrapped = () => {
  const P = window.Plotly;
  if (!P || !P.react) return false;
  if (P.__elBeats) return true;
  P.__elBeats = true;
  const react = P.react;
  P.react = function (gd, data, layout) {   // (config): passed on in `arguments`
    const steps = beatSteps(data, layout);
    if (!steps) return react.apply(this, arguments);
    compactLabels(gd, data, layout, steps);
    keepLabels(data, steps);
    data.forEach((t, i) => mergeInto(t, steps[0].data[i]));   // the beat's first state; the figure as sent is its last
    const r = react.apply(this, arguments);
    Promise.resolve(r).then(() => {
      if (!gd.isConnected || !gd._fullLayout) return;
      beatStats.drawn++;
      if (Date.now() - beatFocus < 8000) { beatFocus = 0; intoView(); }
      whenFitted(gd, () => animateBeat(gd, steps));
    }).catch((e) => console.warn('beats', e));
    return r;
  };
  return true;
};
document.addEventListener('click', (ev) => {
  if (ev.target.closest && ev.target.closest('#el-play, #el-beat-prev, #el-beat-next')) beatFocus = Date.now();
}, true);
const beatsObserver = new MutationObserver(() => { if (beatsWrapped()) beatsObserver.disconnect(); });
if (!beatsWrapped()) beatsObserver.observe(document.body, {childList: true, subtree: true});
