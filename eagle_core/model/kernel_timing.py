"""Timing the CPU kernels and choosing from the timings (cpu_kernels.py's plan is built on these): one sweep over the
layers of one shape, whole passes with every planned layer switched together, and the rules that turn the measured
seconds into a kernel table, a precision (fp32 / bf16) and the q4 choice. Pure functions of timings, apart from the
timers themselves, so the rules are tested on made-up numbers (tests/test_cpu_kernels.py)."""
from __future__ import annotations

import time

import torch

from .planned_linear import MAX_TABLE, PACKED, PLAIN

PROBE_ROWS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 26, 32)   # row counts timed; others take the choice of the next lower
BF16_ONE_ROW_SLACK = 1.05   # bf16 is taken only if its one-token pass is at most this much slower than fp32's


def _time_rows(mods, rows: int, kernel: int, reps: int) -> float:
    """Best-of-reps seconds for one sweep over `mods` (one call each, as a forward pass makes them)."""
    x = torch.randn(rows, mods[0].in_features, dtype=mods[0].weight.dtype,
                    generator=torch.Generator().manual_seed(rows))
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for m in mods:
            m.run_kernel(kernel, x)
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


def choose_q4(chosen: dict[int, float], q4: dict[int, float]) -> bool:
    """Whether the q4 plan (GGUF block kernels) replaces the plan otherwise chosen, from whole-pass seconds by row
    count: as for bf16, its one-token pass no slower (within BF16_ONE_ROW_SLACK) and all probed passes together
    cheaper."""
    if not q4 or set(q4) != set(chosen):
        return False
    one = min(q4)
    return q4[one] <= chosen[one] * BF16_ONE_ROW_SLACK and sum(q4.values()) < sum(chosen.values())


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
