"""The Race, watched: plain decoding and EAGLE side by side, their texts growing, their counters running, then the
measured ratio. Pure HTML from record dicts (no model): the tab passes each lane as a dict

    {"name": "plain" | "EAGLE", "records": [...], "elapsed": wall seconds, "state": RUNNING | FINISHED | STOPPED}

The after-the-fact bar summary stays views/stats.py's race_figure."""
from __future__ import annotations

from eagle_core.model.token_bytes import join_clusters, join_pieces

from .common import ACCEPTED, as_dicts, committed_pieces, esc, esc_attr
from .stats import summary

WAITING, RUNNING, FINISHED, STOPPED = "waiting", "running", "finished", "stopped"
STATE_LABELS = {WAITING: "· not started", RUNNING: "⏳ running", FINISHED: "✓ finished", STOPPED: "■ stopped"}
LANE_TITLES = {"plain": ("Plain decoding", "one target pass per token"),
               "EAGLE": ("🦅 EAGLE", "the head drafts a tree, one target pass checks it")}
PLAIN_BAR = "#8a8a8a"
FAIRNESS = ("<b>Fair share of one model:</b> the two take turns on it, one cycle per turn, and the one that has "
            "used <i>less model time</i> goes next, so both have always had the same model time (to within one "
            "cycle). <details><summary>Why by model time, and what the counters count</summary>Turn for turn "
            "would favour EAGLE: its cycle (a draft, then one pass over the whole tree) takes longer than a plain "
            "one. Other users' cycles interleave with the Race's as usual. Tokens/s and model time are the "
            "engine's own timings of each cycle; waiting for a turn is in neither, only in elapsed (wall clock)."
            "</details>")
FINISHED_WHY = {"max_new_tokens": "max new tokens", "eos": "end of text", "context": "context full"}

CSS = """
.el-race {font-size: 15px; color: #222;}
.el-race-fair, .el-race-status {font-size: 14px; color: #444; margin: 4px 0 8px; line-height: 1.35;}
.el-race-fair summary {cursor: pointer; color: #1c5a9c; text-decoration: underline dotted;}
.el-race-prompt {color: #666; font-style: italic; font-size: 14px; margin-bottom: 6px; word-break: break-word;}
.el-race-lanes {display: flex; gap: 12px; align-items: stretch;}
.el-race-lane {flex: 1 1 0; min-width: 0; border: 1px solid #d5dbe6; border-radius: 10px; padding: 8px 10px;
               background: #fafbfd;}
.el-race-EAGLE {border: 2px solid #009E73;}
.el-race-head {display: flex; justify-content: space-between; gap: 8px; flex-wrap: wrap; align-items: baseline;}
.el-race-head b {font-size: 18px;} .el-race-state {font-size: 14px; white-space: nowrap;}
.el-race-sub {font-size: 13px; color: #555; margin-bottom: 4px;}
.el-race-bar {height: 10px; background: #e8e8e8; border-radius: 5px; overflow: hidden; margin: 4px 0 2px;}
.el-race-bar > span {display: block; height: 100%;}
.el-race-counters {display: flex; flex-wrap: wrap; gap: 6px; margin: 6px 0;}
.el-race-counter {flex: 1 1 78px; background: #fff; border: 1px solid #e1e5ee; border-radius: 8px; padding: 3px 7px;}
.el-race-counter b {display: block; font-size: 19px; color: #1c2b5a; white-space: nowrap;}
.el-race-counter span {display: block; font-size: 12.5px; color: #555; line-height: 1.15;}
.el-race-counter .el-race-short {display: none;}
.el-race-text {height: 10.5em; overflow-y: auto; display: flex; flex-direction: column-reverse; background: #fff;
               border: 1px solid #e3e3e3; border-radius: 6px; padding: 6px 8px; font-size: 16px; line-height: 1.6;
               font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: #111;
               white-space: pre-wrap; word-break: break-word;}
.el-race-new {text-decoration: underline solid #333 2px; text-underline-offset: 4px; background: #fff3b0;}
.el-race-result {margin-top: 10px; padding: 8px 12px; border-radius: 10px; background: #eef7f2;
                 border: 1px solid #b9dcc9; line-height: 1.4;}
.el-race-ratio {font-size: 20px;} .el-race-ratio b {font-size: 26px;}
body.el-presenter .el-race {font-size: 19px;}
body.el-presenter .el-race-fair, body.el-presenter .el-race-status {font-size: 17px;}
body.el-presenter .el-race-text {font-size: 22px; height: 9em;}
body.el-presenter .el-race-counter b {font-size: 26px;} body.el-presenter .el-race-counter span {font-size: 15px;}
body.el-presenter .el-race-head b {font-size: 23px;}
body.el-presenter .el-race-ratio {font-size: 25px;} body.el-presenter .el-race-ratio b {font-size: 34px;}
@media (max-width: 640px) {   /* stacked, and compact so both lanes fit on one phone screen */
  .el-race-lanes {flex-direction: column; gap: 8px;}
  .el-race-lane {padding: 6px 8px;}
  .el-race-head b {font-size: 16px;} .el-race-sub {font-size: 12px; margin-bottom: 2px;}
  .el-race-counters {gap: 4px; margin: 4px 0;}
  .el-race-counters {flex-wrap: nowrap;} .el-race-counter {flex: 1 1 0; min-width: 0; padding: 2px 4px;}
  .el-race-counter b {font-size: 14px;} .el-race-counter span {font-size: 11.5px;}
  .el-race-counter .el-race-long {display: none;} .el-race-counter .el-race-short {display: block;}
  .el-race-text {height: 5.2em; font-size: 14px; line-height: 1.5;}
  .el-race-result {font-size: 13.5px; padding: 6px 8px;}
  .el-race-ratio {font-size: 17px;} .el-race-ratio b {font-size: 22px;}
}
"""


