"""The "How can I" view: where the shifted and unshifted heads put their predicted features, what they draft, and
what that buys in tokens, all from the ambiguity record (eagle_core/decoding/ambiguity.py, branch_payoff.py).

The tab makes ONE point with ONE measure: after each branch t (a token the target may sample after "How can I"),
how much draft probability each head gives the token the target says next (its greedy choice: what T = 0 keeps).
The headline, the text under the figures and the walkthrough's step 5 all state it from `ambiguity_moves`. The
payoff in tokens (`payoff_totals`) is the accepted length of real EAGLE cycles continuing each branch with each head.
"""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import DRAFT_Q, TARGET_P, as_dict, base_layout, empty_figure, esc, pct, show_token

BRANCH_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
UNSHIFTED = "#111111"
EAGLE3 = "#E69F00"
# each head's series: name on the page, colour, bar pattern (a cue besides colour)
HEADS = {"shifted": ("shifted head", DRAFT_Q, "/"), "unshifted": ("unshifted head", "#555555", "."),
         "eagle3": ("EAGLE-3 head", EAGLE3, "x")}
MEASURE = "draft probability of the target's next token"


def share(x) -> str:
    """A probability for the measure's sentences and tables: 0.1% steps, and "<0.1%" below (never 2.1e-05)."""
    return "<0.1%" if x is not None and 0 < x < 0.001 else pct(x)


def _heads(rec: dict, eagle3: bool) -> list[str]:
    """The heads whose series are shown: shifted and unshifted, the EAGLE-3 head when asked for and recorded."""
    has3 = bool(rec.get("branches")) and all(b.get("vocab_eagle3") for b in rec["branches"])
    return ["shifted", "unshifted"] + (["eagle3"] if eagle3 and has3 else [])


# ---------------------------------------------------------------------------------------------- the one measure
def ambiguity_moves(rec, eagle3: bool = True) -> dict:
    """THE measure, per branch: the target's next token after the branch (its most likely one, what T = 0 keeps)
    and the draft probability each head's prediction gives it; `higher`: the shifted head's is above the unshifted
    head's. Totals: branches, how many are `higher`, the mean over the branches per head."""
    rec = as_dict(rec) or {}
    brs = rec.get("branches") or []
    heads = _heads(rec, eagle3)
    keys = {"shifted": "vocab_shifted", "unshifted": "vocab_unshifted", "eagle3": "vocab_eagle3"}
    out = []
    for b in brs:
        if not b.get("vocab"):
            continue
        top = max(range(len(b["vocab"])), key=lambda k: b["vocab"][k]["prob"])
        q = {h: float(b[keys[h]][top]) for h in heads}
        out.append(dict(text=b["text"], p=b["p"], next_text=b["vocab"][top]["text"], next_p=b["vocab"][top]["prob"],
                        q=q, higher=q["shifted"] > q["unshifted"]))
    mean = {h: sum(b["q"][h] for b in out) / len(out) for h in heads} if out else {}
    return {"branches": out, "n": len(out), "higher": sum(b["higher"] for b in out), "mean": mean}


def measure_sentence(m: dict) -> str:
    """The measure in one sentence (plain text), the same words in the headline, the tab's text and step 5."""
    if not m.get("n"):
        return ""
    return (f"after {m['higher']} of {m['n']} branches the shifted head gives the target's next token more draft "
            f"probability than the unshifted head (mean {share(m['mean']['shifted'])} vs "
            f"{share(m['mean']['unshifted'])})")


def measure_verdict(m: dict) -> str:
    """What the measure shows, no more: helps (most branches and on average), does not, or mixed."""
    k, n = m["higher"], m["n"]
    up = m["mean"]["shifted"] > m["mean"]["unshifted"]
    if 2 * k > n and up:
        return "Knowing the sampled token helps the draft"
    if k == 0 or (2 * k < n and not up):
        return "Here knowing the sampled token does not help the draft"
    return "Here knowing the sampled token helps on some branches only"


