"""Statistics over cycles: tokens per cycle, running tau, accepted-length histogram, forwards vs tokens, and
the Race (EAGLE vs plain decoding through the same engine)."""
from __future__ import annotations

import plotly.graph_objects as go

from eagle_core.bench.metrics import cycle_seconds, length_counts, tokens_per_forward, tokens_per_second

from .common import (ACCEPTED, BONUS, DRAFT_Q, TARGET_P, as_dicts, axis_names, empty_figure, esc, figure,
                     grid_axes, grid_layout, layout_base, merge)


def summary(records) -> dict:
    """Totals of a run from its records: tokens, target forwards, seconds, tau, tokens/s."""
    recs = as_dicts(records)
    if not recs:
        return dict(tokens=0, forwards=0, seconds=0.0, tau=0.0, tokens_per_s=0.0, cycles=0)
    secs = sum(cycle_seconds(r) for r in recs)
    tok, fw = recs[-1]["total_new_tokens"], recs[-1]["target_forwards"]
    return dict(tokens=tok, forwards=fw, seconds=secs, tau=tokens_per_forward(tok, max(1, fw)),
                tokens_per_s=tokens_per_second(tok, secs) or 0.0, cycles=len(recs),
                draft_seconds=sum(r["draft_seconds"] for r in recs),
                verify_seconds=sum(r["verify_seconds"] for r in recs))


def stats_html(records, upto: int | None = None, seen: list | None = None) -> str:
    """The cards. `seen` = [tokens, wall seconds] that Runs of this generation delivered to the page (waiting
    for other sessions and drawing included); the engine's own rate counts model time only."""
    recs = as_dicts(records)
    if upto is not None:
        recs = [r for r in recs if r["cycle"] <= upto]
    if not recs:
        return "<div class='el-cards'><div class='el-card'><b>–</b><span>no cycles yet</span></div></div>"
    r = recs[-1]
    s = summary(recs)
    cards = [(str(len(r["new_tokens"])), f"new tokens in cycle {r['cycle']}"),
             (str(r["accept_length"]), "drafted tokens accepted"),
             (f"{s['tau']:.2f}", "τ: tokens per target pass"),
             (f"{s['tokens']} / {s['forwards']}", "tokens / target passes"),
             (f"{seen[0] / seen[1]:.1f}" if seen and seen[0] and seen[1] > 0 else "–",
              "tokens/s on this page (Run, wall clock: waiting + drawing)"),
             (f"{s['tokens_per_s']:.1f}", "tokens/s of the engine (model time only)"),
             (f"{1000 * (r['draft_seconds']):.0f}+{1000 * r['verify_seconds']:.0f} ms", "draft + verify time")]
    cards += [shared_pass_card(r)] if (r.get("pass_sessions") or 1) > 1 else []
    return "<div class='el-cards'>" + "".join(
        f"<div class='el-card'><b>{esc(v)}</b><span>{esc(k)}</span></div>" for v, k in cards) + "</div>"


def shared_pass_card(r: dict) -> tuple[str, str]:
    """A classroom round (eagle_core/decoding/batch.py): how many students' trees this cycle's target pass verified,
    and the tree this student got (their own; or, where the teacher sized the trees by the load, what the round
    gave, which the record names)."""
    tree = max(len(r.get("nodes") or []) - 1, 0)
    mine = f"your tree: {tree} drafted token{'s' if tree != 1 else ''}" if tree else "your cycle drafted no tree"
    if r.get("tree_given"):
        mine = f"the class's load gave you {r['tree_given']}"
    whole = ""
    if r.get("round_verify_seconds"):
        whole = (f"; your times are your share of the round's {1000 * r.get('round_draft_seconds', 0):.0f}"
                 f"+{1000 * r['round_verify_seconds']:.0f} ms")
    return (f"{r['pass_sessions']} students",
            f"in this cycle's one target pass ({r.get('pass_rows') or 0} tokens); {mine}{whole}")


CSS = """
.el-cards {display: flex; flex-wrap: wrap; gap: 8px; margin: 2px 0;}
.el-card {flex: 1 1 110px; background: #f5f7fb; border: 1px solid #dde3ee; border-radius: 10px; padding: 5px 10px;}
.el-card b {display: block; font-size: 22px; color: #1c2b5a; white-space: nowrap;}
.el-card span {font-size: 13.5px; color: #444; line-height: 1.2; display: block;}
"""


