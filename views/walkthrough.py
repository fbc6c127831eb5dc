"""The classroom walkthrough: steps of plain sentences, each with a live view and preset settings."""
from __future__ import annotations

from .common import empty_figure
from .mask import mask_figure
from .probs import probs_figure
from .stats import race_figure
from .tree import tree_figure
from .ambiguity import ambiguity_moves, ambiguity_walk_figure
from .common import CORRECTION, esc, pct, show_token
from .rules import rule_sentence

# preset keys follow the app's controls; `view` names the figure shown beside the text
# preset "default" = the device's default static tree: the live view and "Open these settings" use the same
BASE = dict(prompt="How can I learn Python quickly?", temperature=0.0, top_p=1.0, seed=0, shifted=True,
            shape="Tree", tree_kind="static (EAGLE-1)", preset="default", depth=5, top_k=6, total_tokens=24,
            max_new_tokens=64)

STEPS = [
    dict(title="1. Token by token is slow",
         text="A language model writes one token per forward pass: to write 100 tokens it reads its whole "
              "network 100 times, one after the other. On most hardware each pass is limited by moving the "
              "weights, not by arithmetic, so checking several tokens in one pass costs about the same as one. "
              "The Race beside this text decodes the same prompt plainly and with EAGLE and times both.",
         view="race", preset=dict()),
    dict(title="2. The draft tree",
         text="EAGLE adds a tiny draft head (one transformer layer) that guesses the next few tokens cheaply. "
              "It does not guess one sequence but a tree of alternatives: the root is the last token already "
              "written, each branch is a possible continuation. The glyph in each box says what the check did: "
              "✓ kept (green), ✗ rejected (red-orange), · not reached (grey: its parent was not kept, so it was "
              "never checked). Within the ✗ and · boxes a paler fill is a guess the head was less sure of (a lower "
              "draft probability q; hover a node for its q).",
         view="tree", preset=dict()),
    dict(title="3. One pass checks the whole tree",
         text="The big model reads every drafted token in a single forward pass. A tree attention mask makes "
              "each token see only the prompt and its own ancestors, so the branches do not mix. "
              "One pass scores all branches at once.",
         view="mask", preset=dict()),
    dict(title="4. Lossless acceptance",
         text="Walking down from the root, a drafted token is kept only if the target agrees: at temperature 0 "
              "it must be the target's own top choice. At the first disagreement the target's own token is "
              "used instead (a correction), and if everything matched it adds one more (a bonus). "
              "So the text is exactly what the target alone would write, just produced faster. "
              "(Above temperature 0 the test becomes a coin flip that keeps the same guarantee: step 7.)",
         view="probs", preset=dict()),
    dict(title="5. Feature uncertainty and the shifted token",
         text="The head predicts the target's internal feature, not just a token. But after “How can I” the "
              "feature depends on which word is sampled next (“use”, “create”, “make”…), and a head that does not "
              "know that word (unshifted, ✕) makes one guess for all of them, between the branches. EAGLE feeds "
              "the sampled token to the head (shifted by one), so each guess (◇) moves toward its own branch's "
              "real feature (●): the arrows in the plane; the note under this text measures how far. The bars "
              "compare what each guess drafts next with what the target really says next.",
         view="ambiguity", preset=dict()),
    dict(title="6. Tree vs chain",
         text="A chain drafts a single guess per step: one miss early and the rest is wasted. A tree keeps "
              "the runner-up guesses too, so when the top guess is wrong the second one may still be accepted. "
              "The cycle shown is one where the accepted path goes through a runner-up: a chain would have "
              "stopped at that point. Switch between Tree and Chain in the Lens tab and watch the accepted lengths.",
         view="tree", preset=dict()),
    dict(title="7. Temperature",
         text="With temperature above 0 the target samples, and a drafted token x drawn from the draft's q is "
              "kept with probability min(1, p(x)/q(x)). After a rejection the next sibling faces the same test "
              "against what is left: p′ = max(0, p − q) renormalised and q′ = q without the rejected token. "
              "When every sibling is rejected the correction is drawn from that leftover p′ (EAGLE-2's top-k "
              "children, not drawn from q, are kept with probability p′(x) instead). Click a node: the figure "
              "names the test it faced, with its numbers. These rules keep the output distributed exactly as "
              "the target's own samples: the Lens's “Same law at T > 0” panel draws a thousand first tokens both "
              "ways and lays the two histograms over p.",
         view="probs", preset=dict(temperature=0.8, top_p=0.95, seed=1)),
]


