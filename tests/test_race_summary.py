"""The Race's summary figure says when it is the recorded example's, and stops showing the recorded figures once
the page has live Steps or Runs (issue 38, point 5.4)."""
import json

import pytest

from tabs.common import TRACE
from tabs.lens import initial_state, reset_state
from tabs.race import summary_figure

if not TRACE or not TRACE.get("plain_records"):
    pytest.skip("no recorded Race in assets/trace_default.json", allow_module_level=True)


def title(fig) -> str:
    """The figure's title, or an empty figure's message."""
    layout = json.loads(fig.to_json())["layout"]
    return layout.get("title", {}).get("text") or " ".join(a["text"] for a in layout.get("annotations", []))


def bars(fig) -> list:
    return [t["y"] for t in json.loads(fig.to_json())["data"] if t.get("type") == "bar"]


def test_the_recorded_summary_says_it_is_recorded():
    fig = summary_figure(initial_state())
    assert title(fig).startswith("⏺ Recorded Race (") and str(TRACE["recorded"]) in title(fig), title(fig)
    assert "measured" not in title(fig) and bars(fig), "the recorded figures, named as such"


def test_live_runs_replace_the_recorded_summary():
    recorded = bars(summary_figure(initial_state()))
    state = initial_state()
    state.update(records=[], source="live", prompt="How can I learn Python?")    # what a live Step leaves
    fig = summary_figure(state)
    assert not bars(fig) and "Recorded" not in title(fig) and "Press Race" in title(fig), title(fig)
    # a live Race of its own: its figures, measured, not the recorded ones
    state.update(plain=TRACE["plain_records"][:5], race_eagle=TRACE["race_records"][:3])
    fig = summary_figure(state)
    assert "measured" in title(fig) and "Recorded" not in title(fig) and bars(fig) != recorded
    reset_state(state)
    assert not bars(summary_figure(state))


def test_step_and_run_update_the_summary():
    """Step and Run are each followed by the summary's update (a private event writing the Race's figure)."""
    import app
    demo = app.build_demo()
    plot = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "el-race-plot")
    names = {d.api_name: i for i, d in demo.fns.items()}
    for api in ("step", "run"):
        nxt = [d for d in demo.fns.values() if d.trigger_after == names[api]]
        assert any(plot in d.outputs for d in nxt), api
