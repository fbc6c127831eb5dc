"""What one target pass costs by the number of tokens it verifies: the figure that decides which trees pay.

A pass of R tokens over a P-token prefix (the KV cache of a conversation under way, a chain's ancestry mask), the
best of a few repetitions, timed with the target's own kernel plan (cpu_kernels.py: the numerical model EAGLE and
`vanilla` run) and with stock transformers' kernels (fp32 F.linear: what `hf-greedy` runs). Divided by the plan's
own one-token pass, the first row is the price of verifying R tokens in one-token steps: on a CPU whose R-row
pass costs ~1 step, a 26-node tree is nearly free; where it costs ~2, only a short chain pays.
"""
from __future__ import annotations

import contextlib
import time

ROWS = (1, 2, 4, 8, 16, 26)


class PassSetup:
    """One timed pass's inputs: R tokens at positions P.. over a P-token prefix (random ids, the same for a given P),
    under a chain's ancestry mask, with a KV cache as the engine keeps it (float64 on the row-consistent plans)."""

    def __init__(self, target, rows: int, prefix: int, stock: bool = False):
        import torch

        from ..decoding.engine import kv_cache_dtype, new_kv_cache, tree_attention_mask
        dev = self.device = target.device
        g = torch.Generator().manual_seed(prefix)
        self.prefix_ids = torch.randint(100, min(target.vocab_size, 20000), (1, prefix), generator=g).to(dev)
        self.ids = torch.randint(100, min(target.vocab_size, 20000), (1, rows), generator=g).to(dev)
        self.pos = torch.arange(prefix, prefix + rows, device=dev)[None]
        anc = torch.tril(torch.ones(rows, rows, dtype=torch.bool))
        self.mask = tree_attention_mask(anc, prefix, target.dtype, dev) if rows > 1 else None
        self.keep = torch.arange(prefix, device=dev)[:0]
        self.cache = new_kv_cache(prefix + rows + 1, None if stock else kv_cache_dtype(target))
        self.target, self.prefix = target, prefix

    def fill(self):
        """The prefix's pass (inside inference_mode)."""
        self.target.forward(self.prefix_ids, past_key_values=self.cache, logits="last")

    def run(self):
        """The timed pass (inside inference_mode); drop() after it."""
        self.target.forward(self.ids, position_ids=self.pos, past_key_values=self.cache, attention_mask=self.mask)

    def drop(self):
        """The pass's entries dropped from the cache: the prefix stays P tokens."""
        from ..decoding.engine import keep_cache_entries
        keep_cache_entries(self.cache, self.prefix, self.keep)


def _one_pass_seconds(target, rows: int, prefix: int, reps: int, stock: bool) -> float:
    import torch

    from ..model.cpu_kernels import stock_kernels
    s = PassSetup(target, rows, prefix, stock)
    cuda = s.device.type == "cuda"
    best = float("inf")
    with torch.inference_mode(), stock_kernels() if stock else contextlib.nullcontext():
        s.fill()
        for i in range(reps + 1):                       # the first is a warm-up
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            s.run()
            if cuda:
                torch.cuda.synchronize()
            if i > 0:
                best = min(best, time.perf_counter() - t0)
            s.drop()
    return best


def pass_costs(target, rows=ROWS, prefix: int = 256, reps: int = 5) -> dict:
    """{"prefix", "rows", "numerics", "plan_ms" (the target's own kernels), "stock_ms" (stock fp32 transformers,
    None off a planned CPU target), "steps" (plan_ms / plan's one-token pass)}; the two kinds interleaved per
    row count, so that a noisy moment hits both."""
    planned = bool(getattr(target, "packed_linears", 0))
    plan_ms, stock_ms = [], []
    for r in rows:
        plan_ms.append(round(1e3 * _one_pass_seconds(target, r, prefix, reps, stock=False), 2))
        if planned:
            stock_ms.append(round(1e3 * _one_pass_seconds(target, r, prefix, reps, stock=True), 2))
    one = plan_ms[0] if rows and rows[0] == 1 else None
    return {"prefix": prefix, "rows": list(rows), "reps": reps, "numerics": getattr(target, "numerics", str(target.dtype)),
            "plan_ms": plan_ms, "stock_ms": stock_ms or None,
            "steps": [round(m / one, 2) for m in plan_ms] if one else None}


def format_pass_costs(pc: dict | None, llamacpp: dict | None = None) -> list[str]:
    """The table as report lines (empty without one); `llamacpp`: llama.cpp's own pass costs of the same rows
    (llamacpp.pass_costs: llama-bench's means), two more lines."""
    if not pc:
        return []
    w = 7
    lines = ["", f"target pass cost by tokens per pass (ms, best of {pc.get('reps', 5)}, over a {pc['prefix']}-token prefix)",
             f"  {'tokens per pass':<26}" + "".join(f"{r:>{w}}" for r in pc["rows"]),
             f"  {'ours (' + pc['numerics'] + ')':<26}" + "".join(f"{m:>{w}.1f}" for m in pc["plan_ms"])]
    if pc.get("stock_ms"):
        lines.append(f"  {'stock transformers (fp32)':<26}" + "".join(f"{m:>{w}.1f}" for m in pc["stock_ms"]))
    if pc.get("steps"):
        lines.append(f"  {'ours, in one-token passes':<26}" + "".join(f"{s:>{w}.2f}" for s in pc["steps"]))
    if llamacpp and llamacpp.get("ms"):
        ms = {int(r): v for r, v in llamacpp["ms"].items()}
        rel = {int(r): v for r, v in (llamacpp.get("relative") or {}).items()}
        lines.append(f"  {'llama.cpp (its GGUF, mean)':<26}" + "".join(f"{ms[r]:>{w}.1f}" if r in ms else f"{'-':>{w}}"
                                                                   for r in pc["rows"]))
        if rel:
            lines.append(f"  {'llama.cpp, in its passes':<26}" + "".join(
                f"{rel[r]:>{w}.2f}" if r in rel else f"{'-':>{w}}" for r in pc["rows"]))
    return lines
