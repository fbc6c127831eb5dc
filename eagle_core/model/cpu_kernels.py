"""CPU linear layers: for every row count, the faster of two kernels, chosen by timing both on this machine.

A decoding step multiplies 1 row (one token), a tree verification 4-16 rows, a prefill hundreds, each by every
weight of the model. PyTorch's CPU has two kernels for that, and which is faster depends on the row count *and*
on the CPU:

  plain   F.linear (MKL): a matrix-vector path for 1-3 rows that streams the weight at memory speed, then a
          general GEMM that re-packs the weight on every call
  packed  oneDNN with the weight packed once (`_reorder_linear_weight`): good GEMMs for a few rows and more,
          but a fixed cost per call that a 1-row product does not amortise

Measured on the 2-core Intel Xeon dev machine, SmolLM2-135M, one full target pass (ms):
        rows       1     2     3     4     6     8
        plain    32.3  33.8  35.6  48.5  51.7  59.0
        packed   39.1  41.9  43.1  44.0  47.6  50.5
Packing every layer (as this project did before) made plain decoding ~20% slower than stock transformers on this
CPU, so every speedup measured against it was flattered; keeping the plain kernel everywhere makes a tree pass of
6 tokens cost 1.6 plain steps. Here each layer keeps both and dispatches on the row count: a plain step runs
exactly what stock transformers runs, and a tree pass gets the packed GEMM only where it is faster.

The choice is timed at load (`plan_kernels`, ~1 s for SmolLM2) by calling the model's own layers, all layers of
one shape in turn as a forward pass does, so the weights come from the same cache level as in real use. Both
kernels compute the same product; results agree to fp32 rounding. EAGLE_LENS_CPU_KERNELS=plain|packed forces one.
"""
from __future__ import annotations

import os
import time

import torch
import torch.nn.functional as F

PROBE_ROWS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 32)   # row counts timed; others take the choice of the next lower
MAX_TABLE = 257           # rows >= this use the choice at 256
MODES = ("auto", "plain", "packed")


def _packed(x, w, bias):
    return torch.ops.mkldnn._linear_pointwise(x, w, bias, "none", [], "")


def _dispatch_forward(self, x):
    """nn.Linear.forward of a planned layer: the kernel the plan chose for this many rows."""
    rows = x.numel() // max(x.shape[-1], 1)
    use = self._use_packed
    if use[rows if rows < len(use) else -1]:
        return _packed(x, self._packed_weight, self.bias)
    return F.linear(x, self.weight, self.bias)


def kernel_mode() -> str:
    mode = os.environ.get("EAGLE_LENS_CPU_KERNELS", "auto") or "auto"
    return mode if mode in MODES else "auto"


def packable(mod) -> bool:
    return (type(mod) is torch.nn.Linear and mod.weight.device.type == "cpu"
            and mod.weight.dtype in (torch.float32, torch.bfloat16))


def pack_weight(mod, batch_hint: int = 8) -> bool:
    """Give one nn.Linear a oneDNN-packed copy of its weight (kept beside `weight`, which the draft reads).
    False when this build's oneDNN cannot pack it or disagrees with F.linear on a probe."""
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(mod.weight.detach(), batch_hint)
        probe = torch.randn(2, mod.in_features, dtype=mod.weight.dtype,
                            generator=torch.Generator().manual_seed(0))   # leaves the global RNG alone
        ref = F.linear(probe, mod.weight, mod.bias)
        if not torch.allclose(_packed(probe, packed, mod.bias), ref, rtol=1e-2, atol=1e-2):
            return False
    except (RuntimeError, AttributeError):
        return False
    mod._packed_weight = packed
    return True


def _time_rows(mods, rows: int, packed: bool, reps: int) -> float:
    """Best-of-reps seconds for one sweep over `mods` (one call each, as a forward pass makes them)."""
    x = torch.randn(rows, mods[0].in_features, dtype=mods[0].weight.dtype,
                    generator=torch.Generator().manual_seed(rows))
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for m in mods:
            if packed:
                _packed(x, m._packed_weight, m.bias)
            else:
                F.linear(x, m.weight, m.bias)
        best = min(best, time.perf_counter() - t0)
    return best


def time_shape(mods, rows_list=PROBE_ROWS, budget_s: float = 0.4) -> dict[int, tuple[float, float]]:
    """{rows: (plain seconds, packed seconds)} for one sweep over layers of one shape."""
    out = {}
    with torch.no_grad():
        # warm both kernels (first calls allocate scratch buffers)
        _time_rows(mods, 1, False, 1)
        _time_rows(mods, 1, True, 1)
        one = max(_time_rows(mods, 1, False, 1), 1e-6)
        reps = int(min(5, max(2, budget_s / (2 * len(rows_list) * one))))
        for r in rows_list:
            # interleave the two kernels so that a noisy moment hits both
            a = b = float("inf")
            for _ in range(reps):
                a = min(a, _time_rows(mods, r, False, 1))
                b = min(b, _time_rows(mods, r, True, 1))
            out[r] = (a, b)
    return out


def choice_table(timings: dict[int, tuple[float, float]], margin: float = 0.03) -> list[bool]:
    """use_packed[rows] for rows 0..MAX_TABLE-1 from probe timings: packed only where it is clearly faster (by
    `margin`); a row count between probes takes the choice of the probe below it."""
    probes = sorted(timings)
    table = []
    for rows in range(MAX_TABLE):
        below = [p for p in probes if p <= max(rows, 1)]
        p = below[-1] if below else probes[0]
        plain, packed = timings[p]
        table.append(packed < plain * (1 - margin))
    return table


