"""Training batches: sequences grouped by length into batches of a token budget, padded on the right."""
from __future__ import annotations

import torch


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


def single_batch(items):
    """collate_fn of a DataLoader over a BatchDataset with batch_size=1: its one, already collated batch."""
    return items[0]
