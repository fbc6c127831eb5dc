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
      if (p && p.customdata !== undefined && p.customdata !== null) send(p.customdata);
    });
  });
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
  new MutationObserver(() => { hook(); fitAll(); }).observe(document.body, {childList: true, subtree: true});
  window.addEventListener('resize', window.__elFit);
  hook();
  fitAll();
}"""
