"""Paper lab: the EAGLE and EAGLE-2 findings measured on cycle records (pure functions) and a CLI that runs them.

    python -m eagle_core.lab --prompts ../shared/data/mt_bench_question.jsonl --limit 10 --json assets/lab.json

Every function below reads plain CycleRecords (records.py), or their dicts, so the same code serves the CLI, the
app's own session cycles and the tests' synthetic records:

  position_acceptance   EAGLE-2 observation 1: acceptance depends on the position in the tree. For every
                        static-tree position (the rank path of a node: (sibling rank at depth 1, at depth 2, ...)),
                        how often it was reached (its parent accepted) and accepted; per prompt too, which shows
                        the second half of the observation: the same position's rate moves with the context.
  calibration           EAGLE-2 observation 2: the draft's confidence approximates acceptance. Bins of the
                        draft probability q of every reached node against the measured acceptance rate; or of
                        the path's cumulative draft probability against whether the whole path was accepted.
  accept_length_histogram  how many drafted tokens each cycle accepted (0..D): the per-position histogram
                        serving-engine users ask for, with alpha_k per depth beside it (bench/metrics.py, the
                        benchmark's own counting).
  input_kind_entry      EAGLE's input ablation: one head per input kind (head.py ABLATION_HEADS, one recipe and
                        one budget), decoded as a chain of 5, beside its training card's teacher-forced n-alpha.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import defaultdict
from dataclasses import replace

from ..bench.metrics import (accept_length_histogram, cycle_seconds, drafted, drafting_cycles, field,
                             tokens_per_forward, tokens_per_second)


def node_positions(nodes) -> dict[int, tuple[int, ...]]:
    """{node index: rank path} for a cycle's tree: siblings ranked by draft probability q (0 = most likely),
    the order in which a static tree's drafter takes them."""
    kids = defaultdict(list)
    for n in nodes:
        if field(n, "parent", -1) >= 0:
            kids[field(n, "parent")].append(n)
    out = {0: ()}
    order = sorted(nodes, key=lambda n: (field(n, "depth"), field(n, "index")))
    for n in order:
        par = field(n, "parent", -1)
        if par < 0:
            continue
        sibs = sorted(kids[par], key=lambda s: (-field(s, "q"), field(s, "index")))
        out[field(n, "index")] = out.get(par, ()) + (sibs.index(n),)
    return out


def _reached(nodes, accepted: set[int]) -> list:
    """Drafted nodes whose parent is the root or accepted: the ones the verifier could have kept."""
    return [n for n in nodes if field(n, "parent", -1) >= 0
            and (field(n, "parent") == 0 or field(n, "parent") in accepted)]


def position_acceptance(records, prompt_of=None) -> dict:
    """{"positions": [rank paths, by depth then ranks], "overall": {path: [reached, accepted]},
    "by_prompt": {prompt: {path: [reached, accepted]}}}. prompt_of(i) names the prompt of the i-th record
    (default: all one prompt)."""
    overall: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    by_prompt: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for i, r in enumerate(records):
        if not drafted(r):
            continue
        nodes = field(r, "nodes")
        acc = set(field(r, "accepted_path", []))
        pos = node_positions(nodes)
        key = prompt_of(i) if prompt_of else "all"
        for n in _reached(nodes, acc):
            p = pos[field(n, "index")]
            hit = int(field(n, "index") in acc)
            for table in (overall, by_prompt[key]):
                table[p][0] += 1
                table[p][1] += hit
    positions = sorted(overall, key=lambda p: (len(p), p))
    return {"positions": [list(p) for p in positions],
            "overall": {_label(p): overall[p] for p in positions},
            "by_prompt": {k: {_label(p): v[p] for p in positions if p in v} for k, v in by_prompt.items()}}


def _label(path) -> str:
    """A position's name: its rank path, 1-based as the papers draw it ("1", "1-2", ...)."""
    return "-".join(str(r + 1) for r in path)


def rate(reached_accepted) -> float | None:
    r, a = reached_accepted
    return a / r if r else None


