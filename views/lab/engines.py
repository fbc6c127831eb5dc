"""Paper lab: our engine beside llama.cpp on this CPU: tokens/s of each engine's plain and EAGLE decoding (the
benchmark's llamacpp / llamacpp-eagle3 methods beside ours, one run), and what one pass costs by tokens per pass in
each engine, the figure that says why speculation wins in one and loses in the other."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from eagle_core.llamacpp import NGRAM_TYPES

from .style import lab_layout

OURS, THEIRS, STOCK = "#1f77b4", "#d62728", "#8c8c8c"
ENGINE_COLOUR = {"ours": OURS, "llama.cpp": THEIRS, "transformers": STOCK}
NAMES = {"hf-greedy": "transformers", "vanilla": "ours, plain", "eagle-static": "ours, EAGLE tree",
         "eagle-chain": "ours, EAGLE chain", "eagle-chain:eagle3": "ours, EAGLE-3 chain",
         "eagle-static:eagle3": "ours, EAGLE-3 tree", "llamacpp": "llama.cpp, plain",
         "llamacpp-eagle3": "llama.cpp, EAGLE-3 chain"}
NAMES.update({f"llamacpp-{t}": f"llama.cpp, {t}" for t in NGRAM_TYPES})    # its own draftless speculation


# what a pass of our engine is bound by, per numerical model (Target.numerics; "fp32" in older reports)
WEIGHTS = {"float32": ("fp32", "fp32 weights: a pass is bound by reading 540 MB of them, so a few more tokens "
                               "ride along"),
           "gguf-blocks": ("Q4_1 blocks", "the GGUF's 4-bit blocks: a pass reads 96 MB, so its cost grows with "
                                          "the tokens' multiply-adds sooner")}
WEIGHTS["fp32"] = WEIGHTS["float32"]


def _weights(costs: dict) -> tuple[str, str]:
    """(short name, what bounds a pass) of the report's numerical model; an unknown one by its own name."""
    numerics = (costs.get("ours") or {}).get("numerics") or "float32"
    return WEIGHTS.get(numerics, (numerics, ""))


def ours_label(costs: dict) -> str:
    """"ours (fp32)" or "ours (Q4_1 blocks)": our pass costs named by the report's numerical model."""
    return f"ours ({_weights(costs)[0]})"


def _engine(method: str) -> str:
    return "llama.cpp" if method.startswith("llamacpp") else ("transformers" if method == "hf-greedy" else "ours")


def engines_figure(bench: dict, costs: dict) -> go.Figure:
    """Left: tokens/s by method (colour = engine, hatched = speculative). Right: one pass of R tokens in units of
    the engine's own one-token pass, both engines."""
    fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45], horizontal_spacing=0.16,
                        subplot_titles=("Tokens per second (one run)", "Cost of a pass of R tokens"))
    ms = [m for m in bench["methods"] if m in NAMES]
    vals = [bench["methods"][m]["tokens_per_s"] for m in ms]
    fig.add_trace(go.Bar(
        y=[NAMES[m] for m in ms], x=vals, orientation="h", showlegend=False,
        marker=dict(color=[ENGINE_COLOUR[_engine(m)] for m in ms],
                    pattern=dict(shape=["/" if m not in ("hf-greedy", "vanilla", "llamacpp") else "" for m in ms])),
        text=[f"{v:.0f}" for v in vals], textposition="outside", cliponaxis=False,
        hovertemplate="%{y}: %{x:.1f} tok/s<extra></extra>"), row=1, col=1)
    for name, rel, color in ((ours_label(costs), (costs.get("ours") or {}).get("relative"), OURS),
                             ("llama.cpp (Q4_1)", (costs.get("llamacpp") or {}).get("relative"), THEIRS)):
        if not rel:
            continue
        rows = sorted(int(r) for r in rel)
        fig.add_trace(go.Scatter(x=rows, y=[rel[str(r)] if str(r) in rel else rel[r] for r in rows], name=name,
                                 mode="lines+markers", line=dict(color=color),
                                 hovertemplate=name + ": %{x} tokens cost %{y:.2f} one-token passes<extra></extra>"),
                      row=1, col=2)
    lab_layout(fig, "", height=400)
    fig.update_xaxes(title_text="tokens/s", row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    rows = sorted({int(r) for c in costs.values() for r in (c.get("relative") or {})})
    fig.update_xaxes(title_text="tokens in the pass (R)", type="log", tickvals=rows, ticktext=[str(r) for r in rows],
                     row=1, col=2)
    fig.update_yaxes(title_text="in one-token passes", rangemode="tozero", row=1, col=2)
    fig.update_layout(margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=-0.25, x=0.55))
    return fig


