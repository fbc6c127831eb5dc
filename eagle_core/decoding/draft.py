"""Drafting: the EAGLE head grows a token tree, one batched head forward per tree level.

Three shapes share this one code path:
  chain   -- depth d, top-1 (or one sample) at each level: a static tree [[0], [0,0], [0,0,0], ...]
  static  -- EAGLE-1: a fixed list of choice paths (ranks), e.g. the paper's 26-token `mc_sim_7b_63`
  dynamic -- EAGLE-2: expand the `top_k` nodes of best cumulative log-probability at every level, then rerank
             all drafted nodes and keep the best `total_tokens`

Head entries (see head.py): the entry for sequence position j predicts f_j from (f_{j-1}, e(t_j)) when the
head is `shifted`, or from (f_{j-1}, e(t_{j-1})) when `unshifted`. Inside the tree f_{j-1} is the parent's
*predicted* feature. The head keeps a KV cache of committed entries; tree entries are appended while drafting
and dropped afterwards.
"""
from __future__ import annotations

import hashlib
import copy
import math
import threading
import weakref
from dataclasses import dataclass, field

import torch

from .sampling import gumbel_topk, warp_logits
from ..model.cpu_kernels import pack_cpu_linears
from ..model.planned_linear import PlannedLinear
from .presets import chain_choices, children_of_path, tree_presets
from .draft_calls import HeadCall, LmCall, run_alone
from .tree import DraftTree

@dataclass
class DraftSpec:
    kind: str = "static"                # chain | static | dynamic | vanilla
    choices: list | None = None         # static: the choice paths
    depth: int = 5                      # chain / dynamic depth
    top_k: int = 8                      # dynamic: nodes expanded per level and children per node
    total_tokens: int = 60              # dynamic: drafted nodes kept after reranking (root excluded)

    def describe(self) -> str:
        """In a student's words: "no tree", "a chain of 3", "a tree of 5 nodes", "a dynamic tree (depth 3, ...)"."""
        if self.kind == "vanilla":
            return "no tree"
        if self.kind == "chain":
            return f"a chain of {self.depth}"
        if self.kind == "dynamic":
            return f"a dynamic tree (depth {self.depth}, top-k {self.top_k}, {self.total_tokens} tokens)"
        return f"a tree of {len(self.static_choices())} nodes"

    def static_choices(self) -> list[list[int]]:
        if self.kind == "chain":
            return chain_choices(self.depth)
        if self.kind == "vanilla":
            return []
        choices = tree_presets()["mc_sim_7b_63"] if self.choices is None else self.choices
        if not choices:   # an empty static tree drafts nothing: a config error, never a silent default
            raise ValueError("a static tree needs at least one drafted node (got an empty choice list)")
        return [list(c) for c in choices]

    @property
    def max_nodes(self) -> int:
        if self.kind == "dynamic":
            return self.total_tokens + 1
        return len(self.static_choices()) + 1

    @property
    def max_head_entries(self) -> int:
        """Tree entries the head appends while drafting: every expanded node (dynamic: top_k per level)."""
        if self.kind == "dynamic":
            return self.top_k * self.depth
        return self.max_nodes

    @property
    def max_depth(self) -> int:
        if self.kind == "dynamic":
            return self.depth
        ch = self.static_choices()
        return max((len(c) for c in ch), default=0)


_BUILD_LOCK = threading.RLock()   # the per-target / per-head caches below are built once, by one thread


def draft_lm_head(target, draft_vocab: torch.Tensor | None, dtype: torch.dtype, mode: str | None = None):
    """(vocab ids or None, linear module) of the draft LM head: the target's rows for the draft vocabulary (or all
    of them) in the draft dtype, weight pre-packed on a CPU (kernel plan `mode`, default the environment's).
    Cached on the target: built once per (vocab, dtype, mode)."""
    lm = target.lm_head
    key = (None, dtype, mode)
    if draft_vocab is not None:   # exact: the size and a SHA-256 of every id (as int64, in order)
        data = draft_vocab.detach().reshape(-1).to(device="cpu", dtype=torch.int64).numpy().tobytes()
        key = (int(draft_vocab.numel()), hashlib.sha256(data).hexdigest(), dtype, mode)
    with _BUILD_LOCK:
        cache = target.__dict__.setdefault("_draft_lm_cache", {})
        if key not in cache:
            ids = None if draft_vocab is None else draft_vocab.to(lm.weight.device)
            w = lm.weight if ids is None else lm.weight[ids]
            b = lm.bias if (lm.bias is None or ids is None) else lm.bias[ids]
            cache[key] = (ids, frozen_linear(w.to(dtype).contiguous(), None if b is None else b.to(dtype).contiguous(),
                                             mode))
        return cache[key]


