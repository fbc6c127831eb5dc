"""Quiet third-party libraries for the command-line tools (benchmark, export, lab, tree fitting): one helper that
imports nothing of eagle_core, so every command can call it without importing another command's module."""
import os


def quiet_libraries():
    """Silence transformers' warnings and the progress bars of the hub and of tqdm, unless the user set them:
    the GGUF loader draws a bar per tensor, and tqdm reads TQDM_DISABLE when first imported (our own bar passes
    disable=...). Called by the commands' main(), never on import."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
