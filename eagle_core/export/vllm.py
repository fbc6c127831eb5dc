"""Export a target and an EAGLE head for vLLM: the same head, run by a serving engine.

    python -m eagle_core.export [--head shifted | eagle3 | PATH] [--target embedded] --out DIR
    python -m eagle_core.export --head eagle3 --engine llama.cpp --out DIR     (llamacpp.py)

writes
    DIR/target/   the target as an ordinary safetensors folder (config, weights, tokenizer, chat template)
    DIR/eagle/    an EAGLE-1 head in the layout vLLM loads for {"method": "eagle", "model": DIR/eagle}
    DIR/eagle3/   or an EAGLE-3 head (model/head3.py) in the layout of {"method": "eagle3", "model": DIR/eagle3}
and prints the `vllm serve` and Python lines that use them.

vLLM's EAGLE-1 Llama layer is ours (fc over [e(token), feature], one decoder layer without input norm, the target's
embedding and LM head) except that its `fc` has no bias. Dropping ours would change the head, so it is carried
exactly, by linearity: the layer's input is x = W[e; f] + b and the layer reads x in three places, all linear
before anything else happens to it,
    q/k/v = W_qkv x = W_qkv (W[e; f]) + W_qkv b       -> qkv biases W_qkv b (RoPE acts after the projection)
    the residual x + attn(x)                           -> b added once: the o_proj bias
so the exported layer computes the same function of (e, f) (in exact arithmetic; in floating point the sums are
taken in another order: the check below measures the difference). A head vLLM cannot represent (feature-only or
token-only inputs, or the unshifted pairing: vLLM always feeds the token sampled after the feature) is refused.

The EAGLE-3 head is already in the layout of the released yuhuili/EAGLE3-* heads, which vLLM 0.32's
llama_eagle3.py (Eagle3LlamaForCausalLM) reads: `fc.weight`, `midlayer.*` (renamed layers.0.*), `norm.weight`,
`lm_head.weight` over the draft vocabulary, `d2t` (draft id d is target id d + d2t[d]); it shares the target's
embedding when the file has none (as ours does), feeds the un-normed hidden input as the residual
(norm_before_residual false) and the pre-norm output to the next step (norm_output false), as head3.py does. What
differs is in eagle3_state_for_vllm: how vLLM collects the target layers (in layer order, each once) and when it
reads d2t (only for a draft vocabulary smaller than the target's).
"""
from __future__ import annotations

import json
import os
import shlex
import sys

import torch

EAGLE_KEYS = ("fc.weight", "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
              "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight",
              "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight",
              "layers.0.post_attention_layernorm.weight")


class ExportError(ValueError):
    """What cannot be exported, said for the user."""


def head_state_for_vllm(head) -> dict[str, torch.Tensor]:
    """The head's tensors under vLLM's EAGLE names, with fc.bias folded into the attention's biases (fp32 sums)."""
    if is_eagle3(head):
        raise ExportError("an EAGLE-3 head runs as vLLM's method eagle3 (eagle3_state_for_vllm), not eagle")
    if head.inputs != "feature+token":
        raise ExportError(f"vLLM's EAGLE drafter fuses [token embedding, feature]; this head reads "
                          f"{head.inputs} only, which it cannot represent")
    if head.shift != "shifted":
        raise ExportError("vLLM's EAGLE drafter pairs feature f_i with the token sampled at i+1 (the shifted "
                          "pairing); this head was trained unshifted, so vLLM would feed it inputs it never saw")
    sd = {k: v.detach().to("cpu") for k, v in head.state_dict().items() if not k.startswith("rotary_emb.")}
    unknown = set(sd) - set(EAGLE_KEYS) - {"fc.bias"}
    if unknown:
        raise ExportError(f"the head has tensors vLLM's EAGLE layer has no place for: {sorted(unknown)}")
    out = {k: sd[k].contiguous() for k in EAGLE_KEYS}
    b = sd.get("fc.bias")
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        if getattr(head.layers[0].self_attn, name).bias is not None:
            raise ExportError(f"the head's {name} already has a bias; folding fc.bias into it is not built")
    if b is not None:
        dt = b.dtype
        for name in ("q_proj", "k_proj", "v_proj"):
            w = sd[f"layers.0.self_attn.{name}.weight"]
            out[f"layers.0.self_attn.{name}.bias"] = (w.double() @ b.double()).to(dt).contiguous()
        out["layers.0.self_attn.o_proj.bias"] = b.clone().contiguous()
    return out