# ---------------------------------------------------------------------------------------------- the payoff
def payoff_totals(rec, eagle3: bool = True) -> dict:
    """{head: {cycles, accepted, tau, per_branch: [tau]}} over the record's payoff runs (empty without one), plus
    "shape", "new_tokens", "branches" (the branch texts). tau: mean accepted length (accepted drafted tokens + the
    target's own token, per cycle)."""
    rec = as_dict(rec) or {}
    pay = rec.get("payoff") or {}
    if not pay.get("branches"):
        return {}
    heads = ["shifted", "unshifted"] + (["eagle3"] if eagle3 else [])
    runs = {h: [next((r for r in b["runs"] if r["head"] == h), None) for b in pay["branches"]] for h in heads}
    out = {"shape": pay["shape"], "new_tokens": pay["new_tokens"], "branches": [b["text"] for b in pay["branches"]],
           "heads": []}
    for h, rs in runs.items():
        if not all(r is not None and r["accepted"] for r in rs):
            continue
        cycles = sum(len(r["accepted"]) for r in rs)
        kept = sum(a + 1 for r in rs for a in r["accepted"])
        out[h] = dict(cycles=cycles, tau=kept / cycles,
                      per_branch=[sum(a + 1 for a in r["accepted"]) / len(r["accepted"]) for r in rs],
                      cycles_per_branch=[len(r["accepted"]) for r in rs])
        out["heads"].append(h)
    return out if {"shifted", "unshifted"} <= set(out["heads"]) else {}


def payoff_sentence(t: dict) -> str:
    """The payoff in one sentence (plain text): tokens per cycle with each head, same shape, same text."""
    if not t:
        return ""
    return (f"continuing each branch with real EAGLE cycles at T = 0 ({t['shape']}; the same "
            f"{t['new_tokens']} tokens for every head), a cycle keeps {t['shifted']['tau']:.2f} tokens with the "
            f"shifted head and {t['unshifted']['tau']:.2f} with the unshifted one")


def ambiguity_headline(rec) -> str:
    """The tab's headline (HTML), computed: the measure, then the payoff in tokens when the record has it."""
    rec = as_dict(rec)
    m = ambiguity_moves(rec, eagle3=False) if rec else {}
    if not m.get("n"):
        return ""
    s = measure_sentence(m)
    out = f"<p style='font-size:17px;margin:4px 0'><b>{measure_verdict(m)}:</b> {esc(s)}.</p>"
    t = payoff_totals(rec, eagle3=False)
    if t:
        out += f"<p style='font-size:17px;margin:4px 0'><b>In tokens:</b> {esc(payoff_sentence(t))}.</p>"
    return out


# ---------------------------------------------------------------------------------------------- the figures
def _away(dx: float, dy: float) -> str:
    """A real feature's label position pointing away from the unshifted guess (where the guesses crowd): left
    when the feature lies mostly to its left (the plot then gets room on that side: `ambiguity_figure`), else
    above or below (never right: the legend-free right edge is narrow)."""
    if dx < 0 and -dx > abs(dy):
        return "middle left"
    return "top center" if dy >= 0 else "bottom center"


def _freest(rec: dict, ux: float, uy: float) -> str:
    """The unshifted guess's label position: the quadrant around it with the fewest other points nearby (the
    shifted guesses start from it and crowd it), bottom right on a tie."""
    pts = [p for br in rec["branches"] for p in (br["shifted_xy"], br["real_xy"])] + [rec["last_xy"]]
    xs = [p[0] for p in pts] + [ux]
    r = 0.35 * max(max(xs) - min(xs), 1e-6)
    count = {}
    for v in ("bottom", "top"):
        for h in ("right", "left"):
            count[f"{v} {h}"] = sum(1 for x, y in pts if abs(x - ux) < r and abs(y - uy) < r
                                    and (x >= ux) == (h == "right") and (y >= uy) == (v == "top"))
    return min(count, key=lambda k: count[k])        # dicts keep order: bottom right wins a tie


