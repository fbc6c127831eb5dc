"""Fit a static draft tree to measured acceptance, the way EAGLE-1 and Medusa derive theirs.

At T = 0 a static tree accepts the longest path of its nodes whose tokens are the target's greedy tokens. So:

1. decode with a big tree (default mc_sim_7b_63, 63 nodes) and write down, for every cycle, the *rank path* of
   what the target accepted: (rank of the accepted child among its siblings at depth 1, at depth 2, ...);
2. for any sub-tree S of the big tree, that cycle would have accepted the longest prefix of its rank path that S
   holds. The best tree of n nodes is therefore the n most frequent path prefixes (a prefix is at least as
   frequent as each of its extensions, so they form a tree), and its expected tau is 1 + mean accepted prefix;
3. a cycle's real cost grows with the tree (verified tokens, draft levels), so each candidate size is timed with
   the real decoder, and the size with the highest tau(n) / seconds-per-cycle(n) wins.

    python -m eagle_core.bench.tree_fit --prompts sharegpt-heldout --limit 20 --sizes 1,2,3,4,5,6,8,12 \\
        --name smollm2-cpu --out assets/trees/smollm2-cpu.json

The tree is fitted on the held-out ShareGPT split (by default), which none of the benchmark's prompt sets
(MT-bench, HumanEval, GSM8K, Alpaca) is: no set is judged with a tree tuned on it. The best size depends on the
machine (step 3 times cycles with this machine's kernels: on the 2-core Intel dev machine a 3-token pass costs
~1.1 plain steps but a 4-token pass ~1.4, so a 2-node chain wins there; where small GEMMs are cheap a wider tree
does). Approximation: cycle start points come from the big tree's run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

from ..paths import TREES as TREES_DIR
from .metrics import cycle_seconds


# ------------------------------------------------------------------------------------------ pure parts
def rank_path(record) -> tuple[int, ...]:
    """Sibling ranks (by draft probability, 0 = most likely) of a cycle's accepted nodes, root excluded."""
    nodes = record.nodes
    path = []
    for i in record.accepted_path:
        sibs = [n for n in nodes if n.parent == nodes[i].parent]
        path.append(sorted(sibs, key=lambda n: (-n.q, n.index)).index(nodes[i]))
    return tuple(path)


def prefix_counts(paths) -> Counter:
    """How many cycles' rank paths pass through each node (a node = a rank-path prefix)."""
    c = Counter()
    for p in paths:
        for d in range(1, len(p) + 1):
            c[p[:d]] += 1
    return c


def fit_tree(paths, n_nodes: int) -> list[list[int]]:
    """The n most frequent prefixes, as static-tree choices (parents first; ties: shallower, then lower ranks).

    Ranks within a parent are relabelled 0..k-1 in order, so a choice like (0, 2) without (0, 1) cannot occur:
    the drafter takes a parent's top-k children, so a tree can only hold a prefix of each sibling ranking.
    """
    counts = prefix_counts(paths)
    chosen: set = set()
    for _ in range(n_nodes):
        # frontier: children of chosen nodes (or depth-1 nodes) whose lower-ranked siblings are chosen already
        best = None
        for p, c in counts.items():
            if p in chosen or (len(p) > 1 and p[:-1] not in chosen):
                continue
            if p[-1] > 0 and p[:-1] + (p[-1] - 1,) not in chosen:
                continue
            key = (c, -len(p), tuple(-r for r in p))
            if best is None or key > best[0]:
                best = (key, p)
        if best is None:
            break
        chosen.add(best[1])
    return [list(p) for p in sorted(chosen, key=lambda p: (len(p), p))]


def expected_tau(paths, choices) -> float:
    """1 + mean accepted length, had each cycle used the tree `choices` (T = 0)."""
    s = {tuple(c) for c in choices}
    total = 0
    for p in paths:
        d = 0
        while d < len(p) and p[:d + 1] in s:
            d += 1
        total += d
    return 1.0 + total / max(1, len(paths))


def load_tree_file(path: str) -> list[list[int]]:
    with open(path) as f:
        return [list(map(int, c)) for c in json.load(f)["choices"]]


# ------------------------------------------------------------------------------------------ measuring
def collect_paths(target, head, prompts, big_tree: str, max_new_tokens: int, draft_vocab: int, draft_dtype: str,
                  progress=print) -> list[tuple[int, ...]]:
    from ..decoding.engine import DecodeConfig, stream
    cfg = DecodeConfig(draft="static", tree=big_tree, max_new_tokens=max_new_tokens, record_topk=0,
                       draft_vocab=draft_vocab, draft_dtype=draft_dtype)
    paths = []
    for k, item in enumerate(prompts):
        paths += [rank_path(rec) for rec in stream(target, head, cfg, target.render_prompt(item["prompt"]))
                  if rec.cycle > 0]
        progress(f"[paths] prompt {k + 1}/{len(prompts)}: {len(paths)} cycles")
    return paths