def head_config_for_vllm(head, target_config, folded: bool) -> dict:
    """A one-layer Llama config vLLM reads as an EAGLE draft (architecture LlamaForCausalLM, like the released
    yuhuili/EAGLE-* heads). vLLM's Llama attention: `attention_bias` gives q/k/v/o biases, `qkv_bias` (when set)
    overrides the q/k/v part."""
    d = head.config.to_dict()
    for k in ("eagle_training", "eagle_shift", "eagle_inputs", "bias", "_model_name_or_path", "_name_or_path",
              "quantization_config", "auto_map", "id2label", "label2id"):
        d.pop(k, None)
    d.update(architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=1,
             attention_bias=folded, qkv_bias=folded, mlp_bias=False,
             vocab_size=int(target_config.vocab_size), dtype="float32")
    d["eagle_lens"] = {"exported_from": head.path or "random", "shift": head.shift, "inputs": head.inputs,
                       "fc_bias_folded": folded,
                       "note": "fc.bias folded into q/k/v biases (W b) and the o_proj bias (b): the same function"}
    return d


def is_eagle3(head) -> bool:
    return getattr(head, "kind_name", "") == "eagle3"


EAGLE3_LAYER_KEYS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                     "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                     "input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight")
EAGLE3_KEYS = ("fc.weight", "norm.weight", "lm_head.weight") + tuple("midlayer." + k for k in EAGLE3_LAYER_KEYS)


def eagle3_aux_for_vllm(head, num_target_layers: int) -> tuple[list[int], torch.Tensor]:
    """(vLLM's eagle_aux_hidden_state_layer_ids, fc weight over them) for the head's `eagle_aux_layers`.

    Same numbering: vLLM's Llama (model_executor/models/llama.py, _maybe_add_hidden_state) collects id 0 before
    the first layer and id i + 1 after layer i, hidden_states + residual, i.e. the residual stream entering layer
    i: transformers' hidden_states[i], which the head reads, for 0 <= i < L. Id L differs (vLLM: the last layer's
    output before the final norm; transformers: after it), so it is refused. vLLM appends the states in layer
    order and a layer once however often it is named, so the fc's column blocks are put in ascending layer order
    and a repeated layer's blocks are summed (fc(.., x, .., x, ..) = (W_a + W_b) x: the same function)."""
    aux = [int(i) for i in head.aux_layers]
    bad = [i for i in aux if not 0 <= i < num_target_layers]
    if bad:
        L = num_target_layers
        raise ExportError(f"the head reads target layers {bad}; vLLM collects the input of layers 0..{L - 1} only "
                          f"(its id {L} is the last layer's output before the final norm, transformers' "
                          f"hidden_states[{L}] the one after it)")
    w = head.fc.weight.detach().to("cpu")
    blocks = w.chunk(len(aux), dim=1)
    ids = sorted(set(aux))
    merged = []
    for i in ids:
        mine = [b for b, a in zip(blocks, aux) if a == i]
        merged.append(mine[0] if len(mine) == 1 else torch.stack([b.double() for b in mine]).sum(0).to(w.dtype))
    return ids, torch.cat(merged, dim=1).contiguous()