def ambiguity_figure(rec, height: int = 520) -> go.Figure:
    """The feature plane (PCA): each branch's real feature, the shifted head's guess for it (an arrow from the
    unshifted head's one guess) and the unshifted head's single guess. A picture of where the guesses land; the
    tab's numbers are the measure's."""
    rec = as_dict(rec)
    if not rec:
        return empty_figure("Type a prefix and press Compute")
    fig = go.Figure()
    ux, uy = rec["unshifted_xy"]
    last = show_token(rec["last_token"])
    for b, br in enumerate(rec["branches"]):
        c = BRANCH_COLOURS[b % len(BRANCH_COLOURS)]
        (rx, ry), (sx, sy) = br["real_xy"], br["shifted_xy"]
        tok = esc(show_token(br["text"]))
        fig.add_trace(go.Scatter(x=[sx, rx], y=[sy, ry], mode="lines", line=dict(color=c, width=1.5, dash="dot"),
                                 hoverinfo="skip", showlegend=False, name="shifted guess to its branch"))
        # what the sampled token does: it moves the head's guess from the one shared guess toward its branch
        fig.add_annotation(x=sx, y=sy, ax=ux, ay=uy, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                           arrowhead=2, arrowsize=1.2, arrowwidth=1.8, arrowcolor=c, opacity=0.75, text="")
        fig.add_trace(go.Scatter(
            x=[rx], y=[ry], mode="markers+text", text=[f"<b>f({tok})</b>"], textposition=_away(rx - ux, ry - uy),
            textfont=dict(size=15, color=c), marker=dict(size=18, color=c, symbol="circle",
                                                         line=dict(color="white", width=2)),
            name=f"real feature after “{tok}” (p = {pct(br['p'])})",
            hovertext=[f"real feature after “{tok}” (target p = {pct(br['p'])})"], hoverinfo="text"))
        fig.add_trace(go.Scatter(
            x=[sx], y=[sy], mode="markers", marker=dict(size=15, color=c, symbol="diamond-open", line=dict(width=3)),
            name=f"shifted head's guess from (f_{esc(last)}, e({tok}))",
            hovertext=[f"shifted head's guess, given the sampled token “{tok}”"], hoverinfo="text"))
    fig.add_trace(go.Scatter(
        x=[ux], y=[uy], mode="markers+text", text=["<b>unshifted</b>"], textposition=_freest(rec, ux, uy),
        textfont=dict(size=15, color=UNSHIFTED), marker=dict(size=20, color=UNSHIFTED, symbol="x"),
        name=f"unshifted head's one guess for all, from (f_{esc(last)}, e({esc(last)}))",
        hovertext=["unshifted head: it does not know which token was sampled, so it makes a single "
                   "prediction for every branch"], hoverinfo="text"))
    lx, ly = rec["last_xy"]
    fig.add_trace(go.Scatter(x=[lx], y=[ly], mode="markers",      # named in the legend: a label here would crowd
                             marker=dict(size=11, color="#bbb", symbol="square"),
                             name=f"the feature of “{esc(last)}” itself", hoverinfo="name"))
    ev = rec["explained_variance"]
    base_layout(fig, "Where each head's predicted feature lands", height=height,
                legend=dict(orientation="v", y=-0.17, x=0, yanchor="top", font=dict(size=13)))
    fit = rec.get("pca_fit", "the features shown")
    fig.update_xaxes(title=f"PC 1 ({100 * ev[0]:.0f}% of the variance of the {fit})", gridcolor="#eee",
                     zeroline=False, title_font=dict(size=13))
    fig.update_yaxes(title=f"PC 2 ({100 * ev[1]:.0f}%)", gridcolor="#eee", zeroline=False, scaleanchor="x",
                     title_font=dict(size=13))
    # room for the labels, even on a phone-wide plot (~230 px: a 10-character label is ~30% of the points' span):
    # a fifth of the span each side for labels centred on a point, more on the left for one left of its point;
    # the y axis follows the x scale (scaleanchor)
    xs = [v for br in rec["branches"] for v in (br["real_xy"][0], br["shifted_xy"][0])] + [ux, lx]
    lo, hi = min(xs), max(xs)
    span = max(hi - lo, 1e-6)
    left = any(_away(br["real_xy"][0] - ux, br["real_xy"][1] - uy) == "middle left" for br in rec["branches"])
    fig.update_xaxes(range=[lo - (0.38 if left else 0.2) * span, hi + 0.2 * span])
    fig.update_layout(margin=dict(l=60, r=20, t=60, b=20), height=height + 44 * len(rec["branches"]))
    return fig


