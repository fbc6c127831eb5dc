// Presenter mode (the header's checkbox, its js= hook): larger type on the page (CSS: body.el-presenter) and in the
// figures (fit.js's scale); returns the checkbox's value.
(on) => { document.body.classList.toggle('el-presenter', on); window.__elFit && window.__elFit(); return on; }
