"""Acceptance over a verified tree: which drafted path the target keeps, and its own next token.

The target has scored every tree node in one forward; `probs[i]` is its (warped) distribution for the token
that follows node i. Walking from the root:
  T = 0 : follow the child whose token equals the target's argmax; stop at the first node with none.
          The bonus token is the argmax there -- so the output is token-for-token greedy decoding.
  T > 0 : strict speculative sampling at each node over its children in drafting order
          (sampling.verify_children), then a token from the (residual) target distribution.
          The emitted tokens are distributed exactly as the target's own samples.
"""
from __future__ import annotations

import torch

from .records import ACCEPTED, NOT_REACHED, REJECTED, ROOT
from .sampling import sample, verify_children


def accept_tree(tree, probs: torch.Tensor, temperature: float, generator):
    """Returns (path, bonus token, "bonus"|"correction", distribution the bonus came from, accept probs, status).

    tree: a DraftTree (tokens, child_lists, sampled, dists); probs: [N, V] target probabilities per node.
    """
    status = [ROOT] + [NOT_REACHED] * (len(tree.tokens) - 1)
    accept_probs: dict[int, float] = {}
    path, node = [], 0
    if temperature == 0:
        argmax = probs.argmax(-1).tolist()
        while True:
            nxt = None
            for ch in tree.child_lists[node]:
                if tree.tokens[ch] == argmax[node]:
                    nxt = ch
                    status[ch] = ACCEPTED
                    break
                status[ch] = REJECTED
            if nxt is None:
                kind = "correction" if tree.child_lists[node] else "bonus"
                return path, argmax[node], kind, probs[node], accept_probs, status
            path.append(nxt)
            node = nxt
    while True:
        kids = tree.child_lists[node]
        if not kids:
            return path, sample(probs[node], generator), "bonus", probs[node], accept_probs, status
        sampled = tree.sampled[kids[0]]
        q = tree.dists[node].exp() if sampled else None
        pos, tried, residual = verify_children(probs[node], q, [tree.tokens[k] for k in kids], sampled, generator)
        for k, a in zip(kids, tried):
            accept_probs[k] = a
            status[k] = REJECTED
        if pos is None:
            return path, sample(residual, generator), "correction", residual, accept_probs, status
        status[kids[pos]] = ACCEPTED
        path.append(kids[pos])
        node = kids[pos]
