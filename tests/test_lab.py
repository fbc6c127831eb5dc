"""Paper-lab computations on synthetic records: known acceptance in, the known curves out."""
import json
import os
import random

import pytest

from eagle_core.lab import measure as lab
from eagle_core.decoding.records import ACCEPTED, NOT_REACHED, REJECTED, ROOT, CycleRecord, TreeNode

LAB_JSON = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets", "lab.json")
# a static tree: root, two children (ranks 0, 1), a child under rank 0 (path 1-1)
SHAPE = [(-1, 0), (0, 1), (0, 1), (1, 2)]   # (parent, depth)


def cycle(i, q, accepted_path, score=None):
    """One cycle of SHAPE with draft probabilities q[1..3] and the given accepted path."""
    nodes = []
    acc = set(accepted_path)
    for k, (par, d) in enumerate(SHAPE):
        if par < 0:
            status = ROOT
        elif k in acc:
            status = ACCEPTED
        elif par == 0 or par in acc:
            status = REJECTED
        else:
            status = NOT_REACHED
        nodes.append(TreeNode(index=k, token_id=k, text=str(k), parent=par, depth=d, q=1.0 if par < 0 else q[k],
                              p=0.5, score=0.0 if (score is None or par < 0) else score[k], status=status))
    return CycleRecord(cycle=i, prefix_len=10 + i, nodes=nodes, accepted_path=list(accepted_path),
                       accepted_tokens=list(accepted_path), bonus_token=9, bonus_text="9", bonus_kind="bonus",
                       residual_topk=[], new_tokens=[], accept_length=len(accepted_path), draft_seconds=0.0,
                       verify_seconds=0.0, other_seconds=0.0, total_new_tokens=0, target_forwards=i + 1, tau=1.0)


def test_positions_follow_draft_rank_not_index():
    c = cycle(1, {1: 0.2, 2: 0.7, 3: 0.5}, [])      # node 2 is the more likely sibling: rank 0
    assert lab.node_positions(c.nodes) == {0: (), 1: (1,), 2: (0,), 3: (1, 0)}


def test_position_acceptance_counts_reached_and_accepted():
    q = {1: 0.6, 2: 0.3, 3: 0.5}
    recs = [cycle(1, q, [1, 3]), cycle(2, q, [1]), cycle(3, q, [2]), cycle(4, q, [])]
    out = lab.position_acceptance(recs, prompt_of=lambda i: "a" if i < 2 else "b")
    assert out["positions"] == [[0], [1], [0, 0]]
    assert out["overall"] == {"1": [4, 2], "2": [4, 1], "1-1": [2, 1]}   # 1-1 is reached only when 1 was kept
    assert out["by_prompt"]["a"] == {"1": [2, 2], "2": [2, 0], "1-1": [2, 1]}
    assert out["by_prompt"]["b"]["1"] == [2, 0] and "1-1" not in out["by_prompt"]["b"]
    assert lab.rate(out["overall"]["1-1"]) == 0.5 and lab.rate([0, 0]) is None


def test_a_calibrated_draft_gives_the_diagonal():
    """Nodes accepted with probability exactly q: every bin's acceptance is close to its mean q."""
    rng = random.Random(0)
    recs = []
    for i in range(1, 4001):
        q1, q3 = rng.random(), rng.random()
        acc = [1] if rng.random() < q1 else []
        if acc and rng.random() < q3:
            acc.append(3)
        recs.append(cycle(i, {1: q1, 2: 0.0, 3: q3}, acc))
    curve = lab.calibration(recs, bins=5)
    assert [b["lo"] for b in curve] == [0.0, 0.2, 0.4, 0.6, 0.8]
    for b in curve:
        if b["n"] > 200:
            assert b["acceptance"] == pytest.approx(b["mean_confidence"], abs=0.07), b
    assert lab.calibration_error(curve) < 0.05


def test_an_overconfident_draft_is_off_the_diagonal():
    recs = [cycle(i, {1: 0.95, 2: 0.0, 3: 0.9}, [1] if i % 2 else []) for i in range(1, 201)]
    curve = lab.calibration(recs, bins=10)
    top = curve[-1]
    # node 1 (q 0.95) kept in half the cycles, node 3 (q 0.9) reached in those and never kept: 100 of 300
    assert top["n"] == 300 and top["acceptance"] == pytest.approx(1 / 3)
    assert lab.calibration_error(curve) > 0.3


