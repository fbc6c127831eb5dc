"""CPU linear layers: the numerical model (fp32 or bf16 weights) and, per row count, the faster kernel, both
chosen by timing on this machine at load.

A decoding step multiplies 1 row (one token), a tree verification 4-26 rows, a prefill hundreds, each by every
weight of the model. PyTorch's CPU has three ways to do that:

  plain   F.linear in fp32 (MKL): a matrix-vector path for 1-3 rows that streams the weight at memory speed, then a
          general GEMM that re-packs the weight on every call
  packed  oneDNN in fp32 with the weight packed once (`_reorder_linear_weight`): good GEMMs for a few rows and
          more, but a fixed cost per call that a 1-row product does not amortise
  bf16    oneDNN with a bf16 copy of the weight packed once (AMX / AVX512-BF16 where the CPU has them): the
          layer's input is rounded to bf16, products accumulate in fp32, the output is rounded to bf16 and handed
          on as fp32. Everything between the linear layers (norms, RoPE, attention, residuals) stays fp32.

Measured on the 2-core Intel Xeon with AMX (SmolLM2-135M, one pass over a 300-token prefix, every linear layer on
the one kernel, LM head included, ms):
        rows       1     2     4     8    16    26
        plain    30.8  32.0  45.2  55.5  61.6  71.7
        packed   37.0  40.0  41.6  47.9  57.9  68.5
        bf16     27.1  28.3  28.5  30.3  33.7  39.4
In fp32 a tree pass of 8 tokens costs ~1.6 one-token passes; in bf16 about what one token costs, and a bf16 step
is itself the fastest step: the weights are read at memory speed either way, bf16 halves the bytes, and AMX makes
the extra rows nearly free. (The shipped plan's own figures, LM head fp32 and attention in float64 as below, are
in the benchmark's report: bench/pass_cost.py.)

Two numerical models, one choice per model. fp32 and bf16 weights are two different functions of the same
checkpoint, so a target runs ONE of them at every row count: EAGLE's verification and plain decoding (`vanilla`)
then compute the same function, which is what "lossless" is measured against. Within fp32 the plain/packed
choice is per row count (the two kernels differ by fp32 rounding only). The bf16 kernel is row-independent on
oneDNN with AMX (a row's output bits do not depend on which other rows share the call), so a tree pass and a
one-token step give the same linear outputs bit for bit. Not on every CPU: on a Zen 4 (AVX512-BF16, no AMX) a
576x1536 layer gives some rows alone other bits than in a batch, so the plan probes every layer shape of the
model at load (`rows_dependence`: 0.35 s for SmolLM2 when every shape passes, most of it the LM head; 0.04 s
where it stops at the first difference) and refuses bf16 where a row depends on its neighbours
(plan["bf16_refused"] says which layer; the model stays fp32). The LM head never runs bf16
(`fp32_only`): its output would be rounded to bf16, logits of ~20 in steps of 1/8, and near-ties would become
exact ties (with a bf16 LM head, EAGLE parted from plain decoding on 4 of 10 MT-bench prompts within 64
tokens, every time at a top-2 margin of exactly 0); it runs the
packed fp32 kernel at every row count, which is row-independent too. PyTorch's CPU has no bf16 GEMM with an
fp32 output (`aten::mm.dtype` is CUDA-only here), which would give the LM head both. Attention stays fp32
arithmetic but is summed in float64 over a float64 KV cache (model/attention.py), for the same reason.

`plan_kernels` times whole passes at load (~2 s for SmolLM2): bf16 is chosen when its one-token pass is no
slower than fp32's (within 5%) and its passes over all probed row counts cost less in sum; a CPU without fast
bf16 (AVX2-only AMD EPYC, say) keeps fp32. EAGLE_LENS_CPU_KERNELS=auto|fp32|bf16|plain|packed forces one (fp32 =
the fp32 kernels timed per row count). `stock_kernels()` runs the model exactly as stock transformers would
(fp32 F.linear): the benchmark's `hf-greedy` and the fp32 reference of divergence reports.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time

import torch
import torch.nn.functional as F

PROBE_ROWS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 26, 32)   # row counts timed; others take the choice of the next lower
MAX_TABLE = 257           # rows >= this use the choice at 256
MODES = ("auto", "fp32", "bf16", "plain", "packed")
PLAIN, PACKED, BF16 = 0, 1, 2
KERNEL_NAMES = ("plain", "packed", "bf16")
BF16_ONE_ROW_SLACK = 1.05   # bf16 is taken only if its one-token pass is at most this much slower than fp32's

_stock = threading.local()


@contextlib.contextmanager
def stock_kernels():
    """Inside: every planned layer runs F.linear on its fp32 weight, as stock transformers does (this thread)."""
    before = getattr(_stock, "on", False)
    _stock.on = True
    try:
        yield
    finally:
        _stock.on = before


def _packed(x, w, bias):
    return torch.ops.mkldnn._linear_pointwise(x, w, bias, "none", [], "")


def _dispatch_forward(self, x):
    """nn.Linear.forward of a planned layer: the kernel the plan chose for this many rows."""
    if getattr(_stock, "on", False):
        return F.linear(x, self.weight, self.bias)
    rows = x.numel() // max(x.shape[-1], 1)
    table = self._kernel
    k = table[rows if rows < len(table) else -1]
    if k == BF16:
        return _packed(x.to(torch.bfloat16), self._bf16_weight, self._bf16_bias).to(x.dtype)
    if k == PACKED:
        return _packed(x, self._packed_weight, self.bias)
    return F.linear(x, self.weight, self.bias)


def shared_input_linears(mods, x):
    """[m(x) for m in mods] for layers that read one input (q/k/v; gate/up): where all of them run the bf16 kernel
    at this row count, the input is rounded to bf16 once for all (the same bits each call would round it to)."""
    tables = [getattr(m, "_kernel", None) for m in mods]
    if getattr(_stock, "on", False) or any(t is None for t in tables):
        return [m(x) for m in mods]
    rows = x.numel() // max(x.shape[-1], 1)
    if any(t[rows if rows < len(t) else -1] != BF16 for t in tables):
        return [m.forward(x) for m in mods]
    xb = x.to(torch.bfloat16)
    return [_packed(xb, m._bf16_weight, m._bf16_bias).to(x.dtype) for m in mods]


def kernel_mode() -> str:
    mode = os.environ.get("EAGLE_LENS_CPU_KERNELS", "auto") or "auto"
    return mode if mode in MODES else "auto"


def packable(mod) -> bool:
    return (type(mod) is torch.nn.Linear and mod.weight.device.type == "cpu"
            and mod.weight.dtype in (torch.float32, torch.bfloat16))


def _agrees(got, ref, tol) -> bool:
    return bool(torch.allclose(got.float(), ref.float(), rtol=tol, atol=tol))


def pack_weight(mod, batch_hint: int = 8) -> bool:
    """Give one nn.Linear a oneDNN-packed copy of its weight (kept beside `weight`, which the draft reads).
    False when this build's oneDNN cannot pack it or disagrees with F.linear on a probe."""
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(mod.weight.detach(), batch_hint)
        probe = torch.randn(2, mod.in_features, dtype=mod.weight.dtype,
                            generator=torch.Generator().manual_seed(0))   # leaves the global RNG alone
        if not _agrees(_packed(probe, packed, mod.bias), F.linear(probe, mod.weight, mod.bias), 1e-2):
            return False
    except (RuntimeError, AttributeError):
        return False
    mod._packed_weight = packed
    return True


