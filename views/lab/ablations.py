"""EAGLE's ablations, measured: what the head reads (four input kinds), what it is trained on (ShareGPT or the
target's own answers), a tree against a chain with the same drafted tokens, and the CPU tree fit's sizes."""
from __future__ import annotations

import plotly.graph_objects as go

from eagle_core.lab.measure import rate_interval

from .style import KIND_STYLES, MIN_REACHED, TEXT_PX, lab_layout, sub


def input_depths(inputs: dict, horizontal: bool = False) -> go.Figure:
    """EAGLE's input ablation, decoded: acceptance at each depth of the chain (of the cycles that reached a depth,
    the share that accepted it), one colour *and* hatch per input kind. Every bar carries its 95% interval; a rate
    over fewer than MIN_REACHED cycles is drawn hollow and labelled with its n instead of its value, so a tall bar
    from a handful of cycles cannot pass for a finding. `horizontal`: the bars lie down, depth 1 on top, their labels
    level (a phone: twenty upright bars in 300 px are thinner than their rotated labels, which ran into each other)."""
    few = any(n is not None and n < MIN_REACHED for r in inputs.values() for n in (r.get("reached") or []))
    fig = go.Figure()
    for k, (name, r) in enumerate(inputs.items()):
        colour, pattern = KIND_STYLES[k % len(KIND_STYLES)]
        alpha = list(r.get("alpha") or [])
        reached = list(r.get("reached") or [None] * len(alpha))
        thin = [n is not None and n < MIN_REACHED for n in reached]
        ci = [rate_interval(round(a * n), n) if a is not None and n else None for a, n in zip(alpha, reached)]
        ys = [a or 0 for a in alpha]
        depths = [f"depth {d + 1}" for d in range(len(alpha))]
        whiskers = dict(type="data", symmetric=False, color="#444", thickness=1.5, width=3,
                        array=[c[1] - y if c else 0 for c, y in zip(ci, ys)],
                        arrayminus=[y - c[0] if c else 0 for c, y in zip(ci, ys)])
        axis = "x" if horizontal else "y"
        fig.add_trace(go.Bar(**({"y": depths, "x": ys, "orientation": "h", "error_x": whiskers} if horizontal
                                else {"x": depths, "y": ys, "error_y": whiskers}),
                             name=name, marker_color=colour, marker_pattern_shape=pattern,
                             marker_opacity=[0.25 if t else 1.0 for t in thin],
                             marker_line=dict(color=colour, width=[2.5 if t else 0 for t in thin]),
                             text=["-" if a is None else (f"n={n}" if t else f"{a:.2f}")
                                   for a, n, t in zip(alpha, reached, thin)],
                             customdata=[[n, *(c or (None, None))] for n, c in zip(reached, ci)],
                             hovertemplate=f"%{{{axis}:.2f}} of %{{customdata[0]}} cycles (95%: %{{customdata[1]:.2f}}–"
                                           "%{customdata[2]:.2f})",
                             textposition="inside", insidetextanchor="start", textangle=0 if horizontal else -90,
                             textfont=dict(size=TEXT_PX, color="#111"), cliponaxis=False))
    if horizontal:
        fig.update_xaxes(range=[0, 1.05], tickformat=".0%", title="accepted")
        fig.update_yaxes(autorange="reversed")
    else:
        fig.update_yaxes(range=[0, 1.05], tickformat=".0%", title="accepted")
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.15, x=0),
                      uniformtext=dict(minsize=TEXT_PX, mode="show"))   # never shrunk to fit a thin bar
    title = "What the head sees: acceptance at each depth (chain of 5)" + sub(
        "whiskers: 95% interval" + (f"; hollow, with n: fewer than {MIN_REACHED} cycles reached it" if few else ""))
    bars = sum(len(r.get("alpha") or []) for r in inputs.values())
    fig = lab_layout(fig, title, height=max(500, 220 + 24 * bars) if horizontal else 500)
    fig.update_layout(margin=dict(t=95, b=90))
    return fig


def input_taus(inputs: dict) -> go.Figure:
    """EAGLE's input ablation, decoded: tau per input kind, with the speed against plain decoding in the same run."""
    fig = go.Figure()
    for k, (name, r) in enumerate(inputs.items()):
        colour, pattern = KIND_STYLES[k % len(KIND_STYLES)]
        sp = r.get("speedup")
        fig.add_trace(go.Bar(x=[name.replace(" & ", " &<br>").replace(" only", "<br>only").replace(" token", "<br>token")],
                             y=[r.get("tau") or 0],
                             marker_color=colour, marker_pattern_shape=pattern, name=name, showlegend=False,
                             text=[f"τ={r.get('tau') or 0:.2f}" + (f"<br>{sp:.2f}× plain" if sp else "")],
                             textposition="outside", textfont=dict(size=TEXT_PX + 3), cliponaxis=False))
    taus = [r.get("tau") or 1.0 for r in inputs.values()]
    fig.update_yaxes(range=[0, max(taus + [1.0]) * 1.35], title="τ (tokens per target pass)")
    fig.update_xaxes(tickfont=dict(size=TEXT_PX + 3), tickangle=0)   # narrow: the page draws it at 0.72; names
    # of three short lines stay level in presenter mode too
    fig.update_yaxes(tickfont=dict(size=TEXT_PX + 3), title_font=dict(size=TEXT_PX + 3))
    fig = lab_layout(fig, "τ and speed against plain decoding" + sub("the lab's four heads"), height=500)
    fig.update_layout(margin=dict(t=80, b=90))
    return fig


