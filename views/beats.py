"""One cycle as it happens, in beats: the head drafts level by level, the target scores the whole tree in one
pass, the accepted path lights up and the target's own token appears. The app plays them (Play / Pause / step);
the static views stay for inspection.

Every beat figure of a cycle has the same traces, point for point (every node is in the node trace from the first
beat, hidden where it is not drafted yet), so a beat is a change of positions, colours and sizes that plotly can
tween. Gradio draws each new figure into a new element, so plotly cannot tween from one server update to the next
by itself: each figure carries its own transition in `layout.meta["el_steps"]`, the states its traces go through
(the first is where the beat starts, the last is the figure as sent), and views/js/beats.js draws the first and
animates through the rest (Plotly.animate). Without the script the figure as sent is the beat's end, unchanged.

Under the tree, a small time bar: this cycle's measured draft, verify and acceptance times against the plain
one-token passes the same tokens would have taken (`plain_step`: measured plain steps, never typed in).
"""
from __future__ import annotations

import statistics

from .common import (ACCEPTED, BONUS, CORRECTION, DRAFT_Q, KIND_GLYPHS, NOT_REACHED, REJECTED, ROOT, STATUS_GLYPHS,
                     TARGET_P, as_dict, esc, figure, layout_base, pct, show_token)
from .tree import depth_axes, tree_figure, tree_graph, tree_layout

# the nodes' marker shapes after the acceptance test (tree.py draws the same statuses with the same shapes)
SHAPES = {"root": "square", "accepted": "square", "rejected": "square-x", "not_reached": "square-open"}
STATUS_COLOURS = {"root": ROOT, "accepted": ACCEPTED, "rejected": REJECTED, "not_reached": NOT_REACHED}
GROW_MS = 650      # a draft level grows out of its parents
LABEL_MS = 200     # then its labels show (in place)
LIGHT_MS = 450     # the verify pass lights every node (then settles: a second step as long)
WALK_MS = 450      # one step of the acceptance walk
NODE_SIZE, LIT_SIZE = 20, 30
TOKEN_CHARS = 9    # a node's token as shown beside its marker (the hover card has it whole)


def beat_count(rec) -> int:
    """Draft levels + the verify beat + the accept beat (a prefill has one beat)."""
    rec = as_dict(rec)
    if not rec or rec["cycle"] == 0 or len(rec["nodes"]) < 2:
        return 1
    return max(n["depth"] for n in rec["nodes"]) + 2


def beat_phase(rec: dict, beat: int) -> tuple[str, int, int]:
    """Which part of the cycle a beat shows: ("prefill" | "draft" | "verify" | "accept", draft level, tree depth)."""
    n = beat_count(rec)
    if n == 1:
        return "prefill", 0, 0
    depth = n - 2
    if beat < depth:
        return "draft", beat + 1, depth
    return ("verify" if beat == depth else "accept"), 0, depth


def beat_caption(rec, beat: int) -> str:
    """One short line for the beat (on a 1280x720 projector it must leave the tree on the screen): the one counter,
    "Beat k of n", and what happens. The figure shows the rest."""
    rec = as_dict(rec)
    phase, d, depth = beat_phase(rec, beat)
    if phase == "prefill":
        return "Prefill: the target reads the prompt in one pass and picks the first token; no tree yet."
    at = f"Beat {beat + 1} of {beat_count(rec)}"      # the one counter: the figure's title counts the same way
    if phase == "draft":
        k = sum(1 for x in rec["nodes"] if x["depth"] == d)
        return f"{at} · Draft, level {d} of {depth}: the head guesses {k} token{'s' if k != 1 else ''} (q, purple)"
    if phase == "verify":
        return f"{at} · Verify: ONE target pass scores all {len(rec['nodes']) - 1} guesses (p, blue)"
    kind = rec["bonus_kind"]
    return (f"{at} · Accept: {rec['accept_length']} kept ✓ + the target's {kind} "
            f"{KIND_GLYPHS.get(kind, '★')} = {len(rec['new_tokens'])} token{'s' if len(rec['new_tokens']) != 1 else ''}")


def beat_label(rec, beat: int) -> str:
    """A short name of the beat for the figure's title (the sentence, beat_caption, is the text beside it)."""
    rec = as_dict(rec)
    phase, d, depth = beat_phase(rec, beat)
    if phase == "draft":
        return f"Draft, level {d} of {depth}"
    if phase == "verify":
        return "Verify: one target pass"
    if phase == "accept":
        return f"Accept: {rec['accept_length']} kept + 1 {rec['bonus_kind']}"
    return "prefill"