def pack_bf16_weight(mod, batch_hint: int = 8) -> bool:
    """Give an fp32 nn.Linear a packed bf16 copy of its weight (and bias) for the bf16 kernel."""
    if mod.weight.dtype != torch.float32:
        return False
    try:
        w = mod.weight.detach().to(torch.bfloat16)
        b = None if mod.bias is None else mod.bias.detach().to(torch.bfloat16)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, batch_hint)
        probe = torch.randn(2, mod.in_features, generator=torch.Generator().manual_seed(0))
        ref = F.linear(probe.to(torch.bfloat16), w, b)
        if not _agrees(_packed(probe.to(torch.bfloat16), packed, b), ref, 2e-2):
            return False
    except (RuntimeError, AttributeError):
        return False
    mod._bf16_weight, mod._bf16_bias = packed, b
    return True


_BF16_AVAILABLE = None
ROW_PROBE = 64            # rows of the row-independence probe: a tree pass is at most ~61 tokens


def rows_dependence(kernel, in_features: int, dtype: torch.dtype = torch.float32, rows: int = ROW_PROBE) -> str | None:
    """None when `kernel(x)` (a linear layer's product) gives every row the same bits whichever rows share the
    call: each of `rows` random rows alone and every prefix of PROBE_ROWS rows against one call on all of them;
    else where it first differs ("1 row alone, row 4 of 64", "the first 8 rows"). Exactness needs it: verification
    runs a tree of n tokens as one n-row call, plain decoding the same tokens as 1-row calls, and the two must be
    one function for EAGLE to be token-identical to it (docstring)."""
    x = torch.randn(rows, in_features, generator=torch.Generator().manual_seed(1)).to(dtype)
    with torch.no_grad():
        full = kernel(x)
        for r in PROBE_ROWS:
            if r <= rows and not torch.equal(kernel(x[:r]), full[:r]):
                return f"the first {r} rows"
        for i in range(rows):
            if not torch.equal(kernel(x[i:i + 1]), full[i:i + 1]):
                return f"1 row alone, row {i + 1} of {rows}"
    return None


