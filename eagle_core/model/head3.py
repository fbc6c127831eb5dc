"""Eagle3Head: the EAGLE-3 draft head (Li et al., 2025, arXiv 2503.01840), in the layout of the released heads
(yuhuili/EAGLE3-*) and of vLLM's `"method": "eagle3"`.

    g_j    = fc([a_j ; m_j ; z_j])                             the target's low, middle and high hidden states
                                                               at position j (3H -> H): "fused features"
    x      = [input_norm(e(t_{j+1})) ; hidden_norm(g_j)]      2H: the shifted token and the hidden input
    h      = g_j + o_proj(attention(q, k, v of x))             (the residual is the un-normed hidden input)
    out_j  = h + mlp(post_attention_norm(h))                   fed back as the next draft step's hidden input
    logits = lm_head(norm(out_j))                              over the draft vocabulary; as a target id:
                                                               draft id d is target id d + d2t[d]

Against the EAGLE-1 head (head.py): the hidden input of a true position is fc of three target layers instead of
the last layer's feature; a drafted position's hidden input is the head's own previous `out` (no fc); the head
predicts tokens through its own LM head, not a feature through the target's; and it is trained on its own
outputs (training-time test, training/objective3.py) with the token loss only. Which target layers it reads is in
its config (`eagle_aux_layers`, vLLM's `eagle_aux_hidden_state_layer_ids`): the residual stream entering those
layers, transformers' `hidden_states[i]` (default 2, L // 2, L - 3, as EAGLE-3's code and vLLM take them).
"""
from __future__ import annotations

import json
import os

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from .head_layers import HEAD_WEIGHTS, HeadAttention, HeadCache, HeadLoadError, check_shapes, stored_shapes

from ..paths import ASSETS

KIND = "eagle3"
SHIPPED_EAGLE3 = os.path.join(ASSETS, "heads", "smollm2-135m-eagle3")


