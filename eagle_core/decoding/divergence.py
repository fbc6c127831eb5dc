"""Where two generations of one prompt part, and whether the target was at a near-tie there.

At T = 0 EAGLE keeps exactly the target's greedy tokens, up to floating point: the plain pass and the tree pass
are different kernels, so where the target's top-2 logits are within a rounding error of each other the two may
pick different tokens. These functions find the first differing token and measure the target's margin there
(the benchmark counts such divergences as ties, the app's Race explains them).
"""
from __future__ import annotations

TIE_EPS = 1e-4      # float32: a top-2 logit margin under this is a near-tie


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (or of the end of the shorter one); None when identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _next_logits(target, prompt_ids: list[int], prefix: list[int], stock: bool = False):
    """The target's float logits for the token after prompt + prefix (one plain forward, no cache); stock: with
    stock transformers' fp32 kernels (the fp32 reference) instead of the target's own plan."""
    import contextlib

    import torch

    from ..model.cpu_kernels import stock_kernels
    ids = torch.tensor([list(prompt_ids) + list(prefix)], device=target.device)
    with stock_kernels() if stock else contextlib.nullcontext():
        logits, _ = target.forward(ids)
    return logits[0, -1].float()


def _top2_margin(logits) -> float:
    import torch
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def near_tie(target, prompt_ids: list[int], prefix: list[int], eps: float = TIE_EPS, stock: bool = False) -> bool:
    """Whether the target's top-2 logits after prompt + prefix are within eps (one plain forward)."""
    return _top2_margin(_next_logits(target, prompt_ids, prefix, stock)) <= eps


def tie_eps_for(dtype) -> float:
    """The logit margin under which a T = 0 divergence counts as a near-tie for a target in this dtype (or
    numerical model, Target.numerics).

    float32: TIE_EPS. 16-bit: a few units in the last place at typical logit sizes (16-32), since the plain
    and the tree pass are different kernels and round differently: bfloat16 0.5, float16 0.05. bf16-linear (fp32
    activations, bf16 linear layers, row-independent): the only kernels that differ between a step and a tree
    pass are fp32 attention's, whose rounding can flip one bf16 rounding of a layer's input: 0.05.
    """
    name = str(dtype).rpartition(".")[2]
    return {"bfloat16": 0.5, "float16": 0.05, "bf16-linear": 0.05}.get(name, TIE_EPS)


def divergence(target, prompt_ids: list[int], plain_tokens: list[int], eagle_tokens: list[int],
               stock: bool = False) -> dict | None:
    """Where two generations of one prompt part, and by how much the target preferred one token there.

    None when the lists are identical or one is a prefix of the other (e.g. one stopped early). Otherwise one
    plain target forward on prompt + the common prefix gives {"index": d, "plain_token", "eagle_token",
    "plain_text", "eagle_text", "margin": |logit(plain token) - logit(eagle token)|, "top_token" (the
    forward's argmax), "top2_margin": top-1 logit - top-2 logit}. At T = 0 the plain token is normally the
    argmax and the EAGLE token the runner-up, so margin == top2_margin. stock: the forward runs stock
    transformers' fp32 kernels (the margins of the fp32 reference) instead of the target's own plan.
    """
    d = first_divergence(list(plain_tokens), list(eagle_tokens))
    if d is None or d >= min(len(plain_tokens), len(eagle_tokens)):
        return None
    p, e = int(plain_tokens[d]), int(eagle_tokens[d])
    logits = _next_logits(target, prompt_ids, list(plain_tokens[:d]), stock)
    return {"index": d, "plain_token": p, "eagle_token": e,
            "plain_text": target.token_text(p), "eagle_text": target.token_text(e),
            "margin": abs(float(logits[p] - logits[e])), "top_token": int(logits.argmax()),
            "top2_margin": _top2_margin(logits)}
