"""Shared helpers for the views: colours, token display, record access.

Views take CycleRecords (dataclasses) or their `asdict` dicts and nothing model-related.
"""
from __future__ import annotations

import dataclasses
import functools
import html
import json
import re

# The Okabe-Ito palette: its colours stay apart under deuteranopia, protanopia and tritanopia (tests simulate
# that). Colour is never the only cue: every status also has a glyph (and the views a shape, hatch or line style).
ACCEPTED = "#009E73"     # bluish green   ✓
REJECTED = "#D55E00"     # vermillion     ✗
NOT_REACHED = "#BBBBBB"  # light grey     ·
ROOT = "#0072B2"         # blue           ◆
BONUS = "#56B4E9"        # sky blue       ★
CORRECTION = "#E69F00"   # orange         ◆ (a diamond box)
DRAFT_Q = "#CC79A7"      # reddish purple, hatched bars: the draft head (q)
TARGET_P = "#0072B2"     # blue, solid bars: the target (p)
DRAFT_PATTERN = "/"      # the draft's bars are hatched, the target's solid
STATUS_COLOURS = {"root": ROOT, "accepted": ACCEPTED, "rejected": REJECTED, "not_reached": NOT_REACHED}
STATUS_GLYPHS = {"root": "", "accepted": "✓", "rejected": "✗", "not_reached": "·"}
KIND_GLYPHS = {"bonus": "★", "correction": "◆", "first token": "★"}
STATUS_NAMES = {"root": "root (last committed token)", "accepted": "✓ accepted",
                "rejected": "✗ rejected", "not_reached": "· not reached"}
# one hue per cycle in the text view (cycles repeat the palette)
CYCLE_PALETTE = ["#cfe8ff", "#ffe2b8", "#d9f2d0", "#f3d1f0", "#fff3b0", "#d6d9ff", "#ffd3cc", "#cdeee9"]
FONT = dict(family="Inter, Segoe UI, Helvetica, Arial, sans-serif", size=15, color="#222")


def as_dict(rec):
    """A record as a plain dict (accepts a dataclass or a dict)."""
    if rec is None:
        return None
    if dataclasses.is_dataclass(rec) and not isinstance(rec, type):
        return dataclasses.asdict(rec)
    return rec


def as_dicts(records):
    return [as_dict(r) for r in (records or [])]


def show_token(text: str, limit: int = 14) -> str:
    """A token's text made visible: newlines as '↵', tabs as '⇥', and spaces as '␣' where a label would hide
    them (at either end, after a newline), so that '\\n' and '\\n  ' (newline + indent) read differently; the chat
    template's tokens by name ("<|im_end|>": "⏹ end of answer", as the text panel draws it)."""
    if text is None:
        return ""
    name = control_name(text)
    if name:   # the chat template's token: named as the text names it ("⏹ end of answer"), not its markup
        if name == "end of answer":
            return f"⏹ {name}"
        s = f"[{name}]"
        return s if len(s) <= limit else s[:limit - 1] + "…"
    s = text.replace("\n", "↵").replace("\t", "⇥").replace("\r", "")
    s = re.sub(r"^ +| +$|(?<=[↵⇥]) +", lambda m: "␣" * len(m.group()), s)
    if s == "":
        s = "∅"
    if len(s) > limit:
        s = s[:limit - 1] + "…"
    return s


CONTROL_TOKEN = re.compile(r"<\|[^|<>]{1,40}\|>|</?s>|<unk>|<pad>")   # the chat template's tokens, not text
END_OF_TURN = {"<|im_end|>", "<|eot_id|>", "<|end|>", "</s>", "<|endoftext|>", "<|end_of_text|>", "<|eom_id|>"}


def control_name(text: str | None) -> str | None:
    """A chat-template control token named for a student ("end of answer" for <|im_end|>), None for text."""
    t = (text or "").strip()
    if not CONTROL_TOKEN.fullmatch(t):
        return None
    return "end of answer" if t in END_OF_TURN else "chat template: " + t.strip("<|/>")


def answer_tail(text: str) -> str:
    """The part of a position's text after the chat template's last control token and its role line
    ("<|im_start|>assistant\n"): what a student reads as the answer so far ("" at its very start); the text itself
    where no template shows."""
    parts = CONTROL_TOKEN.split(text)
    if len(parts) == 1:
        return text
    after = parts[-1]
    return after.split("\n", 1)[1] if "\n" in after else ""


def esc(text: str) -> str:
    """HTML-escape for HTML components and Plotly labels (Plotly does not know &quot;, so quotes stay)."""
    return html.escape(text or "", quote=False)


def esc_attr(text: str) -> str:
    return html.escape(text or "", quote=True)


class Figure:
    """A plotly figure held as plain dicts, in plotly's own nested form. Building a `plotly.graph_objects.Figure`
    costs 10-25 ms a figure with its per-property validation and still ~1 ms without it, and a class's server draws
    thirty Steps at once under one GIL; gradio's gr.Plot only calls `to_json()`, which this answers straight from
    the dicts (orjson, plotly's default template filled in as it applies: `template_for`). Anything else (a test
    reading `fig.layout.title.text`, `update_layout`, ...) gets the plotly Figure, built on first use and then
    used for everything, so a change made through it is what is sent. tests/test_views_fast.py passes every
    figure through plotly's validator, so a misspelt property still fails there."""

    __slots__ = ("_dict", "_go")

    def __init__(self, data: list[dict], layout: dict):
        self._dict, self._go = dict(data=data, layout=layout), None

    def _fig(self):
        if self._go is None:
            import plotly.graph_objects as go
            self._go = go.Figure(self._dict, _validate=False)
        return self._go

    def __getattr__(self, name):          # only for names not found on this class: plotly's Figure API
        if name.startswith("__") or name in Figure.__slots__:   # copy/pickle protocols stay this class's own
            raise AttributeError(name)
        return getattr(self._fig(), name)

    def to_json(self, *args, **kw) -> str:
        if self._go is not None or args or kw:
            return self._fig().to_json(*args, **kw)
        return fast_json(self._dict)

    def to_dict(self) -> dict:
        return self._fig().to_dict()

    def to_plotly_json(self) -> dict:
        return self._fig().to_plotly_json()


