"""View functions build figures with the expected traces from synthetic records (no model)."""
import dataclasses
import json

import pytest

from eagle_core.decoding.records import CycleRecord, TokenProb, TreeNode
from views import (ambiguity_dist_figure, ambiguity_figure, ambiguity_html, mask_figure, node_choices, probs_figure,
                   race_figure, stats_figure, stats_html, text_html, tree_figure)
from views.common import committed_pieces, show_token
from views.mask import ancestry_of


def tp(i, text, p):
    return TokenProb(i, text, p)


def synthetic_cycle(cycle=1, sampling=False, kind="correction", tau=2.0, rule="ratio"):
    """root ' can' -> ' I' (accepted) -> ' learn' (rejected), ' do' (rejected); ' we' rejected at depth 1.
    sampling: T = 1 with the test each node faced (rule "ratio": drawn from q; "target": top-k children)."""
    top_root_q = [tp(10, " I", 0.7), tp(11, " we", 0.2), tp(12, " you", 0.05)]
    top_root_p = [tp(10, " I", 0.8), tp(12, " you", 0.1), tp(11, " we", 0.05)]
    top_i_q = [tp(20, " learn", 0.5), tp(21, " do", 0.3)]
    top_i_p = [tp(22, " get", 0.6), tp(20, " learn", 0.2), tp(21, " do", 0.1)]
    ap = (lambda x: x) if sampling else (lambda x: None)

    def test(p, q, a, rank):   # TreeNode fields of the test a node faced
        if not sampling:
            return dict(rule="greedy", test_p=p, test_rank=rank)
        return dict(rule=rule, test_p=p, test_q=q if rule == "ratio" else None, test_rank=rank)
    nodes = [
        TreeNode(0, 5, " can", -1, 0, 1.0, 1.0, 0.0, "root", target_topk=top_root_p, draft_topk=top_root_q),
        TreeNode(1, 10, " I", 0, 1, 0.7, 0.8, -0.36, "accepted", sampled=sampling, accept_prob=ap(1.0),
                 target_topk=top_i_p, draft_topk=top_i_q, **test(0.8, 0.7, 1.0, 0)),
        TreeNode(2, 11, " we", 0, 1, 0.2, 0.05, -1.6, "not_reached", target_topk=[], draft_topk=[]),
        TreeNode(3, 20, " learn", 1, 2, 0.5, 0.2, -1.05, "rejected", sampled=sampling, accept_prob=ap(0.4),
                 **test(0.2, 0.5, 0.4, 0)),
        TreeNode(4, 21, " do", 1, 2, 0.3, 0.1, -1.56, "rejected", sampled=sampling, accept_prob=ap(0.25),
                 **test(0.125, 0.6, 0.25, 1)),   # after ' learn' was rejected: p' = 1/8, q' = 0.3/0.5
        TreeNode(5, 30, "\n", 3, 3, 0.9, 0.01, -1.2, "not_reached"),
    ]
    return CycleRecord(cycle=cycle, prefix_len=7, nodes=nodes, accepted_path=[1], accepted_tokens=[10],
                       bonus_token=22, bonus_text=" get", bonus_kind=kind,
                       residual_topk=[tp(22, " get", 0.7), tp(23, " help", 0.2)], new_tokens=[10, 22],
                       accept_length=1, draft_seconds=0.01, verify_seconds=0.02, other_seconds=0.001,
                       total_new_tokens=1 + 2 * cycle, target_forwards=1 + cycle, tau=tau,
                       temperature=1.0 if sampling else 0.0,
                       bonus_from=("residual_ratio" if rule == "ratio" else "residual_removed") if sampling
                       else "argmax")


def prefill():
    root = TreeNode(0, 4, " How", -1, 0, 1.0, 1.0, 0.0, "root", target_topk=[tp(5, " can", 0.9)])
    return CycleRecord(cycle=0, prefix_len=6, nodes=[root], accepted_path=[], accepted_tokens=[], bonus_token=5,
                       bonus_text=" can", bonus_kind="bonus", residual_topk=[tp(5, " can", 0.9)], new_tokens=[5],
                       accept_length=0, draft_seconds=0.0, verify_seconds=0.05, other_seconds=0.0,
                       total_new_tokens=1, target_forwards=1, tau=1.0)


def names(fig):
    return [t.name for t in fig.data]


@pytest.mark.parametrize("as_dict", [False, True])
def test_tree_figure_traces(as_dict):
    rec = synthetic_cycle()
    fig = tree_figure(dataclasses.asdict(rec) if as_dict else rec)
    n = names(fig)
    for want in ("accepted path", "root (last committed token)", "✓ accepted", "✗ rejected", "· not reached",
                 "◆ correction (target's token)"):
        assert want in n, (want, n)
    acc = next(t for t in fig.data if t.name == "✓ accepted")
    assert list(acc.customdata) == [1]
    path = next(t for t in fig.data if t.name == "accepted path")
    assert path.line.width >= 5 and len([x for x in path.x if x is not None]) == 2   # root -> ' I'
    rej = next(t for t in fig.data if t.name == "✗ rejected")
    assert sorted(rej.customdata) == [3, 4]
    assert "q = " in rej.hovertext[0] and "target p" in rej.hovertext[0] and "depth" in rej.hovertext[0]
    labels = [a.text for a in fig.layout.annotations]
    assert "✓ ␣I" in labels and "· ↵" in labels and "◆ <b>␣get</b> (correction)" in labels
    fig.to_json()


