"""The draft tree of one cycle: root = last committed token, nodes coloured by verification outcome."""
from __future__ import annotations

import networkx as nx
import plotly.graph_objects as go

from .common import (ACCEPTED, BONUS, CORRECTION, KIND_GLYPHS, STATUS_COLOURS, STATUS_GLYPHS, STATUS_NAMES,
                     as_dict, base_layout, esc, pct, show_token)

MARKERS = {"root": "diamond", "accepted": "circle", "rejected": "x", "not_reached": "circle-open"}
from .rules import rule_sentence, source_sentence


def tree_graph(rec: dict) -> nx.DiGraph:
    g = nx.DiGraph()
    for n in rec["nodes"]:
        g.add_node(n["index"], **n)
        if n["parent"] >= 0:
            g.add_edge(n["parent"], n["index"])
    return g


def tree_layout(g: nx.DiGraph, root: int = 0) -> dict[int, tuple[float, float]]:
    """Tidy layered layout: x = depth, y = leaves in depth-first order, parents centred over their children.
    Children keep drafting order (node index), so the top-ranked draft is on top."""
    pos: dict[int, tuple[float, float]] = {}
    next_leaf = [0.0]

    def place(v):
        kids = sorted(g.successors(v))
        depth = g.nodes[v].get("depth", 0)
        if not kids:
            pos[v] = (depth, -next_leaf[0])
            next_leaf[0] += 1
            return
        for k in kids:
            place(k)
        ys = [pos[k][1] for k in kids]
        pos[v] = (depth, (min(ys) + max(ys)) / 2)

    if root in g:
        place(root)
    return pos


def _hover(n: dict, sampling: bool) -> str:
    lines = [f"<b>{esc(show_token(n['text'], 30))}</b>  (node {n['index']}, depth {n['depth']})",
             f"status: {STATUS_NAMES.get(n['status'], n['status'])}"]
    if n["parent"] >= 0:
        lines += [f"draft q = {pct(n['q'])}", f"target p = {pct(n['p'])}",
                  f"cumulative score log q = {n['score']:.2f}"]
        if n.get("rule") is not None or n.get("accept_prob") is not None:
            lines.append("test: " + rule_sentence(n, sampling))
        elif n["status"] == "not_reached":
            lines.append("not tested: an earlier sibling was accepted, or its parent was not accepted")
    if n.get("target_topk"):
        lines.append("target's next: " + ", ".join(f"{esc(show_token(t['text'], 10))} {pct(t['prob'])}"
                                                 for t in n["target_topk"][:3]))
    return "<br>".join(lines)


def _cut_note(rec) -> str:
    """Why a cycle committed fewer tokens than it verified (accepted + 1): the stop token or the token budget."""
    if len(rec.get("new_tokens") or []) >= rec.get("accept_length", 0) + 1:
        return ""
    why = {"eos": "the stop token", "max_new_tokens": "max new tokens", "context": "the context limit"}
    return f" (cut at {why.get(rec.get('finished'), 'the end')})"


def _skip_note(rec) -> str:
    k = rec.get("drafts_skipped") or 0
    if not k:
        return ""
    return (f"<br><sup>{k} draft{'s' if k != 1 else ''} left out: the warped draft distribution had fewer tokens "
            f"than the tree asks for (a token with q = 0 is never drafted)</sup>")