def beat_title(rec, beat: int) -> str:
    rec = as_dict(rec)
    return f"Cycle {rec['cycle']} · beat {beat + 1}/{beat_count(rec)} · {beat_label(rec, beat)}"


# ----------------------------------------------------------------------------- the time bar's numbers
def plain_step(plain_records) -> dict | None:
    """What one plain decoding step costs, measured: the median over a plain run's records (the Race's plain lane,
    or the recorded run's) of draft + verify + other seconds, one one-token target pass and its bookkeeping each.
    The prefill (cycle 0, the prompt's pass) is left out. Steps whose pass was shared with other students' rows
    (a classroom round) are left out while unshared ones exist. None without a measured step."""
    steps = [as_dict(r) for r in (plain_records or [])]
    steps = [r for r in steps if r and r.get("cycle", 0) > 0 and r.get("verify_seconds") is not None]
    alone = [r for r in steps if (r.get("pass_sessions") or 1) <= 1]
    shared = not alone and bool(steps)
    steps = alone or steps
    if not steps:
        return None
    secs = [r["verify_seconds"] + (r.get("draft_seconds") or 0) + (r.get("other_seconds") or 0) for r in steps]
    return {"seconds": statistics.median(secs), "steps": len(steps), "shared": shared}


def cycle_times(rec: dict) -> dict | None:
    """This cycle's measured seconds: draft, verify, other (acceptance and commit). None where the record lacks one."""
    if any(rec.get(k) is None for k in ("draft_seconds", "verify_seconds", "other_seconds")):
        return None
    return {k: rec[f"{k}_seconds"] for k in ("draft", "verify", "other")}


def ms(s: float) -> str:
    v = 1e3 * s
    return f"{v:.1f} ms" if v < 10 else f"{v:.0f} ms"


# ----------------------------------------------------------------------------- the beats' states
def _scene(rec: dict) -> dict:
    """Where everything goes: node places (x = depth, y = leaf row), the target's token on a row of its own below."""
    g = tree_graph(rec)
    pos = tree_layout(g)
    nodes = {x["index"]: x for x in rec["nodes"]}
    order = sorted(nodes)
    leaves = max(1, sum(1 for v in g if g.out_degree(v) == 0))
    path = list(rec["accepted_path"])
    last = path[-1] if path else 0
    kind = rec["bonus_kind"]
    return dict(rec=rec, pos=pos, nodes=nodes, order=order, edges=sorted(g.edges, key=lambda e: e[1]), path=path,
                last=last, leaves=leaves, bonus=(pos[last][0] + 1, -leaves), kind=kind,
                bonus_colour=CORRECTION if kind == "correction" else BONUS,
                maxd=max(p[0] for p in pos.values()))


def _chars(s: dict) -> int:
    """A token's characters beside its marker: fewer in a deep tree (narrower columns)."""
    return TOKEN_CHARS if s["maxd"] <= 5 else 6


def _node_look(s: dict, i: int, stage: str) -> dict:
    """One node's marker and label at a stage: "hidden" (not drafted yet: at its parent, invisible, where it grows
    from), "placed" (just drafted, in its place, its label not shown yet: a label moving across the tree would run
    over the others), "q" (drafted, the head's probability), "lit" / "p" (scored by the target's pass:
    lit is the flash), "done" (its acceptance outcome)."""
    n, pos = s["nodes"][i], s["pos"]
    if i == 0:
        return dict(xy=pos[0], colour=ROOT, opacity=1.0, size=NODE_SIZE + 4, symbol="square",
                    text=esc(show_token(n["text"], _chars(s))))
    token = esc(show_token(n["text"], _chars(s)))
    parent = pos[n["parent"]]
    if stage == "hidden":
        return dict(xy=parent, colour=DRAFT_Q, opacity=0.0, size=4, symbol="square", text="")
    if stage in ("placed", "q"):      # faint = the head was unsure (as in the tree view); placed: no label yet
        return dict(xy=pos[i], colour=DRAFT_Q, opacity=0.35 + 0.65 * n["q"], size=NODE_SIZE, symbol="square",
                    text=f"{token}<br>q {pct(n['q'])}" if stage == "q" else "")
    if stage in ("lit", "p"):
        return dict(xy=pos[i], colour=TARGET_P, opacity=1.0, size=LIT_SIZE if stage == "lit" else NODE_SIZE,
                    symbol="square", text=f"{token}<br>p {pct(n['p'])}")
    st = n["status"]
    glyph = STATUS_GLYPHS.get(st, "")
    return dict(xy=pos[i], colour=STATUS_COLOURS.get(st, NOT_REACHED), opacity=1.0 if st != "not_reached" else 0.8,
                size=NODE_SIZE + (4 if st == "accepted" else 0), symbol=SHAPES.get(st, "square"),
                text=f"{glyph} {token}<br>p {pct(n['p'])}".strip())


