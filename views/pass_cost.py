"""What one target pass costs by the tokens it verifies: the benchmark's own table (eagle_core/bench/pass_cost.py),
drawn for walkthrough step 1.

Solid bars: one pass over R tokens, measured. Hatched bars: R one-token passes, the measured one-token pass times
R (what writing those R tokens one at a time costs). Both from the same table; nothing here is typed in.
"""
from __future__ import annotations

from .common import ACCEPTED, Figure, empty_figure, figure, layout_base

ONE_AT_A_TIME = "#9e9e9e"


def pass_cost_title(pc: dict) -> str:
    rows, ms = pc["rows"], pc["plan_ms"]
    return (f"One target pass: {ms[0]:.1f} ms for {rows[0]} token, {ms[-1]:.1f} ms for {rows[-1]} "
            f"({ms[-1] / ms[0]:.2f}× one pass, not {rows[-1] / rows[0]:.0f}×)")


def pass_cost_sentence(pc: dict, source: str) -> str:
    """The figure in words, from the table."""
    rows, ms = pc["rows"], pc["plan_ms"]
    return (f"{source}: a pass over {rows[-1]} tokens took {ms[-1]:.1f} ms, {ms[-1] / ms[0]:.2f} times the "
            f"{ms[0]:.1f} ms of a one-token pass; writing those {rows[-1]} tokens one at a time takes "
            f"{rows[-1]} passes, {rows[-1] * ms[0]:.0f} ms (best of {pc.get('reps', '?')} over a "
            f"{pc.get('prefix', '?')}-token prefix, {pc.get('numerics', '?')}).")


def pass_cost_figure(pc: dict | None, height: int = 420) -> Figure:
    if not pc or not pc.get("rows") or pc["rows"][0] != 1:
        return empty_figure("No pass-cost table: run the benchmark (python -m eagle_core.bench.sets)")
    rows, ms = pc["rows"], pc["plan_ms"]
    x = [str(r) for r in rows]
    serial = [r * ms[0] for r in rows]
    data = [
        dict(type="bar", name="one pass over R tokens (measured)", x=x, y=ms, marker=dict(color=ACCEPTED),
             text=[f"{m:.0f}" for m in ms], textposition="outside",
             hovertemplate="%{x} tokens in one pass: %{y:.1f} ms<extra></extra>"),
        dict(type="bar", name="R one-token passes (token by token)", x=x, y=serial,
             marker=dict(color=ONE_AT_A_TIME, pattern=dict(shape="/")),
             text=[f"{m:.0f}" for m in serial], textposition="outside",
             hovertemplate="%{x} one-token passes: %{y:.0f} ms<extra></extra>"),
    ]
    layout = layout_base(
        pass_cost_title(pc), height=height, barmode="group", bargap=0.25,
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0, font=dict(size=14)),
        margin=dict(t=96, b=60),
        xaxis=dict(title=dict(text="tokens per pass (R)"), type="category", automargin=True),
        yaxis=dict(title=dict(text="ms"), rangemode="tozero", range=[0, max(serial) * 1.15], automargin=True,
                   gridcolor="#eee"))
    return figure(data, layout)
