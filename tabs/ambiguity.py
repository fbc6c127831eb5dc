"""The “How can I” tab: one prefix, several sampled branches, where the shifted and the unshifted head put their
predicted features and what they would draft."""
from __future__ import annotations

import gradio as gr

import views
from eagle_core.serving.errors import UserError
from eagle_core.serving.gpu import gpu
from eagle_core.serving.loading import MODEL
from eagle_core.serving.rounds import job_turn
from eagle_core.serving.turns import queue_note

from .common import TRACE, unexpected

INTRO = ("The draft head predicts the target's **feature**. After “How can I” the next feature depends on which token "
         "gets sampled. The **unshifted** head sees only (f_I, e(I)) and makes one prediction for all branches; the "
         "**shifted** EAGLE head sees the sampled token (f_I, e(t)), so each prediction moves toward its own branch "
         "(arrows). With the small shipped heads the move is partial in feature space; the next-token distributions "
         "(right) show what it buys: the shifted guess drafts what the target will say.")


@gpu
def _ambiguity(prefix, branches, chat=False):
    """The view's record (a few forwards of the target and both heads); named for ZeroGPU's worker log."""
    from eagle_core.decoding.ambiguity import compute_ambiguity
    target, heads = MODEL.require()
    rec = compute_ambiguity(target, heads["shifted"], heads["unshifted"], prefix, int(branches), chat=bool(chat),
                            eagle3_head=heads.get("eagle3"))
    if MODEL.notice:
        rec.note = MODEL.notice
    return rec.to_dict()


def check_inputs(prefix, branches) -> int:
    if not isinstance(prefix, str) or not prefix.strip():
        raise UserError("Type a prefix, e.g. “How can I”.")
    if len(prefix) > 300:
        raise UserError("Keep the prefix short (under 300 characters).")
    try:
        b = int(branches)
    except (TypeError, ValueError):
        raise UserError("Branches must be a number.") from None
    if not 2 <= b <= 6:
        raise UserError("Branches must be between 2 and 6.")
    return b


class AmbiguityTab:
    def build(self):
        with gr.Tab("How can I", id="amb"):
            gr.Markdown(INTRO)
            with gr.Row():
                self.prefix = gr.Textbox(value="How can I", label="Prefix (the last token plays “I”)", scale=3)
                self.branches = gr.Slider(2, 6, value=4, step=1, label="Branches", scale=1)
                self.chat = gr.Checkbox(label="as the start of the assistant's reply (chat template)", value=False,
                                        scale=1)
                self.button = gr.Button("Compute", variant="primary", scale=1, elem_id="el-amb")
            self.msg = gr.Markdown("Recorded example; press Compute for a live one." if TRACE else "")
            a0 = (TRACE or {}).get("ambiguity")
            with gr.Row():
                self.fig = gr.Plot(views.ambiguity_figure(a0), label="Features (PCA)")
                self.dist = gr.Plot(views.ambiguity_dist_figure(a0), label="Next-token distributions")
            self.table = gr.HTML(views.ambiguity_html(a0))
        return self

    def on_compute(self, prefix, branches, chat=False):
        """One bounded piece of model work (a few forwards): a job of the engine loop, in its turn."""
        try:
            b = check_inputs(prefix, branches)
            MODEL.require()
            rec = yield from job_turn(lambda: _ambiguity(prefix, b, chat),
                                      lambda ahead, w: {self.msg: queue_note(ahead, w)})
            yield {self.fig: views.ambiguity_figure(rec), self.dist: views.ambiguity_dist_figure(rec),
                   self.table: views.ambiguity_html(rec), self.msg: "Computed live from the target and both heads."}
        except (UserError, ValueError) as exc:
            yield {self.msg: f"❌ {exc}"}
        except GeneratorExit:
            raise
        except Exception as exc:
            yield {self.msg: f"❌ Could not compute ({unexpected(exc)})."}

    def wire(self, model_kw: dict):
        ins, outs = [self.prefix, self.branches, self.chat], [self.fig, self.dist, self.table, self.msg]
        self.button.click(self.on_compute, ins, outs, api_name="ambiguity", **model_kw)
        self.prefix.submit(self.on_compute, ins, outs, api_visibility="private", **model_kw)
