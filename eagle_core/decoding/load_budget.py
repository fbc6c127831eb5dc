"""Trees sized by the load: with B generations in a round, which tree each may draft.

A round costs one packed verification pass over every tree's rows plus the round's drafting (every tree grown in
lockstep, each level's head forwards packed: draft_calls.py); it yields each generation its accepted tokens plus
one. With B generations drafting trees of r rows (root included):

    tokens per second  =  B * tau(r)  /  ( pass(B * r) + draft(B, r) )

pass(N) is the target's measured cost of a pass over N rows (`measure_pass_ms`, at load), draft(B, r) the measured
drafting time of a round of B trees of r rows (the rounds' own timings, `LoadBudget.observe`, kept per tree size
and per power-of-two class size: packed drafting costs a student less in a larger class), tau(r) the tokens a cycle
yields with such a tree: 1 for no tree, else the head's measured tau for the shape (the benchmark's report,
assets/bench/heads_eagle3.json, held-out ShareGPT), updated by what the rounds see. Plain decoding (r = 1, no
draft) is always a candidate, so by this model a round never yields fewer tokens per second than plain batched
decoding of the same generations: one student keeps its own tree, a full class drafts a short chain or none.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field

import torch

from ..paths import ASSETS
from .draft import DraftSpec
from .presets import chain_choices, tree_presets

PASS_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
REPORT = os.path.join(ASSETS, "bench", "heads_eagle3.json")
# the report's shapes: rows of one tree (root included) -> the shape's name in the report
REPORT_SHAPES = {3: "chain-2", 6: "smollm2-cpu", 26: "mc_sim_7b_63"}


@torch.inference_mode()
def measure_pass_ms(target, rows=PASS_ROWS, prefix: int = 128, reps: int = 3) -> dict[int, float]:
    """{rows: best-of-reps milliseconds} of one target pass over `rows` tokens after a `prefix`-token prompt, as
    a round runs it (the engine's cache, a causal mask over the new rows)."""
    from .engine import kv_cache_dtype, new_kv_cache, tree_attention_mask
    dev = target.device
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, min(target.vocab_size, 20000), (1, prefix), generator=g).to(dev)
    out = {}
    for r in rows:
        ids = torch.randint(100, min(target.vocab_size, 20000), (1, r), generator=g).to(dev)
        pos = torch.arange(prefix, prefix + r, device=dev)[None]
        mask = tree_attention_mask(torch.tril(torch.ones(r, r, dtype=torch.bool)), prefix, target.dtype, dev) \
            if r > 1 else None
        best = float("inf")
        for _ in range(reps):
            cache = new_kv_cache(prefix + r + 1, kv_cache_dtype(target))
            target.forward(prompt, past_key_values=cache, logits=False)
            t0 = time.perf_counter()
            target.forward(ids, position_ids=pos, past_key_values=cache, attention_mask=mask)
            best = min(best, time.perf_counter() - t0)
        out[r] = best * 1e3
    return out


def interpolate(table: dict[int, float], x: float) -> float:
    """Piecewise-linear in x through the measured points; beyond the last, the last segment's slope."""
    xs = sorted(table)
    if x <= xs[0]:
        return table[xs[0]]
    for a, b in zip(xs, xs[1:]):
        if x <= b:
            return table[a] + (table[b] - table[a]) * (x - a) / (b - a)
    a, b = xs[-2], xs[-1]
    return table[b] + (table[b] - table[a]) * (x - b) / (b - a)


def reported_tau(kind: str = "eagle1", path: str = REPORT) -> dict[int, float]:
    """{rows: tau} of a shipped head from the benchmark's report: EAGLE-1's shifted head ("shipped") or the
    EAGLE-3 head ("shipped_eagle3"); {} when the report is missing."""
    try:
        with open(path) as f:
            heads = json.load(f)["heads"]
    except (OSError, ValueError, KeyError):
        return {}
    by_shape = heads.get("shipped_eagle3" if kind == "eagle3" else "shipped") or {}
    return {rows: float(by_shape[name]["tau"]) for rows, name in REPORT_SHAPES.items()
            if isinstance(by_shape.get(name), dict) and by_shape[name].get("tau")}


def shape_of(rows: int, own: DraftSpec) -> DraftSpec:
    """The tree of `rows` rows a generation with tree `own` drafts: none, a chain, the CPU tree, or its own."""
    if rows <= 1 or own.kind == "vanilla":
        return DraftSpec(kind="vanilla")
    if rows >= own.max_nodes:
        return own
    if rows == 6 and "smollm2-cpu" in tree_presets():
        choices = tree_presets()["smollm2-cpu"]
        cand = DraftSpec(kind="static", choices=choices)
        if cand.max_head_entries <= own.max_head_entries and cand.max_nodes == 6:
            return cand
    return DraftSpec(kind="static", choices=chain_choices(rows - 1))


