"""One host pass: the unit in which the load test and the timing tests state their time allowances.

One host pass is the time of transformers' own forward of the embedded target (stock `transformers`, fp32, plain
nn.Linear layers: no kernel plan, no packing, no lean forward) for one token over a 256-token cache, the best of
`reps`. It measures the host, not the product: the hosts this project runs on differ ~4x, and an allowance stated in
host passes (tests/test_app.py: a queued Stop within 20 passes) holds on a slow host as on a fast one while still
failing on a bug that costs many passes more. ~90-110 ms on the 2-core dev box while others' tests ran (40.9 ms idle,
docs/benchmarks.md); loading the target costs ~40 s of the measurement there.

    from eagle_core.bench.host_pass import host_pass_ms
    host_pass_ms()   # ~ milliseconds per pass on this host
"""
from __future__ import annotations

import time


def host_pass_ms(prefix: int = 256, reps: int = 20) -> float:
    """This host's pass, the unit the load test's targets are stated in (hosts here differ ~4x): transformers'
    own forward of the embedded target (fp32, plain nn.Linear layers: no kernel plan, no packing, no lean
    forward), one token over a 256-token cache; the best of `reps`."""
    import torch
    from transformers import DynamicCache
    from eagle_core.model.target import load_target
    target = load_target(None, device="cpu", dtype=torch.float32, pack=False, kernels="fp32")
    model = target.model
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 20000, (1, prefix + 1), generator=g)
    best = float("inf")
    with torch.inference_mode():
        cache = DynamicCache()
        model(input_ids=ids[:, :prefix], past_key_values=cache, use_cache=True)
        for _ in range(reps):
            t0 = time.perf_counter()
            model(input_ids=ids[:, prefix:], past_key_values=cache, use_cache=True)
            best = min(best, time.perf_counter() - t0)
            cache.crop(-1)                           # back to the 256-token prefix
    del target, model
    return best * 1e3
