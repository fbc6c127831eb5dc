"""Record an example run from the real model for the app's first paint (assets/trace_<name>.json).

    python scripts/record_trace.py                     # the default trace (embedded target, shipped heads)
    python scripts/record_trace.py --name code --prompt "Write a Python function that reverses a string."
    python scripts/record_trace.py --name temperature --temperature 0.8 --top-p 0.95 --seed 1   # walkthrough step 7
    python scripts/record_trace.py --ambiguity-only    # only the default trace's "How can I" record (and its payoff)

The file holds the CycleRecords of an EAGLE run, a lean EAGLE run and the plain-decoding run of the same prompt
(the Race), and the
"How can I" ambiguity record, exactly as the engine returned them. Never edit these files by hand.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TQDM_DISABLE", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def load_heads(target, spec: str):
    from eagle_core.model.head import HeadLoadError, resolve_head
    notes = []
    try:
        sh = resolve_head(spec, target)
    except HeadLoadError as exc:
        notes.append(f"trained shifted head not found ({exc}); recorded with a random head")
        sh = resolve_head("random", target)
    try:
        un = resolve_head("unshifted" if spec == "shifted" else "random-unshifted", target)
    except HeadLoadError as exc:
        notes.append(f"trained unshifted head not found ({exc}); the ambiguity uses a random one")
        un = resolve_head("random-unshifted", target)
    return sh, un, "; ".join(notes)


def ambiguity_record(target, sh, un, prefix: str) -> dict:
    """The "How can I" record with the EAGLE-3 head's drafts (when it loads) and the payoff in tokens: real EAGLE
    cycles after each branch with every head, on the tab's own shape (tabs/ambiguity.payoff_shape)."""
    from eagle_core.decoding.ambiguity import compute_ambiguity
    from eagle_core.decoding.branch_payoff import PayoffRun
    from eagle_core.decoding.drive import finish
    from eagle_core.model.head import HeadLoadError, resolve_head
    from eagle_core.model.head3 import SHIPPED_EAGLE3
    from tabs.ambiguity import payoff_shape
    try:
        e3 = resolve_head(SHIPPED_EAGLE3, target)
    except HeadLoadError as exc:
        print(f"no EAGLE-3 head ({exc})", flush=True)
        e3 = None
    amb = compute_ambiguity(target, sh, un, prefix, eagle3_head=e3, cfg=payoff_shape())
    heads = {"shifted": sh, "unshifted": un, "eagle3": e3}
    run = PayoffRun.for_record(target, {k: v for k, v in heads.items() if v is not None}, payoff_shape(), amb)
    amb.payoff = finish(run).result().to_dict()
    return amb.to_dict()


def run(target, head, cfg, prompt_ids):
    from eagle_core.decoding.drive import finish
    from eagle_core.decoding.engine import EagleDecoder
    return [dataclasses.asdict(c) for c in finish(EagleDecoder(target, head, cfg, prompt_ids)).cycles]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="default")
    ap.add_argument("--prompt", default="How can I learn Python quickly?")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--draft", default="static")
    ap.add_argument("--tree", default=None, help="static tree preset (default: the device's, as the app's controls)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--head", default="shifted")
    ap.add_argument("--target", default=None)
    ap.add_argument("--ambiguity-prefix", default="How can I")
    ap.add_argument("--ambiguity-only", action="store_true",
                    help="re-record only the trace's \"How can I\" record (its other runs stay as recorded)")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    from eagle_core.decoding.engine import default_config
    from eagle_core.model.target import load_target
    t0 = time.time()
    target = load_target(args.target)
    sh, un, notice = load_heads(target, args.head)
    print(f"loaded in {time.time() - t0:.1f}s; heads {sh.path} / {un.path} {notice}", flush=True)
    path = os.path.join(ROOT, "assets", f"trace_{args.name}.json")
    if args.ambiguity_only:
        with open(path) as f:
            out = json.load(f)
        out["ambiguity"] = ambiguity_record(target, sh, un, args.ambiguity_prefix)
        out["ambiguity_recorded"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        with open(path, "w") as f:
            json.dump(out, f)
        print(f"wrote the ambiguity record into {path} in {time.time() - t0:.0f}s")
        return
    # the device's defaults (tree, draft vocabulary, draft precision), as the app's controls start out
    base = default_config(target.device.type)
    cfg = dataclasses.replace(base, draft=args.draft, tree=args.tree or base.tree, temperature=args.temperature,
                              top_p=args.top_p, seed=args.seed, max_new_tokens=args.max_new_tokens)
    ids = target.render_prompt(args.prompt)
    records = run(target, sh, cfg, ids)
    print(f"eagle: {len(records)} cycles, {records[-1]['total_new_tokens']} tokens", flush=True)
    # the Race: both runs lean (no per-node distributions recorded), timed the same way as in the app
    plain = run(target, None, dataclasses.replace(cfg, draft="vanilla", record_topk=0), ids)
    race = run(target, sh, dataclasses.replace(cfg, record_topk=0), ids)
    print(f"plain: {len(plain)} cycles; race: {len(race)} cycles", flush=True)
    amb = ambiguity_record(target, sh, un, args.ambiguity_prefix)
    out = dict(name=args.name, prompt=args.prompt, config=dataclasses.asdict(cfg), target=target.name,
               head=os.path.basename(str(sh.path)), unshifted_head=os.path.basename(str(un.path)), notice=notice,
               device=str(target.device), recorded=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               text=target.decode([t for r in records for t in r["new_tokens"]]),
               records=records, plain_records=plain, race_records=race, ambiguity=amb)
    with open(path, "w") as f:
        json.dump(out, f)
    print(f"wrote {path} ({os.path.getsize(path) // 1024} KiB) in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
