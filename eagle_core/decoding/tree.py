"""The draft tree as one structure: a list of node records, the root first, nodes in non-decreasing depth.

Drafting (draft.py) grows it, verification (verify.py) walks it, the engine turns it into per-cycle records.
`ancestry` is the single place where the tree's attention pattern is computed: the target's verify mask, and
the mask figure in views/, both read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DraftNode:
    token: int
    parent: int                 # -1 for the root
    depth: int                  # root 0, drafted tokens 1..D
    q: float = 1.0              # draft probability of the token under its parent's draft distribution
    score: float = 0.0          # cumulative draft log-probability along the path (EAGLE-2's rerank key)
    sampled: bool = False       # drawn from q without replacement (ratio rule) or chosen top-k (target rule)
    children: list[int] = field(default_factory=list)   # in drafting order


@dataclass
class DraftTree:
    nodes: list[DraftNode]
    # node -> the draft log-probs over the vocabulary its children were drawn from (the q of the ratio rule)
    dists: dict = field(default_factory=dict)
    # children the tree shape asked for but the draft distribution had no more tokens for (top-p, top-k or
    # underflow left q with a smaller support): such children would have q = 0, so they are not drafted
    skipped: int = 0

    @classmethod
    def root_only(cls, token: int) -> "DraftTree":
        """The tree before any drafting: just the root (plain decoding verifies exactly this)."""
        return cls(nodes=[DraftNode(token=int(token), parent=-1, depth=0)])

    def add(self, token: int, parent: int, q: float, score: float, sampled: bool) -> int:
        """Append a child of `parent` (after its earlier children); returns the new node's index."""
        i = len(self.nodes)
        self.nodes.append(DraftNode(token=int(token), parent=parent, depth=self.nodes[parent].depth + 1,
                                    q=q, score=score, sampled=sampled))
        self.nodes[parent].children.append(i)
        return i

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def tokens(self) -> list[int]:
        return [n.token for n in self.nodes]

    @property
    def parents(self) -> list[int]:
        return [n.parent for n in self.nodes]

    @property
    def depths(self) -> list[int]:
        return [n.depth for n in self.nodes]

    def ancestry(self):
        """[N, N] bool tensor: row i marks node i and its ancestors (the tree attention pattern)."""
        import torch
        return torch.tensor(ancestry(self.parents), dtype=torch.bool)

    def subtree(self, keep: list[int]) -> "DraftTree":
        """The nodes `keep` (root included, every kept node's parent kept too), re-indexed in depth order."""
        keep = sorted(set(keep), key=lambda i: (self.nodes[i].depth, i))
        new = {old: k for k, old in enumerate(keep)}
        out = DraftTree(nodes=[], skipped=self.skipped)
        for old in keep:
            n = self.nodes[old]
            out.nodes.append(DraftNode(token=n.token, parent=new[n.parent] if n.parent >= 0 else -1, depth=n.depth,
                                       q=n.q, score=n.score, sampled=n.sampled))
            if n.parent >= 0:
                out.nodes[new[n.parent]].children.append(new[old])
        out.dists = {new[v]: d for v, d in self.dists.items() if v in new}
        return out


def ancestry(parents: list[int]) -> list[list[bool]]:
    """Row i marks node i and its ancestors, for nodes given by parent index (-1 = root; a parent's index is
    smaller than its child's). Pure Python: the engine builds the verify mask from it, views draw it."""
    rows: list[list[bool]] = []
    n = len(parents)
    for i, par in enumerate(parents):
        row = list(rows[par]) if par >= 0 else [False] * n
        row[i] = True
        rows.append(row)
    return rows
