"""A vLLM engine (plain, or with an exported EAGLE head) that answers decoding requests: JSON lines in, JSON lines out.

    .venv-vllm/bin/python scripts/vllm_run.py --target DIR/target [--eagle DIR/eagle --k 2] [--eager]
    .venv-vllm/bin/python scripts/vllm_run.py --target DIR/target --eagle DIR/eagle3 --method eagle3 [--k 2]

It runs in vLLM's own environment (scripts/setup_vllm.sh), so it imports nothing from eagle_core; the project
talks to it through eagle_core/bench/vllm.py (VllmWorker). A request is {"prompt_ids": [...], "max_tokens": N,
"temperature", "top_p", "seed", "stop_token_ids", "ignore_eos"}, or {"batch": [[...], ...], ...} for prompts
decoded at once; the project renders the chat template, so both engines see the same ids. The answer: the new
token ids and the finish reason (per prompt for a batch), the seconds of vLLM's generate() alone, and with
--eagle vLLM's own speculative-decoding counters of that request (drafts, draft tokens, accepted per position).
The first line out is {"ready": true, "version": ...} once the engine has loaded; closing stdin ends it.
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
                            stop_token_ids=req.get("stop_token_ids") or None,
                            ignore_eos=bool(req.get("ignore_eos", False)))
        batch = req.get("batch")     # several prompts decoded at once (the lab's throughput sweep)
        prompts = batch if batch is not None else [req["prompt_ids"]]
        before = counters(llm) if eagle else None
        t0 = time.perf_counter()
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
        dt = time.perf_counter() - t0
        done = [{"new_ids": list(o.outputs[0].token_ids), "finish_reason": o.outputs[0].finish_reason} for o in outs]
        ans = {"results": done, "seconds": dt} if batch is not None else dict(done[0], seconds=dt)
        if eagle:
            after = counters(llm)
            ans["counters"] = counter_delta(before, after)
        out.write(json.dumps(ans) + "\n")
        out.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--eagle", default=None, help="the exported head's folder (eagle_core/export/vllm.py)")
    ap.add_argument("--method", default="eagle", choices=("eagle", "eagle3"),
                    help="vLLM's speculative method for --eagle: eagle (EAGLE-1 head) or eagle3 (EAGLE-3 head)")
    ap.add_argument("--k", type=int, default=2, help="num_speculative_tokens (a chain of k drafted tokens)")
    ap.add_argument("--eager", action="store_true",
                    help="no torch.compile (starts in about a minute instead of ~3 on 2 cores)")
    ap.add_argument("--max-model-len", type=int, default=2048)
    args = ap.parse_args()
    # the answers get the real stdout; everything else printed (vLLM, its processes) goes to stderr
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")      # GiB of KV cache: a 24 GiB machine
    from vllm import LLM
    spec = ({"method": args.method, "model": args.eagle, "num_speculative_tokens": args.k} if args.eagle else None)
    llm = LLM(model=args.target, dtype="float32", speculative_config=spec, disable_log_stats=False,
              max_model_len=args.max_model_len, seed=0, enforce_eager=args.eager)
    serve(llm, bool(args.eagle), answers)


if __name__ == "__main__":
    main()