@functools.lru_cache(maxsize=1)
def _default_template():
    """Plotly's default template, which `Figure.to_dict` puts into every layout that names none."""
    import plotly.io as pio
    name = pio.templates.default
    return pio.templates[name].to_plotly_json() if name else None


# Subplot kinds a cartesian figure has none of: the template's settings for them apply to nothing here.
NOT_CARTESIAN = ("geo", "mapbox", "polar", "scene", "ternary")
CARTESIAN_TRACES = frozenset({"bar", "scatter", "heatmap", "histogram", "box"})


@functools.lru_cache(maxsize=32)
def template_for(trace_types: frozenset):
    """The default template as it applies to a figure of these trace types: plotly.js applies `template.data[t]`
    to traces of type t only and the polar/3-D/map settings to those subplots only, so the rest (~5 of its ~7 kB,
    sent with every figure) is dropped when the figure has none of them; nothing that applies changes."""
    t = _default_template()
    if t is None:
        return None
    data = {k: v for k, v in t.get("data", {}).items() if k in trace_types}
    layout = t.get("layout", {})
    if trace_types <= CARTESIAN_TRACES:
        layout = {k: v for k, v in layout.items() if k not in NOT_CARTESIAN}
    return dict(data=data, layout=layout)


def fast_json(fig: dict) -> str:
    """A figure of plain dicts as plotly's `to_json` writes it: the default template filled in (as it applies to
    this figure's traces: `template_for`), NaN as null."""
    layout = fig.get("layout") or {}
    if "template" not in layout:
        template = template_for(frozenset(d.get("type", "scatter") for d in fig.get("data") or []))
        if template is not None:
            fig = dict(fig, layout=dict(layout, template=template))
    try:
        import orjson
        return orjson.dumps(fig, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
    except (ImportError, TypeError):
        import plotly.io as pio
        return pio.to_json(fig, validate=False)


def figure(data: list[dict], layout: dict) -> Figure:
    return Figure(data, layout)


def merge(dst: dict, src: dict) -> dict:
    """`src` into `dst`, nested dicts merged key by key (what plotly's update_layout does); returns dst."""
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            merge(dst[k], v)
        else:
            dst[k] = v
    return dst


def layout_base(title: str | None = None, height: int = 420, **kw) -> dict:
    """The house layout (font, white ground, margins, hover labels) as a dict; `kw` merged over it."""
    out = dict(font=dict(FONT), height=height, margin=dict(l=50, r=20, t=60 if title else 20, b=45),
               paper_bgcolor="white", plot_bgcolor="white",
               hoverlabel=dict(font=dict(size=15, family=FONT["family"])))
    if title:
        out["title"] = dict(text=title, x=0.01, xanchor="left", font=dict(size=18))
    return merge(out, kw)


def base_layout(fig, title: str | None = None, height: int = 420, **kw):
    fig.update_layout(**layout_base(title, height, **kw))
    return fig


@functools.lru_cache(maxsize=16)
def _grid_json(rows: int, cols: int, spec: str) -> str:
    from plotly.subplots import make_subplots
    layout = json.loads(make_subplots(rows=rows, cols=cols, **json.loads(spec)).layout.to_json())
    layout.pop("template", None)          # filled in when the figure is sent (fast_json), as it applies
    return json.dumps(layout)


def grid_layout(rows: int, cols: int, **kw) -> dict:
    """make_subplots' layout (axes domains, subplot titles) as a fresh dict, computed once per grid: a trace in
    row r, column c names its axes with `grid_axes(r, c, cols)`."""
    return json.loads(_grid_json(rows, cols, json.dumps(kw, sort_keys=True)))


def grid_axes(row: int, col: int, cols: int) -> dict:
    k = (row - 1) * cols + col
    return dict(xaxis=f"x{k if k > 1 else ''}", yaxis=f"y{k if k > 1 else ''}")


def axis_names(layout: dict, letter: str) -> list[str]:
    """The layout's axes of one letter ("x": xaxis, xaxis2, ...)."""
    return [k for k in layout if re.fullmatch(letter + r"axis\d*", k)]


def empty_figure(message: str, height: int = 300):
    return figure([], layout_base(height=height, annotations=[dict(
        text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
        font=dict(size=17, color="#666"))], xaxis=dict(visible=False), yaxis=dict(visible=False)))


def pct(x) -> str:
    if x is None:
        return "–"
    if x <= 0:
        return "0%"
    if x >= 0.001:
        return f"{100 * x:.1f}%"
    return f"{x:.1e}"


def committed_pieces(rec: dict) -> list[tuple[str, str, int]]:
    """(text, kind, token_id) for the tokens a cycle committed: kind 'draft' (accepted drafted token) or
    'bonus' / 'correction' (the target's own token); trimmed like new_tokens."""
    nodes = {n["index"]: n for n in rec["nodes"]}
    pieces = [(nodes[i]["text"], "draft", nodes[i]["token_id"]) for i in rec["accepted_path"]]
    pieces.append((rec["bonus_text"], rec["bonus_kind"] if rec["cycle"] > 0 else "bonus", rec["bonus_token"]))
    return pieces[:len(rec["new_tokens"])]