def lane_counts(records, elapsed: float = 0.0) -> dict:
    """A lane's running counters from its records: tokens, target passes, cycles, engine seconds (model time),
    engine tokens/s, and the wall-clock `elapsed` (waiting for turns included)."""
    s = summary(records)
    return dict(tokens=s["tokens"], forwards=s["forwards"], cycles=s["cycles"], seconds=s["seconds"],
                tokens_per_s=s["tokens_per_s"], elapsed=float(elapsed or 0.0))


def speed_ratio(plain_records, eagle_records) -> float | None:
    """EAGLE's tokens/s over plain decoding's, both from the engine's timings; None without both."""
    e, v = summary(eagle_records), summary(plain_records)
    if not e["tokens"] or not v["tokens"] or not v["tokens_per_s"]:
        return None
    return e["tokens_per_s"] / v["tokens_per_s"]


def _vis(text: str) -> str:
    return esc(text).replace("\n", "↵\n")


def token_bytes(rec: dict) -> list[bytes]:
    """The bytes of the tokens a cycle committed: its new_token_bytes (the Race names lean records' tokens,
    eagle_core/serving/race.py), else the texts of a full record's pieces."""
    hexes = rec.get("new_token_bytes") or []
    if len(hexes) == len(rec["new_tokens"]):
        return [bytes.fromhex(h) for h in hexes]
    return [text.encode("utf-8") for text, _kind, _tid in committed_pieces(rec)]


def lane_text_html(records) -> str:
    """The lane's generated text, true characters (decoded from the joined bytes); the newest cycle's tokens
    underlined on a light band."""
    recs = as_dicts(records)
    toks = [(r is recs[-1], raw) for r in recs for raw in token_bytes(r)]   # (newest?, bytes), in order
    old, new = [], []
    for group, text in join_clusters(join_pieces([t[1] for t in toks])):   # the newest band never splits a letter
        (new if toks[group[-1]][0] else old).append(text)
    if not old and not new:
        return "<span style='color:#888'>(no tokens yet)</span>"
    return _vis("".join(old)) + (f"<span class='el-race-new'>{_vis(''.join(new))}</span>" if new else "")


def _counter(value: str, label: str, key: str, short: str) -> str:
    """A counter; `short` is its label on a phone (five in a row), the page's rules say what each counts."""
    return (f"<div class='el-race-counter' data-k='{key}'><b>{esc(value)}</b><span class='el-race-long'>"
            f"{esc(label)}</span><span class='el-race-short'>{esc(short)}</span></div>")