def bf16_rows_dependence(mods) -> str | None:
    """rows_dependence of the bf16 kernel over one layer of every shape in `mods` (fp32-only layers: of the packed
    fp32 kernel, which they run at every row count beside bf16 layers); None when all are row-independent."""
    seen = set()
    for m in mods:
        bf = hasattr(m, "_bf16_weight")
        key = (m.out_features, m.in_features, bf)
        if key in seen:
            continue
        seen.add(key)
        if bf:
            why = rows_dependence(lambda x, m=m: _packed(x, m._bf16_weight, m._bf16_bias), m.in_features,
                                  torch.bfloat16)
        else:
            why = rows_dependence(lambda x, m=m: _packed(x, m._packed_weight, m.bias), m.in_features, m.weight.dtype)
        if why:
            return f"{'bf16' if bf else 'packed fp32'} {m.out_features}x{m.in_features}: {why} differ"
    return None


def bf16_kernels_available() -> bool:
    """Whether this CPU has the bf16 kernel at all (oneDNN needs AMX, AVX512-BF16 or AVX-NE-CONVERT; an AVX2-only
    CPU has none, and there the bf16 numerical model cannot be built: kernels="bf16" keeps fp32). Whether it is
    exact for a model's layers is the plan's probe (bf16_rows_dependence)."""
    global _BF16_AVAILABLE
    if _BF16_AVAILABLE is None:
        _BF16_AVAILABLE = pack_bf16_weight(torch.nn.Linear(64, 64))
    return _BF16_AVAILABLE


def _time_rows(mods, rows: int, kernel: int, reps: int) -> float:
    """Best-of-reps seconds for one sweep over `mods` (one call each, as a forward pass makes them)."""
    x = torch.randn(rows, mods[0].in_features, dtype=mods[0].weight.dtype,
                    generator=torch.Generator().manual_seed(rows))
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for m in mods:
            if kernel == PACKED:
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
        _time_rows(mods, 1, PLAIN, 1)
        _time_rows(mods, 1, PACKED, 1)
        one = max(_time_rows(mods, 1, PLAIN, 1), 1e-6)
        reps = int(min(5, max(2, budget_s / (2 * len(rows_list) * one))))
        for r in rows_list:
            # interleave the two kernels so that a noisy moment hits both
            a = b = float("inf")
            for _ in range(reps):
                a = min(a, _time_rows(mods, r, PLAIN, 1))
                b = min(b, _time_rows(mods, r, PACKED, 1))
            out[r] = (a, b)
    return out