def inputs_table(inputs: dict, paper: dict | None = None) -> str:
    """Markdown: per input kind, our decoded tau / speed beside the held-out teacher-forced 0-alpha and 1-alpha
    of its training card (EAGLE's own columns), and the paper's speedup ({kind: x}) when given."""
    f = lambda x, fmt="{:.2f}": "-" if x is None else fmt.format(x)   # noqa: E731
    head = "| input kind | τ (chain of 5) | × plain | held-out 0-α | held-out 1-α |"
    rule = "| --- | --- | --- | --- | --- |"
    if paper:
        head += " paper: speedup (Vicuna 7B, Fig. 4) |"
        rule += " --- |"
    lines = [head, rule]
    for name, r in inputs.items():
        h = r.get("heldout") or {}
        a = h.get("alpha") or [None, None]
        row = f"| {name} | {f(r.get('tau'))} | {f(r.get('speedup'))} | {f(a[0])} | {f(a[1] if len(a) > 1 else None)} |"
        if paper:
            row += f" {f(paper.get(name), '{:.1f}×') if name in paper else 'plotted only (Fig. 8)'} |"
        lines.append(row)
    budget = next((r["heldout"] for r in inputs.values() if r.get("heldout")), None)
    if budget and budget.get("tokens"):
        lines.append("")
        lines.append(f"Each head: {budget['conversations']:,} ShareGPT conversations ({budget['tokens']:,} tokens), "
                     f"{f(budget.get('epochs'), '{:.0f}')} epochs ({budget['tokens_seen']:,} tokens seen), from "
                     f"scratch with the same recipe; held-out n-α is teacher-forced on ShareGPT conversations the "
                     f"heads never saw (n of the head's feature inputs are its own earlier predictions).")
    return "\n".join(lines)


def inputs_finding(inputs: dict) -> str:
    """One plain sentence (or two) on what the measured input ablation shows, computed from the numbers: the paper's
    lessons are stated only where this run supports them."""
    tau = {k: (v.get("tau") or 0.0) for k, v in inputs.items()}
    if not tau:
        return ""
    best = max(tau, key=tau.get)
    order = " > ".join(f"{k} ({tau[k]:.2f})" for k in sorted(tau, key=tau.get, reverse=True))
    out = [f"Measured τ: {order}."]
    fs, fu = tau.get("feature & shifted token"), tau.get("feature & unshifted token")
    fo, to = tau.get("feature only"), tau.get("token only")
    if fs is not None and fu is not None:
        out.append("The shifted token helps: knowing which token was drafted lifts τ from "
                   f"{fu:.2f} to {fs:.2f}." if fs > fu else
                   f"Here the shifted token does not help (τ {fs:.2f} against {fu:.2f} unshifted), unlike the paper.")
    if fo is not None and to is not None:
        if fo > to:
            out.append(f"Feature-level drafting beats token-level drafting (feature only {fo:.2f} against token only "
                       f"{to:.2f}), as the paper finds.")
        else:
            out.append(f"Unlike the paper, token-only drafting is not worse than feature-only drafting here ({to:.2f} "
                       f"against {fo:.2f}).")
        a_fo = ((inputs["feature only"].get("heldout") or {}).get("alpha") or [])[:2]
        a_to = ((inputs["token only"].get("heldout") or {}).get("alpha") or [])[:2]
        if len(a_fo) == 2 and len(a_to) == 2 and a_fo[0] > a_to[0] and a_fo[1] < a_to[1]:
            out.append(f"The training cards show why: with exact inputs the feature-only head predicts better "
                       f"(held-out 0-α {a_fo[0]:.2f} against {a_to[0]:.2f}: features are the easier thing to "
                       f"extrapolate), but once one of its inputs is its own guess it falls to 1-α {a_fo[1]:.2f} "
                       f"while the token-only head, which never reads a feature, stays at {a_to[1]:.2f}: the "
                       f"feature uncertainty that the shifted token resolves.")
    if best != "feature & shifted token":
        out.append(f"The best input here is {best}.")
    sp = [v.get("speedup") for v in inputs.values() if v.get("speedup")]
    if sp and max(sp) < 1:
        out.append(f"Every chain of 5 here is slower than plain decoding ({min(sp):.2f}-{max(sp):.2f}×): at this "
                   f"acceptance five drafts cost more than they save on a CPU; the app's speed comes from the "
                   f"longer-trained shipped heads with a small fitted tree (panel 3 and the benchmark).")
    return " ".join(out)


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


