"""PlannedLinear: an nn.Linear whose forward runs, per call, the CPU kernel its plan chose for the call's row count,
and the probe that says whether a kernel gives a row the same bits whichever rows share its call.

The kernels (cpu_kernels.py says when each is chosen):
  plain    F.linear on the fp32 weight (MKL)
  packed   oneDNN in fp32 on a copy of the weight packed once (`_reorder_linear_weight`)
  bf16     oneDNN on a packed bf16 copy: input rounded to bf16, fp32 accumulation, output rounded to bf16
  rowwise  every row its own one-row product (a batched matmul over the rows, the weight shared): row-independent
           where the packed kernel is not (the "exact" plan; probed like the others); ~0.8 ms for 26 rows of
           SmolLM2's 576x1536 layer on the 2-core Zen 4, against ~0.05 ms for one row
  gguf     fp32 products on the GGUF's own Q4_1 / Q8_0 blocks (`gguf_blocks`, gguf_blocks.py): the dequantized
           weights exactly, a quarter to an eighth of the bytes; the "q4" plan

A planned layer stays an nn.Linear (same `weight` and `bias` parameters, so tied weights stay tied and the draft
reads `weight`); the packed copies are derived state: a dtype or device change drops them (`_apply`), and a copy
(`copy.deepcopy`) carries none, so either is plain F.linear until planned again (cpu_kernels.pack_cpu_linears).
"""
from __future__ import annotations

import contextlib
import threading
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MAX_VERIFY_ROWS

PLAIN, PACKED, BF16, ROWWISE, GGUF = 0, 1, 2, 3, 4
KERNEL_NAMES = ("plain", "packed", "bf16", "rowwise", "gguf")
MAX_TABLE = 257           # rows >= this use the choice at 256

_stock = threading.local()


def stock_on() -> bool:
    """Whether this thread runs stock_kernels() (every layer plain F.linear)."""
    return getattr(_stock, "on", False)


@contextlib.contextmanager
def stock_kernels():
    """Inside: every planned layer runs F.linear on its fp32 weight, as stock transformers does (this thread)."""
    before = getattr(_stock, "on", False)
    _stock.on = True
    try:
        yield
    finally:
        _stock.on = before


def packed_linear(x, w, bias):
    return torch.ops.mkldnn._linear_pointwise(x, w, bias, "none", [], "")


