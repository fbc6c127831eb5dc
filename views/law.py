"""The same law at T > 0: EAGLE's first tokens beside plain sampling at one position (decoding/law.py's record).

Bars: for each token shown, the share of EAGLE's draws (solid green) and of plain sampling's (orange, hatched:
a cue besides colour), and the target's own probability p as a black diamond; tokens outside the bars pooled
as "other". The title is the test's computed sentence.
"""
from __future__ import annotations

from .common import FONT, Figure, figure, layout_base, show_token

MIN_EXPECTED = 5      # decoding/law.py's pooling threshold (views take no model code: the number is repeated)

EAGLE = "#009E73"        # bluish green, solid: EAGLE's first tokens
PLAIN = "#E69F00"        # orange, hatched: plain sampling from p


def law_sentence(rec: dict) -> str:
    """What the draws say, computed from the record."""
    n, pv = rec["n"], rec["p_value"]
    if rec["dof"] == 0:
        return (f"{n:,} draws each at T = {rec['temperature']:g}: the target's law here is too flat to test "
                f"(no token is expected {MIN_EXPECTED:g} times in both samples), so the draws say nothing either "
                "way; pick a position where the target is surer, or more draws.")
    agree = ("agree: nothing tells them apart" if pv >= 0.01 else
             "differ: a p-value this small says the two come from different laws" if pv < 0.001 else
             "agree at the 0.1% level, though not comfortably")
    kept = rec["accepted"]
    how = (f"{kept:,} kept drafted children, {n - kept:,} drawn from the residual max(0, p − q), normalised"
           if rec["rule"] == "ratio" else
           f"{kept:,} kept top-k children, {n - kept:,} drawn from what the rejections left of p")
    return (f"{n:,} draws each at T = {rec['temperature']:g}"
            + (f", top-p {rec['top_p']:g}" if rec["top_p"] < 1 else "")
            + f": EAGLE's first token ({how}) and plain sampling from p {agree} "
            f"(χ² = {rec['chi2']:.1f} on {rec['dof']} degrees of freedom, p-value {pv:.3g}). "
            + p_value_meaning(rec))


def p_value_meaning(rec: dict) -> str:
    """How to read the p-value, with the record's own scale: two samples of one law give p-values spread evenly
    over 0..1, so a p-value x is a difference that chance alone makes in x of such pairs."""
    pv, control = rec["p_value"], rec.get("control_p_value")
    odds = f" (about 1 in {1 / pv:,.0f})" if 0 < pv < 0.5 else ""
    out = (f"A p-value is how often two samples of one law differ at least this much by chance alone: "
           f"{pv:.3g}{odds} of the time.")
    if control is not None:
        out += (f" For scale, a second sample of plain sampling against the first, one law by construction, "
                f"gave p-value {control:.3g} here.")
    return out


def law_title(rec: dict) -> str:
    pv = rec["p_value"]
    if rec["dof"] == 0:
        return f"EAGLE vs plain sampling, {rec['n']:,} draws each: too flat here to test"
    verdict = "the same law" if pv >= 0.001 else "different laws"
    return f"EAGLE vs plain sampling, {rec['n']:,} draws each: {verdict} (p-value {pv:.2g})"


def residual_note(rec: dict) -> str:
    """The tokens the residual gave most often (each one a bar in the figure)."""
    bars = sorted((b for b in rec["bars"] if b["eagle_residual"]), key=lambda b: -b["eagle_residual"])[:4]
    if not bars:
        return "No draw came from the residual: every first token was a kept drafted child."
    names = ", ".join(f"“{show_token(b['text'], 16)}” ({b['eagle_residual']})" for b in bars)
    return f"The residual gave most often {names}: each is a bar in the figure, and its share still matches p."


def law_figure(rec: dict, height: int = 420) -> Figure:
    bars = rec["bars"]
    n = max(1, rec["n"])
    labels = [show_token(b["text"], 12) for b in bars]
    # the same text twice would merge two bars: number repeats (distinct token ids with equal text)
    seen: dict[str, int] = {}
    for i, t in enumerate(labels):
        seen[t] = seen.get(t, 0) + 1
        if seen[t] > 1:
            labels[i] = f"{t} #{seen[t]}"
    eagle = [b["eagle"] / n for b in bars]
    plain = [b["plain"] / n for b in bars]
    p = [b["p"] for b in bars]
    if rec["other_eagle"] or rec["other_plain"]:
        labels.append("other")
        eagle.append(rec["other_eagle"] / n)
        plain.append(rec["other_plain"] / n)
        p.append(rec["other_p"])
    hover = "%{x}: %{y:.1%} of the draws<extra>%{fullData.name}</extra>"
    data = [
        dict(type="bar", name=f"EAGLE: first token of a cycle ({rec['n']:,})", x=labels, y=eagle,
             marker=dict(color=EAGLE), hovertemplate=hover),
        dict(type="bar", name=f"plain sampling from p ({rec['n']:,})", x=labels, y=plain,
             marker=dict(color=PLAIN, pattern=dict(shape="/")), hovertemplate=hover),
        dict(type="scatter", mode="markers", name="p: the target's law", x=labels, y=p,
             marker=dict(symbol="diamond", size=11, color="#222", line=dict(color="white", width=1)),
             hovertemplate="%{x}: p = %{y:.1%}<extra></extra>"),
    ]
    layout = layout_base(
        law_title(rec), height=height, barmode="group", bargap=0.25,
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0, font=dict(size=13)),
        margin=dict(t=92, b=80),
        # upright labels when there are many bars: slanted ones overlap on a phone
        xaxis=dict(automargin=True, tickangle=-90 if len(labels) > 6 else 0,
                   tickfont=dict(size=13, family=FONT["family"])),
        yaxis=dict(title=dict(text="share of draws"), tickformat=".0%", rangemode="tozero", automargin=True))
    return figure(data, layout)
