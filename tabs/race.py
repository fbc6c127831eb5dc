"""The Race, inside the Lens tab's "Statistics and the Race" accordion: plain decoding vs EAGLE on the same prompt
and settings, on the shared model, timed by the engine.

RaceView builds its components where the Lens tab calls it and wires its own handler (API name "race", the Lens
settings as its inputs, in the Lens tab's order)."""
from __future__ import annotations

import dataclasses

import gradio as gr

import views
from eagle_core.serving import generation
from eagle_core.serving.errors import UserError
from eagle_core.serving.gpu import gpu
from eagle_core.serving.loading import MODEL
from eagle_core.serving.turns import one_turn, queue_note

from .common import Settings, unexpected


# ----------------------------------------------------------------------------- pure helpers (no components)
@gpu
def race_divergence(prompt: str, plain_tokens: list, eagle_tokens: list):
    """Where the Race's two generations part and the target's logit margin there (one plain forward), with
    the near-tie tolerance for the target's dtype: (divergence dict or None, eps)."""
    from eagle_core.decoding.divergence import divergence, tie_eps_for
    target, _ = MODEL.require()
    return divergence(target, target.render_prompt(prompt), plain_tokens, eagle_tokens), tie_eps_for(target.dtype)


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


# ----------------------------------------------------------------------------- the view
class RaceView:
    def __init__(self, lens):
        self.lens = lens          # the Lens tab: its session state and settings are the Race's inputs

    def build(self, st0: dict):
        """The Race's components, built where the caller is (the Lens tab's accordion)."""
        self.state = self.lens.state
        self.race_btn = gr.Button("Race: plain decoding vs EAGLE on this prompt", elem_id="el-race")
        self.race_msg = gr.Markdown("")
        self.race = gr.Plot(views.race_figure(st0["race_eagle"], st0["plain"]), label="Race")
        return self

    # The API's parameter names (gradio takes them from this signature) stay those clients already use.
    def on_race(self, state, prompt, shifted, temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new):
        """Plain decoding, then EAGLE, of the same prompt, one cycle per model turn (other sessions interleave);
        the speeds are the engine's own timings, which do not include the waits."""
        msg = lambda text: {self.race_msg: text, self.state: state}   # noqa: E731
        try:
            s = Settings.of(prompt, shifted, temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new)
            cfg = s.config()
            prompt = generation.check_prompt(s.prompt)
            MODEL.require()
            lean = dataclasses.replace(cfg, record_topk=0)
            waiting = lambda ahead, w: msg(queue_note(ahead, w))   # noqa: E731

            def progress(which):
                return lambda cycles: msg(f"⏳ Race: {which}, {cycles[-1].total_new_tokens} of "
                                          f"{cfg.max_new_tokens} tokens…")
            plain = yield from generation.decode_in_turns(dataclasses.replace(lean, draft="vanilla"), s.shift,
                                                          prompt, waiting, progress("plain decoding"))
            eagle = yield from generation.decode_in_turns(lean, s.shift, prompt, waiting, progress("EAGLE"))
            state.update(plain=plain, race_eagle=eagle)
            e, v = views.summary(eagle), views.summary(plain)
            pt, et = [t for r in plain for t in r["new_tokens"]], [t for r in eagle for t in r["new_tokens"]]
            greedy = cfg.temperature == 0
            div, eps = (None, 0.0)
            if greedy and pt != et:
                with one_turn():
                    div, eps = race_divergence(prompt, pt, et)
            same = race_sameness(greedy, pt, et, div, eps)
            yield {self.race: views.race_figure(eagle, plain), self.state: state,
                   self.race_msg: f"Race: EAGLE {e['tokens_per_s']:.1f} tok/s vs plain {v['tokens_per_s']:.1f} "
                                  f"tok/s (engine time); {e['forwards']} vs {v['forwards']} target passes; {same}."}
        except (UserError, ValueError) as exc:
            yield msg(f"❌ {exc}")
        except GeneratorExit:
            raise
        except Exception as exc:
            yield msg(f"❌ Race failed ({unexpected(exc)}).")

    def on_reset(self):
        return {self.race: views.race_figure([], []), self.race_msg: ""}

    def wire(self, norm: dict, model_kw: dict):
        """`norm`: the Lens tab's normalise step (its settings brought inside their limits first)."""
        state, settings = self.state, self.lens.settings
        self.race_btn.click(**norm).then(self.on_race, [state] + settings, [self.race, self.race_msg, state],
                                         api_name="race", **model_kw)
        self.lens.reset_btn.click(self.on_reset, None, [self.race, self.race_msg], api_visibility="private",
                                  concurrency_limit=None)
