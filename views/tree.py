"""The draft tree of one cycle: root = last committed token, nodes coloured by verification outcome."""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import plotly.graph_objects as go

from .common import (ACCEPTED, BONUS, CORRECTION, KIND_GLYPHS, STATUS_COLOURS, STATUS_GLYPHS, STATUS_NAMES,
                     as_dict, esc, figure, layout_base, pct, show_token)
from eagle_core.model.token_bytes import piece_bytes, piece_label

from .rules import rule_sentence, source_sentence

# the nodes are drawn as boxes (their labels): the legend's markers are boxes too, one shape per status (issue 38.5)
MARKERS = {"root": "square-dot", "accepted": "square", "rejected": "square-x", "not_reached": "square-open"}


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


def piece_labels(rec: dict) -> tuple[dict[int, str], str | None]:
    """The tokens that hold only part of a character (byte-level BPE splits an emoji or a Chinese character over
    tokens), said with the character they build: {node: "🦅 (bytes 1–2 of 4)"} and the target's token's label (None:
    whole characters). A token's bytes are read after its path's (the root's and its ancestors') and before the
    tokens that follow it: along the accepted path and then the target's token, elsewhere the first-drafted child."""
    nodes = {n["index"]: n for n in rec["nodes"]}
    own = {i: piece_bytes(n["text"]) for i, n in nodes.items()}
    bonus = piece_bytes(rec.get("bonus_text") or "")
    path = [0] + list(rec.get("accepted_path") or [])
    kids: dict[int, list[int]] = {}
    for n in rec["nodes"]:
        if n["parent"] >= 0:
            kids.setdefault(n["parent"], []).append(n["index"])

    def before(i: int) -> bytes:
        out = b""
        while nodes[i]["parent"] >= 0:
            i = nodes[i]["parent"]
            out = own[i] + out
        return out

    def after(i: int) -> bytes:
        out = b""
        while len(out) < 3:                   # a character is at most 4 bytes: 3 after its first are enough
            if i in path:
                k = path.index(i)
                if k + 1 == len(path):
                    return out + bonus
                i = path[k + 1]
            elif kids.get(i):
                i = min(kids[i])
            else:
                break
            out += own[i]
        return out

    labels = {i: lab for i in nodes if (lab := piece_label(before(i), own[i], after(i)))}
    return labels, piece_label(before(path[-1]) + own[path[-1]], bonus) if path[-1] in nodes else None


def _hover(n: dict, sampling: bool, piece: str | None = None) -> str:
    lines = [f"<b>{esc(show_token(n['text'], 30))}</b>  (node {n['index']}, depth {n['depth']})",
             f"status: {STATUS_NAMES.get(n['status'], n['status'])}"]
    if piece:
        lines.insert(1, f"part of a character: {esc(piece)}")
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


@dataclass
class _Tree:
    """What the parts of a cycle's tree figure share: the record, its nodes and their places, the accepted path, and
    where the target's own token (bonus / correction) goes."""
    rec: dict
    g: nx.DiGraph
    pos: dict[int, tuple[float, float]]
    nodes: dict[int, dict]
    path: set[int]
    last: int                  # the accepted path's last node (the root when nothing was accepted)
    sampling: bool
    leaves: int
    bx: float                  # the bonus / correction token's place: right of `last`, on its own row below
    by: float
    kind: str                  # "bonus", "correction" or "first token"
    colour: str
    pieces: dict[int, str]     # nodes that hold part of a character: the character they build (piece_labels)
    bonus_piece: str | None

    @property
    def rows(self) -> int:
        return self.leaves + (1 if len(self.nodes) > 1 else 0)