def ambiguity_dist_figure(rec, height_per_branch: int = 215, eagle3: bool = False) -> go.Figure:
    """Per branch: the target's next-token distribution and each head's draft over the same tokens, the target's
    next token first (bold); each panel's title gives the measure for that branch."""
    rec = as_dict(rec)
    if not rec:
        return empty_figure("")
    brs = rec["branches"]
    m = {b["text"]: b for b in ambiguity_moves(rec, eagle3)["branches"]}
    heads = _heads(rec, eagle3)
    titles = []
    for b in brs:
        mb = m.get(b["text"])
        pre = rec["prefix"] if len(rec["prefix"]) <= 14 else "…" + rec["prefix"][-13:]
        head = f"after “{esc(pre)}<b>{esc(show_token(b['text']))}</b>”"
        if mb:
            q = " · ".join(f"{HEADS[h][0].split()[0]} {esc(share(mb['q'][h]))}" for h in heads)
            head += f" → “{esc(show_token(mb['next_text']))}”<br>{q}"
        titles.append(head)
    fig = make_subplots(rows=len(brs), cols=1, vertical_spacing=0.42 / len(brs), subplot_titles=titles)
    keys = {"shifted": "vocab_shifted", "unshifted": "vocab_unshifted", "eagle3": "vocab_eagle3"}
    for r, br in enumerate(brs, start=1):
        order = sorted(range(len(br["vocab"])), key=lambda k: -br["vocab"][k]["prob"])[:6]
        xs = [esc(show_token(br["vocab"][k]["text"])) for k in order]
        xs[0] = f"<b>{xs[0]}</b>"
        first = r == 1
        fig.add_trace(go.Bar(x=xs, y=[br["vocab"][k]["prob"] for k in order], name="target (real)",
                             marker_color=TARGET_P, showlegend=first, legendgroup="t"), row=r, col=1)
        for h in heads:
            name, colour, pattern = HEADS[h]
            label = {"shifted": "shifted head (knows the token)",
                     "unshifted": "unshifted head (same for all branches)",
                     "eagle3": "EAGLE-3 head (fused features)"}[h]
            fig.add_trace(go.Bar(x=xs, y=[br[keys[h]][k] for k in order], name=label,
                                 marker=dict(color=colour, pattern_shape=pattern), showlegend=first,
                                 legendgroup=h), row=r, col=1)
    fig.update_yaxes(range=[0, 1], tickformat=".0%", gridcolor="#eee")
    fig.update_xaxes(tickfont=dict(size=13))
    fig.update_layout(barmode="group")
    base_layout(fig, "What each head drafts after each branch", height=150 + height_per_branch * len(brs),
                legend=dict(orientation="h", y=-0.02, yanchor="top", x=0, font=dict(size=13)))
    fig.update_layout(margin=dict(l=50, r=10, t=70, b=90))
    for a in fig.layout.annotations:
        a.font = dict(size=14)
    return fig


