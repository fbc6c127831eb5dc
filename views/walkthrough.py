"""The classroom walkthrough, a deck: steps of at most three short sentences beside a figure that shows what they
say, each with its own settings."""
from __future__ import annotations

from .chain_tree import chain_tree_figure
from .common import empty_figure
from .pass_cost import pass_cost_figure, pass_cost_sentence
from .mask import mask_figure
from .probs import probs_figure
from .stats import race_figure
from .tree import tree_figure
from .ambiguity import ambiguity_moves, ambiguity_walk_figure
from .common import CORRECTION, esc, pct, show_token
from .rules import exactness_sentence, rule_sentence

# preset keys follow the app's controls: the settings the step's figure was decoded with ("Show it live" decodes
# them again); `opens` what "Open these settings" changes on top of them to make the step's point in another tab;
# `view` names the figure. "default" = the device's default static tree.
BASE = dict(prompt="How can I learn Python quickly?", temperature=0.0, top_p=1.0, seed=0, shifted=True,
            shape="Tree", tree_kind="static (EAGLE-1)", preset="default", depth=5, top_k=6, total_tokens=24,
            max_new_tokens=64)
SAMPLING = dict(temperature=0.8, top_p=0.95, seed=1)
SPEED_PRESET = "smollm2-cpu"      # the tree shape fitted fastest on the CPU (assets/trees/): what a Race should time

# Each step: a title, at most three short sentences (a projector shows them beside the figure), the detail that
# used to stand there (`more`, folded under them), its figure, its settings, and what its settings open: `tab`
# (lens, or amb for the "How can I" tab), `land` (the Lens view that makes the point) and `look` (what to look at).
STEPS = [
    dict(title="1. Token by token is slow",
         text="A language model writes one token per forward pass, and each pass reads all its weights. Reading "
              "weights, not arithmetic, sets the cost, so a pass over many tokens costs little more than over one "
              "(measured: right). EAGLE spends that room.",
         more="To write 100 tokens the model reads its weights 100 times, one pass after the other. The figure is "
              "the table the benchmark (`python -m eagle_core.bench.sets`) records before it times anything "
              "(eagle_core/bench/pass_cost.py): one "
              "pass over R tokens, measured, against R one-token passes. “Show it live” measures it again on this "
              "server; “Open these settings” opens the Lens with the tree shape fitted fastest on the CPU, where "
              "the Race times plain decoding against EAGLE.",
         view="pass_cost", preset=dict(), opens=dict(preset=SPEED_PRESET), tab="lens", land="race",
         look="the tree shape fitted fastest on this CPU ({preset}). Press Race (under Statistics): plain "
              "decoding and EAGLE on the same prompt, timed."),
    dict(title="2. The draft tree",
         text="A tiny draft head (one transformer layer) guesses a tree of next tokens, rooted at the last token "
              "written. Each box says what the check did: ✓ kept, ✗ rejected, · not reached. A paler box is a less "
              "sure guess.",
         more="Colours: kept green, rejected red-orange, not reached grey. Within the ✗ and · boxes a paler fill is "
              "a lower draft probability q; hover a node for its q.",
         view="tree", preset=dict(), opens=dict(), tab="lens", land="tree",
         look="the lesson's static tree ({preset}), on the cycle the walkthrough showed. Step decodes the next "
              "cycle live."),
    dict(title="3. One pass checks the whole tree",
         text="The target reads every drafted token in one forward pass. The tree attention mask lets each token "
              "see only the prompt and its own ancestors, so the branches do not mix. Hover a node or a row: both "
              "light up.",
         more="Row = the query token, column = the key it may see; ✓ marks pairs on the accepted path. Every row "
              "also sees all the committed tokens before the tree. “Open these settings” decodes a bigger, "
              "dynamic (EAGLE-2) tree, all of it checked in one pass, and opens its mask in the Lens.",
         view="mask", preset=dict(), opens=dict(tree_kind="dynamic (EAGLE-2)", total_tokens=24, depth=5, top_k=6),
         tab="lens", land="mask",
         look="a dynamic (EAGLE-2) tree of 24 drafted tokens: the “Tree attention mask” below shows all of them "
              "checked in one pass."),
    dict(title="4. Lossless acceptance",
         text="A drafted token is kept only if the target agrees (at T = 0: it is the target's top choice). At the "
              "first disagreement the target's own token goes in, so the text is exactly the target's. Above T = 0 "
              "a coin-flip test keeps that: “Draw both” shows it.",
         more="If everything matched, the target adds one more token of its own (a bonus). The figure shows the "
              "node the target rejected: the draft's q against the target's p. “Draw both” samples a thousand "
              "first tokens of an EAGLE cycle at T = 0.8 and a thousand plain samples from the target, and lays "
              "the two histograms over p with a chi-square test (the Lens's “Same law at T > 0” panel).",
         view="probs", preset=dict(), opens=dict(), tab="lens", land="probs",
         look="the lesson's tree at T = 0, on the cycle shown: the node the target rejected, its q beside the "
              "target's p."),
    dict(title="5. Feature uncertainty and the shifted token",
         text="After “How can I” the next feature depends on the word sampled next; a head that does not see it "
              "(unshifted, ✕) makes one guess for all branches. EAGLE's shifted head sees it, so each guess (◇) "
              "moves toward its branch's real feature (●). The bars measure what that buys.",
         more="The head predicts the target's internal feature, not just a token. The arrows in the plane show the "
              "move (a 2-D picture, not to scale); the bars measure what it buys in the draft, and the note in "
              "tokens: real EAGLE cycles with each head. “Open these settings” opens the "
              "“How can I” tab, where any prefix can be tried.",
         view="ambiguity", preset=dict(), opens=dict(shifted=False), tab="amb", land="amb",
         look="the “How can I” tab: the shifted and the unshifted head on any prefix."),
    dict(title="6. Tree vs chain",
         text="A chain drafts one guess per level: one early miss wastes the rest. A tree keeps runner-up guesses, "
              "so a wrong top guess can be rescued: the cycle shown took a runner-up where a chain would have "
              "stopped. Beside it, the share of cycles that kept 0, 1, 2… tokens, chain against tree.",
         more="The measured runs are the Paper lab's: a chain of 5 and the lesson's tree of 5 drafted tokens, on "
              "the same prompts (“Show it live” decodes this prompt both ways instead). “Open these settings” "
              "opens the Lens with the chain, to Step or Run beside what the tree did here.",
         view="tree", preset=dict(), opens=dict(shape="Chain", depth=5), tab="lens", land="tree",
         look="a chain of 5: one guess per level. Step or Run, then compare its τ with the tree's (step 6's "
              "figure)."),
    dict(title="7. Temperature",
         text="Above T = 0 a drafted token x, drawn from q, is kept with probability min(1, p(x)/q(x)); when every "
              "sibling is rejected the correction is drawn from max(0, p − q), normalised. Kept min(q, p) plus "
              "corrected max(0, p − q) is p: exactly the target's law.",
         more="After a rejection the next sibling faces the same test against what is left: p′ = max(0, p − q) "
              "normalised, and q′ = q without the rejected token. EAGLE-2's top-k children, not drawn from q, are "
              "kept with probability p′(x) instead. The figure shows one rejected node with its test's numbers "
              "and the residual the correction was drawn from.",
         view="probs", preset=dict(SAMPLING), opens=dict(), tab="lens", land="probs",
         look="sampling at T = 0.8 (top-p 0.95, seed 1), on the cycle shown: the rejected node's test with its "
              "numbers; Step samples on."),
]


