"""The same head in vLLM: export it, decode the same prompts with vLLM (plain and EAGLE) and with our engine, and
compare the texts and the per-position acceptance counters.

    python -m eagle_core.bench.vllm [--head shifted] [--prompts humaneval] [--limit 4] [--max-new-tokens 32]
        [--k 2] [--export DIR] [--json OUT] [--eager]

vLLM runs in its own environment (scripts/setup_vllm.sh makes .venv-vllm; EAGLE_LENS_VLLM_PYTHON names another
interpreter) through scripts/vllm_run.py, one subprocess per engine. Our side decodes a chain of k drafted tokens
with the full vocabulary in fp32 (vLLM's EAGLE-1 drafter is a chain: num_speculative_tokens = k), so at T = 0 both
engines draft and verify the same tokens: the texts and the counters agree exactly unless the two engines' float
kernels flip a near-tie (in the head's argmax or the target's), which the report names with the place it happens.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from ..paths import REPO
from .run import quiet_libraries

VLLM_RUN = os.path.join(REPO, "scripts", "vllm_run.py")


def vllm_python() -> str | None:
    """The interpreter of vLLM's environment, or None when it is not set up."""
    py = os.environ.get("EAGLE_LENS_VLLM_PYTHON") or os.path.join(REPO, ".venv-vllm", "bin", "python")
    return py if os.path.exists(py) else None


def vllm_command(export_dir: str, eagle: bool, k: int, eager: bool) -> tuple[list[str], dict]:
    """scripts/vllm_run.py in vLLM's environment for an export folder: (argv, env without our venv's paths)."""
    py = vllm_python()
    if py is None:
        raise RuntimeError("vLLM is not set up: run scripts/setup_vllm.sh (makes .venv-vllm)")
    cmd = [py, VLLM_RUN, "--target", os.path.join(export_dir, "target")]
    if eagle:
        cmd += ["--eagle", os.path.join(export_dir, "eagle"), "--k", str(k)]
    if eager:
        cmd.append("--eager")
    env = {k_: v for k_, v in os.environ.items() if not k_.startswith(("PYTHONPATH", "VIRTUAL_ENV"))}
    return cmd, env


def run_vllm(export_dir: str, prompt_ids: list[list[int]], max_tokens: int, eagle: bool, k: int = 2,
             eager: bool = False, batch: int = 1, timeout: float = 1800) -> dict:
    """scripts/vllm_run.py in vLLM's environment; its JSON report (RuntimeError with the log's tail on failure)."""
    with tempfile.TemporaryDirectory() as tmp:
        prompts, out = os.path.join(tmp, "prompts.json"), os.path.join(tmp, "out.json")
        with open(prompts, "w") as f:
            json.dump(prompt_ids, f)
        cmd, env = vllm_command(export_dir, eagle, k, eager)
        cmd += ["--prompts", prompts, "--max-tokens", str(max_tokens), "--batch", str(batch), "--out", out]
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"vLLM failed (exit {proc.returncode}):\n" + (proc.stdout + proc.stderr)[-3000:])
        with open(out) as f:
            return json.load(f)


