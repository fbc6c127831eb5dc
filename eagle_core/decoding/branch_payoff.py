"""What the shifted token buys, in tokens: real EAGLE cycles continuing each "How can I" branch, one run per head.

For every branch token t of the ambiguity record and every head (shifted, unshifted, and an EAGLE-3 head when
given), an EagleDecoder continues "prefix t" at T = 0 with the same drafting shape, until it has written
`new_tokens` tokens after its first one. At T = 0 every run writes the same text (the target's greedy
continuation: decoding is lossless), so the runs differ only in how many drafted tokens each cycle's tree got
accepted: the engine's own CycleRecord.accept_length, kept here cycle by cycle.

The runs of one computation advance together, one cycle each per round (decoding/batch.step_together: their trees
verified in ONE packed target pass), so the app can run them as short jobs of its engine loop (`PayoffRun.step`),
and a script or test in one go (`measure_payoff`). Each run keeps its own shape: the engine loop's load-sized
trees are not used here, so the heads are compared on the same tree.
"""
from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field

from .batch import step_together
from .drive import finish
from .engine import DecodeConfig, EagleDecoder

NEW_TOKENS = 12          # tokens each run writes after the prefill's first one (a handful of cycles)
HEAD_ORDER = ("shifted", "unshifted", "eagle3")


@dataclass
class HeadRun:
    head: str                          # "shifted" | "unshifted" | "eagle3"
    accepted: list[int]                # per drafted cycle: the drafted tokens the target kept (accept_length)
    tokens: list[int] = field(default_factory=list)   # what the drafted cycles committed (the same for every head)

    @property
    def tokens_per_cycle(self) -> float:
        """The mean accepted length τ: accepted drafted tokens + the target's own token, per cycle."""
        return sum(a + 1 for a in self.accepted) / len(self.accepted) if self.accepted else 0.0


@dataclass
class BranchPayoff:
    token_id: int
    text: str
    runs: list[HeadRun]


@dataclass
class Payoff:
    shape: str                         # the drafting shape, in words
    drafted: int                       # drafted tokens per cycle (the tree's nodes below the root)
    new_tokens: int                    # tokens each run writes after its first one
    temperature: float
    branches: list[BranchPayoff]

    def to_dict(self) -> dict:
        return asdict(self)


def shape_words(cfg: DecodeConfig) -> str:
    """The drafting shape, as the page names it."""
    spec = cfg.spec()
    if cfg.draft == "chain":
        return f"a chain of {cfg.depth} drafted tokens"
    if cfg.draft == "dynamic":
        return f"an EAGLE-2 dynamic tree of depth {cfg.depth}, top-k {cfg.top_k} and {cfg.total_tokens} tokens"
    return f"the static tree {cfg.tree} of {spec.max_nodes - 1} drafted tokens"


class PayoffRun:
    """The runs of one payoff: every (branch, head) pair an EagleDecoder of "prefix t" with the same shape, T = 0."""

    def __init__(self, target, heads: dict, shape: DecodeConfig, prefix_ids: list[int],
                 branches: list[tuple[int, str]], new_tokens: int = NEW_TOKENS):
        if not branches:
            raise ValueError("no branches to continue")
        if shape.draft == "vanilla":
            raise ValueError("the payoff compares drafting heads: give a chain or a tree")
        self.cfg = dataclasses.replace(shape, temperature=0.0, top_p=1.0, top_k_sampling=0, record_topk=0,
                                       max_new_tokens=1 + new_tokens)
        self.new_tokens, self.branches = new_tokens, branches
        self.heads = [h for h in HEAD_ORDER if heads.get(h) is not None]
        # one decoder per branch and head, in the record's order (branch by branch)
        self.runs = [(b, h, EagleDecoder(target, heads[h], self.cfg, list(prefix_ids) + [tok]))
                     for b, (tok, _) in enumerate(branches) for h in self.heads]

    @classmethod
    def for_record(cls, target, heads: dict, shape: DecodeConfig, rec, new_tokens: int = NEW_TOKENS) -> "PayoffRun":
        """The runs continuing an ambiguity record's branches (a record or its dict) after its prefix."""
        rec = rec if isinstance(rec, dict) else asdict(rec)
        if not rec.get("token_ids"):
            raise ValueError("the record has no prefix token ids (recorded before the payoff existed)")
        return cls(target, heads, shape, rec["token_ids"], [(b["token_id"], b["text"]) for b in rec["branches"]],
                   new_tokens)

    @property
    def done(self) -> bool:
        return all(dec.done for _, _, dec in self.runs)

    def step(self) -> int:
        """One cycle of every run not yet done (the first: their prompts), in one round; returns the runs stepped."""
        live = [dec for _, _, dec in self.runs if not dec.done]
        if live:
            step_together(live)
        return len(live)

    def result(self) -> Payoff:
        out = []
        for b, (tok, text) in enumerate(self.branches):
            runs = [HeadRun(h, [c.accept_length for c in dec.cycles[1:]], list(dec.new_ids[1:]))
                    for bb, h, dec in self.runs if bb == b]
            out.append(BranchPayoff(tok, text, runs))
        return Payoff(shape=shape_words(self.cfg), drafted=self.cfg.spec().max_nodes - 1, new_tokens=self.new_tokens,
                      temperature=self.cfg.temperature, branches=out)


def measure_payoff(target, heads: dict, shape: DecodeConfig, prefix_ids: list[int], branches: list[tuple[int, str]],
                   new_tokens: int = NEW_TOKENS) -> Payoff:
    """Every run to its end in this thread (scripts, tests, a ZeroGPU worker)."""
    return finish(PayoffRun(target, heads, shape, prefix_ids, branches, new_tokens)).result()
