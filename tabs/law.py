"""The Lens's "same law" panel: exactness at T > 0 drawn live (decoding/law.py, views/law.py).

At the session's current position (the text generated so far, or the prompt before any Step) it draws N first
tokens of an EAGLE cycle with the session's head, tree and temperature, and N plain draws from the target, and
overlays the two histograms with the test's p-value. The target pass and the head forward that give p and q run
as a job of the engine loop (serving/rounds.py); the draws need no model and run in the request's thread.
"""
from __future__ import annotations

import dataclasses

import gradio as gr

import views.law as vlaw
from eagle_core.decoding.law import MAX_DRAWS, root_dists, same_law
from eagle_core.decoding.presets import children_of_path
from eagle_core.model.token_bytes import display_text
from eagle_core.serving.errors import UserError
from eagle_core.serving.generation import prompt_ids
from eagle_core.serving.loading import MODEL
from eagle_core.serving.rounds import job_turn
from eagle_core.serving.sessions import SESSIONS
from eagle_core.serving.turns import CANCELLED, queue_note
from views.common import answer_tail, empty_figure, show_token

from .common import Settings, unexpected

DEFAULT_DRAWS = 1000
INTRO = ("**Lossless at any temperature, shown.** Draw the token a cycle emits first, many times at the "
         "position the text has reached, with EAGLE (drafts tested against p, the residual when all are "
         "rejected) and with plain sampling from p, then compare the two histograms.")


def first_level(s: Settings) -> tuple[int, str]:
    """(root children a cycle drafts, the rule that tests them) for these settings."""
    cfg = s.config()
    spec = cfg.spec()
    if spec.kind == "vanilla":
        raise UserError("plain decoding drafts nothing: pick a tree or a chain")
    if spec.kind == "dynamic":
        return spec.top_k, "target"
    return max(1, len(children_of_path(spec.static_choices()).get((), []))), "ratio"


class LawPanel:
    """The panel; the Lens builds one in an accordion drawing with its own controls, the walkthrough (step 4) a
    second one with fixed settings whose figure and note are the walkthrough's own."""

    def __init__(self, lens, settings: Settings | None = None, prefix: str = "el-law", api_name: str | None = "same_law"):
        self.lens = lens
        self.fixed = settings         # draw with these instead of the Lens's controls
        self.prefix, self.api_name = prefix, api_name

    def build(self, accordion: bool = True, fig=None, note=None):
        if not accordion:
            return self.build_controls(fig, note)
        with gr.Accordion("Same law at T > 0: EAGLE's first token vs plain sampling", open=False,
                          elem_id=f"{self.prefix}-acc"):
            gr.Markdown(INTRO)
            return self.build_controls(fig, note)

    def build_controls(self, fig=None, note=None):
        """The number of draws and the button; the note and the figure, unless given (the walkthrough's)."""
        with gr.Row(elem_id=f"{self.prefix}-row"):
            # a Number without gradio's own range check: the handler clamps to 100..MAX_DRAWS and says so
            self.draws = gr.Number(value=DEFAULT_DRAWS, precision=0, label=f"Draws of each (100 to {MAX_DRAWS:,})",
                                   elem_id=f"{self.prefix}-n", scale=3)
            self.btn = gr.Button("Draw both", elem_id=f"{self.prefix}-btn", scale=1, min_width=110)
        self.note = note or gr.Markdown("", elem_id=f"{self.prefix}-note")
        self.fig = fig or gr.Plot(empty_figure("Set a temperature above 0, then Draw both"), label="Same law",
                                  elem_id=f"{self.prefix}-plot")
        return self

    def position(self, state, s: Settings, target, request) -> list[int]:
        """The tokens so far: the session's live generation of this prompt, or the prompt alone."""
        ids = prompt_ids(target, s.prompt)
        ent = SESSIONS.session(state, getattr(request, "session_hash", None))
        dec = ent.decoder
        if dec is not None and state.get("source") == "live" and list(dec.prompt_ids) == ids:
            return ids + list(dec.new_ids)
        return ids

    def on_draw(self, state, n, *values, request: gr.Request = None):
        try:
            s = self.fixed or Settings.of(*values)
            if float(s.temperature) <= 0:
                yield {self.note: "ℹ️ At T = 0 both are the argmax, one token every time: set a temperature "
                                  "above 0 (Settings) and draw again."}
                return
            asked = int(n or DEFAULT_DRAWS)
            n = max(100, min(asked, MAX_DRAWS))
            clamped = f" (asked for {asked:,}: {n:,} is the range's {'end' if asked > n else 'start'})" \
                if n != asked else ""
            children, rule = first_level(s)
            target, heads = MODEL.require()
            head = heads[s.shift]
            ids = self.position(state, s, target, request)
            job = lambda: root_dists(target, head, ids, s.config())  # noqa: E731  (the session's own drafter)
            got = yield from job_turn(job, lambda ahead, w: {self.note: queue_note(ahead, w)})
            if got is CANCELLED:
                return
            p, q = got
            # byte pieces named by their bytes ("<E0 A4>"), as the tree names them: a lone decode gives "\ufffd"
            tail = display_text(b"".join(target.token_bytes(t) for t in ids[-6:]))
            rec = same_law(p, q, children, n, int(s.seed or 0), target.token_text,
                           position=tail, temperature=float(s.temperature), top_p=float(s.top_p), rule=rule)
            d = dataclasses.asdict(rec)
            answer = answer_tail(tail)        # the chat template's markup is not the text a student reads
            where = f"after “…{show_token(answer, 40)}”" if answer else "the answer's first token"
            yield {self.fig: vlaw.law_figure(d),
                   self.note: f"{vlaw.law_sentence(d)} Position: {where}; {children} root "
                              f"{'child' if children == 1 else 'children'} a cycle. {vlaw.residual_note(d)} "
                              f"({rec.seconds:.1f} s of drawing{clamped}.)"}
        except (UserError, ValueError) as exc:
            yield {self.note: f"❌ {exc}"}
        except Exception as exc:
            yield {self.note: f"❌ Something went wrong ({unexpected(exc)}); try again."}

    def wire(self, model_kw: dict):
        lens = self.lens
        settings = [] if self.fixed else lens.settings
        return self.btn.click(self.on_draw, [lens.state, self.draws] + settings, [self.fig, self.note],
                              api_name=self.api_name, **model_kw)