def eagle3_state_for_vllm(head, target_config) -> tuple[dict[str, torch.Tensor], list[int]]:
    """(the head's tensors as vLLM's Eagle3LlamaForCausalLM loads them, in fp32; the aux layer ids)."""
    sd = {k: v.detach().to("cpu") for k, v in head.state_dict().items() if not k.startswith("rotary_emb.")}
    unknown = set(sd) - set(EAGLE3_KEYS) - {"d2t"}
    if unknown:
        raise ExportError(f"the head has tensors vLLM's EAGLE-3 layer has no place for: {sorted(unknown)}")
    H, target_vocab = int(target_config.hidden_size), int(target_config.vocab_size)
    if head.hidden_size != H or head.fc.in_features != len(head.aux_layers) * H:
        # vLLM adds the target's embedding (width H) beside the hidden input and reads target states of width H
        raise ExportError(f"the head (hidden size {head.hidden_size}, fc over {head.fc.in_features}) does not fit "
                          f"a target of hidden size {H}")
    ids, fc = eagle3_aux_for_vllm(head, int(target_config.num_hidden_layers))
    out = {k: sd[k].float().contiguous() for k in EAGLE3_KEYS}
    out["fc.weight"] = fc.float()
    target_ids = head.target_ids.to("cpu").long()
    n = target_ids.numel()
    if n > target_vocab or int(target_ids.min()) < 0 or int(target_ids.max()) >= target_vocab:
        raise ExportError(f"the head's draft vocabulary ({n} ids, {int(target_ids.min())}..{int(target_ids.max())}) "
                          f"does not fit the target's {target_vocab} tokens")
    if torch.unique(target_ids).numel() != n:
        # vLLM scatters the draft logits to target ids (logits_new[:, targets] = logits): a repeated id keeps one
        raise ExportError("the head's draft vocabulary names a target id twice")
    if n == target_vocab:
        # vLLM reads d2t only when the draft vocabulary is smaller than the target's (otherwise it has no
        # draft_id_to_target_id and would reject the tensor); a full vocabulary in another order is carried by
        # putting the LM head's rows in target order, which is the same head
        lm = torch.empty_like(out["lm_head.weight"])
        lm[target_ids] = out["lm_head.weight"]
        out["lm_head.weight"] = lm
    else:
        out["d2t"] = (target_ids - torch.arange(n)).contiguous()     # int64 offsets, as vLLM adds them
    # no t2d (vLLM skips it) and no embed_tokens: vLLM then shares the target's embedding, the one the head reads
    return out, ids


def eagle3_config_for_vllm(head, target_config, aux_ids: list[int]) -> dict:
    """The EAGLE-3 config vLLM reads: architecture LlamaForCausalLMEagle3 (registry: Eagle3LlamaForCausalLM), the
    draft and target vocabularies, the target's hidden size and eagle_config's aux layer ids (which both the
    target's collection, gpu_model_runner._get_eagle3_aux_layers_from_config, and the fc width read)."""
    d = head.config.to_dict()
    for k in ("eagle_training", "eagle_kind", "eagle_aux_layers", "eagle_config", "bias", "_model_name_or_path",
              "_name_or_path", "quantization_config", "auto_map", "id2label", "label2id", "torch_dtype"):
        d.pop(k, None)
    d.update(architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1,
             attention_bias=False, mlp_bias=False, tie_word_embeddings=False, dtype="float32",
             vocab_size=int(target_config.vocab_size), draft_vocab_size=int(head.d2t.numel()),
             target_hidden_size=int(target_config.hidden_size),
             eagle_config={"eagle_aux_hidden_state_layer_ids": list(aux_ids), "use_aux_hidden_state": True},
             # vLLM's EAGLE-3 variants, each off: head3.py's layer is the default one of each
             norm_before_residual=False, norm_before_fc=False, fc_norm=False, norm_output=False)
    d["eagle_lens"] = {"exported_from": head.path or "random", "kind": "eagle3",
                       "eagle_aux_layers": list(head.aux_layers),
                       "note": "fc column blocks in ascending layer order, a repeated layer's blocks summed"}
    return d


def eagle3_check(head, state: dict, aux_ids: list[int], n: int = 64, seed: int = 0) -> float:
    """Largest relative difference between the head's fc over its aux layers and the exported fc over vLLM's
    (ascending, each layer once) on random layer states: 0 unless blocks were summed."""
    g = torch.Generator().manual_seed(seed)
    H = head.fc.in_features // len(head.aux_layers)
    states = {i: torch.randn(n, H, generator=g) for i in aux_ids}
    with torch.no_grad():
        ref = head.fc(torch.cat([states[i] for i in head.aux_layers], -1).to(head.fc.weight.dtype)).float()
        got = torch.cat([states[i] for i in aux_ids], -1) @ state["fc.weight"].float().T
    return float((ref - got).abs().max() / ref.abs().max().clamp_min(1e-30))


