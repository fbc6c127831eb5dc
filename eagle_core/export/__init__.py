"""Export our heads to the serving engines: vllm.py (safetensors folders vLLM loads), llamacpp.py (a GGUF llama.cpp's
draft-eagle3 loads); __main__.py is `python -m eagle_core.export`. The vLLM layer is the base: llama.cpp's converter
reads the same released EAGLE-3 layout, so llamacpp.py builds on vllm.py, never the other way round."""
from .vllm import (EAGLE_KEYS, ExportError, check_exportable, commands, eagle3_check, eagle3_state_for_vllm,
                   embedded_target_gguf, export, export_head, export_target, fold_check, is_eagle3, vllm_method)

__all__ = ["EAGLE_KEYS", "ExportError", "check_exportable", "commands", "eagle3_check", "eagle3_state_for_vllm",
           "embedded_target_gguf", "export", "export_head", "export_target", "fold_check", "is_eagle3", "vllm_method"]