def stats_figure(records, upto: int | None = None, height: int = 600) -> go.Figure:
    recs = as_dicts(records)
    if upto is not None:
        recs = [r for r in recs if r["cycle"] <= upto]
    if not recs:
        return empty_figure("Statistics appear after the first cycle")
    layout = grid_layout(2, 2, vertical_spacing=0.26, horizontal_spacing=0.12, subplot_titles=[
        "New tokens per cycle", "Running τ (tokens per target pass)", "Accepted lengths (drafted tokens kept)",
        "Target passes vs tokens generated"])
    cyc = [r["cycle"] for r in recs]
    acc = [r["accept_length"] if r["cycle"] > 0 else 0 for r in recs]
    extra = [len(r["new_tokens"]) - a for r, a in zip(recs, acc)]
    counts = length_counts((r["accept_length"] for r in recs if r["cycle"] > 0), size=2)
    fw = [r["target_forwards"] for r in recs]
    at = {(r, c): grid_axes(r, c, 2) for r in (1, 2) for c in (1, 2)}
    data = [
        dict(type="bar", x=cyc, y=acc, name="accepted drafted tokens", marker=dict(color=ACCEPTED), **at[1, 1]),
        dict(type="bar", x=cyc, y=extra, name="target's bonus / correction (hatched)",
             marker=dict(color=BONUS, pattern=dict(shape="x")), legendgroup="b", **at[1, 1]),
        dict(type="scatter", x=cyc, y=[r["tau"] for r in recs], mode="lines+markers", name="running τ",
             line=dict(color=DRAFT_Q, width=3), **at[1, 2]),
        dict(type="scatter", x=[cyc[0], cyc[-1]], y=[1, 1], mode="lines", name="plain decoding (τ = 1)",
             line=dict(color="#999", dash="dash"), **at[1, 2]),
        dict(type="bar", x=list(range(len(counts))), y=counts, name="cycles with this accepted length",
             marker=dict(color="#5b7bd5"), **at[2, 1]),
        dict(type="scatter", x=fw, y=[r["total_new_tokens"] for r in recs], mode="lines+markers",
             name="EAGLE tokens", line=dict(color=TARGET_P, width=3), **at[2, 2]),
        dict(type="scatter", x=[0, fw[-1]], y=[0, fw[-1]], mode="lines", name="plain: 1 token per pass",
             line=dict(color="#999", dash="dash"), **at[2, 2])]
    for axis, title in zip(("xaxis", "xaxis2", "xaxis3", "xaxis4"),
                           ("cycle", "cycle", "accepted length", "target forward passes")):
        layout[axis]["title"] = dict(text=title)
    layout["xaxis3"]["dtick"] = 1
    for axis in axis_names(layout, "y"):
        layout[axis]["gridcolor"] = "#eee"
    merge(layout, layout_base(None, height=height, barmode="stack", margin=dict(l=50, r=20, t=40, b=100),
                              legend=dict(orientation="h", y=-0.16, x=0, font=dict(size=13))))
    return figure(data, layout)


def race_figure(eagle_records, plain_records, height: int = 380, recorded: str = "") -> go.Figure:
    """Side by side: EAGLE vs plain decoding (draft='vanilla') of the same prompt, measured. `recorded`: where a
    recorded Race comes from; its title then says it is recorded, not measured on this server now."""
    e, v = summary(eagle_records), summary(plain_records)
    if not e["tokens"] or not v["tokens"]:
        return empty_figure("Press Race: the same prompt is decoded plainly and with EAGLE, and timed")
    layout = grid_layout(1, 3, subplot_titles=["tokens per second", "target forward passes", "wall time (s)"],
                         horizontal_spacing=0.1)
    names = ["plain decoding", "EAGLE"]
    cols = ["#9e9e9e", ACCEPTED]
    data = []
    for col, key, fmt in ((1, "tokens_per_s", "{:.1f}"), (2, "forwards", "{:d}"), (3, "seconds", "{:.2f}")):
        vals = [v[key], e[key]]
        data.append(dict(type="bar", x=names, y=vals, marker=dict(color=cols), text=[fmt.format(x) for x in vals],
                         textposition="outside", showlegend=False, name=key, **grid_axes(1, col, 3)))
        layout[grid_axes(1, col, 3)["yaxis"].replace("y", "yaxis")].update(range=[0, max(vals) * 1.3 + 1e-9],
                                                                            gridcolor="#eee")
    speed = e["tokens_per_s"] / v["tokens_per_s"] if v["tokens_per_s"] else 0.0
    title = (f"Race: speedup {speed:.2f}× measured ({e['tokens']} vs {v['tokens']} tokens, τ = {e['tau']:.2f})")
    if recorded:
        title = f"⏺ Recorded Race ({recorded}): speedup {speed:.2f}× ({e['tokens']} vs {v['tokens']} tokens)"
    merge(layout, layout_base(title, height=height))
    return figure(data, layout)
