"""Draft q vs target p: for a chosen node, along the accepted path, and the bonus/correction distribution."""
from __future__ import annotations

import plotly.graph_objects as go

from .common import (ACCEPTED, BONUS, CORRECTION, DRAFT_PATTERN, DRAFT_Q, REJECTED, STATUS_GLYPHS, TARGET_P, as_dict,
                     axis_names, control_name, esc, figure, grid_axes, grid_layout, layout_base, merge, pct, show_token)
from .rules import exactness_sentence, rule_sentence, source_legend, source_sentence


def node_choices(rec) -> list[tuple[str, int]]:
    """Dropdown entries (label, node index) for the drafted nodes of a cycle, accepted path first."""
    rec = as_dict(rec)
    if not rec:
        return []
    nodes = {n["index"]: n for n in rec["nodes"]}
    order = list(rec["accepted_path"]) + [i for i in nodes if i > 0 and i not in rec["accepted_path"]]
    mark = {"accepted": "✓", "rejected": "✗", "not_reached": "·"}
    return [(f"{mark.get(nodes[i]['status'], '')} node {i} (depth {nodes[i]['depth']}): "
             f"{show_token(nodes[i]['text'], 20)}", i) for i in order]


def default_node(rec) -> int | None:
    rec = as_dict(rec)
    if not rec or len(rec["nodes"]) < 2:
        return None
    if rec["accepted_path"]:
        return rec["accepted_path"][-1]
    return min(n["index"] for n in rec["nodes"] if n["index"] > 0)


def is_special(row: dict) -> bool:
    """A control token of the vocabulary (<|im_start|>, <repo_name>, ...): not text a student should see on an
    axis. The engine marks them; records from before that are recognised by their <|...|> shape."""
    return bool(row.get("special")) or control_name(row.get("text")) is not None


def wrap(text: str, width: int) -> str:
    """Break a plain sentence (it may hold <br>) into lines of about `width` characters: a title over one panel
    of a three-panel figure must not run into its neighbour."""
    import textwrap
    return "<br>".join("<br>".join(textwrap.wrap(part, width)) for part in text.split("<br>"))


def is_sampling(rec) -> bool:
    rec = as_dict(rec)
    if rec.get("temperature") is not None:
        return rec["temperature"] > 0
    return any(n.get("accept_prob") is not None for n in rec["nodes"])


def parent_distribution(rec: dict, node: int, k: int = 8):
    """Tokens (text, q, p, status) at the parent of `node`: the parent's draft/target top tokens and its
    drafted children (whose q and p are exact). None = below the recorded top-k."""
    nodes = {n["index"]: n for n in rec["nodes"]}
    par = nodes[nodes[node]["parent"]]
    rows: dict[int, dict] = {}
    for t in par.get("draft_topk") or []:
        rows.setdefault(t["token_id"], dict(text=t["text"], q=None, p=None, status=None,
                                            special=t.get("special", False)))["q"] = t["prob"]
    for t in par.get("target_topk") or []:
        rows.setdefault(t["token_id"], dict(text=t["text"], q=None, p=None, status=None,
                                            special=t.get("special", False)))["p"] = t["prob"]
    for c in nodes.values():
        if c["parent"] == par["index"]:
            r = rows.setdefault(c["token_id"], dict(text=c["text"], q=None, p=None, status=None))
            r.update(q=c["q"], p=c["p"], status=c["status"], node=c["index"], accept_prob=c.get("accept_prob"),
                     rule=c.get("rule"), test_p=c.get("test_p"), test_q=c.get("test_q"), test_rank=c.get("test_rank"),
                     sampled=c.get("sampled"))
    items = sorted(rows.items(), key=lambda kv: -max(kv[1]["p"] or 0, kv[1]["q"] or 0))
    chosen = [kv for kv in items if kv[1].get("node") is not None]
    # the parent's top tokens fill the rest; special tokens (<|im_start|> ...) only when actually drafted
    rest = [kv for kv in items if kv[1].get("node") is None and not is_special(kv[1])][:max(0, k - len(chosen))]
    keep = sorted(chosen + rest, key=lambda kv: -max(kv[1]["p"] or 0, kv[1]["q"] or 0))
    return par, [dict(token_id=t, **r) for t, r in keep]


