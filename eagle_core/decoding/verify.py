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

from dataclasses import dataclass

import torch

from .records import (ACCEPTED, FROM_ARGMAX, FROM_RESIDUAL_RATIO, FROM_RESIDUAL_REMOVED, FROM_TARGET, NOT_REACHED,
                      REJECTED, ROOT, RULE_GREEDY, RULE_OUTSIDE_Q)
from .sampling import ChildTest, sample, verify_children
from .tree import DraftTree


@dataclass
class Acceptance:
    path: list[int]             # accepted node indices, root excluded, in depth order
    token: int                  # the target's own token after the path (bonus or correction)
    kind: str                   # "bonus" (no child rejected at the last node) or "correction"
    source: str                 # records.FROM_*: the distribution `token` was drawn from
    dist: torch.Tensor          # that distribution ([V])
    tests: dict[int, ChildTest]  # node -> the test it faced (only nodes that were tested)
    status: list[str]           # per node: root / accepted / rejected / not_reached


def accept_tree(tree: DraftTree, probs: torch.Tensor, temperature: float, generator) -> Acceptance:
    """probs: [N, V] target probabilities per node (warped at T > 0)."""
    status = [ROOT] + [NOT_REACHED] * (len(tree) - 1)
    tests: dict[int, ChildTest] = {}
    path, node = [], 0
    if temperature == 0:
        argmax = probs.argmax(-1).tolist()
        while True:
            nxt = None
            for rank, ch in enumerate(tree.nodes[node].children):
                px = float(probs[node, tree.nodes[ch].token])
                tests[ch] = ChildTest(RULE_GREEDY, px, None, 1.0 if tree.nodes[ch].token == argmax[node] else 0.0,
                                      rank)
                if tree.nodes[ch].token == argmax[node]:
                    nxt = ch
                    status[ch] = ACCEPTED
                    break
                status[ch] = REJECTED
            if nxt is None:
                kind = "correction" if tree.nodes[node].children else "bonus"
                return Acceptance(path, argmax[node], kind, FROM_ARGMAX, probs[node], tests, status)
            path.append(nxt)
            node = nxt
    while True:
        kids = tree.nodes[node].children
        if not kids:
            return Acceptance(path, sample(probs[node], generator), "bonus", FROM_TARGET, probs[node], tests, status)
        sampled = tree.nodes[kids[0]].sampled
        q = tree.dists[node].exp() if sampled else None
        pos, tried, residual = verify_children(probs[node], q, [tree.nodes[k].token for k in kids], sampled,
                                               generator)
        for k, t in zip(kids, tried):
            tests[k] = t
            status[k] = REJECTED
        if pos is None:
            if all(t.rule == RULE_OUTSIDE_Q for t in tried):   # nothing was really tested: p is untouched
                return Acceptance(path, sample(residual, generator), "bonus", FROM_TARGET, residual, tests, status)
            source = FROM_RESIDUAL_RATIO if sampled else FROM_RESIDUAL_REMOVED
            return Acceptance(path, sample(residual, generator), "correction", source, residual, tests, status)
        status[kids[pos]] = ACCEPTED
        path.append(kids[pos])
        node = kids[pos]
