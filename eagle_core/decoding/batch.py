"""A round: many generations advance one cycle each, their verifications in ONE target pass.

Every generation drafts its own tree (its head, its shape, its temperature, its generator), the trees grown in
lockstep with each level's head and LM-head forwards packed across generations (draft_calls.py), the target scores all
trees in one packed pass (model/packed_forward.py: the linear layers read the weights once for every row, attention
runs per generation over its own KV cache under its own ancestry mask), and each generation accepts, keeps and
commits with its own generator, exactly as it does alone (EagleDecoder.finish_cycle). A generation's output is
therefore its output alone: bit for bit where the target's kernel plan is row-independent (Target.row_independent),
else up to the kernels' rounding between a pass over its rows and a pass over everyone's (near-ties only).

A generation's prefill (its prompt's first pass) joins the round's pass as one more part (causal over its own
cache, the LM head on the prompt's last row only): a class that presses Step together prefills in one pass instead
of thirty one after another, and a long prompt is read a chunk a round (serving/rounds.py), its record coming with
the last chunk.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..model.attention import MAX_VERIFY_ROWS
from .draft import DraftSpec
from .draft_calls import run_together
from .records import CycleRecord


@dataclass
class RoundInfo:
    """What one round's shared pass held: shown to every student whose cycle it verified."""
    sessions: int          # generations in the pass (their trees verified, or their prompts prefilled)
    rows: int              # tokens in the pass (every tree's root and drafted nodes, every prompt)
    seconds: float         # the pass's wall time
    draft_seconds: float = 0.0   # the round's drafting (every tree, in lockstep)
    prefills: int = 0      # of `sessions`, generations whose prompt this pass read (they drafted nothing)
    passes: int = 1        # the target passes the round's rows took (probed_passes)


def probed_passes(parts: list[tuple[int, object]], limit: int = MAX_VERIFY_ROWS) -> list[list]:
    """The round's parts in passes of at most `limit` rows, in order (a part bigger than that alone): the kernel
    plan probes row independence for calls up to MAX_VERIFY_ROWS rows (model/planned_linear.py), and a longer call
    may take another kernel (the q4 plan's table turns to fp32 above it), so a row in a bigger pass could be computed
    otherwise than alone. A pass of 81 rows already reads the weights once for many rows: splitting costs little."""
    out, cur, n = [], [], 0
    for item in parts:
        r = item[1].rows
        if cur and n + r > limit:
            out.append(cur)
            cur, n = [], 0
        cur.append(item)
        n += r
    return out + ([cur] if cur else [])


@torch.inference_mode()
def step_together(decoders: list, shapes: list[DraftSpec | None] | None = None,
                  prompt_rows: list[int | None] | None = None) -> tuple[list[CycleRecord | None], RoundInfo]:
    """Advance every decoder (engine.EagleDecoder, not done) by one cycle; `shapes[i]`: decoder i's tree for this
    cycle (None: its own). A decoder still to prefill reads its prompt in the same pass, or the next
    `prompt_rows[i]` tokens of it (None: all that are left); its record comes with the prompt's last chunk (until
    then None). Returns their records, in order, and the round."""
    shapes = shapes or [None] * len(decoders)
    prompt_rows = prompt_rows or [None] * len(decoders)
    records: list[CycleRecord | None] = [None] * len(decoders)
    if any(dec.done for dec in decoders):
        raise RuntimeError("generation already finished")
    target = decoders[0].target
    if any(dec.target is not target for dec in decoders):
        raise ValueError("one round verifies on one target")
    fresh = [i for i, dec in enumerate(decoders) if not dec.cycles]
    live = [i for i, dec in enumerate(decoders) if dec.cycles]
    t0 = time.perf_counter()     # every tree drafted in lockstep, each level's forwards packed (draft_calls.py)
    trees = dict(zip(live, run_together([decoders[i].draft_steps(shapes[i]) for i in live]))) if live else {}
    draft_s = decoders[0]._clock() - t0
    groups: dict[tuple, list[int]] = {}   # one packed pass per set of target layers the heads read
    for i in fresh + live:
        groups.setdefault(decoders[i].aux_layers, []).append(i)
    t0 = time.perf_counter()
    outs, rows, passes = {}, 0, 0
    for aux, idx in groups.items():
        parts = [decoders[i].verify_part(trees[i]) if i in trees else decoders[i].prefill_part(prompt_rows[i])
                 for i in idx]
        rows += sum(p.rows for p in parts)
        for chunk in probed_passes(list(zip(idx, parts))):
            passes += 1
            for (i, p), out in zip(chunk, target.forward_packed([p for _, p in chunk], aux)):
                outs[i] = (p, out)
    verify_s = decoders[0]._clock() - t0
    info = RoundInfo(len(decoders), rows, verify_s, draft_s if live else 0.0, prefills=len(fresh), passes=passes)
    # each record's times are its own share of the round (its rows of the pass, its nodes of the drafting), with
    # the round's totals beside: a student's tokens/s, the Race and the benchmark count no one else's rows
    tree_nodes = sum(len(trees[i]) - 1 for i in live)
    shared = len(decoders) > 1

    def share(i):
        return outs[i][0].rows / max(1, rows)
    for i in fresh:
        part, (logits, feats) = outs[i]
        res = decoders[i].finish_prefill_part(part, logits, feats, t0)
        if res is not None and shared:
            res.verify_seconds, res.round_verify_seconds = verify_s * share(i), verify_s
            res.round_draft_seconds = draft_s if live else 0.0
        records[i] = decoders[i].commit_record(res) if res is not None else None
    for i in live:
        dec = decoders[i]
        mine_draft = draft_s * (len(trees[i]) - 1) / tree_nodes if tree_nodes else 0.0
        res = dec.finish_cycle(trees[i], outs[i][1][0], outs[i][1][1], mine_draft if shared else draft_s,
                               verify_s * share(i) if shared else verify_s)
        if shared:
            res.round_draft_seconds, res.round_verify_seconds = draft_s, verify_s
        res.pass_sessions, res.pass_rows = info.sessions, info.rows
        if shapes[i] is not None and shapes[i] != dec.spec:     # the class's load gave another tree: say so
            res.tree_given = f"{shapes[i].describe()} (you set {dec.spec.describe()})"
        records[i] = dec.commit_record(res)
    return records, info


class Together:
    """Generations stepped in rounds until every one is done (a class without the app: the benchmark's sweep):
    drive it like one generation; each step returns step_together's (records, RoundInfo)."""

    def __init__(self, decoders: list, shapes_of=None):
        self.decoders, self.shapes_of = decoders, shapes_of

    @property
    def done(self) -> bool:
        return all(d.done for d in self.decoders)

    def step(self) -> tuple[list, RoundInfo]:
        live = [d for d in self.decoders if not d.done]
        return step_together(live, self.shapes_of(live) if self.shapes_of else None)
