"""Check sampled generations against the target's warped support (the nucleus / top-k set) at every position.

    python -m eagle_core.generate --prompt "How can I improve my sleep?" --temperature 0.5 --top-p 0.5 \\
        --num-samples 400 --max-new-tokens 6 --json > samples.json
    python scripts/check_support.py samples.json --prompt "How can I improve my sleep?" --temperature 0.5 --top-p 0.5

For each distinct prefix one plain target forward gives the warped distribution; an emitted token with warped
probability 0 is reported. `--slack` widens top-p a little (default 0.02) so that a token at the very edge of the
nucleus, where the tree pass and the plain pass can round differently, is not counted; a token kept with
probability 0 (the bug this checks for) lies far outside.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("samples", help="JSON from eagle_core.generate --num-samples N --json")
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--temperature", type=float, required=True)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k-sampling", type=int, default=0)
    ap.add_argument("--slack", type=float, default=0.02)
    args = ap.parse_args(argv)

    import torch

    from eagle_core.decoding.sampling import warp_logits
    from eagle_core.model.target import load_target
    with open(args.samples) as f:
        samples = json.load(f)["samples"]
    target = load_target()
    ids = target.render_prompt(args.prompt)
    top_p = min(1.0, args.top_p + args.slack) if args.top_p < 1 else 1.0
    support, outside, sizes = {}, [], []
    with torch.inference_mode():
        for s, toks in enumerate(samples):
            for j, tok in enumerate(toks):
                prefix = tuple(toks[:j])
                if prefix not in support:
                    logits, _ = target.forward(torch.tensor([ids + list(prefix)]), logits="last")
                    p = warp_logits(logits[0, -1], args.temperature, args.top_k_sampling, top_p).exp()
                    support[prefix] = set(torch.nonzero(p > 0).flatten().tolist())
                sizes.append(len(support[prefix]))
                if tok not in support[prefix]:
                    outside.append((s, j, target.token_text(tok)))
    n_tok = sum(len(t) for t in samples)
    stops = Counter(target.token_text(t[-1]) for t in samples if t and t[-1] in target.stop_token_ids)
    print(f"{len(samples)} samples, {n_tok} tokens, {len(support)} distinct prefixes; nucleus size per position: "
          f"mean {sum(sizes) / max(1, len(sizes)):.2f}, max {max(sizes, default=0)}")
    print(f"samples that ended on a stop token: {sum(stops.values())} {dict(stops)}")
    print(f"tokens outside the target's warped support: {len(outside)}")
    for s, j, t in outside[:20]:
        print(f"  sample {s}, position {j}: {t!r}")
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
