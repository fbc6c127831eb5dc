"""The generated text: one mark per meaning. The kind of a token (drafted and accepted / the target's bonus /
the target's correction) is its underline style and glyph, the cycle that committed it is a band that alternates
white / grey from cycle to cycle; colour is never the only cue. Every token carries data attributes (cycle, tree
node, kind) so that the page links it to the draft tree (views/js/lens.js). Right-to-left text reads from the right
with its letters joined (RTL_OPEN)."""
from __future__ import annotations

import unicodedata

from eagle_core.model.token_bytes import join_clusters, join_pieces

from .common import as_dicts, committed_pieces, control_name, esc, esc_attr

# the tree's glyph language (page header): ✓ accepted, ★ the target's bonus token, ◆ its correction
KIND_MARK = {"draft": "✓", "bonus": "★", "correction": "◆"}
KIND_TEXT = {"draft": "drafted by the head, accepted by the target",
             "bonus": "the target's own bonus token (after the accepted drafts)",
             "correction": "the target's own correction (where a draft was rejected)"}
PROMPT_SHOWN = 160       # a longer prompt is shown shortened (the full text one click away)
# A run of right-to-left tokens (Arabic, Hebrew) is one isolated right-to-left element, so it reads from the right
# inside any text (the bidi algorithm would otherwise lay each token's box out in the paragraph's order). Inside it
# the tokens stay spans (hover, click, the tree link) and keep their underline (the kind) and band (the cycle):
# neither breaks Arabic letters' joining; the bold type and the ★ / ◆ glyph after a token do (a glyph between two
# letters, or a bold letter from another face), so a run draws none (the underline style and the hover title say
# the kind).
RTL_OPEN = "<span class='el-rtl' dir='rtl'>"

LEGEND = ("<div class='el-legend'><b>Kind</b> = the line under a token: "
          "<span class='el-key'><span class='el-tok el-draft'>word</span> solid: drafted by the head, accepted "
          "(✓ in the tree)</span> · "
          "<span class='el-key'><span class='el-tok el-bonus'>word</span> double: the target's bonus token "
          "(★)</span> · "
          "<span class='el-key'><span class='el-tok el-correction'>word</span> wavy: the target's correction "
          "(◆)</span>. "
          "<b>Cycle</b> = the band: <span class='el-key'><span class='el-cyc el-cyc-even'>one cycle</span>"
          "<span class='el-cyc el-cyc-odd'>the next</span></span> alternate white / grey, "
          "<span class='el-key'><span class='el-cyc el-cyc-even el-current'>framed</span> = the cycle in the "
          "tree</span>. Hover or click a token to find it in the tree. ␣ = a space, ↵ = a new line.</div>")

CSS = """
.el-text {font-size: 18px; line-height: 2.0; white-space: pre-wrap; word-break: break-word; max-height: 340px;
          overflow-y: auto; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: #111;
          background: #fff; border: 1px solid #d5dae3; border-radius: 8px; padding: 4px 8px;}
.el-tok {color: #111; padding: 2px 0; text-underline-offset: 5px; text-decoration-skip-ink: none; cursor: pointer;}
.el-draft {text-decoration: underline solid #009E73 2px;}
.el-bonus {font-weight: 700; text-decoration: underline double #1f6fa8 3px;}
.el-correction {font-weight: 700; text-decoration: underline wavy #b57a00 2px;}
.el-bonus::after, .el-correction::after {font-size: 0.62em; vertical-align: 0.55em; font-weight: 400;
                                         margin-left: 1px; text-decoration: none; display: inline-block;}
.el-bonus::after {content: "★"; color: #1f6fa8;}
.el-correction::after {content: "◆"; color: #b57a00;}
.el-end {font-family: system-ui, sans-serif; font-size: 14px; color: #444; border: 1px solid #9aa3b2;
          border-radius: 4px; padding: 0 4px; margin-left: 2px;}
.el-rtl {unicode-bidi: isolate;}
.el-rtl .el-bonus, .el-rtl .el-correction {font-weight: inherit;}
.el-rtl .el-bonus::after, .el-rtl .el-correction::after {content: none;}
.el-cyc {padding: 3px 0; border-radius: 3px;}
.el-cyc-even {background: #ffffff;} .el-cyc-odd {background: #dfe4ec;}
.el-cyc.el-current {outline: 2px solid #222; outline-offset: 0;}
.el-cyc.el-hl-cyc {background: #fff1bd;}
.el-tok.el-hl {background: #ffd54a; outline: 2px dashed #111; outline-offset: 1px;}
.el-legend {font-size: 14px; color: #333; margin-top: 4px; line-height: 1.75;}
.el-key .el-tok, .el-key .el-cyc {font-family: ui-monospace, Menlo, Consolas, monospace; white-space: nowrap;}
.el-key .el-cyc {border: 1px solid #c5ccd8; padding: 1px 3px;}
.el-prompt {color: #555; font-style: italic; font-size: 15px; margin-bottom: 4px;}
.el-prompt summary {cursor: pointer;}
.el-prompt-full {white-space: pre-wrap; word-break: break-word; max-height: 9em; overflow-y: auto; font-style: normal;
                 border-left: 3px solid #ccd; padding-left: 6px;}
"""


def _strong(ch: str) -> str | None:
    """"rtl" / "ltr" for a character with a strong direction (Arabic, Hebrew / Latin, Chinese, ...), else None."""
    b = unicodedata.bidirectional(ch)
    return "rtl" if b in ("R", "AL") else "ltr" if b == "L" else None


