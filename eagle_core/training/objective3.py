"""EAGLE-3's training objective (arXiv 2503.01840): training-time test, the token loss only.

Data: a sequence's features are [L, (1 + k) H]: the target's final feature (after its last norm: the LM head's
input) followed by the residual streams entering the k layers the head reads (data.extract_features with
`aux_layers`). Entry j of a sequence (j = 0 .. L-2) pairs the fused states of position j with the token t_{j+1}
at position j, and predicts t_{j+2}; its label is the target's own distribution at position j+1 over the draft
vocabulary, softmax(lm(f_{j+1})[draft ids]), as EAGLE-3's code takes it.

Training-time test. Step 0 runs the head on the true fused states of every entry. At step s, entry j's hidden
input is the head's step s-1 output at entry j-1 (its own prediction, what drafting feeds it s levels into a
tree), and it attends to the true-input keys of entries <= j-s and to the keys of its own chain at steps 1..s
(evaluate._depth_mask: the teacher-forced roll-out EAGLE-1's metrics use, here with gradients). The loss of
step s is counted at entries j >= s whose predicted token is an assistant token, weighted decay^s (0.8 in the
reference). No feature-regression term: the head is free to put anything into its hidden output that helps
the next step.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .evaluate import _depth_mask
from .objective import Frozen


def split_features(feats: torch.Tensor, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(final features [..., H], fused states [..., kH]) of stored [..., (1 + k) H] features."""
    return feats[..., :hidden], feats[..., hidden:]


class GrowingCache:
    """The head's keys and values over the roll-out's steps, appended by concatenation: a preallocated cache
    written in place (model/head.HeadCache) would overwrite tensors the backward pass still needs."""

    def __init__(self):
        self.k = self.v = None

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v


def ttt_rollout(head, hidden0, emb, pos, steps: int) -> list[torch.Tensor]:
    """The head's outputs [B, n, H] at steps 0..steps (see the module docstring); keeps gradients when enabled."""
    n = hidden0.shape[1]
    cache = GrowingCache()
    inp, outs = hidden0, []
    for s in range(steps + 1):
        out = head(inp, emb, pos, cache=cache, attn_mask=_depth_mask(n, s, hidden0.device).to(hidden0.dtype))
        outs.append(out)
        inp = torch.cat([out[:, :1], out[:, :-1]], dim=1)   # entry j now takes out[j-1] (entry 0: a placeholder)
    return outs


def eagle3_loss(head, frozen: Frozen, ids, feats, mask, steps: int, decay: float = 0.8):
    """One batch: ids [B, L], feats [B, L, (1+k)H], mask [B, L] (assistant tokens).

    Returns (loss, [CE per step], [top-1 agreement per step], counted positions at step 0). `frozen` carries the
    target's LM head restricted to the head's draft vocabulary (Frozen(..., vocab_ids=head.target_ids))."""
    H = head.hidden_size
    final, fused = split_features(feats.float(), H)
    B, L = ids.shape
    n = L - 1
    hidden0 = fused[:, :-1]
    emb = F.embedding(ids[:, 1:], frozen.embed)
    pos = torch.arange(n, device=ids.device).unsqueeze(0).expand(B, -1)
    m = torch.cat([mask[:, 2:], torch.zeros_like(mask[:, :1])], dim=1).bool()      # the predicted token t_{j+2}
    with torch.no_grad():
        label = torch.softmax(frozen.logits(final[:, 1:][m], restricted=True), dim=-1)  # [N, K]
        label_top = label.argmax(-1)
    total, ces, agree = 0.0, [], []
    for s, out in enumerate(ttt_rollout(head, hidden0, emb, pos, steps)):
        valid = m.clone()
        valid[:, :s] = False                     # chains that would start before the sequence
        keep = valid[m]                          # of the labelled positions, those counted at this step
        if not bool(keep.any()):
            ces.append(0.0), agree.append(0.0)
            continue
        logp = torch.log_softmax(head.logits(out[valid]).float(), dim=-1)
        ce = -(label[keep] * logp).sum(-1).mean()
        total = total + (decay ** s) * ce
        ces.append(float(ce.detach()))
        agree.append(float((logp.argmax(-1) == label_top[keep]).float().mean()))
    return total, ces, agree, int(m.sum())
