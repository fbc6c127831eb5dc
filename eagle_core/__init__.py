"""EAGLE Lens's engine: EAGLE speculative decoding (feature-level drafting, arXiv 2401.15077), UI-free.

    from eagle_core import load_target, resolve_head, DecodeConfig, generate
    target = load_target()                        # the embedded SmolLM2-135M-Instruct (or a folder / hub id)
    head = resolve_head("shifted", target)        # the shipped EAGLE head (or a folder / yuhuili/EAGLE-*)
    result = generate(target, head, DecodeConfig(draft="static"), target.render_prompt("How can I ...?"))

Layout, one job per package (dependencies point one way: decoding -> model; nothing in model/ or decoding/
imports the benchmark, the lab, training, serving or UI code):
    model/     the target, the draft head, tree attention, CPU kernels, draft vocabulary, token bytes
    decoding/  tree, presets, draft, sampling, verify, engine (the loop), records, limits, divergence, ambiguity
    training/  ShareGPT data and features, the training loop, self-generated data
    bench/     the benchmark, its prompt sets, tree fitting, machine load, the shared metrics
    lab/       the Paper lab's measurements
    serving/   one model for many sessions: fair lock, sessions, model turns, generation, loading
The names below load on first use, so `import eagle_core` (and views/, which reads its pure modules) stays light.
"""
import importlib

_API = {
    "load_target": "eagle_core.model.target", "Target": "eagle_core.model.target",
    "resolve_head": "eagle_core.model.head", "EagleHead": "eagle_core.model.head",
    "DecodeConfig": "eagle_core.decoding.engine", "EagleDecoder": "eagle_core.decoding.engine",
    "generate": "eagle_core.decoding.engine", "stream": "eagle_core.decoding.engine",
    "default_config": "eagle_core.decoding.engine", "tree_presets": "eagle_core.decoding.presets",
    "LIMITS": "eagle_core.decoding.limits",
}
__all__ = sorted(_API)


def __getattr__(name):
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'eagle_core' has no attribute {name!r}")
