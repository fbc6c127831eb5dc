"""Exactness at T > 0, shown: the token an EAGLE cycle emits first follows the target's own law.

At one position (the text so far, its last token the cycle's root) this draws N first tokens the way a cycle
makes them -- the head's children of the root drawn from its warped q without replacement (Gumbel-top-k, as
decoding/draft.py draws them), tested one by one against the target's warped p by the engine's own rule
(`sampling.verify_children`: keep x with probability min(1, p'(x)/q'(x)); else p' becomes max(0, p' - q')
normalised, x leaves q', next child; all rejected: one draw from that residual) -- and N draws of plain sampling
from p, and tests whether the two samples come from one law (chi-square test of homogeneity); beside it, the same
test of a second plain sample against the first, which come from one law by construction: the scale a p-value is
read on. Only the root's level is simulated: deeper levels repeat the same rule on the same argument, and the first
token is what the student sees change with the temperature. Dynamic (EAGLE-2) trees choose their children by rank,
not by sampling: their root children are q's top-k, tested by the target rule (keep x with probability p'(x), else
p'(x) <- 0).

p and q are the target's and the head's at that position: one target pass over the text, one head forward
(`root_dists`). Pure tensors in, a plain record out (`asdict` gives JSON) for views/law.py.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from .sampling import gumbel_topk, sample, verify_children, warp_logits

MAX_DRAWS = 5000         # ~1.6 ms a draw over SmolLM2's 49,152 tokens: a few seconds at most
SHOWN = 12               # tokens drawn as bars (the most likely under p), besides any that the residual gave
RESIDUAL_SHOWN = 4       # the residual's most frequent tokens, always bars
MIN_EXPECTED = 5.0       # a token with fewer expected draws (pooled) goes into the test's "other" bin


@dataclass
class LawBar:
    token_id: int
    text: str
    p: float                 # the target's warped probability: what both samples should match
    q: float                 # the draft's warped probability
    eagle: int               # EAGLE's first tokens equal to this one
    plain: int               # plain sampling's draws equal to this one
    eagle_residual: int      # of `eagle`, drawn from the residual (every child rejected)


@dataclass
class LawRecord:
    position: str            # the text's last few tokens (the root is the last)
    temperature: float
    top_p: float
    children: int            # root children drawn per cycle
    rule: str                # "ratio" (children drawn from q) or "target" (q's top-k, dynamic trees)
    n: int
    bars: list[LawBar] = field(default_factory=list)
    other_eagle: int = 0     # draws of tokens outside the bars
    other_plain: int = 0
    other_p: float = 0.0
    accepted: int = 0        # EAGLE draws that were a drafted child kept by the test (the rest: the residual)
    chi2: float = 0.0
    dof: int = 0
    p_value: float = 1.0
    control_p_value: float = 1.0   # the same test of a second plain sample against the first: one law by construction
    seconds: float = 0.0


@torch.inference_mode()
def root_dists(target, head, ids: list[int], cfg):
    """(p, q) over the target's vocabulary for the token after `ids` (its last token the root), for a generation
    with `cfg` (engine.DecodeConfig, T > 0): the target's law warped as the engine warps it, and the draft law the
    root's children are drawn from, as that generation's own drafter makes it (engine.new_drafter: its draft
    vocabulary, q = 0 outside it, and its precision), from one prefill of `ids` and one catch-up of the head, as a
    cycle after that prefill drafts. EAGLE-3: its fused features, its own LM head over its draft vocabulary."""
    from .draft import DraftSpec
    from .engine import new_drafter
    if len(ids) < 2:
        raise ValueError("the law at a position needs at least two tokens before it")
    drafter = new_drafter(target, head, cfg, DraftSpec(kind="chain", depth=1), len(ids) + 1)
    x = torch.tensor([ids], device=target.device)
    logits, feats = target.forward(x, logits="last", aux_layers=tuple(getattr(head, "aux_layers", ())))
    root_feat = drafter.catch_up(feats[:, :-1], ids)        # the head's entries j = 1..n-1, the root's predicted f
    generator = torch.Generator(device=target.device).manual_seed(0)   # (the drafted child is not used)
    tree = drafter.draft(root_feat, ids[-1], ids[-2], cfg.temperature, cfg.top_k_sampling, cfg.top_p, generator)
    p = warp_logits(logits[0, -1], cfg.temperature, cfg.top_k_sampling, cfg.top_p).exp()
    return p, tree.dists[0].float().exp()


def draw_first_tokens(p: torch.Tensor, q: torch.Tensor, children: int, n: int, generator: torch.Generator,
                      rule: str = "ratio") -> tuple[list[int], list[bool]]:
    """n first tokens of a cycle at this node: (tokens, whether each was a kept child)."""
    tokens, kept = [], []
    logq = q.clamp_min(0).log()
    top = torch.topk(logq, children).indices.tolist() if rule == "target" else None
    for _ in range(n):
        kids = top if top is not None else gumbel_topk(logq, children, generator).tolist()
        kids = [t for t in kids if q[t] > 0]          # the drafter never drafts outside q's support
        pos, _, residual = verify_children(p, q if rule == "ratio" else None, kids, rule == "ratio", generator)
        tokens.append(kids[pos] if pos is not None else sample(residual, generator))
        kept.append(pos is not None)
    return tokens, kept


def homogeneity(a: list[int], b: list[int], min_expected: float = MIN_EXPECTED) -> tuple[float, int, float]:
    """(chi2, dof, p-value) of the chi-square test that two samples of tokens come from one law; tokens with
    fewer than `min_expected` expected draws in either sample are pooled into one bin."""
    na, nb = len(a), len(b)
    ca, cb = _counts(a), _counts(b)
    bins, rest = [], [0, 0]
    for t in set(ca) | set(cb):
        x, y = ca.get(t, 0), cb.get(t, 0)
        if min(na, nb) * (x + y) / (na + nb) >= min_expected:
            bins.append((x, y))
        else:
            rest[0] += x
            rest[1] += y
    if sum(rest):
        bins.append(tuple(rest))
    if len(bins) < 2:
        return 0.0, 0, 1.0
    chi2 = 0.0
    for x, y in bins:
        tot = x + y
        for obs, size in ((x, na), (y, nb)):
            exp = size * tot / (na + nb)
            chi2 += (obs - exp) ** 2 / exp
    dof = len(bins) - 1
    pval = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(chi2 / 2, dtype=torch.float64)))
    return chi2, dof, pval


def _counts(xs: list[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out


def same_law(p: torch.Tensor, q: torch.Tensor, children: int, n: int, seed: int, text, *, position: str = "",
             temperature: float = 1.0, top_p: float = 1.0, rule: str = "ratio") -> LawRecord:
    """N first tokens of EAGLE cycles and N plain draws at one node, their histograms and the test."""
    if not 1 <= n <= MAX_DRAWS:
        raise ValueError(f"draws must be 1..{MAX_DRAWS:,}")
    t0 = time.perf_counter()
    p, q = p.float().cpu(), q.float().cpu()
    gen = torch.Generator().manual_seed(int(seed))
    eagle, kept = draw_first_tokens(p, q, max(1, int(children)), n, gen, rule)
    plain = torch.multinomial(p, n, replacement=True, generator=gen).tolist()
    chi2, dof, pval = homogeneity(eagle, plain)
    # the scale a p-value is read on: two samples of one law differ by chance too (p-values uniform on [0, 1])
    control = homogeneity(torch.multinomial(p, n, replacement=True, generator=gen).tolist(), plain)[2]
    ce, cp = _counts(eagle), _counts(plain)
    residual = _counts([t for t, k in zip(eagle, kept) if not k])
    shown = [int(t) for t in torch.topk(p, min(SHOWN, int((p > 0).sum()))).indices.tolist()]
    # the residual's most frequent tokens (the page names them) and any token drawn often are bars too
    often = sorted(residual, key=lambda t: -residual[t])[:RESIDUAL_SHOWN]
    often += [t for t, c in (ce | cp).items() if c >= max(2, n // 50)]
    shown += [t for t in dict.fromkeys(often) if t not in shown]
    bars = [LawBar(t, text(t), float(p[t]), float(q[t]), ce.get(t, 0), cp.get(t, 0), residual.get(t, 0))
            for t in sorted(shown, key=lambda t: -float(p[t]))]
    in_bars = {b.token_id for b in bars}
    return LawRecord(position=position, temperature=float(temperature), top_p=float(top_p), children=int(children),
                     rule=rule, n=n, bars=bars, other_eagle=n - sum(b.eagle for b in bars),
                     other_plain=n - sum(b.plain for b in bars),
                     other_p=max(0.0, 1.0 - math.fsum(float(p[t]) for t in in_bars)), accepted=sum(kept),
                     chi2=chi2, dof=dof, p_value=pval, control_p_value=control, seconds=time.perf_counter() - t0)