def _place(rec: dict) -> _Tree:
    """The tree's layout: nodes by depth (x) and leaf order (y), the target's token on a row of its own."""
    g = tree_graph(rec)
    pos = tree_layout(g)
    nodes = {n["index"]: n for n in rec["nodes"]}
    last = rec["accepted_path"][-1] if rec["accepted_path"] else 0
    sampling = rec.get("temperature", 0) > 0 or any(n.get("accept_prob") is not None for n in rec["nodes"])
    leaves = max(1, sum(1 for v in g if g.out_degree(v) == 0))
    kind = rec["bonus_kind"] if rec["cycle"] > 0 else "first token"
    pieces, bonus_piece = piece_labels(rec)
    return _Tree(rec, g, pos, nodes, set(rec["accepted_path"]), last, sampling, leaves, bx=pos[last][0] + 1,
                 by=-leaves if len(nodes) > 1 else pos[last][1], kind=kind,
                 colour=CORRECTION if kind == "correction" else BONUS, pieces=pieces, bonus_piece=bonus_piece)


def _edges(t: _Tree) -> list[dict]:
    """The draft edges dotted, the accepted path bold, and the dotted edge to the target's own token."""
    ex, ey, ax, ay = [], [], [], []
    for u, v in t.g.edges:
        (x0, y0), (x1, y1) = t.pos[u], t.pos[v]
        on_path = v in t.path and (u == 0 or u in t.path)
        xs, ys = (ax, ay) if on_path else (ex, ey)
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    return [dict(type="scatter", x=ex, y=ey, mode="lines", line=dict(color="#c9c9c9", width=2, dash="dot"),
                 hoverinfo="skip", name="draft edges", showlegend=False),
            dict(type="scatter", x=ax, y=ay, mode="lines", line=dict(color=ACCEPTED, width=7),
                 hoverinfo="skip", name="accepted path"),
            dict(type="scatter", x=[t.pos[t.last][0], t.bx], y=[t.pos[t.last][1], t.by], mode="lines",
                 line=dict(color=t.colour, width=4, dash="dot"), hoverinfo="skip", showlegend=False,
                 name="bonus edge")]


def _bonus_hover(t: _Tree) -> str:
    rec = t.rec
    piece = f"<br>part of a character: {esc(t.bonus_piece)}" if t.bonus_piece else ""
    return (f"<b>{esc(show_token(rec['bonus_text'], 30))}</b><br>{t.kind}: the target's own token{piece}"
            f"<br>{source_sentence(rec)}")


def _markers(t: _Tree) -> list[dict]:
    """One marker trace per status (the legend, hover and click targets), then the target's token as a star /
    diamond."""
    nodes, pos, out = t.nodes, t.pos, []
    for status in ("root", "accepted", "rejected", "not_reached"):
        ids = [i for i, n in nodes.items() if n["status"] == status]
        out.append(dict(
            type="scatter", x=[pos[i][0] for i in ids], y=[pos[i][1] for i in ids], mode="markers",
            marker=dict(symbol=MARKERS[status], size=14, color=STATUS_COLOURS[status],
                        opacity=[1.0 if status == "root" else 0.3 + 0.7 * nodes[i]["q"] for i in ids],
                        line=dict(width=0)),
            hovertext=[_hover(nodes[i], t.sampling, t.pieces.get(i)) for i in ids], hoverinfo="text",
            name=STATUS_NAMES[status],
            customdata=ids, visible=True if ids else "legendonly"))
    correction = t.kind == "correction"
    out.append(dict(type="scatter", x=[t.bx], y=[t.by], mode="markers",
                    marker=dict(symbol="diamond" if correction else "star", size=30, color=t.colour,
                                line=dict(width=1, color="white")),
                    hovertext=[_bonus_hover(t)], hoverinfo="text",
                    name="◆ correction (target's token)" if correction else "★ bonus (target's token)"))
    return out