def test_tree_prefill_and_bonus():
    fig = tree_figure(prefill())
    assert "★ bonus (target's token)" in names(fig)
    assert "prefill" in fig.layout.title.text
    fig = tree_figure(synthetic_cycle(kind="bonus"))
    assert "★ bonus (target's token)" in names(fig)
    assert "cut at" not in fig.layout.title.text
    # the last cycle of a run can commit fewer tokens than it verified; the caption says why
    cut = dataclasses.asdict(synthetic_cycle(kind="bonus"))
    cut.update(new_tokens=cut["new_tokens"][:1], finished="max_new_tokens")
    t = tree_figure(cut).layout.title.text
    assert "= 1 new token(s) (cut at max new tokens)" in t, t


def test_probs_figure_greedy_and_sampling():
    rec = synthetic_cycle()
    fig = probs_figure(rec, 3)
    n = names(fig)
    assert n.count("draft q (head)") == 2 and n.count("target p") == 2
    first = fig.data[0]
    assert any("◀" in x for x in first.x)                      # the chosen node is marked
    assert "greedy" in fig.layout.annotations[0].text.replace("<br>", " ")
    fig = probs_figure(synthetic_cycle(sampling=True), 3)
    assert "min(1, p/q) = min(1, 20.0% / 50.0%) = 40.0%" in fig.layout.annotations[0].text.replace("<br>", " ")
    assert any("residual" in (t.name or "") for t in fig.data)
    assert "residual max(0, p − q), normalised" in fig.layout.annotations[2].text.replace("<br>", " ")


def test_node_view_names_the_rule_applied():
    """The second sibling faced p' (the residual) and q' (renormalised), top-k children faced p', greedy its own."""
    ann = probs_figure(synthetic_cycle(sampling=True), 4).layout.annotations[0].text.replace("<br>", " ")
    assert "after 1 earlier sibling was rejected" in ann
    assert "min(1, p′/q′) = min(1, 12.5% / 60.0%) = 25.0%" in ann and "residual" in ann
    assert "min(1, p/q)" not in ann
    rec = synthetic_cycle(sampling=True, rule="target")
    ann = probs_figure(rec, 4).layout.annotations[0].text.replace("<br>", " ")
    assert "p′ = 25.0%" in ann and "removed" in ann and "min(1" not in ann
    ann = probs_figure(rec, 3).layout.annotations[0].text.replace("<br>", " ")
    assert "kept with probability p = 40.0%" in ann and "min(1" not in ann
    assert "removed" in probs_figure(rec, 3).layout.annotations[2].text.replace("<br>", " ")
    ann = probs_figure(synthetic_cycle(), 4).layout.annotations[0].text.replace("<br>", " ")
    assert "greedy (T = 0)" in ann and "min(1" not in ann and "′" not in ann
    hover = " ".join(str(a.hovertext) for a in tree_figure(synthetic_cycle(sampling=True)).layout.annotations)
    assert "min(1, p′/q′)" in hover
    # unknown node / prefill fall back without error
    probs_figure(rec, 99).to_json()
    probs_figure(prefill(), None).to_json()


def test_node_choices():
    ch = node_choices(synthetic_cycle())
    assert ch[0][1] == 1 and len(ch) == 5 and ch[0][0].startswith("✓")


def test_mask_figure():
    rec = synthetic_cycle()
    m = ancestry_of(dataclasses.asdict(rec))
    assert m[5] == [True, True, False, True, False, True]   # node 5 sees root, ' I', ' learn', itself
    fig = mask_figure(rec)
    assert fig.data[0].type == "heatmap"
    z = fig.data[0].z
    assert z[1][0] == 2 and z[2][1] == 0 and z[5][3] == 1
    assert mask_figure(prefill()).data == ()                  # an explanatory empty figure


def text_body(html: str) -> str:
    """The text panel of text_html, without the prompt above it and the legend below it."""
    return html.split("class='el-text'")[1].split("class='el-legend'")[0]


def test_text_html():
    recs = [prefill(), synthetic_cycle(1), synthetic_cycle(2, kind="bonus")]
    html = text_html(recs)
    body = text_body(html)
    assert body.count("el-draft") == 2 and body.count("el-correction") == 1 and body.count("el-bonus") == 2
    assert "cycle 2" in body
    assert committed_pieces(dataclasses.asdict(recs[1])) == [(" I", "draft", 10), (" get", "correction", 22)]
    upto = text_body(text_html(recs, upto=0))
    assert "el-draft" not in upto and "el-current" in upto
    assert "<script>" not in text_html([synthetic_cycle()], prompt="<script>")