def step_settings(i: int, default_preset: str = "default") -> dict:
    """The settings step i's figure was decoded with (and "Show it live" decodes)."""
    s = dict(BASE)
    s.update(STEPS[i]["preset"])
    if s["preset"] == "default":
        s["preset"] = default_preset
    return s


def open_settings(i: int, default_preset: str = "default") -> dict:
    """The settings "Open these settings" puts in the Lens (or, for the "How can I" tab, the head it is about)."""
    s = step_settings(i, default_preset)
    s.update(STEPS[i]["opens"])
    return s


def settings_sentence(s: dict) -> str:
    tree = (f"chain of depth {s['depth']}" if s["shape"] == "Chain" else
            f"dynamic tree of {s['total_tokens']} tokens" if s["tree_kind"].startswith("dynamic") else
            f"static tree ({s['preset']})")
    return (f"{tree}, T = {s['temperature']}" + (f", top-p {s['top_p']}, seed {s['seed']}" if s["temperature"] > 0
                                                 else "")
            + f", {'shifted' if s['shifted'] else 'unshifted'} head, up to {s['max_new_tokens']} tokens")


def open_sentence(i: int, default_preset: str = "default") -> str:
    """What "Open these settings" does for step i, in words."""
    st = STEPS[i]
    return "Opens " + st["look"].format(**open_settings(i, default_preset))


def step_markdown(i: int, default_preset: str = "default") -> str:
    st = STEPS[i]
    return f"## {st['title']}\n\n{st['text']}"


def step_counter(i: int) -> str:
    """The deck's counter and the step's title, always on screen beside Prev / Next."""
    return f"Step {i + 1} of {len(STEPS)} · **{STEPS[i]['title'].split('. ', 1)[1]}**"


def step_text(i: int) -> str:
    """The step's sentences, beside its figure (the title is in the counter)."""
    return STEPS[i]["text"]