def _state(s: dict, stage_of, walk: int = 0, bonus: bool | str = False, times: tuple = (1, 0, 0)) -> dict:
    """The traces' changing values in one state: each node's look (stage_of(node) -> stage), the accepted path
    walked to its `walk`-th node, the target's token shown or not ("placed": in its place, its label not yet), and the time bar's segments shown (fractions
    of draft, verify, plain)."""
    looks = {i: _node_look(s, i, stage_of(s["nodes"][i])) for i in s["order"]}
    pos, path = s["pos"], [0] + s["path"]
    walked = [pos[path[min(k, walk)]] for k in range(len(path))]
    last = pos[s["last"]]
    ex, ey = [], []
    for u, v in s["edges"]:
        x1, y1 = looks[v]["xy"]
        ex += [pos[u][0], x1, None]
        ey += [pos[u][1], y1, None]
    bx, by = s["bonus"] if bonus else last
    kind = s["kind"]
    return dict(
        edges=dict(x=ex, y=ey),
        path=dict(x=[p[0] for p in walked], y=[p[1] for p in walked]),
        bonus_edge=dict(x=[last[0], bx], y=[last[1], by]),
        nodes=dict(x=[looks[i]["xy"][0] for i in s["order"]], y=[looks[i]["xy"][1] for i in s["order"]],
                   marker=dict(color=[looks[i]["colour"] for i in s["order"]],
                               opacity=[looks[i]["opacity"] for i in s["order"]],
                               size=[looks[i]["size"] for i in s["order"]],
                               symbol=[looks[i]["symbol"] for i in s["order"]]),
                   text=[looks[i]["text"] for i in s["order"]]),
        bonus=dict(x=[bx], y=[by], marker=dict(opacity=[1.0 if bonus else 0.0], size=[30 if bonus else 4]),
                   text=[f"{KIND_GLYPHS.get(kind, '★')} <b>{esc(show_token(s['rec']['bonus_text'], TOKEN_CHARS))}"
                         f"</b> ({kind})" if bonus is True else ""]),
        times=times,
    )


def beat_states(rec, beat: int) -> list[tuple[int, dict]]:
    """The states a beat goes through, each with the milliseconds of the transition into it; the first (0 ms) is
    where it starts (the previous beat's end), the last is what the beat shows."""
    s = _scene(rec)
    phase, d, depth = beat_phase(rec, beat)
    path = s["path"]
    if phase == "draft":
        start = lambda n: "q" if n["depth"] < d else "hidden"                           # noqa: E731
        placed = lambda n: "q" if n["depth"] < d else ("placed" if n["depth"] == d else "hidden")   # noqa: E731
        end = lambda n: "q" if n["depth"] <= d else "hidden"                            # noqa: E731
        t0 = (0, 0, 0) if d == 1 else (1, 0, 0)  # the first beat: the draft time's bar grows with the first level
        return [(0, _state(s, start, times=t0)), (GROW_MS, _state(s, placed)), (LABEL_MS, _state(s, end))]
    if phase == "verify":
        return [(0, _state(s, lambda n: "q")),
                (LIGHT_MS, _state(s, lambda n: "lit", times=(1, 1, 0))),
                (LIGHT_MS, _state(s, lambda n: "p", times=(1, 1, 0)))]
    # accept: the walk from the root, one level a step; a level's nodes show their outcome as the walk reaches it,
    # then every deeper node (not reached), the target's own token (moving out, then its label) and the plain
    # passes it all replaces
    out = [(0, _state(s, lambda n: "p", times=(1, 1, 0)))]
    for k in range(1, len(path) + 1):
        out.append((WALK_MS, _state(s, lambda n, k=k: "done" if n["depth"] <= k else "p", walk=k, times=(1, 1, 0))))
    out.append((WALK_MS, _state(s, lambda n: "done", walk=len(path), bonus="placed", times=(1, 1, 1))))
    out.append((LABEL_MS, _state(s, lambda n: "done", walk=len(path), bonus=True, times=(1, 1, 1))))
    return out


