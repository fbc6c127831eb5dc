"""A round: many generations advance one cycle each, their verifications in ONE target pass.

Every generation drafts its own tree (its head, its shape, its temperature, its generator), the trees grown in
lockstep with each level's head and LM-head forwards packed across generations (draft_calls.py), the target scores all
trees in one packed pass (model/packed_forward.py: the linear layers read the weights once for every row, attention
runs per generation over its own KV cache under its own ancestry mask), and each generation accepts, keeps and
commits with its own generator, exactly as it does alone (EagleDecoder.finish_cycle). A generation's output is
therefore its output alone: bit for bit where the target's kernel plan is row-independent (Target.row_independent),
else up to the kernels' rounding between a pass over its rows and a pass over everyone's (near-ties only).

Prefills (a prompt's first pass) run alone: a prompt is hundreds of rows, a round's trees a few each.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .draft import DraftSpec
from .draft_calls import run_together
from .records import CycleRecord


@dataclass
class RoundInfo:
    """What one round's shared pass held: shown to every student whose cycle it verified."""
    sessions: int          # generations verified in the pass
    rows: int              # tokens in the pass (every tree's root and drafted nodes)
    seconds: float         # the pass's wall time
    draft_seconds: float = 0.0   # the round's drafting (every tree, in lockstep)


@torch.inference_mode()
def step_together(decoders: list, shapes: list[DraftSpec | None] | None = None) -> tuple[list[CycleRecord], RoundInfo]:
    """Advance every decoder (engine.EagleDecoder, not done) by one cycle; `shapes[i]`: decoder i's tree for this
    cycle (None: its own). Decoders still to prefill do so alone. Returns their records, in order, and the round."""
    shapes = shapes or [None] * len(decoders)
    records: list[CycleRecord | None] = [None] * len(decoders)
    live = []
    for i, dec in enumerate(decoders):
        if dec.done:
            raise RuntimeError("generation already finished")
        if not dec.cycles:
            records[i] = dec.step()
        else:
            live.append(i)
    if not live:
        return records, RoundInfo(0, 0, 0.0)
    t0 = time.perf_counter()     # every tree drafted in lockstep, each level's forwards packed (draft_calls.py)
    trees = dict(zip(live, run_together([decoders[i].draft_steps(shapes[i]) for i in live])))
    draft_s = decoders[live[0]]._clock() - t0
    groups: dict[tuple, list[int]] = {}   # one packed pass per set of target layers the heads read
    for i in live:
        groups.setdefault(decoders[i].aux_layers, []).append(i)
    target = decoders[live[0]].target
    if any(decoders[i].target is not target for i in live):
        raise ValueError("one round verifies on one target")
    rows = sum(len(trees[i]) for i in live)
    t0 = time.perf_counter()
    outs = {}
    for aux, idx in groups.items():
        parts = [decoders[i].verify_part(trees[i]) for i in idx]
        for i, out in zip(idx, target.forward_packed(parts, aux)):
            outs[i] = out
    verify_s = decoders[live[0]]._clock() - t0
    info = RoundInfo(len(live), rows, verify_s, draft_s)
    for i in live:
        dec = decoders[i]
        res = dec.finish_cycle(trees[i], outs[i][0], outs[i][1], draft_s, verify_s)
        res.pass_sessions, res.pass_rows = info.sessions, info.rows
        records[i] = dec.commit_record(res)
    return records, info