class PlannedLinear(nn.Linear):
    """nn.Linear + a kernel table (kernel per row count, shared by the layers planned together) and the weight
    copies those kernels read. `guard` (a RowGuard shared by a model's layers) re-probes row independence when
    the thread count changes."""

    table: list[int]
    packed_weight: torch.Tensor | None
    bf16_weight: torch.Tensor | None
    bf16_bias: torch.Tensor | None
    guard: "RowGuard | None"
    gguf_blocks: "object | None"   # gguf_blocks.Blocks: the layer's weight as the GGUF's blocks (not a plan's copy)

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.gguf_blocks = None
        self.unplan()

    @classmethod
    def adopt(cls, lin: nn.Linear) -> "PlannedLinear":
        """Make `lin` a PlannedLinear in place (plain until planned): every reference to the layer (a tied
        weight's module, the target's `lm_head`, a caller's handle) sees the planned module."""
        if not isinstance(lin, cls):
            lin.__class__ = cls
            lin.gguf_blocks = getattr(lin, "gguf_blocks", None)   # attached before (gguf_blocks.attach_blocks)
            lin.unplan()
        return lin

    def unplan(self):
        self.table = [PLAIN] * MAX_TABLE
        self.packed_weight = self.bf16_weight = self.bf16_bias = None
        self.guard = None

    def kernel_for(self, rows: int) -> int:
        t = self.table
        return t[rows if rows < len(t) else -1]

    def run_kernel(self, kernel: int, x: torch.Tensor) -> torch.Tensor:
        if kernel == GGUF:
            return self.gguf_blocks.linear(x, self.bias)
        if kernel == BF16:
            return packed_linear(x.to(torch.bfloat16), self.bf16_weight, self.bf16_bias).to(x.dtype)
        if kernel == PACKED:
            return packed_linear(x, self.packed_weight, self.bias)
        if kernel == ROWWISE:   # each row its own [1, in] x [in, out] product: a batch of them, one call
            flat = x.reshape(-1, 1, x.shape[-1])
            out = torch.bmm(flat, self.weight.t().unsqueeze(0).expand(flat.shape[0], -1, -1))
            if self.bias is not None:
                out = out + self.bias
            return out.view(*x.shape[:-1], self.out_features)
        return F.linear(x, self.weight, self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if getattr(_stock, "on", False):
            return F.linear(x, self.weight, self.bias)
        if self.guard is not None:
            self.guard.check()
        return self.run_kernel(self.kernel_for(x.numel() // max(x.shape[-1], 1)), x)

    def _apply(self, fn, recurse=True):
        before = (self.weight.dtype, self.weight.device, self.weight.data_ptr())
        out = super()._apply(fn, recurse)
        if (self.weight.dtype, self.weight.device, self.weight.data_ptr()) != before:
            self.unplan()   # the packed copies are of the old weight: plain F.linear until planned again
            self.gguf_blocks = None
        return out

    def __getstate__(self):
        state = dict(self.__dict__)   # a copy is plain until planned (packed copies are not state)
        state.update(table=[PLAIN] * MAX_TABLE, packed_weight=None, bf16_weight=None, bf16_bias=None, guard=None,
                     gguf_blocks=None)
        return state


def shared_input_linears(mods, x):
    """[m(x) for m in mods] for layers that read one input (q/k/v; gate/up): where all of them run the bf16 kernel
    at this row count, the input is rounded to bf16 once for all (the same bits each call would round it to); where
    all run the GGUF block kernel, one call computes them all (gguf_blocks.stacked_linear: the same bits)."""
    if getattr(_stock, "on", False) or not all(isinstance(m, PlannedLinear) for m in mods):
        return [m(x) for m in mods]
    rows = x.numel() // max(x.shape[-1], 1)
    if all(m.kernel_for(rows) == GGUF for m in mods):   # the GGUF block kernel: one call for all the layers
        from .gguf_blocks import stacked_linear
        for m in mods:
            if m.guard is not None:
                m.guard.check()
        outs = stacked_linear([m.gguf_blocks for m in mods], x, [m.bias for m in mods])
        if outs is not None:
            return outs
    if any(m.kernel_for(rows) != BF16 for m in mods):
        return [m.forward(x) for m in mods]
    if mods[0].guard is not None:
        mods[0].guard.check()
    xb = x.to(torch.bfloat16)
    return [packed_linear(xb, m.bf16_weight, m.bf16_bias).to(x.dtype) for m in mods]


def rows_dependence(kernel, in_features: int, dtype: torch.dtype = torch.float32,
                    rows: int = MAX_VERIFY_ROWS) -> str | None:
    """None when `kernel(x)` (a linear layer's product) gives every row of an n-row call the bits it gives that
    row alone, for every n from 2 to `rows` (every tree size the limits allow: attention.MAX_VERIFY_ROWS); else the
    first call that differs ("row 5 of a 12-row call"). Exactness needs it: verification runs a tree of n tokens
    as one n-row call, plain decoding the same tokens as 1-row calls, and the two must be one function for EAGLE
    to be token-identical to plain decoding."""
    x = torch.randn(rows, in_features, generator=torch.Generator().manual_seed(1)).to(dtype)
    with torch.no_grad():
        alone = torch.cat([kernel(x[i:i + 1]) for i in range(rows)])
        for n in range(2, rows + 1):
            got = kernel(x[:n])
            if not torch.equal(got, alone[:n]):
                bad = int((got != alone[:n]).reshape(n, -1).any(-1).nonzero()[0])
                return f"row {bad + 1} of a {n}-row call differs from the row alone"
    return None


def model_rows_dependence(layers: list[PlannedLinear], rows: int = MAX_VERIFY_ROWS,
                          known: dict | None = None) -> str | None:
    """rows_dependence of each planned layer's own dispatch (the kernel its table picks for each row count, so a
    table that runs one kernel for a step and another for a tree fails at once), one layer per distinct product:
    shape, dtype, bias or none (a bias is a oneDNN post-op) and table. None when all are row-independent.
    known: results kept across calls (keyed by the product and the thread count), so a plan probes each once."""
    known = {} if known is None else known
    for m in layers:
        kernels = tuple(m.table[1:rows + 1])
        key = (m.out_features, m.in_features, m.weight.dtype, m.bias is not None, kernels, torch.get_num_threads())
        if key not in known:
            why = rows_dependence(lambda z, m=m: m.run_kernel(m.kernel_for(z.shape[0]), z), m.in_features,
                                  m.weight.dtype, rows)
            names = "/".join(sorted({KERNEL_NAMES[k] for k in kernels}))
            known[key] = why and f"{names} {m.out_features}x{m.in_features}{' with bias' if m.bias is not None else ''}: {why}"
        if known[key]:
            return known[key]
    return None


class RowGuard:
    """Whether a planned model's products are row-independent at the current thread count: oneDNN splits a product
    among threads by its shape and the thread count, so a probe at one count says nothing of another. Every
    planned forward calls `check()` (one integer compare); a new thread count re-runs the probe once, and the plan
    dict (the target's `kernel_plan`) says the result: plan["row_independent"], plan["row_probe"][threads]."""

    def __init__(self, layers: list[PlannedLinear], plan: dict, known: dict | None = None):
        self.layers, self.plan = layers, plan
        self.known = {} if known is None else known     # model_rows_dependence's results, per thread count
        self.lock = threading.Lock()
        self.threads = None

    def probe(self) -> bool:
        threads = torch.get_num_threads()
        with self.lock:
            results = self.plan.setdefault("row_probe", {})
            if threads not in results:
                results[threads] = model_rows_dependence(self.layers, known=self.known)
            why = results[threads]
            self.plan["row_independent"] = why is None
            if why is not None and self.threads is not None:
                warnings.warn(f"at {threads} threads this CPU's linear products are row-dependent ({why}): tree "
                              f"passes and one-token steps may part at near-ties", stacklevel=3)
            self.threads = threads
            return why is None

    def check(self):
        if torch.get_num_threads() != self.threads:
            self.probe()
