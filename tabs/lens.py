"""The Lens tab: Step, Run, Stop and Reset on the shared model, every view of a cycle, Play in beats, the Race.

Handlers take the session state and one Settings object (tabs/common.py) and return {component: value}."""
from __future__ import annotations

import asyncio
import os
import time

import anyio
import gradio as gr

import views
from eagle_core.decoding.drive import drive
from eagle_core.serving import generation
from eagle_core.serving.errors import Busy, Finished, Stopped, UserError
from eagle_core.serving.generation import KEEP_DETAIL, MAX_PROMPT_TOKENS, committed_tokens, \
    ensure_decoder, is_slim
from eagle_core.serving.sessions import SESSIONS
from eagle_core.serving.rounds import cycle_turn
from eagle_core.serving.turns import CANCELLED, queue_note
from views.beats import beat_caption, beat_count, beat_figure, plain_step

from .common import EXAMPLES, PRESETS, DEFAULT_PRESET, SETTING_NAMES, TRACE, Settings, kept_note, limit_slider, \
    normalise, shown, trace_name, unexpected
from .law import LawPanel
from .race import RaceView

STREAM_TEXT_S, STREAM_TREE_S = 0.35, 1.5   # Run: push the text at most this often, the live tree less often
# ...and with a class, less often still: a streamed update costs the server ~10 ms under the GIL (gradio's
# postprocessing of the outputs, those it leaves as they are included, the diff and the event), so thirty Runs
# pushing three a second would take a whole core from the rounds. With R entries running, the text goes out
# every max(STREAM_TEXT_S, R * STREAM_SHARE_S) seconds: ~20 updates a second in all, whatever the class size.
STREAM_SHARE_S = 0.05
# A queue note is an update like those: the first comes after NOTE_AFTER_S of waiting (a class's round takes well
# under a second, so a Step usually shows its cycle first), and once a Run is streaming only after
# RUN_NOTE_AFTER_S (its status already says it is running; a note per cycle would only redraw the page).
NOTE_AFTER_S, RUN_NOTE_AFTER_S = 1.0, 3.0


def stream_intervals(running: int) -> tuple[float, float]:
    """(text, tree) seconds between a Run's streamed updates when `running` entries run at once."""
    text = max(STREAM_TEXT_S, running * STREAM_SHARE_S)
    return text, max(STREAM_TREE_S, 4 * text)
BEAT_SECONDS = float(os.environ.get("EAGLE_LENS_BEAT_SECONDS", 1.6))
PLAY_LIMIT = 16      # Plays animating at once (each waits between beats without a worker thread); more queue


# ----------------------------------------------------------------------------- pure helpers (no components)
def initial_state() -> dict:
    """A page's first state: the recorded run by name (its records are shared, tabs/common.py `shown`), so
    every session's copy of it is a few hundred bytes."""
    t = TRACE or {}
    return dict(sid=None, records=None, plain=None, race_eagle=None, trace=trace_name(TRACE),
                prompt=t.get("prompt", ""), source="trace" if t else "empty", trace_meta=trace_meta(t))


def trace_meta(t: dict | None) -> dict:
    """What the page says about a recorded run it shows (which model, head and when)."""
    return {k: (t or {}).get(k) for k in ("target", "head", "recorded")}


def first_cycle(records) -> int:
    """First paint: the recorded cycle that accepted most (the latest such)."""
    return max(records, key=lambda r: (r["accept_length"], r["cycle"]))["cycle"] if records else 0


def text_panel(state, cyc=None) -> str:
    recs = shown(state)
    src = ""
    if state.get("source") == "trace":
        t = state.get("trace_meta") or trace_meta(TRACE)
        src = (f"<b>Recorded example</b> (from the real model: {views.common.esc(str(t.get('target')))}, head "
               f"{views.common.esc(os.path.basename(str(t.get('head'))))}, {views.common.esc(str(t.get('recorded')))}; "
               "shown until you press Step or Run).")
    notice = None
    if cyc is not None and recs and cyc < recs[-1]["cycle"]:
        # an earlier cycle picked (the slider, or a click on one of its tokens): the text stops there, and says so
        hidden = sum(len(r.get("new_tokens") or []) for r in recs if r["cycle"] > cyc)
        notice = (f"Showing the text up to cycle {cyc}, the one in the tree: the {hidden} token"
                  f"{'' if hidden == 1 else 's'} after it are hidden. Move the Cycle slider to the end "
                  f"(cycle {recs[-1]['cycle']}) to see all of it.")
    return (views.text_html(recs, upto=cyc, prompt=state.get("prompt"), notice=notice) +
            (f"<div class='el-note'>{src}</div>" if src else ""))


