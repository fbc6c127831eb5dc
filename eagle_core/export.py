"""Export a target and an EAGLE head for vLLM: the same head, run by a serving engine.

    python -m eagle_core.export [--head shifted] [--target embedded] --out DIR

writes
    DIR/target/   the target as an ordinary safetensors folder (config, weights, tokenizer, chat template)
    DIR/eagle/    the head in the layout vLLM loads for speculative_config={"method": "eagle", "model": DIR/eagle}
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
"""
from __future__ import annotations

import argparse
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


def export(target, head, out: str) -> dict:
    """Write out/target and out/eagle; returns what was written."""
    from safetensors.torch import save_file
    state = head_state_for_vllm(head)
    export_target(target, os.path.join(out, "target"))
    eagle = os.path.join(out, "eagle")
    os.makedirs(eagle, exist_ok=True)
    save_file(state, os.path.join(eagle, "model.safetensors"), metadata={"format": "pt"})
    cfg = head_config_for_vllm(head, target.model.config, folded="layers.0.self_attn.o_proj.bias" in state)
    with open(os.path.join(eagle, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    return {"target": os.path.join(out, "target"), "eagle": eagle, "tensors": sorted(state), "state": state}


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


def commands(out: str, k: int = 2) -> str:
    """The lines that run the export in vLLM (printed by the CLI, shown by the app)."""
    t, e = os.path.join(out, "target"), os.path.join(out, "eagle")
    spec = json.dumps({"method": "eagle", "model": e, "num_speculative_tokens": k})
    return "\n".join([
        "# serve (OpenAI-compatible API) from vLLM's environment (scripts/setup_vllm.sh makes .venv-vllm):",
        f".venv-vllm/bin/vllm serve {shlex.quote(t)} --dtype float32 --speculative-config {shlex.quote(spec)}",
        "# or in Python (.venv-vllm/bin/python):",
        "from vllm import LLM, SamplingParams",
        f"llm = LLM(model={t!r}, dtype='float32', speculative_config={spec})",
        "print(llm.generate(['How can I learn Python?'], SamplingParams(temperature=0, max_tokens=64))[0]"
        ".outputs[0].text)",
    ])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eagle_core.export", description=__doc__.splitlines()[0])
    ap.add_argument("--head", default="shifted", help="shifted (the shipped head) | a head folder | a hub id")
    ap.add_argument("--target", default=None, help="embedded (default) | a folder | a hub id")
    ap.add_argument("--out", required=True, help="folder to write target/ and eagle/ into")
    args = ap.parse_args(argv)
    from .bench.run import quiet_libraries
    quiet_libraries()                   # the GGUF loader's bar per tensor
    from .model.head import HeadLoadError, resolve_head
    from .model.target import TargetLoadError, load_target
    try:
        target = load_target(args.target, device="cpu", dtype=torch.float32, pack=False)
        head = resolve_head(args.head, target)
        written = export(target, head, args.out)
    except (ExportError, HeadLoadError, TargetLoadError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    state = written["state"]
    print(f"wrote {written['target']} (target) and {written['eagle']} (EAGLE head: {len(written['tensors'])} "
          f"tensors; fc.bias folded: {'layers.0.self_attn.o_proj.bias' in state}; largest relative difference of "
          f"the folded q/k/v on random inputs: {fold_check(head, state):.1e})")
    print(commands(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
