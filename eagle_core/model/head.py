"""EagleHead: the EAGLE-1/EAGLE-2 draft head, and its checkpoint format.

    f_hat = Decoder( fc( [ e(token), feature ] ) )        # one Llama decoder layer, no input norm

`fc` fuses the token embedding and the target feature (in this order, as the released heads do); the output
is a predicted *feature*, which the target's frozen LM head turns into draft logits. Embedding and LM head
belong to the target: a head file never carries copies of them (an `embed_tokens.weight` found in a
released checkpoint is ignored).

`shift` records how the head was trained:
  shifted   : the pair that predicts f_{j} is (f_{j-1}, e(t_j))      -- EAGLE: the sampled token is known
  unshifted : the pair that predicts f_{j} is (f_{j-1}, e(t_{j-1}))  -- the paper's ablation

`inputs` records what the head sees (EAGLE §4.3.2, "inputs of draft models"):
  feature+token : fc([e(token), feature]) -- EAGLE (with either shift)
  feature       : fc(feature)             -- no token: it cannot know which branch the sampling took
  token         : fc(e(t_j))              -- no target feature: a one-layer language model on the target's
                                             embeddings and LM head (token-level drafting)
The two single-input kinds use the shifted pairing (for `feature` the token is never read).
"""
from __future__ import annotations

import json
import os
import pickle
import warnings

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from ..paths import ASSETS
from .head3 import SHIPPED_EAGLE3, is_eagle3_config, load_eagle3_head, random_eagle3_head
from .head_layers import (HEAD_WEIGHTS, HeadAttention, HeadCache, HeadLoadError,  # noqa: F401 (re-exported)
                          check_shapes, stored_shapes)
from .layer_body import head_layer

SHIFTS = ("shifted", "unshifted")
INPUTS = ("feature+token", "feature", "token")
SHIPPED_HEADS = {"shifted": os.path.join(ASSETS, "heads", "smollm2-135m-shifted"),
                 "unshifted": os.path.join(ASSETS, "heads", "smollm2-135m-unshifted")}
# The Paper lab's input ablation: four heads trained from scratch with one recipe and one budget (fp16 files)
ABLATION_KINDS = {"ablation-shifted": ("shifted", "feature+token"),
                  "ablation-unshifted": ("unshifted", "feature+token"),
                  "feature-only": ("shifted", "feature"),
                  "token-only": ("shifted", "token")}    # spec -> (shift, inputs)
ABLATION_HEADS = {k: os.path.join(ASSETS, "heads", "ablation", k) for k in ABLATION_KINDS}


def head_config_from_target(target_config, shift: str = "shifted", bias: bool = True,
                            inputs: str = "feature+token") -> LlamaConfig:
    """A one-layer Llama config with the target's shapes (what a new head for this target looks like)."""
    d = target_config.to_dict()
    for k in ("quantization_config", "_name_or_path", "architectures", "auto_map", "layer_types",
              "sliding_window", "use_sliding_window", "max_window_layers"):
        d.pop(k, None)
    d.update(num_hidden_layers=1, model_type="llama", bias=bias, eagle_shift=shift, eagle_inputs=inputs)
    if getattr(target_config, "model_type", "llama") == "qwen2":
        d["attention_bias"] = True  # Qwen2 projects q, k, v with a bias
    cfg = LlamaConfig(**{k: v for k, v in d.items() if k not in ("model_type", "transformers_version")})
    cfg.bias, cfg.eagle_shift, cfg.eagle_inputs = bias, shift, inputs
    return cfg


