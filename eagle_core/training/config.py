"""What a training run is asked to do: TrainConfig, one field per command-line flag (train.py's parse_args), with
the defaults of the shipped heads and the folders a run reads and writes."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..model.head import SHIPPED_HEADS
from ..model.head3 import SHIPPED_EAGLE3 as EAGLE3_HEAD

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
