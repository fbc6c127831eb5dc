"""The benchmark's llama.cpp methods: `llamacpp` (its plain decoding of the target's own GGUF), `llamacpp-eagle3`
(its speculative decoding with our EAGLE-3 head, exported by export/llamacpp.py) and `llamacpp-ngram-*` (its own
draftless speculation, one method per n-gram type of the build: eagle_core/llamacpp.py NGRAM_TYPES).

Each generation is one run of llama.cpp's own tool on the prompt (llamacpp.py): the seconds and the counters are
llama.cpp's (its prompt and eval times, its encode and decode times and draft counters), so loading the files is
not timed, as our methods' loading is not. The prompt goes in as the text of our rendered prompt ids (its chat
template and special tokens); llama.cpp tokenizes it itself, which splits a few whitespace runs otherwise than
transformers (the result records both counts). The generated text comes back as text and is tokenized again with
the target's tokenizer for the report's token counts and comparisons; llama-speculative-simple's last cycle may
accept past the limit, and those tokens are cut (their time is not: a small bias against it).

llama.cpp computes with the GGUF's 4-bit blocks and 8-bit activations (its Q4_1 x Q8_1 dot products), another
numerical model than fp32: at T = 0 every speculative llama.cpp method must decode what `llamacpp` decodes (the same
engine), and all are compared with fp32 only as numerics (where they part, not as mismatches). Each speculative
method's result carries llama.cpp's counters (drafted, accepted, cycles): an n-gram type that finds no match drafts
nothing and is plain decoding in a speculative tool, which the counters (and the report) say.
"""
from __future__ import annotations

import os
import tempfile

from ..llamacpp import NGRAM_TYPES
from .errors import BenchError

LLAMACPP_NGRAM_METHODS = tuple(f"llamacpp-{t}" for t in NGRAM_TYPES)
NGRAM_TYPE_OF = dict(zip(LLAMACPP_NGRAM_METHODS, NGRAM_TYPES))      # method -> its --spec-type
LLAMACPP_METHODS = ("llamacpp", "llamacpp-eagle3") + LLAMACPP_NGRAM_METHODS
# Where llama.cpp's speculative and plain decoding part at T = 0, a near-tie of its two kernels (a verify batch and
# a one-token pass round 8-bit activations differently) is told by the margin between the two tokens' logits in
# our fp32 target, a proxy for llama.cpp's own (which it does not print). Measured on HumanEval 0-4, 48 tokens:
# they part on 3 of 5 prompts, at fp32 margins of 0.07, 0.07 and 0.16 (each time the fp32 top-2 or top-3).
LLAMACPP_TIE_EPS = 0.25


class LlamaCppEngine:
    """One llama.cpp method: the files and settings each generation runs with."""

    def __init__(self, method: str, target_gguf: str, head_gguf: str | None = None, k: int = 3,
                 n_threads: int | None = None, spec_type: str | None = None, extra_args=()):
        self.method, self.target_gguf, self.head_gguf, self.k = method, target_gguf, head_gguf, k
        self.n_threads = n_threads
        self.spec_type, self.extra_args = spec_type, tuple(extra_args)    # an n-gram method's type and options

    def own_pids(self):
        return ()         # one child process a generation: its CPU counts as ours once it is waited for

    def generate(self, prompt: str, max_new_tokens: int):
        from ..llamacpp import generate_eagle3, generate_plain, generate_speculative
        if self.head_gguf:
            return generate_eagle3(self.target_gguf, self.head_gguf, prompt, max_new_tokens, k=self.k,
                                   n_threads=self.n_threads)
        if self.spec_type:
            return generate_speculative(self.target_gguf, prompt, max_new_tokens, self.spec_type,
                                        extra_args=self.extra_args, n_threads=self.n_threads)
        return generate_plain(self.target_gguf, prompt, max_new_tokens, n_threads=self.n_threads)

    def note(self) -> dict:
        """What the report's config records of this method."""
        return {"target": self.target_gguf, "head": self.head_gguf, "k": self.k if self.head_gguf else None,
                "spec_type": "draft-eagle3" if self.head_gguf else self.spec_type,
                "options": list(self.extra_args) or None}


