"""The Lens's figures are built from plain dicts without plotly's validation (views/common.figure: ~1 ms a figure
instead of 10-25 ms, which a class's server pays thirty times a round). Plotly's validator still reads every one
of them here: a misspelt property, a wrong value type or a magic-underscore key that plotly would have expanded
fails, as it would have when the figures were validated as they were built."""
from __future__ import annotations

import json
import os

import plotly.graph_objects as go
import pytest

import views
from views.beats import beat_count, beat_figure
from views.common import CARTESIAN_TRACES, NOT_CARTESIAN, figure, grid_axes, grid_layout, layout_base

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def validated(fig) -> dict:
    """The figure through plotly's validator (raises on anything plotly does not know), as JSON."""
    return json.loads(go.Figure(fig.to_dict()).to_json())


def same_but_template(validated_json: dict, sent: dict):
    """Equal but for the template, of which `sent` has what applies to its traces: every trace type's defaults
    that the figure has, and the layout's but for subplot kinds a cartesian figure has none of."""
    full = validated_json["layout"].pop("template")
    part = sent["layout"].pop("template")
    assert validated_json == sent
    types = {d.get("type", "scatter") for d in sent["data"]}
    assert part["data"] == {k: v for k, v in full["data"].items() if k in types}
    assert types <= CARTESIAN_TRACES
    assert part["layout"] == {k: v for k, v in full["layout"].items() if k not in NOT_CARTESIAN}
    assert len(json.dumps(part)) < len(json.dumps(full)) / 2


def lens_figures(records: list):
    for r in records:
        yield views.tree_figure(r)
        yield views.mask_figure(r)
        yield views.stats_figure(records, upto=r["cycle"])
        for node in [None] + [n["index"] for n in r["nodes"]]:
            yield views.probs_figure(r, node)
        for b in range(beat_count(r)):
            yield beat_figure(r, b)
    yield views.race_figure(records, records[:3])
    yield views.race_figure([], [])
    yield views.stats_figure([])
    yield views.common.empty_figure("nothing yet")


@pytest.mark.parametrize("trace", ["trace_default", "trace_temperature"])
def test_every_lens_figure_passes_plotlys_validator(trace):
    with open(os.path.join(ROOT, "assets", f"{trace}.json"), encoding="utf-8") as f:
        records = json.load(f)["records"]
    n = 0
    for fig in lens_figures(records):
        sent = json.loads(fig.to_json())      # what gr.Plot sends: straight from the dicts (no plotly Figure yet)
        assert fig._go is None
        # the same figure, validated: equal after plotly's own coercion, the template as it applies
        same_but_template(validated(fig), sent)
        n += 1
    assert n > 100


def test_the_validator_check_catches_what_validation_would_have():
    """The check above can fail: an unknown property or a value of the wrong type raises."""
    layout = layout_base("t")
    with pytest.raises(ValueError):
        validated(figure([dict(type="bar", x=[1], y=[1], colour="red")], layout))
    with pytest.raises(ValueError):
        validated(figure([dict(type="bar", x=[1], y=[1], opacity="high")], layout))
    with pytest.raises(ValueError):
        validated(figure([], layout_base("t", legend=dict(orientation="sideways"))))
    grid = grid_layout(1, 2)
    assert "xaxis2" in grid and "xaxis3" not in grid
    assert grid_axes(1, 2, 2) == dict(xaxis="x2", yaxis="y2")
    fig = figure([dict(type="bar", x=[1], y=[1], **grid_axes(1, 2, 2))], grid)
    assert validated(fig)["data"][0]["xaxis"] == "x2"


def test_grid_layouts_are_fresh_copies():
    """The grid's layout is computed once and copied per figure: one figure's titles never leak into the next."""
    a = grid_layout(1, 3, subplot_titles=["a", "b", "c"])
    a["annotations"][0]["text"] = "changed"
    assert grid_layout(1, 3, subplot_titles=["a", "b", "c"])["annotations"][0]["text"] == "a"


def test_a_change_made_through_plotlys_api_is_what_is_sent():
    fig = figure([dict(type="bar", x=[1, 2], y=[3, float("nan")])], layout_base("before"))
    fast = json.loads(fig.to_json())
    assert fast["data"][0]["y"] == [3, None]                      # NaN as null, as plotly writes it
    assert fast["layout"]["template"]["data"]["bar"]              # plotly's default template, as it applies
    assert "scatter" not in fast["layout"]["template"]["data"] and "polar" not in fast["layout"]["template"]["layout"]
    fig.update_layout(title_text="after")                         # builds the plotly Figure, used from now on
    assert fig.layout.title.text == "after"
    assert json.loads(fig.to_json())["layout"]["title"]["text"] == "after"


def test_the_exactness_line_adds_up_with_each_nodes_own_numbers():
    """Every tested node of a sampled trace gets one line "kept min(q, p) + corrected max(0, p − q) = p" with its own
    test numbers: the terms are min(q, p) and max(0, p − q) to the shown tenth, and add up to p as printed; the Lens's
    node panel shows it at T > 0 (not at T = 0), and step 7's note shows it for its rejected node."""
    import re
    from views.rules import exactness_sentence
    from views.walkthrough import rejection_note, rejection_rank
    with open(os.path.join(ROOT, "assets", "trace_temperature.json"), encoding="utf-8") as f:
        records = json.load(f)["records"]
    seen = {"ratio": 0, "target": 0}
    for r in records:
        for n in r["nodes"]:
            line = exactness_sentence(n)
            if n.get("rule") not in ("ratio", "target"):
                assert line is None
                continue
            seen[n["rule"]] += 1
            nums = [float(x) for x in re.findall(r"(\d+\.\d)%", line)]
            kept, corrected, p = nums[0], nums[1], nums[-1]
            assert round(kept + corrected, 1) == p, line                      # adds up as printed
            assert p == pytest.approx(100 * n["test_p"], abs=0.051), line
            if n["rule"] == "ratio":
                assert kept == pytest.approx(100 * min(n["test_p"], n["test_q"]), abs=0.051), line
                assert corrected == pytest.approx(100 * max(0.0, n["test_p"] - n["test_q"]), abs=0.11), line
            else:
                assert corrected == 0.0, line
            title = views.probs_figure(r, n["index"]).to_dict()["layout"]["annotations"][0]["text"]
            assert "Exact:" in title and f"{p:.1f}%" in title
    assert seen["ratio"] > 0
    with open(os.path.join(ROOT, "assets", "trace_default.json"), encoding="utf-8") as f:
        greedy = json.load(f)["records"]
    r = next(r for r in greedy if any(n["parent"] >= 0 for n in r["nodes"]))
    node = next(n for n in r["nodes"] if n["parent"] >= 0)
    assert "Exact:" not in views.probs_figure(r, node["index"]).to_dict()["layout"]["annotations"][0]["text"]
    rejected = [r for r in records if r["bonus_kind"] == "correction"]
    note = rejection_note(max(rejected, key=rejection_rank))
    assert re.search(r"Exact: .* kept .* \+ corrected .* = p′? \d+\.\d%", note), note
