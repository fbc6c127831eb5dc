"""Greedy (or sampled) decoding of given prompt token ids in vLLM, plain or with an exported EAGLE head; JSON out.

    .venv-vllm/bin/python scripts/vllm_run.py --target DIR/target [--eagle DIR/eagle --k 2] \
        --prompts PROMPTS.json --max-tokens 64 --out RESULT.json

Runs in vLLM's own environment (scripts/setup_vllm.sh), so it imports nothing from eagle_core. PROMPTS.json is a
list of prompt token-id lists (the project renders the chat template, so both engines see the same ids). The
result: per prompt the new token ids, the text and the seconds; the run's tokens/s; with --eagle, vLLM's own
speculative-decoding counters (drafts, draft tokens, accepted tokens per position). Requests go one at a time
(--batch 1, as the project's benchmark decodes) or --batch N at once.
"""
from __future__ import annotations

import argparse
import json
import os
import time


def counters(llm) -> dict:
    """vLLM's spec-decode metrics (v1 engine), summed over the run."""
    out = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "accepted_per_pos": []}
    for m in llm.get_metrics():
        name = m.name.replace("vllm:spec_decode_", "")
        if name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
            out[name] += int(m.value)
        elif name == "num_accepted_tokens_per_pos":
            vals = [int(v) for v in m.values]
            acc = out["accepted_per_pos"]
            out["accepted_per_pos"] = [a + b for a, b in zip(vals, acc + [0] * (len(vals) - len(acc)))]
    return out


def counter_delta(before: dict, after: dict) -> dict:
    """The counters of what ran between two readings (vLLM's are cumulative over the engine's life)."""
    return {k: (after[k] - before[k]) if k != "accepted_per_pos" else
            [a - b for a, b in zip(after[k], before[k] + [0] * len(after[k]))] for k in after}


def serve(llm, eagle: bool, out):
    """The benchmark's worker: requests one at a time, each timed around generate() alone (no pipe, no JSON)."""
    import sys
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    out.write(json.dumps({"ready": True, "version": __import__("vllm").__version__}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        sp = SamplingParams(temperature=req.get("temperature", 0.0), top_p=req.get("top_p", 1.0),
                            max_tokens=req["max_tokens"], seed=req.get("seed"),
                            stop_token_ids=req.get("stop_token_ids") or None)
        before = counters(llm) if eagle else None
        t0 = time.perf_counter()
        o = llm.generate([TokensPrompt(prompt_token_ids=req["prompt_ids"])], sp, use_tqdm=False)[0].outputs[0]
        dt = time.perf_counter() - t0
        ans = {"new_ids": list(o.token_ids), "seconds": dt, "finish_reason": o.finish_reason}
        if eagle:
            after = counters(llm)
            ans["counters"] = counter_delta(before, after)
        out.write(json.dumps(ans) + "\n")
        out.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--eagle", default=None)
    ap.add_argument("--k", type=int, default=2, help="num_speculative_tokens (a chain of k drafted tokens)")
    ap.add_argument("--prompts", default=None)
    ap.add_argument("--serve", action="store_true",
                    help="a worker: one JSON request a line on stdin ({prompt_ids, max_tokens, temperature, top_p, "
                         "seed}), one JSON answer a line on stdout; 'ready' once loaded")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--batch", type=int, default=1, help="requests decoded at once")
    ap.add_argument("--warmup", type=int, default=1, help="prompts decoded first and not timed")
    ap.add_argument("--eager", action="store_true",
                    help="no torch.compile (starts in seconds instead of ~3 minutes on 2 cores; slower decoding)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    answers = None
    if args.serve:   # the answers get the real stdout; everything else printed (vLLM, its processes) goes to stderr
        answers = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")      # GiB of KV cache: a 24 GiB machine
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    spec = ({"method": "eagle", "model": args.eagle, "num_speculative_tokens": args.k} if args.eagle else None)
    llm = LLM(model=args.target, dtype="float32", speculative_config=spec, disable_log_stats=False,
              max_model_len=2048, seed=0, enforce_eager=args.eager)
    if args.serve:
        return serve(llm, bool(args.eagle), answers)
    if not (args.prompts and args.out):
        ap.error("--prompts and --out are needed (or --serve)")
    with open(args.prompts) as f:
        prompts = json.load(f)
    sp = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, ignore_eos=False)
    if args.warmup:
        llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts[:args.warmup]], sp, use_tqdm=False)
    before = counters(llm) if args.eagle else None
    results, t_all = [], time.perf_counter()
    for i in range(0, len(prompts), args.batch):
        chunk = prompts[i:i + args.batch]
        t0 = time.perf_counter()
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in chunk], sp, use_tqdm=False)
        dt = time.perf_counter() - t0
        for o in outs:
            c = o.outputs[0]
            results.append({"new_ids": list(c.token_ids), "text": c.text, "finish_reason": c.finish_reason,
                            "seconds": dt / len(chunk) if args.batch == 1 else dt})
    wall = time.perf_counter() - t_all
    tokens = sum(len(r["new_ids"]) for r in results)
    rep = {"engine": "vllm", "version": __import__("vllm").__version__, "eagle": args.eagle, "k": args.k,
           "batch": args.batch, "max_tokens": args.max_tokens, "temperature": args.temperature,
           "wall_seconds": wall, "tokens": tokens, "tokens_per_s": tokens / wall, "results": results}
    if args.eagle:
        after = counters(llm)
        rep["counters"] = counter_delta(before, after)
    with open(args.out, "w") as f:
        json.dump(rep, f, indent=1)
    print(json.dumps({k: v for k, v in rep.items() if k != "results"}))


if __name__ == "__main__":
    main()
