"""Fit EAGLE-2's dynamic tree to this machine: the (depth, top_k, total_tokens) that decodes fastest.

A dynamic tree has no shape to fit from rank paths (its nodes are chosen per cycle by the draft's own scores),
so each candidate setting is simply run: real decoding of held-out prompts, its measured tau and its measured
model time per cycle (drafting + the target pass + the rest), tokens/s = tau / seconds per cycle. Every setting
runs `--rounds` times in turn and keeps its fastest round, so a noisy moment hits one round of one setting.

    python -m eagle_core.bench.dynamic_fit --prompts sharegpt-heldout --limit 5 \\
        --out assets/trees/dynamic/smollm2-cpu.json

The CPU default (engine.default_config) takes the winner's settings for `draft="dynamic"`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ..decoding.presets import DYNAMIC_DIR
from .metrics import cycle_seconds

GRID = ((2, 2, 3), (3, 2, 4), (3, 4, 4), (3, 4, 6), (4, 2, 6), (4, 4, 8), (4, 4, 12), (5, 4, 12), (5, 8, 16), (5, 8, 24), (6, 8, 24), (6, 10, 60))


def measure(target, head, prompts, depth: int, top_k: int, total: int, max_new_tokens: int, base) -> dict:
    """tau, mean model seconds per cycle and the speed they give, for one setting (lean records)."""
    from dataclasses import replace

    from ..decoding.drive import cycles
    from ..decoding.engine import EagleDecoder
    cfg = replace(base, draft="dynamic", depth=depth, top_k=top_k, total_tokens=total,
                  max_new_tokens=max_new_tokens, record_topk=0)
    new = forwards = 0
    secs = []
    for item in prompts:
        dec = EagleDecoder(target, head, cfg, target.render_prompt(item["prompt"]))
        for rec in cycles(dec):
            if rec.cycle > 0:
                secs.append(cycle_seconds(rec))
        new += len(dec.new_ids) - 1            # the prefill's token is not a cycle's
        forwards += dec.target_forwards - 1
    tau = new / max(1, forwards)
    sec = sum(secs) / max(1, len(secs))
    return {"depth": depth, "top_k": top_k, "total_tokens": total, "tau": round(tau, 3),
            "cycle_ms": round(1e3 * sec, 2), "tokens_per_s_model": round(tau / sec, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="sharegpt-heldout")
    ap.add_argument("--limit", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--name", default="smollm2-cpu")
    ap.add_argument("--out", default=None, help="default assets/trees/dynamic/NAME.json")
    args = ap.parse_args(argv)
    import torch
    from .errors import BenchError
    from .prompts import load_prompts
    from ..quiet import quiet_libraries
    quiet_libraries()
    from ..decoding.engine import default_config
    from ..model.head import HeadLoadError, resolve_head
    from ..model.target import TargetLoadError, load_target
    try:
        prompts = load_prompts(args.prompts, args.limit)
        target = load_target()
        head = resolve_head("shifted", target)
    except (BenchError, TargetLoadError, HeadLoadError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    base = default_config(target.device.type, target.numerics)   # the plan's own draft (q8 beside the blocks)
    t0 = time.time()
    measure(target, head, prompts[:1], 4, 4, 8, 16, base)     # warm-up: caches, kernels
    rows = {}
    for rnd in range(max(1, args.rounds)):
        for depth, top_k, total in GRID:
            r = measure(target, head, prompts, depth, top_k, total, args.max_new_tokens, base)
            print(f"round {rnd + 1}: depth={depth} top_k={top_k:2d} total={total:2d} tau={r['tau']:.3f} "
                  f"cycle={r['cycle_ms']:6.1f} ms -> {r['tokens_per_s_model']:6.1f} tok/s", flush=True)
            key = (depth, top_k, total)
            if key not in rows or r["cycle_ms"] < rows[key]["cycle_ms"]:
                rows[key] = r
    best = max(rows.values(), key=lambda r: r["tokens_per_s_model"])
    out = args.out or os.path.join(DYNAMIC_DIR, f"{args.name}.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    report = dict(best, name=args.name, fitted_on={"prompts": args.prompts, "limit": args.limit,
                                                   "max_new_tokens": args.max_new_tokens, "rounds": args.rounds},
                  numerics=target.numerics, draft={"draft_vocab": base.draft_vocab, "draft_dtype": base.draft_dtype},
                  threads=torch.get_num_threads(), date=time.strftime("%Y-%m-%d", time.gmtime()),
                  command="python -m eagle_core.bench.dynamic_fit " + " ".join(sys.argv[1:] if argv is None else argv),
                  wall_s=round(time.time() - t0, 1), candidates=list(rows.values()))
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"best: depth {best['depth']}, top_k {best['top_k']}, total_tokens {best['total_tokens']}: tau "
          f"{best['tau']}, {best['cycle_ms']} ms/cycle -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