def lane_html(lane: dict, max_new: int) -> str:
    name = lane.get("name", "plain")
    title, sub = LANE_TITLES.get(name, (name, ""))
    recs = as_dicts(lane.get("records"))
    c = lane_counts(recs, lane.get("elapsed", 0.0))
    state = lane.get("state", RUNNING if recs else WAITING)
    why = FINISHED_WHY.get(recs[-1].get("finished"), recs[-1].get("finished")) if recs and state == FINISHED \
        else None
    label = STATE_LABELS.get(state, state) + (f" ({why})" if why else "")
    frac = min(1.0, c["tokens"] / max_new) if max_new else 0.0
    colour = ACCEPTED if name == "EAGLE" else PLAIN_BAR
    counters = "".join([
        _counter(f"{c['tokens']}", "tokens", "tokens", "tokens"),
        _counter(f"{c['forwards']}", "target passes", "forwards", "passes"),
        _counter(f"{c['tokens_per_s']:.1f}" if c["seconds"] > 0 else "–", "tokens/s (engine)", "tokens_per_s",
                 "tok/s"),
        _counter(f"{c['seconds']:.2f} s", "model time (engine)", "seconds", "model"),
        _counter(f"{c['elapsed']:.1f} s", "elapsed (wall clock)", "elapsed", "elapsed")])
    return (f"<section class='el-race-lane el-race-{esc_attr(name)}' data-lane='{esc_attr(name)}' "
            f"data-state='{esc_attr(state)}' data-tokens='{c['tokens']}' data-forwards='{c['forwards']}'>"
            f"<div class='el-race-head'><b>{esc(title)}</b><span class='el-race-state'>{esc(label)}</span></div>"
            f"<div class='el-race-sub'>{esc(sub)}</div>"
            f"<div class='el-race-bar' role='progressbar' aria-valuemin='0' aria-valuemax='{max_new}' "
            f"aria-valuenow='{c['tokens']}' aria-label='{esc_attr(title)}: tokens'>"
            f"<span style='width:{100 * frac:.1f}%;background:{colour}'></span></div>"
            f"<div class='el-race-sub'>{c['tokens']} of {max_new} new tokens</div>"
            f"<div class='el-race-counters'>{counters}</div>"
            f"<div class='el-race-text'><div>{lane_text_html(recs)}</div></div></section>")


def ratio_html(plain_records, eagle_records, stopped: bool = False) -> str:
    """The measured ratio: EAGLE's engine tokens/s over plain decoding's (same prompt, settings and machine)."""
    e, v = summary(eagle_records), summary(plain_records)
    r = speed_ratio(plain_records, eagle_records)
    if r is None:
        return "<div class='el-race-ratio'>No ratio: a decoder produced no tokens.</div>"
    how = "EAGLE faster" if r > 1.005 else "EAGLE slower here" if r < 0.995 else "the same speed"
    so_far = " so far (stopped before both finished)" if stopped else ""
    # the ratio, exactly: (tokens per target pass, EAGLE over plain) / (model time per target pass, EAGLE over plain)
    tau = e["tau"] / v["tau"] if v["tau"] else 0.0
    cost = (e["seconds"] / e["forwards"]) / (v["seconds"] / v["forwards"]) if e["forwards"] and v["forwards"] \
        and v["seconds"] else 0.0
    why = (f"{r:.2f}× = {tau:.2f} (tokens per target pass, EAGLE over plain: τ) ÷ {cost:.2f} (model time per "
           f"target pass: an EAGLE cycle, draft and tree pass, over a plain one)")
    if r < 0.995 and tau < 1.3:
        why += ": the head's drafts were mostly rejected, so each costlier pass still gave about one token"
    elif r < 0.995:
        why += ": more tokens per pass, but not enough to pay for the costlier pass on this machine"
    return (f"<div class='el-race-ratio' data-ratio='{r:.4f}'>Measured{so_far}: <b>{r:.2f}×</b> ({esc(how)}: "
            f"EAGLE {e['tokens_per_s']:.1f} ÷ plain {v['tokens_per_s']:.1f} tokens/s)</div>"
            f"<div>Engine timings of the same prompt, the same settings, on the same machine: "
            f"{e['tokens']} tokens in {e['seconds']:.2f} s of model time and {e['forwards']} target passes "
            f"(EAGLE) vs {v['tokens']} tokens in {v['seconds']:.2f} s and {v['forwards']} passes (plain). "
            f"{esc(why)}.</div>")


def race_board_html(lanes: list[dict], max_new: int, prompt: str = "", status: str = "",
                    result: str = "") -> str:
    """The Race as it runs: the prompt, a status line, the two lanes side by side (stacked on a phone), and at
    the end the result (ratio and sameness; already HTML). The fairness rule stays above it (rules_html)."""
    p = prompt if len(prompt) <= 240 else prompt[:239] + "…"
    parts = ["<div class='el-race'>"]
    if p:
        parts.append(f"<div class='el-race-prompt'>Prompt: {esc(p)}</div>")
    if status:
        parts.append(f"<div class='el-race-status' role='status'>{esc(status)}</div>")
    parts.append("<div class='el-race-lanes'>" + "".join(lane_html(ln, max_new) for ln in lanes) + "</div>")
    if result:
        parts.append(f"<div class='el-race-result'>{result}</div>")
    parts.append("</div>")
    return "".join(parts)


def race_idle_html(message: str) -> str:
    """Before a Race, after Reset, or a message instead of a Race."""
    return f"<div class='el-race'><div class='el-race-status'>{esc(message)}</div></div>"


def rules_html() -> str:
    """The Race's rules (how the model is shared, what the counters count) with the board's CSS: drawn once,
    above the board, so its "why" stays open while the board streams."""
    return f"<style>{CSS}</style><div class='el-race el-race-fair'>{FAIRNESS}</div>"
