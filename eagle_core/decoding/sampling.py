"""Logit warpers and the two acceptance rules of strict speculative sampling over a tree.

All functions work on 1-D probability vectors over the vocabulary. The same warpers (temperature, top-k,
top-p) are applied to the target and to the draft, so the output distribution is exactly the target's
*warped* distribution -- what plain sampling with the same settings would produce.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .records import RULE_OUTSIDE_Q, RULE_RATIO, RULE_TARGET


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


@dataclass
class ChildTest:
    """How one drafted child was tested: what the node view shows and names."""
    rule: str            # records.RULE_*: ratio min(1, p'/q'), target p', or outside q (never accepted)
    p: float             # p'(x): the target's probability of x at this point (after the earlier rejections)
    q: float | None      # q'(x): the draft's renormalised probability (ratio rule); None for the target rule
    accept_prob: float   # the probability with which the test could keep x
    rank: int            # siblings rejected before this one (0: tested against the unmodified p and q)


def verify_children(p: torch.Tensor, q: torch.Tensor | None, children: list[int], sampled: bool,
                    generator: torch.Generator | None):
    """Strict speculative sampling at one tree node.

    p: the target distribution at this node; q: the draft distribution there (needed when `sampled`).
    children: the drafted child tokens in the order they were drafted (drawn without replacement from q, or
    chosen deterministically, e.g. top-k of q).
      sampled       -> accept x w.p. min(1, p'(x)/q'(x)); on rejection p' <- normalise(max(p' - q', 0)) and x
                       leaves q' (q' renormalised); next sibling. A child with q'(x) = 0 cannot have been drawn
                       from q', so it is passed over (never accepted, p' and q' unchanged): exactly as if it had
                       not been drafted.
      deterministic -> q' = one-hot(x): accept w.p. p'(x); on rejection p'(x) <- 0, p' renormalised.
    A child with p'(x) = 0 is never accepted under either rule.
    Returns (accepted child position or None, [ChildTest per child tried], residual p').
    When None, the caller samples the correction token from the residual p'.
    """
    p = p.float().clone()
    q = q.float().clone() if q is not None else None
    tests: list[ChildTest] = []
    rejected = 0
    for pos, x in enumerate(children):
        px = float(p[x])
        if sampled:
            qx = float(q[x])
            if qx <= 0:
                tests.append(ChildTest(RULE_OUTSIDE_Q, px, qx, 0.0, rejected))
                continue
            a = min(1.0, px / qx)
            tests.append(ChildTest(RULE_RATIO, px, qx, a, rejected))
        else:
            a = px
            tests.append(ChildTest(RULE_TARGET, px, None, a, rejected))
        if a > 0 and (a >= 1.0 or float(torch.rand((), generator=generator, device=p.device)) < a):
            return pos, tests, p
        rejected += 1
        if sampled:
            residual = torch.clamp(p - q, min=0)
            if residual.sum() > 0:  # == 0 only if p' == q', where the test above cannot reject
                p = _normalise(residual)
            q[x] = 0
            q = _normalise(q)
        else:
            p[x] = 0
            p = _normalise(p)
    return None, tests, p
