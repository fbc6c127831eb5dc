"""The Walkthrough tab: the lesson in steps, each with a figure (a recorded run of exactly its settings, or a live
one) and a button that opens its settings in the Lens tab."""
from __future__ import annotations

import dataclasses

import gradio as gr

import views
from eagle_core.serving import generation
from eagle_core.serving.errors import UserError
from eagle_core.serving.loading import MODEL
from eagle_core.serving.rounds import job_turn
from eagle_core.serving.turns import queue_note
from views.walkthrough import STEPS, pick_cycle, step_markdown, step_settings, walk_figure

from .ambiguity import _ambiguity
from .common import DEFAULT_PRESET, SETTING_NAMES, TRACE, TRACES, Settings, trace_name, unexpected
from .lens import trace_meta


def step_of(i) -> Settings:
    s = step_settings(int(i), DEFAULT_PRESET)
    return Settings(**{k: s[k] for k in SETTING_NAMES})


def trace_for(s: Settings) -> dict | None:
    """A recorded run decoded with exactly these settings (prompt, shape, tree, T, top-p, seed, length)."""
    for t in TRACES.values():
        c = t.get("config") or {}
        if (t.get("prompt") == s.prompt and c.get("draft") == s.draft
                and (s.draft != "static" or c.get("tree") == s.preset)
                and float(c.get("temperature", -1)) == float(s.temperature)
                and (s.temperature == 0 or (float(c.get("top_p", 1)) == float(s.top_p)
                                            and int(c.get("seed", -1)) == int(s.seed)))
                and int(c.get("max_new_tokens", -1)) == int(s.max_new_tokens)):
            return t
    return None


RECORDED, LIVE, NOTHING = "Recorded run (this step's settings)", "Live run (decoded just now)", "No run yet"


def recorded_label(t: dict) -> str:
    return (f"Recorded on the real model ({t.get('target', '?')}, {t.get('recorded', '?')}) with this step's "
            f"settings: not live. ")


def select(i) -> tuple[str, object, str]:
    """Step i's text, figure (labelled recorded or live) and note, from a recorded run of exactly its settings when
    there is one."""
    i = int(i)
    view = STEPS[i]["view"]
    t = TRACE if view == "ambiguity" else trace_for(step_of(i))
    if not t:
        return step_markdown(i, DEFAULT_PRESET), views.common.empty_figure("Press “Show it live”"), \
            "No recorded run with these settings: press “Show it live”."
    recs = t.get("race_records", t.get("records", [])) if view == "race" else t.get("records", [])
    fig, note = walk_figure(i, recs, t.get("plain_records"), t.get("ambiguity"))
    return step_markdown(i, DEFAULT_PRESET), fig, recorded_label(t) + note


def figure_label(msg: str):
    """The figure's label from the note beside it, which says what the figure shows: a recorded run, a live one,
    or nothing yet (a progress or error note leaves the label as it is: the figure has not changed)."""
    m = str(msg or "")
    if m.startswith("Recorded"):
        return RECORDED
    if m.startswith("Live"):
        return LIVE
    if m.startswith("No recorded"):
        return NOTHING
    return None


