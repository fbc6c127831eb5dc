"""Stages 3 and 4 of a training run: the optimiser loop over the shards, the held-out metrics after every epoch,
and the checkpoint in --run-dir that lets the same command continue where it stopped."""
from __future__ import annotations

import dataclasses
import math
import os
import random
import time

import torch

from . import data as D
from ..model.head import EagleHead
from .batches import BatchDataset, plan_batches, single_batch
from .config import TrainConfig
from .evaluate import evaluate
from .objective import Frozen, head_loss
from .objective3 import eagle3_loss


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
