"""The "How can I" view: real branch features vs the shifted and unshifted heads' predictions."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import DRAFT_Q, TARGET_P, as_dict, base_layout, empty_figure, esc, pct, show_token

BRANCH_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
UNSHIFTED = "#111111"


def ambiguity_figure(rec, height: int = 560) -> go.Figure:
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
        fig.add_trace(go.Scatter(x=[ux, rx], y=[uy, ry], mode="lines", line=dict(color="#555", width=1.5, dash="dot"),
                                 hoverinfo="skip", showlegend=False, name="unshifted distance"))
        fig.add_trace(go.Scatter(x=[sx, rx], y=[sy, ry], mode="lines", line=dict(color=c, width=2.5),
                                 hoverinfo="skip", showlegend=False, name="shifted distance"))
        # what the sampled token does: it moves the head's guess from the one shared guess toward its branch
        fig.add_annotation(x=sx, y=sy, ax=ux, ay=uy, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                           arrowhead=2, arrowsize=1.2, arrowwidth=1.8, arrowcolor=c, opacity=0.75, text="")
        fig.add_trace(go.Scatter(
            x=[rx], y=[ry], mode="markers+text", text=[f"<b>f({tok})</b>"], textposition="top center",
            textfont=dict(size=16, color=c), marker=dict(size=20, color=c, symbol="circle",
                                                         line=dict(color="white", width=2)),
            name=f"real feature after “{tok}” (p={pct(br['p'])})",
            hovertext=[f"real feature of “{tok}” (target p = {pct(br['p'])})"], hoverinfo="text"))
        fig.add_trace(go.Scatter(
            x=[sx], y=[sy], mode="markers", marker=dict(size=16, color=c, symbol="diamond-open", line=dict(width=3)),
            name=f"shifted head from (f_{esc(last)}, e({tok})): distance {br['dist_shifted']:.1f}",
            hovertext=[f"shifted head's prediction, given the sampled token “{tok}”<br>"
                       f"distance to the real feature: {br['dist_shifted']:.2f}"], hoverinfo="text"))
    fig.add_trace(go.Scatter(
        x=[ux], y=[uy], mode="markers+text", text=["<b>unshifted</b>"], textposition="bottom center",
        textfont=dict(size=15, color=UNSHIFTED), marker=dict(size=22, color=UNSHIFTED, symbol="x"),
        name=f"unshifted head from (f_{esc(last)}, e({esc(last)})): one guess for all, mean distance "
             f"{rec['mean_dist_unshifted']:.1f}",
        hovertext=["unshifted head: it does not know which token was sampled, so it makes a single "
                   "prediction for every branch"], hoverinfo="text"))
    lx, ly = rec["last_xy"]
    fig.add_trace(go.Scatter(x=[lx], y=[ly], mode="markers+text", text=[f"f({esc(last)})"],
                             textposition="bottom center", textfont=dict(size=13, color="#777"),
                             marker=dict(size=12, color="#bbb", symbol="square"),
                             name=f"the feature of “{esc(last)}” itself", hoverinfo="name"))
    ev = rec["explained_variance"]
    base_layout(fig, f"Mean distance to the real feature:<br>shifted {rec['mean_dist_shifted']:.1f} · "
                     f"unshifted {rec['mean_dist_unshifted']:.1f}",
                height=height, legend=dict(orientation="v", y=-0.17, x=0, yanchor="top", font=dict(size=13)))
    fit = rec.get("pca_fit", "the features shown")
    fig.update_xaxes(title=f"PC 1 ({100 * ev[0]:.0f}% of the variance of the {fit})", gridcolor="#eee",
                     zeroline=False)
    fig.update_yaxes(title=f"PC 2 ({100 * ev[1]:.0f}%)", gridcolor="#eee", zeroline=False, scaleanchor="x")
    fig.update_layout(margin=dict(l=60, r=20, t=80, b=20), height=height + 30 * len(rec["branches"]))
    return fig


def ambiguity_dist_figure(rec, height_per_branch: int = 230) -> go.Figure:
    """Per branch: the target's real next-token distribution vs what each head's prediction yields."""
    rec = as_dict(rec)
    if not rec:
        return empty_figure("")
    brs = rec["branches"]
    fig = make_subplots(rows=len(brs), cols=1, vertical_spacing=0.5 / len(brs),
                        subplot_titles=[f"after “…{esc(rec['prefix'][-20:])}<b>{esc(b['text'])}</b>” "
                                        f"(branch p = {pct(b['p'])})" for b in brs])
    for r, br in enumerate(brs, start=1):
        xs = [show_token(t["text"]) for t in br["vocab"]]
        first = r == 1
        fig.add_trace(go.Bar(x=xs, y=[t["prob"] for t in br["vocab"]], name="target (real)", marker_color=TARGET_P,
                             showlegend=first, legendgroup="t"), row=r, col=1)
        fig.add_trace(go.Bar(x=xs, y=br["vocab_shifted"], name="shifted head (knows the token)",
                             marker_color=DRAFT_Q, showlegend=first, legendgroup="s"), row=r, col=1)
        fig.add_trace(go.Bar(x=xs, y=br["vocab_unshifted"], name="unshifted head (same for all branches)",
                             marker_color="#555", showlegend=first, legendgroup="u"), row=r, col=1)
        if br.get("vocab_eagle3"):   # an EAGLE-3 head's drafts (its own LM head; shifted, fused features)
            fig.add_trace(go.Bar(x=xs, y=br["vocab_eagle3"], name="EAGLE-3 head (fused features)",
                                 marker_color="#E69F00", marker_pattern_shape="x", showlegend=first,
                                 legendgroup="e3"), row=r, col=1)
    fig.update_yaxes(range=[0, 1], tickformat=".0%", gridcolor="#eee")
    fig.update_xaxes(tickfont=dict(size=13))
    fig.update_layout(barmode="group")
    base_layout(fig, "Next-token distribution: real vs each head's prediction", height=140 + height_per_branch * len(brs),
                legend=dict(orientation="h", y=-0.02, yanchor="top", x=0, font=dict(size=13)))
    fig.update_layout(margin=dict(l=50, r=10, t=80, b=90))
    for a in fig.layout.annotations:
        a.font = dict(size=14)
    return fig


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


def ambiguity_html(rec) -> str:
    rec = as_dict(rec)
    if not rec:
        return ""
    brs = rec["branches"]

    def nearest(i):  # the branch whose real feature a prediction is nearest to, in the full feature space
        return esc(show_token(brs[i]["text"])) if 0 <= i < len(brs) else "–"

    rows = "".join(
        f"<tr><td><b>{esc(show_token(b['text']))}</b></td><td>{pct(b['p'])}</td>"
        f"<td>{b['dist_shifted']:.2f}</td><td>{b['dist_unshifted']:.2f}</td>"
        f"<td>{b['cos_shifted']:.2f}</td><td>{b['cos_unshifted']:.2f}</td>"
        f"<td>{nearest(b.get('nearest_branch', -1))}{' ✓' if b.get('nearest_branch', -1) == i else ''}</td></tr>"
        for i, b in enumerate(brs))
    toks = " · ".join(esc(show_token(t)) for t in rec["prefix_tokens"])
    note = f"<p class='el-note'>{esc(rec['note'])}</p>" if rec.get("note") else ""
    ds, du = rec["mean_dist_shifted"], rec["mean_dist_unshifted"]
    if ds < 0.9 * du:
        verdict = (f"<p><b>Knowing the sampled token helps:</b> the shifted head's predictions are on average "
                   f"{du / max(ds, 1e-9):.1f}× closer to the real branch features than the unshifted head's single "
                   f"guess ({ds:.2f} vs {du:.2f}).</p>")
    else:
        verdict = (f"<p>Here the shifted head is not clearly closer ({ds:.2f} vs {du:.2f}); "
                   f"with an untrained (random) head neither prediction means anything.</p>")
    if brs and all(b.get("nearest_branch", -1) >= 0 for b in brs):
        hits = sum(b["nearest_branch"] == i for i, b in enumerate(brs))
        verdict += (f"<p>In the full feature space, <b>{hits} of {len(brs)}</b> shifted predictions lie nearest to "
                    f"their own branch's real feature (a 2-D projection can hide this); the unshifted guess, one for "
                    f"all, lies nearest to “{nearest(rec.get('unshifted_nearest', -1))}”.</p>")
    note = verdict + drafts_sentence(rec) + note
    ctx = f" (as {esc(rec['context'])})" if rec.get("context") and rec["context"] != "plain text" else ""
    return (f"{note}<p>Prefix tokens{ctx}: <code>{toks}</code>. Heads: shifted <code>{esc(head_name(rec['shifted_head']))}"
            f"</code>, unshifted <code>{esc(head_name(rec['unshifted_head']))}</code>.</p>"
            "<table class='el-table'><tr><th>branch t</th><th>target p</th><th>distance shifted</th>"
            "<th>distance unshifted</th><th>cosine shifted</th><th>cosine unshifted</th>"
            "<th>shifted prediction nearest to</th></tr>" + rows + "</table>")


def first_draft_hits(rec) -> dict:
    """{head: branches on which its most likely next token is the target's} for the heads the record carries."""
    brs = (as_dict(rec) or {}).get("branches") or []
    keys = (("shifted", "shifted_next"), ("unshifted", "unshifted_next"), ("eagle3", "eagle3_next"))
    out = {}
    for name, key in keys:
        if brs and all(b.get(key) and b.get("target_next") for b in brs):
            out[name] = sum(b[key][0]["token_id"] == b["target_next"][0]["token_id"] for b in brs)
    return out


def drafts_sentence(rec) -> str:
    """One computed sentence: how often each head's first draft is the target's next token, and (where the EAGLE-3
    head falls behind on plain text) where the heads were trained."""
    rec = as_dict(rec) or {}
    hits, n = first_draft_hits(rec), len(rec.get("branches") or [])
    if "shifted" not in hits or "unshifted" not in hits:
        return ""
    parts = [f"the shifted head's on <b>{hits['shifted']} of {n}</b> branches",
             f"the unshifted head's on {hits['unshifted']}"]
    if "eagle3" in hits:
        parts.append(f"the EAGLE-3 head's on {hits['eagle3']}")
    text = "<p><b>What they would draft:</b> the most likely next token is the target's own for " + \
        ", ".join(parts[:-1]) + " and " + parts[-1] + "."
    if "eagle3" in hits and hits["eagle3"] < hits["shifted"] and rec.get("context", "plain text") == "plain text":
        text += (" The shifted head and the EAGLE-3 head both learned from chat conversations only (replies after "
                 "the chat template); on plain text the EAGLE-3 head strays further from the target: tick “as the "
                 "start of the assistant's reply” to compare them where they were trained.")
    return text + "</p>"


def ambiguity_moves(rec) -> dict:
    """What the figure of the walkthrough's step 5 shows, measured from the record (full feature space, not the
    2-D plane): per branch, the share of the unshifted guess's distance to the branch's real feature that the
    shifted guess closes (1 - d_shifted / d_unshifted), whether the shifted guess lies nearest its own branch, and
    what each guess gives the target's favourite next token."""
    rec = as_dict(rec) or {}
    out = []
    for i, b in enumerate(rec.get("branches") or []):
        du, ds = b["dist_unshifted"], b["dist_shifted"]
        top = max(range(len(b["vocab"])), key=lambda k: b["vocab"][k]["prob"]) if b.get("vocab") else None
        out.append(dict(text=b["text"], p=b["p"], closed=1 - ds / du if du > 0 else 0.0, d_shifted=ds,
                        d_unshifted=du, own=b.get("nearest_branch", -1) == i,
                        next_text=b["vocab"][top]["text"] if top is not None else None,
                        next_p=b["vocab"][top]["prob"] if top is not None else None,
                        next_shifted=b["vocab_shifted"][top] if top is not None else None,
                        next_unshifted=b["vocab_unshifted"][top] if top is not None else None))
    return {"branches": out, "mean_shifted": rec.get("mean_dist_shifted"),
            "mean_unshifted": rec.get("mean_dist_unshifted")}


def ambiguity_walk_figure(rec, k: int = 4, plane_height: int = 330, bars_height: int = 210) -> go.Figure:
    """The walkthrough's step 5 in one figure: the feature plane (top: the unshifted head's one guess, an arrow to
    each shifted guess, a dotted line from it to its branch's real feature) and, per branch, the next-token bars
    of the target, the shifted guess and the unshifted guess (the target's `k` likeliest next tokens)."""
    rec = as_dict(rec)
    if not rec:
        return empty_figure("Press “Show it live”")
    brs = rec["branches"]
    cols = 2 if len(brs) > 1 else 1
    rows_b = (len(brs) + cols - 1) // cols
    specs = [[{"colspan": cols}] + [None] * (cols - 1)] + [[{} for _ in range(cols)] for _ in range(rows_b)]
    last = esc(show_token(rec["last_token"]))
    titles = ["Where each head's guess lands (the features, PCA)"] + [
        f"after “…{esc(rec['prefix'][-12:])}<b>{esc(b['text'])}</b>” (p = {pct(b['p'])})" for b in brs]
    height = plane_height + bars_height * rows_b + 170
    fig = make_subplots(rows=1 + rows_b, cols=cols, specs=specs, subplot_titles=titles,
                        row_heights=[plane_height] + [bars_height] * rows_b,
                        vertical_spacing=min(0.09, 0.5 / (1 + rows_b)), horizontal_spacing=0.1)
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
                                 marker=dict(size=16, color=c, line=dict(color="white", width=2)),
                                 name="real feature after the branch token", legendgroup="real",
                                 showlegend=b == 0, hovertext=[f"real feature after “{tok}”"], hoverinfo="text"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=[sx], y=[sy], mode="markers",
                                 marker=dict(size=14, color=c, symbol="diamond-open", line=dict(width=3)),
                                 name="shifted head's guess (knows the token)", legendgroup="sh",
                                 showlegend=b == 0, hoverinfo="text",
                                 hovertext=[f"shifted guess for “{tok}”: distance {br['dist_shifted']:.1f} "
                                            f"(unshifted {br['dist_unshifted']:.1f})"]), row=1, col=1)
    fig.add_trace(go.Scatter(x=[ux], y=[uy], mode="markers", marker=dict(size=18, color=UNSHIFTED, symbol="x"),
                             name=f"unshifted head's one guess, from (f_{last}, e({last}))", hoverinfo="name"),
                  row=1, col=1)
    # not to scale: the plane only places the guesses; the distances the text gives are the full-dimensional ones
    fig.update_yaxes(row=1, col=1, gridcolor="#eee", zeroline=False, showticklabels=False)
    fig.update_xaxes(row=1, col=1, gridcolor="#eee", zeroline=False, showticklabels=False)
    series = [("target's real next token", TARGET_P, "", lambda b, t: b["vocab"][t]["prob"]),
              ("shifted guess drafts", DRAFT_Q, "/", lambda b, t: b["vocab_shifted"][t]),
              ("unshifted guess drafts (the same for every branch)", "#555555", ".",
               lambda b, t: b["vocab_unshifted"][t])]
    top = 0.0
    for b, br in enumerate(brs):
        order = sorted(range(len(br["vocab"])), key=lambda t: -br["vocab"][t]["prob"])[:k]
        xs = [show_token(br["vocab"][t]["text"]) for t in order]
        r, c = 2 + b // cols, 1 + b % cols
        for name, colour, pattern, get in series:
            ys = [get(br, t) for t in order]
            top = max([top] + ys)
            fig.add_trace(go.Bar(x=xs, y=ys, name=name, legendgroup=name, showlegend=b == 0,
                                 marker=dict(color=colour, pattern_shape=pattern),
                                 hovertext=[f"{esc(x)}: {pct(y)}" for x, y in zip(xs, ys)], hoverinfo="text"),
                          row=r, col=c)
    for b in range(len(brs)):
        fig.update_yaxes(range=[0, min(1.0, top * 1.12)], tickformat=".0%", gridcolor="#eee", row=2 + b // cols,
                         col=1 + b % cols)
    fig.update_layout(barmode="group", bargap=0.25)
    base_layout(fig, None, height=height,
                legend=dict(orientation="h", yanchor="top", y=-0.04, x=0, font=dict(size=14)))
    fig.update_layout(margin=dict(l=50, r=20, t=40, b=20))
    for b, a in enumerate(fig.layout.annotations[:len(titles)]):
        a.font = dict(size=15, color=BRANCH_COLOURS[(b - 1) % len(BRANCH_COLOURS)] if b else "#222")
    return fig