def test_path_calibration_uses_cumulative_probability():
    import math
    score = {1: math.log(0.8), 2: math.log(0.1), 3: math.log(0.4)}
    recs = [cycle(1, {1: 0.8, 2: 0.1, 3: 0.5}, [1, 3], score), cycle(2, {1: 0.8, 2: 0.1, 3: 0.5}, [1], score)]
    curve = lab.calibration(recs, bins=10, kind="path")
    by_bin = {round(b["lo"], 1): b for b in curve if b["n"]}
    assert by_bin[0.8]["n"] == 2 and by_bin[0.8]["acceptance"] == 1.0       # node 1 (0.8) accepted twice
    assert by_bin[0.4]["n"] == 2 and by_bin[0.4]["acceptance"] == 0.5       # path 1-1 (0.4) once of twice
    assert by_bin[0.1]["acceptance"] == 0.0
    with pytest.raises(ValueError):
        lab.calibration(recs, kind="nope")


def test_accept_length_histogram_and_alpha():
    q = {1: 0.6, 2: 0.3, 3: 0.5}
    recs = [cycle(1, q, [1, 3]), cycle(2, q, [1]), cycle(3, q, [2]), cycle(4, q, [])]
    h = lab.accept_length_histogram(recs)
    assert h["counts"] == [1, 2, 1] and h["cycles"] == 4
    assert h["alpha"] == [pytest.approx(3 / 4), pytest.approx(1 / 3)]      # depth 2 reached only via node 1 or 2
    assert h["reached"] == [4, 3]                                            # the denominators of alpha
    assert lab.accept_length_histogram([]) == {"counts": [], "alpha": [], "reached": [], "cycles": 0}


def test_card_phases_oldest_first_and_self_generated_data():
    card = {"tokens_seen": 300, "final_heldout_metrics": {"top1": 0.56, "tau_chain": 2.1},
            "data": {"source": "answers regenerated by the target (self-distilled)"},
            "previous_phase": {"tokens_seen": 200, "final_heldout_metrics": {"top1": 0.53},
                               "data": {"source": "ShareGPT V3"}, "previous_phase": None}}
    phases = lab.card_phases(card)
    assert [p["tokens_seen"] for p in phases] == [200, 300]
    assert [p["self_generated"] for p in phases] == [False, True]
    assert phases[1]["top1"] == 0.56 and phases[0]["tau_chain"] is None


def test_shipped_cards_read():
    import json
    import os
    from eagle_core.model.head import SHIPPED_HEADS
    path = os.path.join(SHIPPED_HEADS["shifted"], "training.json")
    if not os.path.exists(path):
        pytest.skip("no shipped head")
    phases = lab.card_phases(json.load(open(path)))
    assert len(phases) >= 2 and all(p["top1"] for p in phases)
    assert phases[-1]["top1"] >= phases[0]["top1"]           # later phases learned more


def test_lab_figures_render_from_a_report():
    from views import lab as views_lab
    q = {1: 0.6, 2: 0.3, 3: 0.5}
    recs = [cycle(1, q, [1, 3]), cycle(2, q, [1]), cycle(3, q, [2]), cycle(4, q, [])]
    pos = lab.position_acceptance(recs, prompt_of=lambda i: f"p{i % 2}")
    fig = views_lab.position_heatmap(pos)
    hm = fig.data[0]
    assert list(hm.x) == ["P1", "P2", "P1-1"] and list(hm.y)[0] == "all prompts"
    assert hm.z[0][0] == pytest.approx(0.5) and "n=4" in hm.text[0][0]          # rate and count in the cell
    curve = {"q": lab.calibration(recs), "path": lab.calibration(recs, kind="path")}
    rel = views_lab.reliability(curve, {"q": lab.calibration_error(curve["q"]), "path": None})
    assert len(rel.data) == 3 and "ECE" in rel.data[1].name                        # diagonal + two curves
    h = views_lab.accept_histogram(lab.accept_length_histogram(recs))
    assert list(h.data[0].y) == [0.25, 0.5, 0.25]
    runs = {"chain of 5": {"tau": 1.8, "ms_per_cycle": 60.0}, "tree of 5": {"tau": 2.0, "ms_per_cycle": 58.0}}
    c = views_lab.compare_runs(runs, "tree vs chain")
    assert "τ=2.00" in c.data[0].text[1] and "58 ms" in c.data[0].text[1]


