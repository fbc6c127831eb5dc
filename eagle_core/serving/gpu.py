"""Where model work runs: in this process, or (ZeroGPU on Hugging Face Spaces) in a forked GPU worker per call.

ZeroGPU runs each @spaces.GPU call in a forked worker, so a decoder stepped there does not keep its state between
calls: there (or with EAGLE_LENS_PRECOMPUTE=1) a generation is decoded in one go and its recorded cycles are
revealed one per Step / streamed by Run (serving/generation.py: Replay).
"""
import os

try:  # ZeroGPU on Hugging Face Spaces; a no-op elsewhere
    import spaces
    gpu = spaces.GPU(duration=120)
except ImportError:
    spaces = None

    def gpu(fn):
        return fn

ZERO_GPU = bool(spaces and os.environ.get("SPACES_ZERO_GPU"))
PRECOMPUTE = os.environ.get("EAGLE_LENS_PRECOMPUTE", "1" if ZERO_GPU else "0") == "1"