def ambiguity_payoff_figure(rec, eagle3: bool = False) -> go.Figure:
    """Tokens per EAGLE cycle (the mean accepted length) per branch and over all branches, one bar per head."""
    t = payoff_totals(rec, eagle3)
    if not t:
        return empty_figure("No payoff measured for this record: press Compute", height=220)
    heads = t["heads"]
    cats = ["all branches"] + [f"after “{show_token(x)}”" for x in t["branches"]]
    fig = go.Figure()
    for h in heads:                    # the y axis runs top down: each group lists shifted, unshifted, EAGLE-3
        name, colour, pattern = HEADS[h]
        vals = [t[h]["tau"]] + t[h]["per_branch"]
        cyc = [t[h]["cycles"]] + t[h]["cycles_per_branch"]
        fig.add_trace(go.Bar(
            y=cats, x=vals, orientation="h", name=name, marker=dict(color=colour, pattern_shape=pattern),
            text=[f"{v:.2f}" for v in vals], textposition="outside", cliponaxis=False,
            hovertext=[f"{name}: {v:.2f} tokens per cycle ({c} cycles)" for v, c in zip(vals, cyc)],
            hoverinfo="text"))
    top = max(max([t[h]["tau"]] + t[h]["per_branch"]) for h in heads)
    fig.add_vline(x=1, line=dict(color="#999", dash="dash", width=1.5))
    fig.add_annotation(x=1, y=1, yref="paper", text="plain decoding: 1", showarrow=False, xanchor="left",
                       yanchor="bottom", font=dict(size=12, color="#666"))
    base_layout(fig, "Tokens per EAGLE cycle, T = 0", height=150 + 34 * len(heads) * len(cats),
                legend=dict(orientation="h", y=-0.12, yanchor="top", x=0, font=dict(size=13)))
    fig.update_layout(barmode="group", margin=dict(l=10, r=30, t=70, b=40), bargap=0.25)
    fig.update_xaxes(range=[0, top * 1.18 + 0.2], gridcolor="#eee", title="tokens per cycle (mean accepted length)",
                     title_font=dict(size=13))
    fig.update_yaxes(autorange="reversed", automargin=True)
    return fig


# ---------------------------------------------------------------------------------------------- the text
def head_name(path: str) -> str:
    """A head's name for the page (its folder's name, or a hub id), never a server path."""
    p = str(path or "").rstrip("/")
    if p.startswith("random:") or "/" not in p:
        return p
    parts = p.split("/")
    if "snapshots" in parts:                      # a hub cache folder: models--owner--name/snapshots/<hash>
        repo = next((x for x in parts if x.startswith("models--")), "")
        return repo[len("models--"):].replace("--", "/") or parts[-1]
    return parts[-1]


