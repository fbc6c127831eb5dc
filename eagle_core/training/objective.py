"""EAGLE's training objective: SmoothL1 on the predicted feature + a soft-target CE through the frozen LM head,
optionally over the K most frequent assistant tokens only (ce_vocabulary)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import data as D


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


def ce_vocabulary(seqs, k: int, vocab_size: int) -> tuple[torch.Tensor, float]:
    """The k most frequent assistant tokens of the training data (sorted ids) and their coverage."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for s in seqs:
        counts += torch.bincount(s.input_ids[s.loss_mask], minlength=vocab_size)
    top = torch.topk(counts, min(k, vocab_size)).indices.sort().values
    return top, float(counts[top].sum()) / max(int(counts.sum()), 1)