def _labels(t: _Tree) -> list[dict]:
    """Each node's token as a box over its marker (the click targets, node-<i>), and the target's token's box."""
    label_size = 17 if t.leaves <= 16 else 14
    labels = []
    for i, n in t.nodes.items():
        x, y = t.pos[i]
        col = STATUS_COLOURS[n["status"]]
        alpha = 1.0 if n["status"] in ("root", "accepted") else 0.35 + 0.65 * n["q"]
        glyph = STATUS_GLYPHS.get(n["status"], "")
        # a piece of a character says which character it builds (its own bytes are in the hover)
        token = show_token(t.pieces[i], 32) if i in t.pieces else show_token(n["text"])
        labels.append(dict(x=x, y=y, text=(glyph + " " if glyph else "") + esc(token), showarrow=False,
                           font=dict(size=label_size, color="white" if n["status"] == "root" else "#111"),
                           bgcolor=_mix(col, alpha), bordercolor=col,
                           borderwidth=3 if i in t.path or i == 0 else 1, borderpad=4,
                           hovertext=_hover(n, t.sampling, t.pieces.get(i)), name=f"node-{i}",
                           captureevents=i > 0))
    labels.append(dict(x=t.bx, y=t.by,
                       text=f"{KIND_GLYPHS.get(t.kind, '★')} <b>"
                            f"{esc(show_token(t.bonus_piece, 32) if t.bonus_piece else show_token(t.rec['bonus_text']))}"
                            f"</b> ({t.kind})",
                       showarrow=False, font=dict(size=17, color="#111"), bgcolor=t.colour, bordercolor="#333",
                       borderwidth=2, borderpad=4, hovertext=_bonus_hover(t), xshift=0))
    return labels


def depth_axes(maxd: float, right: float, bottom: float) -> dict:
    """Depth columns named on top (root, depth 1, ...) from -0.6 to `right`; no y axis, down to `bottom`."""
    return dict(xaxis=dict(range=[-0.6, right], tickmode="array", tickvals=list(range(int(maxd) + 1)),
                           ticktext=["root"] + [f"depth {d}" for d in range(1, int(maxd) + 1)], showgrid=False,
                           zeroline=False, side="top"),
                yaxis=dict(visible=False, range=[bottom, 0.7]))


def _title(t: _Tree) -> str:
    rec = t.rec
    if rec["cycle"] == 0:
        return f"Cycle {rec['cycle']}: prefill — the target reads the prompt and picks the first token"
    return (f"Cycle {rec['cycle']}: {len(t.nodes) - 1} drafted, {rec['accept_length']} accepted<br>"
            f"+ 1 {rec['bonus_kind']} = {len(rec['new_tokens'])} new token(s)" + _cut_note(rec) + _skip_note(rec)
            + _given_note(rec))


def _given_note(rec) -> str:
    """A class whose teacher sized the trees by the load (serving/rounds.py): what this cycle drafted instead."""
    given = rec.get("tree_given")
    return f"<br><sup>⚖ The class's load gave this cycle {given}</sup>" if given else ""


def tree_figure(rec, height: int | None = None, title: str | None = None) -> go.Figure:
    """Plotly figure of a cycle's draft tree (horizontal: the root on the left, depth to the right)."""
    t = _place(as_dict(rec))
    maxd = max([p[0] for p in t.pos.values()] + [t.bx])
    row_px = 50 if t.rows <= 16 else 34                 # big trees: tighter rows, smaller labels
    # the bonus/correction box sits right of the deepest column: room for its label, so it is never clipped
    layout = layout_base(title or _title(t), height=height or max(340, min(1700, 150 + row_px * t.rows)),
                         legend=dict(orientation="h", yanchor="top", y=-0.02, x=0, font=dict(size=14)),
                         hovermode="closest", margin=dict(l=20, r=20, t=85, b=50), annotations=_labels(t),
                         **depth_axes(maxd, maxd + (1.3 if t.bx >= maxd else 0.6), -(t.rows - 1) - 0.7))
    return figure(_edges(t) + _markers(t), layout)


def _mix(hex_colour: str, alpha: float) -> str:
    """The colour at opacity `alpha` over white, as an opaque colour (labels hide what is behind them)."""
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[k:k + 2], 16) for k in (0, 2, 4))
    m = lambda c: round(255 - alpha * (255 - c))  # noqa: E731
    return f"rgb({m(r)},{m(g)},{m(b)})"