def step_settings(i: int, default_preset: str = "default") -> dict:
    s = dict(BASE)
    s.update(STEPS[i]["preset"])
    if s["preset"] == "default":
        s["preset"] = default_preset
    return s


def step_markdown(i: int, default_preset: str = "default") -> str:
    st = STEPS[i]
    s = step_settings(i, default_preset)
    tree = (f"chain of depth {s['depth']}" if s["shape"] == "Chain" else
            f"{s['tree_kind'].split()[0]} tree" + (f" ({s['preset']})" if s["tree_kind"].startswith("static") else ""))
    settings = (f"Settings (used by “Show it live” and “Open these settings”): {tree}, T = {s['temperature']}"
                + (f", top-p {s['top_p']}, seed {s['seed']}" if s["temperature"] > 0 else "")
                + f", {'shifted' if s['shifted'] else 'unshifted'} head, up to {s['max_new_tokens']} tokens.")
    return f"## {st['title']}\n\n{st['text']}\n\n<small>{settings}</small>"


def chain_would_keep(rec) -> int:
    """How many of the accepted tokens a chain (the top-ranked child at every level) would also have kept."""
    nodes = {n["index"]: n for n in rec["nodes"]}
    first_child = {}
    for n in sorted(rec["nodes"], key=lambda n: n["index"]):
        if n["parent"] >= 0:
            first_child.setdefault(n["parent"], n["index"])
    k = 0
    for i in rec["accepted_path"]:
        if first_child.get(nodes[i]["parent"]) != i:
            break
        k += 1
    return k


def _correction_node(rec):
    """The last rejected sibling at the node where the correction was drawn (what the rule rejected last)."""
    par = rec["accepted_path"][-1] if rec["accepted_path"] else 0
    rej = [n for n in rec["nodes"] if n["parent"] == par and n["status"] == "rejected"]
    return max(rej, key=lambda n: n.get("test_rank") or 0)["index"] if rej else None


def correction_draw(rec) -> tuple[float | None, dict | None]:
    """(the probability the leftover p′ gave the correction that was drawn, the leftover's likeliest token) from the
    cycle's recorded residual top-k; (None, top) when the drawn token is below the recorded top-k."""
    res = rec.get("residual_topk") or []
    top = max(res, key=lambda t: t["prob"]) if res else None
    drawn = next((t["prob"] for t in res if t["token_id"] == rec["bonus_token"]), None)
    return drawn, top


def is_typical_rejection(rec) -> bool:
    """A rejection a class may take as the usual case: the shown draft was more likely rejected than kept (its
    acceptance probability under 50%), and the correction is the leftover p′'s likeliest token, not a rare draw."""
    node = _correction_node(rec)
    if node is None:
        return False
    n = next(x for x in rec["nodes"] if x["index"] == node)
    drawn, top = correction_draw(rec)
    return (n.get("accept_prob") is not None and n["accept_prob"] < 0.5 and drawn is not None
            and top is not None and drawn >= top["prob"])