def engines_costs(report: dict) -> dict:
    """The figure's pass costs from one benchmark report: ours (report["pass_costs"]: the plan's passes in one-token
    passes) and llama.cpp's (report["llamacpp_pass_costs"], llama-bench on the target's GGUF), keyed by rows."""
    out = {}
    pc = report.get("pass_costs") or {}
    if pc.get("steps"):
        out["ours"] = {"relative": {str(r): s for r, s in zip(pc["rows"], pc["steps"])},
                       "ms": {str(r): m for r, m in zip(pc["rows"], pc["plan_ms"])}, "numerics": pc.get("numerics")}
    lc = report.get("llamacpp_pass_costs") or {}
    if lc.get("relative"):
        out["llamacpp"] = {"relative": {str(r): v for r, v in lc["relative"].items()},
                           "ms": {str(r): v for r, v in lc["ms"].items()}}
    return out


def engines_table(report: dict) -> str:
    """Markdown: tokens/s and tau per method (the benchmark's rows), then both engines' pass costs."""
    m = report["methods"]
    rows = ["| method | engine | tokens/s | tokens a pass (τ) |", "|---|---|---:|---:|"]
    for k in (x for x in m if x in NAMES):
        tau = m[k].get("tau")
        rows.append(f"| {NAMES[k]} | {_engine(k)} | {m[k]['tokens_per_s']:.1f} | "
                    f"{'' if tau is None else f'{tau:.2f}'} |")
    costs = engines_costs(report)
    if costs:
        rs = sorted({int(r) for c in costs.values() for r in c["relative"]})
        rows += ["", "| a pass of R tokens, ms (in one-token passes) | " + " | ".join(f"R = {r}" for r in rs) + " |",
                 "|---|" + "---:|" * len(rs)]
        for eng, label in (("ours", ours_label(costs)),
                           ("llamacpp", "llama.cpp (the GGUF's Q4_1)")):
            c = costs.get(eng)
            if c:
                rows.append(f"| {label} | " + " | ".join(
                    f"{c['ms'][str(r)]:.1f} ({c['relative'][str(r)]:.2f})" if str(r) in c["relative"] else "–"
                    for r in rs) + " |")
    return "\n".join(rows)


def _rel(costs: dict, engine: str, rows: int) -> float | None:
    rel = (costs.get(engine) or {}).get("relative") or {}
    v = rel.get(str(rows), rel.get(rows))
    return float(v) if v is not None else None


def engines_finding(bench: dict, costs: dict, k: int | None = None) -> str:
    """The panel's sentence, computed: each engine's EAGLE speedup over its own plain decoding, its tokens per pass
    (tau) and what a pass of the drafted tokens costs there."""
    m = bench["methods"]
    k = k or ((bench.get("config") or {}).get("llamacpp") or {}).get("llamacpp-eagle3", {}).get("k") or 3
    parts = []
    ours_best = max((x for x in m if _engine(x) == "ours" and x.startswith("eagle")),
                    key=lambda x: m[x]["tokens_per_s"], default=None)
    if ours_best and "vanilla" in m:
        r = m[ours_best]["tokens_per_s"] / m["vanilla"]["tokens_per_s"]
        c = _rel(costs, "ours", 8)
        why = _weights(costs)[1]
        chain3 = next((x for x in ("eagle-chain:eagle3",) if x in m and x != ours_best), None)
        also = (f"; the EAGLE-3 head's chain of {k}, {m[chain3]['tokens_per_s'] / m['vanilla']['tokens_per_s']:.2f}x"
                if chain3 else "")
        parts.append(f"in our engine EAGLE runs {r:.2f}x our plain decoding ({NAMES[ours_best]}{also}): a cycle "
                     f"commits {m[ours_best]['tau']:.2f} tokens"
                     + (f", and a pass of 8 tokens costs {c:.2f} one-token passes" + (f" ({why})" if why else "")
                        if c else ""))
    if "llamacpp-eagle3" in m and "llamacpp" in m:
        r = m["llamacpp-eagle3"]["tokens_per_s"] / m["llamacpp"]["tokens_per_s"]
        c = _rel(costs, "llamacpp", k + 1) or _rel(costs, "llamacpp", 4)
        verdict = "wins" if r > 1 else "loses"
        parts.append(f"in llama.cpp the same EAGLE-3 head's chain of {k} {verdict} ({r:.2f}x its plain decoding): "
                     f"a cycle commits {m['llamacpp-eagle3']['tau']:.2f} tokens"
                     + (f" while a pass of {k + 1} tokens costs {c:.2f} one-token passes there, and drafting "
                        "adds the head's own passes" if c else ""))
    if "llamacpp" in m:
        best = max((x for x in m if _engine(x) == "ours"), key=lambda x: m[x]["tokens_per_s"], default=None)
        if best:
            parts.append(f"our fastest method ({NAMES.get(best, best)}, {m[best]['tokens_per_s']:.0f} tok/s) "
                         f"reaches {m[best]['tokens_per_s'] / m['llamacpp']['tokens_per_s']:.2f}x llama.cpp's plain "
                         f"decoding ({m['llamacpp']['tokens_per_s']:.0f} tok/s)")
            theirs = max((x for x in m if _engine(x) == "llama.cpp"), key=lambda x: m[x]["tokens_per_s"])
            if theirs != "llamacpp":
                parts.append(f"{m[best]['tokens_per_s'] / m[theirs]['tokens_per_s']:.2f}x llama.cpp's fastest "
                             f"method ({NAMES.get(theirs, theirs)}, {m[theirs]['tokens_per_s']:.0f} tok/s)")
    if not parts:
        return ""
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


