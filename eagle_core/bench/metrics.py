"""The one set of decoding metrics: tau, tokens/s, speedup, acceptance per depth, accepted-length counts.

Pure Python (no torch), so the benchmark, the Paper lab and the views count with the same code:

  tau                 new tokens / target forwards (the prefill counts as a forward; plain decoding = 1.0)
  tokens/s            new tokens / seconds
  speedup             mean over prompts of the per-prompt tokens/s ratio method / baseline, with a bootstrap
                      95% interval of that mean
  depth_counts        per depth k: the cycles that reached k (their first k drafts accepted, a depth k+1 to try)
                      and those of them that accepted depth k+1 too; alpha_k = accepted[k] / reached[k]
  length_counts       how many cycles accepted 0, 1, 2, ... drafted tokens (the accepted-length histogram)

The inputs are plain numbers, the benchmark's per-prompt results ({"prompt", "new_tokens", "seconds",
"forwards", "depth_counts", "accept_lengths"}) or cycle records (records.CycleRecord objects or their dicts).
"""
from __future__ import annotations

import random

TAU_NOTE = "tau = mean new tokens per target forward (prefill counted as a forward; hf-greedy = 1.0)"


def field(obj, name, default=None):
    """A record's field, whether the record is an object (CycleRecord, TreeNode) or its dict."""
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


# ============================================================================ rates
def tokens_per_forward(tokens, forwards) -> float | None:
    """tau of one count: new tokens per target forward; None without forwards."""
    return tokens / forwards if forwards else None


def tokens_per_second(tokens, seconds) -> float | None:
    """New tokens per second; None without time."""
    return tokens / seconds if seconds > 0 else None


def mean(xs) -> float | None:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


# ============================================================================ one generation's cycle records
def cycle_seconds(record) -> float:
    """Model time of one cycle: drafting + the target pass + the rest of the cycle."""
    return field(record, "draft_seconds") + field(record, "verify_seconds") + field(record, "other_seconds")


def drafted(record) -> bool:
    """A cycle that drafted something (not the prefill, not an empty tree)."""
    return field(record, "cycle", 0) > 0 and len(field(record, "nodes", [])) > 1


def drafting_cycles(records) -> list:
    """Records of cycles that drafted something (not the prefill, not empty trees)."""
    return [r for r in records if drafted(r)]


def accepted_and_depth(records) -> list[tuple[int, int]]:
    """(accepted drafted tokens, tree depth) of every drafting cycle among the records."""
    return [(field(r, "accept_length", len(field(r, "accepted_path", []))),
             max(field(x, "depth", 0) for x in field(r, "nodes"))) for r in drafting_cycles(records)]


# ============================================================================ accepted lengths and depths
def length_counts(lengths, size: int = 0) -> list[int]:
    """[how many of the lengths are 0, 1, 2, ...], at least `size` entries long: the accepted-length histogram."""
    lengths = list(lengths)
    out = [0] * max(size, max(lengths, default=-1) + 1)
    for n in lengths:
        out[n] += 1
    return out


def count_shares(counts) -> list[float]:
    """Each count as a share of their total (all zeros for an empty histogram)."""
    total = sum(counts) or 1
    return [c / total for c in counts]


def depth_counts(cycles) -> tuple[list[int], list[int]]:
    """From (accept_length, tree_depth) per drafting cycle: (reached[k], accepted[k]) for k = 0..D-1.

    A cycle reaches depth k when its first k drafts were accepted (every cycle reaches depth 0); it counts
    for k only when its tree has a depth k+1 to try.
    """
    reached, accepted = [], []
    for acc_len, depth in cycles:
        for k in range(depth):
            if k >= len(reached):
                reached.append(0)
                accepted.append(0)
            if acc_len >= k:
                reached[k] += 1
                if acc_len >= k + 1:
                    accepted[k] += 1
    return reached, accepted


def merge_counts(parts) -> tuple[list[int], list[int]]:
    """The sum of several (reached, accepted) depth counts."""
    reached, accepted = [], []
    for r, a in parts:
        for k in range(len(r)):
            if k >= len(reached):
                reached.append(0)
                accepted.append(0)
            reached[k] += r[k]
            accepted[k] += a[k]
    return reached, accepted


