"""One cycle as the engine computes it (CycleResult), and the page's record of it (CycleRecord, records.py).

The engine's timed loop returns a lean CycleResult: the tree it drafted, the target's distributions over it,
the acceptance, the committed tokens and the timings. RecordBuilder turns that into a CycleRecord afterwards,
outside the timed region: token texts and bytes, the target's probability of each drafted token, and the
top-k distributions the views draw (record_topk = 0: lean records, no texts, bytes or top-k lists).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .records import CycleRecord, TokenProb, TreeNode
from .tree import DraftTree
from .verify import Acceptance


@dataclass
class CycleResult:
    cycle: int                  # 0 = prefill
    prefix_len: int             # committed tokens before this cycle's root
    tree: DraftTree             # root + drafted nodes (prefill: the last prompt token alone)
    probs: torch.Tensor         # [N, V] the target's (warped) distribution after each node
    acc: Acceptance             # accepted path, bonus/correction token, per-node tests and status
    committed: list[int]        # tokens this cycle committed, after stop/limit trimming
    draft_seconds: float
    verify_seconds: float
    other_seconds: float
    total_new_tokens: int       # running counts after this cycle
    target_forwards: int
    finished: str | None
    pass_sessions: int = 1      # generations whose trees shared this cycle's verification pass (batch.py)
    pass_rows: int = 0          # tokens in that pass (0: this tree alone)
    tree_given: str = ""        # the round's smaller tree, in words, when it was not the generation's own
    round_draft_seconds: float = 0.0    # a shared round's whole drafting and pass (0: alone); draft_seconds and
    round_verify_seconds: float = 0.0   # verify_seconds are then this generation's share of them (batch.py)


class RecordBuilder:
    """CycleResult -> CycleRecord for one generation; keeps the token texts it has looked up."""

    def __init__(self, target, record_topk: int, temperature: float):
        self.target, self.k, self.temperature = target, record_topk, temperature
        self._texts: dict[int, str] = {}

    def text(self, t: int) -> str:
        s = self._texts.get(t)
        if s is None:
            s = self._texts[t] = self.target.token_text(t)
        return s

    def topk(self, probs: torch.Tensor, drawn: int | None = None) -> list[TokenProb]:
        """The k likeliest tokens of `probs`, and `drawn` after them when it is not among them (a token sampled
        from the residual's tail: the view shows the bar it was drawn as)."""
        if self.k <= 0:
            return []
        v, i = torch.topk(probs.float(), min(self.k, probs.shape[-1]))
        ids, ps = i.tolist(), v.tolist()
        if drawn is not None and drawn not in ids and 0 <= drawn < probs.shape[-1]:
            ids.append(int(drawn))
            ps.append(float(probs[drawn]))
        special = self.target.special_ids
        return [TokenProb(int(t), self.text(int(t)), float(p), int(t) in special) for t, p in zip(ids, ps)]

    def record(self, res: CycleResult) -> CycleRecord:
        acc, tree = res.acc, res.tree
        named = self.k > 0 or res.cycle == 0    # the prefill record names its token even when lean (as before)
        return CycleRecord(
            cycle=res.cycle, prefix_len=res.prefix_len, nodes=self.nodes(res, named), accepted_path=acc.path,
            accepted_tokens=[tree.nodes[i].token for i in acc.path], bonus_token=acc.token,
            bonus_text=self.text(acc.token), bonus_kind=acc.kind, residual_topk=self.topk(acc.dist, acc.token),
            new_tokens=res.committed, accept_length=len(acc.path), draft_seconds=res.draft_seconds,
            verify_seconds=res.verify_seconds, other_seconds=res.other_seconds,
            total_new_tokens=res.total_new_tokens, target_forwards=res.target_forwards,
            tau=res.total_new_tokens / res.target_forwards, finished=res.finished, bonus_from=acc.source,
            drafts_skipped=tree.skipped, temperature=self.temperature, pass_sessions=res.pass_sessions,
            pass_rows=res.pass_rows or len(tree), tree_given=res.tree_given,
            round_draft_seconds=res.round_draft_seconds, round_verify_seconds=res.round_verify_seconds,
            new_token_bytes=[self.target.token_bytes(t).hex() for t in res.committed] if named else [])

    def nodes(self, res: CycleResult, named: bool) -> list[TreeNode]:
        tree, probs, acc = res.tree, res.probs, res.acc
        # p of each node: the target's probability of its token under its parent's distribution
        p_tok = probs[torch.tensor([max(par, 0) for par in tree.parents]), torch.tensor(tree.tokens)].tolist()
        out = []
        for i, dn in enumerate(tree.nodes):
            t, dist = acc.tests.get(i), tree.dists.get(i)
            out.append(TreeNode(
                index=i, token_id=dn.token, text=self.text(dn.token) if named else "", parent=dn.parent,
                depth=dn.depth, q=dn.q, p=1.0 if dn.parent < 0 else p_tok[i], score=dn.score,
                status=acc.status[i], sampled=dn.sampled,
                accept_prob=t.accept_prob if (t is not None and self.temperature > 0) else None,
                rule=t.rule if t else None, test_p=t.p if t else None, test_q=t.q if t else None,
                test_rank=t.rank if t else None, target_topk=self.topk(probs[i]),
                draft_topk=self.topk(dist.exp()) if (self.k > 0 and dist is not None) else []))
        return out
