"""The EAGLE decoding loop: draft a tree, verify it in one target pass, keep the accepted path, repeat.

    prefill:  target(prompt) -> features f_0..f_{m-1}, first token t_m (the root of cycle 1)
    cycle:    head.catch_up(new true features) -> tree = draft(...)
              target([root] + tree nodes, ancestry mask, positions n + depth)   ONE pass
              accept a path (greedy match at T = 0, strict speculative sampling at T > 0) + bonus token
              keep only the accepted path's KV entries; their features seed the next draft

`draft="vanilla"` drafts an empty tree, so the same code is plain one-token-per-forward decoding: the
baseline and the reference in tests. Every cycle returns a CycleRecord (records.py), built from the cycle's
lean CycleResult (cycle.py) after the clock has stopped.

What each CycleRecord timing covers (wall seconds, the device synchronised at every boundary):
    draft_seconds   the head's catch-up on the last pass's true features + drafting the tree (0 at prefill)
    verify_seconds  the ONE target pass over the tree (its input ids, positions and ancestry mask included);
                    at prefill: the prompt's pass + choosing the first token
    other_seconds   the target's probabilities, acceptance (verify.accept_tree), keeping the accepted KV entries
                    and features, committing the tokens (0 at prefill)
Building the record (token texts and bytes, p of every node, top-k lists) is in none of them, nor in
EagleDecoder.seconds (their sum over the cycles).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from .cycle import CycleResult, RecordBuilder
from .draft import Drafter, DraftSpec
from .draft_calls import run_alone
from .drive import cycles, finish
from .limits import LIMITS, MAX_VERIFY_ROWS
from .presets import fitted_dynamic, tree_presets
from .records import FROM_ARGMAX, FROM_TARGET, ROOT, CycleRecord, GenerationResult
from .sampling import sample, warp_logits
from ..model.packed_forward import Part
from ..model.target import pick_dtype, sliding_window_of
from .tree import DraftTree
from .verify import Acceptance, accept_tree
from ..model.vocab import load_draft_vocab


@dataclass
class DecodeConfig:
    draft: str = "static"            # chain | static | dynamic | vanilla
    tree: str = "cpu-12"             # static preset name (presets.tree_presets)
    depth: int = 5                   # chain / dynamic
    top_k: int = 8                   # dynamic: expansion width
    total_tokens: int = 24           # dynamic: nodes kept after rerank
    temperature: float = 0.0
    top_p: float = 1.0
    top_k_sampling: int = 0          # top-k warper (0 = off), applied to target and draft alike
    max_new_tokens: int = 128
    seed: int = 0
    record_topk: int = 5             # per-node distributions kept in the records (0 = lean records)
    draft_vocab: int = 0             # draft LM head over the K most frequent tokens (0 = full vocabulary)
    draft_dtype: str = ""            # "" = the target's; "bfloat16" halves the draft's weight reads on a CPU;
                                     # "mixed": an fp32 head and a bf16 draft LM head (the CPU default);
                                     # "q8": the head and draft LM head as Q8_0 blocks (a q4 target's default)

    def spec(self) -> DraftSpec:
        if self.draft not in ("chain", "static", "dynamic", "vanilla"):
            raise ValueError(f"unknown draft shape {self.draft!r}; use chain, static, dynamic or vanilla")
        choices = None
        if self.draft == "static":
            if self.tree not in tree_presets():
                raise ValueError(f"unknown tree preset {self.tree!r}; presets: {', '.join(tree_presets())}")
            choices = tree_presets()[self.tree]
        return DraftSpec(kind=self.draft, choices=choices, depth=self.depth, top_k=self.top_k,
                         total_tokens=self.total_tokens)

    def check(self):
        """Every value inside the one table of limits (limits.py); the message names the value for users."""
        if math.isnan(self.temperature):
            raise ValueError("Temperature must be a number (got nan)")
        names = ["temperature", "top_p", "seed", "max_new_tokens"]
        names += {"chain": ["depth"], "dynamic": ["depth", "top_k", "total_tokens"]}.get(self.draft, [])
        for name in names:
            LIMITS[name].check(getattr(self, name))
        if self.top_k_sampling < 0:
            raise ValueError("top-k sampling must be >= 0")
        spec = self.spec()
        if spec.max_nodes > MAX_VERIFY_ROWS:   # a bigger pass would leave the one-token step's numerical path
            raise ValueError(f"a tree of {spec.max_nodes - 1} drafted tokens is too wide: one verification pass "
                             f"holds at most {MAX_VERIFY_ROWS - 1} drafted tokens and the root")


# ---------------------------------------------------------------------- target KV cache
class PreallocatedLayer(DynamicLayer):
    """A DynamicLayer whose keys and values are views into buffers sized once for the whole generation.

    DynamicLayer appends by torch.cat, which copies the layer's whole cache on every pass (for SmolLM2 at 300
    tokens, ~14 MB over 30 layers per pass); here an append writes the new entries in place.
    """

    def __init__(self, capacity: int, dtype: torch.dtype | None = None):
        super().__init__()
        self.capacity, self.dtype = capacity, dtype

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        self.device = key_states.device
        self._k = key_states.new_empty(b, h, self.capacity, d, dtype=self.dtype or key_states.dtype)
        self._v = value_states.new_empty(b, h, self.capacity, value_states.shape[-1],
                                         dtype=self.dtype or value_states.dtype)
        self.keys, self.values = self._k[:, :, :0], self._v[:, :, :0]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.keys.shape[-2], self.keys.shape[-2] + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache is full ({self.capacity} entries)")
        self._k[:, :, start:end] = key_states
        self._v[:, :, start:end] = value_states
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
        return self.keys, self.values


def new_kv_cache(capacity: int, dtype: torch.dtype | None = None) -> DynamicCache:
    """A DynamicCache whose layers (created on first use, one per target layer) hold `capacity` entries, in
    `dtype` (default: the keys' own; float64 makes attention row-consistent, model/attention.py)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = lambda: PreallocatedLayer(capacity, dtype)
    return cache


def kv_cache_dtype(target) -> torch.dtype | None:
    """float64 for a CPU target whose linear layers are row-independent (bf16-linear on an AMX CPU, the "exact"
    plan anywhere: Target.row_independent): with attention summed in float64 too, a tree pass computes each node
    exactly as a one-token step (model/attention.py); else None."""
    if target.device.type == "cpu" and getattr(target, "row_independent", False):
        return torch.float64
    return None


def keep_cache_entries(cache: DynamicCache, start: int, keep: torch.Tensor):
    """After verification: move the entries at absolute positions `keep` to start.. and drop the rest."""
    end = start + keep.numel()
    # entries already where they go (a step, a chain's accepted prefix, a path of first children): nothing to move
    in_place = bool((keep == torch.arange(start, end, device=keep.device)).all())
    for layer in cache.layers:
        if in_place:
            layer.keys, layer.values = layer.keys[:, :, :end], layer.values[:, :, :end]
            continue
        layer.keys[:, :, start:end] = layer.keys.index_select(2, keep)
        layer.values[:, :, start:end] = layer.values.index_select(2, keep)
        layer.keys = layer.keys[:, :, :end]
        layer.values = layer.values[:, :, :end]


def cache_lengths(cache: DynamicCache) -> list[int | None]:
    """Each layer's entries (None: not yet written)."""
    return [layer.keys.shape[-2] if layer.is_initialized else None for layer in cache.layers]


def truncate_cache(cache: DynamicCache, lengths: list[int | None]):
    """Back to `lengths` (cache_lengths before a failed pass): the entries a pass appended layer by layer are
    dropped; those below were not written by it (an append writes past the end, keep_cache_entries past the root)."""
    for i, layer in enumerate(cache.layers):     # layers made during the pass (a first prefill) come back empty
        if layer.is_initialized:
            n = (lengths[i] if i < len(lengths) else None) or 0
            layer.keys, layer.values = layer._k[:, :, :n], layer._v[:, :, :n]


@dataclass
class DecoderState:
    """What one cycle of an EagleDecoder changes, taken before a round (EagleDecoder.checkpoint): a round that
    fails is undone for every generation in it, so none keeps half a cycle (KV entries of some layers, a head
    cache catch-up, committed tokens) and each can be stepped again as if the round had not run."""
    kv: list
    head: tuple | None
    tokens: list[int]
    new_ids: list[int]
    cycles: int
    target_forwards: int
    finished: str | None
    seconds: float
    rng: torch.Tensor
    pending_feats: object
    head_behind: bool
    prompt_read: int = 0
    prompt_feats: list | None = None


def tree_attention_mask(anc: torch.Tensor, prefix_len: int, dtype, device) -> torch.Tensor:
    """Additive [1, 1, N, prefix + N] mask: every tree token sees the committed prefix and its own ancestors."""
    n = anc.shape[0]
    mask = torch.full((n, prefix_len + n), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask[:, :prefix_len] = 0
    mask[:, prefix_len:].masked_fill_(anc.to(device), 0)
    return mask[None, None]


class EagleDecoder:
    """One generation, stepped cycle by cycle (`step()` -> CycleRecord). The app keeps one per session.

    Each step runs one timed cycle (`_prefill` first, then `_cycle`), which returns a lean CycleResult, and then,
    outside the timed region, builds the page's CycleRecord from it (cycle.RecordBuilder).
    """

    def __init__(self, target, head, cfg: DecodeConfig, prompt_ids: list[int]):
        cfg.check()
        self.target, self.head, self.cfg = target, head, cfg
        self.spec = cfg.spec()
        if len(prompt_ids) == 0:
            raise ValueError("empty prompt")
        if len(prompt_ids) + 2 + self.spec.max_nodes > target.max_context:
            window = " (its sliding window, which the engine never passes)" if sliding_window_of(target.config) else ""
            raise ValueError(f"prompt is {len(prompt_ids)} tokens; the target's context is {target.max_context}"
                             f"{window}")
        self.prompt_ids = list(prompt_ids)
        self.tokens = list(prompt_ids)     # committed tokens + the current root (last element)
        self.new_ids: list[int] = []
        self.cycles: list[CycleRecord] = []
        self.target_forwards = 0
        self.finished: str | None = None
        self.seconds = 0.0                 # the cycles' timed regions (draft + verify + other), records excluded
        self.gen = torch.Generator(device=target.device)
        self.gen.manual_seed(cfg.seed)
        max_len = min(target.max_context, len(prompt_ids) + cfg.max_new_tokens + 2)
        # the prefix, plus the last cycle's whole tree before its rejected nodes are dropped
        self.cache = new_kv_cache(min(target.max_context, max_len + self.spec.max_nodes), kv_cache_dtype(target))
        self.drafter = self._new_drafter(max_len)   # None for plain decoding (no head cache, no LM-head copy)
        # an EAGLE-3 head reads several target layers (head3.py); the others the last feature
        self.aux_layers = tuple(getattr(head, "aux_layers", ())) if self.drafter is not None else ()
        self.pending_feats = None          # true features not yet given to the head
        self.head_behind = False           # a cycle without a tree left them to the next catch-up
        self.prompt_read = 0               # prompt tokens in the KV cache (a round reads a long prompt in chunks)
        self.prompt_feats: list = []       # their features, until the last chunk's pass
        self.records = RecordBuilder(target, cfg.record_topk, cfg.temperature)

    def _new_drafter(self, max_len: int) -> Drafter | None:
        if self.spec.kind == "vanilla":
            return None
        if self.head is None:
            raise ValueError("EAGLE drafting needs a head")
        return new_drafter(self.target, self.head, self.cfg, self.spec, max_len)

    @property
    def done(self) -> bool:
        return self.finished is not None

    def checkpoint(self) -> DecoderState:
        """This generation's state between cycles (see DecoderState); `restore` puts it back."""
        return DecoderState(cache_lengths(self.cache), self.drafter.checkpoint() if self.drafter else None,
                            list(self.tokens), list(self.new_ids), len(self.cycles), self.target_forwards,
                            self.finished, self.seconds, self.gen.get_state(), self.pending_feats,
                            self.head_behind, self.prompt_read, list(self.prompt_feats))

    def restore(self, s: DecoderState):
        truncate_cache(self.cache, s.kv)
        if self.drafter is not None:
            self.drafter.restore(s.head)
        self.tokens[:], self.new_ids[:] = s.tokens, s.new_ids
        del self.cycles[s.cycles:]
        self.target_forwards, self.finished, self.seconds = s.target_forwards, s.finished, s.seconds
        self.gen.set_state(s.rng)
        self.pending_feats, self.head_behind = s.pending_feats, s.head_behind
        self.prompt_read, self.prompt_feats = s.prompt_read, list(s.prompt_feats or [])

    # ------------------------------------------------------------------ the loop
    @torch.inference_mode()
    def step(self) -> CycleRecord:
        if self.done:
            raise RuntimeError("generation already finished")
        return self.commit_record(self._cycle() if self.cycles else self._prefill())

    def commit_record(self, res: CycleResult) -> CycleRecord:
        """Count a finished cycle's time and keep its record (built after the clock stopped)."""
        self.seconds += res.draft_seconds + res.verify_seconds + res.other_seconds
        rec = self.records.record(res)
        self.cycles.append(rec)
        return rec

    def _prefill(self) -> CycleResult:
        """The prompt (what no round has read of it yet) in one target pass; its first token is the root of
        cycle 1. Timed as verify_seconds."""
        t0 = time.perf_counter()
        p = self.prefill_part()
        logits, feats = self.target.forward(p.input_ids, p.position_ids, p.cache, logits=p.logits,
                                            aux_layers=self.aux_layers)
        return self.finish_prefill_part(p, logits, feats, t0)

    @property
    def prompt_left(self) -> int:
        """Prompt tokens still to read (0 once the prefill is done)."""
        return 0 if self.cycles else len(self.prompt_ids) - self.prompt_read

    def prefill_part(self, rows: int | None = None) -> Part:
        """The prompt's share of a pass (alone, or packed with other sessions': decoding/batch.py): the next `rows`
        prompt tokens (default: all that are left), causal over what earlier chunks put in this generation's own
        KV cache; the LM head reads the prompt's last row only, in its last chunk (a round reads a long prompt
        over several passes, serving/rounds.py, so that it holds no other student behind it)."""
        dev = self.target.device
        a = self.prompt_read
        b = len(self.prompt_ids) if rows is None else min(len(self.prompt_ids), a + max(1, rows))
        ids = torch.tensor([self.prompt_ids[a:b]], device=dev)
        self.target_forwards += 1
        return Part(ids, torch.arange(a, b, device=dev)[None], self.cache, None,
                    logits="last" if b == len(self.prompt_ids) else False)

    def finish_prefill_part(self, part: Part, logits, feats, t0: float) -> CycleResult | None:
        """After a prompt chunk's pass: keep its features; after the last chunk, the prefill's result (else None)."""
        self.prompt_read += part.rows
        if self.prompt_read < len(self.prompt_ids):
            self.prompt_feats.append(feats)
            return None
        if self.prompt_feats:
            feats, self.prompt_feats = torch.cat(self.prompt_feats + [feats], dim=1), []
        return self.finish_prefill(logits, feats, t0)

    def finish_prefill(self, logits, feats, t0: float) -> CycleResult:
        """After the prompt's pass (begun at `t0`): pick the first token (argmax, or sampled with this generation's
        generator) and commit it."""
        self.pending_feats = feats
        p = self._target_probs(logits[0, -1])
        greedy = self.cfg.temperature == 0
        tok = int(p.argmax()) if greedy else sample(p, self.gen)
        t1 = self._clock()
        acc = Acceptance(path=[], token=tok, kind="bonus", source=FROM_ARGMAX if greedy else FROM_TARGET, dist=p,
                         tests={}, status=[ROOT])
        committed = self._commit([tok])
        self.tokens.append(tok)
        tree = DraftTree.root_only(self.prompt_ids[-1])
        return self._result(len(self.prompt_ids) - 1, tree, p[None], acc, committed, 0.0, t1 - t0, 0.0)

    def _cycle(self) -> CycleResult:
        """Draft a tree, verify it in ONE target pass, accept a path + the bonus token, commit them."""
        t0 = time.perf_counter()
        tree = self._draft()
        t1 = self._clock()
        logits, feats = self._verify(tree)
        t2 = self._clock()
        return self.finish_cycle(tree, logits, feats, t1 - t0, t2 - t1)

    def finish_cycle(self, tree: DraftTree, logits, feats, draft_s: float, verify_s: float) -> CycleResult:
        """After the verification pass (alone, or packed with other sessions': decoding/batch.py): accept a path
        and the bonus token with this generation's own generator, keep their KV entries, commit the tokens."""
        t2 = time.perf_counter()
        n = len(self.tokens) - 1
        probs = self._target_probs(logits[0])    # [N, V]
        acc = accept_tree(tree, probs, self.cfg.temperature, self.gen)
        committed = self._keep(tree, acc, feats, n)
        t3 = self._clock()
        return self._result(n, tree, probs, acc, committed, draft_s, verify_s, t3 - t2)

    # ------------------------------------------------------------------ the cycle's parts
    def _draft(self, spec: DraftSpec | None = None) -> DraftTree:
        """The head catches up on the features the last pass confirmed, then drafts from the root (this cycle's
        shape `spec`, default the generation's: under load a smaller one, even none, decoding/batch.py)."""
        return run_alone(self.draft_steps(spec))

    def draft_steps(self, spec: DraftSpec | None = None):
        """`_draft` as a generator of its head and LM-head forwards (draft_calls.py: a round packs them)."""
        root = self.tokens[-1]
        if self.drafter is None:
            return DraftTree.root_only(root)
        if spec is not None and spec.kind == "vanilla":
            # no tree this cycle (a full class): the head catches up later, on every feature confirmed meanwhile
            # in one forward, so that a round without trees costs what plain decoding costs
            self.head_behind = True
            return DraftTree.root_only(root)
        self.head_behind = False
        c = self.cfg
        root_feat = yield from self.drafter.catch_up_steps(self.pending_feats, self.tokens)
        return (yield from self.drafter.draft_steps(root_feat, root, self.tokens[-2], c.temperature,
                                                    c.top_k_sampling, c.top_p, self.gen, spec))

    def verify_part(self, tree: DraftTree) -> Part:
        """The tree's share of a verification pass: positions n + depth (n = the root's position), each node sees
        the prefix and its ancestors, over this generation's own KV cache."""
        dev = self.target.device
        n = len(self.tokens) - 1
        ids = torch.tensor([tree.tokens], device=dev)
        pos = torch.tensor([[n + d for d in tree.depths]], device=dev)
        mask = tree_attention_mask(tree.ancestry(), n, self.target.dtype, dev) if len(tree) > 1 else None
        self.target_forwards += 1
        return Part(ids, pos, self.cache, mask)

    def _verify(self, tree: DraftTree):
        """The whole tree in one target forward."""
        p = self.verify_part(tree)
        return self.target.forward(p.input_ids, position_ids=p.position_ids, past_key_values=p.cache,
                                   attention_mask=p.attention_mask, aux_layers=self.aux_layers)

    def _keep(self, tree: DraftTree, acc, feats, n: int) -> list[int]:
        """Keep the accepted path's KV entries and features (they seed the next draft); commit its tokens."""
        keep = torch.tensor([n + i for i in [0] + acc.path], device=self.target.device)
        keep_cache_entries(self.cache, n, keep)
        new_feats = feats[:, [0] + acc.path]
        behind = self.head_behind and self.pending_feats is not None
        self.pending_feats = torch.cat((self.pending_feats, new_feats), dim=1) if behind else new_feats
        new = [tree.nodes[i].token for i in acc.path] + [acc.token]
        committed = self._commit(new)
        self.tokens.extend(new)
        return committed

    def _commit(self, new: list[int]) -> list[int]:
        """Trim at a stop token / the token budget / the context limit; returns what is committed."""
        out = []
        for t in new:
            out.append(t)
            if t in self.target.stop_token_ids:
                self.finished = "eos"
                break
            if len(self.new_ids) + len(out) >= self.cfg.max_new_tokens:
                self.finished = "max_new_tokens"
                break
        self.new_ids.extend(out)
        if self.finished is None and len(self.tokens) + len(out) + 2 + self.spec.max_nodes > self.target.max_context:
            self.finished = "context"
        return out

    # ------------------------------------------------------------------ helpers
    def _clock(self) -> float:
        """perf_counter once the device has finished the work queued so far (CUDA runs asynchronously)."""
        if self.target.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    def _target_probs(self, logits: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        if c.temperature > 0:
            return warp_logits(logits, c.temperature, c.top_k_sampling, c.top_p).exp()
        return torch.softmax(logits.float(), dim=-1)

    def _result(self, prefix_len, tree, probs, acc, committed, draft_s, verify_s, other_s) -> CycleResult:
        return CycleResult(cycle=len(self.cycles), prefix_len=prefix_len, tree=tree, probs=probs, acc=acc,
                           committed=committed, draft_seconds=draft_s, verify_seconds=verify_s,
                           other_seconds=other_s, total_new_tokens=len(self.new_ids),
                           target_forwards=self.target_forwards, finished=self.finished)

    def result(self, prompt: str = "") -> GenerationResult:
        return GenerationResult(prompt=prompt, prompt_ids=self.prompt_ids, token_ids=list(self.new_ids),
                                text=self.target.decode(self.new_ids), target_forwards=self.target_forwards,
                                seconds=self.seconds, cycles=self.cycles, config=asdict(self.cfg),
                                finished=self.finished)


def new_drafter(target, head, cfg: DecodeConfig, spec: DraftSpec, max_len: int) -> Drafter:
    """The drafter a generation with `cfg` drafts with: its draft vocabulary, its precision ("mixed": an fp32 head
    and a bf16 draft LM head). Whatever shows a student q (the same-law panel) drafts through this one."""
    vocab = load_draft_vocab(cfg.draft_vocab, target.tokenizer) if cfg.draft_vocab else None
    if cfg.draft_dtype == "mixed":
        return Drafter(head, target, spec, max_len, vocab, torch.float32, torch.bfloat16)
    if cfg.draft_dtype == "q8":
        return Drafter(head, target, spec, max_len, vocab, torch.float32, torch.float32, kernels="q8")
    ddt = pick_dtype(target.device, cfg.draft_dtype) if cfg.draft_dtype else None
    return Drafter(head, target, spec, max_len, vocab, ddt)


def stream(target, head, cfg: DecodeConfig, prompt_ids: list[int]):
    """Yield one CycleRecord per cycle until the generation finishes."""
    return cycles(EagleDecoder(target, head, cfg, prompt_ids))


def generate(target, head, cfg: DecodeConfig, prompt_ids: list[int], prompt: str = "") -> GenerationResult:
    return finish(EagleDecoder(target, head, cfg, prompt_ids)).result(prompt)


def default_config(device_type: str = "cpu", numerics: str | None = None) -> DecodeConfig:
    """Defaults per device: a CPU pays for every verified token, a GPU verifies a wide tree almost for free.
    numerics: the target's (Target.numerics); on the GGUF block kernels ('gguf-blocks') a CPU takes the tree
    fitted to their pass costs."""
    if device_type == "cpu":
        # a small static tree: the one eagle_core.bench.tree_fit fitted
        # to the shipped head's measured acceptance and timed cycles (assets/trees/smollm2-cpu.json; on the block
        # kernels, whose passes grow dearer per token, smollm2-cpu-q4.json), else cpu-4;
        # the draft LM head over 8192 tokens in bf16 cuts drafting ~3x and an fp32 head is faster than a bf16 one
        # ("mixed", draft.py); beside a target on the block kernels the draft runs them too, on Q8_0 copies of its
        # weights ("q8": no oneDNN call overhead on its one-row products, docs/benchmarks.md); drafting precision
        # changes q only, the output stays exact
        blocks = numerics == "gguf-blocks"
        tree = next((t for t in ("smollm2-cpu-q4" if blocks else "smollm2-cpu", "smollm2-cpu") if t in tree_presets()),
                    "cpu-4")
        # draft="dynamic" (EAGLE-2) takes the settings bench/dynamic_fit.py measured fastest here, when fitted
        return DecodeConfig(draft="static", tree=tree, draft_vocab=8192, draft_dtype="q8" if blocks else "mixed",
                            **fitted_dynamic())
    return DecodeConfig(draft="dynamic", depth=6, top_k=10, total_tokens=60)