# ----------------------------------------------------------------------------- the figure
def _traces(s: dict, st: dict, bar: dict | None) -> list[dict]:
    rec = s["rec"]
    nodes = s["nodes"]
    hover = [f"<b>{esc(show_token(nodes[i]['text'], 30))}</b>  (node {i}, depth {nodes[i]['depth']})"
             + (f"<br>draft q = {pct(nodes[i]['q'])}<br>target p = {pct(nodes[i]['p'])}" if i else
                "<br>root: the last committed token") for i in s["order"]]
    traces = [
        dict(type="scatter", name="draft edges", mode="lines", line=dict(color="#c9c9c9", width=2, dash="dot"),
             hoverinfo="skip", showlegend=False, **st["edges"]),
        dict(type="scatter", name="accepted path", mode="lines", line=dict(color=ACCEPTED, width=7),
             hoverinfo="skip", showlegend=False, **st["path"]),
        dict(type="scatter", name="bonus edge", mode="lines", line=dict(color=s["bonus_colour"], width=4, dash="dot"),
             hoverinfo="skip", showlegend=False, **st["bonus_edge"]),
        dict(type="scatter", name="nodes", mode="markers+text",
             textposition=["bottom center" if i == 0 else "middle right" for i in s["order"]],
             textfont=dict(size=14, color="#111"), cliponaxis=False, customdata=s["order"],
             hovertext=hover, hoverinfo="text", showlegend=False,
             x=st["nodes"]["x"], y=st["nodes"]["y"], text=st["nodes"]["text"],
             marker=dict(line=dict(width=1, color="#333"), **st["nodes"]["marker"])),
        dict(type="scatter", name="target's token", mode="markers+text", textposition="middle right",
             textfont=dict(size=15, color="#111"), cliponaxis=False, hoverinfo="skip", showlegend=False,
             x=st["bonus"]["x"], y=st["bonus"]["y"], text=st["bonus"]["text"],
             marker=dict(symbol="diamond" if s["kind"] == "correction" else "star", color=s["bonus_colour"],
                         line=dict(width=1, color="#333"), **st["bonus"]["marker"])),
    ]
    return traces + _bar_traces(bar, st["times"]) if bar else traces


def time_bar(rec: dict, plain: dict | None) -> dict | None:
    """The time bar's numbers (seconds), all from records: this cycle's draft / verify / other, and the plain steps
    the committed tokens would have taken (len(new_tokens) one-token passes at the measured plain step). None
    when the record has no timings."""
    t = cycle_times(rec)
    if t is None:
        return None
    k = len(rec.get("new_tokens") or [])
    return dict(t, tokens=k, plain=plain, plain_total=k * plain["seconds"] if plain else None,
                shared=(rec.get("pass_sessions") or 1) > 1, sessions=rec.get("pass_sessions") or 1)


def _bar_traces(bar: dict, shown: tuple) -> list[dict]:
    """Horizontal bars on their own axes (x2, y2): row "EAGLE" the cycle's draft, verify and other segments, row
    "plain" one segment per replaced one-token pass. `shown`: how much of (draft, verify, plain) is drawn (0..1)."""
    fd, fv, fp = shown
    d, v, o = bar["draft"], bar["verify"], bar["other"]
    eagle, plain_row = "EAGLE", "plain"
    common = dict(type="bar", orientation="h", xaxis="x2", yaxis="y2", showlegend=False, hoverinfo="text",
                  textposition="inside", insidetextanchor="middle", textfont=dict(size=13), width=0.62)
    out = [dict(name="draft time", y=[eagle], x=[1e3 * d * fd], base=[0], text=[""],
                marker=dict(color=DRAFT_Q, pattern=dict(shape="/", fgcolor="white")),
                hovertext=[f"draft (head catch-up + drafting): {ms(d)}"], **common),
           dict(name="verify time", y=[eagle], x=[1e3 * v * fv], base=[1e3 * d], text=["verify"],
                marker=dict(color=TARGET_P), textfont=dict(size=13, color="white"),
                hovertext=[f"verify (the one target pass over the tree): {ms(v)}"
                           + (f", shared with {bar['sessions'] - 1} other student(s)" if bar["shared"] else "")],
                **{k: w for k, w in common.items() if k != "textfont"}),
           dict(name="accept time", y=[eagle], x=[1e3 * o * fv], base=[1e3 * (d + v)], text=[""],
                marker=dict(color="#999999"), hovertext=[f"acceptance + commit: {ms(o)}"], **common)]
    p, k = bar["plain"], bar["tokens"]
    step = 1e3 * p["seconds"] if p else 0.0
    out.append(dict(name="plain passes", y=[plain_row] * max(1, k), x=[step * fp] * max(1, k),
                    base=[step * j for j in range(max(1, k))], text=[f"{j + 1}" for j in range(max(1, k))],
                    marker=dict(color="#9ecae1", line=dict(width=2, color="white")),
                    hovertext=[f"plain step {j + 1} of {k}: one one-token target pass, {ms(p['seconds'])} "
                               f"(median of {p['steps']} measured)" if p else "not measured" for j in range(max(1, k))],
                    **common))
    return out


