"""What the tabs share: the Lens settings as one object, the table of input limits applied to them, the presets,
the recorded runs the page paints first, and small helpers for messages."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import traceback

import gradio as gr

from eagle_core.decoding.engine import DecodeConfig, default_config
from eagle_core.decoding.limits import LIMITS
from eagle_core.decoding.presets import tree_presets
from eagle_core.paths import ASSETS
from eagle_core.serving.errors import UserError
from eagle_core.serving.generation import MAX_PROMPT_CHARS
from eagle_core.serving.loading import MODEL

# the lesson's default: a real tree (assets/trees/smollm2-cpu-tree.json). The CPU speed default (smollm2-cpu, what
# the benchmark and the CLI run) is fitted per machine and on the 2-core Intel dev machine is a 2-node chain
DEFAULT_PRESET = "smollm2-cpu-tree" if "smollm2-cpu-tree" in tree_presets() else default_config("cpu").tree
PRESETS = [DEFAULT_PRESET] + [p for p in tree_presets() if p != DEFAULT_PRESET and not p.startswith("_")]
EXAMPLES = ["How can I learn Python quickly?", "Write a Python function that checks if a number is prime.",
            "What is 17 * 23? Explain step by step.", "What are three tips for a good night's sleep?"]


@dataclasses.dataclass
class Settings:
    """The Lens tab's controls, in the order of the API's inputs (after the session state)."""
    prompt: str = EXAMPLES[0]
    shifted: bool = True
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    shape: str = "Tree"                   # Tree | Chain
    tree_kind: str = "static (EAGLE-1)"   # static (EAGLE-1) | dynamic (EAGLE-2)
    preset: str = DEFAULT_PRESET
    depth: int = 5
    top_k: int = 6
    total_tokens: int = 24
    max_new_tokens: int = 64

    @classmethod
    def of(cls, *values) -> "Settings":
        return cls(*values)

    @property
    def shift(self) -> str:
        return "shifted" if self.shifted else "unshifted"

    @property
    def draft(self) -> str:
        if self.shape == "Chain":
            return "chain"
        return "dynamic" if str(self.tree_kind).startswith("dynamic") else "static"

    def config(self) -> DecodeConfig:
        """The engine's config; every number checked against the one table of limits (a message, not a trace)."""
        values = {}
        for name in ("temperature", "top_p", "seed", "depth", "top_k", "total_tokens", "max_new_tokens"):
            lim, v = LIMITS[name], getattr(self, name)
            try:
                x = lim.kind(v)
            except (TypeError, ValueError):
                raise UserError(f"{lim.label} must be a number (got {v!r})") from None
            lim.check(x)
            values[name] = x
        if self.draft == "static" and self.preset not in PRESETS:
            raise UserError(f"unknown tree preset {self.preset!r}")
        speed = default_config(MODEL.device_type)   # the device's drafting precision and draft vocabulary
        cfg = DecodeConfig(draft=self.draft, tree=self.preset if self.preset in PRESETS else DEFAULT_PRESET,
                           draft_vocab=speed.draft_vocab, draft_dtype=speed.draft_dtype, **values)
        cfg.check()
        return cfg


SETTING_NAMES = [f.name for f in dataclasses.fields(Settings)]


def clamp_note(name: str, x, shown=None) -> tuple[object, str]:
    """(the value brought inside the table's limits, the sentence saying what changed, "" when nothing did)."""
    lim = LIMITS[name]
    if lim.lo <= x <= lim.hi:
        return x, ""
    y = lim.kind(min(lim.hi, max(lim.lo, x)))
    return y, f"{lim.label} {x if shown is None else shown} is outside {lim.lo:g}–{lim.hi:g}: using {y}."


def normalise(s: Settings) -> tuple[Settings, str]:
    """Before Step / Run / Race: values outside their limits are brought inside, an over-long prompt is cut, and
    the note says what was changed; the controls then show the values actually used."""
    notes, out = [], dataclasses.replace(s)
    for name in ("temperature", "top_p", "seed", "depth", "top_k", "total_tokens", "max_new_tokens"):
        lim, v = LIMITS[name], getattr(s, name)
        try:
            x = lim.kind(float(v))
        except (TypeError, ValueError):
            x = lim.kind(lim.hi if name == "top_p" else lim.lo)
            notes.append(f"{lim.label} “{v}” is not a number: using {x}.")
            setattr(out, name, x)
            continue
        if name == "seed" and x < 0:
            notes.append(f"Seed {x} is negative: using {-x}.")
            x = -x
        y, note = clamp_note(name, x, v)
        if note:
            notes.append(note)
        setattr(out, name, y)
    p = s.prompt if isinstance(s.prompt, str) else ""
    if len(p) > MAX_PROMPT_CHARS:
        notes.append(f"The prompt had {len(p):,} characters; the first {MAX_PROMPT_CHARS:,} are used (the box now "
                     f"shows them).")
        p = p[:MAX_PROMPT_CHARS]
    out.prompt = p
    if out.draft == "static" and s.preset not in PRESETS:
        notes.append(f"Unknown tree preset “{s.preset}”: using {DEFAULT_PRESET}.")
        out.preset = DEFAULT_PRESET
    return out, ("ℹ️ " + " ".join(notes)) if notes else ""


LIMIT_CLASS = "el-limit"   # a limit slider's elem class: it survives gradio rebuilding the component


