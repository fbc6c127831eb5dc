"""Where the time of one target pass goes, for our engine and for llama.cpp: the benchmark's per-pass split.

Ours (pass_split), for a one-token pass and a tree pass of the fitted tree's size over a 256-token prefix (the same
pass as pass_cost.py's), with the target's own kernel plan (fp32 tables, bf16, q4 blocks: whichever it loaded):

  products   the linear layers (q/k/v, o, gate/up, down, the LM head): every call of a linear module's forward,
             of planned_linear.packed_linear and of gguf_blocks.stacked_linear, timed around the call
  attention  rotary, the KV-cache append and attention over the cache (scores, softmax, weighted sum): the layer
             body's attend (model/layer_body.py, the Python body's or the C++ one's), timed around the call (with
             transformers' own forward: its attention function and the cache's update())
  the rest   every other torch operation of the pass (RMS norms, rotary, residual adds, SwiGLU's product, the
             embedding, the mask), the operators' own time with PyTorch's dispatch
  Python     the interpreter between those operations (the layer loop, argument handling, views)

products and attention are timed with perf_counter around each call, in the pass of median wall time among `reps`
passes (the parts of one pass, so that they add up to it). The rest and Python share what is left (wall - products - attention),
in the proportion torch.profiler sees in a second set of profiled passes: the time inside top-level torch operators
outside the products and attention against the time between them. The profiler's own cost per operator falls on
both sides, so the two are estimates; products, attention and the wall time are measured.

llama.cpp's (llamacpp_pass_split), from llama-bench alone (its mean of a few runs), which has no per-operation
timing in the pinned build: the whole pass of R tokens after a 256-token context (`-d 256`), and its attention over
that cache as the same pass's cost above a pass with an empty context (`-d 0`); everything else (its products, its
other operations and its graph's own overhead) is one number there, "not split".
"""
from __future__ import annotations

import contextlib
import sys
import time

PARTS = ("products", "attention", "rest", "python")
PART_NAMES = {"products": "products (linear layers)", "attention": "attention over the cache",
              "rest": "the rest (other operations)", "python": "Python between them",
              "not_split": "products + the rest (not split)"}
PREFIX = 256
_LABELS = {"products": "eagle_lens::products", "attention": "eagle_lens::attention", "drop": "eagle_lens::drop"}


def split_rows(methods, base_cfg) -> tuple[int, ...]:
    """(1, the fitted static tree's rows: its nodes and the root), the passes the split is measured for."""
    from .methods import method_config
    try:
        tree = method_config("eagle-static", base_cfg, 1, 0.0, 1.0, 0).spec().max_nodes
    except (ValueError, KeyError):
        tree = 1
    return (1, tree) if tree > 1 else (1,)


class _Timers:
    """Seconds spent inside products and attention calls (the outermost call only: a product inside a product
    counts once); with `labels`, each call is a torch.profiler record_function range too."""

    def __init__(self, labels: bool = False):
        self.seconds = {"products": 0.0, "attention": 0.0}
        self.calls = {"products": 0, "attention": 0}
        self.depth, self.labels = 0, labels

    def wrap(self, kind: str, fn):
        import torch

        def timed(*args, **kwargs):
            if self.depth:
                return fn(*args, **kwargs)
            self.depth += 1
            self.calls[kind] += 1
            t0 = time.perf_counter()
            try:
                if self.labels:
                    with torch.profiler.record_function(_LABELS[kind]):
                        return fn(*args, **kwargs)
                return fn(*args, **kwargs)
            finally:
                self.seconds[kind] += time.perf_counter() - t0
                self.depth -= 1
        return timed


