"""One method's figures over a benchmark run's per-prompt results (pure: the metrics of metrics.py, pooled).

  tau           new tokens / target forwards, summed over prompts (the prefill counts as a forward)
  tokens_per_s  mean over prompts of new tokens / wall seconds of that generation (prefill included)
  speedup       mean over prompts of (tokens/s of the method) / (tokens/s of hf-greedy on the same prompt)
  speedup_ci95  bootstrap 95% interval of that mean over the prompts (how sure the figure is), with min / max
  accept_rate_by_depth  alpha_k = fraction of cycles reaching depth k whose draft at depth k+1 was accepted
  mismatches    (T = 0) prompts whose tokens differ from hf-greedy's, not counting tie_divergences: a
                divergence where the target's top-2 logits after prompt + common prefix are within 1e-4
"""
from __future__ import annotations

from .machine_load import BUSY_CORES   # a timed run beside more other work than this (in cores) is "busy"
from .methods import BASELINE, engine_of
from .metrics import (accept_length_counts, acceptance_by_depth, mean, mean_interval, mean_tokens_per_s,
                      speedup_ratio_of_means, speedup_ratios, tau)


def count_mismatches(results: list[dict]) -> tuple[int, int]:
    """(mismatches, tie_divergences) from per-prompt `diverged_at` / `tie` fields (set at T = 0 only)."""
    mism = ties = 0
    for r in results:
        if r.get("diverged_at") is None:
            continue
        if r.get("tie"):
            ties += 1
        else:
            mism += 1
    return mism, ties


def time_split(results: list[dict]) -> dict | None:
    """Engine methods: seconds spent drafting / in the target pass (prefill + verification) / elsewhere in the
    cycles, summed over prompts, with the rest of the wall time (set-up, loop) as `outside`."""
    parts = [r for r in results if r.get("time_split") is not None]
    if not parts:
        return None
    d, v, o = (sum(r["time_split"][i] for r in parts) for i in range(3))
    wall = sum(r["seconds"] for r in parts)
    return {"draft_s": d, "verify_s": v, "other_s": o, "outside_s": max(0.0, wall - d - v - o)}


def draft_counters(results: list[dict]) -> dict | None:
    """llama.cpp's speculative methods: its own counters summed over the prompts (drafted and accepted tokens,
    cycles: target passes after the prompt's), how many prompts drafted anything at all, and the acceptance; None
    for methods without them. drafted 0 on every prompt: plain decoding in a speculative tool."""
    rs = [r["llamacpp"] for r in results if (r.get("llamacpp") or {}).get("drafted") is not None]
    if not rs:
        return None
    d, a = sum(r["drafted"] for r in rs), sum(r["accepted"] or 0 for r in rs)
    return {"drafted": d, "accepted": a, "cycles": sum(r.get("cycles") or 0 for r in rs),
            "prompts_drafting": sum(1 for r in rs if r["drafted"] > 0), "prompts": len(rs),
            "acceptance": a / d if d else None, "spec_type": rs[0].get("spec_type")}


def fastest(ms: dict) -> dict | None:
    """The fastest method (mean tokens/s) of a run's summaries, and each engine's fastest (methods.engine_of):
    {"method", "engine", "tokens_per_s", "by_engine": {engine: {"method", "tokens_per_s"}}}."""
    by = {}
    for m, s in ms.items():
        t = s.get("tokens_per_s")
        e = engine_of(m)
        if t is not None and (e not in by or t > by[e]["tokens_per_s"]):
            by[e] = {"method": m, "tokens_per_s": t}
    if not by:
        return None
    top = max(by, key=lambda e: by[e]["tokens_per_s"])
    return {"method": by[top]["method"], "engine": top, "tokens_per_s": by[top]["tokens_per_s"], "by_engine": by}


def summarize(results: list[dict], baseline: list[dict] | None, greedy: bool) -> dict:
    """Metrics of one method over a list of per-prompt results."""
    mism, ties = count_mismatches(results) if greedy else (None, None)
    fw = [r.get("forwards") for r in results]
    ratios = speedup_ratios(results, baseline) if baseline else []
    return {
        "tau": tau(results),
        "tokens_per_s": mean_tokens_per_s(results),
        "speedup": mean(ratios) if baseline else None,
        "speedup_ratio_of_means": speedup_ratio_of_means(results, baseline) if baseline else None,
        "speedup_ci95": mean_interval(ratios),
        "speedup_min": min(ratios) if ratios else None,
        "speedup_max": max(ratios) if ratios else None,
        "busy_runs": sum(1 for r in results if (r.get("other_cores") or 0) > BUSY_CORES),
        "mismatches": mism,
        "tie_divergences": ties,
        "n_prompts": len(results),
        "new_tokens": sum(r["new_tokens"] for r in results),
        "seconds": sum(r["seconds"] for r in results),
        "target_forwards": None if any(f is None for f in fw) else sum(fw),
        "accept_rate_by_depth": acceptance_by_depth(results),
        "accept_length_counts": accept_length_counts(results),
        "time_split": time_split(results),
        "draft_counters": draft_counters(results),
    }


def summarize_all(per_prompt: dict[str, list[dict]], greedy: bool, baseline_name: str = BASELINE) -> dict:
    """{method: summary + by_category} from {method: [per-prompt result]}."""
    base = per_prompt.get(baseline_name)
    out = {}
    for m, rs in per_prompt.items():
        s = summarize(rs, base, greedy)
        cats = sorted({r["category"] for r in rs})
        s["by_category"] = {}
        for c in cats:
            sub = [r for r in rs if r["category"] == c]
            sb = [r for r in base if r["category"] == c] if base else None
            cs = summarize(sub, sb, greedy)
            cs.pop("by_category", None)
            s["by_category"][c] = cs
        out[m] = s
    return out
