"""The benchmark's llama.cpp methods: `llamacpp` (its plain decoding of the target's own GGUF) and
`llamacpp-eagle3` (its speculative decoding with our EAGLE-3 head, exported by export_llamacpp.py).

Each generation is one run of llama.cpp's own tool on the prompt (llamacpp.py): the seconds and the counters are
llama.cpp's (its eval time for the generated tokens, its decode time and draft counters), so loading the files is
not timed, as our methods' loading is not. The prompt goes in as the text of our rendered prompt ids (its chat
template and special tokens), and llama.cpp's count of prompt tokens must equal ours. The generated text comes back
as text and is tokenized again with the target's tokenizer for the report's token counts and comparisons.

llama.cpp computes with the GGUF's 4-bit blocks and 8-bit activations (its Q4_1 x Q8_1 dot products), another
numerical model than fp32: at T = 0 `llamacpp-eagle3` must decode what `llamacpp` decodes (the same engine), and
both are compared with fp32 only as numerics (where they part, not as mismatches).
"""
from __future__ import annotations

import os
import tempfile

from .errors import BenchError

LLAMACPP_METHODS = ("llamacpp", "llamacpp-eagle3")


class LlamaCppEngine:
    """One llama.cpp method: the files and settings each generation runs with."""

    def __init__(self, method: str, target_gguf: str, head_gguf: str | None = None, k: int = 3,
                 n_threads: int | None = None):
        self.method, self.target_gguf, self.head_gguf, self.k = method, target_gguf, head_gguf, k
        self.n_threads = n_threads

    def own_pids(self):
        return ()         # one child process a generation: its CPU counts as ours once it is waited for

    def generate(self, prompt: str, max_new_tokens: int):
        from ..llamacpp import generate_eagle3, generate_plain
        if self.head_gguf:
            return generate_eagle3(self.target_gguf, self.head_gguf, prompt, max_new_tokens, k=self.k,
                                   n_threads=self.n_threads)
        return generate_plain(self.target_gguf, prompt, max_new_tokens, n_threads=self.n_threads)


def start_llamacpp(target, eagle3_head, methods, k: int = 3, export_dir: str | None = None,
                   target_gguf: str | None = None, n_threads: int | None = None, log=print) -> dict:
    """{method: LlamaCppEngine} for the llama.cpp methods asked for; the head is exported (export_llamacpp.py)
    into export_dir (a temporary folder by default) when llamacpp-eagle3 is asked for."""
    from ..export import embedded_target_gguf
    from ..llamacpp import LlamaCppMissing, tool
    wanted = [m for m in methods if m in LLAMACPP_METHODS]
    if not wanted:
        return {}
    try:
        for t in ("llama-completion", "llama-speculative-simple"):
            tool(t)
    except LlamaCppMissing as exc:
        raise BenchError(str(exc)) from None
    if target_gguf is None:
        if getattr(target, "name", "") not in ("", None) and "SmolLM2-135M-Instruct" not in str(target.name):
            raise BenchError("the llama.cpp methods need the target's GGUF: give --llamacpp-target-gguf")
        target_gguf = embedded_target_gguf()
    engines = {}
    if "llamacpp" in wanted:
        engines["llamacpp"] = LlamaCppEngine("llamacpp", target_gguf, n_threads=n_threads)
    if "llamacpp-eagle3" in wanted:
        if eagle3_head is None:
            raise BenchError("llamacpp-eagle3 needs an EAGLE-3 head (--head-eagle3)")
        from ..export_llamacpp import GGUF_NAME, export_llamacpp
        out = export_dir or tempfile.mkdtemp(prefix="eagle-lens-llamacpp-")
        path = os.path.join(out, GGUF_NAME)
        if not os.path.exists(path):
            log(f"exporting the EAGLE-3 head for llama.cpp into {out} ...")
            export_llamacpp(target, eagle3_head, out)
        engines["llamacpp-eagle3"] = LlamaCppEngine("llamacpp-eagle3", target_gguf, path, k=k, n_threads=n_threads)
    return engines


def run_llamacpp_method(engine: LlamaCppEngine, target, prompt_ids, max_new_tokens, temperature) -> dict:
    """One generation by llama.cpp, as the benchmark's per-prompt result."""
    if temperature != 0:
        raise BenchError("the llama.cpp methods run greedy only (T = 0): llama.cpp's sampler draws other "
                         "random numbers than ours, so a T > 0 comparison would be of two laws, not one")
    tok = target.tokenizer
    prompt = tok.decode(list(prompt_ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
    run = engine.generate(prompt, max_new_tokens)
    if run.prompt_tokens is not None and run.prompt_tokens != len(prompt_ids):
        raise BenchError(f"llama.cpp read the prompt as {run.prompt_tokens} tokens where ours has "
                         f"{len(prompt_ids)}: the two tokenizers differ on it")
    ids = tok.encode(run.text, add_special_tokens=False)
    stops = set(target.stop_token_ids)
    cut = next((i for i, t in enumerate(ids) if t in stops), None)
    ids = ids[:cut] if cut is not None else ids
    out = {"token_ids": ids, "new_tokens": run.new_tokens, "seconds": run.seconds, "forwards": run.new_tokens,
           "depth_counts": None, "llamacpp": {"tokens_per_second": run.tokens_per_second,
                                              "prompt_tokens": run.prompt_tokens}}
    if run.drafted is not None:
        lengths = run.accept_lengths
        out["llamacpp"].update(drafted=run.drafted, accepted=run.accepted, cycles=len(lengths) if lengths else None)
        if lengths:
            # one target pass per cycle after the prompt's: tau = tokens a pass
            out.update(forwards=1 + len(lengths), accept_lengths=lengths)
    return out