def choice_table(timings: dict[int, tuple[float, float]], margin: float = 0.03) -> list[int]:
    """kernel[rows] (PLAIN or PACKED) for rows 0..MAX_TABLE-1 from fp32 probe timings: packed only where it is
    clearly faster (by `margin`); a row count between probes takes the choice of the probe below it."""
    probes = sorted(timings)
    table = []
    for rows in range(MAX_TABLE):
        below = [p for p in probes if p <= max(rows, 1)]
        p = below[-1] if below else probes[0]
        plain, packed = timings[p][:2]
        table.append(PACKED if packed < plain * (1 - margin) else PLAIN)
    return table


def choose_precision(timings: dict[int, tuple]) -> str:
    """'bf16' or 'fp32' from whole-pass timings {rows: (plain, packed, bf16)}: bf16 when its one-token pass is
    within BF16_ONE_ROW_SLACK of fp32's best and all probed passes together cost less (see the docstring)."""
    ones = min(timings)
    fp32 = {r: min(t[0], t[1]) for r, t in timings.items()}
    bf16 = {r: t[2] for r, t in timings.items() if len(t) > 2 and t[2] is not None}
    if len(bf16) != len(fp32):
        return "fp32"
    if bf16[ones] > fp32[ones] * BF16_ONE_ROW_SLACK:
        return "fp32"
    return "bf16" if sum(bf16.values()) < sum(fp32.values()) else "fp32"


def time_model(run, rows_list, tables: list[list[int]], kernels=(PLAIN, PACKED), reps: int = 3,
               fixed: list[tuple[list[int], list[int]]] = ()) -> dict[int, tuple]:
    """{rows: (seconds per kernel, in `kernels` order)} of whole passes `run(rows)`, every layer of `tables`
    switched together; `fixed` (table, its plan) pairs keep their plan whatever is timed (fp32-only layers)."""
    for t, plan in fixed:
        t[:] = plan

    def timed(rows, kernel):
        for t in tables:
            t[rows if rows < len(t) else -1] = kernel
        t0 = time.perf_counter()
        run(rows)
        return time.perf_counter() - t0
    out = {}
    with torch.no_grad():
        for k in kernels:                 # warm every kernel (first calls allocate scratch buffers)
            timed(1, k)
        for r in rows_list:
            best = [float("inf")] * len(kernels)
            for i in range(reps):         # interleaved, so that a noisy moment hits every kernel
                for j, k in enumerate(kernels):
                    best[j] = min(best[j], timed(r, k))
                if i == 1 and max(best) - min(best) > 0.15 * min(best):
                    break                 # clearly apart: a third round would not change the choice
            out[r] = tuple(best)
    return out


def _precision_of(tables) -> str:
    return "bf16" if any(k == BF16 for _, t in tables for k in t) else "fp32"


def _in(t, tables) -> bool:
    return any(t is x for x in tables)