def start_llamacpp(target, eagle3_head, methods, k: int = 3, export_dir: str | None = None,
                   target_gguf: str | None = None, n_threads: int | None = None, log=print,
                   ngram_args=()) -> dict:
    """{method: LlamaCppEngine} for the llama.cpp methods asked for; the head is exported (export/llamacpp.py)
    into export_dir (a temporary folder by default) when llamacpp-eagle3 is asked for; ngram_args: options every
    n-gram method runs with (llama.cpp's defaults without); an n-gram type this build lacks is refused."""
    from ..export import embedded_target_gguf
    from ..llamacpp import LlamaCppMissing, speculative_types, tool
    wanted = [m for m in methods if m in LLAMACPP_METHODS]
    if not wanted:
        return {}
    try:
        for t in ("llama-completion", "llama-speculative-simple"):
            tool(t)
    except LlamaCppMissing as exc:
        raise BenchError(str(exc)) from None
    ngrams = [m for m in wanted if m in NGRAM_TYPE_OF]
    if ngrams:
        built = speculative_types()
        missing = [NGRAM_TYPE_OF[m] for m in ngrams if NGRAM_TYPE_OF[m] not in built]
        if missing:
            raise BenchError(f"this llama.cpp build has no --spec-type {', '.join(missing)} (it has: "
                             f"{', '.join(built)})")
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
        from ..export.llamacpp import GGUF_NAME, export_llamacpp
        out = export_dir or tempfile.mkdtemp(prefix="eagle-lens-llamacpp-")
        path = os.path.join(out, GGUF_NAME)
        if not os.path.exists(path):
            log(f"exporting the EAGLE-3 head for llama.cpp into {out} ...")
            export_llamacpp(target, eagle3_head, out)
        engines["llamacpp-eagle3"] = LlamaCppEngine("llamacpp-eagle3", target_gguf, path, k=k, n_threads=n_threads)
    for m in ngrams:
        engines[m] = LlamaCppEngine(m, target_gguf, n_threads=n_threads, spec_type=NGRAM_TYPE_OF[m],
                                    extra_args=ngram_args)
    return engines


