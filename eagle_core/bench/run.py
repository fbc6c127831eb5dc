"""Running the benchmark: EAGLE drafting against plain decoding and transformers' own decoding, on one target and
machine (run_bench; the command line is cli.py, `python -m eagle_core.bench`).

Methods (methods.py: hf-greedy, vanilla, hf-prompt-lookup, eagle-chain / static / dynamic, the EAGLE ones also
with the unshifted head) all run in one process, on the same target, prompts and machine; for each prompt every
method runs once, the order rotating from prompt to prompt so that none always runs first or last; one warm-up
run of every method before any timing. The figures of each method (summary.py, from metrics.py): tau, tokens/s,
speedup over hf-greedy with its bootstrap 95% interval, acceptance per depth, the accepted-length histogram, and
at T = 0 the mismatches against the reference that computes the same function, told apart from near-ties
(decoding/divergence.py): hf-greedy's tokens for transformers' and vLLM's methods and, for our own methods,
hf-greedy's where our kernels compute fp32 like it, else `vanilla`'s (plain decoding with the same kernels, e.g.
the bf16 linear layers the CPU plan picks with AMX); where those two numerical models part, the report gives the
fp32 reference's logit margin there. The report opens with what one target pass costs by tokens per pass
(pass_cost.py), with our kernels and with stock transformers'. Every timed run records the other work on the
machine beside it (machine_load.py).
"""
from __future__ import annotations

import datetime as _dt
import platform
import sys

from . import machine_load
from ..decoding.divergence import TIE_EPS, divergence, first_divergence, near_tie, tie_eps_for
from .errors import BenchError
from .machine_load import BUSY_CORES   # a timed run beside more other work than this (in cores) is "busy"
from .methods import (BASELINE, LLAMACPP_METHODS, OUTSIDE_METHODS, VLLM_METHODS, max_nodes, method_config, method_head_shift,
                      parse_methods, rotated, run_method)
from .metrics import TAU_NOTE, result_tokens_per_s
from .summary import fastest, summarize_all


def device_string(target, threads: int | None = None) -> str:
    """The machine in one line: the GPU's name, or the CPU model with threads and linear kernels; torch's version."""
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