def calibration(records, bins: int = 10, kind: str = "q") -> list[dict]:
    """Reliability curve. kind "q": every reached drafted node, x = its draft probability q, y = accepted.
    kind "path": every drafted node, x = the cumulative draft probability of its path (exp of its score),
    y = the whole path to it was accepted. Returns equal-width bins over [0, 1] with {"lo", "hi", "n",
    "mean_confidence", "acceptance"} (None for empty bins)."""
    if kind not in ("q", "path"):
        raise ValueError("kind must be 'q' or 'path'")
    sums = [[0, 0.0, 0] for _ in range(bins)]   # n, sum of x, accepted
    for r in drafting_cycles(records):
        nodes = field(r, "nodes")
        acc = set(field(r, "accepted_path", []))
        pool = _reached(nodes, acc) if kind == "q" else [n for n in nodes if field(n, "parent", -1) >= 0]
        for n in pool:
            x = field(n, "q") if kind == "q" else math.exp(field(n, "score"))
            if x is None or not math.isfinite(x):
                continue
            x = min(max(x, 0.0), 1.0)
            b = min(bins - 1, int(x * bins))
            sums[b][0] += 1
            sums[b][1] += x
            sums[b][2] += int(field(n, "index") in acc)
    return [{"lo": i / bins, "hi": (i + 1) / bins, "n": n,
             "mean_confidence": sx / n if n else None, "acceptance": a / n if n else None}
            for i, (n, sx, a) in enumerate(sums)]


def calibration_error(curve: list[dict]) -> float | None:
    """Expected calibration error: the count-weighted mean |confidence - acceptance| over the bins."""
    total = sum(b["n"] for b in curve)
    if not total:
        return None
    return sum(b["n"] * abs(b["mean_confidence"] - b["acceptance"]) for b in curve if b["n"]) / total


# ============================================================================ training cards (EAGLE's data ablation)
def card_phases(card: dict) -> list[dict]:
    """The training phases of a head, oldest first, from its training card and the cards it embeds
    (previous_phase): tokens seen, held-out top-1 and chain tau, and whether the phase trained on answers the
    target wrote itself (EAGLE's "fixed data vs the target's own answers")."""
    out = []
    node = card
    while isinstance(node, dict):
        m = node.get("final_heldout_metrics") or {}
        text = json.dumps(node.get("data") or {}).lower()
        out.append({"tokens_seen": node.get("tokens_seen"), "top1": m.get("top1"), "tau_chain": m.get("tau_chain"),
                    "self_generated": any(w in text for w in ("self-distill", "self_distill", "regenerat",
                                                              "target's own", "own answers"))})
        node = node.get("previous_phase")
    return out[::-1]


# ============================================================================ EAGLE's input ablation
# the four input kinds of EAGLE's ablation -> the lab's heads (head.ABLATION_HEADS), in the paper's order
INPUT_KINDS = {"feature & shifted token": "ablation-shifted", "feature & unshifted token": "ablation-unshifted",
               "token only": "token-only", "feature only": "feature-only"}


def heldout_of(card: dict | None) -> dict | None:
    """A training card's held-out, teacher-forced numbers: EAGLE's n-alpha (alpha[n]: acceptance when n of the
    head's feature inputs are its own earlier predictions), chain tau, and the budget it was trained with."""
    if not card:
        return None
    m = card.get("final_heldout_metrics") or {}
    return {"alpha": m.get("alpha"), "tau_chain": m.get("tau_chain"), "top1": m.get("top1"),
            "tokens_seen": card.get("tokens_seen"), "epochs": card.get("epochs"),
            "train_s": (card.get("wall_time_s") or {}).get("train"),
            "conversations": (card.get("data") or {}).get("conversations"),
            "tokens": (card.get("data") or {}).get("tokens")}


def input_kind_entry(summary: dict, plain: dict | None, card: dict | None) -> dict:
    """One bar of the input-kind panel: the decode summary, its speed against plain decoding in the same run,
    and the head's held-out card numbers."""
    out = dict(summary)
    base = (plain or {}).get("tokens_per_s")
    out["speedup"] = summary["tokens_per_s"] / base if base and summary.get("tokens_per_s") else None
    out["heldout"] = heldout_of(card)
    return out