def first_strong(text: str) -> str | None:
    return next((d for d in map(_strong, text) if d), None)


def rtl_runs(texts: list[str]) -> list[bool]:
    """Which pieces of text belong to a right-to-left run: from a piece with a right-to-left letter to the last such
    piece before a left-to-right letter or a new line, neutral pieces between them (spaces, digits, punctuation)
    included. The page draws each run as one isolated right-to-left element (RTL_OPEN)."""
    out = [False] * len(texts)
    start = None                                    # the open run's first piece
    for i, t in enumerate(texts):
        dirs = {d for d in map(_strong, t) if d}
        if "rtl" in dirs and "ltr" not in dirs and "\n" not in t:
            if start is None:
                start = i
            for j in range(start, i + 1):           # the neutrals since the run's last letter join it
                out[j] = True
        elif dirs or "\n" in t:
            start = None
    return out


def _vis(text: str) -> str:
    return esc(text).replace("\n", "↵\n")


def prompt_html(prompt: str) -> str:
    """The prompt above the text; a long one shortened on screen (and said so), the whole of it one click away."""
    if len(prompt) <= PROMPT_SHOWN and prompt.count("\n") < 3:
        return f"<div class='el-prompt'>Prompt: {esc(prompt)}</div>"
    short = esc(prompt[:PROMPT_SHOWN].rstrip()).replace("\n", " ↵ ")
    return (f"<details class='el-prompt'><summary>Prompt ({len(prompt):,} characters, shortened on screen; click to "
            f"show it all): {short}…</summary><div class='el-prompt-full'>{esc(prompt)}</div></details>")


def text_html(records, upto: int | None = None, prompt: str | None = None, notice: str | None = None) -> str:
    """HTML of the generation so far; `upto` = last cycle to include (the cycle slider), framed."""
    recs = as_dicts(records)
    if upto is not None:
        recs = [r for r in recs if r["cycle"] <= upto]
    parts = []
    if notice:
        parts.append(f"<div class='el-prompt'>{esc(notice)}</div>")
    if prompt:
        parts.append(prompt_html(prompt))
    last = recs[-1]["cycle"] if recs else None
    toks = []   # (cycle, kind, node, token id, bytes) of every committed token, in order
    for r in recs:
        hexes = r.get("new_token_bytes") or []
        path = r["accepted_path"]
        for k, (text, kind, tid) in enumerate(committed_pieces(r)):
            raw = bytes.fromhex(hexes[k]) if k < len(hexes) else text.encode("utf-8")
            node = str(path[k]) if kind == "draft" and k < len(path) else "b"
            toks.append((r["cycle"], kind, node, tid, raw))
    # decode from the joined bytes: a character split over tokens is one span (marked as its last token), and so is
    # a letter (grapheme cluster) split over tokens: its kind mark goes after the whole letter, never inside it
    groups = join_clusters(join_pieces([t[4] for t in toks]))
    rtl = rtl_runs([text for _, text in groups])
    body = []
    open_cycle, in_run = None, False
    for k, (group, text) in enumerate(groups):
        cyc, kind, node, _, _ = toks[group[-1]]
        if rtl[k] != in_run:          # a right-to-left run begins or ends: the cycle's band is reopened inside it
            if open_cycle is not None:
                body.append("</span>")
            body.append(RTL_OPEN if rtl[k] else "</span>")
            in_run, open_cycle = rtl[k], None
        if cyc != open_cycle:
            if open_cycle is not None:
                body.append("</span>")
            cls = "el-cyc " + ("el-cyc-odd" if cyc % 2 else "el-cyc-even") + (" el-current" if cyc == last else "")
            body.append(f"<span class='{cls}' data-cycle='{cyc}'>")
            open_cycle = cyc
        ids = ", ".join(str(toks[g][3]) for g in group)
        title = (f"cycle {cyc}: {KIND_MARK[kind if kind in KIND_MARK else 'bonus']} {KIND_TEXT.get(kind, kind)}"
                 + (f" (id {ids})" if len(group) == 1 else f" (tokens {ids}: one letter split over "
                                                           f"{len(group)} tokens)")
                 + ("" if cyc == last else "; click to show this cycle in the tree"))
        vis = _vis(text)
        name = control_name(text)
        if name:       # the chat template's token (<|im_end|>): named, not shown as markup a student cannot read
            vis = f"⏹ {name}"
            title += f"; the chat template's {text.strip()} token" + (": the model ends its answer here"
                                                                      if name == "end of answer" else "")
        tail = "\n" if vis.endswith("\n") else ""    # the line break after the span: the ★ / ◆ mark stays on its line
        end = " el-end" if name else ""
        body.append(f"<span class='el-tok el-{kind}{end}' data-cycle='{cyc}' data-node='{node}' data-kind='{kind}' "
                    f"title='{esc_attr(title)}'>{vis[:len(vis) - len(tail)]}</span>{tail}")
    if open_cycle is not None:
        body.append("</span>")
    if in_run:
        body.append("</span>")
    if not body:
        body.append("<span style='color:#888'>(nothing generated yet: press Step or Run)</span>")
    shown = "" if last is None else f" data-shown='{last}'"
    # the panel's direction is its text's: an answer that starts in Arabic or Hebrew reads from the right
    side = "rtl" if first_strong("".join(text for _, text in groups)) == "rtl" else "ltr"
    parts.append(f"<div dir='{side}' class='el-text'{shown}>" + "".join(body) + "</div>")
    parts.append(LEGEND)
    return "\n".join(parts)
