"""Held-out evaluation of a head, teacher-forced at T = 0: feature loss, top-1, EAGLE's n-alpha and chain tau."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import data as D
from ..model.head import EagleHead
from .batches import collate, plan_batches
from .objective import Frozen


def _depth_mask(n: int, d: int, device) -> torch.Tensor:
    """Additive mask [1, 1, n, (d+1)n] for depth d of the teacher-forced roll-out.

    Entry q at depth d belongs to the chain that started (with true inputs) at entry q-d; it sees the depth-0
    keys of entries <= q-d and, in block m (1..d), the key of entry q-d+m computed at depth m (same chain).
    """
    q = torch.arange(n, device=device)[:, None]
    i = torch.arange(n, device=device)[None, :]
    blocks = [i <= q - d] + [i == q - d + m for m in range(1, d + 1)]
    allowed = torch.cat(blocks, dim=1)
    out = torch.zeros(allowed.shape, device=device)
    out.masked_fill_(~allowed, float("-inf"))
    return out[None, None]


@torch.no_grad()
def rollout(head: EagleHead, f_in, emb, pos, depth: int) -> list[torch.Tensor]:
    """Teacher-forced roll-out: predictions [B, n, H] at depths 0..depth (one head pass per depth).

    Depth 0 is the plain pass on true features. At depth d, entry q takes as feature input the depth d-1
    prediction of entry q-1 (and the true token), and attends as in drafting: to the true-input entries of its
    chain's prefix and to its own chain's entries (see _depth_mask)."""
    B, n, _ = f_in.shape
    cache = head.new_cache(1)
    cache.k = f_in.new_zeros(B, cache.k.shape[1], (depth + 1) * n, cache.k.shape[-1])
    cache.v = torch.zeros_like(cache.k)
    inp, preds = f_in, []
    for d in range(depth + 1):
        pred = head(inp, emb, pos, cache=cache, attn_mask=_depth_mask(n, d, f_in.device).to(f_in.dtype))
        preds.append(pred)
        # entry q now takes out[q-1]; entry 0 (never counted) keeps a placeholder of the input's width
        first = f_in[:, :1] if f_in.shape[-1] == pred.shape[-1] else pred[:, :1]
        inp = torch.cat([first, pred[:, :-1]], dim=1)
    return preds


@torch.no_grad()
def evaluate(head: EagleHead, frozen: Frozen, seqs, shift: str, depth: int = 4, batch_tokens: int = 8192,
             target_argmax_cache: dict | None = None) -> dict:
    """Held-out metrics (teacher-forced, T=0).

    feature_loss: SmoothL1 at depth 0; top1: argmax(lm(f_hat)) == argmax(lm(f)) at depth 0 (true inputs);
    alpha[k]: the same agreement when the head's feature inputs along the chain are its own k previous
    predictions (k of them replace true features: EAGLE's n-alpha); chain[k]: all of depths 0..k agree
    (greedy chain drafting accepts k+1 tokens); tau_chain = 1 + sum(chain) = expected tokens per target pass
    for a single chain of depth+1 drafts.
    """
    head.eval()
    eagle3 = getattr(head, "kind_name", "") == "eagle3"
    dev = frozen.lm.device
    dt = next(head.parameters()).dtype
    agree_sum = [0.0] * (depth + 1)
    agree_n = [0] * (depth + 1)
    chain_sum = [0.0] * (depth + 1)
    chain_n = 0
    vloss_sum, vloss_n = 0.0, 0
    for idx in plan_batches(seqs, batch_tokens):
        ids, feats, mask = collate(seqs, idx)
        ids, feats, mask = ids.to(dev), feats.to(dev).float(), mask.to(dev)
        fused, H = None, frozen.embed.shape[1]
        if eagle3:   # stored [final feature ; fused states] (objective3.py): pairs on the final, input the fused
            feats, fused = feats[..., :H], feats[..., H:]
        elif feats.shape[-1] > H:   # an EAGLE-1 head on fused shards reads their first H columns
            feats = feats[..., :H]
        f_in, tok, tgt, m, pos = D.make_pairs(ids, feats, mask, shift)
        if eagle3:
            f_in = fused[:, :-1]
        B, n, H = f_in.shape
        pos = pos.unsqueeze(0).expand(B, -1)
        emb = F.embedding(tok, frozen.embed).to(dt)
        key = tuple(seqs[i].conv_id for i in idx)
        if target_argmax_cache is not None and key in target_argmax_cache:
            t_arg = target_argmax_cache[key].to(dev)
        else:
            t_arg = torch.zeros(m.shape, dtype=torch.long, device=dev)
            t_arg[m.bool()] = frozen.argmax(tgt[m.bool()])
            if target_argmax_cache is not None:
                target_argmax_cache[key] = t_arg.cpu()
        agree, sel = [], m.bool()
        for d, pred in enumerate(rollout(head, f_in.to(dt), emb, pos, depth)):
            if d == 0 and not eagle3:   # an EAGLE-3 head predicts no feature
                vloss_sum += float(F.smooth_l1_loss(pred.float()[sel], tgt[sel], reduction="none").mean(-1).sum())
                vloss_n += int(sel.sum())
            ok = torch.zeros_like(sel)
            if eagle3:   # its own LM head over its draft vocabulary, as target ids
                drafted = head.target_ids[head.logits(pred[sel]).argmax(-1)]
            else:
                drafted = frozen.argmax(pred[sel].float())
            ok[sel] = drafted == t_arg[sel]  # only counted positions: [B, n]
            valid = m.bool().clone()
            valid[:, :d] = False  # entries whose chain would start before the sequence
            agree_sum[d] += float(ok[valid].sum())
            agree_n[d] += int(valid.sum())
            agree.append(ok)
        # chains: the chain that starts at entry c is (c, depth 0), (c+1, depth 1), ... (c+k, depth k)
        nc = n - depth
        if nc > 0:
            valid = _mask_upto(m, depth, nc)
            all_ok = torch.ones_like(valid)
            for d in range(depth + 1):
                all_ok &= agree[d][:, d:d + nc]
                chain_sum[d] += float((all_ok & valid).sum())
            chain_n += int(valid.sum())
    alpha = [s / max(n_, 1) for s, n_ in zip(agree_sum, agree_n)]
    chain = [s / max(chain_n, 1) for s in chain_sum]
    head.train()
    return {"feature_loss": vloss_sum / vloss_n if vloss_n else None, "top1": alpha[0], "alpha": alpha, "chain": chain,
            "tau_chain": 1 + sum(chain), "positions": agree_n[0]}


def _mask_upto(m, depth, nc):
    """Chains (start c) whose entries c..c+depth are all counted positions."""
    out = torch.ones(m.shape[0], nc, dtype=torch.bool, device=m.device)
    for d in range(depth + 1):
        out &= m.bool()[:, d:d + nc]
    return out