# ============================================================================ where a pass goes (the split)
# one colour and hatch per part (the figure reads without colour); llama.cpp's unsplit rest: grey, crossed
SPLIT_STYLE = {"products": ("#1f77b4", ""), "attention": ("#ff7f0e", "/"), "rest": ("#2ca02c", "."),
               "python": ("#9467bd", "x"), "not_split": ("#b0b0b0", "+")}
SPLIT_NAMES = {"products": "products (linear layers)", "attention": "attention over the cache",
               "rest": "the rest (norms, rotary, adds, …)", "python": "Python between operations",
               "not_split": "llama.cpp: products + the rest (its timings do not split them)"}


def split_rows(report: dict) -> list[tuple[str, dict]]:
    """[(bar label, {part: ms})] from a benchmark report's pass_split (ours) and llamacpp_pass_split, one bar per
    engine and tokens per pass, ours first."""
    out = []
    ours, theirs = report.get("pass_split") or {}, report.get("llamacpp_pass_split") or {}
    name = ours_label({"ours": {"numerics": ours.get("numerics")}}) if ours else ""
    for label, rep in ((name, ours), ("llama.cpp (Q4_1)", theirs)):
        for r, row in sorted(((int(r), v) for r, v in (rep.get("ms") or {}).items())):
            out.append((f"{label}, {r} token{'s' if r > 1 else ''}", row))
    return out


def split_figure(report: dict) -> go.Figure:
    """One stacked bar per engine and pass size: the ms of a pass by part (products, attention, the rest, Python;
    llama.cpp's products and rest as one part, which its timings do not split)."""
    rows = split_rows(report)
    fig = go.Figure()
    labels = [lbl for lbl, _ in rows]
    for part, (colour, hatch) in SPLIT_STYLE.items():
        ys = [row.get(part) for _, row in rows]
        if not any(y for y in ys if y):
            continue
        fig.add_trace(go.Bar(y=labels, x=[y or 0 for y in ys], orientation="h", name=SPLIT_NAMES[part],
                             marker=dict(color=colour, pattern=dict(shape=hatch)),
                             hovertemplate="%{y}: " + SPLIT_NAMES[part] + " %{x:.2f} ms<extra></extra>"))
    for lbl, row in rows:
        fig.add_annotation(x=row["whole"], y=lbl, text=f"{row['whole']:.1f} ms", showarrow=False, xanchor="left",
                           xshift=4)
    lab_layout(fig, "Where one pass goes", height=max(300, 90 + 60 * len(rows)))
    fig.update_layout(barmode="stack", legend=dict(orientation="h", y=-0.2, x=0),
                      margin=dict(l=10, r=40, t=50, b=10))
    fig.update_xaxes(title_text="ms per pass", rangemode="tozero")
    fig.update_yaxes(autorange="reversed")
    return fig


def split_table(report: dict) -> str:
    """Markdown: each bar's parts in ms and as a share of its pass."""
    rows = split_rows(report)
    if not rows:
        return ""
    parts = [p for p in SPLIT_STYLE if any(row.get(p) is not None for _, row in rows)]
    lines = ["| pass | whole, ms | " + " | ".join(SPLIT_NAMES[p] for p in parts) + " |",
             "|---|---:|" + "---:|" * len(parts)]
    for lbl, row in rows:
        w = row["whole"] or 1.0
        lines.append(f"| {lbl} | {row['whole']:.1f} | " + " | ".join(
            "–" if row.get(p) is None else f"{row[p]:.1f} ({100 * row[p] / w:.0f}%)" for p in parts) + " |")
    return "\n".join(lines)


def split_finding(report: dict) -> str:
    """The split in a sentence, computed: what of our one-token pass is not products, against llama.cpp's whole
    one-token pass."""
    ours = ((report.get("pass_split") or {}).get("ms") or {})
    theirs = ((report.get("llamacpp_pass_split") or {}).get("ms") or {})
    one = ours.get("1") or ours.get(1)
    if not one:
        return ""
    around = one["whole"] - one["products"]
    text = (f"Our one-token pass takes {one['whole']:.1f} ms: {one['products']:.1f} ms of products, "
            f"{one['attention']:.1f} ms of attention and {around - one['attention']:.1f} ms of other operations and "
            "Python around them")
    lone = theirs.get("1") or theirs.get(1)
    if lone:
        text += (f"; llama.cpp's whole one-token pass is {lone['whole']:.1f} ms "
                 f"(ours takes {one['whole'] / lone['whole']:.2f}x that), its attention over the cache "
                 f"{lone['attention']:.1f} ms")
    return text + "."