def step_details(i: int, default_preset: str = "default") -> str:
    """What the step folds away: the detail, the figure's settings and what "Open these settings" opens."""
    st = STEPS[i]
    figure = ("" if st["view"] in ("pass_cost", "ambiguity") else
              f"The figure's run: {settings_sentence(step_settings(i, default_preset))}. ")
    return f"{st['more']}\n\n<small>{figure}“Open these settings”: {open_sentence(i, default_preset)}</small>"


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
    """Step 7's figure in words, with the probabilities it shows: the rejected draft's test and the draw, then why
    the output is exact, in one line with the rejected node's own numbers (rules.exactness_sentence)."""
    node = next(x for x in rec["nodes"] if x["index"] == _correction_node(rec))
    exact = exactness_sentence(node)
    return _draw_note(rec, node) + (f" {exact}." if exact else "")


def _draw_note(rec, node) -> str:
    a = node.get("accept_prob")
    drawn, top = correction_draw(rec)
    tok = lambda t: esc(show_token(t, 20))   # noqa: E731
    test = rule_sentence(node, True, html=False)
    out = (f"Cycle {rec['cycle']}: the drafted “{tok(node['text'])}” was {test}" +
           (f", so it was rejected with probability {pct(1 - a)}. " if a is not None else ", and rejected. ") +
           f"The correction “{tok(rec['bonus_text'])}” was then drawn from the residual max(0, p − q), normalised "
           f"(p′, with p and q as the earlier rejections left them)")
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
        return r, _correction_node(r), greedy_note(r)
    r = max(cyc, key=lambda r: (r["accept_length"], len(r["nodes"]), -r["cycle"]))
    return r, None, ""


def greedy_note(rec) -> str:
    """Step 4's figure in words: what the target kept, and the token it put in place of the one it rejected."""
    node = _correction_node(rec)
    tok = lambda t: esc(show_token(t, 20))   # noqa: E731
    kept = len(rec["accepted_path"])
    if node is None or rec.get("bonus_kind") != "correction":
        return (f"Cycle {rec['cycle']}: the target agreed with all {kept} drafted tokens on the path and added "
                f"its own “{tok(rec['bonus_text'])}” (the bonus).")
    n = next(x for x in rec["nodes"] if x["index"] == node)
    return (f"Cycle {rec['cycle']}: the target kept {kept} drafted token{'s' if kept != 1 else ''}, then its top "
            f"choice was not the drafted “{tok(n['text'])}”: its own “{tok(rec['bonus_text'])}” was used instead "
            f"(the correction, the ★ bar).")


def walk_figure(i, recs, plain=None, amb=None, costs=None, costs_source=""):
    """(figure, note) for step i: the main figure (the one beside the text)."""
    view = STEPS[i]["view"]
    if view == "pass_cost":
        return pass_cost_figure(costs), (pass_cost_sentence(costs, costs_source) if costs else "")
    if view == "race":
        return race_figure(recs, plain or []), ""
    if view == "ambiguity":   # compact: a projector's screen holds the plane and the bars together
        return ((ambiguity_walk_figure(amb), ambiguity_note(amb)) if amb
                else (empty_figure("press Show it live"), ""))
    rec, node, note = pick_cycle(i, recs or [])
    if rec is None:
        return empty_figure("press Show it live"), ""
    if view == "probs":
        return with_draw_legend(probs_figure(rec, node, compact=True), rec), note
    if view == "mask":
        return mask_figure(rec, compact=True), note
    return tree_figure(rec), note


def side_figure(i, recs, runs=None, runs_source=""):
    """The figure beside step i's main one, or None: step 3's tree, whose mask is the main figure (the same cycle;
    hovering one lights the other), and step 6's chain against tree, measured (`runs`: chain_tree_figure's)."""
    title = STEPS[i]["title"]
    if title.startswith("3."):
        rec, _, _ = pick_cycle(i, recs or [])
        return tree_figure(rec) if rec is not None else None
    if title.startswith("6."):
        return chain_tree_figure(runs or {}, runs_source)
    return None


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
           f"guess drafts it with {esc(share(best['q']['shifted']))}, the unshifted one with "
           f"{esc(share(best['q']['unshifted']))}."]
    t = payoff_totals(amb, eagle3=False)
    if t:
        out.append(f"In tokens: {esc(payoff_sentence(t))}.")
    return " ".join(out)


