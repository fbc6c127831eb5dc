"""Page-level CSS and small JavaScript hooks of the app (presenter mode, click-to-select in the tree)."""
from .stats import CSS as _STATS_CSS
from .text import CSS as _TEXT_CSS

CSS = _TEXT_CSS + _STATS_CSS + """
.el-note {font-size: 15px; color: #7a4b00; margin-top: 6px;}
.el-table {border-collapse: collapse; font-size: 15px;} .el-table td, .el-table th {padding: 4px 10px; border-bottom: 1px solid #ddd;}
#el-title h1 {margin-bottom: 0;} #el-status {font-size: 16px;}
body.el-presenter .gradio-container {zoom: 1.35;}
body.el-presenter .el-text {font-size: 24px;}
#el-click, #el-click-btn {display: none !important;}
"""
PRESENTER_JS = "(on) => { document.body.classList.toggle('el-presenter', on); return on; }"
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
  new MutationObserver(hook).observe(document.body, {childList: true, subtree: true});
  hook();
}"""