# ============================================================================ running
def run_bench(target, prompts: list[dict], methods: list[str], heads: dict | None = None, *,
              base_cfg=None, max_new_tokens: int = 128, temperature: float = 0.0, top_p: float = 1.0,
              seed: int = 0, prompt_lookup: int = 10, warmup: bool = True, progress: bool = True,
              tie_eps: float | None = None, device: str | None = None, config: dict | None = None,
              load_before: float | None = None, warn=None, engines: dict | None = None,
              pass_costs: bool = True) -> dict:
    """Run every method on every prompt; returns the report ({"device", "config", "methods", "per_prompt"}).

    target: a loaded Target; heads: {"shifted": EagleHead, "unshifted": EagleHead} (only those the methods
    need); prompts: [{"id", "prompt", "category"}]; base_cfg: a DecodeConfig carrying the tree settings.
    Every timed run also records `other_cores`, the other work that ran beside it (machine_load.py), and the
    report's "load" says whether the run was quiet; load_before: the check the caller made before starting;
    warn(text) is called as soon as a run turns out busy (once); engines: {"vllm": worker, "vllm-eagle": worker}
    (bench/vllm.py) for the vLLM methods, whose processes' CPU time counts as the method's own while it runs.
    tie_eps: the near-tie margin for our methods (default: tie_eps_for the target's numerics; transformers' and
    vLLM's methods against hf-greedy use TIE_EPS); pass_costs: time one target pass by tokens per pass first.
    """
    heads = heads or {}
    engines = engines or {}
    methods = parse_methods(",".join(methods))
    base_cfg = _checked_config(target, methods, heads, base_cfg, max_new_tokens, temperature, top_p, seed, engines)
    rendered, skipped = _render_prompts(target, prompts, max_new_tokens, max_nodes(methods, base_cfg) + 2)

    def generate(method, prompt_ids, n=max_new_tokens):
        return run_method(method, target, heads, base_cfg, prompt_ids, n, temperature, top_p, seed, prompt_lookup,
                          engines)

    def own_pids(method):
        return engines[method].own_pids() if method in engines else ()

    numerics = getattr(target, "numerics", str(target.dtype).rpartition(".")[2])
    # near-tie margins: against hf-greedy fp32's, against vanilla our numerical model's (unless one is given)
    eps_pair = (TIE_EPS, tie_eps_for(numerics)) if tie_eps is None else (tie_eps, tie_eps)
    costs = split = None
    if pass_costs:
        from .pass_cost import pass_costs as measure_pass_costs
        from .pass_split import pass_split, split_rows
        costs = measure_pass_costs(target)
        split = pass_split(target, split_rows(methods, base_cfg))    # products / attention / the rest / Python
    if warmup:   # every method once, untimed: allocator, kernels, caches
        for m in methods:
            generate(m, rendered[0][1], min(max_new_tokens, 16))
    per_prompt = _timed_runs(generate, rendered, methods, progress, warn, own_pids)
    greedy = temperature == 0
    # T = 0: compare every method's tokens with those of the reference computing the same function
    refs = mismatch_references(per_prompt, numerics) if greedy else {}
    if refs:
        _mark_divergences(target, per_prompt, refs, rendered, eps_pair)
    numerics_report = (_numerics_report(target, per_prompt, rendered, numerics)
                       if greedy and not same_function_as_stock(numerics) else None)

    summary = summarize_all(per_prompt, greedy, BASELINE)
    cfg = dict(config or {})
    cfg.setdefault("date", utc_now())
    cfg.update(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed,
               methods=methods, baseline=BASELINE, mismatch_reference=_reference_words(refs) if refs else None,
               mismatch_references=refs or None, numerics=numerics,
               tree={"static_preset": base_cfg.tree, "depth": base_cfg.depth, "top_k": base_cfg.top_k,
                     "total_tokens": base_cfg.total_tokens},
               prompt_lookup_num_tokens=prompt_lookup, warmup=warmup, tie_eps=eps_pair[1],
               tie_eps_fp32_reference=eps_pair[0],
               n_prompts=len(rendered), skipped_prompts=skipped, target=target.name, dtype=str(target.dtype),
               tau_definition=TAU_NOTE)
    cfg.setdefault("heads", {k: getattr(h, "path", None) for k, h in heads.items() if h is not None})
    runs = [r.get("other_cores") for rs in per_prompt.values() for r in rs]
    load = machine_load.summarize(load_before, runs)
    return {"device": device or device_string(target), "config": cfg, "load": load, "methods": summary,
            "fastest": fastest(summary), "pass_costs": costs, "pass_split": split, "numerics": numerics_report,
            "per_prompt": _lean(per_prompt)}


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _checked_config(target, methods, heads, base_cfg, max_new_tokens, temperature, top_p, seed, engines):
    """The base DecodeConfig (the device's default when None), once the settings, the heads the methods need and
    every method's own config have been checked (BenchError / ValueError)."""
    from ..decoding.engine import default_config
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
    if base_cfg is None:
        base_cfg = default_config(target.device.type, getattr(target, "numerics", None))
    for m in methods:
        if m in VLLM_METHODS and m not in engines:
            raise BenchError(f"method {m} needs a vLLM worker (start_engines in bench/vllm.py)")
        if m in LLAMACPP_METHODS and m not in engines:
            raise BenchError(f"method {m} needs llama.cpp's files (start_llamacpp in bench/llamacpp.py)")
        if m in LLAMACPP_METHODS and temperature != 0:
            raise BenchError(f"method {m} runs greedy only (T = 0)")
        if m not in OUTSIDE_METHODS:
            method_config(m, base_cfg, max_new_tokens, temperature, top_p, seed).check()
    return base_cfg


def _render_prompts(target, prompts, max_new_tokens: int, margin: int):
    """([(prompt, token ids)], [skipped ids]): a prompt is skipped when it would not fit the context with
    max_new_tokens and the largest tree (margin)."""
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
    return rendered, skipped


def _timed_runs(generate, rendered, methods, progress: bool, warn, own_pids=lambda m: ()) -> dict[str, list[dict]]:
    """{method: [per-prompt result]}: every method on every prompt, in rotated order, each run watched for
    other work on the machine (`other_cores`; own_pids(method): the processes a method runs in besides this
    one); warn(text) once, at the first busy run."""
    from tqdm import tqdm
    per_prompt = {m: [] for m in methods}
    warned = False
    bar = tqdm(total=len(rendered) * len(methods), desc="bench", unit="run", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)
    try:
        for i, (p, ids) in enumerate(rendered):
            for m in rotated(methods, i):
                bar.set_postfix_str(m, refresh=False)
                r, other = machine_load.beside(lambda: generate(m, ids), own_pids(m))
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
    return per_prompt


def same_function_as_stock(numerics: str) -> bool:
    """Whether our kernels compute what stock transformers computes in the target's dtype (fp32 plans, a GPU in
    bf16), up to rounding; not so for the CPU plan's bf16-linear model (bf16 weights under fp32 activations)."""
    return numerics != "bf16-linear"


