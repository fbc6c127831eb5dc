"""The walkthrough as a deck (issue 38, point 1): each step's few sentences, a figure that shows what they say, and
its own settings, which make its point. Pure functions and the tab's handlers; the browser test is
test_browser_deck.py."""
import json
import os
import re

import pytest

from views.walkthrough import STEPS, open_settings, side_figure, step_settings, walk_figure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def step(n: int) -> int:
    return next(i for i, s in enumerate(STEPS) if s["title"].startswith(f"{n}."))


def asset(*parts):
    with open(os.path.join(ROOT, "assets", *parts)) as f:
        return json.load(f)


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z“(])", text) if s.strip()]


def test_each_step_is_at_most_three_short_sentences():
    for st in STEPS:
        assert len(sentences(st["text"])) <= 3, st["title"]
        assert len(st["text"].split()) <= 70, st["title"]     # short: beside a figure on a projector


def test_each_step_opens_its_own_settings_and_they_make_its_point():
    opened = [(st["tab"], st["land"], tuple(sorted(open_settings(i).items()))) for i, st in enumerate(STEPS)]
    assert len(set(opened)) == len(STEPS), "no two steps open the same thing"
    one, three, five, six, seven = (open_settings(step(n)) for n in (1, 3, 5, 6, 7))
    default = open_settings(step(2))
    assert one["preset"] != default["preset"] and STEPS[step(1)]["land"] == "race"   # the fastest shape, raced
    assert three["tree_kind"].startswith("dynamic") and STEPS[step(3)]["land"] == "mask"   # a big tree, one pass
    assert STEPS[step(5)]["tab"] == "amb" and not five["shifted"]     # the "How can I" tab: the unshifted head
    assert six["shape"] == "Chain" and step_settings(step(6))["shape"] == "Tree"   # the chain beside the tree
    assert seven["temperature"] > 0 and default["temperature"] == 0                # step 7 samples
    # steps that share settings (2 and 4: the lesson's tree at T = 0) land on different views of its cycle
    shared = [i for i in range(len(STEPS)) if open_settings(i) == default]
    assert len({STEPS[i]["land"] for i in shared}) == len(shared)


def test_step_one_draws_the_benchmarks_own_pass_cost_table():
    pc = asset("bench", "sets_mt_bench_t0_cpu.json")["pass_costs"]
    fig, note = walk_figure(step(1), [], costs=pc, costs_source="Measured by the benchmark")
    measured = next(t for t in fig.data if "measured" in t.name)
    assert list(measured.y) == pc["plan_ms"] and list(measured.x) == [str(r) for r in pc["rows"]]
    serial = next(t for t in fig.data if "one-token" in t.name)
    assert list(serial.y) == pytest.approx([r * pc["plan_ms"][0] for r in pc["rows"]])
    assert f"{pc['plan_ms'][-1]:.1f} ms" in fig.layout.title.text and f"{pc['plan_ms'][-1]:.1f} ms" in note
    from tabs.walkthrough import MEASURED, figure_label, select
    _, fig, msg = select(step(1))
    assert figure_label(msg) == MEASURED and "benchmark" in msg


def test_step_three_shows_the_mask_beside_the_tree_it_comes_from():
    recs = asset("trace_default.json")["records"]
    mask, _ = walk_figure(step(3), recs)
    tree = side_figure(step(3), recs)
    heat = next(t for t in mask.data if t.type == "heatmap")
    nodes = [a.name[5:] for a in tree.layout.annotations if (a.name or "").startswith("node-")]
    assert sorted(int(y.split(":")[0]) for y in heat.y) == sorted(int(n) for n in nodes)
    assert len(heat.y) == int(re.search(r"(\d+) tokens verified", mask.layout.title.text).group(1))


def test_step_six_sets_the_measured_chain_beside_the_tree():
    from tabs.walkthrough import LAB, lab_runs
    fig = side_figure(step(6), [], *lab_runs(LAB))
    runs = LAB["tree_vs_chain"]
    assert len(fig.data) == 2 and {t.name.split(":")[0] for t in fig.data} == set(runs)
    for t in fig.data:
        counts = runs[t.name.split(":")[0]]["accept_length_counts"]
        assert list(t.y)[:len(counts)] == pytest.approx([c / sum(counts) for c in counts])


