"""Command line: EAGLE decoding of one prompt, streamed, or as one JSON object.

    python -m eagle_core.generate --prompt "How can I learn Python?" [--draft static] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

# quiet third-party chatter before the heavy imports
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF loader draws a progress bar per tensor


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m eagle_core.generate",
                                 description="EAGLE speculative decoding with a feature-level draft head.")
    ap.add_argument("--prompt", required=True, help="the user turn (wrapped in the target's chat template)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (token-identical to plain decoding)")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k-sampling", type=int, default=0, help="top-k warper for T > 0 (0 = off)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draft", choices=["chain", "static", "dynamic", "vanilla"], default=None,
                    help="draft shape (default: the device's default)")
    ap.add_argument("--tree", default=None, help="static tree preset (see eagle_core.decoding.presets)")
    ap.add_argument("--depth", type=int, default=None)
    ap.add_argument("--top-k", type=int, default=None, help="dynamic tree: nodes expanded per level")
    ap.add_argument("--total-tokens", type=int, default=None, help="dynamic tree: drafted tokens kept")
    ap.add_argument("--head", default="shifted", help="shifted | unshifted | random | random-unshifted | PATH | hub id")
    ap.add_argument("--target", default=None, help="local folder or hub id (default: the embedded SmolLM2-135M)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--no-chat-template", action="store_true")
    ap.add_argument("--num-samples", type=int, default=1, help="T > 0: N generations, seeds S..S+N-1")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap


def decode_config(args, device_type: str, numerics: str | None = None):
    from .decoding.engine import default_config
    cfg = default_config(device_type, numerics)
    for name in ("draft", "tree", "depth", "top_k", "total_tokens"):
        v = getattr(args, name)
        if v is not None:
            setattr(cfg, name, v)
    cfg.temperature, cfg.top_p, cfg.top_k_sampling = args.temperature, args.top_p, args.top_k_sampling
    cfg.max_new_tokens, cfg.seed = args.max_new_tokens, args.seed
    return cfg


def fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if not args.prompt.strip():
        return fail("the prompt is empty")
    if args.temperature < 0:
        return fail(f"temperature must be >= 0 (got {args.temperature})")
    if args.max_new_tokens < 1:
        return fail(f"--max-new-tokens must be >= 1 (got {args.max_new_tokens})")
    if args.num_samples < 1:
        return fail("--num-samples must be >= 1")
    if args.num_samples > 1 and args.temperature == 0:
        return fail("--num-samples > 1 needs a temperature > 0 (greedy decoding has one outcome)")

    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()          # no "Loading weights" bars on the user's terminal
    from .decoding.drive import cycles, finish
    from .decoding.engine import EagleDecoder
    from .model.head import HeadLoadError, resolve_head
    from .model.target import TargetLoadError, load_target
    try:
        target = load_target(args.target, device=args.device, dtype=args.dtype)
        cfg = decode_config(args, target.device.type, target.numerics)
        cfg.check()
        head = None if cfg.draft == "vanilla" else resolve_head(args.head, target)
        prompt_ids = target.render_prompt(args.prompt, chat_template=not args.no_chat_template)
        EagleDecoder(target, head, cfg, prompt_ids)   # validates prompt length and config up front
    except (TargetLoadError, HeadLoadError, ValueError) as exc:
        return fail(str(exc))

    if args.num_samples > 1:
        from dataclasses import replace
        samples = []
        for s in range(args.num_samples):
            dec = finish(EagleDecoder(target, head, replace(cfg, seed=args.seed + s, record_topk=0), prompt_ids))
            samples.append(dec.new_ids)
        print(json.dumps({"samples": samples}))
        return 0

    if args.json:
        dec = finish(EagleDecoder(target, head, cfg, prompt_ids))
        print(json.dumps(dec.result(args.prompt).to_dict()))
        return 0

    dec = EagleDecoder(target, head, cfg, prompt_ids)
    printed = ""
    t0 = time.perf_counter()
    for _ in cycles(dec):
        text = target.decode(dec.new_ids)
        # print only what is new; decode the whole text so multi-token characters come out whole
        if text.startswith(printed):
            sys.stdout.write(text[len(printed):])
            sys.stdout.flush()
            printed = text
    wall = time.perf_counter() - t0
    r = dec.result(args.prompt)
    print(f"\n--- {r.new_tokens} tokens, {r.target_forwards} target forwards, tau {r.tau:.2f}, "
          f"{r.new_tokens / max(wall, 1e-9):.1f} tokens/s ({cfg.draft}, head {head.path if head else 'none'}, "
          f"T={cfg.temperature}, {target.numerics} numerics, stop: {r.finished})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
