"""The “How can I” tab: one prefix, several sampled branches; what knowing the sampled token buys the draft head,
in one measure (the draft probability of the target's next token) and in tokens (real EAGLE cycles with each head).
"""
from __future__ import annotations

import gradio as gr

import views
from eagle_core.decoding.drive import CANCELLED, drive, finish
from eagle_core.serving.errors import UserError
from eagle_core.serving.gpu import ZERO_GPU, gpu
from eagle_core.serving.loading import MODEL
from eagle_core.serving.rounds import job_turn
from eagle_core.serving.shared import DONE, MINE, SharedResults
from eagle_core.serving.turns import queue_note

from .common import TRACE, Settings, clamp_note, limit_slider, say_typed_value, unexpected

INTRO = ("The draft head predicts the target's **feature**. After “How can I” the next feature depends on which "
         "token gets sampled (a *branch*: “use”, “create”…). The **unshifted** head sees only (f_I, e(I)) and "
         "makes one guess for all branches; the **shifted** EAGLE head also sees the sampled token, (f_I, e(t)). One "
         "measure says what that buys: after each branch, the draft probability each head gives the token the "
         "target says next. Real EAGLE cycles continuing each branch, once with each head, count it in tokens.")


# A class pressing Compute on the same prefix: the record and payoff at T = 0 are a function of (prefix, branches,
# chat, the loaded target and heads), so the engine computes them once and every other asker reads that result.
SHARED = SharedResults()
SHARED_WAIT_S = 1.0      # a waiter's note is refreshed this often


def shared_key(prefix: str, b: int, chat, eagle3) -> tuple:
    target, heads = MODEL.require()
    return (prefix, b, bool(chat), bool(eagle3), id(target), tuple(sorted((k, id(h)) for k, h in heads.items())))


@gpu
def _ambiguity(prefix, branches, chat=False):
    """The view's record (a few forwards of the target and the heads); named for ZeroGPU's worker log."""
    from eagle_core.decoding.ambiguity import compute_ambiguity
    target, heads = MODEL.require()
    rec = compute_ambiguity(target, heads["shifted"], heads["unshifted"], prefix, int(branches), chat=bool(chat),
                            eagle3_head=heads.get("eagle3"), cfg=payoff_shape())   # the payoff's own drafter
    if MODEL.notice:
        rec.note = MODEL.notice
    return rec.to_dict()


def payoff_shape():
    """The drafting shape the payoff compares the heads on: the Lens's starting one (the lesson's tree)."""
    return Settings().config()


def payoff_heads(heads: dict, eagle3: bool) -> dict:
    return {h: heads[h] for h in ("shifted", "unshifted", "eagle3") if h in heads and (eagle3 or h != "eagle3")}


@gpu
def _payoff(rec: dict, eagle3=False):
    """Under ZeroGPU (a worker per call keeps no decoder): every payoff run to its end in one call."""
    from eagle_core.decoding.branch_payoff import PayoffRun
    target, heads = MODEL.require()
    return finish(PayoffRun.for_record(target, payoff_heads(heads, eagle3), payoff_shape(), rec)).result().to_dict()


def payoff_turns(rec: dict, eagle3: bool, waiting):
    """Generator: the payoff (a dict), its runs stepped one round at a time as short jobs of the engine loop (each
    one packed target pass), so a class's cycles wait for one round of it at a time, not for all of it."""
    if ZERO_GPU:
        return (yield from job_turn(lambda: _payoff(rec, eagle3), waiting))
    from eagle_core.decoding.branch_payoff import PayoffRun
    target, heads = MODEL.require()
    run = PayoffRun.for_record(target, payoff_heads(heads, eagle3), payoff_shape(), rec)
    yield from drive(run, payoff_turn, waiting)
    return run.result().to_dict()


def payoff_turn(run, waiting=None, cancel=None):
    """One round of the payoff's runs as a job of the engine loop."""
    stepped = yield from job_turn(run.step, waiting, cancel)
    return stepped if stepped is CANCELLED else [stepped]


def check_inputs(prefix, branches) -> tuple[int, str]:
    """(the branches to compute, a note when the number asked for was outside 2–6 and brought inside: "")."""
    if not isinstance(prefix, str) or not prefix.strip():
        raise UserError("Type a prefix, e.g. “How can I”.")
    if len(prefix) > 300:
        raise UserError("Keep the prefix short (under 300 characters).")
    try:
        b = int(float(branches))
    except (TypeError, ValueError):
        raise UserError("Branches must be a number.") from None
    b, note = clamp_note("branches", b, branches)
    return b, (f"⚠️ {note} " if note else "")


