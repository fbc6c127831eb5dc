"""Paper lab, serving panels: the shipped head in vLLM, measured beside our engine, and vLLM's throughput of plain
against EAGLE decoding as the batch grows.

    python -m eagle_core.lab.serving --prompts ../shared/data/mt_bench_question.jsonl --json assets/lab_vllm.json
        [--counter-prompts 8] [--counter-tokens 64] [--batches 1,2,4,8,16,32] [--sweep-tokens 64] [--eager]

(a) "the same head in a serving engine": the first --counter-prompts prompts, greedy, one request at a time, in vLLM
    with the exported shifted head (a chain of k = 2, vLLM's EAGLE-1) and in our engine with the same chain shape
    (bench/vllm.py ours_chain): the tokens compared and vLLM's acceptance counters per position beside ours.
(b) "where EAGLE stops paying: a full batch": the first max(--batches) prompts decoded by vLLM plain and by vLLM
    EAGLE at every batch size B (the prompts in groups of B, each request exactly --sweep-tokens new tokens: the
    stop token is ignored, so every batch size and both methods decode the same amount of work); throughput is
    tokens / seconds of vLLM's generate() alone, and the ratio EAGLE / plain per batch size.

The EAGLE paper reports about 2x throughput on a GPU (the largest batch that fits memory, Vicuna 7B); speculation
stops paying once the target's pass is no longer memory-bound: a batch fills the compute the drafts used to fill
for free (target saturation), and each rejected draft then costs real work. Both workers stay paused while the other
one runs (VllmWorker), and the machine's other work is recorded beside every timed request (bench/machine_load).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from ..bench import machine_load

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32)


def sweep_row(batch: int, plain: dict, eagle: dict) -> dict:
    """One batch size's measurement: tokens and seconds of each method, throughput, the ratio, EAGLE's acceptance."""
    row = {"batch": batch}
    for name, m in (("plain", plain), ("eagle", eagle)):
        row[name] = {"tokens": m["tokens"], "seconds": round(m["seconds"], 4),
                     "tokens_per_s": m["tokens"] / m["seconds"] if m["seconds"] > 0 else None,
                     "other_cores": m.get("other_cores")}
    p, e = row["plain"]["tokens_per_s"], row["eagle"]["tokens_per_s"]
    row["ratio"] = e / p if p and e else None
    c = eagle.get("counters")
    if c and c.get("num_drafts"):
        row["eagle"]["accepted_per_draft"] = c["num_accepted_tokens"] / c["num_drafts"]
    return row


def sweep_finding(rows: list[dict]) -> str:
    """The sentence of panel (b), computed from the rows."""
    rows = [r for r in rows if r.get("ratio")]
    if not rows:
        return "No batch sweep measured."
    first, best = rows[0], max(rows, key=lambda r: r["ratio"])
    last = rows[-1]
    below = [r["batch"] for r in rows if r["ratio"] < 1.0]
    peak_plain = max(rows, key=lambda r: r["plain"]["tokens_per_s"] or 0)
    peak_eagle = max(rows, key=lambda r: r["eagle"]["tokens_per_s"] or 0)
    text = (f"At batch {first['batch']} EAGLE decodes {first['ratio']:.2f}x as fast as plain decoding in vLLM; "
            f"at batch {last['batch']} the ratio is {last['ratio']:.2f}x")
    text += (f", and it is below 1 from batch {below[0]} on: there the batch already fills the cores, so the "
             "drafted and rejected tokens are paid for instead of riding along (target saturation)."
             if below else f" (the best, {best['ratio']:.2f}x, at batch {best['batch']}).")
    acc = [r["eagle"].get("accepted_per_draft") for r in rows]
    if all(a is not None for a in acc) and max(acc) - min(acc) <= 0.02 * max(acc):
        text += (f" EAGLE's acceptance is the same at every batch size ({acc[0]:.2f} tokens accepted per draft): "
                 "what changes with the batch is only what a verified draft costs.")
    text += (f" Highest throughput: plain {peak_plain['plain']['tokens_per_s']:.0f} tok/s (batch "
             f"{peak_plain['batch']}), EAGLE {peak_eagle['eagle']['tokens_per_s']:.0f} tok/s (batch "
             f"{peak_eagle['batch']}), a maximum-throughput ratio of "
             f"{peak_eagle['eagle']['tokens_per_s'] / peak_plain['plain']['tokens_per_s']:.2f}x "
             "(the EAGLE paper: about 2x on a GPU).")
    return text


def counters_finding(compare: dict) -> str:
    """The sentence of panel (a), computed from bench/vllm.py's compare()."""
    v, o = compare["counters"]["vllm"], compare["counters"]["ours"]
    same_tokens = sum(1 for r in compare["rows"] if r["vllm_eagle_vs_plain"] is None and r["ours_vs_vllm_plain"] is None)
    n = len(compare["rows"])
    rates = compare["accept_rate_per_pos"]
    text = (f"{same_tokens} of {n} prompts decode to the same tokens in vLLM plain, vLLM with the head and our engine. "
            f"vLLM verified {v['num_drafts']} drafts and accepted {v['accepted_per_pos']} per position; our engine "
            f"{o['num_drafts']} and {o['accepted_per_pos']}")
    if v["accepted_per_pos"] == o["accepted_per_pos"] and v["num_drafts"] == o["num_drafts"]:
        text += ": the same counts, so the exported head drafts exactly what it drafts here."
    else:
        text += (" (acceptance per position " + ", ".join(f"{a:.3f}/{b:.3f}" for a, b in zip(rates["vllm"], rates["ours"]))
                 + " vLLM/ours): the engines' float kernels flipped a near-tie somewhere (see the rows).")
    return text


