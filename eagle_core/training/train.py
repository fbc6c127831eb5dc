"""Train an EAGLE draft head on ShareGPT: `python -m eagle_core.training --shift shifted|unshifted ...`

`--inputs feature|token` trains the Paper lab's ablation heads (head.py): the same loss on the same outputs,
only what the head sees differs.

Stages (each resumable; re-running the same command continues where it stopped); this module runs them in order
(train) with the settings of config.py:
  1. features : one no-grad target pass per sequence -> shards in --data-dir (shared by both shifts; data.py,
                prepare.py)
  2. vocab    : (optional, --ce-vocab K) the K most frequent assistant tokens, for a cheaper soft-target CE
                (prepare.py, which also builds the head)
  3. train    : epochs over the shards (batches.py, objective.py); a checkpoint in --run-dir every epoch and
                every --ckpt-minutes (trainer.py)
  4. eval     : after every epoch, on the held-out sequences: feature loss, top-1, alpha_0..alpha_D (evaluate.py)
  5. save     : the head (head.save) + training.json in --out (card.py)

Objective (EAGLE, arXiv 2401.15077): the head predicts f_j from [e(t_j), f_{j-1}] (shifted) or
[e(t_{j-1}), f_{j-1}] (unshifted); loss = SmoothL1(f_hat, f) + 0.1 * CE(softmax(lm(f)), log_softmax(lm(f_hat))),
on assistant tokens only; U(-noise, noise) is added to the input features. AdamW(0.9, 0.95), warm-up + cosine
decay, gradient clipping. The same script runs on one or many GPUs with `accelerate launch -m eagle_core.training`.
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time

import torch

from ..model.head import INPUTS
from .card import save_head, training_card
from .config import TrainConfig
from .objective import Frozen
from .prepare import build_head, ensure_features, load_training_data, soft_target_vocabulary
from .trainer import Trainer


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