def data_finding(phases: dict) -> str:
    """What the training cards show about the target's own answers, computed from them, with the caveat that the
    phases also added training (not the paper's same-budget comparison)."""
    out, gains = [], []
    for head, ps in phases.items():
        own = [k for k, p in enumerate(ps) if p.get("self_generated")]
        if not own or own[0] == 0:
            continue
        a, b = ps[own[0] - 1], ps[own[-1]]
        if a.get("top1") is None or b.get("top1") is None:
            continue
        tau = (f", chain τ {a['tau_chain']:.2f} → {b['tau_chain']:.2f}"
               if a.get("tau_chain") is not None and b.get("tau_chain") is not None else "")
        gains.append(b["top1"] - a["top1"])
        out.append(f"{head}: held-out top-1 {a['top1']:.3f} → {b['top1']:.3f}{tau} over the "
                   f"{len(own)} phase{'s' if len(own) > 1 else ''} that added the target's own answers")
    if not out:
        return ""
    verdict = ("A gain, in the paper's direction" if min(gains) > 0 else "No clear gain, unlike the paper")
    return ("**What it shows:** " + "; ".join(out) + f". {verdict} (the held-out text is "
            "ShareGPT, which stronger models wrote). Those phases also trained longer, so this is not the paper's "
            "same-budget comparison, which needs the target to answer every training prompt first (hours of generation "
            "on this CPU) and was not run.")


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
    styles = [KIND_STYLES[k % len(KIND_STYLES)] for k in range(len(names))]
    fig = go.Figure(go.Bar(x=names, y=taus, marker_color=[c for c, _ in styles],
                           marker_pattern_shape=[p for _, p in styles],
                           text=[f"τ={t:.2f}" + (f"<br>{m:.0f} ms/cycle" if m else "") + e
                                 for t, m, e in zip(taus, ms, extra)],
                           textposition="outside", textfont=dict(size=TEXT_PX)))
    fig.update_yaxes(title="τ (tokens per target pass)", range=[0, max(taus + [1.0]) * 1.7])
    return lab_layout(fig, title, height=420)


def tree_finding(tree_vs_chain: dict) -> str:
    """One sentence on the measured tree-vs-chain panel, beside the paper's Table 5 gain."""
    runs = {k: v.get("tau") for k, v in tree_vs_chain.items() if v.get("tau")}
    chain = next((v for k, v in runs.items() if k.startswith("chain")), None)
    tree = next((v for k, v in runs.items() if k.startswith("tree")), None)
    if chain is None or tree is None:
        return ""
    verdict = ("the tree accepts more, as in the paper" if tree > chain else
               "the tree does not accept more here, unlike the paper")
    return (f"**What it shows:** with the same 5 drafted tokens {verdict}: τ {tree:.2f} against the chain's "
            f"{chain:.2f} ({tree - chain:+.2f}; the paper's Vicuna 7B, its tree against a chain: +0.74).")


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


def chains_note(heads: dict | None) -> str:
    """Why the chain of 5 runs at one speed in panel 1 ("feature & shifted token") and another in panel 3, from
    eagle_core.lab.measure.chain_heads: the same decoding with different heads."""
    if not heads:
        return ""
    a, b = heads["lab"], heads["shipped"]
    f = lambda x, fmt="{:.2f}": "?" if x is None else fmt.format(x)   # noqa: E731
    train = lambda h: ", ".join(x for x in (   # noqa: E731
        f"{h['tokens_seen'] / 1e6:.1f} M tokens seen" + (f" over {h['phases']} phases" if h.get("phases") else "")
        if h.get("tokens_seen") else "", f"held-out top-1 {h['top1']:.2f}" if h.get("top1") is not None else "") if x)
    out = (f"**Why a chain of 5 is {f(a['speedup'])}× plain in panel 1 but {f(b['speedup'])}× in panel 3:** the same "
           f"decoding (a chain of 5, the same prompts, the same plain run), with different heads. Panel 1's “feature "
           f"& shifted token” is the lab's ablation head, trained from scratch with the other three"
           + (f" ({train(a)})" if train(a) else "") + "; panel 3 drafts with the shipped shifted head, the one the "
           "Lens tab uses" + (f" ({train(b)})" if train(b) else "") + ".")
    if a.get("ms_per_cycle") and b.get("ms_per_cycle"):
        out += (f" A cycle costs about the same ({a['ms_per_cycle']:.0f} against {b['ms_per_cycle']:.0f} ms), so the "
                f"speed follows what each head gets accepted: τ {f(a['tau'])} against {f(b['tau'])}.")
    return out
