"""The GGUF block kernel layer by layer: this CPU's vector path (AVX-512 or AVX2) against its scalar build and
torch's fp32 F.linear on the same dequantized weights, in one process, best of N, ms per call.

    python scripts/bench_block_kernel.py [--reps 15] [--threads 1,2] [--no-scalar]

The shapes are SmolLM2-135M's Q8_0 LM head (49152 x 576) and a Q4_1 MLP layer (1536 x 576), random weights
quantized with gguf's own quantizer; every build's outputs are checked equal to the native build's bit for bit
before they are timed. Run it on a quiet machine (the figures go to docs/benchmarks.md, dated).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import gguf
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from eagle_core.model import gguf_blocks as G  # noqa: E402

ROWS = (1, 2, 4, 8, 16, 26)
SHAPES = [("Q8_0 LM head 49152x576", G.Q8_0, 49152, 576), ("Q4_1 1536x576", G.Q4_1, 1536, 576)]


def best_ms(f, reps: int) -> float:
    f()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--no-scalar", action="store_true", help="skip the scalar build (slow: ~1 s a call)")
    args = ap.parse_args(argv)
    native = G.kernel()
    if native is None:
        raise SystemExit(G.why_unavailable())
    builds = {native.vector_path(): native}
    if not args.no_scalar and native.vector_path() != "scalar":
        builds["scalar"] = G.build("scalar", ["-mno-avx512f", "-mno-avx2"])
    rng = np.random.default_rng(0)
    layers = []
    for name, kind, n, k in SHAPES:
        qt = gguf.GGMLQuantizationType.Q8_0 if kind == G.Q8_0 else gguf.GGMLQuantizationType.Q4_1
        raw = gguf.quants.quantize(rng.standard_normal((n, k)).astype(np.float32), qt)
        layers.append((name, kind, n, k, G.Blocks(torch.from_numpy(raw), kind, k, name),
                       torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(raw, qt)))))
    cols = list(builds) + ["fp32 F.linear"]
    print(f"torch {torch.__version__}, native path {native.vector_path()}, best of {args.reps}, ms per call")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for name, kind, n, k, blocks, w in layers:
            print(f"\n{name}, {threads} thread(s)\n| rows | " + " | ".join(cols) + " |\n|---:|" + "---:|" * len(cols))
            for rows in ROWS:
                x = torch.randn(rows, k)
                ref = native.block_linear(x, blocks.packed, kind, n, k, None)
                cells = []
                for m in builds.values():
                    assert torch.equal(m.block_linear(x, blocks.packed, kind, n, k, None), ref), "bits differ"
                    cells.append(best_ms(lambda m=m: m.block_linear(x, blocks.packed, kind, n, k, None), args.reps))
                cells.append(best_ms(lambda: F.linear(x, w), args.reps))
                print(f"| {rows} | " + " | ".join(f"{c:.3f}" for c in cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
