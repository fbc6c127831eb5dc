"""Build the draft vocabulary (eagle_core/model/vocab.py) from the training conversations' assistant turns.

    python -m eagle_core.training.vocab [--conversations 3000]   # writes assets/draft_vocab_smollm2-135m.safetensors
"""
from __future__ import annotations

import argparse

import torch

from ..model.vocab import DEFAULT_VOCAB_FILE, coverage, save_draft_vocab


def count_assistant_tokens(tokenizer, vocab_size: int, conversations: int = 3000) -> torch.Tensor:
    """Token counts over the assistant turns of the first training conversations (held-out split excluded).

    Each assistant message is tokenized on its own (batched; boundary effects are negligible for counting).
    """
    from .data import load_conversations, split_conversations
    train, _ = split_conversations(load_conversations())
    texts = [m["content"] for _, messages in train[:conversations] for m in messages if m["role"] == "assistant"]
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for i in range(0, len(texts), 256):
        for ids in tokenizer(texts[i:i + 256], add_special_tokens=False)["input_ids"]:
            counts += torch.bincount(torch.as_tensor(ids, dtype=torch.long), minlength=vocab_size)
    return counts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=3000)
    ap.add_argument("--out", default=DEFAULT_VOCAB_FILE)
    args = ap.parse_args(argv)
    from transformers import AutoConfig, AutoTokenizer

    from ..model.target import EMBEDDED_GGUF, _stop_ids, embedded_gguf_dir
    folder = embedded_gguf_dir()   # the tokenizer is all this needs
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=EMBEDDED_GGUF)
    cfg = AutoConfig.from_pretrained(folder, gguf_file=EMBEDDED_GGUF)
    counts = count_assistant_tokens(tok, cfg.vocab_size, args.conversations)
    save_draft_vocab(counts, tok, args.out, _stop_ids(tok, cfg))
    for k in (1024, 2048, 4096, 8192, 16384):
        print(f"top {k:>6}: {100 * coverage(k, args.out):.2f}% of assistant tokens")


if __name__ == "__main__":
    main()