def ambiguity_html(rec, eagle3: bool = False) -> str:
    """The text under the figures: the measure (branch by branch in a table), the payoff in tokens, and where the
    numbers come from."""
    rec = as_dict(rec)
    if not rec:
        return ""
    m = ambiguity_moves(rec, eagle3)
    t = payoff_totals(rec, eagle3)
    heads = _heads(rec, eagle3)
    tok = lambda x: esc(show_token(x))   # noqa: E731
    parts = []
    if m["n"]:
        # the headline above says the measure and the payoff in a sentence each: here, what they are, not them again
        parts.append(f"<p><b>The measure</b> (the headline's first line): the {MEASURE} after each branch, "
                     "branch by branch in the table below.")
        if "eagle3" in heads:
            k3 = sum(b["q"]["eagle3"] > b["q"]["unshifted"] for b in m["branches"])
            parts[-1] += (f" The EAGLE-3 head gives it {esc(share(m['mean']['eagle3']))} on average, more than the "
                          f"unshifted head after {k3} of {m['n']}.")
            if m["mean"]["eagle3"] < m["mean"]["shifted"] and rec.get("context", "plain text") == "plain text":
                parts[-1] += (" Both the shifted and the EAGLE-3 head learned from chat replies only: tick “as the "
                              "start of the assistant's reply” to compare them where they were trained.")
        parts[-1] += "</p>"
    if t:
        parts.append("<p><b>In tokens:</b> (the headline's second line) " +
                     (f"the EAGLE-3 head's cycles kept {t['eagle3']['tau']:.2f} tokens each. "
                      if "eagle3" in t["heads"] else "") +
                     "A cycle keeps the drafted tokens the target accepts plus one token of its own, so 1.00 is "
                     "plain decoding.</p>")
    # narrow enough for a phone (three columns, whatever the heads shown): each probability under its token, the
    # heads' numbers stacked in one cell, the ▲/▼ cue on the shifted head's line
    pad = "padding:4px 6px;white-space:normal;vertical-align:top"
    td = f"<td style='{pad}'>"
    small = lambda x: f"<br><small>{x}</small>"   # noqa: E731
    rows = []
    for b in m["branches"]:
        qs = "<br>".join(f"<span style='white-space:nowrap'>{('▲ ' if b['higher'] else '▼ ') if h == 'shifted' else ''}"
                         f"{HEADS[h][0].replace(' head', '')} <b>{esc(share(b['q'][h]))}</b></span>" for h in heads)
        rows.append(f"<tr>{td}<b>{tok(b['text'])}</b>{small('p ' + pct(b['p']))}</td>"
                    f"{td}<b>{tok(b['next_text'])}</b>{small('p ' + pct(b['next_p']))}</td>{td}{qs}</td></tr>")
    table = ""
    if rows:
        table = (f"<table class='el-table' style='font-size:14px'><tr><th style='{pad}'>branch&nbsp;t</th>"
                 f"<th style='{pad}'>the target's next token</th><th style='{pad}'>{MEASURE}, by head</th></tr>"
                 + "".join(rows) + "</table>"
                 "<p><small>▲: the shifted head's draft gives the target's next token more probability than the "
                 "unshifted head's; ▼: not more. Each branch's tokens per cycle: the “Tokens per cycle” "
                 "figure.</small></p>")
    toks = " · ".join(tok(x) for x in rec["prefix_tokens"])
    ctx = f" (as {esc(rec['context'])})" if rec.get("context") and rec["context"] != "plain text" else ""
    names = (f"shifted <code>{esc(head_name(rec['shifted_head']))}</code>, unshifted "
             f"<code>{esc(head_name(rec['unshifted_head']))}</code>")
    if "eagle3" in heads and rec.get("eagle3_head"):
        names += f", EAGLE-3 <code>{esc(head_name(rec['eagle3_head']))}</code>"
    note = f"<p class='el-note'>{esc(rec['note'])}</p>" if rec.get("note") else ""
    return ("".join(parts) + table + f"<p>Prefix tokens{ctx}: <code>{toks}</code>. Heads: {names}.</p>" + note)