def acceptance_rates(reached, accepted) -> list[float | None]:
    """alpha_k = accepted[k] / reached[k] (None where no cycle reached depth k)."""
    return [a / r if r else None for r, a in zip(reached, accepted)]


def accept_length_histogram(records) -> dict:
    """{"counts": [cycles that accepted 0, 1, ..., D drafted tokens], "alpha": [alpha_k per depth],
    "reached": [cycles that reached depth k, the denominator of alpha_k], "cycles": n} of cycle records: alpha_k
    as depth_counts counts it: of the cycles whose first k drafts were accepted and whose tree had a depth k+1,
    the share that accepted depth k+1 too."""
    cycles = accepted_and_depth(records)
    counts = length_counts([n for n, _ in cycles], size=max((d + 1 for _, d in cycles), default=0))
    reached, accepted = depth_counts(cycles)
    return {"counts": counts, "alpha": acceptance_rates(reached, accepted), "reached": reached,
            "cycles": len(cycles)}


# ============================================================================ the benchmark's per-prompt results
def result_tokens_per_s(r: dict) -> float:
    """Tokens/s of one per-prompt result (wall seconds of the generation, prefill included)."""
    return r["new_tokens"] / max(r["seconds"], 1e-12)


def tau(results: list[dict]) -> float | None:
    """Summed new tokens / summed target forwards; None when any forward count is unknown."""
    if not results or any(r.get("forwards") is None for r in results):
        return None
    return tokens_per_forward(sum(r["new_tokens"] for r in results), sum(r["forwards"] for r in results))


def mean_tokens_per_s(results: list[dict]) -> float | None:
    return mean(result_tokens_per_s(r) for r in results)


def speedup_ratios(results: list[dict], baseline: list[dict]) -> list[float]:
    """Per-prompt tokens/s ratios method / baseline (matched by prompt index)."""
    base = {r["prompt"]: result_tokens_per_s(r) for r in baseline}
    return [result_tokens_per_s(r) / base[r["prompt"]] for r in results
            if r["prompt"] in base and base[r["prompt"]] > 0]


def speedup(results: list[dict], baseline: list[dict]) -> float | None:
    """Mean over prompts of the per-prompt tokens/s ratio method / baseline (matched by prompt index)."""
    return mean(speedup_ratios(results, baseline))


def speedup_ratio_of_means(results: list[dict], baseline: list[dict]) -> float | None:
    """Mean tokens/s of the method / mean tokens/s of the baseline, over the prompts both ran."""
    keys = {r["prompt"] for r in baseline}
    a = mean_tokens_per_s([r for r in results if r["prompt"] in keys])
    b = mean_tokens_per_s([r for r in baseline if r["prompt"] in {x["prompt"] for x in results}])
    return a / b if a is not None and b else None


def mean_interval(xs: list[float], level: float = 0.95, resamples: int = 2000, seed: int = 0):
    """Bootstrap percentile interval of the mean of xs (deterministic: a seeded resampler); None for < 2 values.

    Why bootstrap: per-prompt speedups are skewed (a prompt that stops early has a noisy ratio) and few (10-80),
    so a normal interval would pretend to a symmetry they do not have."""
    xs = list(xs)
    if len(xs) < 2:
        return None
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(sum(xs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    lo = means[int((1 - level) / 2 * resamples)]
    hi = means[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return [lo, hi]


def acceptance_by_depth(results: list[dict]) -> list[float | None] | None:
    """alpha_k = accepted[k] / reached[k], pooled over the prompts' cycles; None for non-drafting methods."""
    parts = [r["depth_counts"] for r in results if r.get("depth_counts") is not None]
    if not parts:
        return None
    return acceptance_rates(*merge_counts(parts))


def accept_length_counts(results: list[dict]) -> list[int] | None:
    """How many drafting cycles accepted 0, 1, 2, ... drafted tokens, pooled over the prompts (the per-position
    histogram); None for methods that do not draft."""
    if not any(r.get("accept_lengths") is not None for r in results):
        return None
    return length_counts(a for r in results for a in (r.get("accept_lengths") or []))
