// Figure fitting, text: how wide a text is drawn (a canvas measures it), Plotly's pseudo-HTML wrapped to a width,
// and node labels cut short.
/* exported wrapHtml, shorten */
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
const shorten = (html, n) => String(html).split(/<br\s*\/?>/i).map((line) => {   // each line to n visible characters
  const parts = line.match(/<[^>]*>|&[#\w]+;|[^<]/gu) || [];   // tags, entities and characters (a surrogate pair is one)
  if (parts.filter((p) => p[0] !== '<').length <= n) return line;
  const open = [];
  let out = '', seen = 0;
  for (const p of parts) {
    if (p[0] === '<') {   // tags kept (the bonus's <b>), closed at the cut
      if (/^<\//.test(p)) open.pop(); else if (!/\/>$/.test(p)) open.push(p);
      out += p;
      continue;
    }
    if (seen === n - 1) break;
    out += p;
    seen++;
  }
  return out + '…' + open.reverse().map(closeTag).join('');
}).join('<br>');