def test_text_marks_kind_by_line_and_cycle_by_band():
    """One encoding per mark: kind = underline style + glyph (the tree's ✓ ★ ◆), cycle = a white / grey band that
    alternates; no token and no legend chip is filled with a per-cycle colour that could read as a kind."""
    import re

    from views.text import CSS, LEGEND
    recs = [prefill(), synthetic_cycle(1), synthetic_cycle(2, kind="bonus"), synthetic_cycle(3)]
    body = text_body(text_html(recs))
    assert "background" not in body and "style=" not in body, "the marks are classes, not inline colours"
    assert "background" not in LEGEND and "style=" not in LEGEND
    bands = re.findall(r"<span class='el-cyc (el-cyc-\w+)[^']*' data-cycle='(\d+)'>", body)
    assert [c for _, c in bands] == ["0", "1", "2", "3"]
    assert [b for b, _ in bands] == ["el-cyc-even", "el-cyc-odd", "el-cyc-even", "el-cyc-odd"]
    assert body.count("el-current") == 1 and "el-current' data-cycle='3'" in body    # framed: the cycle shown

    def rule(sel):    # every declaration CSS gives this selector
        return " ".join(body for sels, body in re.findall(r"([^{}]+)\{([^}]*)\}", CSS)
                        if sel in [x.strip() for x in sels.split(",")])
    lines = {k: re.search(r"text-decoration: underline (\w+)", rule(f".el-{k}")).group(1)
             for k in ("draft", "bonus", "correction")}
    assert lines == {"draft": "solid", "bonus": "double", "correction": "wavy"}, lines
    assert 'content: "★"' in rule(".el-bonus::after") and 'content: "◆"' in rule(".el-correction::after")
    assert "background" not in rule(".el-draft") + rule(".el-bonus") + rule(".el-correction")
    bg = {k: re.search(r"background: (#\w+)", rule(f".el-cyc-{k}")).group(1) for k in ("even", "odd")}
    rgb = {k: [int(v[i:i + 2], 16) for i in (1, 3, 5)] for k, v in bg.items()}
    assert bg["even"] != bg["odd"] and all(max(c) - min(c) <= 16 for c in rgb.values()), "grey bands, no hue"
    assert abs(sum(rgb["even"]) - sum(rgb["odd"])) >= 3 * 20, "bands told apart by lightness (colour-blind safe)"
    for words in ("solid", "double", "wavy", "✓", "★", "◆", "white / grey", "framed"):
        assert words in LEGEND, words


def test_text_tokens_carry_their_cycle_and_node():
    """The data the page links text and tree with: every token names its cycle, the tree node that drafted it
    ('b' = the target's bonus / correction box) and its kind; the panel names the cycle the tree shows."""
    import re
    recs = [prefill(), synthetic_cycle(1), synthetic_cycle(2, kind="bonus")]
    body = text_body(text_html(recs))
    toks = re.findall(r"<span class='el-tok el-(\w+)' data-cycle='(\d+)' data-node='(\w+)' data-kind='(\w+)'", body)
    assert toks == [("bonus", "0", "b", "bonus"), ("draft", "1", "1", "draft"), ("correction", "1", "b", "correction"),
                    ("draft", "2", "1", "draft"), ("bonus", "2", "b", "bonus")], toks
    assert body.startswith(" data-shown='2'>")
    assert text_body(text_html(recs, upto=1)).startswith(" data-shown='1'>")
    assert "data-shown" not in text_html([])
    # a token ending in a new line keeps its ★ / ◆ mark on its own line: the line break follows the span
    nl = dataclasses.replace(synthetic_cycle(1), bonus_text="\n")
    assert "↵</span>\n" in text_body(text_html([prefill(), nl]))


def test_text_long_prompt_is_shortened_on_screen():
    from views.text import PROMPT_SHOWN
    prompt = "Tell me about EAGLE. " * 190
    html = text_html([prefill()], prompt=prompt)
    summary = html.split("<summary>")[1].split("</summary>")[0]
    assert "shortened on screen" in summary and f"{len(prompt):,} characters" in summary
    assert len(summary) < PROMPT_SHOWN + 120
    assert prompt.strip() in html.split("class='el-prompt-full'>")[1]       # the whole of it, one click away
    assert "<details" not in text_html([prefill()], prompt="How can I learn Python quickly?")


def test_stats_and_race():
    recs = [prefill(), synthetic_cycle(1), synthetic_cycle(2)]
    fig = stats_figure(recs)
    n = names(fig)
    for want in ("accepted drafted tokens", "running τ", "cycles with this accepted length", "EAGLE tokens"):
        assert want in n
    hist = next(t for t in fig.data if t.name == "cycles with this accepted length")
    assert list(hist.y) == [0, 2]
    cards = stats_html(recs)
    assert "τ" in cards and "tokens/s of the engine" in cards and "tokens/s on this page" in cards
    assert "<b>–</b><span>tokens/s on this page" in cards                       # no Run yet: nothing to claim
    assert "<b>2.0</b><span>tokens/s on this page" in stats_html(recs, seen=[10, 5.0])
    assert "students" not in cards                                              # a cycle verified alone
    shared = [prefill(), dataclasses.replace(synthetic_cycle(1), pass_sessions=28, pass_rows=41)]
    n = len(shared[-1].nodes) - 1
    assert (f"<b>28 students</b><span>in this cycle's one target pass (41 tokens); your tree: {n} drafted "
            f"tokens") in stats_html(shared)
    alone_tree = [prefill(), dataclasses.replace(synthetic_cycle(1), pass_sessions=30, pass_rows=30,
                                                 nodes=synthetic_cycle(1).nodes[:1])]
    assert "your cycle drafted no tree" in stats_html(alone_tree)
    plain = [prefill()] + [dataclasses.replace(prefill(), cycle=i, total_new_tokens=i + 1, target_forwards=i + 1)
                           for i in range(1, 5)]
    race = race_figure(recs, plain)
    assert "speedup" in race.layout.title.text and len(race.data) == 3
    assert race_figure([], []).data == ()