def default_aux_layers(num_layers: int) -> list[int]:
    """The target layers whose input an EAGLE-3 head reads by default: low, middle, high (2, L // 2, L - 3 as
    EAGLE-3's code takes them; kept inside 0..L-1 for the tests' few-layer targets)."""
    top = num_layers - 1
    return [min(2, top), min(num_layers // 2, top), max(num_layers - 3, 0)]


def eagle3_config_from_target(target_config, draft_vocab_size: int, aux_layers: list[int] | None = None) -> LlamaConfig:
    """A one-layer Llama config with the target's shapes, a draft vocabulary and the layers it reads."""
    d = target_config.to_dict()
    keep = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "rms_norm_eps", "max_position_embeddings", "rope_parameters", "rope_theta", "rope_scaling",
            "hidden_act", "vocab_size", "initializer_range", "torch_dtype", "dtype")
    d = {k: v for k, v in d.items() if k in keep}
    cfg = LlamaConfig(**d, num_hidden_layers=1, attention_bias=False, mlp_bias=False)
    cfg.draft_vocab_size = int(draft_vocab_size)
    cfg.eagle_aux_layers = list(aux_layers or default_aux_layers(target_config.num_hidden_layers))
    cfg.target_hidden_size = target_config.hidden_size
    cfg.eagle_kind = KIND
    return cfg


class Eagle3Attention(HeadAttention):
    """EAGLE-1's head attention (head.py: the same RoPE, cache and masked-query paths) whose q, k, v read the 2H
    input [token ; hidden]; its output is H wide."""

    def __init__(self, cfg: LlamaConfig):
        nn.Module.__init__(self)
        H = cfg.hidden_size
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or H // self.n_heads
        self.q_proj = nn.Linear(2 * H, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * H, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * H, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, H, bias=False)


class Eagle3Layer(nn.Module):
    """EAGLE-3's decoder layer ("midlayer" in the released files)."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        H = cfg.hidden_size
        self.self_attn = Eagle3Attention(cfg)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(H, eps=cfg.rms_norm_eps)     # on the token embedding
        self.hidden_norm = LlamaRMSNorm(H, eps=cfg.rms_norm_eps)         # on the hidden input
        self.post_attention_layernorm = LlamaRMSNorm(H, eps=cfg.rms_norm_eps)

    def forward(self, embeds, hidden, cos, sin, cache, attn_mask):
        x = torch.cat((self.input_layernorm(embeds), self.hidden_norm(hidden)), dim=-1)
        h = hidden + self.self_attn(x, cos, sin, cache, attn_mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Head(nn.Module):
    """The EAGLE-3 head. `forward` returns `out` (the un-normed output that feeds the next step); `logits(out)`
    gives the draft-vocabulary logits and `target_ids` maps their columns to target token ids."""

    shift = "shifted"          # the token paired with position j's hidden input is t_{j+1}, as EAGLE-1's shifted head
    inputs = "fused features+token"
    kind_name = KIND

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.config = cfg
        H = cfg.hidden_size
        self.aux_layers = list(cfg.eagle_aux_layers)
        target_h = int(getattr(cfg, "target_hidden_size", None) or H)
        if len(self.aux_layers) * target_h == H:
            # forward tells a fused target input from the head's own output by its width: were they equal, fc
            # would be skipped on the target's states without a word
            raise HeadLoadError(f"an EAGLE-3 head whose fused input ({len(self.aux_layers)} target layers x "
                                f"{target_h}) is as wide as its hidden state ({H}) cannot tell the target's "
                                f"states from its own output; it needs the layers' width to differ from {H}")
        self.fc = nn.Linear(len(self.aux_layers) * target_h, H, bias=False)
        self.midlayer = Eagle3Layer(cfg)
        self.norm = LlamaRMSNorm(H, eps=cfg.rms_norm_eps)
        self.lm_head = nn.Linear(H, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.rotary_emb = LlamaRotaryEmbedding(cfg)
        self.path: str | None = None

    @property
    def kind(self) -> str:
        return "EAGLE-3: fused features & shifted token"

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    @property
    def fused_width(self) -> int:
        return self.fc.in_features

    @property
    def target_ids(self) -> torch.Tensor:
        """[draft_vocab] target token id of every draft-vocabulary column."""
        return torch.arange(self.d2t.numel(), device=self.d2t.device) + self.d2t

    def set_draft_vocab(self, target_ids: torch.Tensor):
        """Columns of the LM head = these target ids, in this order (d2t = id - column)."""
        if target_ids.numel() != self.d2t.numel():
            raise ValueError(f"draft vocabulary of {target_ids.numel()} ids for a {self.d2t.numel()}-column LM head")
        check_draft_vocab(target_ids, self.config.vocab_size, "this draft vocabulary")
        self.d2t.copy_(target_ids.to(self.d2t) - torch.arange(self.d2t.numel(), device=self.d2t.device))

    def new_cache(self, max_len: int) -> HeadCache:
        a = self.midlayer.self_attn
        p = self.fc.weight
        return HeadCache(a.n_kv, a.head_dim, max_len, p.device, p.dtype)

    def forward(self, hidden, token_embeds, position_ids, cache: HeadCache | None = None, attn_mask=None):
        """hidden: [B, n, 3H] fused target states (true positions) or [B, n, H] the head's own `out` (drafted
        positions); token_embeds [B, n, H]. Returns out [B, n, H]."""
        if hidden.shape[-1] == self.fc.in_features and hidden.shape[-1] != self.hidden_size:
            hidden = self.fc(hidden)
        cos, sin = self.rotary_emb(hidden, position_ids)
        return self.midlayer(token_embeds, hidden, cos.to(hidden.dtype), sin.to(hidden.dtype), cache, attn_mask)

    def logits(self, out):
        return self.lm_head(self.norm(out))

    # ---------------------------------------------------------------- checkpoints
    def save(self, folder: str, extra: dict | None = None, dtype: torch.dtype | None = None):
        """config.json + model.safetensors in the released EAGLE-3 layout (fc, midlayer.*, norm, lm_head, d2t,
        t2d); `dtype` (e.g. fp16) for the float weights."""
        os.makedirs(folder, exist_ok=True)
        state = {}
        for k, v in self.state_dict().items():
            if k.startswith("rotary_emb."):
                continue
            v = v.detach().to("cpu")
            state[k] = (v.to(dtype) if (dtype is not None and v.is_floating_point()) else v).contiguous()
        t2d = torch.zeros(self.config.vocab_size, dtype=torch.bool)
        t2d[self.target_ids.cpu()] = True
        state["t2d"] = t2d
        save_file(state, os.path.join(folder, HEAD_WEIGHTS), metadata={"format": "pt"})
        d = self.config.to_dict()
        d.update(architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1, eagle_kind=KIND,
                 draft_vocab_size=self.config.draft_vocab_size, eagle_aux_layers=self.aux_layers,
                 eagle_config={"eagle_aux_hidden_state_layer_ids": self.aux_layers, "use_aux_hidden_state": True})
        if dtype is not None:
            d["dtype"] = str(dtype).replace("torch.", "")
        d.update(extra or {})
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(d, f, indent=2, sort_keys=True)


def check_draft_vocab(target_ids: torch.Tensor, vocab_size: int, what: str) -> None:
    """Raise HeadLoadError unless every draft column maps to its own token of the target's vocabulary. Two columns
    on one token would split that token's draft probability q over two columns (the draft tree keeps one of them):
    q would then be wrong and speculative sampling at T > 0 no longer exact."""
    ids = target_ids.detach().reshape(-1).to("cpu", torch.int64)
    bad = ((ids < 0) | (ids >= vocab_size)).nonzero()
    if len(bad):
        col = int(bad[0])
        raise HeadLoadError(f"{what} maps draft id {col} to token {int(ids[col])}, outside the target's vocabulary "
                            f"of {vocab_size} tokens")
    order = torch.argsort(ids, stable=True)
    same = (ids[order][1:] == ids[order][:-1]).nonzero()
    if len(same):
        a, b = int(order[int(same[0])]), int(order[int(same[0]) + 1])
        raise HeadLoadError(f"{what} maps draft ids {a} and {b} to the same token {int(ids[a])}: its draft "
                            f"probability would be split over two columns, and sampling would no longer be exact")


def is_eagle3_config(d: dict) -> bool:
    archs = d.get("architectures") or []
    return d.get("eagle_kind") == KIND or any("Eagle3" in a for a in archs) or "draft_vocab_size" in d


def load_eagle3_head(folder: str, d: dict, target=None) -> Eagle3Head:
    """An EAGLE-3 head from its folder's config dict `d` and safetensors (ours or a released one)."""
    d = dict(d)
    d.pop("architectures", None)
    aux = d.get("eagle_aux_layers") or (d.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    n_target = getattr(getattr(target, "config", None), "num_hidden_layers", None)
    if not aux:
        if n_target is None:
            raise HeadLoadError(f"{folder}: an EAGLE-3 head without eagle_aux_layers needs its target to know them")
        aux = default_aux_layers(n_target)
    if n_target is not None and max(aux) >= n_target:
        raise HeadLoadError(f"{folder}: the head reads target layers {aux}, the target has {n_target}")
    extra = {k: d.pop(k) for k in ("draft_vocab_size", "target_hidden_size") if k in d}
    for k in ("model_type", "transformers_version", "eagle_aux_layers", "eagle_config", "eagle_kind",
              "num_hidden_layers"):
        d.pop(k, None)
    cfg = LlamaConfig(**d, num_hidden_layers=1)
    cfg.draft_vocab_size = int(extra.get("draft_vocab_size") or cfg.vocab_size)
    cfg.target_hidden_size = int(extra.get("target_hidden_size") or cfg.hidden_size)
    cfg.eagle_aux_layers, cfg.eagle_kind = list(aux), KIND
    if target is not None and cfg.hidden_size != target.hidden_size:
        raise HeadLoadError(f"head hidden size {cfg.hidden_size} does not match the target's {target.hidden_size}")
    found = stored_shapes(folder)
    if found is None:
        raise HeadLoadError(f"no {HEAD_WEIGHTS} in {folder}")
    try:
        check_shapes(lambda: Eagle3Head(cfg), found, folder, rename=_released_name)
        head = Eagle3Head(cfg)
    except HeadLoadError as exc:
        raise HeadLoadError(exc if str(exc).startswith("head weights") else f"{folder}: {exc}") from None
    state = {_released_name(k): v for k, v in load_file(os.path.join(folder, HEAD_WEIGHTS)).items()}
    state.pop("t2d", None)
    state.pop("embed_tokens.weight", None)     # a released head may carry the target's embedding: ours is used
    missing, unexpected = head.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.startswith("rotary_emb.") and m != "d2t"]
    if missing or unexpected:
        raise HeadLoadError(f"EAGLE-3 head weights in {folder} do not fit: missing {missing[:4]}, "
                            f"unexpected {list(unexpected)[:4]}")
    if "d2t" not in state and cfg.draft_vocab_size != cfg.vocab_size:
        raise HeadLoadError(f"{folder}: a {cfg.draft_vocab_size}-token draft vocabulary without its d2t map")
    vocab = target.vocab_size if target is not None else cfg.vocab_size
    check_draft_vocab(head.target_ids, min(vocab, cfg.vocab_size), f"the d2t map in {folder}")
    head.path = folder
    if target is not None:
        head = head.to(device=target.device, dtype=target.dtype)
    return head.eval()


def _released_name(k: str) -> str:
    """A weight's name in our layout: released heads prefix `model.` and name the layer `layers.0.`."""
    k = k[len("model."):] if k.startswith("model.") else k
    return "midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k


def random_eagle3_head(target, draft_ids: torch.Tensor | None = None, seed: int = 0,
                       aux_layers: list[int] | None = None) -> Eagle3Head:
    """A randomly initialised EAGLE-3 head (its draft vocabulary: `draft_ids`, default the whole vocabulary)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        n = target.vocab_size if draft_ids is None else int(draft_ids.numel())
        head = Eagle3Head(eagle3_config_from_target(target.config, n, aux_layers))
        for m in head.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=getattr(head.config, "initializer_range", 0.02))
    if draft_ids is not None:
        head.set_draft_vocab(draft_ids)
    head.path = "random:eagle3"
    return head.to(device=target.device, dtype=target.dtype).eval()
