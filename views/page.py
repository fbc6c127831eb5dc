"""Page-level CSS, and the page's JavaScript read from views/js/ (presenter mode, the linked views of the tree and the
text, figures fitted to their boxes)."""
import os

from .stats import CSS as _STATS_CSS
from .text import CSS as _TEXT_CSS
from .walkthrough import CSS as _DECK_CSS

CSS = _TEXT_CSS + _STATS_CSS + _DECK_CSS + """
.el-note {font-size: 15px; color: #7a4b00; margin-top: 6px;}
.el-table {border-collapse: collapse; font-size: 15px;} .el-table td, .el-table th {padding: 4px 10px; border-bottom: 1px solid #ddd;}
#el-title h1 {margin-bottom: 0;} #el-status {font-size: 16px;}
#el-click, #el-click-btn {display: none !important;}
#el-input-note, #el-amb-input-note {font-size: 15px; color: #7a4b00;}
#el-beat {font-size: 16px; min-height: 2.6em;}
/* presenter mode: larger type without CSS zoom (zoom shifts Plotly's hover cards away from the pointer);
   the figures' fonts are scaled by views/js/fit.js, the header collapses to its title */
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
#el-input-note:has(span.md:empty), #el-amb-input-note:has(span.md:empty) {display: none;}
#el-status {min-height: 2.9em; line-height: 1.45;} #el-status p {margin: 0;}   /* two lines kept: no jump */
#el-beat {min-height: 2.4em;} #el-beat p {margin: 0;}
.el-text {max-height: max(190px, calc(100vh - 575px));}
#el-tree g.annotation.el-hl rect {stroke: #111 !important; stroke-width: 4px !important; stroke-dasharray: 7 3;
                                  fill: #ffd54a !important;}
/* a Play beat's figure has no node boxes: the node's marker gets the dashed outline, its label a yellow halo */
#el-tree path.point.el-hl {stroke: #111 !important; stroke-width: 4px !important; stroke-dasharray: 5 3;}
#el-tree g.textpoint.el-hl text {paint-order: stroke; stroke: #ffd54a !important; stroke-width: 9px !important;
                                 stroke-linejoin: round;}
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
/* a figure drawn two ways (the Paper lab's acceptance per depth): upright bars, lying down on a phone */
@media (min-width: 641px) {.el-narrow-only {display: none !important;}}
@media (max-width: 640px) {.el-wide-only {display: none !important;}}
/* figures: a plot's component label sits above the figure, in the flow, never over the figure's title */
.block:has(> .js-plotly-plot) > label[data-testid='block-label'].float {position: static; margin: 0 0 2px 0;}
@media (max-width: 640px) {   /* a phone: a figure beside text or another figure takes the whole width */
  .row:has(> .block > .js-plotly-plot) {flex-wrap: wrap;}
  .row:has(> .block > .js-plotly-plot) > * {min-width: 100% !important;}
}
"""
JS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js")
# The page's script, views/js/*.js: plain browser scripts that share one scope, pasted in this order into the one
# function Gradio runs when the page loads (launch(js=PAGE_JS)). tests/test_js_lint.py lints each file and the whole.
PAGE_SCRIPTS = ("lens.js",            # the Lens tab's linked views: tree <-> text, the text panel follows the run
                "deck.js",            # the walkthrough: arrow keys, figures that fill the screen, step 3's links
                "fit_text.js",        # figure fitting: text widths, wrapping
                "fit_describe.js",    #   what a figure holds that fitting changes
                "fit_plan.js",        #   the first update, computed before drawing
                "fit_settle.js",      #   the margins grown from the drawn text boxes
                "fit.js",             #   fit a figure; the Plotly.react wrapper
                "beats.js",           # Play's beats animate (their transitions ride in the figures)
                "links.js",           # the page's address follows what is on screen (deep links, tabs/links.py)
                "start.js")           # follow the page's changes; hook and fit the first screen


def read_js(name: str) -> str:
    with open(os.path.join(JS_DIR, name), encoding="utf-8") as f:
        return f.read()


def page_js() -> str:
    """The function Gradio runs once when the page loads: the parts of PAGE_SCRIPTS, in order, in one scope."""
    return "() => {\n" + "\n".join(read_js(name) for name in PAGE_SCRIPTS) + "}"


PAGE_JS = page_js()
# the presenter-mode checkbox's js= hook: the page's class and the figures' fonts follow it
PRESENTER_JS = read_js("presenter.js")