def test_step_seven_says_what_it_shows():
    st = STEPS[step(7)]
    assert "click a node" not in (st["text"] + st["more"]).lower()    # no tree in its figure to click
    assert "max(0, p − q), normalised" in st["text"]
    from views.walkthrough import pick_cycle
    recs = asset("trace_temperature.json")["records"]
    _, _, note = pick_cycle(step(7), recs)
    assert "residual max(0, p − q), normalised" in note and "p′ − q′" not in note
    fig, _ = walk_figure(step(7), recs)        # the figure writes it the same way, in its title and legend
    words = " ".join([a.text.replace("<br>", " ") for a in fig.layout.annotations] + [t.name or "" for t in fig.data])
    assert "max(0, p − q), normalised" in words and "p′ − q′" not in words
    # the deck's short form: at most four residual bars, the drawn token always among them, on every recorded cycle
    from views.probs import probs_figure
    for rec in recs:
        bars = [t for t in probs_figure(rec, compact=True).data if t.type == "bar" and t.xaxis == "x3"]
        assert len(bars[0].x) <= 4 and sum(x.startswith("★ ") for x in bars[0].x) == 1, rec["cycle"]


def test_step_four_hosts_the_same_law_panel_at_t_above_zero():
    from tabs.walkthrough import figure_label, law_settings, LIVE
    s = law_settings()
    assert s.temperature > 0 and s.prompt == step_settings(step(4))["prompt"]
    assert figure_label("1,000 draws each at T = 0.8: EAGLE's first token …") == LIVE


# ----------------------------------------------------------------------------- the handlers, on the tiny target
@pytest.fixture(scope="module")
def client():
    from gradio_client import Client
    from servers import app_in_process
    with app_in_process("tiny") as url:
        yield Client(url, verbose=False)


def test_open_these_settings_differs_per_step(client):
    """Through the API: each step puts its own settings in the Lens (a recorded cycle or a live Step with them) and
    says what to look at; step 5 only switches to the "How can I" tab."""
    from tabs.common import DEFAULT_PRESET, SETTING_NAMES, Settings
    lens = vars(Settings())          # the Lens's controls as the page starts
    seen = {}
    for i, st in enumerate(STEPS):
        if st["tab"] == "amb":
            continue
        out = client.predict(st["title"], api_name="/walk_apply")
        # gradio_skip answers a value the handler leaves as the page has it with a bare update
        got = {k: lens[k] if isinstance(v, dict) and v.get("__type__") == "update" else v
               for k, v in zip(SETTING_NAMES, out[:len(SETTING_NAMES)])}
        want = open_settings(i, DEFAULT_PRESET)
        for k in ("shape", "tree_kind", "preset", "temperature", "shifted", "depth", "total_tokens"):
            assert got[k] == want[k], (st["title"], k, got[k])
        status = [o for o in out if isinstance(o, str) and o.startswith(f"Step {i + 1}'s settings")]
        assert status, (st["title"], "says what to look at")
        seen[i] = tuple(sorted(got.items()))
    assert len(set(seen.values())) >= len(seen) - 1     # only steps 2 and 4 share (the lesson's tree, T = 0)


def test_step_four_draws_the_same_law(client):
    fig, note = client.predict(1000, api_name="/walk_same_law")
    assert "draws each at T = 0.8" in note, note


def test_show_it_live_measures_and_decodes_what_each_figure_shows(client):
    """Step 1 times a target pass by tokens per pass on this server; step 6 decodes the prompt as a tree and as a
    chain and sets their accepted lengths side by side; step 3 draws the live cycle's tree beside its mask."""
    from servers import plot
    fig, msg, _ = client.predict(STEPS[step(1)]["title"], api_name="/walk_live")
    assert msg.startswith("Live, measured just now"), msg
    bars = plot(fig)["data"]
    assert [str(x) for x in bars[0]["x"]] == ["1", "2", "4", "8", "16", "26"] and all(y > 0 for y in bars[0]["y"])
    fig, msg, side = client.predict(STEPS[step(6)]["title"], api_name="/walk_live")
    assert msg.startswith("Live"), msg
    shown = lambda out: plot(out.get("value", out))   # noqa: E731  (an update that also shows the figure)
    names = [t["name"] for t in shown(side)["data"]]
    assert any(n.startswith("chain of 5") for n in names) and any(n.startswith("tree") for n in names), names
    fig, msg, side = client.predict(STEPS[step(3)]["title"], api_name="/walk_live")
    assert any(t["type"] == "heatmap" for t in plot(fig)["data"]) and shown(side)["layout"]["annotations"]
