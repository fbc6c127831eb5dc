"""The generated text, every token coloured by the cycle that committed it."""
from __future__ import annotations

from eagle_core.model.token_bytes import join_pieces

from .common import CYCLE_PALETTE, as_dicts, committed_pieces, esc, esc_attr

LEGEND = ("<div class='el-legend'>Background colour = the cycle that committed the token: "
          "<span class='el-tok el-draft' style='background:#cfe8ff'>drafted by the head, accepted</span> "
          "<span class='el-tok el-bonus' style='background:#ffe2b8'>target's bonus token (bold, straight "
          "underline)</span> "
          "<span class='el-tok el-correction' style='background:#d9f2d0'>target's correction (bold, wavy "
          "underline)</span> (outlined: the cycle shown). ␣ = a space, ↵ = a new line.</div>")

CSS = """
.el-text {font-size: 18px; line-height: 2.0; white-space: pre-wrap; word-break: break-word; max-height: 250px; overflow-y: auto;
          font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: #111;}
.el-tok {border-radius: 3px; padding: 2px 0px; color: #111;}
.el-draft {}
.el-bonus {font-weight: 700; text-decoration: underline solid #0072B2 3px; text-underline-offset: 5px;}
.el-correction {font-weight: 700; text-decoration: underline wavy #D55E00 2px; text-underline-offset: 5px;}
.el-current {outline: 2px solid #222;}
.el-legend {font-size: 15px; color: #333; margin-bottom: 6px;}
.el-prompt {color: #666; font-style: italic; font-size: 15px; margin-bottom: 4px;}
"""


def _vis(text: str) -> str:
    return esc(text).replace("\n", "↵\n")


def text_html(records, upto: int | None = None, prompt: str | None = None, notice: str | None = None) -> str:
    """HTML of the generation so far; `upto` = last cycle to include (the cycle slider), highlighted."""
    recs = as_dicts(records)
    if upto is not None:
        recs = [r for r in recs if r["cycle"] <= upto]
    parts = []
    if notice:
        parts.append(f"<div class='el-prompt'>{esc(notice)}</div>")
    if prompt:
        parts.append(f"<div class='el-prompt'>Prompt: {esc(prompt)}</div>")
    parts.append(LEGEND)
    body = []
    last = recs[-1]["cycle"] if recs else None
    toks = []   # (cycle, kind, token id, bytes) of every committed token, in order
    for r in recs:
        hexes = r.get("new_token_bytes") or []
        for k, (text, kind, tid) in enumerate(committed_pieces(r)):
            raw = bytes.fromhex(hexes[k]) if k < len(hexes) else text.encode("utf-8")
            toks.append((r["cycle"], kind, tid, raw))
    # decode from the joined bytes: a character split over tokens is one span (coloured by its last token)
    for group, text in join_pieces([t[3] for t in toks]):
        cyc, kind, tid, _ = toks[group[-1]]
        colour = CYCLE_PALETTE[cyc % len(CYCLE_PALETTE)]
        cls = "el-tok el-" + ("draft" if kind == "draft" else kind)
        if cyc == last:
            cls += " el-current"
        ids = ", ".join(str(toks[g][2]) for g in group)
        title = (f"cycle {cyc}: " + ("drafted by the head, accepted by the target" if kind == "draft"
                                     else f"the target's own {kind} token")
                 + (f" (id {ids})" if len(group) == 1 else f" (tokens {ids}: one character split over "
                                                           f"{len(group)} tokens)"))
        body.append(f"<span class='{cls}' style='background:{colour}' title='{esc_attr(title)}'>{_vis(text)}</span>")
    if not body:
        body.append("<span style='color:#888'>(nothing generated yet: press Step or Run)</span>")
    parts.append("<div class='el-text'>" + "".join(body) + "</div>")
    return "\n".join(parts)