def run_sweep(plain_w, eagle_w, prompts: list[list[int]], batches, tokens: int, stops, log=print) -> list[dict]:
    rows = []
    for b in batches:
        got = {}
        for name, w in (("plain", plain_w), ("eagle", eagle_w)):
            w.generate_batch(prompts[:b], 8, ignore_eos=True, stop_token_ids=stops)     # warm this batch shape
            total = {"tokens": 0, "seconds": 0.0, "other": [], "counters": None}
            per = []
            for i in range(0, len(prompts), b):
                ans, other = machine_load.beside(lambda: w.generate_batch(prompts[i:i + b], tokens, ignore_eos=True,
                                                                          stop_token_ids=stops), w.own_pids())
                total["tokens"] += sum(len(r["new_ids"]) for r in ans["results"])
                total["seconds"] += ans["seconds"]
                total["other"].append(other)
                per.append(ans.get("counters"))
            known = [x for x in total["other"] if x is not None]
            cs = [c for c in per if c]
            counters = ({"num_drafts": sum(c["num_drafts"] for c in cs),
                         "num_accepted_tokens": sum(c["num_accepted_tokens"] for c in cs)} if cs else None)
            got[name] = {"tokens": total["tokens"], "seconds": total["seconds"], "counters": counters,
                         "other_cores": round(max(known), 3) if known else None}
        row = sweep_row(b, got["plain"], got["eagle"])
        log(f"batch {b:>3}: plain {row['plain']['tokens_per_s']:.1f} tok/s, EAGLE {row['eagle']['tokens_per_s']:.1f} "
            f"tok/s, ratio {row['ratio']:.2f}x")
        rows.append(row)
    return rows


def _parser():
    ap = argparse.ArgumentParser(prog="python -m eagle_core.lab.serving", description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--json", required=True, metavar="OUT")
    ap.add_argument("--counter-prompts", type=int, default=8)
    ap.add_argument("--counter-tokens", type=int, default=64)
    ap.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)))
    ap.add_argument("--sweep-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--eager", action="store_true", help="vLLM without torch.compile (for a quick look only)")
    ap.add_argument("--export", default=None, metavar="DIR")
    return ap


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from ..bench.errors import BenchError
    from ..bench.prompts import load_prompts
    from ..bench.run import device_string
    from ..quiet import quiet_libraries
    quiet_libraries()
    try:
        batches = sorted({int(x) for x in args.batches.split(",") if x.strip()})
        if not batches or batches[0] < 1 or batches[-1] > 256:
            raise BenchError("--batches: sizes from 1 to 256")
        if min(args.counter_prompts, args.counter_tokens, args.sweep_tokens) < 1:
            raise BenchError("--counter-prompts, --counter-tokens and --sweep-tokens must be >= 1")
        items = load_prompts(args.prompts, max(batches[-1], args.counter_prompts))
        if len(items) < batches[-1]:
            raise BenchError(f"{args.prompts} has {len(items)} prompts; batch {batches[-1]} needs as many")
    except (BenchError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    before = machine_load.measure_idle(2.0)
    import torch
    from ..bench.vllm import (close_engines, compare, decode_each, engines_note, ours_chain, start_engines,
                              vllm_python)
    from ..model.head import resolve_head
    from ..model.target import load_target
    if vllm_python() is None:
        print("error: vLLM is not set up: run scripts/setup_vllm.sh (it makes .venv-vllm)", file=sys.stderr)
        return 2
    t0 = time.time()
    log = lambda t: print(t, file=sys.stderr, flush=True)   # noqa: E731
    target = load_target(None, device="cpu", dtype=torch.float32, pack=False)
    head = resolve_head("shifted", target)
    ids = [target.render_prompt(it["prompt"]) for it in items]
    stops = list(target.stop_token_ids)
    engines = start_engines(target, head, ["vllm", "vllm-eagle"], k=args.k, eager=args.eager,
                            export_dir=args.export, log=log)
    try:
        plain_w, eagle_w = engines["vllm"], engines["vllm-eagle"]
        few = ids[:args.counter_prompts]
        log(f"(a) {len(few)} prompts, one at a time, {args.counter_tokens} tokens")
        plain = decode_each(plain_w, few, args.counter_tokens, stops)
        eagle = decode_each(eagle_w, few, args.counter_tokens, stops)
        ours = ours_chain(target, head, few, args.counter_tokens, args.k)
        cmp = compare(plain, eagle, ours)
        log(counters_finding(cmp))
        log(f"(b) batch sweep {batches}: {batches[-1]} prompts, {args.sweep_tokens} tokens each")
        rows = run_sweep(plain_w, eagle_w, ids[:batches[-1]], batches, args.sweep_tokens, stops, log)
        vllm = engines_note(engines)
    finally:
        close_engines(engines)
    others = [x for r in rows for x in (r["plain"]["other_cores"], r["eagle"]["other_cores"])]
    report = {"command": "python -m eagle_core.lab.serving " + " ".join(sys.argv[1:] if argv is None else argv),
              "date": time.strftime("%Y-%m-%d", time.gmtime()), "device": device_string(target),
              "target": target.name, "prompts": args.prompts, "vllm": vllm, "k": args.k,
              "counters": {"n_prompts": len(few), "max_new_tokens": args.counter_tokens, "compare": cmp,
                           "finding": counters_finding(cmp)},
              "sweep": {"n_prompts": batches[-1], "tokens_per_request": args.sweep_tokens, "rows": rows,
                        "finding": sweep_finding(rows)},
              "load": machine_load.summarize(before, others), "wall_s": round(time.time() - t0, 1)}
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)
    log(sweep_finding(rows))
    log(f"wrote {args.json} ({report['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
