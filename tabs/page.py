"""The page's frame: the header, the model banner, the four tabs (each builds and wires itself), the hidden
monitoring endpoints, and launch."""
from __future__ import annotations

import os
import threading
import time
import traceback

import gradio as gr

from eagle_core.model.cpu_kernels import short_description
from eagle_core.serving.loading import MODEL
from eagle_core.serving.rounds import LOOP
from eagle_core.serving.sessions import SESSIONS
from eagle_core.serving.turns import MODEL_LOCK
from views.page import CSS, PAGE_JS, PRESENTER_JS

from . import gradio_skip
from .ambiguity import AmbiguityTab
from .lab import LabTab
from .lens import LensTab, initial_state, status_line
from .links import Links
from .teacher import TeacherControls, teacher_link
from .walkthrough import WalkthroughTab

HEADER = ("# 🦅 EAGLE Lens\nA small draft head guesses a **tree** of next tokens; the target checks them all in "
          "**one** pass and keeps the longest agreeing path. In the tree: "
          "<span style='color:#009E73'>✓ accepted</span> · <span style='color:#D55E00'>✗ rejected</span> · "
          "<span style='color:#777'>· not reached</span> · "
          "<span style='color:#1f6fa8'>★ the target's bonus token</span> · "
          "<span style='color:#b57a00'>◆ its correction</span> · "
          "faint box = the head was unsure (low draft probability q).")


def model_banner():
    if MODEL.status == "error":
        return f"⚠️ The model failed to load: {MODEL.error}", gr.Timer(active=False)
    if not MODEL.ready.is_set():
        waited = time.time() - MODEL.started
        took = f" ({waited:.0f} s so far)" if waited >= 1 else ""    # no "(0 s)" on the first paint
        return (f"⏳ Loading the live model{took}… meanwhile you see a run recorded from the real model.",
                gr.Timer(active=True))
    t = MODEL.target
    heads = ", ".join(f"{k}: {os.path.basename(str(h.path))}" for k, h in MODEL.heads.items())
    numerics = f" ({short_description(t.kernel_plan)})" if t.device.type == "cpu" and t.kernel_plan else ""
    msg = f"✅ Live: target **{t.name}** on {t.device.type}{numerics}; heads {heads}."
    if MODEL.notice:
        msg += f"  \n⚠️ {MODEL.notice}"
    return msg, gr.Timer(active=False)


def first_paint_when_live(demo: gr.Blocks, banner: gr.Markdown, timer: gr.Timer):
    """Pages opened once the model is live are first painted saying so. Gradio serves every page the config it
    wrote at launch, while the model was still loading, so each page said "Loading the live model…" until the
    banner's timer first ticked (~1 s): once the model is ready, the banner's value and its timer (off) are written
    into the components and into the config served from then on."""
    def patch():
        MODEL.ready.wait()
        msg, _ = model_banner()
        banner.value, timer.active = banner.postprocess(msg), False   # a config written from now on
        while not getattr(demo, "is_running", False):                  # the config written at launch
            time.sleep(0.2)
        for c in (getattr(demo, "config", None) or {}).get("components", []):
            if c.get("id") == banner._id:
                c.setdefault("props", {})["value"] = banner.value
            elif c.get("id") == timer._id:
                c.setdefault("props", {})["active"] = False
    threading.Thread(target=patch, daemon=True, name="banner-first-paint").start()


def on_live(status):
    """After each banner tick: once the model is live, a Lens status that still says it is loading (a Step pressed
    before) is replaced; the status line never contradicts the banner."""
    if MODEL.ready.is_set() and "still loading" in str(status or ""):
        return "✅ The live model is ready now: press Step or Run."
    return gr.update()


def on_open(state, request: gr.Request):
    """A page opened: remember its session hash so closing the tab frees its decoder."""
    if not MODEL.ready.is_set():
        return "", state
    try:
        SESSIONS.session(state, getattr(request, "session_hash", None))
    except ValueError as exc:        # the server is full: said on the page, the page still shows the recording
        return f"❌ {exc}", state
    return status_line(state), state


def on_unload(request: gr.Request):
    """The tab closed: free that session's decoders at once (a running Run stops at its next cycle)."""
    SESSIONS.drop_hash(getattr(request, "session_hash", None))


def drop_session(value):
    """gr.State's delete callback: the browser session ended, forget its decoder."""
    if isinstance(value, dict):
        SESSIONS.drop(value.get("sid"))


def on_session_tokens(state) -> dict:
    """The live generation of this session: token ids, text, finished (what the load test checks for cross-talk)."""
    ids = [t for r in (state.get("records") or []) for t in r["new_tokens"]] if state.get("source") == "live" else []
    text = MODEL.target.decode(ids) if (ids and MODEL.target is not None) else ""
    recs = state.get("records") or []
    return {"token_ids": ids, "text": text, "finished": recs[-1].get("finished") if recs else None,
            "cycles": len(recs), "sid": state.get("sid")}