# The deck's page CSS (views/page.py adds it): the bar with Prev, the counter, the steps and Next stays at the top
# of the window; the text is large and short; the figures fill the rest (views/js/deck.js); a phone stacks it all.
CSS = """
/* the page's container clips instead of hiding its overflow while the deck is shown: a container that hides
   overflow is a scroll box of its own, and the bar would stick inside it, not to the window */
.gradio-container:has(#el-walk-button[aria-selected="true"]) {overflow: clip !important;}
#el-walk-bar {position: sticky; top: 0; z-index: 30; background: var(--body-background-fill, white);
              align-items: center; flex-wrap: nowrap; gap: 8px; padding: 4px 0; border-bottom: 1px solid #e5e5e5;}
#el-walk-bar > button {flex: 0 0 auto;}
#el-walk-count {flex: 1 1 auto; min-width: 0;} #el-walk-count p {margin: 0; font-size: 20px; line-height: 1.3;}
/* presenter mode on the walkthrough: the model banner folds away, the deck gets the screen */
body.el-presenter:has(#el-walk-button[aria-selected="true"]) #el-banner {display: none;}
/* ... and so on a window a projector's height (720 px, or up to 820) in either mode: the header's description and
   the banner fold away, else the figure kept ~320 px of a 720 px screen
   (a rule in a media query is read inside the page's container, so a `div` in it holds the tab and the header) */
@media (min-width: 641px) and (max-height: 820px) {
  div:has(#el-walk-button[aria-selected="true"]) #el-banner,
  div:has(#el-walk-button[aria-selected="true"]) #el-title p {display: none;}
}
#el-walk-steps {flex: 0 0 auto; width: auto !important;} #el-walk-steps .wrap {gap: 4px; flex-wrap: nowrap;}
#el-walk-steps label {padding: 4px 10px !important; min-width: 0;}
#el-walk-deck {gap: 12px; margin-top: 6px;}
/* the text column holds its parts in one column: a Gradio column wraps, and what passed the screen's height went
   into a second column under the figure (the note and the More fold hidden, issue 50.1); the note gives way first,
   scrolling itself, so the More fold stays on screen */
#el-walk-left {gap: 8px; max-height: var(--el-deck-h, none); overflow-y: auto; flex-wrap: nowrap !important;}
#el-walk-left > * {flex-shrink: 0;}
#el-walk-left > #el-walk-note {flex: 0 1 auto; min-height: 3.3em;}
#el-walk-text h2 {margin: 0 0 6px 0; font-size: 24px; line-height: 1.25;}
#el-walk-text p {font-size: 18px; line-height: 1.5; margin: 0;}
#el-walk-actions {gap: 8px; flex-wrap: nowrap;} #el-walk-actions > button {min-width: 0; padding: 6px 8px;}
body.el-presenter #el-walk-actions > button {font-size: 18px;}
#el-walk-note, #el-walk-note p {font-size: 14px !important; line-height: 1.45; color: #444;}
#el-walk-note {max-height: 8.8em; overflow-y: auto;}
#el-walk-law-row {gap: 6px; align-items: end;}
#el-walk-figs {gap: 8px;}
/* two figures side by side (steps 3 and 6): the text column gives them room */
#el-walk-deck:has(#el-walk-side) > #el-walk-left {flex-grow: 2 !important;}
#el-walk-deck:has(#el-walk-side) #el-walk-text p {font-size: 17px !important;}
body.el-presenter #el-walk-deck:has(#el-walk-side) #el-walk-text p {font-size: 19px !important;}
body.el-presenter #el-walk-law-row label span, #el-walk-law-row label span {font-size: 13px !important;}
#el-walk-side g.annotation.el-deck-hl rect {stroke: #111 !important; stroke-width: 4px !important; stroke-dasharray: 7 3;
                                       fill: #ffd54a !important;}
body.el-presenter #el-walk-count p {font-size: 24px !important;}
body.el-presenter #el-walk-text h2 {font-size: 28px;}
body.el-presenter #el-walk-text p {font-size: 21px !important; line-height: 1.45;}
body.el-presenter #el-walk-note, body.el-presenter #el-walk-note p {font-size: 15px !important;}
@media (max-width: 640px) {
  #el-walk-bar {flex-wrap: wrap; gap: 4px;}
  #el-walk-count {order: 2; min-width: 100% !important;}
  #el-walk-steps {order: 3; flex: 1 1 100% !important; min-width: 0 !important; max-width: 100%;
                  box-sizing: border-box; padding: 0 !important;}
  #el-walk-steps .wrap {flex-wrap: wrap;} #el-walk-steps label {padding: 3px 8px !important;}
  #el-walk-prev {order: 0;} #el-walk-next {order: 1; margin-left: auto;}
  #el-walk-deck {flex-wrap: wrap;} #el-walk-deck > * {min-width: 100% !important;}
  #el-walk-figs {flex-wrap: wrap;} #el-walk-figs > * {min-width: 100% !important;}
  #el-walk-note {max-height: none;}
  /* the plot's toolbar in a strip of its own above the figure, not over its title (issue 50.5) */
  #el-walk-deck .js-plotly-plot {margin-top: 30px;}
  #el-walk-deck .js-plotly-plot .modebar-container {top: -30px !important;}
}
"""