def rejection_rank(rec) -> tuple:
    """Step 7's preference: a typical rejection first, then one after an accepted token (the path panel shows
    something), one the coin decided (0 < acceptance probability: the ratio test is visibly at work), the longer
    accepted path, the likelier correction, the earlier cycle."""
    node = next(x for x in rec["nodes"] if x["index"] == _correction_node(rec))
    a = node.get("accept_prob") or 0.0
    drawn, _ = correction_draw(rec)
    return (is_typical_rejection(rec), rec["accept_length"] > 0, 0 < a < 1, rec["accept_length"], drawn or 0.0,
            -rec["cycle"])


def rejection_note(rec) -> str:
    """Step 7's figure in words, with the probabilities it shows: the rejected draft's test and the draw."""
    node = next(x for x in rec["nodes"] if x["index"] == _correction_node(rec))
    a = node.get("accept_prob")
    drawn, top = correction_draw(rec)
    tok = lambda t: esc(show_token(t, 20))   # noqa: E731
    test = rule_sentence(node, True, html=False)
    out = (f"Cycle {rec['cycle']}: the drafted “{tok(node['text'])}” was {test}" +
           (f", so it was rejected with probability {pct(1 - a)}. " if a is not None else ", and rejected. ") +
           f"The correction “{tok(rec['bonus_text'])}” was then drawn from the leftover p′ = max(0, p′ − q′), "
           f"renormalised")
    if drawn is None:
        return out + " (below the recorded top tokens of p′: an unusual draw)."
    out += f", which gave it {pct(drawn)}"
    if top is not None and drawn >= top["prob"]:
        return out + " (its likeliest token): the orange ★ bar on the right."
    return out + (f": an unlikely draw (p′'s likeliest token, “{tok(top['text'])}”, had {pct(top['prob'])}), the "
                  f"orange ★ bar on the right.")


def tree_note(rec) -> str:
    """Step 2's figure in words: how many boxes of each kind, and the palest (least sure) guess with its q."""
    drafted = [n for n in rec["nodes"] if n["parent"] >= 0]
    count = {k: sum(n["status"] == k for n in drafted) for k in ("accepted", "rejected", "not_reached")}
    out = (f"Cycle {rec['cycle']}: {count['accepted']} ✓ kept, {count['rejected']} ✗ rejected, "
           f"{count['not_reached']} · not reached (grey).")
    unsure = [n for n in drafted if n["status"] != "accepted"]
    if unsure:
        low, high = min(unsure, key=lambda n: n["q"]), max(unsure, key=lambda n: n["q"])
        if low is not high:
            out += (f" The palest of them, “{esc(show_token(low['text'], 16))}”, had q = {pct(low['q'])}; the "
                    f"strongest, “{esc(show_token(high['text'], 16))}”, q = {pct(high['q'])}.")
    return out


def pick_cycle(i: int, recs: list) -> tuple[dict | None, int | None, str]:
    """(cycle record, node to show, note) that illustrates step i, from a live or recorded run; the note says
    when no cycle of this run shows the point."""
    view = STEPS[i]["view"]
    cyc = [r for r in recs if r["cycle"] > 0 and len(r["nodes"]) > 1]
    if not cyc:
        return None, None, ""
    title = STEPS[i]["title"]
    if title.startswith("6."):
        good = [r for r in cyc if len(r["accepted_path"]) > chain_would_keep(r)]
        if good:
            r = max(good, key=lambda r: (len(r["accepted_path"]) - chain_would_keep(r), -r["cycle"]))
            return r, None, (f"Cycle {r['cycle']}: the tree kept {len(r['accepted_path'])} drafted token(s); a chain "
                             f"of the top guesses would have kept {chain_would_keep(r)}.")
        return max(cyc, key=lambda r: r["accept_length"]), None, (
            "In this run every accepted path went through top guesses only (a chain would have done as well); "
            "“Show it live” decodes it again.")
    if title.startswith("7."):
        good = [r for r in cyc if r.get("bonus_kind") == "correction" and _correction_node(r) is not None
                and r.get("bonus_from", "residual_ratio") == "residual_ratio"]
        if good:
            r = max(good, key=lambda r: rejection_rank(r))
            return r, _correction_node(r), rejection_note(r)
        return max(cyc, key=lambda r: r["accept_length"]), None, (
            "No sampled rejection in this run; “Show it live” decodes it again.")
    if title.startswith("2."):
        kinds = lambda r: {n["status"] for n in r["nodes"]} >= {"accepted", "rejected", "not_reached"}  # noqa: E731
        r = max(cyc, key=lambda r: (kinds(r), r["accept_length"], len(r["nodes"]), -r["cycle"]))
        return r, None, tree_note(r)
    if view == "probs":
        with_rej = [r for r in cyc if r.get("bonus_kind") == "correction" and r["accept_length"]]
        r = max(with_rej or cyc, key=lambda r: (r["accept_length"], len(r["nodes"]), -r["cycle"]))
        return r, _correction_node(r), ""
    r = max(cyc, key=lambda r: (r["accept_length"], len(r["nodes"]), -r["cycle"]))
    return r, None, ""