# Per-head caches (an EAGLE-3 head's LM-head copies, a head's copies in other dtypes), kept beside the head rather
# than on it, so that copying a head copies none of them.
_LM_COPIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_DTYPE_COPIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def eagle3_lm_head(head, dtype: torch.dtype, mode: str | None = None) -> torch.nn.Linear:
    """An EAGLE-3 head's own LM head in `dtype`, pre-packed on a CPU (kernel plan `mode`; it shares the head's
    weight when the dtype needs no copy). Cached per head, dtype, mode and weight version: a head trained on in
    place gets a new one."""
    w = head.lm_head.weight
    try:
        version = w._version
    except RuntimeError:   # a head made under inference_mode has no version counter (and is not trained on)
        version = 0
    key = (dtype, version, mode)
    with _BUILD_LOCK:
        cache = _LM_COPIES.setdefault(head, {})
        if key not in cache:
            for stale in [k for k in cache if k[1] != version]:
                del cache[stale]
            cache[key] = frozen_linear(w.detach().to(dtype).contiguous(), None, mode)
        return cache[key]


def frozen_linear(weight: torch.Tensor, bias: torch.Tensor | None, mode: str | None = None) -> torch.nn.Linear:
    """An inference-only linear layer over these tensors (shared, not copied), planned on a CPU (`mode`)."""
    lin = PlannedLinear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    lin.weight = torch.nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        lin.bias = torch.nn.Parameter(bias, requires_grad=False)
    pack_cpu_linears(lin, mode=mode)
    return lin


def head_in_dtype(head, dtype: torch.dtype, mode: str | None = None):
    """The head with weights in `dtype` (a cached copy when it differs, or when kernel plan `mode` is asked for):
    drafting precision only changes q."""
    if head.fc.weight.dtype == dtype and mode is None:
        return head
    with _BUILD_LOCK:   # sessions build decoders concurrently: one copy per head, dtype and mode
        copies = _DTYPE_COPIES.setdefault(head, {})
        if (dtype, mode) not in copies:
            clone = copy.deepcopy(head).to(dtype).requires_grad_(False)   # planned layers copy unplanned
            if clone.fc.weight.device.type == "cpu":   # an inference-only copy: plan its kernels
                pack_cpu_linears(clone, mode=mode)
            copies[(dtype, mode)] = clone
        return copies[(dtype, mode)]