class HeadDecoderLayer(nn.Module):
    """A Llama decoder layer without the input norm (EAGLE feeds it the fused fc output directly)."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.self_attn = HeadAttention(cfg)
        self.mlp = LlamaMLP(cfg)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, x, cos, sin, cache, attn_mask):
        out = head_layer(self, x, cos, sin, cache, attn_mask)   # drafting: the same body in C++ (layer_body.py)
        if out is not None:
            return out
        x = x + self.self_attn(x, cos, sin, cache, attn_mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class EagleHead(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.config = cfg
        self.shift = getattr(cfg, "eagle_shift", "shifted")
        if self.shift not in SHIFTS:
            raise HeadLoadError(f"head config eagle_shift={self.shift!r}; expected one of {SHIFTS}")
        self.inputs = getattr(cfg, "eagle_inputs", None) or "feature+token"
        if self.inputs not in INPUTS:
            raise HeadLoadError(f"head config eagle_inputs={self.inputs!r}; expected one of {INPUTS}")
        if self.inputs != "feature+token" and self.shift != "shifted":
            raise HeadLoadError(f"a {self.inputs}-only head uses the shifted pairing, not {self.shift}")
        H = cfg.hidden_size
        self.fc = nn.Linear(2 * H if self.inputs == "feature+token" else H, H, bias=bool(getattr(cfg, "bias", True)))
        self.layers = nn.ModuleList([HeadDecoderLayer(cfg)])
        self.rotary_emb = LlamaRotaryEmbedding(cfg)
        self.path: str | None = None

    @property
    def kind(self) -> str:
        """What the head sees, in the words of EAGLE's ablation."""
        if self.inputs == "feature+token":
            return f"feature & {self.shift} token"
        return f"{self.inputs} only"

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    def new_cache(self, max_len: int) -> HeadCache:
        a = self.layers[0].self_attn
        p = self.fc.weight
        return HeadCache(a.n_kv, a.head_dim, max_len, p.device, p.dtype)

    def forward(self, features, token_embeds, position_ids, cache: HeadCache | None = None, attn_mask=None):
        """features, token_embeds: [B, n, H]; returns the predicted features [B, n, H].

        attn_mask: None for plain causal attention over this input alone (training); otherwise an additive
        [1, 1, n, cache_len + n] mask (the drafting code builds the ancestry mask).
        """
        if self.inputs == "feature+token":
            x = self.fc(torch.cat((token_embeds, features), dim=-1))
        else:  # the other input is never read, so no gradient or information flows through it
            x = self.fc(features if self.inputs == "feature" else token_embeds)
        cos, sin = self.rotary_emb(x, position_ids)
        return self.layers[0](x, cos.to(x.dtype), sin.to(x.dtype), cache, attn_mask)

    # ---------------------------------------------------------------- checkpoints
    def save(self, folder: str, extra: dict | None = None, dtype: torch.dtype | None = None):
        """config.json + model.safetensors; `dtype` (e.g. fp16) halves the file, loading casts to the target's."""
        os.makedirs(folder, exist_ok=True)
        state = {k: v.detach().to("cpu", dtype=dtype or v.dtype).contiguous() for k, v in self.state_dict().items()
                 if not k.startswith("rotary_emb.")}
        save_file(state, os.path.join(folder, HEAD_WEIGHTS), metadata={"format": "pt"})
        d = self.config.to_dict()
        d.update(architectures=["EagleHead"], bias=bool(getattr(self.config, "bias", True)),
                 eagle_shift=self.shift, eagle_inputs=self.inputs, num_hidden_layers=1)
        if dtype is not None:   # what the file holds (loading casts to the target's dtype)
            d["dtype"] = str(dtype).replace("torch.", "")
        d.update(extra or {})
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(d, f, indent=2, sort_keys=True)


_INPUT_NORM = "layers.0.input_layernorm.weight"
_IGNORED_KEYS = ("embed_tokens.weight", "lm_head.weight", _INPUT_NORM)


def _check_input_norm(state: dict, folder: str):
    """EAGLE's first layer has no input norm, so a checkpoint's input_layernorm weight is dropped on load.

    All ones is the untouched init (a no-op scale); anything else was trained and its loss would change
    the head's output without a word, so say so.
    """
    w = state.get(_INPUT_NORM)
    if w is not None and not torch.allclose(w.float(), torch.ones_like(w, dtype=torch.float32), rtol=0, atol=1e-6):
        warnings.warn(f"head checkpoint in {folder} carries a trained {_INPUT_NORM} (not all ones); this head has "
                      f"no input norm (as in EAGLE), so that weight is dropped and outputs may differ from the "
                      f"model it was trained in", stacklevel=3)


def _read_state(folder: str) -> dict:
    st = os.path.join(folder, HEAD_WEIGHTS)
    if os.path.exists(st):
        return load_file(st)
    bins = [f for f in sorted(os.listdir(folder)) if f.endswith(".bin")]
    if not bins:
        raise HeadLoadError(f"no {HEAD_WEIGHTS} or .bin weights in {folder}")
    state = {}
    for b in bins:
        try:  # weights only: a pickle that would run code is refused
            state.update(torch.load(os.path.join(folder, b), map_location="cpu", weights_only=True))
        except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError) as exc:
            raise HeadLoadError(f"refusing {b}: not a weights-only checkpoint "
                                f"({str(exc).splitlines()[0][:160]})") from None
    return state


def _resolve_folder(path: str) -> str:
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise HeadLoadError(f"head path {path!r} is a file; give the folder with config.json")
    if path.count("/") == 1 and not path.startswith((".", "/", "~")):
        from .target import hub_reachable
        online = hub_reachable()
        try:
            from huggingface_hub import snapshot_download
            return snapshot_download(path, allow_patterns=["config.json", "*.safetensors", "*.bin"],
                                     local_files_only=not online)
        except Exception as exc:
            if not online:
                raise HeadLoadError(f"head {path!r} is not in the local hub cache and the hub is not "
                                    f"reachable from here") from None
            raise HeadLoadError(f"cannot fetch head {path!r}: {str(exc).splitlines()[0][:200]}") from None
    raise HeadLoadError(f"head {path!r} not found (a folder with config.json, or a hub id)")


