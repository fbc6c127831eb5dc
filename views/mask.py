"""The tree attention mask: which drafted token sees which (itself and its ancestors, plus the prefix)."""
from __future__ import annotations

import plotly.graph_objects as go

from eagle_core.decoding.tree import ancestry

from .common import ACCEPTED, as_dict, empty_figure, figure, layout_base, show_token


def ancestry_of(rec: dict) -> list[list[bool]]:
    """The tree attention pattern of a record: eagle_core.decoding.tree.ancestry, the same function the verify mask uses."""
    nodes = sorted(rec["nodes"], key=lambda n: n["index"])
    return ancestry([n["parent"] for n in nodes])


def mask_figure(rec, height: int | None = None, compact: bool = False) -> go.Figure:
    """`compact` (the walkthrough's step 3, beside its tree): shorter token labels, the colours said in the title
    instead of a colour bar, so that the cells keep the room."""
    rec = as_dict(rec)
    nodes = sorted(rec["nodes"], key=lambda n: n["index"])
    if len(nodes) < 2:
        return empty_figure("Prefill: no tree yet — the prompt is read with ordinary causal attention")
    m = ancestry_of(rec)
    labels = [f"{n['index']}:{show_token(n['text'], 6 if compact else 10)}" for n in nodes]
    n_nodes = len(nodes)
    # cell value: 0 hidden, 1 visible, 2 visible and both on the accepted path
    path = set([0] + rec["accepted_path"])
    z = [[(2 if (nodes[r]["index"] in path and nodes[c]["index"] in path) else 1) if m[r][c] else 0
          for c in range(len(nodes))] for r in range(len(nodes))]
    text = [[(f"{labels[r]} sees {labels[c]}" if m[r][c] else f"{labels[r]} does not see {labels[c]}")
             for c in range(len(nodes))] for r in range(len(nodes))]
    marks = [["✓" if v == 2 else "" for v in row] for row in z]   # the accepted path, not by colour alone
    heat = dict(
        type="heatmap", z=z, x=labels, y=labels, zmin=0, zmax=2, xgap=1, ygap=1, hovertext=text, hoverinfo="text",
        text=marks, texttemplate="%{text}", textfont=dict(size=11 if n_nodes > 20 else 14, color="white"),
        colorscale=[[0, "#f4f4f4"], [0.33, "#f4f4f4"], [0.34, "#5b7bd5"], [0.66, "#5b7bd5"],
                    [0.67, ACCEPTED], [1, ACCEPTED]],
        colorbar=dict(tickvals=[0.33, 1, 1.67], ticktext=["hidden", "visible", "✓ accepted path"], len=0.6),
        showscale=not compact, name="tree attention")
    n = len(nodes)
    tick = dict(size=12 if n > 20 else 14)
    sub = (f"row = query token, column = key (blue: visible; green ✓: both on the accepted path; grey: hidden); "
           f"every row also sees the {rec['prefix_len']} committed tokens" if compact else
           f"row = query token, column = key; every row also sees the {rec['prefix_len']} committed tokens")
    layout = layout_base(f"Tree attention: {n} tokens verified in one target pass<br><sup>{sub}</sup>",
                         height=height or max(380, min(1400, 160 + 20 * n)),
                         yaxis=dict(autorange="reversed", dtick=1, tickfont=tick, title=dict(text="query (drafted token)")),
                         xaxis=dict(tickangle=-60, dtick=1, tickfont=dict(tick), side="bottom", title=dict(text="key")))
    layout["title"]["font"]["size"] = 15
    return figure([heat], layout)
