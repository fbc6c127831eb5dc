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


def position_heatmap(positions: dict, max_positions: int = 14, max_prompts: int = 12) -> go.Figure:
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
                               texttemplate="%{text}", textfont=dict(size=11), colorscale="Viridis", zmin=0,
                               zmax=1, colorbar=dict(title="accepted")))
    fig.update_yaxes(autorange="reversed", title="context (prompt)")
    fig.update_xaxes(title="tree position (sibling rank at each depth, 1 = the draft's favourite)")
    shown = f" (the first {len(labels)} of {len(positions['overall'])} positions)" \
        if len(positions["overall"]) > len(labels) else ""
    return _layout(fig, "Acceptance depends on the position and on the context" + shown, height=170 + 44 * len(rows))


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
    fig.update_yaxes(title="share of cycles", tickformat=".0%", range=[0, max([c / total for c in counts] + [0.1]) * 1.3])
    return _layout(fig, f"Accepted length per cycle ({hist.get('cycles', 0)} cycles)")


def compare_runs(runs: dict, title: str, plain: dict | None = None) -> go.Figure:
    """tau (bars), ms per cycle, speed against plain decoding (when given) and alpha per depth (printed) of named
    runs: tree vs chain, or the head's input kinds."""
    names = list(runs)
    taus = [runs[n].get("tau") or 0.0 for n in names]
    ms = [runs[n].get("ms_per_cycle") for n in names]
    extra = []
    for n in names:
        r, bits = runs[n], []
        if plain and plain.get("tokens_per_s") and r.get("tokens_per_s"):
            bits.append(f"{r['tokens_per_s'] / plain['tokens_per_s']:.2f}× plain")
        if r.get("alpha"):
            bits.append("α " + "/".join("-" if a is None else f"{a:.2f}" for a in r["alpha"]))
        extra.append("".join(f"<br>{b}" for b in bits))
    fig = go.Figure(go.Bar(x=names, y=taus, marker_color=[TARGET_P, DRAFT_Q, ACCEPTED, "#E69F00"][:len(names)],
                           marker_pattern_shape=["", "/", "x", "."][:len(names)],
                           text=[f"τ={t:.2f}" + (f"<br>{m:.0f} ms/cycle" if m else "") + e
                                 for t, m, e in zip(taus, ms, extra)],
                           textposition="outside"))
    fig.update_yaxes(title="τ (tokens per target pass)", range=[0, max(taus + [1.0]) * 1.7])
    return _layout(fig, title, height=420)


# ------------------------------------------------------------------------------------------ text around the figures
PAPER = {
    "inputs": "EAGLE §4.3.2, ablation “Inputs of draft models” (Vicuna-7B, MT-bench, fixed data): "
              "feature & shifted token, feature & unshifted token, feature only, token only.",
    "data": "EAGLE §4.3.3, ablation “Training data”: a fixed dataset (ShareGPT) against answers written by the "
            "target itself; the paper finds the target's own answers help only a little.",
    "tree": "EAGLE §4.3.1, ablation “Tree attention”: a tree against a chain with the same drafted tokens.",
    "positions": "EAGLE-2 §3, observation 1: the acceptance rate of a draft token depends on its position in the "
                 "tree (and, their figure shows, on the context).",
    "calibration": "EAGLE-2 §3, observation 2: the draft model's confidence score approximates the acceptance rate "
                   "well (their reliability figure lies close to the diagonal).",
}
PAPER_NUMBERS_NOTE = ("The papers' own numbers are not shown yet: they were not available offline when this tab "
                      "was built, and figures are never typed in from memory here.")


def data_table(phases: dict) -> str:
    """Markdown: each shipped head's training phases (tokens, held-out top-1, chain tau, data kind)."""
    lines = ["| head | phase | tokens seen | held-out top-1 | chain τ | data |", "| --- | --- | --- | --- | --- | --- |"]
    for head, ps in phases.items():
        for k, p in enumerate(ps, 1):
            f = lambda x, fmt: "-" if x is None else fmt.format(x)   # noqa: E731
            lines.append(f"| {head} | {k} | {f(p.get('tokens_seen'), '{:,}')} | {f(p.get('top1'), '{:.3f}')} | "
                         f"{f(p.get('tau_chain'), '{:.2f}')} | "
                         f"{'✚ the target’s own answers' if p.get('self_generated') else 'ShareGPT (fixed)'} |")
    return "\n".join(lines)


def sizes_table(sizes: dict | None) -> str:
    """Markdown: the CPU tree fit's candidates (nodes, depth, tau_fit, ms per cycle, modelled tokens/s)."""
    if not sizes:
        return "No tree fit found."
    best = max(sizes["candidates"], key=lambda c: c["tokens_per_s_model"])
    lines = ["| nodes | depth | τ (fitted) | ms per cycle | modelled tok/s |", "| --- | --- | --- | --- | --- |"]
    for c in sizes["candidates"]:
        mark = " ◀ fastest" if c is best else ""
        lines.append(f"| {c['nodes']} | {c['depth']} | {c['tau_fit']:.2f} | {c['cycle_ms']:.1f} | "
                     f"{c['tokens_per_s_model']:.1f}{mark} |")
    fitted = (sizes.get("fitted_on") or {}).get("prompts")
    return "\n".join(lines) + f"\n\nFitted on {fitted}, {sizes.get('date')}, on the CPU this app was built on."