@dataclass
class LoadBudget:
    """Chooses each round's tree size from measured pass costs, drafting times and acceptance (module docstring)."""
    pass_ms: dict[int, float]
    tau: dict[str, dict[int, float]] = field(default_factory=dict)   # head kind -> {rows: tau}
    # (rows, class size bucket) -> measured drafting ms per tree in such a round (running mean); a key `rows`
    # alone is a prior for any class size
    draft_ms: dict = field(default_factory=dict)
    seen: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        self.draft_ms = {(k if isinstance(k, tuple) else (k, 0)): v for k, v in self.draft_ms.items()}

    def tau_of(self, kind: str, rows: int) -> float:
        return 1.0 if rows <= 1 else self.tau.get(kind, {}).get(rows, 1.0)

    def draft_cost_ms(self, sessions: int, rows: int) -> float:
        """Drafting ms of a round of `sessions` trees of `rows` rows: per tree, what rounds of the nearest class
        size measured (a smaller class first: it costs a tree more, so the estimate errs towards plain); 0 for no
        tree, or for a size never seen yet (the next such round measures it)."""
        if rows <= 1:
            return 0.0
        b = bucket(sessions)
        seen = sorted(k[1] for k in self.draft_ms if k[0] == rows)
        if not seen:
            return 0.0
        lower = [x for x in seen if x <= b]
        near = lower[-1] if lower else seen[0]
        return sessions * self.draft_ms[(rows, near)]

    def rate(self, sessions: int, rows: int, kind: str) -> float:
        """Tokens per ms of a round of `sessions` generations each drafting `rows`-row trees."""
        cost = interpolate(self.pass_ms, sessions * rows) + self.draft_cost_ms(sessions, rows)
        return sessions * self.tau_of(kind, rows) / cost

    def rows_for(self, sessions: int, own: DraftSpec, kind: str = "eagle1") -> int:
        """The tree size (rows) of every generation in a round of `sessions`: a generation alone keeps its own
        tree; in a class, the measured best of none, the shapes the report measured, and its own (never larger)."""
        if own.kind == "vanilla":
            return 1
        if sessions <= 1:
            return own.max_nodes
        cands = {1} | {r for r in self.tau.get(kind, {}) if r <= own.max_nodes}
        if own.max_nodes in self.tau.get(kind, {}) or not cands - {1}:
            cands.add(own.max_nodes)
        return max(sorted(cands), key=lambda r: self.rate(sessions, r, kind))

    def observe(self, rows: int, draft_seconds: float, sessions: int = 1) -> None:
        """A round's measured drafting time: `sessions` trees of `rows` rows in `draft_seconds` (a running mean
        per tree size and class size bucket)."""
        key = (rows, bucket(sessions))
        with self.lock:
            if key not in self.draft_ms and (rows, 0) in self.draft_ms:   # a prior counts as one round
                self.draft_ms[key], self.seen[key] = self.draft_ms[(rows, 0)], 1
            n = self.seen.get(key, 0)
            self.draft_ms[key] = (self.draft_ms.get(key, 0.0) * n + draft_seconds * 1e3 / sessions) / (n + 1)
            self.seen[key] = min(n + 1, 50)     # a window of ~50 rounds follows a changing machine

    def observe_round(self, records, info) -> None:
        """A round's (decoding/batch.step_together: its records and RoundInfo) drafting time, when its trees were
        all of one size (a mixed round says nothing about either size alone)."""
        sizes = {len(r.nodes) for r in records if r.cycle > 0}
        drafted = info.sessions - info.prefills
        if len(sizes) == 1 and drafted and max(sizes) > 1:
            self.observe(sizes.pop(), info.draft_seconds, drafted)


def bucket(sessions: int) -> int:
    """A class size's bucket: the power of two at or below it (1, 2, 4, 8, ...)."""
    return 1 << (max(1, int(sessions)).bit_length() - 1)


def round_shapes(budget: LoadBudget, decoders: list) -> list[DraftSpec | None]:
    """Each generation's tree for a round of these decoders (None: its own): sized by how many will draft in it
    (the ones past their prefill); a generation alone keeps its own tree."""
    live = [d for d in decoders if d.cycles]
    if len(live) <= 1:
        return [None] * len(decoders)
    out = []
    for d in decoders:
        kind = "eagle3" if getattr(d.head, "kind_name", "") == "eagle3" else "eagle1"
        rows = budget.rows_for(len(live), d.spec, kind)
        out.append(None if rows >= d.spec.max_nodes else shape_of(rows, d.spec))
    return out


def new_budget(target) -> LoadBudget:
    """A target's budget: its pass costs measured now (a few seconds), the shipped heads' reported tau."""
    return LoadBudget(measure_pass_ms(target), {"eagle1": reported_tau("eagle1"), "eagle3": reported_tau("eagle3")})