def test_input_kind_entry_speed_and_card():
    card = {"tokens_seen": 3_400_000, "epochs": 2.0, "wall_time_s": {"train": 700.0},
            "data": {"conversations": 4100, "tokens": 1_700_000},
            "final_heldout_metrics": {"alpha": [0.5, 0.4, 0.3], "tau_chain": 1.9, "top1": 0.5}}
    e = lab.input_kind_entry({"tau": 1.6, "tokens_per_s": 45.0}, {"tokens_per_s": 30.0}, card)
    assert e["speedup"] == pytest.approx(1.5) and e["heldout"]["alpha"][:2] == [0.5, 0.4]
    assert e["heldout"]["tokens"] == 1_700_000
    assert lab.input_kind_entry({"tau": 1.0, "tokens_per_s": 10.0}, None, None)["speedup"] is None


def test_assemble_builds_every_panel_from_named_runs():
    """The lab's plan run on synthetic records (one per name) gives the report the app paints."""
    from eagle_core.decoding.engine import default_config
    plan = lab.lab_plan(default_config("cpu"))
    names = [n for n, _, _ in plan]
    assert names[0] == "plain" and sum(n.startswith("inputs/") for n in names) == 4 and "positions" in names
    q = {1: 0.6, 2: 0.3, 3: 0.5}
    good = [cycle(1, q, [1, 3]), cycle(2, q, [1])]
    bad = [cycle(1, q, []), cycle(2, q, [])]
    for r, secs in zip(good + bad, (1.0, 1.0, 1.0, 1.0)):
        r.verify_seconds = secs
    good[-1].total_new_tokens, bad[-1].total_new_tokens = 6, 4
    runs = {n: [("p1", bad if n in ("plain", "inputs/token only") else good)] for n in names}
    rep = lab.assemble(runs, plan, {"token-only": {"final_heldout_metrics": {"alpha": [0.2, 0.1]}}})
    assert list(rep["inputs"]) == list(lab.INPUT_KINDS)
    assert rep["inputs"]["feature only"]["speedup"] == pytest.approx(1.5)     # 6 vs 4 tokens in the same time
    assert rep["inputs"]["token only"]["heldout"]["alpha"] == [0.2, 0.1]
    assert rep["inputs"]["feature only"]["heldout"] is None
    assert len(rep["tree_vs_chain"]) == 2 and rep["histogram"]["cycles"] == 2
    assert rep["bench_histogram"]["config"].startswith("eagle-static")


def test_inputs_finding_says_what_the_numbers_show():
    from views import lab as views_lab
    paper_like = {"feature & shifted token": {"tau": 2.0}, "feature & unshifted token": {"tau": 1.6},
                  "token only": {"tau": 1.2}, "feature only": {"tau": 1.4}}
    s = views_lab.inputs_finding(paper_like)
    assert "shifted token helps" in s and "as the paper finds" in s and "best input" not in s
    reversed_ = dict(paper_like, **{"token only": {"tau": 1.5}, "feature & unshifted token": {"tau": 2.1}})
    s = views_lab.inputs_finding(reversed_)
    assert "Unlike the paper" in s and "does not help" in s and "best input here is feature & unshifted" in s
    assert "slower than plain" not in s
    slow = {k: dict(v, speedup=0.8) for k, v in paper_like.items()}
    assert "Every chain of 5 here is slower than plain decoding (0.80-0.80×)" in views_lab.inputs_finding(slow)


def test_shipped_ablation_heads_are_what_their_names_say():
    """The four heads of the input ablation: each loads as its kind, and all share one recipe and one budget."""
    import os
    from eagle_core.model.head import ABLATION_HEADS, ABLATION_KINDS, load_head
    if not all(os.path.exists(os.path.join(f, "config.json")) for f in ABLATION_HEADS.values()):
        pytest.skip("ablation heads not shipped")
    budgets = set()
    for spec, (shift, inputs) in ABLATION_KINDS.items():
        head = load_head(ABLATION_HEADS[spec])
        card = lab.read_card(ABLATION_HEADS[spec])
        assert (head.shift, head.inputs) == (shift, inputs) and card["kind"] == head.kind
        assert card["initialised_from"] is None                     # from scratch
        c = card["config"]
        budgets.add((card["tokens_seen"], c["epochs"], c["lr"], c["batch_tokens"], c["seed"], c["conversations"]))
    assert len(budgets) == 1