def _lenient(preprocess):
    """gr.Slider.preprocess, except that a limit slider passes a number outside its range on to the handler."""
    def wrapped(self, payload):
        if LIMIT_CLASS not in (self.elem_classes or []):
            return preprocess(self, payload)
        if payload is None:
            return None
        try:
            return gr.Number.round_to_precision(payload, self.precision)
        except (TypeError, ValueError):
            return payload
    wrapped.el_lenient = True
    return wrapped


if not getattr(gr.Slider.preprocess, "el_lenient", False):
    # On the class, not the instance: an update of a slider's properties (its note, `interactive`) makes gradio
    # rebuild the component for that session from its constructor arguments (Blocks.postprocess_data), and the
    # rebuilt one would refuse an out-of-range number again (an HTTP 500 and a server traceback).
    gr.Slider.preprocess = _lenient(gr.Slider.preprocess)


def lenient_preprocess(slider: gr.Slider):
    """gradio's slider refuses a number outside its range with its own bare error ("Value 5 is greater than maximum
    value 2."); a limit slider (elem class LIMIT_CLASS) passes it on to the handler instead, which brings it
    inside the limits and says so (or, through the API, answers with the table's message). A gr.Slider subclass
    would make gradio write a .pyi stub beside this module."""
    assert LIMIT_CLASS in (slider.elem_classes or []), "build it with elem_classes=[LIMIT_CLASS] (limit_slider)"
    slider.el_limit = True
    return slider


def slider_note(name: str, info: str | None):
    """The handler of a limit slider's `input` event: a number typed into its box beyond the range is clamped by
    the browser when the box loses focus, silently; this says so under the slider's label at once (and clears
    the note when an in-range value is typed or dragged)."""
    def note(value):
        try:
            x = LIMITS[name].kind(float(value))
        except (TypeError, ValueError):
            return gr.update(info=info)
        _, text = clamp_note(name, x, value)
        return gr.update(info=f"⚠️ {text}" if text else info)
    return note


def typed_note(name: str):
    """The same as slider_note, for the note beside the Step / Run buttons (where the user looks; the settings
    fold away): the sentence for a number out of range; an in-range value clears a note about this setting only."""
    label = LIMITS[name].label

    def note(value, current):
        try:
            x = LIMITS[name].kind(float(value))
        except (TypeError, ValueError):
            return gr.update()
        _, text = clamp_note(name, x, value)
        if text:
            return f"⚠️ {text}"
        said = str(current or "")
        if not said.startswith(f"⚠️ {label} "):
            return gr.update()
        # the browser clamps the box to the value the note names when it loses focus (a click on Step), and that
        # arrives as one more input: the note stays, since it still says what happened to the typed value
        m = re.search(r"using (-?\d+(?:\.\d+)?)", said)
        return gr.update() if m and float(m.group(1)) == x else ""
    return note


def limit_slider(name: str, value, step=1, label: str | None = None, note=None, **kw) -> gr.Slider:
    """A slider whose range is the table's (decoding/limits.py); a value typed beyond the range is reported under
    its label and in `note` (a Markdown beside the buttons) with what the browser changed it to and, through
    the API, answered by the handler's message."""
    lim = LIMITS[name]
    classes = list(kw.pop("elem_classes", None) or []) + [LIMIT_CLASS]
    sl = lenient_preprocess(gr.Slider(lim.lo, lim.hi, value=value, step=step, label=label or lim.label,
                                      elem_classes=classes, **kw))
    sl.input(slider_note(name, kw.get("info")), [sl], [sl], queue=False, show_progress="hidden",
             trigger_mode="always_last", api_visibility="private")
    if note is not None:
        say_typed_value(sl, name, note)
    return sl


def say_typed_value(slider: gr.Slider, name: str, note) -> None:
    """Wire `note` (a Markdown where the user looks) to say when a number typed into `slider` is out of range
    (typed_note); for a slider whose note is built after it."""
    slider.input(typed_note(name), [slider, note], [note], queue=False, show_progress="hidden",
                 trigger_mode="always_last", api_visibility="private")


def kept_note(note: str, current) -> str:
    """The note beside the buttons after normalising: normalise's own, else a typed value's note (⚠️, typed_note)
    still standing (the browser clamped the box, so normalise saw nothing to say), else none."""
    if note:
        return note
    return current if str(current or "").startswith("⚠️ ") else ""


def brief(exc) -> str:
    """One line about an unexpected error for the page (the trace goes to the server log only)."""
    msg = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def unexpected(exc) -> str:
    traceback.print_exc()
    return brief(exc)


def load_json(*parts) -> dict | None:
    try:
        with open(os.path.join(ASSETS, *parts)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# The recorded runs, loaded once per server and shared by every session: a page's state names the one it shows
# (state["trace"]) and never holds a copy (gradio deep-copies a gr.State's initial value into every session).
TRACES = {n: t for n in ("default", "temperature") if (t := load_json(f"trace_{n}.json"))}   # for the walkthrough
TRACE = TRACES.get("default")


def trace_name(t: dict | None) -> str | None:
    """The name (TRACES key) of a recorded run."""
    return next((n for n, v in TRACES.items() if v is t), None)


def shown(state, key: str = "records") -> list:
    """The records a page shows: its own (`key`: "records" of the live generation, "plain" / "race_eagle" of its
    last Race) or, while it has none (None), those of the recorded run it names (state["trace"])."""
    state = state or {}
    if state.get(key) is not None:
        return state[key]
    t = TRACES.get(state.get("trace") or "") or {}
    if key == "race_eagle":
        return t.get("race_records", t.get("records", []))
    return t.get("plain_records" if key == "plain" else key, [])
