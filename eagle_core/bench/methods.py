"""The benchmark's methods: their names, and one timed generation of a prompt by each.

  hf-greedy          transformers `generate` (greedy at T = 0, sampling with the same T / top-p at T > 0) with
                     stock transformers' kernels (fp32 F.linear, cpu_kernels.stock_kernels: not our plan):
                     what a user would otherwise run, and the baseline of `speedup`
  vanilla            our own plain decoding (DecodeConfig(draft="vanilla")) with our kernels: the same numerical
                     model as the eagle-* methods, so what speculation adds on top of kernel work is eagle / vanilla
  hf-prompt-lookup   transformers prompt-lookup decoding (generate(prompt_lookup_num_tokens=...))
  eagle-chain, eagle-static, eagle-dynamic   EAGLE drafting with the shifted head; a `:unshifted` suffix
                     (e.g. eagle-static:unshifted) uses the ablation head instead, an `:eagle3` suffix the
                     EAGLE-3 head (model/head3.py)
  vllm, vllm-eagle   vLLM's own decoding of the same target, plain and with the shifted head exported to it
                     (a chain of k drafts, vLLM's EAGLE-1), in vLLM's environment (bench/vllm.py: a worker
                     process per method, asked one prompt at a time, stopped while the other methods run)
  vllm-eagle3        the same with the EAGLE-3 head (the ':eagle3' methods' head) as vLLM's "method": "eagle3"
  llamacpp, llamacpp-eagle3   llama.cpp's own decoding of the target's GGUF (its 4-bit blocks), plain and with the
                     EAGLE-3 head exported to it (a chain of k drafts, `--spec-type draft-eagle3`), each generation
                     one run of llama.cpp's tool, timed and counted by llama.cpp itself (bench/llamacpp.py; greedy only)
  llamacpp-ngram-simple, -ngram-map-k, -ngram-map-k4v, -ngram-mod, -ngram-cache   llama.cpp's own draftless
                     speculation (`--spec-type ngram-*`, llama.cpp's defaults: eagle_core/llamacpp.py NGRAM_TYPES),
                     drafted from the text so far, counted by llama.cpp (drafted / accepted) like llamacpp-eagle3

Every run returns a per-prompt result: {"token_ids", "new_tokens", "seconds", "forwards", "depth_counts"}, and
for the engine's methods "accept_lengths" and "time_split" too (metrics.py reads them).
"""
from __future__ import annotations

import time
from dataclasses import replace

from .errors import BenchError
from .llamacpp import LLAMACPP_METHODS
from .metrics import depth_counts

BASELINE = "hf-greedy"
HF_METHODS = ("hf-greedy", "hf-prompt-lookup")
EAGLE_DRAFTS = {"eagle-chain": "chain", "eagle-static": "static", "eagle-dynamic": "dynamic"}
VLLM_METHODS = ("vllm", "vllm-eagle", "vllm-eagle3")
VLLM_SPEC_METHOD = {"vllm": None, "vllm-eagle": "eagle", "vllm-eagle3": "eagle3"}   # vLLM's speculative method
OUTSIDE_METHODS = HF_METHODS + VLLM_METHODS + LLAMACPP_METHODS     # methods that take no DecodeConfig of ours
DEFAULT_METHODS = ("hf-greedy", "vanilla", "hf-prompt-lookup", "eagle-chain", "eagle-static", "eagle-dynamic")
# the vLLM and llama.cpp ones need scripts/setup_vllm.sh / scripts/setup_llamacpp.sh, so only when asked
BASE_METHODS = DEFAULT_METHODS + VLLM_METHODS + LLAMACPP_METHODS
HEAD_SUFFIXES = ("unshifted", "eagle3")         # eagle-*:SUFFIX drafts with that head instead of the shifted one


# ============================================================================ names
def parse_methods(text: str) -> list[str]:
    """'a,b,c' -> validated method names (EAGLE ones may carry ':unshifted' or ':eagle3')."""
    names = [m.strip() for m in (text or "").split(",") if m.strip()]
    if not names:
        raise BenchError("no methods given")
    seen = []
    for m in names:
        base, _, suffix = m.partition(":")
        if base not in BASE_METHODS:
            raise BenchError(f"unknown method {m!r}; methods: {', '.join(BASE_METHODS)} "
                             f"(EAGLE ones also as NAME:unshifted or NAME:eagle3)")
        if suffix and (base not in EAGLE_DRAFTS or suffix not in HEAD_SUFFIXES):
            raise BenchError(f"unknown method {m!r}: only eagle-chain/static/dynamic take a suffix, "
                             f"':unshifted' or ':eagle3'")
        if m not in seen:
            seen.append(m)
    return seen


def method_head_shift(method: str) -> str | None:
    """Which head a method drafts with: 'shifted', 'unshifted', 'eagle3', or None (no head)."""
    if method == "vllm-eagle":
        return "shifted"        # exported to vLLM
    if method in ("vllm-eagle3", "llamacpp-eagle3"):
        return "eagle3"
    base, _, suffix = method.partition(":")
    if base not in EAGLE_DRAFTS:
        return None
    return suffix or "shifted"


def engine_of(method: str) -> str:
    """The engine a method runs in: "ours", "llama.cpp", "vLLM" or "transformers"."""
    if method in LLAMACPP_METHODS:
        return "llama.cpp"
    if method in VLLM_METHODS:
        return "vLLM"
    if method in HF_METHODS:
        return "transformers"
    return "ours"


def rotated(methods: list[str], i: int) -> list[str]:
    """Method order for prompt i: rotate by i, so every method runs at every position equally often."""
    if not methods:
        return []
    k = i % len(methods)
    return methods[k:] + methods[:k]