def test_data_finding_follows_the_cards():
    from views import lab as views_lab
    up = {"shifted": [{"top1": 0.50, "tau_chain": 1.9, "self_generated": False},
                      {"top1": 0.53, "tau_chain": 2.0, "self_generated": True}]}
    s = views_lab.data_finding(up)
    assert "0.500 → 0.530" in s and "chain τ 1.90 → 2.00" in s and "in the paper's direction" in s
    down = {"shifted": [dict(up["shifted"][0]), dict(up["shifted"][1], top1=0.49)]}
    assert "unlike the paper" in views_lab.data_finding(down)
    assert views_lab.data_finding({"shifted": [up["shifted"][0]]}) == ""        # no self-generated phase: silent


def test_bench_histograms_one_group_per_set():
    from views import lab as views_lab
    fig = views_lab.bench_histograms({"mt_bench": {"counts": [6, 3, 1], "alpha": [0.4, 0.25], "method": "eagle-static"},
                                      "gsm8k": {"counts": [2, 2], "alpha": [0.5], "method": "eagle-static"}})
    assert [t.name.split(" (")[0] for t in fig.data] == ["mt_bench", "gsm8k"]
    assert list(fig.data[0].y) == [0.6, 0.3, 0.1] and "10 cycles" in fig.data[0].name and "α0=0.40" in fig.data[0].name
    assert fig.data[0].marker.pattern.shape != fig.data[1].marker.pattern.shape      # not colour alone


def test_tree_and_position_findings_follow_the_numbers():
    from views import lab as views_lab
    s = views_lab.tree_finding({"chain of 5": {"tau": 1.7}, "tree of 5": {"tau": 1.8}})
    assert "accepts more, as in the paper" in s and "+0.10" in s
    assert "unlike the paper" in views_lab.tree_finding({"chain of 5": {"tau": 1.8}, "tree of 5": {"tau": 1.7}})
    q = {1: 0.6, 2: 0.3, 3: 0.5}
    recs = [cycle(i, q, [1] if i % 2 else [2]) for i in range(1, 41)]
    pos = lab.position_acceptance(recs, prompt_of=lambda i: "a" if i < 20 else "b")
    s = views_lab.positions_finding(pos, {"q": 0.05, "path": 0.01})
    assert "P1 0.50, P2 0.50" in s and "ranges from 0.50 to 0.50" in s and "0.050" in s


def test_thin_bars_are_marked_with_their_n_and_interval():
    """A depth few cycles reached (fewer than MIN_REACHED) is drawn hollow with its n instead of its rate, and every
    bar carries its 95% interval, so a tall bar from 9 cycles cannot pass for the finding."""
    from views import lab as views_lab
    inputs = {"feature & shifted token": {"alpha": [0.34, 0.44], "reached": [524, 9]},
              "token only": {"alpha": [0.27, 1.0], "reached": [567, 1]}}
    fig = views_lab.input_depths(inputs)
    for t in fig.data:
        assert list(t.text)[1].startswith("n=") and list(t.marker.opacity)[1] < 0.5
        lo = list(t.error_y.arrayminus)[1]
        assert lo > 0.2, "an n of 9 or 1 has a wide interval"
        assert list(t.error_y.array)[0] < 0.06                     # 500 cycles: a narrow one
    assert lab.rate_interval(4, 9)[0] < 0.2 < 0.7 < lab.rate_interval(4, 9)[1]
    assert lab.rate_interval(0, 0) is None


def test_lab_text_is_large_enough_for_a_room():
    """No <sup> subtitles (Plotly draws them at 70%) and no figure text under 16 px before the page scales it."""
    from views import lab as views_lab
    with open(LAB_JSON) as f:
        rep = json.load(f)
    figs = [views_lab.input_depths(rep["inputs"]), views_lab.input_taus(rep["inputs"]),
            views_lab.position_heatmap(rep["positions"]), views_lab.accept_histogram(rep["histogram"], "x"),
            views_lab.compare_runs(rep["tree_vs_chain"], "t", rep["plain"])]
    for fig in figs:
        assert "<sup>" not in (fig.layout.title.text or "")
        sizes = [t.textfont.size for t in fig.data if getattr(t, "textfont", None) and t.textfont.size]
        sizes += [a.font.size for a in fig.layout.annotations if a.font.size]
        assert all(s >= 16 for s in sizes), sizes
        assert fig.layout.font.size >= 16


