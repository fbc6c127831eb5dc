"""What a training run starts from: the features (stage 1, data.py extracts them), the training and held-out
sequences with the self-generated ones, the soft-target vocabulary (stage 2), and the head (fresh, or from --init).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch

from . import data as D
from ..model.head import EagleHead, head_config_from_target
from .config import TrainConfig
from .objective import ce_vocabulary


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