class VllmWorker:
    """A vLLM engine kept running in its own environment (scripts/vllm_run.py --serve), asked one prompt at a
    time, so the benchmark can interleave it with the other methods prompt by prompt. Each answer carries the
    seconds of vLLM's generate() alone, and for EAGLE the counters of that request."""

    def __init__(self, export_dir: str, eagle: bool, k: int = 2, eager: bool = False, timeout: float = 900):
        cmd, env = vllm_command(export_dir, eagle, k, eager)
        cmd.append("--serve")
        self.log = tempfile.NamedTemporaryFile("w+", prefix="eagle-lens-vllm-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, env=env, cwd=tempfile.gettempdir())
        first = self._read(timeout)
        if not first.get("ready"):
            raise RuntimeError(f"vLLM did not start: {first}")
        self.version = first.get("version")

    def _read(self, timeout: float) -> dict:
        import select
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            with open(self.log.name) as f:
                raise RuntimeError("vLLM's worker stopped answering:\n" + f.read()[-3000:])
        return json.loads(line)

    def generate(self, prompt_ids: list[int], max_tokens: int, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int = 0, stop_token_ids=None, timeout: float = 900) -> dict:
        req = {"prompt_ids": list(prompt_ids), "max_tokens": max_tokens, "temperature": temperature,
               "top_p": top_p, "seed": seed, "stop_token_ids": list(stop_token_ids or [])}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._read(timeout)

    def pids(self) -> list[int]:
        """The worker and its children (vLLM's engine core and CPU worker): their CPU time is this method's."""
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    todo += [int(x) for x in f.read().split()]
            except OSError:
                pass
        return out

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def ours_chain(target, head, prompt_ids: list[list[int]], max_tokens: int, k: int = 2) -> dict:
    """Our engine with vLLM's drafting shape (a chain of k, full vocabulary): tokens and the same counters."""
    from ..decoding.engine import DecodeConfig, EagleDecoder
    results, per, drafts = [], [0] * k, 0
    for ids in prompt_ids:
        dec = EagleDecoder(target, head, DecodeConfig(draft="chain", depth=k, max_new_tokens=max_tokens,
                                                      record_topk=0), ids)
        while not dec.done:
            dec.step()
        res = dec.result("")
        cycles = [c for c in res.cycles if c.cycle > 0]
        drafts += len(cycles)
        for c in cycles:
            for j in range(k):
                per[j] += c.accept_length > j
        results.append({"new_ids": list(res.token_ids), "text": res.text})
    return {"results": results, "counters": {"num_drafts": drafts, "num_draft_tokens": drafts * k,
                                             "num_accepted_tokens": sum(per), "accepted_per_pos": per}}


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where two token lists differ (the shorter one's end counts), None when equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(plain: dict, eagle: dict, ours: dict) -> dict:
    """Which prompts' tokens agree across the three runs, and the counters side by side."""
    rows = []
    for i, (p, e, o) in enumerate(zip(plain["results"], eagle["results"], ours["results"])):
        rows.append({"prompt": i, "tokens": len(p["new_ids"]),
                     "vllm_eagle_vs_plain": first_difference(e["new_ids"], p["new_ids"]),
                     "ours_vs_vllm_plain": first_difference(o["new_ids"], p["new_ids"])})
    vc, oc = eagle["counters"], ours["counters"]
    rate = lambda c: [a / c["num_drafts"] if c["num_drafts"] else 0.0 for a in c["accepted_per_pos"]]  # noqa: E731
    return {"rows": rows, "identical": all(r["vllm_eagle_vs_plain"] is None and r["ours_vs_vllm_plain"] is None
                                           for r in rows),
            "counters": {"vllm": vc, "ours": oc}, "accept_rate_per_pos": {"vllm": rate(vc), "ours": rate(oc)}}


def format_report(cmp: dict, plain: dict, eagle: dict) -> str:
    lines = [f"vLLM {eagle.get('version', '?')}, k = {eagle['k']}, {len(cmp['rows'])} prompts, "
             f"{plain['max_tokens']} new tokens each, T = 0",
             "| prompt | tokens | vLLM EAGLE = vLLM plain | ours = vLLM plain |", "|---|---|---|---|"]
    for r in cmp["rows"]:
        say = lambda d: "yes" if d is None else f"no: from token {d}"  # noqa: E731
        lines.append(f"| {r['prompt']} | {r['tokens']} | {say(r['vllm_eagle_vs_plain'])} | "
                     f"{say(r['ours_vs_vllm_plain'])} |")
    vc, oc = cmp["counters"]["vllm"], cmp["counters"]["ours"]
    lines += ["", "| counter | vLLM | ours |", "|---|---|---|",
              f"| drafts (cycles) | {vc['num_drafts']} | {oc['num_drafts']} |",
              f"| accepted per position | {vc['accepted_per_pos']} | {oc['accepted_per_pos']} |",
              "| acceptance per position | " + ", ".join(f"{x:.3f}" for x in cmp["accept_rate_per_pos"]["vllm"]) +
              " | " + ", ".join(f"{x:.3f}" for x in cmp["accept_rate_per_pos"]["ours"]) + " |",
              "", f"vLLM tokens/s (one request at a time, {'eager' if eagle.get('eager') else 'compiled'}): "
              f"plain {plain['tokens_per_s']:.1f}, EAGLE {eagle['tokens_per_s']:.1f}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eagle_core.bench.vllm", description=__doc__.splitlines()[0])
    ap.add_argument("--head", default="shifted")
    ap.add_argument("--prompts", default="humaneval", help="a prompt file or built-in set (humaneval, mt_bench...)")
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--k", type=int, default=2, help="drafted tokens per cycle (vLLM's num_speculative_tokens)")
    ap.add_argument("--export", default=None, help="an export folder to reuse (default: a fresh temporary one)")
    ap.add_argument("--eager", action="store_true", help="vLLM without torch.compile (starts faster)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    quiet_libraries()
    import torch
    from ..export import export
    from ..model.head import resolve_head
    from ..model.target import load_target
    from .errors import BenchError
    from .prompts import load_prompts
    if vllm_python() is None:
        print("error: vLLM is not set up: run scripts/setup_vllm.sh (it makes .venv-vllm)", file=sys.stderr)
        return 2
    try:
        items = load_prompts(args.prompts, args.limit)
    except (BenchError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    target = load_target(None, device="cpu", dtype=torch.float32, pack=False)
    head = resolve_head(args.head, target)
    ids = [target.render_prompt(it["prompt"]) for it in items]
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.export or tmp
        if not os.path.exists(os.path.join(folder, "eagle", "config.json")):
            export(target, head, folder)
        plain = run_vllm(folder, ids, args.max_new_tokens, eagle=False, eager=args.eager)
        eagle = run_vllm(folder, ids, args.max_new_tokens, eagle=True, k=args.k, eager=args.eager)
    eagle["eager"] = plain["eager"] = args.eager
    ours = ours_chain(target, head, ids, args.max_new_tokens, args.k)
    cmp = compare(plain, eagle, ours)
    print(format_report(cmp, plain, eagle))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"compare": cmp, "vllm_plain": plain, "vllm_eagle": eagle, "ours": ours,
                       "config": vars(args)}, f, indent=1)
    return 0 if cmp["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