def test_ambiguity_views():
    br = lambda t, x, qs: dict(token_id=1, text=t, p=0.3, real_xy=[x, 0], shifted_xy=[x, 0.1], dist_shifted=1.0,
                              dist_unshifted=5.0, cos_shifted=0.9, cos_unshifted=0.4,
                              vocab=[dict(token_id=1, text=" a", prob=0.5)], vocab_shifted=[qs], vocab_unshifted=[0.2])
    rec = dict(prefix="How can I", prefix_tokens=["How", " can", " I"], last_token=" I", shifted_head="s",
               unshifted_head="u", branches=[br(" make", -1, 0.4), br(" get", 1, 0.1)], unshifted_xy=[0, 0],
               last_xy=[0, 2], explained_variance=[0.6, 0.2], mean_dist_shifted=1.0, mean_dist_unshifted=5.0)
    fig = ambiguity_figure(rec)
    n = " | ".join(names(fig))
    assert "real feature" in n and "shifted head" in n and "unshifted head" in n
    assert "distance" not in n and "distance" not in (fig.layout.title.text or "")   # one measure: not this one
    d = ambiguity_dist_figure(rec)
    assert len(d.data) == 6
    h = ambiguity_html(rec)
    # the one measure, branch by branch: the draft probability of the target's next token, ▲/▼ beside colour
    assert "after 1 of 2 branches" not in h and "distance" not in h       # the headline's sentence, not again
    from views.ambiguity import ambiguity_headline
    head = ambiguity_headline(rec)
    assert "after 1 of 2 branches" in head and "mean 25.0% vs 20.0%" in head and "distance" not in head
    assert "▲ shifted <b>40.0%</b>" in h and "▼ shifted <b>10.0%</b>" in h
    assert "In tokens" not in h                                   # an old record: no payoff measured, none shown
    json.dumps(rec)
    # only head names on the page, never server paths
    rec.update(shifted_head="/work/main/assets/heads/smollm2-135m-shifted",
               unshifted_head="/root/.cache/huggingface/hub/models--yuhuili--EAGLE-Vicuna-7B-v1.3/snapshots/abc123")
    h = ambiguity_html(rec)
    assert "smollm2-135m-shifted" in h and "yuhuili/EAGLE-Vicuna-7B-v1.3" in h
    assert "/work" not in h and ".cache" not in h and "snapshots" not in h
    rec["branches"] = [dict(b, vocab=[]) for b in rec["branches"]]
    assert "The measure" not in ambiguity_html(rec)               # no next-token lists: nothing to measure


def test_ambiguity_measure_counts_each_head_and_names_where_eagle3_was_trained():
    """With the EAGLE-3 series shown, the text gives its mean and the branches where it beats the unshifted head;
    the note on where the heads were trained appears only when EAGLE-3 falls behind the shifted head on plain text."""
    from views.ambiguity import ambiguity_moves
    v = lambda: [dict(token_id=1, text=" a", prob=0.6), dict(token_id=2, text=" b", prob=0.1)]   # noqa: E731
    br = lambda s, u, e: dict(text=" t", p=0.2, vocab=v(), vocab_shifted=[s, 0], vocab_unshifted=[u, 0],  # noqa: E731
                              vocab_eagle3=[e, 0])
    rec = dict(branches=[br(0.5, 0.1, 0.05), br(0.4, 0.2, 0.3), br(0.3, 0.4, 0.2)], context="plain text",
               prefix="How can I", prefix_tokens=["How"], shifted_head="s", unshifted_head="u", eagle3_head="e3")
    m = ambiguity_moves(rec)
    assert m["higher"] == 2 and m["mean"]["eagle3"] == pytest.approx(0.55 / 3)
    h = ambiguity_html(rec, eagle3=True)
    assert "The EAGLE-3 head gives it 18.3% on average, more than the unshifted head after 1 of 3." in h
    assert "tick “as the start of the assistant's reply”" in h
    assert "tick" not in ambiguity_html(dict(rec, context="the chat template"), eagle3=True)
    assert "EAGLE-3" not in ambiguity_html(rec)                   # behind the toggle


