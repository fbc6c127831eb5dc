"""Deep links (issue 50.8): a URL opens the page on a tab, a walkthrough step, a prompt and the Lens's settings, and
the Lens on a cycle of the recorded run it opens with. views/js/links.js keeps the page's address following what is
on screen, so a teacher copies the address bar and shares it.

    ?tab=walk&step=4                          the Walkthrough, step 4
    ?prompt=How+can+I&temperature=0.8&shape=chain&cycle=3
                                              the Lens with that prompt and settings, cycle 3 of the recording

Parameters: tab (lens, amb, walk, lab; or the tab's name), step (1-7), prompt, cycle, presenter (1/0), and the
Lens's settings by their API names (shifted, temperature, top_p, seed, shape, tree, preset, depth, top_k,
total_tokens, max_new_tokens). A value outside its limits is brought inside and said (the note beside the Lens's
buttons, and a notice wherever the page opens); an unknown parameter or value is named, never a stack trace."""
from __future__ import annotations

import dataclasses
import json
from html import escape

import gradio as gr

from views.walkthrough import STEPS

from .common import DEFAULT_PRESET, PRESETS, SETTING_NAMES, Settings, normalise, unexpected
from .lens import shown

TABS = {"lens": "lens", "amb": "amb", "how-can-i": "amb", "how can i": "amb", "walk": "walk",
        "walkthrough": "walk", "lab": "lab", "paper-lab": "lab", "paper lab": "lab"}
TRUE, FALSE = {"1", "true", "on", "yes"}, {"0", "false", "off", "no"}
CHOICES = {"shape": {"tree": "Tree", "chain": "Chain"},
           "tree_kind": {"static": "static (EAGLE-1)", "dynamic": "dynamic (EAGLE-2)"}}
# the URL's names for the settings (the API's, except "tree" for the tree kind, as the page labels it)
URL_NAME = {n: ("tree" if n == "tree_kind" else n) for n in SETTING_NAMES}
FROM_URL = {v: k for k, v in URL_NAME.items()}
OTHER = ("tab", "step", "cycle", "presenter")


def link_defaults(cycle0: int) -> dict:
    """What a link may leave out (the page's own first values; `cycle0` the recorded run's cycle it opens on), in
    the URL's spelling: views/js/links.js writes only what differs from these."""
    d = {URL_NAME[k]: v for k, v in dataclasses.asdict(Settings()).items()}
    d["shape"], d["tree"] = "tree", "static"
    d["shifted"] = 1
    return {**d, "tab": "lens", "step": 1, "cycle": cycle0, "presenter": 0}


def marker_html(applied: bool, cycle0: int) -> str:
    """A hidden element: the defaults for links.js, and whether this page's link has been applied (until then the
    script leaves the address alone, or it would wipe the link before the page reads it)."""
    return (f"<div id='el-link-state' hidden data-applied='{int(applied)}' "
            f"data-defaults='{escape(json.dumps(link_defaults(cycle0)), quote=True)}'></div>")


