"""Heads side by side: tau and acceptance per depth of several draft heads on the same prompts and tree shapes.

    python -m eagle_core.bench.head_compare --heads eagle1=runs/cmp/eagle1,eagle3=runs/cmp/eagle3,shipped=shifted \
        --prompts sharegpt-heldout --limit 20 --max-new-tokens 96 --json assets/bench/heads_eagle3.json

For every head and every tree shape (default: the 2-node chain, the fitted CPU tree `smollm2-cpu`, EAGLE-1's
25-node tree `mc_sim_7b_63`, and EAGLE-2's dynamic tree of the CPU defaults) it decodes every prompt at T = 0 and
reports tau (new tokens per target forward, prefill counted: metrics.tau, the benchmark's definition), the
acceptance rate per depth and the accepted-length counts, and checks each output against plain decoding with the
same kernels (a mismatch is a bug). Tau depends on the head and the tree, not on the machine, so this runs on a
busy machine too; speed is the benchmark's (`python -m eagle_core.bench.sets --methods ...,eagle-dynamic:eagle3`).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace

from .errors import BenchError
from .methods import run_eagle
from .metrics import acceptance_by_depth, accept_length_counts, tau

SHAPES = {"chain-2": dict(draft="chain", depth=2), "smollm2-cpu": dict(draft="static", tree="smollm2-cpu"),
          "mc_sim_7b_63": dict(draft="static", tree="mc_sim_7b_63"), "dynamic": dict(draft="dynamic")}


def parse_heads(text: str) -> dict[str, str]:
    """'name=spec,name=spec' (spec: a resolve_head spec or a folder) -> {name: spec}; a bare spec names itself."""
    out = {}
    for part in (p.strip() for p in (text or "").split(",") if p.strip()):
        name, eq, spec = part.partition("=")
        name, spec = (name, spec) if eq else (part, part)
        if not name or not spec or name in out:
            raise BenchError(f"--heads {text!r}: give name=spec pairs with distinct names")
        out[name] = spec
    if not out:
        raise BenchError("--heads: no heads given")
    return out


def compare(target, heads: dict, shapes: list[str], prompts: list[list[int]], max_new_tokens: int,
            progress=None) -> dict:
    """{head name: {shape: {"tau", "alpha", "accept_length_counts", "mismatches"}}} for prompt ids `prompts`."""
    from ..decoding.engine import default_config
    base = replace(default_config(target.device.type), max_new_tokens=max_new_tokens, temperature=0.0,
                   record_topk=0)
    plain = [run_eagle(target, None, replace(base, draft="vanilla"), p)["token_ids"] for p in prompts]
    out = {}
    for name, head in heads.items():
        out[name] = {}
        for shape in shapes:
            cfg = replace(base, **SHAPES[shape])
            cfg.check()
            t0 = time.perf_counter()
            results = [run_eagle(target, head, cfg, p) for p in prompts]
            out[name][shape] = {
                "tau": tau(results), "alpha": acceptance_by_depth(results),
                "accept_length_counts": accept_length_counts(results),
                "mismatches": sum(r["token_ids"] != ref for r, ref in zip(results, plain)),
                "seconds": time.perf_counter() - t0}
            if progress:
                progress(f"{name:>10} {shape:>13}: tau {out[name][shape]['tau']:.2f}")
    return out


def training_card(head) -> dict | None:
    """What a head's training card (training.json beside its weights) says of its held-out, teacher-forced
    acceptance per depth and the budget it took; None when it has none."""
    import os
    path = os.path.join(str(getattr(head, "path", "") or ""), "training.json")
    try:
        with open(path) as f:
            card = json.load(f)
    except (OSError, ValueError):
        return None
    m = card.get("final_heldout_metrics") or {}
    phases = _phases(card)   # a head trained in phases (--init): its budget is the sum over them
    return {"alpha": m.get("alpha"), "chain": m.get("chain"), "tau_chain": m.get("tau_chain"),
            "top1": m.get("top1"), "steps": sum(p.get("steps") or 0 for p in phases),
            "tokens_seen": sum(p.get("tokens_seen") or 0 for p in phases),
            "train_s": sum((p.get("wall_time_s") or {}).get("train") or 0 for p in phases),
            "kind": card.get("head_kind", "eagle1"), "phases": len(phases), "device": card.get("device")}


def _phases(card) -> list[dict]:
    return [card] + (_phases(card["previous_phase"]) if card.get("previous_phase") else [])


def merge_reports(reports: list[dict]) -> dict:
    """One report of several head_compare runs (heads measured on another day join the table without decoding
    the others again). They must share prompts, their number, new tokens, numerics and shapes; a head in a later
    report replaces one of the same name (tau is deterministic: a re-measured head must give the same numbers)."""
    if not reports:
        raise BenchError("--merge: no reports given")
    first = reports[0]
    same = ("prompts", "limit", "max_new_tokens", "numerics")
    shapes = lambda r: list(next(iter(r["heads"].values()))) if r.get("heads") else []   # noqa: E731
    out = {k: first.get(k) for k in same} | {"commands": [], "head_paths": {}, "heads": {}, "cards": {}}
    for r in reports:
        diff = [k for k in same if r.get(k) != first.get(k)] + (["shapes"] if shapes(r) != shapes(first) else [])
        if diff:
            raise BenchError(f"--merge: the reports differ in {', '.join(diff)}: their heads are not comparable")
        out["commands"] += r.get("commands") or [r["command"]]
        for k in ("head_paths", "heads", "cards"):
            out[k].update(r.get(k) or {})
    return out


def format_table(report: dict) -> str:
    shapes = list(next(iter(report["heads"].values())))
    lines = ["| head | " + " | ".join(f"tau {s}" for s in shapes) + " | alpha per depth (" + shapes[-1] +
             ") | mismatches |", "| --- |" + " ---: |" * len(shapes) + " --- | ---: |"]
    for name, by_shape in report["heads"].items():
        taus = " | ".join(f"{by_shape[s]['tau']:.2f}" for s in shapes)
        alpha = ", ".join("-" if a is None else f"{a:.2f}" for a in (by_shape[shapes[-1]]["alpha"] or []))
        mism = sum(v["mismatches"] for v in by_shape.values())
        lines.append(f"| {name} | {taus} | {alpha} | {mism} |")
    return "\n".join(lines)


def publish(report: dict, path: str | None) -> int:
    """The report's table to stdout, and the report to `path` when one is given."""
    print(format_table(report))
    if path:
        with open(path, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {path}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eagle_core.bench.head_compare", description=__doc__.splitlines()[0])
    ap.add_argument("--heads", help="name=spec,... (spec: shifted | eagle3 | a head folder)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma list of {', '.join(SHAPES)}")
    ap.add_argument("--prompts", default="sharegpt-heldout")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--json", default=None)
    ap.add_argument("--merge", nargs="+", metavar="REPORT", help="instead of decoding: merge these reports "
                    "(same prompts, shapes, numerics; later heads replace same-named ones) into --json")
    args = ap.parse_args(argv)
    if args.merge:
        try:
            reports = []
            for path in args.merge:
                with open(path) as f:
                    reports.append(json.load(f))
            report = merge_reports(reports)
        except (BenchError, OSError, ValueError, KeyError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return publish(report, args.json)
    if not args.heads:
        print("error: give --heads (or --merge REPORT ...)", file=sys.stderr)
        return 2
    from ..model.head import HeadLoadError, resolve_head
    from ..model.target import load_target
    from .prompts import load_prompts
    try:
        specs = parse_heads(args.heads)
        shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
        bad = [s for s in shapes if s not in SHAPES]
        if bad or not shapes:
            raise BenchError(f"--shapes: unknown {bad}; shapes: {', '.join(SHAPES)}")
        items = load_prompts(args.prompts, args.limit)
        target = load_target()
        heads = {name: resolve_head(spec, target) for name, spec in specs.items()}
    except (BenchError, HeadLoadError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    prompts = [target.render_prompt(it["prompt"]) for it in items]
    res = compare(target, heads, shapes, prompts, args.max_new_tokens,
                  progress=lambda t: print(t, file=sys.stderr, flush=True))
    report = {"command": "python -m eagle_core.bench.head_compare " + " ".join(argv or sys.argv[1:]),
              "prompts": args.prompts, "limit": len(prompts), "max_new_tokens": args.max_new_tokens,
              "numerics": target.numerics, "head_paths": {k: str(h.path) for k, h in heads.items()},
              "heads": res, "cards": {k: training_card(h) for k, h in heads.items()}}
    return publish(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
