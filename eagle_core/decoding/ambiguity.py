"""The "How can I" ambiguity (EAGLE paper, Fig. 4/5): why the draft head is fed the *sampled* token.

After "How can I" the target may continue with several tokens t (branches). The feature at t depends on which
t was sampled. A head that sees only (f_I, e(I)) -- the unshifted ablation -- makes ONE prediction for every
branch, which falls between them; the shifted EAGLE head sees (f_I, e(t)) and can land on each branch.

Everything is computed from the real target and heads; the result is a plain dataclass record (`asdict`
gives JSON) that the view draws. What the shifted token buys in tokens (real EAGLE cycles after each branch, per
head) is branch_payoff.py's, kept in the record's `payoff`. Indexing follows the drafter: tokens t_0..t_{n-1} of the prefix (t_{n-1} is
the last token, "I"); head entry j (j = 1..n-1) is (f_{j-1}, e(t_j)) for a shifted head and
(f_{j-1}, e(t_{j-1})) for an unshifted one, at position j-1, with causal attention; the extra entry j = n
predicts the feature at the branch token: (f_I, e(t)) shifted, (f_I, e(I)) unshifted.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

MAX_PREFIX_TOKENS = 64


@dataclass
class TokenP:
    token_id: int
    text: str
    prob: float


@dataclass
class Branch:
    token_id: int
    text: str
    p: float                              # target probability of this branch after the prefix
    real_xy: list[float]                  # PCA of the real feature f_t
    shifted_xy: list[float]               # PCA of the shifted head's prediction from (f_I, e(t))
    dist_shifted: float                   # ||shifted prediction - f_t||
    dist_unshifted: float                 # ||unshifted prediction - f_t||
    cos_shifted: float
    cos_unshifted: float
    target_next: list[TokenP] = field(default_factory=list)      # target's real next-token distribution at t
    shifted_next: list[TokenP] = field(default_factory=list)     # LM head of the shifted prediction
    unshifted_next: list[TokenP] = field(default_factory=list)   # LM head of the unshifted prediction
    # the three probabilities over the union of the lists above (token ids in `vocab`)
    vocab: list[TokenP] = field(default_factory=list)            # prob = target's
    vocab_shifted: list[float] = field(default_factory=list)
    vocab_unshifted: list[float] = field(default_factory=list)
    # full-dimensional check of "lands on its branch": distance from this branch's shifted prediction to every
    # branch's real feature, and the branch whose real feature is nearest (== own index: it lands on its branch)
    dist_to_branches: list[float] = field(default_factory=list)
    nearest_branch: int = -1
    # an EAGLE-3 head's drafts after this branch (its own LM head over its draft vocabulary; no feature to plot:
    # its output is not in the target's feature space), when one is given
    eagle3_next: list[TokenP] = field(default_factory=list)
    vocab_eagle3: list[float] = field(default_factory=list)


@dataclass
class AmbiguityRecord:
    prefix: str
    prefix_tokens: list[str]              # token texts of the prefix (the last one is "I")
    last_token: str
    shifted_head: str
    unshifted_head: str
    branches: list[Branch]
    unshifted_xy: list[float]             # the single prediction from (f_I, e(I))
    last_xy: list[float]                  # the feature f_I itself
    explained_variance: list[float]       # of the two PCA axes (over the features the axes were fitted on)
    mean_dist_shifted: float
    mean_dist_unshifted: float
    pca_fit: str = "real branch features"
    unshifted_nearest: int = -1           # the branch whose real feature the unshifted guess is nearest to
    context: str = "plain text"           # or the chat template (the prefix starts the assistant's reply)
    note: str = ""
    eagle3_head: str = ""                 # the EAGLE-3 head whose drafts the branches carry ("" = none)
    token_ids: list[int] = field(default_factory=list)    # the prefix as the target read it (chat template included)
    # what the shifted token buys in tokens: real EAGLE cycles continuing each branch, per head
    # (branch_payoff.Payoff as a dict; empty until measured)
    payoff: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _topk(probs: torch.Tensor, k: int, text) -> list[TokenP]:
    v, i = torch.topk(probs.float(), k)
    return [TokenP(int(t), text(int(t)), float(p)) for t, p in zip(i.tolist(), v.tolist())]


def _drafted(drafter, feats: torch.Tensor, tokens: list[int], last_tokens: list[int]):
    """What `drafter` (a generation's own: engine.new_drafter) predicts after "tokens t" for each t in
    `last_tokens`: ([B, H] the predicted feature of the entry at the root, [B, V] the draft law q there over the
    target's vocabulary, zero outside the draft vocabulary), each from one catch-up over the prefix's features, as
    a cycle after that prefix drafts. feats: [1, n, H] the target's f_0..f_{n-1} (EAGLE-3: its fused features);
    tokens: t_0..t_{n-1}. The entry at the root reads (f_{n-1}, e(t)) for a shifted head, (f_{n-1}, e(t_{n-1}))
    for an unshifted one, whatever t is."""
    preds, qs = [], []
    for t in last_tokens:
        drafter.reset()
        pred = drafter.catch_up(feats, tokens + [t])               # [1, 1, H]
        tree = drafter.draft(pred, t, tokens[-1], 0.0, 0, 1.0, None)
        preds.append(pred[0, 0].float())
        qs.append(tree.dists[0].float().exp())
    return torch.stack(preds), torch.stack(qs)


CHAT_USER_TURN = "Hi!"


def prefix_ids(target, prefix: str, chat: bool) -> tuple[list[int], int]:
    """Token ids for the prefix and where the prefix itself starts: plain text, or (chat) the start of the
    assistant's reply in the target's chat template, after a short user turn -- where the heads were trained."""
    if chat and getattr(target.tokenizer, "chat_template", None):
        head = target.render_prompt(CHAT_USER_TURN, chat_template=True)
        body = list(target.tokenizer(prefix, add_special_tokens=False)["input_ids"])
        return head + body, len(head)
    return target.render_prompt(prefix, chat_template=False), 0


def _checked_ids(target, shifted_head, unshifted_head, prefix, n_branches: int, chat: bool):
    """(prefix stripped, token ids, where the prefix starts in them), or ValueError for what the page must refuse."""
    prefix = (prefix or "").strip() if prefix is not None else ""
    if not prefix:
        raise ValueError("type a prefix, e.g. “How can I”")
    if not 1 <= n_branches <= 8:
        raise ValueError("branches must be 1..8")
    if getattr(shifted_head, "shift", "shifted") != "shifted" or getattr(unshifted_head, "shift", "") != "unshifted":
        raise ValueError("need one shifted and one unshifted head")
    ids, start = prefix_ids(target, prefix, chat)
    if len(ids) < 2:
        bos = getattr(target.tokenizer, "bos_token_id", None)
        if bos is None or (ids and ids[0] == bos):
            raise ValueError("the prefix needs at least two tokens (e.g. “How can I”)")
        ids = [bos] + ids
    if len(ids) - start > MAX_PREFIX_TOKENS:
        raise ValueError(f"the prefix is {len(ids)} tokens; keep it under {MAX_PREFIX_TOKENS}")
    return prefix, ids, start


@dataclass
class _Features:
    """The target's and the heads' side of the figure, as tensors: the top branches after the prefix, the real
    feature and next-token distribution at each, and what each head predicts there."""
    branch_ids: list[int]
    branch_p: list[float]
    real: torch.Tensor                    # [B, H] real feature at each branch token
    real_next: torch.Tensor               # [B, V] the target's next-token distribution there
    sh: torch.Tensor                      # [B, H] the shifted head's prediction from (f_I, e(t))
    un: torch.Tensor                      # [1, H] the unshifted head's single prediction from (f_I, e(I))
    sh_next: torch.Tensor                 # [B, V] the LM head over sh
    un_next: torch.Tensor                 # [V] the LM head over un
    f_last: torch.Tensor                  # [H] f_I
    e3_next: torch.Tensor | None          # [B, V] the EAGLE-3 head's drafts after each branch, or None


def _features(target, shifted_head, unshifted_head, eagle3_head, ids: list[int], n_branches: int,
              cfg=None) -> _Features:
    """One target pass over the prefix, one over "prefix t" for the top n_branches tokens t, and each head's
    predictions through the drafter a generation with `cfg` drafts with (default: the device's default
    generation's: on a CPU an 8192-token draft vocabulary and a bf16 draft LM head)."""
    from .draft import DraftSpec
    from .engine import default_config, new_drafter
    dev = target.device
    cfg = cfg or default_config(dev.type, getattr(target, "numerics", None))
    logits, feats = target.forward(torch.tensor([ids], device=dev))   # f_0..f_{n-1}
    top = torch.topk(torch.softmax(logits[0, -1].float(), -1), n_branches)
    branch_ids = [int(t) for t in top.indices.tolist()]
    b_logits, b_feats = target.forward(torch.tensor([ids + [t] for t in branch_ids], device=dev))

    def drafter(head):
        return new_drafter(target, head, cfg, DraftSpec(kind="chain", depth=1), len(ids) + 2)

    sh, sh_next = _drafted(drafter(shifted_head), feats, ids, branch_ids)      # [B, H], [B, V]
    un, un_next = _drafted(drafter(unshifted_head), feats, ids, branch_ids[:1])  # one guess, whatever t is
    e3_next = None
    if eagle3_head is not None:
        _, fused = target.forward(torch.tensor([ids], device=dev), logits=False, aux_layers=eagle3_head.aux_layers)
        _, e3_next = _drafted(drafter(eagle3_head), fused, ids, branch_ids)
    return _Features(
        branch_ids=branch_ids, branch_p=[float(p) for p in top.values.tolist()], real=b_feats[:, -1].float(),
        real_next=torch.softmax(b_logits[:, -1].float(), -1), sh=sh, un=un, sh_next=sh_next, un_next=un_next[0],
        f_last=feats[0, -1].float(), e3_next=e3_next)


def _pca_plane(fs: _Features) -> tuple[list[list[float]], list[float]]:
    """2-D PCA: (rows real branches, shifted predictions, the unshifted one, f_I projected; the two axes'
    explained variance). The axes are fitted on the real branch features (the plane in which the branches
    differ); with fewer than 3 branches on all the features shown."""
    allf = torch.cat([fs.real, fs.sh, fs.un, fs.f_last[None]], 0)
    fit = fs.real if len(fs.branch_ids) >= 3 else allf
    mu = fit.mean(0, keepdim=True)
    _, s, v = torch.linalg.svd(fit - mu, full_matrices=False)
    proj = ((allf - mu) @ v[:2].T).tolist()
    var = (s ** 2) / (s ** 2).sum().clamp_min(1e-12)
    var = torch.cat([var, var.new_zeros(2)])[:2]
    return proj, [float(var[0]), float(var[1])]


def _branch(fs: _Features, b: int, proj, cross: torch.Tensor, un_dist: torch.Tensor, k: int, text) -> Branch:
    """Branch b's record: its points, distances, the distributions and their union (sorted by the target's)."""
    B, e3 = len(fs.branch_ids), fs.e3_next
    lists = [_topk(fs.real_next[b], k, text), _topk(fs.sh_next[b], 3, text), _topk(fs.un_next, 3, text)]
    if e3 is not None:
        lists.append(_topk(e3[b], 3, text))
    union = []
    for lst in lists:
        for t in lst:
            if t.token_id not in union:
                union.append(t.token_id)
    union = sorted(union, key=lambda t: -float(fs.real_next[b, t]))
    return Branch(
        token_id=fs.branch_ids[b], text=text(fs.branch_ids[b]), p=fs.branch_p[b], real_xy=proj[b],
        shifted_xy=proj[B + b], dist_shifted=float(cross[b, b]), dist_unshifted=float(un_dist[b]),
        cos_shifted=float(torch.cosine_similarity(fs.sh[b], fs.real[b], 0)),
        cos_unshifted=float(torch.cosine_similarity(fs.un[0], fs.real[b], 0)),
        target_next=_topk(fs.real_next[b], k, text), shifted_next=_topk(fs.sh_next[b], k, text),
        unshifted_next=_topk(fs.un_next, k, text),
        vocab=[TokenP(t, text(t), float(fs.real_next[b, t])) for t in union],
        vocab_shifted=[float(fs.sh_next[b, t]) for t in union],
        vocab_unshifted=[float(fs.un_next[t]) for t in union],
        dist_to_branches=[float(d) for d in cross[b]], nearest_branch=int(cross[b].argmin()),
        eagle3_next=_topk(e3[b], k, text) if e3 is not None else [],
        vocab_eagle3=[float(e3[b, t]) for t in union] if e3 is not None else [])


@torch.inference_mode()
def compute_ambiguity(target, shifted_head, unshifted_head, prefix: str = "How can I", n_branches: int = 4,
                      k: int = 6, chat: bool = False, eagle3_head=None, cfg=None) -> AmbiguityRecord:
    """Real features and head predictions for the top `n_branches` continuations of `prefix`; with `eagle3_head`,
    that head's drafts after each branch too. The heads predict through the drafter of a generation with `cfg`
    (the payoff's shape, whose runs then draft with the same drafter; default the device's default generation)."""
    prefix, ids, start = _checked_ids(target, shifted_head, unshifted_head, prefix, n_branches, chat)
    fs = _features(target, shifted_head, unshifted_head, eagle3_head, ids, n_branches, cfg)
    proj, var = _pca_plane(fs)
    text = target.token_text
    cross = torch.cdist(fs.sh, fs.real)                         # [B, B]: shifted prediction b -> real feature c
    un_dist = torch.cdist(fs.un, fs.real)[0]                    # [B]: the unshifted guess -> real feature c
    B = len(fs.branch_ids)
    branches = [_branch(fs, b, proj, cross, un_dist, k, text) for b in range(B)]
    return AmbiguityRecord(
        prefix=prefix, prefix_tokens=[text(t) for t in ids[start:]], last_token=text(ids[-1]), token_ids=list(ids),
        shifted_head=str(getattr(shifted_head, "path", "shifted")),
        unshifted_head=str(getattr(unshifted_head, "path", "unshifted")), branches=branches,
        eagle3_head=str(getattr(eagle3_head, "path", "eagle3")) if eagle3_head is not None else "",
        unshifted_xy=proj[2 * B], last_xy=proj[2 * B + 1], explained_variance=var,
        pca_fit="real branch features" if B >= 3 else "all features shown",
        unshifted_nearest=int(un_dist.argmin()),
        context="start of the assistant's reply (chat template)" if start else "plain text",
        mean_dist_shifted=sum(b.dist_shifted for b in branches) / B,
        mean_dist_unshifted=sum(b.dist_unshifted for b in branches) / B)