def read_card(folder: str) -> dict | None:
    """A head folder's training.json, or None."""
    try:
        with open(os.path.join(folder, "training.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# ============================================================================ running (the CLI and the app)
def decode_records(target, head, cfg, prompts, progress=None) -> list[tuple[str, list]]:
    """[(prompt id, records)] of one generation per prompt with this config (lean records, no top-k lists)."""
    from ..decoding.engine import stream
    out = []
    for k, p in enumerate(prompts):
        recs = list(stream(target, head, cfg, target.render_prompt(p["prompt"])))
        out.append((p["id"], recs))
        if progress:
            progress(k + 1, len(prompts))
    return out


def run_summary(runs) -> dict:
    """tau, seconds per cycle and per-depth acceptance of a list of (prompt id, records) (objects or dicts)."""
    recs = [r for _, rs in runs for r in rs]
    new = sum(field(rs[-1], "total_new_tokens") for _, rs in runs if rs)
    fw = sum(field(rs[-1], "target_forwards") for _, rs in runs if rs)
    cyc = drafting_cycles(recs)
    secs = sum(cycle_seconds(r) for r in cyc)
    h = accept_length_histogram(recs)
    return {"tau": tokens_per_forward(new, fw), "cycles": len(cyc),
            "ms_per_cycle": 1e3 * secs / len(cyc) if cyc else None,
            "tokens_per_s": tokens_per_second(new, sum(cycle_seconds(r) for r in recs)),
            "alpha": h["alpha"], "reached": h["reached"], "accept_length_counts": h["counts"]}


TREE_OF_5 = "smollm2-cpu-tree"     # the lesson's 5-node tree, against a chain of the same 5 drafted tokens


def lab_plan(base) -> list[tuple[str, str | None, object]]:
    """Every generation the lab runs per prompt: (run name, head spec or None for plain decoding, DecodeConfig).
    `base` is the device's speed configuration (engine.default_config), which the benchmark runs too."""
    chain5 = replace(base, draft="chain", depth=5)
    return ([("plain", None, replace(base, draft="vanilla"))]
            + [(f"inputs/{kind}", spec, chain5) for kind, spec in INPUT_KINDS.items()]
            + [("chain of 5", "shifted", chain5),
               (f"tree of 5 ({TREE_OF_5})", "shifted", replace(base, draft="static", tree=TREE_OF_5)),
               ("positions", "shifted", replace(base, draft="static", tree="mc_sim_7b_63")),
               ("bench", "shifted", base)])


def assemble(runs: dict, plan, cards: dict, tree_sizes: dict | None = None, data: dict | None = None) -> dict:
    """The lab report (what assets/lab.json holds and the app paints) from {run name: [(prompt id, records)]}.
    cards: {head spec: training card} of the ablation heads."""
    report = {"plain": run_summary(runs["plain"])}
    report["inputs"] = {name.split("/", 1)[1]: input_kind_entry(run_summary(runs[name]), report["plain"],
                                                                 cards.get(spec))
                        for name, spec, _ in plan if name.startswith("inputs/")}
    report["data"] = data
    report["tree_vs_chain"] = {name: run_summary(runs[name]) for name, _, _ in plan
                               if name.startswith(("chain of 5", "tree of 5"))}
    report["tree_sizes"] = tree_sizes
    ids = [pid for pid, rs in runs["positions"] for _ in rs]
    recs = [r for _, rs in runs["positions"] for r in rs]
    report["positions"] = position_acceptance(recs, prompt_of=lambda i: ids[i])
    report["calibration"] = {"q": calibration(recs, kind="q"), "path": calibration(recs, kind="path")}
    report["calibration_error"] = {k: calibration_error(v) for k, v in report["calibration"].items()}
    report["histogram"] = accept_length_histogram(recs)
    bench_cfg = next(cfg for name, _, cfg in plan if name == "bench")
    report["bench_histogram"] = {**accept_length_histogram([r for _, rs in runs["bench"] for r in rs]),
                                 "config": f"eagle-static, tree {bench_cfg.tree}"}
    return report


def tree_sizes_of(path: str) -> dict | None:
    """The CPU tree fit's candidates (tree_fit.py's JSON): size, depth, fitted tau, cycle time, modelled speed."""
    try:
        with open(path) as f:
            fit = json.load(f)
        return {"fitted_on": fit.get("fitted_on"), "date": fit.get("date"),
                "candidates": [{k: c[k] for k in ("nodes", "depth", "tau_fit", "cycle_ms", "tokens_per_s_model")}
                               for c in fit["candidates"]]}
    except (OSError, KeyError, ValueError, TypeError):
        return None


def run_plan(target, plan, prompts) -> dict:
    """{run name: [(prompt id, records)]}: every generation of the plan on every prompt (progress on stderr)."""
    from ..model.head import resolve_head
    heads = {spec: resolve_head(spec, target) for _, spec, _ in plan if spec}
    runs = {}
    for name, spec, cfg in plan:
        say = lambda k, n, name=name: print(f"[{name}] {k}/{n}", file=sys.stderr, flush=True)  # noqa: E731
        runs[name] = decode_records(target, heads.get(spec), cfg, prompts, say)
    return runs


def _parser():
    import argparse
    ap = argparse.ArgumentParser(prog="python -m eagle_core.lab", description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--json", required=True, metavar="OUT")
    return ap


def _missing_ablation_heads() -> list[str]:
    from ..model.head import ABLATION_HEADS
    return [s for s in INPUT_KINDS.values() if not os.path.exists(os.path.join(ABLATION_HEADS[s], "config.json"))]


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from ..bench.errors import BenchError
    from ..bench.prompts import load_prompts
    from ..quiet import quiet_libraries
    quiet_libraries()
    try:
        if args.limit < 1 or args.max_new_tokens < 1:
            raise BenchError("--limit and --max-new-tokens must be >= 1")
        prompts = load_prompts(args.prompts, args.limit)
    except (BenchError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    missing = _missing_ablation_heads()
    if missing:
        print(f"error: the ablation heads {missing} are not in assets/heads/ablation (train them with "
              f"python -m eagle_core.training --inputs ... --out assets/heads/ablation/NAME; see README)", file=sys.stderr)
        return 2
    from ..bench.tree_fit import TREES_DIR
    from ..decoding.engine import default_config
    from ..model.head import ABLATION_HEADS, SHIPPED_HEADS
    from ..model.target import load_target
    t0 = time.time()
    target = load_target()
    plan = lab_plan(replace(default_config(target.device.type), max_new_tokens=args.max_new_tokens, record_topk=0))
    runs = run_plan(target, plan, prompts)
    report = {"command": "python -m eagle_core.lab " + " ".join(sys.argv[1:] if argv is None else argv),
              "date": time.strftime("%Y-%m-%d", time.gmtime()), "target": target.name,
              "prompts": args.prompts, "n_prompts": len(prompts), "max_new_tokens": args.max_new_tokens}
    data = {s: card_phases(read_card(SHIPPED_HEADS[s]) or {}) for s in ("shifted", "unshifted")}
    report.update(assemble(runs, plan, {s: read_card(ABLATION_HEADS[s]) for s in INPUT_KINDS.values()},
                           tree_sizes_of(os.path.join(TREES_DIR, "smollm2-cpu.json")), data))
    report["wall_s"] = round(time.time() - t0, 1)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {args.json} ({report['wall_s']} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())


def rate_interval(accepted: int, reached: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson score interval (95% by default) of an acceptance rate of `accepted` out of `reached`: how far the
    rate of a depth few cycles reached may be from the true one (n = 9 gives about ±0.3)."""
    if not reached:
        return None
    p, n = accepted / reached, reached
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def chain_heads(report: dict) -> dict | None:
    """Why panel 1's "feature & shifted token" chain of 5 and panel 3's chain of 5 differ in speed, from the report's
    own numbers: the same decoding (a chain of 5, the same prompts, the same plain baseline) with different heads,
    the lab's ablation head (trained from scratch with the other three) against the shipped shifted head (its training
    phases: report["data"]["shifted"]). None when either run is missing."""
    plain = (report or {}).get("plain") or {}
    lab = ((report or {}).get("inputs") or {}).get("feature & shifted token")
    shipped = next((v for k, v in ((report or {}).get("tree_vs_chain") or {}).items() if k.startswith("chain")), None)
    if not lab or not shipped or not plain.get("tokens_per_s"):
        return None
    phases = [p for p in ((report.get("data") or {}).get("shifted") or []) if p.get("tokens_seen")]
    held = lab.get("heldout") or {}
    speed = lambda r: r["tokens_per_s"] / plain["tokens_per_s"] if r.get("tokens_per_s") else None   # noqa: E731
    return {"lab": {"speedup": speed(lab), "tau": lab.get("tau"), "ms_per_cycle": lab.get("ms_per_cycle"),
                    "tokens_seen": held.get("tokens_seen"), "top1": held.get("top1")},
            "shipped": {"speedup": speed(shipped), "tau": shipped.get("tau"), "ms_per_cycle": shipped.get("ms_per_cycle"),
                        "tokens_seen": sum(p["tokens_seen"] for p in phases) if phases else None,
                        "phases": len(phases) or None, "top1": phases[-1].get("top1") if phases else None}}