def status_line(state, extra="") -> str:
    recs = shown(state)
    parts = [extra] if extra else []      # the model's own notice (a random head...) is the banner's, above
    if recs and recs[-1].get("finished") and state.get("source") == "live":
        why = {"eos": "the stop token", "max_new_tokens": "max new tokens", "context": "the context limit"}
        parts.append(f"■ Generation finished ({why.get(recs[-1]['finished'], recs[-1]['finished'])}): Reset, or "
                     f"a new prompt or setting, starts again.")
    return "  \n".join(parts)


RESET_STATUS = "↺ Reset. Press Step or Run."


def reset_state(state: dict):
    """A page's state after Reset: no generation, no Race."""
    state.update(records=[], prompt="", source="live", plain=[], race_eagle=[], seen=[0, 0.0])


def control_states(shape, tree_kind) -> dict:
    """Which controls apply to this draft shape: {name: interactive}."""
    chain, dynamic = shape == "Chain", str(tree_kind).startswith("dynamic")
    return dict(tree_kind=not chain, preset=not chain and not dynamic, depth=chain or dynamic,
                top_k=dynamic and not chain, total_tokens=dynamic and not chain)


def dropped_note(rec) -> str:
    return (f"Cycle {rec['cycle']}'s tree was not kept: a session keeps the whole tree of its last {KEEP_DETAIL} "
            f"cycles only. The text and the statistics still include this cycle.")


def paint(state, cycle=None, node=None) -> dict:
    """Every view of one cycle of the session's records, by component name (views only, no model work). A cycle
    whose tree was not kept (generation.KEEP_DETAIL) shows the text and statistics, and says so in the figures."""
    state["beat"] = None          # a new view: Play starts this cycle from its first beat
    recs = shown(state)
    n = len(recs)
    cyc = n - 1 if cycle is None else max(0, min(int(cycle), n - 1))
    rec = recs[cyc] if n else None
    out = dict(cycle=gr.update(maximum=max(1, n - 1), value=max(cyc, 0), interactive=n > 1))
    if rec is None:
        e = views.common.empty_figure("Press Step or Run to start")
        return out | dict(text=views.text_html([]), cards=views.stats_html([]), tree=e, probs=e, mask=e,
                          node=gr.update(choices=[], value=None), stats=views.stats_figure([]))
    if is_slim(rec):
        e = views.common.empty_figure(dropped_note(rec))
        return out | dict(text=text_panel(state, cyc), cards=views.stats_html(recs, upto=cyc, seen=state.get("seen")),
                          tree=e, probs=e, mask=e, node=gr.update(choices=[], value=None),
                          stats=views.stats_figure(recs, upto=cyc))
    choices = views.node_choices(rec)
    node = node if node in {c[1] for c in choices} else views.default_node(rec)
    return out | dict(text=text_panel(state, cyc), cards=views.stats_html(recs, upto=cyc, seen=state.get("seen")),
                      tree=views.tree_figure(rec), node=gr.update(choices=choices, value=node),
                      probs=views.probs_figure(rec, node), mask=views.mask_figure(rec),
                      stats=views.stats_figure(recs, upto=cyc))


def beat_record(state, cycle):
    recs = shown(state)
    if not recs:
        return None
    try:
        c = int(cycle)
    except (TypeError, ValueError):
        c = len(recs) - 1
    return recs[max(0, min(c, len(recs) - 1))]


# ----------------------------------------------------------------------------- the tab