def method_config(method: str, base_cfg, max_new_tokens: int, temperature: float, top_p: float, seed: int):
    """The DecodeConfig of one of our own methods (vanilla, eagle-*): the base tree settings, this draft."""
    draft = "vanilla" if method == "vanilla" else EAGLE_DRAFTS[method.partition(":")[0]]
    return replace(base_cfg, draft=draft, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                   seed=seed, record_topk=0)


def max_nodes(methods, base_cfg) -> int:
    """The largest tree (in nodes) any of the methods verifies: the room a prompt needs beyond its tokens."""
    n = 0
    for m in methods:
        if m == "vanilla" or m.partition(":")[0] in EAGLE_DRAFTS:
            n = max(n, method_config(m, base_cfg, 1, 0.0, 1.0, 0).spec().max_nodes)
    return n


# ============================================================================ transformers' generate
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

    from ..model.cpu_kernels import stock_kernels
    gc = hf_generation_config(target, max_new_tokens, temperature, top_p, prompt_lookup)
    ids = torch.tensor([prompt_ids], device=target.device)
    mask = torch.ones_like(ids)
    counter = _ForwardCounter(target.model)
    try:
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        with torch.inference_mode(), stock_kernels():
            out = target.model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
        if target.device.type == "cuda":
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
    finally:
        counter.close()
    new = _truncate_at_stop(out[0, len(prompt_ids):].tolist(), set(target.stop_token_ids))
    return {"token_ids": new, "new_tokens": len(new), "seconds": secs, "forwards": counter.n,
            "depth_counts": None}


# ============================================================================ our engine
def run_eagle(target, head, cfg, prompt_ids: list[int]) -> dict:
    from ..decoding.drive import cycles
    from ..decoding.engine import EagleDecoder
    t0 = time.perf_counter()
    dec = EagleDecoder(target, head, cfg, prompt_ids)
    cyc = []
    split = [0.0, 0.0, 0.0]
    for rec in cycles(dec):
        split[0] += rec.draft_seconds
        split[1] += rec.verify_seconds
        split[2] += rec.other_seconds
        if rec.cycle > 0:
            d = max(n.depth for n in rec.nodes)
            if d > 0:
                cyc.append((rec.accept_length, d))
    secs = time.perf_counter() - t0
    drafts = cfg.draft != "vanilla"
    return {"token_ids": list(dec.new_ids), "new_tokens": len(dec.new_ids), "seconds": secs,
            "forwards": dec.target_forwards, "depth_counts": depth_counts(cyc) if drafts else None,
            "accept_lengths": [a for a, _ in cyc] if drafts else None, "time_split": split}


# ============================================================================ vLLM
def counters_depth_counts(c: dict) -> tuple[list[int], list[int]]:
    """vLLM's per-request counters as depth_counts: a chain reaches depth j when its first j drafts were
    accepted (every draft reaches depth 0), so reached = [drafts, accepted_0, accepted_1, ...][:k]."""
    acc = list(c["accepted_per_pos"])
    return [c["num_drafts"]] + acc[:-1], acc


def counters_accept_lengths(c: dict) -> list[int]:
    """The accepted length of every draft, as a multiset (vLLM counts per position, not per draft: the order
    is lost, the histogram is exact): exactly n accepted = accepted_{n-1} - accepted_n."""
    acc = list(c["accepted_per_pos"])
    at_least = [c["num_drafts"]] + acc + [0]
    return [n for n in range(len(acc) + 1) for _ in range(at_least[n] - at_least[n + 1])]


def run_vllm_method(worker, target, prompt_ids, max_new_tokens, temperature, top_p, seed) -> dict:
    """One generation by a vLLM worker (bench/vllm.py VllmWorker); seconds are vLLM's generate() alone."""
    ans = worker.generate(prompt_ids, max_new_tokens, temperature=temperature, top_p=top_p, seed=seed,
                          stop_token_ids=list(target.stop_token_ids))
    new = _truncate_at_stop(list(ans["new_ids"]), set(target.stop_token_ids))
    out = {"token_ids": new, "new_tokens": len(new), "seconds": ans["seconds"], "forwards": len(new),
           "depth_counts": None}
    c = ans.get("counters")
    if c is not None:
        # the prefill, then one target pass per verified draft (vLLM drafts on every step, the prefill's too)
        out.update(forwards=1 + c["num_drafts"], depth_counts=counters_depth_counts(c),
                   accept_lengths=counters_accept_lengths(c), vllm_counters=c)
    return out


def run_method(method: str, target, heads: dict, base_cfg, prompt_ids, max_new_tokens, temperature, top_p, seed,
               prompt_lookup: int, engines: dict | None = None) -> dict:
    """One generation of the prompt by the method; heads: {"shifted": head, "unshifted": head}; engines:
    {"vllm": worker, "vllm-eagle": worker, "vllm-eagle3": worker} for the vLLM methods."""
    if method in VLLM_METHODS:     # run_bench checked that every vLLM method has its worker
        return run_vllm_method(engines[method], target, prompt_ids, max_new_tokens, temperature, top_p, seed)
    if method in LLAMACPP_METHODS:
        from .llamacpp import run_llamacpp_method
        return run_llamacpp_method(engines[method], target, prompt_ids, max_new_tokens, temperature)
    if method == "hf-greedy":
        return run_hf(target, prompt_ids, max_new_tokens, temperature, top_p, seed)
    if method == "hf-prompt-lookup":
        return run_hf(target, prompt_ids, max_new_tokens, temperature, top_p, seed, prompt_lookup=prompt_lookup)
    cfg = method_config(method, base_cfg, max_new_tokens, temperature, top_p, seed)
    shift = method_head_shift(method)
    return run_eagle(target, heads.get(shift) if shift else None, cfg, prompt_ids)