class Drafter:
    """Runs the head over committed entries and grows one tree per cycle."""

    def __init__(self, head, target, spec: DraftSpec, max_len: int, draft_vocab: torch.Tensor | None = None,
                 dtype: torch.dtype | None = None, lm_dtype: torch.dtype | None = None, kernels: str | None = None):
        """dtype: the head's (default its weights'); lm_dtype: the draft LM head's (default dtype): "mixed" on
        a CPU is an fp32 head and a bf16 LM head, the head's many small ops cheaper in fp32, the LM head's weight
        bytes halved. kernels="q8" (a CPU head in fp32): the head's and the draft LM head's weights as Q8_0 blocks
        on the GGUF block kernel (cpu_kernels.py), row-independent at every row count; where that kernel is not
        built here the draft keeps the plan below and `kernels_note` says why."""
        self.dtype = dtype or head.fc.weight.dtype
        cpu = head.fc.weight.device.type == "cpu"
        # where the target's plan is row-independent the draft's is too, so that a round's packed drafting
        # (draft_calls.py) gives each tree the bits it gets alone
        mode = "exact" if cpu and getattr(target, "row_independent", False) else None
        self.kernels_note = None
        if kernels == "q8" and cpu and self.dtype == torch.float32 and (lm_dtype or self.dtype) == torch.float32:
            from ..model import gguf_blocks
            why = gguf_blocks.why_unavailable()
            if why is None:
                mode = "q8"
            else:
                self.kernels_note = f"q8 drafting not available: {why}"
        elif kernels == "q8":
            self.kernels_note = "q8 drafting needs an fp32 head on a CPU"
        self.kernels = mode
        head = head_in_dtype(head, self.dtype, mode)
        self.head, self.target, self.spec = head, target, spec
        self.cache = head.new_cache(max_len + spec.max_head_entries + 8)
        self.shifted = head.shift == "shifted"
        self.embed = target.embed_tokens
        self.vocab_size = target.vocab_size
        if getattr(head, "kind_name", "") == "eagle3":
            # EAGLE-3 drafts through its own norm and LM head over its own draft vocabulary (head3.py); the LM head
            # as EAGLE-1's draft LM head: a pre-packed copy in the LM dtype ("mixed": bf16), the norm in the head's
            ids = head.target_ids
            full = ids.numel() == self.vocab_size and bool((ids == torch.arange(ids.numel(), device=ids.device)).all())
            self.vocab_ids = None if full else ids
            self.lm_dtype = lm_dtype or self.dtype
            self.lm = eagle3_lm_head(head, self.lm_dtype, mode)
            self.lm_norm = head.norm
        else:
            # the draft's LM head: the target's, or its rows for the draft vocabulary (vocab.py), in the draft dtype
            self.vocab_ids, self.lm = draft_lm_head(target, draft_vocab, lm_dtype or self.dtype, mode)
            self.lm_dtype = self.lm.weight.dtype
            self.lm_norm = None   # EAGLE-1 heads predict the normed feature the target's LM head reads
        self.neg = torch.finfo(head.fc.weight.dtype).min
        self._children_of_path = children_of_path(spec.static_choices()) if spec.kind in ("chain", "static") else {}

    def _draft_logits(self, feats: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits of predicted features [F, H] (EAGLE-3: its final norm in the head's dtype)."""
        if self.lm_norm is not None:
            feats = self.lm_norm(feats)
        return self.lm(feats.to(self.lm_dtype))

    def _head(self, feats, tokens, positions, visible_tree) -> HeadCall:
        """One head forward, to be run (draft_calls.py). visible_tree: [n, n_tree_entries_so_far + n] bool over
        tree entries (None: causal)."""
        dev = self.cache.k.device
        n = feats.shape[1]
        L = self.cache.length
        if visible_tree is None:  # committed entries: see everything cached + causal among themselves
            mask = torch.zeros(n, L + n, device=dev, dtype=self.dtype)
            mask[:, L:] = torch.full((n, n), self.neg, device=dev, dtype=self.dtype).triu(1)
        else:
            base = self.committed
            mask = torch.full((n, L + n), self.neg, device=dev, dtype=self.dtype)
            mask[:, :base] = 0
            mask[:, base:].masked_fill_(visible_tree.to(dev), 0)
        return HeadCall(self, feats, list(tokens), list(positions), mask)

    # ------------------------------------------------------------------ committed entries
    def catch_up(self, feats: torch.Tensor, all_tokens: list[int]):
        """Append head entries for committed positions whose true features are now known.

        feats: [1, P, H] true features f_{c-1} .. f_{n-1} for the P pending entries j = c .. n (c = cached + 1,
        n = len(all_tokens) - 1 is the root's position). Returns the root entry's predicted feature [1, 1, H].
        """
        return run_alone(self.catch_up_steps(feats, all_tokens))

    def catch_up_steps(self, feats: torch.Tensor, all_tokens: list[int]):
        """`catch_up` as a generator of its one head forward (draft_calls.py)."""
        P = feats.shape[1]
        n = len(all_tokens) - 1
        js = list(range(n - P + 1, n + 1))
        toks = [all_tokens[j] if self.shifted else all_tokens[j - 1] for j in js]
        out = yield self._head(feats, toks, [j - 1 for j in js], None)
        self.committed = self.cache.length
        self.root_position = n
        return out[:, -1:]

    def reset(self):
        self.cache.length = 0
        self.committed = 0

    def checkpoint(self) -> tuple:
        """What a cycle changes here (the head cache's length, the committed entries, the root's position, and a
        smaller tree's shape while it is drafted): a failed round puts it back (EagleDecoder.restore). Entries
        below the length are never written again by a later append, so the length alone restores the cache."""
        return (self.cache.length, getattr(self, "committed", 0), getattr(self, "root_position", None), self.spec,
                self._children_of_path)

    def restore(self, state: tuple):
        self.cache.length, self.committed, self.root_position, self.spec, self._children_of_path = state

    # ------------------------------------------------------------------ the tree
    @torch.inference_mode()
    def draft(self, root_feat: torch.Tensor, root_token: int, parent_token: int, temperature: float,
              top_k: int, top_p: float, generator, spec: DraftSpec | None = None) -> DraftTree:
        """The tree (draft_steps), its forwards run as they come."""
        return run_alone(self.draft_steps(root_feat, root_token, parent_token, temperature, top_k, top_p,
                                          generator, spec))

    def draft_steps(self, root_feat: torch.Tensor, root_token: int, parent_token: int, temperature: float,
                    top_k: int, top_p: float, generator, spec: DraftSpec | None = None):
        """A generator of the tree's forwards (draft_calls.py: alone, or packed with a round's other trees) that
        returns the tree. Grow the tree from the root's predicted feature (output of `catch_up`), one level per head forward.

        Chain and static trees at T > 0 draw children without replacement from the warped draft distribution q
        (the verifier's ratio rule); at T = 0 they take q's top-k. EAGLE-2 dynamic trees rank candidates on the
        draft's own unwarped log-probabilities at any temperature, as the reference implementation does, and
        their children are deterministic (the verifier's target rule, exact under any warper).
        A node never gets a child outside q's support: when q has fewer tokens than the shape asks for (top-p,
        top-k, or underflow at low T) that node gets fewer children and `tree.skipped` counts the missing ones.
        """
        own = self.spec
        if spec is not None and spec != own:   # this cycle's shape (a smaller tree under load: decoding/batch.py)
            if spec.max_head_entries > own.max_head_entries:
                raise ValueError("a cycle's tree may be smaller than the generation's, not larger")
            self.spec, kids = spec, self._children_of_path
            if spec.kind in ("chain", "static"):
                self._children_of_path = children_of_path(spec.static_choices())
            try:
                return (yield from self.draft_steps(root_feat, root_token, parent_token, temperature, top_k,
                                                    top_p, generator))
            finally:
                self.spec, self._children_of_path = own, kids
        tree = DraftTree.root_only(root_token)
        if self.spec.kind == "vanilla":
            return tree
        sample = temperature > 0 and self.spec.kind in ("chain", "static")
        if sample:
            warp = lambda x: warp_logits(x, temperature, top_k, top_p)  # noqa: E731 -- q of the ratio rule
        else:
            warp = lambda x: torch.log_softmax(x.float(), dim=-1)       # noqa: E731 -- ranking only
        grow = _Growth(tree, root_token, sample, generator)
        frontier, frontier_feats = [0], root_feat        # nodes whose children come next, their predicted features
        for level in range(1, self.spec.max_depth + 1):
            small, logp = yield from self._level_logprobs(frontier_feats[0], warp)
            for i, v in enumerate(frontier):
                tree.dists[v] = logp[i]
            new_nodes = self._add_children(grow, frontier, small, logp)
            if new_nodes is None or level == self.spec.max_depth:
                break
            expand = self._to_expand(grow, new_nodes)
            if not expand:
                break
            frontier_feats = yield from self._expand(grow, expand, frontier_feats, level)
            frontier = [node for node, _ in expand]
        self.cache.length = self.committed   # drop the tree entries
        if self.spec.kind == "dynamic":
            tree = _rerank(tree, self.spec.total_tokens)
        return tree

    def _level_logprobs(self, feats: torch.Tensor, warp):
        """(draft-vocabulary log-probs [F, K], the same over the full vocabulary [F, V]: q = 0 outside the draft
        vocabulary) of the frontier's predicted features [F, H]."""
        small = warp((yield LmCall(self, feats)).float())
        if self.vocab_ids is None:
            return small, small
        full = small.new_full((small.shape[0], self.vocab_size), float("-inf")).index_copy_(1, self.vocab_ids, small)
        return small, full

    def _add_children(self, grow: "_Growth", frontier: list[int], small, logp):
        """Choose every frontier node's children (ranked over the draft vocabulary: a 6x smaller top-k) and add
        them; returns [(node, frontier index)], or None when the shape asks for no children at this level."""
        tree, spec = grow.tree, self.spec
        if spec.kind == "dynamic":
            want = [spec.top_k] * len(frontier)
        else:
            want = [len(self._children_of_path.get(grow.paths[v], [])) for v in frontier]
        k = max(want, default=0)
        if k == 0:
            return None
        pool, ids = (small, self.vocab_ids) if k <= small.shape[-1] else (logp, None)
        idx = gumbel_topk(pool, k, grow.generator) if grow.sample else torch.topk(pool, k, dim=-1).indices
        vals_l = pool.gather(-1, idx).tolist()
        idx_l = (idx if ids is None else ids[idx]).tolist()
        new_nodes = []
        for fi, v in enumerate(frontier):
            # both top-k and Gumbel-top-k put q = 0 tokens last: keep the drafted prefix inside q's support
            got = [(t, lp) for t, lp in zip(idx_l[fi][:want[fi]], vals_l[fi][:want[fi]]) if lp > float("-inf")]
            tree.skipped += want[fi] - len(got)
            for r, (t, lp) in enumerate(got):
                node = tree.add(t, v, q=math.exp(lp), score=tree.nodes[v].score + lp, sampled=grow.sample)
                if spec.kind != "dynamic":
                    grow.paths[node] = grow.paths[v] + (r,)
                new_nodes.append((node, fi))
        return new_nodes

    def _to_expand(self, grow: "_Growth", new_nodes: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Which new nodes get children at the next level: EAGLE-2's top_k by cumulative log-probability, or the
        static shape's nodes that have children."""
        if self.spec.kind == "dynamic":
            ranked = sorted(new_nodes, key=lambda nf: -grow.tree.nodes[nf[0]].score)[:self.spec.top_k]
            return sorted(ranked)
        return [nf for nf in new_nodes if grow.paths[nf[0]] in self._children_of_path]

    def _expand(self, grow: "_Growth", expand, frontier_feats, level: int) -> torch.Tensor:
        """One batched head forward for all expanded nodes: each sees the committed entries and its ancestors'
        tree entries (ancestry mask). Returns their predicted features [1, len(expand), H]."""
        tree, entry_of = grow.tree, grow.entry_of
        n_entries = len(entry_of)
        vis = torch.zeros(len(expand), n_entries + len(expand), dtype=torch.bool)
        feats, toks, pos = [], [], []
        for r, (node, fi) in enumerate(expand):
            a = tree.nodes[node].parent
            while a > 0:
                vis[r, entry_of[a]] = True
                a = tree.nodes[a].parent
            vis[r, n_entries + r] = True
            feats.append(frontier_feats[:, fi])
            par = tree.nodes[node].parent
            toks.append(tree.nodes[node].token if self.shifted
                        else (tree.nodes[par].token if par > 0 else grow.root_token))
            pos.append(self.root_position + level - 1)
        for r, (node, _) in enumerate(expand):
            entry_of[node] = n_entries + r
        return (yield self._head(torch.stack(feats, dim=1), toks, pos, vis))


@dataclass
class _Growth:
    """One tree while it grows: the sampling choice and, per node, its rank path (static trees) and its entry
    among the tree entries of the head cache."""
    tree: DraftTree
    root_token: int
    sample: bool
    generator: object
    paths: dict = field(default_factory=lambda: {0: ()})
    entry_of: dict = field(default_factory=dict)


def _rerank(tree: DraftTree, total_tokens: int) -> DraftTree:
    """EAGLE-2: keep the `total_tokens` drafted nodes of best cumulative log-probability.

    A child's score never exceeds its parent's, so (breaking ties by depth) every kept node's ancestors are
    kept too and the result is still a tree.
    """
    order = sorted(range(1, len(tree)), key=lambda i: (-tree.nodes[i].score, tree.nodes[i].depth, i))
    return tree.subtree([0] + order[:total_tokens])
