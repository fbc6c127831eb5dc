"""Logit warpers and the two acceptance rules of strict speculative sampling over a tree.

All functions work on 1-D probability vectors over the vocabulary. The same warpers (temperature, top-k,
top-p) are applied to the target and to the draft, so the output distribution is exactly the target's
*warped* distribution -- what plain sampling with the same settings would produce.
"""
from __future__ import annotations

import torch


def warp_logits(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Temperature, then top-k, then top-p (nucleus); returns log-probabilities ([..., V])."""
    logits = logits.float() / max(temperature, 1e-6)
    if top_k and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass before it already reaches top_p (the top token always stays)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.log_softmax(logits, dim=-1)


def gumbel_topk(logprobs: torch.Tensor, k: int, generator: torch.Generator | None) -> torch.Tensor:
    """k draws without replacement from exp(logprobs), in the order they were drawn (Gumbel-top-k)."""
    u = torch.rand(logprobs.shape, generator=generator, device=logprobs.device).clamp_(1e-20, 1.0)
    keys = logprobs - torch.log(-torch.log(u))
    return torch.topk(keys, k, dim=-1).indices


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs.float(), 1, generator=generator).item())


def _normalise(x: torch.Tensor) -> torch.Tensor:
    s = x.sum()
    return x / s if s > 0 else x


def verify_children(p: torch.Tensor, q: torch.Tensor | None, children: list[int], sampled: bool,
                    generator: torch.Generator | None):
    """Strict speculative sampling at one tree node.

    p: the target distribution at this node; q: the draft distribution there (needed when `sampled`).
    children: the drafted child tokens in the order they were drafted (sampled without replacement from q,
    or chosen deterministically, e.g. top-k of q).
      sampled     -> multi-round rule: accept x w.p. min(1, p(x)/q(x)); on rejection
                     p <- normalise(max(p - q, 0)) and x leaves q (q renormalised); next sibling.
      deterministic -> q = one-hot(x): accept w.p. p(x); on rejection p(x) <- 0, p renormalised.
    Returns (accepted child position or None, accept probabilities tried, residual p).
    When None, the caller samples the correction token from the residual p.
    """
    p = p.float().clone()
    q = q.float().clone() if q is not None else None
    tried = []
    for pos, x in enumerate(children):
        if sampled:
            qx = float(q[x])
            a = 1.0 if qx <= 0 else min(1.0, float(p[x]) / qx)
        else:
            a = float(p[x])
        tried.append(a)
        if a >= 1.0 or float(torch.rand((), generator=generator, device=p.device)) < a:
            return pos, tried, p
        if sampled:
            residual = torch.clamp(p - q, min=0)
            if residual.sum() > 0:  # == 0 only if p == q, where the test above cannot reject
                p = _normalise(residual)
            q[x] = 0
            q = _normalise(q)
        else:
            p[x] = 0
            p = _normalise(p)
    return None, tried, p