def test_heatmap_rows_are_named_by_prompt_text():
    """Rows are the prompts' short text (the shipped report's ids looked up in the shared prompt set it names),
    never the bare MT-bench ids; unknown ids stay ids."""
    from eagle_core.lab.names import prompt_texts
    from views import lab as views_lab
    pos = {"overall": {"1": [4, 2]}, "by_prompt": {"81": {"1": [2, 1]}, "82": {"1": [2, 1]}, "x": {"1": [1, 0]}}}
    fig = views_lab.position_heatmap(pos, names={"81": "Compose an engaging travel blog post about Hawaii.",
                                                 "82": "Compose an engaging travel blog post about Rome."})
    rows = list(fig.data[0].y)
    assert rows[1].startswith("Compose an engaging") and rows[1].endswith("(81)") and rows[2].endswith("(82)")
    assert rows[3] == "x" and len(rows[1]) < 45
    assert views_lab.short_prompt("a " * 40).endswith("…")
    with open(LAB_JSON) as f:
        rep = json.load(f)
    assert not any(k in json.dumps(rep) for k in ("Compose an engaging",)), "the shared prompts are not copied in"
    texts = prompt_texts(rep)
    if os.path.isdir(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")):
        assert set(texts) == set(rep["positions"]["by_prompt"]) and texts["81"].startswith("Compose")
    assert prompt_texts({"prompts": "nowhere.jsonl", "positions": {"by_prompt": {"1": {}}}}) == {}
    # a clone without the shared folder reads the benchmark's prompt-set cache (never fetched from the page)
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "mt_bench_question.jsonl"), "w") as f:
            f.write(json.dumps({"question_id": 81, "turns": ["Cached prompt text"]}) + "\n")
        rep2 = {"prompts": "../elsewhere/mt_bench_question.jsonl", "positions": {"by_prompt": {"81": {}}}}
        assert prompt_texts(rep2, shared=os.path.join(d, "none"), cache=d) == {"81": "Cached prompt text"}


def test_the_two_chains_of_five_are_explained():
    """Panel 1's "feature & shifted token" chain of 5 and panel 3's chain of 5 differ in speed because their heads
    differ (the lab's ablation head against the shipped one) at the same cost per cycle: said with the numbers."""
    from views import lab as views_lab
    with open(LAB_JSON) as f:
        rep = json.load(f)
    heads = lab.chain_heads(rep)
    assert heads["lab"]["speedup"] == pytest.approx(rep["inputs"]["feature & shifted token"]["speedup"])
    assert heads["shipped"]["tokens_seen"] > heads["lab"]["tokens_seen"]
    note = views_lab.chains_note(heads)
    assert f"{heads['lab']['speedup']:.2f}×" in note and f"{heads['shipped']['speedup']:.2f}×" in note
    assert "ablation head" in note and "shipped shifted head" in note and "τ 1.44 against 1.69" in note
    import tabs.lab as lab_tab
    figs = lab_tab.lab_figures(rep)
    assert note in figs["inputs_md"] and note in figs["tree_md"]
    assert lab.chain_heads({}) is None and views_lab.chains_note(None) == ""


# ------------------------------------------------------------------------------ serving panels (lab/serving.py)
def _sweep_rows(ratios):
    from eagle_core.lab import serving
    rows = []
    for b, r in ratios:
        plain = {"tokens": 64 * b, "seconds": 64 * b / (10.0 * b ** 0.8)}
        eagle = {"tokens": 64 * b, "seconds": plain["seconds"] / r,
                 "counters": {"num_drafts": 40 * b, "num_accepted_tokens": 30 * b}}
        rows.append(serving.sweep_row(b, plain, eagle))
    return rows