def load_head(path: str, target=None, shift: str | None = None) -> EagleHead:
    """Load a head from a folder (or hub id): config.json + safetensors, or an EAGLE-1 `.bin`; an EAGLE-3 head
    (head3.py) when its config says so."""
    folder = _resolve_folder(path)
    cfg_path = os.path.join(folder, "config.json")
    if not os.path.exists(cfg_path):
        raise HeadLoadError(f"{folder} has no config.json")
    with open(cfg_path) as f:
        d = json.load(f)
    if is_eagle3_config(d):
        return load_eagle3_head(folder, d, target)
    d.pop("architectures", None)
    d["num_hidden_layers"] = 1
    d.setdefault("bias", True)
    d.setdefault("eagle_shift", shift or "shifted")
    d.setdefault("eagle_inputs", "feature+token")   # released EAGLE heads and the app's first heads
    cfg = LlamaConfig(**{k: v for k, v in d.items() if k not in ("model_type", "transformers_version")})
    cfg.bias, cfg.eagle_shift, cfg.eagle_inputs = d["bias"], d["eagle_shift"], d["eagle_inputs"]
    if target is not None and cfg.hidden_size != target.hidden_size:
        raise HeadLoadError(f"head hidden size {cfg.hidden_size} does not match the target's "
                            f"{target.hidden_size}: this head was trained for another model")
    found = stored_shapes(folder)
    state = None
    if found is None:   # an EAGLE-1 .bin: its tensors are read to learn their shapes
        state = _read_state(folder)
        found = {k: tuple(v.shape) for k, v in state.items()}
    fc = found.get("fc.weight") or found.get("model.fc.weight")
    width = cfg.hidden_size * (2 if cfg.eagle_inputs == "feature+token" else 1)
    if fc is not None and len(fc) == 2 and fc[1] != width:
        raise HeadLoadError(f"head weights in {folder}: fc takes {fc[1]} inputs, but a {cfg.eagle_inputs} head of "
                            f"this size takes {width} (eagle_inputs in config.json is wrong?)")
    try:
        check_shapes(lambda: EagleHead(cfg), {k: v for k, v in found.items() if not k.endswith(_IGNORED_KEYS)},
                     folder, rename=lambda k: k[len("model."):] if k.startswith("model.") else k)
        head = EagleHead(cfg)
    except HeadLoadError as exc:
        raise HeadLoadError(exc if str(exc).startswith(("head weights", folder)) else f"{folder}: {exc}") from None
    state = {k[len("model."):] if k.startswith("model.") else k: v
             for k, v in (state if state is not None else _read_state(folder)).items()}
    _check_input_norm(state, folder)
    state = {k: v for k, v in state.items() if k not in _IGNORED_KEYS}
    missing, unexpected = head.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.startswith("rotary_emb.")]
    if missing or unexpected:
        raise HeadLoadError(f"head weights in {folder} do not fit the EAGLE layout: "
                            f"missing {missing[:4]}, unexpected {list(unexpected)[:4]}")
    head.path = folder
    if target is not None:
        head = head.to(device=target.device, dtype=target.dtype)
    return head.eval()


def random_head(target, shift: str = "shifted", seed: int = 0, inputs: str = "feature+token") -> EagleHead:
    """A randomly initialised head: drafting is poor, but verification must stay exact with it."""
    g = torch.random.fork_rng(devices=[])
    with g:
        torch.manual_seed(seed)
        head = EagleHead(head_config_from_target(target.config, shift, inputs=inputs))
        for m in head.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=getattr(head.config, "initializer_range", 0.02))
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
    head.path = f"random:{shift}"
    return head.to(device=target.device, dtype=target.dtype).eval()


def resolve_head(spec: str | None, target) -> EagleHead:
    """`shifted`/`unshifted` (the shipped heads), `eagle3` (the shipped EAGLE-3 head, head3.py), the lab's
    ablation heads (`ablation-shifted`, `ablation-unshifted`, `feature-only`, `token-only`),
    `random`/`random-unshifted`/`random-eagle3`, or a path / hub id."""
    spec = spec or "shifted"
    if spec in ("eagle3", "random-eagle3"):
        if spec == "random-eagle3":
            from .vocab import load_draft_vocab
            return random_eagle3_head(target, load_draft_vocab(8192, target.tokenizer))
        if not os.path.exists(os.path.join(SHIPPED_EAGLE3, "config.json")):
            raise HeadLoadError(f"the shipped eagle3 head is not in {SHIPPED_EAGLE3} yet; train one with "
                                f"python -m eagle_core.training --head-kind eagle3")
        return load_head(SHIPPED_EAGLE3, target)
    if spec in ("random", "random-shifted"):
        return random_head(target, "shifted")
    if spec == "random-unshifted":
        return random_head(target, "unshifted")
    if spec in SHIPPED_HEADS or spec in ABLATION_HEADS:
        folder = SHIPPED_HEADS.get(spec) or ABLATION_HEADS[spec]
        if not os.path.exists(os.path.join(folder, "config.json")):
            raise HeadLoadError(f"the shipped {spec} head is not in {folder} yet; "
                                f"use --head random or train one with python -m eagle_core.training")
        return load_head(folder, target)
    return load_head(spec, target)