def test_show_token():
    assert show_token(" I") == "␣I" and show_token("\n") == "↵" and show_token("") == "∅"
    assert len(show_token("x" * 40)) == 14
    # indentation tokens stay distinguishable from a bare newline; inner spaces stay plain
    assert show_token("\n  ") == "↵␣␣" and show_token("  ") == "␣␣" and show_token(" a b") == "␣a b"


def test_walkthrough_steps_and_figures():
    from views.walkthrough import STEPS, step_counter, step_settings, walk_figure
    assert 6 <= len(STEPS) <= 8
    for i, st in enumerate(STEPS):
        sentences = [s for s in st["text"].replace("...", "…").split(". ") if s.strip()]
        assert 2 <= len(sentences) <= 3, st["title"]      # a projector's deck: at most three short sentences
        assert step_counter(i).startswith(f"Step {i + 1} of {len(STEPS)}")
        assert {"prompt", "temperature", "shape"} <= set(step_settings(i))
    recs = [dataclasses.asdict(r) for r in (prefill(), synthetic_cycle(1), synthetic_cycle(2, kind="bonus"))]
    views_by_step = {st["view"] for st in STEPS}
    assert views_by_step == {"pass_cost", "tree", "mask", "probs", "ambiguity"}
    for i, st in enumerate(STEPS):
        fig, note = walk_figure(i, recs, recs, None)
        fig.to_json()
    assert step_settings(5)["shape"] == "Tree" and step_settings(6)["temperature"] > 0
    assert step_settings(5, "smollm2-cpu")["preset"] == "smollm2-cpu"


