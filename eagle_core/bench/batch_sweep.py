"""Throughput at batch 1..32 from our own engine: B students decode B prompts together in rounds (decoding/batch.py),
three ways, same prompts, same target, same machine, one process:

  plain        batched plain decoding: every round one token per student, one pass over B rows
  eagle-fixed  EAGLE with the CPU default tree for everyone, whatever the class size
  eagle-load   EAGLE with the tree sized by the load (decoding/load_budget.py)

Throughput = the tokens all students received / the rounds' wall time (the prompts' prefills, the same for all three
and run alone, are left out). At T = 0 every EAGLE student's text is compared with its plain decoding: a difference
is a mismatch unless it is a near-tie of the fp32 kernels (the benchmark's rule, divergence.py).

    python -m eagle_core.bench.batch_sweep --batches 1,2,4,8,16,32 --max-new-tokens 32 --out assets/lab_batch.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

from ..quiet import quiet_libraries


def run_round_robin(decs, shapes_of=None, budget=None) -> tuple[float, int, list]:
    """Step `decs` together until all are done (prefills first, untimed); each round's drafting time teaches
    `budget`, as the app's rounds do. Returns (seconds, tokens, rounds)."""
    from ..decoding.batch import Together
    from ..decoding.drive import cycles
    for d in decs:
        d.step()
    base = sum(len(d.new_ids) for d in decs)
    rounds, t0 = [], time.perf_counter()
    for records, info in cycles(Together(decs, shapes_of)):
        if budget is not None:
            budget.observe_round(records, info)
        rounds.append(dataclasses.asdict(info))
    return time.perf_counter() - t0, sum(len(d.new_ids) for d in decs) - base, rounds


def sweep(target, head, prompts: list[str], batches, max_new_tokens: int, log=print) -> dict:
    from ..decoding.engine import EagleDecoder, default_config
    from ..decoding.load_budget import new_budget, round_shapes
    budget = new_budget(target)
    eagle_cfg = dataclasses.replace(default_config(target.device.type), max_new_tokens=max_new_tokens, record_topk=0)
    plain_cfg = dataclasses.replace(eagle_cfg, draft="vanilla")
    rows = []
    for b in batches:
        ids = [target.render_prompt(prompts[i % len(prompts)]) for i in range(b)]
        row = {"batch": b}
        texts = {}
        for method in ("plain", "eagle-fixed", "eagle-load"):
            cfg = plain_cfg if method == "plain" else eagle_cfg
            decs = [EagleDecoder(target, None if method == "plain" else head, cfg, p) for p in ids]
            shapes = (lambda live: round_shapes(budget, live)) if method == "eagle-load" else None
            seconds, tokens, rounds = run_round_robin(decs, shapes, budget if method != "plain" else None)
            texts[method] = [d.new_ids for d in decs]
            row[method] = {"tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": tokens / seconds,
                           "rounds": len(rounds), "rows_per_round": sum(r["rows"] for r in rounds) / max(len(rounds), 1),
                           "tau": tokens / max(len(rounds), 1) / b}
            if method != "plain":
                row[method]["differs_from_plain"] = sum(a != p for a, p in zip(texts[method], texts["plain"]))
        log(f"batch {b:>3}: plain {row['plain']['tokens_per_s']:6.1f} tok/s, eagle-fixed "
            f"{row['eagle-fixed']['tokens_per_s']:6.1f}, eagle-load {row['eagle-load']['tokens_per_s']:6.1f} "
            f"(rows/round {row['eagle-load']['rows_per_round']:.1f})")
        rows.append(row)
    draft_ms = {f"{r} rows x {b or 'any'}": round(v, 3) for (r, b), v in sorted(budget.draft_ms.items())}
    return {"rows": rows, "pass_ms": budget.pass_ms, "draft_ms_per_tree": draft_ms, "tau": budget.tau,
            "tree": eagle_cfg.tree, "max_new_tokens": max_new_tokens}


def batch_finding(report: dict, vllm_rows: list[dict] | None = None) -> str:
    """The panel's sentence, computed from the sweep's rows (and vLLM's, where measured)."""
    rows = report.get("rows") or []
    if not rows:
        return "No batch sweep measured."
    ratio = {m: [r[m]["tokens_per_s"] / r["plain"]["tokens_per_s"] for r in rows] for m in ("eagle-fixed", "eagle-load")}
    last = rows[-1]
    text = (f"One student: EAGLE decodes {ratio['eagle-load'][0]:.2f}x as fast as plain decoding. With "
            f"{last['batch']} students in one pass, the CPU tree for everyone gives {ratio['eagle-fixed'][-1]:.2f}x "
            f"and the tree sized by the load {ratio['eagle-load'][-1]:.2f}x "
            f"({last['eagle-load']['rows_per_round'] / last['batch']:.1f} rows a student instead of "
            f"{last['eagle-fixed']['rows_per_round'] / last['batch']:.1f}).")
    below = [r["batch"] for r, x in zip(rows, ratio["eagle-fixed"]) if x < 1.0]
    if below:
        text += (f" The fixed tree loses to plain decoding from {below[0]} students on: the pass is full, so its "
                 "drafted and rejected rows are paid for (target saturation).")
    worst = min(ratio["eagle-load"])
    text += (f" The load-sized tree never drops below {worst:.2f}x plain" + (
             "." if worst >= 0.97 else " (the budget's model of the costs missed there; see the docs)."))
    if vllm_rows:
        v = {r["batch"]: r.get("ratio") for r in vllm_rows}
        if v.get(last["batch"]):
            text += (f" vLLM-CPU's EAGLE, which drafts the same chain at any load, gives {v[last['batch']]:.2f}x its "
                     f"plain decoding at {last['batch']} requests.")
    differ = sum(r[m].get("differs_from_plain", 0) for r in rows for m in ("eagle-fixed", "eagle-load"))
    text += (" Every EAGLE text equals its plain decoding token for token." if not differ else
             f" {differ} EAGLE texts differ from their plain decoding (near-ties of the fp32 kernels between passes "
             "of different widths: the contract's named exception).")
    return text


def main(argv=None) -> int:
    quiet_libraries()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", default="mt_bench", help="a prompt set (bench.prompt_sets) or a JSON-lines file")
    ap.add_argument("--batches", default="1,2,4,8,16,32")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--head", default="shifted")
    ap.add_argument("--out", default=None, help="write the report (JSON) here")
    args = ap.parse_args(argv)
    import torch
    from ..model.head import resolve_head
    from ..model.target import load_target
    from .prompt_sets import SOURCES, set_path
    from .prompts import load_prompts
    batches = [int(x) for x in args.batches.split(",") if x.strip()]
    target = load_target()
    head = resolve_head(args.head, target)
    path = set_path(args.prompts) if args.prompts in SOURCES else args.prompts
    prompts = [p["prompt"] for p in load_prompts(path, limit=max(batches))]
    t0 = time.time()
    report = sweep(target, head, prompts, batches, args.max_new_tokens)
    report.update(command="python -m eagle_core.bench.batch_sweep " + " ".join(sys.argv[1:] if argv is None else argv),
                  date=time.strftime("%Y-%m-%d"), target=target.name, numerics=target.numerics,
                  threads=torch.get_num_threads(), cpu=_cpu_name(), wall_s=round(time.time() - t0, 1),
                  load_before=os.getloadavg())
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.out}")
    return 0


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        return ""


if __name__ == "__main__":
    raise SystemExit(main())
