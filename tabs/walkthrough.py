"""The Walkthrough tab, a deck for a projector: Prev / the step counter / Next always on screen (a bar that stays at
the top; the arrow keys move too, views/js/deck.js), the step's few sentences beside its figure, which takes the
rest of the screen (a recorded run of exactly its settings, a measured table, or a live one), and a button that
opens the step's own settings where they make its point. Step 4 hosts a second same-law panel (tabs/law.py)."""
from __future__ import annotations

import dataclasses
import re

import gradio as gr

import views
from eagle_core.serving import generation
from eagle_core.serving.errors import UserError
from eagle_core.serving.loading import MODEL
from eagle_core.serving.rounds import job_turn
from eagle_core.serving.turns import CANCELLED, queue_note
from views.chain_tree import accept_counts
from views.walkthrough import SAMPLING, STEPS, open_settings, pick_cycle, side_figure, \
    step_counter, step_details, step_settings, step_text, walk_figure

from .ambiguity import _ambiguity
from .common import DEFAULT_PRESET, SETTING_NAMES, TRACE, TRACES, Settings, load_json, trace_name, unexpected
from .law import LawPanel
from .lens import trace_meta

# step 1's figure: the benchmark's own pass-cost table (python -m eagle_core.bench.sets writes it into its report)
BENCH_FILE = ("bench", "sets_mt_bench_t0_cpu.json")
BENCH = load_json(*BENCH_FILE) or {}
LAB = load_json("lab.json") or {}       # step 6's measured chain and tree (python -m eagle_core.lab)


def _as_settings(d: dict) -> Settings:
    return Settings(**{k: d[k] for k in SETTING_NAMES})


def step_of(i) -> Settings:
    """The settings step i's figure was decoded with ("Show it live" decodes them)."""
    return _as_settings(step_settings(int(i), DEFAULT_PRESET))


def opens_of(i) -> Settings:
    """The settings "Open these settings" puts in the Lens for step i."""
    return _as_settings(open_settings(int(i), DEFAULT_PRESET))


def law_settings() -> Settings:
    """Step 4's same-law panel: the lesson's prompt and tree, sampled as step 7 samples."""
    return dataclasses.replace(step_of(3), **SAMPLING)


def trace_for(s: Settings) -> dict | None:
    """A recorded run decoded with exactly these settings (prompt, head, shape, tree, T, top-p, seed, length)."""
    for t in TRACES.values():
        c = t.get("config") or {}
        shape_ok = ((s.draft == "static" and c.get("tree") == s.preset)
                    or (s.draft == "chain" and int(c.get("depth", -1)) == int(s.depth))
                    or (s.draft == "dynamic" and (int(c.get("depth", -1)), int(c.get("top_k", -1)),
                                                   int(c.get("total_tokens", -1)))
                        == (int(s.depth), int(s.top_k), int(s.total_tokens))))
        if (t.get("prompt") == s.prompt and c.get("draft") == s.draft and shape_ok
                and s.shifted    # the recorded runs draft with the shifted head (scripts/record_trace.py)
                and float(c.get("temperature", -1)) == float(s.temperature)
                and (s.temperature == 0 or (float(c.get("top_p", 1)) == float(s.top_p)
                                            and int(c.get("seed", -1)) == int(s.seed)))
                and int(c.get("max_new_tokens", -1)) == int(s.max_new_tokens)):
            return t
    return None


RECORDED, LIVE, NOTHING = "Recorded run (this step's settings)", "Live run (decoded just now)", "No run yet"
MEASURED = "Measured by the benchmark (recorded)"


def recorded_label(t: dict) -> str:
    return f"Recorded on {t.get('target', '?')} ({str(t.get('recorded', '?'))[:10]}) with this step's settings. "


def bench_source(b: dict) -> str:
    """Where step 1's table was measured, from the benchmark's own report."""
    cfg = b.get("config") or {}
    device = str(b.get("device", "?")).split(",")[0:2]
    return f"Measured by the benchmark ({str(cfg.get('date', '?'))[:10]}, {', '.join(device)})"


