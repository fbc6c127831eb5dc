"""`python -m eagle_core.export`: the command line of the exports (vllm.py for vLLM, llamacpp.py for llama.cpp).

    python -m eagle_core.export [--head shifted | eagle3 | PATH] [--target embedded] --out DIR
    python -m eagle_core.export --head eagle3 --engine llama.cpp --out DIR
"""
from __future__ import annotations

import argparse
import sys

import torch

from .vllm import ExportError, commands, eagle3_check, embedded_target_gguf, export, fold_check


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eagle_core.export", description="Export an EAGLE head (and its target) for vLLM or llama.cpp.")
    ap.add_argument("--head", default="shifted",
                    help="shifted (the shipped head) | eagle3 (the shipped EAGLE-3 head) | random-eagle3 | a head "
                         "folder (EAGLE-1 or EAGLE-3) | a hub id")
    ap.add_argument("--target", default=None, help="embedded (default) | a folder | a hub id")
    ap.add_argument("--out", required=True, help="folder to write target/ and eagle/ (eagle3/) into")
    ap.add_argument("--engine", choices=["vllm", "llama.cpp"], default="vllm",
                    help="vllm: safetensors folders (default); llama.cpp: OUT/eagle3.gguf for --spec-type "
                         "draft-eagle3, with the converter of scripts/setup_llamacpp.sh's build")
    ap.add_argument("--target-gguf", default=None,
                    help="llama.cpp: the target's GGUF for the printed commands (default: the embedded one)")
    args = ap.parse_args(argv)
    from ..quiet import quiet_libraries
    quiet_libraries()                   # the GGUF loader's bar per tensor
    from ..model.head import HeadLoadError, resolve_head
    from ..model.target import TargetLoadError, load_target
    try:
        target = load_target(args.target, device="cpu", dtype=torch.float32, pack=False)
        head = resolve_head(args.head, target)
        if args.engine == "llama.cpp":
            from .llamacpp import check_exportable_llamacpp, main_llamacpp
            from ..llamacpp import LlamaCppMissing
            try:
                check_exportable_llamacpp(target, head)        # a head llama.cpp cannot run: said before the build
                gguf = args.target_gguf or (embedded_target_gguf() if args.target in (None, "", "embedded")
                                            else None)
                return main_llamacpp(target, head, args.out, gguf)
            except LlamaCppMissing as exc:
                raise ExportError(str(exc)) from None
        written = export(target, head, args.out)
    except (ExportError, HeadLoadError, TargetLoadError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    state = written["state"]
    if written["method"] == "eagle3":
        print(f"wrote {written['target']} (target) and {written['head']} (EAGLE-3 head: {len(written['tensors'])} "
              f"tensors; target layers {head.aux_layers} read as vLLM's {written['aux_ids']}; draft vocabulary "
              f"{head.d2t.numel()} tokens{'' if 'd2t' in state else ' (the whole vocabulary: no d2t)'}; largest "
              f"relative difference of the exported fc on random inputs: "
              f"{eagle3_check(head, state, written['aux_ids']):.1e})")
    else:
        print(f"wrote {written['target']} (target) and {written['head']} (EAGLE head: {len(written['tensors'])} "
              f"tensors; fc.bias folded: {'layers.0.self_attn.o_proj.bias' in state}; largest relative difference "
              f"of the folded q/k/v on random inputs: {fold_check(head, state):.1e})")
    print(commands(args.out, method=written["method"]))
    return 0




if __name__ == "__main__":
    sys.exit(main())