def run_llamacpp_method(engine: LlamaCppEngine, target, prompt_ids, max_new_tokens, temperature) -> dict:
    """One generation by llama.cpp, as the benchmark's per-prompt result."""
    if temperature != 0:
        raise BenchError("the llama.cpp methods run greedy only (T = 0): llama.cpp's sampler draws other "
                         "random numbers than ours, so a T > 0 comparison would be of two laws, not one")
    tok = target.tokenizer
    prompt = tok.decode(list(prompt_ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
    run = engine.generate(prompt, max_new_tokens)
    ids = tok.encode(run.text, add_special_tokens=False) + ([target.tokenizer.eos_token_id] if run.eos else [])
    stops = set(target.stop_token_ids)
    cut = next((i for i, t in enumerate(ids) if t in stops), None)
    ids = ids[:cut + 1] if cut is not None else ids        # the stop token counts, as in our methods
    ids = ids[:max_new_tokens]       # llama-speculative-simple's last cycle may accept past the limit
    out = {"token_ids": ids, "new_tokens": len(ids), "seconds": run.seconds, "forwards": len(ids),
           "depth_counts": None, "llamacpp": {"tokens_per_second": run.tokens_per_second,
                                              "prompt_tokens": run.prompt_tokens,
                                              # llama.cpp tokenizes the prompt's text itself and splits some
                                              # whitespace runs otherwise than transformers ("\n    0": one
                                              # token, ours two): the same text, another token count
                                              "prompt_tokens_ours": len(prompt_ids)}}
    if run.drafted is not None:
        lengths = run.accept_lengths
        out["llamacpp"].update(drafted=run.drafted, accepted=run.accepted, cycles=run.drafts,
                               spec_type=getattr(engine, "spec_type", None) or "draft-eagle3")
        # the prompt's pass, then one verify pass a cycle (its counters: tokens - accepted drafts)
        out["forwards"] = 1 + (len(lengths) if lengths else run.drafts)
        if lengths:
            out["accept_lengths"] = lengths
    return out


def cut_at_last_token(target, d: int | None, a: list[int], b: list[int]) -> bool:
    """Whether two llama.cpp generations part only at the last token of two texts both cut by the token limit:
    llama.cpp's texts come back as text and are tokenized again, and a text cut inside a character or a merge
    (llama-completion stops at the limit; llama-speculative-simple's last cycle may run past it, and the longer text
    is cut after tokenizing) gives another last token than the whole text would. Not a decoding divergence; a real
    one at exactly that token cannot be told from it through the text."""
    stops = set(target.stop_token_ids)
    n = min(len(a), len(b))
    return d is not None and d == n - 1 and len(a) == len(b) and a[-1] not in stops and b[-1] not in stops


def llamacpp_part(target, prompt_ids: list[int], a: list[int], b: list[int]) -> dict | None:
    """Where two llama.cpp generations of one prompt part (None: they do not), with the fp32 margin between the
    two tokens there and whether that is a near-tie by LLAMACPP_TIE_EPS."""
    from ..decoding.divergence import divergence
    d = divergence(target, list(prompt_ids), list(a), list(b), stock=True)
    if d is None:
        return None
    return dict(d, tie=d["margin"] <= LLAMACPP_TIE_EPS)


def compare_cycles(target, head, prompt_ids: list[int], target_gguf: str, head_gguf: str, max_new_tokens: int,
                   k: int = 3) -> dict:
    """llama.cpp's speculative cycles against our engine's with the same head and chain, drafted from the same
    place while the two have committed the same tokens: how often the drafted chain (and its first token) is the
    same, and how many of those drafts each accepted. A misread head (layer order, norms, d2t) drafts other tokens
    from the start; the engines' numerics (llama.cpp: 4-bit weights, 8-bit activations; ours: fp32) flip a
    near-tie now and then, and make the texts part after a while.

    The cycles are matched by where they draft from, not by their number: llama.cpp keeps the prompt's last token
    out of its prompt pass and drafts the first generated token too (its first cycle's root is the prompt's last
    token), where our prefill samples that token and our first cycle drafts after it."""
    from ..decoding.drive import cycles
    from ..decoding.engine import DecodeConfig, EagleDecoder
    from ..llamacpp import generate_eagle3
    tok = target.tokenizer
    prompt = tok.decode(list(prompt_ids), skip_special_tokens=False)
    theirs = generate_eagle3(target_gguf, head_gguf, prompt, max_new_tokens, k=k, cycles_log=True)
    if theirs.prompt_tokens != len(prompt_ids):
        return {"skipped": f"llama.cpp read the prompt as {theirs.prompt_tokens} tokens, ours {len(prompt_ids)}",
                "positions_compared": 0, "same_first_draft": 0, "same_chain": 0, "same_accept_length": 0}
    dec = EagleDecoder(target, head, DecodeConfig(draft="chain", depth=k, max_new_tokens=max_new_tokens), prompt_ids)
    ours, root = {}, 0           # root: index of the cycle's root among the generated tokens
    for rec in cycles(dec):
        if rec.cycle > 0:
            chain = [n.token_id for n in sorted(rec.nodes, key=lambda n: n.depth) if n.depth > 0]
            ours[root] = (chain, rec.accept_length)
            root += rec.accept_length + 1
    their, root = {}, -1
    for chain, acc in zip(theirs.cycle_drafts or [], theirs.accept_lengths or []):
        their[root] = (chain, acc)
        root += acc + 1
    our_ids = list(dec.new_ids)
    their_ids = tok.encode(theirs.text, add_special_tokens=False)
    same_until = next((i for i, (a, b) in enumerate(zip(our_ids, their_ids)) if a != b), min(len(our_ids),
                                                                                           len(their_ids)))
    common = sorted(r for r in set(ours) & set(their) if r < same_until)
    return {"positions_compared": len(common),
            "same_first_draft": sum(ours[r][0][:1] == their[r][0][:1] for r in common),
            "same_chain": sum(ours[r][0] == their[r][0][:len(ours[r][0])] for r in common),
            "same_accept_length": sum(ours[r][1] == their[r][1] for r in common),
            "tokens_same_until": same_until, "tokens": len(our_ids),
            "ours": {"cycles": len(ours), "drafted": sum(len(c) for c, _ in ours.values()),
                     "accepted": sum(a for _, a in ours.values())},
            "llamacpp": {"cycles": len(their), "drafted": theirs.drafted, "accepted": theirs.accepted,
                         "text": theirs.text, "prompt_tokens": theirs.prompt_tokens}}


# A head llama.cpp reads as we read it drafts our tokens where both engines draft from the same text (all but the
# near-ties of the two engines' numerics) and accepts about as often; a misread layout (layers swapped, a norm
# dropped, d2t off) drafts other tokens from the first cycle and accepts far less (tests/test_llamacpp.py injects each).
SAME_FIRST_MIN, SAME_CHAIN_MIN, ACCEPT_RATIO_MIN, COMPARED_MIN = 0.85, 0.75, 0.5, 15


def head_agreement(comparisons: list[dict]) -> dict:
    """compare_cycles' counts over several prompts, summed, with the rates a verdict reads."""
    total = {k: sum(c.get(k, 0) for c in comparisons)
             for k in ("positions_compared", "same_first_draft", "same_chain", "same_accept_length")}
    for side in ("ours", "llamacpp"):
        total[side] = {k: sum(c[side][k] for c in comparisons if side in c) for k in ("cycles", "drafted", "accepted")}
    n = max(1, total["positions_compared"])
    total["same_first_rate"] = total["same_first_draft"] / n
    total["same_chain_rate"] = total["same_chain"] / n
    rate = {side: total[side]["accepted"] / max(1, total[side]["drafted"]) for side in ("ours", "llamacpp")}
    total["accept_rate"] = rate
    total["accept_ratio"] = rate["llamacpp"] / rate["ours"] if rate["ours"] else 0.0
    return total


def misread_signs(agreement: dict) -> list[str]:
    """Why llama.cpp's reading of a head is not ours (empty: it drafts as our engine does): told by what a misread
    head does, drafts that differ from ours where both draft from the same place and an acceptance far below ours,
    not by whether the texts part (llama.cpp's batch and one-token kernels part at near-ties, on some CPUs often)."""
    a, signs = agreement, []
    if a["positions_compared"] < COMPARED_MIN:
        signs.append(f"only {a['positions_compared']} places where both engines drafted from the same text "
                     f"(at least {COMPARED_MIN} are needed to tell)")
    if a["same_first_rate"] < SAME_FIRST_MIN:
        signs.append(f"the first drafted token is ours at {a['same_first_rate']:.0%} of the places "
                     f"(a head read as ours: at least {SAME_FIRST_MIN:.0%})")
    if a["same_chain_rate"] < SAME_CHAIN_MIN:
        signs.append(f"the whole chain is ours at {a['same_chain_rate']:.0%} of the places "
                     f"(at least {SAME_CHAIN_MIN:.0%})")
    if a["accept_ratio"] < ACCEPT_RATIO_MIN:
        signs.append(f"llama.cpp accepts {a['accept_rate']['llamacpp']:.0%} of its drafts, our engine "
                     f"{a['accept_rate']['ours']:.0%} (at least {ACCEPT_RATIO_MIN:.0%} of ours)")
    return signs
