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

The layers are PlannedLinear modules (planned_linear.py): an nn.Linear with a kernel table and the weight copies.

Two numerical models, one choice per model. fp32 and bf16 weights are two different functions of the same
checkpoint, so a target runs ONE of them at every row count: EAGLE's verification and plain decoding (`vanilla`)
then compute the same function, which is what "lossless" is measured against. Within fp32 the plain/packed
choice is per row count (the two kernels differ by fp32 rounding only). The bf16 kernel is row-independent on
oneDNN with AMX (a row's output bits do not depend on which other rows share the call), so a tree pass and a
one-token step give the same linear outputs bit for bit. Not on every CPU: on a Zen 4 (AVX512-BF16, no AMX) a
576x1536 layer gives some rows alone other bits than in a batch, so the plan probes every layer shape of the
model at load (planned_linear.rows_dependence: every call size a tree can have, 2..MAX_VERIFY_ROWS rows, against
the rows alone; stops at the first difference) and refuses bf16 where a row depends on its neighbours
(plan["bf16_refused"] says which layer; the model stays fp32). The same probe, on the final plan, sets
plan["row_independent"]; it is re-run when the thread count changes (planned_linear.RowGuard). Where it holds, the
engine sums attention in float64 (engine.kv_cache_dtype) and a tree pass computes every node bit for bit as a
one-token step. On a CPU where no fast kernel is row-independent (this Zen 4's oneDNN fp32 576x1536 layer is
not), `kernels="exact"` builds such a model anyway: fp32 packed kernels, and every row its own product (a batched
matmul) in the layers whose packed kernel the probe finds row-dependent (for checking exactness, not for speed). The LM head never runs bf16
(`fp32_only`): its output would be rounded to bf16, logits of ~20 in steps of 1/8, and near-ties would become
exact ties (with a bf16 LM head, EAGLE parted from plain decoding on 4 of 10 MT-bench prompts within 64
tokens, every time at a top-2 margin of exactly 0); it runs the
packed fp32 kernel at every row count, which is row-independent too. PyTorch's CPU has no bf16 GEMM with an
fp32 output (`aten::mm.dtype` is CUDA-only here), which would give the LM head both. Attention stays fp32
arithmetic but is summed in float64 over a float64 KV cache (model/attention.py), for the same reason.

A third model where the target is a GGUF: "q4" (gguf_blocks.py). Its linear layers run on the file's own Q4_1
blocks (the tied LM head on its Q8_0 embedding), whose weights are the reference dequantization bit for bit, the
weights transformers loads; inputs and sums are fp32. So it is the fp32 model of the dequantized checkpoint in
another summation order (one-token steps and trees of up to MAX_VERIFY_ROWS rows on the block kernel, prefills on
the packed fp32 kernel), reading ~96 MB per pass instead of ~540. The block kernel is row-independent by
construction (each output the same operations whatever shares the call, threads split outputs, never sums), and
probed like the others. Forced by kernels="q4"; timed against fp32/bf16 in the automatic plan where the loader attached
blocks (target.Q4_IN_AUTO, on by default) and taken where its passes are faster (kernel_timing.choose_q4); where it
is not taken, plan["q4_refused"] says why (timed slower, no kernel built, row-dependent).

A fourth, for the draft only: "q8" (plan_kernels(mode="q8"), what a q4 target's drafter runs: engine.new_drafter).
The head's linear layers and the draft LM head are quantized at load to Q8_0 blocks (gguf_blocks.quantize_q8_0,
llama.cpp's quantizer; the draft LM head's rows come out as the target's own Q8_0 rows, bit for bit) and run on the
block kernel at every row count: row-independent by construction like the target's blocks, a quarter of the fp32
bytes, and no oneDNN call overhead, which dominates the head's one-row products. It changes the draft's q only (a
slightly different head), so the output stays exact; where the kernel cannot be built the draft keeps the plan it
had (plan["q8_refused"] says why).

`plan_kernels` times whole passes at load (~2 s for SmolLM2): bf16 is chosen when its one-token pass is no
slower than fp32's (within 5%) and its passes over all probed row counts cost less in sum; a CPU without fast
bf16 (AVX2-only AMD EPYC, say) keeps fp32. EAGLE_LENS_CPU_KERNELS=auto|fp32|bf16|plain|packed|exact|q4 forces one
(fp32 = the fp32 kernels timed per row count). `stock_kernels()` runs the model exactly as stock transformers would
(fp32 F.linear): the benchmark's `hf-greedy` and the fp32 reference of divergence reports.
"""
from __future__ import annotations

import os
import time

import torch
import torch.nn.functional as F

from .attention import MAX_VERIFY_ROWS
from .kernel_timing import (PROBE_ROWS, choice_table, choose_precision, choose_q4, time_model, time_shape)
from .plan_text import describe, short_description   # the plan in words (reports, the app's banner)
from .planned_linear import (BF16, GGUF, KERNEL_NAMES, MAX_TABLE, PACKED, PLAIN, ROWWISE, PlannedLinear, RowGuard,
                             model_rows_dependence, packed_linear, rows_dependence, shared_input_linears,
                             stock_kernels)

__all__ = ["BF16", "GGUF", "KERNEL_NAMES", "MAX_TABLE", "PACKED", "PLAIN", "ROWWISE", "PlannedLinear", "rows_dependence",
           "shared_input_linears", "stock_kernels", "plan_kernels", "pack_cpu_linears", "describe", "set_kernel",
           "kernel_tables", "bf16_kernels_available", "choice_table", "choose_precision", "time_model",
           "short_description"]

# a target's (EAGLE_LENS_CPU_KERNELS); "q8" is a draft's only (plan_kernels(mode="q8")), never a target's model
MODES = ("auto", "fp32", "bf16", "plain", "packed", "exact", "q4")


def kernel_mode() -> str:
    mode = os.environ.get("EAGLE_LENS_CPU_KERNELS", "auto") or "auto"
    return mode if mode in MODES else "auto"


def packable(mod) -> bool:
    return (isinstance(mod, torch.nn.Linear) and mod.weight.device.type == "cpu"
            and mod.weight.dtype in (torch.float32, torch.bfloat16))


def _agrees(got, ref, tol) -> bool:
    return bool(torch.allclose(got.float(), ref.float(), rtol=tol, atol=tol))


def pack_weight(mod: PlannedLinear, batch_hint: int = 8) -> bool:
    """Give a layer a oneDNN-packed copy of its weight (beside `weight`, which the draft reads). False when this
    build's oneDNN cannot pack it or disagrees with F.linear on a probe."""
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(mod.weight.detach(), batch_hint)
        probe = torch.randn(2, mod.in_features, dtype=mod.weight.dtype,
                            generator=torch.Generator().manual_seed(0))   # leaves the global RNG alone
        if not _agrees(packed_linear(probe, packed, mod.bias), F.linear(probe, mod.weight, mod.bias), 1e-2):
            return False
    except (RuntimeError, AttributeError):
        return False
    mod.packed_weight = packed
    return True


def pack_bf16_weight(mod: PlannedLinear, batch_hint: int = 8) -> bool:
    """Give an fp32 layer a packed bf16 copy of its weight (and bias) for the bf16 kernel."""
    if mod.weight.dtype != torch.float32:
        return False
    try:
        w = mod.weight.detach().to(torch.bfloat16)
        b = None if mod.bias is None else mod.bias.detach().to(torch.bfloat16)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, batch_hint)
        probe = torch.randn(2, mod.in_features, generator=torch.Generator().manual_seed(0))
        ref = F.linear(probe.to(torch.bfloat16), w, b)
        if not _agrees(packed_linear(probe.to(torch.bfloat16), packed, b), ref, 2e-2):
            return False
    except (RuntimeError, AttributeError):
        return False
    mod.bf16_weight, mod.bf16_bias = packed, b
    return True


_BF16_AVAILABLE = None


def bf16_kernels_available() -> bool:
    """Whether this CPU has the bf16 kernel at all (oneDNN needs AMX, AVX512-BF16 or AVX-NE-CONVERT; an AVX2-only
    CPU has none, and there the bf16 numerical model cannot be built: kernels="bf16" keeps fp32). Whether it is
    exact for a model's layers is the plan's probe (planned_linear.model_rows_dependence)."""
    global _BF16_AVAILABLE
    if _BF16_AVAILABLE is None:
        _BF16_AVAILABLE = pack_bf16_weight(PlannedLinear(64, 64))
    return _BF16_AVAILABLE


# ---------------------------------------------------------------------------------------------------- the plan
class _Group:
    """Layers of one product (shape, dtype, bias, fp32-only or not) planned together: one shared kernel table."""

    def __init__(self, mods, fp32_only: bool):
        self.mods, self.fp32_only = mods, fp32_only
        self.table = [PLAIN] * MAX_TABLE
        for m in mods:
            m.table = self.table

    def fill(self, kernels: list[int]):
        self.table[:] = kernels


def _groups(model, want_bf16: bool, keep: set[int], batch_hint: int) -> list[_Group]:
    """Every packable nn.Linear of `model` made a PlannedLinear with its packed copies, grouped by product."""
    groups: dict[tuple, list] = {}
    with torch.no_grad():
        for mod in model.modules():
            if not packable(mod):
                continue
            mod = PlannedLinear.adopt(mod)
            mod.unplan()
            if not pack_weight(mod, batch_hint):
                continue
            if want_bf16 and mod.weight.dtype == torch.float32 and id(mod) not in keep:
                pack_bf16_weight(mod, batch_hint)
            key = (mod.out_features, mod.in_features, mod.weight.dtype, mod.bias is not None, id(mod) in keep,
                   mod.gguf_blocks is not None)
            groups.setdefault(key, []).append(mod)
    return [_Group(mods, key[4]) for key, mods in groups.items()]


def _bf16_possible(groups: list[_Group]) -> bool:
    """Every layer can run bf16 (has the copy, is stored bf16, or is fp32-only) and some layer would."""
    return any(not g.fp32_only for g in groups) and all(
        m.bf16_weight is not None or m.weight.dtype == torch.bfloat16 or g.fp32_only
        for g in groups for m in g.mods)


def _q4_possible(groups: list[_Group], mode: str, plan: dict, known: dict) -> bool:
    """Whether the q4 plan can run (mode auto or q4): some layer has GGUF blocks (attached by the target's loader:
    gguf_blocks.attach_blocks) and the block kernel is row-independent on every such product (probed; by
    construction it is). plan["q4_refused"] says why not, where q4 was asked for or blocks exist."""
    if mode not in ("auto", "q4"):
        return False
    q4 = _q4_groups(groups)
    if not q4:
        if mode == "q4" or plan.get("gguf", {}).get("why"):   # asked for, or blocks looked for and not attached
            plan["q4_refused"] = plan.get("gguf", {}).get("why") or "no layer has GGUF blocks"
        return False
    for g in q4:
        g.fill([GGUF] * MAX_TABLE)
    why = model_rows_dependence([g.mods[0] for g in q4], known=known)
    if why:
        plan["q4_refused"] = f"row-dependent on this CPU ({why})"
        return False
    return True


def _attach_q8(model, plan: dict) -> bool:
    """Give every fp32 linear layer of a draft module (whose input width is whole Q8_0 blocks) its weight as Q8_0
    blocks (`gguf_blocks`), once; False, with plan["q8_refused"], where the block kernel is not built here."""
    from . import gguf_blocks
    why = gguf_blocks.why_unavailable()
    if why:
        plan["q8_refused"] = why
        return False
    n = 0
    for mod in model.modules():
        if (packable(mod) and mod.weight.dtype == torch.float32 and mod.in_features % gguf_blocks.BLOCK == 0
                and getattr(mod, "gguf_blocks", None) is None):
            mod.gguf_blocks = gguf_blocks.quantize_q8_0(mod.weight, "Q8_0 of the draft's fp32 weight")
            n += 1
        elif getattr(mod, "gguf_blocks", None) is not None:
            n += 1
    if not n:
        plan["q8_refused"] = "no layer's input width is a whole number of 32-weight blocks"
    return n > 0


def _start_kernel(g: _Group, mode: str, bf16_ok: bool) -> int:
    """The one kernel a group runs before (or instead of) timing."""
    k = {"plain": PLAIN, "packed": PACKED, "exact": PACKED, "q4": PACKED, "q8": PACKED,
         "bf16": BF16 if bf16_ok else PACKED}.get(mode, PLAIN)
    if k == BF16 and (g.fp32_only or g.mods[0].weight.dtype != torch.float32):
        k = PACKED
    return k


def _q4_table(fp32_plan: list[int]) -> list[int]:
    """The q4 plan of a layer with GGUF blocks: the block kernel at every row count a step or a tree pass can
    have (1..MAX_VERIFY_ROWS: one kernel there keeps tree passes and steps one function), the fp32 plan above
    (prefills: hundreds of rows, where oneDNN's GEMM is faster than a matrix-vector kernel; the two compute the
    same weights in fp32 and differ by rounding only)."""
    return [GGUF] * (MAX_VERIFY_ROWS + 1) + list(fp32_plan[MAX_VERIFY_ROWS + 1:])


def _q4_groups(groups):
    return [g for g in groups if g.mods[0].gguf_blocks is not None]


def _bf16_tables(groups):
    return [g.table for g in groups if not g.fp32_only]


def _fp32_fixed(groups):
    return [(g.table, [PACKED] * MAX_TABLE) for g in groups if g.fp32_only]


def _time_precision(run, rows_list, groups, plan: dict, bf16_ok: bool, auto: bool, q4_ok: bool = False) -> None:
    """Time whole passes and fill every table: fp32 per row count (plain/packed), bf16 everywhere, or the GGUF
    block kernel (q4) where the layers have blocks."""
    timings = time_model(run, rows_list, [g.table for g in groups])
    fp32_plan = choice_table(timings)
    precision = "fp32"
    if auto and bf16_ok:   # bf16 timed with the fp32-only layers packed, as they will run
        bf = time_model(run, rows_list, _bf16_tables(groups), (BF16,), fixed=_fp32_fixed(groups))
        timings = {r: timings[r] + bf[r] for r in timings}
        precision = choose_precision(timings)
        one = min(timings)
        if precision == "fp32" and sum(t[2] for t in timings.values()) < sum(min(t[:2]) for t in timings.values()):
            # only the one-token pass said fp32, by a few %: a noisy moment can decide that, so it is timed
            # again, longer, before the model's numerics are fixed (the best of both timings counts)
            fp = time_model(run, (one,), [g.table for g in groups], reps=7)[one]
            bf = time_model(run, (one,), _bf16_tables(groups), (BF16,), reps=7, fixed=_fp32_fixed(groups))[one]
            timings[one] = tuple(min(a, b) for a, b in zip(timings[one], fp + bf))
            precision = choose_precision(timings)
    if auto and q4_ok:   # the GGUF block kernel, timed with the layers without blocks on the fp32 plan
        q4 = time_model(run, rows_list, [g.table for g in _q4_groups(groups)], (GGUF,),
                        fixed=[(g.table, fp32_plan) for g in groups if g.mods[0].gguf_blocks is None])
        chosen = {r: (min(t[:2]) if precision == "fp32" else t[2]) for r, t in timings.items()}
        if choose_q4(chosen, {r: t[0] for r, t in q4.items()}):
            precision = "q4"
        else:
            one = min(q4)
            plan["q4_refused"] = (f"timed slower here (a one-token pass {q4[one][0] * 1e3:.1f} ms against "
                                  f"{chosen[one] * 1e3:.1f}, all probed passes {sum(t[0] for t in q4.values()) * 1e3:.0f} "
                                  f"against {sum(chosen.values()) * 1e3:.0f} ms)")
        plan["q4_ms"] = {r: round(t[0] * 1e3, 2) for r, t in q4.items()}
    for g in groups:   # bf16: fp32-only layers on the packed kernel at every row count (row-independent)
        if precision == "q4":
            g.fill(_q4_table(fp32_plan) if g.mods[0].gguf_blocks is not None else fp32_plan)
        else:
            g.fill(([PACKED] if g.fp32_only else [BF16]) * MAX_TABLE if precision == "bf16" else fp32_plan)
    plan["how"] = "model"
    plan["ms"] = {r: [round(x * 1e3, 2) for x in ts] for r, ts in timings.items()}


def _time_layers(groups, rows_list, plan: dict) -> None:
    """Without a whole pass to time: each product timed alone by sweeps over its layers, fp32 or as stored."""
    plan["how"] = "layers"
    for g in groups:
        timings = time_shape(g.mods, rows_list)
        g.fill(choice_table(timings))
        m = g.mods[0]
        name = f"{m.out_features}x{m.in_features} {str(m.weight.dtype).rpartition('.')[2]}"
        plan["ms"][name] = {r: [round(a * 1e3, 3), round(b * 1e3, 3)] for r, (a, b) in timings.items()}


def _exact_tables(groups, plan: dict, known: dict) -> None:
    """The "exact" model: packed fp32 everywhere, and every row its own product where the packed kernel is not
    row-independent on this CPU (probed per product)."""
    rowwise = []
    for g in groups:
        g.fill([PACKED] * MAX_TABLE)
        if model_rows_dependence(g.mods[:1], known=known):
            g.fill([ROWWISE] * MAX_TABLE)
            rowwise.append(f"{g.mods[0].out_features}x{g.mods[0].in_features}")
    plan["rowwise"] = rowwise


def _free_unused(groups) -> None:
    """Free the copies this plan never runs (the bf16 one is ~half the fp32 model)."""
    for g in groups:
        for m in g.mods:
            if BF16 not in g.table:
                m.bf16_weight = m.bf16_bias = None
            if PACKED not in g.table and m.weight.dtype == torch.float32:
                m.packed_weight = None


def _guard(groups, plan: dict, known: dict) -> None:
    """Probe the final plan's row independence (and re-probe at every new thread count: RowGuard)."""
    layers = [m for g in groups for m in g.mods]
    guard = RowGuard(layers, plan, known)
    for m in layers:
        m.guard = guard
    guard.probe()


def plan_kernels(model: torch.nn.Module, mode: str | None = None, batch_hint: int = 8, run=None,
                 rows_list=PROBE_ROWS, fp32_only=(), into: dict | None = None) -> dict:
    """Make every packable nn.Linear of a frozen CPU model a PlannedLinear and plan it (see the docstring).

    run: a callable run(rows) making one forward pass of `rows` tokens; given, the choice is timed on whole
    passes (every layer switches together: what a decoding step really costs), bf16 included. Without it each
    product is timed alone by sweeps over its layers, fp32 or as stored (small modules: the draft head, the draft
    LM head), and the weights' own precision is kept.
    Returns the plan: {"mode", "how" ("model" | "layers"), "layers", "precision" ("fp32" | "bf16"),
    "packed_from_rows" (first row count on the packed fp32 kernel, None = never), "ms": {rows: [plain, packed,
    bf16]} (or per product: [plain, packed]), "row_independent", "row_probe" {threads: why not | None},
    "seconds"}. mode: MODES; default EAGLE_LENS_CPU_KERNELS or auto. Layers oneDNN cannot pack keep F.linear.
    fp32_only: layers that never run bf16 (the LM head: a bf16 output would round logits to steps of 1/16-1/8 and
    make exact ties of near-ties); they take the fp32 kernels' per-row-count choice. into: the dict to fill
    (the target's `kernel_plan`, which a later re-probe updates), default a new one.
    """
    mode = mode or kernel_mode()
    plan = {} if into is None else into
    plan.update({"mode": mode, "how": None, "layers": 0, "precision": "fp32", "packed_from_rows": None, "ms": {},
            "row_independent": False, "seconds": 0.0})
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        plan["mode"] = "plain (oneDNN unavailable)"
        return plan
    t0 = time.perf_counter()
    q8_ok = mode == "q8" and _attach_q8(model, plan)
    want_bf16 = mode == "bf16" or (mode == "auto" and run is not None)
    groups = _groups(model, want_bf16, {id(m) for m in fp32_only}, batch_hint)
    probed: dict = {}   # row-probe results of this plan's products (each probed once)
    bf16_ok = _bf16_possible(groups)
    if mode == "bf16" and not bf16_ok:       # asked for, not there: the plan keeps fp32 and says why
        plan["bf16_refused"] = ("this CPU has no bf16 kernel (oneDNN needs AMX, AVX512-BF16 or AVX-NE-CONVERT)"
                                if groups and not bf16_kernels_available() else "no layer can run bf16 here")
    if bf16_ok and want_bf16:   # the bf16 model is exact only where its kernels are row-independent (docstring)
        for g in groups:
            g.fill([_start_kernel(g, "bf16", True)] * MAX_TABLE)
        why = model_rows_dependence([g.mods[0] for g in groups], known=probed)
        if why:
            bf16_ok, plan["bf16_refused"] = False, f"row-dependent on this CPU ({why})"
    q4_ok = _q4_possible(groups, mode, plan, probed)
    for g in groups:
        g.fill([_start_kernel(g, mode, bf16_ok)] * MAX_TABLE)
    plan["layers"] = sum(len(g.mods) for g in groups)
    if mode == "exact" or (mode == "q8" and not q8_ok):
        _exact_tables(groups, plan, probed)
    elif mode == "q8":   # every layer with blocks on them at every row count; one without (an odd width): exact
        for g in _q4_groups(groups):
            g.fill([GGUF] * MAX_TABLE)
        _exact_tables([g for g in groups if g.mods[0].gguf_blocks is None], plan, probed)
    elif mode == "q4" and q4_ok:
        for g in _q4_groups(groups):
            g.fill(_q4_table([PACKED] * MAX_TABLE))
    elif mode in ("auto", "fp32") and groups:
        if run is not None:
            _time_precision(run, rows_list, groups, plan, bf16_ok, mode == "auto", q4_ok and mode == "auto")
        else:
            _time_layers(groups, rows_list, plan)
    plan["precision"] = (("q8" if mode == "q8" else "q4") if any(GGUF in g.table for g in groups) else
                         "bf16" if any(BF16 in g.table for g in groups) else "fp32")
    _free_unused(groups)
    firsts = [next((r for r in range(1, MAX_TABLE) if g.table[r] == PACKED), None) for g in groups]
    known = [f for f in firsts if f is not None]
    plan["packed_from_rows"] = min(known) if known else None
    if groups:
        _guard(groups, plan, probed)
    plan["seconds"] = round(time.perf_counter() - t0, 2)
    return plan


def planned_layers(model: torch.nn.Module) -> list[PlannedLinear]:
    return [m for m in model.modules() if isinstance(m, PlannedLinear)]


def set_kernel(model: torch.nn.Module, kernel: str) -> None:
    """Switch every planned layer of `model` to one kernel at every row count ('plain', 'packed', 'bf16', 'gguf'),
    for measuring (bench/pass_cost.py); layers lacking that kernel's weight copy keep their plan."""
    k = KERNEL_NAMES.index(kernel)
    seen = set()
    for m in planned_layers(model):
        have = {PACKED: m.packed_weight, BF16: m.bf16_weight, GGUF: m.gguf_blocks}.get(k, m.weight)
        if id(m.table) in seen or have is None:
            continue
        seen.add(id(m.table))
        m.table[:] = [k] * len(m.table)


def kernel_tables(model: torch.nn.Module) -> list[list[int]]:
    """The distinct plan tables of a model's layers (to save and restore around set_kernel)."""
    out, seen = [], set()
    for m in planned_layers(model):
        if id(m.table) not in seen:
            seen.add(id(m.table))
            out.append(m.table)
    return out


def pack_cpu_linears(model: torch.nn.Module, batch_hint: int = 8, plan: dict | None = None, run=None,
                     mode: str | None = None, fp32_only=()) -> int:
    """Plan every nn.Linear of a frozen CPU model (see the module's docstring). The `weight` parameters stay
    (the draft head and the LM-head copies read them). Returns how many layers were planned (0 where oneDNN is
    unavailable); `plan`, when given, receives the timing plan; `run(rows)`, when given, makes one forward
    pass of `rows` tokens, on which the choice is timed (else layer by layer, fp32 or as stored).
    """
    got = plan_kernels(model, batch_hint=batch_hint, run=run, mode=mode, fp32_only=fp32_only, into=plan)
    return got["layers"]