def plan_kernels(model: torch.nn.Module, mode: str | None = None, batch_hint: int = 8, run=None,
                 rows_list=PROBE_ROWS, fp32_only=()) -> dict:
    """Pack every packable nn.Linear of a frozen CPU model and route it through the plan (see the docstring).

    run: a callable run(rows) making one forward pass of `rows` tokens; given, the choice is timed on whole
    passes (every layer switches together: what a decoding step really costs), bf16 included. Without it each
    weight shape is timed alone by sweeps over its layers, fp32 or as stored (small modules: the draft head,
    the draft LM head), and the weights' own precision is kept.
    Returns the plan: {"mode", "how" ("model" | "layers"), "layers", "precision" ("fp32" | "bf16"),
    "packed_from_rows" (first row count on the packed fp32 kernel, None = never), "ms": {rows: [plain, packed,
    bf16]} (or per shape: [plain, packed]), "seconds"}. mode: auto, fp32, bf16, plain, packed; default
    EAGLE_LENS_CPU_KERNELS or auto. Layers oneDNN cannot pack keep F.linear. fp32_only: layers that never run
    bf16 (the LM head: a bf16 output would round logits to steps of 1/16-1/8 and make exact ties of near-ties);
    they take the fp32 kernels' per-row-count choice.
    """
    mode = mode or kernel_mode()
    plan = {"mode": mode, "how": None, "layers": 0, "precision": "fp32", "packed_from_rows": None, "ms": {},
            "seconds": 0.0}
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        plan["mode"] = "plain (oneDNN unavailable)"
        return plan
    t0 = time.perf_counter()
    want_bf16 = mode in ("bf16",) or (mode == "auto" and run is not None)
    keep = {id(m) for m in fp32_only}
    groups: dict[tuple, list] = {}
    with torch.no_grad():
        for mod in model.modules():
            if packable(mod) and pack_weight(mod, batch_hint):
                if want_bf16 and mod.weight.dtype == torch.float32 and id(mod) not in keep:
                    pack_bf16_weight(mod, batch_hint)
                key = (mod.out_features, mod.in_features, mod.weight.dtype, mod.bias is not None, id(mod) in keep)
                groups.setdefault(key, []).append(mod)
    bf16_ok = any(not k[4] for k in groups) and all(
        hasattr(m, "_bf16_weight") or m.weight.dtype == torch.bfloat16 or k[4]
        for k, mods in groups.items() for m in mods)
    if bf16_ok and want_bf16:   # the bf16 model is exact only where its kernels are row-independent (docstring)
        why = bf16_rows_dependence([mods[0] for mods in groups.values()])
        if why:
            bf16_ok, plan["bf16_refused"] = False, f"row-dependent on this CPU ({why})"
    start = {"plain": PLAIN, "packed": PACKED, "bf16": BF16 if bf16_ok else PACKED}.get(mode, PLAIN)
    tables, fp32_tables = [], []
    for key, mods in groups.items():
        k = start if (start != BF16 or mods[0].weight.dtype == torch.float32) else PACKED
        if key[4] and k == BF16:
            k = PACKED
        table = [k] * MAX_TABLE
        if key[4]:
            fp32_tables.append(table)
        for m in mods:
            m._kernel = table
            m.forward = _dispatch_forward.__get__(m)
        tables.append((mods, table))
        plan["layers"] += len(mods)
    if mode in ("auto", "fp32") and tables:
        if run is not None:
            plan["how"] = "model"
            timings = time_model(run, rows_list, [t for _, t in tables])
            fp32_plan = choice_table(timings)
            precision = "fp32"
            if mode == "auto" and bf16_ok:   # bf16 timed with the fp32-only layers packed, as they will run
                bf = time_model(run, rows_list, [t for _, t in tables if not _in(t, fp32_tables)], (BF16,),
                                fixed=[(t, [PACKED] * MAX_TABLE) for t in fp32_tables])
                timings = {r: timings[r] + bf[r] for r in timings}
                precision = choose_precision(timings)
                one = min(timings)
                if precision == "fp32" and sum(t[2] for t in timings.values()) < sum(
                        min(t[:2]) for t in timings.values()):
                    # only the one-token pass said fp32, by a few %: a noisy moment can decide that, so it is
                    # timed again, longer, before the model's numerics are fixed (the best of both timings counts)
                    fp = time_model(run, (one,), [t for _, t in tables], reps=7)[one]
                    bf = time_model(run, (one,), [t for _, t in tables if not _in(t, fp32_tables)], (BF16,),
                                    reps=7, fixed=[(t, [PACKED] * MAX_TABLE) for t in fp32_tables])[one]
                    timings[one] = tuple(min(a, b) for a, b in zip(timings[one], fp + bf))
                    precision = choose_precision(timings)
            for _, t in tables:
                if precision == "bf16":   # fp32-only layers on the packed kernel at every row count: row-independent
                    t[:] = [PACKED] * MAX_TABLE if _in(t, fp32_tables) else [BF16] * MAX_TABLE
                else:
                    t[:] = fp32_plan
            plan["ms"] = {r: [round(x * 1e3, 2) for x in ts] for r, ts in timings.items()}
        else:
            plan["how"] = "layers"
            for mods, t in tables:
                timings = time_shape(mods, rows_list)
                t[:] = choice_table(timings)
                name = f"{mods[0].out_features}x{mods[0].in_features} {str(mods[0].weight.dtype).rpartition('.')[2]}"
                plan["ms"][name] = {r: [round(a * 1e3, 3), round(b * 1e3, 3)] for r, (a, b) in timings.items()}
    plan["precision"] = _precision_of(tables)
    for mods, t in tables:   # free the copies this plan never runs (the bf16 one is ~half the fp32 model)
        for m in mods:
            if BF16 not in t and hasattr(m, "_bf16_weight"):
                del m._bf16_weight, m._bf16_bias
            if PACKED not in t and m.weight.dtype == torch.float32 and hasattr(m, "_packed_weight"):
                del m._packed_weight
    firsts = [next((r for r in range(1, MAX_TABLE) if t[r] == PACKED), None) for _, t in tables]
    known = [f for f in firsts if f is not None]
    plan["packed_from_rows"] = min(known) if known else None
    plan["seconds"] = round(time.perf_counter() - t0, 2)
    return plan