@contextlib.contextmanager
def timed_parts(target, cache, timers: _Timers):
    """Inside: every linear module of the target, the product functions the kernel plan calls directly, the
    model's attention function and `cache`'s update timed by `timers`; everything as it was afterwards."""
    from torch import nn
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward
    undo = []
    for m in target.model.modules():
        if isinstance(m, nn.Linear):
            m.forward = timers.wrap("products", m.forward)
            undo.append(lambda m=m: m.__dict__.pop("forward", None))
    for mod_name, fn_name in (("eagle_core.model.planned_linear", "packed_linear"),
                              ("eagle_core.model.gguf_blocks", "stacked_linear")):
        mod = sys.modules.get(mod_name)          # not imported: not in use
        if mod is not None and hasattr(mod, fn_name):
            orig = getattr(mod, fn_name)
            setattr(mod, fn_name, timers.wrap("products", orig))
            undo.append(lambda mod=mod, fn_name=fn_name, orig=orig: setattr(mod, fn_name, orig))
    body = sys.modules.get("eagle_core.model.layer_body")
    if getattr(target, "lean", False) and body is not None:
        # the layer body's attend (rotary, the cache append, attention over the cache), Python's or C++'s: timed
        # around the call, so that the body takes the path it takes untimed (the C++ body picks its attention
        # by the registered function's identity: wrapping that would send it to the Python body)
        bodies = [body.PYTHON] + ([body.native()] if body.enabled() and body.native() is not None else [])
        for b in bodies:
            b.attend = timers.wrap("attention", b.attend)
            undo.append(lambda b=b: b.__dict__.pop("attend", None))
    else:                       # transformers' own forward: its attention function and the cache's append
        name = target.model.config._attn_implementation
        local = ALL_ATTENTION_FUNCTIONS._local_mapping
        had, before = name in local, local.get(name)
        ALL_ATTENTION_FUNCTIONS[name] = timers.wrap("attention",
                                                    ALL_ATTENTION_FUNCTIONS.get(name, eager_attention_forward))
        undo.append(lambda: local.__setitem__(name, before) if had else local.pop(name, None))
        cache.update = timers.wrap("attention", cache.update)
        undo.append(lambda: cache.__dict__.pop("update", None))
    try:
        yield timers
    finally:
        for u in reversed(undo):
            u()


