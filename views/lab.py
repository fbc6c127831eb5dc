"""Paper-lab figures, drawn from the JSON `python -m eagle_core.lab` writes (or the same dict computed live).

No model code: every function takes plain dicts (eagle_core.lab's report or its parts) and returns a Plotly figure.
"""
from __future__ import annotations

import plotly.graph_objects as go

from .common import ACCEPTED, DRAFT_Q, FONT, TARGET_P


def _layout(fig, title: str, height: int = 380):
    fig.update_layout(title=dict(text=title, font=dict(size=15)), font=FONT, height=height,
                      margin=dict(l=60, r=20, t=60, b=50), plot_bgcolor="white", paper_bgcolor="white")
    fig.update_xaxes(showgrid=False, linecolor="#888")
    fig.update_yaxes(gridcolor="#eee", linecolor="#888")
    return fig


def position_heatmap(positions: dict, max_positions: int = 25, max_prompts: int = 20) -> go.Figure:
    """EAGLE-2 observation 1: acceptance rate per static-tree position (columns, by depth then rank) and per
    prompt (rows: the context), with the overall rate as the first row. Cells print the rate and n, so the
    figure reads without colour; empty cells (a position never reached under that prompt) stay blank."""
    labels = list(positions["overall"])[:max_positions]
    rows = [("all prompts", positions["overall"])] + list(positions["by_prompt"].items())[:max_prompts]
    z, text = [], []
    for _, table in rows:
        zr, tr = [], []
        for lab in labels:
            r, a = table.get(lab, [0, 0])
            zr.append(a / r if r else None)
            tr.append(f"{a / r:.2f}<br>n={r}" if r else "")
        z.append(zr)
        text.append(tr)
    fig = go.Figure(go.Heatmap(z=z, x=[f"P{lab}" for lab in labels], y=[name for name, _ in rows], text=text,
                               texttemplate="%{text}", textfont=dict(size=10), colorscale="Viridis", zmin=0,
                               zmax=1, colorbar=dict(title="accepted")))
    fig.update_yaxes(autorange="reversed", title="context (prompt)")
    fig.update_xaxes(title="tree position (sibling rank at each depth, 1 = the draft's favourite)")
    return _layout(fig, "Acceptance depends on the position and on the context", height=140 + 26 * len(rows))


def reliability(calibration: dict, errors: dict | None = None) -> go.Figure:
    """EAGLE-2 observation 2: bins of draft confidence against measured acceptance, with the diagonal.
    Two curves (solid: a node's own q; dashed, square markers: the path's cumulative probability)."""
    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(color="#888", dash="dot"),
                               name="perfect calibration"))
    styles = {"q": ("node's draft probability q", TARGET_P, "solid", "circle"),
              "path": ("path's cumulative draft probability", DRAFT_Q, "dash", "square")}
    for kind, curve in calibration.items():
        name, colour, dash, marker = styles.get(kind, (kind, "#444", "solid", "circle"))
        pts = [b for b in curve if b["n"]]
        if errors and errors.get(kind) is not None:
            name += f" (ECE {errors[kind]:.3f})"
        fig.add_trace(go.Scatter(x=[b["mean_confidence"] for b in pts], y=[b["acceptance"] for b in pts],
                                 mode="lines+markers", name=name, line=dict(color=colour, dash=dash),
                                 marker=dict(symbol=marker, size=[6 + min(14, b["n"] ** 0.5 / 3) for b in pts]),
                                 customdata=[b["n"] for b in pts],
                                 hovertemplate="confidence %{x:.2f}<br>accepted %{y:.2f}<br>n=%{customdata}"))
    fig.update_xaxes(title="draft confidence (bin mean)", range=[0, 1])
    fig.update_yaxes(title="measured acceptance rate", range=[0, 1.02])
    fig.update_layout(legend=dict(x=0.01, y=0.99))
    return _layout(fig, "The draft's confidence estimates acceptance")


def accept_histogram(hist: dict) -> go.Figure:
    """How many drafted tokens each cycle accepted, with alpha_k printed over the depth axis."""
    counts = hist.get("counts") or []
    total = sum(counts) or 1
    alpha = hist.get("alpha") or []
    fig = go.Figure(go.Bar(x=list(range(len(counts))), y=[c / total for c in counts], marker_color=ACCEPTED,
                           text=[f"{c / total:.0%}<br>({c})" for c in counts], textposition="outside",
                           name="share of cycles"))
    for k, a in enumerate(alpha):
        if a is not None:
            fig.add_annotation(x=k + 0.5, y=-0.12, yref="paper", showarrow=False, font=dict(size=11),
                               text=f"α{k}={a:.2f}")
    fig.update_xaxes(title="drafted tokens accepted in a cycle", dtick=1)
    fig.update_yaxes(title="share of cycles", tickformat=".0%")
    return _layout(fig, f"Accepted length per cycle ({hist.get('cycles', 0)} cycles)")


def compare_runs(runs: dict, title: str) -> go.Figure:
    """tau (bars) and ms per cycle (printed) of named runs: tree vs chain, or the head's input kinds."""
    names = list(runs)
    taus = [runs[n].get("tau") or 0.0 for n in names]
    ms = [runs[n].get("ms_per_cycle") for n in names]
    fig = go.Figure(go.Bar(x=names, y=taus, marker_color=[TARGET_P, DRAFT_Q, ACCEPTED, "#E69F00"][:len(names)],
                           marker_pattern_shape=["", "/", "x", "."][:len(names)],
                           text=[f"τ={t:.2f}" + (f"<br>{m:.0f} ms/cycle" if m else "") for t, m in zip(taus, ms)],
                           textposition="outside"))
    fig.update_yaxes(title="τ (tokens per target pass)", range=[0, max(taus + [1.0]) * 1.25])
    return _layout(fig, title)
