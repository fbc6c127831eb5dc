"""The Race, inside the Lens tab's "Statistics and the Race" accordion: plain decoding and EAGLE stream side by side
on the same prompt and settings, in turns on the shared model (eagle_core/serving/race.py: the fair schedule), with
running counters, then the measured ratio and whether the texts agree; the bar summary below.

RaceView builds its components where the Lens tab calls it and wires its handlers (API "race": the Lens settings
as its inputs, in the Lens tab's order, returning the summary figure and the board's HTML; "race_stop")."""
from __future__ import annotations

import dataclasses
import threading
import time
import uuid

import gradio as gr

import views
import views.race as vrace
from eagle_core.serving import generation, race
from eagle_core.serving.errors import Stopped, UserError
from eagle_core.serving.gpu import PRECOMPUTE, ZERO_GPU, gpu
from eagle_core.serving.loading import MODEL
from eagle_core.serving.sessions import SESSIONS, Session
from eagle_core.serving.rounds import run_job
from eagle_core.serving.turns import queue_note
from views.common import empty_figure

from .common import TRACES, Settings, shown, unexpected


# ----------------------------------------------------------------------------- pure helpers (no components)
@gpu
def race_divergence(prompt: str, plain_tokens: list, eagle_tokens: list):
    """Where the Race's two generations part and the target's logit margin there (one plain forward), with
    the near-tie tolerance for the target's dtype: (divergence dict or None, eps)."""
    from eagle_core.decoding.divergence import divergence, tie_eps_for
    target, _ = MODEL.require()
    return divergence(target, target.render_prompt(prompt), plain_tokens, eagle_tokens), tie_eps_for(getattr(target, "numerics", target.dtype))


def race_sameness(greedy: bool, plain_tokens: list, eagle_tokens: list, div: dict | None, eps: float) -> str:
    """How the Race's two texts compare, named for what it is (a pure function of the tokens and divergence)."""
    if list(plain_tokens) == list(eagle_tokens):
        return "identical text (greedy: token for token)" if greedy else "identical text"
    if not greedy:
        return "different samples (T > 0: both are exact samples of the target; different random draws)"
    if div is None:   # one is a prefix of the other
        n, m = len(plain_tokens), len(eagle_tokens)
        return (f"same tokens as far as both go; {'plain' if n > m else 'EAGLE'} has {abs(n - m)} more "
                f"(one stopped earlier)")
    shown = {k: div[k].replace("\n", "\\n") for k in ("plain_text", "eagle_text")}
    head = f"texts part at token {div['index']}: plain “{shown['plain_text']}” vs EAGLE “{shown['eagle_text']}”, "
    if div["margin"] <= eps:
        return head + (f"a near-tie (logit margin {div['margin']:.4g} ≤ {eps:g}): plain and tree passes are "
                       f"different kernels, so float rounding can flip a near-tie; not a sampling difference")
    return head + (f"not a near-tie (logit margin {div['margin']:.4g} > {eps:g}): at T = 0 this is a real "
                   f"mismatch, a bug in the verification")


def summary_figure(state: dict):
    """The Race's summary for this page: its own last Race (live, or cleared by Reset); while the page shows the
    recorded example, that example's Race, labelled recorded; once it has live Steps or Runs and no Race of its
    own, none (not the recorded example's figures beside a live generation)."""
    state = state or {}
    if state.get("plain") is not None:
        return views.race_figure(shown(state, "race_eagle"), shown(state, "plain"))
    if state.get("source") == "trace":
        t = TRACES.get(state.get("trace") or "") or {}
        where = ", ".join(str(x) for x in (t.get("target"), t.get("device"), t.get("recorded")) if x)
        return views.race_figure(shown(state, "race_eagle"), shown(state, "plain"), recorded=where or "earlier")
    return empty_figure("Press Race: this prompt decoded plainly and with EAGLE on this server, and timed "
                        "(the recorded example's Race is not shown beside a live generation)")


# ----------------------------------------------------------------------------- the view
RACE_STREAM_S = 0.35    # push the board at most this often (the Run's text pace, tabs/lens.py STREAM_TEXT_S)
IDLE = ("Race: the same prompt and settings decoded plainly and with EAGLE at the same time, on the same model; "
        "watch both texts grow, then read the measured speed ratio.")


@dataclasses.dataclass
class RaceRun:
    """A Race in progress in one browser tab: its Stop flag, whether Reset (not Stop) ended it, and its entry in
    the session store (its decoders count among the server's sessions; closing the tab sets its Stop)."""
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    reset: bool = False
    entry: Session | None = None


