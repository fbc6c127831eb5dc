"""A chain against a tree with the same drafted-token budget: how many drafted tokens each cycle kept, as a share
of cycles (walkthrough step 6, beside the cycle where the tree took a runner-up). From measured runs: the Paper
lab's tree-vs-chain runs (assets/lab.json) or two live runs of the walkthrough."""
from __future__ import annotations

from .common import ACCEPTED, Figure, empty_figure, figure, layout_base

CHAIN = "#9e9e9e"


def accept_counts(records) -> list[int]:
    """[cycles that kept 0 drafted tokens, 1, 2, ...] of a run's cycle records (the prefill left out)."""
    lens = [r["accept_length"] for r in records or [] if r.get("cycle", 0) > 0]
    out = [0] * (max(lens, default=0) + 1)
    for n in lens:
        out[n] += 1
    return out


def tau_of(counts: list[int]) -> float:
    """Tokens per target pass: the kept drafted tokens plus the target's own one, per cycle."""
    n = sum(counts)
    return (sum(k * c for k, c in enumerate(counts)) / n + 1) if n else 0.0


def chain_tree_figure(runs: dict, source: str, height: int = 420) -> Figure:
    """`runs`: {name: {"counts": accepted-length counts, "tau": the run's own τ (else computed from the counts)}},
    the chain's name starting with "chain"."""
    runs = {k: v for k, v in (runs or {}).items() if v.get("counts") and sum(v["counts"])}
    if len(runs) < 2:
        return empty_figure("No chain and tree runs to compare: press “Show it live”")
    taus = {n: r.get("tau") or tau_of(r["counts"]) for n, r in runs.items()}
    longest = max(len(r["counts"]) for r in runs.values())
    x = [str(k) for k in range(longest)]
    data = []
    for name, run in runs.items():
        counts, chain = run["counts"], name.startswith("chain")
        share = [c / sum(counts) for c in counts] + [0.0] * (longest - len(counts))
        data.append(dict(type="bar", name=f"{name}: τ = {taus[name]:.2f} ({sum(counts)} cycles)", x=x, y=share,
                         marker=dict(color=CHAIN if chain else ACCEPTED, pattern=dict(shape="/" if chain else "")),
                         hovertemplate="%{x} kept: %{y:.0%} of the cycles<extra>" + name + "</extra>"))
    tree = next((t for n, t in taus.items() if not n.startswith("chain")), 0.0)
    chain = next((t for n, t in taus.items() if n.startswith("chain")), 0.0)
    title = f"Drafted tokens kept per cycle, {source}: τ {tree:.2f} (tree) vs {chain:.2f} (chain)"
    layout = layout_base(title, height=height, barmode="group", bargap=0.25,
                         legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0, font=dict(size=14)),
                         margin=dict(t=96, b=60),
                         xaxis=dict(title=dict(text="drafted tokens kept in a cycle"), automargin=True),
                         yaxis=dict(title=dict(text="share of cycles"), tickformat=".0%", rangemode="tozero",
                                    automargin=True, gridcolor="#eee"))
    return figure(data, layout)
