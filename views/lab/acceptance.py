"""EAGLE-2's observations, measured: acceptance by tree position and by prompt, the draft's confidence against
acceptance, and how many drafted tokens a cycle accepts (the lab's run and the benchmark's)."""
from __future__ import annotations

import plotly.graph_objects as go

from eagle_core.bench.metrics import count_shares

from ..common import ACCEPTED, DRAFT_Q, TARGET_P, esc
from .style import KIND_STYLES, TEXT_PX, lab_layout, short_prompt, sub


def row_names(ids, names: dict | None) -> list[str]:
    """The heatmap's row names: each prompt's short text (names: {prompt id: text}), its id where the text is not
    known; made unique (two prompts may start alike) by their ids."""
    names = names or {}
    out = [short_prompt(names[i]) if names.get(i) else str(i) for i in ids]
    return [f"{n} ({i})" if names.get(i) and out.count(n) > 1 else n for n, i in zip(out, ids)]


def position_heatmap(positions: dict, max_positions: int = 14, max_prompts: int = 12,
                     names: dict | None = None) -> go.Figure:
    """EAGLE-2 observation 1: acceptance rate per static-tree position (columns, by depth then rank) and per
    prompt (rows: the context, named by the prompt's short text when `names` gives it), with the overall rate as
    the first row. Cells print the rate and n, so the figure reads without colour; empty cells (a position never
    reached under that prompt) stay blank."""
    labels = list(positions["overall"])[:max_positions]
    ids = list(positions["by_prompt"])[:max_prompts]
    rows = [("all prompts", positions["overall"])] + list(zip(row_names(ids, names),
                                                              [positions["by_prompt"][i] for i in ids]))
    z, text = [], []
    for _, table in rows:
        zr, tr = [], []
        for lab in labels:
            r, a = table.get(lab, [0, 0])
            zr.append(a / r if r else None)
            tr.append(f"{a / r:.2f}<br>n={r}" if r else "")
        z.append(zr)
        text.append(tr)
    full = ["all prompts"] + [esc(str((names or {}).get(i) or i))[:160] for i in ids]
    fig = go.Figure(go.Heatmap(z=z, x=[f"P{lab}" for lab in labels], y=[name for name, _ in rows], text=text,
                               texttemplate="%{text}", textfont=dict(size=TEXT_PX), colorscale="Viridis",
                               zmin=0, zmax=1, colorbar=dict(title="accepted"),
                               customdata=[[f] * len(labels) for f in full],
                               hovertemplate="%{customdata}<br>%{x}: %{text}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title="context (prompt)")
    fig.update_xaxes(title="tree position (sibling rank at each depth, 1 = the draft's favourite)")
    shown = f" (the first {len(labels)} of {len(positions['overall'])} positions)" \
        if len(positions["overall"]) > len(labels) else ""
    return lab_layout(fig, "Acceptance depends on the position and on the context" + shown, height=190 + 50 * len(rows))


def reliability(calibration: dict, errors: dict | None = None, paper: list | None = None) -> go.Figure:
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
    if paper:
        fig.add_trace(go.Scatter(x=[p["x"] for p in paper], y=[p["acceptance"] for p in paper], mode="markers+text",
                                 marker=dict(symbol="diamond-open", size=14, color="#222", line=dict(width=2)),
                                 text=[f"paper: {p['confidence']} → {p['acceptance']:.2f}" for p in paper],
                                 textposition=["top right", "bottom left"], name="EAGLE-2 Fig. 6 (Vicuna 7B)"))
    fig.update_xaxes(title="draft confidence (bin mean)", range=[0, 1])
    fig.update_yaxes(title="measured acceptance rate", range=[0, 1.02])
    fig.update_layout(legend=dict(x=0.01, y=0.99))
    return lab_layout(fig, "The draft's confidence estimates acceptance")


def positions_finding(positions: dict, errors: dict | None = None) -> str:
    """One sentence on the EAGLE-2 panels: the rate by sibling rank, its spread across prompts, calibration."""
    overall = positions.get("overall") or {}
    firsts = [(lab, r) for lab, r in overall.items() if "-" not in lab and r[0]]
    if not firsts:
        return ""
    ranks = ", ".join(f"P{lab} {a / n:.2f}" for lab, (n, a) in firsts[:4])
    lab1 = firsts[0][0]
    per = [v[lab1][1] / v[lab1][0] for v in (positions.get("by_prompt") or {}).values() if v.get(lab1, [0])[0] >= 10]
    spread = (f"; P{lab1} ranges from {min(per):.2f} to {max(per):.2f} across the prompts with 10 or more cycles "
              f"(the context matters too)" if len(per) > 1 else "")
    ece = ""
    if errors and errors.get("q") is not None:
        ece = (f" The draft's q is a calibrated estimate of acceptance: the mean gap between confidence and "
               f"acceptance is {errors['q']:.3f} (path probability: {errors.get('path') or 0:.3f}).")
    return f"**What it shows:** the acceptance rate falls with the sibling rank ({ranks}){spread}.{ece}"


def accept_histogram(hist: dict, what: str = "") -> go.Figure:
    """How many drafted tokens each cycle accepted, with alpha_k printed under the depth axis; `what` names the
    configuration the cycles came from."""
    counts = hist.get("counts") or []
    shares = count_shares(counts)
    alpha = hist.get("alpha") or []
    fig = go.Figure(go.Bar(x=list(range(len(counts))), y=shares, marker_color=ACCEPTED,
                           text=[f"{x:.0%}<br>({c})" for x, c in zip(shares, counts)], textposition="outside",
                           name="share of cycles"))
    # the α_k line under the depth axis, in the axis title: one line the page wraps to the figure's width (one
    # label per bar ran into its neighbours and the tick labels on a narrow figure and in presenter mode)
    alphas = " · ".join(f"α{k}={a:.2f}" for k, a in enumerate(alpha) if a is not None)
    fig.update_xaxes(title="drafted tokens accepted in a cycle" + (f"<br>{alphas}" if alphas else ""), dtick=1)
    fig.update_traces(cliponaxis=False)   # a tall bar's label above it is not cut by the plot's top
    fig.update_yaxes(title="share of cycles", tickformat=".0%", range=[0, max(shares + [0.1]) * 1.3])
    return lab_layout(fig, f"Accepted length per cycle ({hist.get('cycles', 0)} cycles)" + (sub(what) if what else ""))


def bench_histograms(sets: dict) -> go.Figure:
    """The benchmark's own accepted-length histograms, one bar group per prompt set ({set: {"counts", "alpha",
    "method"}} from the benchmark JSONs), each set with its own colour and hatch."""
    fig = go.Figure()
    width = max((len(v["counts"]) for v in sets.values()), default=0)
    for k, (name, v) in enumerate(sets.items()):
        colour, pattern = KIND_STYLES[k % len(KIND_STYLES)]
        total, shares = sum(v["counts"]) or 1, count_shares(v["counts"])
        alpha = " ".join(f"α{d}={a:.2f}" for d, a in enumerate(v.get("alpha") or []) if a is not None)
        fig.add_trace(go.Bar(x=list(range(len(v["counts"]))), y=shares,
                             name=f"{name} ({total} cycles; {alpha})", marker_color=colour,
                             marker_pattern_shape=pattern, text=[f"{x:.0%}" for x in shares],
                             textposition="outside", cliponaxis=False))
    fig.update_xaxes(title="drafted tokens accepted in a cycle", dtick=1, range=[-0.5, width - 0.5])
    fig.update_yaxes(title="share of cycles", tickformat=".0%", range=[0, 1])
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.25, x=0, font=dict(size=TEXT_PX - 2)))
    method = next((v.get("method") for v in sets.values()), "")
    fig = lab_layout(fig, f"The benchmark: accepted length per cycle ({method}, per prompt set)", height=440)
    fig.update_layout(margin=dict(b=120))
    return fig
