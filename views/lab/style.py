"""The Paper lab's figure style: type a presenter can read from the back, a colour and a hatch per series (the
figures read without colour), and the frame every lab figure shares."""
from __future__ import annotations

from ..common import ACCEPTED, DRAFT_Q, FONT, TARGET_P

MIN_REACHED = 20   # a depth's acceptance over fewer cycles than this is drawn hollow, with its n and its interval
KIND_STYLES = [(TARGET_P, ""), (DRAFT_Q, "/"), (ACCEPTED, "x"), ("#E69F00", ".")]   # colour + a pattern per series
# type a presenter can read from the back: a figure's own text (bar labels, heatmap cells, subtitles) is at least
# this many px before the page scales it (x1.35 in presenter mode; x0.85 on a figure under 760 px wide, which the
# narrow τ figure's 3 px more make up for: >= 13 px at 1440x900)
TEXT_PX = 16
LAB_FONT = dict(FONT, size=16)


def sub(text: str) -> str:
    """A title's second line: plain, not <sup> (which Plotly draws at 70%: ~9 px on a side-by-side figure)."""
    return f"<br><span style='font-weight:normal'>{text}</span>"


def short_prompt(text: str, limit: int = 32) -> str:
    """A prompt as a row name: its first line, cut at a word before `limit` characters, with an ellipsis."""
    t = " ".join(str(text or "").split())
    if len(t) <= limit:
        return t
    cut = t[:limit - 1].rsplit(" ", 1)[0] if " " in t[:limit - 1] else t[:limit - 1]
    return cut.rstrip(",.;:") + "…"


def lab_layout(fig, title: str, height: int = 380):
    fig.update_layout(title=dict(text=title, font=dict(size=TEXT_PX + 3)), font=LAB_FONT, height=height,
                      margin=dict(l=60, r=20, t=60, b=50), plot_bgcolor="white", paper_bgcolor="white")
    # automargin: an axis title is never cut at the figure's edge (issue 38.5: "sured acceptance rate" on a phone)
    fig.update_xaxes(showgrid=False, linecolor="#888", automargin=True)
    fig.update_yaxes(gridcolor="#eee", linecolor="#888", automargin=True)
    return fig
