"""Play's beat figures (views/beats.py): one trace structure for every beat and every state of a beat (so plotly can
tween them: views/js/beats.js animates through layout.meta["el_steps"]), which nodes are shown and lit at each beat,
the acceptance walk, and the time bar's numbers taken from the records."""
import dataclasses
import json
import os

import pytest

from test_views import prefill, synthetic_cycle
from views.beats import (LIT_SIZE, beat_count, beat_figure, beat_states, plain_step, time_bar)
from views.common import ACCEPTED, DRAFT_Q, TARGET_P

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def trace_records():
    with open(os.path.join(ROOT, "assets", "trace_default.json"), encoding="utf-8") as f:
        t = json.load(f)
    return t["records"], t["plain_records"]


def as_json(fig) -> dict:
    return json.loads(fig.to_json())


def shape(trace: dict) -> tuple:
    """What must not change between beats for plotly to tween: the trace's kind and its number of points."""
    return trace["type"], trace.get("name"), len(trace.get("x") or []), len(trace.get("y") or [])


def records():
    recs, plain = trace_records()
    deep = next(r for r in recs if beat_count(r) >= 4)
    return [dataclasses.asdict(synthetic_cycle()), dataclasses.asdict(synthetic_cycle(kind="bonus")), deep], plain


def nodes_of(fig: dict) -> dict:
    return next(t for t in fig["data"] if t["name"] == "nodes")


def test_one_trace_structure_for_every_beat_and_state():
    recs, plain_recs = records()
    plain = plain_step(plain_recs)
    for rec in recs:
        figs = [as_json(beat_figure(rec, b, plain=plain)) for b in range(beat_count(rec))]
        shapes = {tuple(shape(t) for t in f["data"]) for f in figs}
        assert len(shapes) == 1, shapes
        for f in figs:
            steps = f["layout"]["meta"]["el_steps"]
            assert len(steps) >= 2 and steps[0]["ms"] == 0 and all(s["ms"] > 0 for s in steps[1:])
            for st in steps:                     # every state patches every trace, point for point
                assert len(st["data"]) == len(f["data"])
                for patch, trace in zip(st["data"], f["data"]):
                    for k in ("x", "y", "text"):
                        if k in patch:
                            assert len(patch[k]) == len(trace[k]), (k, trace["name"])
            # the figure as sent is the beat's last state (without the script it shows the beat's end)
            last = steps[-1]["data"]
            for patch, trace in zip(last, f["data"]):
                assert patch["x"] == trace["x"], trace["name"]


def test_draft_beats_grow_level_by_level():
    rec = dataclasses.asdict(synthetic_cycle())
    depth = {n["index"]: n["depth"] for n in rec["nodes"]}
    for d in (1, 2, 3):
        f = as_json(beat_figure(rec, d - 1))
        steps = f["layout"]["meta"]["el_steps"]
        start, placed, end = (st["data"][3] for st in steps)
        for i in range(len(depth)):
            shown_at_end = end["marker"]["opacity"][i] > 0
            assert shown_at_end == (depth[i] <= d), (d, i)
            assert (end["text"][i] != "") == (depth[i] <= d)
            if depth[i] == d:      # the new level starts at its parents' places, invisible, and moves out
                parent = next(n["parent"] for n in rec["nodes"] if n["index"] == i)
                assert (start["x"][i], start["y"][i]) == (end["x"][parent], end["y"][parent])
                assert start["marker"]["opacity"][i] == 0 and (start["x"][i], start["y"][i]) != (end["x"][i], end["y"][i])
                # it moves without its label (a label crossing the tree would run over the others), then shows it
                assert start["text"][i] == placed["text"][i] == "" and end["text"][i]
                assert (placed["x"][i], placed["y"][i]) == (end["x"][i], end["y"][i])
            if 0 < depth[i] <= d:
                assert end["marker"]["color"][i] == DRAFT_Q and end["text"][i].endswith(
                    "q " + end["text"][i].split("q ")[-1])
        assert nodes_of(f)["marker"]["opacity"] == end["marker"]["opacity"]


def test_verify_lights_every_node_with_its_p_at_once():
    rec = dataclasses.asdict(synthetic_cycle())
    states = beat_states(rec, 3)
    start, lit, end = (s for _, s in states)
    drafted = range(1, len(rec["nodes"]))
    assert all(start["nodes"]["marker"]["color"][i] == DRAFT_Q for i in drafted)
    # one step: every drafted node turns the target's colour, flashes and shows its p together
    assert all(lit["nodes"]["marker"]["color"][i] == TARGET_P and lit["nodes"]["marker"]["size"][i] == LIT_SIZE
               for i in drafted)
    p = {n["index"]: n["p"] for n in rec["nodes"]}
    assert all(f"p {100 * p[i]:.1f}%" in end["nodes"]["text"][i] for i in drafted)
    assert all(end["nodes"]["marker"]["size"][i] < LIT_SIZE for i in drafted)