def set_kernel(model: torch.nn.Module, kernel: str) -> None:
    """Switch every planned layer of `model` to one kernel at every row count ('plain', 'packed', 'bf16'),
    for measuring (bench/pass_cost.py); layers lacking that kernel's weight copy keep their plan."""
    k = KERNEL_NAMES.index(kernel)
    need = {PACKED: "_packed_weight", BF16: "_bf16_weight"}.get(k)
    seen = set()
    for m in model.modules():
        t = getattr(m, "_kernel", None)
        if t is None or id(t) in seen or (need and not hasattr(m, need)):
            continue
        seen.add(id(t))
        t[:] = [k] * len(t)


def kernel_tables(model: torch.nn.Module) -> list[list[int]]:
    """The distinct plan tables of a model's layers (to save and restore around set_kernel)."""
    out, seen = [], set()
    for m in model.modules():
        t = getattr(m, "_kernel", None)
        if t is not None and id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def describe(plan: dict | None) -> str:
    """One line for reports: which kernel runs which row counts (and why not bf16, where it was refused)."""
    if not plan or not plan.get("layers"):
        return "plain linear kernels"
    refused = f"; bf16 not taken: {plan['bf16_refused']}" if plan.get("bf16_refused") else ""
    if plan["mode"] not in ("auto", "fp32"):
        what = {"bf16": "bf16 (oneDNN)"}.get(plan["mode"], plan["mode"])
        if refused:
            return ("oneDNN-packed fp32 linear kernels everywhere (bf16 was forced but not taken: "
                    f"{plan['bf16_refused']})")
        return f"{what} linear kernels everywhere (forced)"
    if plan.get("precision") == "bf16":
        return "bf16 linear layers (oneDNN, fp32 between them) at every row count (timed)"
    first = plan.get("packed_from_rows")
    if first is None:
        return "plain linear kernels at every row count (timed)" + refused
    if first == 1:
        return "oneDNN-packed linear kernels from 1 row (timed)" + refused
    return f"linear kernels timed per row count: plain below {first} rows, oneDNN-packed from {first}" + refused


def pack_cpu_linears(model: torch.nn.Module, batch_hint: int = 8, plan: dict | None = None, run=None,
                     mode: str | None = None, fp32_only=()) -> int:
    """Plan every nn.Linear of a frozen CPU model (see the module's docstring). The `weight` parameters stay
    (the draft head and the LM-head copies read them). Returns how many layers were planned (0 where oneDNN is
    unavailable); `plan`, when given, receives the timing plan; `run(rows)`, when given, makes one forward
    pass of `rows` tokens, on which the choice is timed (else layer by layer, fp32 or as stored).
    """
    got = plan_kernels(model, batch_hint=batch_hint, run=run, mode=mode, fp32_only=fp32_only)
    if plan is not None:
        plan.update(got)
    return got["layers"]
