"""The Lens status line never contradicts the page: a "still loading" answer goes once the model is live, the
model's own notice is the banner's (not repeated beside the buttons), a token click names its cycle."""
import gradio as gr

from eagle_core.serving.loading import MODEL
from tabs.lens import LensTab, status_line
from tabs.page import on_live

LOADING = ("❌ The live model is still loading (12 s so far). The run shown was recorded earlier from the real model; "
           "try again in a moment.")


def test_a_still_loading_status_goes_once_the_model_is_live():
    was = MODEL.ready.is_set()
    try:
        MODEL.ready.clear()
        assert on_live(LOADING) == gr.update(), "still loading: the message is true, it stays"
        MODEL.ready.set()
        now = on_live(LOADING)
        assert "still loading" not in now and "ready" in now
        for other in ("", "Running… (Stop ends it after the cycle in progress)", "❌ Prompt is empty"):
            assert on_live(other) == gr.update(), "any other status is left alone"
    finally:
        (MODEL.ready.set if was else MODEL.ready.clear)()


def test_status_line_leaves_the_model_notice_to_the_banner():
    old = MODEL.notice
    try:
        MODEL.notice = "Trained heads not found, using a random head"
        recs = [dict(finished="max_new_tokens")]
        line = status_line(dict(records=recs, source="live"), "Stopped.")
        assert "random head" not in line
        assert line.startswith("Stopped.") and "Generation finished (max new tokens)" in line
    finally:
        MODEL.notice = old


def test_a_token_click_moves_the_cycle():
    """The hidden click box: "node:nonce" from the tree (the cycle shown), "node@cycle:nonce" from a token of the
    text (that cycle; node empty for the bonus / correction token)."""
    seen = []
    tab = LensTab()
    tab.on_view = lambda state, cycle, node=None: seen.append((cycle, node))
    tab.on_click({}, 7, "3:1700000000000")
    tab.on_click({}, 7, "2@4:1700000000000")
    tab.on_click({}, 7, "@5:1700000000000")
    tab.on_click({}, 7, "junk")
    assert seen == [(7, 3), (4, 2), (5, None), (7, None)]


def test_a_class_streams_less_often_each_so_the_server_keeps_up():
    """A streamed update costs the server ~10 ms under the GIL: one student gets the text 3 times a second, a
    class of thirty each every 1.5 s, ~20 updates a second in all whatever the class size."""
    from tabs.lens import STREAM_TEXT_S, STREAM_TREE_S, stream_intervals
    assert stream_intervals(1) == (STREAM_TEXT_S, STREAM_TREE_S)
    assert abs(stream_intervals(30)[0] - 1.5) < 1e-9
    for running in (1, 2, 5, 7, 30, 64):
        text, tree = stream_intervals(running)
        assert running / text <= 20 + 1e-9 and tree >= text and text >= STREAM_TEXT_S


def test_an_earlier_cycle_says_the_later_text_is_hidden():
    """Picking an earlier cycle (the slider, or a click on a token) hides the text after it: the panel says how many
    tokens and how to get them back; the last cycle shows all with no such note."""
    import json
    import os

    from tabs.lens import text_panel
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "assets", "trace_default.json"), encoding="utf-8") as f:
        recs = json.load(f)["records"]
    state = dict(records=recs, source="live")
    last = recs[-1]["cycle"]
    hidden = sum(len(r["new_tokens"]) for r in recs if r["cycle"] > 1)
    panel = text_panel(state, 1)
    assert f"Showing the text up to cycle 1, the one in the tree: the {hidden} tokens after it are hidden" in panel
    assert f"(cycle {last}) to see all of it" in panel
    assert "are hidden" not in text_panel(state, last) and "are hidden" not in text_panel(state)
