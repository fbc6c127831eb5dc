"""Outputs a handler leaves as they are, sent without rebuilding them.

A handler that returns a dict of some of its outputs (a Run's streamed text, a queue note) leaves the others to
`gr.skip()`. gradio 6.31 (`Blocks.postprocess_data`) treats a skip like any property update: it constructs a new
component from the old one's arguments and recomputes its config (the component's pydantic JSON schema included),
~0.3-0.5 ms an output alone and several times that when thirty students share the GIL. A class's Runs stream
~20 updates a second with six unchanged outputs each, and the profile of the 30-student load test showed
gradio's postprocessing holding the GIL a fifth of the time, while the engine loop's thread waited for it between
its torch calls. This runs gradio's own postprocessing on the outputs that change, and answers the others with
exactly what gradio sends for a skip (`{"__type__": "update"}`, `None` for a state); tests/test_gradio_skip.py
checks the two agree output for output, and that the skipped components are not rebuilt.
"""
from __future__ import annotations

import copy

SKIP = {"__type__": "update"}


def _per_output(block_fn, predictions) -> list | None:
    """Each output's value when the return is a dict of outputs or a bare skip (an output it does not name: a
    skip); None for any other return (gradio's own path)."""
    from gradio.blocks import Block
    outs = block_fn.outputs
    if len(outs) < 2 or block_fn.batch or block_fn.is_validator_function or not isinstance(predictions, dict):
        return None
    if predictions == SKIP:
        return [SKIP] * len(outs)
    if not predictions or not all(isinstance(k, Block) for k in predictions):
        return None
    by_id = {k._id: v for k, v in predictions.items()}
    if not set(by_id) <= {b._id for b in outs}:
        return None
    return [by_id.get(b._id, SKIP) for b in outs]


def sent_for_skip(block):
    """What gradio 6.31 sends for a skipped output: nothing for a state; for gr.HTML its update also echoes the
    update's non-constructor keys (here only "__type__") as "props"."""
    from gradio.components import HTML
    if block.stateful:
        return None
    return {"props": dict(SKIP), **SKIP} if isinstance(block, HTML) else dict(SKIP)


def install():
    """Wrap `gradio.Blocks.postprocess_data` (once)."""
    from gradio.blocks import Blocks
    original = Blocks.postprocess_data
    if getattr(original, "skips_unchanged", False):
        return

    async def postprocess_data(self, block_fn, predictions, state):
        values = _per_output(block_fn, predictions)
        kept = None if values is None else [i for i, v in enumerate(values) if not (isinstance(v, dict) and v == SKIP)]
        if values is None or len(kept) == len(values):
            return await original(self, block_fn, predictions, state)
        outs = block_fn.outputs
        result = [sent_for_skip(b) for b in outs]
        if kept:
            sub = copy.copy(block_fn)
            sub.outputs = [outs[i] for i in kept]
            done = await original(self, sub, [values[i] for i in kept] if len(kept) > 1 else values[kept[0]], state)
            for i, v in zip(kept, done):
                result[i] = v
        return result

    postprocess_data.skips_unchanged = True
    Blocks.postprocess_data = postprocess_data