def residual_bars(rec: dict, most: int | None = None) -> list[dict]:
    """The tokens of the distribution the bonus/correction was drawn from, the drawn one always among them (at most
    `most`, the likeliest)."""
    res = [t for t in rec.get("residual_topk") or [] if t["token_id"] == rec["bonus_token"] or not is_special(t)]
    if not any(t["token_id"] == rec["bonus_token"] for t in res) and rec.get("residual_topk"):
        # a record from before the drawn token was kept beside the top k: its bar is named, its height unknown
        res = res + [dict(token_id=rec["bonus_token"], text=rec["bonus_text"] + " (p not recorded)", prob=0.0)]
    if most and len(res) > most:
        drawn = [t for t in res if t["token_id"] == rec["bonus_token"]]
        keep = [t for t in sorted(res, key=lambda t: -t["prob"])[:most - len(drawn)] if t not in drawn]
        res = sorted(keep + drawn, key=lambda t: -t["prob"])
    return res


def probs_figure(rec, node: int | None = None, height: int = 460, compact: bool = False) -> go.Figure:
    """compact (the walkthrough's deck, where the note beside says the rule with its numbers): short panel titles and
    the residual's four likeliest tokens (the drawn one always among them)."""
    rec = as_dict(rec)
    sampling = is_sampling(rec)
    if node is None or node not in {n["index"] for n in rec["nodes"]} or node == 0:
        node = default_node(rec)
    nodes = {n["index"]: n for n in rec["nodes"]}
    kind = rec["bonus_kind"] if rec["cycle"] > 0 else "first token"
    layout = grid_layout(1, 3, column_widths=[0.46, 0.29, 0.25], horizontal_spacing=0.08,
                         subplot_titles=[" ", "Along the accepted path", " "])
    titles, data = layout["annotations"], []
    # ---- panel 1: the chosen node, against its siblings and the parent's top tokens
    if node is not None:
        par, rows = parent_distribution(rec, node)
        labels = [(STATUS_GLYPHS.get(r["status"], "") + " " if r.get("node") is not None else "")
                  + f"{show_token(r['text'])}" + (" ◀" if r.get("node") == node else "") for r in rows]
        data.append(dict(type="bar", x=labels, y=[r["q"] or 0 for r in rows], name="draft q (head)",
                         marker=dict(color=DRAFT_Q, pattern=dict(shape=DRAFT_PATTERN)), legendgroup="q",
                         hovertext=[f"{esc(r['text'])}: q = {pct(r['q']) if r['q'] is not None else 'below top-k'}"
                                    for r in rows], hoverinfo="text", **grid_axes(1, 1, 3)))
        data.append(dict(type="bar", x=labels, y=[r["p"] or 0 for r in rows], name="target p",
                         marker=dict(color=TARGET_P, line=dict(
                             color=[_status_col(r["status"]) for r in rows],
                             width=[4 if r.get("node") is not None else 0 for r in rows])), legendgroup="p",
                         hovertext=[f"{esc(r['text'])}: p = {pct(r['p']) if r['p'] is not None else 'below top-k'}"
                                    + (f"<br>drafted node {r['node']}: {r['status'].replace('_', ' ')}"
                                       if r.get("node") is not None else "")
                                    + (f"<br>{rule_sentence(r, sampling)}"
                                       if r.get("node") is not None and sampling else "")
                                    for r in rows], hoverinfo="text", **grid_axes(1, 1, 3)))
        n = nodes[node]
        verdict = {"accepted": "accepted", "rejected": "rejected", "not_reached": "not reached"}[n["status"]]
        ttl = (f"<b>“{esc(show_token(n['text'], 16))}”</b> after “{esc(show_token(par['text'], 16))}”: "
               f"q = {pct(n['q'])}, p = {pct(n['p'])} → <b>{verdict}</b>")
        if not compact:
            ttl += "<br>" + wrap(rule_sentence(n, sampling), 62)
            exact = exactness_sentence(n) if sampling else None
            if exact:
                ttl += "<br>" + wrap(exact, 62)
        merge(titles[0], dict(text=ttl, font=dict(size=14)))
    else:
        titles.append(dict(text="no drafted tokens in this cycle", x=0.2, y=0.5, xref="paper", yref="paper",
                           showarrow=False, font=dict(size=15, color="#666")))
        titles[0]["text"] = "Chosen node"
    # ---- panel 2: the accepted path, then the bonus/correction
    path = rec["accepted_path"]
    px = [f"{k + 1}. {show_token(nodes[i]['text'])}" for k, i in enumerate(path)]
    data.append(dict(type="bar", x=px, y=[nodes[i]["q"] for i in path],
                     marker=dict(color=DRAFT_Q, pattern=dict(shape=DRAFT_PATTERN)),
                     name="draft q (head)", legendgroup="q", showlegend=node is None,
                     hovertext=[f"q = {pct(nodes[i]['q'])}" for i in path], hoverinfo="text", **grid_axes(1, 2, 3)))
    data.append(dict(type="bar", x=px, y=[nodes[i]["p"] for i in path], marker=dict(color=TARGET_P),
                     name="target p", legendgroup="p", showlegend=node is None,
                     hovertext=[f"p = {pct(nodes[i]['p'])}" for i in path], hoverinfo="text", **grid_axes(1, 2, 3)))
    if not path:
        titles.append(dict(text="nothing accepted:<br>only the target's<br>own token this cycle", x=0.5, y=0.5,
                           xref="x2 domain", yref="y2 domain", showarrow=False, font=dict(size=14, color="#666")))
    # ---- panel 3: where the bonus/correction came from
    res = residual_bars(rec, 4 if compact else None)
    bcol = CORRECTION if kind == "correction" else BONUS
    data.append(dict(type="bar", x=[("★ " if t["token_id"] == rec["bonus_token"] else "") + show_token(t["text"])
                                    for t in res],
                     y=[t["prob"] for t in res],
                     marker=dict(color=[bcol if t["token_id"] == rec["bonus_token"] else "#c8c8c8" for t in res],
                                 pattern=dict(shape=["" if t["token_id"] == rec["bonus_token"] else "." for t in res])),
                     name=source_legend(rec), hovertext=[f"{esc(t['text'])}: {pct(t['prob'])}" for t in res],
                     hoverinfo="text", **grid_axes(1, 3, 3)))
    t3 = f"{kind.capitalize()} “{esc(show_token(rec['bonus_text']))}”<br>{wrap(source_sentence(rec), 30)}"
    if compact:
        t3 = f"{kind.capitalize()} “{esc(show_token(rec['bonus_text'], 10))}”"
    merge(titles[2], dict(text=t3, font=dict(size=14)))
    merge(titles[1], dict(font=dict(size=14)))
    for axis in axis_names(layout, "y"):
        layout[axis].update(range=[0, 1.05], tickformat=".0%", gridcolor="#eee")
    for axis in axis_names(layout, "x"):
        layout[axis].update(tickangle=-35, tickfont=dict(size=14))
    merge(layout, layout_base(None, height=height, barmode="group", bargap=0.25, margin=dict(l=50, r=20, t=100, b=110),
                              legend=dict(orientation="h", y=-0.22, x=0)))
    return figure(data, layout)


def _status_col(status):
    return {"accepted": ACCEPTED, "rejected": REJECTED}.get(status, "#777")
