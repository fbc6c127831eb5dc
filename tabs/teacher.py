"""The class's one setting only the teacher holds: whether the engine loop sizes every student's tree by the load.

By default every student drafts exactly the tree they set (the lesson is the tree). A teacher who wants to show the
paper's saturation, live, turns on "trees sized by the load" (serving/rounds.py `load_sized`): the class's trees
shrink as more students step together, its tokens/s rise, and every tree figure then says what the student set and
what the round gave (views/tree.py). No student can change it: the controls show, and answer, only on a page
opened with the teacher's link (`?teacher=TOKEN`), whose token app.py prints at start (or EAGLE_LENS_TEACHER_TOKEN
sets). `python app.py --load-sized-trees` starts with it on.
"""
from __future__ import annotations

import hmac
import os
import secrets

import gradio as gr

from eagle_core.serving.rounds import LOOP

TOKEN = os.environ.get("EAGLE_LENS_TEACHER_TOKEN") or secrets.token_urlsafe(9)


def teacher_link(url: str) -> str:
    return f"{url.rstrip('/')}/?teacher={TOKEN}"


def is_teacher(request: gr.Request | None) -> bool:
    """Whether the page that sent `request` was opened with the teacher's link."""
    if request is None:
        return False
    given = (getattr(request, "query_params", None) or {}).get("teacher", "")
    return bool(given) and hmac.compare_digest(str(given), TOKEN)


def state_note() -> str:
    if LOOP.load_sized:
        return ("⚖ **On**: a round of many students drafts smaller trees (or none); each tree figure says what its "
                "student set and what the round gave.")
    return "✓ **Off**: every student drafts the tree they set; the class still shares one target pass per round."


class TeacherControls:
    """An accordion hidden from students: the switch and what it does now."""

    def build(self):
        with gr.Accordion("Class settings (teacher)", open=True, visible=False, elem_id="el-teacher") as self.box:
            self.load_sized = gr.Checkbox(value=LOOP.load_sized, elem_id="el-load-sized",
                                          label="Size every student's tree by the class's load (the paper's "
                                                "saturation, live)")
            self.note = gr.Markdown(state_note(), elem_id="el-load-sized-note")
        return self

    def wire(self, demo: gr.Blocks):
        demo.load(on_teacher_open, None, [self.box, self.load_sized, self.note], api_visibility="private")
        self.load_sized.input(on_load_sized, [self.load_sized], [self.load_sized, self.note],
                              api_visibility="private", queue=False)


def on_teacher_open(request: gr.Request):
    shown = is_teacher(request)
    return gr.Accordion(visible=shown), gr.Checkbox(value=LOOP.load_sized), state_note()


def on_load_sized(on: bool, request: gr.Request):
    """The teacher's switch (refused, and put back, for any other page)."""
    if not is_teacher(request):
        return gr.Checkbox(value=LOOP.load_sized), "⚠️ Only the teacher's link can change this."
    LOOP.load_sized = bool(on)
    return gr.Checkbox(value=LOOP.load_sized), state_note()