def time_cycles(target, head, choices, prompts, max_new_tokens: int, draft_vocab: int, draft_dtype: str) -> float:
    """Mean wall seconds of one draft + verify cycle with this tree (the real decoder, lean records)."""
    from ..decoding import presets as D
    from ..decoding.engine import DecodeConfig, stream
    name = "_tree_fit_candidate"
    D.tree_presets()[name] = choices
    try:
        cfg = DecodeConfig(draft="static", tree=name, max_new_tokens=max_new_tokens, record_topk=0,
                           draft_vocab=draft_vocab, draft_dtype=draft_dtype)
        # first calls build caches (packed head copy, draft LM head): 4 cycles not timed
        for _ in zip(range(4), stream(target, head, cfg, target.render_prompt(prompts[0]["prompt"]))):
            pass
        secs = [cycle_seconds(r) for item in prompts
                for r in stream(target, head, cfg, target.render_prompt(item["prompt"])) if r.cycle > 0]
        return sum(secs) / max(1, len(secs))
    finally:
        D.TREE_PRESETS.pop(name, None)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="sharegpt-heldout",
                    help="prompt set to fit on (default: the held-out ShareGPT split, none of the benchmark's sets)")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--head", default="shifted")
    ap.add_argument("--big-tree", default="mc_sim_7b_63")
    ap.add_argument("--sizes", default="1,2,3,4,5,6,8,12,16,24")
    ap.add_argument("--timing-prompts", type=int, default=5)
    ap.add_argument("--timing-tokens", type=int, default=96)
    ap.add_argument("--timing-rounds", type=int, default=2,
                    help="time every size this many times, in turn, and keep its fastest (a noisy moment hits "
                         "one round of one size, not the choice)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--name", default="smollm2-cpu")
    ap.add_argument("--out", default=None, help="default assets/trees/NAME.json")
    ap.add_argument("--reuse-paths", default=None, metavar="JSON",
                    help="take the rank paths from an earlier output instead of decoding again (re-time only)")
    return ap


def rank_paths(args, target, head, prompts, base) -> list[tuple[int, ...]]:
    """Step 1: the accepted rank path of every cycle with the big tree, or those of an earlier output."""
    if args.reuse_paths:
        with open(args.reuse_paths) as f:
            old = json.load(f)
        return [tuple(p) for p, k in old["rank_paths"] for _ in range(k)]
    return collect_paths(target, head, prompts, args.big_tree, args.max_new_tokens, base.draft_vocab,
                         base.draft_dtype)


def candidate(args, target, head, prompts, base, paths, n: int) -> dict:
    """Steps 2 and 3 for one size: the best tree of n nodes, its expected tau, its measured cycle time, and the
    speed they model (printed as it is found)."""
    choices = fit_tree(paths, n)
    sec = time_cycles(target, head, choices, prompts[:args.timing_prompts], args.timing_tokens,
                      base.draft_vocab, base.draft_dtype)
    tau = expected_tau(paths, choices)
    row = {"nodes": len(choices), "depth": max(len(c) for c in choices), "tau_fit": round(tau, 3),
           "cycle_ms": round(1000 * sec, 2), "tokens_per_s_model": round(tau / sec, 2), "choices": choices}
    print(f"n={len(choices):3d} depth={row['depth']} tau_fit={tau:.3f} cycle={1000 * sec:6.1f} ms "
          f"-> {tau / sec:6.1f} tok/s", flush=True)
    return row


def fit_report(args, argv, target, head, base, paths, rows, best: dict, wall_s: float) -> dict:
    """The output JSON: the winning tree, how it was fitted, every candidate and the rank paths themselves."""
    import torch
    return {"name": args.name, "choices": best["choices"], "nodes": best["nodes"], "tau_fit": best["tau_fit"],
            "fitted_on": {"prompts": args.prompts, "limit": args.limit, "max_new_tokens": args.max_new_tokens,
                          "cycles": len(paths), "big_tree": args.big_tree, "paths_reused_from": args.reuse_paths,
                          "big_tree_tau": round(expected_tau(paths, [list(p) for p in prefix_counts(paths)]), 3)},
            "head": os.path.relpath(getattr(head, "path", None) or args.head), "target": target.name,
            "draft": {"draft_vocab": base.draft_vocab, "draft_dtype": base.draft_dtype},
            "threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "command": "python -m eagle_core.bench.tree_fit " + " ".join(sys.argv[1:] if argv is None else argv),
            "wall_s": round(wall_s, 1), "candidates": rows,
            "rank_paths": [[list(p), k] for p, k in sorted(Counter(paths).items(), key=lambda x: -x[1])]}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import torch
    from .errors import BenchError
    from .prompts import load_prompts
    from ..quiet import quiet_libraries
    quiet_libraries()
    from ..decoding.engine import default_config
    from ..model.head import HeadLoadError, resolve_head
    from ..model.target import TargetLoadError, load_target
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        prompts = load_prompts(args.prompts, args.limit)
        sizes = sorted({int(s) for s in args.sizes.split(",")})
        target = load_target()
        head = resolve_head(args.head, target)
    except (BenchError, TargetLoadError, HeadLoadError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    base = default_config(target.device.type, target.numerics)   # the plan's own draft (q8 beside the blocks)
    t0 = time.time()
    paths = rank_paths(args, target, head, prompts, base)
    rows = [candidate(args, target, head, prompts, base, paths, n) for n in sizes]
    for _ in range(max(1, args.timing_rounds) - 1):
        again = [candidate(args, target, head, prompts, base, paths, n) for n in sizes]
        rows = [min(a, b, key=lambda r: r["cycle_ms"]) for a, b in zip(rows, again)]
    if args.timing_rounds > 1:
        print("fastest of the rounds:")
        for r in rows:
            print(f"n={r['nodes']:3d} depth={r['depth']} tau_fit={r['tau_fit']:.3f} cycle={r['cycle_ms']:6.1f} ms "
                  f"-> {r['tokens_per_s_model']:6.1f} tok/s")
    best = max(rows, key=lambda r: r["tokens_per_s_model"])
    out = args.out or os.path.join(TREES_DIR, f"{args.name}.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    report = fit_report(args, argv, target, head, base, paths, rows, best, time.time() - t0)
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"best: {best['nodes']} nodes, depth {best['depth']}, tau_fit {best['tau_fit']}, "
          f"{best['cycle_ms']} ms/cycle -> {out}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
