"""Shared helpers for the views: colours, token display, record access.

Views take CycleRecords (dataclasses) or their `asdict` dicts and nothing model-related.
"""
from __future__ import annotations

import dataclasses
import html
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
    them (at either end, after a newline), so that '\\n' and '\\n  ' (newline + indent) read differently."""
    if text is None:
        return ""
    s = text.replace("\n", "↵").replace("\t", "⇥").replace("\r", "")
    s = re.sub(r"^ +| +$|(?<=[↵⇥]) +", lambda m: "␣" * len(m.group()), s)
    if s == "":
        s = "∅"
    if len(s) > limit:
        s = s[:limit - 1] + "…"
    return s


def esc(text: str) -> str:
    """HTML-escape for HTML components and Plotly labels (Plotly does not know &quot;, so quotes stay)."""
    return html.escape(text or "", quote=False)


def esc_attr(text: str) -> str:
    return html.escape(text or "", quote=True)


def base_layout(fig, title: str | None = None, height: int = 420, **kw):
    fig.update_layout(
        title=dict(text=title, x=0.01, xanchor="left", font=dict(size=18)) if title else None,
        font=FONT, height=height, margin=dict(l=50, r=20, t=60 if title else 20, b=45),
        paper_bgcolor="white", plot_bgcolor="white",
        hoverlabel=dict(font_size=15, font_family=FONT["family"]),
        **kw)
    return fig


def empty_figure(message: str, height: int = 300):
    import plotly.graph_objects as go
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(size=17, color="#666"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return base_layout(fig, height=height)


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