def mismatch_references(per_prompt: dict, numerics: str) -> dict:
    """{method: the method whose tokens it must equal at T = 0}. hf-greedy (stock fp32) is the reference of
    transformers' and vLLM's methods. Ours (vanilla, eagle-*) follow hf-greedy too when our kernels compute fp32;
    under another numerical model (bf16-linear) eagle-* follow vanilla, plain decoding with the same kernels,
    and vanilla itself is compared with hf-greedy by _numerics_report instead (hf-greedy when vanilla did not
    run: then a part at a wider margin than fp32's near-ties counts as a mismatch)."""
    same = same_function_as_stock(numerics)
    out = {}
    for m in per_prompt:
        if m == BASELINE:
            continue
        if m in LLAMACPP_METHODS:
            # llama.cpp computes another function (4-bit weights, 8-bit activations): its speculative decoding
            # must give its own plain decoding's tokens; its plain decoding is compared with nothing
            if m != "llamacpp" and "llamacpp" in per_prompt:
                out[m] = "llamacpp"
            continue
        if m in OUTSIDE_METHODS:
            candidates = [BASELINE] + (["vanilla"] if same else [])
        elif m == "vanilla":
            candidates = [BASELINE] if same else []
        else:
            candidates = [BASELINE, "vanilla"] if same else ["vanilla", BASELINE]
        ref = next((r for r in candidates if r in per_prompt), None)
        if ref is not None:
            out[m] = ref
    return out


def _reference_words(refs: dict) -> str:
    names = sorted(set(refs.values()))
    if len(names) == 1:
        return names[0]
    return " / ".join(f"{r} (for {', '.join(m for m in refs if refs[m] == r)})" for r in names)


def _mark_divergences(target, per_prompt: dict, refs: dict, rendered, eps_pair: tuple[float, float]):
    """Set `diverged_at` (first token that differs from the method's reference, or None) and `tie` (the top-2
    logits there within the tolerance, measured with the kernels the method's reference ran) on every result."""
    for m, rs in per_prompt.items():
        ref_name = refs.get(m)
        if ref_name is None:
            for r in rs:
                r["diverged_at"], r["tie"] = None, False
            continue
        stock = ref_name == BASELINE
        eps = eps_pair[0] if stock else eps_pair[1]
        for r, ref in zip(rs, per_prompt[ref_name]):
            d = first_divergence(r["token_ids"], ref["token_ids"])
            r["diverged_at"] = d
            r["tie"] = False
            if m in LLAMACPP_METHODS:     # llama.cpp's near-tie, by the fp32 proxy (bench/llamacpp.py)
                from .llamacpp import cut_at_last_token, llamacpp_part
                if cut_at_last_token(target, d, r["token_ids"], ref["token_ids"]):
                    r["diverged_at"] = None
                    continue
                part = llamacpp_part(target, rendered[r["prompt"]][1], ref["token_ids"], r["token_ids"]) \
                    if d is not None and d < min(len(r["token_ids"]), len(ref["token_ids"])) else None
                r["tie"] = bool(part and part["tie"])
                continue
            if d is not None and d < min(len(r["token_ids"]), len(ref["token_ids"])):
                r["tie"] = near_tie(target, rendered[r["prompt"]][1], ref["token_ids"][:d], eps, stock=stock)


def _numerics_report(target, per_prompt: dict, rendered, numerics: str) -> dict | None:
    """Where our numerical model (e.g. bf16-linear) and stock fp32 part: for every prompt on which vanilla's
    tokens differ from hf-greedy's, the fp32 reference's logit margin between the two tokens there."""
    if "vanilla" not in per_prompt or BASELINE not in per_prompt:
        return None
    parts = []
    for r, ref in zip(per_prompt["vanilla"], per_prompt[BASELINE]):
        d = divergence(target, rendered[r["prompt"]][1], ref["token_ids"], r["token_ids"], stock=True)
        if d is not None:
            parts.append({"prompt": r.get("id", r["prompt"]), "index": d["index"], "fp32_margin": round(d["margin"], 4),
                          "fp32_token": d["plain_text"], "ours_token": d["eagle_text"]})
    margins = sorted(p["fp32_margin"] for p in parts)
    return {"numerics": numerics, "reference": f"{BASELINE} (stock fp32)", "prompts": len(per_prompt["vanilla"]),
            "parted": len(parts), "median_margin": margins[len(margins) // 2] if margins else None,
            "max_margin": margins[-1] if margins else None, "divergences": parts}


def _lean(per_prompt: dict) -> dict:
    """The per-prompt results as the report keeps them (no token ids, no depth counts)."""
    keep = ("id", "category", "new_tokens", "seconds", "forwards", "order", "other_cores")
    counters = ("drafted", "accepted", "cycles")      # a speculative llama.cpp method's own, per prompt
    return {m: [{k: r[k] for k in keep}
                | {"tokens_per_s": result_tokens_per_s(r), "diverged_at": r.get("diverged_at"), "tie": r.get("tie")}
                | ({"llamacpp": {k: r["llamacpp"][k] for k in counters}}
                   if (r.get("llamacpp") or {}).get("drafted") is not None else {})
                for r in rs] for m, rs in per_prompt.items()}