def _bar_axes(bar: dict, domain_top: float, counted: bool) -> dict:
    """The time bar's axes: its rows named with their totals (left of the bars, inside the figure, so the tree
    above keeps the whole width), its measured numbers in words under it. `counted`: the accept beat, where the
    plain passes the cycle replaces are known (before it the plain row waits)."""
    d, v, o = bar["draft"], bar["verify"], bar["other"]
    eagle_ms = 1e3 * (d + v + o)
    p = bar["plain"]
    right = max(eagle_ms, 1e3 * bar["plain_total"] if p else 0) * 1.04 or 1
    k = bar["tokens"]
    parts = f"draft {ms(d)} + verify {ms(v)} + accept {ms(o)}"
    if not p:
        plain_tick = "plain: not measured"
        title = f"{parts}; plain pass not measured yet (Race times it)"
    elif not counted:
        plain_tick = "plain: ? (at Accept)"
        title = f"{parts}; plain: one pass a token, {ms(p['seconds'])} each"
    else:
        plain_tick = f"plain ×{k}: {ms(bar['plain_total'])}"
        title = (f"{parts} vs {k} plain one-token pass{'es' if k != 1 else ''} × {ms(p['seconds'])} (median of "
                 f"{p['steps']} measured{', shared' if p['shared'] else ''})")
    if bar["shared"]:
        title += f"; this verify pass was shared by {bar['sessions']} students"
    return dict(
        xaxis2=dict(domain=[0.3, 1], anchor="y2", range=[0, right], showgrid=True, gridcolor="#eee", zeroline=False,
                    ticksuffix=" ms", title=dict(text=title, font=dict(size=13), standoff=4), tickfont=dict(size=12)),
        yaxis2=dict(domain=[0, domain_top], anchor="x2", type="category", categoryorder="array",
                    categoryarray=["plain", "EAGLE"], tickmode="array", tickvals=["EAGLE", "plain"],
                    ticktext=[f"EAGLE: {ms(eagle_ms / 1e3)}", plain_tick], tickfont=dict(size=13), fixedrange=True))


def beat_figure(rec, beat: int, height: int | None = None, plain: dict | None = None):
    """The tree at this beat, with its transition (layout.meta["el_steps"]) and the time bar under it. `plain`:
    `plain_step` of the session's plain records (None: the bar says no plain pass was measured). A prefill (no
    tree) is the tree view."""
    rec = as_dict(rec)
    n_beats = beat_count(rec)
    beat = max(0, min(int(beat), n_beats - 1))
    if n_beats == 1:
        return tree_figure(rec, height=height, title=beat_title(rec, beat))
    s = _scene(rec)
    states = beat_states(rec, beat)
    bar = time_bar(rec, plain)
    rows = s["leaves"] + 1                       # + the target's token's row
    tree_px = 55 * rows + 40
    bar_px, gap_px, below_px = (64, 22, 62) if bar else (0, 0, 20)   # below: the bar's tick labels and title
    h = height or 75 + tree_px + gap_px + bar_px + below_px
    area = h - 75 - below_px
    bar_top = bar_px / area
    right = max(s["maxd"], s["bonus"][0]) + 1.0  # room for the labels right of the deepest markers
    axes = depth_axes(s["maxd"], right, -rows + 0.4)
    axes["yaxis"]["domain"] = [min(0.6, (bar_px + gap_px) / area), 1]
    layout = layout_base(beat_title(rec, beat), height=h, margin=dict(l=20, r=20, t=75, b=below_px),
                         hovermode="closest", barmode="overlay", uniformtext=dict(minsize=10, mode="hide"), **axes)
    if bar:
        layout.update(_bar_axes(bar, bar_top, counted=beat == n_beats - 1))
    # each state as the traces' changing values, indexed like the traces (views/js/beats.js: Plotly.animate)
    layout["meta"] = {"el_steps": [{"ms": ms_, "data": _patches(st, bar)} for ms_, st in states],
                      "el_beat": beat}
    return figure(_traces(s, states[-1][1], bar), layout)


def _patches(st: dict, bar: dict | None) -> list[dict]:
    """One state as a list of per-trace changes, in the traces' order (the bars' lengths included)."""
    out = [st["edges"], st["path"], st["bonus_edge"], st["nodes"], st["bonus"]]
    if bar:
        out += [{"x": t["x"]} for t in _bar_traces(bar, st["times"])]
    return out