def tree_figure(rec, height: int | None = None, title: str | None = None) -> go.Figure:
    """Plotly figure of a cycle's draft tree (horizontal: the root on the left, depth to the right)."""
    rec = as_dict(rec)
    g = tree_graph(rec)
    pos = tree_layout(g)
    nodes = {n["index"]: n for n in rec["nodes"]}
    path = set(rec["accepted_path"])
    last = rec["accepted_path"][-1] if rec["accepted_path"] else 0
    sampling = rec.get("temperature", 0) > 0 or any(n.get("accept_prob") is not None for n in rec["nodes"])
    fig = go.Figure()

    # edges: all, then the accepted path bold
    ex, ey, ax, ay = [], [], [], []
    for u, v in g.edges:
        (x0, y0), (x1, y1) = pos[u], pos[v]
        on_path = v in path and (u == 0 or u in path)
        xs, ys = (ax, ay) if on_path else (ex, ey)
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#c9c9c9", width=2, dash="dot"),
                             hoverinfo="skip", name="draft edges", showlegend=False))
    fig.add_trace(go.Scatter(x=ax, y=ay, mode="lines", line=dict(color=ACCEPTED, width=7),
                             hoverinfo="skip", name="accepted path"))

    # bonus / correction token: the target's own token after the accepted path, on its own row below
    leaves = max(1, sum(1 for v in g if g.out_degree(v) == 0))
    bx, by = pos[last][0] + 1, (-leaves if len(nodes) > 1 else pos[last][1])
    kind = rec["bonus_kind"] if rec["cycle"] > 0 else "first token"
    bcol = CORRECTION if kind == "correction" else BONUS
    fig.add_trace(go.Scatter(x=[pos[last][0], bx], y=[pos[last][1], by], mode="lines",
                             line=dict(color=bcol, width=4, dash="dot"), hoverinfo="skip", showlegend=False,
                             name="bonus edge"))

    # nodes: one marker trace per status (legend + hover), labels as boxes on top
    for status in ("root", "accepted", "rejected", "not_reached"):
        ids = [i for i, n in nodes.items() if n["status"] == status]
        fig.add_trace(go.Scatter(
            x=[pos[i][0] for i in ids], y=[pos[i][1] for i in ids], mode="markers",
            marker=dict(symbol=MARKERS[status], size=14, color=STATUS_COLOURS[status],
                        opacity=[1.0 if status == "root" else 0.3 + 0.7 * nodes[i]["q"] for i in ids],
                        line=dict(width=0)),
            hovertext=[_hover(nodes[i], sampling) for i in ids], hoverinfo="text", name=STATUS_NAMES[status],
            customdata=ids, visible=True if ids else "legendonly"))
    btxt = (f"<b>{esc(show_token(rec['bonus_text'], 30))}</b><br>{kind}: the target's own token"
            f"<br>{source_sentence(rec)}")
    fig.add_trace(go.Scatter(x=[bx], y=[by], mode="markers",
                             marker=dict(symbol="star" if kind != "correction" else "diamond", size=30, color=bcol,
                                         line=dict(width=1, color="white")),
                             hovertext=[btxt], hoverinfo="text",
                             name="◆ correction (target's token)" if kind == "correction" else "★ bonus (target's token)"))

    label_size = 17 if leaves <= 16 else 14
    labels = []   # plain dicts, assigned at once (add_annotation validates one by one: slow for big trees)
    for i, n in nodes.items():
        x, y = pos[i]
        col = STATUS_COLOURS[n["status"]]
        alpha = 1.0 if n["status"] in ("root", "accepted") else 0.35 + 0.65 * n["q"]
        glyph = STATUS_GLYPHS.get(n["status"], "")
        labels.append(dict(x=x, y=y, text=(glyph + " " if glyph else "") + esc(show_token(n["text"])), showarrow=False,
                           font=dict(size=label_size, color="white" if n["status"] == "root" else "#111"),
                           bgcolor=_mix(col, alpha), bordercolor=col,
                           borderwidth=3 if i in path or i == 0 else 1, borderpad=4,
                           hovertext=_hover(n, sampling), name=f"node-{i}", captureevents=i > 0))
    fig.update_layout(annotations=labels)
    fig.add_annotation(x=bx, y=by, text=f"{KIND_GLYPHS.get(kind, '★')} <b>{esc(show_token(rec['bonus_text']))}</b> ({kind})",
                       showarrow=False, font=dict(size=17, color="#111"), bgcolor=bcol, bordercolor="#333", borderwidth=2,
                       borderpad=4, hovertext=btxt, xshift=0)

    rows = leaves + (1 if len(nodes) > 1 else 0)
    maxd = max([p[0] for p in pos.values()] + [bx])
    # the bonus/correction box sits right of the deepest column: room for its label, so it is never clipped
    fig.update_xaxes(range=[-0.6, maxd + (1.3 if bx >= maxd else 0.6)], tickmode="array",
                     tickvals=list(range(int(maxd) + 1)),
                     ticktext=["root"] + [f"depth {d}" for d in range(1, int(maxd) + 1)], showgrid=False,
                     zeroline=False, side="top")
    fig.update_yaxes(visible=False, range=[-(rows - 1) - 0.7, 0.7])
    n_drafted = len(nodes) - 1
    t = title or (f"Cycle {rec['cycle']}: prefill — the target reads the prompt and picks the first token"
                  if rec["cycle"] == 0 else
                  f"Cycle {rec['cycle']}: {n_drafted} drafted, {rec['accept_length']} accepted<br>"
                  f"+ 1 {rec['bonus_kind']} = {len(rec['new_tokens'])} new token(s)"
                  + _cut_note(rec) + _skip_note(rec))
    row_px = 50 if rows <= 16 else 34                 # big trees: tighter rows, smaller labels
    base_layout(fig, t, height=height or max(340, min(1700, 150 + row_px * rows)),
                legend=dict(orientation="h", yanchor="top", y=-0.02, x=0, font=dict(size=14)),
                hovermode="closest")
    fig.update_layout(margin=dict(l=20, r=20, t=85, b=50))
    return fig


def _mix(hex_colour: str, alpha: float) -> str:
    """The colour at opacity `alpha` over white, as an opaque colour (labels hide what is behind them)."""
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[k:k + 2], 16) for k in (0, 2, 4))
    m = lambda c: round(255 - alpha * (255 - c))  # noqa: E731
    return f"rgb({m(r)},{m(g)},{m(b)})"
