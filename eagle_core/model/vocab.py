"""The draft vocabulary: the target's most frequent assistant tokens, for a cheaper draft LM head.

On a CPU the draft's LM head (49,152 x 576 for SmolLM2) is a 113 MB read per tree level -- more than the draft
layer itself. Drafting over the K most frequent tokens (as EAGLE-3 and FR-Spec do) cuts that K/V-fold.
Verification still runs over the full vocabulary, so the output stays exact: a token outside the draft
vocabulary simply has q = 0 and is produced by the target's own bonus/correction step.

Built from the training data by `python -m eagle_core.training.vocab [--conversations 3000]`.
"""
from __future__ import annotations

import os

import torch
from safetensors.torch import load_file, save_file

from ..paths import ASSETS
DEFAULT_VOCAB_FILE = os.path.join(ASSETS, "draft_vocab_smollm2-135m.safetensors")


def tokenizer_fingerprint(tokenizer) -> str:
    """Identifies a vocabulary: the draft vocabulary file only applies to the tokenizer it was counted with."""
    import hashlib
    toks = tokenizer.convert_ids_to_tokens(list(range(min(2000, len(tokenizer)))))
    return hashlib.sha1("\x00".join(map(str, toks)).encode()).hexdigest()[:16]


def save_draft_vocab(counts: torch.Tensor, tokenizer, path: str = DEFAULT_VOCAB_FILE, special_ids=()):
    order = torch.argsort(counts, descending=True, stable=True)
    # the end-of-turn / special tokens are always draftable: they end most answers
    special = torch.tensor(sorted(set(int(s) for s in special_ids)), dtype=torch.long)
    order = torch.cat([special, order[~torch.isin(order, special)]])
    save_file({"token_ids": order.contiguous(), "counts": counts[order].contiguous()}, path,
              metadata={"tokenizer": tokenizer_fingerprint(tokenizer)})


def load_draft_vocab(size: int, tokenizer, path: str = DEFAULT_VOCAB_FILE):
    """The `size` most frequent token ids; None (= full vocabulary) when size is 0 or covers the vocabulary, or
    when the file is missing or was counted with another tokenizer."""
    if not size or not os.path.exists(path) or tokenizer is None or size >= len(tokenizer):
        return None
    from safetensors import safe_open
    with safe_open(path, "pt") as f:
        if (f.metadata() or {}).get("tokenizer") != tokenizer_fingerprint(tokenizer):
            return None
        return f.get_tensor("token_ids")[:size].clone()


def coverage(size: int, path: str = DEFAULT_VOCAB_FILE) -> float:
    c = load_file(path)["counts"].double()
    return float(c[:size].sum() / c.sum())