def server_stats() -> dict:
    """Resident memory, live sessions and the model queue (no per-session data)."""
    rss = 0
    try:
        with open("/proc/self/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration, ValueError):
        pass
    cpu = os.times()
    return {"rss_mb": round(rss, 1), "cpu_s": round(cpu.user + cpu.system, 2), **SESSIONS.stats(),
            "waiting": MODEL_LOCK.waiting(),
            "model_turns": MODEL_LOCK.holds, "rounds": LOOP.rounds, "last_round": LOOP.last,
            "waiting_for_a_round": LOOP.waiting()}


def state_ttl() -> float:
    """How long gradio keeps a page's state after its last change (the tab still open, or an API client that
    never closes): twice the sessions' idle timeout, so a student back after the decoder was freed is still told
    so (`ensure_decoder`), and then it goes too (drop_session frees any entry it still names)."""
    return 2 * SESSIONS.idle_timeout


def build_demo() -> gr.Blocks:
    gradio_skip.install()         # outputs a handler leaves unchanged are not rebuilt (tabs/gradio_skip.py)
    st0 = initial_state()
    # the model is shared through MODEL_LOCK, one cycle at a time; these handlers only wait their turn
    model_kw = dict(concurrency_id="model", concurrency_limit=SESSIONS.max_sessions)
    with gr.Blocks(title="EAGLE Lens") as demo:
        state = gr.State(st0, time_to_live=state_ttl(), delete_callback=drop_session)
        with gr.Row(elem_id="el-header"):
            gr.Markdown(HEADER, elem_id="el-title")
            presenter = gr.Checkbox(label="Presenter mode (large type)", value=False, scale=0, min_width=200,
                                    elem_id="el-presenter")
        banner = gr.Markdown(model_banner()[0], elem_id="el-banner")
        teacher = TeacherControls().build()      # shown only on the teacher's link
        timer = gr.Timer(1.0)
        tabs_ref = []
        with gr.Tabs(overflow_behavior="wrap") as tabs:  # a phone shows every tab, no "⋯" menu
            tabs_ref.append(tabs)
            lens = LensTab().build(st0, state)
            amb = AmbiguityTab().build()
            walk = WalkthroughTab(lens, tabs_ref).build()
            lab = LabTab(state).build()
        links = Links(tabs, presenter, lens, walk)   # a URL opens a tab, a step, settings (tabs/links.py)
        lens.wire(demo, model_kw)
        amb.wire(model_kw)
        walk.wire(model_kw)
        lab.wire(model_kw)
        teacher.wire(demo)
        links.wire(demo)
        presenter.change(None, [presenter], [presenter], js=PRESENTER_JS)
        first_paint_when_live(demo, banner, timer)
        timer.tick(model_banner, None, [banner, timer], concurrency_limit=None, show_progress="hidden",
                   api_name="banner").then(on_live, [lens.status], [lens.status], queue=False,
                                           show_progress="hidden", api_visibility="private")
        demo.load(on_open, [state], [lens.status, state], api_visibility="private")
        demo.unload(on_unload)
        # for the load test and monitoring: this session's generated tokens, and the server's memory and queue
        tokens_btn = gr.Button(visible=False)
        tokens_json = gr.JSON(visible=False)
        tokens_btn.click(on_session_tokens, [state], [tokens_json], api_name="session_tokens", concurrency_limit=None)
        stats_btn = gr.Button(visible=False)
        stats_btn.click(server_stats, None, [tokens_json], api_name="server_stats", concurrency_limit=None)
    return demo


def sweeper():
    """Free idle sessions now and then, for as long as the server runs."""
    while True:
        time.sleep(min(60.0, max(1.0, SESSIONS.idle_timeout / 4)))
        try:
            SESSIONS.sweep()
        except Exception:   # never let the sweeper die
            traceback.print_exc()


def launch(demo: gr.Blocks, host: str, port: int, share: bool = False):
    demo.queue(default_concurrency_limit=8, max_size=512)
    threading.Thread(target=sweeper, daemon=True, name="session-sweeper").start()
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    print(f"Teacher's link (the class settings; keep it to yourself): {teacher_link(f'http://{shown}:{port}')}",
          flush=True)
    demo.launch(server_name=host, server_port=port, share=share, css=CSS, js=PAGE_JS, show_error=False,
                theme=gr.themes.Soft(primary_hue="green", text_size="lg"), max_threads=4 * SESSIONS.max_sessions)
