"""The classroom walkthrough: steps of plain sentences, each with a live view and preset settings."""
from __future__ import annotations

from .common import empty_figure
from .mask import mask_figure
from .probs import probs_figure
from .stats import race_figure
from .tree import tree_figure
from .ambiguity import ambiguity_figure

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
              "written, each branch is a possible continuation. Faint nodes are guesses the head was unsure of.",
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
              "feature depends on which word was sampled next: “use”, “make”, “get”... A head that does not "
              "know the sampled word must average over them and lands between the branches. EAGLE feeds the "
              "sampled token to the head (shifted by one), and each prediction moves to its own branch: "
              "compare the next-token bars of the shifted and unshifted guesses.",
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
              "the target's own samples.",
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
            r = max(good, key=lambda r: (r["accept_length"], -r["cycle"]))
            return r, _correction_node(r), (f"Cycle {r['cycle']}: a sampled draft was rejected by min(1, p′/q′) and "
                                            f"the correction was drawn from the residual.")
        return max(cyc, key=lambda r: r["accept_length"]), None, (
            "No sampled rejection in this run; “Show it live” decodes it again.")
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
        return (ambiguity_figure(amb) if amb else empty_figure("press Show it live")), ""
    rec, node, note = pick_cycle(i, recs or [])
    if rec is None:
        return empty_figure("press Show it live"), ""
    if view == "probs":
        return probs_figure(rec, node), note
    return {"tree": tree_figure, "mask": mask_figure}[view](rec), note