def time_model(run, rows_list, tables: list[list[bool]], reps: int = 3) -> dict[int, tuple[float, float]]:
    """{rows: (plain seconds, packed seconds)} of whole passes `run(rows)`, every layer switched together."""
    def timed(rows, packed):
        for t in tables:
            t[rows if rows < len(t) else -1] = packed
        t0 = time.perf_counter()
        run(rows)
        return time.perf_counter() - t0
    out = {}
    with torch.no_grad():
        for packed in (False, True):      # warm both kernels (first calls allocate scratch buffers)
            timed(1, packed)
        for r in rows_list:
            a = b = float("inf")
            for i in range(reps):         # interleaved, so that a noisy moment hits both kernels
                a = min(a, timed(r, False))
                b = min(b, timed(r, True))
                if i == 1 and abs(a - b) > 0.15 * min(a, b):
                    break                 # clearly apart: a third pair would not change the choice
            out[r] = (a, b)
    return out


def plan_kernels(model: torch.nn.Module, mode: str | None = None, batch_hint: int = 8, run=None,
                 rows_list=PROBE_ROWS) -> dict:
    """Pack every packable nn.Linear of a frozen CPU model and route it through the per-row-count choice.

    run: a callable run(rows) making one forward pass of `rows` tokens; given, the choice is timed on whole
    passes (every layer switches together: what a decoding step really costs). Without it each weight shape
    is timed alone by sweeps over its layers (small modules: the draft head, the draft LM head).
    Returns the plan: {"mode", "how" ("model" | "layers"), "layers", "packed_from_rows" (first row count on
    the packed kernel, None = never), "ms": {rows: [plain, packed]} (or per shape), "seconds"}. mode: auto
    (time both), plain, packed; default EAGLE_LENS_CPU_KERNELS or auto. Layers oneDNN cannot pack keep F.linear.
    """
    mode = mode or kernel_mode()
    plan = {"mode": mode, "how": None, "layers": 0, "packed_from_rows": None, "ms": {}, "seconds": 0.0}
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        plan["mode"] = "plain (oneDNN unavailable)"
        return plan
    t0 = time.perf_counter()
    groups: dict[tuple, list] = {}
    with torch.no_grad():
        for mod in model.modules():
            if packable(mod) and pack_weight(mod, batch_hint):
                key = (mod.out_features, mod.in_features, mod.weight.dtype, mod.bias is not None)
                groups.setdefault(key, []).append(mod)
    tables = []
    for mods in groups.values():
        table = [mode == "packed"] * MAX_TABLE
        for m in mods:
            m._use_packed = table
            m.forward = _dispatch_forward.__get__(m)
        tables.append((mods, table))
        plan["layers"] += len(mods)
    if mode == "auto" and tables:
        if run is not None:
            plan["how"] = "model"
            timings = time_model(run, rows_list, [t for _, t in tables])
            final = choice_table(timings)
            for _, t in tables:
                t[:] = final
            plan["ms"] = {r: [round(a * 1e3, 2), round(b * 1e3, 2)] for r, (a, b) in timings.items()}
        else:
            plan["how"] = "layers"
            for mods, t in tables:
                timings = time_shape(mods, rows_list)
                t[:] = choice_table(timings)
                name = f"{mods[0].out_features}x{mods[0].in_features} {str(mods[0].weight.dtype).rpartition('.')[2]}"
                plan["ms"][name] = {r: [round(a * 1e3, 3), round(b * 1e3, 3)] for r, (a, b) in timings.items()}
    firsts = [next((r for r in range(1, MAX_TABLE) if t[r]), None) for _, t in tables]
    known = [f for f in firsts if f is not None]
    plan["packed_from_rows"] = min(known) if known else None
    plan["seconds"] = round(time.perf_counter() - t0, 2)
    return plan


def describe(plan: dict | None) -> str:
    """One line for reports: which kernel runs which row counts."""
    if not plan or not plan.get("layers"):
        return "plain linear kernels"
    if plan["mode"] != "auto":
        return f"{plan['mode']} linear kernels everywhere (forced)"
    first = plan.get("packed_from_rows")
    if first is None:
        return "plain linear kernels at every row count (timed)"
    if first == 1:
        return "oneDNN-packed linear kernels from 1 row (timed)"
    return f"linear kernels timed per row count: plain below {first} rows, oneDNN-packed from {first}"


def pack_cpu_linears(model: torch.nn.Module, batch_hint: int = 8, plan: dict | None = None, run=None) -> int:
    """Give every nn.Linear of a frozen CPU model a oneDNN weight packed once, used at the row counts where it
    beats the plain kernel on this machine (see the module's docstring). The `weight` parameters stay (the draft head and
    the LM-head copies read them); results equal F.linear to fp32 rounding. Returns how many layers were
    packed (0 where oneDNN is unavailable); `plan`, when given, receives the timing plan; `run(rows)`, when
    given, makes one forward pass of `rows` tokens, on which the choice is timed (else layer by layer).
    """
    got = plan_kernels(model, batch_hint=batch_hint, run=run)
    if plan is not None:
        plan.update(got)
    return got["layers"]
