"""One cycle as it happens, in beats: the head drafts level by level, the target scores the whole tree in one
pass, the accepted path lights up and the target's own token appears. The app plays them (Play / Pause / step);
the static views stay for inspection.
"""
from __future__ import annotations

import plotly.graph_objects as go

from .common import DRAFT_Q, TARGET_P, as_dict, esc, figure, layout_base, pct, show_token
from .tree import depth_axes, tree_figure, tree_graph, tree_layout


def beat_count(rec) -> int:
    """Draft levels + the verify beat + the accept beat (a prefill has one beat)."""
    rec = as_dict(rec)
    if not rec or rec["cycle"] == 0 or len(rec["nodes"]) < 2:
        return 1
    return max(n["depth"] for n in rec["nodes"]) + 2


def beat_phase(rec: dict, beat: int) -> tuple[str, int, int]:
    """Which part of the cycle a beat shows: ("prefill" | "draft" | "verify" | "accept", draft level, tree depth)."""
    n = beat_count(rec)
    if n == 1:
        return "prefill", 0, 0
    depth = n - 2
    if beat < depth:
        return "draft", beat + 1, depth
    return ("verify" if beat == depth else "accept"), 0, depth


def beat_caption(rec, beat: int) -> str:
    """One plain sentence for the beat."""
    rec = as_dict(rec)
    phase, d, depth = beat_phase(rec, beat)
    if phase == "prefill":
        return "Prefill: the target reads the prompt in one pass and picks the first token; no tree yet."
    at = f"Beat {beat + 1} of {beat_count(rec)}"      # the one counter: the figure's title counts the same way
    if phase == "draft":
        k = sum(1 for x in rec["nodes"] if x["depth"] == d)
        return (f"{at} · Draft, level {d} of {depth}: the small head proposes {k} token{'s' if k != 1 else ''} "
                f"from its own predicted features (purple: its probability q). The big model has not run yet.")
    if phase == "verify":
        return (f"{at} · Verify: the target reads all {len(rec['nodes']) - 1} drafted tokens in ONE forward pass "
                f"(each sees only its ancestors) and scores every one (blue: its probability p).")
    kind = rec["bonus_kind"]
    return (f"{at} · Accept: walking from the root, the target keeps {rec['accept_length']} drafted token"
            f"{'s' if rec['accept_length'] != 1 else ''} (✓), then adds its own {kind} token "
            f"({'★' if kind == 'bonus' else '◆'}): {len(rec['new_tokens'])} new token(s) for one target pass.")


def beat_label(rec, beat: int) -> str:
    """A short name of the beat for the figure's title (the sentence, beat_caption, is the text beside it)."""
    rec = as_dict(rec)
    phase, d, depth = beat_phase(rec, beat)
    if phase == "draft":
        return f"Draft, level {d} of {depth}"
    if phase == "verify":
        return "Verify: one target pass"
    if phase == "accept":
        return f"Accept: {rec['accept_length']} kept + 1 {rec['bonus_kind']}"
    return "prefill"


def beat_title(rec, beat: int) -> str:
    rec = as_dict(rec)
    return f"Cycle {rec['cycle']} · beat {beat + 1}/{beat_count(rec)} · {beat_label(rec, beat)}"


def beat_figure(rec, beat: int, height: int | None = None) -> go.Figure:
    """The tree at this beat. The last beat is the full tree view (statuses, glyphs, bonus). The title names the
    beat in a few words; its sentence (beat_caption) is shown once, beside the figure, not repeated in it."""
    rec = as_dict(rec)
    n_beats = beat_count(rec)
    beat = max(0, min(int(beat), n_beats - 1))
    if beat == n_beats - 1:
        return tree_figure(rec, height=height, title=beat_title(rec, beat))
    depth_shown = beat + 1 if beat < n_beats - 2 else n_beats - 2
    verify = beat == n_beats - 2
    g = tree_graph(rec)
    pos = tree_layout(g)
    nodes = {x["index"]: x for x in rec["nodes"]}
    shown = [i for i, x in nodes.items() if x["depth"] <= depth_shown]
    ex, ey = [], []
    for u, v in g.edges:
        if v in shown:
            ex += [pos[u][0], pos[v][0], None]
            ey += [pos[u][1], pos[v][1], None]
    edges = dict(type="scatter", x=ex, y=ey, mode="lines", line=dict(color="#c9c9c9", width=2, dash="dot"),
                 hoverinfo="skip", showlegend=False, name="draft edges")
    labels = []
    for i in shown:
        x = nodes[i]
        if i == 0:
            text, bg, border = esc(show_token(x["text"])), "#0072B2", "#0072B2"
        elif verify:
            text = f"{esc(show_token(x['text'], 10))}<br>p {pct(x['p'])}"
            bg, border = "#dbe9f6", TARGET_P
        else:
            text = f"{esc(show_token(x['text'], 10))}<br>q {pct(x['q'])}"
            bg, border = "#f3dcea", DRAFT_Q
        new = (not verify and x["depth"] == depth_shown) or (verify and i > 0)
        labels.append(dict(x=pos[i][0], y=pos[i][1], text=text, showarrow=False,
                           font=dict(size=16, color="white" if i == 0 else "#111"), bgcolor=bg, bordercolor=border,
                           borderwidth=3 if new else 1, borderpad=4, name=f"node-{i}"))
    shapes = []
    if verify:   # one pass: a bracket over the whole tree
        ys = [pos[i][1] for i in shown]
        shapes.append(dict(type="rect", x0=0.5, x1=max(pos[i][0] for i in shown) + 0.5, y0=min(ys) - 0.55,
                           y1=max(ys) + 0.55, line=dict(color=TARGET_P, width=3, dash="dash"),
                           fillcolor="rgba(0,0,0,0)"))
    leaves = max(1, sum(1 for v in g if g.out_degree(v) == 0))
    maxd = max(p[0] for p in pos.values())   # the bonus column comes with the last beat (the full tree view)
    layout = layout_base(beat_title(rec, beat), height=height or max(340, min(1700, 150 + 50 * (leaves + 1))),
                         annotations=labels, margin=dict(l=20, r=20, t=70, b=30),
                         **depth_axes(maxd, maxd + 0.6, -leaves - 0.3))
    if shapes:
        layout["shapes"] = shapes
    return figure([edges], layout)