def export_target(target, folder: str) -> None:
    """The target as a plain LlamaForCausalLM safetensors folder (transformers will not save a GGUF-loaded model:
    a fresh model is built from its config and given its state dict)."""
    from transformers import AutoModelForCausalLM
    cfg = target.model.config
    if getattr(cfg, "model_type", "") != "llama":
        raise ExportError(f"only Llama-family targets are exported (this one is {cfg.model_type!r})")
    os.makedirs(folder, exist_ok=True)
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    state = {k: v.detach().to("cpu", torch.float32) for k, v in target.model.state_dict().items()}
    missing, unexpected = plain.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and cfg.tie_word_embeddings)]
    if missing or unexpected:
        raise ExportError(f"the target's weights do not fit a plain Llama: missing {missing[:5]}, "
                          f"unexpected {unexpected[:5]}")
    plain.config.architectures = ["LlamaForCausalLM"]
    if hasattr(plain.config, "quantization_config"):   # the GGUF file's: these weights are plain fp32 now
        del plain.config.quantization_config
    plain.save_pretrained(folder, safe_serialization=True)
    target.tokenizer.save_pretrained(folder)


def vllm_method(head) -> str:
    """vLLM's speculative method for the head, also the export's folder name."""
    return "eagle3" if is_eagle3(head) else "eagle"


def export_head(target, head, out: str) -> dict:
    """Write the head to out/eagle or out/eagle3 (vllm_method); returns what was written. Checked (ExportError)
    before anything is written."""
    from safetensors.torch import save_file
    method = vllm_method(head)
    cfg = target.model.config
    if method == "eagle3":
        state, aux_ids = eagle3_state_for_vllm(head, cfg)
        config = eagle3_config_for_vllm(head, cfg, aux_ids)
    else:
        state, aux_ids = head_state_for_vllm(head), None
        config = head_config_for_vllm(head, cfg, folded="layers.0.self_attn.o_proj.bias" in state)
    folder = os.path.join(out, method)
    os.makedirs(folder, exist_ok=True)
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    return {"method": method, "head": folder, method: folder, "tensors": sorted(state), "state": state,
            "aux_ids": aux_ids}


def check_exportable(target, head) -> None:
    """ExportError when vLLM cannot run the head with this target (so nothing is written for it)."""
    if is_eagle3(head):
        eagle3_state_for_vllm(head, target.model.config)
    else:
        head_state_for_vllm(head)


def export(target, head, out: str) -> dict:
    """Write out/target and the head (out/eagle or out/eagle3); returns what was written."""
    check_exportable(target, head)           # a head vLLM cannot run is refused before the target is written
    export_target(target, os.path.join(out, "target"))
    return dict(export_head(target, head, out), target=os.path.join(out, "target"))


def fold_check(head, state: dict, n: int = 64, seed: int = 0) -> float:
    """Largest relative difference between q/k/v computed from the head's fused input (with fc.bias) and from
    the folded form, on random inputs: what "exactly" means in floating point here."""
    g = torch.Generator().manual_seed(seed)
    H = head.config.hidden_size
    x = torch.randn(n, 2 * H, generator=g)
    with torch.no_grad():
        fused = head.fc(x.to(head.fc.weight.dtype)).float()
        worst = 0.0
        for name in ("q_proj", "k_proj", "v_proj"):
            w = state[f"layers.0.self_attn.{name}.weight"].float()
            ref = fused @ w.T
            b = state.get(f"layers.0.self_attn.{name}.bias")
            folded = (x @ state["fc.weight"].float().T) @ w.T + (b.float() if b is not None else 0)
            worst = max(worst, float((ref - folded).abs().max() / ref.abs().max().clamp_min(1e-30)))
    return worst


def commands(out: str, k: int = 2, method: str = "eagle") -> str:
    """The lines that run the export in vLLM (printed by the CLI, shown by the app); method: eagle | eagle3."""
    t, e = os.path.join(out, "target"), os.path.join(out, method)
    spec = json.dumps({"method": method, "model": e, "num_speculative_tokens": k})
    return "\n".join([
        "# serve (OpenAI-compatible API) from vLLM's environment (scripts/setup_vllm.sh makes .venv-vllm):",
        f".venv-vllm/bin/vllm serve {shlex.quote(t)} --dtype float32 --speculative-config {shlex.quote(spec)}",
        "# or in Python (.venv-vllm/bin/python):",
        "from vllm import LLM, SamplingParams",
        f"llm = LLM(model={t!r}, dtype='float32', speculative_config={spec})",
        "print(llm.generate(['How can I learn Python?'], SamplingParams(temperature=0, max_tokens=64))[0]"
        ".outputs[0].text)",
    ])


def embedded_target_gguf() -> str:
    from ..model.target import EMBEDDED_GGUF, embedded_gguf_dir
    return os.path.join(embedded_gguf_dir(), EMBEDDED_GGUF)
