"""Words for the acceptance test a node actually faced, and for where the bonus/correction token came from.

The records say which rule was applied (TreeNode.rule, test_p, test_q, test_rank; CycleRecord.bonus_from), so
the page names that rule with the numbers it used, never a generic formula:
  greedy    T = 0: kept only if it is the target's top token
  ratio     drawn from q: kept w.p. min(1, p'(x)/q'(x)); for the first sibling p' = p and q' = q, after k
            rejections p' is the residual normalise(max(0, p' - q')) and q' the draft renormalised without them
  target    chosen top-k (EAGLE-2 trees): kept w.p. p'(x); p' is p with the rejected siblings removed
  outside_q q'(x) = 0: cannot be a draw from q', passed over (the drafter no longer proposes such nodes)
"""
from __future__ import annotations

from .common import esc, pct, show_token


def _siblings(k: int) -> str:
    return "1 earlier sibling was" if k == 1 else f"{k} earlier siblings were"


def rule_sentence(node: dict, sampling: bool, html: bool = True) -> str:
    """One or two sentences: the test this node faced, with its numbers (plain text when html=False)."""
    br = "<br>" if html else " "
    rule, k = node.get("rule"), node.get("test_rank") or 0
    p, q, a = node.get("test_p"), node.get("test_q"), node.get("accept_prob")
    if rule is None and node.get("accept_prob") is not None:   # records from before the rule was recorded
        rule, p, q = "ratio" if node.get("sampled") else "target", node.get("p"), node.get("q")
    if rule is None:
        if sampling or node.get("status") == "not_reached":
            return "not tested: an earlier sibling was accepted, or its parent was not accepted"
        return "greedy (T = 0): kept only if it is the target's top token"
    if rule == "greedy":
        return "greedy (T = 0): kept only if it is the target's top token"
    if rule == "outside_q":
        return "q′ = 0 here: not a draw from the draft distribution, so never kept"
    if rule == "ratio":
        if k == 0:
            return f"drawn from q: kept with probability min(1, p/q) = min(1, {pct(p)} / {pct(q)}) = {pct(a)}"
        return (f"drawn from q after {_siblings(k)} rejected: kept with probability min(1, p′/q′) = "
                f"min(1, {pct(p)} / {pct(q)}) = {pct(a)}{br}p′ = the residual left by the rejection{'s' if k != 1 else ''} (each one "
                f"replaces p′ by max(0, p′ − q′), renormalised), q′ = q renormalised without the rejected tokens")
    if rule == "target":
        if k == 0:
            return (f"chosen as a top-k draft (not drawn from q): kept with probability p = {pct(a)}"
                    f"{br}(q only ranks the EAGLE-2 tree; the test treats the draft as certain)")
        return (f"chosen as a top-k draft after {_siblings(k)} rejected: kept with probability p′ = {pct(a)}"
                f"{br}p′ = the target's p with the rejected tokens removed, renormalised")
    return str(rule)


def _tenths(x: float) -> float:
    return round(1000 * x) / 10


def exactness_sentence(node: dict) -> str | None:
    """Why the output is exact at T > 0, in one line with this node's numbers: its token comes out of the cycle with
    probability kept + corrected = p, the target's own (None where no sampling test was applied).

    ratio   kept as this draft: q·min(1, p/q) = min(q, p); otherwise, after this draft is rejected, the rest of the
            cycle (later siblings, then the residual) emits it with probability max(0, p − q) (the residual's
            share of the rejected mass): min(q, p) + max(0, p − q) = p. After earlier rejections the same holds
            for p′, q′ (the law those rejections left), which is what the test used.
    target  a top-k draft is certain, kept with probability p; a rejected one leaves the correction's law: p + 0.
    The shown terms are rounded to tenths of a percent and the second is the difference of the rounded p and the
    rounded first, so the sum on the page adds up exactly as printed."""
    rule, k = node.get("rule"), node.get("test_rank") or 0
    p, q = node.get("test_p"), node.get("test_q")
    if rule not in ("ratio", "target") or p is None or (rule == "ratio" and q is None):
        return None
    pp, qq = ("p′", "q′") if k else ("p", "q")
    tok = f"“{esc(show_token(node.get('text'), 16))}”"   # HTML: the page and Plotly's titles
    law = f"{pp} {_tenths(p):.1f}%" + (" (the law the earlier rejections left)" if k else ", the target's own")
    if rule == "target":
        return (f"Exact: {tok} comes out kept {_tenths(p):.1f}% + corrected 0% (a rejected draft is never the "
                f"correction) = {law}")
    kept = _tenths(min(p, q))
    corrected = max(0.0, _tenths(p) - kept) if p > q else 0.0
    return (f"Exact: {tok} comes out kept min({qq}, {pp}) = {kept:.1f}% + corrected max(0, {pp} − {qq}) = "
            f"{corrected:.1f}% = {law}")


def source_sentence(rec: dict) -> str:
    """Where the cycle's bonus/correction token came from."""
    src = rec.get("bonus_from")
    kind = rec.get("bonus_kind", "bonus")
    if src is None:   # older records
        src = "argmax" if not any(n.get("accept_prob") is not None for n in rec.get("nodes", [])) else (
            "residual_ratio" if kind == "correction" else "target")
    return {"argmax": "= argmax of target p",
            "target": "sampled from target p",
            "residual_ratio": "drawn from the residual max(0, p − q), normalised",
            "residual_removed": "drawn from p with the rejected drafts removed, renormalised"}.get(src, src)


def source_legend(rec: dict) -> str:
    """Legend name of the distribution shown for the bonus/correction."""
    src = rec.get("bonus_from")
    kind = rec.get("bonus_kind", "bonus") if rec.get("cycle", 1) > 0 else "first token"
    if src == "residual_ratio":
        return "residual max(0, p − q), normalised"   # p, q as the earlier rejections left them
    if src == "residual_removed":
        return "p without the rejected drafts, renormalised"
    return f"target p at the {kind}"
