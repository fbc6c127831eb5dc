"""Where a target pass's time goes, and the Python layer body against the C++ one (model/layer_body.py), side by side.

    python -m eagle_core.bench.body_timing [--kernels q4] [--rows 1,10] [--prefix 256] [--reps 15] [--profile]

For each row count: a pass of R tokens over a P-token prefix (a tree's ancestry mask for R > 1, the engine's KV cache
in the dtype the engine picks), timed alternately with the Python body and the C++ body (EAGLE_LENS_NATIVE_LAYER
off and on, interleaved pass by pass so that a noisy moment hits both), best of `reps`; beside them what the same
pass's linear products cost alone (every product of the pass, the LM head included, called on inputs of the pass's
shape through the same planned layers): "rest" = pass - products. With --profile, torch.profiler's table of the
eager operations of a few passes of each body (their counts say how many operations a pass runs).
"""
from __future__ import annotations

import argparse
import os
import time

import torch


def _setup(target, rows: int, prefix: int):
    from ..decoding.engine import kv_cache_dtype, new_kv_cache, tree_attention_mask
    g = torch.Generator().manual_seed(prefix)
    ids = torch.randint(100, min(target.vocab_size, 20000), (1, prefix), generator=g)
    x = torch.randint(100, min(target.vocab_size, 20000), (1, rows), generator=g)
    anc = torch.zeros(rows, rows, dtype=torch.bool)
    for i in range(rows):                        # a binary tree: node i's parent is (i - 1) // 2
        anc[i, i] = True
        p = i
        while p > 0:
            p = (p - 1) // 2
            anc[i, p] = True
    depth = anc.sum(1) - 1
    pos = (prefix + depth)[None]
    mask = tree_attention_mask(anc, prefix, target.dtype, target.device) if rows > 1 else None
    cache = new_kv_cache(prefix + rows + 1, kv_cache_dtype(target))
    with torch.inference_mode():
        target.forward(ids, past_key_values=cache, logits="last")
    return x, pos, mask, cache


def _pass(target, x, pos, mask, cache, prefix: int) -> float:
    from ..decoding.engine import keep_cache_entries
    t0 = time.perf_counter()
    target.forward(x, position_ids=pos, past_key_values=cache, attention_mask=mask)
    dt = time.perf_counter() - t0
    keep_cache_entries(cache, prefix, torch.arange(prefix)[:0])
    return dt


def _products(target, rows: int) -> float:
    """The pass's linear products alone, through the planned layers as the forward calls them."""
    from ..model.planned_linear import shared_input_linears
    inner = target.model.model
    H = target.hidden_size
    x = torch.randn(1, rows, H)
    inter = inner.layers[0].mlp.down_proj.in_features
    heads = inner.layers[0].self_attn.o_proj.in_features
    xo, xd = torch.randn(1, rows, heads), torch.randn(1, rows, inter)
    t0 = time.perf_counter()
    for layer in inner.layers:
        a, m = layer.self_attn, layer.mlp
        shared_input_linears((a.q_proj, a.k_proj, a.v_proj), x)
        a.o_proj.forward(xo)
        shared_input_linears((m.gate_proj, m.up_proj), x)
        m.down_proj.forward(xd)
    target.lm_head(x)
    return time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default=None, help="the kernel plan (cpu_kernels.MODES; default: the automatic plan)")
    ap.add_argument("--rows", default="1,10")
    ap.add_argument("--prefix", type=int, default=256)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from ..model import layer_body
    from ..model.target import load_target
    target = load_target(kernels=args.kernels)
    body = layer_body.native()
    print(f"plan: {target.numerics}, row-independent {target.row_independent}, threads {torch.get_num_threads()}, "
          f"C++ body: {'built' if body is not None else layer_body.why_unavailable()}")
    modes = {"python": "0", "native": "1"}
    print(f"{'rows':>4} {'python ms':>10} {'native ms':>10} {'native/python':>14} {'products ms':>12} "
          f"{'rest python':>12} {'rest native':>12}")
    with torch.inference_mode():
        for rows in [int(r) for r in args.rows.split(",")]:
            x, pos, mask, cache = _setup(target, rows, args.prefix)
            best = {k: float("inf") for k in modes}
            prod = float("inf")
            for rep in range(args.reps + 1):
                for name, flag in modes.items():
                    os.environ["EAGLE_LENS_NATIVE_LAYER"] = flag
                    dt = _pass(target, x, pos, mask, cache, args.prefix)
                    if rep:
                        best[name] = min(best[name], dt)
                if rep:
                    prod = min(prod, _products(target, rows))
            py, nat = 1e3 * best["python"], 1e3 * best["native"]
            print(f"{rows:>4} {py:>10.2f} {nat:>10.2f} {nat / py:>14.3f} {1e3 * prod:>12.2f} "
                  f"{py - 1e3 * prod:>12.2f} {nat - 1e3 * prod:>12.2f}", flush=True)
            if args.profile:
                from torch.profiler import ProfilerActivity, profile
                for name, flag in modes.items():
                    os.environ["EAGLE_LENS_NATIVE_LAYER"] = flag
                    with profile(activities=[ProfilerActivity.CPU]) as prof:
                        for _ in range(3):
                            _pass(target, x, pos, mask, cache, args.prefix)
                    print(f"--- {rows} rows, {name} body, 3 passes")
                    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22))
    os.environ.pop("EAGLE_LENS_NATIVE_LAYER", None)


if __name__ == "__main__":
    main()