def lab_runs(lab: dict) -> tuple[dict, str]:
    """Step 6's chain and tree, measured by the Paper lab (assets/lab.json): chain_tree_figure's runs."""
    runs = {name: {"counts": r.get("accept_length_counts"), "tau": r.get("tau")}
            for name, r in (lab.get("tree_vs_chain") or {}).items()}
    return runs, f"the Paper lab's runs ({lab.get('n_prompts', '?')} prompts, {str(lab.get('date', '?'))[:10]})"


def select(i) -> tuple[str, object, str]:
    """Step i's text, main figure (labelled recorded, measured or live) and note, from a recorded run of exactly its
    settings when there is one."""
    i = int(i)
    view = STEPS[i]["view"]
    md = step_text(i)
    if view == "pass_cost":
        pc = BENCH.get("pass_costs")
        fig, note = walk_figure(i, [], costs=pc, costs_source=bench_source(BENCH))
        return md, fig, note if pc else "No benchmark table: press “Show it live”."
    t = TRACE if view == "ambiguity" else trace_for(step_of(i))
    if not t:
        return md, views.common.empty_figure("Press “Show it live”"), \
            "No recorded run with these settings: press “Show it live”."
    recs = t.get("race_records", t.get("records", [])) if view == "race" else t.get("records", [])
    fig, note = walk_figure(i, recs, t.get("plain_records"), t.get("ambiguity"))
    return md, fig, recorded_label(t) + note


def side_of(i):
    """The figure beside step i's main one (step 3: the tree of the mask's cycle; step 6: chain against tree,
    measured), or None."""
    i = int(i)
    t = trace_for(step_of(i))
    return side_figure(i, (t or {}).get("records", []), *lab_runs(LAB))


def share(fig) -> int:
    """A figure's share of the deck's width beside another (gr.Plot's scale): a tree's tokens need the room, so a
    tree takes 4 parts to the other figure's 3 (issue 50.5: at 1280x720 in presenter type, half the width cut
    step 6's runner-up to "␣…")."""
    anns = getattr(getattr(fig, "layout", None), "annotations", None) or ()
    return 4 if any(str(getattr(a, "name", "") or "").startswith("node-") for a in anns) else 3


def figure_label(msg: str):
    """The figure's label from the note beside it, which says what the figure shows: a recorded run, a live one
    (the same-law draws are live), or nothing yet (a progress or error note leaves the label as it is: the
    figure has not changed)."""
    m = str(msg or "")
    if m.startswith("Measured by the benchmark"):
        return MEASURED
    if m.startswith("Recorded"):
        return RECORDED
    if m.startswith("Live") or re.match(r"[\d,]+ draws each at T", m):
        return LIVE
    if m.startswith("No recorded"):
        return NOTHING
    return None


