// Figure fitting, description: what a figure holds that fitting changes (fonts, titles, margins, legend, axes,
// annotations, panels), read off the drawn figure (snapshot) or off the figure as the server sent it (fromRaw).
/* exported axisKeys, axKey, clearBg, snapshot, kindOf, fromRaw, canon */
const axisKeys = (lay) => Object.keys(lay).filter((k) => /^[xy]axis\d*$/.test(k));
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