def vllm_commands_md(shifted: bool) -> str:
    """Where the head is chosen: the exact lines that run it in vLLM (eagle_core/export/vllm.py), or why it cannot."""
    from eagle_core.export import commands
    if not shifted:
        return ("The unshifted ablation head cannot run in vLLM: vLLM's EAGLE drafter always pairs the feature f_i "
                "with the token sampled at i+1 (the shifted pairing), inputs this head never saw; "
                "`python -m eagle_core.export` refuses it. The shifted head runs there.")
    out = "eagle-lens-vllm"
    return ("The shipped shifted head runs in vLLM unchanged in function (its fc bias folded exactly into the "
            "attention's biases; docs/deploying.md). From the repository, a target other than the embedded one "
            "with `--target`:\n\n```\nscripts/setup_vllm.sh\n"
            f".venv/bin/python -m eagle_core.export --head shifted --out {out}\n" + commands(out) + "\n```")

class LensTab:
    def build(self, st0: dict, state):
        """The components, painted with `st0` (a recorded run) so the first screen needs no round trip."""
        self.state = state
        c0 = first_cycle(shown(st0))
        first = paint(dict(st0), cycle=c0)
        # the cycle first: the buttons, the status, the text (left) and Play and the tree (right) share the first
        # screen; the settings a lesson does not touch fold away below the text
        with gr.Tab("Lens", id="lens"):
            with gr.Row(elem_id="el-lens", equal_height=False):
                with gr.Column(scale=2, min_width=320, elem_id="el-left"):
                    self.build_controls(first)
                with gr.Column(scale=3, min_width=320, elem_id="el-right"):
                    self.build_views(st0, c0, first)
        return self

    def build_controls(self, first: dict):
        self.prompt = gr.Textbox(label=f"Prompt (up to {MAX_PROMPT_TOKENS:,} tokens)",
                                 value=EXAMPLES[0], lines=2, max_lines=4, elem_id="el-prompt")
        with gr.Row(elem_id="el-buttons"):
            self.step_btn = gr.Button("Step", variant="secondary", elem_id="el-step", min_width=70)
            self.run_btn = gr.Button("Run", variant="primary", elem_id="el-run", min_width=70)
            self.stop_btn = gr.Button("Stop", variant="stop", elem_id="el-stop", min_width=70)
            self.reset_btn = gr.Button("Reset", elem_id="el-reset", min_width=70)
        self.status = gr.Markdown("", elem_id="el-status")
        self.input_note = gr.Markdown("", elem_id="el-input-note")
        self.text = gr.HTML(first["text"], elem_id="el-text")
        self.cards = gr.HTML(first["cards"], elem_id="el-cards")
        with gr.Accordion("Settings: temperature, tree or chain, shifted tokens, tree size, top-p, seed, max new "
                          "tokens, example prompts", open=False, elem_id="el-settings"):
            self.temperature = limit_slider("temperature", 0, step=0.05, note=self.input_note, label="Temperature (0 = greedy)",
                                            elem_id="el-set-temperature")
            self.shape = gr.Radio(["Tree", "Chain"], value="Tree", label="Draft shape", elem_id="el-set-shape")
            self.tree_kind = gr.Radio(["static (EAGLE-1)", "dynamic (EAGLE-2)"], value="static (EAGLE-1)",
                                      label="Tree", elem_id="el-set-tree")
            self.shifted = gr.Checkbox(label="Shifted tokens (EAGLE head; off = unshifted ablation)", value=True,
                                       elem_id="el-set-shifted")
            with gr.Accordion("Run this head in vLLM", open=False, elem_id="el-vllm-acc"):
                self.vllm_note = gr.Markdown(vllm_commands_md(True), elem_id="el-vllm")
            self.shifted.change(vllm_commands_md, [self.shifted], [self.vllm_note], queue=False,
                                show_progress="hidden", api_visibility="private")
            self.preset = gr.Dropdown(PRESETS, value=DEFAULT_PRESET, label="Static tree preset", elem_id="el-set-preset",
                                      info=f"{DEFAULT_PRESET}: a tree to learn from; smollm2-cpu: the fastest "
                                           "fitted shape on the dev CPU (a chain there)")
            self.depth = limit_slider("depth", 5, note=self.input_note, label="Depth (chain / dynamic)",
                                      elem_id="el-set-depth")
            self.top_k = limit_slider("top_k", 6, note=self.input_note, label="Top-k per node (dynamic)",
                                      elem_id="el-set-top_k")
            self.total_tokens = limit_slider("total_tokens", 24, note=self.input_note, label="Total tokens (dynamic)",
                                             elem_id="el-set-total_tokens")
            self.top_p = limit_slider("top_p", 1, step=0.05, note=self.input_note, elem_id="el-set-top_p")
            self.seed = gr.Number(value=0, precision=0, label="Seed (T > 0)", elem_id="el-set-seed")
            self.max_new_tokens = limit_slider("max_new_tokens", 64, note=self.input_note,
                                               elem_id="el-set-max_new_tokens")
            gr.Examples(EXAMPLES, inputs=[self.prompt], label="Example prompts")
        self.settings = [getattr(self, n) for n in SETTING_NAMES]   # the API's input order

    def build_views(self, st0, c0, first: dict):
        n0 = len(shown(st0))
        self.cycle = gr.Slider(0, max(1, n0 - 1), value=c0, step=1, label="Cycle (go back to any earlier cycle)",
                               elem_id="el-cycle")
        with gr.Row(elem_id="el-play-row"):
            self.play_btn = gr.Button("▶ Play this cycle", elem_id="el-play", scale=2, size="md", min_width=150)
            self.pause_btn = gr.Button("‖ Pause", elem_id="el-pause", scale=1, size="md", min_width=80)
            self.beat_prev = gr.Button("◀ beat", elem_id="el-beat-prev", scale=1, size="md", min_width=80)
            self.beat_next = gr.Button("beat ▶", elem_id="el-beat-next", scale=1, size="md", min_width=80)
        self.beat_md = gr.Markdown("Play shows this cycle as it happens: draft, one verify pass, accept.",
                                   elem_id="el-beat")
        self.tree = gr.Plot(first["tree"], label="Draft tree", elem_id="el-tree")
        last0 = shown(st0)[c0] if n0 else None
        self.node = gr.Dropdown(label="Node to inspect (draft q vs target p)", choices=views.node_choices(last0),
                                value=views.default_node(last0), interactive=True, allow_custom_value=True)
        self.click = gr.Textbox(elem_id="el-click", show_label=False, container=False)
        self.click_btn = gr.Button("select", elem_id="el-click-btn")
        self.probs = gr.Plot(first["probs"], label="Draft vs target probabilities (click a node in the tree or pick one above)")
        with gr.Accordion("Tree attention mask", open=False) as self.mask_acc:   # the walkthrough's step 3 opens it
            self.mask = gr.Plot(first["mask"], label="Tree attention mask")
        with gr.Accordion("Statistics and the Race", open=True):
            self.stats = gr.Plot(first["stats"], label="Statistics", elem_id="el-stats")
            self.race_view = RaceView(self).build(st0)
        self.law_view = LawPanel(self).build()

    # ------------------------------------------------------------------------- rendering (views only)
    @property
    def outs(self) -> list:
        """The outputs of Step, Run, Reset and the views, in the API's order."""
        return [self.text, self.cards, self.cycle, self.tree, self.node, self.probs, self.mask, self.stats,
                self.status, self.state]

    def render(self, state, cycle=None, node=None, status="") -> dict:
        views_ = paint(state, cycle, node)
        return {getattr(self, k): v for k, v in views_.items()} | {self.status: status, self.state: state}

    def render_streaming(self, state, status, with_tree: bool) -> dict:
        """A Run's intermediate update: the text and the cards (and now and then the tree and the cycle slider:
        an update of a component's properties costs gradio ~5 ms); the heavier figures are drawn once, when the
        Run ends or stops, so the browser keeps up and Stop gets through."""
        recs = shown(state)
        n = len(recs)
        out = {self.text: text_panel(state), self.cards: views.stats_html(recs, seen=state.get("seen")),
               self.status: status, self.state: state}
        if with_tree and recs:
            out[self.tree] = views.tree_figure(recs[-1])
            out[self.cycle] = gr.update(maximum=max(1, n - 1), value=max(n - 1, 0), interactive=False)
        return out

    def message(self, state, msg, icon="❌") -> dict:
        return {self.status: f"{icon} {msg}" if icon else msg, self.state: state}

    # ------------------------------------------------------------------------- Step / Run / Stop / Reset
    def on_normalise(self, *values) -> dict:
        """The settings brought inside their limits; the note beside the buttons says what changed (or keeps a
        typed value's note: the browser clamped that box already, so normalise sees nothing to say)."""
        *values, current = values
        s, note = normalise(Settings.of(*values))
        return {getattr(self, n): getattr(s, n) for n in SETTING_NAMES if n != "shifted" and n != "shape"
                and n != "tree_kind"} | {self.input_note: kept_note(note, current)}

    # The API's parameter names (gradio takes them from these signatures) stay those clients already use.
    def on_step(self, state, prompt, shifted, temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new,
                request: gr.Request = None):
        """One cycle. Waits its turn for the shared model (showing the queue), never behind a whole Run."""
        yield from self.decode(state, Settings.of(prompt, shifted, temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new), request,
                               run=False)

    def on_run(self, state, prompt, shifted, temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new,
               request: gr.Request = None):
        """Cycle after cycle, each in its own model turn; the page gets the text every STREAM_TEXT_S seconds at most
        and the full figures at the end. Stop is checked between cycles, so it ends the Run within one cycle."""
        yield from self.decode(state, Settings.of(prompt, shifted, temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new), request,
                               run=True)

    def decode(self, state, s: Settings, request, run: bool):
        ent = None
        try:
            cfg = s.config()
            ent = SESSIONS.session(state, getattr(request, "session_hash", None))
            if not SESSIONS.claim(ent, "run" if run else "step"):
                busy = ent.running
                ent = None
                yield self.message(state, "This tab is already running." if run and busy == "run" else
                                   "A Run is streaming in this tab: press Stop first, then Step goes on from there."
                                   if busy == "run" else "This tab is still busy with a Step.", icon="")
                return
            notice = ensure_decoder(state, ent, s.prompt, s.shift, cfg, SESSIONS.idle_timeout)
            if run:
                yield from self.run_cycles(state, ent, notice)
            else:
                yield from self.step_cycle(state, ent, notice)
        except Finished as exc:
            yield self.message(state, f"ℹ️ {exc}", icon="")
        except Stopped as exc:
            yield self.message(state, f"{exc} Step or Run starts it again.", icon="")
        except (UserError, ValueError) as exc:   # the engine's messages for bad configs/prompts are for users
            yield self.message(state, str(exc))
        except GeneratorExit:   # the page went away
            raise
        except Exception as exc:
            yield self.message(state, f"Something went wrong ({unexpected(exc)}); press Reset and try again.")
        finally:
            if ent is not None:
                SESSIONS.release(ent)

    def step_cycle(self, state, ent, notice):
        """One cycle; Stop while it waits for its turn ends it without one (at once: it leaves the queue)."""
        dec = ent.decoder
        recs = yield from cycle_turn(dec, lambda ahead, w: self.message(state, queue_note(ahead, w), icon=""),
                                     cancel=ent.stop, quiet_s=NOTE_AFTER_S)
        if ent.decoder is not dec:                        # Reset meanwhile
            yield self.gone(state)
            return
        if recs is CANCELLED:                             # stopped while waiting
            recs = []
        if not recs and ent.stop.is_set():
            yield self.render(state, status=status_line(state, "Stopped before the Step's cycle."))
            return
        state["records"] = generation.bounded(state["records"] + recs)
        generation.bound_decoder(dec)          # (advance does it too; any other way of stepping it must)
        yield self.render(state, status=status_line(state, notice))

    def run_cycles(self, state, ent, notice):
        dec = ent.decoder
        t_start = time.perf_counter()
        seen0 = list(state.get("seen") or [0, 0.0])     # what earlier Runs of this generation delivered
        base = committed_tokens(state)
        pushed = {"text": 0.0, "tree": 0.0}
        status = notice or "Running… (Stop ends it after the cycle in progress)"

        def turn(d, waiting, cancel):     # this cycle in the next round it fits in, unless Reset took the decoder
            if "sent" in pushed:        # the page has taken the last update (with a tree or not): time from here
                with_tree, pushed["text"] = pushed.pop("sent"), time.perf_counter()
                pushed["tree"] = pushed["text"] if with_tree else pushed["tree"]
            if ent.decoder is not d:
                return []
            recs = yield from cycle_turn(d, waiting, cancel,
                                         quiet_s=NOTE_AFTER_S if not pushed["text"] else RUN_NOTE_AFTER_S)
            return recs if ent.decoder is d else []

        def each(recs):
            state["records"] = generation.bounded(state["records"] + recs)
            generation.bound_decoder(dec)
            now = time.perf_counter()
            state["seen"] = [seen0[0] + committed_tokens(state) - base, seen0[1] + (now - t_start)]
            text_s, tree_s = stream_intervals(SESSIONS.running())
            if dec.done or now - pushed["text"] < text_s:
                return None
            tree_due = now - pushed["tree"] >= tree_s
            pushed["sent"] = tree_due
            return self.render_streaming(state, status, with_tree=tree_due)

        # Stop (ent.stop), Reset or the tab closing ends it between cycles, or at once while a cycle waits
        yield from drive(dec, turn, lambda ahead, w: self.message(state, queue_note(ahead, w), icon=""), ent.stop,
                         each=each)
        if ent.decoder is not dec:      # Reset (or the server freed it) meanwhile: the page shows that, not this
            yield self.gone(state)
            return
        state["seen"] = [seen0[0] + committed_tokens(state) - base, seen0[1] + (time.perf_counter() - t_start)]
        end = "Stopped. Step or Run goes on from here." if not dec.done else ""
        yield self.render(state, status=status_line(state, (notice + "  \n" if notice else "") + end))

    def gone(self, state) -> dict:
        """A Step's or Run's last update when Reset took its decoder meanwhile (only Reset does, while it runs):
        Reset's page again, since this update may reach the page after Reset's own."""
        reset_state(state)           # a cycle that ended after Reset must not bring its records back
        return self.render(state, status=RESET_STATUS)

    def on_stop(self, state):
        """Ends a Run after the cycle in progress; a Step waiting for its turn (or a generation being decoded in
        one go) at once."""
        ent = SESSIONS.get(state.get("sid"))
        if ent is None or ent.running not in ("run", "step"):
            return {self.status: "Nothing is running."}
        ent.stop.set()
        return {self.status: "Stopping after the cycle in progress…"}

    def on_reset(self, state):
        ent = SESSIONS.get(state.get("sid"))
        if ent is not None:
            ent.decoder, ent.key = None, None    # first: a Run that sees the Stop below sees the Reset too
            ent.stop.set()
        reset_state(state)
        return self.render(state, status=RESET_STATUS)

    def on_view(self, state, cycle, node=None):
        try:
            node = int(node) if node not in (None, "") else None
            return self.render(state, cycle, node, status=gr.update())
        except Exception as exc:
            unexpected(exc)
            return self.message(state, "Could not draw this cycle.")

    def on_click(self, state, cycle, value):
        """A click in the tree ("node:nonce") or on a token of the text ("node@cycle:nonce", node empty for the
        target's bonus / correction token): that node of that cycle, the cycle slider moved there."""
        node, _, cyc = str(value or "").split(":")[0].partition("@")
        return self.on_view(state, int(cyc) if cyc.isdigit() else cycle, int(node) if node.isdigit() else None)

    def on_controls(self, shape, tree_kind) -> dict:
        return {getattr(self, k): gr.update(interactive=v) for k, v in control_states(shape, tree_kind).items()}

    # ------------------------------------------------------------------------- Play (no model work)
    @staticmethod
    def play_plain(state) -> dict | None:
        """The measured plain step the time bar compares a cycle with: a recorded run's own plain run, or a live
        page's last Race (same server, same target); None before a live page has raced (the bar says so)."""
        recs = shown(state, "plain") if state.get("source") == "trace" else state.get("plain")
        return plain_step(recs)

    async def on_play(self, state, cycle, request: gr.Request = None):
        """The shown cycle in beats (it replays the record): draft level by level, verify, accept. Asynchronous:
        between beats it waits on the event loop, holding no worker thread (at most PLAY_LIMIT play at once)."""
        rec = beat_record(state, cycle)
        if rec is None:
            yield {self.beat_md: "Nothing to play yet: press Step first.", self.state: state}
            return
        if is_slim(rec):
            yield {self.beat_md: dropped_note(rec), self.state: state}
            return
        try:
            flag = SESSIONS.session(state, getattr(request, "session_hash", None)).playing
        except Busy as exc:
            yield {self.beat_md: f"❌ {exc}", self.state: state}
            return
        flag.set()
        n = beat_count(rec)
        plain = self.play_plain(state)
        start = state.get("beat") if isinstance(state.get("beat"), int) and state["beat"] < n - 1 else -1
        for b in range(start + 1, n):
            if not flag.is_set():
                return
            state["beat"] = b
            fig = await anyio.to_thread.run_sync(lambda b=b: beat_figure(rec, b, plain=plain))   # a worker for it
            yield {self.tree: fig, self.beat_md: f"**{beat_caption(rec, b)}**", self.state: state}
            if b < n - 1:
                await asyncio.sleep(BEAT_SECONDS)
        state["beat"] = None
        flag.clear()

    def on_pause(self, state):
        ent = SESSIONS.get(state.get("sid"))
        if ent is None or not ent.playing.is_set():
            return {self.beat_md: "Not playing. ◀ beat / beat ▶ step through the cycle."}
        ent.playing.clear()
        return {self.beat_md: "Paused. ▶ Play goes on; ◀ beat / beat ▶ step."}

    def on_beat(self, state, cycle, delta: int):
        rec = beat_record(state, cycle)
        if rec is None:
            return {self.beat_md: "Nothing to show yet: press Step first.", self.state: state}
        if is_slim(rec):
            return {self.beat_md: dropped_note(rec), self.state: state}
        ent = SESSIONS.get(state.get("sid"))
        if ent is not None:
            ent.playing.clear()
        n = beat_count(rec)
        cur = state.get("beat") if isinstance(state.get("beat"), int) else n - 1
        b = max(0, min(n - 1, cur + delta))
        state["beat"] = b
        return {self.tree: beat_figure(rec, b, plain=self.play_plain(state)), self.beat_md: f"**{beat_caption(rec, b)}**",
                self.state: state}

    # ------------------------------------------------------------------------- wiring
    def wire(self, demo, model_kw: dict):
        state, settings = self.state, self.settings
        norm_out = [c for c in settings if c not in (self.shifted, self.shape, self.tree_kind)] + [self.input_note]
        # no progress timer on the settings and the note: an output the handler leaves unchanged is skipped
        # (gradio_skip), and its "0.0s" timer then stood over the note beside the buttons
        norm = dict(fn=self.on_normalise, inputs=settings + [self.input_note], outputs=norm_out, queue=False,
                    api_visibility="private", show_progress="hidden")
        for btn, fn, name in ((self.step_btn, self.on_step, "step"), (self.run_btn, self.on_run, "run")):
            self.race_view.follow(btn.click(**norm).then(fn, [state] + settings, self.outs, api_name=name,
                                                         **model_kw))
        controls = [self.tree_kind, self.preset, self.depth, self.top_k, self.total_tokens]
        for ctl in (self.shape, self.tree_kind):
            ctl.change(self.on_controls, [self.shape, self.tree_kind], controls, queue=False, api_visibility="private")
        demo.load(self.on_controls, [self.shape, self.tree_kind], controls, queue=False, api_visibility="private")
        self.stop_btn.click(self.on_stop, [state], [self.status], api_name="stop", concurrency_limit=None)
        self.reset_btn.click(self.on_reset, [state], self.outs, api_name="reset", concurrency_limit=None).then(
            lambda: "", None, [self.input_note],
            api_visibility="private")
        self.cycle.input(self.on_view, [state, self.cycle], self.outs, api_name="view_cycle",
                         trigger_mode="always_last")
        self.node.input(self.on_view, [state, self.cycle, self.node], self.outs, api_name="view_node")
        self.click_btn.click(self.on_click, [state, self.cycle, self.click], self.outs, api_visibility="private")
        beat_outs = [self.tree, self.beat_md, state]
        self.play_btn.click(self.on_play, [state, self.cycle], beat_outs, api_name="play", concurrency_id="play",
                            concurrency_limit=PLAY_LIMIT, show_progress="hidden")
        self.pause_btn.click(self.on_pause, [state], [self.beat_md], api_name="pause", concurrency_limit=None)
        self.beat_prev.click(lambda s, c: self.on_beat(s, c, -1), [state, self.cycle], beat_outs,
                             api_name="beat_prev", concurrency_limit=None)
        self.beat_next.click(lambda s, c: self.on_beat(s, c, 1), [state, self.cycle], beat_outs,
                             api_name="beat_next", concurrency_limit=None)
        self.race_view.wire(norm, model_kw)
        self.law_view.wire(model_kw)
