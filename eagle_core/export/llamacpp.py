"""Export an EAGLE-3 head to llama.cpp: a GGUF its `--spec-type draft-eagle3` loads beside the target's GGUF.

    python -m eagle_core.export --head eagle3 --engine llama.cpp --out DIR

writes DIR/eagle3.gguf (and DIR/hf/, the folders it was converted from) with llama.cpp's own converter of the built
version (scripts/setup_llamacpp.sh), and prints the llama.cpp commands that run it with the embedded target.

The head goes through the layout vLLM reads (vllm.py: the released yuhuili/EAGLE3-* layout), which is also what
llama.cpp's convert_hf_to_gguf.py takes for an EAGLE-3 draft (`--target-model-dir` names a folder with the
target's config and tokenizer: only those are read, so only those are written). What llama.cpp's eagle3 graph
computes, checked against head3.py:
  - extract_layers: llama.cpp collects the *input* of each named target layer (llama-context.cpp
    extract_layer_inputs), transformers' hidden_states[i]: the numbering vllm.py gives vLLM;
  - exactly three layers (llama.cpp refuses another count), in the fc's column order;
  - the decoder layer: q/k/v over [input_layernorm(embedding), hidden_norm(fc(features))], the un-normed fc output
    as the residual (norm_before_residual false), the pre-norm output fed to the next step; norm + LM head over
    the draft vocabulary, d2t to target ids (absolute ids in the GGUF), the target's token embedding shared.

An EAGLE-1 head (the shifted head and its ablations) is refused: llama.cpp has no EAGLE-1 drafter, and its eagle3
graph cannot hold one (it norms the embedding and the fused features apart before attention, where EAGLE-1's
layer reads fc([e; f]) with no norm).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import torch

from .vllm import ExportError, eagle3_check, eagle3_state_for_vllm, export_head, is_eagle3

GGUF_NAME = "eagle3.gguf"


def check_exportable_llamacpp(target, head) -> list[int]:
    """The aux layer ids llama.cpp will read (ExportError when llama.cpp cannot run this head with this target)."""
    if not is_eagle3(head):
        raise ExportError("llama.cpp has no EAGLE-1 drafter (its speculative types are draft-simple, draft-eagle3, "
                          "draft-mtp, draft-dflash, draft-dspark and n-gram ones), and its eagle3 graph cannot hold "
                          "an EAGLE-1 head: it norms the token embedding and the fused features apart before "
                          "attention, where EAGLE-1's layer reads fc([e; f]) un-normed. Export an EAGLE-3 head "
                          "(--head eagle3), or use --engine vllm")
    _, aux_ids = eagle3_state_for_vllm(head, target.model.config)
    if len(aux_ids) != 3:
        raise ExportError(f"llama.cpp's eagle3 reads exactly 3 target layers; this head reads {len(aux_ids)} "
                          f"distinct ones ({aux_ids})")
    return aux_ids


def write_target_card(target, folder: str) -> None:
    """The target's config (a plain Llama, no quantization) and tokenizer: all the converter reads of it."""
    cfg = target.model.config
    if getattr(cfg, "model_type", "") != "llama":
        raise ExportError(f"only Llama-family targets are exported (this one is {cfg.model_type!r})")
    os.makedirs(folder, exist_ok=True)
    d = cfg.to_dict()
    d.pop("quantization_config", None)
    d.update(architectures=["LlamaForCausalLM"], model_type="llama")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)
    target.tokenizer.save_pretrained(folder)


def convert(head_dir: str, target_dir: str, outfile: str, timeout: float = 600) -> str:
    """llama.cpp's convert_hf_to_gguf.py (the built version, its own gguf-py) on the head folder; its log."""
    from ..llamacpp import converter
    script, env = converter()
    cmd = [sys.executable, script, head_dir, "--target-model-dir", target_dir, "--outtype", "f32",
           "--outfile", outfile]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0 or not os.path.exists(outfile):
        raise ExportError(f"llama.cpp's converter failed (exit {p.returncode}): {p.stderr.strip()[-1200:]}")
    return p.stderr


def export_llamacpp(target, head, out: str) -> dict:
    """Write out/eagle3.gguf (through out/hf/eagle3 and out/hf/target); returns what was written."""
    aux_ids = check_exportable_llamacpp(target, head)
    hf = os.path.join(out, "hf")
    written = export_head(target, head, hf)               # hf/eagle3: the layout the converter reads
    # the converter reads the layer ids at the config's top level only: without them it falls back on
    # [2, L // 2, L - 3], which is right for the shipped head on SmolLM2's 30 layers by coincidence alone
    cfg_path = os.path.join(written["head"], "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["eagle_aux_hidden_state_layer_ids"] = list(aux_ids)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    write_target_card(target, os.path.join(hf, "target"))
    gguf_path = os.path.join(out, GGUF_NAME)
    log = convert(written["head"], os.path.join(hf, "target"), gguf_path)
    return dict(gguf=gguf_path, hf=hf, aux_ids=aux_ids, state=written["state"], converter_log=log)


def read_back(gguf_path: str) -> dict:
    """What llama.cpp will read from the GGUF: its architecture, the target layers it extracts (the key
    `eagle3.target_layers`, which llama.cpp's loader calls extract_layers) and the tensors (installed gguf reader)."""
    from gguf import GGUFReader
    r = GGUFReader(gguf_path)

    def field(name):
        f = r.fields.get(name)
        if f is None:
            return None
        if f.types[0].name == "STRING":
            return bytes(f.parts[f.data[0]]).decode()
        vals = [f.parts[i].tolist()[0] for i in f.data]
        return vals if f.types[0].name == "ARRAY" else vals[0]

    arch = field("general.architecture")
    return dict(arch=arch, extract_layers=field(f"{arch}.target_layers"),
                tensors={t.name: torch.from_numpy(t.data.copy()) for t in r.tensors})


def commands(target_gguf: str, head_gguf: str, k: int = 3) -> str:
    """The llama.cpp lines that run the exported head with the target (printed by the CLI)."""
    from ..llamacpp import home
    b = os.path.join(home(), "bin")
    t, h = shlex.quote(target_gguf), shlex.quote(head_gguf)
    return "\n".join([
        "# greedy speculative decoding with the head as llama.cpp's EAGLE-3 draft (a chain of k tokens a cycle):",
        f"{b}/llama-speculative-simple -m {t} -md {h} --spec-type draft-eagle3 --spec-draft-n-max {k} "
        f"-p 'How can I learn Python?' -n 64 --temp 0 --top-k 1",
        "# llama.cpp's plain decoding of the same target, for comparison:",
        f"{b}/llama-completion -m {t} -p 'How can I learn Python?' -n 64 --temp 0 --top-k 1 -no-cnv",
    ])


def main_llamacpp(target, head, out: str, target_gguf: str | None) -> int:
    written = export_llamacpp(target, head, out)
    print(f"wrote {written['gguf']} (EAGLE-3 head for llama.cpp's draft-eagle3: target layers {head.aux_layers} "
          f"read as llama.cpp's extract_layers {written['aux_ids']}; draft vocabulary {head.d2t.numel()} tokens; "
          f"largest relative difference of the exported fc on random inputs: "
          f"{eagle3_check(head, written['state'], written['aux_ids']):.1e})")
    if target_gguf:
        print(commands(target_gguf, written["gguf"]))
    else:
        print("the target must be a GGUF for llama.cpp: convert it with llama.cpp's convert_hf_to_gguf.py")
    return 0