def ambiguity_walk_figure(rec, height: int = 430) -> go.Figure:
    """The walkthrough's step 5 in one figure, side by side so a projector holds it: the feature plane (left: the
    unshifted head's one guess, an arrow to each shifted guess, a dotted line from it to its branch's real feature)
    and the tab's one measure (right: per branch, the draft probability each head gives the target's next token)."""
    rec = as_dict(rec)
    if not rec:
        return empty_figure("Press “Show it live”")
    brs = rec["branches"]
    m = ambiguity_moves(rec, eagle3=False)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.5, 0.5], horizontal_spacing=0.1,
                        subplot_titles=["Where each head's guess lands (features, PCA)",
                                        "Draft probability of the target's next token"])
    last = esc(show_token(rec["last_token"]))
    ux, uy = rec["unshifted_xy"]
    for b, br in enumerate(brs):
        c = BRANCH_COLOURS[b % len(BRANCH_COLOURS)]
        (rx, ry), (sx, sy) = br["real_xy"], br["shifted_xy"]
        tok = esc(show_token(br["text"]))
        fig.add_trace(go.Scatter(x=[sx, rx], y=[sy, ry], mode="lines", line=dict(color=c, width=1.5, dash="dot"),
                                 hoverinfo="skip", showlegend=False), row=1, col=1)
        fig.add_annotation(x=sx, y=sy, ax=ux, ay=uy, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                           arrowhead=2, arrowsize=1.2, arrowwidth=2, arrowcolor=c, text="")
        fig.add_trace(go.Scatter(x=[rx], y=[ry], mode="markers+text", text=[f"<b>f({tok})</b>"],
                                 textposition="top center" if ry >= uy else "bottom center", textfont=dict(color=c),
                                 marker=dict(size=16, color=c, line=dict(color="white", width=2)), cliponaxis=False,
                                 name="real feature after the branch", legendgroup="real",
                                 showlegend=b == 0, hovertext=[f"real feature after “{tok}”"], hoverinfo="text"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=[sx], y=[sy], mode="markers",
                                 marker=dict(size=14, color=c, symbol="diamond-open", line=dict(width=3)),
                                 name="shifted guess (knows the token)", legendgroup="sh",
                                 showlegend=b == 0, hoverinfo="text",
                                 hovertext=[f"shifted guess, given the sampled token “{tok}”"]), row=1, col=1)
    fig.add_trace(go.Scatter(x=[ux], y=[uy], mode="markers", marker=dict(size=18, color=UNSHIFTED, symbol="x"),
                             name="unshifted guess (one for all)", hoverinfo="text",
                             hovertext=[f"the unshifted head's one guess, from (f_{last}, e({last}))"]),
                  row=1, col=1)
    # not to scale: the plane only places the guesses; the measure on the right is the full-dimensional one. Padded
    # so that the markers and their labels stay inside the panel
    pts = [rec["unshifted_xy"]] + [p for br in brs for p in (br["real_xy"], br["shifted_xy"])]
    for axis, i in ((fig.update_xaxes, 0), (fig.update_yaxes, 1)):
        lo, hi = min(p[i] for p in pts), max(p[i] for p in pts)
        pad = 0.18 * (hi - lo or 1.0) + (0.12 * (hi - lo or 1.0) if i else 0)
        axis(row=1, col=1, range=[lo - pad, hi + pad], gridcolor="#eee", zeroline=False, showticklabels=False)
    # the one measure: x = the branch token and the target's next token after it
    xs = [f"{esc(show_token(b['text'], 10))}<br>→ {esc(show_token(b['next_text'], 10))}" for b in m["branches"]]
    for h in ("shifted", "unshifted"):
        name, colour, pattern = HEADS[h]
        ys = [b["q"][h] for b in m["branches"]]
        fig.add_trace(go.Bar(x=xs, y=ys, name=name, marker=dict(color=colour, pattern_shape=pattern),
                             text=[share(y) for y in ys], textposition="outside", cliponaxis=False,
                             textfont=dict(size=13),
                             hovertext=[f"{name}: {share(y)} on “{esc(show_token(b['next_text']))}” after "
                                        f"“{esc(show_token(b['text']))}”" for y, b in zip(ys, m["branches"])],
                             hoverinfo="text"), row=1, col=2)
    top = max([b["q"][h] for b in m["branches"] for h in ("shifted", "unshifted")] + [0.05])
    fig.update_yaxes(row=1, col=2, range=[0, min(1.0, top * 1.25)], tickformat=".0%", gridcolor="#eee")
    fig.update_xaxes(row=1, col=2, tickfont=dict(size=13), tickangle=0)
    fig.update_layout(barmode="group", bargap=0.3, uniformtext=dict(minsize=11, mode="show"))
    base_layout(fig, None, height=height,
                legend=dict(orientation="h", yanchor="top", y=-0.12, x=0, font=dict(size=13)))
    fig.update_layout(margin=dict(l=20, r=20, t=40, b=20))
    for a in fig.layout.annotations[:2]:
        a.font = dict(size=15, color="#222")
    return fig