class WalkthroughTab:
    def __init__(self, lens, tabs_ref):
        self.lens, self.tabs_ref = lens, tabs_ref   # the Lens tab (Open these settings) and the gr.Tabs holder

    def build(self):
        with gr.Tab("Walkthrough", id="walk", elem_id="el-walk"):
            md0, fig0, msg0 = select(0)
            # the bar: Prev, the counter, the steps by number, Next; it stays on screen (CSS: sticky)
            with gr.Row(elem_id="el-walk-bar", equal_height=True):
                self.prev = gr.Button("◀ Prev", elem_id="el-walk-prev", scale=0, min_width=104, interactive=False)
                self.count = gr.Markdown(step_counter(0), elem_id="el-walk-count")
                self.step = gr.Radio([(str(k + 1), s["title"]) for k, s in enumerate(STEPS)], value=STEPS[0]["title"],
                                     type="index", show_label=False, container=False, label="Step",
                                     elem_id="el-walk-steps", scale=0, min_width=300)
                self.next = gr.Button("Next ▶", elem_id="el-walk-next", scale=0, min_width=104)
            self.fig = gr.Plot(fig0, label=figure_label(msg0) or NOTHING, elem_id="el-walk-fig",
                               elem_classes=["el-fill"], render=False, scale=share(fig0))
            self.msg = gr.Markdown(msg0, elem_id="el-walk-note", render=False)   # the figure in words
            with gr.Row(elem_id="el-walk-deck", equal_height=False):
                with gr.Column(scale=3, min_width=300, elem_id="el-walk-left"):
                    self.md = gr.Markdown(md0, elem_id="el-walk-text")
                    with gr.Row(elem_id="el-walk-actions"):
                        self.live = gr.Button("Show it live", variant="primary", elem_id="el-walk-live", min_width=120)
                        self.apply = gr.Button("Open these settings", elem_id="el-walk-apply", min_width=150)
                    # step 4: draw EAGLE's first tokens and plain samples; the histograms replace the figure
                    with gr.Column(visible=False, elem_id="el-walk-law") as self.law_box:
                        self.law = LawPanel(self.lens, settings=law_settings(), prefix="el-walk-law",
                                            api_name="walk_same_law").build(accordion=False, fig=self.fig,
                                                                            note=self.msg)
                    self.msg.render()
                    with gr.Accordion("More: details and settings", open=False, elem_id="el-walk-more"):
                        self.more = gr.Markdown(step_details(0, DEFAULT_PRESET), elem_id="el-walk-details")
                with gr.Column(scale=5, min_width=320, elem_id="el-walk-right"):
                    with gr.Row(elem_id="el-walk-figs"):
                        side0 = side_of(0)
                        self.side = gr.Plot(side0, visible=side0 is not None, label="Beside it", show_label=False,
                                            elem_id="el-walk-side", elem_classes=["el-fill"], scale=share(side0))
                        self.fig.render()
        return self

    def on_select(self, i) -> dict:
        i = int(i or 0)
        md, fig, msg = select(i)
        side = side_of(i)
        return {self.md: md, self.fig: gr.update(value=fig, scale=share(fig)), self.msg: msg,
                self.count: step_counter(i),
                self.side: gr.update(value=side, visible=side is not None, scale=share(side)),
                self.more: step_details(i, DEFAULT_PRESET),
                self.law_box: gr.update(visible=STEPS[i]["title"].startswith("4.")),
                self.prev: gr.update(interactive=i > 0), self.next: gr.update(interactive=i < len(STEPS) - 1)}

    def on_move(self, i, delta: int) -> dict:
        i = max(0, min(len(STEPS) - 1, int(i or 0) + delta))
        return {self.step: gr.update(value=STEPS[i]["title"])}

    def on_live(self, i):
        msg = lambda text: {self.msg: text}   # noqa: E731
        try:
            i = int(i)
            s, view, title = step_of(i), STEPS[i]["view"], STEPS[i]["title"]
            waiting = lambda ahead, w: msg(queue_note(ahead, w))   # noqa: E731
            progress = lambda cycles: msg(f"⏳ Decoding live: {cycles[-1].total_new_tokens} tokens…")  # noqa: E731
            target, _ = MODEL.require()
            if view == "pass_cost":
                from eagle_core.bench.pass_cost import pass_costs
                yield msg("⏳ Timing one target pass by tokens per pass…")
                pc = yield from job_turn(lambda: pass_costs(target, reps=3), waiting)
                if pc is CANCELLED:
                    return
                fig, note = walk_figure(i, [], costs=pc, costs_source=f"measured just now on {target.name}")
                yield {self.fig: fig, self.msg: f"Live, {note}"}
                return
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
            out = {}
            if title.startswith("6."):     # the chain too, on the same prompt: the measured comparison beside
                o = opens_of(i)
                chain = yield from generation.decode_in_turns(o.config(), o.shift, o.prompt, waiting, progress)
                runs = {f"chain of {o.depth}": {"counts": accept_counts(chain), "tau": chain[-1]["tau"]},
                        f"tree ({s.preset})": {"counts": accept_counts(recs), "tau": recs[-1]["tau"]}}
                out[self.side] = gr.update(value=side_figure(i, recs, runs, "this prompt, decoded just now"),
                                           visible=True)
            elif title.startswith("3."):
                out[self.side] = gr.update(value=side_figure(i, recs), visible=True)
            fig, note = walk_figure(i, recs, plain)
            yield out | {self.fig: fig, self.msg: f"Live: {len(recs)} cycles, τ = {recs[-1]['tau']:.2f}. {note}"}
        except (UserError, ValueError) as exc:
            yield msg(f"❌ {exc}")
        except GeneratorExit:
            raise
        except Exception as exc:
            yield msg(f"❌ Failed ({unexpected(exc)}).")

    def on_apply(self, state, i, request: gr.Request = None):
        """The step's own settings where they make its point: the "How can I" tab for step 5; else the Lens tab,
        which at once shows a cycle decoded with them (the step's recorded cycle when a recorded run has exactly
        these settings, no model work; else a live Step: the prefill and one cycle) and says what to look at."""
        i = int(i)
        st = STEPS[i]
        name = st["title"].split(".")[0]
        if st["tab"] == "amb":
            yield {self.tabs_ref[0]: gr.Tabs(selected="amb")}
            return
        s = opens_of(i)
        look = f"Step {name}'s settings: {st['look'].format(**open_settings(i, DEFAULT_PRESET))}"
        out = {getattr(self.lens, n): getattr(s, n) for n in SETTING_NAMES} | {
            self.tabs_ref[0]: gr.Tabs(selected="lens")}
        if st["land"] == "mask":
            out[self.lens.mask_acc] = gr.Accordion(open=True)
        t = trace_for(s)
        if t and t.get("records"):
            recs = t["records"]
            rec, node, _ = pick_cycle(i, recs)
            c = recs.index(rec) if rec is not None else len(recs) - 1
            state = dict(state or {})
            state.update(records=None, trace=trace_name(t), prompt=t.get("prompt", s.prompt), source="trace",
                         seen=None, trace_meta=trace_meta(t))       # the recorded run by name, not a copy
            yield out | self.lens.render(state, c, node, status=(
                f"{look} Its recorded run (cycle {recs[c]['cycle']}, the walkthrough's figure); Step or Run "
                f"decodes them live."))
            return
        yield out | {self.lens.status: f"{look} Decoding one cycle with them…"}
        last = None
        for _ in range(2):   # the prefill, then one drafting cycle
            for last in self.lens.decode(state, s, request, run=False):
                yield last
        failed = last is None or str(last.get(self.lens.status, "")).startswith("❌")
        yield out | ({} if failed else {self.lens.status: look})   # the settings again: the last answer is whole

    def wire(self, model_kw: dict):
        shown = [self.md, self.fig, self.msg, self.count, self.side, self.more, self.law_box, self.prev, self.next]
        self.step.change(self.on_select, [self.step], shown, api_name="walk_select")
        self.live.click(self.on_live, [self.step], [self.fig, self.msg, self.side], api_name="walk_live", **model_kw)
        self.apply.click(self.on_apply, [self.lens.state, self.step], self.lens.settings + [self.tabs_ref[0]]
                         + self.lens.outs + [self.lens.mask_acc], api_name="walk_apply", **model_kw)
        self.msg.change(lambda m: gr.update(label=figure_label(m)) if figure_label(m) else gr.update(), [self.msg],
                        [self.fig], queue=False, show_progress="hidden", api_visibility="private")
        self.prev.click(lambda i: self.on_move(i, -1), [self.step], [self.step], api_visibility="private")
        self.next.click(lambda i: self.on_move(i, 1), [self.step], [self.step], api_visibility="private")
        self.law.wire(model_kw)
