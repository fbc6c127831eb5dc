"""The kernel plan (cpu_kernels.plan_kernels) in words: one line for reports (`describe`) and a few words for the
app's banner (`short_description`), from the plan dict alone."""
from __future__ import annotations

from .attention import MAX_VERIFY_ROWS


def _q4_timing(plan: dict) -> str:
    """'timed faster here: ...' from the plan's one-token passes (the block kernels against the plan beside them)."""
    q4, ms = plan.get("q4_ms") or {}, plan.get("ms") or {}
    one = min(q4) if q4 else None
    if one is None or one not in ms:
        return "timed"
    return f"timed faster here: a one-token pass {q4[one]:.1f} ms against {min(ms[one]):.1f} ms on fp32"


def short_description(plan: dict | None) -> str:
    """A few words for the app's banner: which numerical model the target's linear layers run, and why."""
    if not plan or not plan.get("layers"):
        return "fp32 (plain kernels)"
    if plan.get("precision") == "q4":
        how = "forced" if plan["mode"] == "q4" else _q4_timing(plan)
        return f"the GGUF's own 4-bit blocks ({how})"
    name = {"bf16": "bf16 linear layers", "fp32": "fp32 linear layers"}.get(plan.get("precision"), "fp32")
    why = f"; 4-bit blocks not taken: {plan['q4_refused']}" if plan.get("q4_refused") else ""
    return name + why


def describe(plan: dict | None) -> str:
    """One line for reports: which kernel runs which row counts (and why not bf16, where it was refused)."""
    if not plan or not plan.get("layers"):
        return "plain linear kernels"
    refused = f"; bf16 not taken: {plan['bf16_refused']}" if plan.get("bf16_refused") else ""
    if plan.get("q4_refused"):
        refused += f"; q4 not taken: {plan['q4_refused']}"
    exact = "; row-independent (probed)" if plan.get("row_independent") else ""
    if plan["mode"] == "exact":
        rows = plan.get("rowwise") or []
        return ("oneDNN-packed fp32 linear kernels everywhere" + (f", every row its own product in {', '.join(rows)}"
                                                                   if rows else "") + " (forced: exact)" + exact)
    if plan.get("precision") == "q8":
        return "the draft's weights as Q8_0 blocks on the GGUF block kernel at every row count (fp32 arithmetic)" + exact
    if plan.get("precision") == "q4":
        g = plan.get("gguf") or {}
        types = ", ".join(f"{n} {t}" for t, n in sorted(g.get("types", {}).items()))
        mb = f", {g['bytes'] / 1e6:.0f} MB" if g.get("bytes") else ""
        return (f"GGUF block kernels on the file's own weights ({types or 'blocks'}{mb}; fp32 arithmetic) up to "
                f"{MAX_VERIFY_ROWS} rows, oneDNN-packed fp32 on the same dequantized weights above "
                f"({'forced' if plan['mode'] == 'q4' else _q4_timing(plan)})" + exact)
    if plan["mode"] == "q4":
        return "oneDNN-packed fp32 linear kernels everywhere (q4 was forced but not taken" + \
            (f": {plan['q4_refused']})" if plan.get("q4_refused") else ")") + exact
    if plan["mode"] not in ("auto", "fp32"):
        what = {"bf16": "bf16 (oneDNN)"}.get(plan["mode"], plan["mode"])
        if refused:
            return ("oneDNN-packed fp32 linear kernels everywhere (bf16 was forced but not taken: "
                    f"{plan['bf16_refused']})" + exact)
        return f"{what} linear kernels everywhere (forced)" + exact
    if plan.get("precision") == "bf16":
        return "bf16 linear layers (oneDNN, fp32 between them) at every row count (timed)" + exact
    first = plan.get("packed_from_rows")
    if first is None:
        return "plain linear kernels at every row count (timed)" + refused
    if first == 1:
        return "oneDNN-packed linear kernels from 1 row (timed)" + refused + exact
    return f"linear kernels timed per row count: plain below {first} rows, oneDNN-packed from {first}" + refused