def _timed_split(setup, reps: int) -> dict:
    """Wall, products and attention seconds of the median pass (by wall time) of `reps` (after one warm-up), and
    the timed calls of one pass."""
    import torch
    timers = _Timers()
    passes = []
    with torch.inference_mode(), timed_parts(setup.target, setup.cache, timers):
        for i in range(reps + 1):
            timers.seconds = {"products": 0.0, "attention": 0.0}
            timers.calls = {"products": 0, "attention": 0}
            t0 = time.perf_counter()
            setup.run()
            wall = time.perf_counter() - t0
            setup.drop()
            if i:
                passes.append((wall, timers.seconds["products"], timers.seconds["attention"]))
    wall, products, attention = sorted(passes)[len(passes) // 2]
    return {"wall": wall, "products": products, "attention": attention, "calls": dict(timers.calls)}


def _profiled_ops_share(setup, reps: int) -> float:
    """Of the time outside products and attention in profiled passes, the share inside top-level torch operators
    (the rest; the remainder is Python between them)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    timers = _Timers(labels=True)
    with torch.inference_mode(), timed_parts(setup.target, setup.cache, timers):
        setup.run()                                      # warm-up
        setup.drop()
        walls = 0.0
        with _no_native_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(reps):
                timers.seconds = {"products": 0.0, "attention": 0.0}
                t0 = time.perf_counter()
                setup.run()
                walls += time.perf_counter() - t0 - sum(timers.seconds.values())
                with torch.profiler.record_function(_LABELS["drop"]):    # not the pass's: left out below
                    setup.drop()
    ops = sum(e.cpu_time_total / 1e6 for e in prof.events()
              if e.cpu_parent is None and e.name not in _LABELS.values())
    return min(1.0, ops / walls) if walls > 0 else 0.0


@contextlib.contextmanager
def _no_native_stderr():
    """Inside: file descriptor 2 to /dev/null (the profiler's native library prints a line at its start and stop,
    "USDT: ... profiler_start", into every benchmark's output); Python's own warnings still go to sys.stderr's
    object where it is not fd 2 (pytest's capture)."""
    import os
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _runs_one_call(target, rows: int) -> bool:
    """Whether a pass of `rows` tokens runs its layers as one C++ call each (the q4 layer: layer_body.q4_products)."""
    import torch
    body = sys.modules.get("eagle_core.model.layer_body")
    if body is None or not getattr(target, "lean", False) or body.body_for(torch.zeros(1)) is body.PYTHON:
        return False
    return body.q4_layer_enabled() and body.q4_products(target.model.model.layers[0], rows) is not None


@contextlib.contextmanager
def _segments():
    """Inside: a q4 layer's segments one call each (EAGLE_LENS_Q4_LAYER=0), as before otherwise."""
    import os
    before = os.environ.get("EAGLE_LENS_Q4_LAYER")
    os.environ["EAGLE_LENS_Q4_LAYER"] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("EAGLE_LENS_Q4_LAYER", None)
        else:
            os.environ["EAGLE_LENS_Q4_LAYER"] = before


def _one_call_ms(setup, reps: int) -> float:
    """The median wall ms of `reps` passes as they run by default (after one warm-up), untimed inside."""
    import torch
    walls = []
    with torch.inference_mode():
        for i in range(reps + 1):
            t0 = time.perf_counter()
            setup.run()
            wall = time.perf_counter() - t0
            setup.drop()
            if i:
                walls.append(wall)
    return round(1e3 * sorted(walls)[len(walls) // 2], 3)


def pass_split(target, rows=(1,), prefix: int = PREFIX, reps: int = 5) -> dict | None:
    """{"prefix", "rows", "numerics", "reps", "ms": {R: {"whole", "products", "attention", "rest", "python"}},
    "rest_share_profiled": {R: the profiler's share of operators in what is left}, "calls": {R: timed calls of
    one pass per part}} for passes of R tokens with the target's kernel plan; None off the CPU (GPU kernels run
    asynchronously: these timers would not see them)."""
    import torch

    from .pass_cost import PassSetup
    if target.device.type != "cpu":
        return None
    out, shares, calls = {}, {}, {}
    for r in rows:
        s = PassSetup(target, r, prefix)
        with torch.inference_mode():
            s.fill()
        # a q4 pass runs as one C++ call (layer_body.q4_layers), inside which nothing can be timed from here: the
        # split is taken from the same pass run a segment a call (the same bits), and the pass as it runs by
        # default is timed beside it ("one_call")
        one_call = _one_call_ms(s, reps) if _runs_one_call(target, r) else None
        with _segments():
            t = _timed_split(s, reps)
            share = _profiled_ops_share(s, max(2, reps // 2))
        left = max(0.0, t["wall"] - t["products"] - t["attention"])
        out[r] = {"whole": 1e3 * t["wall"], "products": 1e3 * t["products"], "attention": 1e3 * t["attention"],
                  "rest": 1e3 * left * share, "python": 1e3 * left * (1 - share)}
        if one_call is not None:
            out[r]["one_call"] = one_call
        out[r] = {k: round(v, 3) for k, v in out[r].items()}
        shares[r], calls[r] = round(share, 3), t["calls"]
    return {"prefix": prefix, "rows": list(rows), "reps": reps, "ms": out, "rest_share_profiled": shares,
            "calls": calls,
            "numerics": getattr(target, "numerics", str(target.dtype)), "threads": torch.get_num_threads(),
            "method": "products / attention: perf_counter around each call, the pass of median wall time; rest / "
                      "Python: what is left, divided as torch.profiler saw operators against the time between them; "
                      "where a layer runs as one C++ call (the q4 layer) the split is of the same pass a segment a "
                      "call, and one_call the pass as it runs by default (median)"}


def llamacpp_pass_split(gguf: str, ours: dict | None = None, rows=None, prefix: int = PREFIX, reps: int = 5,
                        n_threads: int | None = None) -> dict:
    """llama.cpp's pass of R tokens from llama-bench: {"ms": {R: {"whole", "attention", "not_split"}}}, whole
    after a `prefix`-token context, attention = that - the same pass after an empty one (what attending over the
    cache adds), not_split = the rest of the pass (products, other operations, graph overhead together)."""
    from ..llamacpp import bench_passes
    rows = tuple(int(r) for r in (rows or (ours or {}).get("rows") or (1,)))
    prefix = int((ours or {}).get("prefix", prefix))
    deep, cmd = bench_passes(gguf, rows, prefix, reps, n_threads)
    empty, cmd0 = bench_passes(gguf, rows, 0, reps, n_threads)
    ms = {}
    for r in rows:
        if r in deep and r in empty:
            att = max(0.0, deep[r] - empty[r])
            ms[r] = {"whole": round(deep[r], 3), "attention": round(att, 3), "not_split": round(deep[r] - att, 3)}
    return {"prefix": prefix, "rows": list(rows), "reps": reps, "ms": ms, "commands": [cmd, cmd0],
            "method": f"llama-bench means: whole = -d {prefix}; attention = -d {prefix} minus -d 0 (the cache's "
                      "share); its per-operation times are not printed by this build, so the rest is not split"}


def format_pass_split(ours: dict | None, theirs: dict | None = None) -> list[str]:
    """The split as report lines (empty without one): ms and share of the pass per part and engine."""
    if not ours and not theirs:
        return []
    pre = (ours or theirs)["prefix"]
    lines = ["", f"where a pass goes (ms, over a {pre}-token prefix; products = the linear layers"
                 + ("; ours: the median timed pass, the rest / Python split as the profiler saw it" if ours else "")
                 + ("; llama.cpp: llama-bench, attention = its pass at that depth minus at depth 0, the rest not "
                    "split by its timings" if theirs else "") + ")"]
    for label, rep, parts in ((f"ours ({(ours or {}).get('numerics')})", ours, PARTS),
                              ("llama.cpp", theirs, ("attention", "not_split"))):
        for r, row in sorted(((int(r), v) for r, v in ((rep or {}).get("ms") or {}).items())):
            whole = row["whole"] or 1.0
            lines.append(f"  {label + f', {r} token' + ('s' if r > 1 else ''):<30} whole {row['whole']:7.2f}  "
                         + "  ".join(f"{p} {row[p]:6.2f} ({100 * row[p] / whole:3.0f}%)" for p in parts)
                         + (f"  (as it runs, every layer in one C++ call: whole {row['one_call']:.2f})"
                            if row.get("one_call") is not None else ""))
    return lines


def main(argv=None) -> int:
    """python -m eagle_core.bench.pass_split [--kernels default,q4] [--rows 1,6] [--json OUT]: the split of our
    pass under each kernel plan (one target loaded per plan), and llama.cpp's where it is built."""
    import argparse
    import json
    import os
    ap = argparse.ArgumentParser(prog="python -m eagle_core.bench.pass_split", description=main.__doc__)
    ap.add_argument("--kernels", default="default,q4", help="kernel plans (EAGLE_LENS_CPU_KERNELS values; "
                                                            "'default' = the load-time plan)")
    ap.add_argument("--rows", default=None, help="tokens per pass (default: 1 and the plan's fitted tree)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from ..quiet import quiet_libraries
    quiet_libraries()
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    from ..decoding.engine import default_config
    from ..model.target import load_target
    out = {}
    for plan in [k.strip() for k in args.kernels.split(",") if k.strip()]:
        before = os.environ.pop("EAGLE_LENS_CPU_KERNELS", None)
        if plan != "default":
            os.environ["EAGLE_LENS_CPU_KERNELS"] = plan
        try:
            target = load_target()
        finally:
            os.environ.pop("EAGLE_LENS_CPU_KERNELS", None)
            if before is not None:
                os.environ["EAGLE_LENS_CPU_KERNELS"] = before
        rows = (tuple(int(r) for r in args.rows.split(",")) if args.rows else
                split_rows(["eagle-static"], default_config(target.device.type, getattr(target, "numerics", None))))
        out[plan] = pass_split(target, rows, reps=args.reps)
        print("\n".join(format_pass_split(out[plan])[1:]))
        del target
    if not args.no_llamacpp:
        from ..llamacpp import LlamaCppMissing
        try:
            from ..export import embedded_target_gguf
            rows = sorted({r for s in out.values() if s for r in s["rows"]})
            out["llamacpp"] = llamacpp_pass_split(embedded_target_gguf(), rows=rows, reps=args.reps)
            print("\n".join(format_pass_split(None, out["llamacpp"])[2:]))
        except LlamaCppMissing as exc:
            print(f"llama.cpp: {exc}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
