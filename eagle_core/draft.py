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

import glob
import json
import math
import os
import warnings
from dataclasses import dataclass, field

import torch

from .sampling import gumbel_topk, warp_logits
from .target import pack_cpu_linears

# EAGLE-1's default tree for 7B targets (SafeAILab/EAGLE choices.py, mc_sim_7b_63): 25 drafted tokens + root,
# depth 5, widths 4/8/8/3/2.
MC_SIM_7B_63 = [[0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
                [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
                [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]]

TREE_PRESETS = {
    "mc_sim_7b_63": MC_SIM_7B_63,
    # small trees for a CPU, where every extra verified token costs real time (a 12-token verify pass costs
    # ~1.8 one-token passes on the 2-core dev machine)
    "cpu-4": [[0], [1], [2], [0, 0]],
    "cpu-6": [[0], [1], [2], [0, 0], [1, 0], [0, 0, 0]],
    "cpu-12": [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1], [0, 1, 0],
               [0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]],
    "cpu-8": [[0], [1], [0, 0], [1, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]],
}


def _load_fitted_trees(folder: str) -> dict:
    """Trees fitted to measured acceptance by `python -m eagle_core.tree_fit` (assets/trees/NAME.json)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        try:
            with open(path) as f:
                choices = [[int(r) for r in c] for c in json.load(f)["choices"]]
            children_of_path(choices)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            warnings.warn(f"skipping tree file {path}: {exc}")
            continue
        out[os.path.splitext(os.path.basename(path))[0]] = choices
    return out


def chain_choices(depth: int) -> list[list[int]]:
    return [[0] * d for d in range(1, depth + 1)]


def children_of_path(choices) -> dict:
    """{parent path: sorted child ranks}; checks that the choices form a tree with ranks 0..k-1 per node
    (sampled children are the first k draws without replacement, so a rank cannot be skipped)."""
    kids = {}
    paths = {tuple(c) for c in choices}
    for c in choices:
        c = tuple(int(r) for r in c)
        if not c or min(c) < 0:
            raise ValueError(f"bad tree choice {list(c)}")
        if len(c) > 1 and c[:-1] not in paths:
            raise ValueError(f"tree choice {list(c)} has no parent {list(c[:-1])} in the tree")
        kids.setdefault(c[:-1], []).append(c[-1])
    for parent, ranks in kids.items():
        if sorted(ranks) != list(range(len(ranks))):
            raise ValueError(f"children of {list(parent)} have ranks {sorted(ranks)}; need 0..{len(ranks) - 1}")
        kids[parent] = sorted(ranks)
    return kids


TREE_PRESETS.update(_load_fitted_trees(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                     "assets", "trees")))


@dataclass
class DraftTree:
    """A drafted tree. Node 0 is the root (the last committed token); nodes are in non-decreasing depth."""
    tokens: list[int]
    parents: list[int]
    depths: list[int]
    q: list[float]              # q of the token under its parent's draft distribution
    scores: list[float]         # cumulative log q
    sampled: list[bool]         # children drawn from q (multi-round rule) or chosen top-k (one-hot rule)
    child_lists: list[list[int]] = field(default_factory=list)   # children in drafting order
    dists: dict = field(default_factory=dict)   # node -> draft log-probs over the vocabulary at that node

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def root_only(cls, token: int) -> "DraftTree":
        """The tree before any drafting: just the root (plain decoding verifies exactly this)."""
        return cls(tokens=[token], parents=[-1], depths=[0], q=[1.0], scores=[0.0], sampled=[False], child_lists=[[]])

    def ancestry(self) -> torch.Tensor:
        """[N, N] bool: row i marks node i and its ancestors (the tree attention pattern)."""
        n = len(self.tokens)
        anc = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            if self.parents[i] >= 0:
                anc[i] = anc[self.parents[i]]
            anc[i, i] = True
        return anc


@dataclass
class DraftSpec:
    kind: str = "static"                # chain | static | dynamic | vanilla
    choices: list | None = None         # static: the choice paths
    depth: int = 5                      # chain / dynamic depth
    top_k: int = 8                      # dynamic: nodes expanded per level and children per node
    total_tokens: int = 60              # dynamic: drafted nodes kept after reranking (root excluded)

    def static_choices(self) -> list[list[int]]:
        if self.kind == "chain":
            return chain_choices(self.depth)
        if self.kind == "vanilla":
            return []
        return [list(c) for c in (self.choices or TREE_PRESETS["mc_sim_7b_63"])]

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


def draft_lm_head(target, draft_vocab: torch.Tensor | None, dtype: torch.dtype):
    """(vocab ids or None, linear module) of the draft LM head: the target's rows for the draft vocabulary (or all
    of them) in the draft dtype, weight pre-packed on a CPU. Cached on the target: built once per (vocab, dtype)."""
    lm = target.lm_head
    cache = target.__dict__.setdefault("_draft_lm_cache", {})
    key = (None if draft_vocab is None else (int(draft_vocab.numel()), int(draft_vocab[:64].sum())), dtype)
    if key not in cache:
        ids = None if draft_vocab is None else draft_vocab.to(lm.weight.device)
        w = lm.weight if ids is None else lm.weight[ids]
        b = lm.bias if (lm.bias is None or ids is None) else lm.bias[ids]
        cache[key] = (ids, frozen_linear(w.to(dtype).contiguous(), None if b is None else b.to(dtype).contiguous()))
    return cache[key]


def frozen_linear(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.nn.Linear:
    """An inference-only nn.Linear over these tensors (shared, not copied), pre-packed on a CPU."""
    lin = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    lin.weight = torch.nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        lin.bias = torch.nn.Parameter(bias, requires_grad=False)
    pack_cpu_linears(lin)
    return lin


def head_in_dtype(head, dtype: torch.dtype):
    """The head with weights in `dtype` (a cached copy when it differs): drafting precision only changes q."""
    if head.fc.weight.dtype == dtype:
        return head
    copies = head.__dict__.setdefault("_dtype_copies", {})
    if dtype not in copies:
        import copy
        clone = copy.deepcopy(head)
        clone.__dict__.pop("_dtype_copies", None)
        copies[dtype] = clone.to(dtype).requires_grad_(False)
        pack_cpu_linears(copies[dtype])   # an inference-only copy: pre-pack its weights on a CPU
    return copies[dtype]


class Drafter:
    """Runs the head over committed entries and grows one tree per cycle."""

    def __init__(self, head, target, spec: DraftSpec, max_len: int, draft_vocab: torch.Tensor | None = None,
                 dtype: torch.dtype | None = None):
        self.dtype = dtype or head.fc.weight.dtype
        head = head_in_dtype(head, self.dtype)
        self.head, self.target, self.spec = head, target, spec
        self.cache = head.new_cache(max_len + spec.max_head_entries + 8)
        self.shifted = head.shift == "shifted"
        self.embed = target.embed_tokens
        self.vocab_size = target.vocab_size
        # the draft's LM head: the target's, or its rows for the draft vocabulary (vocab.py), in the draft dtype
        self.vocab_ids, self.lm = draft_lm_head(target, draft_vocab, self.dtype)
        self.neg = torch.finfo(head.fc.weight.dtype).min
        if spec.kind in ("chain", "static"):
            self._children_of_path = children_of_path(spec.static_choices())

    def _head(self, feats, tokens, positions, visible_tree):
        """One head forward. visible_tree: [n, n_tree_entries_so_far + n] bool over tree entries (None: causal)."""
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
        ids = torch.tensor([tokens], device=dev)
        pos = torch.tensor([positions], device=dev)
        return self.head(feats.to(self.dtype), self.embed(ids).to(self.dtype), pos, self.cache, mask[None, None])

    # ------------------------------------------------------------------ committed entries
    def catch_up(self, feats: torch.Tensor, all_tokens: list[int]):
        """Append head entries for committed positions whose true features are now known.

        feats: [1, P, H] true features f_{c-1} .. f_{n-1} for the P pending entries j = c .. n (c = cached + 1,
        n = len(all_tokens) - 1 is the root's position). Returns the root entry's predicted feature [1, 1, H].
        """
        P = feats.shape[1]
        n = len(all_tokens) - 1
        js = list(range(n - P + 1, n + 1))
        toks = [all_tokens[j] if self.shifted else all_tokens[j - 1] for j in js]
        out = self._head(feats, toks, [j - 1 for j in js], None)
        self.committed = self.cache.length
        self.root_position = n
        return out[:, -1:]

    def reset(self):
        self.cache.length = 0
        self.committed = 0

    # ------------------------------------------------------------------ the tree
    @torch.inference_mode()
    def draft(self, root_feat: torch.Tensor, root_token: int, parent_token: int, temperature: float,
              top_k: int, top_p: float, generator) -> DraftTree:
        """Grow the tree from the root's predicted feature (output of `catch_up`).

        Children are chosen top-k (T = 0, and EAGLE-2 dynamic trees at any T) or drawn without replacement
        from q (chain and static trees at T > 0): the verifier applies the matching acceptance rule.
        """
        spec = self.spec
        tree = DraftTree.root_only(root_token)
        if spec.kind == "vanilla":
            return tree
        sample = temperature > 0 and spec.kind in ("chain", "static")
        T = temperature if temperature > 0 else 1.0
        warp = (lambda x: warp_logits(x, T, top_k, top_p)) if temperature > 0 else (lambda x: warp_logits(x, 1.0))
        paths = {0: ()}                    # static trees: node -> rank path
        entry_of = {}                      # node -> index among tree entries in the head cache
        frontier = [0]                     # nodes whose child distribution is computed next
        frontier_feats = root_feat         # [1, F, H] predicted features at the frontier nodes
        max_depth = spec.max_depth
        for level in range(1, max_depth + 1):
            small = warp(self.lm(frontier_feats[0]).float())   # [F, K] draft log-probs over the draft vocabulary
            logp = small
            if self.vocab_ids is not None:    # back to full-vocabulary ids: q = 0 outside the draft vocabulary
                logp = small.new_full((small.shape[0], self.vocab_size), float("-inf")).index_copy_(
                    1, self.vocab_ids, small)
            for i, v in enumerate(frontier):
                tree.dists[v] = logp[i]
            # --- choose children of every frontier node (ranked over the draft vocabulary: a 6x smaller top-k;
            #     the tokens outside it have q = 0 and are never chosen while it has k tokens)
            if spec.kind == "dynamic":
                k = spec.top_k
            else:
                want = [self._children_of_path.get(paths[v], []) for v in frontier]
                k = max((max(w) + 1 for w in want if w), default=0)
                if k == 0:
                    break
            pool, ids = (small, self.vocab_ids) if k <= small.shape[-1] else (logp, None)
            idx = gumbel_topk(pool, k, generator) if sample else torch.topk(pool, k, dim=-1).indices
            vals_l = pool.gather(-1, idx).tolist()
            idx_l = (idx if ids is None else ids[idx]).tolist()
            if spec.kind == "dynamic":
                kids = [(v, idx_l[i], vals_l[i]) for i, v in enumerate(frontier)]
            else:
                kids = [(v, idx_l[i][:len(want[i])], vals_l[i][:len(want[i])]) for i, v in enumerate(frontier)]
            new_nodes = []
            for fi, (v, toks, lps) in enumerate(kids):
                for r, (t, lp) in enumerate(zip(toks, lps)):
                    node = len(tree.tokens)
                    tree.tokens.append(int(t))
                    tree.parents.append(v)
                    tree.depths.append(level)
                    tree.q.append(math.exp(lp))
                    tree.scores.append(tree.scores[v] + lp)
                    tree.sampled.append(sample)
                    tree.child_lists.append([])
                    tree.child_lists[v].append(node)
                    if spec.kind != "dynamic":
                        paths[node] = paths[v] + (r,)
                    new_nodes.append((node, fi))
            if level == max_depth:
                break
            # --- which new nodes get expanded at the next level
            if spec.kind == "dynamic":
                ranked = sorted(new_nodes, key=lambda nf: -tree.scores[nf[0]])[:spec.top_k]
                expand = sorted(ranked)
            else:
                expand = [nf for nf in new_nodes if paths[nf[0]] in self._children_of_path]
            if not expand:
                break
            # --- one batched head forward for all expanded nodes (ancestry mask over tree entries)
            n_entries = len(entry_of)
            vis = torch.zeros(len(expand), n_entries + len(expand), dtype=torch.bool)
            feats, toks, pos = [], [], []
            for r, (node, fi) in enumerate(expand):
                a = tree.parents[node]
                while a > 0:
                    vis[r, entry_of[a]] = True
                    a = tree.parents[a]
                vis[r, n_entries + r] = True
                feats.append(frontier_feats[:, fi])
                par = tree.parents[node]
                toks.append(tree.tokens[node] if self.shifted else (tree.tokens[par] if par > 0 else root_token))
                pos.append(self.root_position + level - 1)
            for r, (node, _) in enumerate(expand):
                entry_of[node] = n_entries + r
            frontier_feats = self._head(torch.stack(feats, dim=1), toks, pos, vis)
            frontier = [node for node, _ in expand]
        self.cache.length = self.committed   # drop the tree entries
        if spec.kind == "dynamic":
            tree = _rerank(tree, spec.total_tokens)
        return tree


def _rerank(tree: DraftTree, total_tokens: int) -> DraftTree:
    """EAGLE-2: keep the `total_tokens` drafted nodes of best cumulative log-probability.

    A child's score never exceeds its parent's, so (breaking ties by depth) every kept node's ancestors are
    kept too and the result is still a tree.
    """
    order = sorted(range(1, len(tree.tokens)), key=lambda i: (-tree.scores[i], tree.depths[i], i))
    keep = sorted([0] + order[:total_tokens], key=lambda i: (tree.depths[i], i))
    new_index = {old: new for new, old in enumerate(keep)}
    out = DraftTree(tokens=[], parents=[], depths=[], q=[], scores=[], sampled=[], child_lists=[[] for _ in keep])
    for old in keep:
        par = tree.parents[old]
        out.tokens.append(tree.tokens[old])
        out.parents.append(new_index[par] if par >= 0 else -1)
        out.depths.append(tree.depths[old])
        out.q.append(tree.q[old])
        out.scores.append(tree.scores[old])
        out.sampled.append(tree.sampled[old])
        if par >= 0:
            out.child_lists[new_index[par]].append(new_index[old])
    out.dists = {new_index[v]: d for v, d in tree.dists.items() if v in new_index}
    return out