def walk_figure(i, recs, plain=None, amb=None):
    """(figure, note) for step i."""
    view = STEPS[i]["view"]
    if view == "race":
        return race_figure(recs, plain or []), ""
    if view == "ambiguity":
        return (ambiguity_walk_figure(amb), ambiguity_note(amb)) if amb else (empty_figure("press Show it live"), "")
    rec, node, note = pick_cycle(i, recs or [])
    if rec is None:
        return empty_figure("press Show it live"), ""
    if view == "probs":
        return with_draw_legend(probs_figure(rec, node), rec), note
    return {"tree": tree_figure, "mask": mask_figure}[view](rec), note


def with_draw_legend(fig, rec):
    """The bonus/correction bar's own colour in the legend: the probability figure colours the drawn token's bar
    (★) orange for a correction, sky blue for a bonus, a colour its legend otherwise does not show."""
    from .common import BONUS
    import plotly.graph_objects as go
    from .rules import source_legend
    kind = rec["bonus_kind"] if rec["cycle"] > 0 else "first token"
    colour = CORRECTION if kind == "correction" else BONUS
    for t in fig.data:   # the right panel's bars: their legend swatch took whichever bar came first
        if t.type == "bar" and t.xaxis == "x3":
            t.showlegend = False
    fig.add_trace(go.Bar(x=[None], y=[None], marker=dict(color="#c8c8c8", pattern_shape="."), hoverinfo="skip",
                         xaxis="x3", yaxis="y3", name=source_legend(rec)))
    fig.add_trace(go.Bar(x=[None], y=[None], marker_color=colour, hoverinfo="skip", xaxis="x3", yaxis="y3",
                         name=f"★ the {kind} drawn from it"))
    return fig


def ambiguity_note(amb) -> str:
    """Step 5's figure in words: the "How can I" tab's one measure, from the record (views/ambiguity.py): the draft
    probability each head's guess gives the target's next token after each branch, and the payoff in tokens (real
    EAGLE cycles with each head) when the record carries it."""
    from .ambiguity import measure_sentence, payoff_sentence, payoff_totals, share
    m = ambiguity_moves(amb, eagle3=False)
    if not m["n"]:
        return ""
    tok = lambda t: esc(show_token(t, 16))   # noqa: E731
    best = max(m["branches"], key=lambda b: b["q"]["shifted"] - b["q"]["unshifted"])
    out = [f"How far the move gets it, measured in what each guess drafts: {esc(measure_sentence(m))}.",
           f"In the bars, after “{tok(best['text'])}” the target says “{tok(best['next_text'])}” next: the shifted "
           f"guess drafts it with {share(best['q']['shifted'])}, the unshifted one with "
           f"{share(best['q']['unshifted'])}."]
    t = payoff_totals(amb, eagle3=False)
    if t:
        out.append(f"In tokens: {esc(payoff_sentence(t))}.")
    return " ".join(out)