def parse_link(params: dict, n_steps: int) -> tuple[dict, Settings | None, list[str]]:
    """(the page-level values: tab, step index, cycle, presenter; the Lens settings when the link names any, brought
    inside their limits; the notes that say what was changed or not understood)."""
    notes, page = [], {}
    known = set(FROM_URL) | set(OTHER)
    unknown = sorted(k for k in params if k not in known)
    if unknown:
        notes.append("The link's " + ", ".join(f"“{k}”" for k in unknown) + " " +
                     ("is" if len(unknown) == 1 else "are") + " not a setting here: left out.")
    if "tab" in params:
        tab = TABS.get(str(params["tab"]).strip().lower())
        if tab is None:
            notes.append(f"No tab “{params['tab']}”: the tabs are lens, amb, walk and lab.")
        else:
            page["tab"] = tab
    if "step" in params:
        try:
            k = int(params["step"])
        except ValueError:
            notes.append(f"Step “{params['step']}” is not a number: showing step 1.")
            k = 1
        if not 1 <= k <= n_steps:
            notes.append(f"Step {k} is outside 1–{n_steps}: showing step {min(n_steps, max(1, k))}.")
            k = min(n_steps, max(1, k))
        page["step"] = k - 1
        page.setdefault("tab", "walk")
    if "cycle" in params:
        try:
            page["cycle"] = max(0, int(params["cycle"]))
        except ValueError:
            notes.append(f"Cycle “{params['cycle']}” is not a number: left at the first.")
    if "presenter" in params:
        v = str(params["presenter"]).lower()
        if v in TRUE | FALSE:
            page["presenter"] = v in TRUE
        else:
            notes.append(f"Presenter “{params['presenter']}” is neither 1 nor 0: left off.")
    named = {FROM_URL[k]: v for k, v in params.items() if k in FROM_URL}
    if not named:
        return page, None, notes
    s = Settings()
    for name, v in named.items():
        if name == "shifted":
            if str(v).lower() in TRUE | FALSE:
                s.shifted = str(v).lower() in TRUE
            else:
                notes.append(f"Shifted “{v}” is neither 1 nor 0: left on.")
        elif name in CHOICES:
            pick = CHOICES[name].get(str(v).strip().lower().split(" ")[0])
            if pick is None:
                notes.append(f"{URL_NAME[name].capitalize()} “{v}” is not one of "
                             + ", ".join(CHOICES[name]) + ": left as it was.")
            else:
                setattr(s, name, pick)
        elif name == "preset":
            s.preset = v if v in PRESETS else s.preset
            if v not in PRESETS:
                notes.append(f"Unknown tree preset “{v}”: using {DEFAULT_PRESET}.")
        else:
            setattr(s, name, v)           # numbers and the prompt: normalise checks them, and says what it changed
    s, said = normalise(s)
    if said:
        notes.append(said.removeprefix("ℹ️ "))
    if "tab" not in page:
        page["tab"] = "lens"
    return page, s, notes


class Links:
    """Wires the page's load to open what the URL names (after the page's own load handlers)."""

    def __init__(self, tabs, presenter, lens, walk):
        self.tabs, self.presenter, self.lens, self.walk = tabs, presenter, lens, walk
        self.cycle0 = int(lens.cycle.value or 0)
        self.marker = gr.HTML(marker_html(False, self.cycle0), elem_id="el-link", padding=False)
        # the session state is not an output: the page's own load handler (tabs/page.py on_open) writes it
        self.views = [c for c in lens.outs if c is not lens.state]

    def wire(self, demo):
        outs = [self.marker, self.tabs, self.presenter, self.walk.step, *self.lens.settings, self.lens.input_note,
                *self.views]
        demo.load(self.on_open, [self.lens.state], outs, api_visibility="private", queue=False,
                  show_progress="hidden")

    def on_open(self, state, request: gr.Request):
        skip = gr.update()
        out = {c: skip for c in [self.tabs, self.presenter, self.walk.step, *self.lens.settings,
                                 self.lens.input_note, *self.views]}
        out[self.marker] = marker_html(True, self.cycle0)
        params = dict(getattr(request, "query_params", None) or {})
        params.pop("__theme", None)             # gradio's own
        for k in [k for k in params if k.startswith("teacher")]:
            params.pop(k)                       # the teacher's link (tabs/teacher.py) is not a setting
        if not params:
            return out
        try:
            return self.apply(dict(out), params, state)
        except Exception as exc:               # a link never costs the page: it opens as it would without one
            said = f"❌ This link could not be opened ({unexpected(exc)}); the page opened as usual."
            gr.Warning(said)
            return out | {self.lens.input_note: said}

    def apply(self, out: dict, params: dict, state) -> dict:
        skip = gr.update()
        page, settings, notes = parse_link(params, len(STEPS))
        if "tab" in page:
            out[self.tabs] = gr.Tabs(selected=page["tab"])
        if "presenter" in page:
            out[self.presenter] = page["presenter"]
        if "step" in page:
            out[self.walk.step] = gr.update(value=STEPS[page["step"]]["title"])
        if settings is not None:
            for comp, name in zip(self.lens.settings, SETTING_NAMES):
                out[comp] = getattr(settings, name)
        if "cycle" in page:
            n = len(shown(state))
            if page["cycle"] > n - 1:
                notes.append(f"Cycle {page['cycle']} is past the recorded run's last ({n - 1}): showing that one.")
            drawn = self.lens.render(state, min(page["cycle"], n - 1), status=skip)
            out.update({c: v for c, v in drawn.items() if c is not self.lens.state})
        if notes:
            said = "ℹ️ From the link: " + " ".join(notes)
            out[self.lens.input_note] = said
            gr.Warning(said)                    # wherever the page opens, not only on the Lens
        return out