# ----------------------------------------------------------------------------- colour-blind safe
# Machado, Oliveira & Fernandes (2009), severity 1.0, applied in linear RGB
CVD = {"deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                        [-0.011820, 0.042940, 0.968881]],
       "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                      [-0.003882, -0.048116, 1.051998]]}


def _lab(rgb):
    """sRGB (0-255) -> CIELAB (D65)."""
    lin = [((c / 255 + 0.055) / 1.055) ** 2.4 if c / 255 > 0.04045 else c / 255 / 12.92 for c in rgb]
    x = (0.4124 * lin[0] + 0.3576 * lin[1] + 0.1805 * lin[2]) / 0.95047
    y = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    z = (0.0193 * lin[0] + 0.1192 * lin[1] + 0.9505 * lin[2]) / 1.08883
    f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def _simulate(hex_colour, kind):
    h = hex_colour.lstrip("#")
    rgb = [int(h[k:k + 2], 16) for k in (0, 2, 4)]
    lin = [((c / 255 + 0.055) / 1.055) ** 2.4 if c / 255 > 0.04045 else c / 255 / 12.92 for c in rgb]
    m = CVD[kind]
    out = [min(1.0, max(0.0, sum(m[r][k] * lin[k] for k in range(3)))) for r in range(3)]
    return [round(255 * (12.92 * c if c <= 0.0031308 else 1.055 * c ** (1 / 2.4) - 0.055)) for c in out]


def _delta_e(a, b):
    return sum((x - y) ** 2 for x, y in zip(_lab(a), _lab(b))) ** 0.5


def _hexes(d):
    h = d.lstrip("#")
    return [int(h[k:k + 2], 16) for k in (0, 2, 4)]


@pytest.mark.parametrize("kind", ["deuteranopia", "protanopia"])
def test_statuses_stay_apart_under_colour_blindness(kind):
    """The colours the figures actually draw, simulated for colour-blind viewers, stay clearly apart (CIE76
    delta E >= 20 between statuses), and each status also carries a non-colour cue (glyph, symbol, hatch)."""
    tree = tree_figure(synthetic_cycle())
    by_name = {t.name: t for t in tree.data}
    status = {k: by_name[k].marker.color for k in ("✓ accepted", "✗ rejected", "· not reached")}
    symbols = {by_name[k].marker.symbol for k in status}
    assert len(symbols) == 3                                     # a shape per status, not only a colour
    assert all(str(s).startswith("square") for s in symbols)    # boxes, as the nodes are drawn
    probs = probs_figure(synthetic_cycle(sampling=True), 3)
    q_bar = next(t for t in probs.data if t.name == "draft q (head)")
    p_bar = next(t for t in probs.data if t.name == "target p")
    assert q_bar.marker.pattern.shape and not p_bar.marker.pattern.shape   # hatched draft vs solid target
    corr = tree_figure(synthetic_cycle(kind="correction"))
    bonus = tree_figure(synthetic_cycle(kind="bonus"))
    pairs = [(status["✓ accepted"], status["✗ rejected"]), (status["✓ accepted"], status["· not reached"]),
             (status["✗ rejected"], status["· not reached"]), (q_bar.marker.color, p_bar.marker.color),
             (next(t for t in corr.data if t.name == "◆ correction (target's token)").marker.color,
              next(t for t in bonus.data if t.name == "★ bonus (target's token)").marker.color)]
    for a, b in pairs:
        d = _delta_e(_simulate(a, kind), _simulate(b, kind))
        assert d >= 20, f"{a} vs {b} under {kind}: delta E {d:.1f}"
    # the check can fail: the old two oranges ("target p" vs the correction's bar) collapse into one olive
    assert _delta_e(_simulate("#ff8c1a", kind), _simulate("#e08214", kind)) < 20
    # and the glyphs are in the node labels
    labels = [a.text for a in tree.layout.annotations]
    assert any(t.startswith("✓ ") for t in labels) and any(t.startswith("✗ ") for t in labels)


def test_cycle_beats():
    """Draft level by level (only nodes up to that depth, with q), one verify pass (all nodes, with p), accept
    (the statuses, the target's token); tests/test_beats.py checks the transitions."""
    from views.beats import beat_caption, beat_count, beat_figure
    rec = synthetic_cycle()
    assert beat_count(rec) == 3 + 2 and beat_count(prefill()) == 1
    first = beat_figure(rec, 0)
    nodes = next(t for t in first.data if t.name == "nodes")
    shown = [t for t, o in zip(nodes.text, nodes.marker.opacity) if o > 0]
    assert len(shown) == 3 and all("q " in t for t in shown[1:]) and "Draft, level 1" in first.layout.title.text
    verify = beat_figure(rec, 3)
    vn = next(t for t in verify.data if t.name == "nodes")
    assert len(vn.text) == 6 and all("p " in t for t in vn.text[1:]) and min(vn.marker.opacity) > 0
    assert "ONE target pass" in beat_caption(rec, 3)
    last = beat_figure(rec, 4)
    ln = next(t for t in last.data if t.name == "nodes")
    assert "Accept" in last.layout.title.text and any(t.startswith("✓ ") for t in ln.text)
    assert beat_figure(rec, 99).layout.title.text == last.layout.title.text      # clamped
    assert "Prefill" in beat_caption(prefill(), 0)


def test_walkthrough_picks_cycles_that_show_the_point():
    from views.walkthrough import STEPS, chain_would_keep, pick_cycle
    six = next(i for i, s in enumerate(STEPS) if s["title"].startswith("6."))
    seven = next(i for i, s in enumerate(STEPS) if s["title"].startswith("7."))
    plain = synthetic_cycle(1)                      # accepted ' I', the root's first child: a chain keeps it too
    assert chain_would_keep(dataclasses.asdict(plain)) == 1
    runner_up = dataclasses.asdict(synthetic_cycle(2))
    runner_up["accepted_path"] = [2]                # ' we', the root's second child: a chain would keep nothing
    for n in runner_up["nodes"]:
        n["status"] = {1: "rejected", 2: "accepted"}.get(n["index"], n["status"])
    rec, _, note = pick_cycle(six, [dataclasses.asdict(prefill()), dataclasses.asdict(plain), runner_up])
    assert rec["cycle"] == 2 and "would have kept 0" in note
    rec, _, note = pick_cycle(six, [dataclasses.asdict(plain)])
    assert "chain would have done as well" in note   # says so instead of contradicting the text
    sampled = dataclasses.asdict(synthetic_cycle(3, sampling=True))
    rec, node, note = pick_cycle(seven, [dataclasses.asdict(plain), sampled])
    assert rec["cycle"] == 3 and node == 4 and "residual" in note


def test_special_tokens_stay_off_the_axes():
    rec = dataclasses.asdict(synthetic_cycle(sampling=True))
    rec["nodes"][1]["target_topk"].append(dict(token_id=99, text="<|im_start|>", prob=0.3))
    rec["residual_topk"].append(dict(token_id=98, text="<|im_end|>", prob=0.1))
    rec["residual_topk"].append(dict(token_id=97, text="<repo_name>", prob=0.05, special=True))
    fig = probs_figure(rec, 3)
    axes = [x for t in fig.data for x in (t.x or [])]
    assert not any("<|" in str(x) or "repo_name" in str(x) for x in axes)


# ----------------------------------------------------------------------------- the walkthrough shows what it says
def _trace(name):
    import os
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets",
                           f"trace_{name}.json")) as f:
        return json.load(f)


def test_step_seven_shows_a_typical_rejection_and_says_its_probabilities():
    """Step 7 (T > 0) picks a cycle whose rejected draft was more likely rejected than kept and whose correction is
    the leftover p′'s likeliest token (the recorded run once showed a 3.8% draw beside a 96% bar), and its note
    gives the draw's probability; the correction's colour has a legend entry."""
    from views.common import CORRECTION
    from views.walkthrough import STEPS, correction_draw, is_typical_rejection, pick_cycle, walk_figure
    seven = next(i for i, s in enumerate(STEPS) if s["title"].startswith("7."))
    recs = _trace("temperature")["records"]
    rec, node, note = pick_cycle(seven, recs)
    assert is_typical_rejection(rec)
    drawn, top = correction_draw(rec)
    assert drawn == top["prob"] and f"{100 * drawn:.1f}%" in note
    n = next(x for x in rec["nodes"] if x["index"] == node)
    assert n["accept_prob"] < 0.5 and f"{100 * (1 - n['accept_prob']):.1f}%" in note
    fig, _ = walk_figure(seven, recs)
    legend = [t for t in fig.data if t.showlegend is not False]
    assert any(t.marker.color == CORRECTION for t in legend), "the orange bar's colour is in the legend"
    # an unlikely draw is said to be one
    odd = dict(rec, residual_topk=[dict(token_id=rec["bonus_token"], text="x", prob=0.04),
                                   dict(token_id=-5, text="y", prob=0.96)])
    assert not is_typical_rejection(odd) and "unlikely draw" in pick_cycle(seven, [odd])[2]


