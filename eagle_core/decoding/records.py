"""Plain per-cycle records: what the CLI prints, the benchmark aggregates, the tests check and the app draws.

Everything here is a dataclass of numbers, strings and lists, so `dataclasses.asdict` gives JSON directly.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

# node status after verification
ROOT, ACCEPTED, REJECTED, NOT_REACHED = "root", "accepted", "rejected", "not_reached"
# the acceptance test a drafted node faced (TreeNode.rule)
RULE_GREEDY = "greedy"        # T = 0: kept iff it is the target's top token
RULE_RATIO = "ratio"          # drawn from q: kept w.p. min(1, p'(x)/q'(x)) (p', q' after earlier rejections)
RULE_TARGET = "target"        # chosen deterministically (top-k): kept w.p. p'(x)
RULE_OUTSIDE_Q = "outside_q"  # q'(x) = 0: not a draw from q', passed over, never kept
# where the bonus / correction token came from (CycleRecord.bonus_from)
FROM_ARGMAX = "argmax"              # T = 0: the target's top token
FROM_TARGET = "target"              # T > 0: sampled from the target's p (no child rejected here)
FROM_RESIDUAL_RATIO = "residual_ratio"      # after ratio-rule rejections: normalise(max(0, p' - q'))
FROM_RESIDUAL_REMOVED = "residual_removed"  # after target-rule rejections: p with the rejected tokens removed


@dataclass
class TokenProb:
    token_id: int
    text: str
    prob: float
    special: bool = False       # a control token of the vocabulary (the figures keep it off their axes)


@dataclass
class TreeNode:
    index: int                  # 0 = root (the last committed token, not yet seen by the target)
    token_id: int
    text: str
    parent: int                 # -1 for the root
    depth: int                  # root 0, drafted tokens 1..D
    q: float                    # draft probability of this token under its parent's draft distribution
    p: float                    # target probability of this token under its parent's target distribution
    score: float                # cumulative draft log-probability along the path (EAGLE-2's rerank key)
    status: str                 # root / accepted / rejected / not_reached
    sampled: bool = False       # drawn from q (multi-round rule) rather than chosen top-k (one-hot rule)
    accept_prob: float | None = None   # probability with which the acceptance test could accept it (T > 0)
    rule: str | None = None     # the test it faced (RULE_*); None: not tested (an earlier sibling was kept or
                                # its parent was not reached)
    test_p: float | None = None  # p'(x) the test used: the target's probability after earlier rejections
    test_q: float | None = None  # q'(x) the ratio test used: the renormalised draft probability
    test_rank: int | None = None  # siblings rejected before this one was tested
    target_topk: list[TokenProb] = field(default_factory=list)   # target distribution AT this node
    draft_topk: list[TokenProb] = field(default_factory=list)    # draft distribution AT this node


@dataclass
class CycleRecord:
    cycle: int                  # 0 = prefill (no tree; the target's first token)
    prefix_len: int             # committed tokens (prompt + generated) before this cycle's root
    nodes: list[TreeNode]
    accepted_path: list[int]    # node indices, root excluded, in depth order
    accepted_tokens: list[int]  # token ids of accepted drafted nodes
    bonus_token: int            # the target's own token at the end of the cycle
    bonus_text: str
    bonus_kind: str             # "bonus" (every child accepted or no child) or "correction" (after a rejection)
    residual_topk: list[TokenProb]   # distribution the bonus/correction was drawn from (T > 0: the residual)
    new_tokens: list[int]       # tokens committed by this cycle (accepted + bonus), after stop/limit trimming
    accept_length: int          # len(accepted_path)
    draft_seconds: float        # head catch-up + drafting (engine.py's docstring: what each timing covers)
    verify_seconds: float       # the one target pass (prefill: the prompt's pass + the first token)
    other_seconds: float        # acceptance + KV/commit bookkeeping; building this record is in none of the 3
    total_new_tokens: int       # running count, this cycle included
    target_forwards: int        # running count, prefill included
    tau: float                  # running total_new_tokens / target_forwards
    finished: str | None = None  # "eos", "max_new_tokens", "context" when generation ended in this cycle
    bonus_from: str = FROM_ARGMAX   # which distribution the bonus/correction was drawn from (FROM_*)
    drafts_skipped: int = 0     # children the tree shape asked for that the draft's support could not give
    temperature: float = 0.0
    new_token_bytes: list[str] = field(default_factory=list)   # hex of each committed token's bytes: the text
                                # is decoded from their join, so a character split over tokens shows whole
    pass_sessions: int = 1      # generations verified in this cycle's target pass (a classroom round: batch.py)
    pass_rows: int = 0          # tokens in that pass, every generation's tree together
    tree_given: str = ""        # "" = the tree the student set; else what the class's load gave this cycle, in
                                # words, beside what was set ("a chain of 2 (you set a tree of 12 nodes)")
    round_draft_seconds: float = 0.0    # in a shared round (pass_sessions > 1): the whole round's drafting and
    round_verify_seconds: float = 0.0   # pass; draft_seconds / verify_seconds are then this cycle's share of them,
                                        # by its tree's nodes and its rows in the pass (0: it ran alone)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class GenerationResult:
    prompt: str
    prompt_ids: list[int]
    token_ids: list[int]        # new tokens only
    text: str
    target_forwards: int
    seconds: float
    cycles: list[CycleRecord]
    config: dict
    finished: str | None = None

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tau(self) -> float:
        return self.new_tokens / max(1, self.target_forwards)

    def to_dict(self) -> dict:
        return {"text": self.text, "token_ids": self.token_ids, "new_tokens": self.new_tokens,
                "target_forwards": self.target_forwards, "tau": self.tau, "seconds": self.seconds,
                "finished": self.finished, "cycles": [c.to_dict() for c in self.cycles],
                "config": self.config}