class WalkthroughTab:
    def __init__(self, lens, tabs_ref):
        self.lens, self.tabs_ref = lens, tabs_ref   # the Lens tab (Open these settings) and the gr.Tabs holder

    def build(self):
        with gr.Tab("Walkthrough", id="walk"):
            md0, fig0, msg0 = select(0)
            self.step = gr.Radio([s["title"] for s in STEPS], value=STEPS[0]["title"], type="index", label="Step")
            with gr.Row():
                with gr.Column(scale=2):
                    self.md = gr.Markdown(md0)
                    self.msg = gr.Markdown(msg0, elem_id="el-walk-note")   # the figure in words, beside the text
                    with gr.Row():
                        self.prev = gr.Button("◀ Prev", elem_id="el-walk-prev")
                        self.next = gr.Button("Next ▶", elem_id="el-walk-next")
                    with gr.Row():
                        self.live = gr.Button("Show it live", variant="primary", elem_id="el-walk-live")
                        self.apply = gr.Button("Open these settings in the Lens tab", elem_id="el-walk-apply")
                with gr.Column(scale=3):
                    self.fig = gr.Plot(fig0, label=figure_label(msg0) or NOTHING, elem_id="el-walk-fig")
        return self

    def on_select(self, i) -> dict:
        md, fig, msg = select(i)
        return {self.md: md, self.fig: fig, self.msg: msg}

    def on_move(self, i, delta: int) -> dict:
        i = max(0, min(len(STEPS) - 1, int(i or 0) + delta))
        return {self.step: gr.update(value=STEPS[i]["title"])}

    def on_live(self, i):
        msg = lambda text: {self.msg: text}   # noqa: E731
        try:
            i = int(i)
            s, view = step_of(i), STEPS[i]["view"]
            waiting = lambda ahead, w: msg(queue_note(ahead, w))   # noqa: E731
            progress = lambda cycles: msg(f"⏳ Decoding live: {cycles[-1].total_new_tokens} tokens…")  # noqa: E731
            MODEL.require()
            if view == "ambiguity":
                rec = yield from job_turn(lambda: _ambiguity("How can I", 4), waiting)
                fig, note = walk_figure(i, [], None, rec)
                yield {self.fig: fig, self.msg: f"Live: computed just now. {note}"}
                return
            cfg = s.config()
            lean = dataclasses.replace(cfg, record_topk=0) if view == "race" else cfg
            recs = yield from generation.decode_in_turns(lean, s.shift, s.prompt, waiting, progress)
            plain = None
            if view == "race":
                plain = yield from generation.decode_in_turns(dataclasses.replace(lean, draft="vanilla"), s.shift,
                                                              s.prompt, waiting, progress)
            fig, note = walk_figure(i, recs, plain)
            yield {self.fig: fig, self.msg: f"Live: {len(recs)} cycles, τ = {recs[-1]['tau']:.2f}. {note}"}
        except (UserError, ValueError) as exc:
            yield msg(f"❌ {exc}")
        except GeneratorExit:
            raise
        except Exception as exc:
            yield msg(f"❌ Failed ({unexpected(exc)}).")

    def on_apply(self, state, i, request: gr.Request = None):
        """The step's settings into the Lens tab, which at once shows a cycle decoded with them: the step's own
        recorded cycle when a recorded run has exactly these settings (no model work), else a live Step (the
        prefill and one cycle)."""
        i = int(i)
        s = step_of(i)
        out = {getattr(self.lens, n): getattr(s, n) for n in SETTING_NAMES} | {
            self.tabs_ref[0]: gr.Tabs(selected="lens")}
        t = trace_for(s)
        name = STEPS[i]["title"].split(".")[0]
        if t and t.get("records"):
            recs = t["records"]
            rec, node, _ = pick_cycle(i, recs)
            c = recs.index(rec) if rec is not None else len(recs) - 1
            state = dict(state or {})
            state.update(records=None, trace=trace_name(t), prompt=t.get("prompt", s.prompt), source="trace",
                         seen=None, trace_meta=trace_meta(t))       # the recorded run by name, not a copy
            yield out | self.lens.render(state, c, node, status=(
                f"Step {name}'s settings, with its recorded run (cycle {recs[c]['cycle']}, the walkthrough's "
                f"figure). Step or Run decodes them live."))
            return
        yield out | {self.lens.status: f"Step {name}'s settings: decoding one cycle with them…"}
        for _ in range(2):   # the prefill, then one drafting cycle
            yield from self.lens.decode(state, s, request, run=False)

    def wire(self, model_kw: dict):
        self.step.change(self.on_select, [self.step], [self.md, self.fig, self.msg], api_name="walk_select")
        self.live.click(self.on_live, [self.step], [self.fig, self.msg], api_name="walk_live", **model_kw)
        self.apply.click(self.on_apply, [self.lens.state, self.step], self.lens.settings + [self.tabs_ref[0]]
                         + self.lens.outs, api_name="walk_apply", **model_kw)
        self.msg.change(lambda m: gr.update(label=figure_label(m)) if figure_label(m) else gr.update(), [self.msg],
                        [self.fig], queue=False, show_progress="hidden", api_visibility="private")
        self.prev.click(lambda i: self.on_move(i, -1), [self.step], [self.step], api_visibility="private")
        self.next.click(lambda i: self.on_move(i, 1), [self.step], [self.step], api_visibility="private")
