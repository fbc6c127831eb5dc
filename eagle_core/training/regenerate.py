"""Self-distillation data: the target answers ShareGPT prompts itself, and its features are kept on the way.

The EAGLE paper trains on a fixed dataset and reports +0.13 tau from regenerating the answers with the target.
For a 135M target the gap is larger: ShareGPT answers were written by much stronger models, while at inference
the head drafts the target's *own* continuations. Generation is batched (left padding) and the features are
captured by a hook on the final norm during generation, so no second pass is needed.

    python -m eagle_core.training.regenerate --prompts 6000 --max-new-tokens 256 --out data/selfgen --minutes 60
Writes shards in data.py's format (input ids, fp16 features, loss mask = the generated answer, <|im_end|>
included; ids 'gen:<conversation id>') to OUT/train, resumable per batch, and links OUT/heldout to the ShareGPT
held-out features. `python -m eagle_core.training ... --selfgen-dir OUT/train [--selfgen-repeat K]` adds them to
the ShareGPT training set.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import time

import torch

from . import data as D
from ..model.attention import use_tree_attention
from ..model.target import load_target


def training_prompts(n: int, seed: int = 1) -> list[tuple[str, str]]:
    """(conversation id, first user turn) of n training conversations (the held-out split is excluded)."""
    train, _ = D.split_conversations(D.load_conversations())
    rng = random.Random(seed)
    order = list(range(len(train)))
    rng.shuffle(order)
    out = []
    for i in order:
        cid, messages = train[i]
        users = [m["content"] for m in messages if m["role"] == "user"]
        if users and 8 <= len(users[0]) <= 1500:
            out.append((cid, users[0]))
        if len(out) == n:
            break
    return out


@torch.inference_mode()
def generate_batch(target, prompts: list[list[int]], max_new_tokens: int, temperature: float, bf16: bool,
                   aux_layers=()):
    """Batched generation; returns [D.Sequence-like tuples (ids, features, mask)] with a feature per token
    (with aux_layers, an EAGLE-3 head's: [final feature ; the residual stream entering each of those layers])."""
    model, dev = target.model, target.device
    P = max(len(p) for p in prompts)
    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(prompts), P), pad, dtype=torch.long)
    attn = torch.zeros((len(prompts), P), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, P - len(p):] = torch.tensor(p)
        attn[r, P - len(p):] = 1
    captured = []
    hooks = [model.model.norm.register_forward_hook(lambda m, i, o: captured.append([o.detach().float().cpu()]))]
    aux_step = {}
    for layer in sorted(set(aux_layers)):   # the input of layer i (transformers' hidden_states[i])
        hooks.append(model.model.layers[layer].register_forward_pre_hook(
            lambda m, a, i=layer: aux_step.__setitem__(i, a[0].detach().float().cpu())))
    if aux_layers:   # the pre-hooks fire before the final norm of the same pass: attach them to its entry
        def attach(m, i, o):
            captured[-1].extend(aux_step[j] for j in aux_layers)
            aux_step.clear()
        hooks.append(model.model.norm.register_forward_hook(attach))
    ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if (bf16 and dev.type == "cpu" and target.dtype == torch.float32)
           else contextlib.nullcontext())
    try:
        with ctx:
            out = model.generate(ids.to(dev), attention_mask=attn.to(dev), max_new_tokens=max_new_tokens,
                                 do_sample=temperature > 0, temperature=temperature if temperature > 0 else None,
                                 top_p=None, top_k=None, eos_token_id=target.stop_token_ids, pad_token_id=pad)
    finally:
        for h in hooks:
            h.remove()
    gen = out[:, P:].cpu()
    # [B, P + steps, (1 + k) H]: prompt features, then one per fed token
    feats = torch.cat([torch.cat(step, dim=-1) for step in captured], dim=1)
    steps = feats.shape[1] - P
    result = []
    for r, p in enumerate(prompts):
        g = gen[r].tolist()
        n = len(g)
        for i, t in enumerate(g):
            if t in target.stop_token_ids:
                n = i + 1
                break
        n = min(n, steps)                    # tokens that were fed to the model have a feature
        if n < 8:
            result.append(None)
            continue
        seq_ids = torch.tensor(p + g[:n])
        f = torch.cat([feats[r, P - len(p):P], feats[r, P:P + n]]).to(torch.float16)
        mask = torch.cat([torch.zeros(len(p), dtype=torch.bool), torch.ones(n, dtype=torch.bool)])
        result.append((seq_ids, f, mask))
    return result            # one entry per prompt (None: answer too short to train on)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=800)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy answers (what T = 0 decoding sees)")
    ap.add_argument("--sampled-fraction", type=float, default=0.25, help="this share answered at T = 0.8")
    ap.add_argument("--out", default="data/selfgen")
    ap.add_argument("--heldout-from", default="data/feats-512/heldout")
    ap.add_argument("--minutes", type=float, default=None, help="stop (at a batch boundary) after this long")
    ap.add_argument("--aux-layers", default="", help="also keep the inputs of these target layers (an EAGLE-3 "
                    "head's, e.g. 2,15,27): features are then [final ; those], as data.extract_features writes")
    ap.add_argument("--no-bf16", action="store_true", help="fp32 weights (default on CPU: a bf16 copy of the "
                    "target generates; bf16 kernels are ~2x faster there and the features differ by <1%%)")
    args = ap.parse_args(argv)
    target = load_target(dtype=None if args.no_bf16 else "bf16")
    # 1-token steps of the whole batch through the small-query kernel: SDPA's flash kernel made a 32-row step
    # at 400 tokens of context cost 280 ms on the 2-core dev machine, this path 84 ms
    use_tree_attention(target.model, batched_decode=True)
    out_dir = os.path.join(args.out, "train")
    os.makedirs(out_dir, exist_ok=True)
    held = os.path.join(args.out, "heldout")
    if not os.path.exists(held) and os.path.exists(args.heldout_from):
        os.symlink(os.path.abspath(args.heldout_from), held)
    aux = tuple(int(x) for x in args.aux_layers.split(",") if x.strip())
    items = training_prompts(args.prompts)
    rendered = [(cid, target.render_prompt(q)) for cid, q in items]
    rendered = [(cid, ids) for cid, ids in rendered if len(ids) <= 384]
    rendered.sort(key=lambda x: len(x[1]))   # similar lengths per batch: little padding
    batches = [rendered[i:i + args.batch] for i in range(0, len(rendered), args.batch)]
    random.Random(0).shuffle(batches)
    t0, done_tok = time.time(), 0
    for b, batch in enumerate(batches):
        path = os.path.join(out_dir, f"shard-gen{b:04d}.pt")
        if os.path.exists(path):
            continue
        if args.minutes and time.time() - t0 > 60 * args.minutes:
            print(f"time budget reached after {b} batches", flush=True)
            break
        temp = 0.8 if random.Random(b).random() < args.sampled_fraction else args.temperature
        out = generate_batch(target, [ids for _, ids in batch], args.max_new_tokens, temp, not args.no_bf16, aux)
        seqs = [s for s in out if s is not None]
        D._save_shard(path, [D.Sequence(f"gen:{batch[i][0]}", *s) for i, s in enumerate(out) if s is not None])
        done_tok += sum(int(m.sum()) for _, _, m in seqs)
        print(f"[{time.strftime('%H:%M:%S')}] batch {b + 1}/{len(batches)} T={temp} "
              f"{sum(int(m.sum()) for _, _, m in seqs)} answer tokens; {done_tok / (time.time() - t0):.0f} tok/s",
              flush=True)
    D._write_meta(out_dir, 0, target, done_tok, time.time() - t0, not args.no_bf16, aux)
    print(json.dumps(json.load(open(os.path.join(out_dir, "meta.json")))))


if __name__ == "__main__":
    main()