def test_step_five_has_its_bars_and_measures_the_move():
    """Step 5 shows, beside the feature plane, the bars of the "How can I" tab's one measure (per branch: the draft
    probability each head gives the target's next token, the shifted and the unshifted head), and its note states
    that measure, computed from the record."""
    from views.walkthrough import STEPS, walk_figure
    from views.ambiguity import ambiguity_moves, measure_sentence, share
    five = next(i for i, s in enumerate(STEPS) if s["title"].startswith("5."))
    amb = _trace("default")["ambiguity"]
    fig, note = walk_figure(five, [], None, amb)
    bars = {t.name: t for t in fig.data if t.type == "bar"}
    assert set(bars) == {"shifted head", "unshifted head"}
    m = ambiguity_moves(amb, eagle3=False)
    for h, name in (("shifted", "shifted head"), ("unshifted", "unshifted head")):   # the measure, drawn
        assert list(bars[name].y) == [b["q"][h] for b in m["branches"]]
        assert list(bars[name].text) == [share(b["q"][h]) for b in m["branches"]]
    assert all(b["next_text"].strip() and "→" in x for b, x in zip(m["branches"], bars["shifted head"].x))
    assert measure_sentence(m) in note.replace("&lt;", "<")                          # the tab's measure
    assert "In tokens: continuing each branch with real EAGLE cycles" in note       # the recorded payoff
    assert "moves to its own branch" not in STEPS[five]["text"] and "bars" in STEPS[five]["text"]
    assert "how far, in the full feature space" not in STEPS[five]["more"]          # no second measure


def test_step_two_tells_faint_from_not_reached():
    """Step 2's text tells a pale (unsure) box from a grey not-reached one, and it shows a cycle that has all three
    kinds, named with their counts and the palest guess's q."""
    from views.walkthrough import STEPS, pick_cycle
    two = next(i for i, s in enumerate(STEPS) if s["title"].startswith("2."))
    assert "not reached" in STEPS[two]["text"] and "Faint nodes are guesses" not in STEPS[two]["text"]
    rec, _, note = pick_cycle(two, _trace("default")["records"])
    assert {n["status"] for n in rec["nodes"]} >= {"accepted", "rejected", "not_reached"}
    assert "✗ rejected" in note and "· not reached" in note and "q = " in note


def test_eagle3_panel_reads_the_head_comparison():
    """Paper lab panel 8: one line per head with its own dash and marker, the table's τ per shape and the paper's
    row, and sentences computed from the numbers (which head wins, how α falls, against the shipped head)."""
    import views.lab as vl
    card = lambda kind, alpha, s, phases=1: {"kind": kind, "alpha": alpha, "train_s": s, "steps": 100,  # noqa: E731
                                           "tokens_seen": 2_000_000, "phases": phases}
    shape = lambda t: {"tau": t, "alpha": [0.5, 0.4], "mismatches": 0}   # noqa: E731
    rep = {"limit": 10, "prompts": "sharegpt-heldout", "max_new_tokens": 96,
           "heads": {"eagle1": {"chain-2": shape(1.8), "mc_sim_7b_63": shape(2.2)},
                     "eagle3": {"chain-2": shape(1.6), "mc_sim_7b_63": shape(2.0)},
                     "shipped": {"chain-2": shape(1.9), "mc_sim_7b_63": shape(2.4)}},
           "cards": {"eagle1": card("eagle1", [0.5, 0.4, 0.35, 0.33, 0.32], 180),
                     "eagle3": card("eagle3", [0.4, 0.36, 0.34, 0.33, 0.32], 180),
                     "shipped": card("eagle1", [0.56, 0.46, 0.43, 0.41, 0.40], 6000, phases=6)}}
    fig = vl.eagle3_depths(rep)
    assert [t.name for t in fig.data] == ["EAGLE-1 (3 min): 0.50 → 0.32", "EAGLE-3 (3 min): 0.40 → 0.32",
                                          "EAGLE-1 (6 phases, shipped): 0.56 → 0.40"]
    assert len({(t.line.dash, t.marker.symbol) for t in fig.data}) == 3          # a cue besides colour
    table = vl.eagle3_table(rep)
    assert "| EAGLE-3 (3 min) | 100 steps, 2.0M tokens | 1.60 | 2.00 | 0.40 | 0.36 | 0.32 |" in table
    assert "6.13" in table and "0 outputs differed" in table
    text = vl.eagle3_finding(rep)
    assert "τ 2.00" in text and "EAGLE-1 head's 2.20 (0.91×" in text and "1.51×" in text
    assert "falls by 0.08" in text and "keeps deep drafts closer" in text    # 0.40-0.32 against 0.50-0.32
    assert "does not beat it" in text
    assert vl.eagle3_finding({"heads": {}, "cards": {}}) == "" and vl.eagle3_table({}) == ""
    # a shipped EAGLE-3 head (trained on in phases): its own label, line and sentence against the shipped EAGLE-1
    rep["heads"]["shipped_eagle3"] = {"chain-2": shape(2.0), "mc_sim_7b_63": shape(2.7)}
    rep["cards"]["shipped_eagle3"] = card("eagle3", [0.54, 0.49, 0.46, 0.45, 0.43], 660, phases=2)
    fig = vl.eagle3_depths(rep)
    assert fig.data[-1].name == "EAGLE-3 (2 phases, shipped): 0.54 → 0.43"
    rep["cards"]["eagle3_b"] = card("eagle3", [0.3, 0.2, 0.2, 0.2, 0.2], 60)    # five heads, as the shipped report
    fig = vl.eagle3_depths(rep)
    assert len({(t.line.dash, t.marker.symbol, t.line.color) for t in fig.data}) == len(fig.data) == 5
    del rep["cards"]["eagle3_b"]
    text = vl.eagle3_finding(rep)
    assert "EAGLE-1 head's 2.20 (0.91×" in text                      # the same-budget pair is still the 3-min one
    assert "11 min on one GPU in 2 phases" in text and "τ 2.70 (1.13× the shipped EAGLE-1" in text
    assert "at 4 of 5 depths" in text and "0-α 0.54 against 0.56" in text