def test_sweep_rows_and_their_sentence_follow_the_numbers():
    from eagle_core.lab import serving
    rows = _sweep_rows([(1, 1.3), (2, 1.2), (4, 1.05), (8, 0.9), (16, 0.8)])
    assert rows[0]["ratio"] == pytest.approx(1.3) and rows[0]["eagle"]["accepted_per_draft"] == pytest.approx(0.75)
    text = serving.sweep_finding(rows)
    assert "At batch 1 EAGLE decodes 1.30x" in text and "at batch 16 the ratio is 0.80x" in text
    assert "below 1 from batch 8 on" in text and "target saturation" in text
    assert "the same at every batch size (0.75 tokens accepted per draft)" in text
    paying = serving.sweep_finding(_sweep_rows([(1, 1.3), (4, 1.5)]))
    assert "below 1" not in paying and "the best, 1.50x, at batch 4" in paying
    assert serving.sweep_finding([]) == "No batch sweep measured."


def test_counters_sentence_says_whether_the_engines_agree():
    from eagle_core.lab import serving
    same = {"rows": [{"vllm_eagle_vs_plain": None, "ours_vs_vllm_plain": None}] * 2,
            "counters": {"vllm": {"num_drafts": 10, "accepted_per_pos": [6, 3]},
                         "ours": {"num_drafts": 10, "accepted_per_pos": [6, 3]}},
            "accept_rate_per_pos": {"vllm": [0.6, 0.3], "ours": [0.6, 0.3]}}
    assert "2 of 2 prompts" in serving.counters_finding(same) and "the same counts" in serving.counters_finding(same)
    differ = json.loads(json.dumps(same))
    differ["counters"]["ours"]["accepted_per_pos"] = [6, 2]
    differ["accept_rate_per_pos"]["ours"] = [0.6, 0.2]
    differ["rows"][1]["ours_vs_vllm_plain"] = 7
    text = serving.counters_finding(differ)
    assert "1 of 2 prompts" in text and "near-tie" in text and "the same counts" not in text


def test_serving_panels_render_from_a_report():
    from views import lab as views_lab
    rows = _sweep_rows([(1, 1.3), (2, 1.1), (4, 0.9)])
    sweep = {"rows": rows, "n_prompts": 4, "tokens_per_request": 64}
    fig = views_lab.batch_sweep(sweep)
    assert [t.name for t in fig.data] == ["vLLM plain", "vLLM + EAGLE head"]
    assert list(fig.data[1].text) == ["1.30×", "1.10×", "0.90×"] and list(fig.data[0].x) == ["1", "2", "4"]
    assert list(fig.layout.xaxis.ticktext) == ["1<br><b>1.30×</b>", "2<br><b>1.10×</b>", "4<br><b>0.90×</b>"]
    assert fig.data[0].marker.symbol != fig.data[1].marker.symbol          # told apart without colour
    table = views_lab.sweep_table(sweep)
    assert table.count("\n") == 4 and "| 4 |" in table and "0.90×" in table
    counters = {"n_prompts": 2, "compare": {"counters": {"vllm": {"num_drafts": 10, "accepted_per_pos": [6, 3]},
                                                         "ours": {"num_drafts": 10, "accepted_per_pos": [6, 3]}},
                                            "accept_rate_per_pos": {"vllm": [0.6, 0.3], "ours": [0.6, 0.3]}}}
    c = views_lab.serving_counters(counters)
    assert len(c.data) == 2 and "6/10" in c.data[0].text[0] and c.data[0].marker.pattern.shape != \
        c.data[1].marker.pattern.shape


def test_the_lab_tab_shows_the_serving_panels_or_says_how_to_measure_them():
    tab = pytest.importorskip("tabs.lab")
    none = tab.serving_sections(None)
    assert none["counters_md"] == "" and "python -m eagle_core.lab.serving" in none["sweep"].layout.annotations[0].text
    rows = _sweep_rows([(1, 1.3), (2, 0.9)])
    from eagle_core.lab import serving
    cmp = {"rows": [{"vllm_eagle_vs_plain": None, "ours_vs_vllm_plain": None}],
           "counters": {"vllm": {"num_drafts": 10, "accepted_per_pos": [6, 3]},
                        "ours": {"num_drafts": 10, "accepted_per_pos": [6, 3]}},
           "accept_rate_per_pos": {"vllm": [0.6, 0.3], "ours": [0.6, 0.3]}}
    report = {"command": "python -m eagle_core.lab.serving --prompts X --json Y", "date": "2026-12-02",
              "device": "cpu: test", "vllm": {"version": "0.32.0", "compiled": True, "dtype": "float32"},
              "counters": {"n_prompts": 1, "compare": cmp, "finding": serving.counters_finding(cmp)},
              "sweep": {"rows": rows, "n_prompts": 2, "tokens_per_request": 64, "finding": serving.sweep_finding(rows)},
              "load": {"quiet": False}, "wall_s": 600}
    got = tab.serving_sections(report)
    assert "`python -m eagle_core.lab.serving --prompts X --json Y`" in got["source"] and "busy" in got["source"]
    assert "below 1 from batch 2" in got["sweep_md"] and "| 2 |" in got["sweep_md"]
    assert "the same counts" in got["counters_md"]


