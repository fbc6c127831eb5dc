"""tabs/gradio_skip.py: a handler's dict return that leaves some outputs unchanged gets exactly what gradio sends
for them, without gradio rebuilding those components (and their configs) each time."""
from __future__ import annotations

import asyncio

import gradio as gr
import pytest
from gradio.blocks import Blocks, BlocksConfig
from gradio.state_holder import SessionState

from tabs import gradio_skip


def _demo():
    with gr.Blocks() as demo:
        text = gr.HTML("a")
        cycle = gr.Slider(0, 5, value=1, label="cycle")
        plot = gr.Plot(label="tree")
        node = gr.Dropdown(choices=[("x", "x")], value="x", label="node")
        status = gr.Markdown("s")
        state = gr.State({"k": 1})
        btn = gr.Button()
        btn.click(lambda: None, None, [text, cycle, plot, node, status, state])
    fn = next(iter(demo.fns.values()))
    return demo, fn, dict(text=text, cycle=cycle, plot=plot, node=node, status=status, state=state)


RETURNS = [
    lambda c: {c["text"]: "<b>new</b>", c["status"]: "running", c["state"]: {"k": 2}},       # a streamed update
    lambda c: {c["status"]: "⏳ waiting"},                                                    # one output only
    lambda c: {c["cycle"]: gr.update(maximum=9, value=3), c["text"]: "t", c["state"]: {"k": 3}},
    lambda c: {c[k]: gr.skip() for k in ("text", "cycle")} | {c["status"]: "x"},             # explicit skips
    lambda c: {c[k]: v for k, v in dict(text="t", cycle=2, plot=None, node="x", status="s", state={}).items()},
    lambda c: gr.skip(),
]


def _postprocess(demo, fn, value, patched: bool, monkeypatch):
    calls = []
    real = BlocksConfig.config_for_block
    monkeypatch.setattr(BlocksConfig, "config_for_block",
                        staticmethod(lambda _id, *a, **k: calls.append(_id) or real(_id, *a, **k)))
    state = SessionState(demo)
    calls.clear()
    with monkeypatch.context() as m:
        if patched:
            gradio_skip.install()
        else:
            m.setattr(Blocks, "postprocess_data", ORIGINAL)
        out = asyncio.run(Blocks.postprocess_data(demo, fn, value, state))
    return out, list(calls), state


ORIGINAL = Blocks.postprocess_data if not getattr(Blocks.postprocess_data, "skips_unchanged", False) else None


@pytest.mark.skipif(ORIGINAL is None, reason="gradio_skip was installed before this module was imported")
@pytest.mark.parametrize("k", range(len(RETURNS)))
def test_unchanged_outputs_get_what_gradio_sends_without_a_rebuild(k, monkeypatch):
    demo, fn, c = _demo()
    want, calls_want, st_want = _postprocess(demo, fn, RETURNS[k](c), False, monkeypatch)
    monkeypatch.setattr(Blocks, "postprocess_data", ORIGINAL)      # install() wraps whatever is there
    got, calls_got, st_got = _postprocess(demo, fn, RETURNS[k](c), True, monkeypatch)
    assert got == want
    assert st_got.state_data.get(c["state"]._id) == st_want.state_data.get(c["state"]._id)
    for name in ("cycle", "node"):         # the session's components end with the same properties
        props = [{k: v for k, v in st[c[name]._id].constructor_args.items() if k not in ("value", "render")}
                 for st in (st_got, st_want)]
        assert props[0] == props[1]
    named = RETURNS[k](c)
    skipped = [c[n]._id for n in c if n != "state" and (named == gr.skip() or c[n] not in named
                                                          or named[c[n]] == gr.skip())]
    assert not set(skipped) & set(calls_got)           # no config rebuilt for an output left as it is
    assert set(skipped) <= set(calls_want)             # (gradio alone rebuilds every one of them)
    assert (k == 4) == (not skipped)