class AmbiguityTab:
    def build(self):
        with gr.Tab("How can I", id="amb"):
            gr.Markdown(INTRO)
            with gr.Row():
                self.prefix = gr.Textbox(value="How can I", label="Prefix (the last token plays “I”)", scale=3)
                self.branches = limit_slider("branches", 4, scale=1)   # a number typed beyond 2–6 is said
                self.chat = gr.Checkbox(label="as the start of the assistant's reply (chat template)", value=False,
                                        scale=1)
                self.eagle3 = gr.Checkbox(label="show the EAGLE-3 head too", value=False, scale=1,
                                          elem_id="el-amb-eagle3")
                self.button = gr.Button("Compute", variant="primary", scale=1, elem_id="el-amb")
            # a typed branch count outside 2–6 is said here, apart from the Compute's message below it, so the
            # note stays after a Compute (the browser clamps the box first: the Compute itself sees 6, says nothing)
            self.input_note = gr.Markdown("", elem_id="el-amb-input-note")
            say_typed_value(self.branches, "branches", self.input_note)
            self.msg = gr.Markdown("Recorded example; press Compute for a live one." if TRACE else "")
            a0 = (TRACE or {}).get("ambiguity")
            self.rec = gr.State(a0)
            self.headline = gr.HTML(views.ambiguity_headline(a0), elem_id="el-amb-headline")
            with gr.Row():
                with gr.Column():      # the plane is shorter than the bars: the payoff goes under it
                    self.fig = gr.Plot(views.ambiguity_figure(a0), label="Features (PCA)")
                    self.payoff = gr.Plot(views.ambiguity_payoff_figure(a0), label="Tokens per cycle")
                with gr.Column():
                    self.dist = gr.Plot(views.ambiguity_dist_figure(a0), label="What each head drafts")
            self.table = gr.HTML(views.ambiguity_html(a0))
        return self

    def outputs(self, rec: dict, eagle3, note: str, payoff: bool = True) -> dict:
        return {self.fig: views.ambiguity_figure(rec), self.dist: views.ambiguity_dist_figure(rec, eagle3=eagle3),
                self.table: views.ambiguity_html(rec, eagle3), self.headline: views.ambiguity_headline(rec),
                self.payoff: views.ambiguity_payoff_figure(rec if payoff else None, eagle3), self.rec: rec,
                self.msg: note}

    def on_compute(self, prefix, branches, chat=False, eagle3=False):
        """The record (one job of the engine loop), then its payoff (a job per round of EAGLE cycles); computed
        once for every student who asks the same thing (SHARED), the others wait for it and read it."""
        mine = False        # this call claimed the computation: it finishes it, or gives it up
        try:
            b, clamped = check_inputs(prefix, branches)
            key = shared_key(prefix, b, chat, eagle3)
            waited = 0.0
            while True:
                state, got = SHARED.claim(key)
                if state == DONE:
                    yield self.outputs(got, eagle3, clamped + "Computed live from the target and the heads, once for "
                                                    "everyone who asked the same (T = 0: the same inputs give the same "
                                                    "record).")
                    return
                if state == MINE:
                    mine = True
                    break
                while not got.wait(SHARED_WAIT_S):      # another student is computing exactly this
                    waited += SHARED_WAIT_S
                    yield {self.msg: f"⏳ Someone asked the same a moment ago: waiting for that computation "
                                     f"({waited:.0f} s)…"}
            waiting = lambda ahead, w: {self.msg: queue_note(ahead, w)}   # noqa: E731
            rec = yield from job_turn(lambda: _ambiguity(prefix, b, chat), waiting)
            yield self.outputs(rec, eagle3, clamped + "⏳ Features computed; now running EAGLE cycles with each head "
                                            "after each branch…", payoff=False)
            rec = dict(rec, payoff=(yield from payoff_turns(rec, bool(eagle3), waiting)))
            SHARED.finish(key, rec)
            mine = False
            # every output again: an API client reads the last update only
            yield self.outputs(rec, eagle3, clamped + "Computed live from the target and the heads.")
        except (UserError, ValueError) as exc:
            yield {self.msg: f"❌ {exc}"}
        except GeneratorExit:
            raise
        except Exception as exc:
            yield {self.msg: f"❌ Could not compute ({unexpected(exc)})."}
        finally:
            if mine:
                SHARED.finish(key, ok=False)     # failed or left: nothing kept, a waiter computes it

    def on_toggle(self, rec, eagle3):
        """Show or hide the EAGLE-3 head's series (no model work: from the record shown)."""
        pay = (rec or {}).get("payoff") or {}
        ran3 = any(r["head"] == "eagle3" for b in pay.get("branches", []) for r in b["runs"])
        has3 = bool((rec or {}).get("eagle3_head"))
        msg = gr.skip()
        if eagle3 and not has3:
            msg = "ℹ️ This record has no EAGLE-3 head (none loaded, or recorded without one)."
        elif eagle3 and pay and not ran3:
            msg = "ℹ️ The EAGLE-3 head's drafts are shown; press Compute to run its EAGLE cycles too."
        return {self.dist: views.ambiguity_dist_figure(rec, eagle3=eagle3),
                self.table: views.ambiguity_html(rec, eagle3), self.payoff: views.ambiguity_payoff_figure(rec, eagle3),
                self.msg: msg}

    def wire(self, model_kw: dict):
        ins = [self.prefix, self.branches, self.chat, self.eagle3]
        outs = [self.fig, self.dist, self.table, self.msg, self.headline, self.payoff, self.rec]
        self.button.click(self.on_compute, ins, outs, api_name="ambiguity", **model_kw)
        self.prefix.submit(self.on_compute, ins, outs, api_visibility="private", **model_kw)
        self.eagle3.change(self.on_toggle, [self.rec, self.eagle3], [self.dist, self.table, self.payoff, self.msg],
                           api_visibility="private")