def test_play_counts_one_way():
    """The beat's sentence and the figure's title count beats the same way (issue 38.3: "Beat 1 · Draft, level 2
    of 3" beside "beat 2/5")."""
    import os
    import re

    from views.beats import beat_caption, beat_count, beat_title
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "assets", "trace_default.json"), encoding="utf-8") as f:
        recs = json.load(f)["records"]
    rec = next(r for r in recs if beat_count(r) >= 4)
    for b in range(beat_count(rec)):
        k, n = re.search(r"beat (\d+)/(\d+)", beat_title(rec, b)).groups()
        assert beat_caption(rec, b).startswith(f"Beat {k} of {n} · ")


def test_engines_panel_from_a_benchmark_report():
    """Paper lab panel 9 (our engine beside llama.cpp) is drawn from one benchmark report: the methods' tokens/s and
    tau, both engines' pass costs in their own one-token passes, and a sentence computed from them (a made-up report:
    each number in the output must come from it)."""
    import views.lab as vl
    report = {"config": {"llamacpp": {"llamacpp-eagle3": {"k": 3}}},
              "methods": {"vanilla": {"tokens_per_s": 20.0, "tau": 1.0}, "eagle-static": {"tokens_per_s": 30.0, "tau": 2.5},
                          "llamacpp": {"tokens_per_s": 80.0, "tau": 1.0},
                          "llamacpp-eagle3": {"tokens_per_s": 40.0, "tau": 1.6}},
              "pass_costs": {"rows": [1, 4, 8], "steps": [1.0, 1.1, 1.3], "plan_ms": [50.0, 55.0, 65.0],
                             "numerics": "fp32"},
              "llamacpp_pass_costs": {"ms": {"1": 10.0, "4": 25.0, "8": 40.0}, "relative": {"1": 1.0, "4": 2.5, "8": 4.0}}}
    costs = vl.engines_costs(report)
    assert costs["ours"]["relative"] == {"1": 1.0, "4": 1.1, "8": 1.3} and costs["llamacpp"]["relative"]["4"] == 2.5
    fig = vl.engines_figure(report, costs)
    bars = fig.data[0]
    assert list(bars.x) == [20.0, 30.0, 80.0, 40.0] and "llama.cpp, plain" in bars.y
    assert {t.name for t in fig.data[1:]} == {"ours (fp32)", "llama.cpp (Q4_1)"}
    table = vl.engines_table(report)
    assert "| ours, EAGLE tree | ours | 30.0 | 2.50 |" in table and "10.0 (1.00)" in table and "25.0 (2.50)" in table
    text = vl.engines_finding(report, costs)
    assert "EAGLE runs 1.50x our plain decoding (ours, EAGLE tree)" in text and "loses (0.50x its plain decoding)" in text
    assert "a pass of 4 tokens costs 2.50 one-token passes there" in text and "0.38x llama.cpp" in text
    assert "fp32 weights: a pass is bound by reading 540 MB" in text
    # a run on the GGUF block kernels names its numerics in the legend, the table and the sentence
    report["pass_costs"]["numerics"] = "gguf-blocks"
    costs = vl.engines_costs(report)
    assert {t.name for t in vl.engines_figure(report, costs).data[1:]} == {"ours (Q4_1 blocks)", "llama.cpp (Q4_1)"}
    assert "| ours (Q4_1 blocks) | 50.0 (1.00)" in vl.engines_table(report)
    text = vl.engines_finding(report, costs)
    assert "the GGUF's 4-bit blocks: a pass reads 96 MB" in text and "540 MB" not in text
    from tabs.lab import engines_section
    assert engines_section(None)["md"] == "" and engines_section(report)["md"].startswith("| method |")
