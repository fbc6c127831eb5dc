"""The forwards a tree needs, run for one generation or for a whole round at once.

Drafting (draft.py) is written as a generator that yields the two forwards it needs, a head forward (`HeadCall`)
and a draft LM head over predicted features (`LmCall`), and receives their outputs. Alone, `run_alone` runs
each call as it comes. In a round (decoding/batch.py) `run_together` steps every generation's drafting in lockstep
and runs each step's calls packed: the calls on one head as ONE head forward (rows packed through fc, the decoder
layer's linears and the MLP, attention per generation over its own head cache under its own mask:
model/head_layers.HeadParts), the calls on one LM head as one matmul. The weights are read once per level for the
whole class instead of once per student, which is most of drafting's cost on a CPU.

A generation's tree is the same either way: every row sees only its own generation's cache and mask, and the
linear layers compute each row alone where the kernel plan is row-independent (else the rows' rounding may differ
between a packed and a lone call; that changes q slightly, never exactness: the verifier reads the same q).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..model.head_layers import HeadParts


@dataclass
class HeadCall:
    """One head forward: predicted features for `tokens` at `positions` from `feats` [1, n, width], over the
    drafter's head cache under the additive `mask` [n, cache length + n]."""
    drafter: object
    feats: torch.Tensor
    tokens: list[int]
    positions: list[int]
    mask: torch.Tensor

    def key(self) -> tuple:
        d = self.drafter
        return ("head", id(d.head), id(d.embed), d.dtype, self.feats.shape[-1])

    def run(self) -> torch.Tensor:
        return run_heads([self])[0]


@dataclass
class LmCall:
    """Draft-vocabulary logits of predicted features [F, H] (the drafter's LM head, EAGLE-3: after its norm)."""
    drafter: object
    feats: torch.Tensor

    def key(self) -> tuple:
        d = self.drafter
        return ("lm", id(d.lm), id(d.lm_norm), d.lm_dtype)

    def run(self) -> torch.Tensor:
        return run_lms([self])[0]


def run_heads(calls: list[HeadCall]) -> list[torch.Tensor]:
    """Calls on one head (same key) as one forward; each call's predicted features [1, n, H], in order."""
    d = calls[0].drafter
    dev = d.cache.k.device
    if len(calls) == 1:
        c = calls[0]
        ids = torch.tensor([c.tokens], device=dev)
        pos = torch.tensor([c.positions], device=dev)
        return [d.head(c.feats.to(d.dtype), d.embed(ids).to(d.dtype), pos, d.cache, c.mask[None, None])]
    parts, start = [], 0
    for c in calls:
        n = len(c.tokens)
        parts.append((c.drafter.cache, c.mask[None, None], start, start + n))
        start += n
    ids = torch.tensor([[t for c in calls for t in c.tokens]], device=dev)
    pos = torch.tensor([[p for c in calls for p in c.positions]], device=dev)
    feats = torch.cat([c.feats.to(d.dtype) for c in calls], dim=1)
    out = d.head(feats, d.embed(ids).to(d.dtype), pos, HeadParts(parts), None)
    return [out[:, a:b] for _, _, a, b in parts]


def run_lms(calls: list[LmCall]) -> list[torch.Tensor]:
    """Calls on one LM head (same key) as one matmul; each call's logits [F, K], in order."""
    d = calls[0].drafter
    if len(calls) == 1:
        return [d._draft_logits(calls[0].feats)]
    sizes = [c.feats.shape[0] for c in calls]
    return list(d._draft_logits(torch.cat([c.feats for c in calls], dim=0)).split(sizes, dim=0))


def run_alone(steps):
    """Drive one drafting generator to its end, each call run as it comes; returns what it returns."""
    try:
        call = next(steps)
        while True:
            call = steps.send(call.run())
    except StopIteration as end:
        return end.value


def run_together(all_steps: list) -> list:
    """Drive many drafting generators in lockstep: at each step their calls, grouped by head (or LM head), run
    packed. Returns each generator's result, in order."""
    results = [None] * len(all_steps)
    pending = {}
    for i, steps in enumerate(all_steps):
        _advance(i, steps, None, pending, results)
    while pending:
        groups: dict[tuple, list[int]] = {}
        for i, call in pending.items():
            groups.setdefault(call.key(), []).append(i)
        outs = {}
        for key, idx in groups.items():
            run = run_heads if key[0] == "head" else run_lms
            for i, out in zip(idx, run([pending[i] for i in idx])):
                outs[i] = out
        now, pending = pending, {}
        for i in now:
            _advance(i, all_steps[i], outs[i], pending, results)
    return results


def _advance(i, steps, value, pending, results):
    try:
        pending[i] = steps.send(value)      # send(None) starts a generator, as next() does
    except StopIteration as end:
        results[i] = end.value