def lane_views(lanes) -> list[dict]:
    """The lanes as views/race.py draws them (plain dicts)."""
    state = lambda ln: (vrace.STOPPED if ln.stopped else vrace.FINISHED if ln.done else   # noqa: E731
                        vrace.RUNNING if ln.records else vrace.WAITING)
    return [dict(name=ln.name, records=ln.records, elapsed=ln.elapsed, state=state(ln)) for ln in lanes]


class RaceView:
    def __init__(self, lens):
        self.lens = lens          # the Lens tab: its session state and settings are the Race's inputs
        self.runs: dict[str, RaceRun] = {}     # browser session -> its Race in progress
        self.lock = threading.Lock()

    def build(self, st0: dict):
        """The Race's components, built where the caller is (the Lens tab's accordion)."""
        self.state = self.lens.state
        with gr.Row(elem_id="el-race-row"):
            self.race_btn = gr.Button("Race: plain decoding vs EAGLE on this prompt", elem_id="el-race", scale=3)
            self.stop_btn = gr.Button("■ Stop the Race", variant="stop", elem_id="el-race-stop", scale=1)
        # the rules, with the board's CSS (a page-wide <style>: presenter mode's body class reaches it), drawn once
        gr.HTML(vrace.rules_html(), elem_id="el-race-rules")
        self.race_msg = gr.HTML(vrace.race_idle_html(IDLE), elem_id="el-race-board")
        self.race = gr.Plot(summary_figure(st0), label="Race: the summary", elem_id="el-race-plot")
        return self

    # ------------------------------------------------------------------------- runs (one per browser tab)
    def claim(self, key: str) -> RaceRun | None:
        with self.lock:
            if key in self.runs:
                return None
            run = self.runs[key] = RaceRun()
            return run

    def release(self, key: str, run: RaceRun):
        with self.lock:
            if self.runs.get(key) is run:
                del self.runs[key]

    def end(self, key: str | None, reset: bool = False) -> bool:
        """Stop (or, with `reset`, stop and clear) this tab's Race; False when none runs."""
        with self.lock:
            run = self.runs.get(key or "")
        if run is None:
            return False
        run.reset = run.reset or reset
        run.stop.set()
        return True

    @staticmethod
    def key(request, state) -> str:
        return getattr(request, "session_hash", None) or str(state.get("sid") or "") or uuid.uuid4().hex

    # ------------------------------------------------------------------------- the handler
    # The API's parameter names (gradio takes them from this signature) stay those clients already use.
    def on_race(self, state, prompt, shifted, temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new,
                request: gr.Request = None):
        """Plain decoding and EAGLE of the same prompt at the same time, in turns on the shared model (the one
        that has used less model time goes next; one cycle per model turn, so other sessions interleave); the
        board shows both growing, then the measured ratio. The speeds are the engine's own timings (no waits)."""
        msg = lambda html: {self.race_msg: html, self.state: state}   # noqa: E731
        key, run = self.key(request, state), None
        try:
            s = Settings.of(prompt, shifted, temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new)
            cfg = s.config()
            prompt = generation.check_prompt(s.prompt)
            MODEL.require()
            run = self.claim(key)
            if run is None:
                gr.Info("A Race is already running in this tab: ■ Stop the Race ends it.")
                yield {self.state: state}
                return
            sid, run.entry = SESSIONS.open("race", getattr(request, "session_hash", None))   # Busy when full
            run.entry.stop = run.stop            # Stop, Reset, or the tab closing (drop_hash) end the Race
            yield from self.race_lanes(state, run, dataclasses.replace(cfg, record_topk=0), s.shift, prompt)
        except Stopped:
            yield msg(vrace.race_idle_html("■ Stopped before both generations were computed. " + IDLE))
        except (UserError, ValueError) as exc:
            yield msg(vrace.race_idle_html(f"❌ {exc}"))
        except GeneratorExit:
            raise
        except Exception as exc:
            yield msg(vrace.race_idle_html(f"❌ Race failed ({unexpected(exc)})."))
        finally:
            if run is not None:
                if run.entry is not None:
                    SESSIONS.drop(sid)
                self.release(key, run)

    def race_lanes(self, state, run: RaceRun, cfg, shift: str, prompt: str):
        n = cfg.max_new_tokens
        recorded = ZERO_GPU or PRECOMPUTE
        mode = ("⏳ This server decodes a generation in one go (one GPU call each): computing both first, then "
                "revealing them in turns, each cycle after its own engine time…" if recorded else
                "⏳ Starting both decoders…")
        yield {self.race: empty_figure("The Race is on: its summary appears here when both finish"),
               self.race_msg: vrace.race_board_html([dict(name=race.PLAIN), dict(name=race.EAGLE)], n, prompt, mode)}
        lanes = race.make_lanes(cfg, shift, prompt, cancel=run.stop)
        if run.entry is not None:
            run.entry.decoder = lanes            # counted among the server's decoders while the Race runs
        running = ("Replaying both generations in turns, at the engine's pace." if recorded else
                   "Racing: one cycle per turn; Stop ends it within one cycle.")
        board = lambda status="", result="": vrace.race_board_html(lane_views(lanes), n, prompt, status, result)  # noqa: E731
        turns = race.race_in_turns(lanes, waiting=lambda ahead, w: queue_note(ahead, w), cancel=run.stop)
        pushed, done_before = 0.0, 0
        try:
            while True:
                try:
                    ev = next(turns)
                except StopIteration as fin:
                    outcome = fin.value
                    break
                if isinstance(ev, str):          # a queue note: waiting for the model's turn
                    yield {self.race_msg: board(ev)}
                    pushed = time.perf_counter()
                    continue
                done_now = sum(ln.done for ln in lanes)
                if time.perf_counter() - pushed >= RACE_STREAM_S or done_now != done_before:
                    yield {self.race_msg: board(running)}
                    pushed, done_before = time.perf_counter(), done_now
        finally:
            turns.close()                        # the page went away: leave the model's queue too
        if run.reset:
            yield {self.race: views.race_figure([], []), self.race_msg: vrace.race_idle_html(
                "Reset: the Race was stopped and cleared. " + IDLE), self.state: state}
            return
        plain, eagle = lanes[0].records, lanes[1].records
        state.update(plain=plain, race_eagle=eagle)
        stopped = outcome == "stopped"
        pt, et = lanes[0].tokens(), lanes[1].tokens()
        if stopped:                              # compare as far as both got
            pt, et = pt[:min(len(pt), len(et))], et[:min(len(pt), len(et))]
        greedy = cfg.temperature == 0
        div, eps = (None, 0.0)
        if greedy and pt != et:
            div, eps = run_job(lambda: race_divergence(prompt, pt, et))
        same = race_sameness(greedy, pt, et, div, eps)
        if stopped:
            same += f" (over the first {len(pt)} tokens, as far as both got before Stop)"
        result = (vrace.ratio_html(plain, eagle, stopped=stopped) +
                  f"<div class='el-race-same'>Race: {views.common.esc(same)}.</div>")
        yield {self.race: views.race_figure(eagle, plain), self.state: state,
               self.race_msg: board("■ Stopped." if stopped else "✓ Both finished.", result)}

    def follow(self, event):
        """After a Lens Step or Run (`event`): the summary follows the page (summary_figure). Only a page whose
        summary still shows the recorded example's Race gets a new figure (once: state["race_cleared"])."""
        def on_summary(state):
            if not isinstance(state, dict) or state.get("source") != "live" or state.get("plain") is not None \
                    or state.get("race_cleared"):
                return gr.update()
            state["race_cleared"] = True
            return summary_figure(state)
        event.then(on_summary, [self.state], [self.race], queue=False, show_progress="hidden",
                   api_visibility="private")

    def on_stop(self, request: gr.Request = None):
        """End this tab's Race after the cycle in progress (at once while it waits for a turn)."""
        if not self.end(getattr(request, "session_hash", None)):
            gr.Info("No Race is running in this tab.")

    def on_reset(self, request: gr.Request = None):
        if self.end(getattr(request, "session_hash", None), reset=True):
            return {self.race: gr.update(), self.race_msg: gr.update()}   # the Race clears itself when it ends
        return {self.race: views.race_figure([], []), self.race_msg: vrace.race_idle_html(IDLE)}

    def wire(self, norm: dict, model_kw: dict):
        """`norm`: the Lens tab's normalise step (its settings brought inside their limits first)."""
        state, settings = self.state, self.lens.settings
        self.race_btn.click(**norm).then(self.on_race, [state] + settings, [self.race, self.race_msg, state],
                                         api_name="race", **model_kw)
        self.stop_btn.click(self.on_stop, None, None, api_name="race_stop", concurrency_limit=None)
        self.lens.reset_btn.click(self.on_reset, None, [self.race, self.race_msg], api_visibility="private",
                                  concurrency_limit=None)