def test_acceptance_walks_the_path():
    recs, _ = records()
    for rec in recs:
        states = [s for _, s in beat_states(rec, beat_count(rec) - 1)]
        path = rec["accepted_path"]
        # the verify state, one step per kept node, then the outcome (the target's token moves out, then its label)
        assert len(states) == len(path) + 3
        for k, st in enumerate(states[1:len(path) + 1], start=1):
            order = sorted(n["index"] for n in rec["nodes"])
            colours = dict(zip(order, st["nodes"]["marker"]["color"]))
            assert all(colours[i] == ACCEPTED for i in path[:k])
            assert all(colours[i] == TARGET_P for i in path[k:])        # not reached by the walk yet
            assert len({(x, y) for x, y in zip(st["path"]["x"], st["path"]["y"])}) == k + 1
            assert st["bonus"]["marker"]["opacity"] == [0.0]
        assert states[-2]["bonus"]["text"] == [""] and states[-2]["bonus"]["x"] == states[-1]["bonus"]["x"]
        final = states[-1]
        assert final["bonus"]["marker"]["opacity"] == [1.0] and rec["bonus_kind"] in final["bonus"]["text"][0]
        statuses = {n["index"]: n["status"] for n in rec["nodes"]}
        for i, t in zip(sorted(statuses), final["nodes"]["text"]):
            glyph = {"accepted": "✓", "rejected": "✗", "not_reached": "·"}.get(statuses[i])
            assert glyph is None or t.startswith(glyph), (i, t)


def test_the_time_bar_reads_the_records():
    rec = dataclasses.asdict(synthetic_cycle())
    rec.update(draft_seconds=0.0123, verify_seconds=0.0456, other_seconds=0.0021)
    plain_recs = [dict(cycle=0, verify_seconds=0.5, draft_seconds=0, other_seconds=0)] + [
        dict(cycle=c, verify_seconds=s, draft_seconds=0.0, other_seconds=0.001) for c, s in
        ((1, 0.030), (2, 0.034), (3, 0.090))]
    plain = plain_step(plain_recs)
    assert plain["steps"] == 3 and plain["seconds"] == pytest.approx(0.035)   # the median; the prefill left out
    f = as_json(beat_figure(rec, beat_count(rec) - 1, plain=plain))
    bars = {t["name"]: t for t in f["data"] if t["type"] == "bar"}
    assert bars["draft time"]["x"] == [pytest.approx(12.3)] and bars["verify time"]["x"] == [pytest.approx(45.6)]
    assert bars["verify time"]["base"] == [pytest.approx(12.3)] and bars["accept time"]["x"] == [pytest.approx(2.1)]
    k = len(rec["new_tokens"])
    assert bars["plain passes"]["x"] == [pytest.approx(35.0)] * k          # one segment per replaced plain pass
    assert bars["plain passes"]["base"] == [pytest.approx(35.0 * j) for j in range(k)]
    ticks = f["layout"]["yaxis2"]["ticktext"]
    assert ticks[0] == "EAGLE: 60 ms" and ticks[1] == f"plain ×{k}: 70 ms"
    # before Accept the plain row waits (the number of passes it replaces is known at Accept)
    early = as_json(beat_figure(rec, 0, plain=plain))
    assert next(t for t in early["data"] if t["name"] == "plain passes")["x"] == [0.0] * k
    # without a measured plain step the bar says so, and no plain number is made up
    none = as_json(beat_figure(rec, beat_count(rec) - 1, plain=None))
    assert none["layout"]["yaxis2"]["ticktext"][1] == "plain: not measured"
    assert "plain pass not measured" in none["layout"]["xaxis2"]["title"]["text"]
    assert set(next(t for t in none["data"] if t["name"] == "plain passes")["x"]) == {0.0}
    # a record without its timings has no bar at all
    rec.pop("verify_seconds")
    assert time_bar(rec, plain) is None
    assert not [t for t in as_json(beat_figure(rec, 0, plain=plain))["data"] if t["type"] == "bar"]


def test_plain_step_prefers_unshared_passes():
    recs = [dict(cycle=1, verify_seconds=0.2, pass_sessions=3), dict(cycle=2, verify_seconds=0.03, pass_sessions=1)]
    assert plain_step(recs) == {"seconds": 0.03, "steps": 1, "shared": False}
    assert plain_step(recs[:1])["shared"] and plain_step([]) is None and plain_step(None) is None


def test_a_prefill_has_one_beat_and_no_transition():
    f = beat_figure(prefill(), 0)
    assert "prefill" in f.layout.title.text and not (f.layout.meta or {})
