// Deep links (tabs/links.py reads them): the page's address follows what is on screen (the tab, the walkthrough's
// step, the Lens's prompt, settings and cycle, presenter mode), so a teacher copies the address bar to share this
// view. Only what differs from the page's first values is written, other parameters (the teacher's link) are kept,
// and nothing is written before the server has applied the link the page was opened with.
/* exported linkHook */
const LINK_KEYS = ['tab', 'step', 'prompt', 'shifted', 'temperature', 'top_p', 'seed', 'shape', 'tree', 'preset',
  'depth', 'top_k', 'total_tokens', 'max_new_tokens', 'cycle', 'presenter'];
const linkValues = () => {
  const q = (s) => document.querySelector(s);
  const num = (id) => { const e = q(`#${id} input[type=number]`) || q(`#${id} input:not([type=range])`); return e ? e.value : null; };
  const radio = (id) => { const e = q(`#${id} input[type=radio]:checked`); return e ? e.value : null; };
  const tab = q('button[role=tab][aria-selected=true]');
  const steps = [...document.querySelectorAll('#el-walk-steps input[type=radio]')];
  const shape = radio('el-set-shape'), kind = radio('el-set-tree');
  const box = q('#el-set-shifted input[type=checkbox]'), pres = q('#el-presenter input[type=checkbox]');
  const prompt = q('#el-prompt textarea');
  return {
    tab: tab ? tab.dataset.tabId : null,
    step: steps.findIndex((e) => e.checked) + 1 || null,
    prompt: prompt ? prompt.value : null,
    shifted: box ? +box.checked : null,
    temperature: num('el-set-temperature'), top_p: num('el-set-top_p'), seed: num('el-set-seed'),
    shape: shape && shape.toLowerCase(), tree: kind && kind.split(' ')[0],
    preset: (q('#el-set-preset input') || {}).value || null,
    depth: num('el-set-depth'), top_k: num('el-set-top_k'), total_tokens: num('el-set-total_tokens'),
    max_new_tokens: num('el-set-max_new_tokens'),
    cycle: num('el-cycle'),
    presenter: pres ? +pres.checked : null,
  };
};
const sameValue = (a, b) => a == null || b == null || String(a) === String(b) ||
  (String(a).trim() !== '' && !Number.isNaN(+a) && +a === +b);
const linkWrite = () => {
  const m = document.querySelector('#el-link-state');
  if (!m || m.dataset.applied !== '1') return;
  let d;
  try { d = JSON.parse(m.dataset.defaults); } catch { return; }
  const v = linkValues(), p = new window.URLSearchParams(window.location.search);
  // a value not on the page (the settings fold closed: gradio draws its contents when it opens) keeps what the
  // address says, which is what the link set or the page's default
  LINK_KEYS.forEach((k) => { if (v[k] != null) p.delete(k); });
  LINK_KEYS.forEach((k) => {
    if (v[k] == null || sameValue(v[k], d[k])) return;
    if (k === 'step' && v.tab !== 'walk') return;   // the step matters where it is seen
    p.set(k, v[k]);
  });
  const s = p.toString(), now = window.location.search.replace(/^\?/, '');
  if (s !== now) window.history.replaceState(null, '', window.location.pathname + (s ? `?${s}` : '') + window.location.hash);
};
// a value the server sets (Next, "Open these settings", a clamp) changes an input's value without an event, so the
// address is also brought up to date now and then; a user's own change writes it at once
const linkHook = () => {
  if (window.__elLinks) return;
  window.__elLinks = true;
  ['input', 'change', 'click', 'keyup'].forEach((t) => document.addEventListener(t, () => setTimeout(linkWrite, 50), true));
  window.setInterval(linkWrite, 700);
};