def _engine_rows(points):
    """(batch, plain tok/s, fixed tok/s, load tok/s, fixed rows, load rows) -> batch_sweep rows."""
    rows = []
    for b, plain, fixed, load, fr, lr in points:
        mk = lambda tps, rows_: {"tokens_per_s": tps, "rows_per_round": rows_ * b, "tau": 1.5,  # noqa: E731
                                 "differs_from_plain": 0}
        rows.append({"batch": b, "plain": {"tokens_per_s": plain, "rows_per_round": b, "tau": 1.0},
                     "eagle-fixed": mk(fixed, fr), "eagle-load": mk(load, lr)})
    return rows


def test_the_engine_batch_panel_follows_its_numbers():
    from eagle_core.bench.batch_sweep import batch_finding
    from tabs.lab import engine_batch_section
    report = {"rows": _engine_rows([(1, 10.0, 20.0, 20.0, 6, 6), (8, 60.0, 50.0, 66.0, 6, 3),
                                    (32, 150.0, 90.0, 150.0, 6, 1)]), "max_new_tokens": 32,
              "command": "python -m eagle_core.bench.batch_sweep", "date": "2026-12-05", "load_before": [0.1]}
    text = batch_finding(report, _sweep_rows([(1, 1.3), (32, 0.66)]))
    assert "One student: EAGLE decodes 2.00x" in text and "CPU tree for everyone gives 0.60x" in text
    assert "sized by the load 1.00x" in text and "(1.0 rows a student instead of 6.0)" in text
    assert "loses to plain decoding from 8 students" in text and "never drops below 1.00x" in text
    assert "0.66x its plain decoding at 32" in text and "token for token" in text
    report["rows"][1]["eagle-load"]["differs_from_plain"] = 2
    assert "2 EAGLE texts differ" in batch_finding(report)
    got = engine_batch_section(report, {"sweep": {"rows": _sweep_rows([(1, 1.3), (32, 0.66)])}})
    fig = got["fig"]
    names = [t.name for t in fig.data]
    assert any("sized by the load" in n for n in names) and any("vLLM" in n for n in names)
    load = next(t for t in fig.data if "sized by the load" in t.name)
    assert list(load.text) == ["2.00×", "1.10×", "1.00×"]
    assert "| 8 | 60.0 | 50.0 | 66.0 | 24.0 | 1.50 |" in got["md"]
    assert "Not measured" in engine_batch_section(None, None)["fig"].layout.annotations[0].text


def test_heatmap_rows_are_never_bare_prompt_ids(tmp_path):
    """Without the prompt file (a server without the shared data folder) a row is named by its set and id, not "81"
    (issue 38.5); with it, by the prompt's text."""
    import json

    from eagle_core.lab.names import prompt_names
    from views.lab import row_names
    rep = json.load(open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "assets", "lab.json")))
    rep["prompts"] = str(tmp_path / "gone" / "mt_bench_question.jsonl")
    names = prompt_names(rep, shared=str(tmp_path), cache=str(tmp_path))
    ids = list(rep["positions"]["by_prompt"])
    assert names == {i: f"MT-bench question {i}" for i in ids}
    rows = row_names(ids, names)
    assert not any(r.isdigit() for r in rows) and rows[0] == "MT-bench question 81"
    (tmp_path / "mt_bench_question.jsonl").write_text(json.dumps({"question_id": 81, "turns": ["Say hi."]}) + "\n")
    assert prompt_names(rep, shared=str(tmp_path), cache=str(tmp_path))["81"] == "Say hi."
